"""Soak: sustained matmul on every GPU for minutes while clocks, temperature, power,
throttle reasons and energy are sampled at a fixed interval (``gpuplan probe --soak MIN``).

A short benchmark runs on a cold GPU; a training job runs for days on a hot one. The soak
finds what only shows after minutes: a GPU that reaches its thermal limit and slows down,
a node that cannot feed all its GPUs their power limit at once, clocks that drift down
as the room heats. Every device runs back-to-back bf16 GEMMs (8192^3, fp16 where bf16 is
unsupported; fp32 1024^3 on CPUs) on its own stream from its own thread (the threads of
:mod:`gpuplan.probes.pergpu`), timing each batch of calls (at least
:data:`MIN_BATCH_S`) with the host clock after a synchronize, so that the achieved
FLOP/s is known over time; meanwhile the main thread samples, every ``interval_s``:

* NVML (``nvidia-ml-py``): ``nvmlDeviceGetClockInfo`` (SM and memory clocks, MHz),
  ``nvmlDeviceGetTemperature`` (GPU core, degrees C), ``nvmlDeviceGetPowerUsage`` (mW),
  ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded: the power of an
  interval is its energy difference over its duration) and
  ``nvmlDeviceGetCurrentClocksEventReasons`` (``...ThrottleReasons`` before NVML 12.535),
  a bit mask decoded with :data:`NVML_REASONS` (nvml.h ``nvmlClocksEventReason*``);
* amdsmi: ``amdsmi_get_clock_info`` (GFX and MEM clocks), ``amdsmi_get_temp_metric``
  (hotspot), ``amdsmi_get_power_info``, ``amdsmi_get_energy_count`` and the
  ``throttle_status`` of ``amdsmi_get_gpu_metrics_info`` (recorded as one reason,
  ``throttle_status``: amdsmi does not say thermal or power there). Not run on AMD
  hardware yet.

Without NVML or amdsmi (a CPU run, a container without the library) the loop runs all
the same and records only the throughput over time; the result says so in a warning.

Per device the result keeps the statistics of each series (first and last quarter
medians, min, median, max), the fraction of samples with each throttle reason, the
energy and mean power, and flags: ``thermal_throttled`` (a thermal slowdown reason
seen), ``power_throttled`` (software power cap or hardware power brake seen; a power cap
under a full GEMM load is common and is what ``power_limit_w`` allows),
``clock_dropped`` (the SM clock of the last quarter more than :data:`CLOCK_DROP_FLAG`
below the first quarter's) and ``throughput_dropped`` (the same on FLOP/s). A series
of at most :data:`MAX_SERIES` rows is kept (every n-th sample).
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplan.probes import pergpu
from gpuplan.probes.base import ProbeContext, import_torch

PROBE_VERSION = 1

DEFAULT_INTERVAL_S = 1.0
#: a batch of GEMMs lasts at least this long before it is timed (the host clock's and the
#: synchronize's cost are then below 0.1 % of it)
MIN_BATCH_S = 0.2
#: the last quarter's median this much below the first quarter's is a drop. A policy,
#: not a device figure: boost clocks move by a few percent with load and temperature on
#: a healthy GPU, so 5 % marks a sustained loss that a long job would pay.
CLOCK_DROP_FLAG = 0.05
#: rows of the time series kept in the result (a 60-minute soak at 1 s has 3600 samples)
MAX_SERIES = 240

#: nvml.h ``nvmlClocksEventReason*`` bits (docs.nvidia.com/deploy/nvml-api, "Clock Event
#: Reasons"; the same values as the older ``nvmlClocksThrottleReason*``), retrieved 2026-12-01.
NVML_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
THERMAL_REASONS = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown"})
POWER_REASONS = frozenset({"sw_power_cap", "hw_power_brake_slowdown"})


def decode_reasons(mask: int | None, table: Mapping[str, int] = NVML_REASONS) -> list[str]:
    """The names of the bits set in ``mask``; an unknown bit reads ``bit_0x...``.

    >>> decode_reasons(0x24)
    ['sw_power_cap', 'sw_thermal_slowdown']
    >>> decode_reasons(0x1000), decode_reasons(0), decode_reasons(None)
    (['bit_0x1000'], [], [])
    """
    if not mask:
        return []
    names = [name for name, bit in table.items() if mask & bit]
    known = 0
    for bit in table.values():
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"bit_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return names


@dataclass(frozen=True)
class Sample:
    """One reading of one device; None where the library did not answer."""

    t_s: float
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    energy_j: float | None = None
    reasons: tuple[str, ...] | None = None


class Telemetry:
    """Reads a :class:`Sample` of torch device ``index`` (mapped to the management
    library's index by ``index_map``, as :mod:`gpuplan.probes.power` does)."""

    source: str = "none"

    def read(self, index: int, t_s: float) -> Sample:
        return Sample(t_s)


def _q(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class NvmlTelemetry(Telemetry):
    source = "nvml"

    def __init__(self, nvml: Any, index_map: Mapping[int, int] | None = None) -> None:
        self.nvml = nvml
        self.index_map = dict(index_map or {})
        count = nvml.nvmlDeviceGetCount()
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self._reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        self.table = {
            name: int(
                getattr(nvml, f"nvmlClocksEventReason{_camel(name)}", None)
                or getattr(nvml, f"nvmlClocksThrottleReason{_camel(name)}", None)
                or bit
            )
            for name, bit in NVML_REASONS.items()
        }

    def read(self, index: int, t_s: float) -> Sample:
        nvml = self.nvml
        h = self.handles[self.index_map.get(index, index)]
        sm_id = getattr(nvml, "NVML_CLOCK_SM", 1)
        mem_id = getattr(nvml, "NVML_CLOCK_MEM", 2)
        temp_id = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        power = _num(_q(nvml.nvmlDeviceGetPowerUsage, h))
        energy = _num(_q(nvml.nvmlDeviceGetTotalEnergyConsumption, h))
        mask = _q(self._reasons, h) if self._reasons is not None else None
        return Sample(
            t_s,
            sm_clock_mhz=_num(_q(nvml.nvmlDeviceGetClockInfo, h, sm_id)),
            mem_clock_mhz=_num(_q(nvml.nvmlDeviceGetClockInfo, h, mem_id)),
            temperature_c=_num(_q(nvml.nvmlDeviceGetTemperature, h, temp_id)),
            power_w=None if power is None else power / 1e3,
            energy_j=None if energy is None else energy / 1e3,
            reasons=None if mask is None else tuple(decode_reasons(int(mask), self.table)),
        )


def _camel(name: str) -> str:
    """``sw_power_cap`` -> ``SwPowerCap`` (NVML's constant spelling)."""
    return "".join(part.capitalize() for part in name.split("_"))


class AmdsmiTelemetry(Telemetry):
    source = "amdsmi"

    def __init__(self, smi: Any, index_map: Mapping[int, int] | None = None) -> None:
        self.smi = smi
        self.index_map = dict(index_map or {})
        self.handles = smi.amdsmi_get_processor_handles()

    def read(self, index: int, t_s: float) -> Sample:
        from gpuplan.probes.power import amdsmi_energy_j

        smi = self.smi
        h = self.handles[self.index_map.get(index, index)]
        clk = getattr(smi, "AmdSmiClkType", None)
        gfx = _q(smi.amdsmi_get_clock_info, h, clk.GFX) if clk is not None else None
        mem = _q(smi.amdsmi_get_clock_info, h, clk.MEM) if clk is not None else None
        ttype = getattr(smi, "AmdSmiTemperatureType", None)
        tmetric = getattr(smi, "AmdSmiTemperatureMetric", None)
        temp = (
            _q(smi.amdsmi_get_temp_metric, h, ttype.HOTSPOT, tmetric.CURRENT)
            if ttype is not None and tmetric is not None
            else None
        )
        power_info = _q(smi.amdsmi_get_power_info, h) or {}
        power = next(
            (
                _num(power_info.get(k))
                for k in ("current_socket_power", "average_socket_power")
                if _num(power_info.get(k))
            ),
            None,
        )
        metrics = _q(smi.amdsmi_get_gpu_metrics_info, h) or {}
        status = metrics.get("throttle_status") if isinstance(metrics, dict) else None
        reasons = None if status is None else (("throttle_status",) if status else ())
        return Sample(
            t_s,
            sm_clock_mhz=_num(gfx.get("clk")) if isinstance(gfx, dict) else None,
            mem_clock_mhz=_num(mem.get("clk")) if isinstance(mem, dict) else None,
            temperature_c=_num(temp),
            power_w=power,
            energy_j=amdsmi_energy_j(_q(smi.amdsmi_get_energy_count, h)),
            reasons=reasons,
        )


def default_telemetry(index_map: Mapping[int, int] | None = None) -> Telemetry | None:
    """NVML, else amdsmi, else None (no library, or no device)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() > 0:
            return NvmlTelemetry(pynvml, index_map)
    except Exception:
        pass
    try:
        import amdsmi

        amdsmi.amdsmi_init()
        if amdsmi.amdsmi_get_processor_handles():
            return AmdsmiTelemetry(amdsmi, index_map)
    except Exception:
        pass
    return None


def _stats(values: Sequence[float | None]) -> dict[str, Any] | None:
    """first/last quarter medians, min, median, max and the drop ``1 - last / first``."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    q = max(1, len(xs) // 4)
    first, last = statistics.median(xs[:q]), statistics.median(xs[-q:])
    return {
        "first": first,
        "last": last,
        "min": min(xs),
        "median": statistics.median(xs),
        "max": max(xs),
        "drop": 1.0 - last / first if first > 0 else None,
        "samples": len(xs),
    }


def summarise(
    samples: Sequence[Sample],
    windows: Sequence[tuple[float, float]],
    *,
    flag: float = CLOCK_DROP_FLAG,
) -> dict[str, Any]:
    """One device's soak: statistics of each series, throttle fractions, energy, flags.

    ``windows`` are (end time s, FLOP/s) of the timed GEMM batches. Power comes from the
    energy counter when every sample has it (difference over the interval), else from
    the power readings.
    """
    energies = [s.energy_j for s in samples]
    power: list[float | None]
    energy_j = None
    source = "power readings"
    if len(samples) >= 2 and all(e is not None for e in energies):
        power = []
        for prev, cur in itertools.pairwise(samples):
            dt = cur.t_s - prev.t_s
            power.append((cur.energy_j - prev.energy_j) / dt if dt > 0 else None)  # type: ignore[operator]
        energy_j = samples[-1].energy_j - samples[0].energy_j  # type: ignore[operator]
        source = "energy counter"
    else:
        power = [s.power_w for s in samples]
    with_reasons = [s.reasons for s in samples if s.reasons is not None]
    fractions: dict[str, float] = {}
    for reasons in with_reasons:
        for r in reasons:
            fractions[r] = fractions.get(r, 0.0) + 1.0 / len(with_reasons)
    sm = _stats([s.sm_clock_mhz for s in samples])
    flops = _stats([f for _, f in windows])
    span = samples[-1].t_s - samples[0].t_s if len(samples) >= 2 else None
    out: dict[str, Any] = {
        "samples": len(samples),
        "windows": len(windows),
        "flops_per_s": flops,
        "sm_clock_mhz": sm,
        "mem_clock_mhz": _stats([s.mem_clock_mhz for s in samples]),
        "temperature_c": _stats([s.temperature_c for s in samples]),
        "power_w": _stats(power),
        "power_source": source,
        "energy_j": energy_j,
        "mean_power_w": energy_j / span if energy_j is not None and span else None,
        "throttle_reasons": {k: round(v, 6) for k, v in sorted(fractions.items())}
        if with_reasons
        else None,
        "thermal_throttled": bool(THERMAL_REASONS & fractions.keys()) if with_reasons else None,
        "power_throttled": bool(POWER_REASONS & fractions.keys()) if with_reasons else None,
        "clock_drop": sm["drop"] if sm else None,
        "clock_dropped": bool(sm["drop"] is not None and sm["drop"] > flag) if sm else None,
        "throughput_drop": flops["drop"] if flops else None,
        "throughput_dropped": bool(flops["drop"] is not None and flops["drop"] > flag)
        if flops
        else None,
    }
    step = max(1, -(-len(samples) // MAX_SERIES))
    t0 = samples[0].t_s if samples else 0.0
    out["series"] = [
        {
            "t_s": s.t_s - t0,
            "sm_clock_mhz": s.sm_clock_mhz,
            "mem_clock_mhz": s.mem_clock_mhz,
            "temperature_c": s.temperature_c,
            "power_w": power[i - 1] if source == "energy counter" and i > 0 else s.power_w,
            "reasons": list(s.reasons) if s.reasons is not None else None,
        }
        for i, s in enumerate(samples)
        if i % step == 0
    ]
    return out


class _Worker:
    """Back-to-back GEMMs on one device until ``stop`` is set; records (t, FLOP/s)."""

    def __init__(self, torch: Any, index: int, gpu: bool, clock: Callable[[], float]) -> None:
        self.torch, self.index, self.gpu, self.clock = torch, index, gpu, clock
        self.windows: list[tuple[float, float]] = []
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.label = ""

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # kept for the result; the others go on
            self.error = exc
        finally:
            self.ready.set()

    def _run(self) -> None:
        torch = self.torch
        if self.gpu:
            device = torch.device("cuda", self.index)
            dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            n = 8192
            scope: Any = torch.cuda.device(self.index)
            stream: Any = torch.cuda.stream(torch.cuda.Stream(device))
            sync: Callable[[], Any] = lambda: torch.cuda.synchronize(device)  # noqa: E731
        else:
            device, dtype, n = torch.device("cpu"), torch.float32, 1024
            scope = stream = contextlib.nullcontext()
            sync = lambda: None  # noqa: E731
        self.label = f"{str(dtype).removeprefix('torch.')} {n}^3"
        with scope, stream:
            a = torch.randn(n, n, device=device).to(dtype)
            b = torch.randn(n, n, device=device).to(dtype)
            c = torch.empty(n, n, device=device, dtype=dtype)
            flops = 2.0 * n**3
            calls = 1
            torch.matmul(a, b, out=c)
            sync()
            self.ready.set()
            while not self.stop.is_set():
                start = self.clock()
                for _ in range(calls):
                    torch.matmul(a, b, out=c)
                sync()
                end = self.clock()
                elapsed = end - start
                if elapsed < MIN_BATCH_S:
                    calls = min(calls * 2, 1 << 16)
                    continue  # too short to time well: not recorded
                self.windows.append((end, flops * calls / elapsed))


def run(ctx: ProbeContext, *, telemetry: Telemetry | bool | None = True) -> None:
    """Sustained matmul on every device for ``ctx.workload['duration_s']`` while sampling
    every ``ctx.workload['interval_s']``; one ``ProbeResult`` with one measurement per
    device. ``telemetry``: True for the node's NVML/amdsmi, or a reader (tests)."""
    torch = import_torch()
    gpu = ctx.device.is_gpu
    duration = float(ctx.workload.get("duration_s") or 60.0)
    interval = float(ctx.workload.get("interval_s") or DEFAULT_INTERVAL_S)
    devices = list(range(ctx.device.count)) if gpu else [0]
    if telemetry is True:
        from gpuplan.probes.suite import _index_map

        reader = default_telemetry(_index_map(ctx.accelerators)) if gpu else None
    else:
        reader = telemetry or None
    rec = ctx.record(
        "soak",
        PROBE_VERSION,
        device="cuda:all" if gpu else "cpu",
        devices=devices,
        duration_s=duration,
        interval_s=interval,
        telemetry=reader.source if reader is not None else None,
        clock_drop_flag=CLOCK_DROP_FLAG,
        concurrency="threads, one stream per device",
    )
    if reader is None:
        rec.warn(
            "no NVML or amdsmi here: clocks, temperature, power, energy and throttle reasons "
            "are not recorded; only the matmul throughput over time is"
        )
    clock = time.monotonic
    workers = [_Worker(torch, i, gpu, clock) for i in devices]
    threads = [
        threading.Thread(target=w.run, name=f"gpuplan-soak{w.index}", daemon=True) for w in workers
    ]
    samples: dict[int, list[Sample]] = {i: [] for i in devices}
    task = ctx.progress.task("soak", total=max(1, int(duration / interval)))
    for t in threads:
        t.start()
    for w in workers:
        w.ready.wait(timeout=120)
    start = clock()
    try:
        while True:
            now = clock()
            if reader is not None:
                for i in devices:
                    samples[i].append(reader.read(i, now))
            task.advance()
            if now - start >= duration or all(w.error is not None for w in workers):
                break
            ctx.check_deadline()
            time.sleep(max(0.0, min(interval, start + duration - clock())))
    finally:
        for w in workers:
            w.stop.set()
        for t in threads:
            t.join(timeout=60)
        rec.params["measured_s"] = clock() - start
        for w in workers:
            point = {
                **pergpu.identity(ctx.accelerators, w.index, gpu),
                "gemm": w.label,
                "duration_s": clock() - start,
                **summarise(samples[w.index], [(t - start, f) for t, f in w.windows]),
            }
            if w.error is not None:
                rec.warn(f"device {w.index}: {type(w.error).__name__}: {w.error}")
                point["error"] = f"{type(w.error).__name__}: {w.error}"
            if w.windows or samples[w.index]:
                rec.add(point)
            for flag, what in (
                ("thermal_throttled", "thermal slowdown"),
                ("power_throttled", "power cap or power brake"),
                ("clock_dropped", "SM clock dropped"),
                ("throughput_dropped", "matmul throughput dropped"),
            ):
                if point.get(flag):
                    rec.warn(f"device {w.index}: {what} during the soak")
    rec.ok()
