"""One-line summaries of probe results (for tables: ``gpuplan probe``, ``results ls|show``).

Each probe result gets a *headline*: the figure a person looks at first, with its unit.
These are display helpers only; calibration reads the raw measurements.
"""

from __future__ import annotations

import statistics
from typing import Any

from gpuplan.results.schema import ProbeResult, ResultDocument
from gpuplan.units import fmt_si


def _best(measurements: list[dict[str, Any]], key: str, **match: Any) -> dict[str, Any] | None:
    rows = [
        m
        for m in measurements
        if isinstance(m.get(key), (int, float)) and all(m.get(k) == v for k, v in match.items())
    ]
    return max(rows, key=lambda m: m[key]) if rows else None


def headline(probe: ProbeResult) -> dict[str, Any] | None:
    """``{"label", "value", "unit"}`` for the probe's main figure, or None.

    matmul: best FLOP/s over the shapes; membw: copy bandwidth at the largest size (past
    the caches); pcie: best pinned host-to-device bandwidth; collectives: best all-reduce
    bus bandwidth; storage: best read bandwidth; serve: best output-token throughput;
    train: forward + backward + optimizer time per block;
    pcie_concurrent: the all-GPUs h2d aggregate (else the best bidirectional figure); p2p:
    the median one-direction pair with the count of flagged pairs; health: the verdict
    with the number of reasons; soak: the slowest device's throughput at the end of the soak
    and what throttled it.
    """
    ms = probe.measurements
    if not ms:
        return None
    if probe.probe == "matmul":
        m = _best(ms, "flops_per_s")
        if m:
            shape = m["shape"]
            return {
                "label": f"best {shape['m']}x{shape['n']}x{shape['k']}",
                "value": m["flops_per_s"],
                "unit": "FLOP/s",
            }
    elif probe.probe == "membw":
        copies = [m for m in ms if m.get("op") == "copy"]
        if copies:
            m = max(copies, key=lambda m: m["size_bytes"])
            return {
                "label": f"copy {m['size_bytes'] >> 20} MiB",
                "value": m["bytes_per_s"],
                "unit": "B/s",
            }
    elif probe.probe == "pcie":
        m = _best(ms, "bytes_per_s", direction="h2d", memory="pinned")
        if m:
            return {"label": "h2d pinned", "value": m["bytes_per_s"], "unit": "B/s"}
    elif probe.probe == "collectives":
        m = _best(ms, "busbw_bytes_per_s", op="all_reduce")
        if m:
            return {
                "label": f"all_reduce busbw ({m['ranks']} ranks)",
                "value": m["busbw_bytes_per_s"],
                "unit": "B/s",
            }
    elif probe.probe == "storage":
        reads = [m for m in ms if m.get("rw") in ("read", "randread")]
        if reads:
            m = max(reads, key=lambda m: m["bw_bytes_per_s"])
            return {
                "label": f"{m['rw']} bs={m['block_size_bytes']}",
                "value": m["bw_bytes_per_s"],
                "unit": "B/s",
            }
    elif probe.probe == "pcie_concurrent":
        every = _best(ms, "bytes_per_s", mode="all_gpus", direction="h2d")
        m = every or _best(ms, "bytes_per_s", mode="bidirectional")
        if m:
            label = "all GPUs h2d" if every else "bidirectional"
            return {"label": label, "value": m["bytes_per_s"], "unit": "B/s"}
    elif probe.probe == "p2p":
        uni = [m["bytes_per_s"] for m in ms if m.get("mode") == "unidirectional"]
        if uni:
            flagged = sum(bool(m.get("below_median")) for m in ms)
            return {
                "label": f"median GPU->GPU, {flagged} flagged",
                "value": statistics.median(uni),
                "unit": "B/s",
            }
    elif probe.probe == "health":
        m = ms[-1]
        return {
            "label": m.get("verdict", "?"),
            "value": len(m.get("reasons") or []),
            "unit": "reasons",
        }
    elif probe.probe == "serve":
        m = _best(ms, "output_throughput_tokens_per_s")
        if m:
            return {
                "label": f"output tokens, concurrency {m['concurrency']}",
                "value": m["output_throughput_tokens_per_s"],
                "unit": "tok/s",
            }
    elif probe.probe == "soak":
        # the worst device's sustained throughput at the end of the soak, and what throttled
        ends = [
            (m["flops_per_s"]["last"], m)
            for m in ms
            if isinstance(m.get("flops_per_s"), dict) and m["flops_per_s"].get("last")
        ]
        if ends:
            value, m = min(ends, key=lambda e: e[0])
            flags = [
                name
                for name, key in (
                    ("thermal throttle", "thermal_throttled"),
                    ("power throttle", "power_throttled"),
                    ("clock drop", "clock_dropped"),
                    ("throughput drop", "throughput_dropped"),
                )
                if m.get(key)
            ]
            device = m.get("device_index")
            return {
                "label": f"sustained, slowest GPU {device}"
                + (f" ({', '.join(flags)})" if flags else ""),
                "value": value,
                "unit": "FLOP/s",
            }
    elif probe.probe == "train":
        m = ms[0]
        return {
            "label": f"step per block, {m['tokens']} tokens, tp {m['tp']}",
            "value": m["step_per_block_s"],
            "unit": "s",
        }
    return None


