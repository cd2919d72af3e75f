"""Board power sampled in a background thread while each probe runs (``power_w``).

NVML reports board power in milliwatts (``nvmlDeviceGetPowerUsage``, averaged by the driver
over about a second on recent boards); amdsmi reports socket power in watts
(``amdsmi_get_power_info``). A sample is the sum over the devices a probe uses; the probe
records the median and the maximum of its samples. Without NVML or amdsmi there is no
sampler and ``power_w`` stays null.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Sequence
from typing import Any

PowerReader = Callable[[int], float | None]
"""Returns the board power of accelerator ``index`` in watts (None when unreadable)."""


def nvml_reader() -> PowerReader | None:
    """A reader backed by NVML, or None where NVML is absent."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception:
        return None
    if count == 0:
        return None
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]

    def read(index: int) -> float | None:
        try:
            return pynvml.nvmlDeviceGetPowerUsage(handles[index]) / 1e3
        except Exception:
            return None

    read.source = "nvml"  # type: ignore[attr-defined]
    return read


def amdsmi_reader() -> PowerReader | None:
    """A reader backed by amdsmi (ROCm), or None where it is absent."""
    try:
        import amdsmi

        amdsmi.amdsmi_init()
        handles = amdsmi.amdsmi_get_processor_handles()
    except Exception:
        return None
    if not handles:
        return None

    def read(index: int) -> float | None:
        try:
            info = amdsmi.amdsmi_get_power_info(handles[index])
        except Exception:
            return None
        for key in ("current_socket_power", "average_socket_power"):
            value = info.get(key)
            if isinstance(value, (int, float)) and value > 0:
                return float(value)
        return None

    read.source = "amdsmi"  # type: ignore[attr-defined]
    return read


class PowerSampler:
    """Samples the summed power of some devices every ``interval_s`` while active.

    Usage::

        with sampler.sampling([0, 1]) as samples:
            run_the_probe()
        summary = sampler.summary(samples, [0, 1])
    """

    def __init__(self, reader: PowerReader, *, interval_s: float = 0.1, source: str | None = None):
        self.reader = reader
        self.interval_s = interval_s
        self.source = source or getattr(reader, "source", None)

    def sampling(self, devices: Sequence[int]) -> _Sampling:
        return _Sampling(self, list(devices))

    def summary(self, samples: list[float], devices: Sequence[int]) -> dict[str, Any] | None:
        """``{"median", "max", "samples", "devices", "source"}`` or None without samples."""
        if not samples:
            return None
        return {
            "median": statistics.median(samples),
            "max": max(samples),
            "samples": len(samples),
            "devices": list(devices),
            "source": self.source,
        }


class _Sampling:
    def __init__(self, sampler: PowerSampler, devices: list[int]) -> None:
        self.sampler = sampler
        self.devices = devices
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpuplan-power", daemon=True)

    def _loop(self) -> None:
        while True:
            values = [self.sampler.reader(i) for i in self.devices]
            if values and all(v is not None for v in values):
                self.samples.append(float(sum(v for v in values if v is not None)))
            if self._stop.wait(self.sampler.interval_s):
                return

    def __enter__(self) -> list[float]:
        self._thread.start()
        return self.samples

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def default_sampler(interval_s: float = 0.1) -> PowerSampler | None:
    """An NVML or amdsmi sampler when either is present, else None."""
    reader = nvml_reader() or amdsmi_reader()
    return None if reader is None else PowerSampler(reader, interval_s=interval_s)
