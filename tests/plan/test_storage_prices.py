"""Storage prices (issue 17, items 2 and 4): every tier says where its price comes from or why
it has none ("price not published" with the vendor's reason), an unpriced tier stays out of
the cost, a scenario's negotiated rate prices it, and the owned-vs-cloud break-even carries
the storage on both sides or on neither. Expected values are computed here from the plan's
own input figures and the formulas' definitions, not copied from a run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuplan.catalogs import load_catalog, validate_catalog
from gpuplan.catalogs.loader import default_data_dir
from gpuplan.plan import cost as costmod
from gpuplan.plan import storage as st
from gpuplan.plan.provenance import figure_from_json, input_fig, missing_fig
from gpuplan.report.view import break_even_rows, fmt
from tests.conftest import REPO
from tests.plan.test_storage_example import _run_plan

CAT = load_catalog()
CLOUDS = ("aws", "gcp", "azure")
HOURS_PER_YEAR = 8760.0


def _f(v, unit="USD/year", label="x"):
    return input_fig(v, unit, label, "test")


# ------------------------------------------------------------------ the catalog


def test_every_unpriced_on_prem_tier_says_why_no_price_is_published():
    on_prem = [r for r in CAT.storage if r.sold_in_appliances]
    assert {r.id for r in on_prem} >= {
        "hpe-clusterstor-e1000-ssu-f",
        "wekafs",
        "ibm-storage-scale",
        "vast-data",
        "ddn-exascaler-ai400x2-turbo",
    }
    for r in on_prem:
        priced = r.price_usd_per_appliance is not None or r.price_usd_per_tib is not None
        # a tier is either priced (with a date) or says why no price is published
        assert priced != bool(r.price_not_published), r.id
        if not priced:
            assert "quote" in r.price_not_published or "publishes no" in r.price_not_published


def test_a_price_beside_price_not_published_is_a_named_problem(tmp_path: Path):
    cat = tmp_path / "catalog"
    shutil.copytree(default_data_dir(), cat)
    path = cat / "storage.yaml"
    text = path.read_text()
    anchor = "    rack_units_per_appliance: 2\n"
    assert anchor in text
    path.write_text(
        text.replace(
            anchor, anchor + "    price_usd_per_appliance: 1000\n    price_as_of: 2026-12\n", 1
        )
    )
    probs = [p for p in validate_catalog(cat) if p.file == "storage.yaml"]
    assert any("price_not_published says there is no price" in p.message for p in probs)


def test_missing_price_reason_names_the_vendor_reason_and_the_override():
    why = st.missing_price_reason("wekafs", "WEKA sells by quote", cloud=False)
    assert why.startswith("price not published: WEKA sells by quote")
    assert why.endswith("costs.storage_usd_per_gib_month.wekafs")
    cloud = st.missing_price_reason("gcp-managed-lustre-1000", None, cloud=True)
    assert cloud.startswith("price not in the catalog")
    assert "costs.storage_usd_per_gib_month.gcp-managed-lustre-1000" in cloud


def test_a_missing_price_prints_its_short_reason_not_missing():
    fig = missing_fig("USD/month", "p", st.missing_price_reason("x", "sold by quote", False))
    assert fmt(fig.to_json()) == "price not published"
    fig = missing_fig("USD/month", "p", st.missing_price_reason("x", None, True))
    assert fmt(fig.to_json()) == "price not in catalog"
    assert fmt(missing_fig("B", "p", "the catalog has no capacity").to_json()) == "missing"


# ------------------------------------------------------------------ the break-even formulas


def test_break_even_with_cloud_storage_by_hand():
    owned, nodes, price = _f(876_000.0), _f(10, "nodes"), _f(20.0, "USD/node-hour")
    # renting at u: u x (8,760 x 10 x 20 + S), the tier held while the fleet runs;
    # owning: 876,000 a year (its storage in it)
    for s_year in (0.0, 219_000.0, 1_752_000.0):
        be = costmod.break_even_against(owned, nodes, price, _f(s_year))
        u = be.value
        assert u * (HOURS_PER_YEAR * 10 * 20 + s_year) == pytest.approx(876_000.0)
        assert "storage on both sides" in be.label
    # more cloud storage, a lower break-even: renting got dearer
    lo = costmod.break_even_against(owned, nodes, price, _f(1e6)).value
    hi = costmod.break_even_against(owned, nodes, price, _f(1e5)).value
    assert lo < hi < 0.5
    plain = costmod.break_even_against(owned, nodes, price, None, "why not")
    assert plain.value == pytest.approx(0.5)
    assert "left out of both sides (why not)" in plain.prov.formula


def test_storage_like_for_like_never_counts_one_side_only():
    owned, own_st, month = _f(1000.0), _f(200.0), _f(10.0, "USD/month")
    o, s, why = costmod.storage_like_for_like(owned, own_st, month, "aws/x")
    assert o.value == 1000.0 and s is not None and s.value == 120.0 and why is None
    # the cloud tier unpriced: the owned storage comes out of the owned cost
    o, s, why = costmod.storage_like_for_like(owned, own_st, None, "aws/x")
    assert o.value == 800.0 and s is None and "aws/x storage tier has no price" in why
    unpriced = missing_fig("USD/month", "m", "no price")
    o, s, why = costmod.storage_like_for_like(owned, own_st, unpriced, "aws/x")
    assert o.value == 800.0 and s is None
    # the owned storage unpriced: the cloud storage is not counted
    o, s, why = costmod.storage_like_for_like(owned, None, month, "aws/x")
    assert o.value == 1000.0 and s is None and "owned storage has no price" in why
    o, s, why = costmod.storage_like_for_like(owned, None, None, "aws/x")
    assert o.value == 1000.0 and s is None and why.startswith("neither")


def test_a_purchasing_model_without_a_fleet_price_gets_no_month_from_storage():
    mc = costmod.ModelCost(
        model="reserved_1y",
        price_usd_per_node_hour=missing_fig("USD/node-hour", "p", "no price"),
    )
    assert mc.per_month_usd is None
    costmod.add_cloud_storage(mc, _f(1000.0, "USD/month"), tier="fsx", trainings=[])
    # the storage is a line of its own, but storage alone is not the model's month
    assert mc.storage_usd_per_month is not None and mc.storage_usd_per_month.value == 1000.0
    assert mc.per_month_usd is None


# ------------------------------------------------------------------ the example, end to end


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return _run_plan(tmp_path_factory.mktemp("sc-prices"), "examples/storage-compare.yaml")


NEGOTIATED = """  storage_usd_per_gib_month:
    wekafs: {usd: 0.02, source: "test: a negotiated rate", as_of: "2026-12"}
