"""Storage probe: real ``fio`` runs on ``--storage-path`` (and GPUDirect Storage via kvikio).

Workloads (documented with their sizes in docs/probes.md), the way AI data pipelines and
checkpoints use storage:

* one job and one file per GPU (``numjobs`` = GPUs of the node; each job reads or writes
  its own file, as each data-loader or checkpoint rank does), plus single-job points for
  the latency of one stream;
* a large sequential write first (it also lays the files out);
* sequential reads (dataset streaming) and random reads (shuffled samples, small files)
  over block sizes and queue depths;
* an N-writer checkpoint: N writers (one per GPU, at least 2) each write a new file of
  the test size once, to the end and ``fsync``; ``kind: "checkpoint"``, the aggregate
  bandwidth is the checkpoint's.

Each point is one ``fio --output-format=json`` process (jobs as threads, so that the
one process dies with the run: :mod:`gpuplan.probes.procs`) on test files in a fresh
scratch directory under the storage path (:mod:`gpuplan.probes.scratch`), removed
afterwards, or by the next run if this one is killed. The I/O engine is io_uring where
fio has it and the kernel allows it (a container's seccomp profile may not: then libaio),
checked with a tiny run first. Without direct I/O the files of the default sweep are made
larger than the page cache (1.25x the host memory, free space permitting;
``params.exceeds_page_cache``); a storage server's own cache cannot be seen from here,
so ``--storage-size`` should exceed it. Direct I/O (``O_DIRECT``,
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpuplan.errors import EnvironmentProblem, InputError
from gpuplan.probes.base import PointFailed, ProbeContext
from gpuplan.probes.procs import run_child
from gpuplan.probes.scratch import make_scratch_dir

PROBE_VERSION = 1
BW_LOG_MSEC = 250


#: ``numjobs`` of a point that runs one job per GPU (resolved at run time)
PER_GPU = 0


@dataclass(frozen=True)
class FioPoint:
    rw: str  # read | randread | write | randwrite
    block_size_bytes: int
    iodepth: int
    numjobs: int = 1  # PER_GPU: one job (and file) per GPU
    kind: str = "sweep"  # sweep | checkpoint (each writer writes its file once, not timed)

    @property
    def label(self) -> str:
        jobs = "per-gpu" if self.numjobs == PER_GPU else self.numjobs
        name = "checkpoint " if self.kind == "checkpoint" else ""
        return f"{name}{self.rw} bs={_bs_text(self.block_size_bytes)} qd={self.iodepth} jobs={jobs}"

    def resolved(self, jobs_per_gpu: int, checkpoint_writers: int) -> FioPoint:
        if self.kind == "checkpoint":
            return replace(self, numjobs=checkpoint_writers)
        return replace(self, numjobs=jobs_per_gpu) if self.numjobs == PER_GPU else self


def _bs_text(size: int) -> str:
    for unit, scale in (("M", 1 << 20), ("k", 1 << 10)):
        if size % scale == 0 and size >= scale:
            return f"{size // scale}{unit}"
    return str(size)


def points(*, quick: bool) -> list[FioPoint]:
    """The sweep: the write first (it lays the file out), then reads."""
    k, m = 1 << 10, 1 << 20
    g = PER_GPU
    checkpoint = FioPoint("write", 1 * m, 8, kind="checkpoint")
    if quick:
        return [
            FioPoint("write", 1 * m, 16, g),
            FioPoint("read", 1 * m, 16, g),
            FioPoint("randread", 4 * k, 1),
            FioPoint("randread", 4 * k, 32, g),
            checkpoint,
        ]
    return [
        FioPoint("write", 1 * m, 8, g),
        FioPoint("write", 4 * m, 32, g),
        FioPoint("read", 128 * k, 1),
        FioPoint("read", 1 * m, 1),
        FioPoint("read", 1 * m, 8, g),
        FioPoint("read", 1 * m, 32, g),
        FioPoint("read", 4 * m, 32, g),
        FioPoint("randread", 4 * k, 1),
        FioPoint("randread", 4 * k, 32),
        FioPoint("randread", 4 * k, 32, g),
        FioPoint("randread", 4 * k, 128, g),
        FioPoint("randread", 64 * k, 32, g),
        FioPoint("randread", 1 * m, 32, g),
        checkpoint,
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
        "kind": point.kind,
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


#: asynchronous engines in order of preference: io_uring (what current data loaders and
#: checkpoint libraries use; fewest syscalls), libaio (honours iodepth with direct I/O)
ENGINE_PREFERENCE = ("io_uring", "libaio", "posixaio")


def pick_ioengine(engines: set[str]) -> str:
    """io_uring, else libaio, else posixaio, else psync (the first fio has)."""
    for name in ENGINE_PREFERENCE:
        if name in engines:
            return name
    return "psync"


def working_ioengine(
    fio: str, engines: set[str], workdir: Path, *, direct: bool
) -> tuple[str, str | None]:
    """The preferred engine that a tiny real fio run accepts here, and why a better one
    was passed over (io_uring_setup is refused by some container seccomp profiles)."""
    passed: list[str] = []
    probe = workdir / ".gpuplan-engine-probe"
    for name in [e for e in ENGINE_PREFERENCE if e in engines]:
        cmd = [
            fio,
            "--name=engine-check",
            f"--filename={probe}",
            "--rw=write",
            "--bs=4k",
            "--size=64k",
            f"--ioengine={name}",
            f"--direct={int(direct)}",
            "--thread",
            "--output-format=json",
        ]
        try:
            done = run_child(cmd, timeout_s=30, cwd=workdir)
            ok = done.returncode == 0 and not parse_fio_json(done.stdout)["jobs"][0].get("error")
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            ok, done = False, None
        with contextlib.suppress(OSError):
            probe.unlink()
        if ok:
            return name, ("; ".join(passed) or None)
        why = ""
        if done is not None and done.stderr.strip():
            why = ": " + " ".join(done.stderr.strip().splitlines()[0].split())[:120]
        passed.append(f"{name} failed{why}")
    return "psync", ("; ".join(passed) or None)


def fio_command(
    fio: str,
    point: FioPoint,
    *,
    filename: Path | None = None,
    directory: Path | None = None,
    size_bytes: int,
    runtime_s: float,
    ramp_s: float,
    direct: bool,
    ioengine: str,
    bw_log_prefix: Path | None,
) -> list[str]:
    """The fio command of one point.

    With ``filename`` every job uses that one file; with ``directory`` each job has its
    own file there (``gpuplan.<job>.dat``; ``ckpt.<job>.dat`` for a checkpoint), of
    ``size_bytes`` each. A checkpoint point is not time-based: each writer writes its
    whole file once and fsyncs it.
    """
    if (filename is None) == (directory is None):
        raise ValueError("give exactly one of filename and directory")
    if filename is not None:
        target = [f"--filename={filename}"]
    else:
        stem = "ckpt" if point.kind == "checkpoint" else "gpuplan"
        target = [f"--directory={directory}", f"--filename_format={stem}.$jobnum.dat"]
    cmd = [
        fio,
        "--name=gpuplan",
        *target,
        f"--rw={point.rw}",
        f"--bs={point.block_size_bytes}",
        f"--iodepth={point.iodepth}",
        f"--numjobs={point.numjobs}",
        f"--ioengine={ioengine}",
        f"--direct={int(direct)}",
        f"--size={size_bytes}",
        *(
            []
            if point.kind == "checkpoint"
            else [f"--runtime={round(runtime_s * 1000)}ms", "--time_based"]
        ),
        "--group_reporting",
        "--thread",  # jobs as threads of one process, which dies with its parent
        "--randrepeat=0",
        "--norandommap",
        "--output-format=json",
    ]
    if ramp_s > 0 and point.kind != "checkpoint":
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
        # in the scratch folder: fio takes a job name that names a file in its cwd as the file
        done = run_child(cmd, timeout_s=timeout_s, cwd=log_dir)
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
def _compat_on(mode: Any) -> bool:
    return str(getattr(mode, "name", mode)).upper() in ("ON", "TRUE", "1", "YES")


def gds_status(gpu: bool) -> tuple[Any | None, str]:
    """(kvikio module or None, what GPUDirect Storage looks like here, before any file).

    kvikio's compatibility mode (``KVIKIO_COMPAT_MODE``) decides: ``ON`` is POSIX reads
    into a bounce buffer, ``OFF`` forces cuFile, ``AUTO`` (the default) tries cuFile and
    falls back to POSIX per file when the file, filesystem or driver cannot do GDS. So
    under AUTO nothing is known until a file is opened: :func:`gds_read` checks each file.
    """
    if not gpu:
        return None, "unavailable: no GPU"
    try:
        import kvikio
    except ImportError:
        return None, "unavailable: kvikio is not installed (pip install kvikio-cu12)"
    mode: Any = None
    with contextlib.suppress(Exception):
        # kvikio >= 24.12: defaults.get("compat_mode") (a CompatMode); older: compat_mode()
        getter = getattr(kvikio.defaults, "get", None)
        mode = getter("compat_mode") if getter else kvikio.defaults.compat_mode()
    if _compat_on(mode):
        return kvikio, "compat mode ON (kvikio POSIX reads, not GDS)"
    name = str(getattr(mode, "name", mode)).upper() if mode is not None else "unknown"
    return kvikio, f"kvikio compat mode {name}: checked per file"


def file_uses_gds(handle: Any, kvikio: Any) -> tuple[bool, str]:
    """(whether reads of this open kvikio.CuFile go through cuFile, how that was decided).

    kvikio >= 25.02 answers per file (``CuFile.is_compat_mode_preferred()``, which is
    False only when cuFile will be used for this file); older kvikio has only the global
    setting, which under AUTO cannot tell, so the point is not counted as GDS.
    """
    per_file = getattr(handle, "is_compat_mode_preferred", None)
    if callable(per_file):
        try:
            return (not bool(per_file())), "CuFile.is_compat_mode_preferred()"
        except Exception as exc:
            return False, f"per-file check failed: {type(exc).__name__}"
    mode: Any = None
    with contextlib.suppress(Exception):
        getter = getattr(kvikio.defaults, "get", None)
        mode = getter("compat_mode") if getter else kvikio.defaults.compat_mode()
    name = str(getattr(mode, "name", mode)).upper()
    if name in ("OFF", "FALSE", "0", "NO"):
        return True, "compat mode OFF (cuFile enforced)"
    return False, f"unverified: this kvikio has no per-file check (compat mode {name})"


def gds_read(
    kvikio: Any,
    torch: Any,
    filename: Path,
    size_bytes: int,
    chunk_bytes: int,
    device: str = "cuda:0",
) -> dict[str, Any]:
    """Read ``size_bytes`` of ``filename`` into GPU memory with kvikio.CuFile.

    ``gds`` is True only when this file's reads went through cuFile
    (:func:`file_uses_gds`); a read kvikio served by POSIX is labelled
    ``ioengine: "kvikio.CuFile (POSIX compat)"`` and ``gds: false``.
    """
    buf = torch.empty(chunk_bytes, dtype=torch.uint8, device=device)
    sync = torch.cuda.synchronize if buf.device.type == "cuda" else (lambda: None)
    done = 0
    with kvikio.CuFile(str(filename), "r") as f:
        used, how = file_uses_gds(f, kvikio)
        f.read(buf, chunk_bytes, 0)  # warm-up
        sync()
        start = time.perf_counter()
        while done < size_bytes:
            got = int(f.read(buf, min(chunk_bytes, size_bytes - done), done))
            if got <= 0:
                break
            done += got
        sync()
        elapsed = time.perf_counter() - start
    return {
        "rw": "read",
        "kind": "gds" if used else "kvikio-compat",
        "block_size_bytes": chunk_bytes,
        "iodepth": 1,
        "numjobs": 1,
        "runtime_s": elapsed,
        "bw_bytes_per_s": done / elapsed,
        "io_bytes": done,
        "direct": True if used else None,
        "ioengine": "kvikio.CuFile" if used else "kvikio.CuFile (POSIX compat)",
        "gds": used,
        "gds_check": how,
    }


# ------------------------------------------------------------------------------ the probe
def default_size_bytes(*, quick: bool) -> int:
    """Size of each test file (one per job)."""
    return (128 << 20) if quick else (4 << 30)


def jobs_per_gpu(ctx: ProbeContext) -> tuple[int, int]:
    """(jobs of the per-GPU points, writers of the checkpoint): the node's GPUs, 1 and 2
    on a CPU-only host."""
    gpus = ctx.device.count if ctx.device.is_gpu else 0
    return max(1, gpus), max(2, gpus)


def file_size(
    requested: int | None,
    *,
    quick: bool,
    direct: bool,
    files: int,
    free_bytes: int,
    memory_bytes: int | None,
) -> tuple[int, bool | None, str | None]:
    """(bytes per file, whether the files together exceed the page cache, a warning).

    Direct I/O bypasses the page cache, so the size needs no inflating (``None``: not
    applicable). Without it the default sweep grows the files past 1.25x the host memory
    where half the free space allows; an explicit ``--storage-size`` and quick runs are
    kept as they are. Files never take more than half the free space.

    >>> file_size(None, quick=False, direct=False, files=2, free_bytes=1 << 40, memory_bytes=8 << 30)[:2]
    (5368709120, True)
    >>> file_size(None, quick=False, direct=True, files=2, free_bytes=1 << 40, memory_bytes=8 << 30)[:2]
    (4294967296, None)
    """
    size = requested or default_size_bytes(quick=quick)
    warning = None
    if not direct and requested is None and not quick and memory_bytes:
        wanted = -(-int(1.25 * memory_bytes) // files) >> 20 << 20
        size = max(size, wanted)
    budget = free_bytes // 2
    if size * files > budget:
        shrunk = max(16 << 20, (budget // files) >> 20 << 20)
        warning = f"not enough free space: {files} files of {shrunk >> 20} MiB instead of {size >> 20} MiB"
        size = shrunk
    exceeds = None if direct else (memory_bytes is not None and size * files > memory_bytes)
    return size, exceeds, warning


def run(ctx: ProbeContext) -> None:
    rec = ctx.record("storage", PROBE_VERSION)
    fio = shutil.which("fio")
    if fio is None:
        rec.skip("fio is not installed: apt-get install fio (or dnf/brew install fio)")
        return
    base = check_storage_path(ctx.storage_path) if ctx.storage_path else Path(ctx.out_dir)
    base.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(base).free
    if free < 128 << 20:
        rec.skip(f"only {free >> 20} MiB free under {base}: need at least 128 MiB")
        return
    per_gpu, writers = jobs_per_gpu(ctx)
    sweep = [p.resolved(per_gpu, writers) for p in points(quick=ctx.quick)]
    files = max(p.numjobs for p in sweep if p.kind != "checkpoint")
    runtime_s, ramp_s = (1.0, 0.0) if ctx.quick else (10.0, 2.0)
    workdir = make_scratch_dir(base, machine_id=ctx.machine_id, run_id=ctx.run_id)
    try:
        from gpuplan.probes.inventory import _memory_bytes

        direct, reason = direct_io_supported(workdir)
        # the checkpoint's files are written after the sweep's are removed: the larger
        # of the two sets must fit
        size, exceeds, warning = file_size(
            ctx.storage_size_bytes,
            quick=ctx.quick,
            direct=direct,
            files=max(files, writers),
            free_bytes=free,
            memory_bytes=_memory_bytes(),
        )
        if warning:
            rec.warn(warning)
        engine, engine_note = working_ioengine(fio, fio_engines(fio), workdir, direct=direct)
        kvikio, gds = gds_status(ctx.device.is_gpu)
        rec.params.update(
            path=str(base.resolve()),
            size_bytes=size,
            file_per_job=True,
            jobs_per_gpu_points=per_gpu,
            checkpoint_writers=writers,
            runtime_s=runtime_s,
            ramp_s=ramp_s,
            ioengine=engine,
            ioengine_note=engine_note,
            direct=direct,
            direct_reason=reason,
            exceeds_page_cache=exceeds,
            gds=gds,
        )
        task = ctx.progress.task("storage (fio)", total=len(sweep) + (1 if kvikio else 0))
        timeout = 60 + 3 * (runtime_s + ramp_s) + size * max(files, writers) / 20e6
        for point in sweep:
            ctx.check_deadline()
            if point.kind == "checkpoint":  # room for the checkpoint's fresh files
                for old in workdir.glob("gpuplan.*.dat"):
                    if kvikio is None or old.name != "gpuplan.0.dat":
                        old.unlink()
            cmd = fio_command(
                fio,
                point,
                directory=workdir,
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
        for old in workdir.glob("ckpt.*.dat"):
            old.unlink()
        first = workdir / "gpuplan.0.dat"
        rec.ok()
        if kvikio is not None and first.exists():
            _gds_points(ctx, kvikio, first, gds)
            task.advance()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _gds_points(ctx: ProbeContext, kvikio: Any, filename: Path, gds: str) -> None:
    """kvikio reads as a probe result of their own (``params.transport``), so that GDS and
    POSIX points are never one curve."""
    rec = ctx.record(
        "storage", PROBE_VERSION, transport="kvikio", gds=gds, path=str(filename.parent)
    )
    torch = __import__("torch")
    try:
        m = gds_read(kvikio, torch, filename, filename.stat().st_size, 16 << 20)
    except Exception as exc:  # GDS set-up problems are common; the fio points are kept
        rec.fail(f"kvikio read failed: {type(exc).__name__}: {exc}")
        return
    m["size_bytes"] = filename.stat().st_size
    rec.params["transport"] = "gds" if m["gds"] else "kvikio-posix-compat"
    rec.add(m)
    rec.ok()


def require_fio() -> str:
    """Path of fio, or EnvironmentProblem saying how to install it."""
    fio = shutil.which("fio")
    if fio is None:
        raise EnvironmentProblem(
            "fio is not installed", hint="apt-get install fio (or dnf/brew install fio)"
        )
    return fio
