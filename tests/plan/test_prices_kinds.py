"""Purchase kinds of a cloud price (issue 17.4): reserved / Savings Plans / committed use, capacity
blocks, Blackwell rows, documented gaps. Expected costs are computed here from the catalog's own
rates and the run's own figures (nodes, run time, goodput), never typed in."""

from __future__ import annotations

import math
import textwrap

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.catalogs.schema import PriceObservation
from gpuplan.plan import cost as costmod
from gpuplan.plan.planner import build_plan
from gpuplan.plan.provenance import input_fig
from gpuplan.plan.scenario import parse_scenario

CAT = get_catalog()

TRAIN = textwrap.dedent(
    """\
    name: kinds
    workloads:
      training:
        - name: t
          model: llama3.1-8b
          tokens: 2.0e11
          deadline_days: 5
          seq_len: 4096
          global_batch_tokens: 2.0e6
    candidates:
      gpus: [{gpus}]
      instances: [{instances}]
      onprem_nodes: []
    constraints:
      regions: {{aws: us-east-1, gcp: us-central1, azure: eastus2}}
    costs:
      spot_interruptions_per_node_hour: 0.005
      node_failures_per_node_hour: 0.0005
    """
)


def _plan(instances: str, extra: str = "", gpus: str = "h100") -> dict:
    text = TRAIN.format(instances=instances, gpus=gpus) + extra  # extra: lines under costs
    return build_plan(parse_scenario(text), results_paths=[]).to_json()


def _opt(doc: dict, inst: str) -> dict:
    return next(o for o in doc["options"] if o["platform"] == inst)


def _v(fig) -> float | None:
    return fig["value"] if isinstance(fig, dict) else getattr(fig, "value", None)


def _instances(cost: dict, run: str = "t") -> float:
    """A run's cost for the instances alone: the run less the shared storage tier's share
    (cost.add_cloud_storage; tests/plan/test_cloud_storage_cost.py checks that share)."""
    storage = _v((cost.get("storage_per_run_usd") or {}).get(run)) or 0.0
    return _v(cost["per_run_usd"][run]) - storage


def _wall_hours(opt: dict, model: str) -> float:
    """The run's wall hours under ``model``: run time / goodput, from the plan's own figures."""
    t = opt["training"][0]
    good = _v(opt["costs"][model]["reliability"]["t"]["goodput"])
    return _v(t["time_to_train_s"]) / 3600.0 / good


# ---- catalog ---------------------------------------------------------------------------


def test_every_price_kind_row_is_sourced_and_dated():
    kinds_seen = set()
    for inst in CAT.instances:
        for p in inst.prices:
            kinds_seen.add(p.model)
            assert len(p.source) >= 8 and p.as_of
            if p.usd_per_hour is None:
                assert p.notes.strip(), (inst.id, p.model)
            if p.model == "capacity_block" and p.as_of.startswith("2026"):
                # the 2026 rows carry AWS's booking rules: days up to 182
                assert p.max_duration_days == 182, (inst.id, p)
    assert {"savings_plan_3y", "reserved_3y", "capacity_block", "cud_1y", "cud_3y"} <= kinds_seen


def test_blackwell_and_missing_rows_are_present_with_their_gaps():
    for name in (
        "p6-b200.48xlarge",
        "p6e-gb200",
        "a4-highgpu-8g",
        "a4x-highgpu-4g",
        "ND GB200 v6",
        "ND H200 v5",
        "a3-ultragpu-8g",
        "a3-megagpu-8g",
    ):
        CAT.instance(name)
    a4x = CAT.instance("a4x-highgpu-4g")
    assert a4x.price("on_demand") is None
    assert "no on-demand rate" in a4x.price_gap("on_demand").notes
    p6e = CAT.instance("p6e-gb200")
    block = p6e.price("capacity_block")
    # the UltraServer rate per GPU x the instance's GPUs, as the row's note says
    assert block.usd_per_hour == pytest.approx(10.582 * p6e.accelerators_per_node)
    assert p6e.price("on_demand") is None and p6e.price_gap("on_demand") is not None


