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
    # 48 down / 16 up: leaves = ceil(1024/48) = 22, uplinks 22 x 16 = 352, spines ceil(352/64) = 6.
    assert leaf_ports(64, 3.0) == (48, 16)
    t = design_fat_tree(nodes=128, nics_per_node=8, radix=64, oversubscription=3.0)
    assert (t.tiers, t.leaves, t.spines) == (2, 22, 6)
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
