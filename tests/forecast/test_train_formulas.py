"""Hand-checked values of the FLOP, parameter, memory and communication formulas."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import gpuplan.forecast.comm as comm
import gpuplan.forecast.flops as flops
import gpuplan.forecast.memory as memory
from gpuplan.errors import InputError
from gpuplan.forecast.flops import layer_gemms, megatron_flops_per_step
from gpuplan.forecast.memory import (
    activation_bytes_per_layer,
    korthikanti_activation_bytes,
    model_state_bytes,
    pipeline_inflight_factor,
)
from gpuplan.forecast.model import ModelArch, hardware_flops_per_token, model_flops_per_token

GPT3 = ModelArch(
    name="gpt3",
    layers=96,
    hidden=12288,
    heads=96,
    ffn_hidden=4 * 12288,
    vocab=51200,
    gated_mlp=False,
    tied_embeddings=True,
    dropout=True,
)
LLAMA405 = ModelArch(
    name="llama405",
    layers=126,
    hidden=16384,
    heads=128,
    kv_heads=8,
    ffn_hidden=53248,
    vocab=128256,
    attention="gqa",
)


@pytest.mark.parametrize("module", [flops, memory, comm])
def test_doctests(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0


def test_parameter_counts_match_published_sizes():
    # GPT-3 175B (Brown et al. 2020): 174.6B with tied embeddings (Narayanan et al. Table 2).
    assert GPT3.params_total() / 1e9 == pytest.approx(174.6, rel=0.003)
    # Llama 3.1 405B (Dubey et al. 2024): 405B.
    assert LLAMA405.params_total() / 1e9 == pytest.approx(405.8, rel=0.002)
    assert LLAMA405.params_active() == LLAMA405.params_total()


def test_moe_counts_only_active_experts():
    moe = ModelArch(
        name="mix",
        layers=32,
        hidden=4096,
        heads=32,
        kv_heads=8,
        ffn_hidden=14336,
        vocab=32000,
        num_experts=8,
        top_k=2,
        attention="gqa",
    )
    # Mixtral 8x7B: 46.7B total, 12.9B active (Jiang et al. 2024, section 2).
    assert moe.params_total() / 1e9 == pytest.approx(46.7, rel=0.01)
    assert moe.params_active() / 1e9 == pytest.approx(12.9, rel=0.01)
    # 6N uses active parameters only.
    n = moe.matmul_params_active()
    assert float(model_flops_per_token(moe, 0)) == pytest.approx(6 * n)
    assert n < 0.3 * moe.params_total()


def test_catalog_models_agree_with_catalog_counts():
    from gpuplan.catalogs import get_catalog
    from gpuplan.forecast.model import arch_from_catalog

    cat = get_catalog()
    for row in cat.models:
        arch = arch_from_catalog(row)
        assert arch.params_total() == pytest.approx(row.params_total(), rel=0.02), row.id
        assert arch.params_active() == pytest.approx(row.params_active(), rel=0.02), row.id


def test_palm_model_flops():
    s = 2048
    n = GPT3.matmul_params_active()
    assert float(model_flops_per_token(GPT3, s)) == 6 * n + 12 * 96 * 12288 * s


def test_full_recompute_adds_a_forward_pass():
    s = 2048
    model = float(model_flops_per_token(GPT3, s))
    hw = float(hardware_flops_per_token(GPT3, s, 2))
    # Full recompute repeats the layers' forward (1/3 of their forward+backward), not the
    # output projection.
    logits = 6 * GPT3.vocab * GPT3.hidden
    assert (hw - model) == pytest.approx((model - logits) / 3, rel=1e-9)
    assert float(hardware_flops_per_token(GPT3, s, 0)) == model
    sel = float(hardware_flops_per_token(GPT3, s, 1))
    assert sel - model == pytest.approx(4 * 96 * 12288 * s)


def test_megatron_eq3_matches_paper_relation():
    # Narayanan et al. 2021 eq. 4: time = 8*T*P/(n*X): eq. 3 per token ~ 8P for large h.
    b, s = 1536, 2048
    f = float(megatron_flops_per_step(b, s, 96, 12288, 51200, full_recompute=True))
    p = 12 * 96 * 12288**2
    assert f / (b * s) == pytest.approx(8 * p * (1 + s / (6 * 12288)), rel=0.005)
    # Paper, section 5.1: GPT-3 on 1024 A100 at 140 TFLOP/s -> about 34 days for 300B tokens.
    days = 8 * 300e9 * 175e9 / (1024 * 140e12) / 86400
    assert days == pytest.approx(34, abs=0.5)


def test_gemm_shapes_shrink_with_tensor_parallelism():
    g1 = {g.name: g for g in layer_gemms(LLAMA405, 8192, 1)}
    g8 = {g.name: g for g in layer_gemms(LLAMA405, 8192, 8)}
    assert float(g1["qkv"].n) == (128 + 2 * 8) * 128
    assert float(g8["qkv"].n) == (128 + 2 * 8) * 128 / 8
    assert float(g8["attn_out"].k) == 16384 / 8
    assert float(g8["mlp_up"].n) == 2 * 53248 / 8
    assert float(g8["mlp_down"].k) == 53248 / 8
    assert float(g8["mlp_down"].m) == float(g1["mlp_down"].m) == 8192
    # FLOPs per rank divide by TP exactly.
    total1 = sum(float(g.flops()) for g in g1.values())
    total8 = sum(float(g.flops()) for g in g8.values())
    assert total8 == pytest.approx(total1 / 8)
    # The per-layer GEMMs account for 2 * (layer params) FLOPs per token.
    layer = sum(float(g.flops()) for g in g1.values() if g.kind != "logits") / 8192
    assert layer == pytest.approx(2 * (LLAMA405.layer_params() / 126 - 2 * 16384), rel=1e-9)


def test_expert_gemms_see_top_k_tokens():
    moe = ModelArch(
        name="m",
        layers=4,
        hidden=1024,
        heads=8,
        ffn_hidden=4096,
        vocab=1000,
        num_experts=16,
        top_k=2,
        moe_ffn_hidden=512,
    )
    g = {x.name: x for x in layer_gemms(moe, 4096, 1, 4)}
    assert float(g["expert_up"].m) == 4096 * 2 * 4 / 16  # tokens per local expert
    assert float(g["expert_up"].count) == 16 / 4  # experts on this rank
    per_token = float(g["expert_up"].flops() + g["expert_down"].flops()) / 4096
    assert per_token == pytest.approx(2 * 2 * 3 * 1024 * 512)  # top_k experts, 3 matrices


def test_mla_attention_parameters():
    mla = dict(
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
    )
    arch = ModelArch(
        name="dsv3",
        layers=61,
        hidden=7168,
        heads=128,
        ffn_hidden=18432,
        vocab=129280,
        attention="mla",
        mla=mla,
        num_experts=256,
        top_k=8,
        num_shared_experts=1,
        moe_ffn_hidden=2048,
        first_dense_layers=3,
    )
    # DeepSeek-V3 report: 671B total, 37B activated (without the MTP module).
    assert arch.params_total() / 1e9 == pytest.approx(671, rel=0.01)
    assert arch.params_active() / 1e9 == pytest.approx(37, rel=0.03)


def test_korthikanti_generalisation_reduces_to_paper():
    s, b, h, a = 2048, 2, 12288, 96
    for t, sp, rc, name in [
        (1, False, 0, "none"),
        (8, False, 0, "none"),
        (8, True, 0, "none"),
        (8, True, 1, "selective"),
        (8, True, 2, "full"),
    ]:
        ours = activation_bytes_per_layer(
            GPT3, s, b, t, 1, rc, sequence_parallel=sp, flash_attention=False
        )
        paper = korthikanti_activation_bytes(s, b, h, a, t, sequence_parallel=sp, recompute=name)
        assert float(ours) == pytest.approx(float(paper)), (t, sp, name)


def test_fp8_and_flash_attention_reduce_activations():
    base = float(activation_bytes_per_layer(LLAMA405, 8192, 1, 8, 1, 0))
    fp8 = float(activation_bytes_per_layer(LLAMA405, 8192, 1, 8, 1, 0, linear_input_bytes=1.0))
    noflash = float(activation_bytes_per_layer(LLAMA405, 8192, 1, 8, 1, 0, flash_attention=False))
    assert fp8 < base < noflash
    cp2 = float(activation_bytes_per_layer(LLAMA405, 8192, 1, 8, 2, 0))
    assert cp2 == pytest.approx(base / 2)


def test_optimizer_states_18_bytes_per_parameter_and_distributed_optimizer():
    arch = ModelArch(name="d", layers=8, hidden=1024, heads=8, ffn_hidden=4096, vocab=1000)
    p = arch.params_total() - arch.hidden  # the final norm is not counted per rank
    st = model_state_bytes(arch, 1, 1, 1, 1, 1, 0)
    total = sum(float(v) for k, v in st.items() if k != "zero3_buffers")
    assert total == pytest.approx(18 * p, rel=1e-3)
    # Megatron-core guide: distributed optimizer with fp32 grads = 6 + 12/d bytes per param.
    d = 8
    st1 = model_state_bytes(arch, 1, 1, 1, d, 1, 1)
    total1 = sum(float(v) for k, v in st1.items() if k != "zero3_buffers")
    assert total1 == pytest.approx((6 + 12 / d) * p, rel=1e-3)
    # 16-bit gradient buffers: 4 + 16/d.
    st2 = model_state_bytes(arch, 1, 1, 1, d, 1, 1, grad_bytes=2.0)
    total2 = sum(float(v) for k, v in st2.items() if k != "zero3_buffers")
    assert total2 == pytest.approx((4 + 16 / d) * p, rel=1e-3)


def test_interleaved_pipeline_memory_factor():
    # Korthikanti et al. 2022 section 4.2.3: first stage holds p micro-batches, times
    # 1 + (p-1)/(p*v) with interleaving.
    assert float(pipeline_inflight_factor(8, 1, 64)) == 8
    assert float(pipeline_inflight_factor(8, 3, 64)) == pytest.approx(8 * (1 + 7 / 24))
    assert float(pipeline_inflight_factor(8, 1, 2)) == 2


def test_model_validation_names_the_field():
    with pytest.raises(InputError, match="layers must be a positive integer"):
        ModelArch(layers=0, hidden=64, heads=4, ffn_hidden=256, vocab=10)
    with pytest.raises(InputError, match="kv_heads=3 must be positive and divide heads=4"):
        ModelArch(layers=2, hidden=64, heads=4, kv_heads=3, ffn_hidden=256, vocab=10)
    with pytest.raises(InputError, match="top_k"):
        ModelArch(layers=2, hidden=64, heads=4, ffn_hidden=256, vocab=10, num_experts=8, top_k=9)


def test_group_ranks_per_node():
    assert float(comm.group_ranks_per_node(8, 1, 8)) == 8
    assert float(comm.group_ranks_per_node(4, 8, 8)) == 1  # DP across nodes when TP fills one
    assert float(comm.group_ranks_per_node(64, 2, 8)) == 4
    assert np.all(comm.group_ranks_per_node(np.array([2, 16]), 1, 8) == np.array([2, 8]))