def test_a_gap_needs_a_note_and_booking_rules_need_a_capacity_block():
    base = {"region": "us-east-1", "as_of": "2026-12-01", "source": "somewhere 2026"}
    with pytest.raises(ValueError, match="needs notes"):
        PriceObservation.model_validate({**base, "model": "cud_1y", "usd_per_hour": None})
    with pytest.raises(ValueError, match="capacity_block"):
        PriceObservation.model_validate(
            {**base, "model": "spot", "usd_per_hour": 1.0, "duration_increments": [[1, 14]]}
        )
    with pytest.raises(ValueError, match="multiple of step"):
        PriceObservation.model_validate(
            {
                **base,
                "model": "capacity_block",
                "usd_per_hour": 1.0,
                "duration_increments": [[1, 14], [7, 180]],
            }
        )


def test_block_days_follow_the_increments():
    inc = ((1, 14), (7, 182))
    assert [costmod.block_days(d, inc) for d in (0.01, 1.0, 1.01, 14.0, 14.01, 182.0)] == [
        1,
        1,
        2,
        14,
        21,
        182,
    ]
    assert costmod.block_days(182.01, inc) is None


# ---- plan costs ------------------------------------------------------------------------


def test_reserved_3y_costs_the_whole_term_from_catalog_values():
    doc = _plan("p5.48xlarge")
    opt = _opt(doc, "p5.48xlarge")
    nodes = _v(opt["training"][0]["nodes"])
    rate = CAT.instance("p5.48xlarge").price("reserved_3y", "us-east-1").usd_per_hour
    r3 = opt["costs"]["reserved_3y"]
    assert _wall_hours(opt, "reserved_3y") < 3 * 8760  # one term covers the run
    # hourly rate x term hours x instances
    assert _instances(r3) == pytest.approx(rate * 3 * 8760 * nodes)
    assert _v(r3["committed_spend_usd"]) == pytest.approx(rate * 3 * 8760 * _v(opt["nodes"]))
    assert r3["term"] == "3-year" and _v(r3["term_hours"]) == 26280
    assert r3["whole_term_costed"] is True
    assert any("whole term is costed" in n for n in r3["notes"])
    # on-demand for the same run is far cheaper than three committed years
    od = _v(opt["costs"]["on_demand"]["per_run_usd"]["t"])
    assert od < _v(r3["per_run_usd"]["t"])


def test_capacity_block_books_whole_days_and_the_savings_plan_its_term():
    doc = _plan("p5en.48xlarge", gpus="h200")
    opt = _opt(doc, "p5en.48xlarge")
    nodes = _v(opt["training"][0]["nodes"])
    inst = CAT.instance("p5en.48xlarge")
    cb = opt["costs"]["capacity_block"]
    rate = inst.price("capacity_block", "us-east-1").usd_per_hour
    days = _wall_hours(opt, "capacity_block") / 24.0
    booked = math.ceil(days) if days <= 14 else 7 * math.ceil(days / 7)
    assert _v(cb["capacity_block"]["booked_days"]["t"]) == booked
    assert _instances(cb) == pytest.approx(nodes * booked * 24 * rate)
    assert _v(cb["capacity_block"]["max_duration_days"]) == 182
    assert cb["capacity_block"]["booking_rule"].startswith("1-day steps up to 14 days")
    sp = opt["costs"]["savings_plan_3y"]
    sp_rate = inst.price("savings_plan_3y", "us-east-1").usd_per_hour
    assert _instances(sp) == pytest.approx(sp_rate * 26280 * nodes)
    # a 1-year Savings Plan is sold but no rate was found: missing, with the catalog's note
    sp1 = opt["costs"]["savings_plan_1y"]
    assert _v(sp1["price_usd_per_node_hour"]) is None
    assert "no 1-year Savings Plans rate" in sp1["price_usd_per_node_hour"]["missing"]


