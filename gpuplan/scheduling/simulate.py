"""The public entry point: :func:`simulate`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpuplan.errors import InputError
from gpuplan.scheduling.cluster import Cluster
from gpuplan.scheduling.engine import Engine, SimOptions
from gpuplan.scheduling.metrics import SimulationResult, summarize
from gpuplan.scheduling.workload import Job


def simulate(
    jobs: Sequence[Job],
    cluster: Cluster,
    policy: str = "backfill",
    *,
    progress: Callable[[int, int], None] | None = None,
    attribution: str | None = None,
    **options: Any,
) -> SimulationResult:
    """Replay ``jobs`` on ``cluster`` under ``policy`` and measure waits, JCT and usage.

    Parameters
    ----------
    jobs:
        The workload (:func:`load_trace`, :func:`load_philly`, :func:`generate_workload`).
    cluster:
        Node pools (:class:`Cluster`).
    policy:
        ``fifo`` (strict), ``backfill`` (FIFO + EASY), ``fair-share`` (Slurm multifactor,
        classic or Fair Tree, + EASY), ``priority`` (classes; ``preemption=True`` evicts
        lower classes) or ``drf``.
    progress:
        Called as ``progress(jobs_done, jobs_total)`` about 200 times (for a progress bar).
    attribution:
        Citation carried into the result (set it when the jobs come from a published trace).
    **options:
        Any field of :class:`SimOptions` (quotas, shares, checkpointing, starvation
        thresholds, ...).

    Returns
    -------
    SimulationResult
        ``.to_json()`` holds the ``gpuplan schedule`` JSON fields.

    Raises
    ------
    InputError
        Unknown policy/option value, unknown priority class, or a job that can never start
        (unless ``on_unschedulable="drop"``).
    """
    if not jobs:
        raise InputError("there are no jobs to simulate", hint="check the trace or the teams")
    try:
        opts = SimOptions(policy=policy, **options)
    except TypeError as exc:  # an unknown keyword
        raise InputError(
            f"unknown simulation option ({exc})",
            hint="see SimOptions in gpuplan/scheduling/engine.py",
        ) from None
    raw = Engine(jobs, cluster, opts).run(progress)
    return summarize(raw, opts, cluster, attribution=attribution)
