"""Published reference designs rebuilt by the planner: ``gpuplan validate plan``.

Each design in ``data/reference_designs.yaml`` names a node type, a switch and a fleet size
(nodes, or GPUs that the plan turns into nodes); the plan's own builders
(:func:`gpuplan.plan.fabric.build_fabric` and :func:`~gpuplan.plan.power.build_power`,
which call :mod:`gpuplan.plan.fabric` and :mod:`gpuplan.plan.power`) build the fleet from
the catalog, exactly as ``gpuplan plan`` does for an on-premises option, and every published
figure (switch and cable counts, nodes per scalable unit, racks, power) is compared with the
plan's value: ``error = (plan - reference) / reference``. A figure is *within* when
``|error| <= tolerance`` (10%, issue 17). Figures that count something the plan does not
model are marked ``gated: false`` in the data with the reason; they are shown but do not
decide ``all_within``.

Sources: NVIDIA DGX SuperPOD reference architectures for DGX H100 (RA-11333-001 V11,
Table 4), DGX B200 ('Larger DGX SuperPOD component counts'), DGX GB200 (SU description)
and DGX B300 XDR (Table 3); each figure carries its URL, document and table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, SupportsFloat

import yaml

from gpuplan.errors import InputError, SchemaError
from gpuplan.plan.provenance import FigureDict

if TYPE_CHECKING:
    from gpuplan.catalogs.catalog import Catalog
    from gpuplan.plan.options import Option

#: Largest |relative error| a compared figure may have (issue 17, "within 10%").
TOLERANCE = 0.10

_PLAN_KEYS = ("fabric.", "power.")


@dataclass(frozen=True)
class FigureCheck:
    """One published figure against the plan's value."""

    design: str
    figure: str
    plan_key: str
    reference: float
    plan: float | None
    error: float | None
    within: bool
    gated: bool
    table: str
    note: str | None

    def to_json(self) -> FigureDict:
        return {
            "design": self.design,
            "figure": self.figure,
            "plan_key": self.plan_key,
            "reference": self.reference,
            "plan": self.plan,
            "error": self.error,
            "within": self.within,
            "gated": self.gated,
            "table": self.table,
            "note": self.note,
        }


def load_designs() -> list[dict[str, Any]]:
    """The shipped reference designs (``gpuplan/plan/data/reference_designs.yaml``)."""
    text = resources.files("gpuplan.plan").joinpath("data/reference_designs.yaml").read_text()
    data = yaml.safe_load(text)
    designs = data.get("designs") if isinstance(data, dict) else None
    if not isinstance(designs, list) or not designs:
        raise SchemaError(
            "gpuplan/plan/data/reference_designs.yaml has no designs",
            hint="reinstall gpuplan: the shipped data file is damaged",
        )
    for d in designs:
        for key in ("id", "name", "document", "url", "retrieved", "node", "switch", "figures"):
            if key not in d:
                raise SchemaError(
                    f"reference design {d.get('id', '?')}: missing {key}",
                    hint="every design names its node, switch, source and figures",
                )
        if ("nodes" in d) == ("gpus" in d):
            raise SchemaError(
                f"reference design {d['id']}: give exactly one of nodes and gpus",
                hint="the fleet size is nodes or GPUs",
            )
        for f in d["figures"]:
            key = str(f.get("plan", ""))
            if key != "nodes" and not key.startswith(_PLAN_KEYS):
                raise SchemaError(
                    f"reference design {d['id']}, figure {f.get('figure')!r}: plan key "
                    f"{key!r} is not nodes, fabric.<key> or power.<key>",
                    hint="see the comment at the top of reference_designs.yaml",
                )
    return designs


def _scenario_text(design: dict[str, Any], gpu_id: str) -> str:
    # The smallest valid scenario: one on-premises node type, the design's switch, a
    # non-blocking rail-optimised fabric (what every SuperPOD RA specifies). The workload
    # is never sized here: the fleet size comes from the design.
    return (
        f"name: reference-{design['id']}\n"
        "workloads:\n  training:\n"
        "    - {name: reference, model: llama3.1-8b, tokens: 1.0e9, seq_len: 4096,"
        " global_batch: 8, num_gpus: 8}\n"
        f"candidates: {{gpus: [{gpu_id}], onprem_nodes: [{design['node']}]}}\n"
        f"fabric: {{topology: rail_optimized, oversubscription: 1, switch: {design['switch']}}}\n"
    )


