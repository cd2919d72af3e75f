"""The probe lock (gpuplan/results/runlock.py): one holder, released by the kernel on death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from gpuplan.errors import EnvironmentProblem
from gpuplan.results import runlock

_HOLD = """
import sys, time
from gpuplan.results import runlock
with runlock.acquire(sys.argv[1], argv=["gpuplan", "probe"], out_dir="somewhere"):
    print("held", flush=True)
    time.sleep(60)
"""


def _holder_process(run_id: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, run_id], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_no_lock_file_means_no_holder():
    assert not runlock.lock_path().exists()
    assert runlock.current_holder() is None


def test_second_acquire_is_refused_naming_the_holder():
    with runlock.acquire("run-one", argv=["gpuplan", "probe"], out_dir="r") as me:
        assert me.pid == os.getpid()
        holder = runlock.current_holder()
        assert holder == me
        assert holder.argv == ("gpuplan", "probe") and holder.out_dir == "r"
        with pytest.raises(EnvironmentProblem) as err, runlock.acquire("run-two"):
            pass  # pragma: no cover
        line = err.value.one_line()
        assert line.startswith(f"another probe run (run run-one, pid {os.getpid()}, started ")
        assert line.endswith(
            f"holds the probe lock; wait for it to finish or stop it: kill {os.getpid()}"
        )
    # released: a new run takes it, and the file no longer describes the old run
    assert runlock.current_holder() is None
    assert runlock.lock_path().read_text() == ""
    with runlock.acquire("run-three"):
        assert runlock.current_holder().run_id == "run-three"


def test_lock_of_a_killed_process_is_not_a_holder():
    proc = _holder_process("run-killed")
    try:
        holder = runlock.current_holder()
        assert holder is not None and holder.run_id == "run-killed" and holder.pid == proc.pid
        with (
            pytest.raises(EnvironmentProblem, match="run run-killed"),
            runlock.acquire("run-other"),
        ):
            pass  # pragma: no cover
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    # the dead run's description is still in the file, but nobody holds the lock
    assert "run-killed" in runlock.lock_path().read_text()
    assert runlock.current_holder() is None
    with runlock.acquire("run-next") as me:
        assert runlock.current_holder() == me


def test_unwritable_state_dir_is_an_environment_problem(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("GPUPLAN_STATE_DIR", str(blocker / "state"))
    with (
        pytest.raises(EnvironmentProblem, match=r"cannot open the probe lock .*not-a-dir"),
        runlock.acquire("r"),
    ):
        pass  # pragma: no cover


def test_description_wait_is_bounded():
    # a locked but empty file (a holder between flock and write) reads as "unknown", fast
    path = runlock.lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)
        t0 = time.monotonic()
        holder = runlock.current_holder()
        assert holder is not None and holder.run_id == "unknown"
        assert time.monotonic() - t0 < 3
    finally:
        os.close(fd)


def test_processes_of_one_job_share_the_lock_and_others_are_refused():
    job = "torchrun:127.0.0.1:29500:none:2"
    with runlock.acquire("node-0", job=job) as me:
        assert runlock.current_holder() == me and me.job == job
        with runlock.acquire("node-1", job=job) as shared:
            assert shared == me  # the second "node" of the job runs under the first's lock
        assert runlock.current_holder() == me  # ... and leaving it releases nothing
        for other in ("torchrun:127.0.0.1:29501:none:2", None):
            with (
                pytest.raises(EnvironmentProblem, match="run node-0"),
                runlock.acquire("intruder", job=other),
            ):
                pass  # pragma: no cover
    assert runlock.current_holder() is None
