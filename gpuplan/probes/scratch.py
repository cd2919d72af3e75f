"""Scratch space of a probe run: named after its owner, removed on exit or by the next run.

The storage probe writes a test file as large as the run asks (128 MiB quick, 4 GiB by
default). It lives in a directory named ::

    .gpuplan-scratch-<machine_id>-<pid>-<run_id[:8]>-<random>

under ``--storage-path`` (default: ``--out``), removed in a ``finally`` when the probe
ends. A run that is SIGKILLed cannot remove it, so each run, once it holds the probe lock
(:mod:`gpuplan.results.runlock`), removes every scratch directory of *its own machine*
that it does not own: holding the lock proves that no other probe run of this machine is
alive, so such a directory belongs to a dead run. Directories of other machines (a shared
filesystem) are left alone, since this machine's lock says nothing about them.

The same sweep removes the temporary files of an atomic result write (``.<name>.json.
<random>.tmp``) that a killed run left in its own ``<results>/<machine_id>/`` folder, and
the ``.gpuplan-storage-<random>`` folders of gpuplan 0.1 (which named no owner) once
they have not changed for :data:`LEGACY_STALE_S`: a live run rewrites its fio logs in
that folder every few seconds.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from gpuplan.results.store import safe_name

__all__ = ["LEGACY_PREFIX", "SCRATCH_PREFIX", "make_scratch_dir", "remove_stale"]

SCRATCH_PREFIX = ".gpuplan-scratch-"
LEGACY_PREFIX = ".gpuplan-storage-"
LEGACY_STALE_S = 3600.0
_NAME = re.compile(r"^\.gpuplan-scratch-(?P<machine>.+)-(?P<pid>\d+)-(?P<run>[^-]+)-[^-]+$")


def make_scratch_dir(base: Path, *, machine_id: str, run_id: str) -> Path:
    """A fresh scratch directory under ``base`` carrying this process's id and run id."""
    prefix = f"{SCRATCH_PREFIX}{safe_name(machine_id)}-{os.getpid()}-{safe_name(run_id)[:8]}-"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def _owner(name: str) -> tuple[str, int] | None:
    m = _NAME.match(name)
    return (m.group("machine"), int(m.group("pid"))) if m else None


def remove_stale(
    bases: Iterable[Path | str | None], *, machine_id: str, results_root: Path | str | None
) -> list[Path]:
    """Remove what dead probe runs of this machine left behind; return what was removed.

    Call only while holding the probe lock. Parameters: ``bases`` are the directories a
    scratch directory may be in (``--out``, ``--storage-path``); ``results_root`` is the
    result folder, whose ``<machine_id>/`` sub-folder is cleared of write temporaries.
    """
    me, now = os.getpid(), time.time()
    machine = safe_name(machine_id)
    removed: list[Path] = []
    seen: set[Path] = set()
    for base in bases:
        if base is None:
            continue
        base = Path(base)
        if base in seen or not base.is_dir():
            continue
        seen.add(base)
        with contextlib.suppress(OSError):
            for entry in base.iterdir():
                if entry.name.startswith(LEGACY_PREFIX):
                    if now - entry.lstat().st_mtime < LEGACY_STALE_S:
                        continue
                else:
                    owner = _owner(entry.name)
                    if owner is None or owner[0] != machine or owner[1] == me:
                        continue
                shutil.rmtree(entry, ignore_errors=True)
                if not entry.exists():
                    removed.append(entry)
    if results_root is not None:
        folder = Path(results_root) / machine
        with contextlib.suppress(OSError):
            for entry in folder.glob(".*.json.*.tmp"):
                with contextlib.suppress(OSError):
                    entry.unlink()
                    removed.append(entry)
    return removed
