"""Topology-aware collective latency for training (issue 15): NVLink hops and network hops
counted apart, NCCL's tree at log2(N) network levels. Real catalog and shipped calibration
(no GPU involved)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpuplan.forecast import comm
from gpuplan.forecast.hardware import resolve_hardware

LAT = comm.LibraryLatency("nccl", 6.6e-6, 0.6e-6, 2.7e-6, "nvlink4", "NCCL-TUNING")


@pytest.mark.parametrize(("nodes", "g"), [(2, 8), (16, 8), (280, 8), (9, 72)])
def test_tree_pays_the_node_chain_and_log2_network_levels(nodes, g):
    n = nodes * g
    t = comm.library_times(LAT, "all_reduce", 0.0, n, ranks_per_node=g, busbw_bytes_per_s=1e11,
                           custom_allreduce=False, tree=True)  # fmt: skip
    levels = math.ceil(math.log2(nodes))
    assert float(t["tree_ll"]) == pytest.approx(6.6e-6 + 2 * ((g - 1) * 0.6e-6 + levels * 2.7e-6))
    # the ring pays every hop: n - N NVLink hops and N - 1 network hops, twice
    ring = 6.6e-6 + 2 * (n - nodes) * 0.6e-6 + 2 * (nodes - 1) * 2.7e-6
    assert float(t["ring_ll"]) == pytest.approx(ring)


def test_tree_only_across_nodes_and_only_on_request():
    one = comm.library_times(LAT, "all_reduce", 1e6, 8, ranks_per_node=8, busbw_bytes_per_s=1e11,
                             custom_allreduce=False, tree=True)  # fmt: skip
    assert np.isinf(one["tree_ll"])
    off = comm.library_times(LAT, "all_reduce", 1e6, 64, ranks_per_node=8, busbw_bytes_per_s=1e11)
    assert "tree_ll" not in off


def test_doubling_the_nodes_adds_two_network_hops_to_the_tree():
    t = [
        float(comm.library_times(LAT, "all_reduce", 0.0, 8 * k, ranks_per_node=8,
                                 busbw_bytes_per_s=1e11, tree=True)["tree_ll"])
        for k in (64, 128, 256)
    ]  # fmt: skip
    assert np.diff(t) == pytest.approx([2 * 2.7e-6, 2 * 2.7e-6])


@pytest.fixture(scope="module")
def a100():
    return resolve_hardware("a100-80gb")


def test_catalog_gives_the_training_hardware_its_library_constants(a100):
    assert a100.collective_latency is not None
    assert a100.collective_latency.library == "nccl"
    assert a100.collective_latency.net_hop_latency_s > a100.collective_latency.hop_latency_s


@pytest.mark.parametrize("ranks", [16, 512, 2240])
def test_topology_all_reduce_never_slower_than_calibrated(a100, ranks):
    kw = dict(
        ranks_per_node=8, inter_node_bandwidth_bytes_per_s=a100.inter_node_bandwidth_bytes_per_s
    )
    for size in (1e3, 1e6, 1e8):
        cal = comm.collective_time3(a100.perf, "all_reduce", size, ranks, **kw)
        topo = comm.topology_collective_time3(
            a100.perf, a100.collective_latency, "all_reduce", size, ranks, **kw
        )
        assert topo[0] <= cal[0] * (1 + 1e-12)
        assert topo[1] <= topo[0] <= topo[2]


def test_small_all_reduce_at_scale_takes_the_tree(a100):
    """280 nodes: the calibrated alpha is paid on 2 x 279 ring steps; the tree has 2 x 9."""
    kw = dict(
        ranks_per_node=8, inter_node_bandwidth_bytes_per_s=a100.inter_node_bandwidth_bytes_per_s
    )
    cal = comm.collective_time3(a100.perf, "all_reduce", 1e3, 2240, **kw)
    topo = comm.topology_collective_time3(a100.perf, a100.collective_latency, "all_reduce", 1e3,
                                          2240, **kw)  # fmt: skip
    lat = a100.collective_latency
    tree_floor = lat.base_latency_s + 2 * (7 * lat.hop_latency_s + 9 * lat.net_hop_latency_s)
    assert topo[0] < cal[0] / 10
    assert topo[0] >= tree_floor


def test_one_node_and_gathers_keep_the_calibrated_model(a100):
    kw = dict(inter_node_bandwidth_bytes_per_s=a100.inter_node_bandwidth_bytes_per_s)
    inside = comm.topology_collective_time3(a100.perf, a100.collective_latency, "all_reduce", 1e3,
                                            8, ranks_per_node=8, **kw)  # fmt: skip
    assert np.array_equal(
        inside, comm.collective_time3(a100.perf, "all_reduce", 1e3, 8, ranks_per_node=8, **kw)
    )
    ag = comm.topology_collective_time3(a100.perf, a100.collective_latency, "all_gather", 1e8,
                                        2240, ranks_per_node=8, **kw)  # fmt: skip
    assert np.array_equal(
        ag, comm.collective_time3(a100.perf, "all_gather", 1e8, 2240, ranks_per_node=8, **kw)
    )
