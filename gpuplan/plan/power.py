"""Power and racks: GPUs -> nodes -> racks under the power density limit -> facility power.

The formulas come first; :func:`build_power` (at the end) applies them to an on-premises
option and records the site constraints (rack power, racks, floor, site power) that bind.

Method
------
* Node power: where the trial node measured the GPU's power under load (``power_w`` of the
  matmul probe, DESIGN.md 3.1), node power = measured GPU power x GPUs per node + the
  node's non-GPU overhead; the overhead is the node catalog's maximum power minus the GPUs'
  TDP. Otherwise the node catalog's maximum power (vendor datasheet). Where the node row has
  no maximum power, it is *estimated from GPU TDP + host overhead*: GPU TDP x GPUs x the
  ratio (system maximum power / GPU TDP x GPUs) of a sourced node row of the same cooling
  type, which is named as the basis (e.g. DGX B200: 14.3 kW for 8 x 1000 W, ratio 1.79).
  Without either, GPU TDP x GPUs, flagged as lacking the host overhead.
* Nodes per rack = min(floor(rack power limit / node power), floor(rack units / node
  height), floor(rack weight limit / node weight)); racks = ceil(nodes / nodes per rack).
  The rack power limit is the scenario's, else the node row's reference rack for its
  cooling type (NVIDIA's air-cooled PDU rack of the DGX SuperPOD B300 RA, ~56 kW; the
  liquid-cooled GB200 SU at 1.2 MW per 8 racks). A rack-scale node (NVL72) is one rack:
  one per rack, never two, and binding when its power exceeds the rack limit. Without
  any limit the rack count is missing (never "all nodes in one rack").
* IT power = nodes x node power (+ switches where the catalog gives their power);
  facility power = IT power x PUE (The Green Grid, "PUE: a comprehensive examination of
  the metric", WP#49, 2012: PUE = total facility energy / IT equipment energy).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypedDict

from gpuplan.catalogs.schema import Node
from gpuplan.plan.context import PlanContext
from gpuplan.plan.provenance import (
    Figure,
    Text,
    derived,
    missing_fig,
)

if TYPE_CHECKING:
    from gpuplan.plan.options import Option


class RackFit(TypedDict):
    """Nodes per rack and racks (:func:`racks_for`), the limit that decides and, when one
    node does not fit a rack, the sentence saying why."""

    nodes_per_rack: Figure
    racks: Figure
    limited_by: str | None
    binding: Text | None


def node_power_w(
    *,
    gpus_per_node: Figure,
    tdp_w: Figure,
    node_max_power_w: Figure | None,
    measured_gpu_power_w: Figure | None,
    overhead_ratio: Figure | None = None,
) -> Figure:
    """Electrical power of one node under training load (see module docstring).

    ``overhead_ratio`` (system power / GPU TDP x GPUs of a sourced reference node) is used
    only when the node has no maximum power: the result is labelled *estimated from GPU TDP
    + host overhead* and its formula names the reference.

    >>> from gpuplan.plan.provenance import input_fig
    >>> est = node_power_w(gpus_per_node=input_fig(8, "GPUs", "g", "r"),
    ...     tdp_w=input_fig(750.0, "W", "t", "r"), node_max_power_w=None,
    ...     measured_gpu_power_w=None, overhead_ratio=input_fig(1.5, "ratio", "o", "r"))
    >>> est.value, est.label
    (9000.0, 'node power (estimated from GPU TDP + host overhead)')
    """
    node = node_max_power_w if node_max_power_w is not None and node_max_power_w.ok else None
    if measured_gpu_power_w is not None and measured_gpu_power_w.ok:
        if node is not None and tdp_w.ok:
            overhead = derived(
                max(node.value - tdp_w.value * gpus_per_node.value, 0.0),
                "W",
                "node power besides GPUs",
                "node max power - GPU TDP x GPUs per node",
                [node, tdp_w, gpus_per_node],
            )
            return derived(
                measured_gpu_power_w.value * gpus_per_node.value + overhead.value,
                "W",
                "node power",
                "measured GPU power x GPUs per node + node overhead",
                [measured_gpu_power_w, gpus_per_node, overhead],
            )
        return derived(
            measured_gpu_power_w.value * gpus_per_node.value,
            "W",
            "node power (GPUs only)",
            "measured GPU power x GPUs per node (no node row: host overhead not counted)",
            [measured_gpu_power_w, gpus_per_node],
        )
    if node is not None:
        return derived(
            node.value,
            "W",
            "node power",
            "node catalog maximum power",
            [node],
        )
    if tdp_w.ok and overhead_ratio is not None and overhead_ratio.ok:
        return derived(
            tdp_w.value * gpus_per_node.value * overhead_ratio.value,
            "W",
            "node power (estimated from GPU TDP + host overhead)",
            f"estimated from GPU TDP + host overhead: GPU TDP x GPUs per node x "
            f"{overhead_ratio.label} (no maximum power in the node catalog)",
            [tdp_w, gpus_per_node, overhead_ratio],
        )
    if tdp_w.ok:
        return derived(
            tdp_w.value * gpus_per_node.value,
            "W",
            "node power (GPUs only)",
            "GPU TDP x GPUs per node (no node row: host overhead not counted)",
            [tdp_w, gpus_per_node],
        )
    return missing_fig(
        "W", "node power", "neither measured power, a node max power nor a GPU TDP is known"
    )


def host_overhead_ratio(
    *, ref_id: str, ref_max_power_w: Figure, ref_tdp_w: Figure, ref_gpus_per_node: Figure
) -> Figure:
    """System power / GPU power of a sourced reference node (the estimate's basis).

    >>> from gpuplan.plan.provenance import input_fig
    >>> r = host_overhead_ratio(ref_id="dgx-b200", ref_max_power_w=input_fig(14300.0, "W", "m", "r"),
    ...     ref_tdp_w=input_fig(1000.0, "W", "t", "r"), ref_gpus_per_node=input_fig(8, "GPUs", "g", "r"))
    >>> round(r.value, 4), r.label
    (1.7875, 'system/GPU power ratio of dgx-b200')
    """
    return derived(
        ref_max_power_w.value / (ref_tdp_w.value * ref_gpus_per_node.value),
        "ratio",
        f"system/GPU power ratio of {ref_id}",
        f"{ref_id} max power / ({ref_id} GPU TDP x GPUs per node)",
        [ref_max_power_w, ref_tdp_w, ref_gpus_per_node],
    )


def racks_for(
    *,
    nodes: Figure,
    node_power: Figure,
    power_per_rack_kw: Figure | None,
    rack_units_per_rack: Figure | None,
    node_rack_units: Figure | None,
    rack_scale: bool = False,
    node_weight_kg: Figure | None = None,
    rack_weight_limit_kg: Figure | None = None,
) -> RackFit:
    """Nodes per rack and racks, with which limit decides.

    Returns a dict with ``nodes_per_rack`` and ``racks`` (Figures, ``racks`` missing when a
    single node does not fit a rack or no limit is known), ``limited_by`` and ``binding``
    (a sentence, or None). A ``rack_scale`` node is one rack: one per rack.

    >>> from gpuplan.plan.provenance import input_fig
    >>> r = racks_for(nodes=input_fig(2, "nodes", "n", "r"),
    ...     node_power=input_fig(132000.0, "W", "p", "r"),
    ...     power_per_rack_kw=input_fig(150.0, "kW", "k", "r"), rack_units_per_rack=None,
    ...     node_rack_units=None, rack_scale=True)
    >>> r["nodes_per_rack"].value, r["racks"].value, r["limited_by"]
    (1, 2, 'rack-scale system')
    """
    limits: list[tuple[float, str, list[Figure]]] = []
    if power_per_rack_kw is not None and power_per_rack_kw.ok and node_power.ok:
        limits.append(
            (
                math.floor(power_per_rack_kw.value * 1000.0 / node_power.value + 1e-9),
                "rack power",
                [power_per_rack_kw, node_power],
            )
        )
    if (
        rack_units_per_rack is not None
        and rack_units_per_rack.ok
        and node_rack_units is not None
        and node_rack_units.ok
    ):
        limits.append(
            (
                math.floor(rack_units_per_rack.value / node_rack_units.value + 1e-9),
                "rack units",
                [rack_units_per_rack, node_rack_units],
            )
        )
    if (
        rack_weight_limit_kg is not None
        and rack_weight_limit_kg.ok
        and node_weight_kg is not None
        and node_weight_kg.ok
    ):
        limits.append(
            (
                math.floor(rack_weight_limit_kg.value / node_weight_kg.value + 1e-9),
                "rack weight",
                [rack_weight_limit_kg, node_weight_kg],
            )
        )
    if rack_scale:
        # the node is the rack: it fills one whatever the other limits allow
        limits = [(min(1, x[0]), *x[1:]) for x in limits]
        limits.append((1, "rack-scale system", [nodes]))
    if not limits:
        why = (
            "no rack power limit is known (the node power or the rack power is missing): "
            "add constraints.power_per_rack_kw"
        )
        npr = missing_fig("nodes", "nodes per rack", why, [nodes, node_power])
        racks = missing_fig("racks", "racks", why, [nodes, node_power])
        return {"nodes_per_rack": npr, "racks": racks, "limited_by": None, "binding": None}
    # a rack-scale node fills its rack whatever the limits allow, unless one is below 1
    per_rack, limited_by, _used = min(limits, key=lambda x: (x[0], x[1] != "rack-scale system"))
    formulas = {
        "rack power": "floor(rack power limit / node power)",
        "rack units": "floor(rack units / node height)",
        "rack weight": "floor(rack weight limit / node weight)",
        "rack-scale system": "1 (a rack-scale node is one rack)",
    }
    formula = "min(" + ", ".join(formulas[n] for _, n, _ in limits) + ")"
    used_all = [f for _, _, fs in limits for f in fs]
    npr = derived(int(per_rack), "nodes", "nodes per rack", formula, used_all)
    if per_rack < 1:
        if limited_by == "rack power":
            assert power_per_rack_kw is not None  # a limit that decides was given
            binding = Text(
                "one node draws {node}, more than the {rack} kW a rack may take "
                "(constraints.power_per_rack_kw)",
                {"node": node_power, "rack": power_per_rack_kw},
            )
        elif limited_by == "rack weight":
            assert node_weight_kg is not None and rack_weight_limit_kg is not None
            binding = Text(
                "one node weighs {node}, more than the {rack} a rack may carry "
                "(constraints.rack_weight_limit_kg)",
                {"node": node_weight_kg, "rack": rack_weight_limit_kg},
            )
        else:
            assert node_rack_units is not None and rack_units_per_rack is not None
            binding = Text(
                "one node is {node} tall, more than a {rack} rack holds "
                "(constraints.rack_units_per_rack)",
                {"node": node_rack_units, "rack": rack_units_per_rack},
            )
        racks = missing_fig("racks", "racks", binding.plain(), [npr])
        return {"nodes_per_rack": npr, "racks": racks, "limited_by": limited_by, "binding": binding}
    racks = derived(
        math.ceil(nodes.value / per_rack),
        "racks",
        "racks",
        "ceil(nodes / nodes per rack)",
        [nodes, npr],
    )
    return {"nodes_per_rack": npr, "racks": racks, "limited_by": limited_by, "binding": None}


def rack_power_w(nodes_per_rack: Figure, node_power: Figure) -> Figure:
    """Power drawn by one full rack: nodes per rack x node power."""
    return derived(
        nodes_per_rack.value * node_power.value if nodes_per_rack.ok and node_power.ok else None,
        "W",
        "power per full rack",
        "nodes per rack x node power",
        [nodes_per_rack, node_power],
    )


def it_power_w(
    nodes: Figure,
    node_power: Figure,
    network_power: Figure | None = None,
    storage_power: Figure | None = None,
) -> Figure:
    """IT power of the fleet: nodes x node power (+ network and shared storage where known)."""
    extras = [
        (fig, name)
        for fig, name in ((network_power, "network power"), (storage_power, "storage power"))
        if fig is not None and fig.ok
    ]
    if extras:
        return derived(
            nodes.value * node_power.value + sum(f.value for f, _ in extras)
            if node_power.ok
            else None,
            "W",
            "IT power",
            "nodes x node power + " + " + ".join(n for _, n in extras),
            [nodes, node_power, *(f for f, _ in extras)],
        )
    return derived(
        nodes.value * node_power.value if node_power.ok else None,
        "W",
        "IT power",
        "nodes x node power (network power not in the catalog)",
        [nodes, node_power],
    )


def facility_power_w(it_power: Figure, pue: Figure) -> Figure:
    """Facility power = IT power x PUE (The Green Grid WP#49)."""
    if not pue.ok:
        return missing_fig(
            "W", "facility power", "no PUE given: add costs.pue to the scenario", [it_power]
        )
    return derived(
        it_power.value * pue.value if it_power.ok else None,
        "W",
        "facility power",
        "IT power x PUE (The Green Grid WP#49)",
        [it_power, pue],
    )


# ------------------------------------------------------------------ the option's power and racks (moved from options.py)


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
    return host_overhead_ratio(
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
    node_w = node_power_w(
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
    racks = racks_for(
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
    it = it_power_w(opt.sized_nodes, node_w, opt.fabric.get("power_w"), storage_w)
    pue = ctx.inp(("costs", "pue"), "ratio", "PUE")
    facility = facility_power_w(it, pue)
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
        "power_per_full_rack_w": rack_power_w(racks["nodes_per_rack"], node_w),
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
