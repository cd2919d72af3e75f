"""Sliding-window attention in serving (gpt-oss's alternating 128-token windows, Gemma 3's
5 local : 1 global): a window layer keeps and reads at most its window of KV, and its
prefill attention is linear in the prompt beyond the window."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuplan.catalogs.catalog import get_catalog
from gpuplan.forecast.inference import forecast_inference
from gpuplan.forecast.inference_arch import PRECISIONS, Layout, shard
from gpuplan.forecast.inference_step import (
    VALUE,
    OverheadParams,
    StepCostModel,
    combine,
    decode_pass,
    prefill_pass,
)
from gpuplan.forecast.model import ModelArch, arch_from_catalog

from .test_infer_step import rates_for

# two full-attention layers of six, the others a 256-token window
LOCAL = ModelArch(
    name="local",
    layers=6,
    hidden=1024,
    heads=8,
    kv_heads=2,
    head_dim=128,
    ffn_hidden=4096,
    vocab=1000,
    sliding_window=256,
    full_attention_interval=3,
)
FULL = dataclasses.replace(LOCAL, name="full", sliding_window=None, full_attention_interval=None)


def _brute_pairs(s: int, c: int, w: int | None) -> float:
    """Query-key pairs of positions c+1..c+s, each seeing min(i, w) keys (continuous form:
    position i contributes the area of its unit step, so a full layer sums to s*c + s^2/2)."""
    x = np.arange(c, c + s, dtype=float)  # each unit step [x, x+1]
    if w is None:
        return float(((x + 1) ** 2 - x**2).sum() / 2)
    lo, hi = x, x + 1
    below = np.clip(hi, None, w) ** 2 / 2 - np.clip(lo, None, w) ** 2 / 2
    above = w * (np.clip(hi, w, None) - np.clip(lo, w, None))
    return float((below + above).sum())


@pytest.mark.parametrize("s, c", [(100, 0), (256, 0), (1000, 0), (300, 200), (512, 4096)])
def test_causal_pairs_count_each_layer_kind(s, c):
    sh = shard(LOCAL, Layout(), PRECISIONS["bf16"])
    expected = (2 * _brute_pairs(s, c, None) + 4 * _brute_pairs(s, c, 256)) / 6
    assert float(sh.causal_pairs(s, c)) == pytest.approx(expected, rel=1e-12)
    full = shard(FULL, Layout(), PRECISIONS["bf16"])
    assert float(full.causal_pairs(s, c)) == s * c + s * s / 2


def test_chunks_add_up_to_the_whole_prompt():
    sh = shard(LOCAL, Layout(), PRECISIONS["bf16"])
    whole = float(sh.attention_flops_prefill(3000))
    chunks = sum(float(sh.attention_flops_prefill(500, 500 * i)) for i in range(6))
    assert chunks == pytest.approx(whole, rel=1e-12)


def test_window_layers_hold_their_window_of_kv():
    """gpt-oss-120b at FP8 on TP 2: 18 full layers grow with the sequence, 18 window layers
    hold 128 tokens; before, all 36 grew (36,864 B/token for the model)."""
    arch = arch_from_catalog(get_catalog().model("gpt-oss-120b"))
    sh = shard(arch, Layout(tp=2), PRECISIONS["fp8"])
    per_layer = 2 * (8 // 2) * 64 * 1.0  # K and V, 4 KV heads per GPU, 64 dims, 1 byte
    assert sh.kv_bytes_per_token_per_gpu() == 18 * per_layer
    assert sh.window_kv_bytes_per_seq_gpu() == 18 * per_layer * 128
    assert float(sh.window_kv_bytes_per_seq_gpu(50)) == 18 * per_layer * 50
    assert sh.model_kv_bytes_per_token() == 18 * 2 * 8 * 64
    assert sh.model_window_kv_bytes_per_seq() == 18 * 2 * 8 * 64 * 128
    assert float(sh.kv_bytes_per_seq_gpu(2048)) == 18 * per_layer * (2048 + 128)
    assert sh.fixed_bytes_per_seq_gpu() == 18 * per_layer * 128


def test_a_model_without_windows_is_unchanged():
    sh = shard(FULL, Layout(), PRECISIONS["bf16"])
    assert sh.window is None and sh.local_attention_fraction == 0.0
    assert sh.attended_ctx(5000) == 5000
    assert sh.fixed_bytes_per_seq_gpu() == 0.0
    # every layer windowed (no full layer to grow with the sequence): priced at full attention
    all_local = dataclasses.replace(LOCAL, full_attention_interval=None)
    assert shard(all_local, Layout(), PRECISIONS["bf16"]).window is None


def test_decode_reads_at_most_the_window_in_window_layers():
    rates, _ = rates_for(arch=LOCAL)
    full_rates, _ = rates_for(arch=FULL)
    ctx = 8192
    win = decode_pass(rates, 4, ctx)[0]
    full = decode_pass(full_rates, 4, ctx)[0]
    kv = rates.sharded.kv_bytes_per_ctx_token_stage()
    assert win.kv_read_s[VALUE] * rates.bandwidth[VALUE] == pytest.approx(
        4 * (2 / 6 * ctx + 4 / 6 * 256) * kv
    )
    assert win.kv_read_s[VALUE] < full.kv_read_s[VALUE] / 2.5
    # below the window both read the same context
    short = decode_pass(rates, 4, 200)[0]
    assert short.kv_read_s[VALUE] == pytest.approx(decode_pass(full_rates, 4, 200)[0].kv_read_s[0])


def test_step_cost_model_windows_like_the_passes():
    """The simulation's cost model takes an iteration's totals; for a whole prompt from the
    start and for decode rows of one context it gives the passes' windowed figures."""
    rates, _ = rates_for(arch=LOCAL)
    p = OverheadParams(roofline_sharpness=3.0)
    cost = StepCostModel.build(rates, p, max_tokens=9000, typical_prompt=2048)
    sh = rates.sharded
    coef = float(sh.attention_flops_prefill(1.0)) * 2
    for s in (100, 256, 2048, 6000):
        _, pf = cost.windowed(1, 0.0, coef * s * s / 2, s)
        assert float(pf) == pytest.approx(float(sh.attention_flops_prefill(s)), rel=1e-9)
    ctx, _ = cost.windowed(8, 8 * 3000.0, 0.0, 0.0)
    assert float(ctx) == pytest.approx(8 * float(sh.attended_ctx(3000)))
    for b, c in ((1, 100), (16, 5000)):
        exact = combine(decode_pass(rates, b, c)[0], p).total_s[VALUE]
        assert float(cost.time(b, b, b * c)) == pytest.approx(exact, rel=0.03)
    pre = combine(prefill_pass(rates, 1, 4096)[0], p).total_s[VALUE]
    assert float(cost.time(4096, 1, 0, coef * 4096**2 / 2, 4096)) == pytest.approx(pre, rel=0.05)


