"""The suite's time budget, planned before it runs: per probe, for the GPUs found.

A buyer rents a trial node by the hour, so ``gpuplan probe`` says before it starts how
long it will take (``--quick`` on an 8-GPU node: at most 10 minutes; the full suite: at
most 30), and the result keeps the plan next to what each probe really took
(``ResultDocument.budget``: ``planned_s`` and ``actual_s`` per probe), so that the plan can
be checked against every run.

The plan counts the points each probe will measure from the probes' own sweep
definitions (:func:`gpuplan.probes.matmul.shapes`, :func:`gpuplan.probes.membw.sizes`,
:func:`gpuplan.probes.collectives.sizes` ...) and gives each point the wall time the
timing harness aims at (:func:`point_s`): warmups and loop calibration (about two sample
lengths: the loops grow geometrically to the target) plus ``samples`` samples of
``min_sample_s``, times :data:`WALL_FACTOR` for what happens between timed regions
(allocation, the correctness check, synchronisation, matmul's cache flush before each
call). These are planning allowances, not device figures; the ``actual_s`` of a real
run is what to compare them with (docs/probes.md, "Time budget").

A probe module may define ``planned_budget(quick: bool, gpus: int, timing:
TimingConfig) -> ProbeBudget``; the planner then uses it (new probes register their
budget where they are defined, without editing this file). A probe without a plan gets
:data:`UNPLANNED_S` and says so.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplan.probes.timing import DEFAULT_TIMING, QUICK_TIMING, TimingConfig

#: wall time of a point per second the harness times (allocation, checks, syncs, flushes)
WALL_FACTOR = 1.5
#: matmul's flushed timer zeroes a buffer of 2x the LLC (>= 256 MiB) before every call,
#: outside the timed region: at 2048^3 bf16 the flush lasts about as long as the call
MATMUL_FLUSH_FACTOR = 1.5
#: per probe: imports, allocations, the device warm-up that is not a point (s)
SETUP_S = 5.0
#: collectives: spawning one rank per GPU and NCCL's communicator set-up (s)
COLLECTIVES_START_S = 30.0
#: storage: laying out the test files before the first read, beyond the write points (s);
#: without direct I/O the default sweep's files are 1.25x the RAM: add RAM / write speed
STORAGE_LAYOUT_S = {True: 10.0, False: 60.0}
#: fio's own start and the file checks around each run (s)
FIO_START_S = 1.0
#: inventory (NVML, nvidia-smi topo), torch's CUDA start, writing the result (s)
START_S = 30.0
#: a probe that brings no plan of its own (s)
UNPLANNED_S = 60.0
#: the limits the issue sets for an 8-GPU node (s): quick and full suite
LIMIT_S = {True: 600.0, False: 1800.0}

#: precisions measured on GPUs (fp32, tf32, bf16, fp16, fp8) and on CPUs (fp32, bf16)
_PRECISIONS = {True: 5, False: 2}
#: the largest last-level cache in the catalog (MI300X's 256 MB Infinity Cache) sets the
#: most membw sizes, the worst case of the plan when the device is not known yet
_PLAN_LLC_BYTES = 256 << 20


@dataclass(frozen=True)
class ProbeBudget:
    probe: str
    planned_s: float
    points: int
    basis: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "planned_s": round(self.planned_s, 1),
            "points": self.points,
            "basis": self.basis,
        }


@dataclass(frozen=True)
class SuiteBudget:
    quick: bool
    gpus: int
    probes: tuple[ProbeBudget, ...]
    start_s: float = START_S

    @property
    def total_s(self) -> float:
        return self.start_s + sum(p.planned_s for p in self.probes)

    def as_dict(self) -> dict[str, Any]:
        return {
            "quick": self.quick,
            "gpus": self.gpus,
            "start_s": self.start_s,
            "total_s": round(self.total_s, 1),
            "probes": [p.as_dict() for p in self.probes],
        }

    def text(self) -> str:
        """One line: the total and each probe's share (printed before the run)."""
        parts = ", ".join(f"{p.probe} {_mmss(p.planned_s)}" for p in self.probes)
        where = f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}" if self.gpus else "the CPU"
        return (
            f"planned {_mmss(self.total_s)} on {where}"
            f" ({'quick' if self.quick else 'full'}): {parts}, start-up {_mmss(self.start_s)}"
        )


def _mmss(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60}:{s % 60:02d}"


def point_s(timing: TimingConfig) -> float:
    """Planned wall time of one measured point: ``WALL_FACTOR x (2 + samples) x
    min_sample_s`` (calibration ~ two sample lengths, then the samples).

    >>> round(point_s(TimingConfig(warmups=1, min_sample_s=0.02, samples=5)), 3)
    0.21
    """
    return WALL_FACTOR * (2 + timing.samples) * timing.min_sample_s


