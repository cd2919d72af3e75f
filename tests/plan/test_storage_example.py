"""examples/storage-compare.yaml end to end: 10 PB and a 405B checkpoint, cloud and on
premises, through the real CLI (issue 17 item 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ISOLATED_ENV, REPO

TIB = 2**40


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    # one real `gpuplan plan` run for the module (about 15 s); the per-test autouse
    # fixture cannot reach a module fixture, so the same variables are set here
    out = tmp_path_factory.mktemp("storage-compare")
    args = ["plan", "examples/storage-compare.yaml", "--out", str(out), "--format", "json"]
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


def storage_of(plan, prefix):
    return [o["storage"] for o in plan["options"] if o["id"].startswith(prefix)]


def tiers(storage):
    return {t["tier"]: t for t in storage["tiers"]}


def val(fig):
    return fig["value"]


def test_needs_are_10_pb_plus_three_405b_checkpoints(plan):
    s = storage_of(plan, "aws/")[0]
    ckpt = val(s["workloads"][0]["checkpoint_bytes"])
    assert ckpt == pytest.approx(405.853e9 * 14)  # the catalog's 405.853e9 parameters x 14 B
    assert val(s["capacity_bytes"]) == pytest.approx(10e15 + 3 * ckpt)
    assert val(s["checkpoint_write_bytes_per_s"]) == pytest.approx(ckpt / 300)


def test_fsx_is_sized_and_priced_with_the_quote_it_was_given(plan):
    s = storage_of(plan, "aws/")[0]
    assert s["chosen"] == "fsx-lustre-persistent2-125"  # the only priced tier
    fsx = tiers(s)["fsx-lustre-persistent2-125"]
    cap = val(s["capacity_bytes"])
    assert fsx["fits"] and fsx["sized_by"] == "capacity"
    assert val(fsx["provisioned_bytes"]) == pytest.approx(cap)
    assert val(fsx["write_bytes_per_s"]) == pytest.approx(cap / TIB * 125e6)
    assert val(fsx["checkpoint_write_s"]) < 300
    assert val(fsx["usd_per_month"]) == pytest.approx(cap / 2**30 * 0.145)
    # an unpriced tier keeps its sizing and says how to price it
    p1000 = tiers(s)["fsx-lustre-persistent2-1000"]
    assert p1000["fits"] and p1000["usd_per_month"]["value"] is None
    assert "storage_usd_per_gib_month" in p1000["usd_per_month"]["missing"]


def test_gcp_fits_and_azure_managed_lustre_is_too_small_for_10_pb(plan):
    g = storage_of(plan, "gcp/")[0]
    assert g["chosen"] is not None and tiers(g)["gcp-managed-lustre-1000"]["fits"]
    assert not tiers(g)["gcp-parallelstore"]["fits"]
    for a in storage_of(plan, "azure/"):
        assert a["chosen"] is None
        assert all("maximum" in t["reason"] for t in a["tiers"])


def test_onprem_tiers_say_what_the_catalog_lacks(plan):
    s = storage_of(plan, "onprem/")[0]
    t = tiers(s)
    assert {"wekafs", "ibm-storage-scale", "vast-data", "ddn-exascaler-ai400x2-turbo"} <= set(t)
    assert t["ddn-exascaler-ai400x2-turbo"]["gpudirect_storage"] is True
    for row in t.values():
        assert not row["fits"] and "per appliance" in row["reason"]
    assert "no catalog storage tier fits" in s["note"]
