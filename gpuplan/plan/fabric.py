"""Scale-out fabric: a folded-Clos fat tree (classic or rail-optimised) from switch radix.

The formulas come first; :func:`build_fabric` (at the end) builds an option's fabric from the
catalog (switch, NICs, optics and their prices) with them and checks the training
forecasts at the fabric's bandwidth.

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
from typing import TYPE_CHECKING, Any, Literal

from gpuplan.catalogs.schema import Node
from gpuplan.plan.context import PlanContext
from gpuplan.plan.provenance import (
    Figure,
    FigureDict,
    Text,
    derived,
    missing_fig,
)

if TYPE_CHECKING:
    from gpuplan.catalogs.schema import Nic, Switch
    from gpuplan.plan.options import Option

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


# ------------------------------------------------------------------ the option's fabric (moved from options.py)


def _pick_switch(ctx: PlanContext, nic_bits: float | None) -> Switch | None:
    cat = ctx.catalog
    want = ctx.scenario.fabric.switch
    if want:
        return cat.switch(want)
    if nic_bits is None:
        return None
    best = None
    for sw in cat.switches:
        radix = _radix_at(sw, nic_bits)
        if radix is None:
            continue
        if best is None or radix > best[0] or (radix == best[0] and sw.id < best[1].id):
            best = (radix, sw)
    return best[1] if best else None


def _radix_at(sw: Switch, nic_bits: float) -> int | None:
    """Ports of ``sw`` at the NIC's rate (its native or split port speed)."""
    if (
        sw.port_bandwidth_bits_per_s
        and sw.ports
        and abs(sw.port_bandwidth_bits_per_s - nic_bits) < 1
    ):
        return int(sw.ports)
    alt = getattr(sw, "alt_port_bandwidth_bits_per_s", None)
    if alt and sw.alt_ports and abs(alt - nic_bits) < 1:
        return int(sw.alt_ports)
    return None


def _node_nics(ctx: PlanContext, opt: Option) -> tuple[Figure, Figure, Nic] | None:
    """(NICs per node, bits/s per NIC, nic row) for the scale-out fabric, or None."""
    cat = ctx.catalog
    p = opt.platform
    want = ctx.scenario.fabric.nic
    if isinstance(p, Node):
        compute = [n for n in p.nics if n.role == "compute"]
        if not compute:
            return None
        entry = compute[0]
        nic = cat.nic(want or entry.nic_id)
        count = ctx.cat(
            "node", p, "nics", "NICs", f"{p.id} compute NICs per node", value=entry.count
        )
        bw = ctx.cat("nic", nic, "bandwidth_bits_per_s", "bit/s", f"{nic.id} bandwidth")
        return count, bw, nic
    if p.nic_id and getattr(p, "nics_per_node", None):
        nic = cat.nic(want or p.nic_id)
        count = ctx.cat("instance", p, "nics_per_node", "NICs", f"{p.id} NICs per node")
        bw = ctx.cat("nic", nic, "bandwidth_bits_per_s", "bit/s", f"{nic.id} bandwidth")
        return count, bw, nic
    return None


