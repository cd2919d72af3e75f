"""``gpuplan results upload`` / ``results ls --server`` / ``serve`` as a user runs them."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuplan.service.db import Database
from gpuplan.service.testing import LiveServer, TcpProxy, free_port
from gpuplan.service.tokens import create_token

from .service_docs import make_doc, write_doc

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-server")
    url = f"sqlite:///{root / 'service.db'}"
    db = Database(url)
    db.migrate()
    tokens = {
        "rw": create_token(db, team="vision")[0],
        "ro": create_token(db, team="vision", scopes=("read",))[0],
    }
    with LiveServer(url, args=["--recalibrate", "off"], log_path=root / "serve.log") as live:
        live.tokens = tokens
        yield live
    db.dispose()


def _digests(paths):
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def test_upload_resume_duplicate_and_list(server, run_cli, tmp_path):
    files = [write_doc(tmp_path / "results" / "m1", make_doc(seed=200 + i)) for i in range(3)]
    before = _digests(files)
    env = {"GPUPLAN_TOKEN": server.tokens["rw"]}
    state = tmp_path / "state.json"
    args = [
        "results",
        "upload",
        str(tmp_path / "results"),
        "--server",
        server.url,
        "--state",
        str(state),
        "--format",
        "json",
    ]

    first = run_cli(*args, env=env)
    assert first.returncode == 0, first.stderr
    data = json.loads(first.stdout)
    assert data["counts"] == {"created": 3}
    assert {u["run_id"] for u in data["uploads"]} == {
        json.loads(f.read_text())["run_id"] for f in files
    }

    again = run_cli(*args, env=env)  # resumed: nothing is sent again
    assert json.loads(again.stdout)["counts"] == {"skipped": 3}
    fresh = run_cli(*args, "--no-resume", env=env)  # sent again: the server knows them
    assert json.loads(fresh.stdout)["counts"] == {"duplicate": 3}
    assert _digests(files) == before  # local files never touched

    listed = run_cli(
        "results",
        "ls",
        "--server",
        server.url,
        "--device",
        "h100",
        "--format",
        "json",
        env={"GPUPLAN_TOKEN": server.tokens["ro"]},
    )
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)["runs"]
    assert {r["run_id"] for r in runs} >= {u["run_id"] for u in data["uploads"]}
    assert {r["device_id"] for r in runs} == {"h100-sxm5-80gb"}


def test_upload_by_run_id_prefix_and_table_output(server, run_cli, tmp_path):
    doc = make_doc(seed=210)
    write_doc(tmp_path / "results" / "m2", doc)
    r = run_cli(
        "results", "upload", doc["run_id"][:8], "--results-dir", str(tmp_path / "results"), "--server", server.url,
        "--token", server.tokens["rw"], "--state", str(tmp_path / "s.json"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert doc["run_id"][:8] in r.stdout and "created" in r.stdout
    assert "1 run(s): created 1" in r.stderr


def test_conflict_rejected_and_local_errors_exit_2_with_one_line(server, run_cli, tmp_path):
    doc = make_doc(seed=220)
    write_doc(tmp_path / "a", doc)
    env = {"GPUPLAN_TOKEN": server.tokens["rw"]}
    assert (
        run_cli(
            "results", "upload", str(tmp_path / "a"), "--server", server.url, "--no-resume", env=env
        ).returncode
        == 0
    )
    changed = json.loads(json.dumps(doc))
    changed["probes"][0]["measurements"][0]["flops_per_s"] *= 0.9
    write_doc(tmp_path / "b", changed)
    bad = tmp_path / "c" / "broken.json"
    bad.parent.mkdir()
    bad.write_text('{"schema_version": 1, "run_id": "x"}')
    r = run_cli(
        "results",
        "upload",
        str(tmp_path / "b"),
        str(bad),
        "--server",
        server.url,
        "--no-resume",
        "--format",
        "json",
        env=env,
    )
    assert r.returncode == 2
    results = {u["path"]: u for u in json.loads(r.stdout)["uploads"]}
    assert results[str(tmp_path / "b" / f"{doc['run_id'][:8]}.json")]["result"] == "conflict"
    assert results[str(tmp_path / "b" / f"{doc['run_id'][:8]}.json")]["http_status"] == 409
    assert (
        results[str(bad)]["result"] == "rejected"
        and "field 'started_at'" in results[str(bad)]["message"]
    )
    assert r.stderr.strip().splitlines()[-1] == (
        "gpuplan: error: 2 of 2 upload(s) did not succeed (conflict 1, rejected 1); "
        "the local files are kept; see the messages above"
    )


def test_bad_or_missing_token(server, run_cli, tmp_path):
    write_doc(tmp_path / "r", make_doc(seed=230))
    env = {"GPUPLAN_TOKEN": ""}
    r = run_cli("results", "upload", str(tmp_path / "r"), "--server", server.url, env=env)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "gpuplan: error: no token for the results service; pass --token or set GPUPLAN_TOKEN "
        "(an admin creates one with 'gpuplan serve token create --team T')"
    ]
    r = run_cli(
        "results",
        "upload",
        str(tmp_path / "r"),
        "--server",
        server.url,
        "--token",
        "gpt_0123456789_" + "x" * 43,
        "--no-resume",
        env=env,
    )
    assert r.returncode == 2
    assert "refused the token" in r.stderr and "Traceback" not in r.stderr
    r = run_cli(
        "results", "ls", "--server", server.url, "--token", server.tokens["rw"][:-2] + "zz", env=env
    )
    assert r.returncode == 2 and "refused the token" in r.stderr


def test_unreachable_server_fails_fast_keeps_files_and_says_rerun(run_cli, tmp_path):
    files = [write_doc(tmp_path / "r", make_doc(seed=240 + i)) for i in range(2)]
    before = _digests(files)
    url = f"http://127.0.0.1:{free_port()}"
    r = run_cli(
        "results",
        "upload",
        str(tmp_path / "r"),
        "--server",
        url,
        "--token",
        "gpt_0123456789_" + "x" * 43,
        "--retries",
        "2",
        "--state",
        str(tmp_path / "s.json"),
        "--format",
        "json",
    )
    assert r.returncode == 2
    assert json.loads(r.stdout)["counts"] == {"failed": 2}
    assert (
        r.stderr.strip()
        .splitlines()[-1]
        .endswith("the local files are kept; run the same command again to resume")
    )
    assert _digests(files) == before


def test_a_killed_batch_continues_where_it_stopped(server, tmp_path):
    """SIGKILL the uploading client in the middle of a batch; the rerun sends only the rest."""
    files = [write_doc(tmp_path / "r", make_doc(seed=250 + i, samples=1500)) for i in range(6)]
    state = tmp_path / "state.json"
    with TcpProxy(server.port, rate_bytes_per_s=300_000) as proxy:  # each upload lasts ~0.4 s
        cmd = [
            sys.executable,
            "-m",
            "gpuplan",
            "results",
            "upload",
            str(tmp_path / "r"),
            "--server",
            f"http://127.0.0.1:{proxy.port}",
            "--state",
            str(state),
            "--format",
            "json",
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO), "GPUPLAN_TOKEN": server.tokens["rw"]}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + 120
        acked = 0
        while time.monotonic() < deadline and acked < 2:
            if state.exists():
                try:
                    acked = len(json.loads(state.read_text())["acknowledged"])
                except ValueError:  # never: the state file is replaced atomically
                    raise
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        acknowledged = set(json.loads(state.read_text())["acknowledged"])
        assert 2 <= len(acknowledged) < 6
        proxy.rate_bytes_per_s = None  # same server URL (the state is per server), full speed
        rerun = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    outcomes = json.loads(rerun.stdout)["uploads"]
    skipped = {u["run_id"] for u in outcomes if u["result"] == "skipped"}
    assert skipped == acknowledged
    # the upload in flight when the client died may have reached the server: then "duplicate"
    assert {u["result"] for u in outcomes if u["run_id"] not in acknowledged} <= {
        "created",
        "duplicate",
    }
    assert sorted(u["run_id"] for u in outcomes) == sorted(
        json.loads(f.read_text())["run_id"] for f in files
    )


def test_serve_help_and_bad_options(run_cli, tmp_path):
    h = run_cli("serve", "--help")
    assert h.returncode == 0 and "Examples:" in h.stdout and "token create --team" in h.stdout
    u = run_cli("results", "upload", "--help")
    assert u.returncode == 0 and "Examples:" in u.stdout
    r = run_cli("serve", "--database-url", "mysql://x@y/z")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "gpuplan: error: unsupported database 'mysql'; use sqlite:///path/to/file.db or postgresql://user@host:5432/dbname"
    )
    r = run_cli(
        "serve",
        "--ssl-certfile",
        str(tmp_path / "nope.pem"),
        "--database-url",
        f"sqlite:///{tmp_path / 'x.db'}",
    )
    assert r.returncode == 2 and "--ssl-certfile and --ssl-keyfile go together" in r.stderr
