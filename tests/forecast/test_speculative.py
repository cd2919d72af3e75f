"""Speculative decoding in serving (MTP / EAGLE draft heads): a step verifies ``k + 1`` tokens
per sequence in one pass after ``k`` draft passes and emits ``tau`` tokens on average, so it
pays off where the pass is memory-bound (small batches) and not where it is compute-bound."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.inference import ServingDemand, forecast_inference, size_serving_fleet
from gpuplan.forecast.serving import LengthDist
from gpuplan.forecast.speculative import (
    Speculation,
    acceptance_length,
    default_acceptance_length,
    speculation,
)
from tests.forecast._spec_plan import plan_and_forecast_agree


def test_acceptance_length_is_leviathans_expectation_when_every_position_is_alike():
    # Leviathan et al. 2023, eq. (1): E[tokens per step] = (1 - a**(k+1)) / (1 - a)
    for a in (0.3, 0.6, 0.9):
        for k in (1, 2, 5):
            assert acceptance_length(k, a, a) == pytest.approx((1 - a ** (k + 1)) / (1 - a))
    assert acceptance_length(0, 0.9, 0.9) == 1.0
    assert acceptance_length(3, 0.5, 1.0) == pytest.approx(2.5)


def test_default_acceptance_reproduces_its_two_sources():
    # one draft token: DeepSeek-V3's 85-90% second-token acceptance (the midpoint)
    assert default_acceptance_length(1)[0] == pytest.approx(1.875)
    # seven: the original MTP head reused autoregressively, 3.20 (Nebius model card)
    assert default_acceptance_length(7)[0] == pytest.approx(3.20)
    taus = [default_acceptance_length(k)[0] for k in range(1, 9)]
    assert all(b > a for a, b in itertools.pairwise(taus))  # more drafts, more tokens
    assert all(t <= k + 1 for k, t in zip(range(1, 9), taus, strict=True))
    assert "2412.19437" in default_acceptance_length(2)[1]


@pytest.mark.parametrize(
    "args, words",
    [
        ((2, 3.5, None), "outside [1, 3]"),
        ((2, 0.5, None), "outside [1, 3]"),
        ((None, 2.0, None), "need draft tokens"),
        ((0, None, 2.0), "need draft tokens"),
        ((-1, None, None), "between 1 and 16"),
        ((2, None, 0.0), "--spec-draft-layers"),
    ],
)
def test_bad_speculation_is_refused_in_one_line(args, words):
    with pytest.raises(InputError) as exc:
        speculation(*args)
    assert words in exc.value.one_line()
    assert "\n" not in exc.value.one_line()


def test_no_draft_tokens_is_no_speculation():
    assert speculation(None) is None
    assert speculation(0) is None
    s = speculation(3, 2.5)
    assert s == Speculation(3, 2.5, 1.0, "given")
    assert s.queries == 4


def _tpot(model: str, gpu: str, batch: int, spec: Speculation | None, **kw) -> float:
    r = forecast_inference(
        model,
        gpu=gpu,
        batch=batch,
        input_tokens=kw.pop("input_tokens", 1024),
        output_tokens=kw.pop("output_tokens", 512),
        speculation=spec,
        **kw,
    )
    return float(r["tpot_s"])


def test_small_batch_gains_close_to_the_acceptance_length():
    """At batch 1 the verification pass streams the weights once for its four tokens, as a
    decode pass does for one: TPOT falls by about tau / (1 + k x draft share)."""
    spec = speculation(3, 2.5)
    plain = _tpot("llama3.1-8b", "h100", 1, None)
    fast = _tpot("llama3.1-8b", "h100", 1, spec)
    # 3 draft passes of one of 32 layers and the whole LM head (1.05 of 16 GB of weights)
    # each: (1 + 3 x (1/32 + 0.066)) / 2.5 = 0.52; less where per-step costs are shared
    assert 0.40 < fast / plain < 0.52


def test_large_batch_compute_bound_loses_what_small_batch_gains():
    """At a large batch of short requests the GEMMs are compute-bound: four query tokens per
    sequence cost about four times one, and a 2-token acceptance does not pay for it. (With
    long contexts the KV-cache read, shared by the four queries, keeps it worth running.)"""
    spec = speculation(3, 2.0)
    kw = dict(input_tokens=128, output_tokens=128)
    small = _tpot("llama3.1-8b", "h100", 1, spec, **kw) / _tpot(
        "llama3.1-8b", "h100", 1, None, **kw
    )
    big = _tpot("llama3.1-8b", "h100", 512, spec, **kw) / _tpot(
        "llama3.1-8b", "h100", 512, None, **kw
    )
    # (1 + 3 x (1/32 + 0.066)) / 2.0 = 0.65 at batch 1 (each draft pass one layer and the LM
    # head, 1.05 of Llama 3.1 8B's 16 GB)
    assert small < 0.66
    assert big > 1.0
    long_ctx = _tpot("llama3.1-8b", "h100", 256, spec, input_tokens=4096) / _tpot(
        "llama3.1-8b", "h100", 256, None, input_tokens=4096
    )
    assert small < long_ctx < big


@pytest.mark.parametrize("batch", [1, 16, 128])
def test_rejecting_every_draft_is_slower_than_not_drafting(batch):
    never = speculation(2, 1.0)
    assert _tpot("llama3.1-8b", "h100", batch, never) > _tpot("llama3.1-8b", "h100", batch, None)


def test_steady_state_and_closed_loop_simulation_agree():
    """The per-token steady state (``speculative_iteration``) and the discrete-event
    simulation (``StepCostModel.time``'s per-token iterations) describe the same server."""
    spec = speculation(2)
    r = forecast_inference(
        "deepseek-v3",
        gpu="h200",
        tp=8,
        precision="fp8",
        engine="sglang@0.5",
        input_tokens=1024,
        output_tokens=1024,
        concurrency=16,
        closed_loop_requests=160,
        speculation=spec,
    )
    loop = r["closed_loop"]
    assert loop["tpot_p50_s"] == pytest.approx(r["tpot_s"], rel=0.08)
    sp = r["speculative"]
    assert sp["draft_tokens"] == 2 and sp["tokens_per_step"] == pytest.approx(
        spec.acceptance_length
    )
    # a step: one verification and two draft passes, each draft a 61st of a decode pass
    assert sp["step_s"] > sp["verify_pass_s"] > 10 * sp["draft_pass_s"]
    assert r["tpot_s"] < sp["step_s"] < 3 * r["tpot_s"]


def test_a_mixed_step_pays_its_prefill_whole():
    """Per-token iterations spread the decode share of a step over its tokens, never the
    prompt chunks it carries: TTFT with speculation is not a third of TTFT without."""
    kw = dict(gpu="h100", batch=8, input_tokens=4096, output_tokens=256)
    plain = forecast_inference("llama3.1-8b", **kw)
    spec = forecast_inference("llama3.1-8b", speculation=speculation(3, 3.0), **kw)
    assert spec["ttft_s"] == pytest.approx(plain["ttft_s"], rel=0.35)
    assert spec["tpot_s"] < 0.6 * plain["tpot_s"]


def test_speculation_shrinks_the_fleet_for_a_latency_bound_load():
    def gpus(spec: Speculation | None) -> int:
        return size_serving_fleet(
            ServingDemand(
                model="llama3.3-70b",
                gpus=("h100",),
                qps=20,
                inputs=LengthDist(1024, 4096),
                outputs=LengthDist(256, 1024),
                ttft_slo_s=2.0,
                tpot_slo_s=0.05,
                speculation=spec,
            )
        ).num_gpus

    plain, spec = gpus(None), gpus(speculation(3, 2.5))
    assert spec < plain


def test_static_batching_with_speculation_is_refused():
    with pytest.raises(InputError, match="continuous batching only"):
        forecast_inference("llama3.1-8b", batching="static", speculation=speculation(2))


def test_cli_flags_and_json(run_cli):
    r = run_cli(
        "forecast", "infer", "--model", "llama3.1-8b", "--gpu", "h100", "--batch", "4",
        "--spec-tokens", "3", "--format", "json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    sp = d["speculative"]
    assert sp["draft_tokens"] == 3
    assert sp["acceptance_length"] == pytest.approx(default_acceptance_length(3)[0])
    assert sp["acceptance_basis"].startswith("default")
    assert d["throughput_output_tokens_per_s"] == pytest.approx(4 / d["tpot_s"], rel=1e-6)


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--spec-acceptance", "2"], "need draft tokens"),
        (["--spec-tokens", "2", "--spec-acceptance", "3.5"], "outside [1, 3]"),
        (["--spec-tokens", "2", "--batching", "static"], "continuous batching only"),
        (["--spec-tokens", "40"], "--spec-tokens"),
    ],
)
def test_cli_bad_speculation_exits_2_in_one_line(run_cli, extra, words):
    r = run_cli("forecast", "infer", "--model", "llama3.1-8b", "--gpu", "h100", *extra)
    assert r.returncode == 2
    assert words in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_plan_scenario_speculation_sizes_as_forecast_infer(run_cli, tmp_path):
    notes = plan_and_forecast_agree(
        run_cli,
        tmp_path,
        qps=20,
        tpot=0.05,
        speculative="{draft_tokens: 3, acceptance_length: 2.5}",
        flags=["--spec-tokens", "3", "--spec-acceptance", "2.5"],
    )
    # the plan says what it assumed
    assert any("3 draft tokens emitting 2.50 tokens per step" in n for n in notes)