def build_fabric(ctx: PlanContext, opt: Option) -> None:
    """Scale-out fabric of the option and the check of the forecast's network assumption."""
    fs = ctx.scenario.fabric
    gpn = opt.gpus_per_node
    out: dict[str, Any] = {}
    nics = _node_nics(ctx, opt)
    oversub = ctx.inp(("fabric", "oversubscription"), "ratio", "leaf oversubscription")
    if opt.kind == "cloud":
        net = ctx.cat(
            "instance",
            opt.platform,
            "network_bandwidth_bits_per_s",
            "bit/s",
            f"{opt.platform.id} network bandwidth",
        )
        out["kind"] = "provider fabric"
        out["note"] = (
            f"{opt.cloud} runs the scale-out network; the plan checks the per-GPU bandwidth only"
        )
        per_gpu = derived(
            net.value / 8.0 / gpn.value if net.ok else None,
            "B/s",
            "scale-out bandwidth per GPU",
            "instance network bit/s / 8 / GPUs per node",
            [net, gpn],
        )
        out["per_gpu_bandwidth_worst_bytes_per_s"] = per_gpu
        out["per_gpu_bandwidth_best_bytes_per_s"] = per_gpu
    elif nics is None:
        out["kind"] = "missing"
        out["note"] = f"node {opt.platform.id} lists no compute NICs in the catalog"
        opt.notes.append(out["note"])
    else:
        count, bw, nic = nics
        switch = _pick_switch(ctx, bw.value if bw.ok else None)
        worst, best = per_gpu_fabric_bandwidth_bytes_per_s(
            nic_bandwidth_bits_per_s=bw.value or 0.0,
            nics_per_node=int(count.value),
            gpus_per_node=int(gpn.value),
            oversubscription=oversub.value,
        )
        out["per_gpu_bandwidth_worst_bytes_per_s"] = derived(
            worst if bw.ok else None,
            "B/s",
            "scale-out bandwidth per GPU (across leaves)",
            "NICs x NIC bit/s / 8 / GPUs per node / oversubscription",
            [count, bw, gpn, oversub],
        )
        out["per_gpu_bandwidth_best_bytes_per_s"] = derived(
            best if bw.ok else None,
            "B/s",
            "scale-out bandwidth per GPU (within a leaf or rail)",
            "NICs x NIC bit/s / 8 / GPUs per node",
            [count, bw, gpn],
        )
        out["nic"] = nic.id
        out["nics_per_node"] = count
        out["nic_bandwidth_bits_per_s"] = bw
        if switch is None:
            out["kind"] = "missing"
            out["note"] = f"no catalog switch has ports at the rate of {nic.id}: set fabric.switch"
            opt.notes.append(out["note"])
        else:
            radix_value = _radix_at(switch, bw.value) if bw.ok else None
            field_name = "ports"
            if radix_value is None:
                radix_value = switch.ports
                opt.notes.append(
                    f"switch {switch.id} ports run at a different rate than {nic.id}; "
                    "one NIC per switch port assumed"
                )
            elif radix_value != switch.ports:
                field_name = "alt_ports"
            radix = ctx.cat(
                "switch", switch, field_name, "ports", f"{switch.id} radix", value=radix_value
            )
            topo = ctx.inp(("fabric", "topology"), "", "fabric topology")
            host_links = ctx.inp(("fabric", "host_links"), "", "host link medium")
            if not radix.ok:
                out["kind"] = "missing"
                out["note"] = f"switch {switch.id} has no port count in the catalog"
            else:
                # a split (breakout) port: one twin-port module on the switch serves two NICs
                split = field_name == "alt_ports"
                tree = design_fat_tree(
                    nodes=int(opt.sized_nodes.value),
                    nics_per_node=int(count.value),
                    radix=int(radix.value),
                    oversubscription=float(oversub.value),
                    topology=fs.topology,
                    host_links_optical=fs.host_links == "optical",
                    ports_per_transceiver=2 if split else 1,
                )
                inputs = [opt.sized_nodes, count, radix, oversub, topo]
                out.update(_fabric_figures(tree, inputs, host_links, switch.id))
                out["radix"] = radix
                if not tree.feasible:
                    opt.binding.append(
                        {
                            "constraint": "fabric",
                            "option": opt.id,
                            "message": Text(
                                "{endpoints} exceed a three-tier fat tree of "
                                f"{switch.id} switches (at most {{limit}})",
                                {
                                    "endpoints": out["endpoints"],
                                    "limit": out["max_endpoints_at_tiers"],
                                },
                            ),
                        }
                    )
                _network_money(ctx, opt, out, tree, switch)
    _comm_check(ctx, opt, out)
    opt.fabric = out


