"""Metrics of a simulated run and the :class:`SimulationResult` they end up in.

Definitions (all times in seconds):

* queueing delay (``wait_s``): first start - submit;
* job completion time (``jct_s``): end - submit;
* bounded slowdown: ``max(1, jct / max(duration, 10 s))`` (Feitelson, Rudolph, Schwiegelshohn,
  Sevcik and Wong, "Theory and Practice in Parallel Job Scheduling", JSSPP 1997);
* utilisation: busy GPU-seconds / (cluster GPUs x (last end - first submit));
* starvation: a job waits more than ``starvation_wait_s``, or more than
  ``starvation_runtime_multiple`` x its run time (and at least ``starvation_min_wait_s``);
  a team or job class is starved when its p95 wait passes the first threshold or its median
  wait passes the second (against its median run time).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuplan.scheduling.cluster import Cluster
from gpuplan.scheduling.engine import RawRun, SimOptions

if TYPE_CHECKING:  # numpy is imported where it is used
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

#: Job classes by GPU count: (label, low, high) inclusive.
GPU_CLASSES: tuple[tuple[str, int, float], ...] = (
    ("1", 1, 1),
    ("2-4", 2, 4),
    ("5-8", 5, 8),
    ("9-16", 9, 16),
    ("17-64", 17, 64),
    ("65+", 65, math.inf),
)
#: Job classes by run time: (label, low_s, high_s) as [low, high).
DURATION_CLASSES: tuple[tuple[str, float, float], ...] = (
    ("<10min", 0.0, 600.0),
    ("10min-1h", 600.0, 3600.0),
    ("1h-8h", 3600.0, 8 * 3600.0),
    ("8h-24h", 8 * 3600.0, 86400.0),
    ("1d-7d", 86400.0, 7 * 86400.0),
    (">7d", 7 * 86400.0, math.inf),
)
SLOWDOWN_BOUND_S = 10.0
MAX_STARVED_JOBS_LISTED = 20


def gpu_class(n: int) -> str:
    for label, lo, hi in GPU_CLASSES:
        if lo <= n <= hi:
            return label
    return GPU_CLASSES[-1][0]


def duration_class(d: float) -> str:
    for label, lo, hi in DURATION_CLASSES:
        if lo <= d < hi:
            return label
    return DURATION_CLASSES[-1][0]


def stats(
    values: ArrayLike, *, percentiles: Sequence[int] = (50, 95, 99)
) -> dict[str, float | None]:
    """``{mean, p50, p95, p99, max}`` of ``values`` (all None when empty)."""
    import numpy as np

    arr = np.asarray(values, dtype=float)
    keys = ["mean", *(f"p{p}" for p in percentiles), "max"]
    if arr.size == 0:
        return dict.fromkeys(keys, None)
    out: dict[str, float | None] = {"mean": float(arr.mean())}
    for p, v in zip(percentiles, np.percentile(arr, list(percentiles)), strict=True):
        out[f"p{p}"] = float(v)
    out["max"] = float(arr.max())
    return out


def _integral(
    starts: NDArray[np.float64],
    ends: NDArray[np.float64],
    weights: NDArray[np.float64],
    at: NDArray[np.float64],
) -> NDArray[np.float64]:
    """``sum_i w_i * |[s_i, e_i) intersect (-inf, t)|`` for every t in ``at`` (vectorised)."""
    import numpy as np

    def part(points: NDArray[np.float64]) -> NDArray[np.float64]:
        order = np.argsort(points, kind="stable")
        p = points[order]
        w = weights[order]
        cw = np.concatenate(([0.0], np.cumsum(w)))
        cpw = np.concatenate(([0.0], np.cumsum(w * p)))
        k = np.searchsorted(p, at, side="left")
        return at * cw[k] - cpw[k]

    return part(starts) - part(ends)


def _max_concurrent(starts: NDArray[np.float64], ends: NDArray[np.float64]) -> int:
    import numpy as np

    if len(starts) == 0:
        return 0
    times = np.concatenate((ends, starts))
    deltas = np.concatenate((-np.ones(len(ends)), np.ones(len(starts))))
    order = np.lexsort((deltas, times))  # ends before starts at the same instant
    return int(np.max(np.cumsum(deltas[order])))


@dataclass
class SimulationResult:
    """Outcome of :func:`gpuplan.scheduling.simulate`; ``to_json()`` gives plain JSON.

    The JSON keys ``utilization``, ``wait_s`` {mean, p50, p95, p99, max}, ``per_team``
    {team: {wait_s: {...}}}, ``jct_s`` {mean, p50, p95, ...} and ``starved`` are the
    ``gpuplan schedule`` contract (issue 8): extend, never rename.
    """

    policy: str
    options: dict[str, Any]
    cluster: dict[str, Any]
    utilization: float
    wait_s: dict[str, float | None]
    jct_s: dict[str, float | None]
    slowdown: dict[str, float | None]
    per_team: dict[str, dict[str, Any]]
    per_class: dict[str, dict[str, dict[str, Any]]]
    starved: list[dict[str, Any]]
    starved_jobs_count: int
    preemption: dict[str, Any]
    fragmentation: dict[str, Any]
    concurrency: dict[str, Any]
    timeline: dict[str, list[float]]
    gpu_seconds: dict[str, float]
    jobs_total: int
    jobs_simulated: int
    unschedulable: dict[str, Any]
    span_s: dict[str, float]
    counters: dict[str, int]
    attribution: str | None = None
    jobs: dict[str, list[Any]] = field(default_factory=dict, repr=False)

    def job(self, job_id: str) -> dict[str, Any]:
        """One job's record: submit, start, end, wait, GPUs, team, preemptions, starved."""
        idx = self.jobs["job_id"].index(job_id)
        return {k: v[idx] for k, v in self.jobs.items()}

    def to_json(self, *, include_jobs: bool = False) -> dict[str, Any]:
        """Plain JSON-able dict (NaN/inf left for the CLI's strict encoder to null)."""
        out: dict[str, Any] = {
            "policy": self.policy,
            "utilization": self.utilization,
            "wait_s": self.wait_s,
            "jct_s": self.jct_s,
            "slowdown": self.slowdown,
            "per_team": self.per_team,
            "per_class": self.per_class,
            "starved": self.starved,
            "starved_jobs_count": self.starved_jobs_count,
            "preemption": self.preemption,
            "fragmentation": self.fragmentation,
            "concurrency": self.concurrency,
            "timeline": self.timeline,
            "gpu_seconds": self.gpu_seconds,
            "jobs_total": self.jobs_total,
            "jobs_simulated": self.jobs_simulated,
            "unschedulable": self.unschedulable,
            "span_s": self.span_s,
            "cluster": self.cluster,
            "options": self.options,
            "counters": self.counters,
        }
        if self.attribution:
            out["attribution"] = self.attribution
        if include_jobs:
            out["jobs"] = self.jobs
        return out


