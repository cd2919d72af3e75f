"""The timing harness every probe uses (pyperf's method, adapted to accelerators).

One measured point goes through three phases:

1. **warmups**: ``warmups`` single calls, timed and kept apart from the samples (first calls
   pay for allocation, kernel selection, page faults);
2. **loop calibration**: the number of calls per sample (``loops``) grows until one sample
   lasts at least ``min_sample_s``, so that the clock's resolution and the per-sample
   overhead (a synchronize, an event record) are negligible. pyperf doubles the loops
   (``pyperf/_runner.py``, ``calibrate_loops``); we jump towards the estimate from the last
   run (at most x16 per step), which needs fewer calls on slow accelerators and the same
   outcome;
3. **samples**: ``samples`` runs of ``loops`` calls; each sample is stored as the per-call
   duration (total / loops). The median is the reported figure and the interquartile range
   its spread (``gpuplan.results.schema.Timing``).

Clocks: on GPUs, CUDA (or HIP) events recorded on the stream around the loop, read after a
synchronize (:class:`CudaEventTimer`); on CPUs, :func:`time.perf_counter` around the loop with
an optional ``sync`` (:class:`WallTimer`). The clock is injectable so that loop calibration is
tested with a fake timer.

In a distributed run every rank must run the same number of loops, or the collectives
deadlock: ``reduce`` (e.g. an all-reduce MAX of the duration) makes every rank decide
from the same value.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

Clock = Callable[[], float]


class Timer(Protocol):
    """Times ``loops`` back-to-back calls of ``fn`` and returns the total in seconds."""

    def __call__(self, fn: Callable[[], Any], loops: int) -> float: ...


@dataclass(frozen=True)
class WallTimer:
    """Host clock around the loop (CPU work, or any work made synchronous by ``sync``).

    Parameters
    ----------
    clock:
        Seconds as a float; :func:`time.perf_counter` by default (monotonic, highest
        resolution), a fake clock in tests.
    sync:
        Called before starting and after the loop, e.g. ``torch.cuda.synchronize``.
    """

    clock: Clock = time.perf_counter
    sync: Callable[[], Any] | None = None

    def __call__(self, fn: Callable[[], Any], loops: int) -> float:
        if self.sync is not None:
            self.sync()
        start = self.clock()
        for _ in range(loops):
            fn()
        if self.sync is not None:
            self.sync()
        return self.clock() - start


class CudaEventTimer:
    """CUDA/HIP events around the loop on the current stream, read after a synchronize.

    Events measure device time without host launch gaps at the ends; the synchronize before
    the start event makes sure no earlier work is counted.
    """

    def __init__(self, torch_module: Any, device: Any) -> None:
        self._torch = torch_module
        self._device = device

    def __call__(self, fn: Callable[[], Any], loops: int) -> float:
        cuda = self._torch.cuda
        cuda.synchronize(self._device)
        start = cuda.Event(enable_timing=True)
        end = cuda.Event(enable_timing=True)
        start.record()
        for _ in range(loops):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds


class FlushedEventTimer:
    """CUDA/HIP events around each call, with a cache flush before every call, outside the
    timed region (mamf-finder's method, stas00/ml-engineering ``compute/accelerator/benchmarks/
    mamf-finder.py``: zero a buffer larger than L2 before each matmul, time only the matmul).

    For ``loops`` calls it enqueues ``flush, start_i, fn, end_i`` back to back with no host
    synchronisation in between (the flush kernel keeps the device busy while the host
    enqueues the next call, so host dispatch does not enter the timed regions), then
    synchronises once and returns the sum of the ``loops`` event intervals. Events are
    pooled and reused between samples.
    """

    def __init__(self, torch_module: Any, device: Any, flush: Callable[[], Any]) -> None:
        self._torch = torch_module
        self._device = device
        self._flush = flush
        self._pool: list[tuple[Any, Any]] = []

    def _events(self, n: int) -> list[tuple[Any, Any]]:
        event = self._torch.cuda.Event
        while len(self._pool) < n:
            self._pool.append((event(enable_timing=True), event(enable_timing=True)))
        return self._pool[:n]

    def __call__(self, fn: Callable[[], Any], loops: int) -> float:
        cuda = self._torch.cuda
        pairs = self._events(loops)
        cuda.synchronize(self._device)
        for start, end in pairs:
            self._flush()
            start.record()
            fn()
            end.record()
        pairs[-1][1].synchronize()
        return sum(start.elapsed_time(end) for start, end in pairs) / 1e3


@dataclass(frozen=True, kw_only=True)
class TimingConfig:
    """How long and how often to measure one point."""

    warmups: int = 2
    """Single calls before calibration, timed and stored apart (``warmup_s``)."""
    min_sample_s: float = 0.05
    """A sample lasts at least this long (pyperf's ``min_time`` is 0.1 s)."""
    samples: int = 10
    """Samples per point (each ``loops`` calls)."""
    min_samples: int = 3
    """Samples kept even when the point's time budget runs out."""
    max_loops: int = 1 << 20
    """Upper bound of the calibrated loops."""
    max_point_s: float | None = None
    """Stop taking samples past this much wall time per point (after ``min_samples``)."""

    def __post_init__(self) -> None:
        if self.warmups < 0 or self.samples < 1 or self.min_samples < 1:
            raise ValueError("warmups >= 0, samples >= 1 and min_samples >= 1 are required")
        if self.min_sample_s < 0 or self.max_loops < 1:
            raise ValueError("min_sample_s >= 0 and max_loops >= 1 are required")


@dataclass
class Timed:
    """The timing of one point, with the field names of ``gpuplan.results.schema.Timing``."""

    loops: int
    warmup_s: list[float] = field(default_factory=list)
    samples_s: list[float] = field(default_factory=list)

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def min_s(self) -> float:
        return min(self.samples_s)

    @property
    def max_s(self) -> float:
        return max(self.samples_s)

    @property
    def iqr_s(self) -> float | None:
        if len(self.samples_s) < 2:
            return None
        q = statistics.quantiles(self.samples_s, n=4, method="inclusive")
        return q[2] - q[0]

    def as_dict(self) -> dict[str, Any]:
        return {
            "loops": self.loops,
            "warmup_s": list(self.warmup_s),
            "samples_s": list(self.samples_s),
            "median_s": self.median_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "iqr_s": self.iqr_s,
        }


def calibrate_loops(
    fn: Callable[[], Any],
    timer: Timer,
    *,
    min_sample_s: float,
    max_loops: int = 1 << 20,
    reduce: Callable[[float], float] | None = None,
    record: list[float] | None = None,
    budget_s: float | None = None,
) -> int:
    """The smallest tried loop count whose sample lasts at least ``min_sample_s``.

    Starts at one call and grows (at least x2, at most x16 per step, aiming 10 % past the
    target from the last duration) until the target or ``max_loops`` is reached, or the
    calibration runs together last longer than ``budget_s`` (a machine whose speed drifts
    under load must not make calibration run away). Per-call durations of the calibration
    runs are appended to ``record`` (they are warmups too).
    """
    loops = 1
    spent = 0.0
    while True:
        duration = timer(fn, loops)
        if reduce is not None:
            duration = reduce(duration)
        spent += duration
        if record is not None:
            record.append(duration / loops)
        if duration >= min_sample_s or loops >= max_loops:
            return loops
        if budget_s is not None and spent > budget_s:
            return loops
        if duration > 0:
            wanted = math.ceil(loops * min_sample_s / duration * 1.1)
        else:  # below the clock's resolution
            wanted = loops * 16
        loops = min(max_loops, max(2 * loops, min(wanted, 16 * loops)))


def measure(
    fn: Callable[[], Any],
    timer: Timer | None = None,
    config: TimingConfig | None = None,
    *,
    reduce: Callable[[float], float] | None = None,
    wall_clock: Clock = time.perf_counter,
) -> Timed:
    """Time ``fn`` with warmups, loop calibration and repeated samples.

    Parameters
    ----------
    fn:
        One call of the work to time (e.g. one matmul); its result is ignored.
    timer:
        How to time a loop (:class:`WallTimer` by default).
    config:
        Warmups, sample length and count, budgets.
    reduce:
        Applied to every loop duration before it is used or stored (distributed runs pass
        an all-reduce MAX so that every rank sees the same numbers).
    wall_clock:
        Host clock for the per-point budget ``config.max_point_s``.

    Returns
    -------
    Timed
        loops, per-call warmup/calibration durations and per-call sample durations (s).
    """
    timer = timer or WallTimer()
    config = config or TimingConfig()

    def timed(loops: int) -> float:
        duration = timer(fn, loops)
        return reduce(duration) if reduce is not None else duration

    started = wall_clock()
    warm: list[float] = [timed(1) for _ in range(config.warmups)]
    loops = calibrate_loops(
        fn,
        timer,
        min_sample_s=config.min_sample_s,
        max_loops=config.max_loops,
        reduce=reduce,
        record=warm,
        budget_s=None if config.max_point_s is None else config.max_point_s / 2,
    )
    samples: list[float] = []
    for i in range(config.samples):
        samples.append(timed(loops) / loops)
        if (
            config.max_point_s is not None
            and i + 1 >= config.min_samples
            and i + 1 < config.samples
            and _over_budget(wall_clock() - started, config.max_point_s, reduce)
        ):
            break
    return Timed(loops=loops, warmup_s=warm, samples_s=samples)


def _over_budget(
    elapsed_s: float, budget_s: float, reduce: Callable[[float], float] | None
) -> bool:
    # In a distributed run every rank must stop after the same sample.
    flag = 1.0 if elapsed_s > budget_s else 0.0
    # > 0: with an average as ``reduce`` one rank over budget is enough, and every rank
    # sees the same value, so they all stop after the same sample
    return (reduce(flag) if reduce is not None else flag) > 0.0


#: Timing of one point in quick and default mode (see docs/probes.md).
QUICK_TIMING = TimingConfig(warmups=1, min_sample_s=0.02, samples=5, min_samples=3, max_point_s=2.0)
DEFAULT_TIMING = TimingConfig(
    warmups=2, min_sample_s=0.1, samples=10, min_samples=5, max_point_s=10.0
)
