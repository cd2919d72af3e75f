"""The shared-cluster section: the scenario's teams simulated on the planned fleet.

The teams' job mix is drawn with the scheduling part's seeded workload generator and
replayed by its discrete-event simulator (:func:`gpuplan.scheduling.simulate`) on
the recommended option's nodes (or on the cluster the ``scheduling`` block names), under
the scenario's policy and, for comparison, strict FIFO and fair-share. The section keeps
the contract fields of ``gpuplan schedule`` (utilisation, waits, job completion times,
per-team waits, starved jobs), each as a figure derived from the simulation.

It also answers "how big": the wait-vs-cluster-size curve of the same jobs
(:func:`gpuplan.scheduling.capacity.wait_vs_size_curve`) under the scenario's policy and
under strict FIFO (the baseline whose waits provably never grow with the cluster,
docs/scheduling.md section 5), at ``scheduling.sizes_gpus`` or by default at the scheduling
part's :func:`~gpuplan.scheduling.capacity.default_sizes` plus the planned size; the
smallest cluster meeting ``scheduling.p95_wait_target_s`` when it is set; and, with
``scheduling.reference_trace: philly``, the curve of the Microsoft Philly trace
(:func:`~gpuplan.scheduling.capacity.philly_wait_curve`) with the citation its
CC BY 4.0 licence requires.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TypedDict

from gpuplan.errors import GpuplanError, InputError
from gpuplan.plan.context import PlanContext
from gpuplan.plan.provenance import Figure, FigureDict, Provenance, Text, derived, input_fig

if TYPE_CHECKING:
    from gpuplan.plan.options import Option
    from gpuplan.scheduling.cluster import Cluster
    from gpuplan.scheduling.schema import SchedulingSpec
    from gpuplan.scheduling.workload import Job

COMPARE_POLICIES = ("fifo", "fair-share")
#: The curve drawn next to the scenario policy's: strict FIFO, whose waits never grow with
#: the cluster (docs/scheduling.md section 5), so the two curves bracket what the policy buys.
CURVE_BASELINE_POLICY = "fifo"
#: Policy of the reference trace's curve: EASY backfill, the default of
#: :func:`~gpuplan.scheduling.capacity.philly_wait_curve` (about 15 s of CPU for the
#: whole trace; fair-share takes about twice as long and needs shares the trace lacks).
REFERENCE_POLICY = "backfill"
_STAT_KEYS = ("mean", "p50", "p95", "p99", "max")
_DEFAULT_SIZES_FORMULA = (
    "ceil(max(m x mean GPU demand, largest job) / GPUs per node) x GPUs per node, "
    "m in {multiples} (gpuplan.scheduling.capacity.default_sizes)"
)
_SCALED_FORMULA = (
    "the cluster's node types resized to the requested GPUs in whole nodes "
    "(gpuplan.scheduling.cluster.Cluster.scaled)"
)


class TeamsSizing(TypedDict):
    """:func:`teams_sizing`'s answer: the p95 wait target, the teams' nodes (None when the
    target is missed at every size tried), whether they set the shared part of the fleet."""

    constraint: str
    target: Figure
    nodes: Figure | None
    binds: bool
    message: Text


def _fig(value: object, unit: str, label: str, inputs: list[Figure], what: str) -> Figure | None:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return derived(
        value,
        unit,
        label,
        f"discrete-event simulation of the teams' jobs ({what}; gpuplan.scheduling)",
        inputs,
    )


def _summary(res: dict[str, Any], inputs: list[Figure]) -> FigureDict:
    pol = res.get("policy", "")
    what = f"policy {pol}"
    out: FigureDict = {
        "policy": pol,
        "utilization": _fig(
            res.get("utilization"), "fraction", f"{pol}: GPU utilisation", inputs, what
        ),
        "jobs_simulated": _fig(
            res.get("jobs_simulated"), "jobs", f"{pol}: jobs simulated", inputs, what
        ),
        "starved_jobs_count": _fig(
            res.get("starved_jobs_count"), "jobs", f"{pol}: starved jobs", inputs, what
        ),
    }
    for key, name in (("wait_s", "wait"), ("jct_s", "job completion time")):
        stats = res.get(key) or {}
        out[key] = {
            k: _fig(stats.get(k), "s", f"{pol}: {name} {k}", inputs, what)
            for k in _STAT_KEYS
            if stats.get(k) is not None
        }
    per_team = {}
    for team, data in (res.get("per_team") or {}).items():
        w = (data or {}).get("wait_s") or {}
        per_team[team] = {
            k: _fig(w.get(k), "s", f"{pol}: {team} wait {k}", inputs, what)
            for k in ("p50", "p95", "max")
            if w.get(k) is not None
        }
    out["per_team_wait_s"] = per_team
    unsched = res.get("unschedulable") or {}
    if isinstance(unsched, dict) and unsched.get("count"):
        out["unschedulable_jobs"] = _fig(
            unsched["count"], "jobs", f"{pol}: jobs that never fit", inputs, what
        )
    return out


def _team_jobs(ctx: PlanContext, spec: SchedulingSpec) -> list[Job]:
    """The teams' seeded job draw (one per plan: sizing and the section replay the same jobs)."""
    from gpuplan.forecast.train import forecast_training
    from gpuplan.scheduling.workload import generate_workload

    key = (spec.horizon_days, spec.seed)
    if key not in ctx.shared_jobs:
        ctx.shared_jobs[key] = generate_workload(
            ctx.scenario.teams or [],
            horizon_s=spec.horizon_days * 86400.0,
            seed=spec.seed,
            forecast=forecast_training,
        )
    return list(ctx.shared_jobs[key])


def _sim_options(ctx: PlanContext, spec: SchedulingSpec, cluster: Cluster) -> dict[str, Any]:
    """The simulator's keyword options for the scenario's teams on ``cluster``: the same
    builder as ``gpuplan schedule --scenario``
    (:func:`gpuplan.scheduling.scenario.simulation_options`, so the same fair-share
    tree), with jobs that fit no node of the planned fleet dropped and counted."""
    from gpuplan.scheduling.scenario import simulation_options

    return {
        **simulation_options(ctx.scenario.teams or [], spec, cluster),
        "on_unschedulable": "drop",
    }


def _smallest_raw(
    ctx: PlanContext,
    spec: SchedulingSpec,
    jobs: list[Job],
    cluster: Cluster,
    options: dict[str, Any],
) -> dict[str, Any]:
    """:func:`capacity.smallest_cluster` for ``cluster``'s node shape, computed once per plan.

    The search only depends on the jobs, the policy and the node shape (it resizes the
    cluster itself), so the fleet sizing (:func:`teams_sizing`) and the section's table
    share one answer.
    """
    from gpuplan.scheduling.capacity import smallest_cluster

    shape = tuple((p.gpus_per_node, p.gpu) for p in cluster.pools)
    target_s = spec.p95_wait_target_s
    if target_s is None:  # the callers check it first
        raise InputError(
            "the smallest cluster needs a p95 wait target",
            hint="add scheduling.p95_wait_target_s (seconds) to the scenario",
        )
    key = (spec.horizon_days, spec.seed, spec.policy, shape)
    if key not in ctx.shared_smallest:
        try:
            ctx.shared_smallest[key] = smallest_cluster(
                jobs,
                cluster,
                float(target_s),
                spec.policy,
                teams=ctx.scenario.teams,
                **options,
            )
        except GpuplanError as exc:
            ctx.shared_smallest[key] = exc
    res = ctx.shared_smallest[key]
    if isinstance(res, GpuplanError):
        raise res
    return dict(res)


