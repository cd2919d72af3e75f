"""Serving simulation: length distributions, the discrete-event simulation against queueing
theory, determinism, the analytic model, and the fleet search."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.inference_arch import PRECISIONS, Layout, shard
from gpuplan.forecast.inference_step import DeviceRates, OverheadParams, StepCostModel
from gpuplan.forecast.serving import (
    Candidate,
    LengthDist,
    ReplicaModel,
    analytic_latency,
    max_rate_meeting,
    poisson_quantile,
    simulate,
    simulate_requests,
    size_fleet,
)

from .test_infer_fakes import LLAMA70, FakeGpu, FakePerf


def flat_cost(step_s: float) -> StepCostModel:
    """An iteration that always takes ``step_s`` (an M/D/1 server when batch cap is 1)."""
    grid = np.array([1.0, 1e6])
    z = np.zeros(3)
    return StepCostModel(
        grid, np.log(grid), np.full((3, 2), step_s), np.zeros((3, 2)), z, z, z, z, 1.0, z, 1e6, 1
    )


@pytest.fixture(scope="module")
def llama_replica() -> ReplicaModel:
    gpu = FakeGpu()
    perf = FakePerf(gpu=gpu)
    sh = shard(LLAMA70, Layout(tp=4), PRECISIONS["fp8"])
    rates = DeviceRates(perf, gpu, sh)
    params = OverheadParams(overhead_per_layer_s=3e-5)
    cost = StepCostModel.build(rates, params, max_tokens=8192 + 512, typical_prompt=1024)
    kv_tokens = (0.9 * gpu.memory_bytes - sh.weight_bytes_per_gpu) / sh.kv_bytes_per_token_per_gpu()
    coef = float(sh.attention_flops_prefill(1.0)) * 2
    return ReplicaModel(cost, 256, kv_tokens, coef, 8192)


def test_lognormal_by_mean_and_p99():
    d = LengthDist(1000, 5000)
    assert d.quantile(0.99) == pytest.approx(5000, rel=1e-9)
    x = d.sample(np.random.default_rng(0), 400_000)
    assert x.mean() == pytest.approx(1000, rel=0.02)
    assert np.quantile(x, 0.99) == pytest.approx(5000, rel=0.03)
    assert LengthDist(256).sample(np.random.default_rng(0), 5).tolist() == [256] * 5
    capped = LengthDist(1000, 5000, max_tokens=2000).sample(np.random.default_rng(0), 10_000)
    assert capped.max() <= 2000


def test_length_errors():
    with pytest.raises(InputError, match="above the mean"):
        LengthDist(100, 50)
    with pytest.raises(InputError, match="no lognormal"):
        LengthDist(100, 100_000)


@pytest.mark.parametrize("rho", [0.3, 0.6, 0.85])
def test_des_reproduces_md1_waiting_time(rho):
    # one slot, one-token answers, constant service: TTFT = Pollaczek-Khinchine wait + service
    s = 0.01
    rep = ReplicaModel(flat_cost(s), 1, 1e9, 0.0, 8192)
    res = simulate(rep, rho / s, LengthDist(10), LengthDist(1), num_requests=40_000, seed=2)
    expected = rho * s / (2 * (1 - rho)) + s
    assert res.ttft_s.mean() == pytest.approx(expected, rel=0.05)


def test_des_event_skipping_is_exact(llama_replica):
    kw = dict(num_requests=400, seed=5)
    a = simulate(llama_replica, 3.0, LengthDist(1024, 4000), LengthDist(200, 800), **kw)
    b = simulate(llama_replica, 3.0, LengthDist(1024, 4000), LengthDist(200, 800), skip=False, **kw)
    np.testing.assert_allclose(a.ttft_s, b.ttft_s, rtol=1e-9)
    np.testing.assert_allclose(a.tpot_s, b.tpot_s, rtol=1e-9)


def test_des_is_seeded_and_deterministic(llama_replica):
    args = (llama_replica, 4.0, LengthDist(1024, 4000), LengthDist(200, 800))
    a = simulate(*args, num_requests=500, seed=1).summary()
    b = simulate(*args, num_requests=500, seed=1).summary()
    c = simulate(*args, num_requests=500, seed=2).summary()
    assert a == b
    assert a != c


def test_des_conserves_load_and_littles_law(llama_replica):
    qps = 2.0
    res = simulate(llama_replica, qps, LengthDist(1024), LengthDist(256), num_requests=3000, seed=3)
    assert not res.saturated
    # served output rate equals the offered one (within sampling noise)
    assert res.output_tokens / res.duration_s == pytest.approx(qps * 256, rel=0.06)
    # Little: requests in the system = rate x time in system (TTFT + 255 x TPOT)
    w = res.ttft_s.mean() + 255 * res.tpot_s.mean()
    assert res.mean_running == pytest.approx(qps * w, rel=0.1)


def test_long_lifetimes_are_measured_in_the_steady_state(llama_replica):
    """400 requests at 4/s arrive in 100 s, about one lifetime of a 2,000-token answer:
    measured as they come, they would see the ramp-up and the drain (a third fewer running
    requests and output tokens/s than the load's). The run is extended until the measured
    requests see the steady state: the offered output rate is served and Little's law holds
    over them. At 6/s the batch cap cannot keep up, which only the steady state shows."""
    out = 2000
    kw = dict(num_requests=400, seed=4)
    res = simulate(llama_replica, 4.0, LengthDist(512), LengthDist(out), **kw)
    assert not res.overloaded and res.requests == 360
    life = res.ttft_s.mean() + (out - 1) * res.tpot_s.mean()
    assert 4.0 * life > 400 / 4  # lifetimes long against the run: it needed the extension
    assert res.output_tokens / res.duration_s == pytest.approx(4.0 * out, rel=0.05)
    assert res.mean_running == pytest.approx(4.0 * life, rel=0.05)
    over = simulate(llama_replica, 6.0, LengthDist(512), LengthDist(out), **kw)
    # 256 running x 1 token per ~25 ms step is below the 12,000 tokens/s offered
    assert over.overloaded
    # a run already long against the lifetimes is measured as it is: the same requests
    # simulated without the steady-state check give the same latencies
    short = simulate(llama_replica, 2.0, LengthDist(512), LengthDist(64), num_requests=800, seed=4)
    rng = np.random.default_rng(4)
    arrivals = np.cumsum(rng.exponential(1 / 2.0, 800))
    lin, lout = LengthDist(512).sample(rng, 800), LengthDist(64).sample(rng, 800)
    plain = simulate_requests(llama_replica, arrivals, lin, lout, qps=2.0, warmup_fraction=0.1)
    assert np.array_equal(short.ttft_s, plain.ttft_s) and short.requests == 720


def test_latency_grows_with_load(llama_replica):
    lo = simulate(llama_replica, 1.0, LengthDist(1024), LengthDist(256), num_requests=800).summary()
    hi = simulate(llama_replica, 8.0, LengthDist(1024), LengthDist(256), num_requests=800).summary()
    assert hi["tpot_p50_s"] > lo["tpot_p50_s"]
    assert hi["ttft_p99_s"] > lo["ttft_p99_s"]


def test_overload_is_reported_as_saturated(llama_replica):
    res = simulate(llama_replica, 500.0, LengthDist(1024), LengthDist(256), num_requests=3000)
    assert res.saturated and math.isinf(res.percentile("ttft", 99))


def test_overload_too_short_to_overflow_the_queue_is_still_overloaded():
    """One slot of 10 ms at 1.25x its capacity for 300 requests: the backlog (about 75
    requests) never overflows the queue bound, but TTFT grows against arrival time at about
    1 - 1/1.25 = 0.2 s per s, so the sizing search rejects it; at 0.6x it is stable."""
    s = 0.01
    rep = ReplicaModel(flat_cost(s), 1, 1e9, 0.0, 8192)
    over = [simulate(rep, 1.25 / s, LengthDist(10), LengthDist(1), num_requests=300, seed=k)
            for k in range(20)]  # fmt: skip
    assert not any(r.saturated for r in over)
    assert all(r.overloaded for r in over)
    assert np.median([r.ttft_growth for r in over]) == pytest.approx(0.2, rel=0.4)
    calm = [simulate(rep, 0.6 / s, LengthDist(10), LengthDist(1), num_requests=300, seed=k)
            for k in range(20)]  # fmt: skip
    assert not any(r.overloaded for r in calm)
    long = simulate(rep, 1.25 / s, LengthDist(10), LengthDist(1), num_requests=20_000, seed=0)
    assert long.ttft_growth > 0.15 or long.saturated


def test_analytic_close_to_simulation_at_moderate_load(llama_replica):
    rate = 3.0
    sim = simulate(
        llama_replica, rate, LengthDist(1024), LengthDist(256), num_requests=2000, seed=4
    ).summary()
    ttft, tpot, ok = analytic_latency(
        llama_replica, np.array([rate]), LengthDist(1024), LengthDist(256), "p50"
    )
    assert ok[0]
    assert tpot[0] == pytest.approx(sim["tpot_p50_s"], rel=0.25)
    assert ttft[0] == pytest.approx(sim["ttft_p50_s"], rel=0.5)


def test_max_rate_meets_its_slo_and_not_beyond(llama_replica):
    i, o = LengthDist(1024), LengthDist(256)
    r = max_rate_meeting(llama_replica, i, o, 1.0, 0.05, "p99")
    assert r > 0
    t, p, ok = analytic_latency(llama_replica, np.array([r * 0.99, r * 1.05]), i, o, "p99")
    assert ok[0] and t[0] <= 1.0 and p[0] <= 0.05
    assert not (ok[1] and t[1] <= 1.0 and p[1] <= 0.05)


def test_poisson_quantile():
    assert poisson_quantile(0.0, 0.99) == 0
    assert int(poisson_quantile(1.0, 0.99)) == 4  # P(X<=3)=0.981, P(X<=4)=0.996
    assert int(poisson_quantile(10.0, 0.5)) == 10


def test_size_fleet_picks_the_cheapest_verified(llama_replica):
    fast = Candidate("fast-gpu", 4, 1, 1, llama_replica, usd_per_gpu_hour=None)
    slow_rep = ReplicaModel(
        llama_replica.cost, 16, llama_replica.kv_capacity_tokens, llama_replica.prefill_flops_coef
    )
    capped = Candidate("fast-gpu", 4, 1, 1, slow_rep)
    best, _cands = size_fleet(
        [fast, capped], 12.0, LengthDist(1024), LengthDist(256), 2.0, 0.1, "p99", num_requests=800
    )
    assert best is fast
    assert best.replicas is not None and best.sim is not None
    assert best.sim["ttft_p99_s"] <= 2.0 and best.sim["tpot_p99_s"] <= 0.1
    # one replica fewer misses the targets in the same simulation
    if best.replicas > 1:
        res = simulate(
            llama_replica,
            12.0 / (best.replicas - 1),
            LengthDist(1024),
            LengthDist(256),
            num_requests=800,
        )
        s = res.summary()
        assert res.saturated or s["ttft_p99_s"] > 2.0 or s["tpot_p99_s"] > 0.1


def test_an_unpriced_layout_ranks_after_every_priced_one(llama_replica):
    # the unpriced candidate needs no more GPUs than the priced one (same replica), yet a
    # layout without a price cannot be shown cheaper: the priced one is chosen
    i, o = LengthDist(1024), LengthDist(256)
    unpriced = Candidate("no-price-gpu", 4, 1, 1, llama_replica, usd_per_gpu_hour=None)
    priced = Candidate("priced-gpu", 4, 1, 1, llama_replica, usd_per_gpu_hour=5.0)
    best, _ = size_fleet([unpriced, priced], 6.0, i, o, 2.0, 0.1, "p99", num_requests=400)
    assert best is priced
    # without any price the GPU count ranks them (the tie goes to the first listed)
    priced.usd_per_gpu_hour = None
    for c in (unpriced, priced):
        c.replicas = c.sim = None
    best, _ = size_fleet([unpriced, priced], 6.0, i, o, 2.0, 0.1, "p99", num_requests=400)
    assert best is unpriced and best.replicas == priced.replicas
