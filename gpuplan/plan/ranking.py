"""Ranking the options and the sensitivity of the ranking to MFU, price and utilisation.

The ranking metric is the scenario's ``rank_by``: cost of all training runs (``run``),
fleet cost per month (``month``) or cost per million output tokens served (``mtok``); with
``auto``, ``run`` for training-only scenarios, ``mtok`` for serving-only ones and ``month``
when both are present. Each option is represented by its cheapest purchasing model that is
priced and within budget; infeasible options are not ranked. :func:`rank_purchases` lists
every priced purchase kind of every feasible option by the same metric (the plan's
``purchase_options``).

Sensitivity, for each factor the ranking is recomputed and reported with the winner:

* **MFU / throughput**: the achieved throughput moved to the ends of the forecast interval
  and a further ``mfu_fraction`` beyond. For a deadline-sized training fleet the node-hours
  of a run scale as 1 / throughput (Amdahl-free first-order approximation: tokens/s per GPU
  held constant across the small change in fleet size), so do monthly fleet costs and the
  cost per token served;
* **price**: one option's prices moved by +-``price_fraction`` while the others stay, to
  see whether it would overtake or fall behind;
* **utilisation**: the costs recomputed at each listed utilisation (committed and owned
  fleets pay for idle hours; pay-per-use ones do not).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from gpuplan.plan import cost as costmod
from gpuplan.plan.provenance import Figure, FigureDict, derived, input_fig, join_texts
from gpuplan.plan.scenario import Scenario

if TYPE_CHECKING:
    from gpuplan.plan.options import Option


def rank_metric(scenario: Scenario) -> str:
    if scenario.rank_by != "auto":
        return str(scenario.rank_by)
    has_t = bool(scenario.workloads.training)
    has_s = bool(scenario.workloads.inference)
    if has_t and not has_s:
        return "run"
    if has_s and not has_t:
        return "mtok"
    return "month"


METRIC_LABEL = {
    "run": "cost of the training runs (USD)",
    "month": "fleet cost per month (USD)",
    "mtok": "cost per million output tokens served (USD)",
}


#: The metric of an owned fleet: the cluster is bought whole, so one job's cost on it is its
#: share of the cluster's cost (run hours x owned cost per node-hour / utilisation), not a
#: price anyone can pay for that job alone.
OWNED_METRIC_LABEL = {
    "run": "the training runs' share of the owned cluster's cost (the cluster is bought whole)",
    "month": "owned fleet cost per month (its yearly cost of ownership spread over the months)",
    "mtok": "cost per million output tokens on the owned fleet (its share of the cluster's cost)",
}


def metric_label(metric: str, model: str) -> str:
    """The ranking metric's label for a purchasing model (owned hardware says it is a share).

    >>> metric_label("run", "spot")
    'cost of the training runs (USD)'
    >>> metric_label("run", "onprem").startswith("the training runs' share")
    True
    """
    if model == "onprem":
        return OWNED_METRIC_LABEL[metric]
    return METRIC_LABEL[metric]


def model_metric(mc: costmod.ModelCost, metric: str, opt: Option) -> Figure | None:
    """The ranking figure of one purchasing model, or None when it has none."""
    if metric == "run":
        return mc.run_total()
    if metric == "month":
        return mc.per_month_usd
    per = list(mc.per_million_tokens_usd.values())
    if not per:
        return None
    if len(per) == 1:
        return per[0]
    # several services: blended = total serving cost / total tokens
    if not all(p.ok for p in per):
        return next(p for p in per if not p.ok)
    toks = [s.output_tokens_per_month for s in opt.serving if s.output_tokens_per_month is not None]
    total_tokens = sum(t.value for t in toks)
    blended = sum(p.value * t.value for p, t in zip(per, toks, strict=True)) / total_tokens
    return derived(
        blended,
        "USD/Mtok",
        f"{mc.model}: blended cost per million output tokens",
        "sum(cost per Mtok x tokens) / sum(tokens) over services",
        per + toks,
    )


@dataclass
class Entry:
    option: Option
    model: str
    metric: Figure

    def to_json(self) -> FigureDict:
        return {
            "option": self.option.id,
            "purchasing_model": self.model,
            "metric": self.metric,
        }


def best_entry(opt: Option, metric: str) -> Entry | None:
    """The cheapest priced, within-budget purchasing model of an option."""
    best = None
    for model, mc in opt.costs.items():
        if opt.within_budget and not opt.within_budget.get(model, True):
            continue
        fig = model_metric(mc, metric, opt)
        if fig is None or not fig.ok:
            continue
        if best is None or fig.value < best.metric.value:
            best = Entry(opt, model, fig)
    return best


def rank(options: list[Option], metric: str) -> tuple[list[Entry], list[FigureDict]]:
    """(ranked feasible entries, unranked options with the reason)."""
    ranked, unranked = [], []
    for opt in options:
        if not opt.feasible:
            reasons = [b["message"] for b in opt.binding] + opt.errors
            unranked.append({"option": opt.id, "reason": join_texts(reasons)})
            continue
        e = best_entry(opt, metric)
        if e is None:
            missing = []
            for mc in opt.costs.values():
                fig = model_metric(mc, metric, opt)
                if fig is not None and fig.missing:
                    missing.append(f"{mc.model}: {fig.missing}")
            unranked.append(
                {
                    "option": opt.id,
                    "reason": "no priced purchasing model"
                    + (": " + "; ".join(missing[:3]) if missing else ""),
                }
            )
            continue
        ranked.append(e)
    ranked.sort(key=lambda e: (e.metric.value, e.option.id))
    return ranked, unranked


def rank_purchases(options: list[Option], metric: str) -> list[FigureDict]:
    """One row per feasible option and purchase kind with a priced, within-budget metric
    (on-demand, each commitment with its term and committed spend, spot, capacity block,
    owned), cheapest first by the same metric as :func:`rank`."""
    rows = []
    for opt in options:
        if not opt.feasible:
            continue
        for model, mc in opt.costs.items():
            if opt.within_budget and not opt.within_budget.get(model, True):
                continue
            fig = model_metric(mc, metric, opt)
            if fig is None or not fig.ok:
                continue
            rows.append(
                {
                    "option": opt.id,
                    "purchasing_model": model,
                    "label": costmod.MODEL_LABEL.get(model, model),
                    "metric_label": metric_label(metric, model),
                    "metric": fig,
                    "price_usd_per_node_hour": mc.price_usd_per_node_hour,
                    "term_hours": mc.term_hours,
                    "committed_spend_usd": mc.committed_spend_usd,
                    "max_duration_days": (
                        mc.terms.max_duration_fig() if mc.terms is not None else None
                    ),
                    "stale_price": bool(mc.price_age and mc.price_age.get("stale")),
                }
            )
    rows.sort(
        key=lambda r: (
            cast(Figure, r["metric"]).value,
            str(r["option"]),
            str(r["purchasing_model"]),
        )
    )
    return [{"rank": i + 1, **r} for i, r in enumerate(rows)]


def _order(values: dict[str, float]) -> list[str]:
    return [k for k, _ in sorted(values.items(), key=lambda kv: (kv[1], kv[0]))]


def _throughput_factors(opt: Option, metric: str, widen: float) -> tuple[float, float]:
    """Cost multipliers (low, high) from the forecast intervals, widened by ``widen``.

    Costs scale as 1 / throughput; the interval of the time to train (training) or of the
    per-replica throughput (serving) gives how far throughput may move.
    """
    lows, highs = [], []
    if metric in ("run", "month"):
        for t in opt.training:
            r = t.run_s
            if r is not None and r.ok and r.interval is not None and r.value > 0:
                lows.append(r.interval[0] / r.value)
                highs.append(r.interval[1] / r.value)
    if metric in ("mtok", "month"):
        for s in opt.serving:
            if s.cost_interval_factors is not None:
                lows.append(s.cost_interval_factors[0])
                highs.append(s.cost_interval_factors[1])
    lo = min(lows) if lows else 1.0
    hi = max(highs) if highs else 1.0
    return lo * (1.0 - widen), hi / (1.0 - widen) if widen < 1 else float("inf")


def sensitivity(
    ranked: list[Entry],
    metric: str,
    *,
    price_fraction: float,
    mfu_fraction: float,
    utilisations: list[float],
    reprice: Callable[[Option, float], Figure | None],
) -> FigureDict:
    """Does the ranking hold when MFU, prices or utilisation move? (module docstring)

    ``reprice(option, utilisation) -> Figure | None`` recomputes an option's best metric at
    another utilisation.
    """
    if not ranked:
        return {"cases": [], "per_option": []}
    nominal = {e.option.id: e.metric.value for e in ranked}
    base_order = _order(nominal)
    pf = input_fig(price_fraction, "fraction", "price sensitivity", "sensitivity.price_fraction")
    mf = input_fig(
        mfu_fraction, "fraction", "MFU sensitivity beyond the interval", "sensitivity.mfu_fraction"
    )
    per_option = []
    cases = []
    thr = {e.option.id: _throughput_factors(e.option, metric, mfu_fraction) for e in ranked}
    for e in ranked:
        oid = e.option.id
        lo_f, hi_f = thr[oid]
        others = {k: v for k, v in nominal.items() if k != oid}
        rank_at = {}
        for tag, factor in (
            ("mfu_high", lo_f),
            ("mfu_low", hi_f),
            ("price_low", 1.0 - price_fraction),
            ("price_high", 1.0 + price_fraction),
        ):
            vals = dict(others)
            vals[oid] = nominal[oid] * factor
            rank_at[tag] = _order(vals).index(oid) + 1
        per_option.append(
            {
                "option": oid,
                "purchasing_model": e.model,
                "nominal": e.metric,
                "throughput_range": derived(
                    nominal[oid] * lo_f,
                    e.metric.unit,
                    f"{oid}: metric at high throughput",
                    "nominal x (interval low / nominal) x (1 - mfu_fraction)",
                    [e.metric, mf],
                ),
                "throughput_range_high": derived(
                    nominal[oid] * hi_f,
                    e.metric.unit,
                    f"{oid}: metric at low throughput",
                    "nominal x (interval high / nominal) / (1 - mfu_fraction)",
                    [e.metric, mf],
                ),
                "price_low": derived(
                    nominal[oid] * (1 - price_fraction),
                    e.metric.unit,
                    f"{oid}: metric at lower prices",
                    "nominal x (1 - price_fraction)",
                    [e.metric, pf],
                ),
                "price_high": derived(
                    nominal[oid] * (1 + price_fraction),
                    e.metric.unit,
                    f"{oid}: metric at higher prices",
                    "nominal x (1 + price_fraction)",
                    [e.metric, pf],
                ),
                "rank_nominal": base_order.index(oid) + 1,
                "rank_if": rank_at,
            }
        )
    # whole-field cases: every option at its own worst/best throughput
    for tag, pick in (("all at high MFU", 0), ("all at low MFU", 1)):
        vals = {k: nominal[k] * thr[k][pick] for k in nominal}
        order = _order(vals)
        cases.append({"case": tag, "winner": order[0], "order_changed": order != base_order})
    for u in utilisations:
        vals = {}
        for e in ranked:
            fig = reprice(e.option, u)
            if fig is not None and fig.ok:
                vals[e.option.id] = fig.value
        if vals:
            order = _order(vals)
            cases.append(
                {
                    "case": f"utilisation {u:g}",
                    "winner": order[0],
                    "order_changed": order != [k for k in base_order if k in vals],
                }
            )
    flips = [
        p["option"]
        for p in per_option
        if any(r != p["rank_nominal"] for r in cast("dict[str, int]", p["rank_if"]).values())
    ]
    return {
        "cases": cases,
        "per_option": per_option,
        "rank_changes_for": flips,
        "robust": not flips and not any(c["order_changed"] for c in cases),
    }