def test_plan_scenario_refuses_an_impossible_acceptance(run_cli, tmp_path):
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(
        """
name: bad
workloads:
  inference:
    - name: chat
      model: llama3.3-70b
      qps: 2
      input_tokens: 1024
      output_tokens: 256
      tpot_slo_s: 0.05
      speculative: {draft_tokens: 2, acceptance_length: 5}
candidates:
  gpus: [h100]
  clouds: [aws]
  onprem_nodes: []
"""
    )
    r = run_cli("plan", str(scenario), "--out", str(tmp_path / "out"))
    assert r.returncode == 2
    assert "outside [1, 3]" in r.stderr
    assert "Traceback" not in r.stderr


def test_step_cost_without_speculation_is_unchanged_by_the_new_fields():
    """The per-token wrapper is not in the path of a replica without speculation."""
    from gpuplan.forecast.inference_step import StepCostModel

    from .test_infer_step import SHARP, rates_for

    rates, _ = rates_for()
    cost = StepCostModel.build(rates, SHARP, max_tokens=4096)
    args = (np.array([8.0, 2048.0]), np.array([8.0, 8.0]), np.array([8000.0, 8000.0]))
    assert np.array_equal(cost.time(*args), cost._pass_time(*args))


def test_the_draft_head_weighs_one_layer():
    kw = dict(gpu="h200", tp=8, precision="fp8", batch=8, input_tokens=1024, output_tokens=1024)
    plain = forecast_inference("deepseek-v3", **kw)
    spec = forecast_inference("deepseek-v3", speculation=speculation(2), **kw)
    extra = spec["memory_breakdown_bytes"]["weights"] - plain["memory_breakdown_bytes"]["weights"]
    # one of 61 layers of ~85 GB per GPU: ~1.4 GB (DeepSeek's MTP module is one MoE layer)
    assert extra == pytest.approx(plain["memory_breakdown_bytes"]["weights"] / 61, rel=0.05)
    assert spec["max_batch"] <= plain["max_batch"]


