"""Inference view of a model: KV sizes, sharding, precision rules, expert load (pure)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.inference_arch import (
    PRECISIONS,
    Layout,
    check_serving_layout,
    expected_distinct_experts,
    resolve_precision,
    shard,
)
from gpuplan.forecast.model import arch_from, kv_cache_bytes_per_token

from .test_infer_fakes import DEEPSEEK_MLA, LLAMA70, MIXTRAL, FakeGpu


def test_kv_cache_bytes_per_token_gqa_by_hand():
    # Llama-2-70B: 2 (K and V) x 80 layers x 8 KV heads x 128 x 2 bytes
    assert kv_cache_bytes_per_token(LLAMA70, 2.0) == 2 * 80 * 8 * 128 * 2
    assert kv_cache_bytes_per_token(LLAMA70, 1.0) == 2 * 80 * 8 * 128


def test_kv_cache_mla_is_the_latent_not_per_head():
    # 4 layers x (kv_lora 128 + rope 16) x 2 bytes; MHA with 16 heads of 64 would be 16x more
    assert kv_cache_bytes_per_token(DEEPSEEK_MLA, 2.0) == 4 * (128 + 16) * 2
    sh = shard(DEEPSEEK_MLA, Layout(tp=2), PRECISIONS["bf16"])
    # the latent is replicated on every TP rank
    assert sh.kv_bytes_per_token_per_gpu() == 4 * (128 + 16) * 2


def test_catalog_deepseek_v3_kv_bytes():
    from gpuplan.catalogs import get_catalog

    m = get_catalog().model("deepseek-v3")
    a = arch_from(m)
    assert a.attention == "mla"
    assert kv_cache_bytes_per_token(a, 1.0) == m.layers * (
        m.mla.kv_lora_rank + m.mla.qk_rope_head_dim
    )


def test_kv_heads_replicated_when_fewer_than_tp():
    sh = shard(LLAMA70, Layout(tp=16), PRECISIONS["bf16"])
    assert sh.kv_heads_per_gpu == 1  # 8 KV heads over 16 GPUs: one copy each
    assert sh.q_heads_per_gpu == 4
    sh8 = shard(LLAMA70, Layout(tp=8), PRECISIONS["bf16"])
    assert sh8.kv_bytes_per_token_per_gpu() == sh.kv_bytes_per_token_per_gpu()


def test_weights_per_gpu_match_parameter_count():
    from gpuplan.catalogs import get_catalog

    m = get_catalog().model("llama2-70b")
    a = arch_from(m)
    sh1 = shard(a, Layout(tp=1), PRECISIONS["bf16"])
    # every parameter once, 2 bytes each (norms are not counted: < 0.01%)
    assert sh1.weight_bytes_per_gpu == pytest.approx(2 * m.params_total(), rel=1e-3)
    sh4 = shard(a, Layout(tp=4), PRECISIONS["bf16"])
    assert sh4.weight_bytes_per_gpu == pytest.approx(sh1.weight_bytes_per_gpu / 4, rel=1e-3)
    # fp8 halves the layer weights but keeps embeddings and LM head in bf16
    sh8 = shard(a, Layout(tp=1), PRECISIONS["fp8"])
    emb = sh1.weight_breakdown_bytes["embeddings"]
    assert sh8.weight_breakdown_bytes["embeddings"] == emb
    assert sh8.weight_bytes_per_gpu == pytest.approx((sh1.weight_bytes_per_gpu - emb) / 2 + emb)


def test_moe_weights_count_every_expert():
    sh = shard(MIXTRAL, Layout(tp=2), PRECISIONS["bf16"])
    expert = 3 * 4096 * 14336
    # experts split over the 2 GPUs (2 bytes each); the router is replicated
    experts_bytes = 32 * 8 * expert / 2 * 2
    router_bytes = 32 * 4096 * 8 * 2
    assert sh.weight_breakdown_bytes["mlp"] == pytest.approx(experts_bytes + router_bytes)


def test_quantised_bytes_include_scales():
    assert PRECISIONS["int4"].weight_bytes == pytest.approx(0.5 + 2 / 128)  # fp16 scale per 128
    assert PRECISIONS["fp4"].weight_bytes == pytest.approx(0.5 + 1 / 16)  # fp8 scale per 16
    assert PRECISIONS["int4"].kv_bytes == 2.0  # weight-only: KV stays 16-bit


def test_fp8_refused_where_the_catalog_has_no_fp8_peak():
    a100 = FakeGpu(id="a100-like", peaks={"bf16": 3.12e14, "fp16": 3.12e14, "int8": 6.24e14})
    with pytest.raises(InputError, match=r"no FP8 .* --precision fp8 cannot run") as exc:
        resolve_precision("fp8", a100)
    assert "bf16" in exc.value.hint
    assert resolve_precision("int4", a100).gemm_dtype == "bf16"
    with pytest.raises(InputError, match="FP8 KV cache"):
        resolve_precision("bf16", a100, kv_precision="fp8")


def test_real_a100_refuses_fp8():
    from gpuplan.catalogs import get_catalog

    with pytest.raises(InputError, match="a100"):
        resolve_precision("fp8", get_catalog().gpu("a100"))


def test_unknown_precision_lists_the_choices():
    with pytest.raises(InputError) as exc:
        resolve_precision("fp12", FakeGpu())
    assert "bf16" in exc.value.hint and "int4" in exc.value.hint


def test_expected_distinct_experts():
    # one token touches exactly top_k experts; many tokens touch all of them
    assert float(expected_distinct_experts(8, 2, 1)) == pytest.approx(2.0)
    assert float(expected_distinct_experts(8, 2, 10_000)) == pytest.approx(8.0)
    # two tokens: 8 * (1 - (3/4)^2) = 3.5
    assert float(expected_distinct_experts(8, 2, 2)) == pytest.approx(3.5)
    e = expected_distinct_experts(256, 8, np.arange(1, 200))
    assert np.all(np.diff(e) > 0) and e[-1] < 256


def test_decode_gemms_read_only_touched_experts():
    sh = shard(MIXTRAL, Layout(tp=1), PRECISIONS["bf16"])
    g1 = sh.gemms(1, 1)
    g64 = sh.gemms(64, 64)
    i = g1.names.index("expert_up")
    assert g1.count[i] == pytest.approx(32 * 2)  # 32 MoE layers x top-2 experts
    assert g64.count[i] == pytest.approx(32 * float(expected_distinct_experts(8, 2, 64)))
    assert g1.m[i] == pytest.approx(1.0)  # one token per touched expert


def test_layout_errors_say_what_to_do():
    with pytest.raises(InputError, match="does not divide the 64 attention heads"):
        check_serving_layout(LLAMA70, Layout(tp=3))
    with pytest.raises(InputError, match="needs a mixture-of-experts"):
        check_serving_layout(LLAMA70, Layout(tp=2, ep=2))
    with pytest.raises(InputError, match="must divide both"):
        check_serving_layout(MIXTRAL, Layout(tp=2, ep=4))
    check_serving_layout(MIXTRAL, Layout(tp=4, ep=2))


def test_tp_allreduces_per_layer():
    sh = shard(LLAMA70, Layout(tp=4), PRECISIONS["bf16"])
    assert sh.tp_allreduces_per_pass() == 2 * 80
    par = arch_from({**LLAMA70.__dict__, "parallel_attention": True})
    assert shard(par, Layout(tp=4), PRECISIONS["bf16"]).tp_allreduces_per_pass() == 80
    assert shard(LLAMA70, Layout(tp=1), PRECISIONS["bf16"]).tp_allreduces_per_pass() == 0


def test_arch_from_catalog_row_and_dict_agree():
    from gpuplan.catalogs import get_catalog

    m = get_catalog().model("mixtral-8x7b")
    a = arch_from(m)
    assert a.is_moe and a.num_moe_layers == 32 and a.top_k == 2
    b = arch_from(
        {
            k: getattr(m, k)
            for k in (
                "layers",
                "hidden",
                "heads",
                "kv_heads",
                "ffn_hidden",
                "vocab",
                "num_experts",
                "top_k",
                "moe_ffn_hidden",
            )
        }
    )
    assert b.num_moe_layers == a.num_moe_layers and b.d_head == a.d_head == 128
    with pytest.raises(InputError, match="incomplete"):
        arch_from({"layers": 2})
