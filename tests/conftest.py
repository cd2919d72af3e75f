"""Shared test fixtures. Tests run on CPU by default; `gpu` and `multinode` tests opt in."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


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
        full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
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
