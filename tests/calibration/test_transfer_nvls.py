"""Transfer of NVLS (in-switch reduction) all-reduce bandwidth between GPU architectures."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan.calibration import models as M
from gpuplan.calibration.specs import device_specs


@pytest.fixture(scope="module")
def specs(catalog):
    return device_specs(catalog)


def _measured(fraction: float, link: float) -> dict:
    return {
        "basis": "measured",
        "fraction": fraction,
        "latency_fitted": True,
        "coefficients": {"alpha_s": 20e-6, "bandwidth_bytes_per_s": fraction * link},
    }


def test_fabric_rows_carry_the_library_efficiency_with_its_source(catalog, specs):
    for fabric_id, eff in (("nvlink4", 0.85), ("nvlink5", 0.74), ("nvlink5-nvl72", 0.74)):
        fabric = catalog.fabric(fabric_id)
        assert fabric.in_network_reduction_efficiency == eff
        assert "NVIDIA/nccl src/tuning/nvls.cc" in fabric.source
    assert specs["h100-sxm5-80gb"].in_switch_reduction_efficiency == 0.85
    assert specs["h200-sxm-141gb"].in_switch_reduction_efficiency == 0.85
    assert specs["b200-sxm-180gb"].in_switch_reduction_efficiency == 0.74
    assert specs["gb200-gpu-186gb"].in_switch_reduction_efficiency == 0.74
    # no in-switch reduction, no efficiency
    assert specs["a100-sxm4-80gb"].in_switch_reduction_efficiency is None
    assert specs["mi300x"].in_switch_reduction_efficiency is None


def test_nvls_fraction_is_transferred_through_the_library_efficiency(specs):
    h100, b200 = specs["h100-sxm5-80gb"], specs["b200-sxm-180gb"]
    state = {("h100-sxm5-80gb", "all_reduce", "nvls"): _measured(1.04, h100.link_bandwidth())}
    entry = M.entries_collective_intra(state, specs, "b200-sxm-180gb", "all_reduce")["nvls"]
    assert entry["basis"] == "transferred"
    assert entry["fraction"] == pytest.approx(1.04 * 0.74 / 0.85)
    assert entry["transfer"]["library_efficiency"] == 0.74
    assert entry["coefficients"]["bandwidth_bytes_per_s"] == pytest.approx(
        1.04 * 0.74 / 0.85 * b200.link_bandwidth()
    )
    # the interval moves with the centre: its relative width is unchanged
    low, high = entry["interval"]
    assert low < 1.0 < high


def test_same_architecture_transfer_is_unchanged_by_the_efficiency(specs):
    h100 = specs["h100-sxm5-80gb"]
    state = {("h100-sxm5-80gb", "all_reduce", "nvls"): _measured(1.04, h100.link_bandwidth())}
    entry = M.entries_collective_intra(state, specs, "h200-sxm-141gb", "all_reduce")["nvls"]
    assert entry["fraction"] == pytest.approx(1.04)


def test_raw_fractions_are_pooled_when_an_efficiency_is_unknown(specs):
    h100 = specs["h100-sxm5-80gb"]
    unknown = dict(specs)
    unknown["b200-sxm-180gb"] = replace(
        specs["b200-sxm-180gb"], in_switch_reduction_efficiency=None
    )
    state = {("h100-sxm5-80gb", "all_reduce", "nvls"): _measured(1.04, h100.link_bandwidth())}
    entry = M.entries_collective_intra(state, unknown, "b200-sxm-180gb", "all_reduce")["nvls"]
    assert entry["fraction"] == pytest.approx(1.04)
    assert "library_efficiency" not in entry["transfer"]
    # ring has no library efficiency: the ring fraction transfers as it is
    state[("a100-sxm4-80gb", "all_reduce", "ring")] = _measured(0.76, 300e9)
    ring = M.entries_collective_intra(state, specs, "b200-sxm-180gb", "all_reduce")["ring"]
    assert ring["fraction"] == pytest.approx(0.76)
