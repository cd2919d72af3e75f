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
    # one job and one file per GPU (1 here, no GPU), and a 2-writer checkpoint
    ckpt = [m for m in result.measurements if m["kind"] == "checkpoint"]
    assert len(ckpt) == 1 and ckpt[0]["numjobs"] == 2 and ckpt[0]["rw"] == "write"
    assert ckpt[0]["io_bytes"] == 2 * (16 << 20)  # each writer wrote its whole file once
    assert result.params["file_per_job"] is True and result.params["checkpoint_writers"] == 2
    assert result.params["ioengine"] in ("io_uring", "libaio", "posixaio", "psync")
    assert all(m["ioengine"] == result.params["ioengine"] for m in result.measurements)
    assert all(m["gds"] is False for m in result.measurements)


def test_one_file_per_job_and_a_checkpoint_that_writes_each_file_once(tmp_path, fio_path):
    from gpuplan.probes.storage import PER_GPU

    point = FioPoint("write", 1 << 20, 4, PER_GPU).resolved(3, 3)
    assert point.numjobs == 3
    cmd = fio_command(
        fio_path,
        point,
        directory=tmp_path,
        size_bytes=4 << 20,
        runtime_s=0.3,
        ramp_s=0,
        direct=False,
        ioengine="psync",
        bw_log_prefix=None,
    )
    run_fio_point(cmd, point, timeout_s=60, log_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.glob("gpuplan.*.dat")) == [
        "gpuplan.0.dat",
        "gpuplan.1.dat",
        "gpuplan.2.dat",
    ]
    ckpt = FioPoint("write", 1 << 20, 4, kind="checkpoint").resolved(3, 4)
    cmd = fio_command(
        fio_path,
        ckpt,
        directory=tmp_path,
        size_bytes=2 << 20,
        runtime_s=5,
        ramp_s=0,
        direct=False,
        ioengine="psync",
        bw_log_prefix=None,
    )
    assert "--time_based" not in cmd and "--end_fsync=1" in cmd
    m = run_fio_point(cmd, ckpt, timeout_s=60, log_dir=tmp_path)
    assert m["kind"] == "checkpoint" and m["numjobs"] == 4
    assert m["io_bytes"] == 4 * (2 << 20)
    assert len(list(tmp_path.glob("ckpt.*.dat"))) == 4


def test_io_uring_is_used_where_the_kernel_allows_it(tmp_path, fio_path):
    from gpuplan.probes.storage import fio_engines, working_ioengine

    engines = fio_engines(fio_path)
    engine, note = working_ioengine(fio_path, engines, tmp_path, direct=False)
    if "io_uring" in engines:
        assert engine == "io_uring" or (note and "io_uring failed" in note)
    assert engine in ("io_uring", "libaio", "posixaio", "psync")
    # an engine fio does not have is never picked
    assert working_ioengine(fio_path, {"no-such"}, tmp_path, direct=False) == ("psync", None)
    assert list(tmp_path.iterdir()) == []


def test_page_cache_sizing_without_direct_io():
    from gpuplan.probes.storage import file_size

    gib = 1 << 30
    size, exceeds, warn = file_size(
        None, quick=False, direct=False, files=8, free_bytes=200 * gib, memory_bytes=64 * gib
    )
    assert size * 8 >= 1.25 * 64 * gib and exceeds is True and warn is None
    # not enough room: half the free space, and it says so
    size, exceeds, warn = file_size(
        None, quick=False, direct=False, files=8, free_bytes=40 * gib, memory_bytes=64 * gib
    )
    assert size * 8 <= 20 * gib and exceeds is False and "free space" in warn
    # an explicit size, a quick run or direct I/O: as asked
    assert (
        file_size(
            gib, quick=False, direct=False, files=8, free_bytes=100 * gib, memory_bytes=64 * gib
        )[0]
        == gib
    )
    assert (
        file_size(
            None, quick=True, direct=False, files=1, free_bytes=100 * gib, memory_bytes=64 * gib
        )[0]
        == 128 << 20
    )
    assert (
        file_size(
            None, quick=False, direct=True, files=8, free_bytes=100 * gib, memory_bytes=64 * gib
        )[1]
        is None
    )


class _FakeCuFile:
    """kvikio.CuFile at the edge (no GPU, no cuFile here): POSIX reads into a CPU tensor,
    and the per-file answer kvikio gives (``is_compat_mode_preferred``) when it has one."""

    def __init__(self, path, mode, compat_preferred):
        self.fd = os.open(path, os.O_RDONLY)
        if compat_preferred is not None:
            self.is_compat_mode_preferred = lambda: compat_preferred

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        os.close(self.fd)

    def read(self, buf, size, offset):
        data = os.pread(self.fd, size, offset)
        buf[: len(data)].numpy()[:] = memoryview(data)
        return len(data)


def _fake_kvikio(compat_preferred, mode="AUTO"):
    import types

    return types.SimpleNamespace(
        CuFile=lambda path, m: _FakeCuFile(path, m, compat_preferred),
        defaults=types.SimpleNamespace(get=lambda key: mode),
    )


@pytest.mark.parametrize(
    ("compat_preferred", "mode", "gds"),
    [(True, "AUTO", False), (False, "AUTO", True), (None, "AUTO", False), (None, "OFF", True)],
)
def test_gds_is_reported_only_when_this_file_really_used_cufile(
    tmp_path, compat_preferred, mode, gds
):
    import torch

    from gpuplan.probes.storage import gds_read

    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(3 << 20))
    m = gds_read(_fake_kvikio(compat_preferred, mode), torch, f, 3 << 20, 1 << 20, device="cpu")
    assert m["gds"] is gds
    assert m["io_bytes"] == 3 << 20
    if gds:
        assert m["ioengine"] == "kvikio.CuFile" and m["kind"] == "gds"
    else:
        assert m["ioengine"] == "kvikio.CuFile (POSIX compat)" and m["kind"] == "kvikio-compat"
        assert m["direct"] is None
    if compat_preferred is None and mode == "AUTO":
        assert m["gds_check"].startswith("unverified")


def test_gds_status_names_compat_mode():
    import sys

    from gpuplan.probes.storage import gds_status

    assert gds_status(False) == (None, "unavailable: no GPU")
    for mode, words in (("ON", "not GDS"), ("AUTO", "checked per file")):
        sys.modules["kvikio"] = _fake_kvikio(None, mode)
        try:
            _, text = gds_status(True)
        finally:
            del sys.modules["kvikio"]
        assert words in text


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
