"""Client pieces: backoff schedule, retries against a late server, state file, run-id lookup."""

from __future__ import annotations

import json
import threading
import time

import pytest

from gpuplan.errors import InputError, NotFoundError
from gpuplan.service.client import (
    RetryPolicy,
    ServiceClient,
    TransientError,
    UploadOutcome,
    UploadState,
    collect_files,
    default_state_path,
    resolve_server,
)
from gpuplan.service.db import Database
from gpuplan.service.testing import LiveServer, free_port
from gpuplan.service.tokens import create_token

from .service_docs import make_doc, write_doc


def test_full_jitter_backoff_stays_under_the_exponential_ceiling():
    policy = RetryPolicy(base_s=0.5, cap_s=8.0, seed=42)
    delays = [[policy.delay_s(n) for _ in range(400)] for n in range(7)]
    for n, ds in enumerate(delays):
        ceiling = min(8.0, 0.5 * 2**n)
        assert all(0.0 <= d <= ceiling for d in ds)
        # uniform on [0, ceiling]: the mean is near ceiling / 2 (400 draws: +-10 %)
        assert sum(ds) / len(ds) == pytest.approx(ceiling / 2, rel=0.1)
    assert max(delays[6]) <= 8.0  # capped
    again = RetryPolicy(base_s=0.5, cap_s=8.0, seed=42)
    assert [again.delay_s(0) for _ in range(5)] == delays[0][:5]  # seeded: reproducible


def test_retry_after_is_honoured_up_to_a_limit():
    policy = RetryPolicy(base_s=0.01, cap_s=0.02, max_retry_after_s=3.0, seed=1)
    assert policy.delay_s(0, retry_after_s=2.0) == 2.0
    assert policy.delay_s(0, retry_after_s=100.0) == 3.0
    with pytest.raises(InputError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


def test_unreachable_server_is_retried_max_attempts_times_with_growing_waits():
    waits: list[float] = []
    url = f"http://127.0.0.1:{free_port()}"
    client = ServiceClient(
        url,
        "gpt_0123456789_" + "x" * 43,
        retry=RetryPolicy(max_attempts=4, base_s=1.0, seed=5),
        sleep=waits.append,
    )
    with pytest.raises(TransientError, match=r"no answer after 4 attempts .*ConnectError"):
        client.request("GET", "/v1/results")
    assert len(waits) == 3  # between the 4 attempts
    assert all(w <= 2.0**n for n, w in enumerate(waits))
    out = client.upload_document(make_doc(seed=1))
    assert out.result == "failed" and "no answer" in out.message
    client.close()


def test_client_waits_for_a_server_that_starts_late(sqlite_url, tmp_path):
    db = Database(sqlite_url)
    db.migrate()
    token, _ = create_token(db, team="lab")
    server = LiveServer(sqlite_url, args=["--recalibrate", "off"], log_path=tmp_path / "serve.log")
    starter = threading.Timer(1.0, server.start)
    client = ServiceClient(
        server.url, token, retry=RetryPolicy(max_attempts=40, base_s=0.1, cap_s=0.5, seed=2)
    )
    client._max_upload_bytes = 2**30  # skip the limit look-up: the upload itself must retry
    try:
        starter.start()
        t0 = time.monotonic()
        out = client.upload_document(make_doc(seed=2))
        assert time.monotonic() - t0 >= 0.9
        assert out.result == "created" and out.attempts >= 2
    finally:
        starter.join()
        client.close()
        server.stop()
        db.dispose()


def test_state_file_is_per_server_and_atomic(tmp_path):
    path = tmp_path / "state.json"
    s = UploadState(path, "http://a")
    s.record(
        UploadOutcome(
            "f.json", "run-1", "created", 201, id=7, server_status="accepted", content_sha256="ab"
        )
    )
    assert json.loads(path.read_text())["acknowledged"]["run-1"]["id"] == 7
    assert UploadState(path, "http://a").is_acknowledged("run-1", "ab")
    assert not UploadState(path, "http://a").is_acknowledged("run-1", "cd")  # content changed
    assert not UploadState(path, "http://b").is_acknowledged("run-1", "ab")  # another server
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temp file left behind
    path.write_text("{broken")
    with pytest.raises(InputError, match="unreadable"):
        UploadState(path, "http://a")
    assert default_state_path("http://a/").name == default_state_path("http://a").name


def test_collect_files_by_path_directory_and_run_id_prefix(tmp_path):
    a = write_doc(tmp_path / "results" / "m", make_doc(seed=1))
    b = write_doc(tmp_path / "results" / "m", make_doc(seed=2))
    assert collect_files([str(tmp_path / "results")], tmp_path / "results") == sorted([a, b])
    rid = json.loads(b.read_text())["run_id"]
    assert collect_files([rid[:6]], tmp_path / "results") == [b]
    assert collect_files([str(a), str(a)], tmp_path / "results") == [a]  # once
    with pytest.raises(NotFoundError, match="no result file or run id 'zzzz'"):
        collect_files(["zzzz"], tmp_path / "results")


def test_server_url_must_name_the_scheme():
    with pytest.raises(InputError, match="lacks http:// or https://"):
        resolve_server("gpuplan.example.org")
    assert resolve_server("https://gpuplan.example.org/") == "https://gpuplan.example.org"


def test_upload_over_the_server_limit_is_refused_locally():
    client = ServiceClient(
        "http://127.0.0.1:9", "gpt_0123456789_" + "x" * 43, retry=RetryPolicy(max_attempts=1)
    )
    client._max_upload_bytes = 4096  # as read from /healthz
    out = client.upload_document(make_doc(seed=3))
    assert out.result == "rejected" and out.http_status == 413
    assert "over the server's limit of 4096 bytes" in out.message
    client.close()