def test_a_run_longer_than_the_longest_block_has_no_block_price():
    nodes = input_fig(4, "nodes", "n", "r")
    run = input_fig(200 * 24 * 3600.0, "s", "run", "r")
    rel = costmod.reliability(
        nodes=nodes,
        rate_per_node_hour=input_fig(0.0, "1/node-hour", "r", "r"),
        checkpoint_s=input_fig(60.0, "s", "c", "r"),
        restart_s=input_fig(60.0, "s", "r", "r"),
    )
    terms = costmod.PurchaseTerms(((1, 14), (7, 182)), 64, "test")
    mc = costmod.price_model(
        "capacity_block",
        input_fig(10.0, "USD/node-hour", "p", "r"),
        trainings=[costmod.TrainingLoad("t", nodes, run)],
        servings=[],
        utilisation=input_fig(1.0, "fraction", "u", "r"),
        interruptions={"t": rel},
        terms=terms,
    )
    assert mc.per_run_usd["t"].value is None
    assert "at most 182 days" in mc.per_run_usd["t"].missing
    # 100 instances need two blocks of at most 64
    short = costmod.price_model(
        "capacity_block",
        input_fig(10.0, "USD/node-hour", "p", "r"),
        trainings=[
            costmod.TrainingLoad(
                "t", input_fig(100, "nodes", "n", "r"), input_fig(36 * 3600.0, "s", "run", "r")
            )
        ],
        servings=[],
        utilisation=input_fig(1.0, "fraction", "u", "r"),
        interruptions={"t": rel},
        terms=terms,
    )
    # 36 h books 2 days: 100 x 2 x 24 x 10
    assert short.per_run_usd["t"].value == pytest.approx(100 * 2 * 24 * 10.0)
    assert any("2 capacity blocks" in n for n in short.notes)


def test_every_kind_can_be_overridden_with_a_negotiated_rate():
    overrides = (
        "  price_overrides:\n"
        "    p5:\n"
        "      reserved_3y: {usd: 20.0, source: AWS EDP quote, as_of: 2026-11-20}\n"
        "      savings_plan_1y: 30.0\n"
        "      capacity_block: 35.0\n"
    )
    doc = _plan("p5.48xlarge", overrides)
    opt = _opt(doc, "p5.48xlarge")
    nodes = _v(opt["training"][0]["nodes"])
    r3 = opt["costs"]["reserved_3y"]
    assert _v(r3["price_usd_per_node_hour"]) == 20.0
    assert r3["price_usd_per_node_hour"]["provenance"]["kind"] == "input"
    assert _instances(r3) == pytest.approx(20.0 * 26280 * nodes)
    assert _instances(opt["costs"]["savings_plan_1y"]) == pytest.approx(30.0 * 8760 * nodes)
    cb = opt["costs"]["capacity_block"]
    booked = _v(cb["capacity_block"]["booked_days"]["t"])  # the catalog's booking rules hold
    assert _instances(cb) == pytest.approx(35.0 * booked * 24 * nodes)


def test_missing_prices_are_reported_not_crashed():
    doc = _plan("a4x-highgpu-4g", gpus="gb200")
    opt = _opt(doc, "a4x-highgpu-4g")
    od = opt["costs"]["on_demand"]["price_usd_per_node_hour"]
    assert od["value"] is None and "no on-demand rate for a4x-highgpu-4g" in od["missing"]
    assert opt["costs"]["cud_3y"]["price_usd_per_node_hour"]["value"] is None
    row = next(u for u in doc["unranked"] if u["option"] == opt["id"])
    assert "no priced purchasing model" in str(row["reason"])
    assert not any(r["option"] == opt["id"] for r in doc["purchase_options"])


def test_stale_flag_per_kind_and_purchase_options_ranked():
    doc = _plan("p5.48xlarge")
    opt = _opt(doc, "p5.48xlarge")
    # spot is a 2025-H1 snapshot (stale); the capacity block is the July 2026 table (fresh)
    assert opt["costs"]["spot"]["price_age"]["stale"] is True
    assert opt["costs"]["capacity_block"]["price_age"]["stale"] is False
    rows = [r for r in doc["purchase_options"] if r["option"] == opt["id"]]
    priced = {
        k
        for k, c in opt["costs"].items()
        if c["all_runs_usd"] is not None and _v(c["all_runs_usd"]) is not None
    }
    assert {r["purchasing_model"] for r in rows} == priced
    values = [_v(r["metric"]) for r in doc["purchase_options"]]
    assert values == sorted(values)
    assert [r["rank"] for r in doc["purchase_options"]] == list(range(1, len(values) + 1))
    by_kind = {r["purchasing_model"]: r for r in rows}
    assert _v(by_kind["reserved_3y"]["term_hours"]) == 3 * 8760
    assert _v(by_kind["capacity_block"]["max_duration_days"]) == 182
    assert by_kind["spot"]["stale_price"] is True
    # the option's ranked entry is its cheapest purchase row
    entry = next(e for e in doc["ranking"] if e["option"] == opt["id"])
    assert entry["purchasing_model"] == min(rows, key=lambda r: _v(r["metric"]))["purchasing_model"]
