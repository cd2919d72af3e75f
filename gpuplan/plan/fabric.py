"""Scale-out fabric: a folded-Clos fat tree (classic or rail-optimised) from switch radix.

Method
------
The fabric is a folded Clos network (Leiserson 1985, "Fat-trees"; the k-ary fat tree of
Al-Fares, Loukissas and Vahdat 2008, "A scalable, commodity data center network
architecture", SIGCOMM, section 3). With switches of radix ``k`` (ports at the NIC's rate):

* a **leaf** has ``d`` ports down to NICs and ``u = k - d`` up; with an oversubscription
  (down:up bandwidth) ratio ``r``, ``d = floor(k r / (r + 1))``; ``r = 1`` (non-blocking)
  gives ``d = u = k/2``;
* **one tier**: up to ``k`` endpoints on one switch;
* **two tiers** (leaf-spine): every spine reaches every leaf, so at most ``k`` leaves:
  ``E <= k d`` endpoints (``k^2/2`` non-blocking). Spines = ``ceil(L u / k)``;
* **three tiers**: pods of at most ``k/2`` leaves with their aggregation switches (``k/2``
  down, ``k/2`` up, non-blocking above the leaf), and core switches that reach every pod:
  at most ``k`` pods, ``E <= k (k/2) d`` (``k^3/4`` non-blocking, Al-Fares et al. 2008).
  Aggregation switches per pod = ``ceil(L_pod u / (k/2))``; core = ``ceil(L u / k)``.
* larger than that is not modelled: the design says so (``feasible=False``) and names the
  limit, rather than inventing a fourth tier.

Oversubscription is applied at the leaf only; the tiers above are non-blocking.

Rail-optimised (NVIDIA DGX SuperPOD reference architecture): NIC ``i`` of every node goes to
a leaf of rail ``i``, so same-rank GPUs of different nodes are one hop apart. With at least
``d`` nodes a rail spans ``ceil(nodes / d)`` leaves and leaves = ``R ceil(nodes / d)``; with
fewer nodes a leaf carries ``floor(d / nodes)`` whole rails and leaves =
``ceil(R / floor(d / nodes))``, so two 72-NIC NVL72 racks need 3 leaves of 64 down-ports,
not 72 (one per rail).

Spines: at least ``ceil(L u / k)``, rounded up to the next divisor of the leaf's ``u``
uplinks, so every leaf has the same number of links to every spine. This is how the DGX
SuperPOD tables count: H100 RA Table 4 (radix 64, 32 uplinks per leaf): 1 SU 8 leaf / 4
spine, 3 SU 24 leaf / 16 spine (12 would leave 32 uplinks unevenly spread), 4 SU 32 / 16;
B300-XDR RA Table 3 (radix 144, 72 uplinks): 4 SU 32 leaf / 18 spine, 8 SU 64 / 36.

Links (cables): one per NIC port, ``L u`` leaf-up links, and ``L u`` aggregation-core links
in a three-tier tree. Link media: host links are copper (DAC, or active copper) where the
node and its leaf share a rack, optical otherwise; switch-to-switch links are optical.
Transceivers: one per optical link end, switch ends grouped by the module's ports (a
twin-port 800G OSFP carries two 400G ports: ``ports_per_transceiver=2``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Literal

Topology = Literal["rail_optimized", "fat_tree"]


@dataclass(frozen=True)
class FatTree:
    """Switch, link and transceiver counts of one fabric design.

    Attributes
    ----------
    endpoints:
        NIC ports attached to the fabric (nodes x NICs per node).
    radix:
        Switch ports at the NIC rate.
    down_ports_per_leaf, up_ports_per_leaf:
        Leaf port split from the oversubscription ratio.
    tiers:
        1, 2 or 3 (0 when not feasible).
    leaves, spines, cores:
        Switch counts per tier: ``spines`` are the second tier (aggregation in a three-tier
        tree), ``cores`` the third.
    pods:
        Pods of a three-tier tree (1 otherwise).
    host_links, switch_links:
        Node-to-leaf cables and switch-to-switch cables.
    host_links_copper, host_links_optical:
        The host links by medium (DAC/active copper within a rack, optics between racks).
    transceivers:
        Optical modules: NIC ends of optical host links plus switch ends.
    switch_ports_used:
        Ports in use over all switches.
    max_endpoints:
        Largest endpoint count of this radix/oversubscription at this number of tiers.
    feasible, reason:
        False with the reason when the endpoint count exceeds a three-tier tree.
    """

    endpoints: int
    radix: int
    oversubscription: float
    topology: str
    down_ports_per_leaf: int
    up_ports_per_leaf: int
    tiers: int
    leaves: int
    spines: int
    cores: int
    pods: int
    host_links: int
    switch_links: int
    transceivers: int
    switch_ports_used: int
    max_endpoints: int
    feasible: bool = True
    reason: str | None = None
    host_links_copper: int = 0
    host_links_optical: int = 0

    @property
    def switches(self) -> int:
        return self.leaves + self.spines + self.cores

    @property
    def links(self) -> int:
        return self.host_links + self.switch_links

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out["switches"] = self.switches
        out["links"] = self.links
        return out


def leaf_ports(radix: int, oversubscription: float) -> tuple[int, int]:
    """Split a leaf's ports into (down, up) for a down:up ratio ``oversubscription``.

    >>> leaf_ports(64, 1.0)
    (32, 32)
    >>> leaf_ports(64, 3.0)
    (48, 16)
    """
    if radix < 2:
        raise ValueError("a switch needs at least 2 ports")
    if oversubscription < 1:
        raise ValueError("oversubscription is down:up >= 1")
    down = math.floor(radix * oversubscription / (oversubscription + 1) + 1e-9)
    down = min(max(down, 1), radix - 1)
    return down, radix - down


def spines_for(leaves: int, up_ports_per_leaf: int, radix: int) -> int:
    """Spine switches above ``leaves``: at least ``ceil(leaves x up / radix)``, rounded up to
    a divisor of ``up`` so each leaf spreads its uplinks evenly (DGX SuperPOD RA tables).

    >>> spines_for(8, 32, 64), spines_for(24, 32, 64), spines_for(32, 72, 144)
    (4, 16, 18)
    """
    need = max(1, math.ceil(leaves * up_ports_per_leaf / radix))
    for s in range(need, up_ports_per_leaf + 1):
        if up_ports_per_leaf % s == 0:
            return s
    return need


def rail_leaves(nodes: int, rails: int, down_ports_per_leaf: int) -> int:
    """Leaves of a rail-optimised tier: whole rails per leaf, or leaves per rail.

    >>> rail_leaves(32, 8, 32), rail_leaves(100, 8, 32), rail_leaves(2, 72, 64)
    (8, 32, 3)
    """
    if nodes >= down_ports_per_leaf:
        return rails * math.ceil(nodes / down_ports_per_leaf)
    return math.ceil(rails / (down_ports_per_leaf // nodes))


def max_endpoints(radix: int, oversubscription: float, tiers: int) -> int:
    """Largest number of endpoints a fat tree of ``tiers`` tiers can connect.

    >>> max_endpoints(64, 1.0, 2), max_endpoints(64, 1.0, 3)
    (2048, 65536)
    """
    down, _ = leaf_ports(radix, oversubscription)
    if tiers == 1:
        return radix
    if tiers == 2:
        return radix * down
    if tiers == 3:
        return radix * (radix // 2) * down
    raise ValueError("tiers is 1, 2 or 3")


def design_fat_tree(
    *,
    nodes: int,
    nics_per_node: int,
    radix: int,
    oversubscription: float = 1.0,
    topology: Topology = "fat_tree",
    host_links_optical: bool = True,
    ports_per_transceiver: int = 1,
    host_links_in_rack: bool = False,
) -> FatTree:
    """Count the switches, links and optics of a fat tree for ``nodes`` x ``nics_per_node``.

    Parameters
    ----------
    nodes:
        Compute nodes on the fabric.
    nics_per_node:
        Scale-out NIC ports per node (rails in a rail-optimised design).
    radix:
        Switch ports at the NIC rate (e.g. 64 for a 64 x 400 Gb/s switch with 400 Gb/s NICs).
    oversubscription:
        Leaf down:up bandwidth ratio; 1 is non-blocking.
    topology:
        ``"fat_tree"`` (NICs fill leaves in order) or ``"rail_optimized"``.
    host_links_optical:
        Optical host links need a transceiver at each end; copper (DAC) needs none.
    ports_per_transceiver:
        Switch ports served by one switch-side module (2 for twin-port OSFP).
    host_links_in_rack:
        The leaf sits in the nodes' rack (a single-rack fabric): host links are copper
        whatever ``host_links_optical`` says, since DAC reaches within a rack.

    Examples
    --------
    Non-blocking two-tier tree of radix-64 switches for 128 nodes x 8 NICs:

    >>> t = design_fat_tree(nodes=128, nics_per_node=8, radix=64)
    >>> (t.tiers, t.leaves, t.spines, t.cores, t.host_links, t.switch_links)
    (2, 32, 16, 0, 1024, 1024)
    """
    if nodes < 1 or nics_per_node < 1:
        raise ValueError("nodes and nics_per_node must be positive")
    if ports_per_transceiver < 1:
        raise ValueError("ports_per_transceiver must be positive")
    endpoints = nodes * nics_per_node
    down, up = leaf_ports(radix, oversubscription)
    optical_hosts = host_links_optical and not host_links_in_rack
    base = functools.partial(
        FatTree,
        endpoints=endpoints,
        radix=radix,
        oversubscription=float(oversubscription),
        topology=topology,
        down_ports_per_leaf=down,
        up_ports_per_leaf=up,
        host_links_copper=0 if optical_hosts else endpoints,
        host_links_optical=endpoints if optical_hosts else 0,
    )

    def optics(host_links: int, switch_links: int) -> tuple[int, int]:
        switch_ports = host_links + 2 * switch_links
        optical_switch_ports = (host_links if optical_hosts else 0) + 2 * switch_links
        nic_end = host_links if optical_hosts else 0
        switch_end = math.ceil(optical_switch_ports / ports_per_transceiver)
        return nic_end + switch_end, switch_ports

    if endpoints <= radix:
        # one switch connects everything without blocking (and is trivially rail-aligned)
        trans, ports = optics(endpoints, 0)
        return base(
            tiers=1,
            leaves=1,
            spines=0,
            cores=0,
            pods=1,
            host_links=endpoints,
            switch_links=0,
            transceivers=trans,
            switch_ports_used=ports,
            max_endpoints=radix,
        )
    if topology == "rail_optimized":
        leaves = rail_leaves(nodes, nics_per_node, down)
    else:
        leaves = math.ceil(endpoints / down)

    uplinks = leaves * up
    if leaves <= radix:
        spines = spines_for(leaves, up, radix)
        trans, ports = optics(endpoints, uplinks)
        return base(
            tiers=2,
            leaves=leaves,
            spines=spines,
            cores=0,
            pods=1,
            host_links=endpoints,
            switch_links=uplinks,
            transceivers=trans,
            switch_ports_used=ports,
            max_endpoints=max_endpoints(radix, oversubscription, 2),
        )

    half = radix // 2
    pods = math.ceil(leaves / half)
    if pods <= radix:
        full_pods, rest = divmod(leaves, half)
        aggs = full_pods * math.ceil(half * up / half)
        if rest:
            aggs += math.ceil(rest * up / half)
        cores = math.ceil(uplinks / radix)
        trans, ports = optics(endpoints, 2 * uplinks)
        return base(
            tiers=3,
            leaves=leaves,
            spines=aggs,
            cores=cores,
            pods=pods,
            host_links=endpoints,
            switch_links=2 * uplinks,
            transceivers=trans,
            switch_ports_used=ports,
            max_endpoints=max_endpoints(radix, oversubscription, 3),
        )

    limit = max_endpoints(radix, oversubscription, 3)
    return base(
        tiers=0,
        leaves=leaves,
        spines=0,
        cores=0,
        pods=pods,
        host_links=endpoints,
        switch_links=0,
        transceivers=0,
        switch_ports_used=0,
        max_endpoints=limit,
        feasible=False,
        reason=(
            f"{endpoints} NIC ports exceed a three-tier fat tree of radix-{radix} switches "
            f"at {oversubscription:g}:1 ({limit} ports)"
        ),
    )


def per_gpu_fabric_bandwidth_bytes_per_s(
    *,
    nic_bandwidth_bits_per_s: float,
    nics_per_node: int,
    gpus_per_node: int,
    oversubscription: float,
) -> tuple[float, float]:
    """Scale-out bandwidth per GPU, per direction: (worst case, best case).

    Best case: traffic that stays under one leaf (or one rail) gets the NIC share,
    ``nics x rate / gpus``. Worst case: traffic crossing the leaf uplinks is divided by the
    oversubscription ratio. Bits are converted to bytes (/8).

    >>> per_gpu_fabric_bandwidth_bytes_per_s(nic_bandwidth_bits_per_s=400e9, nics_per_node=8,
    ...     gpus_per_node=8, oversubscription=2.0)
    (25000000000.0, 50000000000.0)
    """
    best = nic_bandwidth_bits_per_s * nics_per_node / gpus_per_node / 8.0
    return best / oversubscription, best
