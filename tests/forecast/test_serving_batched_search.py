"""The fleet search solves every layout's steady state in one vectorised call
(:class:`CostStack`, :func:`analytic_rates`): each layout's answer is the one it gets alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

from gpuplan.forecast.inference_arch import PRECISIONS, Layout, shard
from gpuplan.forecast.inference_step import (
    FAST,
    SLOW,
    VALUE,
    CostStack,
    DeviceRates,
    OverheadParams,
    StepCostModel,
    prompts_per_iteration,
)
from gpuplan.forecast.serving import (
    Candidate,
    LengthDist,
    ReplicaModel,
    analytic_latency,
    analytic_rates,
    max_rates_for_caps,
    poisson_quantile,
)

from .test_infer_fakes import LLAMA70, FakeGpu, FakePerf


def _replica(layout: Layout, bandwidth: float, max_tokens: float, cap: int) -> ReplicaModel:
    gpu = FakeGpu(memory_bandwidth_bytes_per_s=bandwidth)
    perf = FakePerf(gpu=gpu)
    sh = shard(LLAMA70, layout, PRECISIONS["fp8"])
    rates = DeviceRates(perf, gpu, sh)
    params = OverheadParams(overhead_per_layer_s=3e-5)
    cost = StepCostModel.build(rates, params, max_tokens=max_tokens, typical_prompt=1024)
    kv = (0.9 * gpu.memory_bytes - sh.weight_bytes_per_gpu) / sh.kv_bytes_per_token_per_gpu()
    coef = float(sh.attention_flops_prefill(1.0)) * 2
    return ReplicaModel(cost, cap, kv, coef, 8192)


@pytest.fixture(scope="module")
def replicas() -> list[ReplicaModel]:
    """Layouts that differ in every way the stack must keep apart: TP, PP (stage passes and
    hops), bandwidth (the tables) and token grid (the grid's end)."""
    return [
        _replica(Layout(tp=2), 3.0e12, 8192 + 256, 128),
        _replica(Layout(tp=4), 3.0e12, 8192 + 512, 256),
        _replica(Layout(tp=8), 4.8e12, 8192 + 1024, 512),
        _replica(Layout(tp=4, pp=2), 3.0e12, 4096 + 256, 64),
    ]


@pytest.mark.parametrize("scenario", [VALUE, SLOW, FAST])
def test_stack_prices_each_element_by_its_own_model(replicas, scenario):
    costs = [r.cost for r in replicas]
    stack = CostStack.of(costs)
    rng = np.random.default_rng(3)
    n = 400
    which = rng.integers(0, len(costs), n)
    # below, inside and beyond each table (the stack clamps to each model's own ends)
    tokens = np.exp(rng.uniform(np.log(0.5), np.log(3e4), n))
    rows = np.maximum(np.floor(tokens * rng.uniform(0.05, 1.0, n)), 1.0)
    ctx = rows * rng.uniform(0, 4000, n)
    pf_tokens = np.maximum(tokens - rows, 0.0)
    pf_flops = pf_tokens * rng.uniform(0, 1e9, n)
    got = stack.time(tokens, rows, ctx, pf_flops, pf_tokens, scenario, which)
    want = np.array(
        [
            float(costs[w].time(t, r, c, f, p, scenario))
            for w, t, r, c, f, p in zip(which, tokens, rows, ctx, pf_flops, pf_tokens, strict=True)
        ]
    )
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0.0)


def test_only_plain_models_stack(replicas):
    windowed = dataclasses.replace(replicas[0].cost, window=4096.0, local_fraction=0.5)
    assert not CostStack.stackable(windowed)
    with pytest.raises(ValueError, match="only plain cost models"):
        CostStack.of([replicas[1].cost, windowed])


def test_batched_search_gives_each_layout_its_own_rates(replicas):
    i, o = LengthDist(1024, 4000), LengthDist(256, 900)
    caps = [4, 16, 64, 256, 1024]
    cands = []
    for k, rep in enumerate(replicas):
        for cap in caps:
            # a serve-probe factor on one layout: its SLOs are its own
            factors = (1.5, 1.2) if k == 2 else (1.0, 1.0)
            cands.append(
                Candidate(
                    f"g{k}",
                    1,
                    1,
                    1,
                    dataclasses.replace(rep, max_batch=cap),
                    latency_factors=factors,
                )
            )
    analytic_rates(cands, i, o, 2.0, 0.06, "p99")
    for k, rep in enumerate(replicas):
        mine = [c for c in cands if c.gpu == f"g{k}"]
        alone = max_rates_for_caps(rep, caps, i, o, *mine[0].slos(2.0, 0.06), "p99")
        got = np.array([c.max_rate for c in mine])
        np.testing.assert_allclose(got, alone, rtol=1e-9)
        assert got[0] > 0 and np.all(np.diff(got) >= 0)  # more slots never serve less
    # the factors bind: the same layout without them serves more
    plain = max_rates_for_caps(replicas[2], caps, i, o, 2.0, 0.06, "p99")
    slowed = np.array([c.max_rate for c in cands if c.gpu == "g2"])
    assert np.all(slowed <= plain) and slowed[-1] < plain[-1]


