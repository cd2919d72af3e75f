"""Shared test fixtures. Tests run on CPU by default; `gpu` and `multinode` tests opt in.

Isolation: every test gets its own results, output, state and cache directories through
the environment variables of :mod:`gpuplan.paths` (the CLI subprocesses inherit them), so
the suite never reads or writes the checkout's ``results/`` and ``out/``, nor the user's
``~/.local/state`` or ``~/.cache``. At the end of the session the checkout is compared with
what it was at the start (``git status --porcelain`` and the files under ``results/`` and
``out/``): a test that wrote into it fails the run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


# no example database under the checkout (.hypothesis/): property tests run a fixed budget
settings.register_profile("gpuplan", database=None, derandomize=True)
settings.load_profile("gpuplan")

ISOLATED_ENV = {
    "GPUPLAN_RESULTS": "results",
    "GPUPLAN_OUT": "out",
    "GPUPLAN_STATE_DIR": "state",
    "GPUPLAN_CACHE_DIR": "cache",
    "XDG_STATE_HOME": "xdg-state",
    "XDG_CACHE_HOME": "xdg-cache",
    "MPLCONFIGDIR": "mpl",
}


def _checkout_state() -> tuple[str, frozenset[tuple[str, int, int]]]:
    """``git status --porcelain`` plus (path, size, mtime) of every file the tool writes by
    default under the checkout (``results/``, ``out/``: ignored by git, so listed here)."""
    try:
        status = subprocess.run(
            ["git", "status", "--porcelain"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        status = ""
    files = set()
    for top in ("results", "out"):
        for path in (REPO / top).rglob("*"):
            if path.is_file():
                st = path.stat()
                files.add((str(path.relative_to(REPO)), st.st_size, st.st_mtime_ns))
    return status, frozenset(files)


def pytest_configure(config: pytest.Config) -> None:
    """Session-wide defaults for the same variables, so that module- and session-scoped
    fixtures (set up before any per-test fixture) are isolated too."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="gpuplan-session-"))
    config.stash[_SESSION_ROOT_KEY] = root
    for name, sub in ISOLATED_ENV.items():
        os.environ[name] = str(root / sub)


def pytest_unconfigure(config: pytest.Config) -> None:
    root = config.stash.get(_SESSION_ROOT_KEY, None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_CHECKOUT_KEY] = _checkout_state()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_CHECKOUT_KEY, None)
    if before is None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    after = _checkout_state()
    if after == before:
        return
    lines = sorted(set(after[0].splitlines()) ^ set(before[0].splitlines()))
    lines += sorted(f"{p} (size {n}, mtime {t})" for p, n, t in after[1] ^ before[1])
    sys.stderr.write(
        "\nthe test suite changed the checkout (tests must write only under tmp_path):\n  "
        + "\n  ".join(lines[:40])
        + "\n"
    )
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


_CHECKOUT_KEY = pytest.StashKey[tuple[str, frozenset[tuple[str, int, int]]]]()
_SESSION_ROOT_KEY = pytest.StashKey[Path]()


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Point every default path of gpuplan (and matplotlib's config) at a fresh folder."""
    root = tmp_path_factory.mktemp("gpuplan-home")
    for name, sub in ISOLATED_ENV.items():
        monkeypatch.setenv(name, str(root / sub))
    return root


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    need_gpu = [it for it in items if "gpu" in it.keywords]
    if need_gpu and not _has_cuda():
        skip = pytest.mark.skip(
            reason="needs a CUDA/ROCm GPU (run tests/gpu/run.sh on a GPU machine)"
        )
        for it in need_gpu:
            it.add_marker(skip)
    if not os.environ.get("WORLD_SIZE"):
        skip_mn = pytest.mark.skip(reason="multinode: run under torchrun across nodes")
        for it in items:
            if "multinode" in it.keywords:
                it.add_marker(skip_mn)


@pytest.fixture
def run_cli():
    """Run ``gpuplan ARGS`` in a subprocess: returns CompletedProcess (text)."""

    def _run(*args: str, timeout: float = 300, cwd: Path | None = None, env: dict | None = None):
        # the checkout first; a PYTHONPATH already set (packages added beside the
        # interpreter's, as on a GPU machine without a venv) is kept after it
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
        full_env = {**os.environ, "PYTHONPATH": path, **(env or {})}
        return subprocess.run(
            [sys.executable, "-m", "gpuplan", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd or REPO,
            env=full_env,
        )

    return _run


@pytest.fixture
def fio_path() -> str:
    path = shutil.which("fio")
    if path is None:
        pytest.fail("fio is not installed: run scripts/setup.sh (apt-get install fio)")
    return path
