"""Fine-grained MoE costs (issue 15): grouped-GEMM tile padding at the per-expert block and
the busiest expert-parallel rank under balanced routing. Properties computed from inputs;
real catalog and shipped calibration (no GPU involved)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.flops import (
    GROUPED_GEMM_TILE_ROWS,
    expert_rank_imbalance,
    grouped_gemm_rows,
)
from gpuplan.forecast.train import forecast_training
from gpuplan.forecast.training import Framework

T = GROUPED_GEMM_TILE_ROWS


def test_padding_never_below_the_rows_and_at_most_a_tile_more():
    m = np.array([1.0, 7.0, 127.0, 128.0, 300.0, 4096.0, 1e5])
    rows = grouped_gemm_rows(m)
    assert np.all(rows >= m)
    assert np.all(rows - m <= T)
    assert np.all(np.diff(rows) > 0)  # more tokens, more rows


def test_padding_from_one_tile_up_is_half_a_tile_on_average():
    for m in (128.0, 1000.0, 65536.0):
        assert float(grouped_gemm_rows(m)) == pytest.approx(m + (T - 1) / 2)
    # a block of a few tokens still costs a whole tile; an empty expert nothing
    assert float(grouped_gemm_rows(4.0)) == pytest.approx(T * (1 - math.exp(-4.0)))
    assert float(grouped_gemm_rows(0.0)) == 0.0


def test_padding_is_continuous_at_one_tile():
    lo, hi = grouped_gemm_rows(np.array([T - 1e-6, T + 1e-6]))
    assert hi - lo == pytest.approx(0.0, abs=1e-3)


@pytest.mark.parametrize("rows", [512.0, 32768.0])
def test_rank_imbalance_grows_with_ep_and_shrinks_with_rows(rows):
    eps = np.array([1, 2, 8, 64, 256])
    imb = expert_rank_imbalance(rows, eps)
    assert imb[0] == 1.0 and np.all(np.diff(imb) > 0)
    assert float(expert_rank_imbalance(4 * rows, 64) - 1) == pytest.approx(
        float(expert_rank_imbalance(rows, 64) - 1) / 2
    )


def test_rank_imbalance_matches_a_simulated_balanced_router():
    """Top-k over uniform random scores (balanced in expectation): the busiest of ep ranks
    over the mean, averaged over trials, within the Gaussian extreme-value approximation."""
    rng = np.random.default_rng(0)
    ep, rows = 16, 4096
    loads = rng.multinomial(rows * ep, np.full(ep, 1.0 / ep), size=400)
    sim = float(np.mean(loads.max(axis=1) / rows))
    assert float(expert_rank_imbalance(rows, ep)) == pytest.approx(sim, rel=0.01)


QWEN = dict(gpu="h100", num_gpus=64, seq_len=4096, global_batch=512)
PAR = {"tp": 1, "pp": 1, "cp": 1, "ep": 8, "vp": 1, "micro_batch": 1, "zero": 1, "recompute": 0}


def test_measured_imbalance_slows_only_the_expert_gemms():
    base = forecast_training("qwen3-30b-a3b", parallelism=PAR, **QWEN)
    skew = forecast_training(
        "qwen3-30b-a3b",
        parallelism=PAR,
        framework=Framework(expert_load_imbalance=1.5),
        **QWEN,
    )
    assert skew["step_time_s"] > base["step_time_s"]
    dense = forecast_training(
        "llama3.1-8b", parallelism={**PAR, "ep": 1}, framework=Framework(expert_load_imbalance=1.5),
        **QWEN,
    )  # fmt: skip
    same = forecast_training("llama3.1-8b", parallelism={**PAR, "ep": 1}, **QWEN)
    assert dense["step_time_s"] == pytest.approx(same["step_time_s"], rel=1e-12)


def test_imbalance_below_one_is_rejected():
    with pytest.raises(InputError, match="expert_load_imbalance must be >= 1"):
        dataclasses.replace(Framework(), expert_load_imbalance=0.8)
