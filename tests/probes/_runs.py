"""Real ``gpuplan probe`` runs for the fault tests: started, watched and killed for real.

Each run gets a marker in its environment (``GPUPLAN_TEST_RUN=<uuid>``) that every child
inherits (fio, the spawned gloo ranks, multiprocessing's resource tracker), so a test can
find every process of the run in ``/proc`` whatever its process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MARKER = "GPUPLAN_TEST_RUN"


@dataclass
class ProbeRun:
    proc: subprocess.Popen[bytes]
    marker: str
    stdout_path: Path
    stderr_path: Path

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text()

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def wait(self, timeout: float = 120) -> int:
        return self.proc.wait(timeout=timeout)

    def kill_all(self) -> None:
        """Test clean-up: SIGKILL whatever of the run is still alive."""
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in marked_processes(self.marker):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


def terminal_signals() -> None:
    """In a child before exec: SIGINT, SIGTERM and SIGHUP at their defaults, as a terminal user
    starts the probe. A test run launched from a background job (``cmd &`` in a script) inherits
    SIGINT ignored, and Python then never raises KeyboardInterrupt: the Ctrl-C tests would test
    the launcher, not the probe."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def start_probe(tmp_path: Path, *args: str, ignore: tuple[int, ...] = ()) -> ProbeRun:
    """Start ``gpuplan probe ARGS`` in its own session, output to files under tmp_path, with a
    terminal's signal dispositions; the signals in ``ignore`` start ignored (as under ``nohup``)."""

    def preexec() -> None:
        terminal_signals()
        for sig in ignore:
            signal.signal(sig, signal.SIG_IGN)

    marker = uuid.uuid4().hex
    name = f"probe-{marker[:8]}"
    stdout_path, stderr_path = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
    env = {**os.environ, "PYTHONPATH": str(REPO), MARKER: marker}
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuplan", "probe", *args],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
            env=env,
            start_new_session=True,
            preexec_fn=preexec,
        )
    return ProbeRun(proc, marker, stdout_path, stderr_path)


def marked_processes(marker: str) -> list[int]:
    """Live processes (zombies excluded) whose environment carries ``MARKER=marker``."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def wait_until(what: str, check: Callable[[], Any], run: ProbeRun, timeout_s: float = 120) -> Any:
    """Poll ``check`` until it returns something truthy; fail if the run ends first."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert run.proc.poll() is None, f"run ended before {what}: {run.stderr[-2000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def partial_doc(out: Path) -> dict[str, Any] | None:
    """The checkpoint document under ``out`` (``<machine>/<stem>.partial.json``), if any."""
    for path in out.glob("*/*.partial.json"):
        with contextlib.suppress(OSError, ValueError):
            return dict(json.loads(path.read_text()), _path=str(path))
    return None


def probe_status(doc: dict[str, Any] | None, name: str) -> tuple[str | None, int]:
    """(status, number of measurements) of probe ``name`` in ``doc``."""
    for p in (doc or {}).get("probes", []):
        if p["probe"] == name:
            return p["status"], len(p["measurements"])
    return None, 0


def gone_within(marker: str, seconds: float) -> list[int]:
    """The marked processes still alive after up to ``seconds`` (empty: all gone)."""
    deadline = time.monotonic() + seconds
    while True:
        left = marked_processes(marker)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)
