"""The teams' p95 wait target sizes the fleet the plan prices (issue 17: a plan recommended
72 GPUs while its own smallest cluster meeting the target was 80).

Real planner, real scheduling simulator; the scenario's teams load the cluster well past
what the training run brings, so the target, not the deadline, sets the shared nodes.
"""

from __future__ import annotations

import textwrap

import pytest

from gpuplan.plan.cost import HOURS_PER_MONTH

SCENARIO = textwrap.dedent(
    """\
    name: teams-bind
    workloads:
      training:
        - name: train-8b
          model: llama3.1-8b
          tokens: 2.0e11
          deadline_days: 10
          seq_len: 4096
          global_batch_tokens: 2.0e6
      inference:
        - name: chat
          model: llama3.1-8b
          qps: 4
          input_tokens: {mean: 1000, p99: 3000}
          output_tokens: {mean: 200, p99: 600}
          ttft_slo_s: 1.0
          tpot_slo_s: 0.05
    candidates:
      gpus: [h100]
      instances: [p5.48xlarge]
      onprem_nodes: []
    costs:
      utilisation: 0.8
      commitment_discounts: {reserved_1y: 0.3, reserved_3y: 0.5}
      spot_interruptions_per_node_hour: 0.005
      restart_s: 600
    teams:
      - name: research
        share: 1
        arrival_rate_per_hour: 4
        gpu_count_distribution: {8: 1.0}
        duration_distribution: {kind: fixed, value_s: 7200}
    scheduling:
      policy: fifo
      horizon_days: 2
      sizes_gpus: [32, 64]
      p95_wait_target_s: 1800
    """
)


@pytest.fixture(scope="module")
def doc():
    from gpuplan.plan.planner import build_plan
    from gpuplan.plan.scenario import parse_scenario

    return build_plan(parse_scenario(SCENARIO), results_paths=[]).to_json()


def _v(f):
    return f["value"]


def test_the_teams_target_sets_the_fleet_and_the_section_agrees(doc):
    rec = doc["summary"]["recommended"]
    top = next(o for o in doc["options"] if o["id"] == rec["option"])
    training = _v(top["training"][0]["nodes"])
    serving = _v(top["inference"][0]["nodes"])
    sizing = top["sizing"]
    assert sizing["constraint"] == "scheduling.p95_wait_target_s"
    assert sizing["binds"] is True
    assert _v(sizing["nodes"]) > training  # the scenario is built so that the teams bind
    assert _v(top["nodes"]) == _v(sizing["nodes"]) + serving
    assert _v(top["gpus"]) == _v(top["nodes"]) * 8
    sc = doc["shared_cluster"]
    small = sc["smallest_cluster"]["overall"]
    # the table's smallest cluster is exactly the shared part of the recommended fleet
    assert _v(small["gpus"]) == _v(sc["cluster_gpus"]) == (_v(top["nodes"]) - serving) * 8
    assert "max(training nodes, nodes the teams need" in top["nodes"]["provenance"]["formula"]


def test_the_month_pays_for_the_nodes_kept_for_the_teams(doc):
    top = next(o for o in doc["options"] if o["id"] == doc["summary"]["recommended"]["option"])
    for model in ("reserved_1y", "reserved_3y"):
        c = top["costs"][model]
        price = _v(c["price_usd_per_node_hour"])
        # committed: every node of the fleet, every hour of the month (+ the shared storage
        # tier's month where the plan priced one for this cloud option)
        storage = _v(c.get("storage_usd_per_month")) or 0.0
        assert _v(c["per_month_usd"]) == pytest.approx(
            _v(top["nodes"]) * HOURS_PER_MONTH * price + storage
        )
    od = top["costs"]["on_demand"]
    run_only = _v(od["all_runs_usd"])
    # runs are charged for the training nodes only, never for the teams' extra nodes
    t = top["training"][0]
    hours = _v(t["nodes"]) * _v(t["time_to_train_s"]) / 3600.0
    good = _v(od["reliability"]["train-8b"]["goodput"])
    storage = _v((od.get("storage_per_run_usd") or {}).get("train-8b")) or 0.0
    assert run_only - storage == pytest.approx(hours * _v(od["price_usd_per_node_hour"]) / good)


def test_without_a_target_the_fleet_is_the_workloads_side_by_side():
    from gpuplan.plan.planner import build_plan
    from gpuplan.plan.scenario import parse_scenario

    text = SCENARIO.replace("  p95_wait_target_s: 1800\n", "").replace(
        "  sizes_gpus: [32, 64]\n", "  sizes_gpus: [32]\n"
    )
    assert "p95_wait_target_s" not in text
    d = build_plan(parse_scenario(text), results_paths=[]).to_json()
    for o in d["options"]:
        assert o["sizing"] is None
        assert _v(o["nodes"]) == _v(o["training"][0]["nodes"]) + _v(o["inference"][0]["nodes"])
