"""One candidate option: a GPU on a cloud instance type or an on-premises node type.

For each option the plan sizes the workloads (:mod:`gpuplan.plan.workloads`), builds the
fleet (nodes, racks, fabric, storage, power) and prices it under every purchasing model
(:mod:`gpuplan.plan.cost`), then checks the constraints. A constraint that cannot be met
makes the option infeasible and is recorded as *binding* with the figures on both sides;
nothing raises.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from gpuplan.catalogs.schema import Instance, Node
from gpuplan.errors import GpuplanError
from gpuplan.plan import cost as costmod
from gpuplan.plan import fabric as fabmod
from gpuplan.plan import power as powmod
from gpuplan.plan import storage as stomod
from gpuplan.plan.context import PlanContext
from gpuplan.plan.provenance import (
    Binding,
    Figure,
    FigureDict,
    Text,
    derived,
    input_fig,
    missing_fig,
)
from gpuplan.plan.shared import TeamsSizing
from gpuplan.plan.workloads import (
    ServingOnOption,
    TrainingOnOption,
    size_serving,
    size_training,
)

CLOUD_PROVIDER_NAMES = {
    "aws": ("aws", "amazon"),
    "gcp": ("gcp", "google"),
    "azure": ("azure", "microsoft"),
}


if TYPE_CHECKING:
    from gpuplan.catalogs.catalog import Catalog
    from gpuplan.catalogs.schema import Accelerator, Nic, PriceObservation, Switch
    from gpuplan.catalogs.schema import StorageTier as StorageTierRow
    from gpuplan.plan.scenario import PriceOverride


#: A catalog platform row: a cloud instance or an on-premises node.
PlatformT = TypeVar("PlatformT", Instance, Node)


@dataclass
class Option:
    """A candidate fleet and its evaluation (see module docstring)."""

    id: str
    kind: str  # "cloud" | "onprem"
    label: str
    gpu: Accelerator
    platform: Instance | Node
    cloud: str | None
    gpus_per_node: Figure
    training: list[TrainingOnOption] = field(default_factory=list)
    serving: list[ServingOnOption] = field(default_factory=list)
    nodes: Figure | None = None
    gpus: Figure | None = None
    fabric: dict[str, Any] = field(default_factory=dict)
    storage: dict[str, Any] = field(default_factory=dict)
    power: dict[str, Any] = field(default_factory=dict)
    costs: dict[str, costmod.ModelCost] = field(default_factory=dict)
    tco: costmod.OnPremTCO | None = None
    break_even: Figure | None = None
    break_even_against: str | None = None
    binding: list[Binding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str | Text] = field(default_factory=list)
    within_budget: dict[str, bool] = field(default_factory=dict)
    #: what sets the fleet's size: the teams' p95 wait target (gpuplan.plan.shared)
    sizing: TeamsSizing | None = None
    #: an instance sold in whole UltraServers: the multiple and the idle GPUs it leaves
    whole_units: dict[str, Figure] | None = None

    @property
    def feasible(self) -> bool:
        return not self.binding and not self.errors

    @property
    def sized_nodes(self) -> Figure:
        """The fleet's nodes; the fabric, storage, power and price builders run only once
        :func:`evaluate_option` has sized them."""
        if self.nodes is None:
            raise RuntimeError(f"option {self.id}: the fleet is not sized yet")
        return self.nodes

    @property
    def node_row(self) -> Node:
        """The catalog node of an on-premises option."""
        if not isinstance(self.platform, Node):
            raise RuntimeError(f"option {self.id} is not an on-premises node")
        return self.platform

    @property
    def instance_row(self) -> Instance:
        """The catalog instance of a cloud option."""
        if not isinstance(self.platform, Instance):
            raise RuntimeError(f"option {self.id} is not a cloud instance")
        return self.platform

    @property
    def sized_gpus(self) -> Figure:
        """The fleet's GPUs (nodes x GPUs per node), once sized."""
        if self.gpus is None:
            raise RuntimeError(f"option {self.id}: the fleet is not sized yet")
        return self.gpus

    def to_json(self) -> FigureDict:
        return {
            "id": self.id,
            "kind": self.kind,
            "label": self.label,
            "gpu": self.gpu.id,
            "platform": self.platform.id,
            "cloud": self.cloud,
            "feasible": self.feasible,
            "binding": self.binding,
            "errors": self.errors,
            "notes": self.notes,
            "gpus_per_node": self.gpus_per_node,
            "gpus": self.gpus,
            "nodes": self.nodes,
            "training": [t.to_json() for t in self.training],
            "inference": [s.to_json() for s in self.serving],
            "fabric": self.fabric,
            "storage": self.storage,
            "power": self.power,
            "costs": {k: v.to_json() for k, v in self.costs.items()},
            "within_budget": self.within_budget,
            "onprem_tco": self.tco.to_json() if self.tco is not None else None,
            "break_even_utilisation": self.break_even,
            "break_even_against": self.break_even_against,
            "sizing": self.sizing,
            **({"whole_units": self.whole_units} if self.whole_units is not None else {}),
        }


# ------------------------------------------------------------------ candidates


def _gpu_id(catalog: Catalog, name: str) -> str | None:
    try:
        return catalog.gpu(name).id
    except GpuplanError:
        return None


def _with_candidate_gpu(
    catalog: Catalog,
    named: list[str] | None,
    lookup: Callable[[str], PlatformT],
    every: Iterable[PlatformT],
    gpu_ids: dict[str, Accelerator],
    word: str,
    notes: list[str],
) -> list[tuple[PlatformT, Accelerator]]:
    """(row, GPU) for the platforms named (else every catalog row) that carry a candidate GPU.

    A platform the scenario names but whose GPU is not a candidate is noted as skipped.
    """
    rows = [lookup(i) for i in named] if named is not None else list(every)
    out = []
    for row in rows:
        gid = _gpu_id(catalog, row.accelerator_id)
        if gid in gpu_ids:
            out.append((row, gpu_ids[gid]))
        elif named is not None:
            notes.append(
                f"{word} {row.id} carries {row.accelerator_id}, not a candidate GPU: skipped"
            )
    return out


