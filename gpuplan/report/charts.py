"""Charts of the plan report, drawn with matplotlib (Agg) as inline base64 PNG.

Every chart is drawn from the plan JSON only (figures with their provenance); a chart with
nothing to draw returns ``None`` and the report says why instead.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from gpuplan.plan.cost import MODEL_LABEL
from gpuplan.plan.provenance import is_figure_json

MODEL_ORDER = ("on_demand", "reserved_1y", "reserved_3y", "spot", "onprem")


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def usd_tick(v: float, _pos: Any = None) -> str:
    """A money axis tick in $, $k or $M (never "1e7").

    >>> [usd_tick(x) for x in (0, 950, 1500, 250_000, 2_500_000, 13_930_000, 1.2e9)]
    ['$0', '$950', '$1.5k', '$250k', '$2.5M', '$13.9M', '$1.2B']
    """
    a = abs(v)
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if a >= scale:
            return f"${v / scale:.3g}{suffix}"
    return f"${v:.3g}" if a else "$0"


def plain_tick(v: float, _pos: Any = None) -> str:
    """A log axis tick as a plain number (never "2^7" or "10^2").

    >>> [plain_tick(x) for x in (0.1, 1, 64, 128, 1024, 25_000)]
    ['0.1', '1', '64', '128', '1,024', '25,000']
    """
    if v >= 1 and float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:g}"


def _usd_axis(axis: Any) -> None:
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(usd_tick))


def _plain_log_axis(axis: Any, *, minor: bool = False) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(plain_tick))
    axis.set_minor_formatter(FuncFormatter(plain_tick) if minor else NullFormatter())


def _png(fig: Any) -> str:
    """The figure as base64 PNG (each chart function returns the matplotlib figure itself
    with ``figure=True``, for tests that read its axes)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _val(f: Any) -> float | None:
    if is_figure_json(f) and isinstance(f.get("value"), (int, float)):
        return float(f["value"])
    return None


def _metric_of(cost: dict[str, Any], metric: str) -> Any:
    if metric == "run":
        return cost.get("all_runs_usd")
    if metric == "month":
        return cost.get("per_month_usd")
    per = cost.get("per_million_output_tokens_usd") or {}
    return next(iter(per.values()), None)


def cost_by_option(doc: dict[str, Any], *, figure: bool = False) -> Any:
    """Grouped bars: the ranking metric of every option under every purchasing model."""
    metric = doc["summary"]["rank_by"]
    rows = []
    for opt in doc["options"]:
        vals = {}
        for model in MODEL_ORDER:
            c = (opt.get("costs") or {}).get(model)
            if c is None:
                continue
            f = _metric_of(c, metric)
            v = _val(f)
            if v is not None:
                iv = f.get("interval")
                vals[model] = (v, iv)
        if vals:
            rows.append((opt["id"], opt["feasible"], vals))
    if not rows:
        return None
    plt = _plt()
    models = [m for m in MODEL_ORDER if any(m in r[2] for r in rows)]
    height = 0.8 / max(len(models), 1)
    fig, ax = plt.subplots(figsize=(8.5, 0.32 * len(rows) * max(1.0, len(models) / 2.0) + 1.6))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, model in enumerate(models):
        ys, xs, errs = [], [], [[], []]
        for i, (_, _, vals) in enumerate(rows):
            if model not in vals:
                continue
            v, iv = vals[model]
            ys.append(i + (j - (len(models) - 1) / 2) * height)
            xs.append(v)
            lo, hi = iv if iv and None not in iv else (v, v)
            errs[0].append(max(v - lo, 0.0))
            errs[1].append(max(hi - v, 0.0))
        ax.barh(
            ys,
            xs,
            height=height * 0.95,
            label=MODEL_LABEL[model],
            color=colours[j % len(colours)],
            xerr=errs,
            capsize=2,
        )
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] + ("" if r[1] else " (infeasible)") for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(doc["summary"]["rank_by_label"])
    _usd_axis(ax.xaxis)  # every ranking metric is money
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title("Cost by option and purchasing model (bars: forecast interval)")
    return fig if figure else _png(fig)


