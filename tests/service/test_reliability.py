"""Failures that must not lose or duplicate anything.

Real processes and sockets: ``gpuplan serve`` runs as a uvicorn subprocess and is killed with
SIGKILL in the middle of an upload; the database is made unreachable by cutting a TCP
proxy in front of PostgreSQL or by another process holding SQLite's write lock.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from gpuplan.service.client import RetryPolicy, ServiceClient, UploadState, upload_files
from gpuplan.service.db import Database, RunRow
from gpuplan.service.testing import LiveServer, TcpProxy
from gpuplan.service.tokens import create_token

from .service_docs import make_doc, write_doc


def _rows(db: Database) -> list[tuple[str, str]]:
    with db.read() as s:
        return [
            (r.run_id, r.content_sha256) for r in s.scalars(select(RunRow).order_by(RunRow.run_id))
        ]


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_server_killed_mid_upload_leaves_no_row_and_the_retry_succeeds(db_url, tmp_path):
    db = Database(db_url)
    db.migrate()
    token, _ = create_token(db, team="lab")
    doc = make_doc(seed=40, samples=12000)  # about 1 MB of raw samples
    path = write_doc(tmp_path / "results", doc)
    original = path.read_bytes()
    assert len(original) > 600_000

    server = LiveServer(
        db_url, args=["--recalibrate", "off"], log_path=tmp_path / "serve.log"
    ).start()
    # The proxy lets the request body through at 200 kB/s, so the upload lasts seconds.
    proxy = TcpProxy(server.port, rate_bytes_per_s=200_000)
    retry = RetryPolicy(max_attempts=60, base_s=0.05, cap_s=0.5, seed=7)
    client = ServiceClient(f"http://127.0.0.1:{proxy.port}", token, retry=retry, timeout_s=30)
    state = UploadState(tmp_path / "state.json", client.server)
    outcome: dict = {}
    worker = threading.Thread(
        target=lambda: outcome.update(out=upload_files(client, [path], state=state))
    )
    try:
        client.max_upload_bytes()  # the limit is read before the upload starts
        start = proxy.bytes_up
        worker.start()
        _wait(lambda: proxy.bytes_up - start > 250_000, 30, "the upload to be under way")
        server.kill()  # SIGKILL in the middle of the request body
        assert server.proc.returncode == -9
        assert _rows(db) == []  # nothing half-written
        if db.is_sqlite:
            path_db = make_url(db.url).database
            with sqlite3.connect(path_db) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        time.sleep(0.5)  # the client retries against a dead server meanwhile
        proxy.rate_bytes_per_s = None
        server.start()
        worker.join(90)
        assert not worker.is_alive()
    finally:
        proxy.close()
        server.stop()
        client.close()
    (out,) = outcome["out"]
    assert out.result == "created", out
    assert out.attempts >= 2  # the first attempt died with the server
    assert proxy.connections >= 2
    sha = out.content_sha256
    assert _rows(db) == [(doc["run_id"], sha)]
    assert path.read_bytes() == original  # the local file is untouched
    assert state.is_acknowledged(doc["run_id"], sha)
    db.dispose()


def test_concurrent_uploads_lose_nothing_and_duplicate_nothing(db_url, tmp_path):
    db = Database(db_url)
    db.migrate()
    token, _ = create_token(db, team="lab")
    docs = [make_doc(seed=100 + i) for i in range(24)]
    with LiveServer(
        db_url, args=["--recalibrate", "off"], log_path=tmp_path / "serve.log"
    ) as server:

        def send(doc):
            with ServiceClient(
                server.url, token, retry=RetryPolicy(base_s=0.05, cap_s=1, seed=1)
            ) as c:
                return c.upload_document(doc)

        # every document twice, from 12 threads at once: 24 created, 24 duplicates
        with ThreadPoolExecutor(12) as pool:
            outs = list(pool.map(send, docs + docs))
    results = sorted(o.result for o in outs)
    assert results.count("created") == 24 and results.count("duplicate") == 24, results
    rows = _rows(db)
    assert sorted(r for r, _ in rows) == sorted(d["run_id"] for d in docs)
    by_run = {o.run_id: o.id for o in outs if o.result == "created"}
    assert all(by_run[o.run_id] == o.id for o in outs)  # the duplicate answer names the same row
    db.dispose()


def _proxied_postgres_url(url: str, proxy: TcpProxy) -> str:
    return make_url(url).set(port=proxy.port).render_as_string(hide_password=False)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_database_unavailable_is_503_then_recovers(backend, tmp_path, request, make_api):
    doc = make_doc(seed=50)
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'service.db'}"
        with make_api(url, sqlite_busy_timeout_s=0.3) as api:
            holder = sqlite3.connect(tmp_path / "service.db", isolation_level=None)
            holder.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
            r = api.upload(doc)
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "5"
            assert r.json()["detail"] == "database unavailable"
            holder.execute("ROLLBACK")
            holder.close()
            assert api.upload(doc).status_code == 201
            assert api.count_runs() == 1
        return
    pg = request.getfixturevalue("postgres_server")
    real_url = pg.new_database()
    port = make_url(real_url).port
    with TcpProxy(port) as proxy, make_api(_proxied_postgres_url(real_url, proxy)) as api:
        assert api.get("/v1/results").status_code == 200
        proxy.enabled = False
        proxy.cut()
        for attempt in (api.upload(doc), api.get("/v1/results")):
            assert attempt.status_code == 503, attempt.text
            assert attempt.headers["retry-after"] == "5"
        health = api.client.get("/healthz")
        assert health.status_code == 503 and health.json()["database"] == "unavailable"
        proxy.enabled = True
        assert api.upload(doc).status_code == 201
        assert api.client.get("/healthz").status_code == 200
    pg.drop_database(real_url)


def test_client_keeps_the_file_when_the_database_is_down_and_resumes(postgres_server, tmp_path):
    url = postgres_server.new_database()
    db = Database(url)
    db.migrate()
    token, _ = create_token(db, team="lab")
    files = [write_doc(tmp_path / "results", make_doc(seed=60 + i)) for i in range(3)]
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    proxy = TcpProxy(make_url(db.url).port)
    server = LiveServer(
        _proxied_postgres_url(url, proxy),
        args=["--recalibrate", "off"],
        log_path=tmp_path / "serve.log",
    )
    state_path = tmp_path / "state.json"
    try:
        server.start()
        # first file goes through, then the database becomes unreachable
        with ServiceClient(
            server.url,
            token,
            retry=RetryPolicy(
                max_attempts=3, base_s=0.05, cap_s=0.1, max_retry_after_s=0.2, seed=3
            ),
        ) as c:
            state = UploadState(state_path, c.server)
            first = upload_files(c, files[:1], state=state)
            proxy.enabled = False
            proxy.cut()
            rest = upload_files(c, files[1:], state=state)
        assert [o.result for o in first] == ["created"]
        assert [o.result for o in rest] == ["failed", "failed"]
        assert "HTTP 503" in rest[0].message
        assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files} == before
        assert sorted(json.loads(state_path.read_text())["acknowledged"]) == [
            json.loads(files[0].read_text())["run_id"]
        ]

        proxy.enabled = True
        with ServiceClient(server.url, token, retry=RetryPolicy(base_s=0.05, seed=3)) as c:
            again = upload_files(c, files, state=UploadState(state_path, c.server))
        assert [o.result for o in again] == ["skipped", "created", "created"]
    finally:
        server.stop()
        proxy.close()
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(RunRow)) == 3
    db.dispose()
    postgres_server.drop_database(url)
