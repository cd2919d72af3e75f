"""Board power and energy while each probe runs (``power_w``).

The energy counter is the source where the board has one: NVML's
``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since the driver loaded, Volta and
newer) and amdsmi's ``amdsmi_get_energy_count`` (``energy_accumulator`` times
``counter_resolution`` microjoules; the key was ``power`` before amdsmi 6.2.1). Power over
an interval is the energy difference divided by the elapsed time, so nothing between two
samples is missed. Without a counter the instantaneous readings are sampled instead:
``nvmlDeviceGetPowerUsage`` (milliwatts, a driver average over about a second on recent
boards) and amdsmi's ``current_socket_power``/``average_socket_power`` (watts).

A sample is the sum over the devices a probe uses; the summary keeps the median and the
maximum of the samples and, with a counter, the energy and mean power of the whole probe.
Devices are given as torch indices: ``index_map`` maps them to the management library's
indices (NVML numbers every GPU of the node, torch the visible ones;
``gpuplan.probes.inventory.match_devices``). Without NVML or amdsmi there is no sampler and
``power_w`` stays null.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

PowerReader = Callable[[int], float | None]
"""Returns the board power of accelerator ``index`` in watts (None when unreadable)."""

EnergyReader = Callable[[int], float | None]
"""Returns the energy counter of accelerator ``index`` in joules (None when unreadable)."""


def _mapped(index_map: Mapping[int, int] | None) -> Callable[[int], int]:
    return (lambda i: index_map.get(i, i)) if index_map else (lambda i: i)


def nvml_readers(
    index_map: Mapping[int, int] | None = None,
) -> tuple[PowerReader, EnergyReader | None] | None:
    """(power reader, energy reader or None) backed by NVML, or None where NVML is absent."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception:
        return None
    if count == 0:
        return None
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    to_mgmt = _mapped(index_map)

    def read(index: int) -> float | None:
        try:
            return pynvml.nvmlDeviceGetPowerUsage(handles[to_mgmt(index)]) / 1e3
        except Exception:
            return None

    def energy(index: int) -> float | None:
        try:
            return pynvml.nvmlDeviceGetTotalEnergyConsumption(handles[to_mgmt(index)]) / 1e3
        except Exception:
            return None

    return read, (energy if energy(0) is not None else None)


def nvml_reader(index_map: Mapping[int, int] | None = None) -> PowerReader | None:
    """A power reader backed by NVML, or None where NVML is absent."""
    readers = nvml_readers(index_map)
    return None if readers is None else readers[0]


def amdsmi_energy_j(info: Any) -> float | None:
    """Joules from an ``amdsmi_get_energy_count`` answer (both key spellings).

    >>> amdsmi_energy_j({"energy_accumulator": 2_000_000, "counter_resolution": 15.3})
    30.6
    >>> amdsmi_energy_j({"power": 1000, "counter_resolution": 1.0})
    0.001
    """
    if not isinstance(info, dict):
        return None
    raw = info.get("energy_accumulator", info.get("power"))
    res = info.get("counter_resolution")
    if not isinstance(raw, (int, float)) or not isinstance(res, (int, float)) or res <= 0:
        return None
    return raw * res / 1e6


def amdsmi_readers(
    index_map: Mapping[int, int] | None = None,
) -> tuple[PowerReader, EnergyReader | None] | None:
    """(power reader, energy reader or None) backed by amdsmi (ROCm), or None."""
    try:
        import amdsmi

        amdsmi.amdsmi_init()
        handles = amdsmi.amdsmi_get_processor_handles()
    except Exception:
        return None
    if not handles:
        return None
    to_mgmt = _mapped(index_map)

    def read(index: int) -> float | None:
        try:
            info = amdsmi.amdsmi_get_power_info(handles[to_mgmt(index)])
        except Exception:
            return None
        for key in ("current_socket_power", "average_socket_power"):
            value = info.get(key)
            if isinstance(value, (int, float)) and value > 0:
                return float(value)
        return None

    def energy(index: int) -> float | None:
        try:
            return amdsmi_energy_j(amdsmi.amdsmi_get_energy_count(handles[to_mgmt(index)]))
        except Exception:
            return None

    return read, (energy if energy(0) is not None else None)