def _matmul(quick: bool, gpus: int, timing: TimingConfig) -> ProbeBudget:
    from gpuplan.probes.matmul import shapes

    gpu = gpus > 0
    sweep = len(shapes(gpu=gpu, quick=quick)) * _PRECISIONS[gpu]
    per_device = max(gpus, 1) + 1  # each device alone, then one round all at once
    warmup = (1.0 if quick else 5.0) if gpu else 0.0
    flush = MATMUL_FLUSH_FACTOR if gpu else 1.0
    planned = SETUP_S + warmup + point_s(timing) * (sweep * flush + per_device)
    return ProbeBudget(
        "matmul",
        planned,
        sweep + per_device,
        f"{sweep} sweep points on GPU 0 (x{flush:g} for the cache flush), {per_device} "
        f"per-device rounds, {warmup:g} s warm-up",
    )


def _membw(quick: bool, gpus: int, timing: TimingConfig) -> ProbeBudget:
    from gpuplan.probes.membw import GPU_MIN_TOP_BYTES, PER_DEVICE_OPS, sizes

    gpu = gpus > 0
    llc = _PLAN_LLC_BYTES if gpu else 32 << 20
    n = len(sizes(llc, quick=quick, limit_bytes=None, min_top_bytes=GPU_MIN_TOP_BYTES[quick]))
    sweep = 3 * n
    per_device = len(PER_DEVICE_OPS) * (max(gpus, 1) + 1)
    planned = SETUP_S + point_s(timing) * (sweep + per_device)
    return ProbeBudget(
        "membw",
        planned,
        sweep + per_device,
        f"{n} sizes x 3 kernels on GPU 0, {len(PER_DEVICE_OPS)} kernels x "
        f"{max(gpus, 1) + 1} per-device rounds",
    )


def _collectives(quick: bool, gpus: int, timing: TimingConfig) -> ProbeBudget:
    from gpuplan.probes.collectives import cases, sizes

    gpu = gpus > 0
    if gpu and gpus < 2:
        return ProbeBudget("collectives", 0.0, 0, "skipped on one GPU")
    points = len(cases(gpu=gpu, quick=quick)) * len(sizes(gpu=gpu, quick=quick))
    return ProbeBudget(
        "collectives",
        COLLECTIVES_START_S + points * point_s(timing),
        points,
        f"cases x sizes, {COLLECTIVES_START_S:g} s to start the ranks",
    )


def _storage(quick: bool, gpus: int, timing: TimingConfig) -> ProbeBudget:
    from gpuplan.probes.storage import points

    runtime_s, ramp_s = (1.0, 0.0) if quick else (10.0, 2.0)  # as gpuplan.probes.storage runs
    n = len(points(quick=quick))
    planned = STORAGE_LAYOUT_S[quick] + n * (runtime_s + ramp_s + FIO_START_S)
    return ProbeBudget(
        "storage",
        planned,
        n,
        f"{n} fio runs of {runtime_s + ramp_s:g} s, {STORAGE_LAYOUT_S[quick]:g} s of file layout",
    )


def soak_budget(duration_s: float) -> ProbeBudget:
    """The soak runs for its duration, plus its set-up."""
    return ProbeBudget("soak", SETUP_S + duration_s, 1, f"{duration_s:g} s asked for")


_PLANNERS: dict[str, Callable[[bool, int, TimingConfig], ProbeBudget]] = {
    "matmul": _matmul,
    "membw": _membw,
    "collectives": _collectives,
    "storage": _storage,
}


def probe_budget(name: str, quick: bool, gpus: int, timing: TimingConfig) -> ProbeBudget:
    """The plan of one probe: its module's ``planned_budget`` if it has one, else the
    planner here, else :data:`UNPLANNED_S`."""
    try:
        module = importlib.import_module(f"gpuplan.probes.{name}")
    except ImportError:
        module = None
    hook = getattr(module, "planned_budget", None) if module is not None else None
    if callable(hook):
        result = hook(quick, gpus, timing)
        if isinstance(result, ProbeBudget):
            return result
    planner = _PLANNERS.get(name)
    if planner is not None:
        return planner(quick, gpus, timing)
    return ProbeBudget(name, UNPLANNED_S, 0, "no plan of its own: an allowance")


def plan(
    probes: Sequence[str],
    *,
    quick: bool,
    gpus: int,
    timing: TimingConfig | None = None,
    soak_s: float | None = None,
) -> SuiteBudget:
    """The suite's plan for ``probes`` on a node with ``gpus`` GPUs (0: the CPU).

    ``timing`` defaults to the suite's (quick or default). ``soak_s``: the duration of a
    soak when ``soak`` is among ``probes``.
    """
    if timing is None:
        timing = QUICK_TIMING if quick else DEFAULT_TIMING
    out = []
    for name in probes:
        if name == "soak":
            out.append(soak_budget(float(soak_s or 0.0)))
        else:
            out.append(probe_budget(name, quick, gpus, timing))
    return SuiteBudget(quick=quick, gpus=gpus, probes=tuple(out))


def with_actuals(budget: SuiteBudget, durations: dict[str, float]) -> dict[str, Any]:
    """The plan as recorded in the result: each probe's ``actual_s`` beside its
    ``planned_s`` (the sum over its results; None for a probe that did not run)."""
    data = budget.as_dict()
    for row in data["probes"]:
        actual = durations.get(row["probe"])
        row["actual_s"] = None if actual is None else round(actual, 1)
    return data
