"""Where gpuplan reads and writes by default: one place for every default path.

Each default can be moved by an environment variable, so that a test suite (or a user with
several checkouts) never touches the working directory's ``results/`` and ``out/``, the
user's state (``~/.local/state``) or cache (``~/.cache``):

=====================  ==========================================  ========================
variable               default                                     holds
=====================  ==========================================  ========================
``GPUPLAN_RESULTS``    ``results`` (relative to the working dir)   probe runs, one per file
``GPUPLAN_OUT``        ``out``                                     plans, reports, artifacts
``GPUPLAN_STATE_DIR``  ``$XDG_STATE_HOME/gpuplan`` (``~/.local/     upload resume state,
                       state/gpuplan``)                            probe lock
``GPUPLAN_CACHE_DIR``  ``$XDG_CACHE_HOME/gpuplan`` (``~/.cache/     parsed-catalog cache
                       gpuplan``)
=====================  ==========================================  ========================

The functions read the environment on every call (no caching), so a process that changes
a variable sees the new place at once.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "cache_dir",
    "default_calibration_path",
    "out_dir",
    "results_dir",
    "state_dir",
]


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def results_dir() -> Path:
    """Directory of probe result files (``$GPUPLAN_RESULTS``, default ``results``)."""
    return _env_path("GPUPLAN_RESULTS") or Path("results")


def out_dir() -> Path:
    """Directory for plans, reports and artifacts (``$GPUPLAN_OUT``, default ``out``)."""
    return _env_path("GPUPLAN_OUT") or Path("out")


def state_dir() -> Path:
    """Per-user state (``$GPUPLAN_STATE_DIR``, else ``$XDG_STATE_HOME/gpuplan``)."""
    explicit = _env_path("GPUPLAN_STATE_DIR")
    if explicit is not None:
        return explicit
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpuplan"


def cache_dir() -> Path:
    """Per-user cache (``$GPUPLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpuplan``)."""
    explicit = _env_path("GPUPLAN_CACHE_DIR")
    if explicit is not None:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpuplan"


def default_calibration_path() -> Path:
    """Where ``gpuplan calibrate`` writes without ``--out``: beside the plans, never among
    the result files (a loader of ``results/`` must only meet probe runs)."""
    return out_dir() / "calibration.json"
