"""examples/storage-compare.yaml end to end: 10 PB and a 405B checkpoint, cloud and on
premises, through the real CLI (issue 17 item 3). Expected figures come from the catalog
rows and the scenario, not from a copy of the plan's output."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from gpuplan.catalogs.catalog import load_catalog
from tests.conftest import ISOLATED_ENV, REPO

TIB = 2**40


CAT = load_catalog()
GIB = 2**30


def _run_plan(out, scenario):
    # one real `gpuplan plan` run per module fixture (about 15 s); the per-test autouse
    # fixture cannot reach a module fixture, so the same variables are set here
    args = ["plan", str(scenario), "--out", str(out), "--format", "json"]
    res = subprocess.run(
        [sys.executable, "-m", "gpuplan", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={
            **os.environ,
            "PYTHONPATH": str(REPO),
            **{name: str(out / sub) for name, sub in ISOLATED_ENV.items()},
        },
    )
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return _run_plan(tmp_path_factory.mktemp("storage-compare"), "examples/storage-compare.yaml")


QUOTES = """  storage_usd_per_gib_month:
    fsx-lustre-persistent2-125: {usd: 0.11, source: "test quote", as_of: "2026-12"}
    hpe-clusterstor-e1000-ssu-f: {usd: 0.03, source: "test quote", as_of: "2026-12"}