"""


@pytest.fixture(scope="module")
def negotiated(tmp_path_factory):
    d = tmp_path_factory.mktemp("sc-negotiated")
    text = (REPO / "examples/storage-compare.yaml").read_text()
    anchor = "  restart_s: 600\n"
    assert anchor in text
    scen = d / "s.yaml"
    scen.write_text(text.replace(anchor, anchor + NEGOTIATED, 1))
    return _run_plan(d / "out", scen)


def _onprem(plan):
    return next(o for o in plan["options"] if o["kind"] == "onprem")


def _tiers(o):
    return {t["tier"]: t for t in o["storage"]["tiers"]}


def test_example_lists_lustre_weka_gpfs_on_prem_and_lustre_in_every_cloud(plain):
    on_prem = _tiers(_onprem(plain))
    for tier in ("hpe-clusterstor-e1000-ssu-f", "wekafs", "ibm-storage-scale"):
        t = on_prem[tier]
        assert t["price_status"].startswith("price not published: "), tier
        assert t["usd_per_month"]["value"] is None
        if t["sized"]:
            # sized but unpriced: the month says why there is no price
            assert t["usd_per_month"]["missing"] == t["price_status"]
    # the sized ones are sized (appliances from their datasheet rows), GPFS names what it lacks
    assert on_prem["hpe-clusterstor-e1000-ssu-f"]["sized"] and on_prem["wekafs"]["sized"]
    assert not on_prem["ibm-storage-scale"]["sized"]
    assert "capacity_bytes_per_appliance" in on_prem["ibm-storage-scale"]["missing"]
    lustre_by_cloud = {
        "aws": "fsx-lustre-persistent2-125",
        "gcp": "gcp-managed-lustre-1000",
        "azure": "azure-managed-lustre-500",
    }
    for o in plain["options"]:
        if o["kind"] != "cloud":
            continue
        t = _tiers(o)[lustre_by_cloud[o["cloud"]]]
        assert t["provisioned_bytes"]["value"] >= o["storage"]["capacity_bytes"]["value"]
        if t["usd_per_month"]["value"] is not None:
            assert t["price_status"].startswith("catalog price_usd_per_tib_month, as of")
        else:
            assert t["price_status"].startswith("price not in the catalog")


def test_unpriced_owned_storage_is_excluded_and_the_break_even_leaves_storage_out(plain):
    o = _onprem(plain)
    chosen = o["storage"]["chosen"]
    tco = o["onprem_tco"]
    assert "storage_in_total_per_year_usd" not in tco
    assert any(
        e.startswith("shared storage (price not published") and chosen in e for e in tco["excludes"]
    )
    be = o["break_even_utilisation"]
    assert "left out of both sides" in be["provenance"]["formula"]


def test_a_negotiated_rate_prices_the_owned_storage_and_joins_the_break_even(negotiated):
    o = _onprem(negotiated)
    weka = _tiers(o)["wekafs"]
    assert weka["price_status"].startswith("scenario quote")
    assert weka["usd_per_month"]["value"] == pytest.approx(
        weka["provisioned_bytes"]["value"] / 2**30 * 0.02
    )
    tco = o["onprem_tco"]
    if o["storage"]["chosen"] == "wekafs":
        assert tco["storage_in_total_per_year_usd"]["value"] == pytest.approx(
            12 * weka["usd_per_month"]["value"]
        )
    own_st = tco["storage_in_total_per_year_usd"]["value"]
    total = tco["total_per_year_usd"]["value"]
    nodes = o["nodes"]["value"]
    # the plan's break-even against the cheapest on-demand cloud of the same GPU
    cloud = next(c for c in negotiated["options"] if c["id"] == o["break_even_against"])
    od = cloud["costs"]["on_demand"]
    price = (
        od["price_usd_per_node_hour"]["value"]
        / cloud["gpus_per_node"]["value"]
        * o["gpus_per_node"]["value"]
    )
    month = od.get("storage_usd_per_month")
    be = o["break_even_utilisation"]["value"]
    if month is not None and month["value"] is not None:
        # storage on both sides: u* x (8,760 x nodes x price + cloud storage) = owned cost
        lhs = be * (HOURS_PER_YEAR * nodes * price + 12 * month["value"])
        assert lhs == pytest.approx(total)
    else:
        # the cloud tier unpriced: the owned storage is taken out of the owned cost
        assert be * HOURS_PER_YEAR * nodes * price == pytest.approx(total - own_st)
    # the report's break-even table says the same for every priced cloud purchasing model
    rows = break_even_rows(negotiated)
    assert rows
    for r in rows:
        c = next(x for x in negotiated["options"] if x["id"] == r["cloud"])
        m = c["costs"][r["purchasing_model"]].get("storage_usd_per_month")
        p = figure_from_json(r["price_usd_per_node_hour"]).value
        u = r["break_even_utilisation"]["value"]
        if m is not None and m["value"] is not None:
            assert u * (HOURS_PER_YEAR * nodes * p + 12 * m["value"]) == pytest.approx(total)
        else:
            assert u * HOURS_PER_YEAR * nodes * p == pytest.approx(total - own_st)