def time_to_train(doc: dict[str, Any], *, figure: bool = False) -> Any:
    """Time to train (days) against cluster size, per workload and GPU, with intervals."""
    curves = [c for c in doc.get("time_to_train_curves") or [] if c.get("points")]
    if not curves:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    drawn = False
    deadlines = set()
    for c in curves:
        xs, ys, lo, hi = [], [], [], []
        for p in c["points"]:
            n, t = _val(p.get("gpus")), _val(p.get("time_to_train_s"))
            if n is None or t is None:
                continue
            xs.append(n)
            ys.append(t / 86400.0)
            iv = p["time_to_train_s"].get("interval")
            lo.append((iv[0] if iv else t) / 86400.0)
            hi.append((iv[1] if iv else t) / 86400.0)
        if not xs:
            continue
        drawn = True
        (line,) = ax.plot(xs, ys, marker="o", label=f"{c['workload']} on {c['gpu']}")
        ax.fill_between(xs, lo, hi, alpha=0.15, color=line.get_color())
        d = _val(c.get("deadline_days"))
        if d is not None:
            deadlines.add(d)
    if not drawn:
        _plt().close(fig)
        return None
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    for d in sorted(deadlines):
        # in the legend, so that the label stays whatever the axis limits become
        ax.axhline(d, linestyle="--", color="grey", linewidth=1, label=f"deadline: {d:g} days")
    _plain_log_axis(ax.xaxis)
    _plain_log_axis(ax.yaxis, minor=True)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("time to train (days)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title("Time to train vs cluster size (band: forecast interval)")
    return fig if figure else _png(fig)


def roofline(doc: dict[str, Any], *, figure: bool = False) -> Any:
    """Measured trial-node roofline (best matmul, best memory bandwidth, GEMM points) against
    the catalog spec of the same accelerator (Williams et al. 2009)."""
    trial = doc.get("trial_node")
    if not trial:
        return None
    mm = trial.get("matmul_flops_per_s") or {}
    bw = _val(trial.get("memory_bandwidth_bytes_per_s"))
    if not mm:
        return None
    spec = doc.get("roofline_spec") or {}
    dtype = spec.get("dtype") or (
        "bf16" if "bf16" in mm else max(mm, key=lambda d: _val(mm[d]) or 0)
    )
    peak = _val(mm.get(dtype))
    if peak is None:
        return None
    import numpy as np
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    pts = [p for p in trial.get("matmul_points") or [] if p.get("dtype") == dtype]
    ai_vals = [_val(p["intensity_flop_per_byte"]) for p in pts]
    ai_vals = [a for a in ai_vals if a]
    lo_ai = min([0.5, *ai_vals]) / 2
    hi_ai = max([2000.0, *ai_vals]) * 2
    x = np.logspace(np.log10(lo_ai), np.log10(hi_ai), 200)
    if bw is not None:
        ax.plot(
            x, np.minimum(peak, x * bw), label=f"measured roof ({trial.get('device')}, {dtype})"
        )
    else:
        ax.axhline(peak, label=f"measured peak ({trial.get('device')}, {dtype}; no memory probe)")
    speak = _val(spec.get("peak_flops_per_s"))
    sbw = _val(spec.get("memory_bandwidth_bytes_per_s"))
    if speak is not None and sbw is not None:
        ax.plot(
            x, np.minimum(speak, x * sbw), linestyle="--", label=f"catalog spec ({spec.get('gpu')})"
        )
    if pts:
        ax.scatter(
            [_val(p["intensity_flop_per_byte"]) for p in pts],
            [_val(p["flops_per_s"]) for p in pts],
            s=14,
            color="black",
            zorder=3,
            label="measured GEMMs",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_axis(ax.xaxis)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v / 1e12:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("TFLOP/s")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title("Trial node: measured roofline vs catalog spec")
    return fig if figure else _png(fig)


def _wait_lines(ax: Any, points: list[dict[str, Any]], name: str) -> bool:
    """Mean (solid) and p95 (dashed) wait in hours against cluster GPUs; False if empty."""
    xs, mean, p95 = [], [], []
    for p in points:
        g = _val(p.get("gpus"))
        waits = p.get("wait_s") or {}
        m, q = _val(waits.get("mean")), _val(waits.get("p95"))
        if g is None or m is None or q is None:
            continue
        xs.append(g)
        mean.append(m / 3600.0)
        p95.append(q / 3600.0)
    if not xs:
        return False
    (line,) = ax.plot(xs, mean, marker="o", label=f"{name}: mean wait")
    ax.plot(xs, p95, marker="s", linestyle="--", color=line.get_color(), label=f"{name}: p95 wait")
    return True


def _wait_axes(ax: Any, title: str) -> None:
    # waits span from zero to days: symlog keeps the zeros and the tail on one axis
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_ylim(bottom=0)
    _plain_log_axis(ax.yaxis)
    ax.set_xlabel("cluster GPUs")
    ax.set_ylabel("queueing wait (hours, symlog)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title(title)


def shared_wait_vs_size(doc: dict[str, Any], *, figure: bool = False) -> Any:
    """The teams' queueing wait (mean and p95) against cluster size, per simulated policy,
    with the planned size and the p95 target (docs/scheduling.md section 5)."""
    sc = doc.get("shared_cluster") or {}
    curves = [c for c in (sc.get("wait_vs_size") or {}).get("curves") or [] if c.get("points")]
    if not curves:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    drawn = False
    for c in curves:
        name = c["policy"] + (" (scenario)" if c.get("scenario_policy") else "")
        drawn = _wait_lines(ax, c["points"], name) or drawn
    if not drawn:
        plt.close(fig)
        return None
    planned = _val(sc.get("cluster_gpus"))
    if planned is not None:
        ax.axvline(
            planned, linestyle=":", color="grey", linewidth=1, label=f"planned: {planned:g} GPUs"
        )
    small = sc.get("smallest_cluster") or {}
    target = _val(small.get("target_p95_wait_s"))
    if target is not None:
        ax.axhline(
            target / 3600.0,
            linestyle="-.",
            color="firebrick",
            linewidth=1,
            label=f"p95 target: {target / 3600.0:g} h",
        )
    smallest = _val((small.get("overall") or {}).get("gpus"))
    if smallest is not None:
        ax.axvline(
            smallest,
            linestyle=":",
            color="firebrick",
            linewidth=1,
            label=f"smallest meeting the target: {smallest:g} GPUs",
        )
    _wait_axes(ax, "Shared cluster: wait vs cluster size (the teams' jobs)")
    return fig if figure else _png(fig)


def reference_wait_vs_size(doc: dict[str, Any], *, figure: bool = False) -> Any:
    """The reference trace's queueing wait (mean and p95) against cluster size."""
    ref = (doc.get("shared_cluster") or {}).get("reference_curve") or {}
    if not ref.get("points"):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    if not _wait_lines(ax, ref["points"], f"{ref.get('trace')}, {ref.get('policy')}"):
        plt.close(fig)
        return None
    _wait_axes(ax, "Reference: Microsoft Philly trace, wait vs cluster size (CC BY 4.0)")
    return fig if figure else _png(fig)


def all_charts(doc: dict[str, Any]) -> dict[str, str | None]:
    """Every chart of the report, keyed by name (None where there is nothing to draw)."""
    return {
        "cost_by_option": cost_by_option(doc),
        "time_to_train": time_to_train(doc),
        "roofline": roofline(doc),
        "shared_wait_vs_size": shared_wait_vs_size(doc),
        "reference_wait_vs_size": reference_wait_vs_size(doc),
    }
