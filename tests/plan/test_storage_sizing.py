"""Storage sizing by hand: 10 PB and a 405B checkpoint (issue 17 item 3, cloud side)."""

from __future__ import annotations

import pytest

from gpuplan.forecast.memory import OPTIMIZER_BYTES_PER_PARAM, WEIGHT_BYTES_PER_PARAM
from gpuplan.plan import storage as st
from gpuplan.plan.provenance import input_fig, missing_fig
from gpuplan.plan.scenario import Checkpointing


def fig(v, unit="x"):
    return input_fig(v, unit, "f", "test")


def test_checkpoint_bytes_per_param_default_is_the_forecasts_weights_plus_optimizer():
    # bf16 weights (2) + fp32 master, m, v (12): the forecast's memory constants
    assert Checkpointing().bytes_per_param == WEIGHT_BYTES_PER_PARAM + OPTIMIZER_BYTES_PER_PARAM


def test_fsx_125_for_10_pb_and_a_405b_checkpoint():
    ckpt = st.checkpoint_bytes(fig(405e9), fig(14.0))
    assert ckpt.value == pytest.approx(5.67e12)  # 405e9 x 14 B
    write = st.write_bandwidth(ckpt, fig(300.0, "s"))
    assert write.value == pytest.approx(18.9e9)  # 5.67 TB in 300 s
    cap = fig(10e15, "B")
    tier = st.StorageTier(
        id="fsx-lustre-persistent2-125",
        name="FSx",
        read_bytes_per_s_per_tib=fig(125e6),
        write_bytes_per_s_per_tib=missing_fig("B/s", "w", "none"),
        min_capacity_bytes=missing_fig("B", "m", "none"),
        max_capacity_bytes=missing_fig("B", "m", "none"),
        increment_bytes=missing_fig("B", "i", "none"),
        price_usd_per_gib_month=missing_fig("USD", "p", "no price"),
    )
    fit = st.fit_tier(tier, capacity=cap, read_bps=fig(1e9), write_bps=write, ckpt=ckpt)
    # 10e15 B = 9094.9 TiB: capacity sizes it; 9094.9 x 125 MB/s = 1.137 TB/s
    assert fit.sized_by == "capacity"
    assert fit.provisioned_bytes.value == pytest.approx(10e15)
    assert fit.write_bytes_per_s.value == pytest.approx(10e15 / 2**40 * 125e6)
    assert fit.checkpoint_write_s.value == pytest.approx(5.67e12 / (10e15 / 2**40 * 125e6))
    assert fit.checkpoint_write_s.value < 300
    assert fit.fits and not fit.usd_per_month.ok