def test_gpt_oss_serving_fits_more_sequences_and_decodes_long_contexts_faster():
    """The same model priced with every layer at full attention (how it was forecast before)
    holds about half the sequences at 8K and reads 36 layers of KV per token, not 18."""
    cat = get_catalog()
    arch = arch_from_catalog(cat.model("gpt-oss-120b"))
    full = dataclasses.replace(arch, sliding_window=None, full_attention_interval=None)
    kw = dict(tp=2, precision="fp8", input_tokens=8192, output_tokens=1024, catalog=cat)
    a = forecast_inference(arch, "h200", max_throughput=True, **kw)
    b = forecast_inference(full, "h200", max_throughput=True, **kw)
    assert 1.7 < a["max_batch"] / b["max_batch"] < 2.1
    assert a["kv_cache_bytes_per_token"] == b["kv_cache_bytes_per_token"] / 2
    assert a["kv_cache_window_bytes_per_sequence"] > 0 == b["kv_cache_window_bytes_per_sequence"]
    one = forecast_inference(arch, "h200", batch=64, **kw)
    one_full = forecast_inference(full, "h200", batch=64, **kw)
    assert one["tpot_s"] < one_full["tpot_s"]
    assert one["ttft_s"] < one_full["ttft_s"]
    # memory reported for the batch counts the windows
    assert one["memory_per_gpu_bytes"] < one_full["memory_per_gpu_bytes"]