"""


@pytest.fixture(scope="module")
def quoted(tmp_path_factory):
    # the example with quotes: one overriding the catalog's FSx price, one pricing Lustre
    d = tmp_path_factory.mktemp("storage-compare-quoted")
    text = (REPO / "examples/storage-compare.yaml").read_text()
    anchor = "  restart_s: 600\n"
    assert anchor in text
    scen = d / "s.yaml"
    scen.write_text(text.replace(anchor, anchor + QUOTES, 1))
    return _run_plan(d / "out", scen)


def storage_of(plan, prefix):
    return [o["storage"] for o in plan["options"] if o["id"].startswith(prefix)]


def option(plan, prefix):
    return next(o for o in plan["options"] if o["id"].startswith(prefix))


def tiers(storage):
    return {t["tier"]: t for t in storage["tiers"]}


def val(fig):
    return fig["value"]


def test_needs_are_10_pb_plus_three_405b_checkpoints(plan):
    s = storage_of(plan, "aws/")[0]
    ckpt = val(s["workloads"][0]["checkpoint_bytes"])
    params = CAT.model("llama3.1-405b").params_total()
    assert ckpt == pytest.approx(params * 14)
    assert val(s["capacity_bytes"]) == pytest.approx(10e15 + 3 * ckpt)
    assert val(s["checkpoint_write_bytes_per_s"]) == pytest.approx(ckpt / 300)
    assert val(s["checkpoint_write_budget_s"]) == 300


def test_fsx_is_sized_and_priced_from_the_catalog(plan):
    s = storage_of(plan, "aws/")[0]
    row = CAT.storage_tier("fsx-lustre-persistent2-125")
    assert s["chosen"] == row.id  # the only priced AWS tier
    fsx = tiers(s)[row.id]
    cap = val(s["capacity_bytes"])
    assert fsx["fits"] and fsx["sized"] and fsx["sized_by"] == "capacity"
    assert val(fsx["provisioned_bytes"]) == pytest.approx(cap)
    assert val(fsx["write_bytes_per_s"]) == pytest.approx(cap / TIB * row.read_bytes_per_s_per_tib)
    assert val(fsx["checkpoint_write_s"]) < val(fsx["checkpoint_write_budget_s"])
    # price per TiB-month from the catalog, with its date and source carried
    assert val(fsx["usd_per_month"]) == pytest.approx(cap / TIB * row.price_usd_per_tib_month)
    assert val(s["usd_per_month"]) == val(fsx["usd_per_month"])
    assert s["chosen_summary"].endswith("/month")
    # an unpriced tier keeps its sizing and says how to price it
    p1000 = tiers(s)["fsx-lustre-persistent2-1000"]
    assert p1000["fits"] and p1000["usd_per_month"]["value"] is None
    assert "storage_usd_per_gib_month" in p1000["usd_per_month"]["missing"]


def test_gcp_managed_lustre_is_sized_and_names_its_missing_price(plan):
    g = storage_of(plan, "gcp/")[0]
    t = tiers(g)
    assert g["chosen"] is not None and t[g["chosen"]]["fits"]
    for tid in ("gcp-managed-lustre-1000", "gcp-managed-lustre-125"):
        assert t[tid]["fits"] and val(t[tid]["checkpoint_write_s"]) < 300
        assert "costs.storage_usd_per_gib_month." + tid in t[tid]["usd_per_month"]["missing"]
    assert not t["gcp-parallelstore"]["fits"] and "maximum" in t["gcp-parallelstore"]["reason"]
    assert not t["gcp-filestore-zonal"]["fits"]


def test_azure_managed_lustre_is_too_small_for_10_pb(plan):
    for a in storage_of(plan, "azure/"):
        assert a["chosen"] is None
        for tier in a["tiers"]:
            row = CAT.storage_tier(tier["tier"])
            assert "maximum" in tier["reason"]
            assert val(a["capacity_bytes"]) > row.capacity_max_bytes
            # the reason says how many of the tier's largest file systems would hold the data
            need = val(tier["provisioned_bytes"])
            assert f"({math.ceil(need / row.capacity_max_bytes)} file systems" in tier["reason"]


def test_on_prem_lustre_is_sized_in_appliances_from_the_catalog(plan):
    s = storage_of(plan, "onprem/")[0]
    row = CAT.storage_tier("hpe-clusterstor-e1000-ssu-f")
    lustre = tiers(s)[row.id]
    cap, read = val(s["capacity_bytes"]), val(s["read_bytes_per_s"])
    write = val(s["checkpoint_write_bytes_per_s"])
    n = max(
        math.ceil(cap / row.capacity_bytes_per_appliance),
        math.ceil(read / row.read_bytes_per_s_per_appliance),
        math.ceil(write / row.write_bytes_per_s_per_appliance),
    )
    assert lustre["fits"] and lustre["sized"] and val(lustre["appliances"]) == n
    assert val(lustre["rack_units"]) == n * row.rack_units_per_appliance
    ckpt = val(s["workloads"][0]["checkpoint_bytes"])
    assert val(lustre["checkpoint_write_s"]) == pytest.approx(
        ckpt / (n * row.write_bytes_per_s_per_appliance)
    )
    # no on-prem tier has a price: the smallest fitting one is chosen, in one summary line
    fitting = [x for x in s["tiers"] if x["fits"]]
    smallest = min(fitting, key=lambda x: val(x["provisioned_bytes"]))
    assert s["chosen"] == smallest["tier"]
    assert s["chosen_summary"].startswith(
        f"{smallest['tier']}, {int(val(smallest['appliances']))} appliances"
    )
    # no published price: named, and the owned TCO lists the storage as excluded
    assert "costs.storage_usd_per_gib_month" in lustre["usd_per_month"]["missing"]
    excludes = option(plan, "onprem/")["onprem_tco"]["excludes"]
    assert any(e.startswith("shared storage") for e in excludes)


def test_on_prem_tiers_without_figures_are_listed_first_naming_the_field(plan):
    s = storage_of(plan, "onprem/")[0]
    t = tiers(s)
    assert {"wekafs", "ibm-storage-scale", "vast-data", "ddn-exascaler-ai400x2-turbo"} <= set(t)
    assert t["ddn-exascaler-ai400x2-turbo"]["gpudirect_storage"] is True
    assert next(iter(s)) == "not_sized"  # first key of the storage record
    lines = s["not_sized"]
    assert len(lines) == sum(1 for row in t.values() if not row["sized"])
    for tid in ("wekafs", "ibm-storage-scale", "vast-data", "ddn-exascaler-ai400x2-turbo"):
        row = CAT.storage_tier(tid)
        absent = [
            f
            for f in (
                "read_bytes_per_s_per_appliance",
                "write_bytes_per_s_per_appliance",
                "capacity_bytes_per_appliance",
            )
            if getattr(row, f) is None
            # one throughput figure serves writes too (fit_appliances)
            and not (
                f == "write_bytes_per_s_per_appliance"
                and row.read_bytes_per_s_per_appliance is not None
            )
        ]
        named = [ln for ln in lines if ln.startswith(tid + " not sized")]
        if not absent:  # the catalog has every figure: the tier is sized, not listed
            assert not named and t[tid]["sized"] and t[tid]["missing"] == []
            continue
        (line,) = named
        assert all(f in line for f in absent) and "\n" not in line
        assert not t[tid]["fits"] and sorted(t[tid]["missing"]) == sorted(absent)


def test_weka_is_sized_on_premises_with_its_power_in_the_it_power(plan):
    o = option(plan, "onprem/")
    s = o["storage"]
    row = CAT.storage_tier("wekafs")
    weka = tiers(s)["wekafs"]
    n = max(
        row.min_appliances,
        math.ceil(val(s["capacity_bytes"]) / row.capacity_bytes_per_appliance),
        math.ceil(val(s["read_bytes_per_s"]) / row.read_bytes_per_s_per_appliance),
        math.ceil(val(s["checkpoint_write_bytes_per_s"]) / row.write_bytes_per_s_per_appliance),
    )
    assert weka["sized"] and val(weka["appliances"]) == n
    assert val(weka["power_w"]) == n * row.power_w_per_appliance
    assert val(weka["checkpoint_write_s"]) <= 300
    chosen = tiers(s)[s["chosen"]]
    if chosen.get("power_w") and chosen["power_w"]["value"] is not None:
        # the chosen tier's power is its own term of the IT power, not folded into the nodes
        assert "storage power" in o["power"]["it_power_w"]["provenance"]["formula"]


def test_a_quote_overrides_the_catalog_price_and_prices_on_prem_storage(quoted):
    s = storage_of(quoted, "aws/")[0]
    fsx = tiers(s)["fsx-lustre-persistent2-125"]
    assert val(fsx["usd_per_month"]) == pytest.approx(val(fsx["provisioned_bytes"]) / GIB * 0.11)
    o = option(quoted, "onprem/")
    lustre = tiers(o["storage"])["hpe-clusterstor-e1000-ssu-f"]
    monthly = val(lustre["provisioned_bytes"]) / GIB * 0.03
    assert val(lustre["usd_per_month"]) == pytest.approx(monthly)
    tco = o["onprem_tco"]
    # a per-GiB-month quote is paid yearly beside the fleet, not bought: no storage capex
    assert val(tco["storage_per_year_usd"]) == pytest.approx(12 * monthly)
    assert "storage" not in tco["capex_usd"]["provenance"]["formula"]
    assert not any(e.startswith("shared storage") for e in tco["excludes"])
