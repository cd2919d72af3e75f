"""An instance sold only in whole UltraServers (AWS p6e-gb200: 18 instances, 72 GPUs; the
catalog's ``instance_multiple``): the plan rounds the fleet and each billed workload up to a
multiple of it, says so in the option, and shows the idle GPUs (issue 17)."""

from __future__ import annotations

import math

import pytest

from gpuplan.catalogs.catalog import load_catalog
from gpuplan.plan.planner import build_plan
from gpuplan.plan.scenario import parse_scenario

CAT = load_catalog()
INST = CAT.instance("p6e-gb200.36xlarge")

SCENARIO = """
name: ultraserver
workloads:
  training:
    - name: finetune-8b
      model: llama3.1-8b
      tokens: 2.0e10
      deadline_days: 30
      seq_len: 4096
      global_batch_tokens: 1.0e6
      precision: bf16
      dataset_bytes: 1.0e12
      checkpoint: {retained: 1, write_budget_s: 600, bytes_per_param: 14}
candidates:
  gpus: [gb200]
  instances: [p6e-gb200.36xlarge]
  onprem_nodes: []
costs:
  utilisation: 0.8
  node_failures_per_node_hour: 0.0005
  restart_s: 600
"""


@pytest.fixture(scope="module")
def option():
    doc = build_plan(parse_scenario(SCENARIO), results_paths=[]).to_json()
    (o,) = doc["options"]
    return o


def test_catalog_row_carries_the_multiple_with_its_source():
    assert INST.instance_multiple == 18
    assert INST.instance_multiple * INST.accelerators_per_node == 72
    assert "capacityblocks" in INST.source


def test_fleet_is_whole_ultraservers_with_idle_gpus_shown(option):
    m = INST.instance_multiple
    t = option["training"][0]
    need = t["nodes"]["value"]
    assert need % m != 0, "the scenario must need a part of one UltraServer to test rounding"
    nodes = option["nodes"]["value"]
    assert nodes == math.ceil(need / m) * m
    wu = option["whole_units"]
    assert wu["instance_multiple"]["value"] == m
    assert wu["instance_multiple"]["provenance"]["kind"] == "catalog"
    assert wu["nodes_needed"]["value"] == need
    assert wu["idle_gpus"]["value"] == (nodes - need) * INST.accelerators_per_node
    assert any("whole UltraServers" in n for n in map(str, option["notes"]))


def test_runs_are_billed_for_whole_ultraservers(option):
    m = INST.instance_multiple
    cb = option["costs"]["capacity_block"]
    price = cb["price_usd_per_node_hour"]["value"]
    assert price == INST.price("capacity_block").usd_per_hour
    run = cb["per_run_usd"]["finetune-8b"]
    days = cb["capacity_block"]["booked_days"]["finetune-8b"]["value"]
    # a block is booked for whole UltraServers: ceil(nodes / 18) x 18 x booked days x 24 h x p
    need = option["training"][0]["nodes"]["value"]
    storage = cb.get("storage_per_run_usd", {}).get("finetune-8b", {}).get("value", 0.0)
    instances = run["value"] - storage
    assert instances == pytest.approx(math.ceil(need / m) * m * days * 24 * price)
