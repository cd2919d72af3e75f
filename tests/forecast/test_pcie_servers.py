"""PCIe cards in one server (L40S, L4: no NVLink).

Tensor parallelism over the cards of one PCIe server is how TensorRT-LLM's own L40S tables
run (TP 4 and 8 in one system), so it is neither refused nor counted as a second node; its
all-reduces take NCCL's ring over PCIe.
"""

from __future__ import annotations

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.errors import InputError
from gpuplan.forecast.comm import library_latency
from gpuplan.forecast.hardware import scale_up_domain, server_size
from gpuplan.forecast.inference import (
    forecast_inference,
)


def _gpu(name: str):
    return get_catalog().gpu(name)


def test_a_pcie_card_counts_the_cards_of_its_server_as_one_node():
    l40s, h100 = _gpu("l40s"), _gpu("h100")
    assert scale_up_domain(l40s) == 1 and server_size(l40s) == l40s.pcie_server_size == 8
    # NVLink parts keep their scale-up domain as the node
    assert server_size(h100) == scale_up_domain(h100) == 8


def test_tp_inside_an_l40s_server_runs_without_the_cross_node_flag_and_says_pcie():
    r = forecast_inference("llama3.1-70b", "l40s-48gb", precision="fp8", tp=4, batch=8)
    assert r["tp"] == 4 and r["pp"] == 1
    assert "multi_node" not in r and "cross_node_tp" not in r
    info = r["pcie_tp"]
    assert info["server_gpus"] == 8 and info["scale_up_domain"] == 1
    assert "PCIe" in info["note"]


def test_tp_beyond_the_pcie_server_is_refused_naming_the_server():
    with pytest.raises(InputError, match="PCIe server of l40s-48gb is 8 GPUs"):
        forecast_inference("llama3.1-70b", "l40s-48gb", precision="fp8", tp=16, batch=1)


def test_a_model_bigger_than_one_l40s_stays_in_one_server_by_default():
    """Llama 3.1 70B at FP8 (70 GB) on 48 GB cards: TP across the server's cards, not
    pipeline stages on separate one-GPU nodes."""
    r = forecast_inference("llama3.1-70b", "l40s-48gb", precision="fp8")
    assert r["tp"] * r["pp"] <= 8 and r["tp"] >= 2
    assert "multi_node" not in r


def test_pcie_tensor_parallelism_at_batch_1_gets_faster_with_more_cards():
    """Each card streams 1/TP of the weights; the all-reduces are NCCL's LL ring over PCIe
    (base 6.6 us + 2(n-1) hops of 1.0 us + the bytes), not the network's tens of us per
    step, so TP 8 beats TP 4 beats TP 2 at batch 1 (it used to be the reverse)."""
    tpot = {}
    for tp in (2, 4, 8):
        r = forecast_inference("llama3.1-70b", "l40s-48gb", precision="fp8", tp=tp, batch=1)
        tpot[tp] = r["tpot_s"]
        if tp == 8:
            comm = r["breakdown_s"]["decode_step"]["communication"]
            per_allreduce = comm / (2 * 80)  # two all-reduces per layer, 80 layers
            floor = 6.6e-6 + 2 * 7 * 1.0e-6  # NCCL's own model with no bytes
            assert floor < per_allreduce < 3 * floor
    assert tpot[8] < tpot[4] < tpot[2]


def test_the_collective_library_of_a_pcie_card_is_its_host_links():
    lat = library_latency(_gpu("l40s"))
    assert lat is not None and lat.fabric_id == "pcie-gen4-x16"
    assert lat.hop_latency_s == lat.net_hop_latency_s == pytest.approx(1.0e-6)
    assert lat.base_latency_s == pytest.approx(6.6e-6)
    nv = library_latency(_gpu("h100"))
    assert nv is not None and nv.fabric_id == "nvlink4"