def _fabric_figures(
    tree: FatTree, inputs: list[Figure], host_links: Figure, switch_id: str
) -> FigureDict:
    src = "folded-Clos fat tree (Al-Fares et al. 2008 sec. 3; gpuplan.plan.fabric)"

    def d(
        value: object, unit: str, label: str, formula: str, extra: list[Figure] | None = None
    ) -> Figure:
        return derived(value, unit, label, f"{formula} [{src}]", inputs + (extra or []))

    return {
        "kind": tree.topology,
        "switch": switch_id,
        "feasible": tree.feasible,
        "reason": tree.reason,
        "tiers": d(
            tree.tiers,
            "tiers",
            "fabric tiers",
            "smallest tier count whose capacity holds the NIC ports",
        ),
        "endpoints": d(tree.endpoints, "ports", "NIC ports on the fabric", "nodes x NICs per node"),
        "leaf_down_ports": d(
            tree.down_ports_per_leaf, "ports", "leaf ports down", "floor(radix x r / (r + 1))"
        ),
        "leaf_up_ports": d(
            tree.up_ports_per_leaf, "ports", "leaf ports up", "radix - leaf ports down"
        ),
        "leaf_switches": d(
            tree.leaves,
            "switches",
            "leaf switches",
            "ceil(NIC ports / leaf ports down) (rail-optimised: rails x ceil(nodes / leaf ports down))",
        ),
        "spine_switches": d(
            tree.spines,
            "switches",
            "spine (aggregation) switches",
            "ceil(leaves x leaf ports up / radix) (3 tiers: per pod ceil(leaves in pod x up / (radix/2)))",
        ),
        "core_switches": d(
            tree.cores,
            "switches",
            "core switches",
            "3 tiers: ceil(leaves x leaf ports up / radix); else 0",
        ),
        "switches": d(tree.switches, "switches", "switches", "leaf + spine + core"),
        "pods": d(tree.pods, "pods", "pods", "ceil(leaves / (radix / 2)) in a three-tier tree"),
        "host_links": d(tree.host_links, "cables", "node-to-leaf cables", "one per NIC port"),
        "switch_links": d(
            tree.switch_links,
            "cables",
            "switch-to-switch cables",
            "leaves x leaf ports up per tier above the leaf",
        ),
        "cables": d(tree.links, "cables", "cables", "node-to-leaf + switch-to-switch"),
        "host_links_copper": d(
            tree.host_links_copper,
            "cables",
            "copper host cables (DAC/ACC, within a rack)",
            "host links whose node and leaf share a rack",
            [host_links],
        ),
        "host_links_optical": d(
            tree.host_links_optical,
            "cables",
            "optical host cables (between racks)",
            "host links from a node to a leaf in another rack",
            [host_links],
        ),
        "transceivers": d(
            tree.transceivers,
            "transceivers",
            "optical transceivers",
            "one per optical link end (copper host links need none)",
            [host_links],
        ),
        "max_endpoints_at_tiers": d(
            tree.max_endpoints,
            "ports",
            "largest fabric at this tier count",
            "radix x leaf ports down (2 tiers); radix x radix/2 x leaf ports down (3 tiers)",
        ),
    }


def _network_money(
    ctx: PlanContext, opt: Option, out: dict[str, Any], tree: FatTree, switch: Switch
) -> None:
    prices = ctx.scenario.costs.network_prices_usd
    cat = ctx.catalog
    parts: list[Figure] = []
    missing = []
    sw_price = (
        ctx.quote(("costs", "network_prices_usd", switch.id), "USD", f"{switch.id} price")
        if switch.id in prices
        else None
    )
    if sw_price is None:
        missing.append(f"no price for switch {switch.id}: add costs.network_prices_usd.{switch.id}")
    else:
        parts.append(
            derived(
                out["switches"].value * sw_price.value,
                "USD",
                "switch capex",
                "switches x switch price",
                [out["switches"], sw_price],
            )
        )
    if tree.transceivers:
        optic_id = ctx.scenario.fabric.optic
        if optic_id is None:
            missing.append("no transceiver chosen: set fabric.optic and its price")
        else:
            optic = cat.optic(optic_id)
            if optic.id in prices:
                op = ctx.quote(
                    ("costs", "network_prices_usd", optic.id), "USD", f"{optic.id} price"
                )
                parts.append(
                    derived(
                        out["transceivers"].value * op.value,
                        "USD",
                        "transceiver capex",
                        "transceivers x transceiver price",
                        [out["transceivers"], op],
                    )
                )
            else:
                missing.append(f"no price for {optic.id}: add costs.network_prices_usd.{optic.id}")
    if missing:
        out["capex_usd"] = missing_fig("USD", "network capex", "; ".join(missing), parts)
    else:
        out["capex_usd"] = derived(
            sum(p.value for p in parts), "USD", "network capex", "switch + transceiver capex", parts
        )
    if switch.max_power_w:
        swp = ctx.cat("switch", switch, "max_power_w", "W", f"{switch.id} max power")
        out["power_w"] = derived(
            out["switches"].value * swp.value,
            "W",
            "network power",
            "switches x switch max power",
            [out["switches"], swp],
        )


