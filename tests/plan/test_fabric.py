"""Fat-tree arithmetic on hand-computed cases (radix-64 switches, 400G NICs, one per GPU)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.plan.fabric import (
    design_fat_tree,
    leaf_ports,
    max_endpoints,
    per_gpu_fabric_bandwidth_bytes_per_s,
    rail_leaves,
    spines_for,
)

RA_H100 = (
    "https://docs.nvidia.com/dgx-superpod/reference-architecture-scalable-infrastructure-h100/"
    "latest/network-fabrics.html (Table 4, compute fabric component count)"
)
RA_B200 = (
    "https://docs.nvidia.com/dgx-superpod/reference-architecture-scalable-infrastructure-b200/"
    "latest/dgx-superpod-architecture.html (larger SuperPOD component counts)"
)
RA_B300_XDR = (
    "https://docs.nvidia.com/dgx-superpod/reference-architecture/scalable-infrastructure-b300-xdr/"
    "latest/dgx-superpod-architecture.html (Table 3, compute fabric components)"
)


def test_1024_gpus_two_tier_non_blocking_radix_64():
    # 128 nodes x 8 NICs = 1024 ports. Leaf: 32 down / 32 up. Leaves = 1024/32 = 32.
    # Uplinks = 32 x 32 = 1024; spines = 1024 / 64 = 16. Cables: 1024 host + 1024 up.
    # Optics: optical host links -> 1024 at the NICs + switch ports 1024 + 2 x 1024 = 3072.
    t = design_fat_tree(nodes=128, nics_per_node=8, radix=64, oversubscription=1.0)
    assert (t.tiers, t.leaves, t.spines, t.cores) == (2, 32, 16, 0)
    assert t.switches == 48
    assert (t.host_links, t.switch_links, t.links) == (1024, 1024, 2048)
    assert t.switch_ports_used == 3072
    assert t.transceivers == 1024 + 3072
    assert t.feasible


def test_2048_gpus_is_exactly_the_two_tier_limit():
    # k^2/2 = 64 x 64 / 2 = 2048: 64 leaves (a spine has 64 ports, one per leaf), and
    # 64 x 32 / 64 = 32 spines. Every spine port is used.
    assert max_endpoints(64, 1.0, 2) == 2048
    t = design_fat_tree(nodes=256, nics_per_node=8, radix=64)
    assert (t.tiers, t.leaves, t.spines, t.cores) == (2, 64, 32, 0)
    assert t.switches == 96
    assert (t.host_links, t.switch_links) == (2048, 2048)
    assert t.spines * 64 == t.leaves * t.up_ports_per_leaf  # spines fully used


def test_one_node_past_2048_needs_three_tiers():
    # 257 nodes x 8 = 2056 ports -> ceil(2056/32) = 65 leaves > 64: three tiers.
    # Pods of 32 leaves: 32 + 32 + 1 -> aggregation 32 + 32 + 1 = 65 (one per leaf uplink
    # group of 32); core = ceil(65 x 32 / 64) = 33. Switch links: leaf-agg 2080 + agg-core 2080.
    t = design_fat_tree(nodes=257, nics_per_node=8, radix=64)
    assert (t.tiers, t.leaves, t.spines, t.cores, t.pods) == (3, 65, 65, 33, 3)
    assert t.switch_links == 2 * 65 * 32
    assert t.max_endpoints == 65536


def test_full_three_tier_k_ary_fat_tree_matches_al_fares():
    # Al-Fares et al. 2008: k pods of k/2 edge + k/2 aggregation, (k/2)^2 core, k^3/4 hosts.
    k = 16
    t = design_fat_tree(nodes=k**3 // 4, nics_per_node=1, radix=k)
    assert t.tiers == 3
    assert t.leaves == k * k // 2
    assert t.spines == k * k // 2
    assert t.cores == (k // 2) ** 2
    assert t.pods == k


def test_beyond_three_tiers_is_reported_not_raised():
    t = design_fat_tree(nodes=65537, nics_per_node=1, radix=64)
    assert not t.feasible
    assert t.tiers == 0
    assert "three-tier" in t.reason and "65536" in t.reason


def test_oversubscription_three_to_one():
    # 48 down / 16 up: leaves = ceil(1024/48) = 22, uplinks 22 x 16 = 352, at least
    # ceil(352/64) = 6 spines, rounded up to 8 (a divisor of 16: 2 links from every leaf to
    # every spine; 6 would spread 16 uplinks unevenly).
    assert leaf_ports(64, 3.0) == (48, 16)
    t = design_fat_tree(nodes=128, nics_per_node=8, radix=64, oversubscription=3.0)
    assert (t.tiers, t.leaves, t.spines) == (2, 22, 8)
    assert max_endpoints(64, 3.0, 2) == 64 * 48


def test_rail_optimised_leaves_come_in_whole_rails():
    # 100 nodes, 8 rails: each rail needs ceil(100/32) = 4 leaves -> 32 leaves, where a
    # classic tree packs 800 ports into ceil(800/32) = 25.
    rail = design_fat_tree(nodes=100, nics_per_node=8, radix=64, topology="rail_optimized")
    flat = design_fat_tree(nodes=100, nics_per_node=8, radix=64, topology="fat_tree")
    assert rail.leaves == 32 and flat.leaves == 25
    assert rail.spines == math.ceil(32 * 32 / 64) == 16
    # at 128 nodes (four full scalable units of 32) the two designs coincide
    r128 = design_fat_tree(nodes=128, nics_per_node=8, radix=64, topology="rail_optimized")
    assert (r128.leaves, r128.spines) == (32, 16)


def test_copper_host_links_and_twin_port_optics():
    t = design_fat_tree(
        nodes=128, nics_per_node=8, radix=64, host_links_optical=False, ports_per_transceiver=2
    )
    # only switch-to-switch links are optical: 2 x 1024 ends / 2 ports per module
    assert t.transceivers == 1024


def test_single_switch():
    t = design_fat_tree(nodes=4, nics_per_node=8, radix=64)
    assert (t.tiers, t.switches, t.switch_links) == (1, 1, 0)


def test_per_gpu_bandwidth():
    worst, best = per_gpu_fabric_bandwidth_bytes_per_s(
        nic_bandwidth_bits_per_s=400e9, nics_per_node=8, gpus_per_node=8, oversubscription=1.0
    )
    assert best == worst == 50e9
    worst, best = per_gpu_fabric_bandwidth_bytes_per_s(
        nic_bandwidth_bits_per_s=400e9, nics_per_node=4, gpus_per_node=8, oversubscription=2.0
    )
    assert (worst, best) == (12.5e9, 25e9)


def test_bad_arguments():
    with pytest.raises(ValueError):
        design_fat_tree(nodes=0, nics_per_node=8, radix=64)
    with pytest.raises(ValueError):
        leaf_ports(64, 0.5)


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.integers(1, 4000),
    nics=st.sampled_from([1, 2, 4, 8]),
    radix=st.sampled_from([32, 40, 64, 128]),
    oversub=st.sampled_from([1.0, 2.0, 3.0]),
    topology=st.sampled_from(["fat_tree", "rail_optimized"]),
)
def test_invariants(nodes, nics, radix, oversub, topology):
    t = design_fat_tree(
        nodes=nodes, nics_per_node=nics, radix=radix, oversubscription=oversub, topology=topology
    )
    if not t.feasible:
        assert nodes * nics > max_endpoints(radix, oversub, 3)
        return
    # every NIC port has a leaf port, every uplink a port above it
    assert t.leaves * (t.down_ports_per_leaf if t.tiers > 1 else radix) >= t.endpoints
    if t.tiers >= 2:
        assert t.spines * (radix if t.tiers == 2 else radix // 2) >= t.leaves * t.up_ports_per_leaf
    if t.tiers == 3:
        assert t.cores * radix >= t.leaves * t.up_ports_per_leaf
    assert t.endpoints <= t.max_endpoints
    # one more node never needs fewer switches or cables
    bigger = design_fat_tree(
        nodes=nodes + 1,
        nics_per_node=nics,
        radix=radix,
        oversubscription=oversub,
        topology=topology,
    )
    if bigger.feasible:
        assert bigger.switches >= t.switches
        assert bigger.links >= t.links


# ---- published reference designs ---------------------------------------------------------
# DGX SuperPOD H100 (RA_H100, Table 4): SUs of 32 DGX H100 (one slot per SU given to UFM, so
# 31/63/95/127 nodes), 8 x 400G NICs per node, Quantum-2 QM9700 (64 x NDR 400G), rail-optimised
# non-blocking. (SU count, nodes, leaf, spine, spine-leaf cables); the RA's node-leaf column
# also counts 4 UFM links (252 = 248 + 4), which the planner does not model.
@pytest.mark.parametrize(
    "sus, nodes, leaf, spine, spine_leaf",
    [(1, 31, 8, 4, 256), (2, 63, 16, 8, 512), (3, 95, 24, 16, 768), (4, 127, 32, 16, 1024)],
)
def test_dgx_superpod_h100_compute_fabric(sus, nodes, leaf, spine, spine_leaf):
    t = design_fat_tree(nodes=nodes, nics_per_node=8, radix=64, topology="rail_optimized")
    assert (t.tiers, t.leaves, t.spines, t.cores) == (2, leaf, spine, 0), RA_H100
    assert t.switch_links == spine_leaf
    assert t.host_links == nodes * 8 == leaf * 32 - 8 * (32 * sus - nodes)


# DGX SuperPOD B200 (RA_B200): SUs of 32 DGX B200, QM9700; (SUs, nodes, leaf, spine, core,
# node-leaf, leaf-spine, spine-core). 16 SUs need a third tier.
@pytest.mark.parametrize(
    "nodes, leaf, spine, core, node_leaf, leaf_spine, spine_core",
    [
        (64, 16, 8, 0, 512, 512, 0),
        (128, 32, 16, 0, 1024, 1024, 0),
        (256, 64, 32, 0, 2048, 2048, 0),
        (512, 128, 128, 64, 4096, 4096, 4096),
        (1024, 256, 256, 128, 8192, 8192, 8192),
    ],
)
def test_dgx_superpod_b200_compute_fabric(
    nodes, leaf, spine, core, node_leaf, leaf_spine, spine_core
):
    t = design_fat_tree(nodes=nodes, nics_per_node=8, radix=64, topology="rail_optimized")
    assert (t.leaves, t.spines, t.cores) == (leaf, spine, core), RA_B200
    assert t.host_links == node_leaf
    assert t.switch_links == leaf_spine + spine_core


# DGX SuperPOD B300 XDR (RA_B300_XDR, Table 3): SUs of 72 DGX B300, 8 x 800G XDR NICs per node,
# Quantum-X800 Q3400 switches of 144 x 800G (radix taken from the RA's own counts: 72 nodes per
# rail leaf, 4 spines x 144 ports = 576 uplinks). The 18-SU row (1296 nodes: 144 leaves, 72
# spines) is the same rule.
@pytest.mark.parametrize(
    "nodes, leaf, spine, cables",
    [(72, 8, 4, 576), (144, 16, 8, 1152), (288, 32, 18, 2304), (576, 64, 36, 4608)],
)
def test_dgx_superpod_b300_xdr_compute_fabric(nodes, leaf, spine, cables):
    t = design_fat_tree(nodes=nodes, nics_per_node=8, radix=144, topology="rail_optimized")
    assert (t.tiers, t.leaves, t.spines) == (2, leaf, spine), RA_B300_XDR
    assert t.host_links == t.switch_links == cables


def test_two_nvl72_racks_need_a_handful_of_switches():
    # 2 racks x 72 x 400G NICs = 144 ports on 64-port 800G switches split to 128 x 400G:
    # more than one switch holds (128), so two tiers. Leaf: 64 down / 64 up; a leaf carries
    # floor(64 / 2) = 32 whole rails -> ceil(72 / 32) = 3 leaves (not 72, one per rail);
    # uplinks 3 x 64 = 192 -> ceil(192 / 128) = 2 spines (2 divides 64). 5 switches.
    t = design_fat_tree(
        nodes=2, nics_per_node=72, radix=128, topology="rail_optimized", ports_per_transceiver=2
    )
    assert (t.tiers, t.leaves, t.spines, t.switches) == (2, 3, 2, 5)
    assert (t.host_links, t.switch_links) == (144, 192)
    # optics between racks: 144 NIC-end modules + (144 + 2 x 192) / 2 twin-port switch modules
    assert t.host_links_optical == 144 and t.host_links_copper == 0
    assert t.transceivers == 144 + (144 + 384) // 2 == 408
    # one NVL72 alone fits a single switch: one tier, no spine
    one = design_fat_tree(nodes=1, nics_per_node=72, radix=128, topology="rail_optimized")
    assert (one.tiers, one.switches) == (1, 1)


def test_in_rack_host_links_are_copper():
    # 4 DGX and their leaf in one rack: DAC host links, no transceivers at all (one tier)
    t = design_fat_tree(nodes=4, nics_per_node=8, radix=64, host_links_in_rack=True)
    assert (t.host_links_copper, t.host_links_optical, t.transceivers) == (32, 0, 0)


def test_spines_and_rail_leaves_by_hand():
    assert spines_for(16, 32, 64) == 8
    assert spines_for(22, 16, 64) == 8
    assert spines_for(1, 32, 64) == 1
    assert rail_leaves(16, 8, 32) == 4  # 2 rails per leaf
    assert rail_leaves(33, 8, 32) == 16


@settings(max_examples=100, deadline=None)
@given(
    nodes=st.integers(1, 300),
    rails=st.sampled_from([1, 4, 8, 72]),
    radix=st.sampled_from([64, 128]),
)
def test_more_nodes_never_fewer_rail_leaves(nodes, rails, radix):
    down = radix // 2
    assert rail_leaves(nodes + 1, rails, down) >= rail_leaves(nodes, rails, down)
    assert rail_leaves(nodes, rails, down) * down >= nodes * rails
