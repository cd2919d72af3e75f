"""Power and racks: GPUs -> nodes -> racks under the power density limit -> facility power.

Method
------
* Node power: where the trial node measured the GPU's power under load (``power_w`` of the
  matmul probe, DESIGN.md 3.1), node power = measured GPU power x GPUs per node + the
  node's non-GPU overhead; the overhead is the node catalog's maximum power minus the GPUs'
  TDP. Otherwise the node catalog's maximum power. Without a node row (a cloud instance),
  GPU TDP x GPUs, flagged as lacking the host overhead.
* Nodes per rack = min(floor(rack power limit / node power), floor(rack units / node
  height)); racks = ceil(nodes / nodes per rack).
* IT power = nodes x node power (+ switches where the catalog gives their power);
  facility power = IT power x PUE (The Green Grid, "PUE: a comprehensive examination of
  the metric", WP#49, 2012: PUE = total facility energy / IT equipment energy).
"""

from __future__ import annotations

import math

from gpuplan.plan.provenance import Figure, Text, derived, missing_fig


def node_power_w(
    *,
    gpus_per_node: Figure,
    tdp_w: Figure,
    node_max_power_w: Figure | None,
    measured_gpu_power_w: Figure | None,
) -> Figure:
    """Electrical power of one node under training load (see module docstring)."""
    have_node = node_max_power_w is not None and node_max_power_w.ok
    if measured_gpu_power_w is not None and measured_gpu_power_w.ok:
        if have_node and tdp_w.ok:
            overhead = derived(
                max(node_max_power_w.value - tdp_w.value * gpus_per_node.value, 0.0),
                "W",
                "node power besides GPUs",
                "node max power - GPU TDP x GPUs per node",
                [node_max_power_w, tdp_w, gpus_per_node],
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
    if have_node:
        return derived(
            node_max_power_w.value,
            "W",
            "node power",
            "node catalog maximum power",
            [node_max_power_w],
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


def racks_for(
    *,
    nodes: Figure,
    node_power: Figure,
    power_per_rack_kw: Figure | None,
    rack_units_per_rack: Figure | None,
    node_rack_units: Figure | None,
) -> dict:
    """Nodes per rack and racks, with which limit decides.

    Returns a dict with ``nodes_per_rack`` and ``racks`` (Figures, ``racks`` missing when a
    single node does not fit a rack), ``limited_by`` and ``binding`` (a sentence, or None).
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
    if not limits:
        npr = derived(
            nodes.value,
            "nodes",
            "nodes per rack",
            "no rack power or rack-unit limit given: all nodes counted in one rack",
            [nodes],
        )
        racks = derived(1, "racks", "racks", "no rack limits given", [nodes])
        return {"nodes_per_rack": npr, "racks": racks, "limited_by": None, "binding": None}
    per_rack, limited_by, _used = min(limits, key=lambda x: x[0])
    formula = (
        "min("
        + ", ".join(
            "floor(rack power limit / node power)"
            if n == "rack power"
            else "floor(rack units / node height)"
            for _, n, _ in limits
        )
        + ")"
    )
    used_all = [f for _, _, fs in limits for f in fs]
    npr = derived(int(per_rack), "nodes", "nodes per rack", formula, used_all)
    if per_rack < 1:
        if limited_by == "rack power":
            binding = Text(
                "one node draws {node}, more than the {rack} kW a rack may take "
                "(constraints.power_per_rack_kw)",
                {"node": node_power, "rack": power_per_rack_kw},
            )
        else:
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


def it_power_w(nodes: Figure, node_power: Figure, network_power: Figure | None = None) -> Figure:
    """IT power of the fleet: nodes x node power (+ network equipment where known)."""
    if network_power is not None and network_power.ok:
        return derived(
            nodes.value * node_power.value + network_power.value,
            "W",
            "IT power",
            "nodes x node power + network power",
            [nodes, node_power, network_power],
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
