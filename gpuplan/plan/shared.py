"""The shared-cluster section: the scenario's teams simulated on the planned fleet.

The teams' job mix is drawn with the scheduling part's seeded workload generator and
replayed by its discrete-event simulator (:func:`gpuplan.plan.scheduling.simulate`) on
the recommended option's nodes (or on the cluster the ``scheduling`` block names), under
the scenario's policy and, for comparison, strict FIFO and fair-share. The section keeps
the contract fields of ``gpuplan schedule`` (utilisation, waits, job completion times,
per-team waits, starved jobs), each as a figure derived from the simulation.
"""

from __future__ import annotations

import math
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.plan.context import PlanContext
from gpuplan.plan.provenance import Figure, derived

COMPARE_POLICIES = ("fifo", "fair-share")
_STAT_KEYS = ("mean", "p50", "p95", "p99", "max")


def _fig(value: Any, unit: str, label: str, inputs: list[Figure], what: str) -> Figure | None:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return derived(
        value,
        unit,
        label,
        f"discrete-event simulation of the teams' jobs ({what}; gpuplan.plan.scheduling)",
        inputs,
    )


def _summary(res: dict[str, Any], inputs: list[Figure]) -> dict[str, Any]:
    pol = res.get("policy", "")
    what = f"policy {pol}"
    out: dict[str, Any] = {
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


def shared_cluster_section(ctx: PlanContext, option: Any) -> dict[str, Any]:
    """Simulate the scenario's teams on ``option``'s fleet (module docstring)."""
    from gpuplan.plan.scheduling.cluster import Cluster
    from gpuplan.plan.scheduling.engine import TeamQuota
    from gpuplan.plan.scheduling.schema import SchedulingSpec, derived_quotas
    from gpuplan.plan.scheduling.simulate import simulate
    from gpuplan.plan.scheduling.workload import generate_workload

    sc = ctx.scenario
    spec = sc.scheduling or SchedulingSpec()
    if spec.cluster is not None:
        cluster = Cluster.from_spec(spec.cluster)
        where = "the scenario's scheduling.cluster"
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
    horizon = ctx.inp(
        ("scheduling", "horizon_days"), "days", "simulated window", fallback=spec.horizon_days
    )
    seed = ctx.inp(("scheduling", "seed"), "", "simulation seed", fallback=spec.seed)
    inputs = [*inputs, horizon, seed]
    ctx.progress("shared cluster: drawing the teams' jobs")
    try:
        jobs = generate_workload(sc.teams, horizon_s=spec.horizon_days * 86400.0, seed=spec.seed)
    except GpuplanError as exc:
        return {"cluster": where, "error": exc.one_line()}
    options: dict[str, Any] = {
        "shares": {t.name: t.share for t in sc.teams},
        "priority_classes": dict(spec.priority_classes),
        "fairshare_algorithm": spec.fairshare_algorithm,
        "preemption": spec.preemption,
        "quota_mode": spec.quota_mode,
        "checkpoint_interval_s": spec.checkpoint_interval_s,
        "restart_cost_s": spec.restart_cost_s,
        "starvation_wait_s": spec.starvation_wait_s,
        "starvation_runtime_multiple": spec.starvation_runtime_multiple,
        "on_unschedulable": "drop",
    }
    if spec.quota_mode != "none":
        nominal = derived_quotas(sc.teams, cluster.total_gpus)
        options["quotas"] = {
            t.name: TeamQuota(
                nominal[t.name],
                t.borrowing_limit_gpus,
                t.lending_limit_gpus,
                t.cohort,
            )
            for t in sc.teams
        }
    policies = [spec.policy, *[p for p in COMPARE_POLICIES if p != spec.policy]]
    results = []
    for pol in policies:
        ctx.progress(f"shared cluster: simulating {pol} ({len(jobs)} jobs)")
        try:
            res = simulate(jobs, cluster, pol, **options).to_json()
        except GpuplanError as exc:
            results.append({"policy": pol, "error": exc.one_line()})
            continue
        results.append(_summary(res, inputs))
    return {
        "cluster": where,
        "cluster_gpus": derived(
            cluster.total_gpus, "GPUs", "shared cluster GPUs", "nodes x GPUs per node", inputs[:2]
        ),
        "jobs": derived(
            len(jobs),
            "jobs",
            "jobs drawn for the teams",
            "seeded draw from the teams' arrival rates, sizes and durations "
            "(gpuplan.plan.scheduling.workload)",
            [horizon, seed],
        ),
        "scenario_policy": spec.policy,
        "policies": results,
    }
