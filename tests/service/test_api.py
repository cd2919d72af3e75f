"""The HTTP API against SQLite and PostgreSQL: auth, limits, validation, idempotency."""

from __future__ import annotations

import json

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.results import migrations
from gpuplan.service.tokens import revoke_token

from .service_docs import deep, make_doc


def test_upload_then_repeat_is_one_row_with_the_same_id(api):
    doc = make_doc(seed=1)
    first = api.upload(doc)
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["created"] is True and body["run_id"] == doc["run_id"]
    assert body["team"] == "vision" and body["status"] == "accepted"
    again = api.upload(doc)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == body["id"]
    assert again.json()["created"] is False
    assert again.json()["content_sha256"] == body["content_sha256"]
    assert api.count_runs() == 1


def test_same_document_with_keys_reordered_is_still_a_duplicate(api):
    doc = make_doc(seed=2)
    assert api.upload(doc).status_code == 201
    reordered = {k: doc[k] for k in reversed(list(doc))}
    r = api.upload(reordered)
    assert r.status_code == 200 and r.json()["created"] is False


def test_other_document_under_a_known_run_id_is_409_and_keeps_the_first(api):
    doc = make_doc(seed=3)
    first = api.upload(doc).json()
    other = deep(doc)
    other["probes"][0]["measurements"][0]["flops_per_s"] *= 0.5
    r = api.upload(other)
    assert r.status_code == 409, r.text
    assert doc["run_id"] in r.json()["detail"]
    assert "new run id" in r.json()["hint"]
    stored = api.get(f"/v1/results/{doc['run_id']}").json()
    assert stored["content_sha256"] == first["content_sha256"]
    assert stored["document"]["probes"][0]["measurements"][0]["flops_per_s"] == pytest.approx(
        doc["probes"][0]["measurements"][0]["flops_per_s"]
    )
    assert api.count_runs() == 1


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer nonsense",
        "Basic dXNlcjpwYXNz",
        "Bearer gpt_aaaaaaaaaa_" + "x" * 43,  # well-formed, unknown id
    ],
)
def test_bad_token_is_401(api, authorization):
    headers = {"Authorization": authorization} if authorization else {}
    r = api.client.post("/v1/results", content=json.dumps(make_doc(seed=4)), headers=headers)
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert api.client.get("/v1/results", headers=headers).status_code == 401
    assert api.count_runs() == 0


def test_right_id_wrong_secret_and_revoked_tokens_are_401(api):
    token = api.tokens["rw"]
    secret = token.split("_", 2)[2]
    forged = token[: -len(secret)] + ("A" if secret[0] != "A" else "B") + secret[1:]
    r = api.client.get("/v1/results", headers={"Authorization": f"Bearer {forged}"})
    assert r.status_code == 401
    assert api.get("/v1/results", which="rw").status_code == 200
    revoke_token(api.db, token.split("_")[1])
    assert api.get("/v1/results", which="rw").status_code == 401
    assert api.upload(make_doc(seed=5), which="rw").status_code == 401


def test_read_token_cannot_upload_and_write_token_cannot_approve(api):
    r = api.upload(make_doc(seed=6), which="ro")
    assert r.status_code == 403 and "write" in r.json()["detail"]
    doc = make_doc(seed=7)
    assert api.upload(doc).status_code == 201
    r = api.client.post(f"/v1/results/{doc['run_id']}/approve", headers=api.headers("rw"))
    assert r.status_code == 403 and "admin" in r.json()["detail"]


