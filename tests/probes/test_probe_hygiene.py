"""Child processes die with the run, scratch files of dead runs go, a result is never lost.

Real processes throughout: ``sh``/``sleep`` children, a parent Python process that is
SIGKILLed, a probe run whose file writes fail for real (``RLIMIT_FSIZE``: the kernel
refuses every write past 1 KiB, as on a full disk).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from gpuplan.probes import procs
from gpuplan.probes.scratch import (
    LEGACY_PREFIX,
    LEGACY_STALE_S,
    SCRATCH_PREFIX,
    make_scratch_dir,
    remove_stale,
)
from gpuplan.probes.suite import ResultNotSaved, partial_path, save_or_rescue
from gpuplan.results.store import load_result, result_path
from tests.probes._runs import MARKER, REPO, gone_within, marked_processes

FIXTURE = REPO / "tests" / "results" / "data" / "v1-cpu-quick.json"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_run_child_kills_the_whole_group_on_a_timeout():
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        # the shell forks a grandchild that would outlive a plain kill of the shell
        procs.run_child(["sh", "-c", "sleep 30.4242 & echo $$; wait"], timeout_s=0.5)
    assert time.monotonic() - started < 5
    # every process that carried the child's group is gone (the leader was reaped)
    ours = [
        pid
        for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
        if _cmdline(pid) == "sleep 30.4242" and os.getpgid(pid) != os.getpgid(0)
    ]
    assert ours == []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def test_run_child_output_and_own_process_group():
    done = procs.run_child(
        [sys.executable, "-c", "import os; print(os.getpgid(0), os.getpid())"], timeout_s=30
    )
    pgid, pid = map(int, done.stdout.split())
    assert done.returncode == 0 and pgid == pid != os.getpgid(0)


_PARENT = textwrap.dedent(
    """
    import sys
    from gpuplan.probes.procs import run_child
    print("started", flush=True)
    run_child(["sleep", "30"], timeout_s=60)
    """
)


def test_a_child_dies_with_its_sigkilled_parent():
    marker = uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(REPO), MARKER: marker}
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 20
        while len(marked_processes(marker)) < 2:  # the parent and its sleep
            assert time.monotonic() < deadline
            time.sleep(0.02)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert gone_within(marker, 2.0) == []  # no parent left to kill it: the kernel did
    finally:
        for pid in marked_processes(marker):
            os.kill(pid, signal.SIGKILL)


def test_kill_children_kills_registered_groups():
    child = subprocess.Popen(["sleep", "30"], preexec_fn=procs.preexec_child(os.getpid()))
    procs.register_child(child.pid)
    procs.kill_children()
    assert child.wait(timeout=5) == -signal.SIGKILL
    procs.kill_children()  # nothing registered any more: harmless


def test_stale_scratch_of_this_machine_goes_the_rest_stays(tmp_path):
    out, storage = tmp_path / "out", tmp_path / "storage"
    results_dir = out / "m1"
    for d in (out, storage, results_dir):
        d.mkdir(parents=True)
    mine = make_scratch_dir(out, machine_id="m1", run_id="aaaaaaaa-1")
    assert mine.name.startswith(f"{SCRATCH_PREFIX}m1-{os.getpid()}-aaaaaaaa-")
    dead = [out / f"{SCRATCH_PREFIX}m1-999999-bbbbbbbb-x1", storage / f"{SCRATCH_PREFIX}m1-4-c-y"]
    other_machine = out / f"{SCRATCH_PREFIX}m2-999999-bbbbbbbb-x2"
    unrelated = out / ".gpuplan-something-else"
    for d in (*dead, other_machine, unrelated):
        d.mkdir()
        (d / "gpuplan-fio.dat").write_bytes(b"\0" * 4096)
    legacy_old, legacy_live = out / f"{LEGACY_PREFIX}abc123", out / f"{LEGACY_PREFIX}def456"
    for d in (legacy_old, legacy_live):
        d.mkdir()
    hours_ago = time.time() - 2 * LEGACY_STALE_S
    os.utime(legacy_old, (hours_ago, hours_ago))
    tmp_write = results_dir / ".20261201T000000Z_abcd1234.partial.json.k3j2.tmp"
    tmp_write.write_text("{")
    kept_result = results_dir / "20261201T000000Z_abcd1234.partial.json"
    kept_result.write_text("{}")

    removed = remove_stale([out, storage, None, out], machine_id="m1", results_root=out)
    assert sorted(removed) == sorted([*dead, legacy_old, tmp_write])
    assert mine.is_dir() and other_machine.is_dir() and unrelated.is_dir()
    assert legacy_live.is_dir()  # gpuplan 0.1's folder, changed within the hour: may be live
    assert kept_result.exists()


def test_partial_path_sits_beside_the_final_file(tmp_path):
    doc = load_result(FIXTURE)
    final = result_path(tmp_path, doc)
    assert partial_path(final) == final.with_name(f"{final.stem}.partial.json")
    assert partial_path(final).parent == final.parent


def test_save_or_rescue_uses_the_first_place_that_works(tmp_path):
    doc = load_result(FIXTURE)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(ResultNotSaved) as err:
        save_or_rescue(doc, blocker / "results", rescue=[blocker / "r", tmp_path / "rescue"])
    assert err.value.rescue is not None and err.value.rescue.is_relative_to(tmp_path / "rescue")
    assert load_result(err.value.rescue) == doc
    line = err.value.one_line()
    assert line.startswith(f"could not write the result under {blocker / 'results'} (")
    assert line.endswith(f"the run was saved to {err.value.rescue} instead")

    with pytest.raises(ResultNotSaved) as err:
        save_or_rescue(doc, blocker / "results", rescue=[blocker / "r", blocker / "x.json"])
    assert err.value.rescue is None and err.value.document is doc
    assert "printed on stdout" in err.value.one_line()


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))  # Python ignores SIGXFSZ


def test_nothing_writable_prints_the_whole_document_on_stdout(tmp_path):
    out, tmp = tmp_path / "results", tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp)}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    r = subprocess.run(
        [sys.executable, "-m", "gpuplan", "probe", "--quick", "--only", "pcie", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        preexec_fn=_limit_file_size,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    # the plan printed before the run, then the one line of the error
    plan, *lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert plan.startswith("gpuplan: planned ")
    assert lines == [
        f"gpuplan: error: could not write the result under {out} (File too large), nor in a "
        "rescue folder; the whole result document is printed on stdout"
    ], r.stderr
    doc = json.loads(r.stdout)  # the run, whole, and nothing else on stdout
    assert len(r.stdout) > 1024 and doc["probes"][0]["probe"] == "pcie"
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # no half-written file
    assert not Path(f"/tmp/gpuplan-run-{doc['run_id']}.json").exists()
