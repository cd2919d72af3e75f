"""One candidate option: a GPU on a cloud instance type or an on-premises node type.

This module holds the :class:`Option` record, the enumeration of candidates and the order
in which an option is evaluated (:func:`evaluate_option`): the plan sizes the workloads
(:mod:`gpuplan.plan.workloads`), then builds the fleet with the builders that live beside
their formulas (fabric: :func:`gpuplan.plan.fabric.build_fabric`; storage:
:func:`gpuplan.plan.storage.build_storage`; power and racks:
:func:`gpuplan.plan.power.build_power`) and prices it under every purchasing model
(:func:`gpuplan.plan.cost.price_option`, :func:`gpuplan.plan.cost.check_budget`). A
constraint that cannot be met makes the option infeasible and is recorded as a
:class:`~gpuplan.plan.provenance.Binding` with the figures on both sides; nothing raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from gpuplan.catalogs.names import names_every_gpu
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
)
from gpuplan.plan.shared import TeamsSizing
from gpuplan.plan.workloads import (
    ServingOnOption,
    TrainingOnOption,
    size_serving,
    size_training,
)

if TYPE_CHECKING:
    from gpuplan.catalogs.catalog import Catalog
    from gpuplan.catalogs.schema import Accelerator


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
    if names_every_gpu(cand.gpus):  # the platforms below decide which are options
        gpus = list(cat.gpus)
    else:
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
    mult = costmod.instance_multiple_fig(ctx, opt)
    needed = derived(
        sum(p.value for p in parts), "nodes", "nodes the workloads need", formula, parts
    )
    if mult is not None:
        parts = [costmod.whole_units(ctx, opt, p) for p in parts]
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
    fabmod.build_fabric(ctx, opt)
    stomod.build_storage(ctx, opt)
    powmod.build_power(ctx, opt)
    costmod.price_option(ctx, opt)
    costmod.check_budget(ctx, opt)
    return opt
