"""Every GPU alone, then all GPUs at once: the per-device loop of matmul and membw.

One GPU does not stand for the node: a GPU with a low power limit, a throttling fan, a
downtrained memory clock or a bad HBM stack is invisible when only GPU 0 is measured, and
a node whose GPUs are each fine alone can still fall short when all of them run together
(shared power and cooling). So one representative point (a large bf16 GEMM; a STREAM copy
and triad well past the last-level cache) is measured

1. on every visible device **alone**, one after the other, then
2. on **all devices at once**: one Python thread per device, each with its own stream on
   its own device, released together by a barrier.

Threads rather than one process per GPU: one process already holds a context on every
visible GPU; torch releases the GIL while it launches kernels and while it waits on
events, and the timed work (GEMMs of a millisecond or more, copies of GiBs) is bound by
the device, not by the host's launch rate, so the GPUs overlap; threads need no extra
CUDA contexts (hundreds of MiB each) and no inter-process gathering of results. A
host-bound workload (tiny kernels) would need processes; this one is not.

Each point records which device it ran on (``device_index`` = torch index, ``uuid`` and
``pci_bus_id`` from the inventory matched by UUID/PCI id) and whether it ran
``concurrent``. For each phase the spread over devices is kept (min, median, max,
``rel_spread = (max - min) / median``) and a device more than
:data:`OUTLIER_BELOW_MEDIAN` below the node's median is flagged ``outlier: true``.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: A device whose figure is more than this fraction below the median of the node's
#: devices is an outlier. This is a policy, not a device figure: the run-to-run spread of
#: one large GEMM or STREAM point on one GPU is ~1-2 % (the ``iqr_s`` these probes record),
#: so 5 % below the median is well outside the noise and matches what a buyer would
#: reject (a GPU 5 % slow makes a synchronous data-parallel job 5 % slow on every node).
OUTLIER_BELOW_MEDIAN = 0.05


@dataclass(frozen=True)
class Spread:
    """The spread of one figure over the node's devices."""

    min: float
    median: float
    max: float
    rel_spread: float
    """``(max - min) / median``"""
    devices: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "min": self.min,
            "median": self.median,
            "max": self.max,
            "rel_spread": self.rel_spread,
            "devices": self.devices,
        }


def spread(values: Sequence[float]) -> Spread | None:
    """min / median / max and the relative spread of ``values`` (None when empty).

    >>> s = spread([100.0, 98.0, 90.0, 99.0])
    >>> (s.min, s.median, s.max, round(s.rel_spread, 4))
    (90.0, 98.5, 100.0, 0.1015)
    """
    if not values:
        return None
    median = statistics.median(values)
    lo, hi = min(values), max(values)
    return Spread(lo, median, hi, (hi - lo) / median if median > 0 else 0.0, len(values))


def outliers(values: dict[int, float], threshold: float = OUTLIER_BELOW_MEDIAN) -> dict[int, float]:
    """Devices more than ``threshold`` below the median: ``{index: value / median - 1}``.

    Only slow devices are flagged (a fast one is not a defect). With fewer than three
    devices the median is the mean of two (or the one value), so a single slow GPU of two
    is flagged when it is more than twice the threshold below the other.

    >>> {i: round(r, 4) for i, r in outliers({0: 100.0, 1: 99.0, 2: 101.0, 3: 90.0}).items()}
    {3: -0.0955}
    >>> outliers({0: 100.0})
    {}
    """
    if not values:
        return {}
    median = statistics.median(values.values())
    if median <= 0:
        return {}
    return {
        i: v / median - 1.0 for i, v in sorted(values.items()) if v < (1.0 - threshold) * median
    }


def identity(accelerators: list[dict[str, Any]], index: int, gpu: bool) -> dict[str, Any]:
    """``device_index``, ``uuid`` and ``pci_bus_id`` of torch device ``index`` (from the
    inventory rows matched by UUID/PCI id; None on CPUs and where unknown)."""
    if not gpu:
        return {"device_index": index, "uuid": None, "pci_bus_id": None}
    from gpuplan.probes.base import accelerator_for

    acc = accelerator_for(accelerators, index) or {}
    return {
        "device_index": index,
        "uuid": acc.get("mig_instance_uuid") or acc.get("uuid"),
        "pci_bus_id": acc.get("pci_bus_id"),
    }


