"""Disaggregated prefill and decode pools: KV transfer term, SLOs met in the simulator,
minimal pools, comparison with the co-located fleet (issue 16.5)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.errors import InputError
from gpuplan.forecast.inference import (
    ServingDemand,
    build_candidates,
    device_perf_for,
    model_with_provenance,
    size_serving_fleet,
)
from gpuplan.forecast.inference_fit import load_overheads
from gpuplan.forecast.model import kv_cache_bytes_per_token
from gpuplan.forecast.serving import PERCENTILES, LengthDist, kv_transfer_time_s, simulate

TTFT_SLO, TPOT_SLO, QPS, N = 0.5, 0.03, 40.0, 600


@pytest.fixture(scope="module")
def sized():
    d = ServingDemand(
        model="llama3.1-8b",
        gpus=("h100",),
        qps=QPS,
        inputs=LengthDist(1536.0),
        outputs=LengthDist(200.0),
        ttft_slo_s=TTFT_SLO,
        tpot_slo_s=TPOT_SLO,
        num_requests=N,
        disaggregate=True,
    )
    return d, size_serving_fleet(d)


def test_kv_transfer_is_bytes_over_bandwidth_plus_latency():
    assert kv_transfer_time_s(3.0e8, 2.5e10) == pytest.approx(3.0e8 / 2.5e10, rel=1e-12)
    assert kv_transfer_time_s(3.0e8, 2.5e10, latency_s=1e-5) == pytest.approx(
        1e-5 + 3.0e8 / 2.5e10, rel=1e-12
    )
    with pytest.raises(InputError):
        kv_transfer_time_s(1.0, 0.0)


def test_kv_transfer_term_from_the_formula_inputs(sized):
    _, f = sized
    dis = f.result["disaggregated"]
    kv = dis["kv_transfer"]
    arch, _ = model_with_provenance("llama3.1-8b", get_catalog())
    # bf16 KV, heads split over the decode pool's TP (8 KV heads >= tp)
    per_token = kv_cache_bytes_per_token(arch, 2) / dis["decode"]["tp"]
    assert kv["kv_bytes_per_token_per_gpu"] == pytest.approx(per_token, rel=1e-12)
    assert kv["prompt_tokens"] == 1536.0
    assert kv["kv_bytes_per_gpu"] == pytest.approx(1536.0 * per_token, rel=1e-12)
    assert kv["seconds"] == pytest.approx(
        kv["kv_bytes_per_gpu"] / kv["link_bytes_per_s"], rel=1e-12
    )
    # TTFT of the disaggregated fleet carries it
    parts = dis["prefill"]["ttft_s"] + kv["seconds"] + dis["decode"]["admission_wait_s"]
    assert dis["ttft_s"] == pytest.approx(parts, rel=1e-12)


def test_both_slos_met_and_pools_minimal_in_the_simulator(sized):
    """Rebuild each pool's replica from the same candidates and simulate it again: the SLO
    holds at the sized replica count and fails with one replica fewer."""
    d, f = sized
    dis = f.result["disaggregated"]
    assert dis["ttft_s"] <= TTFT_SLO and dis["tpot_s"] <= TPOT_SLO
    arch, _ = model_with_provenance("llama3.1-8b", get_catalog())
    cands, _ = build_candidates(
        arch=arch,
        gpus=[get_catalog().gpu("h100")],
        precision="bf16",
        kv_precision=None,
        tp=None,
        pp=1,
        ep=1,
        inputs=d.inputs,
        outputs=d.outputs,
        batch=None,
        fitted=load_overheads(),
        get_perf=lambda g: device_perf_for(g),
        catalog=get_catalog(),
        chunk_tokens=d.chunk_tokens,
        utilization=d.memory_utilization,  # None: the engine's default
        engine=d.engine,
    )
    pct = PERCENTILES["p99"]

    def rep(pool):
        return next(
            c.replica
            for c in cands
            if (c.tp, c.pp, c.replica.max_batch) == (pool["tp"], pool["pp"], pool["batch_cap"])
        )

    dec, pf = dis["decode"], dis["prefill"]
    r_dec = replace(rep(dec), prefilled=True)
    s = simulate(r_dec, QPS / dec["replicas"], d.inputs, d.outputs, num_requests=N, seed=0)
    assert not s.saturated and s.percentile("tpot", pct) <= TPOT_SLO
    assert s.percentile("tpot", pct) == pytest.approx(dec["tpot_s"], rel=1e-9)
    budget = TTFT_SLO - dis["kv_transfer"]["seconds"] - dec["admission_wait_s"]
    one = LengthDist(1.0)
    s = simulate(rep(pf), QPS / pf["replicas"], d.inputs, one, num_requests=N, seed=0)
    assert not s.saturated and s.percentile("ttft", pct) <= budget
    if pf["replicas"] > 1:
        s = simulate(rep(pf), QPS / (pf["replicas"] - 1), d.inputs, one, num_requests=N, seed=0)
        assert s.saturated or s.percentile("ttft", pct) > budget


def test_ratio_total_and_verdict_are_consistent(sized):
    _, f = sized
    dis = f.result["disaggregated"]
    n_p, n_d = dis["prefill"]["num_gpus"], dis["decode"]["num_gpus"]
    assert dis["num_gpus"] == n_p + n_d
    assert dis["prefill_decode_gpu_ratio"] == pytest.approx(n_p / n_d)
    assert dis["colocated_num_gpus"] == f.num_gpus
    if dis["num_gpus"] < f.num_gpus:
        assert dis["verdict"].startswith("disaggregated is cheaper")
    elif dis["num_gpus"] > f.num_gpus:
        assert dis["verdict"].startswith("co-located is cheaper")
    assert "USD per million output tokens" in (
        dis["cost_derivation"] or "USD per million output tokens"
    )


def test_a_prefilled_replica_skips_the_prefill():
    """The same replica, same requests: with the KV cache arriving ready, the first step comes
    sooner than when the replica must prefill the prompt itself."""
    arch, _ = model_with_provenance("llama3.1-8b", get_catalog())
    cands, _ = build_candidates(
        arch=arch,
        gpus=[get_catalog().gpu("h100")],
        precision="bf16",
        kv_precision=None,
        tp=1,
        pp=1,
        ep=1,
        inputs=LengthDist(4096.0),
        outputs=LengthDist(64.0),
        batch=64,
        fitted=load_overheads(),
        get_perf=lambda g: device_perf_for(g),
        catalog=get_catalog(),
        chunk_tokens=8192,
        utilization=0.9,
    )
    r = cands[0].replica
    ins, outs = LengthDist(4096.0), LengthDist(64.0)
    plain = simulate(r, 2.0, ins, outs, num_requests=300, seed=1)
    pre = simulate(replace(r, prefilled=True), 2.0, ins, outs, num_requests=300, seed=1)
    assert pre.percentile("ttft", 50) < plain.percentile("ttft", 50)


def test_cli_disaggregate_needs_a_load(run_cli):
    p = run_cli("forecast", "infer", "--model", "llama3.1-8b", "--gpu", "h100", "--disaggregate")
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr and "--qps" in lines[0]
