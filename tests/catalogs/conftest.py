"""Catalog tests keep the parsed-catalog cache in a temporary folder, never in ~/.cache."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    cache = tmp_path_factory.mktemp("xdg-cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    # the suite-wide fixture points GPUPLAN_CACHE_DIR elsewhere, and it wins over XDG
    monkeypatch.setenv("GPUPLAN_CACHE_DIR", str(cache / "gpuplan"))
    return cache
