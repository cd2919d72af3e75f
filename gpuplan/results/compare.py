"""Compare two probe runs point by point: ratio, and whether the difference is significant.

Points are matched by probe, variant (dtype, device, backend) and the point's own key (GEMM
shape, op and size, direction and memory, fio workload). For each matched point the
*metric* is the throughput the probe reports (``flops_per_s``, ``bytes_per_s``,
``busbw_bytes_per_s``, ``bw_bytes_per_s``: higher is better) and ``ratio = B / A``.

Significance rule (documented in docs/probes.md): the per-sample throughputs of the two
runs (``work / samples_s``; for fio the bandwidth log) are compared with a two-sided
Mann-Whitney U test (Mann and Whitney 1947; ``scipy.stats.mannwhitneyu``), which assumes
no distribution and is robust to the outliers timing samples have. A difference is
*significant* when p < ``alpha`` (0.05) **and** the medians differ by more than
``min_effect`` (1 %), so that a tiny but consistent difference from a quiet machine is
not reported as a change. With fewer than ``min_samples`` (4) samples on either side the
test cannot reach p < 0.05 and the verdict is ``n/a`` (published references, for example,
have no samples).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from gpuplan.results.schema import ProbeResult, ResultDocument
from gpuplan.units import busbw_factor

ALPHA = 0.05
MIN_EFFECT = 0.01
MIN_SAMPLES = 4


def point_key(probe: str, m: dict[str, Any]) -> tuple[Any, ...] | None:
    """What identifies a measured point within a probe variant."""
    if probe == "matmul":
        s = m.get("shape") or {}
        return (s.get("m"), s.get("n"), s.get("k"))
    if probe == "membw":
        return (m.get("op"), m.get("size_bytes"))
    if probe == "pcie":
        return (m.get("direction"), m.get("memory"), m.get("size_bytes"))
    if probe == "collectives":
        return (m.get("op"), m.get("size_bytes"), m.get("ranks"), m.get("scope"))
    if probe == "storage":
        return (
            m.get("rw"),
            m.get("block_size_bytes"),
            m.get("iodepth"),
            m.get("numjobs"),
            bool(m.get("gds")),
        )
    return None


def _device_part(p: ProbeResult, m: dict[str, Any]) -> tuple[Any, ...]:
    """The device of a per-GPU loop's point (``params.scope: "per_device"``): every GPU
    alone and all at once run the same shape, so the shape alone does not tell them apart."""
    if p.params.get("scope") != "per_device":
        return ()
    return (("gpu", m.get("device_index"), bool(m.get("concurrent"))),)


def point_label(probe: str, key: tuple[Any, ...]) -> str:
    if key and isinstance(key[-1], tuple) and key[-1][:1] == ("gpu",):
        _, index, concurrent = key[-1]
        where = f" GPU {index}" + (" (all GPUs at once)" if concurrent else "")
        return _point_label(probe, key[:-1]) + where
    return _point_label(probe, key)


def _point_label(probe: str, key: tuple[Any, ...]) -> str:
    if probe == "matmul":
        return "x".join(str(v) for v in key)
    if probe == "membw":
        return f"{key[0]} {key[1]} B"
    if probe == "pcie":
        return f"{key[0]} {key[1]} {key[2]} B"
    if probe == "collectives":
        return f"{key[0]} {key[1]} B {key[2]} ranks {key[3]}"
    if probe == "storage":
        return f"{key[0]} bs={key[1]} qd={key[2]} jobs={key[3]}" + (" gds" if key[4] else "")
    return str(key)


def metric(probe: str, m: dict[str, Any]) -> tuple[str, float | None, list[float]]:
    """(metric name, value, per-sample values) of one measurement; higher is better."""
    samples = [s for s in (m.get("samples_s") or []) if isinstance(s, (int, float)) and s > 0]
    if probe == "matmul":
        s = m["shape"]
        work = 2.0 * s["m"] * s["n"] * s["k"]
        return "flops_per_s", m.get("flops_per_s"), [work / t for t in samples]
    if probe == "membw":
        work = float(m.get("bytes_moved") or 0)
        return "bytes_per_s", m.get("bytes_per_s"), [work / t for t in samples] if work else []
    if probe == "pcie":
        work = float(m["size_bytes"])
        return "bytes_per_s", m.get("bytes_per_s"), [work / t for t in samples]
    if probe == "collectives":
        work = float(m["size_bytes"]) * busbw_factor(m["op"], int(m["ranks"]))
        return "busbw_bytes_per_s", m.get("busbw_bytes_per_s"), [work / t for t in samples]
    if probe == "storage":
        return (
            "bw_bytes_per_s",
            m.get("bw_bytes_per_s"),
            list(m.get("bw_samples_bytes_per_s") or []),
        )
    return "value", None, []


def variant_key(p: ProbeResult) -> tuple[str, str, str, str]:
    q = p.params
    return (
        p.probe,
        str(q.get("dtype") or ""),
        str(q.get("device") or ""),
        str(q.get("backend") or ""),
    )


def _index(doc: ResultDocument) -> dict[tuple[Any, ...], dict[str, Any]]:
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for p in doc.probes:
        if p.status == "skipped":
            continue
        for m in p.measurements:
            key = point_key(p.probe, m)
            if key is not None:
                out.setdefault((variant_key(p), key + _device_part(p, m)), m)
    return out


def significance(a: list[float], b: list[float], *, min_samples: int = MIN_SAMPLES) -> float | None:
    """Two-sided Mann-Whitney U p-value, or None with too few samples."""
    if len(a) < min_samples or len(b) < min_samples:
        return None
    from scipy.stats import mannwhitneyu

    if len(set(a) | set(b)) == 1:  # all equal: no difference at all
        return 1.0
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def compare_documents(
    a: ResultDocument,
    b: ResultDocument,
    *,
    alpha: float = ALPHA,
    min_effect: float = MIN_EFFECT,
    min_samples: int = MIN_SAMPLES,
) -> dict[str, Any]:
    """Point-by-point comparison of run ``b`` against run ``a`` (see the module docstring)."""
    ia, ib = _index(a), _index(b)
    points: list[dict[str, Any]] = []
    for key in [k for k in ia if k in ib]:
        (probe, dtype, device, backend), pkey = key
        name, va, sa = metric(probe, ia[key])
        _, vb, sb = metric(probe, ib[key])
        if not va or not vb:
            continue
        ratio = vb / va
        p_value = significance(sa, sb, min_samples=min_samples)
        if p_value is None:
            significant, verdict = None, "n/a"
        else:
            significant = p_value < alpha and abs(ratio - 1.0) > min_effect
            verdict = ("faster" if ratio > 1 else "slower") if significant else "same"
        points.append(
            {
                "probe": probe,
                "variant": " ".join(x for x in (dtype, device, backend) if x),
                "point": point_label(probe, pkey),
                "metric": name,
                "a": va,
                "b": vb,
                "ratio": ratio,
                "p_value": p_value,
                "samples": [len(sa), len(sb)],
                "significant": significant,
                "verdict": verdict,
            }
        )
    probes: dict[tuple[str, str], dict[str, Any]] = {}
    for pt in points:
        agg = probes.setdefault(
            (pt["probe"], pt["variant"]),
            {
                "probe": pt["probe"],
                "variant": pt["variant"],
                "points": 0,
                "faster": 0,
                "slower": 0,
                "same": 0,
                "n/a": 0,
                "_logs": [],
            },
        )
        agg["points"] += 1
        agg[pt["verdict"]] += 1
        agg["_logs"].append(math.log(pt["ratio"]))
    summary = []
    for agg in probes.values():
        logs = agg.pop("_logs")
        agg["geomean_ratio"] = math.exp(statistics.fmean(logs))
        summary.append(agg)
    only_a = sorted({point_label(k[0][0], k[1]) + f" ({k[0][0]})" for k in ia if k not in ib})
    only_b = sorted({point_label(k[0][0], k[1]) + f" ({k[0][0]})" for k in ib if k not in ia})
    return {
        "a": {"run_id": a.run_id, "started_at": a.started_at, "machine_id": a.host.machine_id},
        "b": {"run_id": b.run_id, "started_at": b.started_at, "machine_id": b.host.machine_id},
        "rule": (
            f"ratio = B/A of the throughput; significant when a two-sided Mann-Whitney U test on "
            f"the per-sample throughputs gives p < {alpha:g} and |ratio - 1| > {min_effect:g}; "
            f"n/a with fewer than {min_samples} samples on a side"
        ),
        "probes": summary,
        "points": points,
        "only_in_a": only_a,
        "only_in_b": only_b,
    }
