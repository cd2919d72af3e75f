"""Child processes that die with the probe run: own process group, parent-death signal.

A probe run starts helpers (``fio``, one process per gloo/NCCL rank). Without care they
outlive their parent: a SIGKILLed ``gpuplan probe`` left fio and the gloo ranks running
for 8-12 s, still loading the machine and holding the scratch file open. Two mechanisms
close that:

* **parent-death signal** (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``): the kernel kills
  the child the moment its parent dies, however the parent died (SIGKILL included).
  :func:`preexec_child` sets it between ``fork`` and ``exec`` of a
  :class:`subprocess.Popen`; :func:`become_probe_child` sets it at the start of a
  ``multiprocessing`` child, which also starts a watchdog thread that exits when the
  parent is gone (belt and braces: the signal is tied to the parent *thread*);
* **own process group**: each child leads its own group, so a Ctrl-C in the terminal
  reaches only ``gpuplan probe`` (which then stops its children in order and keeps what
  they measured), and :func:`kill_children` can kill a child together with anything it
  forked.

Every child started this way is registered; the suite calls :func:`kill_children` on any
exit (normal, exception, SIGINT/SIGTERM), and an ``atexit`` hook does it too.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "become_probe_child",
    "forget_child",
    "kill_children",
    "kill_group",
    "preexec_child",
    "register_child",
    "run_child",
    "set_parent_death_signal",
]

_PR_SET_PDEATHSIG = 1
_WATCHDOG_PERIOD_S = 0.5

_lock = threading.Lock()
_children: set[int] = set()  # process-group ids (= pids of the group leaders)


@functools.cache
def _prctl() -> Any:
    """libc's ``prctl``, looked up once in the parent: a child between fork and exec must
    not ``dlopen`` (another thread of the parent may have held the loader's lock)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux only).

    Returns whether it could be set (False on other systems, where the watchdog of
    :func:`become_probe_child` and :func:`kill_children` remain).
    """
    prctl = _prctl()
    return prctl is not None and int(prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0


def preexec_child(parent_pid: int) -> Callable[[], None]:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: own process group, dies with us.

    It runs in the child between fork and exec, so it does only simple system calls (no
    imports, no locks, no ``dlopen``: ``prctl`` is looked up here, before the fork). A parent id other than ``parent_pid`` once the signal is set means
    the parent died before: the child exits at once.
    """

    _prctl()  # resolved here, in the parent

    def preexec() -> None:
        os.setpgid(0, 0)
        set_parent_death_signal(signal.SIGKILL)
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


def become_probe_child(parent_pid: int) -> None:
    """Call first thing in a ``multiprocessing`` child of the probe run.

    Leads its own process group, gets SIGKILL when the parent dies, and runs a daemon
    thread that exits the process once ``os.getppid()`` is no longer ``parent_pid``.
    """
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(_WATCHDOG_PERIOD_S)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="gpuplan-parent-watchdog", daemon=True).start()


def register_child(pid: int) -> None:
    """Remember the process group led by ``pid`` so that :func:`kill_children` kills it."""
    with _lock:
        _children.add(pid)


def forget_child(pid: int) -> None:
    """The child ``pid`` has been reaped: do not signal its (reusable) id any more."""
    with _lock:
        _children.discard(pid)


def kill_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid`` (nothing happens when it is gone)."""
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)


def kill_children() -> None:
    """SIGKILL the process group of every registered child still around."""
    with _lock:
        groups = list(_children)
        _children.clear()
    for pgid in groups:
        kill_group(pgid)


atexit.register(kill_children)


def run_child(
    cmd: Sequence[str], *, timeout_s: float | None = None, **popen: Any
) -> subprocess.CompletedProcess[str]:
    """:func:`subprocess.run` with text output captured, for a child that dies with us.

    On a timeout, an exception or KeyboardInterrupt the child's whole process group is
    killed and reaped before the exception propagates.

    Raises
    ------
    subprocess.TimeoutExpired
        when the child runs past ``timeout_s``.
    """
    proc = subprocess.Popen(
        list(cmd),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        preexec_fn=preexec_child(os.getpid()),  # setpgid and prctl only: fork-safe
        **popen,
    )
    register_child(proc.pid)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except BaseException:
        kill_group(proc.pid)
        proc.wait()
        raise
    finally:
        # the leader is reaped here; its group may still hold forked helpers
        if proc.returncode is not None:
            kill_group(proc.pid)
            forget_child(proc.pid)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
