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
from gpuplan.forecast.hardware import scale_up_domain, server_size, within_node
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


def test_h100_nvl_and_h200_nvl_servers_hold_eight_cards_in_bridged_pairs():
    """Four NVLink-bridged pairs per server (the datasheets' 'up to 8 GPUs', NVIDIA's 2-8-5
    reference configuration): TP up to 8 stays in the server, the pairs over PCIe, and
    DeepSeek-V3 at FP8 (671 GB) is served by one server of H200 NVL, not by pipeline
    stages over three 'nodes' of one pair each."""
    for name in ("h100-nvl-94gb", "h200-nvl-141gb"):
        g = _gpu(name)
        assert scale_up_domain(g) == 2 and server_size(g) == 8
    r = forecast_inference("deepseek-v3", "h200-nvl-141gb", precision="fp8")
    assert (r["tp"], r["pp"]) == (8, 1) and "multi_node" not in r
    assert r["pcie_tp"]["server_gpus"] == 8 and r["pcie_tp"]["scale_up_domain"] == 2


def test_a_machine_smaller_than_the_server_cuts_tp_to_it():
    """within_node: a one-GPU VM of an H100 NVL pair has no NVLink peer; four L40S of a
    g6e.12xlarge reach the others only over the network; a TPU v5e VM of 8 chips is a slice
    of its own; an NVL72 tray of 4 GPUs keeps its rack-wide NVLink domain (the rack is bought
    whole), and a machine as large as the server changes nothing."""
    nvl, l40s, gb200, h100 = (_gpu(n) for n in ("h100-nvl", "l40s", "gb200", "h100"))
    v5e = _gpu("tpu-v5e")
    assert scale_up_domain(v5e) == 256 and scale_up_domain(within_node(v5e, 8)) == 8
    one = within_node(nvl, 1)
    assert (scale_up_domain(one), server_size(one)) == (1, 1)
    assert library_latency(one) is not None  # still priced by its fabric row
    four = within_node(l40s, 4)
    assert (scale_up_domain(four), server_size(four), four.pcie_server_size) == (1, 4, 4)
    assert within_node(gb200, 4) is gb200 and server_size(gb200) == 72
    assert within_node(h100, 8) is h100 and within_node(h100, None) is h100
    r = forecast_inference("llama3.3-70b", "h100-nvl", precision="fp8", node_gpus=1)
    assert (r["tp"], r["pp"]) == (1, 1)
    r = forecast_inference("llama3.3-70b", "h100-nvl", precision="bf16", node_gpus=1)
    assert (r["tp"], r["pp"]) == (1, 2) and r["multi_node"]["nodes"] == 2
    with pytest.raises(InputError, match=r"--tp 2 spans 2 machines of 1 GPU\(s\)"):
        forecast_inference("llama3.3-70b", "h100-nvl", precision="fp8", tp=2, node_gpus=1)
    with pytest.raises(InputError, match="node-gpus"):
        forecast_inference("llama3.3-70b", "h100-nvl", precision="fp8", node_gpus=0)
