"""Per-pass time model against hand-computed values and physical invariants.

These tests use the fake device model of ``test_infer_fakes`` (flat GEMM rate, flat
bandwidth, alpha-beta collectives) so that every expected value can be written out.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuplan.forecast.inference_arch import PRECISIONS, Layout, shard
from gpuplan.forecast.inference_step import (
    FAST,
    SLOW,
    VALUE,
    DeviceRates,
    OverheadParams,
    StepCostModel,
    combine,
    decode_pass,
    prefill_pass,
    smooth_max,
    static_run_parts,
    static_run_time,
)
from gpuplan.forecast.model import ModelArch, arch_from

from .test_infer_fakes import LLAMA70, MIXTRAL, FakeGpu, FakePerf

TINY = ModelArch(
    name="tiny",
    layers=2,
    hidden=1024,
    heads=8,
    kv_heads=8,
    head_dim=128,
    ffn_hidden=4096,
    vocab=1000,
    tied_embeddings=False,
    gated_mlp=True,
    attention="mha",
)
SHARP = OverheadParams(gemm_efficiency=1.0, bandwidth_efficiency=1.0, roofline_sharpness=60.0)


def rates_for(arch=TINY, tp=1, pp=1, ep=1, precision="bf16", engine="modern", **perf_kw):
    gpu = FakeGpu()
    perf = FakePerf(gpu=gpu, **perf_kw)
    sh = shard(arch, Layout(tp, pp, ep), PRECISIONS[precision])
    return DeviceRates(perf, gpu, sh, engine=engine), perf


def test_decode_batch1_is_weight_streaming_by_hand():
    rates, _ = rates_for()
    bw = 0.9 * 3.0e12
    parts, _ = decode_pass(rates, 1, 100)
    t = combine(parts, SHARP)
    h, f, d = 1024, 4096, 128
    gemms = [  # (n, k, count) per pass, weights bf16 + 1-row activations in and out
        ((8 + 16) * d, h, 2),
        (h, 8 * d, 2),
        (2 * f, h, 2),
        (h, f, 2),
        (1000, h, 1),
    ]
    gemm_s = sum(c * (n * k * 2 + (k + n) * 2) / bw for n, k, c in gemms)
    assert t.gemm_s[VALUE] == pytest.approx(gemm_s, rel=1e-3)
    kv_s = 100 * 2 * 8 * d * 2 * 2 / bw  # 100 cached tokens, K+V, 8 heads, 2 bytes, 2 layers
    assert t.attention_s[VALUE] == pytest.approx(kv_s, rel=1e-3)
    ew = 2 * (2 * 2 * h + 2 * 3 * h + 2 * (8 + 8) * d + 3 * f) * 2 / bw
    assert t.elementwise_s[VALUE] == pytest.approx(ew, rel=1e-9)
    assert t.comm_s[VALUE] == 0.0
    assert t.total_s[VALUE] == pytest.approx(gemm_s + kv_s + ew, rel=1e-3)
    assert t.bottleneck == "memory"


def test_prefill_long_prompt_is_compute_bound_by_hand():
    rates, _ = rates_for()
    parts, _ = prefill_pass(rates, 1, 4096)
    t = combine(parts, SHARP)
    rate = 0.8 * 1.0e15
    h, f, d, m = 1024, 4096, 128, 4096
    flops = 2 * (2 * m * 24 * d * h + 2 * m * h * 8 * d + 2 * m * 2 * f * h + 2 * m * h * f)
    flops += 2 * 1 * 1000 * h  # LM head on the last token only
    assert t.gemm_s[VALUE] == pytest.approx(flops / rate, rel=0.02)
    # causal attention: 2 * heads * (d_qk + d_v) * s^2 / 2 per layer
    attn_flops = 2 * 2 * 8 * 256 * m * m / 2
    assert t.attention_s[VALUE] == pytest.approx(attn_flops / rate, rel=0.02)
    assert t.bottleneck == "compute"


def test_tp_allreduce_cost_uses_the_collective_model():
    rates, perf = rates_for(tp=2)
    parts, _ = decode_pass(rates, 4, 10)
    size = 4 * 1024 * 2  # 4 tokens x hidden x bf16
    one = 10e-6 + size * 2 * (2 - 1) / 2 / 300e9
    assert parts.comm_s[VALUE] == pytest.approx(2 * 2 * one)  # 2 layers x 2 all-reduces
    assert "coll:all_reduce" in perf.calls


def test_expert_parallel_uses_all_to_all():
    rates, perf = rates_for(arch=MIXTRAL, tp=2, ep=2)
    parts, _ = decode_pass(rates, 8, 10)
    assert "coll:all_to_all" in perf.calls
    assert parts.comm_s[VALUE] > 0


def test_intervals_are_ordered():
    rates, _ = rates_for(arch=LLAMA70, tp=2, precision="fp8")
    t = static_run_time(static_run_parts(rates, 16, 512, 128), OverheadParams())
    assert t.ttft_s[FAST] < t.ttft_s[VALUE] < t.ttft_s[SLOW]
    assert t.tpot_s[FAST] < t.tpot_s[VALUE] < t.tpot_s[SLOW]
    assert (
        t.throughput_tokens_per_s[SLOW]
        < t.throughput_tokens_per_s[VALUE]
        < t.throughput_tokens_per_s[FAST]
    )


def test_static_throughput_identity():
    rates, _ = rates_for(arch=LLAMA70, tp=4)
    t = static_run_time(static_run_parts(rates, 32, 1024, 200), OverheadParams())
    expect = 32 * 200 / (t.ttft_s[VALUE] + 199 * t.tpot_s[VALUE])
    assert t.throughput_tokens_per_s[VALUE] == pytest.approx(expect)


def test_more_bandwidth_is_never_slower():
    prev = None
    for bw in (0.5, 0.7, 0.9, 1.0):
        rates, _ = rates_for(arch=LLAMA70, tp=2, bw_eff=bw)
        tpot = static_run_time(static_run_parts(rates, 8, 512, 64), OverheadParams()).tpot_s[VALUE]
        if prev is not None:
            assert tpot < prev
        prev = tpot


def test_fp8_decode_is_faster_than_bf16_at_batch_1():
    def tpot(prec):
        rates, _ = rates_for(arch=LLAMA70, tp=4, precision=prec)
        return combine(decode_pass(rates, 1, 512)[0], OverheadParams()).total_s[VALUE]

    assert tpot("fp8") < 0.6 * tpot("bf16")
    assert tpot("int4") < tpot("fp8")


def test_bandwidth_never_above_the_spec():
    rates, _ = rates_for(arch=LLAMA70, tp=2)
    greedy = dataclasses.replace(SHARP, bandwidth_efficiency=5.0)
    t = combine(decode_pass(rates, 1, 10)[0], greedy)
    weights = (
        rates.sharded.weight_bytes_per_gpu - rates.sharded.weight_breakdown_bytes["embeddings"] / 2
    )
    assert t.total_s[VALUE] >= weights / 3.0e12  # spec 3 TB/s of the fake GPU


def test_batch_crosses_the_roofline():
    rates, _ = rates_for(arch=LLAMA70, tp=2, precision="fp8")
    small = combine(decode_pass(rates, 1, 100)[0], OverheadParams())
    big = combine(decode_pass(rates, 4096, 100)[0], OverheadParams())
    assert small.bottleneck == "memory"
    assert big.bottleneck == "compute"
    # per-token cost falls with the batch (weights are shared)
    assert big.total_s[VALUE] / 4096 < small.total_s[VALUE] / 10


def test_pipeline_parallel_stage_and_hops():
    r1, _ = rates_for(arch=LLAMA70, tp=2, pp=1)
    r2, _ = rates_for(arch=LLAMA70, tp=2, pp=2)
    p = OverheadParams()
    one = static_run_time(static_run_parts(r1, 1, 128, 16), p)
    two = static_run_time(static_run_parts(r2, 1, 128, 16), p)
    run2 = static_run_parts(r2, 1, 128, 16)
    assert two.tpot_s[VALUE] == pytest.approx(
        2 * combine(run2.decode, p).total_s[VALUE] + run2.hop_decode_s[VALUE]
    )
    # at batch 1 PP does not speed up a token; it only halves the weights per GPU
    assert two.tpot_s[VALUE] > 0.9 * one.tpot_s[VALUE]
    assert r2.sharded.weight_bytes_per_gpu < 0.55 * r1.sharded.weight_bytes_per_gpu


def test_vector_decode_attention_for_trtllm09_gqa4_only():
    mistral_like = arch_from(
        {
            **LLAMA70.__dict__,
            "layers": 32,
            "hidden": 4096,
            "heads": 32,
            "kv_heads": 8,
            "ffn_hidden": 14336,
        }
    )
    r_modern, _ = rates_for(arch=mistral_like, engine="modern")
    r_old, _ = rates_for(arch=mistral_like, engine="trtllm-0.9")
    r_xqa, _ = rates_for(arch=LLAMA70, tp=2, engine="trtllm-0.9")  # head 128, group 8
    assert not r_modern.vector_decode_attention
    assert r_old.vector_decode_attention
    assert not r_xqa.vector_decode_attention
    p = dataclasses.replace(SHARP, vector_attention_efficiency=0.2)
    fast = combine(decode_pass(r_modern, 64, 2000)[0], p).attention_s[VALUE]
    slow = combine(decode_pass(r_old, 64, 2000)[0], p).attention_s[VALUE]
    # 20% of the calibrated FP32 CUDA-core rate (fake: 0.8 x 60 TFLOP/s), not tensor cores
    flops = 64 * 2000 * 2 * 32 * 256 * 32
    assert slow == pytest.approx(flops / (0.2 * 0.8 * 6e13), rel=0.01)
    # tensor cores: streaming the KV cache is the limit (64 x 2000 tokens, 32 layers, K+V)
    assert fast == pytest.approx(64 * 2000 * 2 * 8 * 128 * 2 * 32 / (0.9 * 3e12), rel=0.01)


def test_overheads_add_per_layer_and_step():
    rates, _ = rates_for(arch=LLAMA70, tp=2)
    parts, _ = decode_pass(rates, 1, 10)
    base = combine(parts, OverheadParams()).total_s[VALUE]
    more = combine(
        parts, OverheadParams(overhead_per_layer_s=1e-5, overhead_per_step_s=2e-4)
    ).total_s[VALUE]
    assert more - base == pytest.approx(80 * 1e-5 + 2e-4)


def test_step_cost_model_matches_the_passes():
    rates, _ = rates_for(arch=LLAMA70, tp=4, precision="fp8")
    p = OverheadParams(roofline_sharpness=3.0, overhead_per_layer_s=2e-5)
    cost = StepCostModel.build(rates, p, max_tokens=9000, typical_prompt=1024)
    for b, ctx in ((1, 100), (32, 1500), (300, 600)):
        exact = combine(decode_pass(rates, b, ctx)[0], p).total_s[VALUE]
        assert float(cost.time(b, b, b * ctx)) == pytest.approx(exact, rel=0.03)
    pre = combine(prefill_pass(rates, 1, 1024)[0], p).total_s[VALUE]
    coef = float(rates.sharded.attention_flops_prefill(1.0)) * 2
    assert float(cost.time(1024, 1, 0, coef * 1024**2 / 2, 1024)) == pytest.approx(pre, rel=0.05)


def test_smooth_max_limits():
    assert float(smooth_max(3.0, 4.0, 1.0)) == pytest.approx(7.0)
    assert float(smooth_max(3.0, 4.0, 200.0)) == pytest.approx(4.0, rel=1e-2)
    assert float(smooth_max(0.0, 0.0, 2.0)) == 0.0
    np.testing.assert_allclose(
        smooth_max(np.array([1.0, 2.0]), np.array([1.0, 0.0]), 2.0), [2**0.5, 2.0]
    )