def teams_sizing(
    ctx: PlanContext, opt: Option, dedicated_nodes: Figure | None
) -> TeamsSizing | None:
    """The nodes the teams need on ``opt``'s nodes to meet ``scheduling.p95_wait_target_s``.

    The teams share the fleet's nodes other than the serving ones (module docstring), so the
    fleet needs ``max(training nodes, teams' nodes) + serving nodes``. ``dedicated_nodes`` is
    the training workloads' node count (None without training). Returns None when the
    scenario has no teams, no p95 target, or simulates them on its own
    ``scheduling.cluster``; otherwise ``{"constraint", "target", "nodes", "binds",
    "message"}`` where ``nodes`` is None when the target is missed at every size tried
    (``message`` says so) and ``binds`` says whether the teams, not the training runs, set
    the shared part of the fleet.
    """
    from gpuplan.scheduling.cluster import Cluster
    from gpuplan.scheduling.schema import SchedulingSpec

    sc = ctx.scenario
    spec = sc.scheduling or SchedulingSpec.model_validate({})
    if not sc.teams or spec.cluster is not None or spec.p95_wait_target_s is None:
        return None
    target = ctx.inp(("scheduling", "p95_wait_target_s"), "s", "p95 wait target")
    out: TeamsSizing = {
        "constraint": "scheduling.p95_wait_target_s",
        "target": target,
        "nodes": None,
        "binds": False,
        "message": Text(""),
    }
    gpn = int(opt.gpus_per_node.value)
    shape = Cluster.homogeneous(1, gpn, gpu=opt.gpu.id)
    try:
        jobs = _team_jobs(ctx, spec)
        if not jobs:
            return None
        res = _smallest_raw(ctx, spec, jobs, shape, _sim_options(ctx, spec, shape))
    except GpuplanError as exc:
        out["message"] = Text(f"teams not sized: {exc.one_line()}")
        return out
    if res["overall"] is None:
        out["message"] = Text(
            "the teams miss the p95 wait target {target} at every cluster size tried",
            {"target": target},
        )
        return out
    nodes = derived(
        res["overall"]["nodes"],
        "nodes",
        "nodes the teams need for the p95 wait target",
        f"bisection over node counts of discrete-event simulations (policy {spec.policy}): "
        "the fewest nodes whose p95 wait meets the target for every team "
        "(gpuplan.scheduling.capacity.smallest_cluster)",
        [target, opt.gpus_per_node],
    )
    binds = dedicated_nodes is None or nodes.value > dedicated_nodes.value
    out["nodes"] = nodes
    out["binds"] = binds
    out["message"] = Text(
        "the teams need {nodes} to meet the p95 wait target {target}"
        + (" (more than the training runs' {training})" if binds and dedicated_nodes else "")
        + ("" if binds else " (the training runs' {training} are enough)"),
        {"nodes": nodes, "target": target, "training": dedicated_nodes}
        if dedicated_nodes is not None
        else {"nodes": nodes, "target": target},
    )
    return out


def fleet_parts_with_teams(
    ctx: PlanContext, opt: Option, parts: list[Figure], formula: str
) -> tuple[list[Figure], str, TeamsSizing | None]:
    """The fleet's node parts once the teams' p95 wait target is counted.

    ``parts`` are the workloads' node counts (training and serving, side by side). When the
    teams need more shared nodes than the training runs bring, the training parts are
    replaced by the teams' nodes, so that the fleet the plan prices is the one the shared
    section finds meeting the target. Returns ``(parts, formula, sizing)`` where ``sizing``
    is :func:`teams_sizing`'s answer (None without a target).
    """
    training = [t.nodes for t in opt.training if t.nodes is not None]
    serving = [s.nodes for s in opt.serving if s.nodes is not None]
    dedicated = None
    if training:
        dedicated = derived(
            sum(n.value for n in training),
            "nodes",
            "nodes of the training runs",
            "sum of the training workloads' nodes",
            training,
        )
    sizing = teams_sizing(ctx, opt, dedicated)
    if sizing is None or not sizing["binds"] or sizing["nodes"] is None:
        return parts, formula, sizing
    return (
        [sizing["nodes"], *serving],
        "max(training nodes, nodes the teams need for the p95 wait target) + serving nodes "
        "(the teams share every node but the serving ones; gpuplan.plan.shared)",
        sizing,
    )