def variant(probe: ProbeResult) -> str:
    """What distinguishes results of the same probe in one run (dtype, device, backend)."""
    p = probe.params
    parts = [str(p[k]) for k in ("dtype", "device", "backend") if p.get(k)]
    return " ".join(parts)


def status_counts(doc: ResultDocument) -> dict[str, int]:
    counts = {"ok": 0, "failed": 0, "skipped": 0}
    for p in doc.probes:
        counts[p.status] = counts.get(p.status, 0) + 1
    return counts


def point_text(probe: str, m: dict[str, Any]) -> tuple[str, str] | None:
    """(point, figure) of one node-health measurement for ``results show``; None for others."""
    if probe == "pcie_concurrent":
        devices = ",".join(str(d) for d in m.get("devices") or [])
        ratio = m.get("vs_alone")
        return (
            f"{m['mode']} {m['direction']} GPU {devices} {m['size_bytes'] >> 20} MiB",
            fmt_si(m["bytes_per_s"], "B/s")
            + ("" if ratio is None else f", {ratio:.2f} x the copies alone"),
        )
    if probe == "p2p":
        arrow = "->" if m["mode"] == "unidirectional" else "<->"
        flags = [] if m.get("peer_access") is not False else ["no peer access"]
        if m.get("below_median"):
            flags.append(f"FLAGGED {m.get('median_fraction', 0):.0%} of median")
        return (
            f"GPU {m['src']}{arrow}{m['dst']} {m['size_bytes'] >> 20} MiB",
            fmt_si(m["bytes_per_s"], "B/s") + (f" ({'; '.join(flags)})" if flags else ""),
        )
    if probe == "health":
        parts = [str(m.get("verdict"))]
        parts += [f"reason: {r}" for r in m.get("reasons") or []]
        parts += [f"note: {n}" for n in m.get("notes") or []]
        parts += [f"unchecked: {u}" for u in m.get("unchecked") or []]
        return "verdict", "; ".join(parts)
    return None


def health_line(doc: ResultDocument) -> str | None:
    """``health: degraded (reason; reason)`` for the run's health probe, or None."""
    for p in reversed(doc.probe("health")):
        if p.measurements:
            m = p.measurements[-1]
            reasons = m.get("reasons") or []
            unchecked = len(m.get("unchecked") or [])
            return (
                f"health: {m.get('verdict')}"
                + (f" ({'; '.join(reasons)})" if reasons else "")
                + (
                    f"; {unchecked} check{'s' if unchecked != 1 else ''} not made"
                    if unchecked
                    else ""
                )
            )
    return None
