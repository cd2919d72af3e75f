"""The inference forecast orders GPUs and layouts as their bandwidth and FLOPs do (issue 16)."""

from __future__ import annotations

import pytest

from gpuplan.forecast.inference import forecast_inference


def _tpot(gpu: str, tp: int, **kw) -> dict:
    return forecast_inference("llama3.3-70b", gpu, tp=tp, batch=1, **kw)


def test_b200_decodes_faster_than_h100_at_batch_1():
    b200, h100 = _tpot("b200", 8), _tpot("h100", 8)
    assert b200["tpot_s"] < h100["tpot_s"]


def test_mi300x_tp8_decodes_faster_than_tp1_for_llama_70b():
    tp8, tp1 = _tpot("mi300x", 8), _tpot("mi300x", 1)
    assert tp8["tpot_s"] < tp1["tpot_s"]
    # batch 1 with TP 8 is not communication-bound: 160 small all-reduces per step on RCCL
    step = tp8["breakdown_s"]["decode_step"]
    assert step["communication"] < 0.5 * step["total"]
    assert tp8["bottleneck"] != "communication"
    per_allreduce = step["communication"] / (2 * 80)
    assert 10e-6 <= per_allreduce <= 30e-6


@pytest.mark.parametrize("gpu", ["h100", "h200", "b200", "mi300x"])
def test_tp_all_reduce_at_batch_1_costs_microseconds(gpu):
    r = _tpot(gpu, 8)
    per_allreduce = r["breakdown_s"]["decode_step"]["communication"] / (2 * 80)
    assert per_allreduce < 30e-6
