"""Event-driven engine of the shared-cluster simulation (no per-second ticking).

Events are job arrivals (a pointer into the submit-sorted jobs) and completions (a heap).
After all events of one instant the scheduler makes one pass over the pending jobs in the
policy's order:

* ``fifo``: submit order, strict: the first job that cannot start blocks all later ones
  (on the node types it could use).
* ``backfill``: submit order with EASY backfilling (Lifka 1995, "The ANL/IBM SP scheduling
  system"; Mu'alem and Feitelson 2001): the first blocked job gets a reservation at the
  earliest time enough GPUs free up (from the running jobs' estimated ends); later jobs
  start now if they fit and either end (by estimate) before that time or use only GPUs
  the reservation does not need. At most ``backfill_depth`` jobs are tested per pass
  (Slurm ``bf_max_job_test``).
* ``fair-share``: Slurm multifactor priority ``w_fs*F + w_age*min(1, age/max_age) +
  w_qos*class`` with ``F`` from :mod:`gpuplan.scheduling.fairshare` (classic or Fair
  Tree) on usage decayed with a half-life, recomputed every ``priority_calc_period_s``
  (Slurm PriorityCalcPeriod); EASY backfill like Slurm's sched/backfill.
* ``priority``: priority classes (highest first), then submit order; strict unless
  ``backfill=True``. With ``preemption`` a blocked job may evict running jobs of lower
  classes (Slurm PreemptMode=REQUEUE, Kubernetes PriorityClass preemption).
* ``drf``: the team with the lowest weighted dominant share first (DRF, Ghodsi et al.
  NSDI 2011), resources = the GPUs of each node type.

Quotas (``quota_mode``) are admission rules on top of any order: ``resourcequota`` is a
hard per-team limit (Kubernetes ResourceQuota on ``requests.nvidia.com/gpu``); ``kueue``
follows ClusterQueue semantics: a team may use its nominal quota, and borrow idle quota
of its cohort up to its borrowingLimit (lenders keep ``nominal - lendingLimit``); with
``preemption`` a team under its nominal quota reclaims GPUs from borrowing teams
(reclaimWithinCohort: Any). A job blocked by its quota does not block other teams'
jobs (Kueue BestEffortFIFO).

Preemption cost model: a job saves its progress every ``checkpoint_interval_s`` of
useful work (never, if None); when preempted it loses the work since its last checkpoint
and pays ``restart_cost_s`` of restore time when it runs again. Both count as GPU time
lost.

Arrivals that change nothing (no GPU freed, priorities not recomputed) are scheduled
incrementally: jobs behind the first blocked job are only tested as backfill candidates
against the kept reservations, which gives the same decisions as a full pass.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from gpuplan.errors import InputError
from gpuplan.scheduling.cluster import Cluster
from gpuplan.scheduling.fairshare import DecayedUsage, build_tree, factors
from gpuplan.scheduling.schema import DEFAULT_PRIORITY_CLASSES
from gpuplan.scheduling.workload import Job

POLICIES = ("fifo", "backfill", "fair-share", "priority", "drf")
QUOTA_MODES = ("none", "kueue", "resourcequota")
_INF = math.inf


def _pick_victims(
    cands: Sequence[tuple[float, float, int]], free: int, need: int, gpus_of: dict[int, int]
) -> tuple[int, list[int], float, float]:
    """Preempt ``cands`` (class, lost work, job), lowest first, until ``need`` GPUs are free.

    Returns (GPUs free afterwards, jobs chosen, lost work, highest class preempted).
    """
    chosen: list[int] = []
    cost = 0.0
    top = -_INF
    for cl, lost, v in cands:
        if free >= need:
            break
        chosen.append(v)
        free += gpus_of[v]
        cost += lost
        top = max(top, cl)
    return free, chosen, cost, top


_PY_TESTS = 0  # backfill candidates tested one by one before the vectorised scan


@dataclass(frozen=True)
class TeamQuota:
    """GPU quota of one team.

    Attributes
    ----------
    nominal_gpus:
        Kueue ``nominalQuota`` / ResourceQuota ``hard`` (GPUs).
    borrowing_limit_gpus:
        Kueue ``borrowingLimit``: most GPUs borrowed beyond nominal (None: no limit).
    lending_limit_gpus:
        Kueue ``lendingLimit``: most of the nominal quota others may borrow (None: all).
    cohort:
        Kueue cohort; borrowing happens only inside it (None: no borrowing).
    """

    nominal_gpus: int
    borrowing_limit_gpus: int | None = None
    lending_limit_gpus: int | None = None
    cohort: str | None = None


@dataclass(frozen=True, kw_only=True)
class SimOptions:
    """Options of :func:`gpuplan.scheduling.simulate` (all keyword-only)."""

    policy: str = "backfill"
    #: EASY backfill on/off; None: on for backfill and fair-share, off otherwise.
    backfill: bool | None = None
    #: "classic" (PriorityFlags=NO_FAIR_TREE) or "fair-tree" (Slurm default since 19.05).
    fairshare_algorithm: str = "classic"
    #: Evict lower-class jobs (and, with Kueue quotas, reclaim lent quota).
    preemption: bool = False
    #: "none", "kueue" (nominal + borrowing in a cohort) or "resourcequota" (hard limit).
    quota_mode: str = "none"
    #: Team -> quota; teams missing here have no limit (kueue/resourcequota modes).
    quotas: Mapping[str, TeamQuota] | None = None
    #: Team -> fair-share shares / DRF weight (default 1 each).
    shares: Mapping[str, float] | None = None
    #: Team -> parent account of the fair-share tree (default: flat).
    parents: Mapping[str, str | None] | None = None
    #: Priority class name -> value (higher first).
    priority_classes: Mapping[str, int] = field(
        default_factory=lambda: dict(DEFAULT_PRIORITY_CLASSES)
    )
    #: Work is saved every this many seconds of progress (None: never, all work is lost).
    checkpoint_interval_s: float | None = None
    #: Restore time paid when a preempted job runs again (s).
    restart_cost_s: float = 0.0
    #: Scheduler's runtime estimate = true duration x this (>= 1; users over-ask).
    runtime_estimate_factor: float = 1.0
    #: Jobs tested per backfill pass (Slurm bf_max_job_test, default 500).
    backfill_depth: int = 500
    #: Fair-share priorities are recomputed this often (Slurm PriorityCalcPeriod, 5 min).
    priority_calc_period_s: float = 300.0
    #: Usage half-life (Slurm PriorityDecayHalfLife, default 7 days).
    decay_half_life_s: float = 7 * 86400.0
    #: Multifactor weights (PriorityWeightFairshare/Age/QOS) and PriorityMaxAge.
    weight_fairshare: float = 10000.0
    weight_age: float = 1000.0
    weight_qos: float = 0.0
    max_age_s: float = 7 * 86400.0
    #: A job waiting longer than this is starved.
    starvation_wait_s: float = 86400.0
    #: ... or waiting longer than this multiple of its run time (and starvation_min_wait_s).
    starvation_runtime_multiple: float = 10.0
    starvation_min_wait_s: float = 3600.0
    #: "error": a job that can never start is an InputError; "drop": leave it out, counted.
    on_unschedulable: str = "error"
    #: Points of the utilisation / queue timelines.
    timeline_bins: int = 100

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise InputError(f"unknown policy {self.policy!r}", hint=f"use {', '.join(POLICIES)}")
        if self.quota_mode not in QUOTA_MODES:
            raise InputError(
                f"unknown quota mode {self.quota_mode!r}", hint=f"use {', '.join(QUOTA_MODES)}"
            )
        if self.fairshare_algorithm not in ("classic", "fair-tree"):
            raise InputError(
                f"unknown fair-share algorithm {self.fairshare_algorithm!r}",
                hint="use classic or fair-tree",
            )
        if self.on_unschedulable not in ("error", "drop"):
            raise InputError("on_unschedulable must be 'error' or 'drop'", hint="")
        if self.runtime_estimate_factor < 1.0:
            raise InputError(
                "runtime_estimate_factor must be >= 1 (estimates never undershoot)",
                hint="use 1 for exact estimates",
            )
        if self.backfill_depth < 1:
            raise InputError("backfill_depth must be >= 1", hint="Slurm's default is 500")
        if self.checkpoint_interval_s is not None and self.checkpoint_interval_s <= 0:
            raise InputError("checkpoint_interval_s must be > 0", hint="or None for never")
        if self.restart_cost_s < 0:
            raise InputError("restart_cost_s must be >= 0", hint="e.g. 300")
        if self.priority_calc_period_s <= 0 or self.max_age_s <= 0:
            raise InputError("priority_calc_period_s and max_age_s must be > 0", hint="")
        if self.timeline_bins < 1:
            raise InputError("timeline_bins must be >= 1", hint="e.g. 100")
        if not self.priority_classes:
            raise InputError("no priority classes", hint="e.g. {normal: 100}")

    @property
    def uses_backfill(self) -> bool:
        if self.backfill is not None:
            return self.backfill
        return self.policy in ("backfill", "fair-share")


@dataclass
class RawRun:
    """What the engine records; :mod:`metrics` turns it into a result."""

    jobs: list[Job]
    first_start: list[float]
    end: list[float]
    preemptions: list[int]
    lost_gpu_s: list[float]
    restart_gpu_s: list[float]
    seg_job: list[int]
    seg_start: list[float]
    seg_end: list[float]
    pend_start: list[float]
    pend_end: list[float]
    pend_job: list[int]
    unschedulable: list[tuple[Job, str]]
    integrals: dict[str, float]
    counters: dict[str, int]
    t_begin: float
    t_end: float


class _Res:
    """An EASY reservation in one pool: start time and per-node GPUs long jobs may take."""

    __slots__ = ("limit", "shadow")

    def __init__(self, shadow: float, limit: dict[int, int]) -> None:
        self.shadow = shadow
        self.limit = limit


class Engine:
    """One simulation run; see the module docstring for the rules."""

    def __init__(self, jobs: Sequence[Job], cluster: Cluster, opts: SimOptions) -> None:
        self.opts = opts
        self.cluster = cluster
        self.backfill = opts.uses_backfill
        order = sorted(range(len(jobs)), key=lambda i: jobs[i].submit_s)
        jobs = [jobs[i] for i in order]
        pools = cluster.pools
        self.npools = len(pools)
        self.G = [p.gpus_per_node for p in pools]
        pool_index = {p.name: k for k, p in enumerate(pools)}
        classes = dict(opts.priority_classes)

        # Teams: those with quotas/shares first (stable), then in order of appearance.
        team_names: list[str] = []
        for src in (opts.quotas or {}, opts.shares or {}):
            for name in src:
                if name not in team_names:
                    team_names.append(name)
        for j in jobs:
            if j.team not in team_names:
                team_names.append(j.team)
        self.team_names = team_names
        tix = {t: k for k, t in enumerate(team_names)}
        nteams = len(team_names)

        # Quotas.
        self.quota_mode = opts.quota_mode
        quotas = dict(opts.quotas or {})
        self.nominal = [_INF] * nteams
        self.blimit = [_INF] * nteams
        self.guar = [0.0] * nteams
        self.cohort_of: list[int | None] = [None] * nteams
        cohort_names: list[str] = []
        for name, q in quotas.items():
            k = tix[name]
            self.nominal[k] = float(q.nominal_gpus)
            if self.quota_mode == "kueue":
                self.blimit[k] = (
                    _INF if q.borrowing_limit_gpus is None else float(q.borrowing_limit_gpus)
                )
                lend = (
                    q.nominal_gpus
                    if q.lending_limit_gpus is None
                    else min(q.nominal_gpus, q.lending_limit_gpus)
                )
                self.guar[k] = float(q.nominal_gpus - lend)
                if q.cohort is not None:
                    if q.cohort not in cohort_names:
                        cohort_names.append(q.cohort)
                    self.cohort_of[k] = cohort_names.index(q.cohort)
        self.cohort_names = cohort_names
        self.cohort_cap = [0.0] * len(cohort_names)
        for k in range(nteams):
            c = self.cohort_of[k]
            if c is not None:
                self.cohort_cap[c] += self.nominal[k] - self.guar[k]
        self.cohort_used = [0.0] * len(cohort_names)
        self.has_quota = self.quota_mode != "none" and bool(quotas)

        # Jobs that can never start.
        keep: list[Job] = []
        self.unschedulable: list[tuple[Job, str]] = []
        for j in jobs:
            why = self._never(j, pool_index, classes, tix)
            if why is None:
                keep.append(j)
            else:
                self.unschedulable.append((j, why))
        if self.unschedulable and opts.on_unschedulable == "error":
            j, why = self.unschedulable[0]
            more = len(self.unschedulable) - 1
            raise InputError(
                f"job {j.job_id} can never start: {why}"
                + (f" (and {more} more job{'s' if more > 1 else ''})" if more else ""),
                hint="use a bigger cluster or quota, or drop such jobs "
                "(--drop-unschedulable / on_unschedulable='drop')",
            )
        self.jobs = keep
        N = len(keep)
        self.N = N
        cls_values = sorted(set(classes.values()), reverse=True)
        self.cls_rank = {v: r for r, v in enumerate(cls_values)}
        self.ncls = len(cls_values)
        max_cls = max(abs(v) for v in cls_values) or 1
        f = opts.runtime_estimate_factor
        self.sub = [j.submit_s for j in keep]
        self.n = [j.num_gpus for j in keep]
        self.max_n = max(self.n, default=1)
        self.team = [tix[j.team] for j in keep]
        self.cls = [classes[j.priority_class] for j in keep]
        self.crank = [self.cls_rank[c] for c in self.cls]
        self.qos_norm = [c / max_cls for c in self.cls]
        self.elig: list[tuple[int, ...]] = [
            (pool_index[j.node_type],) if j.node_type else tuple(range(self.npools)) for j in keep
        ]
        self.remaining = [j.duration_s for j in keep]
        self.est_factor = f
        self.state = [0] * N  # 0 future, 1 pending, 2 running, 3 done
        self.first_start = [math.nan] * N
        self.end = [math.nan] * N
        self.seg_begin = [0.0] * N
        self.est_end = [0.0] * N
        self.epoch = [0] * N
        self.restore = [0.0] * N
        self.npre = [0] * N
        self.lost = [0.0] * N  # GPU-seconds of work lost to preemption
        self.restart_gpu_s = [0.0] * N  # GPU-seconds spent restoring after preemption
        self.pend_since = [0.0] * N
        self.alloc: list[list[tuple[int, int, int]]] = [[] for _ in range(N)]

        # numpy mirrors for the vectorised backfill scan (single pool, static order).
        import numpy as np

        self.np = np
        self.n_arr = np.asarray(self.n, dtype=np.int64)
        self.team_arr = np.asarray(self.team, dtype=np.int64)
        self.sub_arr = np.asarray(self.sub, dtype=float)
        self.crank_arr = np.asarray(self.crank, dtype=np.int64)
        self.est_arr = np.asarray(self.remaining, dtype=float) * f
        self.pmask = np.zeros(N, dtype=bool)
        # pending jobs per GPU count, with a lazy min-heap of their runtime estimates
        self.size_cnt: dict[int, int] = {}
        self.size_heap: dict[int, list[tuple[float, int]]] = {}
        self.team_size_cnt: list[dict[int, int]] = [{} for _ in range(nteams)]
        self.lo = 0
        self.arrived = 0
        # superset of the pending job indices (unsorted), refreshed lazily
        self.pidx = np.zeros(0, dtype=np.int64)
        self.pidx_new: list[int] = []
        self.pidx_rebuild = False
        self.vector_ok = (
            self.backfill
            and self.npools == 1
            and opts.policy in ("fifo", "backfill", "priority", "fair-share")
        )

        # Pools.
        self.free = [[p.gpus_per_node] * p.nodes for p in pools]
        self.buckets: list[list[set[int]]] = []
        for p in pools:
            b: list[set[int]] = [set() for _ in range(p.gpus_per_node + 1)]
            b[p.gpus_per_node] = set(range(p.nodes))
            self.buckets.append(b)
        self.pool_free = [p.total_gpus for p in pools]
        self.pool_cap = [p.total_gpus for p in pools]
        self.free_total = sum(self.pool_free)
        self.partial_free = 0
        self.track_nodes = opts.preemption
        self.node_jobs: list[list[dict[int, int]]] = [[{} for _ in range(p.nodes)] for p in pools]

        # Teams' usage.
        self.used = [0.0] * nteams
        self.used_pool = [[0.0] * self.npools for _ in range(nteams)]
        self.shares = [float((opts.shares or {}).get(t, 1.0)) for t in team_names]
        for k, s in enumerate(self.shares):
            if s <= 0:
                raise InputError(
                    f"team {team_names[k]!r} has share {s}; shares must be > 0", hint=""
                )
        self.run_gpus_cls = [[0] * self.ncls for _ in range(self.npools)]

        # Queues: one list (FIFO orders) or one per (team, class).
        self.policy = opts.policy
        self.fifo_order = self.policy in ("fifo", "backfill")
        # one list in submit order; per-(team, class) lists when the order needs them, or
        # when quotas can stall a whole team (its list is then skipped in one step)
        self.single = self.fifo_order and not self.has_quota
        nlists = 1 if self.single else nteams * self.ncls
        self.lists: list[list[int]] = [[] for _ in range(nlists)]
        self.dead = [0] * nlists
        self.head = [0] * nlists  # entries before head[lid] are all non-pending
        self.lid = [
            0 if self.single else self.team[i] * self.ncls + self.crank[i] for i in range(N)
        ]
        self.lid_arr = np.asarray(self.lid, dtype=np.int64)
        self.npending = 0

        # Fair-share.
        self.t_calc = 0.0
        self.next_calc = 0.0
        self.base = [0.0] * nlists
        self.base_arr = np.zeros(nlists)
        if self.policy == "fair-share":
            parents = dict(opts.parents or {})
            self.tree = build_tree(
                [(t, self.shares[k], parents.get(t)) for k, t in enumerate(team_names)]
            )
            self.decay = DecayedUsage(team_names, opts.decay_half_life_s)
        self.domshare = [0.0] * nteams

        # Running jobs sorted by estimated end (for reservations), completions heap.
        self.run_list: list[tuple[float, int]] = []
        self.heap: list[tuple[float, int, int]] = []

        # Pass state kept between passes for incremental arrival handling.
        self.dirty = True
        self.reservations: dict[int, _Res] = {}
        self.blocked: set[int] = set()
        self.frontier: Any = None
        self.tested = 0
        self.end_reason = "empty"
        self.last_key: Any = None
        self.head_frag = False
        self.window_starts = 0  # jobs started inside the backfill window since it was set
        self._caps_now: tuple[int, int, int, int] | None = None
        self._qfail = -1  # the last job skipped for lack of quota (read by _order)
        self.quota_shortcuts = True  # tests turn the quota shortcuts of _order off

        # Records.
        self.seg_job: list[int] = []
        self.seg_s: list[float] = []
        self.seg_e: list[float] = []
        self.pend_job: list[int] = []
        self.pend_s: list[float] = []
        self.pend_e: list[float] = []
        self.integrals = {
            "idle_while_waiting_gpu_s": 0.0,
            "queue_nonempty_s": 0.0,
            "fragmentation_blocked_s": 0.0,
            "fragmentation_blocked_gpu_s": 0.0,
            "free_gpu_s": 0.0,
            "partial_node_free_gpu_s": 0.0,
        }
        self.counters = {
            "passes": 0,
            "full_passes": 0,
            "events": 0,
            "preemptions": 0,
            "quota_shortcuts": 0,
        }

    # ------------------------------------------------------------------ set-up helpers
    def _never(
        self, j: Job, pool_index: dict[str, int], classes: Mapping[str, int], tix: dict[str, int]
    ) -> str | None:
        if j.priority_class not in classes:
            raise InputError(
                f"job {j.job_id} has priority class {j.priority_class!r}, not one of "
                f"{', '.join(classes)}",
                hint="declare it in priority_classes (scenario scheduling.priority_classes)",
            )
        if j.node_type is not None and j.node_type not in pool_index:
            return f"it asks for node type {j.node_type!r}; the cluster has {', '.join(pool_index)}"
        cap = (
            self.cluster.pools[pool_index[j.node_type]].total_gpus
            if j.node_type
            else max(p.total_gpus for p in self.cluster.pools)
        )
        if j.num_gpus > cap:
            return f"it needs {j.num_gpus} GPUs and the largest node type has {cap}"
        if self.quota_mode != "none":
            k = tix[j.team]
            limit = self.nominal[k]
            if self.quota_mode == "kueue" and self.cohort_of[k] is not None:
                c = self.cohort_of[k]
                cap_pool = sum(
                    self.nominal[t] - self.guar[t]
                    for t in range(len(self.nominal))
                    if self.cohort_of[t] == c
                )
                limit = min(self.nominal[k] + self.blimit[k], self.guar[k] + cap_pool)
            if j.num_gpus > limit:
                return f"it needs {j.num_gpus} GPUs and team {j.team!r} may use at most {limit:g}"
        return None

    # ------------------------------------------------------------------ placement
    def _fit(
        self, p: int, need: int, lim: dict[int, int] | None = None
    ) -> list[tuple[int, int, int]] | None:
        """Best-fit placement of ``need`` GPUs in pool ``p`` (see :mod:`.cluster`).

        ``lim`` caps the GPUs usable on some nodes (a reservation's nodes, for a job that
        outlasts it): such a node counts with ``min(free, cap)`` free GPUs. The choice among
        equally good nodes depends only on past allocations, never on ``lim``.
        """
        G = self.G[p]
        b = self.buckets[p]
        if not lim:
            if need <= G:
                for f in range(need, G + 1):
                    s = b[f]
                    if s:
                        return [(p, next(iter(s)), need)]
                return None
            q, r = divmod(need, G)
            whole = b[G]
            if len(whole) < q:
                return None
            nodes = list(islice(whole, q))
            out = [(p, nd, G) for nd in nodes]
            if r == 0:
                return out
            for f in range(r, G):
                s = b[f]
                if s:
                    out.append((p, next(iter(s)), r))
                    return out
            if len(whole) > q:
                taken = set(nodes)
                for nd in whole:
                    if nd not in taken:
                        out.append((p, nd, r))
                        return out
            return None
        fr = self.free[p]
        capped: dict[int, list[int]] = {}
        for nd, v in sorted(lim.items()):
            c = fr[nd] if fr[nd] < v else v
            if c < fr[nd]:
                capped.setdefault(max(c, 0), []).append(nd)

        def level(f: int, exclude: set[int] | None = None) -> Iterator[int]:
            """Nodes usable with exactly ``f`` free GPUs."""
            for nd in capped.get(f, ()):
                if exclude is None or nd not in exclude:
                    yield nd
            for nd in b[f]:
                if (nd not in lim or lim[nd] >= f) and (exclude is None or nd not in exclude):
                    yield nd

        if need <= G:
            for f in range(need, G + 1):
                for nd in level(f):
                    return [(p, nd, need)]
            return None
        q, r = divmod(need, G)
        nodes = list(islice(level(G), q))
        if len(nodes) < q:
            return None
        out = [(p, nd, G) for nd in nodes]
        if r == 0:
            return out
        taken = set(nodes)
        for f in range(r, G + 1):
            for nd in level(f, taken):
                out.append((p, nd, r))
                return out
        return None

    def _fit_capped(self, p: int, need: int, res: _Res) -> list[tuple[int, int, int]] | None:
        """Placement of a job that outlasts the reservation: reserved GPUs are off limits."""
        return self._fit(p, need, res.limit)

    def _take(self, alloc: list[tuple[int, int, int]], j: int, sign: int) -> None:
        G = self.G
        for p, nd, c in alloc:
            fr = self.free[p]
            b = self.buckets[p]
            g = G[p]
            old = fr[nd]
            new = old - sign * c
            b[old].discard(nd)
            b[new].add(nd)
            fr[nd] = new
            if 0 < old < g:
                self.partial_free -= old
            if 0 < new < g:
                self.partial_free += new
            self.pool_free[p] -= sign * c
            if self.track_nodes:
                nj = self.node_jobs[p][nd]
                if sign > 0:
                    nj[j] = c
                else:
                    del nj[j]
        self.free_total -= sign * self.n[j]

    # ------------------------------------------------------------------ job life
    def _usage_change(self, j: int, t: float, sign: int) -> None:
        k = self.team[j]
        n = self.n[j]
        c = self.cohort_of[k]
        if c is not None:
            g = self.guar[k]
            before = max(0.0, self.used[k] - g)
            after = max(0.0, self.used[k] + sign * n - g)
            self.cohort_used[c] += after - before
        self.used[k] += sign * n
        for p, _, cnt in self.alloc[j]:
            self.used_pool[k][p] += sign * cnt
            self.run_gpus_cls[p][self.crank[j]] += sign * cnt
        if self.policy == "fair-share":
            self.decay.add_rate(self.team_names[k], t, sign * n)
        if self.policy == "drf":
            self.domshare[k] = (
                max(
                    (self.used_pool[k][p] / cap for p, cap in enumerate(self.pool_cap) if cap > 0),
                    default=0.0,
                )
                / self.shares[k]
            )

    def _start(self, j: int, alloc: list[tuple[int, int, int]], t: float) -> None:
        if self.frontier is not None:
            self.window_starts += 1
        self.alloc[j] = alloc
        self._take(alloc, j, +1)
        self.state[j] = 2
        self.pmask[j] = False
        self.size_cnt[self.n[j]] -= 1
        self.team_size_cnt[self.team[j]][self.n[j]] -= 1
        self.npending -= 1
        self.dead[self.lid[j]] += 1
        if self.first_start[j] != self.first_start[j]:  # NaN: first start
            self.first_start[j] = t
        self.pend_job.append(j)
        self.pend_s.append(self.pend_since[j])
        self.pend_e.append(t)
        self.seg_begin[j] = t
        seg = self.restore[j] + self.remaining[j]
        est = self.restore[j] + self.remaining[j] * self.est_factor
        self.est_end[j] = t + est
        insort(self.run_list, (t + est, j))
        heapq.heappush(self.heap, (t + seg, j, self.epoch[j]))
        self._usage_change(j, t, +1)
        # A job that outlasts a reservation eats into the GPUs it may use.
        if self.reservations:
            for p, nd, c in alloc:
                res = self.reservations.get(p)
                if res is not None and t + est > res.shadow and nd in res.limit:
                    res.limit[nd] -= c

    def _release(self, j: int, t: float) -> None:
        if self.restore[j]:
            self.restart_gpu_s[j] += self.n[j] * min(t - self.seg_begin[j], self.restore[j])
        self._take(self.alloc[j], j, -1)
        self._usage_change(j, t, -1)
        key = (self.est_end[j], j)
        pos = bisect_left(self.run_list, key)
        if pos < len(self.run_list) and self.run_list[pos] == key:
            del self.run_list[pos]
        self.seg_job.append(j)
        self.seg_s.append(self.seg_begin[j])
        self.seg_e.append(t)
        self.alloc[j] = []

    def _complete(self, j: int, t: float) -> None:
        self._release(j, t)
        self.state[j] = 3
        self.end[j] = t
        self.remaining[j] = 0.0

    def _lost_if_preempted(self, j: int, t: float) -> tuple[float, float]:
        """(work saved by checkpoints, time wasted) if ``j`` were preempted at ``t``.

        The waste is the work since the last checkpoint plus any restore time of this run.
        """
        ran = t - self.seg_begin[j]
        useful = max(0.0, ran - self.restore[j])
        interval = self.opts.checkpoint_interval_s
        saved = math.floor(useful / interval) * interval if interval else 0.0
        saved = min(saved, self.remaining[j])
        return saved, ran - saved

    def _preempt(self, v: int, t: float) -> None:
        saved, _ = self._lost_if_preempted(v, t)
        useful = max(0.0, t - self.seg_begin[v] - self.restore[v])
        self._release(v, t)
        self.remaining[v] -= saved
        self.lost[v] += self.n[v] * (useful - saved)
        self.restore[v] = self.opts.restart_cost_s
        self.npre[v] += 1
        self.epoch[v] += 1
        self.counters["preemptions"] += 1
        self.state[v] = 1
        self.pmask[v] = True
        self.est_arr[v] = self.restore[v] + self.remaining[v] * self.est_factor
        self._pending_size(v)
        self.pidx_rebuild = True
        if v < self.lo:
            self.lo = v
        self.npending += 1
        self.pend_since[v] = t
        lid = self.lid[v]
        lst = self.lists[lid]
        pos = bisect_left(lst, v)
        if pos < len(lst) and lst[pos] == v:
            self.dead[lid] -= 1  # still listed (lazy deletion): pending again
        else:
            lst.insert(pos, v)
        if pos < self.head[lid]:
            self.head[lid] = pos
        self.dirty = True

    # ------------------------------------------------------------------ quotas
    def _quota_ok(self, j: int) -> bool:
        k = self.team[j]
        u = self.used[k] + self.n[j]
        if u <= self.nominal[k]:
            return True
        if self.quota_mode != "kueue":
            return False
        c = self.cohort_of[k]
        if c is None or u - self.nominal[k] > self.blimit[k]:
            return False
        g = self.guar[k]
        new_pool = self.cohort_used[c] - max(0.0, self.used[k] - g) + max(0.0, u - g)
        return new_pool <= self.cohort_cap[c] + 1e-9

    # ------------------------------------------------------------------ preemption
    def _victim_ok(self, v: int, j: int) -> bool:
        if self.cls[v] < self.cls[j]:
            return True
        if self.quota_mode == "kueue":
            kj, kv = self.team[j], self.team[v]
            c = self.cohort_of[kj]
            return (
                c is not None
                and kv != kj
                and self.cohort_of[kv] == c
                and self.used[kv] > self.nominal[kv]
                and self.used[kj] + self.n[j] <= self.nominal[kj]
            )
        return False

    def _could_preempt(self, j: int) -> bool:
        if not self.opts.preemption:
            return False
        cr = self.crank[j]
        if any(
            self.run_gpus_cls[p][r] for p in range(self.npools) for r in range(cr + 1, self.ncls)
        ):
            return True
        if self.quota_mode == "kueue":
            kj = self.team[j]
            c = self.cohort_of[kj]
            if c is not None and self.used[kj] + self.n[j] <= self.nominal[kj]:
                return any(
                    self.cohort_of[k] == c and k != kj and self.used[k] > self.nominal[k]
                    for k in range(len(self.used))
                )
        return False

    def _try_preempt(
        self, j: int, pools: Sequence[int], t: float
    ) -> list[tuple[int, int, int]] | None:
        need = self.n[j]
        best: tuple[tuple[float, float], int, list[int]] | None = None
        # (class, GPU-seconds lost, job) of each allowed victim, or None; a job spanning
        # several nodes is judged once
        judged: dict[int, tuple[int, float, int] | None] = {}

        def victim(v: int) -> tuple[int, float, int] | None:
            if v not in judged:
                judged[v] = (
                    (self.cls[v], self._lost_if_preempted(v, t)[1] * self.n[v], v)
                    if self._victim_ok(v, j)
                    else None
                )
            return judged[v]

        for p in pools:
            G = self.G[p]
            fr = self.free[p]
            per_node: list[tuple[int, list[tuple[int, float, int]]]] = []
            for nd, jobs_on in enumerate(self.node_jobs[p]):
                cands = [c for c in map(victim, jobs_on) if c is not None]
                per_node.append((nd, cands))
            if need <= G:
                for nd, cands in per_node:
                    f = fr[nd]
                    if f + sum(self.node_jobs[p][nd][v] for _, _, v in cands) < need:
                        continue
                    _, chosen, cost, top = _pick_victims(
                        sorted(cands), f, need, self.node_jobs[p][nd]
                    )
                    score = (top, cost)
                    if best is None or score < best[0]:
                        best = (score, p, chosen)
            else:
                q, r = divmod(need, G)
                whole: list[tuple[float, float, int, list[int]]] = []
                for nd, cands in per_node:
                    if len(cands) == len(self.node_jobs[p][nd]):
                        cost = sum(c[1] for c in cands)
                        top = max((c[0] for c in cands), default=-_INF)
                        whole.append((top, cost, nd, [c[2] for c in cands]))
                whole.sort()
                if len(whole) < q:
                    continue
                chosen_nodes = whole[:q]
                victims = {v for w in chosen_nodes for v in w[3]}
                score_top = max((w[0] for w in chosen_nodes), default=-_INF)
                score_cost = sum(w[1] for w in chosen_nodes)
                if r:
                    used_nodes = {w[2] for w in chosen_nodes}
                    rem_best: tuple[tuple[float, float], list[int]] | None = None
                    for nd, cands in per_node:
                        if nd in used_nodes:
                            continue
                        f = fr[nd] + sum(
                            self.node_jobs[p][nd][v] for v in victims if v in self.node_jobs[p][nd]
                        )
                        rest = sorted(c for c in cands if c[2] not in victims)
                        f, chosen_r, cost, top = _pick_victims(rest, f, r, self.node_jobs[p][nd])
                        if f >= r and (rem_best is None or (top, cost) < rem_best[0]):
                            rem_best = ((top, cost), chosen_r)
                    if rem_best is None:
                        continue
                    victims |= set(rem_best[1])
                    score_top = max(score_top, rem_best[0][0])
                    score_cost += rem_best[0][1]
                score = (score_top, score_cost)
                if best is None or score < best[0]:
                    best = (score, p, sorted(victims))
        if best is None:
            return None
        _, p, chosen = best
        for v in chosen:
            self._preempt(v, t)
        return self._fit(p, need)

    # ------------------------------------------------------------------ reservations
    def _reserve(self, j: int, p: int) -> _Res | None:
        """EASY reservation for ``j`` in pool ``p`` from the running jobs' estimated ends.

        The start time is the earliest estimated end after which ``j`` fits. Among the
        nodes that can hold it then, the reservation takes those with the fewest GPUs free
        now, so that backfilling keeps as much as possible of what is free now; then the
        best fit at that time. Recomputed at every pass.
        """
        need = self.n[j]
        G = self.G[p]
        fr = self.free[p]
        b = self.buckets[p]
        proj: dict[int, int] = {}
        shadow = None
        if need <= G:
            for e, k in self.run_list:
                hit = False
                for pp, nd, c in self.alloc[k]:
                    if pp != p:
                        continue
                    v = proj.get(nd, fr[nd]) + c
                    proj[nd] = v
                    if v >= need:
                        hit = True
                if hit:
                    shadow = e
                    break
            if shadow is None:
                return None
            _, v, nd = min((fr[nd], v, nd) for nd, v in proj.items() if v >= need)
            return _Res(shadow, {nd: v - need})
        q, r = divmod(need, G)
        whole = len(b[G])
        part = sum(len(b[f]) for f in range(r, G)) if r else 0
        for e, k in self.run_list:
            for pp, nd, c in self.alloc[k]:
                if pp != p:
                    continue
                old = proj.get(nd, fr[nd])
                v = old + c
                proj[nd] = v
                if r and r <= old < G:
                    part -= 1
                if v == G:
                    whole += 1
                elif r and v >= r:
                    part += 1
            if whole >= q and (r == 0 or part >= 1 or whole >= q + 1):
                shadow = e
                break
        if shadow is None:
            return None
        # whole nodes: those freed by then (busiest now first), then nodes free now
        chosen = sorted((fr[nd], nd) for nd, v in proj.items() if v == G)[:q]
        chosen_nodes = [nd for _, nd in chosen]
        if len(chosen_nodes) < q:
            chosen_nodes += list(islice(b[G], q - len(chosen_nodes)))
        limit = dict.fromkeys(chosen_nodes, 0)
        if r:
            taken = set(chosen_nodes)
            cands = [(fr[nd], v, nd) for nd, v in proj.items() if nd not in taken and v >= r]
            for f in range(r, G + 1):
                found = next((nd for nd in b[f] if nd not in taken and nd not in proj), None)
                if found is not None:
                    cands.append((f, f, found))
                    break
            if cands:
                _, v, nd = min(cands)
                limit[nd] = v - r
        return _Res(shadow, limit)

    # ------------------------------------------------------------------ ordering
    def _key(self, j: int) -> Any:
        pol = self.policy
        if self.fifo_order:
            return j
        if pol == "priority":
            return (-self.cls[j], j)
        if pol == "drf":
            return (self.domshare[self.team[j]], -self.cls[j], j)
        a = (self.t_calc - self.sub[j]) / self.opts.max_age_s
        a = 0.0 if a < 0.0 else (1.0 if a > 1.0 else a)
        return (-(self.base[self.lid[j]] + self.opts.weight_age * a), j)

    def _vkeys(self, idx: Any) -> Any:
        """Numeric sort keys of jobs ``idx`` (ties broken by index), matching :meth:`_key`."""
        np = self.np
        if self.fifo_order:
            return idx
        if self.policy == "priority":
            return self.crank_arr[idx] * (self.N + 1) + idx
        a = np.clip((self.t_calc - self.sub_arr[idx]) / self.opts.max_age_s, 0.0, 1.0)
        return -(self.base_arr[self.lid_arr[idx]] + self.opts.weight_age * a)

    def _first_pending(self, lid: int) -> int:
        """Index of the first pending entry of list ``lid`` (compacting it when worth it)."""
        lst = self.lists[lid]
        st = self.state
        if self.dead[lid] > 64 and self.dead[lid] * 4 > len(lst):
            lst = [j for j in lst if st[j] == 1]
            self.lists[lid] = lst
            self.dead[lid] = 0
            self.head[lid] = 0
        h = self.head[lid]
        end = len(lst)
        while h < end and st[lst[h]] != 1:
            h += 1
        self.head[lid] = h
        return h

    def _order(self) -> Iterator[int]:
        """Pending jobs in policy order, as the pass consumes them.

        A job preempted during the pass is visited later in the same pass if it comes
        after the current position in the order (never twice, never going back).
        """
        st = self.state
        if self.single:
            h = self._first_pending(0)
            lst = self.lists[0]
            while h < len(lst):
                j = lst[h]
                if st[j] == 1:
                    yield j
                    h = bisect_right(lst, j)  # insertions may have shifted the list
                else:
                    h += 1
            return
        dynamic = self.policy == "drf"
        key_of = self._key

        def build(after: Any, lids: Any) -> list[tuple[Any, int, int]]:
            out = []
            for lid in lids:
                lst = self.lists[lid]
                if len(lst) == self.dead[lid]:
                    continue
                pos = self._first_pending(lid) if after is None else 0
                lst = self.lists[lid]
                if after is not None:
                    # keys grow along a list (one team and class), so bisect on them
                    pos = bisect_right(lst, after, key=key_of)
                while pos < len(lst) and st[lst[pos]] != 1:
                    pos += 1
                if pos < len(lst):
                    out.append((key_of(lst[pos]), lid, pos))
            heapq.heapify(out)
            return out

        heap = build(None, range(len(self.lists)))
        # Lists of teams with no quota left are set aside instead of being walked job by
        # job (their jobs would only be skipped). They come back, from the current
        # position on, when that could change a decision: a preemption frees quota, or
        # backfill starts counting tested jobs (a reservation was made).
        stalled: list[int] = []
        # Within a pass a team's quota room only shrinks (until a preemption): once a job
        # of n GPUs failed its quota check, its team's later jobs of >= n GPUs are passed
        # over in a tight loop (only before backfill counts tested jobs).
        qmin: dict[int, int] = {}
        n_of = self.n
        team_of = self.team
        seen_pre = self.counters["preemptions"]
        counting = self.backfill and bool(self.reservations)
        last_key: Any = None
        while True:
            if self.counters["preemptions"] != seen_pre:
                seen_pre = self.counters["preemptions"]
                stalled.clear()
                qmin.clear()
                heap = build(last_key, range(len(self.lists)))
            elif self.backfill and bool(self.reservations) != counting:
                # backfill now counts tested jobs: bring back what was set aside or passed
                # over, from the current position on
                counting = True
                if stalled or qmin:
                    stalled.clear()
                    qmin.clear()
                    heap = build(last_key, range(len(self.lists)))
            if not heap:
                return
            key, lid, pos = heapq.heappop(heap)
            lst = self.lists[lid]
            j = lst[pos]
            if st[j] != 1:
                pos += 1
                while pos < len(lst) and st[lst[pos]] != 1:
                    pos += 1
                if pos < len(lst):
                    heapq.heappush(heap, (key_of(lst[pos]), lid, pos))
                continue
            if dynamic:
                cur = key_of(j)
                if cur != key:
                    heapq.heappush(heap, (cur, lid, pos))
                    continue
            precount = (
                self.quota_shortcuts
                and self.has_quota
                and not (self.backfill and self.reservations)
            )
            if precount:
                k = lid // self.ncls
                room = self._team_room(k)
                if room < self.max_n and room < self._team_min_pending(k):
                    stalled.append(lid)
                    self.counters["quota_shortcuts"] += 1
                    continue
                limit = qmin.get(k)
                if limit is not None and n_of[j] >= limit:
                    self.counters["quota_shortcuts"] += 1
                    end = len(lst)
                    while pos < end and (st[lst[pos]] != 1 or n_of[lst[pos]] >= limit):
                        pos += 1
                    if pos < end:
                        heapq.heappush(heap, (key_of(lst[pos]), lid, pos))
                    continue
            last_key = key
            self._qfail = -1
            yield j
            if precount and self._qfail == j:
                k = team_of[j]
                qmin[k] = min(qmin.get(k, n_of[j]), n_of[j])
            pos += 1
            while pos < len(lst) and st[lst[pos]] != 1:
                pos += 1
            if pos < len(lst):
                heapq.heappush(heap, (key_of(lst[pos]), lid, pos))

    def _team_min_pending(self, k: int) -> int:
        """Fewest GPUs any pending job of team ``k`` asks for."""
        return min((n for n, c in self.team_size_cnt[k].items() if c > 0), default=1)

    def _team_room(self, k: int) -> float:
        """Most GPUs team ``k`` could be admitted for now under its quota."""
        r = self.nominal[k] - self.used[k]
        c = self.cohort_of[k] if self.quota_mode == "kueue" else None
        if c is not None:
            g = self.guar[k]
            a = self.cohort_cap[c] - self.cohort_used[c] + max(0.0, self.used[k] - g)
            r = max(r, min(self.nominal[k] + self.blimit[k], g + a) - self.used[k])
        return r

    # ------------------------------------------------------------------ scheduling
    def _consider(self, j: int, t: float) -> bool:
        """Try to start ``j``; update the pass state. Returns False to end the pass."""
        if self.has_quota and not self._quota_ok(j):
            # a quota-blocked job is skipped, but counts as tested once backfilling
            self._qfail = j
            return self._after_test(bool(self.reservations), j) if self.backfill else True
        need = self.n[j]
        elig = self.elig[j]
        if not self.backfill:
            pools = [p for p in elig if p not in self.blocked]
            if not pools:
                return True
            for p in pools:
                if need <= self.pool_free[p]:
                    alloc = self._fit(p, need)
                    if alloc is not None:
                        self._start(j, alloc, t)
                        return True
            if self._could_preempt(j):
                alloc = self._try_preempt(j, pools, t)
                if alloc is not None:
                    self._start(j, alloc, t)
                    return True
            if self.frontier is None:
                self.frontier = self._key(j)
                self.head_frag = any(need <= self.pool_free[p] for p in pools)
            self.blocked.update(pools)
            if len(self.blocked) == self.npools:
                self.end_reason = "strict"
                return False
            return True
        # EASY backfill
        counted = bool(self.reservations)
        free_pools = [p for p in elig if p not in self.reservations]
        est = self.restore[j] + self.remaining[j] * self.est_factor
        for p in free_pools:
            if need <= self.pool_free[p]:
                alloc = self._fit(p, need)
                if alloc is not None:
                    self._start(j, alloc, t)
                    return self._after_test(counted, j)
        for p in elig:
            res = self.reservations.get(p)
            if res is None or need > self.pool_free[p]:
                continue
            alloc = self._fit(p, need) if t + est <= res.shadow else self._fit_capped(p, need, res)
            if alloc is not None:
                self._start(j, alloc, t)
                return self._after_test(counted, j)
        if free_pools:
            if self._could_preempt(j):
                alloc = self._try_preempt(j, free_pools, t)
                if alloc is not None:
                    self._start(j, alloc, t)
                    return self._after_test(counted, j)
            best: tuple[float, int, _Res] | None = None
            for p in free_pools:
                res = self._reserve(j, p)
                if res is not None and (best is None or res.shadow < best[0]):
                    best = (res.shadow, p, res)
            if best is not None:
                self.reservations[best[1]] = best[2]
            if self.frontier is None:
                self.frontier = self._key(j)
                self.head_frag = any(need <= self.pool_free[p] for p in free_pools)
        return self._after_test(counted, j)

    def _after_test(self, counted: bool, j: int) -> bool:
        if counted:
            self.tested += 1
            self.last_key = self._key(j)
            if self.tested >= self.opts.backfill_depth:
                self.end_reason = "depth"
                return False
        return True

    def _stop_for_full(self) -> bool:
        if self.free_total > 0 or self.opts.preemption:
            return False
        self.end_reason = "full"
        return True

    def _full_pass(self, t: float) -> None:
        self.counters["full_passes"] += 1
        self._caps_now = None
        self.reservations = {}
        self.blocked = set()
        self.frontier = None
        self.tested = 0
        self.end_reason = "empty"
        self.last_key = None
        self.head_frag = False
        self.window_starts = 0
        self.dirty = False
        if self.npending == 0 or self._stop_for_full():
            return
        checked = False
        for j in self._order():
            if not self._consider(j, t):
                return
            if self.npending == 0 or self._stop_for_full():
                return
            if self.vector_ok and self.reservations:
                # Backfill phase: give up at once when no pending job could fit; test the
                # first candidates one by one (usually one of them fills the freed GPUs),
                # and the rest of the window vectorised.
                if not checked:
                    checked = True
                    if self._nothing_fits(t, 0, self.reservations[0]):
                        self.end_reason = "nothing"
                        return
                if self.tested >= _PY_TESTS:
                    self._vector_scan(t, j)
                    return

    def _caps(self, p: int, res: _Res) -> tuple[int, int, int, int]:
        """Upper bounds for placement now: (largest free on one node, whole free nodes) for
        jobs that end before the reservation, and the same for jobs that outlast it."""
        G = self.G[p]
        b = self.buckets[p]
        fr = self.free[p]
        node_all = 0
        for f in range(G, 0, -1):
            if b[f]:
                node_all = f
                break
        whole_all = len(b[G])
        lim = res.limit
        capped = {nd: max(0, min(fr[nd], v)) for nd, v in lim.items()}
        node_long = max(capped.values(), default=0)
        for f in range(G, node_long, -1):
            s = b[f]
            if s and len(s) > sum(1 for nd in lim if fr[nd] == f):
                node_long = f
                break
        whole_long = whole_all - sum(1 for nd, c in capped.items() if fr[nd] == G and c < G)
        return node_all, whole_all, node_long, whole_long

    def _quota_room(self) -> Any:
        """Most GPUs each team could be admitted for now (for the vectorised filter)."""
        np = self.np
        room = np.empty(len(self.used))
        for k in range(len(self.used)):
            r = self.nominal[k] - self.used[k]
            c = self.cohort_of[k] if self.quota_mode == "kueue" else None
            if c is not None:
                g = self.guar[k]
                a = self.cohort_cap[c] - self.cohort_used[c] + max(0.0, self.used[k] - g)
                r = max(r, min(self.nominal[k] + self.blimit[k], g + a) - self.used[k])
            room[k] = r
        return room

    def _pending_size(self, j: int) -> None:
        n = self.n[j]
        self.size_cnt[n] = self.size_cnt.get(n, 0) + 1
        tc = self.team_size_cnt[self.team[j]]
        tc[n] = tc.get(n, 0) + 1
        est = self.restore[j] + self.remaining[j] * self.est_factor
        heapq.heappush(self.size_heap.setdefault(n, []), (est, j))

    def _min_est(self, n: int) -> float:
        h = self.size_heap[n]
        st = self.state
        while h:
            est, j = h[0]
            if st[j] == 1 and est == self.restore[j] + self.remaining[j] * self.est_factor:
                return est
            heapq.heappop(h)
        return _INF

    def _nothing_fits(self, t: float, p: int, res: _Res) -> bool:
        """True when no pending job at all could start now beside the reservation (a
        necessary-condition test over GPU counts and the shortest estimate per count)."""
        G = self.G[p]
        caps = self._caps(p, res)
        self._caps_now = caps  # the vectorised scan that may follow reuses them
        node_all, whole_all, node_long, whole_long = caps
        free = self.pool_free[p]
        for n, cnt in self.size_cnt.items():
            if cnt <= 0 or n > free:
                continue
            if n <= G:
                if n <= node_long:
                    return False
                if n <= node_all and t + self._min_est(n) <= res.shadow:
                    return False
            else:
                if n // G <= whole_long:
                    return False
                if n // G <= whole_all and t + self._min_est(n) <= res.shadow:
                    return False
        return True

    def _pending_indices(self) -> Any:
        """Indices of all pending jobs (any order)."""
        np = self.np
        if self.pidx_rebuild or self.pidx.size > 2 * self.npending + 256:
            P = np.flatnonzero(self.pmask[self.lo : self.arrived]) + self.lo
            if P.size:
                self.lo = int(P[0])
            self.pidx = P
            self.pidx_new.clear()
            self.pidx_rebuild = False
            return P
        if self.pidx_new:
            self.pidx = np.concatenate((self.pidx, np.asarray(self.pidx_new, dtype=np.int64)))
            self.pidx_new.clear()
        return self.pidx[self.pmask[self.pidx]]

    def _vector_scan(self, t: float, j0: int) -> None:
        """The backfill part of a pass (one pool, reservation made), vectorised.

        Same decisions as calling :meth:`_consider` on each of the next ``backfill_depth``
        pending jobs in order: numpy discards the jobs that cannot fit even by the upper
        bounds of :meth:`_caps`; the rest are tested exactly, in order.
        """
        np = self.np
        hi = self.arrived
        rem = self.opts.backfill_depth - self.tested
        if self.fifo_order:
            # submit order: the window is the next `rem` pending jobs after j0
            lo = j0 + 1
            span = 4 * rem
            while True:
                P = np.flatnonzero(self.pmask[lo : lo + span]) + lo
                if P.size >= rem or lo + span >= hi:
                    break
                span *= 4
            keys = P
        else:
            P = self._pending_indices()
            if P.size == 0:
                return
            keys = self._vkeys(P)
            if self.fifo_order:
                k0 = j0
            elif self.policy == "priority":
                k0 = self.crank[j0] * (self.N + 1) + j0
            else:
                k0 = self._key(j0)[0]
            after = (keys > k0) | ((keys == k0) & (j0 < P))
            P = P[after]
            keys = keys[after]
        full_window = P.size >= rem
        if P.size > rem:
            if self.fifo_order:
                P = P[:rem]
            else:
                kth = np.partition(keys, rem - 1)[rem - 1]
                lt = np.flatnonzero(keys < kth)
                eq = np.flatnonzero(keys == kth)[: rem - lt.size]
                sel = np.concatenate((lt, eq))
                P = P[sel]
                keys = keys[sel]
        if not self.fifo_order:
            o = np.lexsort((P, keys))
            P = P[o]
        if P.size == 0:
            return
        p = 0
        res = self.reservations[p]
        G = self.G[p]
        n = self.n_arr[P]
        est = self.est_arr[P]
        caps, self._caps_now = self._caps_now, None
        node_all, whole_all, node_long, whole_long = caps or self._caps(p, res)
        small = n <= G
        q = n // G
        short = (t + est) <= res.shadow
        ok_short = np.where(small, n <= node_all, q <= whole_all)
        ok_long = np.where(small, n <= node_long, q <= whole_long)
        cand = (short & ok_short) | ok_long
        cand &= n <= self.pool_free[p]
        if self.has_quota:
            cand &= n <= self._quota_room()[self.team_arr[P]]
        idx = np.flatnonzero(cand)
        pos = 0
        while pos < idx.size:
            c = int(idx[pos])
            pos += 1
            j = int(P[c])
            need = self.n[j]
            if need > self.pool_free[p]:
                continue
            if self.has_quota and not self._quota_ok(j):
                continue
            alloc = self._fit(p, need) if short[c] else self._fit_capped(p, need, res)
            if alloc is None:
                continue
            self._start(j, alloc, t)
            if self.npending == 0 or self._stop_for_full():
                return
            # capacity shrank: drop the candidates that can no longer fit
            rest = idx[pos:]
            node_all, whole_all, node_long, whole_long = self._caps(p, res)
            nr, qr, sr = n[rest], q[rest], short[rest]
            smr = nr <= G
            keep = (sr & np.where(smr, nr <= node_all, qr <= whole_all)) | np.where(
                smr, nr <= node_long, qr <= whole_long
            )
            keep &= nr <= self.pool_free[p]
            idx = rest[keep]
            pos = 0
        self.tested += int(P.size)
        if full_window:
            self.end_reason = "depth"
            self.last_key = self._key(int(P[-1]))

    def _arrival_pass(self, t: float, new: list[int]) -> None:
        """Schedule after arrivals only; falls back to a full pass when it must."""
        if self.dirty or self.opts.preemption or (not self.backfill and self.npools > 1):
            self._full_pass(t)
            return
        if not self.single:
            new = sorted(new, key=self._key)
        for j in new:
            if self.end_reason == "full" and self.free_total == 0:
                return
            if self.frontier is None:
                if self.end_reason != "empty":
                    self._full_pass(t)
                    return
                if not self._consider(j, t):
                    return
                continue
            k = self._key(j)
            if k < self.frontier:
                self._full_pass(t)
                return
            if not self.backfill:
                continue  # behind the blocked head (one pool): stays blocked
            if self.end_reason == "nothing":
                self._full_pass(t)
                return
            if self.end_reason == "depth":
                # beyond the window of the last pass, unless jobs of that window started
                # since (a new pass would then test that many jobs further)
                if self.window_starts == 0 and self.last_key is not None and k > self.last_key:
                    continue
                self._full_pass(t)
                return
            if self.free_total == 0:
                self.end_reason = "full"
                return
            if not self._consider(j, t):
                return

    def _recalc_fairshare(self, t: float) -> None:
        period = self.opts.priority_calc_period_s
        self.t_calc = t
        self.next_calc = (math.floor(t / period) + 1) * period
        usage = self.decay.snapshot(t)
        fs = factors(self.tree, usage, self.opts.fairshare_algorithm)
        o = self.opts
        rank_value = {r: v for v, r in self.cls_rank.items()}
        max_cls = max(abs(v) for v in self.cls_rank) or 1
        for lid in range(len(self.lists)):
            k, r = divmod(lid, self.ncls)
            self.base[lid] = o.weight_fairshare * fs[self.team_names[k]] + o.weight_qos * (
                rank_value[r] / max_cls
            )
        self.base_arr = self.np.asarray(self.base, dtype=float)
        self.dirty = True

    # ------------------------------------------------------------------ main loop
    def run(self, progress: Callable[[int, int], None] | None = None) -> RawRun:
        N = self.N
        sub = self.sub
        heap = self.heap
        nxt = 0
        t_prev = sub[0] if N else 0.0
        t_begin = t_prev
        done = 0
        tick = max(1, N // 200)
        integ = self.integrals
        fair = self.policy == "fair-share"
        while nxt < N or heap:
            t_arr = sub[nxt] if nxt < N else _INF
            t_cmp = heap[0][0] if heap else _INF
            t = t_arr if t_arr < t_cmp else t_cmp
            dt = t - t_prev
            if dt > 0:
                if self.npending:
                    integ["idle_while_waiting_gpu_s"] += self.free_total * dt
                    integ["queue_nonempty_s"] += dt
                    if self.head_frag:
                        integ["fragmentation_blocked_s"] += dt
                        integ["fragmentation_blocked_gpu_s"] += self.free_total * dt
                integ["free_gpu_s"] += self.free_total * dt
                integ["partial_node_free_gpu_s"] += self.partial_free * dt
                t_prev = t
            # completions first, so that GPUs freed at t serve arrivals at t
            while heap and heap[0][0] <= t:
                _, j, ep = heapq.heappop(heap)
                if ep != self.epoch[j] or self.state[j] != 2:
                    continue
                self._complete(j, t)
                self.dirty = True
                done += 1
                self.counters["events"] += 1
                if progress is not None and done % tick == 0:
                    progress(done, N)
            new: list[int] = []
            while nxt < N and sub[nxt] <= t:
                j = nxt
                nxt += 1
                self.state[j] = 1
                self.pmask[j] = True
                self.pidx_new.append(j)
                self._pending_size(j)
                self.arrived = nxt
                self.pend_since[j] = t
                self.npending += 1
                self.lists[self.lid[j]].append(j)
                new.append(j)
                self.counters["events"] += 1
            if fair and t >= self.next_calc:
                self._recalc_fairshare(t)
            self.counters["passes"] += 1
            if self.dirty:
                self._full_pass(t)
            elif new:
                self._arrival_pass(t, new)
        if progress is not None:
            progress(N, N)
        if not self.single:
            for lid in range(len(self.lists)):
                self.lists[lid] = [j for j in self.lists[lid] if self.state[j] == 1]
        stuck = [j for j in range(N) if self.state[j] != 3]
        if stuck:  # pragma: no cover - a bug, not a user error
            raise RuntimeError(f"{len(stuck)} jobs never finished (first: {self.jobs[stuck[0]]})")
        return RawRun(
            jobs=self.jobs,
            first_start=self.first_start,
            end=self.end,
            preemptions=self.npre,
            lost_gpu_s=self.lost,
            restart_gpu_s=self.restart_gpu_s,
            seg_job=self.seg_job,
            seg_start=self.seg_s,
            seg_end=self.seg_e,
            pend_start=self.pend_s,
            pend_end=self.pend_e,
            pend_job=self.pend_job,
            unschedulable=self.unschedulable,
            integrals=dict(integ),
            counters=dict(self.counters),
            t_begin=t_begin,
            t_end=t_prev,
        )
