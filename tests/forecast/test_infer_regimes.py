"""Serving physics in the regimes issue 16 names: decode at large batch over long contexts,
prefill at 32K+, MoE expert load per decode step, FP8 KV cache, and the engine profiles'
time scale. Monotonic and ordering properties, each of which a wrong formula would break.

The pass-level tests run on the fake device of ``test_infer_fakes`` (flat GEMM rate, flat
bandwidth, alpha-beta collectives: the GPU edge mocked, no GPU here); the end-to-end ones on
the shipped calibration and catalog.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpuplan.forecast.inference import forecast_inference
from gpuplan.forecast.inference_arch import (
    PRECISIONS,
    Layout,
    PrecisionSpec,
    expected_distinct_experts,
    shard,
)
from gpuplan.forecast.inference_step import (
    VALUE,
    DeviceRates,
    OverheadParams,
    StepCostModel,
    combine,
    decode_pass,
    prefill_pass,
)

from .test_infer_fakes import LLAMA70, MIXTRAL, FakeGpu, FakePerf

SHARP = OverheadParams(gemm_efficiency=1.0, bandwidth_efficiency=1.0, roofline_sharpness=60.0)


def _rates(arch=LLAMA70, tp=1, ep=1, precision: PrecisionSpec | str = "bf16"):
    gpu = FakeGpu()
    prec = PRECISIONS[precision] if isinstance(precision, str) else precision
    sh = shard(arch, Layout(tp, 1, ep), prec)
    return DeviceRates(FakePerf(gpu=gpu), gpu, sh), sh, gpu


def _decode_s(rates, batch: float, ctx: float, params: OverheadParams = SHARP) -> float:
    return float(combine(decode_pass(rates, batch, ctx)[0], params).total_s[VALUE])


# --------------------------------------------------------------------------------------------
# decode at large batch over long contexts
# --------------------------------------------------------------------------------------------
def test_tpot_grows_with_context_at_fixed_batch() -> None:
    rates, sh, gpu = _rates(tp=4, precision="fp8")
    ctxs = [1024, 4096, 16384, 65536]
    t = [_decode_s(rates, 64, c) for c in ctxs]
    assert all(b > a for a, b in itertools.pairwise(t))
    # the growth is at least the extra KV the step streams, read at the spec bandwidth
    kv_per_tok = sh.kv_bytes_per_ctx_token_stage()
    extra_bytes = 64 * (ctxs[-1] - ctxs[0]) * kv_per_tok
    assert t[-1] - t[0] >= extra_bytes / float(gpu.memory_bandwidth_bytes_per_s)


def test_attention_share_of_a_decode_step_grows_with_context() -> None:
    rates, _, _ = _rates(tp=4, precision="fp8")
    shares = []
    for ctx in (512, 8192, 65536):
        pt = combine(decode_pass(rates, 128, ctx)[0], SHARP)
        shares.append(float(pt.attention_s[VALUE] / pt.total_s[VALUE]))
    assert shares[0] < shares[1] < shares[2]
    assert shares[2] > 0.5  # 128 x 64K cached tokens: the KV read dominates the weights


def test_large_batch_decode_gemms_are_compute_bound() -> None:
    """At batch 1 every GEMM streams its weights; at batch 8192 the GEMM FLOPs exceed the
    weight traffic (the roofline's ridge is crossed), short context."""
    rates, _, _ = _rates(tp=2, precision="fp8")
    small, _ = decode_pass(rates, 1, 128)
    big, _ = decode_pass(rates, 8192, 128)
    s_c, s_m = small.gemm_compute_s[VALUE].sum(), small.gemm_memory_s[VALUE].sum()
    b_c, b_m = big.gemm_compute_s[VALUE].sum(), big.gemm_memory_s[VALUE].sum()
    assert s_m > s_c
    assert b_c > b_m


# --------------------------------------------------------------------------------------------
# prefill at 32K+
# --------------------------------------------------------------------------------------------
def test_prefill_attention_flops_are_quadratic_in_the_prompt() -> None:
    _, sh, _ = _rates(tp=8)
    f32, f64, f128 = (float(sh.attention_flops_prefill(s)) for s in (32768, 65536, 131072))
    assert f64 / f32 == pytest.approx(4.0)
    assert f128 / f64 == pytest.approx(4.0)
    # a chunk after a cached prefix pays for the prefix once per token (s * c)
    assert float(sh.attention_flops_prefill(32768, 32768)) == pytest.approx(3 * f32)


def test_prefill_time_per_token_grows_past_32k() -> None:
    """GEMM time is linear in the prompt, attention quadratic: the time per prompt token of
    a 128K prefill is well above that of a 32K one, and the attention share grows."""
    rates, _, _ = _rates(tp=8, precision="fp8")
    per_tok, share = [], []
    for s in (8192, 32768, 131072):
        pt = combine(prefill_pass(rates, 1, s)[0], SHARP)
        per_tok.append(float(pt.total_s[VALUE]) / s)
        share.append(float(pt.attention_s[VALUE] / pt.total_s[VALUE]))
    assert per_tok[0] < per_tok[1] < per_tok[2]
    assert per_tok[2] > 1.5 * per_tok[1]
    assert share[0] < share[1] < share[2]


def test_ttft_of_a_128k_prompt_is_superlinear_end_to_end() -> None:
    r32 = forecast_inference("llama3.1-8b", "h100", batch=1, input_tokens=30000, output_tokens=2)
    r128 = forecast_inference("llama3.1-8b", "h100", batch=1, input_tokens=120000, output_tokens=2)
    assert r128["ttft_s"] > 4.0 * r32["ttft_s"]


# --------------------------------------------------------------------------------------------
# MoE decode: expert load per step
# --------------------------------------------------------------------------------------------
def _expert_weight_bytes(sh, tokens: float) -> float:
    g = sh.gemms(tokens, tokens)
    sel = np.array([n.startswith("expert") for n in g.names])
    return float((g.count * g.n * g.k * g.weight_bytes_per_elem)[sel].sum())


def test_moe_decode_weight_bytes_grow_with_batch_and_saturate() -> None:
    """Expected distinct experts E(1 - (1 - k/E)^B) for B tokens (top-2 of 8, Mixtral):
    the expert weights a decode step streams grow with the batch and stop at all experts."""
    _, sh, _ = _rates(arch=MIXTRAL, tp=2)
    b = [1, 2, 4, 8, 16, 64, 1024]
    w = [_expert_weight_bytes(sh, x) for x in b]
    assert all(y > x for x, y in itertools.pairwise(w[:5]))
    assert all(y >= x - 1e-6 * x for x, y in itertools.pairwise(w))
    full = _expert_weight_bytes(sh, 1e6)
    assert w[-1] == pytest.approx(full, rel=1e-9)
    # batch 1 reads top_k/E of the experts, batch 2 the expected 3.5 of 8
    assert w[0] / full == pytest.approx(2 / 8, rel=1e-9)
    assert w[1] / full == pytest.approx(float(expected_distinct_experts(8, 2, 2)) / 8, rel=1e-9)


def test_moe_decode_step_time_saturates_like_the_expert_count() -> None:
    """The memory-bound MoE decode step grows fast while new experts get touched, then
    slowly (attention and activations only) once all 8 are read."""
    rates, _, _ = _rates(arch=MIXTRAL, tp=2)
    t1, t4, t16, t64 = (_decode_s(rates, b, 256) for b in (1, 4, 16, 64))
    assert t4 - t1 > t64 - t16 > 0


# --------------------------------------------------------------------------------------------
# FP8 KV cache
# --------------------------------------------------------------------------------------------
def test_fp8_kv_cache_halves_kv_bytes_and_speeds_long_context_decode() -> None:
    bf16 = PRECISIONS["bf16"]
    kv8 = PrecisionSpec(
        "bf16", bf16.weight_bytes, 1.0, bf16.gemm_dtype, bf16.activation_dtype, bf16.requires, "x"
    )
    r16, s16, _ = _rates(tp=4, precision=bf16)
    r8, s8, _ = _rates(tp=4, precision=kv8)
    assert s8.kv_bytes_per_ctx_token_stage() == pytest.approx(
        s16.kv_bytes_per_ctx_token_stage() / 2
    )
    gain = [_decode_s(r16, 64, c) / _decode_s(r8, 64, c) for c in (1024, 16384, 65536)]
    assert 1.0 < gain[0] < gain[1] < gain[2] < 2.0


def test_fp8_kv_cache_end_to_end_lowers_long_context_tpot() -> None:
    kw = dict(batch=32, input_tokens=16384, output_tokens=256)
    a = forecast_inference("llama3.1-70b", "h100", tp=4, precision="fp8", **kw)
    b = forecast_inference("llama3.1-70b", "h100", tp=4, precision="fp8", kv_precision="bf16", **kw)
    assert a["tpot_s"] < b["tpot_s"]
    assert a["kv_cache_bytes_per_token"] == pytest.approx(b["kv_cache_bytes_per_token"] / 2)


# --------------------------------------------------------------------------------------------
# the engine profile's time scale
# --------------------------------------------------------------------------------------------
def test_time_scale_multiplies_every_part_of_a_pass_and_the_step_model() -> None:
    rates, _, _ = _rates(tp=2, precision="fp8")
    parts, _ = decode_pass(rates, 32, 2048)
    one = combine(parts, SHARP)
    k = 1.37
    scaled = combine(parts, OverheadParams(**{**SHARP.as_dict(), "time_scale": k}))
    for f in ("total_s", "gemm_s", "attention_s", "elementwise_s", "comm_s", "overhead_s"):
        assert np.allclose(getattr(scaled, f), k * getattr(one, f))
    m1 = StepCostModel.build(rates, SHARP, max_tokens=4096)
    mk = StepCostModel.build(
        rates, OverheadParams(**{**SHARP.as_dict(), "time_scale": k}), max_tokens=4096
    )
    args = (300.0, 32.0, 32 * 2048.0, 1e12, 256.0)
    assert float(mk.time(*args)) == pytest.approx(k * float(m1.time(*args)), rel=1e-12)


def test_chunked_prefill_counts_the_prompt_attention_once() -> None:
    """A 32K prompt prefilled in 2K or 8K chunks does the same attention work (the chunks'
    causal parts add up to s**2/2): the TTFTs differ by the extra passes' fixed costs only,
    not by the 4x more chunks times the whole prompt's attention."""
    kw = dict(batch=1, input_tokens=32000, output_tokens=2)
    small = forecast_inference("llama3.1-8b", "h100", chunk_tokens=2048, **kw)["ttft_s"]
    big = forecast_inference("llama3.1-8b", "h100", chunk_tokens=8192, **kw)["ttft_s"]
    assert 0.8 < small / big < 1.5
