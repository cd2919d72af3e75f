"""Real fio runs on a temporary file, and the storage probe's handling of its environment."""

from __future__ import annotations

import os

import pytest

from gpuplan.errors import InputError
from gpuplan.probes.base import DeviceInfo, PointFailed, ProbeContext
from gpuplan.probes.storage import (
    FioPoint,
    check_storage_path,
    direct_io_supported,
    fio_command,
    run,
    run_fio_point,
)
from gpuplan.results.schema import ProbeResult


def test_real_fio_run_on_a_temp_file(tmp_path, fio_path):
    point = FioPoint("write", 1 << 20, 4)
    target = tmp_path / "data.bin"
    direct, _ = direct_io_supported(tmp_path)
    cmd = fio_command(
        fio_path,
        point,
        filename=target,
        size_bytes=16 << 20,
        runtime_s=0.5,
        ramp_s=0,
        direct=direct,
        ioengine="psync",
        bw_log_prefix=tmp_path / "bw",
    )
    m = run_fio_point(cmd, point, timeout_s=60, log_dir=tmp_path)
    assert m["bw_bytes_per_s"] > 0
    assert m["io_bytes"] >= 1 << 20  # at least one block went to the file
    assert m["direct"] is direct
    assert target.stat().st_size == 16 << 20
    # bandwidth = bytes / runtime, within fio's rounding of the runtime to milliseconds
    assert m["bw_bytes_per_s"] == pytest.approx(m["io_bytes"] / m["runtime_s"], rel=0.05)

    # read it back, randomly, 4 KiB blocks
    point = FioPoint("randread", 4096, 1)
    cmd = fio_command(
        fio_path,
        point,
        filename=target,
        size_bytes=16 << 20,
        runtime_s=0.5,
        ramp_s=0,
        direct=direct,
        ioengine="psync",
        bw_log_prefix=None,
    )
    m = run_fio_point(cmd, point, timeout_s=60, log_dir=tmp_path)
    assert m["iops"] > 0 and m["clat"]["p50_s"] > 0
    assert m["bw_bytes_per_s"] == pytest.approx(m["iops"] * 4096, rel=0.05)


def test_fio_failure_becomes_a_point_failure(tmp_path, fio_path):
    point = FioPoint("read", 4096, 1)
    cmd = fio_command(
        fio_path,
        point,
        filename=tmp_path / "x",
        size_bytes=1 << 20,
        runtime_s=0.2,
        ramp_s=0,
        direct=False,
        ioengine="no-such-engine",
        bw_log_prefix=None,
    )
    with pytest.raises(PointFailed, match="fio exited"):
        run_fio_point(cmd, point, timeout_s=30, log_dir=tmp_path)


def test_storage_probe_end_to_end_cleans_up(tmp_path, fio_path):
    ctx = ProbeContext(
        device=DeviceInfo(kind="cpu", count=0),
        quick=True,
        storage_path=str(tmp_path),
        storage_size_bytes=16 << 20,
    )
    run(ctx)
    (rec,) = ctx.recorders
    result = ProbeResult.model_validate(rec.as_dict())
    assert result.status == "ok", result.error or result.warnings
    rws = [m["rw"] for m in result.measurements]
    assert rws[0] == "write" and "read" in rws and "randread" in rws
    assert all(m["size_bytes"] == 16 << 20 for m in result.measurements)
    assert result.params["gds"] == "unavailable: no GPU"
    assert result.params["direct"] in (True, False)
    if not result.params["direct"]:
        assert result.params["direct_reason"]
    assert list(tmp_path.iterdir()) == []  # test file and logs removed


def test_missing_fio_is_skipped_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no fio
    ctx = ProbeContext(device=DeviceInfo(kind="cpu", count=0), quick=True, out_dir=str(tmp_path))
    run(ctx)
    (rec,) = ctx.recorders
    assert rec.status == "skipped"
    assert "fio is not installed" in rec.error


def test_direct_io_detection(tmp_path, monkeypatch):
    ok, reason = direct_io_supported(tmp_path)
    assert (reason is None) == ok
    assert not (tmp_path / ".gpuplan-odirect-probe").exists()
    # (tmpfs refused O_DIRECT before Linux 6.6, so no filesystem here reliably does: take
    # the flag away instead, as on platforms without it)
    monkeypatch.delattr(os, "O_DIRECT")
    ok, reason = direct_io_supported(tmp_path)
    assert not ok and "O_DIRECT" in reason


def test_bad_storage_paths_say_what_is_wrong(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        check_storage_path(tmp_path / "nope")
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        check_storage_path(f)
