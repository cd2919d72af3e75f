"""Capacity answers built on :func:`simulate`: how big, how many, which policy.

* :func:`wait_vs_size_curve`: queueing delay (and utilisation) as the cluster grows;
* :func:`smallest_cluster`: the fewest nodes meeting a p95 wait target, overall and per team
  (bisection over node counts: it assumes that more nodes never lengthen the p95 wait, which
  the tests check for strict FIFO and which is usual, not guaranteed, for the others);
* :func:`concurrent_fit`: how many jobs of each size fit at once (placement rule of
  :mod:`.cluster`);
* :func:`compare_policies`: several policies on the same workload and cluster.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gpuplan.errors import InputError
from gpuplan.scheduling.cluster import Cluster, max_concurrent
from gpuplan.scheduling.metrics import SimulationResult
from gpuplan.scheduling.simulate import simulate
from gpuplan.scheduling.workload import Job

if TYPE_CHECKING:
    from gpuplan.scheduling.schema import TeamSpec

#: Default curve points, as multiples of the workload's mean GPU demand.
DEFAULT_LOAD_MULTIPLES = (1.0, 1.1, 1.25, 1.5, 2.0, 3.0)


def summary(result: SimulationResult) -> dict[str, Any]:
    """The headline figures of a run (what curves and comparisons keep of it)."""
    return {
        "gpus": result.cluster["total_gpus"],
        "nodes": result.cluster["total_nodes"],
        "utilization": result.utilization,
        "wait_s": result.wait_s,
        "jct_s": result.jct_s,
        "slowdown": result.slowdown,
        "per_team_p95_wait_s": {t: v["wait_s"]["p95"] for t, v in result.per_team.items()},
        "starved": [s for s in result.starved if s["kind"] != "job"],
        "starved_jobs_count": result.starved_jobs_count,
        "preemption": result.preemption,
        "unschedulable_jobs": result.unschedulable["count"],
        "jobs_simulated": result.jobs_simulated,
    }


def mean_demand_gpus(jobs: Sequence[Job]) -> float:
    """Mean GPUs busy if every job ran at once on arrival: GPU-seconds / submit window."""
    if not jobs:
        return 0.0
    span = max(j.submit_s + j.duration_s for j in jobs) - min(j.submit_s for j in jobs)
    work = sum(j.num_gpus * j.duration_s for j in jobs)
    return work / span if span > 0 else float(max(j.num_gpus for j in jobs))


def default_sizes(jobs: Sequence[Job], cluster: Cluster) -> list[int]:
    """Curve sizes: :data:`DEFAULT_LOAD_MULTIPLES` x mean demand, in whole nodes of the
    first node type, never below the largest job."""
    g = cluster.pools[0].gpus_per_node
    demand = mean_demand_gpus(jobs)
    biggest = max((j.num_gpus for j in jobs), default=g)
    sizes = set()
    for m in DEFAULT_LOAD_MULTIPLES:
        gpus = max(demand * m, biggest)
        sizes.add(math.ceil(gpus / g) * g)
    return sorted(sizes)


def _sized_options(
    options: dict[str, Any], teams: Sequence[TeamSpec] | None, cluster: Cluster
) -> dict[str, Any]:
    """Options for one cluster size: quotas re-derived from the teams when given."""
    if teams is None or options.get("quota_mode", "none") == "none":
        return options
    from gpuplan.scheduling.scenario import team_quotas

    return {**options, "quotas": team_quotas(list(teams), cluster.total_gpus)}


def wait_vs_size_curve(
    jobs: Sequence[Job],
    cluster: Cluster,
    sizes_gpus: Sequence[int] | None = None,
    policy: str = "backfill",
    *,
    progress: Callable[[int, int], None] | None = None,
    attribution: str | None = None,
    teams: Sequence[TeamSpec] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Queueing delay against cluster size for one workload and policy.

    Parameters
    ----------
    jobs, cluster, policy, **options:
        As for :func:`simulate`; ``cluster`` gives the node types, resized to each size
        with :meth:`Cluster.scaled`. Jobs that cannot fit a size are left out of that point
        and counted in ``unschedulable_jobs``.
    sizes_gpus:
        Cluster sizes in GPUs (default :func:`default_sizes`).
    teams:
        Team specs; with quotas on, each size gets the quotas derived for it (a team
        without ``quota_gpus`` keeps its share of the bigger or smaller cluster).
    progress:
        Called as ``progress(points_done, points_total)``.

    Returns
    -------
    dict
        ``{"policy", "mean_demand_gpus", "points": [summary(result) per size, ascending],
        "attribution"}``; each point has ``gpus``, ``nodes``, ``utilization``, ``wait_s``
        {mean, p50, p95, p99, max}, ``jct_s``, ``per_team_p95_wait_s``, ... (see
        :func:`summary`). This is the data of the report's wait-vs-size chart.
    """
    sizes = sorted(set(sizes_gpus or default_sizes(jobs, cluster)))
    if not sizes or sizes[0] <= 0:
        raise InputError("curve sizes must be positive GPU counts", hint="e.g. --sizes 64,128,256")
    options = {**options, "on_unschedulable": "drop"}
    points = []
    for k, gpus in enumerate(sizes):
        sized = cluster.scaled(gpus)
        res = simulate(jobs, sized, policy, **_sized_options(options, teams, sized))
        points.append(summary(res))
        if progress is not None:
            progress(k + 1, len(sizes))
    out: dict[str, Any] = {
        "policy": policy,
        "mean_demand_gpus": mean_demand_gpus(jobs),
        "points": points,
    }
    if attribution:
        out["attribution"] = attribution
    return out


