"""Probe runs that lose nothing and leave nothing behind (issue 13, item 5).

Real runs on CPU: ``gpuplan probe --quick`` with two spawned gloo ranks and real fio,
started in their own session, then SIGKILLed, interrupted or raced against each other.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from gpuplan.results import runlock
from gpuplan.results.store import load_result
from tests.probes._runs import (
    gone_within,
    partial_doc,
    probe_status,
    start_probe,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("fio_path")


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def _run_status(run_cli, out, run_id: str) -> str:
    r = run_cli("results", "ls", str(out), "--format", "json")
    assert r.returncode == 0, r.stderr
    (row,) = [row for row in json.loads(r.stdout)["results"] if row["run_id"] == run_id]
    assert row["path"].endswith(".partial.json")
    return str(row["run_status"])


def test_sigkill_leaves_a_visible_partial_no_process_and_no_scratch_after_the_next_run(
    tmp_path, run_cli
):
    out = tmp_path / "results"
    run = start_probe(
        tmp_path, "--quick", "--only", "collectives,storage", "--out", str(out), "--no-progress"
    )
    try:
        # kill while fio runs: collectives finished (in the checkpoint), scratch file on disk
        wait_until(
            "collectives in the checkpoint and the fio scratch file",
            lambda: (
                probe_status(partial_doc(out), "collectives")[0] == "ok"
                and list(out.glob(".gpuplan-scratch-*/*"))
            ),
            run,
        )
        run.proc.send_signal(signal.SIGSTOP)  # held here (fio goes on) while we look
        holder = runlock.current_holder()
        assert holder is not None and holder.pid == run.proc.pid
        scratch = list(out.glob(".gpuplan-scratch-*"))
        assert len(scratch) == 1 and f"-{run.proc.pid}-" in scratch[0].name
        assert _run_status(run_cli, out, holder.run_id) == "running"
        run.proc.send_signal(signal.SIGKILL)
        run.wait(timeout=10)
        assert gone_within(run.marker, 2.0) == []  # fio and every rank died with it
    finally:
        run.kill_all()
    assert runlock.current_holder() is None  # the kernel released the lock

    (partial,) = out.glob("*/*.partial.json")
    doc = load_result(partial)  # a normal result document
    assert doc.interrupted is True and doc.run_id == holder.run_id
    coll = doc.probe("collectives")[0]
    # every quick CPU case (5 ops in fp32, a bf16 all-reduce) at the 3 quick sizes
    assert coll.status == "ok" and len(coll.measurements) == 6 * 3
    assert all(m["correct"] for m in coll.measurements)
    for p in doc.probe("storage"):  # still running when killed: says so, keeps its points
        assert p.status == "interrupted" and "the run stopped while this probe ran" in p.error
    assert scratch[0].exists()  # nobody could remove it ...
    assert _run_status(run_cli, out, doc.run_id) == "interrupted"
    cal = run_cli("calibrate", str(out), "--out", str(tmp_path / "cal.json"))
    assert cal.returncode == 0, cal.stderr
    assert doc.run_id in json.loads((tmp_path / "cal.json").read_text())["inputs"]

    r = run_cli("probe", "--quick", "--only", "pcie", "--out", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr
    assert not list(out.rglob(".gpuplan-scratch-*"))  # ... until the next run
    assert not list(out.rglob("*.tmp"))
    assert partial.exists()  # the killed run's record stays
    assert len(list(out.glob("*/*.json"))) == 2


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
def test_a_signal_keeps_the_points_of_the_probe_it_interrupts(tmp_path, sig):
    out = tmp_path / "results"
    run = start_probe(
        tmp_path, "--quick", "--only", "collectives", "--out", str(out), "--format", "json"
    )
    try:
        # an in-probe checkpoint: the collectives are running and have measured points
        seen = wait_until(
            "a checkpoint inside the collectives",
            lambda: (
                (s := probe_status(partial_doc(out), "collectives"))[0] == "interrupted"
                and s[1] >= 5
                and s[1]
            ),
            run,
        )
        run.proc.send_signal(sig)
        assert run.wait(timeout=60) == 130, run.stderr
        assert gone_within(run.marker, 2.0) == []
    finally:
        run.kill_all()
    doc = json.loads(run.stdout)
    assert doc["interrupted"] is True
    (coll,) = doc["probes"]
    assert coll["status"] == "interrupted"
    assert coll["error"].startswith(f"interrupted by {sig.name}")
    assert len(coll["measurements"]) >= seen  # nothing measured before the signal is lost
    assert f"the {len(coll['measurements'])} points measured are kept" in coll["error"]
    assert all(m["correct"] for m in coll["measurements"])
    (final,) = out.glob("*/*.json")  # the checkpoint gave way to the final file
    assert not final.name.endswith(".partial.json")
    assert load_result(final).probes[0].measurements == coll["measurements"]


def test_under_nohup_a_hangup_does_not_stop_the_run(tmp_path):
    out = tmp_path / "results"
    run = start_probe(
        tmp_path,
        "--quick",
        "--only",
        "collectives",
        "--out",
        str(out),
        "--format",
        "json",
        ignore=(signal.SIGHUP,),
    )
    try:
        wait_until(
            "a checkpoint inside the collectives",
            lambda: probe_status(partial_doc(out), "collectives")[0] == "interrupted",
            run,
        )
        run.proc.send_signal(signal.SIGHUP)
        assert run.wait(timeout=120) == 0, run.stderr
    finally:
        run.kill_all()
    doc = json.loads(run.stdout)
    assert doc["interrupted"] is False and doc["probes"][0]["status"] == "ok"


def test_a_second_probe_is_refused_naming_the_run_that_holds_the_lock(tmp_path, run_cli):
    out = tmp_path / "results"
    first = start_probe(tmp_path, "--quick", "--only", "collectives", "--out", str(out))
    try:
        holder = wait_until("the first run's lock", runlock.current_holder, first)
        assert holder.pid == first.proc.pid
        t0 = time.monotonic()
        r = run_cli("probe", "--quick", "--only", "pcie", "--out", str(tmp_path / "second"))
        refused_s = time.monotonic() - t0
        assert r.returncode == 2, (r.stdout, r.stderr)
        line = _one_line(r.stderr)
        assert line == (
            f"gpuplan: error: another probe run (run {holder.run_id}, pid {holder.pid}, "
            f"started {holder.started_at}) holds the probe lock; "
            f"wait for it to finish or stop it: kill {holder.pid}"
        ), line
        assert r.stdout == ""
        assert not list((tmp_path / "second").rglob("*.json"))
        assert first.proc.poll() is None  # the first run goes on, undisturbed
        first.proc.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        first.kill_all()
    print(f"refused in {refused_s:.2f} s")
    # a killed holder leaves no stale lock: the next run goes ahead
    r = run_cli("probe", "--quick", "--only", "pcie", "--out", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr
