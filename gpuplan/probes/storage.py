"""Storage probe: real ``fio`` runs on ``--storage-path`` (and GPUDirect Storage via kvikio).

Workloads (documented with their sizes in docs/probes.md):

* a large sequential write first (checkpoint-like; it also lays the test file out);
* sequential reads (dataset streaming) and random reads (shuffled samples, small files)
  over block sizes and queue depths.

Each point is one ``fio --output-format=json`` process (jobs as threads, so that the
one process dies with the run: :mod:`gpuplan.probes.procs`) on one test file in a fresh
scratch directory under the storage path (:mod:`gpuplan.probes.scratch`), removed
afterwards, or by the next run if this one is killed. Direct I/O (``O_DIRECT``,
bypassing the page cache) is used where the filesystem allows it; where it does not
(tmpfs, some network filesystems) the points say ``direct: false`` and the probe's
``params.direct_reason`` says why, because such reads may come from memory.

Parsing is robust to text before the JSON document (fio prints notes such as "note: both
iodepth >= 1 and synchronous I/O engine are selected" on stdout) and to fio versions that
lack ``bw_bytes`` or ``clat_ns``. ``bw_bytes_per_s`` is fio's ``bw_bytes`` (bytes/s), the
clat percentiles are converted to seconds, and the bandwidth log (one value per 250 ms,
in KiB/s) is kept as ``bw_samples_bytes_per_s`` so that runs can be compared with their
spread.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.errors import EnvironmentProblem, InputError
from gpuplan.probes.base import PointFailed, ProbeContext
from gpuplan.probes.procs import run_child
from gpuplan.probes.scratch import make_scratch_dir

PROBE_VERSION = 1
BW_LOG_MSEC = 250


@dataclass(frozen=True)
class FioPoint:
    rw: str  # read | randread | write | randwrite
    block_size_bytes: int
    iodepth: int
    numjobs: int = 1

    @property
    def label(self) -> str:
        return (
            f"{self.rw} bs={_bs_text(self.block_size_bytes)} qd={self.iodepth} jobs={self.numjobs}"
        )


def _bs_text(size: int) -> str:
    for unit, scale in (("M", 1 << 20), ("k", 1 << 10)):
        if size % scale == 0 and size >= scale:
            return f"{size // scale}{unit}"
    return str(size)


def points(*, quick: bool) -> list[FioPoint]:
    """The sweep: the write first (it lays the file out), then reads."""
    k, m = 1 << 10, 1 << 20
    if quick:
        return [
            FioPoint("write", 1 * m, 16),
            FioPoint("read", 1 * m, 16),
            FioPoint("randread", 4 * k, 1),
            FioPoint("randread", 4 * k, 32),
        ]
    return [
        FioPoint("write", 1 * m, 8),
        FioPoint("write", 4 * m, 32),
        FioPoint("read", 128 * k, 1),
        FioPoint("read", 1 * m, 1),
        FioPoint("read", 1 * m, 8),
        FioPoint("read", 1 * m, 32),
        FioPoint("read", 4 * m, 32),
        FioPoint("randread", 4 * k, 1),
        FioPoint("randread", 4 * k, 32),
        FioPoint("randread", 4 * k, 128),
        FioPoint("randread", 4 * k, 32, numjobs=4),
        FioPoint("randread", 64 * k, 32),
        FioPoint("randread", 1 * m, 32),
    ]


# ----------------------------------------------------------------------------- fio output
def parse_fio_json(text: str) -> dict[str, Any]:
    """The fio JSON document in ``text``, skipping any text before (and after) it.

    Raises
    ------
    ValueError
        when no JSON object with a ``jobs`` list is found.
    """
    decoder = json.JSONDecoder()
    pos = text.find("{")
    while pos != -1:
        try:
            doc, _ = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            pass
        else:
            if isinstance(doc, dict) and isinstance(doc.get("jobs"), list):
                return doc
        pos = text.find("{", pos + 1)
    head = " ".join(text.strip().split())[:200]
    raise ValueError(f"no fio JSON document in the output ({head or 'empty'})")


def _percentiles_s(section: dict[str, Any]) -> dict[str, float | None]:
    """clat percentiles in seconds from ``clat_ns`` (fio >= 3) or ``clat`` (usec, fio 2)."""
    if "clat_ns" in section:
        pct, scale = section["clat_ns"].get("percentile") or {}, 1e-9
    else:
        pct, scale = (section.get("clat") or {}).get("percentile") or {}, 1e-6

    def get(p: float) -> float | None:
        for key, value in pct.items():
            with contextlib.suppress(ValueError):
                if abs(float(key) - p) < 1e-6:
                    return float(value) * scale
        return None

    return {"p50_s": get(50.0), "p90_s": get(90.0), "p99_s": get(99.0), "p99_9_s": get(99.9)}


def measurement_from_fio(doc: dict[str, Any], point: FioPoint) -> dict[str, Any]:
    """A ``StorageMeasurement`` dict from a parsed fio document (first job/group).

    Raises
    ------
    PointFailed
        when fio reports an error for the job or moved no data.
    """
    if not doc.get("jobs"):
        raise PointFailed("fio reported no jobs")
    job = doc["jobs"][0]
    if job.get("error"):
        raise PointFailed(f"fio job error {job['error']}")
    direction = "write" if "write" in point.rw else "read"
    section = job.get(direction) or {}
    bw = section.get("bw_bytes")
    if bw is None and "bw" in section:  # older fio: KiB/s only
        bw = float(section["bw"]) * 1024
    io_bytes = section.get("io_bytes")
    if io_bytes is None and "io_kbytes" in section:
        io_bytes = int(section["io_kbytes"]) * 1024
    if not bw or not io_bytes:
        raise PointFailed(f"fio moved no data ({direction}: bw={bw}, io_bytes={io_bytes})")
    runtime_ms = section.get("runtime") or job.get("job_runtime")
    options = job.get("job options") or {}
    return {
        "rw": point.rw,
        "block_size_bytes": point.block_size_bytes,
        "iodepth": point.iodepth,
        "numjobs": point.numjobs,
        "runtime_s": float(runtime_ms) / 1e3 if runtime_ms else None,
        "bw_bytes_per_s": float(bw),
        "iops": float(section["iops"]) if section.get("iops") is not None else None,
        "io_bytes": int(io_bytes),
        "clat": _percentiles_s(section),
        "direct": str(options.get("direct", "0")) == "1" if options else None,
        "ioengine": options.get("ioengine"),
        "gds": False,
    }


def parse_bw_log(paths: list[Path]) -> list[float]:
    """Bandwidth samples (bytes/s) from fio ``--write_bw_log`` files, summed over jobs.

    Each line is ``time_ms, value, direction, bs, offset``; the value is in KiB/s.
    """
    per_job: list[list[float]] = []
    for path in paths:
        values = []
        for line in path.read_text().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2:
                with contextlib.suppress(ValueError):
                    values.append(float(parts[1]) * 1024)
        per_job.append(values)
    if not per_job:
        return []
    n = min(len(v) for v in per_job)
    return [sum(v[i] for v in per_job) for i in range(n)]


# -------------------------------------------------------------------- the filesystem side
def direct_io_supported(directory: Path) -> tuple[bool, str | None]:
    """Whether files in ``directory`` can be opened and written with ``O_DIRECT``."""
    flag = getattr(os, "O_DIRECT", None)
    if flag is None:
        return False, "O_DIRECT does not exist on this platform"
    probe = directory / ".gpuplan-odirect-probe"
    try:
        fd = os.open(probe, os.O_RDWR | os.O_CREAT | flag, 0o600)
    except OSError as exc:
        return False, f"open(O_DIRECT) failed: {exc.strerror} (filesystem without direct I/O)"
    try:
        buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT requires
        buf.write(b"\0" * 4096)
        try:
            os.write(fd, buf)
        except OSError as exc:
            return False, f"write with O_DIRECT failed: {exc.strerror}"
        finally:
            buf.close()
        return True, None
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            probe.unlink()


def fio_engines(fio: str) -> set[str]:
    try:
        out = run_child([fio, "--enghelp"], timeout_s=10).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    return {line.strip() for line in out.splitlines()[1:] if line.strip()}


def pick_ioengine(engines: set[str]) -> str:
    """libaio (asynchronous, honours iodepth with direct I/O), else io_uring, else psync."""
    for name in ("libaio", "io_uring", "posixaio"):
        if name in engines:
            return name
    return "psync"


def fio_command(
    fio: str,
    point: FioPoint,
    *,
    filename: Path,
    size_bytes: int,
    runtime_s: float,
    ramp_s: float,
    direct: bool,
    ioengine: str,
    bw_log_prefix: Path | None,
) -> list[str]:
    cmd = [
        fio,
        "--name=gpuplan",
        f"--filename={filename}",
        f"--rw={point.rw}",
        f"--bs={point.block_size_bytes}",
        f"--iodepth={point.iodepth}",
        f"--numjobs={point.numjobs}",
        f"--ioengine={ioengine}",
        f"--direct={int(direct)}",
        f"--size={size_bytes}",
        f"--runtime={round(runtime_s * 1000)}ms",
        "--time_based",
        "--group_reporting",
        "--thread",  # jobs as threads of one process, which dies with its parent
        "--randrepeat=0",
        "--norandommap",
        "--output-format=json",
    ]
    if ramp_s > 0:
        cmd.append(f"--ramp_time={round(ramp_s * 1000)}ms")
    if "write" in point.rw:
        cmd.append("--end_fsync=1")  # a checkpoint is only written once it is on disk
    if bw_log_prefix is not None:
        cmd += [f"--write_bw_log={bw_log_prefix}", f"--log_avg_msec={BW_LOG_MSEC}"]
    return cmd


def run_fio_point(
    cmd: list[str], point: FioPoint, *, timeout_s: float, log_dir: Path
) -> dict[str, Any]:
    """Run one fio command and return its ``StorageMeasurement`` dict."""
    for old in log_dir.glob("bw*.log"):
        old.unlink()
    try:
        done = run_child(cmd, timeout_s=timeout_s)
    except subprocess.TimeoutExpired:
        raise PointFailed(f"fio timed out after {timeout_s:.0f} s") from None
    fio_errors = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    try:
        doc = parse_fio_json(done.stdout)
    except ValueError as exc:
        why = fio_errors[0] if fio_errors else str(exc)
        raise PointFailed(f"fio exited {done.returncode}: {why}") from None
    try:
        m = measurement_from_fio(doc, point)
    except PointFailed as exc:
        why = f": {fio_errors[0]}" if fio_errors else ""
        raise PointFailed(f"{exc}{why}") from None
    if done.returncode != 0:
        raise PointFailed(f"fio exited {done.returncode}: {fio_errors[0] if fio_errors else ''}")
    m["bw_samples_bytes_per_s"] = parse_bw_log(sorted(log_dir.glob("bw*.log")))
    return m


def check_storage_path(path: str | os.PathLike[str]) -> Path:
    """The directory to probe, or an InputError that says what is wrong with it."""
    p = Path(path).expanduser()
    if not p.exists():
        raise InputError(
            f"--storage-path {p} does not exist", hint="create it or pick another directory"
        )
    if not p.is_dir():
        raise InputError(
            f"--storage-path {p} is not a directory",
            hint="give a directory on the filesystem to probe",
        )
    if not os.access(p, os.W_OK):
        raise InputError(
            f"--storage-path {p} is not writable", hint="pick a directory you can write to"
        )
    return p


# ----------------------------------------------------------------------------- GDS (kvikio)
def gds_status(gpu: bool) -> tuple[Any | None, str]:
    """(kvikio module or None, what GPUDirect Storage looks like here)."""
    if not gpu:
        return None, "unavailable: no GPU"
    try:
        import kvikio
    except ImportError:
        return None, "unavailable: kvikio is not installed (pip install kvikio-cu12)"
    compat = False
    with contextlib.suppress(Exception):
        # kvikio >= 24.12: defaults.get("compat_mode") (a CompatMode); older: compat_mode()
        getter = getattr(kvikio.defaults, "get", None)
        mode = getter("compat_mode") if getter else kvikio.defaults.compat_mode()
        compat = str(getattr(mode, "name", mode)).upper() in ("ON", "TRUE", "1")
    return (
        kvikio,
        "compat mode (kvikio without cuFile: POSIX reads)" if compat else "available (cuFile)",
    )


def gds_read(
    kvikio: Any, torch: Any, filename: Path, size_bytes: int, chunk_bytes: int
) -> dict[str, Any]:
    """Read ``size_bytes`` of ``filename`` straight into GPU memory with kvikio.CuFile."""
    buf = torch.empty(chunk_bytes, dtype=torch.uint8, device="cuda:0")
    done = 0
    with kvikio.CuFile(str(filename), "r") as f:
        f.read(buf, chunk_bytes, 0)  # warm-up
        torch.cuda.synchronize()
        start = time.perf_counter()
        while done < size_bytes:
            done += int(f.read(buf, min(chunk_bytes, size_bytes - done), done))
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    return {
        "rw": "read",
        "block_size_bytes": chunk_bytes,
        "iodepth": 1,
        "numjobs": 1,
        "runtime_s": elapsed,
        "bw_bytes_per_s": done / elapsed,
        "io_bytes": done,
        "direct": True,
        "ioengine": "kvikio.CuFile",
        "gds": True,
    }


# ------------------------------------------------------------------------------ the probe
def default_size_bytes(*, quick: bool) -> int:
    return (128 << 20) if quick else (4 << 30)


def run(ctx: ProbeContext) -> None:
    rec = ctx.record("storage", PROBE_VERSION)
    fio = shutil.which("fio")
    if fio is None:
        rec.skip("fio is not installed: apt-get install fio (or dnf/brew install fio)")
        return
    base = check_storage_path(ctx.storage_path) if ctx.storage_path else Path(ctx.out_dir)
    base.mkdir(parents=True, exist_ok=True)
    size = ctx.storage_size_bytes or default_size_bytes(quick=ctx.quick)
    free = shutil.disk_usage(base).free
    if free < 2 * size:
        if free < 64 << 20:
            rec.skip(f"only {free >> 20} MiB free under {base}: need at least 64 MiB")
            return
        size = max(16 << 20, (free // 4) >> 20 << 20)
        rec.warn(f"not enough free space for the default size: using {size >> 20} MiB")
    sweep = points(quick=ctx.quick)
    runtime_s, ramp_s = (1.0, 0.0) if ctx.quick else (10.0, 2.0)
    workdir = make_scratch_dir(base, machine_id=ctx.machine_id, run_id=ctx.run_id)
    try:
        direct, reason = direct_io_supported(workdir)
        engine = pick_ioengine(fio_engines(fio))
        kvikio, gds = gds_status(ctx.device.is_gpu)
        rec.params.update(
            path=str(base.resolve()),
            size_bytes=size,
            runtime_s=runtime_s,
            ramp_s=ramp_s,
            ioengine=engine,
            direct=direct,
            direct_reason=reason,
            gds=gds,
        )
        task = ctx.progress.task("storage (fio)", total=len(sweep) + (1 if kvikio else 0))
        filename = workdir / "gpuplan-fio.dat"
        timeout = 60 + 3 * (runtime_s + ramp_s) + size / 20e6
        for point in sweep:
            ctx.check_deadline()
            cmd = fio_command(
                fio,
                point,
                filename=filename,
                size_bytes=size,
                runtime_s=runtime_s,
                ramp_s=ramp_s,
                direct=direct,
                ioengine=engine,
                bw_log_prefix=workdir / "bw",
            )
            try:
                m = run_fio_point(cmd, point, timeout_s=timeout, log_dir=workdir)
            except PointFailed as exc:
                rec.warn(f"{point.label}: {exc}")
            else:
                m["size_bytes"] = size
                rec.add(m)
                ctx.point_done()
            task.advance()
        if kvikio is not None and filename.exists():
            torch = __import__("torch")
            try:
                rec.add(gds_read(kvikio, torch, filename, filename.stat().st_size, 16 << 20))
            except Exception as exc:  # GDS set-up problems are common; keep the fio points
                rec.warn(f"GPUDirect Storage read failed: {type(exc).__name__}: {exc}")
            task.advance()
        rec.ok()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def require_fio() -> str:
    """Path of fio, or EnvironmentProblem saying how to install it."""
    fio = shutil.which("fio")
    if fio is None:
        raise EnvironmentProblem(
            "fio is not installed", hint="apt-get install fio (or dnf/brew install fio)"
        )
    return fio