def candidate_options(ctx: PlanContext) -> tuple[list[Option], list[str]]:
    """Options from the scenario's candidates; returns (options, notes on what was skipped)."""
    cat = ctx.catalog
    cand = ctx.scenario.candidates
    gpus = [cat.gpu(g) for g in cand.gpus]  # NotFoundError lists the closest ids
    gpu_ids = {g.id: g for g in gpus}
    notes: list[str] = []
    options: list[Option] = []
    clouds = None if cand.clouds is None else {c.lower() for c in cand.clouds}
    for inst, gpu in _with_candidate_gpu(
        cat, cand.instances, cat.instance, cat.instances, gpu_ids, "instance", notes
    ):
        if clouds is not None and inst.cloud.lower() not in clouds:
            continue
        gpn = ctx.cat("instance", inst, "accelerators_per_node", "GPUs", f"{inst.id} GPUs per node")
        options.append(
            Option(
                id=f"{inst.cloud}/{inst.id}",
                kind="cloud",
                label=f"{inst.id} ({inst.cloud}, {inst.accelerators_per_node} x {gpu.name})",
                gpu=gpu,
                platform=inst,
                cloud=inst.cloud,
                gpus_per_node=gpn,
            )
        )
    for node, gpu in _with_candidate_gpu(
        cat, cand.onprem_nodes, cat.node, cat.nodes, gpu_ids, "node", notes
    ):
        gpn = ctx.cat("node", node, "accelerators_per_node", "GPUs", f"{node.id} GPUs per node")
        options.append(
            Option(
                id=f"onprem/{node.id}",
                kind="onprem",
                label=f"{node.id} (on premises, {node.accelerators_per_node} x {gpu.name})",
                gpu=gpu,
                platform=node,
                cloud=None,
                gpus_per_node=gpn,
            )
        )
    return options, notes


# ------------------------------------------------------------------ evaluation


def _instance_multiple(ctx: PlanContext, opt: Option) -> Figure | None:
    """The catalog's ``instance_multiple`` of a cloud option's instance (None if sold singly)."""
    if opt.kind != "cloud" or not opt.instance_row.instance_multiple:
        return None
    inst = opt.instance_row
    return ctx.cat(
        "instance", inst, "instance_multiple", "instances", f"{inst.id} instances per UltraServer"
    )


def whole_units(ctx: PlanContext, opt: Option, nodes: Figure) -> Figure:
    """``nodes`` rounded up to whole UltraServers where the instance is sold only in them."""
    mult = _instance_multiple(ctx, opt)
    if mult is None or not nodes.ok or nodes.value % mult.value == 0:
        return nodes
    return derived(
        math.ceil(nodes.value / mult.value) * mult.value,
        "nodes",
        f"{nodes.label} in whole UltraServers",
        "ceil(nodes / instances per UltraServer) x instances per UltraServer",
        [nodes, mult],
    )


def evaluate_option(ctx: PlanContext, opt: Option) -> Option:
    """Size, build, price and check one option (module docstring)."""
    sc = ctx.scenario
    for i, w in enumerate(sc.workloads.training):
        platform = ("instance" if opt.kind == "cloud" else "node", opt.platform.id)
        t = size_training(ctx, w, i, opt.gpu.id, opt.gpus_per_node, platform)
        opt.training.append(t)
        for b in t.binding:
            opt.binding.append({**b, "option": opt.id})
        opt.notes.extend(t.notes)
        if t.error and not t.binding:
            opt.errors.append(f"{w.name}: {t.error}")
    for i, s in enumerate(sc.workloads.inference):
        sv = size_serving(ctx, s, i, opt.gpu.id, opt.gpus_per_node)
        opt.serving.append(sv)
        if sv.error:
            opt.errors.append(f"{s.name}: {sv.error}")
    parts = [t.nodes for t in opt.training if t.nodes is not None] + [
        s.nodes for s in opt.serving if s.nodes is not None
    ]
    if not parts:
        return opt
    formula = "sum of the nodes of every workload (they run side by side)"
    from gpuplan.plan.shared import fleet_parts_with_teams

    parts, formula, opt.sizing = fleet_parts_with_teams(ctx, opt, parts, formula)
    mult = _instance_multiple(ctx, opt)
    needed = derived(
        sum(p.value for p in parts), "nodes", "nodes the workloads need", formula, parts
    )
    if mult is not None:
        parts = [whole_units(ctx, opt, p) for p in parts]
        formula += ", each in whole UltraServers"
    opt.nodes = derived(sum(p.value for p in parts), "nodes", "fleet nodes", formula, parts)
    if mult is not None and opt.nodes.value > needed.value:
        gpn = opt.gpus_per_node
        idle = derived(
            (opt.nodes.value - needed.value) * gpn.value,
            "GPUs",
            "idle GPUs of the whole UltraServers",
            "(fleet nodes - nodes the workloads need) x GPUs per node",
            [opt.nodes, needed, gpn],
        )
        opt.whole_units = {
            "instance_multiple": mult,
            "nodes_needed": needed,
            "idle_gpus": idle,
        }
        opt.notes.append(
            Text(
                f"{opt.platform.id} is sold in whole UltraServers of {{multiple}}: the fleet "
                "is rounded up from {needed} to {nodes}, {idle} idle (and paid for)",
                {"multiple": mult, "needed": needed, "nodes": opt.nodes, "idle": idle},
            )
        )
    opt.gpus = derived(
        opt.nodes.value * opt.gpus_per_node.value,
        "GPUs",
        "fleet GPUs",
        "nodes x GPUs per node",
        [opt.nodes, opt.gpus_per_node],
    )
    max_gpus = sc.constraints.max_gpus
    if (
        max_gpus is not None
        and opt.gpus.value > max_gpus
        and not any(b["constraint"] == "max_gpus" for b in opt.binding)
    ):
        opt.binding.append(
            {
                "constraint": "max_gpus",
                "option": opt.id,
                "message": Text(
                    "the fleet needs {needed}; the limit is {limit}",
                    {
                        "needed": opt.gpus,
                        "limit": ctx.inp(("constraints", "max_gpus"), "GPUs", "GPU limit"),
                    },
                ),
                "needed": opt.gpus,
                "limit": ctx.inp(("constraints", "max_gpus"), "GPUs", "GPU limit"),
            }
        )
    build_fabric(ctx, opt)
    build_storage(ctx, opt)
    build_power(ctx, opt)
    price_option(ctx, opt)
    check_budget(ctx, opt)
    return opt