def shared_cluster_section(ctx: PlanContext, option: Option | None) -> FigureDict:
    """Simulate the scenario's teams on ``option``'s fleet (module docstring)."""
    from gpuplan.scheduling.cluster import Cluster
    from gpuplan.scheduling.schema import SchedulingSpec
    from gpuplan.scheduling.simulate import simulate

    sc = ctx.scenario
    spec = sc.scheduling or SchedulingSpec.model_validate({})
    if spec.cluster is not None:
        cluster = Cluster.from_spec(spec.cluster)
        where = "the scenario's scheduling.cluster"
        shared_extra: dict[str, Figure] = {}
        inputs = [ctx.inp(("scheduling", "cluster"), "", "scheduling cluster")]
    else:
        if option is None or option.nodes is None:
            return {"error": "no sized option to simulate the teams on"}
        serving = [sv.nodes for sv in option.serving if sv.nodes is not None]
        shared_nodes = derived(
            option.nodes.value - sum(n.value for n in serving),
            "nodes",
            "nodes shared by the teams",
            "fleet nodes - serving nodes (serving runs on dedicated nodes)",
            [option.nodes, *serving],
        )
        if shared_nodes.value < 1:
            return {"error": "the recommended fleet has no nodes besides the serving ones"}
        cluster = Cluster.homogeneous(
            int(shared_nodes.value), int(option.gpus_per_node.value), gpu=option.gpu.id
        )
        where = f"the recommended fleet ({option.id}) less its serving nodes"
        inputs = [shared_nodes, option.gpus_per_node]
        shared_extra = {"shared_nodes": shared_nodes}
    horizon = ctx.inp(
        ("scheduling", "horizon_days"), "days", "simulated window", fallback=spec.horizon_days
    )
    seed = ctx.inp(("scheduling", "seed"), "", "simulation seed", fallback=spec.seed)
    cluster_inputs = list(inputs)
    inputs = [*inputs, horizon, seed]
    ctx.progress("shared cluster: drawing the teams' jobs")
    try:
        jobs = _team_jobs(ctx, spec)
    except GpuplanError as exc:
        return {"cluster": where, "error": exc.one_line()}
    options = _sim_options(ctx, spec, cluster)
    policies = [spec.policy, *[p for p in COMPARE_POLICIES if p != spec.policy]]
    results: list[FigureDict] = []
    for pol in policies:
        ctx.progress(f"shared cluster: simulating {pol} ({len(jobs)} jobs)")
        try:
            res = simulate(jobs, cluster, pol, **options).to_json()
        except GpuplanError as exc:
            results.append({"policy": pol, "error": exc.one_line()})
            continue
        results.append(_summary(res, inputs))
    cluster_gpus = derived(
        cluster.total_gpus, "GPUs", "shared cluster GPUs", "nodes x GPUs per node", inputs[:2]
    )
    jobs_fig = derived(
        len(jobs),
        "jobs",
        "jobs drawn for the teams",
        "seeded draw from the teams' arrival rates, sizes and durations "
        "(gpuplan.scheduling.workload)",
        [horizon, seed],
    )
    out: FigureDict = {
        "cluster": where,
        **shared_extra,
        "cluster_gpus": cluster_gpus,
        "jobs": jobs_fig,
        "scenario_policy": spec.policy,
        "policies": results,
    }
    if not jobs:
        return out
    policy_fig = ctx.inp(("scheduling", "policy"), "", "scheduling policy", fallback=spec.policy)
    out["wait_vs_size"] = _wait_vs_size(
        ctx, spec, jobs, cluster, options, cluster_gpus, jobs_fig, policy_fig, cluster_inputs
    )
    if spec.p95_wait_target_s is not None:
        out["smallest_cluster"] = _smallest(
            ctx, spec, jobs, cluster, options, jobs_fig, policy_fig, cluster_inputs
        )
    if spec.reference_trace is not None:
        out["reference_curve"] = _reference_curve(ctx, spec)
    return out


# ---------------------------------------------------------------- capacity answers


def _point(
    p: dict[str, Any],
    size: Figure,
    inputs: list[Figure],
    scale_inputs: list[Figure],
    prefix: str,
    formula: str,
    *,
    per_team: bool = True,
) -> FigureDict:
    """One point of a wait-vs-size curve (a :func:`capacity.summary`) as figures."""
    sim = [*inputs, size]

    def fig(value: object, unit: str, what: str) -> Figure | None:
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return None
        return derived(value, unit, f"{prefix}: {what}", formula, sim)

    waits = p.get("wait_s") or {}
    out: FigureDict = {
        "requested_gpus": size,
        "gpus": derived(
            p["gpus"], "GPUs", f"{prefix}: cluster GPUs", _SCALED_FORMULA, [size, *scale_inputs]
        ),
        "nodes": derived(
            p["nodes"], "nodes", f"{prefix}: nodes", _SCALED_FORMULA, [size, *scale_inputs]
        ),
        "utilization": fig(p.get("utilization"), "fraction", "GPU utilisation"),
        "wait_s": {
            k: fig(waits.get(k), "s", f"wait {k}") for k in _STAT_KEYS if waits.get(k) is not None
        },
        "jobs_simulated": fig(p.get("jobs_simulated"), "jobs", "jobs simulated"),
        "starved_jobs_count": fig(p.get("starved_jobs_count"), "jobs", "starved jobs"),
        "unschedulable_jobs": fig(p.get("unschedulable_jobs"), "jobs", "jobs that never fit"),
    }
    if per_team:
        out["per_team_p95_wait_s"] = {
            t: fig(v, "s", f"{t} wait p95")
            for t, v in (p.get("per_team_p95_wait_s") or {}).items()
            if v is not None
        }
    return out


