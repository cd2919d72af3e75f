"""Sliding-window attention (Gemma 3's 5:1 local/global, GPT-OSS's alternating layers)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.forecast.model import ModelArch, arch_from_catalog, model_flops_per_token
from gpuplan.forecast.train import forecast_training

from .test_train_fakes import fake_hardware

FULL = ModelArch(layers=12, hidden=1024, heads=8, ffn_hidden=4096, vocab=1000)


def test_model_flops_count_attention_over_the_window():
    s, w = 8192, 1024
    local = dataclasses.replace(FULL, sliding_window=w, full_attention_interval=6)
    # 2 of 12 layers global, 10 local: attention term 12*h*(2*s + 10*w) instead of 12*h*12*s
    expected = 6 * FULL.matmul_params_active() + 12 * FULL.hidden * (2 * s + 10 * w)
    assert float(model_flops_per_token(local, s)) == pytest.approx(expected)
    assert float(model_flops_per_token(FULL, s)) == pytest.approx(
        6 * FULL.matmul_params_active() + 12 * FULL.hidden * 12 * s
    )
    # a window as long as the sequence is full attention
    wide = dataclasses.replace(FULL, sliding_window=s)
    assert float(model_flops_per_token(wide, s)) == pytest.approx(
        float(model_flops_per_token(FULL, s))
    )


def test_sliding_window_makes_long_sequences_cheaper_not_free():
    hw = fake_hardware()
    kw = dict(
        num_gpus=8,
        seq_len=32768,
        global_batch=8,
        hardware=hw,
        parallelism=dict(tp=1, pp=1, cp=1, ep=1, vp=1, micro_batch=1, recompute="none", zero=1),
    )
    full = forecast_training(FULL, **kw)
    local = forecast_training(
        dataclasses.replace(FULL, sliding_window=1024, full_attention_interval=6), **kw
    )
    a_full = full["compute_detail_s"]["attention"]
    a_local = local["compute_detail_s"]["attention"]
    # executed work: 2 full layers x s + 10 local x (2w - w^2/s), in the full layers' units
    s, w = 32768.0, 1024.0
    ratio = (2 * s + 10 * (2 * w - w * w / s)) / (12 * s)
    assert a_local == pytest.approx(a_full * ratio, rel=1e-6)
    assert local["step_time_s"] < full["step_time_s"]
    assert np.isclose(local["compute_detail_s"]["gemm"], full["compute_detail_s"]["gemm"])


@pytest.mark.parametrize("model_id", ["gpt-oss-120b", "gemma3-27b"])
def test_catalog_models_with_local_attention_forecast(model_id):
    arch = arch_from_catalog(get_catalog().model(model_id))
    assert 0 < arch.num_local_attention_layers < arch.layers
    r = forecast_training(model_id, "h100", 256, seq_len=8192, global_batch=512)
    assert r["fits_in_memory"] and 0 < r["mfu"] < 1
