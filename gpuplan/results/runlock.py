"""The per-machine probe lock: at most one ``gpuplan probe`` run measures a machine at once.

Two probe runs on one machine share its GPUs, links and disks, so both would report
figures far below a solo run (measured: 0.12x and 0.44x) while saying ``ok``. The lock
refuses the second run instead.

The lock is an exclusive :func:`fcntl.flock` on ``state_dir()/probe.lock``, held on an
open file for as long as the run lasts. The kernel drops a ``flock`` when the last
descriptor of the open file closes, which includes the process being killed with
SIGKILL, so a killed run never leaves a stale lock: the file may stay on disk with the
dead run's description in it, but it is only a *holder* while someone has it locked
(:func:`current_holder` tries the lock to tell).

The file holds one JSON object describing the holder::

    {"pid": 1234, "run_id": "<uuid4>", "started_at": "...Z",
     "argv": ["gpuplan", "probe", "..."], "out_dir": "results", "job": null}

The file itself is never removed: unlinking a lock file races with a process that opened
it a moment earlier and would then hold a lock on a file nobody else can see.

This module is light on purpose (standard library only): ``gpuplan results ls`` imports it
to tell a running partial result from an interrupted one.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuplan.errors import EnvironmentProblem
from gpuplan.paths import state_dir

__all__ = ["LOCK_FILE_NAME", "LockHolder", "acquire", "current_holder", "lock_path"]

LOCK_FILE_NAME = "probe.lock"

# A holder writes its description just after taking the lock; a reader that finds the
# lock taken but the file still empty waits this long for the description to appear.
_DESCRIPTION_WAIT_S = 1.0


@dataclass(frozen=True, kw_only=True)
class LockHolder:
    """The probe run that holds the lock."""

    pid: int
    """Process id of the holding ``gpuplan probe`` process (on this machine)."""
    run_id: str
    """``run_id`` of the result document the run is writing (``"unknown"`` if unreadable)."""
    started_at: str
    """When the run took the lock, ISO 8601 UTC with a ``Z``."""
    argv: tuple[str, ...]
    """The holder's command line."""
    out_dir: str | None
    """The result folder the holder writes to, if it said."""
    job: str | None = None
    """The distributed job the holder belongs to (torchrun's rendezvous), if any: processes
    of one job share the machine on purpose and share the lock (see :func:`acquire`)."""

    def describe(self) -> str:
        """``run <id>, pid <pid>, started <t>``: how a refusal names the holder."""
        return f"run {self.run_id}, pid {self.pid}, started {self.started_at}"


def lock_path() -> Path:
    """Where the probe lock lives: ``gpuplan.paths.state_dir() / "probe.lock"``."""
    return state_dir() / LOCK_FILE_NAME


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str) -> LockHolder | None:
    try:
        raw = json.loads(text)
        return LockHolder(
            pid=int(raw["pid"]),
            run_id=str(raw["run_id"]),
            started_at=str(raw["started_at"]),
            argv=tuple(str(a) for a in raw.get("argv") or ()),
            out_dir=None if raw.get("out_dir") is None else str(raw["out_dir"]),
            job=None if raw.get("job") is None else str(raw["job"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


def _read_description(fd: int) -> LockHolder:
    """The holder's description, waiting briefly for a holder that has just locked."""
    deadline = time.monotonic() + _DESCRIPTION_WAIT_S
    while True:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        holder = _parse(b"".join(chunks).decode("utf-8", errors="replace"))
        if holder is not None:
            return holder
        if time.monotonic() >= deadline:
            return LockHolder(pid=0, run_id="unknown", started_at="unknown", argv=(), out_dir=None)
        time.sleep(0.02)


def _try_lock(fd: int, operation: int) -> bool:
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def current_holder(path: Path | None = None) -> LockHolder | None:
    """The run holding the probe lock right now, or ``None``.

    A lock file left behind by a process that died is not a holder: the answer comes from
    trying the lock (without blocking, and releasing it at once), not from the file's
    contents.

    Parameters
    ----------
    path:
        The lock file; default :func:`lock_path`.
    """
    path = lock_path() if path is None else path
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError:
        return None
    try:
        if _try_lock(fd, fcntl.LOCK_SH):
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        return _read_description(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def acquire(
    run_id: str,
    *,
    argv: Sequence[str] | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    job: str | None = None,
    path: Path | None = None,
) -> Iterator[LockHolder]:
    """Hold the probe lock for the duration of the ``with`` block.

    A process of a distributed job (``job`` set) that finds the lock held by the *same*
    job goes ahead without it, under the holder's lock: on one machine that is two
    "nodes" of one torchrun job, which share the machine by design.

    Parameters
    ----------
    run_id:
        The run's id, shown to anyone refused the lock.
    argv:
        The run's command line (default ``sys.argv``).
    out_dir:
        The folder the run writes results to.
    job:
        The distributed job's identity (e.g. torchrun's rendezvous address and run id).
    path:
        The lock file; default :func:`lock_path`.

    Yields
    ------
    LockHolder
        The holder: this run's description as written into the lock file, or the same
        job's holder that this process shares the lock with.

    Raises
    ------
    EnvironmentProblem
        Another process holds the lock, or the state folder cannot be written.
    """
    path = lock_path() if path is None else path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot open the probe lock {path}: {exc.strerror or exc}",
            hint="make the state folder writable or point GPUPLAN_STATE_DIR elsewhere",
        ) from exc
    try:
        if not _try_lock(fd, fcntl.LOCK_EX):
            holder = _read_description(fd)
            if job is not None and holder.job == job:
                yield holder
                return
            raise EnvironmentProblem(
                f"another probe run ({holder.describe()}) holds the probe lock",
                hint=f"wait for it to finish or stop it: kill {holder.pid}",
            )
        me = LockHolder(
            pid=os.getpid(),
            run_id=run_id,
            started_at=_now(),
            argv=tuple(sys.argv if argv is None else argv),
            out_dir=None if out_dir is None else os.fspath(out_dir),
            job=job,
        )
        text = json.dumps(
            {
                "pid": me.pid,
                "run_id": me.run_id,
                "started_at": me.started_at,
                "argv": list(me.argv),
                "out_dir": me.out_dir,
                "job": me.job,
            }
        )
        # the description only informs: on a full disk the run still holds the lock
        # (a refused run then names an "unknown" holder)
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, text.encode("utf-8"), 0)
        try:
            yield me
        finally:
            # Leave no description of a finished run behind; the lock goes with the close.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)