Measure = Callable[[int], dict[str, Any]]
"""Measures the representative point(s) on device ``index``: returns one measurement, or
a list of them under the key ``"points"`` (membw: a copy and a triad)."""


def _points(result: dict[str, Any]) -> list[dict[str, Any]]:
    return list(result["points"]) if "points" in result else [result]


def run_alone(devices: Sequence[int], measure: Measure) -> dict[int, list[dict[str, Any]]]:
    """``measure`` on each device in turn (nothing else runs)."""
    return {i: _points(measure(i)) for i in devices}


def run_together(
    devices: Sequence[int], measure: Measure, *, timeout_s: float | None = None
) -> dict[int, list[dict[str, Any]] | BaseException]:
    """``measure`` on every device at once: one thread per device, started by a barrier.

    A device whose measurement raises gets the exception in place of its points; the
    others keep theirs. ``KeyboardInterrupt`` in the calling thread waits for the threads
    (they finish their point) and is raised again.
    """
    out: dict[int, list[dict[str, Any]] | BaseException] = {}
    barrier = threading.Barrier(len(devices))
    lock = threading.Lock()

    def work(index: int) -> None:
        try:
            barrier.wait(timeout=timeout_s)
            result: list[dict[str, Any]] | BaseException = _points(measure(index))
        except BaseException as exc:  # recorded per device; the caller decides
            result = exc
        with lock:
            out[index] = result

    threads = [
        threading.Thread(target=work, args=(i,), name=f"gpuplan-dev{i}", daemon=True)
        for i in devices
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout_s)
    for i in devices:
        out.setdefault(i, TimeoutError(f"device {i}: no result within {timeout_s} s"))
    return out


def summarise(
    points: list[dict[str, Any]],
    *,
    value: str,
    group: Callable[[dict[str, Any]], str],
    threshold: float = OUTLIER_BELOW_MEDIAN,
) -> tuple[dict[str, Any], list[str]]:
    """Set ``outlier`` and ``rel_to_median`` on every point; return the spread per
    ``group`` and phase (``{"<group> alone": {...}, "<group> together": {...}}``) and one
    warning per outlier."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        phase = "together" if p.get("concurrent") else "alone"
        groups.setdefault(f"{group(p)} {phase}", []).append(p)
    summary: dict[str, Any] = {}
    warnings: list[str] = []
    for name, members in groups.items():
        by_device = {int(p["device_index"]): float(p[value]) for p in members}
        s = spread(list(by_device.values()))
        slow = outliers(by_device, threshold)
        median = s.median if s else 0.0
        for p in members:
            p["rel_to_median"] = float(p[value]) / median - 1.0 if median > 0 else None
            p["outlier"] = int(p["device_index"]) in slow
        summary[name] = {**(s.as_dict() if s else {}), "outliers": sorted(slow)}
        for i, rel in slow.items():
            who = next(p for p in members if int(p["device_index"]) == i)
            label = f"device {i}" + (f" ({who['uuid']})" if who.get("uuid") else "")
            warnings.append(
                f"{name}: {label} is {-rel:.1%} below the node median"
                f" (outlier past {threshold:.0%})"
            )
    return summary, warnings


def run_phases(
    ctx: Any,
    rec: Any,
    devices: list[int],
    measure_on: Measure,
    *,
    value: str,
    group: str,
) -> None:
    """Alone on each device, then all at once, into ``rec`` (a ``ProbeRecorder``) point by
    point; then the spread per ``group`` and phase into ``rec.params["spread"]``, an
    ``outlier`` flag on every point and a warning per outlier."""
    for index in devices:  # kept point by point: an interrupted loop keeps what it measured
        for p in run_alone([index], measure_on)[index]:
            p["concurrent"] = False
            rec.add(p)
        ctx.point_done()
    for index, got in run_together(devices, measure_on).items():
        if isinstance(got, BaseException):
            if isinstance(got, KeyboardInterrupt):
                raise got
            rec.warn(f"device {index} (all at once): {type(got).__name__}: {got}")
            continue
        for p in got:
            p["concurrent"] = True
            rec.add(p)
    summary, warnings = summarise(rec.measurements, value=value, group=lambda p: str(p[group]))
    rec.params["spread"] = summary
    for w in warnings:
        rec.warn(w)
    ctx.point_done()
