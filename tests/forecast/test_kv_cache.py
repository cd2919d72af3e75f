"""The one KV-cache formula (gpuplan.catalogs.kv_cache) and the three views that call it."""

from __future__ import annotations

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.catalogs.kv_cache import kv_cache_bytes_per_token
from gpuplan.forecast import model
from gpuplan.forecast.inference_arch import PRECISIONS, Layout, shard
from gpuplan.forecast.model import arch_from, arch_from_catalog


def test_gqa_by_hand() -> None:
    # Llama 3.1 70B: 2 (K and V) x 80 layers x 8 KV heads x 128 x 2 bytes
    got = kv_cache_bytes_per_token(kv_layers=80, kv_heads=8, head_dim=128, bytes_per_element=2)
    assert got == 2 * 80 * 8 * 128 * 2 == 327_680
    assert isinstance(got, float)


def test_mla_caches_latent_and_rope_key_only() -> None:
    # DeepSeek-V3: 61 x (512 + 64) x 1 byte; the 128 heads of 128 do not enter
    got = kv_cache_bytes_per_token(
        kv_layers=61,
        kv_heads=128,
        head_dim=128,
        bytes_per_element=1,
        mla_kv_lora_rank=512,
        mla_qk_rope_head_dim=64,
    )
    assert got == 61 * 576


def test_linear_in_layers_heads_and_bytes() -> None:
    base = dict(kv_layers=4, kv_heads=2, head_dim=64, bytes_per_element=2.0)
    one = kv_cache_bytes_per_token(**base)
    assert kv_cache_bytes_per_token(**{**base, "kv_layers": 8}) == 2 * one
    assert kv_cache_bytes_per_token(**{**base, "kv_heads": 1}) == one / 2
    assert kv_cache_bytes_per_token(**{**base, "bytes_per_element": 1.0}) == one / 2


MODELS = [m.id for m in get_catalog().models]


@pytest.mark.parametrize("model_id", MODELS)
def test_catalog_training_and_inference_views_agree(model_id: str) -> None:
    """The catalog row, the record built from it and the record the serving forecast resolves
    give one KV size: the one formula over the layers that cache K/V (a hybrid's attention
    blocks only; its Mamba blocks keep a state)."""
    row = get_catalog().model(model_id)
    train = arch_from_catalog(row)
    infer = arch_from(row)
    mla = row.mla
    kv_layers = (row.attention_layers or 0) if row.is_hybrid and not mla else row.layers
    expected = kv_cache_bytes_per_token(
        kv_layers=kv_layers,
        kv_heads=row.kv_heads,
        head_dim=row.head_dim,
        bytes_per_element=2,
        mla_kv_lora_rank=mla.kv_lora_rank if mla else None,
        mla_qk_rope_head_dim=mla.qk_rope_head_dim if mla else None,
    )
    assert row.kv_cache_bytes_per_token(2) == expected
    assert model.kv_cache_bytes_per_token(infer, 2.0) == expected
    assert model.kv_cache_bytes_per_token(train, 2.0) == expected
    if row.is_hybrid and not mla:
        assert kv_layers < row.layers


def test_per_gpu_view_uses_the_same_formula() -> None:
    row = get_catalog().model("llama3.1-70b")
    arch = arch_from(row)
    sh = shard(arch, Layout(tp=4, pp=2), PRECISIONS["fp8"])
    # 8 KV heads over TP 4: 2 per GPU; 80 layers over PP 2: 40 per stage; 1-byte FP8 KV
    assert sh.kv_bytes_per_token_per_layer_per_gpu() == 2 * 2 * 128 * 1
    assert sh.kv_bytes_per_token_per_gpu() == 40 * 2 * 2 * 128
    assert sh.kv_bytes_per_token_per_gpu() * 4 * 2 == model.kv_cache_bytes_per_token(arch, 1.0)
