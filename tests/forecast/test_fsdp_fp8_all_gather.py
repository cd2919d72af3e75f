"""FSDP/ZeRO-3 with FP8 all-gather (issue 15, item 4).

FSDP2 under a float8 recipe all-gathers the FP8 casts of the transformer blocks' linear
weights (1 byte) instead of BF16 (PyTorch blog "Supercharging Training using float8 and
FSDP2", 2024; torchao ``enable_fsdp_float8_all_gather``); the embedding and output layer
stay BF16. Only the physics is asserted here: no published throughput is used.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuplan.forecast.memory import param_counts_per_rank
from gpuplan.forecast.model import ModelArch
from gpuplan.forecast.train import forecast_training
from gpuplan.forecast.training import (
    Framework,
    default_constants,
    evaluate_layouts,
    layouts_from_dict,
)

from .test_train_fakes import fake_hardware

ARCH = ModelArch(layers=8, hidden=1024, heads=8, ffn_hidden=4096, vocab=32000)
FSDP = dict(tp=1, pp=1, cp=1, ep=1, dp=16, vp=1, micro_batch=1, recompute=0, zero=3)


def _eval(precision: str, *, fp8_gather: bool = True, layout: dict | None = None):
    return evaluate_layouts(
        ARCH,
        fake_hardware(node_size=8),
        layouts_from_dict(layout or FSDP),
        seq_len=2048,
        global_batch=64,
        precision=precision,
        framework=Framework(fp8_param_gather=fp8_gather),
        constants=default_constants(),
    )


def _gather_bytes(res) -> float:
    return float(np.asarray(res["dp_comm_bytes"]["param_gather"]).reshape(-1)[0])


def test_fp8_all_gather_sends_half_the_bf16_bytes_of_the_blocks():
    counts = param_counts_per_rank(ARCH, 1, 1, 1)
    emb = 2 * 32000 * 1024  # untied input embedding + output layer, kept in BF16
    blocks = float(counts["dense"]) - emb
    bf16 = _gather_bytes(_eval("bf16"))
    fp8 = _gather_bytes(_eval("fp8"))
    assert bf16 == pytest.approx(2.0 * (blocks + emb))
    assert fp8 == pytest.approx(1.0 * blocks + 2.0 * emb)
    # the transformer blocks' share is exactly half
    assert (fp8 - 2.0 * emb) == pytest.approx((bf16 - 2.0 * emb) / 2.0)


def test_fp8_all_gather_only_with_fsdp_and_when_on():
    assert _gather_bytes(_eval("fp8", fp8_gather=False)) == pytest.approx(
        _gather_bytes(_eval("bf16"))
    )
    z1 = {**FSDP, "zero": 1}
    assert _gather_bytes(_eval("fp8", layout=z1)) == pytest.approx(
        _gather_bytes(_eval("bf16", layout=z1))
    )


def test_fp8_all_gather_never_slower_and_exposes_less():
    on = _eval("fp8")
    off = _eval("fp8", fp8_gather=False)
    a = float(np.asarray(on["breakdown_s"]["dp_comm_exposed"])[0, 0])
    b = float(np.asarray(off["breakdown_s"]["dp_comm_exposed"])[0, 0])
    assert a <= b
    assert float(np.asarray(on["step_time_s"])[0, 0]) <= float(np.asarray(off["step_time_s"])[0, 0])


def test_fsdp_fp8_gains_over_bf16_for_405b_on_128_h100():
    """Llama 3 405B, FSDP + TP8 on 128 H100 (layout only; throughput not compared with any
    published figure): FP8 is faster than BF16, and the FP8 all-gather is part of the gain."""
    kw = dict(
        seq_len=8192, global_batch=128, fsdp=True, parallelism=dict(tp=8, cp=1, micro_batch=1)
    )
    bf16 = forecast_training("llama3.1-405b", "h100", 128, precision="bf16", **kw)
    fp8 = forecast_training("llama3.1-405b", "h100", 128, precision="fp8", **kw)
    fp8_no_gather = forecast_training(
        "llama3.1-405b",
        "h100",
        128,
        precision="fp8",
        framework=Framework(fp8_param_gather=False),
        **kw,
    )
    assert fp8["provenance"]["fsdp_fp8_all_gather"] is True
    # 405B's blocks dominate its bytes: the gather is just over half of BF16's
    ratio = fp8["dp_comm_bytes"]["param_gather"] / bf16["dp_comm_bytes"]["param_gather"]
    assert 0.5 < ratio < 0.52
    assert fp8["tokens_per_s_per_gpu"] > fp8_no_gather["tokens_per_s_per_gpu"]
    assert fp8["tokens_per_s_per_gpu"] > 1.1 * bf16["tokens_per_s_per_gpu"]
    assert (
        fp8["memory_breakdown_bytes"]["zero3_buffers"]
        < bf16["memory_breakdown_bytes"]["zero3_buffers"]
    )