def _comm_check(ctx: PlanContext, opt: Option, out: dict[str, Any]) -> None:
    """Does the fabric give each GPU the inter-node bandwidth the forecast assumed?

    When it gives less (an oversubscribed leaf), the run is forecast again at the fabric's
    worst-case bandwidth per GPU with the same GPU count, and the plan reports both times.
    """
    from gpuplan.plan.provenance import forecast_fig
    from gpuplan.plan.workloads import forecast_training_cached

    worst = out.get("per_gpu_bandwidth_worst_bytes_per_s")
    checks = []
    for t in opt.training:
        if t.forecast is None:
            continue
        assumed_v = t.forecast.inter_node_bandwidth_bytes_per_s
        entry: dict[str, Any] = {"workload": t.name}
        if assumed_v is None:
            entry["status"] = "unknown"
            entry["note"] = "the forecast does not report the inter-node bandwidth it used"
            checks.append(entry)
            continue
        where = t.forecast.inter_node_bandwidth_basis or ""
        assumed = forecast_fig(
            assumed_v,
            "B/s",
            f"{t.name}: inter-node bandwidth per GPU the forecast assumed",
            f"forecast train {t.name} on {opt.gpu.id}: provenance.inter_node_bandwidth_bytes_per_s"
            + (f" ({where})" if where else ""),
        )
        entry["assumed_bytes_per_s"] = assumed
        if worst is None or not worst.ok:
            entry["status"] = "unknown"
            entry["note"] = "the fabric's per-GPU bandwidth is unknown"
            checks.append(entry)
            continue
        ratio = derived(
            worst.value / assumed.value,
            "ratio",
            f"{t.name}: fabric / assumed bandwidth per GPU",
            "fabric worst-case bandwidth per GPU / forecast's assumption",
            [worst, assumed],
        )
        entry["ratio"] = ratio
        entry["status"] = "holds" if ratio.value >= 1.0 - 1e-9 else "short"
        if entry["status"] == "short" and t.gpus is not None:
            w = ctx.scenario.workloads.training[t.index]
            res, err = forecast_training_cached(
                ctx,
                w,
                opt.gpu.id,
                num_gpus=int(t.gpus.value),
                target_days=None,
                platform=t.platform,
                inter_node_bandwidth_bytes_per_s=float(worst.value),
            )
            if res is not None:
                t.run_on_fabric_s = ctx.fc(
                    res.time_to_train_s,
                    "time_to_train_s",
                    "s",
                    f"{t.name}: time to train at the fabric's bandwidth",
                    f"forecast train {t.name} on {opt.gpu.id} x{int(t.gpus.value)} "
                    f"(inter-node {worst.value:.4g} B/s per GPU)",
                )
                entry["time_to_train_on_fabric_s"] = t.run_on_fabric_s
                if t.run_s is not None and t.run_s.ok and t.run_on_fabric_s.ok:
                    slow = t.run_on_fabric_s.value / t.run_s.value - 1.0
                    longer = derived(
                        slow,
                        "fraction",
                        f"{t.name}: longer on the fabric",
                        "time at fabric bandwidth / time at assumed bandwidth - 1",
                        [t.run_on_fabric_s, t.run_s],
                    )
                    entry["note"] = Text(
                        "the fabric gives {ratio} the bandwidth per GPU the forecast assumed; "
                        "the run takes {longer} longer on it",
                        {"ratio": ratio, "longer": longer},
                    )
                    opt.notes.append(
                        Text(f"{t.name}: " + entry["note"].template, entry["note"].figs)
                    )
            else:
                entry["note"] = f"could not re-forecast at the fabric's bandwidth: {err}"
        checks.append(entry)
    out["communication_check"] = checks
