"""The timing harness with a fake clock: loop calibration, warmups apart, samples, budgets."""

from __future__ import annotations

import statistics

import pytest

from gpuplan.probes.timing import Timed, TimingConfig, WallTimer, calibrate_loops, measure


class FakeClock:
    """A clock that only moves when the fake work runs."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def work(clock: FakeClock, costs: list[float]):
    """One call advances the clock by the next cost (the last cost repeats)."""
    calls = {"n": 0}

    def fn() -> None:
        i = min(calls["n"], len(costs) - 1)
        clock.now += costs[i]
        calls["n"] += 1

    fn.calls = calls  # type: ignore[attr-defined]
    return fn


def test_loop_calibration_reaches_the_minimum_sample_time():
    clock = FakeClock()
    fn = work(clock, [0.001])
    record: list[float] = []
    loops = calibrate_loops(fn, WallTimer(clock=clock), min_sample_s=0.1, record=record)
    # 1 call = 1 ms -> jump x16 -> 16 calls = 16 ms -> aim 10 % past 100 ms -> 110 calls
    assert loops == 110
    assert 110 * 0.001 >= 0.1
    assert record == pytest.approx([0.001, 0.001, 0.001])
    assert fn.calls["n"] == 1 + 16 + 110


def test_slow_work_needs_one_loop():
    clock = FakeClock()
    loops = calibrate_loops(work(clock, [0.3]), WallTimer(clock=clock), min_sample_s=0.1)
    assert loops == 1


def test_loops_are_capped():
    clock = FakeClock()
    loops = calibrate_loops(
        work(clock, [1e-9]), WallTimer(clock=clock), min_sample_s=1.0, max_loops=1000
    )
    assert loops == 1000


def test_zero_duration_below_clock_resolution_grows_loops():
    class Coarse:
        """A clock with 10 ms ticks."""

        def __init__(self) -> None:
            self.t = 0.0

        def __call__(self) -> float:
            return (self.t // 0.01) * 0.01

    clock = Coarse()

    def fn() -> None:
        clock.t += 0.0001  # 0.1 ms of work: invisible to one tick at first

    loops = calibrate_loops(fn, WallTimer(clock=clock), min_sample_s=0.05)
    assert loops * 0.0001 >= 0.05 - 0.01  # reached the target within one tick


def test_warmups_are_kept_apart_from_samples():
    clock = FakeClock()
    # the first two calls are slow (allocation, autotuning), then 2 ms per call
    fn = work(clock, [0.5, 0.2, 0.002])
    cfg = TimingConfig(warmups=2, min_sample_s=0.02, samples=5)
    timed = measure(fn, WallTimer(clock=clock), cfg)
    assert timed.warmup_s[:2] == pytest.approx([0.5, 0.2])
    assert len(timed.samples_s) == 5
    assert timed.samples_s == pytest.approx([0.002] * 5)
    assert timed.median_s == pytest.approx(0.002)
    assert timed.loops * 0.002 >= 0.02


def test_summary_statistics_of_samples():
    t = Timed(loops=3, samples_s=[4.0, 1.0, 3.0, 2.0, 100.0])
    assert t.median_s == 3.0
    assert t.min_s == 1.0 and t.max_s == 100.0
    q = statistics.quantiles(t.samples_s, n=4, method="inclusive")
    assert t.iqr_s == pytest.approx(q[2] - q[0]) == pytest.approx(2.0)
    d = t.as_dict()
    assert d["samples_s"] == [4.0, 1.0, 3.0, 2.0, 100.0] and d["loops"] == 3


def test_point_budget_stops_after_min_samples():
    clock = FakeClock()
    fn = work(clock, [0.5])
    cfg = TimingConfig(warmups=0, min_sample_s=0.1, samples=10, min_samples=3, max_point_s=1.2)
    timed = measure(fn, WallTimer(clock=clock), cfg, wall_clock=clock)
    # calibration 0.5 s, then samples of 0.5 s: the budget is exceeded after the 2nd,
    # but at least 3 samples are kept
    assert len(timed.samples_s) == 3


def test_reduce_makes_every_rank_decide_from_the_same_duration():
    clock = FakeClock()
    fn = work(clock, [0.001])
    seen: list[float] = []

    def slowest_rank(d: float) -> float:  # as an all-reduce MAX with a rank 4x slower
        seen.append(d)
        return d * 4

    cfg = TimingConfig(warmups=1, min_sample_s=0.1, samples=3)
    timed = measure(fn, WallTimer(clock=clock), cfg, reduce=slowest_rank)
    assert timed.samples_s == pytest.approx([0.004] * 3)
    # calibrated on the reduced durations: 1 call = 4 ms -> 16 -> 32 calls = 128 ms
    assert timed.loops == 32
    assert len(seen) >= 1 + 2 + 3


def test_sync_is_called_around_the_loop():
    clock = FakeClock()
    events: list[str] = []
    timer = WallTimer(clock=clock, sync=lambda: events.append("sync"))
    timer(lambda: events.append("call"), 3)
    assert events == ["sync", "call", "call", "call", "sync"]


def test_invalid_config_is_refused():
    with pytest.raises(ValueError):
        TimingConfig(samples=0)


def test_calibration_stops_at_its_budget():
    clock = FakeClock()
    fn = work(clock, [0.001])
    loops = calibrate_loops(fn, WallTimer(clock=clock), min_sample_s=10.0, budget_s=0.05)
    # 1 call (1 ms), 16 calls (17 ms spent), 256 calls (273 ms spent > 50 ms): stop there
    assert loops == 256
    assert fn.calls["n"] == 1 + 16 + 256