def test_oversized_upload_is_413_whether_declared_or_streamed(api):
    from .conftest import MAX_UPLOAD_BYTES

    big = make_doc(seed=8, samples=6000)
    body = json.dumps(big).encode()
    assert len(body) > MAX_UPLOAD_BYTES
    r = api.client.post("/v1/results", content=body, headers=api.headers())
    assert r.status_code == 413, r.text
    assert str(MAX_UPLOAD_BYTES) in r.json()["detail"]

    def chunks():  # no Content-Length: the limit must hold while streaming
        for i in range(0, len(body), 16384):
            yield body[i : i + 16384]

    r = api.client.post("/v1/results", content=chunks(), headers=api.headers())
    assert r.status_code == 413, r.text
    assert api.count_runs() == 0
    small = make_doc(seed=8, samples=5)
    assert api.upload(small).status_code == 201


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d["host"].pop("machine_id"), "host.machine_id"),
        (lambda d: d["probes"][0].__setitem__("status", "done"), "probes.0.status"),
        (
            lambda d: d["probes"][1]["measurements"][0].__setitem__("bytes_per_s", -1.0),
            "probes.1.bytes_per_s",
        ),
        (
            lambda d: d["probes"][0]["measurements"][0]["shape"].__setitem__("m", 0),
            "probes.0.shape.m",
        ),
        (lambda d: d.__setitem__("run_id", 12), "run_id"),
        (lambda d: d.__setitem__("run_id", "../../etc/passwd"), "run_id"),
        (lambda d: d.pop("started_at"), "started_at"),
    ],
)
def test_malformed_document_is_422_naming_the_field(api, mutate, field):
    doc = make_doc(seed=9)
    mutate(doc)
    r = api.upload(doc)
    assert r.status_code == 422, r.text
    body = r.json()
    locs = [".".join(str(p) for p in e["loc"]) for e in body["detail"]]
    head = field.split(".")[0]
    assert any(loc.startswith("body." + head) for loc in locs), locs
    assert field.split(".")[-1] in body["message"]
    assert api.count_runs() == 0


def test_not_json_and_not_an_object_are_422(api):
    r = api.client.post("/v1/results", content=b"{not json", headers=api.headers())
    assert r.status_code == 422 and "not valid JSON" in r.json()["message"]
    r = api.client.post("/v1/results", content=b"[1, 2]", headers=api.headers())
    assert r.status_code == 422 and "expected a JSON object" in r.json()["message"]


def test_newer_schema_is_refused_with_the_version_named(api):
    doc = make_doc(seed=10)
    doc["schema_version"] = 99
    r = api.upload(doc)
    assert r.status_code == 422
    assert "schema_version 99 is newer" in r.json()["message"]
    assert r.json()["detail"][0]["loc"] == ["body", "schema_version"]


def test_older_schema_is_upgraded_by_the_results_migration_chain(api, monkeypatch):
    """A version-0 document (here: ``host_info`` instead of ``host``) is upgraded on receipt."""

    def to_v1(doc):
        doc["host"] = doc.pop("host_info")
        return doc

    monkeypatch.setitem(migrations.UPGRADES, 1, to_v1)
    doc = make_doc(seed=11)
    doc["schema_version"] = 0
    doc["host_info"] = doc.pop("host")
    r = api.upload(doc)
    assert r.status_code == 201, r.text
    stored = api.get(f"/v1/results/{doc['run_id']}").json()
    assert stored["uploaded_schema_version"] == 0
    assert stored["document"]["schema_version"] == 1
    assert stored["document"]["host"]["cpu_count"] == 224


