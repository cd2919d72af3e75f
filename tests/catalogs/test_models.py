"""Model architectures: parameter counts against published sizes and hand-computed cases."""

from __future__ import annotations

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.catalogs.params import attention_params
from gpuplan.catalogs.schema import ModelArch

REQUIRED_MODELS = [
    "gpt3-175b",
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3-8b",
    "llama3-70b",
    "llama3.1-8b",
    "llama3.1-70b",
    "llama3.1-405b",
    "llama3.3-70b",
    "llama4-scout",
    "llama4-maverick",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "deepseek-v3",
    "qwen3-8b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "nemotron4-15b",
    "nemotron4-340b",
    "grok-1",
    "mpt-7b",
    "mpt-30b",
    "mpt-70b",
    "gpt-j-6b",
    "mistral-7b",
    "falcon-180b",
]


def test_every_required_model_is_present() -> None:
    ids = {m.id for m in get_catalog().models}
    assert set(REQUIRED_MODELS) <= ids


@pytest.mark.parametrize("model_id", REQUIRED_MODELS)
def test_params_total_within_3pct_of_published(model_id: str) -> None:
    m = get_catalog().model(model_id)
    assert m.params_total() == pytest.approx(m.published_params, rel=0.03)


@pytest.mark.parametrize(
    "model_id", [m for m in REQUIRED_MODELS if get_catalog().model(m).published_active_params]
)
def test_params_active_within_3pct_of_published(model_id: str) -> None:
    m = get_catalog().model(model_id)
    assert m.params_active() == pytest.approx(m.published_active_params, rel=0.03)


def test_dense_models_have_active_equal_total() -> None:
    for m in get_catalog().models:
        if not m.is_moe:
            assert m.params_active() == m.params_total(), m.id
        else:
            assert m.params_active() < m.params_total(), m.id


def _tiny(**kw) -> ModelArch:
    base = dict(
        id="tiny",
        name="tiny",
        family="test",
        source="hand-built test case",
        retrieved="2026-11-30",
        layers=2,
        hidden=8,
        heads=2,
        kv_heads=2,
        ffn_hidden=16,
        vocab=10,
        max_context=32,
        tied_embeddings=False,
        gated_mlp=True,
        attention="mha",
        published_params=1.0,
        published_params_source="hand computation in this test",
    )
    base.update(kw)
    return ModelArch.model_validate(base)


def test_hand_computed_dense_llama_style() -> None:
    # per layer: attention 4*8*8 = 256; gated MLP 3*8*16 = 384; 2 RMSNorms 16 -> 656
    # x2 layers = 1312; embeddings 10*8 = 80; untied head 80; final norm 8 -> 1480
    assert _tiny().params_total() == 1480


def test_hand_computed_gqa_and_moe() -> None:
    m = _tiny(
        heads=4,
        kv_heads=2,
        attention="gqa",
        num_experts=4,
        top_k=1,
        moe_ffn_hidden=4,
        num_shared_experts=1,
        first_dense_layers=1,
    )
    # head_dim 2; attention: q 8*8 + k,v 2*8*4 + o 8*8 = 192; norms 16
    # dense layer: 192 + 16 + 3*8*16 = 592
    # MoE layer: 192 + 16 + 4 experts*3*8*4 (384) + shared 96 + router 8*4 = 720
    # embeddings + head + final norm = 168
    assert m.params_total() == 592 + 720 + 168
    # active: one routed expert (96) instead of four (384)
    assert m.params_active() == 592 + (720 - 384 + 96) + 168


def test_mla_attention_count_matches_deepseek_v3_layout() -> None:
    m = get_catalog().model("deepseek-v3")
    h, a, mla = m.hidden, m.heads, m.mla
    assert mla is not None
    q = h * 1536 + 1536 + 1536 * a * (128 + 64)
    kv = h * (512 + 64) + 512 + 512 * a * (128 + 128)
    o = a * 128 * h
    assert attention_params(m.arch_params()) == q + kv + o
    assert m.moe_layer_indices() == list(range(3, 61))


def test_llama4_maverick_interleaves_moe_layers() -> None:
    m = get_catalog().model("llama4-maverick")
    idx = m.moe_layer_indices()
    assert len(idx) == 24 and idx[:3] == [1, 3, 5]


def test_kv_cache_bytes_per_token() -> None:
    m = get_catalog().model("llama3.1-70b")
    # 2 (K and V) * 80 layers * 8 kv heads * 128 head_dim * 2 bytes
    assert m.kv_cache_bytes_per_token(2) == 2 * 80 * 8 * 128 * 2
    ds = get_catalog().model("deepseek-v3")
    assert ds.kv_cache_bytes_per_token(2) == 61 * (512 + 64) * 2


def test_invalid_architecture_is_rejected() -> None:
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        _tiny(heads=4, kv_heads=3, attention="gqa")
    with pytest.raises(ValueError, match="mla block"):
        _tiny(attention="mla")
