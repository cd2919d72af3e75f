"""Negotiated price overrides, per-cloud regions and the stale-price flag (issue 17)."""

from __future__ import annotations

import datetime as _dt
import textwrap

import pytest

from gpuplan.plan.cost import find_override, price_age
from gpuplan.plan.planner import build_plan
from gpuplan.plan.provenance import Figure, Provenance
from gpuplan.plan.scenario import parse_scenario

BASE = textwrap.dedent(
    """\
    name: prices
    workloads:
      inference:
        - name: chat
          model: llama3.1-8b
          qps: 2
          input_tokens: 512
          output_tokens: 128
          ttft_slo_s: 1.0
          tpot_slo_s: 0.05
    candidates:
      gpus: [h100]
      instances: [{instances}]
      onprem_nodes: []
    """
)


def _plan(extra: str, instances: str = "p5.48xlarge") -> dict:
    text = BASE.format(instances=instances) + textwrap.dedent(extra)
    return build_plan(parse_scenario(text), results_paths=[]).to_json()


def _cloud_option(doc: dict, inst: str) -> dict:
    return next(o for o in doc["options"] if o["platform"] == inst)


def _fig_value(fig) -> float | None:
    return fig["value"] if isinstance(fig, dict) else getattr(fig, "value", None)


def test_price_age_by_hand():
    fig = Figure(1.0, "USD/node-hour", "p", Provenance("catalog", "r", retrieved="2025-H1"))
    # 2025-01-01 -> 2026-01-02 is 366 days: past 365
    age = price_age(fig, today=_dt.date(2026, 1, 2))
    assert (age["as_of"], age["age_days"].value, age["max_age_days"].value, age["stale"]) == (
        "2025-H1",
        366,
        365,
        True,
    )
    fresh = price_age(fig, max_age_days=400, today=_dt.date(2026, 1, 2))
    assert fresh["stale"] is False
    undated = Figure(1.0, "USD/node-hour", "q", Provenance("input", "s.yaml:3"))
    assert price_age(undated)["stale"] is True
    missing = Figure(None, "USD/node-hour", "m", Provenance("catalog", "r"), missing="none")
    assert price_age(missing) is None


def test_find_override_matches_alias_case_insensitively():
    from gpuplan.catalogs import get_catalog

    inst = get_catalog().instance("p5.48xlarge")
    assert find_override({"P5": "x"}, inst) == ("P5", "x")
    assert find_override({"p4d": "x"}, inst) is None


def test_negotiated_price_replaces_the_catalog_price():
    doc = _plan(
        """\
        costs:
          price_overrides:
            p5:
              on_demand: {usd: 40.0, source: AWS EDP quote, as_of: 2026-11-20}
              reserved_1y: 30.0
        """
    )
    opt = _cloud_option(doc, "p5.48xlarge")
    od = opt["costs"]["on_demand"]
    assert _fig_value(od["price_usd_per_node_hour"]) == 40.0
    assert _fig_value(opt["costs"]["reserved_1y"]["price_usd_per_node_hour"]) == 30.0
    # a serving fleet on demand: nodes x 730 h x 40 (hand-computed from the option's nodes)
    nodes = _fig_value(opt["nodes"])
    assert _fig_value(od["per_month_usd"]) == pytest.approx(nodes * 730.0 * 40.0)
    # dated quote -> not stale; the undated 1-year quote is flagged
    assert od["price_age"]["as_of"] == "2026-11-20"
    assert opt["costs"]["reserved_1y"]["price_age"]["stale"] is True


def test_stale_catalog_price_is_flagged_in_the_plan():
    # p5's spot prices are all 2025-H1 snapshots: older than 12 months on any date after 2026-07
    doc = _plan("")
    spot = _cloud_option(doc, "p5.48xlarge")["costs"]["spot"]
    assert spot["price_age"]["as_of"] == "2025-H1"
    assert spot["price_age"]["stale"] is True
    assert any("stale" in n for n in spot["notes"])


def test_regions_per_cloud_keep_every_cloud():
    # one region for all clouds dropped Azure's eastus prices when region was us-east-1
    text = """\
        constraints:
          regions: {aws: us-east-1, azure: eastus}
        """
    doc = _plan(text, instances="p5.48xlarge, standard-nd96isr-h100-v5")
    az = _cloud_option(doc, "standard-nd96isr-h100-v5")["costs"]["on_demand"]
    aws = _cloud_option(doc, "p5.48xlarge")["costs"]["on_demand"]
    assert _fig_value(az["price_usd_per_node_hour"]) == 98.32
    assert _fig_value(aws["price_usd_per_node_hour"]) == 55.04
    old = _plan("constraints:\n  region: us-east-1\n", instances="standard-nd96isr-h100-v5")
    od = _cloud_option(old, "standard-nd96isr-h100-v5")["costs"]["on_demand"]
    assert _fig_value(od["price_usd_per_node_hour"]) is None  # the old single region still works


def test_unknown_override_instance_is_one_line_error(run_cli, tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(
        BASE.format(instances="p5.48xlarge")
        + "costs:\n  price_overrides:\n    p5.48xlarg: {on_demand: 40}\n"
    )
    proc = run_cli("plan", str(scen), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "costs.price_overrides" in lines[0] and "p5.48xlarg" in lines[0]
    assert "p5.48xlarge" in lines[0]  # the closest id
    assert not (tmp_path / "o").exists()


def test_unknown_region_cloud_is_one_line_error(run_cli, tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(
        BASE.format(instances="p5.48xlarge") + "constraints:\n  regions: {amazon: us-east-1}\n"
    )
    proc = run_cli("plan", str(scen), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "constraints.regions" in lines[0] and "amazon" in lines[0]
