"""`gpuplan validate plan`: published DGX SuperPOD figures rebuilt by the plan's builders."""

from __future__ import annotations

import copy
import json

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.errors import InputError
from gpuplan.plan.reference_designs import TOLERANCE, build_design, load_designs, validate_designs


@pytest.fixture(scope="module")
def result():
    return validate_designs(get_catalog())


def test_every_compared_figure_is_within_ten_percent(result):
    assert TOLERANCE == 0.10
    gated = [f for d in result["designs"] for f in d["figures"] if f["gated"]]
    assert len(gated) >= 20
    off = [(f["design"], f["figure"], f["error"]) for f in gated if not f["within"]]
    assert not off, off
    for f in gated:
        assert f["plan"] is not None and abs(f["error"]) <= 0.10, f
    assert result["summary"]["all_within"] is True


def test_at_least_three_reference_architectures_each_sourced(result):
    docs = {d["url"].split("/latest/")[0] for d in result["designs"]}
    assert any("h100" in u for u in docs)
    assert any("b200" in u and "gb200" not in u for u in docs)
    assert any("gb200" in u for u in docs)
    for d in result["designs"]:
        assert d["url"].startswith("https://docs.nvidia.com/dgx-superpod/")
        assert d["document"] and d["retrieved"]
        for f in d["figures"]:
            assert f["table"], (d["id"], f["figure"])
            # a figure not compared says why
            assert f["gated"] or f["note"]


def test_kinds_of_figure_covered(result):
    keys = {f["plan_key"] for d in result["designs"] for f in d["figures"] if f["gated"]}
    for k in (
        "fabric.leaf_switches",
        "fabric.spine_switches",
        "fabric.core_switches",
        "fabric.host_links",
        "fabric.switch_links",
        "fabric.leaf_down_ports",
        "power.racks",
    ):
        assert k in keys


def test_h100_one_su_by_hand():
    # 31 DGX H100 x 8 rails on QM9700 (64 x 400G, 32 down / 32 up): 8 leaves (one per rail),
    # 8 x 32 = 256 uplinks -> 4 spines (256 / 64, 4 divides 32); host links 31 x 8 = 248.
    design = next(d for d in load_designs() if d["id"] == "dgx-superpod-h100-1su")
    opt = build_design(design, get_catalog())
    f = opt.fabric
    assert (f["leaf_switches"].value, f["spine_switches"].value) == (8, 4)
    assert (f["host_links"].value, f["switch_links"].value) == (248, 256)
    assert f["switch"] == "quantum-2-qm9700"
    # the power builder ran too: DGX H100 10.2 kW, air-cooled reference rack 56 kW -> 5 per rack
    assert opt.power["nodes_per_rack"].value == 5
    assert opt.power["racks"].value == 7


def test_gb200_su_is_eight_racks_and_its_tdp_is_shown_not_compared(result):
    d = next(x for x in result["designs"] if x["id"] == "dgx-superpod-gb200-1su")
    by = {f["figure"]: f for f in d["figures"]}
    assert by["GB200 racks per scalable unit"]["plan"] == 8
    tdp = by["IT power of one SU"]
    # 8 racks x 132 kW = 1.056 MW against the RA's 1.2 MW row TDP: -12%, shown with its reason
    assert tdp["plan"] == pytest.approx(8 * 132e3)
    assert tdp["error"] == pytest.approx(-0.12)
    assert tdp["gated"] is False and "network" in tdp["note"]


def test_a_figure_off_by_more_than_ten_percent_fails_the_summary():
    designs = copy.deepcopy(load_designs())
    d = next(x for x in designs if x["id"] == "dgx-superpod-h100-4su")
    fig = next(f for f in d["figures"] if f["figure"] == "spine switches")
    fig["value"] = 14  # plan builds 16: +14.3%
    r = validate_designs(get_catalog(), designs, only="dgx-superpod-h100-4su")
    bad = [f for f in r["designs"][0]["figures"] if not f["within"]]
    assert [f["figure"] for f in bad] == ["spine switches"]
    assert bad[0]["error"] == pytest.approx(16 / 14 - 1)
    assert r["summary"]["all_within"] is False


def test_unknown_design_is_an_input_error_listing_the_ids():
    with pytest.raises(InputError, match="superpod-x") as err:
        validate_designs(get_catalog(), only="superpod-x")
    assert "dgx-superpod-h100-1su" in (err.value.hint or "")


def test_cli_json(run_cli):
    r = run_cli("validate", "plan", "--format", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)  # stdout is one JSON document and nothing else
    assert data["summary"]["all_within"] is True
    assert data["summary"]["designs"] >= 3
    assert "Traceback" not in r.stderr


def test_cli_table_prints_error_per_figure(run_cli):
    r = run_cli("validate", "plan", "--design", "dgx-superpod-b200-16su")
    assert r.returncode == 0, r.stderr
    assert "core switches" in r.stdout and "+0.0%" in r.stdout
    assert "within 10%" in r.stdout


def test_cli_unknown_design_exit_2_one_line(run_cli):
    r = run_cli("validate", "plan", "--design", "nope")
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "nope" in lines[0] and "dgx-superpod-h100-1su" in lines[0]
    assert "Traceback" not in r.stderr
    assert r.stdout == ""