def _starvation_reason(
    waits: NDArray[np.float64], durs: NDArray[np.float64], opts: SimOptions
) -> str | None:
    """Why a group of jobs counts as starved (None if it does not)."""
    import numpy as np

    if len(waits) == 0:
        return None
    p95 = float(np.percentile(waits, 95))
    if p95 > opts.starvation_wait_s:
        return f"p95 wait {p95 / 3600:.3g} h exceeds {opts.starvation_wait_s / 3600:.3g} h"
    med_w = float(np.median(waits))
    med_d = float(np.median(durs))
    if med_w > opts.starvation_min_wait_s and med_w > opts.starvation_runtime_multiple * med_d:
        return (
            f"median wait {med_w / 3600:.3g} h is over {opts.starvation_runtime_multiple:g} x "
            f"the median run time ({med_d / 3600:.3g} h)"
        )
    return None


def summarize(
    raw: RawRun, opts: SimOptions, cluster: Cluster, *, attribution: str | None = None
) -> SimulationResult:
    """Turn an engine run into a :class:`SimulationResult`."""
    import numpy as np

    jobs = raw.jobs
    n = len(jobs)
    sub = np.fromiter((j.submit_s for j in jobs), float, n)
    dur = np.fromiter((j.duration_s for j in jobs), float, n)
    gpus = np.fromiter((j.num_gpus for j in jobs), float, n)
    start = np.asarray(raw.first_start, float)
    end = np.asarray(raw.end, float)
    wait = start - sub
    jct = end - sub
    slow = np.maximum(1.0, jct / np.maximum(dur, SLOWDOWN_BOUND_S))
    starved_job = (wait > opts.starvation_wait_s) | (
        (wait > opts.starvation_runtime_multiple * dur) & (wait > opts.starvation_min_wait_s)
    )
    teams = np.asarray([j.team for j in jobs], dtype=object)
    gcls = np.asarray([gpu_class(j.num_gpus) for j in jobs], dtype=object)
    dcls = np.asarray([duration_class(j.duration_s) for j in jobs], dtype=object)

    seg_j = np.asarray(raw.seg_job, dtype=np.int64)
    seg_s = np.asarray(raw.seg_start, float)
    seg_e = np.asarray(raw.seg_end, float)
    seg_w = gpus[seg_j] if n else np.zeros(0)
    busy = float(np.sum(seg_w * (seg_e - seg_s))) if n else 0.0
    trace_gpu_s = float(np.sum(gpus * dur))
    t0 = float(sub.min()) if n else 0.0
    t1 = float(end.max()) if n else 0.0
    span = t1 - t0
    cap = cluster.total_gpus
    util = busy / (cap * span) if span > 0 and cap > 0 else 0.0

    def group(mask: NDArray[np.bool_]) -> dict[str, Any]:
        w, d = wait[mask], dur[mask]
        return {
            "jobs": int(mask.sum()),
            "gpu_hours": float(np.sum(gpus[mask] * d) / 3600.0),
            "wait_s": stats(w),
            "jct_s": stats(jct[mask]),
            "slowdown": stats(slow[mask], percentiles=(50, 95)),
            "starved_jobs": int(starved_job[mask].sum()),
            "starved": _starvation_reason(w, d, opts) is not None,
        }

    starved: list[dict[str, Any]] = []
    per_team: dict[str, dict[str, Any]] = {}
    total_gpu_h = trace_gpu_s / 3600.0 or 1.0
    for team in dict.fromkeys(teams.tolist()):
        mask = teams == team
        g = group(mask)
        g["share_of_gpu_hours"] = g["gpu_hours"] / total_gpu_h
        per_team[team] = g
        why = _starvation_reason(wait[mask], dur[mask], opts)
        if why:
            starved.append({"kind": "team", "name": team, "reason": why})
    per_class: dict[str, dict[str, dict[str, Any]]] = {"by_gpus": {}, "by_duration": {}}
    for kind, labels, arr in (
        ("by_gpus", [c[0] for c in GPU_CLASSES], gcls),
        ("by_duration", [c[0] for c in DURATION_CLASSES], dcls),
    ):
        for label in labels:
            mask = arr == label
            if not mask.any():
                continue
            per_class[kind][label] = group(mask)
            why = _starvation_reason(wait[mask], dur[mask], opts)
            if why:
                tag = "gpus" if kind == "by_gpus" else "duration"
                starved.append({"kind": "class", "name": f"{tag}:{label}", "reason": why})
    starved_idx = np.flatnonzero(starved_job)
    worst = starved_idx[np.argsort(-wait[starved_idx], kind="stable")][:MAX_STARVED_JOBS_LISTED]
    for i in worst:
        why = (
            f"waited {wait[i] / 3600:.3g} h (> {opts.starvation_wait_s / 3600:.3g} h)"
            if wait[i] > opts.starvation_wait_s
            else f"waited {wait[i] / 3600:.3g} h, {wait[i] / dur[i]:.3g} x its run time"
        )
        starved.append(
            {
                "kind": "job",
                "name": jobs[i].job_id,
                "team": jobs[i].team,
                "num_gpus": jobs[i].num_gpus,
                "wait_s": float(wait[i]),
                "duration_s": float(dur[i]),
                "reason": why,
            }
        )

    # timelines
    bins = opts.timeline_bins
    edges = np.linspace(t0, t1, bins + 1) if span > 0 else np.asarray([t0, t0 + 1.0])
    width = np.diff(edges)
    busy_int = _integral(seg_s, seg_e, seg_w, edges) if n else np.zeros(len(edges))
    run_int = _integral(seg_s, seg_e, np.ones(len(seg_s)), edges) if n else np.zeros(len(edges))
    ps = np.asarray(raw.pend_start, float)
    pe = np.asarray(raw.pend_end, float)
    pend_int = _integral(ps, pe, np.ones(len(ps)), edges) if len(ps) else np.zeros(len(edges))
    timeline = {
        "t_s": [float(x) for x in (edges[:-1] + width / 2 - t0)],
        "utilization": [float(x) for x in np.diff(busy_int) / (cap * width)],
        "running_jobs": [float(x) for x in np.diff(run_int) / width],
        "pending_jobs": [float(x) for x in np.diff(pend_int) / width],
    }
    conc_by_gpus: dict[str, int] = {}
    seg_cls = gcls[seg_j] if n else np.zeros(0, dtype=object)
    for label, _, _ in GPU_CLASSES:
        mask = seg_cls == label
        if mask.any():
            conc_by_gpus[label] = _max_concurrent(seg_s[mask], seg_e[mask])
    from gpuplan.scheduling.cluster import max_concurrent

    fit_by_gpus: dict[str, int] = {}
    for label, lo, _ in GPU_CLASSES:
        if label in conc_by_gpus:
            fit_by_gpus[label] = sum(max_concurrent(int(lo), p) for p in cluster.pools)
    concurrency = {
        "max_running_jobs": _max_concurrent(seg_s, seg_e),
        "mean_running_jobs": float((run_int[-1] - run_int[0]) / span) if span > 0 else 0.0,
        "max_running_jobs_by_gpus": conc_by_gpus,
        "capacity_jobs_by_gpus": fit_by_gpus,
    }
    integ = raw.integrals
    free_gpu_s = integ["free_gpu_s"]
    fragmentation = {
        "idle_while_waiting_gpu_hours": integ["idle_while_waiting_gpu_s"] / 3600.0,
        "queue_nonempty_fraction": integ["queue_nonempty_s"] / span if span > 0 else 0.0,
        "head_blocked_by_fragmentation_fraction": (
            integ["fragmentation_blocked_s"] / span if span > 0 else 0.0
        ),
        "head_blocked_by_fragmentation_gpu_hours": integ["fragmentation_blocked_gpu_s"] / 3600.0,
        "free_gpus_on_partial_nodes_fraction": (
            integ["partial_node_free_gpu_s"] / free_gpu_s if free_gpu_s > 0 else 0.0
        ),
    }
    npre = np.asarray(raw.preemptions, dtype=np.int64)
    lost = float(np.sum(raw.lost_gpu_s))
    restart = float(np.sum(raw.restart_gpu_s))
    preemption = {
        "preemptions": int(npre.sum()),
        "jobs_preempted": int((npre > 0).sum()),
        "gpu_hours_lost": (lost + restart) / 3600.0,
        "lost_work_gpu_hours": lost / 3600.0,
        "restart_gpu_hours": restart / 3600.0,
    }
    options = {
        k: (dict(v) if hasattr(v, "items") else v)
        for k, v in vars(opts).items()
        if k not in ("quotas",)
    }
    options["backfill"] = opts.uses_backfill
    if opts.quotas:
        options["quotas"] = {
            t: {
                "nominal_gpus": q.nominal_gpus,
                "borrowing_limit_gpus": q.borrowing_limit_gpus,
                "lending_limit_gpus": q.lending_limit_gpus,
                "cohort": q.cohort,
            }
            for t, q in opts.quotas.items()
        }
    uns = raw.unschedulable
    return SimulationResult(
        policy=opts.policy,
        options=options,
        cluster=cluster.to_dict(),
        utilization=util,
        wait_s=stats(wait),
        jct_s=stats(jct),
        slowdown=stats(slow, percentiles=(50, 95)),
        per_team=per_team,
        per_class=per_class,
        starved=starved,
        starved_jobs_count=int(starved_job.sum()),
        preemption=preemption,
        fragmentation=fragmentation,
        concurrency=concurrency,
        timeline=timeline,
        gpu_seconds={"busy": busy, "workload": trace_gpu_s},
        jobs_total=n + len(uns),
        jobs_simulated=n,
        unschedulable={
            "count": len(uns),
            "examples": [{"job_id": j.job_id, "reason": why} for j, why in uns[:10]],
        },
        span_s={"begin": t0, "end": t1, "length": span},
        counters=raw.counters,
        attribution=attribution,
        jobs={
            "job_id": [j.job_id for j in jobs],
            "team": teams.tolist(),
            "num_gpus": [j.num_gpus for j in jobs],
            "submit_s": sub.tolist(),
            "duration_s": dur.tolist(),
            "start_s": start.tolist(),
            "end_s": end.tolist(),
            "wait_s": wait.tolist(),
            "preemptions": npre.tolist(),
            "starved": starved_job.tolist(),
        },
    )
