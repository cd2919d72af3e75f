"""GPU-to-GPU copy matrix: every ordered pair, bidirectional pairs, peer access, flagged pairs.

The GPUs are faked at the torch.cuda edge (``_fakecuda``: no GPU here; a copy advances a
fake clock by bytes / the pair's bandwidth), so each pair's figure is known exactly; the
probe, timing and flagging code is the real one.
"""

from __future__ import annotations

import pytest

from gpuplan.probes import p2p
from gpuplan.probes.base import DeviceInfo, ProbeContext
from gpuplan.probes.timing import TimingConfig
from gpuplan.results.schema import ProbeResult

from ._fakecuda import FakeCudaTorch

FAST = TimingConfig(warmups=1, min_sample_s=0.0, samples=3, min_samples=3)
NVLINK = 400e9
SLOW = 0.6 * NVLINK  # a pair that lost links (or goes through the host)


def _fake(monkeypatch, n: int) -> FakeCudaTorch:
    def bw(i: int, j: int) -> float:
        return SLOW if {i, j} == {0, 2} else NVLINK

    torch = FakeCudaTorch(
        count=n, host_bw=[50e9] * n, peer_bw=bw, peer_access=lambda i, j: {i, j} != {0, 2}
    )
    monkeypatch.setattr(p2p, "import_torch", lambda: torch)
    monkeypatch.setattr(p2p, "timer_for", torch.timer)
    monkeypatch.setattr(p2p, "WallTimer", torch.timer)
    return torch


def test_matrix_of_four_gpus_flags_the_slow_pair(monkeypatch):
    torch = _fake(monkeypatch, 4)
    ctx = ProbeContext(
        device=DeviceInfo(kind="cuda", count=4, vendor="nvidia"), quick=True, timing=FAST
    )
    p2p.run(ctx)
    (rec,) = ctx.recorders
    result = ProbeResult.model_validate(rec.as_dict())
    assert result.status == "ok" and result.params["flag_fraction"] == p2p.FLAG_FRACTION
    uni = [m for m in result.measurements if m["mode"] == "unidirectional"]
    bi = [m for m in result.measurements if m["mode"] == "bidirectional"]
    assert {(m["src"], m["dst"]) for m in uni} == {
        (i, j) for i in range(4) for j in range(4) if i != j
    }
    assert {(m["src"], m["dst"]) for m in bi} == {
        (i, j) for i in range(4) for j in range(4) if i < j
    }
    for m in uni:
        slow = {m["src"], m["dst"]} == {0, 2}
        assert m["bytes_per_s"] == pytest.approx(SLOW if slow else NVLINK, rel=1e-9)
        assert m["peer_access"] is (not slow)
        assert m["below_median"] is slow
    for m in bi:
        slow = {m["src"], m["dst"]} == {0, 2}
        # the fake serialises the two directions: both directions' bytes in the time of two copies
        assert m["bytes_moved"] == 2 * m["size_bytes"]
        assert m["bytes_per_s"] == pytest.approx(SLOW if slow else NVLINK, rel=1e-9)
        assert m["below_median"] is slow and m["median_fraction"] == pytest.approx(
            SLOW / NVLINK if slow else 1.0
        )
    assert len(result.warnings) == 3  # 0->2, 2->0 and 0<->2
    assert all("no peer access" in w and "60%" in w for w in result.warnings)
    # every copy of the matrix was a device-to-device copy
    assert all(s.startswith("cuda") and d.startswith("cuda") for s, d, _ in torch.copies)


def test_flagging_is_per_mode_and_relative_to_the_median():
    rows = [
        {"mode": "unidirectional", "src": 0, "dst": 1, "bytes_per_s": 100.0},
        {"mode": "unidirectional", "src": 1, "dst": 0, "bytes_per_s": 95.0},
        {"mode": "unidirectional", "src": 0, "dst": 2, "bytes_per_s": 89.0},
        {"mode": "bidirectional", "src": 0, "dst": 1, "bytes_per_s": 89.0},
    ]
    warnings = p2p.flag_pairs(rows, fraction=0.9)
    # one direction: median 95, and 89 >= 0.9 x 95; both ways: one pair, its own median
    assert [r["below_median"] for r in rows] == [False, False, False, False]
    assert warnings == []
    rows[2]["bytes_per_s"] = 85.0  # 85 < 0.9 x 95
    warnings = p2p.flag_pairs(rows, fraction=0.9)
    assert [r["below_median"] for r in rows] == [False, False, True, False]
    assert len(warnings) == 1 and "GPU 0->2" in warnings[0]


@pytest.mark.parametrize(("kind", "count", "why"), [("cpu", 0, "no GPU"), ("cuda", 1, "one GPU")])
def test_skipped_without_a_pair(monkeypatch, kind, count, why):
    _fake(monkeypatch, max(count, 1))
    ctx = ProbeContext(device=DeviceInfo(kind=kind, count=count))
    p2p.run(ctx)
    (rec,) = ctx.recorders
    assert rec.status == "skipped" and why in rec.error
