"""Hybrid Mamba-Transformer models (Nemotron-H): parameters, FLOPs, memory, forecast."""

from __future__ import annotations

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.errors import InputError
from gpuplan.forecast.flops import layer_gemms
from gpuplan.forecast.model import (
    ModelArch,
    arch_from_catalog,
    kv_cache_bytes_per_token,
    model_flops_per_token,
)
from gpuplan.forecast.train import forecast_training

MAMBA = {"heads": 8, "head_dim": 64, "state": 16, "groups": 2, "conv_kernel": 4}
HYB = ModelArch(
    layers=10,
    hidden=512,
    heads=8,
    kv_heads=2,
    ffn_hidden=2048,
    vocab=1000,
    gated_mlp=False,
    mamba_layers=4,
    attention_layers=2,
    mamba=MAMBA,
)


def test_mamba2_mixer_params_by_hand():
    d_in = 8 * 64
    conv = d_in + 2 * 2 * 16
    expected = 512 * (2 * d_in + 2 * 2 * 16 + 8) + conv * 5 + 3 * 8 + d_in + d_in * 512
    assert HYB.mamba_params() == expected
    attn = HYB.attention_params()
    mlp = 2 * 512 * 2048
    assert HYB.layer_params() == 4 * expected + 2 * attn + 4 * mlp + 10 * 512


def test_hybrid_flops_are_the_blocks_matmuls_plus_attention_and_scan():
    s = 4096
    attn_core = 2.0 * s * HYB.heads * (HYB.qk_head_dim + HYB.v_head_dim)
    scan = 8 * (2 * 128 * (16 + 64) + 4 * 16 * 64)
    expected = 6 * HYB.matmul_params_active() + 3 * (2 * attn_core + 4 * scan)
    assert float(model_flops_per_token(HYB, s)) == pytest.approx(expected)
    # the per-layer GEMMs add up to the blocks' matmul weights (forward: 2 FLOPs each)
    gemm = sum(float(g.flops()) for g in layer_gemms(HYB, 1.0, 1, include_logits=False))
    assert gemm * HYB.layers == pytest.approx(2 * (HYB.layer_params() - 10 * 512), rel=0.01)


def test_kv_cache_only_in_attention_blocks():
    per_layer = 2 * HYB.n_kv_heads * HYB.d_head * 2.0
    assert kv_cache_bytes_per_token(HYB, 2.0) == pytest.approx(2 * per_layer)


def test_hybrid_with_experts_has_moe_blocks_and_no_dense_mlp():
    """Nemotron 3's pattern: the blocks that are neither Mamba-2 nor attention are MoE
    blocks; a leading dense layer is refused (the pattern has no place for it)."""
    kw = dict(layers=4, hidden=64, heads=4, ffn_hidden=64, vocab=10, mamba_layers=2, mamba=MAMBA)
    m = ModelArch(**kw, attention_layers=1, num_experts=4, top_k=1)
    assert (m.num_moe_layers, m.num_dense_mlp_blocks, m.mlp_fraction) == (1, 0, 0.0)
    with pytest.raises(InputError, match="every MLP block"):
        ModelArch(**kw, num_experts=4, top_k=1, first_dense_layers=1)


@pytest.mark.parametrize(
    ("model_id", "published"), [("nemotron-h-56b", 56e9), ("nemotron-h-8b", 8.1e9)]
)
def test_nemotron_h_rows(model_id, published):
    row = get_catalog().model(model_id)
    arch = arch_from_catalog(row)
    assert row.params_total() == arch.params_total() == pytest.approx(published, rel=0.03)
    r = forecast_training(model_id, "h100", 1024, seq_len=8192, global_batch=768, precision="fp8")
    assert r["fits_in_memory"] and 0 < r["mfu"] < 1
