"""A cloud option's cost includes the shared storage tier the plan chose for it (issue 17:
only on-premises storage entered the owned cost, which biased cloud vs owned).

Expected figures are recomputed from the catalog row (price per TiB-month), the tier's
provisioned capacity and the run's own figures, not copied from the plan's output."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.catalogs.catalog import load_catalog
from gpuplan.plan.cost import HOURS_PER_MONTH
from gpuplan.plan.planner import build_plan
from gpuplan.plan.scenario import load_scenario, parse_scenario
from gpuplan.report.view import summary_view

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GIB = 2**30
CAT = load_catalog()


@pytest.fixture(scope="module")
def compare():
    return build_plan(load_scenario(EXAMPLES / "storage-compare.yaml"), results_paths=[]).to_json()


def _opt(doc, prefix):
    return next(o for o in doc["options"] if o["id"].startswith(prefix))


def _chosen(o):
    st = o["storage"]
    return next(t for t in st["tiers"] if t["tier"] == st["chosen"])


def test_priced_cloud_tier_is_in_the_month_and_the_run(compare):
    o = _opt(compare, "aws/")
    fit = _chosen(o)
    row = CAT.storage_tier(fit["tier"])
    # the tier's month from the catalog row: provisioned GiB x (USD per TiB-month / 1024)
    expected_month = fit["provisioned_bytes"]["value"] / GIB * row.price_usd_per_tib_month / 1024
    assert o["storage"]["usd_per_month"]["value"] == pytest.approx(expected_month, rel=1e-9)
    t = o["training"][0]
    nodes, run_s = t["nodes"]["value"], t["time_to_train_s"]["value"]
    priced = [m for m, c in o["costs"].items() if c["price_usd_per_node_hour"]["value"]]
    assert "on_demand" in priced
    for model in priced:
        c = o["costs"][model]
        assert c["storage_usd_per_month"]["value"] == pytest.approx(expected_month, rel=1e-9)
        assert "excludes" not in c
        if c["per_run_usd"][t["name"]].get("value") is None:
            # no cost for the run (a block too short, say): nothing to add, nothing added
            assert t["name"] not in c["storage_per_run_usd"]
            continue
        goodput = c["reliability"][t["name"]]["goodput"]["value"]
        share = c["storage_per_run_usd"][t["name"]]["value"]
        assert share == pytest.approx(expected_month * run_s / 3600 / goodput / HOURS_PER_MONTH)
        if model == "on_demand":
            # pay per use: nodes x run hours x price / goodput for the instances, + storage
            price = c["price_usd_per_node_hour"]["value"]
            instances = nodes * run_s / 3600 * price / goodput
            assert c["per_run_usd"][t["name"]]["value"] == pytest.approx(instances + share)
            util = load_scenario(EXAMPLES / "storage-compare.yaml").scenario.costs.utilisation
            month = nodes * HOURS_PER_MONTH * util * price
            assert c["per_month_usd"]["value"] == pytest.approx(month + expected_month)
            assert c["all_runs_usd"]["value"] == pytest.approx(instances + share)


def test_unpriced_cloud_tier_is_listed_as_excluded(compare):
    o = _opt(compare, "gcp/")
    assert o["storage"]["chosen"] and not o["storage"]["usd_per_month"].get("value")
    c = o["costs"]["on_demand"]
    assert "storage_usd_per_month" not in c
    assert any(
        e.startswith("shared storage") and o["storage"]["chosen"] in e for e in c["excludes"]
    )


SMALL = """
name: small-cloud-storage
workloads:
  training:
    - name: pretrain-8b
      model: llama3.1-8b
      tokens: 2.0e11
      deadline_days: 30
      seq_len: 8192
      global_batch_tokens: 4.0e6
      precision: bf16
      dataset_bytes: 2.0e14
      checkpoint: {retained: 2, write_budget_s: 300, bytes_per_param: 14}
candidates:
  gpus: [h100]
  clouds: [gcp]
  onprem_nodes: []
costs:
  utilisation: 0.8
  node_failures_per_node_hour: 0.0005
  restart_s: 600
  storage_usd_per_gib_month:
    gcp-managed-lustre-1000: {usd: 0.5, source: "test quote", as_of: "2026-12"}
"""


def test_quoted_cloud_tier_enters_the_recommended_cost():
    doc = build_plan(parse_scenario(SMALL), results_paths=[]).to_json()
    for o in doc["options"]:
        fit = _chosen(o)
        assert fit["tier"] == "gcp-managed-lustre-1000"
        # the quote per GiB-month x the provisioned GiB
        expected = fit["provisioned_bytes"]["value"] / GIB * 0.5
        c = o["costs"]["on_demand"]
        assert c["storage_usd_per_month"]["value"] == pytest.approx(expected, rel=1e-9)
        inputs = c["per_month_usd"]["provenance"]["inputs"]
        assert c["storage_usd_per_month"]["label"] in inputs
    view = summary_view(doc)
    assert "network beyond the instances' price" in view["excluded"]  # storage is in
    money = dict(view["money"])
    assert money["of which shared storage per month"]["value"] > 0
    assert not any("not in the fleet cost" in e for e in view["excluded"])
    assert not any("storage beyond" in e for e in view["excluded"])
