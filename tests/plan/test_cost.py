"""Cost models: Young/Daly, purchasing models, owned TCO, break-even, monotonicity."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpuplan.plan import cost as c
from gpuplan.plan.provenance import Figure, input_fig, missing_fig


def f(value, unit="", label=None, interval=None):
    fig = input_fig(value, unit, label or f"x{value}", "test")
    return Figure(fig.value, fig.unit, fig.label, fig.prov, interval=interval)


# ------------------------------------------------------------------ Young / Daly


@pytest.mark.parametrize(
    ("mtbf_min", "delta_min", "expected_min"),
    [
        # Daly 2006, captions of figures 3-5 (R = 10 min, delta = 5 min)
        (24 * 60, 5, 117),
        (6 * 60, 5, 57),
        (15, 5, 9.1),
    ],
)
def test_daly_interval_matches_the_paper(mtbf_min, delta_min, expected_min):
    tau = c.daly_interval_s(delta_min * 60.0, mtbf_min * 60.0) / 60.0
    assert tau == pytest.approx(expected_min, abs=0.5 if expected_min > 20 else 0.05)


def test_young_interval_and_daly_limits():
    # Young: sqrt(2 x 300 s x 86400 s) = 7200 s
    assert c.young_interval_s(300.0, 86400.0) == pytest.approx(7200.0)
    # Daly's estimate is below Young's (it subtracts delta) for small delta/M
    assert c.daly_interval_s(300.0, 86400.0) < c.young_interval_s(300.0, 86400.0)
    # delta >= 2M: checkpoint every M
    assert c.daly_interval_s(1000.0, 400.0) == 400.0
    with pytest.raises(ValueError):
        c.young_interval_s(1.0, 0.0)


def test_daly_wall_time():
    # T_w = M e^(R/M) (e^((tau+delta)/M) - 1) T_s / tau, by hand for M=10 h, R=0.1 h,
    # tau=1 h, delta=0.1 h, T_s=100 h: 10 e^0.01 (e^0.11 - 1) 100 = 117.4 h
    expected = 10 * math.exp(0.01) * (math.exp(0.11) - 1) * 100
    assert c.daly_wall_time_s(100.0, 1.0, 0.1, 0.1, 10.0) == pytest.approx(expected)
    assert c.daly_wall_time_s(100.0, 1.0, 0.1, 0.1, math.inf) == 100.0


def test_reliability_goodput():
    rel = c.reliability(
        nodes=f(100, "nodes"),
        rate_per_node_hour=f(0.001, "1/node-hour"),
        checkpoint_s=f(60.0, "s"),
        restart_s=f(300.0, "s"),
    )
    # M = 3600 / (0.001 x 100) = 36000 s
    assert rel.mtbf_s.value == pytest.approx(36000.0)
    tau = c.daly_interval_s(60.0, 36000.0)
    assert rel.interval_s.value == pytest.approx(tau)
    assert rel.young_interval_s.value == pytest.approx(math.sqrt(2 * 60 * 36000))
    wall = c.daly_wall_time_s(1.0, tau, 60.0, 300.0, 36000.0)
    assert rel.goodput.value == pytest.approx(1 / wall)
    assert 0.9 < rel.goodput.value < 1.0
    assert "Daly 2006" in rel.interval_s.prov.formula
    none = c.reliability(
        nodes=f(100), rate_per_node_hour=f(0.0), checkpoint_s=f(60.0), restart_s=f(300.0)
    )
    assert none.goodput.value == 1.0 and not none.interval_s.ok


# ------------------------------------------------------------------ purchasing models


def _rel(nodes, rate=0.0, delta=60.0, restart=300.0):
    return c.reliability(
        nodes=nodes, rate_per_node_hour=f(rate), checkpoint_s=f(delta), restart_s=f(restart)
    )


def test_pay_per_use_and_committed_by_hand():
    nodes = f(10, "nodes")
    run = f(100 * 3600.0, "s", interval=(90 * 3600.0, 120 * 3600.0))
    train = [c.TrainingLoad("t", nodes, run)]
    serve = [c.ServingLoad("s", f(2, "nodes"), f(1e9, "tokens/month"), f(730.0, "h"))]
    util = f(0.8, "fraction")
    od = c.price_model(
        "on_demand",
        f(50.0, "USD/node-hour"),
        trainings=train,
        servings=serve,
        utilisation=util,
        interruptions={"t": _rel(nodes)},
    )
    # run: 10 nodes x 100 h x 50 = 50,000 (interval 45,000 to 60,000)
    assert od.per_run_usd["t"].value == pytest.approx(50_000)
    assert od.per_run_usd["t"].interval == pytest.approx((45_000, 60_000))
    # month: training 10 x 730 x 0.8 x 50 = 292,000; serving 2 x 730 x 50 = 73,000
    assert od.per_month_usd.value == pytest.approx(292_000 + 73_000)
    # per million tokens: 73,000 / 1e9 x 1e6 = 73
    assert od.per_million_tokens_usd["s"].value == pytest.approx(73.0)
    r1 = c.price_model(
        "reserved_1y",
        f(35.0, "USD/node-hour"),
        trainings=train,
        servings=serve,
        utilisation=util,
        interruptions={"t": _rel(nodes)},
    )
    # a 1-year commitment: a 100 h run pays the whole term, 10 x 8,760 h x 35 = 3,066,000
    # (utilisation no longer scales it: every hour of the term is paid); month 12 x 730 x 35
    assert r1.per_run_usd["t"].value == pytest.approx(3_066_000)
    assert r1.committed_spend_usd.value == pytest.approx(12 * 8760 * 35)  # both fleets
    assert any("whole term is costed" in n for n in r1.notes)
    assert r1.per_month_usd.value == pytest.approx(12 * 730 * 35)
    spot = c.price_model(
        "spot",
        f(20.0, "USD/node-hour"),
        trainings=train,
        servings=serve,
        utilisation=util,
        interruptions={"t": _rel(nodes, rate=0.01)},
    )
    good = spot.goodput["t"].goodput.value
    assert spot.per_run_usd["t"].value == pytest.approx(10 * 100 * 20 / good)
    assert not spot.per_million_tokens_usd["s"].ok  # spot is not used for serving
    assert not spot.per_month_usd.ok


def test_missing_price_stays_missing():
    nodes = f(10)
    m = c.price_model(
        "reserved_3y",
        missing_fig("USD/node-hour", "p", "the catalog has no reserved_3y price"),
        trainings=[c.TrainingLoad("t", nodes, f(3600.0, "s"))],
        servings=[],
        utilisation=f(1.0),
        interruptions={"t": _rel(nodes)},
    )
    assert not m.available
    assert m.per_run_usd["t"].value is None
    assert "reserved_3y" in m.per_run_usd["t"].missing
    assert m.run_total().value is None


def test_discounted_price():
    p = c.discounted_price(f(100.0, "USD/node-hour"), f(0.3), "reserved_1y")
    assert p.value == pytest.approx(70.0)
    assert p.prov.kind == "derived"


def test_onprem_tco_and_break_even_by_hand():
    nodes = f(10, "nodes")
    tco = c.onprem_tco(
        nodes=nodes,
        node_price_usd=f(200_000.0, "USD"),
        network_capex_usd=f(400_000.0, "USD"),
        depreciation_years=f(4.0, "years"),
        facility_power_w=f(130_000.0, "W"),
        electricity_usd_per_kwh=f(0.1, "USD/kWh"),
        ops_usd_per_node_per_year=f(10_000.0, "USD/node-year"),
        staff_usd_per_year=f(200_000.0, "USD/year"),
    )
    # capex 2.4M -> 600k/year; energy 130 kW x 8760 h x 0.1 = 113,880; ops 100k + 200k
    assert tco.capex_usd.value == pytest.approx(2_400_000)
    assert tco.capex_per_year_usd.value == pytest.approx(600_000)
    assert tco.energy_per_year_usd.value == pytest.approx(113_880)
    assert tco.ops_per_year_usd.value == pytest.approx(300_000)
    total = 600_000 + 113_880 + 300_000
    assert tco.total_per_year_usd.value == pytest.approx(total)
    assert tco.usd_per_node_hour.value == pytest.approx(total / (10 * 8760))
    assert tco.excludes == []
    # break-even against 40 USD per node-hour on demand: total / (8760 x 10 x 40)
    be = c.break_even_utilisation(tco, nodes, f(40.0, "USD/node-hour"))
    assert be.value == pytest.approx(total / (8760 * 10 * 40))


def test_onprem_tco_says_what_it_excludes():
    tco = c.onprem_tco(
        nodes=f(10),
        node_price_usd=f(200_000.0),
        network_capex_usd=missing_fig("USD", "network capex", "no price for switch x"),
        depreciation_years=f(4.0),
        facility_power_w=f(1e5),
        electricity_usd_per_kwh=f(0.1),
        ops_usd_per_node_per_year=missing_fig("USD", "ops", "not given"),
        staff_usd_per_year=missing_fig("USD", "staff", "not given"),
    )
    assert tco.total_per_year_usd.ok
    assert any("network" in e for e in tco.excludes)
    assert any("staff" in e for e in tco.excludes)
    no_price = c.onprem_tco(
        nodes=f(10),
        node_price_usd=missing_fig("USD", "node price", "no price for node dgx"),
        network_capex_usd=f(0.0),
        depreciation_years=f(4.0),
        facility_power_w=f(1e5),
        electricity_usd_per_kwh=f(0.1),
        ops_usd_per_node_per_year=f(0.0),
        staff_usd_per_year=f(0.0),
    )
    assert not no_price.usd_per_node_hour.ok
    assert "no price for node" in no_price.usd_per_node_hour.missing


# ------------------------------------------------------------------ monotonicity


def _costs(price, run_s, nodes, util, rate, model):
    n = f(nodes, "nodes")
    rel = _rel(n, rate=rate)
    m = c.price_model(
        model,
        f(price, "USD/node-hour"),
        trainings=[c.TrainingLoad("t", n, f(run_s, "s"))],
        servings=[c.ServingLoad("s", f(max(1, nodes // 4)), f(1e9), f(730.0))],
        utilisation=f(util),
        interruptions={"t": rel},
    )
    out = {"run": m.per_run_usd["t"].value}
    if m.per_month_usd is not None and m.per_month_usd.ok:
        out["month"] = m.per_month_usd.value
    return out


@settings(max_examples=300, deadline=None)
@given(
    price=st.floats(0.5, 200.0),
    cheaper=st.floats(0.05, 1.0),
    tokens=st.floats(1e9, 1e13),
    thr_per_gpu=st.floats(100.0, 10_000.0),
    better=st.floats(1.0, 3.0),
    deadline_days=st.floats(1.0, 120.0),
    util=st.floats(0.1, 1.0),
    rate=st.sampled_from([0.0, 1e-4, 1e-3, 1e-2]),
    model=st.sampled_from(["on_demand", "reserved_1y", "spot", "onprem"]),
)
def test_cheaper_prices_or_higher_mfu_never_make_an_option_worse(
    price, cheaper, tokens, thr_per_gpu, better, deadline_days, util, rate, model
):
    """Size a deadline-bound run (whole 8-GPU nodes, as the planner does), then price it;
    a lower price, or a higher throughput per GPU (higher MFU), never costs more."""
    gpn = 8

    def size(thr):
        gpus = math.ceil(tokens / (thr * deadline_days * 86400.0) / gpn) * gpn
        nodes = gpus // gpn
        return nodes, tokens / (gpus * thr)

    nodes, run_s = size(thr_per_gpu)
    assume(nodes <= 20000)
    base = _costs(price, run_s, nodes, util, rate, model)
    lower = _costs(price * cheaper, run_s, nodes, util, rate, model)
    n2, r2 = size(thr_per_gpu * better)
    faster = _costs(price, r2, n2, util, rate, model)
    for key in base:
        assert lower[key] <= base[key] * (1 + 1e-9)
        assert faster[key] <= base[key] * (1 + 1e-9)