class PowerSampler:
    """Samples the summed power of some devices every ``interval_s`` while active.

    With an ``energy`` reader a sample is the summed energy difference over the interval
    divided by its duration (source ``<lib>-energy``); otherwise the summed power reading.

    Usage::

        with sampler.sampling([0, 1]) as samples:
            run_the_probe()
        summary = sampler.summary(samples, [0, 1])
    """

    def __init__(
        self,
        reader: PowerReader,
        *,
        interval_s: float = 0.1,
        source: str | None = None,
        energy: EnergyReader | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.reader = reader
        self.energy = energy
        self.interval_s = interval_s
        self.clock = clock
        self.source = source or getattr(reader, "source", None)
        self._last: _Sampling | None = None

    def sampling(self, devices: Sequence[int]) -> _Sampling:
        self._last = _Sampling(self, list(devices))
        return self._last

    def summary(self, samples: list[float], devices: Sequence[int]) -> dict[str, Any] | None:
        """``{"median", "max", "samples", "devices", "source"}`` (W) or None without samples;
        with an energy counter also ``energy_j`` and ``mean`` (energy / duration)."""
        if not samples:
            return None
        out: dict[str, Any] = {
            "median": statistics.median(samples),
            "max": max(samples),
            "samples": len(samples),
            "devices": list(devices),
            "source": self.source,
        }
        last = self._last
        if last is not None and last.samples is samples and last.energy_j is not None:
            out["source"] = f"{self.source}-energy" if self.source else "energy"
            out["energy_j"] = last.energy_j
            out["duration_s"] = last.duration_s
            if last.duration_s:
                out["mean"] = last.energy_j / last.duration_s
        return out


class _Sampling:
    def __init__(self, sampler: PowerSampler, devices: list[int]) -> None:
        self.sampler = sampler
        self.devices = devices
        self.samples: list[float] = []
        self.energy_j: float | None = None
        self.duration_s: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpuplan-power", daemon=True)

    def _energies(self) -> list[float] | None:
        read = self.sampler.energy
        if read is None:
            return None
        values = [read(i) for i in self.devices]
        if not values or any(v is None for v in values):
            return None
        return [float(v) for v in values if v is not None]

    def _loop(self) -> None:
        clock = self.sampler.clock
        first = last = self._energies()
        t0 = t_last = clock()
        while True:
            stopping = self._stop.wait(self.sampler.interval_s)
            now = clock()
            current = self._energies() if last is not None else None
            if last is not None and current is not None:
                dt = now - t_last
                if dt > 0:
                    self.samples.append(sum(c - p for c, p in zip(current, last, strict=True)) / dt)
                last, t_last = current, now
                if first is not None:
                    self.energy_j = sum(c - f for c, f in zip(current, first, strict=True))
                    self.duration_s = now - t0
            else:
                last = None  # the counter stopped answering: fall back to power readings
                values = [self.sampler.reader(i) for i in self.devices]
                if values and all(v is not None for v in values):
                    self.samples.append(float(sum(v for v in values if v is not None)))
            if stopping:
                return

    def __enter__(self) -> list[float]:
        self._thread.start()
        return self.samples

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def default_sampler(
    interval_s: float = 0.1, index_map: Mapping[int, int] | None = None
) -> PowerSampler | None:
    """An NVML or amdsmi sampler (energy counter where present) when either exists, else None.

    ``index_map``: torch index -> management-library index of each visible GPU.
    """
    for source, make in (("nvml", nvml_readers), ("amdsmi", amdsmi_readers)):
        readers = make(index_map)
        if readers is not None:
            power, energy = readers
            return PowerSampler(power, interval_s=interval_s, source=source, energy=energy)
    return None