def _curve_sizes(
    ctx: PlanContext,
    spec: SchedulingSpec,
    jobs: list[Job],
    cluster: Cluster,
    cluster_gpus: Figure,
    demand: Figure,
    cluster_inputs: list[Figure],
) -> tuple[str, list[tuple[int, Figure]]]:
    """The curve's sizes with their figures: the scenario's, or the default ones."""
    from gpuplan.scheduling.capacity import DEFAULT_LOAD_MULTIPLES, default_sizes

    if spec.sizes_gpus:
        sizes: dict[int, Figure] = {}
        for i, v in enumerate(spec.sizes_gpus):
            fig = ctx.inp(("scheduling", "sizes_gpus", i), "GPUs", f"curve size {i + 1}")
            sizes.setdefault(int(v), fig)
        return "scheduling.sizes_gpus", sorted(sizes.items())
    planned = int(cluster.total_gpus)
    out = {planned: cluster_gpus}
    for gpus in default_sizes(jobs, cluster):
        if gpus not in out:
            out[gpus] = derived(
                gpus,
                "GPUs",
                f"default curve size of {gpus} GPUs",
                _DEFAULT_SIZES_FORMULA.format(
                    multiples=", ".join(f"{m:g}" for m in DEFAULT_LOAD_MULTIPLES)
                ),
                [demand, *cluster_inputs],
            )
    return (
        "default: the planned size and multiples of the teams' mean GPU demand "
        "(gpuplan.scheduling.capacity.default_sizes)",
        sorted(out.items()),
    )


def _wait_vs_size(
    ctx: PlanContext,
    spec: SchedulingSpec,
    jobs: list[Job],
    cluster: Cluster,
    options: dict[str, Any],
    cluster_gpus: Figure,
    jobs_fig: Figure,
    policy_fig: Figure,
    cluster_inputs: list[Figure],
) -> FigureDict:
    """The teams' wait-vs-cluster-size curves (scenario policy and the FIFO baseline)."""
    from gpuplan.scheduling.capacity import mean_demand_gpus, wait_vs_size_curve

    demand = derived(
        mean_demand_gpus(jobs),
        "GPUs",
        "teams' mean GPU demand",
        "GPU-seconds of the teams' jobs / (last end - first submit) with every job started "
        "on arrival (gpuplan.scheduling.capacity.mean_demand_gpus)",
        [jobs_fig],
    )
    sizes_from, sizes = _curve_sizes(ctx, spec, jobs, cluster, cluster_gpus, demand, cluster_inputs)
    policies: list[tuple[str, Figure]] = [(spec.policy, policy_fig)]
    if spec.policy != CURVE_BASELINE_POLICY:
        baseline = input_fig(
            CURVE_BASELINE_POLICY,
            "",
            "baseline policy of the wait-vs-size curve",
            "default gpuplan.plan.shared.CURVE_BASELINE_POLICY",
            default=True,
        )
        policies.append((CURVE_BASELINE_POLICY, baseline))
    curves = []
    for pol, pol_fig in policies:
        ctx.progress(f"shared cluster: wait vs cluster size under {pol} ({len(sizes)} sizes)")
        entry: FigureDict = {
            "policy": pol,
            "scenario_policy": pol == spec.policy,
            "policy_input": pol_fig,
        }
        try:
            curve = wait_vs_size_curve(
                jobs, cluster, [g for g, _ in sizes], pol, teams=ctx.scenario.teams, **options
            )
        except GpuplanError as exc:
            curves.append({**entry, "error": exc.one_line()})
            continue
        formula = (
            f"discrete-event simulation of the teams' jobs at this cluster size (policy {pol}; "
            "gpuplan.scheduling.capacity.wait_vs_size_curve)"
        )
        entry["points"] = [
            _point(p, fig, [jobs_fig, pol_fig], cluster_inputs, f"{pol} at {g} GPUs", formula)
            for (g, fig), p in zip(sizes, curve["points"], strict=True)
        ]
        curves.append(entry)
    return {
        "sizes_from": sizes_from,
        "mean_demand_gpus": demand,
        "curves": curves,
    }


