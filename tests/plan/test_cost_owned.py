"""Owned-hardware and fleet-size cost figures, hand-computed (issue 17 item 4)."""

from __future__ import annotations

import pytest

from gpuplan.plan import cost as costmod
from gpuplan.plan.provenance import input_fig
from gpuplan.plan.ranking import METRIC_LABEL, metric_label


def _f(v, unit, label="x"):
    return input_fig(v, unit, label, f"test {label}")


def _rel(name="t"):
    good = _f(1.0, "fraction", "goodput")
    return {
        name: costmod.Reliability(
            _f(0.0, "1/node-hour"), _f(1e9, "s"), _f(1e9, "s"), _f(1e9, "s"), good
        )
    }


def test_extra_fleet_nodes_are_paid_every_hour_of_the_month_but_not_by_runs():
    price = _f(10.0, "USD/node-hour", "price")
    train = costmod.TrainingLoad("t", _f(4, "nodes", "train nodes"), _f(36_000.0, "s", "run"))
    util = _f(0.5, "fraction", "utilisation")
    for model, month_train in (("on_demand", 4 * 730 * 0.5 * 10), ("reserved_1y", 4 * 730 * 10)):
        base = costmod.price_model(
            model, price, trainings=[train], servings=[], utilisation=util, interruptions=_rel()
        )
        grown = costmod.price_model(
            model,
            price,
            trainings=[train],
            servings=[],
            utilisation=util,
            interruptions=_rel(),
            fleet_nodes=_f(7, "nodes", "fleet nodes"),
        )
        assert base.per_month_usd.value == pytest.approx(month_train)
        # 3 nodes kept for the teams: 3 x 730 h x $10 whatever the model
        assert grown.per_month_usd.value == pytest.approx(month_train + 3 * 730 * 10)
        assert grown.run_total().value == pytest.approx(base.run_total().value)
    same = costmod.price_model(
        "on_demand",
        price,
        trainings=[train],
        servings=[],
        utilisation=util,
        interruptions=_rel(),
        fleet_nodes=_f(4, "nodes", "fleet nodes"),
    )
    assert same.per_month_usd.value == pytest.approx(4 * 730 * 0.5 * 10)


def test_break_even_against_any_price_and_per_owned_node_price():
    owned = _f(876_000.0, "USD/year", "owned per year")
    nodes = _f(10, "nodes", "nodes")
    # an 8-GPU instance at $80/h is $40/h per 4-GPU owned node
    p = costmod.per_owned_node_price(
        _f(80.0, "USD/node-hour", "rented"), _f(8, "GPUs", "a"), _f(4, "GPUs", "b"), "equiv"
    )
    assert p.value == pytest.approx(40.0)
    be = costmod.break_even_against(owned, nodes, p)
    # 876,000 / (8,760 h x 10 nodes x $40) = 0.25
    assert be.value == pytest.approx(0.25)
    assert be.unit == "fraction"
    assert "owned per year" in be.prov.inputs
    missing = costmod.break_even_against(owned, nodes, _f(None, "USD/node-hour", "none"))
    assert missing.value is None and missing.missing


def test_owned_metric_is_labelled_a_share_of_a_cluster_bought_whole():
    for metric in ("run", "month", "mtok"):
        assert metric_label(metric, "on_demand") == METRIC_LABEL[metric]
    assert "bought whole" in metric_label("run", "onprem")
    assert "share" in metric_label("mtok", "onprem")
