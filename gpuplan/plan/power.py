"""Power and racks: GPUs -> nodes -> racks under the power density limit -> facility power.

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
from typing import TypedDict

from gpuplan.plan.provenance import Figure, Text, derived, missing_fig


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