#: Cluster sizes (GPUs) of :func:`philly_wait_curve`: from just above the trace's mean
#: demand (~374 GPUs) to where queueing vanishes; about 3 s of CPU each under backfill.
PHILLY_CURVE_SIZES_GPUS = (384, 512, 768, 1024)


def philly_wait_curve(
    sizes_gpus: Sequence[int] = PHILLY_CURVE_SIZES_GPUS,
    policy: str = "backfill",
    *,
    gpus_per_node: int = 8,
    progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """The wait-vs-size curve of the shipped Philly trace, with its citation.

    Same result layout as :func:`wait_vs_size_curve` (``attribution`` set to
    :data:`~gpuplan.scheduling.workload.PHILLY_CITATION`, which any report showing it
    must print).
    """
    from gpuplan.scheduling.workload import PHILLY_CITATION, load_philly

    out = wait_vs_size_curve(
        load_philly(),
        Cluster.homogeneous(1, gpus_per_node),
        list(sizes_gpus),
        policy,
        progress=progress,
        attribution=PHILLY_CITATION,
        **options,
    )
    out["trace"] = "philly"
    return out


def smallest_cluster(
    jobs: Sequence[Job],
    cluster: Cluster,
    p95_wait_target_s: float,
    policy: str = "backfill",
    *,
    max_gpus: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    teams: Sequence[TeamSpec] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Fewest nodes (of ``cluster``'s node types) whose p95 wait meets a target.

    Parameters
    ----------
    p95_wait_target_s:
        Target on the 95th percentile of queueing delay, in seconds.
    max_gpus:
        Largest size tried (default: 16 x the mean demand, at least 4 x the largest job).
    teams:
        As for :func:`wait_vs_size_curve` (quotas re-derived per size).

    Returns
    -------
    dict
        ``{"target_p95_wait_s", "overall": {"gpus", "nodes"} | None, "per_team": {team:
        {"gpus", "nodes"} | None}, "evaluations": [summary per size tried]}``. ``None``
        when even ``max_gpus`` misses the target. Per team: the smallest cluster where that
        team's p95 wait meets the target; overall: where every team's does.
    """
    if p95_wait_target_s <= 0:
        raise InputError("the p95 wait target must be > 0 s", hint="e.g. --p95-target-s 3600")
    g = cluster.pools[0].gpus_per_node
    biggest = max((j.num_gpus for j in jobs), default=g)
    lo_nodes = max(1, math.ceil(biggest / g))
    demand = mean_demand_gpus(jobs)
    hi_gpus = max_gpus or int(max(16 * demand, 4 * biggest, g))
    hi_nodes = max(lo_nodes, math.ceil(hi_gpus / g))
    cache: dict[int, dict[str, Any]] = {}
    team_names = list(dict.fromkeys(j.team for j in jobs))
    calls = [0]

    def evaluate(nodes: int) -> dict[str, Any]:
        if nodes not in cache:
            sized = cluster.scaled(nodes * g)
            res = simulate(jobs, sized, policy, **_sized_options(options, teams, sized))
            cache[nodes] = summary(res)
            calls[0] += 1
            if progress is not None:
                progress(calls[0], calls[0] + 1)
        return cache[nodes]

    def meets(point: dict[str, Any], team: str | None) -> bool:
        waits = point["per_team_p95_wait_s"]
        vals = [waits.get(team)] if team is not None else list(waits.values())
        return all(v is not None and v <= p95_wait_target_s for v in vals)

    def search(team: str | None) -> dict[str, int] | None:
        if not meets(evaluate(hi_nodes), team):
            return None
        lo, hi = lo_nodes, hi_nodes
        if meets(evaluate(lo), team):
            hi = lo
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if meets(evaluate(mid), team):
                hi = mid
            else:
                lo = mid
        return {"gpus": cache[hi]["gpus"], "nodes": cache[hi]["nodes"]}

    overall = search(None)
    per_team = {t: search(t) for t in team_names}
    return {
        "policy": policy,
        "target_p95_wait_s": p95_wait_target_s,
        "overall": overall,
        "per_team": per_team,
        "evaluations": [cache[k] for k in sorted(cache)],
    }


def concurrent_fit(cluster: Cluster, gpu_counts: Sequence[int]) -> dict[int, int]:
    """How many jobs of each GPU count fit at once (alone in the cluster).

    >>> from gpuplan.scheduling.cluster import Cluster
    >>> concurrent_fit(Cluster.homogeneous(4, 8), [1, 3, 8, 12])
    {1: 32, 3: 8, 8: 4, 12: 2}
    """
    return {int(n): sum(max_concurrent(int(n), p) for p in cluster.pools) for n in gpu_counts}


def compare_policies(
    jobs: Sequence[Job],
    cluster: Cluster,
    policies: Sequence[str | dict[str, Any]],
    *,
    progress: Callable[[int, int], None] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Run several policies on the same workload and cluster.

    ``policies`` holds names (``"fair-share"``) or dicts with a ``policy`` key and option
    overrides (``{"policy": "priority", "preemption": True, "name": "priority+preempt"}``).

    Returns
    -------
    dict
        ``{"policies": {name: summary}, "best": {"mean_wait": name, "p95_wait": name,
        "utilization": name}}``.
    """
    out: dict[str, dict[str, Any]] = {}
    for k, spec in enumerate(policies):
        if isinstance(spec, str):
            name, pol, extra = spec, spec, {}
        else:
            extra = {a: b for a, b in spec.items() if a not in ("policy", "name")}
            pol = spec["policy"]
            name = spec.get("name") or pol
        out[name] = summary(simulate(jobs, cluster, pol, **{**options, **extra}))
        if progress is not None:
            progress(k + 1, len(policies))

    def best(metric: Callable[[dict[str, Any]], float | None], low: bool = True) -> str | None:
        vals = [(metric(v), n) for n, v in out.items() if metric(v) is not None]
        if not vals:
            return None
        return (min(vals) if low else max(vals))[1]

    return {
        "policies": out,
        "best": {
            "mean_wait": best(lambda s: s["wait_s"]["mean"]),
            "p95_wait": best(lambda s: s["wait_s"]["p95"]),
            "utilization": best(lambda s: s["utilization"], low=False),
        },
    }