def test_secrets_and_host_names_are_stripped_unless_kept(api):
    env = {
        "NCCL_DEBUG": "WARN",
        "NCCL_IB_HCA": "mlx5",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
        "HF_TOKEN": "hf_abcdefghijklmnop",
        "NCCL_SECRET_KEY": "hunter2",  # allowlisted prefix, credential-looking name
        "MASTER_ADDR": "trial-node-07",
        "NCCL_COMM_ID": "trial-node-07:29500",  # allowlisted prefix, names a host
        "HOME": "/home/alice",
    }
    doc = make_doc(seed=12, env=env, machine_id="trial-node-07", hostname="trial-node-07")
    r = api.upload(doc)
    assert r.status_code == 201
    report = r.json()["sanitized"]
    assert set(report["env_removed"]) == {
        "AWS_SECRET_ACCESS_KEY",
        "HF_TOKEN",
        "NCCL_SECRET_KEY",
        "MASTER_ADDR",
        "NCCL_COMM_ID",
        "HOME",
    }
    stored = api.get(f"/v1/results/{doc['run_id']}").json()
    text = json.dumps(stored)
    for secret in (
        "wJalrXUtnFEMI",
        "hf_abcdefghijklmnop",
        "hunter2",
        "trial-node-07",
        "/home/alice",
    ):
        assert secret not in text
    assert stored["document"]["env"] == {"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "mlx5"}
    assert stored["document"]["host"]["hostname"] is None
    assert stored["machine_id"].startswith("m-") and len(stored["machine_id"]) == 18

    kept = make_doc(
        seed=13, env={**env, "NCCL_COMM_ID": "trial-node-08:29500"}, hostname="trial-node-08"
    )
    r = api.upload(kept, keep_hostname="true")
    stored = api.get(f"/v1/results/{kept['run_id']}").json()
    assert stored["document"]["host"]["hostname"] == "trial-node-08"
    assert stored["document"]["env"]["NCCL_COMM_ID"] == "trial-node-08:29500"  # kept on request
    assert "MASTER_ADDR" not in stored["document"]["env"]  # not on the probe's allowlist
    assert "AWS_SECRET_ACCESS_KEY" not in stored["document"]["env"]  # secrets never


def test_list_by_team_and_device(api):
    a = make_doc(seed=20)
    b = make_doc(
        seed=21,
        accelerator="NVIDIA A100-SXM4-80GB",
        matmul_flops_per_s=2.3e14,
        membw_bytes_per_s=1.7e12,
        pcie_bytes_per_s=2.4e10,
    )
    c = make_doc(seed=22)
    assert api.upload(a, which="rw").status_code == 201
    assert api.upload(b, which="rw").status_code == 201
    assert api.upload(c, which="nlp").status_code == 201
    everything = api.get("/v1/results").json()
    assert everything["total"] == 3
    assert [r["run_id"] for r in everything["runs"]] == [
        c["run_id"],
        b["run_id"],
        a["run_id"],
    ]  # newest first
    nlp = api.get("/v1/results", team="nlp").json()
    assert [r["run_id"] for r in nlp["runs"]] == [c["run_id"]]
    assert {r["status"] for r in everything["runs"]} == {"accepted"}
    h100_id = api.get(f"/v1/results/{a['run_id']}").json()["device_id"]
    a100_id = api.get(f"/v1/results/{b['run_id']}").json()["device_id"]
    assert h100_id == get_catalog().gpu("h100").id
    assert a100_id == get_catalog().gpu("a100 80gb").id
    h100 = api.get("/v1/results", device="H100").json()  # an alias resolves to the catalog id
    assert {r["run_id"] for r in h100["runs"]} == {a["run_id"], c["run_id"]}
    both = api.get("/v1/results", device=h100_id, team="vision").json()
    assert [r["run_id"] for r in both["runs"]] == [a["run_id"]]
    page = api.get("/v1/results", limit=1, offset=1).json()
    assert page["total"] == 3 and [r["run_id"] for r in page["runs"]] == [b["run_id"]]
    assert api.get("/v1/results", limit=0).status_code == 422
    assert api.get("/v1/results/does-not-exist").status_code == 404


def test_health_reports_database_and_limit(api):
    from .conftest import MAX_UPLOAD_BYTES

    r = api.client.get("/healthz")
    assert r.status_code == 200
    body = r.json()
    assert body["database"] == "ok" and body["schema_revision"] == "0001_initial"
    assert body["max_upload_bytes"] == MAX_UPLOAD_BYTES
    me = api.get("/v1/whoami", which="admin").json()
    assert me["team"] == "platform" and me["scopes"] == ["admin"]
