"""From a validated scenario (teams + scheduling block) to simulator inputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpuplan.errors import InputError
from gpuplan.scheduling.cluster import Cluster
from gpuplan.scheduling.engine import TeamQuota
from gpuplan.scheduling.schema import (
    SchedulingSpec,
    SharedClusterScenario,
    TeamSpec,
    derived_quotas,
)
from gpuplan.scheduling.workload import ForecastFn, Job, generate_workload

if TYPE_CHECKING:
    from gpuplan.scheduling.metrics import SimulationResult


def team_quotas(teams: list[TeamSpec], total_gpus: int) -> dict[str, TeamQuota]:
    """Nominal quota per team (``quota_gpus`` or its share of the cluster) with limits."""
    nominal = derived_quotas(teams, total_gpus)
    return {
        t.name: TeamQuota(
            nominal_gpus=nominal[t.name],
            borrowing_limit_gpus=t.borrowing_limit_gpus,
            lending_limit_gpus=t.lending_limit_gpus,
            cohort=t.cohort,
        )
        for t in teams
    }


def simulation_options(
    teams: Sequence[TeamSpec], spec: SchedulingSpec, cluster: Cluster
) -> dict[str, Any]:
    """Keyword options of :func:`simulate` that express the teams and the scheduling block.

    The one builder of these options: ``gpuplan schedule --scenario`` (:func:`scenario_inputs`)
    and ``gpuplan plan``'s shared-cluster section (:mod:`gpuplan.plan.shared`) both call it,
    so both simulate the same fair-share tree (teams under their ``parent`` or ``cohort``
    account), the same quotas and the same preemption settings.
    """
    teams = list(teams)
    opts: dict[str, Any] = {
        "backfill": None,
        "shares": {t.name: t.share for t in teams},
        "parents": {t.name: t.parent or t.cohort for t in teams},
        "priority_classes": dict(spec.priority_classes),
        "fairshare_algorithm": spec.fairshare_algorithm,
        "preemption": spec.preemption,
        "quota_mode": spec.quota_mode,
        "checkpoint_interval_s": spec.checkpoint_interval_s,
        "restart_cost_s": spec.restart_cost_s,
        "starvation_wait_s": spec.starvation_wait_s,
        "starvation_runtime_multiple": spec.starvation_runtime_multiple,
    }
    if spec.quota_mode != "none":
        opts["quotas"] = team_quotas(teams, cluster.total_gpus)
    return opts


def scenario_inputs(
    scenario: SharedClusterScenario,
    cluster: Cluster | None = None,
    *,
    forecast: ForecastFn | None = None,
) -> tuple[list[Job], Cluster, dict[str, Any]]:
    """Jobs, cluster and :func:`simulate` options for a scenario.

    ``cluster`` overrides ``scheduling.cluster``; one of them is required.
    """
    spec = scenario.scheduling
    if cluster is None:
        if spec.cluster is None:
            raise InputError(
                "the scenario names no cluster",
                hint="add scheduling.cluster {gpus_per_node, nodes} or pass --gpus and "
                "--gpus-per-node",
            )
        cluster = Cluster.from_spec(spec.cluster)
    jobs = generate_workload(
        scenario.teams, horizon_s=spec.horizon_days * 86400.0, seed=spec.seed, forecast=forecast
    )
    if not jobs:
        raise InputError(
            "the teams submit no jobs in the simulated window",
            hint="give arrival_rate_per_hour > 0 or training_jobs to at least one team",
        )
    return jobs, cluster, simulation_options(scenario.teams, spec, cluster)


def run_scenario(
    scenario: SharedClusterScenario,
    cluster: Cluster | None = None,
    *,
    policy: str | None = None,
    forecast: ForecastFn | None = None,
    **overrides: Any,
) -> SimulationResult:
    """Simulate a scenario's teams (policy from the scenario unless given)."""
    from gpuplan.scheduling.simulate import simulate

    jobs, cluster, opts = scenario_inputs(scenario, cluster, forecast=forecast)
    return simulate(jobs, cluster, policy or scenario.scheduling.policy, **{**opts, **overrides})
