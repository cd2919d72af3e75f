"""A benchmark that misses its target exits non-zero (and one that meets it exits 0).

The measurements themselves are replaced by fixed figures here: what is under test is the
verdict -> exit-code mapping that `python -m benchmarks` sums up as met/MISSED, which the
CI machine must not re-time (benchmarks are run with `make bench`, not in the suite).
"""

from __future__ import annotations

import pytest

import benchmarks.catalog_load as catalog_load
import benchmarks.probe_fidelity as probe_fidelity
import benchmarks.schedule_philly as schedule_philly


def _fidelity(ratio: float) -> dict:
    point = {"ratio": ratio, "best_ratio": ratio, "label": "fixed"}
    return {
        "matmul": {
            **point,
            "shape": {"m": 8, "n": 8, "k": 8},
            "probe_flops_per_s": 1e9,
            "numpy_flops_per_s": 1e9,
        },
        "copy": {
            **point,
            "size_bytes": 1 << 20,
            "probe_bytes_per_s": 1e9,
            "numpy_bytes_per_s": 1e9,
        },
        "rounds": 1,
        "threads": {"torch": 1, "numpy": 1},
        "meets_target": ratio >= probe_fidelity.TARGET_RATIO,
    }


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_probe_fidelity_exit_code_follows_the_target(monkeypatch, fmt, capsys):
    monkeypatch.setattr(probe_fidelity, "run", lambda rounds: _fidelity(0.5))
    assert probe_fidelity.main(["--format", fmt]) == 1
    monkeypatch.setattr(probe_fidelity, "run", lambda rounds: _fidelity(1.0))
    assert probe_fidelity.main(["--format", fmt]) == 0


def test_catalog_load_exit_code_follows_the_target(monkeypatch, capsys):
    figures = {"import": 0.01, "cached": 0.0, "resolve": 0.0, "rows": 1}
    slow = {**figures, "load": catalog_load.TARGET_LOAD_S * 2}
    fast = {**figures, "load": catalog_load.TARGET_LOAD_S / 2}
    monkeypatch.setattr(catalog_load, "run", lambda: slow)
    assert catalog_load.main() == 1
    monkeypatch.setattr(catalog_load, "run", lambda: fast)
    assert catalog_load.main() == 0


def test_schedule_philly_exit_code_follows_the_target(monkeypatch, capsys):
    import gpuplan.scheduling as scheduling

    real = scheduling.load_philly
    monkeypatch.setattr(scheduling, "load_philly", lambda: real(limit=300))
    args = ["--nodes", "4", "--policies", "fifo", "--curve", ""]
    monkeypatch.setattr(schedule_philly, "TARGET_S", -1.0)  # nothing can meet it
    assert schedule_philly.main(args) == 1
    monkeypatch.setattr(schedule_philly, "TARGET_S", 1e9)
    assert schedule_philly.main(args) == 0