def test_disaggregated_pools_speculate_in_decode_only():
    """The decode pool verifies drafts (fewer GPUs for the TPOT target); the prefill pool
    runs the model's passes alone."""

    def pools(spec: Speculation | None) -> dict:
        r = forecast_inference(
            "llama3.3-70b",
            gpu="h100",
            qps=20,
            ttft_slo_s=1.0,
            tpot_slo_s=0.05,
            disaggregate=True,
            num_requests=600,
            speculation=spec,
        )
        return r["disaggregated"]

    plain, spec = pools(None), pools(speculation(3, 2.5))
    assert spec["decode"]["replicas"] * spec["decode"]["gpus_per_replica"] <= (
        plain["decode"]["replicas"] * plain["decode"]["gpus_per_replica"]
    )
    assert spec["prefill"]["gpus_per_replica"] >= 1 and spec["num_gpus"] <= plain["num_gpus"]


def test_the_steady_state_finds_the_fixed_point_where_the_step_cost_is_concave():
    """A speculative step's per-token cost can make ``F(tau)`` concave, where plain Newton from
    below overshoots the fixed point and cycles (Llama 3.1 8B, 3 drafts, on 4 A100 40GB: at
    26 req/s it went tau0 -> 24 ms -> 125 ms -> tau0 ... and the rate read as overloaded
    while 90% of it was served at 19 ms TPOT). The safeguarded step keeps the feasible
    rates one interval: every rate below a served one is served."""
    from gpuplan.catalogs import get_catalog
    from gpuplan.forecast import inference as inf
    from gpuplan.forecast.inference_arch import DEFAULT_MEMORY_FRACTION
    from gpuplan.forecast.serving import analytic_latency

    cat = get_catalog()
    arch, _ = inf.model_with_provenance("llama3.1-8b", cat)
    i, o = LengthDist(1024), LengthDist(256)
    cands, _ = inf.build_candidates(
        speculation=speculation(3),
        arch=arch,
        gpus=[cat.gpu("a100-sxm4-40gb")],
        precision="bf16",
        kv_precision=None,
        tp=4,
        pp=1,
        ep=1,
        inputs=i,
        outputs=o,
        batch=None,
        fitted=inf.load_overheads(),
        get_perf=inf.device_perf_for,
        catalog=cat,
        chunk_tokens=None,  # the engine's default on the GPU
        utilization=DEFAULT_MEMORY_FRACTION,
    )
    replica = cands[0].replica
    rates = np.linspace(1.0, 40.0, 157)
    _, tpot, ok = analytic_latency(replica, rates, i, o, "p99", ignore_batch_cap=True)
    served = np.flatnonzero(ok)
    assert served.size > 0 and np.all(ok[: served[-1] + 1])
    assert np.all(np.diff(tpot[ok]) > 0)  # TPOT grows with the load
    assert ok[np.searchsorted(rates, 26.154)]


