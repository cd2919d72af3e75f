"""Values above the catalog's figures are flagged and kept out of the calibration until approved."""

from __future__ import annotations

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.results.store import parse_result
from gpuplan.service.plausibility import check_document

from .service_docs import H100_NAME, make_doc


@pytest.fixture(scope="module")
def h100():
    return get_catalog().gpu(H100_NAME)


def test_plausible_run_has_no_flag(h100):
    doc = parse_result(make_doc(seed=1, matmul_flops_per_s=0.7 * h100.peak_flops_per_s("bf16")))
    flags, notes = check_document(doc)
    assert flags == [] and notes == []


def test_matmul_above_the_dtype_peak_is_flagged_with_its_source(h100):
    peak = h100.peak_flops_per_s("bf16")
    doc = parse_result(make_doc(seed=2, matmul_flops_per_s=1.5 * peak))
    flags, _ = check_document(doc)
    # the 8192^3 point runs at 1.5x peak, the 4096^3 one at 0.9 * 1.5 = 1.35x: both flagged
    assert [(f["probe"], f["index"]) for f in flags] == [("matmul", 0), ("matmul", 1)]
    assert flags[1]["measured"] == pytest.approx(1.5 * peak)
    assert flags[1]["limit"] == pytest.approx(peak)
    assert flags[1]["gpu_id"] == h100.id and flags[1]["source"] == h100.source


def test_fp32_matmul_is_checked_against_the_tf32_peak_too(h100):
    fp32, tf32 = h100.peak_flops_per_s("fp32"), h100.peak_flops_per_s("tf32")
    between = (fp32 + tf32) / 2  # above fp32 but reachable when TF32 is allowed
    ok = parse_result(make_doc(seed=3, matmul_dtype="float32", matmul_flops_per_s=between))
    assert check_document(ok)[0] == []
    over = parse_result(make_doc(seed=4, matmul_dtype="float32", matmul_flops_per_s=1.2 * tf32))
    assert [f["probe"] for f in check_document(over)[0]] == ["matmul", "matmul"]


def test_memory_and_host_link_above_the_catalog_are_flagged(h100):
    doc = parse_result(
        make_doc(
            seed=5,
            membw_bytes_per_s=1.1 * h100.memory_bandwidth_bytes_per_s,
            pcie_bytes_per_s=1.5 * h100.host_link_bandwidth_bytes_per_s,
        )
    )
    flags, _ = check_document(doc)
    assert sorted({f["probe"] for f in flags}) == ["membw", "pcie"]
    assert {f["limit_field"] for f in flags} == {
        "memory_bandwidth_bytes_per_s",
        "host_link_bandwidth_bytes_per_s",
    }


def test_unknown_accelerator_is_accepted_with_a_note():
    doc = parse_result(
        make_doc(seed=6, accelerator="Contoso Inferentia-X 9000", matmul_flops_per_s=1e18)
    )
    flags, notes = check_document(doc)
    assert flags == []
    assert notes == ["accelerator 'Contoso Inferentia-X 9000' is not in the catalog: not checked"]


def test_flagged_run_is_out_of_the_calibration_until_an_admin_approves(api, h100):
    good = make_doc(seed=7)
    bad = make_doc(seed=8, matmul_flops_per_s=2 * h100.peak_flops_per_s("bf16"))
    assert api.upload(good).json()["status"] == "accepted"
    r = api.upload(bad)
    assert r.status_code == 201
    assert r.json()["status"] == "flagged" and len(r.json()["flags"]) == 2
    inputs = api.get("/v1/calibration/inputs").json()
    assert inputs["run_ids"] == [good["run_id"]]
    flagged = api.get("/v1/results", status="flagged").json()
    assert [x["run_id"] for x in flagged["runs"]] == [bad["run_id"]]
    assert flagged["runs"][0]["num_flags"] == 2

    # a write token may not approve; an admin token may, and then the run counts
    assert (
        api.client.post(
            f"/v1/results/{bad['run_id']}/approve", headers=api.headers("rw")
        ).status_code
        == 403
    )
    r = api.client.post(f"/v1/results/{bad['run_id']}/approve", headers=api.headers("admin"))
    assert r.status_code == 200 and r.json()["status"] == "approved"
    detail = api.get(f"/v1/results/{bad['run_id']}").json()
    assert detail["approved_by"] == api.tokens["admin"].split("_")[1]
    assert detail["flags"][0]["probe"] == "matmul"  # the flags stay on record
    after = api.get("/v1/calibration/inputs").json()
    assert after["run_ids"] == sorted([good["run_id"], bad["run_id"]])
    assert after["inputs_sha256"] != inputs["inputs_sha256"]
