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


# --- the pooled runs of the same device ---------------------------------------------------------


def _reference_h100() -> dict:
    """The shipped reference H100 SXM run (built from the package's table at test time)."""
    from gpuplan.calibration.fit import reference_documents

    (doc,) = [
        d
        for d in reference_documents()
        if "nvidia-h100-sxm" in d.host.machine_id and any(p.probe == "matmul" for p in d.probes)
    ]
    return doc.model_dump(mode="json")


def _as_upload(ref: dict, i: int, *, matmul_scale: float = 1.0) -> dict:
    """The reference run as team ``i``'s own upload: another machine, a new run id."""
    import copy
    import uuid

    doc = copy.deepcopy(ref)
    doc["run_id"] = str(uuid.UUID(int=7_000 + i, version=4))
    doc["host"]["machine_id"] = f"team-node-{i}"
    doc["source"] = None
    for probe in doc["probes"]:
        if probe["probe"] == "matmul":
            for m in probe["measurements"]:
                m["flops_per_s"] *= matmul_scale
    return doc


def test_pool_band_flags_what_the_catalog_cannot():
    from gpuplan.service.plausibility import POOL_MIN_RUNS, band, pool_flags, run_values

    ref = parse_result(_as_upload(_reference_h100(), 0))
    pooled: dict = {}
    for scale in (1.0, 0.97, 1.02, 0.95, 1.01):
        for key, (value, _, _) in run_values(ref).items():
            pooled.setdefault(key, []).append(value * scale)
    # 20x slower: far above the catalog floor (1e-3 of the peak), far outside the pool
    slow = parse_result(_as_upload(_reference_h100(), 1, matmul_scale=0.05))
    assert check_document(slow)[0] == []
    flags = pool_flags(slow, "h100-sxm5-80gb", pooled)
    assert {f["probe"] for f in flags} == {"matmul"} and len(flags) == 2  # bf16 and fp8
    assert all(f["kind"] == "pool" and f["pool_runs"] == 5 for f in flags)
    assert all(f["limit_field"] == "pool_low" and f["measured"] < f["limit"] for f in flags)
    # within a factor of the pool: accepted (power caps and clocks differ between nodes)
    assert (
        pool_flags(
            parse_result(_as_upload(_reference_h100(), 2, matmul_scale=0.6)),
            "h100-sxm5-80gb",
            pooled,
        )
        == []
    )
    # too few runs: no band
    assert band([1.0] * (POOL_MIN_RUNS - 1)) is None


def test_poisoned_upload_is_pending_and_the_pooled_calibration_does_not_move(sqlite_url, make_api):
    """Issue 13: the reference H100 run with every matmul value x 0.001, from a write token."""
    ref = _reference_h100()
    key = "matmul_bf16_flops_per_s"
    with make_api(sqlite_url, max_upload_bytes=2**20) as api:
        for i in range(4):
            r = api.upload(_as_upload(ref, i))
            assert r.status_code == 201 and r.json()["status"] == "accepted", r.text

        def pooled_h100() -> float:
            r = api.client.post("/v1/calibration/refresh", headers=api.headers("rw"))
            assert r.status_code == 200, r.text
            art = api.get("/v1/calibration/artifact").json()
            return art["devices"]["h100-sxm5-80gb"][key]["value"]

        before = pooled_h100()
        poisoned = _as_upload(ref, 99, matmul_scale=0.001)
        r = api.upload(poisoned, which="nlp")
        assert r.status_code == 201, r.text
        body = r.json()
        assert body["status"] == "flagged"  # pending: out of the calibration until approved
        pool = [f for f in body["flags"] if f["kind"] == "pool"]
        assert {f["probe"] for f in pool} == {"matmul"} and pool[0]["pool_runs"] >= 4
        inputs = api.get("/v1/calibration/inputs").json()
        assert poisoned["run_id"] not in inputs["run_ids"] and inputs["total"] == 4
        after = pooled_h100()
        assert after == pytest.approx(before, rel=0.01)
        # an admin can still let it in
        r = api.client.post(
            f"/v1/results/{poisoned['run_id']}/approve", headers=api.headers("admin")
        )
        assert r.status_code == 200 and r.json()["status"] == "approved"
        assert api.get("/v1/calibration/inputs").json()["total"] == 5


def test_first_upload_of_a_device_cannot_replace_the_reference(sqlite_url, make_api):
    """One team's run at 1/100 of the reference, the only upload for the device: above the
    catalog floor, so only the pool (the shipped reference run) catches it. Unchecked, the
    local run would replace the published one and the pooled value would fall 100x."""
    ref = _reference_h100()
    key = "matmul_bf16_flops_per_s"
    with make_api(sqlite_url, max_upload_bytes=2**20) as api:

        def pooled_h100() -> float:
            r = api.client.post("/v1/calibration/refresh", headers=api.headers("rw"))
            assert r.status_code == 200, r.text
            return api.get("/v1/calibration/artifact").json()["devices"]["h100-sxm5-80gb"][key][
                "value"
            ]

        before = pooled_h100()
        slow = _as_upload(ref, 1, matmul_scale=0.01)
        assert check_document(parse_result(slow))[0] == []  # the catalog alone accepts it
        r = api.upload(slow)
        assert r.status_code == 201 and r.json()["status"] == "flagged", r.text
        assert {f["kind"] for f in r.json()["flags"]} == {"pool"}
        assert pooled_h100() == pytest.approx(before, rel=0.01)
        # the check is what holds the value: once an admin lets the run in, it moves
        approve = f"/v1/results/{slow['run_id']}/approve"
        assert api.client.post(approve, headers=api.headers("admin")).status_code == 200
        assert pooled_h100() < 0.1 * before