def test_pipeline_hops_are_shared_by_a_steps_tokens():
    """With PP across two nodes, a verification step's stage hops carry its tau tokens: the
    steady state (per emitted token) and the simulation agree, with and without drafts."""
    for spec in (None, speculation(2, 2.0)):
        r = forecast_inference(
            "deepseek-v3",
            gpu="h100",
            precision="fp8",
            tp=8,
            pp=2,
            input_tokens=1024,
            output_tokens=512,
            concurrency=16,
            closed_loop_requests=96,
            speculation=spec,
        )
        assert r["closed_loop"]["tpot_p50_s"] == pytest.approx(r["tpot_s"], rel=0.08)


def test_a_draft_head_pass_reads_the_whole_lm_head():
    """An MTP or EAGLE head's pass is one layer and the whole output projection: beyond
    ``1/layers`` of a decode pass it reads the rest of the LM head's weights, which at the
    GPU's peak bandwidth alone takes ``(1 - 1/layers) * vocab * hidden * 2 bytes / bw``."""
    from gpuplan.catalogs import get_catalog

    kw = dict(gpu="h100", tp=1, batch=1, input_tokens=1024, output_tokens=256)
    plain = forecast_inference("llama3.1-8b", **kw)
    spec = forecast_inference("llama3.1-8b", speculation=speculation(3, 2.5), **kw)
    gpu = get_catalog().gpu("h100")
    lm_bytes = 128256 * 4096 * 2  # Llama 3.1 8B's untied output projection at bf16
    floor = (1 - 1 / 32) * lm_bytes / gpu.memory_bandwidth_bytes_per_s
    extra = spec["speculative"]["draft_pass_s"] - plain["tpot_s"] / 32
    # the calibrated streaming rate is near the spec (a fitted time scale may shave a few
    # per cent); without the LM head the extra was 0
    assert 0.9 * floor < extra < 2 * floor


def test_docstring_examples():
    import doctest

    from gpuplan.forecast import speculative

    failures, tried = doctest.testmod(speculative, verbose=False)
    assert tried > 0 and failures == 0
