"""Memory bandwidth probe: copy and triad by array size, from inside the cache to well past it.

The kernels and the byte counts are STREAM's (McCalpin, "Memory Bandwidth and Machine
Balance in Current High Performance Computers", IEEE TCCA Newsletter 1995):

* copy  ``a[:] = b``          moves ``2 * size`` bytes (read b, write a), measured twice:
  ``method: "memcpy"`` is ``a.copy_(b)``, which torch hands to the driver as a device
  memcpy (``cudaMemcpyAsync``/``hipMemcpyAsync``: same dtype, contiguous, one device), and
  ``method: "kernel"`` is ``torch.add(b, 0, out=a)``, an elementwise kernel that reads and
  writes the same bytes, like BabelStream's Copy kernel;
* triad ``a[:] = b + s * c``  moves ``3 * size`` bytes (read b and c, write a).

Write-allocate traffic is not counted, as in STREAM. Sizes grow by x4 from below the
last-level cache to at least 8x (quick) or 16x (default) of it, and on GPUs to at least
1 GiB (quick) / 2 GiB per array, so that the cache knee is visible and the largest points
measure main memory (HBM). The last-level cache is the largest of what torch reports
(``L2_cache_size``: 4 MB on MI300X, whose 256 MB Infinity Cache sits behind it) and the
catalog's ``last_level_cache_bytes``; a point whose array is at least
:data:`PAST_CACHE_FACTOR` times it is marked ``past_cache: true``, and only those measure
HBM (BabelStream sizes its arrays the same way: "at least 4x the size of the largest
cache"). Each point keeps the median (``bytes_per_s``, the contract figure) and the best
sample (``best_bytes_per_s``, the statistic BabelStream and STREAM report).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from gpuplan.catalogs.cache import PAST_CACHE_FACTOR, catalog_llc_bytes
from gpuplan.probes import pergpu
from gpuplan.probes.base import ProbeContext, import_torch, timer_for
from gpuplan.probes.inventory import available_memory_bytes, cpu_llc_bytes
from gpuplan.probes.timing import TimingConfig, measure

#: 2: every point says which device it ran on (``device_index``, ``uuid``, ``pci_bus_id``,
#: ``concurrent``); a ``params.scope: "per_device"`` result holds the per-GPU loop
PROBE_VERSION = 2
_FALLBACK_LLC_BYTES = 32 << 20  # used only when the cache size cannot be read (recorded)
#: smallest "largest array" on GPUs (a sizing choice, not a device figure): past any
#: cache up to 256 MB by 4x even when neither torch nor the catalog knows the cache
GPU_MIN_TOP_BYTES = {True: 1 << 30, False: 2 << 30}  # keyed by quick

_BYTES_PER_CALL = {"copy": 2, "triad": 3}


def sizes(
    llc_bytes: int, *, quick: bool, limit_bytes: int | None, min_top_bytes: int = 0
) -> list[int]:
    """Array sizes (bytes, powers of two, x4 steps; x8 quick) from about ``llc/16`` up to the first
    power of two at or past ``max(8*llc, min_top_bytes)`` (quick) / ``16*llc`` (default).

    ``limit_bytes`` caps one array so that the three triad arrays fit in free memory. When
    the cap leaves no size past the cache (``PAST_CACHE_FACTOR`` x ``llc``), the largest power
    of two within the cap is added if it is past the cache: a host whose last-level cache
    is 480 MiB (a 2-vCPU VM on a large server sees the whole socket's L3) needs 1,920 MiB
    arrays, and the x8 step jumps from 1,024 to 4,096 MiB, over the cap of 3.8 GiB that
    23 GiB of free memory allows; without the added 2,048 MiB the run measured no memory
    bandwidth at all.

    >>> [s >> 20 for s in sizes(32 << 20, quick=True, limit_bytes=None)]
    [2, 16, 128, 256]
    >>> [s >> 20 for s in sizes(32 << 20, quick=False, limit_bytes=None)]
    [2, 8, 32, 128, 512]
    >>> [s >> 20 for s in sizes(256 << 20, quick=True, limit_bytes=None)]  # MI300X
    [16, 128, 1024, 2048]
    >>> [s >> 20 for s in sizes(480 << 20, quick=True, limit_bytes=3923 << 20)]
    [16, 128, 1024, 2048]
    """
    top = max(8 * llc_bytes if quick else 16 * llc_bytes, min_top_bytes)
    step = 8 if quick else 4
    size = 1 << max(12, (llc_bytes // 16).bit_length() - 1)  # power of two <= llc/16
    out = []
    while size < top:
        out.append(size)
        size *= step
    out.append(1 << (top - 1).bit_length())  # the last one: the power of two >= top
    out = sorted(set(out))
    if limit_bytes is not None:
        kept = [s for s in out if s <= limit_bytes]
        past = PAST_CACHE_FACTOR * llc_bytes
        if limit_bytes > 0 and (not kept or max(kept) < past):
            within = 1 << (int(limit_bytes).bit_length() - 1)  # largest power of two <= cap
            if within >= past:
                kept.append(within)
        out = sorted(set(kept)) or [min(out)]
    return out


def device_llc_bytes(
    torch: Any, gpu: bool, *, index: int = 0, catalog_bytes: int | None = None
) -> tuple[int, str]:
    """(last-level cache bytes, where it came from): the largest of torch's L2 size and
    the catalog's last-level cache (MI300X: torch says 4 MB L2, the Infinity Cache is 256 MB)."""
    if gpu:
        props = torch.cuda.get_device_properties(index)
        l2 = getattr(props, "L2_cache_size", None) or getattr(props, "l2_cache_size", None)
        found = []
        if l2:
            found.append((int(l2), "torch.cuda.get_device_properties().L2_cache_size"))
        if catalog_bytes:
            found.append((int(catalog_bytes), "catalog last_level_cache_bytes"))
        if found:
            return max(found)
        return _FALLBACK_LLC_BYTES, "unknown (assumed 32 MiB)"
    llc = cpu_llc_bytes()
    if llc:
        return llc, "sysfs/lscpu"
    return _FALLBACK_LLC_BYTES, "unknown (assumed 32 MiB)"


def run(ctx: ProbeContext) -> None:
    """Copy and triad over :func:`sizes`; one ProbeResult for the device."""
    torch = import_torch()
    gpu = ctx.device.is_gpu
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    llc, llc_source = device_llc_bytes(
        torch, gpu, catalog_bytes=catalog_llc_bytes(ctx.catalog_row(0)) if gpu else None
    )
    if gpu:
        free, _ = torch.cuda.mem_get_info(0)
        limit = free // 4
    else:
        avail = available_memory_bytes()
        limit = avail // 6 if avail else None
    points = sizes(
        llc,
        quick=ctx.quick,
        limit_bytes=limit,
        min_top_bytes=GPU_MIN_TOP_BYTES[ctx.quick] if gpu else 0,
    )
    rec = ctx.record(
        "membw",
        PROBE_VERSION,
        device=str(device),
        dtype="float32",
        llc_bytes=llc,
        llc_source=llc_source,
        past_cache_factor=PAST_CACHE_FACTOR,
        threads=None if gpu else torch.get_num_threads(),
        host_allocation=None if gpu else "numpy (MADV_HUGEPAGE)",
        transparent_hugepage=None if gpu else transparent_hugepage_mode(),
    )
    ops = [("copy", "memcpy"), ("copy", "kernel"), ("triad", "kernel")]
    task = ctx.progress.task("membw", total=len(ops) * len(points))
    timer = timer_for(ctx.device, 0)
    with ctx.power_sampling(rec, [0] if gpu else []):
        for size in points:
            n = size // 4
            try:
                a, b, c = arrays(torch, n, device)
            except _oom(torch) as exc:
                rec.warn(f"{size} bytes: out of memory: {exc}")
                task.advance(len(ops))
                continue
            for op, method in ops:
                ctx.check_deadline()
                point = measure_point(torch, op, a, b, c, timer, ctx.timing, method=method)
                point["past_cache"] = size >= PAST_CACHE_FACTOR * llc
                point.update(pergpu.identity(ctx.accelerators, 0, gpu), concurrent=False)
                if not point.pop("correct"):
                    rec.warn(f"{op} ({method}) {size} bytes: result incorrect")
                rec.add(point)
                task.advance()
                ctx.point_done()
            del a, b, c
            if gpu:
                torch.cuda.empty_cache()
    if any("incorrect" in w for w in rec.warnings):
        rec.fail("; ".join(w for w in rec.warnings if "incorrect" in w))
    else:
        rec.ok()
    past = [s for s in points if s >= PAST_CACHE_FACTOR * llc]
    run_per_device(ctx, torch, max(past or points), llc)


#: what each device runs alone and all together: BabelStream's Copy kernel and the triad
PER_DEVICE_OPS = (("copy", "kernel"), ("triad", "kernel"))


def run_per_device(ctx: ProbeContext, torch: Any, size: int, llc: int) -> None:
    """Copy (kernel) and triad with arrays of ``size`` bytes (the sweep's largest past the
    cache) on every device alone, then on all at once (:mod:`gpuplan.probes.pergpu`):
    one ``ProbeResult`` with ``params.scope: "per_device"``, the spread per op and phase
    in ``params.spread``, an ``outlier`` flag on every point."""
    gpu = ctx.device.is_gpu
    devices = list(range(ctx.device.count)) if gpu else [0]
    if gpu:  # the same size everywhere, or the devices are not compared like for like
        size = min([size] + [_fit(torch.cuda.mem_get_info(i)[0] // 4) for i in devices])
    rec = ctx.record(
        "membw",
        PROBE_VERSION,
        scope="per_device",
        device="cuda:all" if gpu else "cpu:all",
        devices=devices,
        dtype="float32",
        size_bytes=size,
        llc_bytes=llc,
        past_cache_factor=PAST_CACHE_FACTOR,
        concurrency="threads, one stream per device, released by a barrier",
        outlier_threshold=pergpu.OUTLIER_BELOW_MEDIAN,
        threads=None if gpu else torch.get_num_threads(),
    )
    task = ctx.progress.task("membw per GPU", total=2 * len(devices) * len(PER_DEVICE_OPS))

    def measure_on(index: int) -> dict[str, Any]:
        ctx.check_deadline()
        device = torch.device("cuda", index) if gpu else torch.device("cpu")
        out = []
        ident = pergpu.identity(ctx.accelerators, index, gpu)
        if gpu:
            stack: Any = torch.cuda.stream(torch.cuda.Stream(device))
            scope: Any = torch.cuda.device(index)
        else:
            import contextlib

            stack = scope = contextlib.nullcontext()
        with scope, stack:
            a, b, c = arrays(torch, size // 4, device)
            timer = timer_for(ctx.device, index)
            for op, method in PER_DEVICE_OPS:
                point = measure_point(torch, op, a, b, c, timer, ctx.timing, method=method)
                point["past_cache"] = size >= PAST_CACHE_FACTOR * llc
                point.update(ident)
                if not point.pop("correct"):
                    rec.warn(f"{op} ({method}) on device {index}: result incorrect")
                out.append(point)
                task.advance()
            del a, b, c
            if gpu:
                torch.cuda.empty_cache()
        return {"points": out}

    with ctx.power_sampling(rec, devices if gpu else []):
        pergpu.run_phases(ctx, rec, devices, measure_on, value="bytes_per_s", group="op")
    if any("incorrect" in w for w in rec.warnings):
        rec.fail("; ".join(w for w in rec.warnings if "incorrect" in w))
    else:
        rec.ok()


def _fit(limit: int) -> int:
    """The largest power of two at or below ``limit`` bytes."""
    return 1 << max(12, limit.bit_length() - 1)


SCALAR = 3.0


def arrays(torch: Any, n: int, device: Any) -> tuple[Any, Any, Any]:
    """The three float32 arrays of copy/triad: ``a`` = 0 (out), ``b`` = 1, ``c`` = 2.

    Constant fills are cheap (random fills of GiBs are not) and make the check exact. On
    CPUs the memory comes from NumPy, which asks Linux for transparent huge pages
    (``madvise(MADV_HUGEPAGE)``) on large arrays while torch's allocator does not: with
    THP in ``madvise`` mode, 4 KiB pages cost the copy ~10 % in TLB misses (measured on
    this project's CI machine), which is the page size, not the memory, being measured.
    """
    if device.type != "cpu":
        f32 = torch.float32
        return (
            torch.zeros(n, device=device, dtype=f32),
            torch.full((n,), 1.0, device=device, dtype=f32),
            torch.full((n,), 2.0, device=device, dtype=f32),
        )
    import numpy as np

    return (
        torch.from_numpy(np.zeros(n, dtype=np.float32)),
        torch.from_numpy(np.full(n, 1.0, dtype=np.float32)),
        torch.from_numpy(np.full(n, 2.0, dtype=np.float32)),
    )


def transparent_hugepage_mode(
    path: str = "/sys/kernel/mm/transparent_hugepage/enabled",
) -> str | None:
    """The selected THP mode (``always``, ``madvise`` or ``never``), None where unknown."""
    try:
        text = Path(path).read_text(encoding="ascii")
    except OSError:
        return None
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return None


def measure_point(
    torch: Any,
    op: str,
    a: Any,
    b: Any,
    c: Any,
    timer: Any,
    timing: TimingConfig,
    *,
    method: str = "memcpy",
) -> dict[str, Any]:
    """Time ``op`` (copy or triad) on float32 arrays ``a`` (out), ``b``, ``c`` (in: 1.0, 2.0).

    ``method`` of a copy: ``memcpy`` (``a.copy_(b)``, a driver memcpy on GPUs) or ``kernel``
    (``torch.add(b, 0, out=a)``, an elementwise kernel). Returns a ``MembwMeasurement`` dict
    plus ``correct`` (the output checked once).
    """
    kernels = {
        ("copy", "memcpy"): functools.partial(a.copy_, b),
        ("copy", "kernel"): functools.partial(torch.add, b, 0, out=a),
        ("triad", "kernel"): functools.partial(torch.add, b, c, alpha=SCALAR, out=a),
    }
    if op == "triad":
        method = "kernel"
    fn = kernels[(op, method)]
    a.zero_()
    fn()
    expected = 1.0 if op == "copy" else 1.0 + SCALAR * 2.0
    correct = bool((a == expected).all())
    timed = measure(fn, timer, timing)
    size = a.numel() * a.element_size()
    moved = _BYTES_PER_CALL[op] * size
    return {
        "op": op,
        "method": method,
        "size_bytes": size,
        "bytes_moved": moved,
        **timed.as_dict(),
        "bytes_per_s": moved / timed.median_s,
        "best_bytes_per_s": moved / timed.min_s,
        "correct": correct,
    }


def _oom(torch: Any) -> tuple[type[BaseException], ...]:
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (MemoryError, oom) if oom is not None else (MemoryError,)