def build_design(design: dict[str, Any], catalog: Catalog) -> Option:
    """Build the fleet of one reference design with the plan's builders; the Option."""
    from gpuplan.plan import fabric as fabmod
    from gpuplan.plan import options as optmod
    from gpuplan.plan import power as powmod
    from gpuplan.plan.context import PlanContext
    from gpuplan.plan.provenance import derived, input_fig
    from gpuplan.plan.scenario import parse_scenario

    node = catalog.node(design["node"])
    gpu = catalog.gpu(node.accelerator_id)
    loaded = parse_scenario(_scenario_text(design, gpu.id))
    ctx = PlanContext(loaded, catalog)
    gpn = ctx.cat("node", node, "accelerators_per_node", "GPUs", f"{node.id} GPUs per node")
    where = f"reference design {design['id']}"
    if "nodes" in design:
        nodes = input_fig(int(design["nodes"]), "nodes", "nodes", where)
    else:
        want = input_fig(int(design["gpus"]), "GPUs", "GPUs", where)
        nodes = derived(
            math.ceil(want.value / gpn.value),
            "nodes",
            "nodes",
            "ceil(GPUs / GPUs per node)",
            [want, gpn],
        )
    gpus = derived(nodes.value * gpn.value, "GPUs", "GPUs", "nodes x GPUs per node", [nodes, gpn])
    opt = optmod.Option(
        id=f"onprem:{node.id}",
        kind="onprem",
        label=node.id,
        gpu=gpu,
        platform=node,
        cloud=None,
        gpus_per_node=gpn,
        nodes=nodes,
        gpus=gpus,
    )
    fabmod.build_fabric(ctx, opt)
    powmod.build_power(ctx, opt)
    return opt


def _plan_value(opt: Option, key: str) -> float | None:
    if key == "nodes":
        obj: object = opt.nodes
    else:
        block, _, field_name = key.partition(".")
        obj = getattr(opt, block, {}).get(field_name)
    value = getattr(obj, "value", obj)
    return float(value) if isinstance(value, SupportsFloat) else None


def validate_designs(
    catalog: Catalog, designs: list[dict[str, Any]] | None = None, *, only: str | None = None
) -> dict[str, Any]:
    """Compare every reference figure with the plan's; the JSON of ``validate plan``.

    Raises
    ------
    InputError
        ``only`` names no shipped design (the message lists them).
    """
    designs = load_designs() if designs is None else designs
    if only is not None:
        chosen = [d for d in designs if d["id"] == only]
        if not chosen:
            raise InputError(
                f"no reference design {only!r}",
                hint="use one of " + ", ".join(d["id"] for d in designs),
            )
        designs = chosen
    out_designs = []
    checks: list[FigureCheck] = []
    for d in designs:
        opt = build_design(d, catalog)
        rows = []
        for f in d["figures"]:
            ref = float(f["value"])
            plan = _plan_value(opt, f["plan"])
            error = None if plan is None else (plan - ref) / ref
            gated = bool(f.get("gated", True))
            c = FigureCheck(
                design=d["id"],
                figure=f["figure"],
                plan_key=f["plan"],
                reference=ref,
                plan=plan,
                error=error,
                within=error is not None and abs(error) <= TOLERANCE + 1e-12,
                gated=gated,
                table=str(f.get("table", "")),
                note=f.get("note"),
            )
            checks.append(c)
            rows.append(c.to_json())
        out_designs.append(
            {
                "id": d["id"],
                "name": d["name"],
                "document": d["document"],
                "url": d["url"],
                "retrieved": str(d["retrieved"]),
                "node": d["node"],
                "switch": d["switch"],
                "nodes": _plan_value(opt, "nodes"),
                "figures": rows,
                "plan_notes": list(opt.notes),
            }
        )
    gated_checks = [c for c in checks if c.gated]
    errors = [abs(c.error) for c in gated_checks if c.error is not None]
    return {
        "tolerance": TOLERANCE,
        "designs": out_designs,
        "summary": {
            "designs": len(out_designs),
            "figures": len(checks),
            "gated_figures": len(gated_checks),
            "within": sum(c.within for c in gated_checks),
            "max_abs_error": max(errors) if errors else None,
            "all_within": all(c.within for c in gated_checks),
        },
    }