# ------------------------------------------------------------------ fabric


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
        worst, best = fabmod.per_gpu_fabric_bandwidth_bytes_per_s(
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
                tree = fabmod.design_fat_tree(
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
    tree: fabmod.FatTree, inputs: list[Figure], host_links: Figure, switch_id: str
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
    ctx: PlanContext, opt: Option, out: dict[str, Any], tree: fabmod.FatTree, switch: Switch
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


# ------------------------------------------------------------------ storage


def _tiers_for(ctx: PlanContext, opt: Option) -> list[StorageTierRow]:
    cat = ctx.catalog
    want = ctx.scenario.storage.tier
    if want:
        return [cat.storage_tier(want)]
    tiers = []
    cloud_names = {n for names in CLOUD_PROVIDER_NAMES.values() for n in names}
    for t in cat.storage:
        if getattr(t, "kind_of_storage", None) == "local_nvme":
            continue
        prov = str(getattr(t, "provider", "")).lower()
        if opt.kind == "cloud":
            if any(n in prov for n in CLOUD_PROVIDER_NAMES.get(opt.cloud or "", ())):
                tiers.append(t)
        elif not any(n in prov for n in cloud_names):
            tiers.append(t)
    return tiers


APPLIANCE_FIELDS = (
    "read_bytes_per_s_per_appliance",
    "write_bytes_per_s_per_appliance",
    "capacity_bytes_per_appliance",
)


def _tier_figures(ctx: PlanContext, t: StorageTierRow) -> stomod.StorageTier | stomod.ApplianceTier:
    tib = stomod.TIB

    def get(field_name: str, unit: str, label: str) -> Figure:
        return ctx.cat("storage", t, field_name, unit, f"{t.id} {label}")

    price_fields = ctx.scenario.costs.storage_usd_per_gib_month
    if t.id in price_fields:
        price = ctx.quote(
            ("costs", "storage_usd_per_gib_month", t.id), "USD/GiB-month", f"{t.id} price"
        )
    elif getattr(t, "price_usd_per_tib_month", None):
        per_tib = get("price_usd_per_tib_month", "USD/TiB-month", "price per TiB-month")
        price = derived(
            per_tib.value / 1024.0,
            "USD/GiB-month",
            f"{t.id} price per GiB-month",
            "USD per TiB-month / 1024",
            [per_tib],
        )
    else:
        price = missing_fig(
            "USD/GiB-month",
            f"{t.id} price",
            f"no price for {t.id}: add costs.storage_usd_per_gib_month.{t.id}",
        )
    del tib
    if getattr(t, "per_appliance", False) or any(getattr(t, n, None) for n in APPLIANCE_FIELDS):
        # sold in whole appliances: sized by gpuplan.plan.storage.fit_appliances
        cap_per = get(APPLIANCE_FIELDS[2], "B", "usable per appliance")
        return stomod.ApplianceTier(
            id=t.id,
            name=getattr(t, "name", t.id),
            read_bytes_per_s_per_appliance=get(APPLIANCE_FIELDS[0], "B/s", "read per appliance"),
            write_bytes_per_s_per_appliance=get(APPLIANCE_FIELDS[1], "B/s", "write per appliance"),
            capacity_bytes_per_appliance=cap_per,
            price_usd_per_gib_month=price,
            cloud=getattr(t, "provider", None),
            gpudirect_storage=getattr(t, "gpudirect_storage", None),
            rack_units_per_appliance=get("rack_units_per_appliance", "U", "height per appliance"),
            power_w_per_appliance=get("power_w_per_appliance", "W", "power per appliance"),
            capex_usd_per_appliance=_appliance_capex(ctx, t, cap_per),
            min_appliances=(
                get("min_appliances", "appliances", "minimum system")
                if getattr(t, "min_appliances", None)
                else None
            ),
        )
    return stomod.StorageTier(
        id=t.id,
        name=getattr(t, "name", t.id),
        read_bytes_per_s_per_tib=get("read_bytes_per_s_per_tib", "B/s per TiB", "read per TiB"),
        write_bytes_per_s_per_tib=get("write_bytes_per_s_per_tib", "B/s per TiB", "write per TiB"),
        min_capacity_bytes=get("capacity_min_bytes", "B", "minimum capacity"),
        max_capacity_bytes=get("capacity_max_bytes", "B", "maximum capacity"),
        increment_bytes=get("capacity_step_bytes", "B", "capacity step"),
        price_usd_per_gib_month=price,
        cloud=getattr(t, "provider", None),
        throughput_increment_bytes_per_s=(
            get("throughput_increment_bytes_per_s", "B/s", "throughput increment")
            if getattr(t, "throughput_increment_bytes_per_s", None)
            else None
        ),
        gpudirect_storage=getattr(t, "gpudirect_storage", None),
    )


def _appliance_capex(ctx: PlanContext, t: StorageTierRow, cap_per: Figure) -> Figure:
    """Purchase price of one appliance: the catalog's, or its price per TiB x usable TiB."""
    if getattr(t, "price_usd_per_appliance", None):
        return ctx.cat(
            "storage", t, "price_usd_per_appliance", "USD", f"{t.id} price per appliance"
        )
    if getattr(t, "price_usd_per_tib", None) and cap_per.ok:
        per_tib = ctx.cat("storage", t, "price_usd_per_tib", "USD/TiB", f"{t.id} price per TiB")
        return derived(
            per_tib.value * cap_per.value / stomod.TIB,
            "USD",
            f"{t.id} price per appliance",
            "price per usable TiB x usable TiB per appliance",
            [per_tib, cap_per],
        )
    return missing_fig(
        "USD",
        f"{t.id} price per appliance",
        f"the catalog row storage/{t.id} has no price_usd_per_appliance or price_usd_per_tib "
        "(no published price): quote it in costs.storage_usd_per_gib_month",
    )


def _writers_cap(ctx: PlanContext, opt: Option, t: StorageTierRow) -> Figure | None:
    """N writers (the option's nodes) x the tier's per-client bandwidth, where the row has one."""
    for name in ("write_bytes_per_s_per_node", "read_bytes_per_s_per_node"):
        if getattr(t, name, None):
            per_client = ctx.cat("storage", t, name, "B/s", f"{t.id} per-client bandwidth")
            return stomod.client_write_cap(opt.sized_nodes, per_client)
    return None


def _chosen_summary(f: stomod.TierFit) -> str:
    """One line: the chosen tier, its size, checkpoint time against the budget, its price."""
    parts = [f.tier.id]
    if f.appliances is not None and f.appliances.ok:
        parts.append(f"{int(f.appliances.value)} appliances")
    if f.provisioned_bytes.ok:
        parts.append(f"{f.provisioned_bytes.value / stomod.TIB:,.0f} TiB")
    if f.checkpoint_write_s.ok:
        budget = f" (budget {f.budget_s.value:,.0f} s)" if f.budget_s is not None else ""
        parts.append(f"checkpoint {f.checkpoint_write_s.value:,.0f} s{budget}")
    if f.usd_per_month.ok:
        parts.append(f"${f.usd_per_month.value:,.0f}/month")
    elif f.capex_usd is not None and f.capex_usd.ok:
        parts.append(f"capex ${f.capex_usd.value:,.0f}")
    else:
        parts.append("no price: " + (f.usd_per_month.missing or "not priced"))
    return ", ".join(parts)


def build_storage(ctx: PlanContext, opt: Option) -> None:
    """Size the shared storage tier for the training workloads (see gpuplan.plan.storage)."""
    sc = ctx.scenario
    trainings = [t for t in opt.training if t.tokens_per_s is not None]
    if not trainings:
        opt.storage = {"note": "no training workload: no shared storage sized"}
        return
    caps, reads, writes, ckpts = [], [], [], []
    per_workload = []
    for t in trainings:
        if t.tokens_per_s is None:  # filtered above; narrows the type
            continue
        w = sc.workloads.training[t.index]
        base = ("workloads", "training", t.index)
        model = ctx.catalog.model(w.model)
        params = ctx.cat(
            "model",
            model,
            "params_total",
            "parameters",
            f"{model.id} parameters",
            value=model.params_total(),
        )
        bpp = ctx.inp(
            (*base, "checkpoint", "bytes_per_param"),
            "B",
            f"{w.name}: checkpoint bytes per parameter",
        )
        ckpt = stomod.checkpoint_bytes(params, bpp)
        retained = ctx.inp(
            (*base, "checkpoint", "retained"), "checkpoints", f"{w.name}: checkpoints kept"
        )
        if w.bytes_per_token is not None:
            bpt = ctx.inp((*base, "bytes_per_token"), "B", f"{w.name}: bytes per token")
        else:
            vocab = ctx.cat("model", model, "vocab", "tokens", f"{model.id} vocabulary")
            bpt = derived(
                stomod.bytes_per_token_for_vocab(int(vocab.value)),
                "B",
                f"{w.name}: bytes per token",
                "2 if vocabulary <= 65,536 else 4 (smallest integer type for token ids)",
                [vocab],
            )
        if w.dataset_bytes is not None:
            dataset = ctx.inp((*base, "dataset_bytes"), "B", f"{w.name}: dataset")
        else:
            tokens = ctx.inp((*base, "tokens"), "tokens", f"{w.name}: training tokens")
            epochs = ctx.inp((*base, "epochs"), "epochs", f"{w.name}: epochs")
            dataset = derived(
                tokens.value / epochs.value * bpt.value,
                "B",
                f"{w.name}: dataset",
                "training tokens / epochs x bytes per token",
                [tokens, epochs, bpt],
            )
        cap = stomod.capacity_bytes(dataset, ckpt, retained)
        if w.bytes_per_sample is not None:
            seq = ctx.inp((*base, "seq_len"), "tokens", f"{w.name}: sequence length")
            bps = ctx.inp((*base, "bytes_per_sample"), "B", f"{w.name}: bytes per sample")
            read = stomod.read_bandwidth_samples(t.tokens_per_s, seq, bps)
        else:
            read = stomod.read_bandwidth(t.tokens_per_s, bpt)
        budget = ctx.inp(
            (*base, "checkpoint", "write_budget_s"), "s", f"{w.name}: checkpoint write budget"
        )
        write = stomod.write_bandwidth(ckpt, budget)
        caps.append(cap)
        reads.append(read)
        writes.append(write)
        ckpts.append(ckpt)
        per_workload.append(
            {
                "workload": w.name,
                "checkpoint_bytes": ckpt,
                "dataset_bytes": dataset,
                "capacity_bytes": cap,
                "read_bytes_per_s": read,
                "checkpoint_write_bytes_per_s": write,
            }
        )

    def total(figs: list[Figure], label: str, unit: str) -> Figure:
        if len(figs) == 1:
            return figs[0]
        return derived(sum(f.value for f in figs), unit, label, "sum over training workloads", figs)

    cap_t = total(caps, "storage capacity needed", "B")
    read_t = total(reads, "sustained read for the data pipeline", "B/s")
    write_t = total(writes, "checkpoint write bandwidth needed", "B/s")
    ckpt_t = total(ckpts, "checkpoint size (all workloads)", "B")
    budget_t = min(
        (
            ctx.inp(("workloads", "training", t.index, "checkpoint", "write_budget_s"), "s")
            for t in trainings
        ),
        key=lambda b: b.value,
    )
    fits = [
        stomod.fit_tier(
            _tier_figures(ctx, t),
            capacity=cap_t,
            read_bps=read_t,
            write_bps=write_t,
            ckpt=ckpt_t,
            write_cap=_writers_cap(ctx, opt, t),
            budget_s=budget_t,
        )
        for t in _tiers_for(ctx, opt)
    ]
    months = None
    if opt.kind == "onprem" and sc.costs.depreciation_years:
        years = ctx.inp(("costs", "depreciation_years"), "years", "depreciation")
        months = derived(
            years.value * 12, "months", "depreciation months", "depreciation years x 12", [years]
        )
    chosen = stomod.pick_tier(fits, months)
    out: dict[str, Any] = {
        # one line per tier the catalog cannot size, for the top of the storage section
        "not_sized": [f.reason for f in fits if not f.sized and f.reason],
        "workloads": per_workload,
        "capacity_bytes": cap_t,
        "read_bytes_per_s": read_t,
        "checkpoint_write_bytes_per_s": write_t,
        "checkpoint_write_budget_s": budget_t,
        "tiers": [f.to_json() for f in fits],
        "chosen": chosen.tier.id if chosen else None,
    }
    if chosen is not None:
        out["chosen_summary"] = _chosen_summary(chosen)
        for key, fig in (
            ("capex_usd", chosen.capex_usd),
            ("power_w", chosen.power_w),
            ("rack_units", chosen.rack_units),
            ("usd_per_month", chosen.usd_per_month),
        ):
            if fig is not None:
                out[key] = fig
    if chosen is None:
        out["note"] = "no catalog storage tier fits: " + (
            "; ".join(f"{f.tier.id}: {f.reason}" for f in fits)
            if fits
            else "none for this platform"
        )
        opt.notes.append(out["note"])
    if ctx.trial is not None and ctx.trial.storage_read_bytes_per_s is not None:
        out["local_nvme"] = stomod.local_nvme_check(
            read_t, opt.sized_nodes, ctx.trial.storage_read_bytes_per_s
        )
    # checkpoint write and restart times for the Young/Daly model
    if chosen is not None and chosen.checkpoint_write_s.ok:
        out["checkpoint_write_s"] = chosen.checkpoint_write_s
        if chosen.read_bytes_per_s.ok:
            out["restart_read_s"] = derived(
                ckpt_t.value / chosen.read_bytes_per_s.value,
                "s",
                "checkpoint read time at restart",
                "checkpoint size / tier read bandwidth",
                [ckpt_t, chosen.read_bytes_per_s],
            )
    else:
        budgets = [
            ctx.inp(("workloads", "training", t.index, "checkpoint", "write_budget_s"), "s")
            for t in trainings
        ]
        out["checkpoint_write_s"] = derived(
            max(b.value for b in budgets),
            "s",
            "checkpoint write time (the budget: no tier matched)",
            "the scenario's checkpoint write budget",
            budgets,
        )
    opt.storage = out


# ------------------------------------------------------------------ power


def _overhead_reference(ctx: PlanContext, node: Node) -> Figure | None:
    """System/GPU power ratio of a sourced node row, for nodes without a maximum power.

    The reference is a row of the same cooling type whose maximum power and GPU TDP are both
    sourced (not ``unverified``); the one with the closest GPU TDP, then by id.
    """
    cat = ctx.catalog
    gpu_tdp = getattr(cat.gpu(node.accelerator_id), "tdp_w", None)
    best = None
    for ref in cat.nodes:
        if ref.id == node.id or ref.max_power_w is None or ref.is_unverified("max_power_w"):
            continue
        ref_gpu = cat.gpu(ref.accelerator_id)
        if ref_gpu.tdp_w is None or ref_gpu.is_unverified("tdp_w") or ref.rack_scale:
            continue
        if node.cooling is not None and ref.cooling != node.cooling:
            continue
        key = (abs(ref_gpu.tdp_w - (gpu_tdp or ref_gpu.tdp_w)), ref.id)
        if best is None or key < best[0]:
            best = (key, ref, ref_gpu)
    if best is None:
        return None
    _, ref, ref_gpu = best
    return powmod.host_overhead_ratio(
        ref_id=ref.id,
        ref_max_power_w=ctx.cat("node", ref, "max_power_w", "W", f"{ref.id} max power"),
        ref_tdp_w=ctx.cat("accelerator", ref_gpu, "tdp_w", "W", f"{ref_gpu.id} TDP"),
        ref_gpus_per_node=ctx.cat(
            "node", ref, "accelerators_per_node", "GPUs", f"{ref.id} GPUs per node"
        ),
    )


def build_power(ctx: PlanContext, opt: Option) -> None:
    """Node, rack and facility power; site constraints for on-premises options."""
    if opt.kind != "onprem":
        opt.power = {"note": "the cloud provider supplies power and racks"}
        return
    sc = ctx.scenario
    node = opt.node_row
    gpu = opt.gpu
    tdp = ctx.cat("accelerator", gpu, "tdp_w", "W", f"{gpu.id} TDP")
    node_max = ctx.cat("node", node, "max_power_w", "W", f"{node.id} max power")
    measured = None
    trial = ctx.trial
    if trial is not None and trial.gpu_power_w is not None and trial.catalog_id == gpu.id:
        measured = trial.gpu_power_w
    ratio = _overhead_reference(ctx, node) if not node_max.ok else None
    node_w = powmod.node_power_w(
        gpus_per_node=opt.gpus_per_node,
        tdp_w=tdp,
        node_max_power_w=node_max,
        measured_gpu_power_w=measured,
        overhead_ratio=ratio,
    )
    if measured is not None:
        basis = "measured"
    elif node_max.ok:
        basis = "catalog"
    elif ratio is not None and tdp.ok:
        basis = f"estimated from GPU TDP + host overhead ({ratio.label} = {ratio.value:.3g})"
    else:
        basis = (
            "GPU TDP only (no node maximum power and no reference node: host overhead not counted)"
        )
    c = sc.constraints
    if c.power_per_rack_kw:
        rack_kw = ctx.inp(("constraints", "power_per_rack_kw"), "kW", "power per rack")
    elif node.rack_power_w:
        cooled = f"{node.cooling}-cooled " if node.cooling else ""
        ref_w = ctx.cat(
            "node", node, "rack_power_w", "W", f"{node.id} reference {cooled}rack power"
        )
        rack_kw = derived(
            ref_w.value / 1000.0,
            "kW",
            f"power per rack (default for {cooled}racks: vendor reference design)",
            "node catalog rack_power_w / 1000 (set constraints.power_per_rack_kw to override)",
            [ref_w],
        )
    else:
        rack_kw = None
    rack_u = (
        ctx.inp(("constraints", "rack_units_per_rack"), "U", "rack units per rack")
        if c.rack_units_per_rack
        else None
    )
    node_u = (
        ctx.cat("node", node, "rack_units", "U", f"{node.id} height") if node.rack_units else None
    )
    node_kg = (
        ctx.cat("node", node, "weight_kg", "kg", f"{node.id} weight") if node.weight_kg else None
    )
    rack_kg = (
        ctx.inp(("constraints", "rack_weight_limit_kg"), "kg", "rack weight limit")
        if c.rack_weight_limit_kg
        else None
    )
    racks = powmod.racks_for(
        nodes=opt.sized_nodes,
        node_power=node_w,
        power_per_rack_kw=rack_kw,
        rack_units_per_rack=rack_u,
        node_rack_units=node_u,
        rack_scale=bool(node.rack_scale),
        node_weight_kg=node_kg,
        rack_weight_limit_kg=rack_kg,
    )
    storage_w = opt.storage.get("power_w") if opt.storage else None
    it = powmod.it_power_w(opt.sized_nodes, node_w, opt.fabric.get("power_w"), storage_w)
    pue = ctx.inp(("costs", "pue"), "ratio", "PUE")
    facility = powmod.facility_power_w(it, pue)
    opt.power = {
        "node_power_w": node_w,
        "basis": basis,
        "nodes_per_rack": racks["nodes_per_rack"],
        "racks": racks["racks"],
        "racks_limited_by": racks["limited_by"],
        "rack_power_limit_w": derived(
            rack_kw.value * 1000.0 if rack_kw is not None and rack_kw.ok else None,
            "W",
            "rack power limit",
            "power per rack x 1000",
            [rack_kw] if rack_kw is not None else [],
        )
        if rack_kw is not None
        else missing_fig("W", "rack power limit", "not given: add constraints.power_per_rack_kw"),
        "power_per_full_rack_w": powmod.rack_power_w(racks["nodes_per_rack"], node_w),
        "cooling": node.cooling,
        "it_power_w": it,
        "facility_power_w": facility,
    }
    if node.typical_power_w:
        opt.power["node_typical_power_w"] = ctx.cat(
            "node", node, "typical_power_w", "W", f"{node.id} typical power"
        )
    if node_kg is not None and racks["nodes_per_rack"].ok:
        opt.power["weight_per_full_rack_kg"] = derived(
            racks["nodes_per_rack"].value * node_kg.value,
            "kg",
            "node weight per full rack",
            "nodes per rack x node weight (rack, PDUs and cabling not counted)",
            [racks["nodes_per_rack"], node_kg],
        )
    if racks["binding"]:
        opt.binding.append(
            {
                "constraint": "power_per_rack_kw"
                if racks["limited_by"] == "rack power"
                else "rack_units_per_rack",
                "option": opt.id,
                "message": racks["binding"],
                "needed": node_w,
                "limit": rack_kw if racks["limited_by"] == "rack power" else rack_u,
            }
        )
    if c.max_racks is not None and racks["racks"].ok and racks["racks"].value > c.max_racks:
        opt.binding.append(
            {
                "constraint": "max_racks",
                "option": opt.id,
                "message": Text(
                    "needs {needed}; the site has {limit}",
                    {
                        "needed": racks["racks"],
                        "limit": ctx.inp(("constraints", "max_racks"), "racks", "racks available"),
                    },
                ),
                "needed": racks["racks"],
                "limit": ctx.inp(("constraints", "max_racks"), "racks", "racks available"),
            }
        )
    if c.floor_space_m2 is not None and racks["racks"].ok:
        per = ctx.inp(("constraints", "floor_m2_per_rack"), "m2", "floor per rack")
        floor = ctx.inp(("constraints", "floor_space_m2"), "m2", "floor space")
        area = derived(
            racks["racks"].value * per.value,
            "m2",
            "floor area needed",
            "racks x floor per rack",
            [racks["racks"], per],
        )
        opt.power["floor_area_m2"] = area
        if area.value > floor.value:
            opt.binding.append(
                {
                    "constraint": "floor_space_m2",
                    "option": opt.id,
                    "message": Text(
                        "needs {needed} of floor; the site has {limit}",
                        {"needed": area, "limit": floor},
                    ),
                    "needed": area,
                    "limit": floor,
                }
            )
    if c.site_power_kw is not None:
        site = ctx.inp(("constraints", "site_power_kw"), "kW", "site power")
        draw = facility if facility.ok else it
        if draw.ok and draw.value > site.value * 1000.0:
            gpn = opt.gpus_per_node.value
            per_node_site_w = draw.value / opt.sized_nodes.value
            max_nodes = math.floor(site.value * 1000.0 / per_node_site_w)
            fits = derived(
                max_nodes * gpn,
                "GPUs",
                "largest fleet within the site power",
                "floor(site power / facility power per node) x GPUs per node",
                [site, draw, opt.sized_nodes, opt.gpus_per_node],
            )
            opt.power["max_gpus_within_site_power"] = fits
            what = "facility power (with PUE)" if facility.ok else "IT power (no PUE given)"
            template = (
                f"the fleet needs {{needed}} of {what}; the site has {{limit}} "
                "(at most {fits} fit"
            )
            figs = {"needed": draw, "limit": site, "fits": fits}
            within = _time_within(ctx, opt, int(fits.value))
            if within:
                opt.power["time_to_train_within_site_power"] = within
                name, fig = next(iter(within.items()))
                template += f", on which {name} would take {{within}}"
                figs["within"] = fig
            opt.binding.append(
                {
                    "constraint": "site_power_kw",
                    "option": opt.id,
                    "message": Text(template + ")", figs),
                    "needed": draw,
                    "limit": site,
                }
            )


def _time_within(ctx: PlanContext, opt: Option, gpus: int) -> dict[str, Figure]:
    """Time to train each workload on the largest fleet the site can power."""
    from gpuplan.plan.workloads import forecast_training_cached

    out: dict[str, Figure] = {}
    if gpus < opt.gpus_per_node.value:
        return out
    for t in opt.training:
        w = ctx.scenario.workloads.training[t.index]
        res, _err = forecast_training_cached(
            ctx, w, opt.gpu.id, num_gpus=gpus, target_days=None, platform=t.platform
        )
        if res is not None and res.time_to_train_s is not None and res.time_to_train_s.value:
            out[t.name] = ctx.fc(
                res.time_to_train_s,
                "time_to_train_s",
                "s",
                f"{t.name}: time to train on the largest fleet within the site power",
                f"forecast train {t.name} on {opt.gpu.id} x{gpus}",
            )
    return out


# ------------------------------------------------------------------ cost


def _loads(
    ctx: PlanContext, opt: Option
) -> tuple[list[costmod.TrainingLoad], list[costmod.ServingLoad]]:
    """The workloads as the cost models see them: each on the nodes it is billed for (whole
    UltraServers where the instance is sold only in them)."""
    tl = [
        costmod.TrainingLoad(t.name, whole_units(ctx, opt, t.nodes), t.run_s)
        for t in opt.training
        if t.nodes is not None and t.run_s is not None
    ]
    sl = [
        costmod.ServingLoad(
            s.name,
            whole_units(ctx, opt, s.nodes),
            s.output_tokens_per_month,
            s.hours_per_month,
            s.cost_interval_factors,
        )
        for s in opt.serving
        if s.nodes is not None
        and s.output_tokens_per_month is not None
        and s.hours_per_month is not None
    ]
    return tl, sl


def _reliabilities(
    ctx: PlanContext, opt: Option, trainings: list[costmod.TrainingLoad], spot: bool
) -> dict[str, costmod.Reliability]:
    costs = ctx.scenario.costs
    fail = ctx.inp(("costs", "node_failures_per_node_hour"), "1/node-hour", "node failure rate")
    if spot:
        sp = ctx.inp(
            ("costs", "spot_interruptions_per_node_hour"), "1/node-hour", "spot interruption rate"
        )
        if not sp.ok:
            rate = missing_fig(
                "1/node-hour",
                "interruption rate (spot)",
                "no spot interruption rate: add costs.spot_interruptions_per_node_hour",
            )
        else:
            rate = derived(
                sp.value + (fail.value if fail.ok else 0.0),
                "1/node-hour",
                "interruption rate (spot)",
                "spot interruptions + node failures per node-hour",
                [sp, fail] if fail.ok else [sp],
            )
    else:
        rate = (
            fail
            if fail.ok
            else input_fig(
                0.0,
                "1/node-hour",
                "node failure rate",
                "default costs.node_failures_per_node_hour (none given)",
                default=True,
            )
        )
    delta = opt.storage.get("checkpoint_write_s") if opt.storage else None
    if delta is None:
        delta = missing_fig("s", "checkpoint write time", "no training storage sized")
    if costs.restart_s is not None:
        restart = ctx.inp(("costs", "restart_s"), "s", "restart time")
    elif opt.storage.get("restart_read_s") is not None:
        restart = opt.storage["restart_read_s"]
    else:
        restart = derived(
            delta.value if delta.ok else None,
            "s",
            "restart time (= checkpoint write time)",
            "no restart time given: taken equal to the checkpoint write time",
            [delta],
        )
    out = {}
    for t in trainings:
        if not rate.ok:
            g = missing_fig("fraction", "goodput", rate.missing or "")
            out[t.name] = costmod.Reliability(rate, g, g, g, g)
            continue
        out[t.name] = costmod.reliability(
            nodes=t.nodes, rate_per_node_hour=rate, checkpoint_s=delta, restart_s=restart
        )
    return out


def _cloud_kinds(inst: Instance, override: tuple[str, PriceOverride] | None) -> list[str]:
    """The purchase kinds priced for a cloud instance: the baseline kinds, every kind the
    catalog has an observation of (a rate or a documented gap) and every kind overridden."""
    kinds = list(costmod.BASELINE_CLOUD_KINDS)
    extra = set(inst.price_kinds())
    if override is not None:
        extra |= {k for k in costmod.CLOUD_KINDS if getattr(override[1], k, None) is not None}
    kinds += [k for k in costmod.CLOUD_KINDS if k in extra and k not in kinds]
    return kinds


def _block_terms(inst: Instance) -> costmod.PurchaseTerms | None:
    """A capacity block's booking rules from the catalog (they hold for negotiated rates too)."""
    obs = [p for p in inst.prices if p.model == "capacity_block" and p.duration_increments]
    if not obs:
        return None
    o = max(obs, key=lambda p: p.as_of_date)
    return _terms_of(inst, o)


def _terms_of(inst: Instance, o: PriceObservation) -> costmod.PurchaseTerms:
    return costmod.PurchaseTerms(
        o.duration_increments,
        o.max_instances,
        o.source,
        ref=f"catalog instance/{inst.id} prices.capacity_block ({o.region or 'any region'})",
        as_of=o.as_of,
    )


def _cloud_prices(
    ctx: PlanContext, opt: Option
) -> dict[str, tuple[Figure, costmod.PurchaseTerms | None]]:
    """Price per node-hour of every purchase kind of a cloud option (with a capacity block's
    booking rules): the scenario's negotiated rate, else the catalog's latest in the
    region, else a commitment discount off on-demand (reserved kinds), else missing with
    the catalog's note or what to add."""
    inst = opt.instance_row
    region = ctx.scenario.constraints.region_for(inst.cloud)
    override = costmod.find_override(ctx.scenario.costs.price_overrides, inst)
    prices: dict[str, tuple[Figure, costmod.PurchaseTerms | None]] = {}
    for model in _cloud_kinds(inst, override):
        obs = inst.price(model, region)
        label = f"{inst.id} {model} price"
        terms = _block_terms(inst) if model == "capacity_block" else None
        if override is not None and getattr(override[1], model, None) is not None:
            path = ("costs", "price_overrides", override[0], model)
            prices[model] = (ctx.quote(path, "USD/node-hour", f"{label} (negotiated)"), terms)
            continue
        if obs is not None:
            if model == "capacity_block" and obs.duration_increments:
                terms = _terms_of(inst, obs)
            prices[model] = (ctx.price(inst, obs, label), terms)
            continue
        where = f" in {region}" if region else ""
        reason = f"the catalog has no {model} price for {inst.id}{where}"
        gap = inst.price_gap(model)
        if gap is not None:
            reason += f": {gap.notes.strip()} ({gap.as_of})"
        if model in ("reserved_1y", "reserved_3y"):
            disc = getattr(ctx.scenario.costs.commitment_discounts, model)
            od = prices.get("on_demand")
            if disc is not None and od is not None and od[0].ok:
                d = ctx.inp(
                    ("costs", "commitment_discounts", model), "fraction", f"{model} discount"
                )
                prices[model] = (costmod.discounted_price(od[0], d, model), None)
                continue
            reason += f" (add costs.commitment_discounts.{model} to derive one from on-demand)"
        elif region and inst.price(model) is not None:
            reason += (
                f" (prices exist in other regions; set constraints.regions.{inst.cloud}"
                f" or costs.price_overrides.{inst.id}.{model})"
            )
        elif gap is None:
            reason += f" (set costs.price_overrides.{inst.id}.{model} to a quoted rate)"
        prices[model] = (missing_fig("USD/node-hour", label, reason), None)
    return prices


def _storage_costs(opt: Option) -> dict[str, Figure]:
    """The chosen storage tier's capex, or its quoted monthly price x 12, for the owned TCO."""
    st = opt.storage or {}
    if st.get("chosen") is None:
        return {}
    monthly = st.get("usd_per_month")
    if monthly is not None and monthly.ok:
        # a quote per GiB-month: the storage is paid as it is used, not bought (no capex)
        return {
            "storage_usd_per_year": derived(
                monthly.value * 12,
                "USD/year",
                "shared storage per year",
                "storage cost per month x 12",
                [monthly],
            )
        }
    capex = st.get("capex_usd")
    if capex is not None:
        return {"storage_capex_usd": capex}
    return {
        "storage_capex_usd": missing_fig(
            "USD", "storage capex", f"no price for storage tier {st['chosen']}"
        )
    }


def _cloud_storage(
    opt: Option, mc: costmod.ModelCost, trainings: list[costmod.TrainingLoad]
) -> None:
    """The storage tier chosen for a cloud option, in its cost (see cost.add_cloud_storage)."""
    st = opt.storage or {}
    chosen = st.get("chosen")
    if chosen is not None:
        monthly = st.get("usd_per_month")
        why = None
        if monthly is None or not monthly.ok:
            reason = monthly.missing if monthly is not None else None
            why = reason if reason and chosen in reason else f"{chosen}: {reason or 'no price'}"
        costmod.add_cloud_storage(mc, monthly, tier=chosen, trainings=trainings, excluded=why)
    elif "capacity_bytes" in st:
        costmod.add_cloud_storage(
            mc, None, tier=None, trainings=trainings, excluded="no catalog storage tier fits"
        )


def price_option(ctx: PlanContext, opt: Option) -> None:
    """Every purchasing model of the option (see gpuplan.plan.cost)."""
    trainings, servings = _loads(ctx, opt)
    util = ctx.inp(("costs", "utilisation"), "fraction", "utilisation")
    if opt.kind == "cloud":
        prices = _cloud_prices(ctx, opt)
        for model, (price, terms) in prices.items():
            rel = _reliabilities(ctx, opt, trainings, spot=model == "spot")
            opt.costs[model] = costmod.price_model(
                model,
                price,
                trainings=trainings,
                servings=servings,
                utilisation=util,
                interruptions=rel,
                fleet_nodes=opt.nodes,
                max_price_age_days=ctx.scenario.costs.price_max_age_days,
                terms=terms,
            )
            _cloud_storage(opt, opt.costs[model], trainings)
        return
    node = opt.node_row
    c = ctx.scenario.costs
    if node.id in c.onprem_node_prices_usd:
        node_price = ctx.quote(
            ("costs", "onprem_node_prices_usd", node.id), "USD", f"{node.id} price"
        )
    else:
        node_price = ctx.cat(
            "node",
            node,
            "price_usd",
            "USD",
            f"{node.id} price",
            missing=f"no price for node {node.id}: add costs.onprem_node_prices_usd.{node.id} (a quote)",
        )
    net = opt.fabric.get("capex_usd") or missing_fig("USD", "network capex", "fabric not designed")
    facility = opt.power.get("facility_power_w") or missing_fig(
        "W", "facility power", "no power model"
    )
    opt.tco = costmod.onprem_tco(
        nodes=opt.sized_nodes,
        node_price_usd=node_price,
        network_capex_usd=net,
        depreciation_years=ctx.inp(("costs", "depreciation_years"), "years", "depreciation"),
        facility_power_w=facility,
        electricity_usd_per_kwh=ctx.inp(
            ("costs", "electricity_usd_per_kwh"), "USD/kWh", "electricity price"
        ),
        ops_usd_per_node_per_year=ctx.inp(
            ("costs", "ops_usd_per_node_per_year"), "USD/node-year", "operations per node"
        ),
        staff_usd_per_year=ctx.inp(("costs", "staff_usd_per_year"), "USD/year", "staff"),
        **_storage_costs(opt),
    )
    rel = _reliabilities(ctx, opt, trainings, spot=False)
    opt.costs["onprem"] = costmod.price_model(
        "onprem",
        opt.tco.usd_per_node_hour,
        trainings=trainings,
        servings=servings,
        utilisation=util,
        interruptions=rel,
        fleet_nodes=opt.nodes,
    )
    if opt.tco.excludes:
        opt.notes.append("owned cost excludes: " + "; ".join(opt.tco.excludes))


def link_break_even(options: list[Option]) -> None:
    """Break-even utilisation of each on-premises option against the cheapest cloud
    on-demand price per GPU-hour for the same GPU (see gpuplan.plan.cost)."""
    for opt in options:
        if opt.kind != "onprem" or opt.tco is None:
            continue
        best = None
        for other in options:
            if other.kind != "cloud" or other.gpu.id != opt.gpu.id:
                continue
            od = other.costs.get("on_demand")
            if od is None or not od.price_usd_per_node_hour.ok:
                continue
            per_gpu = od.price_usd_per_node_hour.value / other.gpus_per_node.value
            if best is None or per_gpu < best[0]:
                best = (per_gpu, other, od.price_usd_per_node_hour)
        if best is None:
            opt.break_even = missing_fig(
                "fraction",
                "break-even utilisation (own vs on-demand)",
                f"no cloud on-demand price for {opt.gpu.id} among the candidates",
            )
            continue
        _, other, od_price = best
        per_node_equiv = derived(
            od_price.value / other.gpus_per_node.value * opt.gpus_per_node.value,
            "USD/node-hour",
            f"{other.platform.id} on-demand per {opt.platform.id}-sized node",
            "on-demand price / GPUs per instance x GPUs per owned node",
            [od_price, other.gpus_per_node, opt.gpus_per_node],
        )
        opt.break_even = costmod.break_even_utilisation(opt.tco, opt.sized_nodes, per_node_equiv)
        opt.break_even_against = other.id


def check_budget(ctx: PlanContext, opt: Option) -> None:
    """Mark purchasing models over budget; the option binds when none is within it."""
    c = ctx.scenario.constraints
    if c.budget_usd_per_month is None and c.budget_usd_per_run is None:
        return
    ok_any = False
    worst_msgs = []
    for model, mc in opt.costs.items():
        ok = mc.available
        if c.budget_usd_per_month is not None:
            month = mc.per_month_usd
            if month is None or not month.ok:
                ok = False  # a cost that cannot be computed cannot be shown within budget
            elif month.value > c.budget_usd_per_month:
                ok = False
                worst_msgs.append((month, "budget_usd_per_month", model))
        if c.budget_usd_per_run is not None:
            for run in mc.per_run_usd.values():
                if not run.ok:
                    ok = False
                elif run.value > c.budget_usd_per_run:
                    ok = False
                    worst_msgs.append((run, "budget_usd_per_run", model))
        opt.within_budget[model] = ok
        ok_any = ok_any or ok
    if not ok_any and worst_msgs:
        fig, which, _ = min(worst_msgs, key=lambda x: x[0].value)
        limit = ctx.inp(("constraints", which), "USD", which)
        opt.binding.append(
            {
                "constraint": which,
                "option": opt.id,
                "message": Text(
                    "the cheapest purchasing model costs {needed}; the budget is {limit}",
                    {"needed": fig, "limit": limit},
                ),
                "needed": fig,
                "limit": limit,
            }
        )
