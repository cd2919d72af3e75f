"""`gpuplan probe` end to end, its errors, Ctrl-C and time budgets."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import jsonschema
import pytest

from gpuplan.probes.suite import SuiteOptions, parse_only, run_suite
from gpuplan.results.schema import SCHEMA_FILE
from gpuplan.results.store import load_result
from tests.probes._runs import partial_doc, probe_status, start_probe, wait_until

REPO = Path(__file__).resolve().parents[2]


def test_quick_probe_end_to_end_json(run_cli, tmp_path, fio_path):
    out = tmp_path / "results"
    r = run_cli("probe", "--quick", "--format", "json", "--out", str(out), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)  # only the document on stdout
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text()))
    status = {}
    for p in doc["probes"]:
        status.setdefault(p["probe"], set()).add(p["status"])
    for name in ("matmul", "membw", "collectives", "storage"):
        assert status[name] == {"ok"}, (
            name,
            [p["error"] for p in doc["probes"] if p["probe"] == name],
        )
    assert status["pcie"] == {"skipped"}
    coll = next(p for p in doc["probes"] if p["probe"] == "collectives")
    assert coll["params"]["backend"] == "gloo" and coll["params"]["ranks"] == 2
    assert all(m["correct"] for m in coll["measurements"])
    dtypes = {p["params"]["dtype"] for p in doc["probes"] if p["probe"] == "matmul"}
    assert dtypes == {"float32", "bfloat16"}
    files = list(out.rglob("*.json"))
    assert len(files) == 1 and load_result(files[0]).run_id == doc["run_id"]
    assert not list(out.rglob("*.partial.json"))  # the checkpoint is gone
    assert doc["interrupted"] is False and doc["host"]["hostname"] is None
    assert "wrote" in r.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--only", "matmul,gpus"],
            "unknown probe 'gpus'; --only takes a comma-separated list of: matmul",
        ),
        (["--bogus"], "No such option"),
        (["--device", "tpu"], "tpu"),
        (["--storage-path", "/no/such/dir"], "--storage-path /no/such/dir does not exist"),
        (["--emit", "slurm"], "--emit needs --nodes N"),
        (["--nodes", "2"], "--nodes only applies with --emit"),
        (["--storage-size", "lots"], "is not a size"),
        (["--timeout", "-1"], "--timeout must be positive"),
        (["--out", "/etc/passwd"], "--out /etc/passwd is not a directory"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run_cli, args, expected):
    r = run_cli("probe", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert expected in lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_parse_only_orders_and_validates():
    assert parse_only("storage, matmul") == ("matmul", "storage")
    assert parse_only(None)[0] == "matmul"


def test_a_time_budget_fails_the_probe_and_keeps_its_points(tmp_path):
    outcome = run_suite(
        SuiteOptions(only=("membw", "pcie"), quick=True, probe_timeout_s=0.3, out_dir=str(tmp_path))
    )
    membw, pcie = outcome.document.probes
    assert membw.status == "failed" and membw.error.startswith("timeout")
    assert len(membw.measurements) >= 1  # measured before the budget ran out
    assert pcie.status == "skipped"  # the suite went on
    assert outcome.path is not None and load_result(outcome.path).probes[0].status == "failed"


def test_ctrl_c_still_writes_what_was_measured(tmp_path):
    out = tmp_path / "results"
    run = start_probe(
        tmp_path,
        "--quick",
        "--only",
        "membw,storage",
        "--out",
        str(out),
        "--no-progress",
        "--format",
        "json",
    )
    try:
        # membw finished (in the checkpoint) and fio started on its scratch file
        wait_until(
            "membw in the checkpoint and storage running",
            lambda: (
                probe_status(partial_doc(out), "membw")[0] == "ok"
                and list(out.glob(".gpuplan-scratch-*"))
            ),
            run,
            timeout_s=240,
        )
        time.sleep(0.5)
        run.proc.send_signal(signal.SIGINT)
        run.wait(timeout=120)
    finally:
        run.kill_all()
    proc, stdout, stderr = run.proc, run.stdout, run.stderr
    assert proc.returncode == 130, stderr
    doc = json.loads(stdout)
    assert doc["interrupted"] is True
    membw, storage = (
        next(p for p in doc["probes"] if p["probe"] == n) for n in ("membw", "storage")
    )
    assert membw["status"] == "ok" and membw["measurements"]
    assert storage["status"] == "interrupted"
    assert storage["error"].startswith("interrupted by SIGINT (Ctrl-C)")
    (path,) = list(out.rglob("*.json"))  # the final file only: the checkpoint is gone
    assert not path.name.endswith(".partial.json")
    assert load_result(path).interrupted is True
    assert not list(out.rglob(".gpuplan-scratch-*"))  # the fio work directory is removed