def test_a_rate_is_solved_independently_of_the_others(replicas):
    i, o = LengthDist(2048), LengthDist(512)
    rates = np.geomspace(0.01, 40.0, 50)
    whole = analytic_latency(replicas[1], rates, i, o, "p99")
    for j in (0, 17, 49):
        one = analytic_latency(replicas[1], rates[j : j + 1], i, o, "p99")
        for a, b in zip(whole, one, strict=True):
            np.testing.assert_array_equal(a[j : j + 1], b)


def test_per_row_prompt_counts_keep_each_rows_mean():
    mu = np.array([1e-5, 0.3, 2.0, 40.0, 5e4])
    for per_row in (False, True):
        k, w = prompts_per_iteration(mu, per_row=per_row)
        np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-12)
        np.testing.assert_allclose((w * k).sum(axis=1), mu, rtol=2e-3)
    # each row alone gives the per-row answer in a call with the others
    k_all, w_all = prompts_per_iteration(mu, per_row=True)
    for j, m in enumerate(mu):
        k1, w1 = prompts_per_iteration(np.array([m]), per_row=True)
        e_all = (w_all[j] * k_all[j] ** 2).sum()
        np.testing.assert_allclose((w1[0] * k1[0] ** 2).sum(), e_all, rtol=1e-12)


@pytest.mark.parametrize("q", [0.5, 0.9, 0.95, 0.99, 0.999])
def test_poisson_quantile_is_scipys(q):
    mu = np.concatenate([[0.0], np.geomspace(1e-9, 1e6, 3000), np.arange(0.5, 300.0, 0.25)])
    want = np.where(mu > 0, stats.poisson.ppf(q, np.maximum(mu, 1e-300)), 0.0)
    np.testing.assert_array_equal(poisson_quantile(mu, q), want)


def test_recurring_passes_are_kept_read_only():
    gpu = FakeGpu()
    rates = DeviceRates(FakePerf(gpu=gpu), gpu, shard(LLAMA70, Layout(tp=4), PRECISIONS["fp8"]))
    t, hop, _ = rates.comm(16.0)
    again = rates.comm(16.0)
    assert again[0] is t and again[1] is hop
    vec, _, _ = rates.comm(np.array([16.0, 64.0]))
    np.testing.assert_array_equal(t, vec[:, 0])
    assert t.sum() > 0
    with pytest.raises(ValueError, match="read-only"):
        t[0] = 0.0
    rg = rates.rated_gemms(16.0, 16.0)
    assert rates.rated_gemms(16.0, 16.0) is rg
    np.testing.assert_array_equal(rg.rate, rates.gemm_rates(rg.gemms)[0])
    with pytest.raises(ValueError, match="read-only"):
        rg.compute_s[0, 0] = 0.0


def test_a_comparison_with_unpriced_gpus_says_so():
    from gpuplan.forecast.inference import forecast_inference

    r = forecast_inference(
        "llama3.1-8b",
        gpu="h100,mi300x",
        qps=4,
        input_tokens=1024,
        output_tokens=256,
        ttft_slo_s=1.0,
        tpot_slo_s=0.05,
        num_requests=300,
    )
    assert r["ranked_by"] == "usd_per_hour" and r["gpu"].startswith("h100")
    assert r["unpriced_gpus"] == ["mi300x"]
    sized = [c for c in r["candidates"] if c.get("num_gpus") is not None]
    kinds = [c.get("usd_per_hour") is None for c in sized]
    assert kinds == sorted(kinds) and any(kinds) and not all(kinds)
    prices = [c["usd_per_hour"] for c in sized if c.get("usd_per_hour") is not None]
    assert prices == sorted(prices)


def test_gpu_all_compares_every_catalog_accelerator():
    from gpuplan.catalogs import get_catalog
    from gpuplan.forecast.inference import forecast_inference

    r = forecast_inference(
        "llama3.1-8b",
        gpu="all",
        qps=20,
        input_tokens=1024,
        output_tokens=256,
        ttft_slo_s=1.0,
        tpot_slo_s=0.05,
        num_requests=300,
    )
    every = {g.id for g in get_catalog().gpus if g.memory_bytes and g.memory_bandwidth_bytes_per_s}
    assert len(every) > 30
    assert {str(c["gpu"]) for c in r["candidates"]} == every  # sized, or dropped with a reason
    assert r["ranked_by"] == "usd_per_hour" and r["usd_per_hour"]  # a priced winner
    assert set(r["unpriced_gpus"]) < every
