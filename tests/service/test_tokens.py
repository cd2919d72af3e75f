"""Tokens: shown once, stored salted and hashed, scoped, revocable, never logged."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from sqlalchemy import select

from gpuplan.errors import InputError, NotFoundError
from gpuplan.service.db import Database, TokenRow
from gpuplan.service.testing import LiveServer
from gpuplan.service.tokens import (
    create_token,
    hash_secret,
    list_tokens,
    parse_scopes,
    redact,
    revoke_token,
    verify_token,
)

from .service_docs import make_doc


@pytest.fixture
def db(sqlite_url):
    d = Database(sqlite_url)
    d.migrate()
    yield d
    d.dispose()


def test_only_a_salted_hash_is_stored(db):
    t1, info1 = create_token(db, team="vision")
    t2, _ = create_token(db, team="vision")
    secret1 = t1.split("_", 2)[2]
    with db.read() as s:
        rows = list(s.scalars(select(TokenRow)))
    dump = json.dumps(
        [{c.name: str(getattr(r, c.name)) for c in TokenRow.__table__.columns} for r in rows]
    )
    assert secret1 not in dump and t1 not in dump
    assert rows[0].salt != rows[1].salt  # per-token salt
    assert rows[0].secret_sha256 == hash_secret(secret1, rows[0].salt)
    assert len(rows[0].secret_sha256) == 64
    assert verify_token(db, t1).team == "vision"
    assert verify_token(db, t2).token_id == t2.split("_")[1] != info1.token_id


def test_pepper_is_part_of_the_hash(db, monkeypatch):
    token, _ = create_token(db, team="vision")
    monkeypatch.setenv("GPUPLAN_TOKEN_PEPPER", "a-server-side-secret")
    assert verify_token(db, token) is None  # created without the pepper
    peppered, _ = create_token(db, team="vision")
    assert verify_token(db, peppered) is not None
    monkeypatch.delenv("GPUPLAN_TOKEN_PEPPER")
    assert verify_token(db, peppered) is None


def test_scopes_and_admin_implies_the_others(db):
    assert parse_scopes("write, read") == ("read", "write")
    with pytest.raises(InputError, match=r"unknown scope.*delete"):
        parse_scopes("read,delete")
    with pytest.raises(InputError, match="invalid team name"):
        create_token(db, team="no spaces please")
    ro, _ = create_token(db, team="t", scopes=("read",))
    admin, _ = create_token(db, team="t", scopes=("admin",))
    p = verify_token(db, ro)
    assert p.allows("read") and not p.allows("write") and not p.allows("admin")
    a = verify_token(db, admin)
    assert a.allows("read") and a.allows("write") and a.allows("admin")


def test_revoke_and_list(db):
    token, info = create_token(db, team="vision", description="ci runner")
    create_token(db, team="nlp")
    revoked = revoke_token(db, info.token_id)
    assert revoked.revoked_at is not None
    assert verify_token(db, token) is None
    assert revoke_token(db, token).revoked_at == revoked.revoked_at  # twice is harmless
    with pytest.raises(NotFoundError, match="no token with id"):
        revoke_token(db, "zzzzzzzzzz")
    listed = list_tokens(db)
    assert [t.team for t in listed] == ["vision", "nlp"]
    assert listed[0].as_dict()["active"] is False and listed[0].description == "ci runner"
    assert [t.team for t in list_tokens(db, team="nlp")] == ["nlp"]


def test_redact_keeps_the_public_id_only():
    token = "gpt_abcdefghij_" + "S" * 43
    assert redact(f"GET /x?token={token} 200") == "GET /x?token=gpt_abcdefghij_*** 200"


def test_cli_token_create_ls_revoke(run_cli, sqlite_url):
    created = run_cli(
        "serve",
        "token",
        "create",
        "--team",
        "vision",
        "--scope",
        "read",
        "--database-url",
        sqlite_url,
        "--format",
        "json",
    )
    assert created.returncode == 0, created.stderr
    data = json.loads(created.stdout)
    assert (
        data["token"].startswith("gpt_") and data["scopes"] == ["read"] and data["team"] == "vision"
    )
    listed = run_cli("serve", "token", "ls", "--database-url", sqlite_url, "--format", "json")
    assert listed.returncode == 0
    assert data["token"].split("_", 2)[2] not in listed.stdout  # never the secret
    assert json.loads(listed.stdout)["tokens"][0]["token_id"] == data["token_id"]
    revoked = run_cli(
        "serve",
        "token",
        "revoke",
        data["token_id"],
        "--database-url",
        sqlite_url,
        "--format",
        "json",
    )
    assert revoked.returncode == 0 and json.loads(revoked.stdout)["active"] is False
    bad = run_cli(
        "serve", "token", "create", "--team", "x", "--scope", "root", "--database-url", sqlite_url
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "gpuplan: error: unknown scope(s) root; use a comma-separated list of read, write, admin"
    ]


def test_tokens_never_reach_the_logs(sqlite_url, tmp_path, caplog):
    """Server logs at debug level, in-process and in a real uvicorn subprocess."""
    db = Database(sqlite_url)
    db.migrate()
    token, info = create_token(db, team="vision")
    secret = token.split("_", 2)[2]
    wrong = token[:-4] + "AAAA"
    doc = make_doc(seed=70)

    # in-process: whatever the code logs, at any level, for every logger
    from fastapi.testclient import TestClient

    from gpuplan.service.app import ServiceSettings, create_app

    caplog.set_level(logging.DEBUG)
    app = create_app(ServiceSettings(database_url=sqlite_url, recalibrate="off"))
    with TestClient(app) as c:
        for t in (token, wrong):
            h = {"Authorization": f"Bearer {t}"}
            c.post("/v1/results", content=json.dumps(doc), headers=h)
            c.get("/v1/results", headers=h)
            c.get("/v1/results/nope", headers=h)
        c.post("/login", data={"token": token})
    assert "upload run=" in caplog.text and info.token_id in caplog.text  # logging did happen
    for needle in (token, secret, wrong):
        assert needle not in caplog.text

    # subprocess: uvicorn's access and error logs, even with the token pasted in a URL
    with (
        LiveServer(
            sqlite_url,
            args=["--recalibrate", "off", "--log-level", "debug"],
            log_path=tmp_path / "serve.log",
        ) as server,
        httpx.Client(base_url=server.url) as c,
    ):
        for t in (token, wrong):
            c.post(
                "/v1/results",
                content=json.dumps(make_doc(seed=71)),
                headers={"Authorization": f"Bearer {t}"},
            )
        c.get(f"/v1/results?token={token}")
        c.get(f"/v1/results/{token}", headers={"Authorization": f"Bearer {token}"})
        c.post("/login", data={"token": token})
    log = server.log_text()
    assert "GET /v1/results?token=gpt_" in log  # the access log line is there, redacted
    assert info.token_id in log
    for needle in (token, secret, wrong, wrong.split("_", 2)[2]):
        assert needle not in log
    db.dispose()
