"""GPU-to-GPU copy bandwidth matrix (NVLink/xGMI or PCIe peer-to-peer), one and both directions.

For every ordered pair (src, dst) of visible GPUs a device buffer is copied from src to dst
(``dst.copy_(src)``: torch issues a peer copy on the source device's stream, through the
copy engines, as nvbandwidth's ``device_to_device_memcpy_read_ce`` does with
``cuMemcpyAsync``; github.com/NVIDIA/nvbandwidth ``testcases_ce.cpp``), and for every
unordered pair both directions are copied at once on two streams (nvbandwidth's
``device_to_device_bidirectional_memcpy_ce``). ``peer_access`` is
``torch.cuda.can_device_access_peer(src, dst)``: without it the driver stages the copy
through host memory, which a matrix shows as a slow pair.

``bytes_per_s`` = bytes copied / median time of one copy; for a bidirectional pair it counts
both directions. A pair below :data:`FLAG_FRACTION` of the median of its kind (one direction
or both) is flagged ``below_median`` and named in the record's warnings.

One size per pair (256 MiB quick, 1 GiB default): large enough that the link, not the launch,
sets the rate. On CPUs or with one GPU there is no pair and the probe is ``skipped``.
"""

from __future__ import annotations

import statistics
from typing import Any

from gpuplan.probes.base import ProbeContext, import_torch, timer_for
from gpuplan.probes.timing import WallTimer, measure

PROBE_VERSION = 1

#: A pair below this fraction of the matrix median is flagged. On an NVSwitch or xGMI
#: full-mesh node every pair has the same links, and copy-engine runs repeat within a few
#: per cent, so 0.9 catches a pair that lost two of H100's 18 NVLinks (-11 %) or fell back to
#: PCIe/host staging (several times slower) without flagging run-to-run noise. On a PCIe
#: node, pairs across CPU sockets are legitimately slower and are flagged too: the warning
#: names them, and the buyer decides.
FLAG_FRACTION = 0.9


def size_bytes(*, quick: bool) -> int:
    return 256 << 20 if quick else 1 << 30


def planned_budget(quick: bool, gpus: int, timing: Any) -> Any:
    """The suite's plan (gpuplan.probes.budget): every ordered pair, then every unordered one."""
    from gpuplan.probes.budget import SETUP_S, ProbeBudget, point_s

    if gpus < 2:
        return ProbeBudget("p2p", 0.0, 0, "skipped below two GPUs")
    points = gpus * (gpus - 1) + gpus * (gpus - 1) // 2
    return ProbeBudget(
        "p2p",
        SETUP_S + points * point_s(timing),
        points,
        f"{gpus * (gpus - 1)} ordered pairs one way, {gpus * (gpus - 1) // 2} pairs both ways",
    )


def flag_pairs(measurements: list[dict[str, Any]], fraction: float = FLAG_FRACTION) -> list[str]:
    """Set ``below_median`` on every measurement (per mode); return a warning per flagged pair."""
    warnings: list[str] = []
    for mode in ("unidirectional", "bidirectional"):
        rows = [m for m in measurements if m["mode"] == mode and m.get("bytes_per_s")]
        if not rows:
            continue
        median = statistics.median(m["bytes_per_s"] for m in rows)
        for m in rows:
            m["median_fraction"] = m["bytes_per_s"] / median if median else None
            m["below_median"] = bool(median and m["bytes_per_s"] < fraction * median)
            if m["below_median"]:
                arrow = "->" if mode == "unidirectional" else "<->"
                warnings.append(
                    f"GPU {m['src']}{arrow}{m['dst']} {mode} copy at "
                    f"{m['bytes_per_s'] / 1e9:.1f} GB/s is {m['median_fraction']:.0%} of the "
                    f"median {median / 1e9:.1f} GB/s (flagged below {fraction:.0%})"
                    + ("" if m.get("peer_access") is not False else "; no peer access")
                )
    return warnings


def run(ctx: ProbeContext) -> None:
    torch = import_torch()
    n = ctx.device.count if ctx.device.is_gpu else 0
    size = size_bytes(quick=ctx.quick)
    if n < 2:
        rec = ctx.record("p2p", PROBE_VERSION, device="cpu" if n == 0 else "cuda:0")
        rec.skip(
            "no GPU: peer-to-peer bandwidth needs two or more GPUs"
            if n == 0
            else "one GPU: there is no peer to copy to"
        )
        return
    rec = ctx.record(
        "p2p", PROBE_VERSION, device="all", devices=n, size_bytes=size, flag_fraction=FLAG_FRACTION
    )
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    task = ctx.progress.task("p2p", total=len(pairs) + len(pairs) // 2)
    devices = [torch.device("cuda", i) for i in range(n)]
    src = [torch.empty(size, dtype=torch.uint8, device=d) for d in devices]
    dst = [torch.empty(size, dtype=torch.uint8, device=d) for d in devices]
    for buf in src:
        buf.fill_(1)
    streams = [torch.cuda.Stream(device=d) for d in devices]
    access = {(i, j): _peer_access(torch, i, j) for i, j in pairs}
    with ctx.power_sampling(rec, list(range(n))):
        for i, j in pairs:
            ctx.check_deadline()

            def one(i: int = i, j: int = j) -> None:
                dst[j].copy_(src[i], non_blocking=True)

            with torch.cuda.device(i):
                timed = measure(one, timer_for(ctx.device, i), ctx.timing)
            rec.add(_row("unidirectional", i, j, access[(i, j)], size, size, timed))
            task.advance()
            ctx.point_done()
        for i, j in [(i, j) for i, j in pairs if i < j]:
            ctx.check_deadline()

            def both(i: int = i, j: int = j) -> None:
                with torch.cuda.stream(streams[i]):
                    dst[j].copy_(src[i], non_blocking=True)
                with torch.cuda.stream(streams[j]):
                    dst[i].copy_(src[j], non_blocking=True)

            def sync(i: int = i, j: int = j) -> None:
                torch.cuda.synchronize(devices[i])
                torch.cuda.synchronize(devices[j])

            timed = measure(both, WallTimer(sync=sync), ctx.timing)
            peer = (
                access[(i, j)] and access[(j, i)]
                if None not in (access[(i, j)], access[(j, i)])
                else None
            )
            rec.add(_row("bidirectional", i, j, peer, size, 2 * size, timed))
            task.advance()
            ctx.point_done()
    for warning in flag_pairs(rec.measurements):
        rec.warn(warning)
    torch.cuda.empty_cache()
    rec.ok()


def _peer_access(torch: Any, i: int, j: int) -> bool | None:
    try:
        return bool(torch.cuda.can_device_access_peer(i, j))
    except Exception:
        return None


def _row(
    mode: str, i: int, j: int, peer: bool | None, size: int, moved: int, timed: Any
) -> dict[str, Any]:
    return {
        "mode": mode,
        "src": i,
        "dst": j,
        "peer_access": peer,
        "size_bytes": size,
        "bytes_moved": moved,
        **timed.as_dict(),
        "bytes_per_s": moved / timed.median_s,
    }
