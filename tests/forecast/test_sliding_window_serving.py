"""Sliding-window attention in serving (gpt-oss's alternating 128-token windows, Gemma 3's
5 local : 1 global): a window layer keeps and reads at most its window of KV, and its
prefill attention is linear in the prompt beyond the window."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuplan.catalogs.catalog import get_catalog
from gpuplan.errors import InputError
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
    assert sh.window_kv_bytes_per_token_gpu() == 18 * per_layer


def test_a_short_sequence_holds_only_its_own_tokens_in_the_window():
    """The memory plan and the simulation's pool charge a sequence min(length, window) in
    the local layers: Gemma 2's 4,096-token window is not reserved for a 1,000-token chat."""
    from gpuplan.forecast.inference_arch import MemoryPlan

    arch = arch_from_catalog(get_catalog().model("gemma2-9b"))
    sh = shard(arch, Layout(), PRECISIONS["bf16"])
    kv, wkv = sh.kv_bytes_per_token_per_gpu(), sh.window_kv_bytes_per_token_gpu()
    assert kv == wkv  # 21 global and 21 local layers
    mp = MemoryPlan(40e9, 40e9, 0.0, 0.0, kv, 0.0, wkv, 4096.0)
    assert mp.max_batch(1000) == int(40e9 // (1000 * kv + 1000 * wkv))
    assert mp.max_batch(8000) == int(40e9 // (8000 * kv + 4096 * wkv))
    assert mp.breakdown(8000.0, 1.0)["kv_cache"] == 8000 * kv + 4096 * wkv


def test_a_model_without_windows_is_unchanged():
    sh = shard(FULL, Layout(), PRECISIONS["bf16"])
    assert sh.window is None and sh.local_attention_fraction == 0.0
    assert sh.attended_ctx(5000) == 5000
    assert sh.window_kv_bytes_per_token_gpu() == 0.0 and sh.kv_window is None
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


# ---- chunked local attention (Llama 4) ------------------------------------------------------
CHUNKED = dataclasses.replace(
    FULL, name="chunked", attention_chunk=1024, full_attention_interval=3
)  # 2 of 6 layers global, 4 attend within chunks of 1,024 tokens


def test_chunked_pairs_are_a_causal_square_per_chunk():
    sh = shard(CHUNKED, Layout(), PRECISIONS["bf16"])
    for s, c in ((500, 0), (3000, 0), (700, 900), (2048, 4096)):
        # position i (1-based) of a chunked layer sees the (i-1) mod C earlier keys of its
        # chunk plus itself; the continuous count is the area under x mod C
        x = np.arange(c, c + s, dtype=float)
        lo, hi = x, x + 1
        local = np.where(np.floor(hi / 1024) > np.floor(lo / 1024), 0.5, np.mod(lo, 1024) + 0.5)
        expected = (2 * _brute_pairs(s, c, None) + 4 * local.sum()) / 6
        assert float(sh.causal_pairs(s, c)) == pytest.approx(expected, rel=2e-3)
    assert sh.kv_window == 1024.0 and sh.chunk == 1024.0 and sh.window is None


def test_a_chunked_decode_reads_the_open_chunk():
    sh = shard(CHUNKED, Layout(), PRECISIONS["bf16"])
    assert float(sh.attended_ctx(1500)) == pytest.approx((2 * 1500 + 4 * (1500 - 1024)) / 6)
    assert float(sh.attended_ctx(800)) == 800
    # averaged over a request's decode from 1,024 to 2,048: the open chunk grows 0 -> 1,024
    assert float(sh.attended_ctx(1536, 512)) == pytest.approx((2 * 1536 + 4 * 512) / 6)
    ctxs = np.arange(900, 1900)
    brute = np.mean([(2 * c + 4 * (c if c <= 1024 else c % 1024)) / 6 for c in ctxs])
    assert float(sh.attended_ctx(1400, 500)) == pytest.approx(brute, rel=2e-3)


def test_chunked_training_flops_count_each_chunk():
    s = 3000.0
    keys = float(CHUNKED.attention_keys_per_query(s))
    # 2 full layers at s, 4 chunked at 2 P(s) / s with P = 2 x 1024^2/2 + 952^2/2
    p = 2 * 1024**2 / 2 + 952**2 / 2
    assert keys == pytest.approx((2 * s + 4 * 2 * p / s) / 6)
    assert float(CHUNKED.attention_keys_per_query(800)) == 800


def test_llama4_keeps_a_chunk_of_kv_in_three_of_four_layers():
    arch = arch_from_catalog(get_catalog().model("llama4-scout"))
    sh = shard(arch, Layout(tp=4), PRECISIONS["fp8"])
    per_layer = 2 * (8 // 4) * 128 * 1.0
    assert sh.kv_bytes_per_token_per_gpu() == 12 * per_layer
    assert sh.window_kv_bytes_per_seq_gpu() == 36 * per_layer * 8192


def test_step_cost_model_prices_chunks_like_the_passes():
    rates, _ = rates_for(arch=CHUNKED)
    p = OverheadParams(roofline_sharpness=3.0)
    cost = StepCostModel.build(rates, p, max_tokens=9000, typical_prompt=2048)
    for b, m in ((4, 300), (16, 3000)):
        # the cost model takes the rows' contexts as spread evenly over [0, 2m]
        exact = combine(decode_pass(rates, b, m, m)[0], p).total_s[VALUE]
        assert float(cost.time(b, b, b * m)) == pytest.approx(exact, rel=0.03)
    coef = float(rates.sharded.attention_flops_prefill(1.0)) * 2
    for s in (700, 5000):
        _, pf = cost.windowed(1, 0.0, coef * s * s / 2, s)
        assert float(pf) == pytest.approx(float(rates.sharded.attention_flops_prefill(s)))


GPT_OSS_CONFIG = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_hidden_layers": 36,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_local_experts": 128,
    "num_experts_per_tok": 4,
    "vocab_size": 201088,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "attention_bias": True,
    "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
}
LLAMA4_SCOUT_CONFIG = {
    "model_type": "llama4",
    "text_config": {
        "model_type": "llama4_text",
        "hidden_size": 5120,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1,
        "vocab_size": 202048,
        "attention_chunk_size": 8192,
        "no_rope_layers": [1, 1, 1, 0] * 12,
        "tie_word_embeddings": False,
    },
}


def _read(cfg: dict) -> dict:
    from gpuplan.cli._model import _hf_to_model

    return _hf_to_model(dict(cfg), "config.json")


def test_config_json_local_attention_reads_as_the_record():
    rec = _read(GPT_OSS_CONFIG)
    assert (rec["sliding_window"], rec["full_attention_interval"]) == (128, 2)
    rec = _read(LLAMA4_SCOUT_CONFIG)
    assert (rec["attention_chunk"], rec["full_attention_interval"]) == (8192, 4)
    rec.pop("extra")
    scout = arch_from_catalog(get_catalog().model("llama4-scout"))
    assert ModelArch(**rec).params_total() == scout.params_total()  # the shared expert read
    assert ModelArch(**rec).params_active() == scout.params_active()
    newer = {**LLAMA4_SCOUT_CONFIG["text_config"], "no_rope_layers": None}
    newer["layer_types"] = ["chunked_attention"] * 3 + ["full_attention"]
    newer["layer_types"] *= 12
    assert _read(newer)["attention_chunk"] == 8192
    # Qwen2's config carries a sliding_window it does not use
    qwen = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
            "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
            "vocab_size": 151936, "sliding_window": 32768, "use_sliding_window": False}  # fmt: skip
    assert "sliding_window" not in _read(qwen)


def test_irregular_global_layers_are_refused():
    cfg = dict(GPT_OSS_CONFIG)
    cfg["layer_types"] = ["sliding_attention"] * 35 + ["full_attention"]
    cfg["layer_types"][3] = "full_attention"
    with pytest.raises(InputError, match="every N-th layer"):
        _read(cfg)


def test_gemma4_global_layers_of_another_shape_are_refused():
    """Gemma 4 31B's global layers have 4 KV heads of 512 with K shared as V, its local ones
    16 of 256: one head shape per model is what the forecast prices, so it says so."""
    cfg = {"model_type": "gemma4_text", "hidden_size": 5376, "intermediate_size": 21504,
           "num_hidden_layers": 60, "num_attention_heads": 32, "num_key_value_heads": 16,
           "head_dim": 256, "global_head_dim": 512, "num_global_key_value_heads": 4,
           "attention_k_eq_v": True, "vocab_size": 262144, "sliding_window": 1024,
           "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10}  # fmt: skip
    with pytest.raises(InputError, match=r"global_head_dim.*attention_k_eq_v"):
        _read(cfg)
