"""``gpuplan plan`` and ``gpuplan schedule --scenario`` simulate the same fair-share tree.

Before issue 14 the plan rebuilt the simulator's options itself and dropped ``parents``, so
the plan's shared-cluster section ran a flat fair-share tree while ``gpuplan schedule`` on
the same file used the teams' accounts. Both now call one builder
(:func:`gpuplan.scheduling.scenario.simulation_options`). Real parsers, real simulator
options, real tree builder; the same scenario text goes through both paths.
"""

from __future__ import annotations

import textwrap
from typing import Any

import yaml

SCENARIO = textwrap.dedent(
    """\
    name: tree
    workloads:
      training:
        - name: train-8b
          model: llama3.1-8b
          tokens: 1.0e11
          deadline_days: 20
          seq_len: 4096
          global_batch_tokens: 2.0e6
    candidates:
      gpus: [h100]
    teams:
      - name: vision
        share: 30
        parent: research
        arrival_rate_per_hour: 2
        gpu_count_distribution: {8: 1.0}
        duration_distribution: {kind: fixed, value_s: 3600}
      - name: speech
        share: 10
        parent: research
        arrival_rate_per_hour: 2
        gpu_count_distribution: {8: 1.0}
        duration_distribution: {kind: fixed, value_s: 3600}
      - name: prod
        share: 60
        cohort: serving
        arrival_rate_per_hour: 1
        gpu_count_distribution: {16: 1.0}
        duration_distribution: {kind: fixed, value_s: 1800}
      - name: adhoc
        share: 5
        arrival_rate_per_hour: 1
        gpu_count_distribution: {8: 1.0}
        duration_distribution: {kind: fixed, value_s: 600}
    scheduling:
      policy: fair-share
      quota_mode: kueue
      horizon_days: 1
      cluster: {gpus_per_node: 8, nodes: 8}
    """
)


def _shape(account: Any) -> tuple[Any, ...]:
    return (
        account.name,
        account.shares,
        tuple(sorted(_shape(c) for c in account.children)),
    )


def _tree(options: dict[str, Any], teams: list[str]) -> tuple[Any, ...]:
    """The tree the engine builds from these options (engine.py: build_tree over the teams)."""
    from gpuplan.scheduling.fairshare import build_tree

    parents = dict(options.get("parents") or {})
    shares = options["shares"]
    return _shape(build_tree([(t, shares[t], parents.get(t)) for t in teams]))


def test_plan_and_schedule_build_the_same_fair_share_tree():
    from gpuplan.plan.context import PlanContext
    from gpuplan.plan.scenario import parse_scenario
    from gpuplan.plan.shared import _sim_options
    from gpuplan.scheduling.scenario import scenario_inputs
    from gpuplan.scheduling.schema import parse_scenario as parse_shared

    # gpuplan schedule --scenario FILE (cli/schedule.py: parse, then scenario_inputs)
    shared = parse_shared(yaml.safe_load(SCENARIO), where="scenario")
    _jobs, cluster, schedule_opts = scenario_inputs(shared)
    # gpuplan plan FILE: the shared-cluster section's options on the same cluster
    ctx = PlanContext(loaded=parse_scenario(SCENARIO), catalog=None)
    plan_opts = _sim_options(ctx, ctx.scenario.scheduling, cluster)

    teams = [t.name for t in shared.teams]
    tree_schedule = _tree(schedule_opts, teams)
    tree_plan = _tree(plan_opts, teams)
    assert tree_plan == tree_schedule
    # and it is the teams' tree, not a flat one: research holds vision and speech with the
    # sum of their shares, prod sits under its cohort, adhoc directly under the root
    assert tree_plan == (
        "root",
        1.0,
        (
            ("adhoc", 5.0, ()),
            ("research", 40.0, (("speech", 10.0, ()), ("vision", 30.0, ()))),
            ("serving", 60.0, (("prod", 60.0, ()),)),
        ),
    )
    # every other option agrees too; the plan only adds dropping jobs no node can hold
    assert {k: v for k, v in plan_opts.items() if k != "on_unschedulable"} == schedule_opts
    assert plan_opts["on_unschedulable"] == "drop"