def _smallest(
    ctx: PlanContext,
    spec: SchedulingSpec,
    jobs: list[Job],
    cluster: Cluster,
    options: dict[str, Any],
    jobs_fig: Figure,
    policy_fig: Figure,
    cluster_inputs: list[Figure],
) -> FigureDict:
    """The fewest nodes whose p95 wait meets ``scheduling.p95_wait_target_s``."""
    target = ctx.inp(("scheduling", "p95_wait_target_s"), "s", "p95 wait target")
    out: FigureDict = {"policy": spec.policy, "target_p95_wait_s": target}
    ctx.progress(f"shared cluster: smallest cluster meeting the p95 wait target ({spec.policy})")
    try:
        res = _smallest_raw(ctx, spec, jobs, cluster, options)
    except GpuplanError as exc:
        return {**out, "error": exc.one_line()}
    inputs = [jobs_fig, policy_fig, target, *cluster_inputs]
    formula = (
        f"bisection over node counts of discrete-event simulations (policy {spec.policy}): "
        "the fewest nodes whose p95 wait meets the target "
        "(gpuplan.scheduling.capacity.smallest_cluster)"
    )
    by_gpus = {e["gpus"]: e for e in res["evaluations"]}

    def size(entry: dict[str, Any] | None, who: str) -> FigureDict | None:
        if entry is None:
            return None
        sized: FigureDict = {
            "gpus": derived(
                entry["gpus"], "GPUs", f"smallest cluster for {who}: GPUs", formula, inputs
            ),
            "nodes": derived(
                entry["nodes"], "nodes", f"smallest cluster for {who}: nodes", formula, inputs
            ),
        }
        return sized

    overall = size(res["overall"], "every team")
    if overall is not None:
        at = by_gpus.get(res["overall"]["gpus"]) or {}
        overall["per_team_p95_wait_s"] = {
            t: derived(v, "s", f"smallest cluster for every team: {t} wait p95", formula, inputs)
            for t, v in (at.get("per_team_p95_wait_s") or {}).items()
            if v is not None
        }
    out["overall"] = overall
    out["per_team"] = {t: size(e, t) for t, e in res["per_team"].items()}
    largest = max(by_gpus) if by_gpus else None
    if largest is not None:
        out["largest_size_tried_gpus"] = derived(
            largest, "GPUs", "largest cluster the search tried", formula, inputs
        )
    return out


def _reference_curve(ctx: PlanContext, spec: SchedulingSpec) -> FigureDict:
    """The wait-vs-size curve of a shipped trace (the Philly trace), with its citation."""
    from gpuplan.scheduling import capacity
    from gpuplan.scheduling.workload import PHILLY_CITATION

    trace = spec.reference_trace
    trace_fig = Figure(
        trace,
        "",
        "reference trace",
        Provenance(
            "input",
            ctx.loaded.ref("scheduling", "reference_trace"),
            source=PHILLY_CITATION,
        ),
    )
    ctx.inputs.setdefault("scheduling.reference_trace", trace_fig)
    policy_fig = input_fig(
        REFERENCE_POLICY,
        "",
        "policy of the reference trace's curve",
        "default gpuplan.plan.shared.REFERENCE_POLICY",
        default=True,
    )
    # read at call time, so that tests may shorten it
    sizes = sorted({int(g) for g in capacity.PHILLY_CURVE_SIZES_GPUS})
    size_figs = [
        input_fig(
            g,
            "GPUs",
            f"Philly curve size {i + 1}",
            "default gpuplan.scheduling.capacity.PHILLY_CURVE_SIZES_GPUS",
            default=True,
        )
        for i, g in enumerate(sizes)
    ]
    out: FigureDict = {
        "trace": trace,
        "policy": REFERENCE_POLICY,
        "policy_input": policy_fig,
        "attribution": PHILLY_CITATION,
    }

    def progress(done: int, total: int) -> None:
        ctx.progress(f"shared cluster: Philly trace curve, {done} of {total} sizes")

    ctx.progress(f"shared cluster: Philly trace curve ({len(sizes)} sizes, {REFERENCE_POLICY})")
    try:
        curve = capacity.philly_wait_curve(sizes, REFERENCE_POLICY, progress=progress)
    except GpuplanError as exc:
        return {**out, "error": exc.one_line()}
    out["attribution"] = curve.get("attribution") or PHILLY_CITATION
    out["mean_demand_gpus"] = derived(
        curve["mean_demand_gpus"],
        "GPUs",
        "Philly trace mean GPU demand",
        "GPU-seconds of the trace's jobs / (last end - first submit) "
        "(gpuplan.scheduling.capacity.mean_demand_gpus)",
        [trace_fig],
    )
    formula = (
        f"discrete-event simulation of the Microsoft Philly trace at this cluster size "
        f"(policy {REFERENCE_POLICY}; gpuplan.scheduling.capacity.philly_wait_curve)"
    )
    out["points"] = [
        _point(p, fig, [trace_fig, policy_fig], [], f"Philly at {g} GPUs", formula, per_team=False)
        for g, fig, p in zip(sizes, size_figs, curve["points"], strict=True)
    ]
    return out
