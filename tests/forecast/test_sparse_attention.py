"""DeepSeek Sparse Attention (DeepSeek-V3.2): a lightning indexer scores every cached key
with a few FP8 heads, the MLA attention reads the top 2,048. Its parameters, training
FLOPs, KV cache and serving passes, against the counts written out here."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.errors import InputError
from gpuplan.forecast.inference import device_perf_for, forecast_inference
from gpuplan.forecast.inference_arch import PRECISIONS, Layout, shard
from gpuplan.forecast.inference_step import (
    VALUE,
    DeviceRates,
    OverheadParams,
    StepCostModel,
    combine,
    decode_pass,
    prefill_pass,
)
from gpuplan.forecast.model import ModelArch, arch_from_catalog, model_flops_per_token

CAT = get_catalog()
# one indexer: wq_b 1536 -> 64 x 128, wk 7168 -> 128, k_norm (LayerNorm) 2 x 128,
# weights_proj 7168 -> 64 (github deepseek-ai/DeepSeek-V3.2-Exp inference/model.py Indexer)
INDEXER = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64

V32_CONFIG = {
    "architectures": ["DeepseekV32ForCausalLM"],
    "model_type": "deepseek_v32",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "topk_method": "noaux_tc",
    "n_group": 8,
    "topk_group": 4,
    "index_topk": 2048,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "tie_word_embeddings": False,
}


def _v3() -> ModelArch:
    return arch_from_catalog(CAT.model("deepseek-v3"))


def _v32() -> ModelArch:
    return arch_from_catalog(CAT.model("deepseek-v3.2"))


def test_the_indexer_adds_its_weights_to_every_layer():
    assert CAT.model("DeepSeek-V3.2-Exp").id == "deepseek-v3.2"
    assert _v32().params_total() - _v3().params_total() == 61 * INDEXER
    assert _v32().params_active() - _v3().params_active() == 61 * INDEXER
    assert CAT.model("deepseek-v3.2").params_total() == _v32().params_total()


def test_training_flops_read_the_topk_and_score_every_key():
    """Per token at s = 8192: 6 N (the indexer's weights included) plus three times the
    forward attention of 61 layers, MLA over min(s, 2048) keys and the indexer's QK over s."""
    s = 8192
    v32 = _v32()
    n = v32.matmul_params_active()
    mla = 2.0 * 2048 * 128 * (192 + 128)
    index = 2.0 * s * 64 * 128
    assert float(model_flops_per_token(v32, s)) == pytest.approx(6 * n + 3 * 61 * (mla + index))
    # short sequences: every key is in the top 2,048, and the indexer still runs
    dense = dataclasses.replace(v32, dsa=None)
    gap = float(model_flops_per_token(v32, 1024) - model_flops_per_token(dense, 1024))
    assert gap == pytest.approx(6 * 61 * INDEXER + 3 * 61 * 2.0 * 1024 * 64 * 128)


def test_the_kv_cache_holds_the_indexer_keys():
    """Per token and layer, MLA's latent (512 + 64 at FP8) on every TP rank, and the
    indexer's 128 FP8 values with one fp32 scale."""
    sh = shard(_v32(), Layout(tp=8), PRECISIONS["fp8"])
    assert sh.kv_bytes_per_token_per_gpu() == 61 * (576 + 132)
    assert sh.model_kv_bytes_per_token() == 61 * (576 + 132)
    assert sh.kv_window is None and sh.window == 2048.0


def test_decode_reads_the_topk_latents_and_every_indexer_key():
    sh = shard(_v32(), Layout(tp=8), PRECISIONS["fp8"])
    ctx = 32768
    assert sh.decode_kv_read_bytes(4, ctx) == 4 * (2048 * 576 + ctx * 132) * 61
    full = shard(_v3(), Layout(tp=8), PRECISIONS["fp8"])
    assert full.decode_kv_read_bytes(4, ctx) == 4 * ctx * 576 * 61
    assert sh.decode_attention_flops(4, ctx) == pytest.approx(
        4 * 2048 * full.attention_flops_decode_per_ctx_token()
    )
    assert sh.index_flops_per_ctx_token() == 2 * 64 * 128 * 61
    # prefill: MLA over min(i, 2048) keys, the indexer over every causal pair
    s = 8192
    pairs_mla = 2048**2 / 2 + 2048 * (s - 2048)
    assert float(sh.attention_flops_prefill(s)) == pytest.approx(
        float(full.attention_flops_prefill(1.0)) * 2 * pairs_mla
    )
    assert float(sh.index_flops_prefill(s)) == pytest.approx(2 * 64 * 128 * 61 * s * s / 2)


@pytest.fixture(scope="module")
def rates():
    gpu = CAT.accelerator("h200")
    sh = shard(_v32(), Layout(tp=8), PRECISIONS["fp8"])
    return DeviceRates(device_perf_for(gpu.id), gpu, sh)


def test_the_simulation_cost_model_prices_the_indexer_like_the_passes(rates):
    p = OverheadParams(roofline_sharpness=3.0)
    cost = StepCostModel.build(rates, p, max_tokens=9000, typical_prompt=4096)
    for b, ctx in ((1, 500), (16, 4096), (64, 30000)):
        exact = combine(decode_pass(rates, b, ctx)[0], p).total_s[VALUE]
        assert float(cost.time(b, b, b * ctx)) == pytest.approx(exact, rel=0.05)
    pre = combine(prefill_pass(rates, 1, 4096)[0], p).total_s[VALUE]
    coef = float(rates.sharded.attention_flops_prefill(1.0)) * 2
    assert float(cost.time(4096, 1, 0, coef * 4096**2 / 2, 4096)) == pytest.approx(pre, rel=0.05)


def test_long_context_decode_is_cheaper_than_dense_mla(rates):
    """At 32K of context a decode step of 32 sequences reads a quarter of V3's KV and takes
    less attention time; at 1K (inside the top 2,048) the indexer only adds."""
    dense = DeviceRates(rates.perf, rates.gpu, shard(_v3(), Layout(tp=8), PRECISIONS["fp8"]))
    p = OverheadParams()
    long = combine(decode_pass(rates, 32, 32768)[0], p)
    long_dense = combine(decode_pass(dense, 32, 32768)[0], p)
    assert long.attention_s[VALUE] < 0.6 * long_dense.attention_s[VALUE]
    short = combine(decode_pass(rates, 32, 1024)[0], p)
    short_dense = combine(decode_pass(dense, 32, 1024)[0], p)
    assert short.attention_s[VALUE] > short_dense.attention_s[VALUE]


def test_data_parallel_attention_serves_long_prompts_faster_than_v3():
    """With attention data-parallel (each GPU its own sequences, the indexer not repeated on
    every TP rank) V3.2 beats V3 at 32K prompts on TTFT and TPOT."""
    kw = dict(gpu="h200", tp=1, ep=8, precision="fp8", input_tokens=32768, output_tokens=1024,
              batch=16, catalog=CAT)  # fmt: skip
    a = forecast_inference("deepseek-v3.2", **kw)
    b = forecast_inference("deepseek-v3", **kw)
    assert a["ttft_s"] < b["ttft_s"] and a["tpot_s"] < b["tpot_s"]


def test_a_dsa_config_json_reads_as_the_catalog_row(run_cli, tmp_path):
    from gpuplan.cli._model import _hf_to_model

    rec = _hf_to_model(dict(V32_CONFIG), "config.json")
    rec.pop("extra")
    m = ModelArch(**rec)
    assert m.dsa == _v32().dsa
    assert m.params_total() == _v32().params_total()
    shared = dict(V32_CONFIG, index_topk_freq=4)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(shared))
    r = run_cli("forecast", "infer", "--model-file", str(path), "--gpu", "h200", "--tp", "8")
    assert r.returncode == 2 and "index_topk_freq" in r.stderr
    assert "Traceback" not in r.stderr


def test_dsa_needs_mla():
    with pytest.raises(InputError, match="MLA"):
        ModelArch(
            layers=2, hidden=64, heads=4, ffn_hidden=256, vocab=10,
            dsa={"indexer_heads": 4, "indexer_head_dim": 16, "topk": 8},
        )  # fmt: skip
