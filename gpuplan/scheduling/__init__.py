"""Shared-cluster scheduling simulation (issue 8); see docs/scheduling.md.

Public API (the plan report and the ``gpuplan schedule`` command use only these)::

    from gpuplan.scheduling import (
        simulate, SimulationResult, Cluster, NodePool, Job, TeamQuota,
        load_trace, load_philly, generate_workload, PHILLY_CITATION,
        wait_vs_size_curve, smallest_cluster, concurrent_fit, compare_policies,
        parse_scenario, parse_teams, TeamSpec, SharedClusterScenario,
        quota_plan, render_config, write_config,
    )

Other submodules are imported lazily. ``simulate`` is bound eagerly because a submodule
has the same name: importing ``gpuplan.scheduling.simulate`` later must not replace
the function by the module.
"""

from __future__ import annotations

import importlib
from typing import Any

from gpuplan.scheduling.simulate import simulate as simulate

_EXPORTS = {
    "SimulationResult": "metrics",
    "Cluster": "cluster",
    "NodePool": "cluster",
    "max_concurrent": "cluster",
    "Job": "workload",
    "load_trace": "workload",
    "load_philly": "workload",
    "generate_workload": "workload",
    "jobs_from_records": "workload",
    "PHILLY_CITATION": "workload",
    "TeamQuota": "engine",
    "SimOptions": "engine",
    "POLICIES": "engine",
    "wait_vs_size_curve": "capacity",
    "philly_wait_curve": "capacity",
    "smallest_cluster": "capacity",
    "concurrent_fit": "capacity",
    "compare_policies": "capacity",
    "summary": "capacity",
    "parse_scenario": "schema",
    "parse_teams": "schema",
    "derived_quotas": "schema",
    "TeamSpec": "schema",
    "SchedulingSpec": "schema",
    "SharedClusterScenario": "schema",
    "quota_plan": "configs",
    "render_config": "configs",
    "write_config": "configs",
    "scenario_inputs": "scenario",
    "run_scenario": "scenario",
}

__all__ = sorted([*_EXPORTS, "simulate"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
