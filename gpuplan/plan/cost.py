"""Cost models: cloud purchasing models, spot with checkpoint/restart, on-premises TCO.

The formulas come first; the rows of an option (at the end) use them:
:func:`price_option` prices every purchasing model from the catalog or the scenario's
quotes, :func:`link_break_even` sets owned-vs-cloud break-even and :func:`check_budget`
records a budget that binds.

Method
------
Prices are per node-hour (an instance-hour in the cloud). For a purchasing model with
price ``p``:

* **pay per use** (on-demand, spot): a training run costs nodes x run hours x p / goodput;
  a month costs nodes x 730 h x utilisation x p for training fleets (busy hours only) and
  nodes x serving hours x p for serving;
* **term commitments** (AWS Reserved Instances and Savings Plans, GCP committed use
  discounts, Azure reservations: 1 or 3 years): every hour of the term is paid whether used or
  not, so a run costs the committed spend of the whole terms it needs,
  nodes x ceil(wall hours / term hours) x term hours x p (a 39-day run on a 3-year commitment
  pays all 26,280 h of it; the plan says so), and a month costs nodes x 730 h x p. A term is
  8,760 h a year (calendar, as the providers bill);
* **capacity blocks** (AWS EC2 Capacity Blocks for ML): capacity booked ahead for a fixed
  duration, paid up front, not interrupted by the provider: a run books the shortest
  allowed duration covering its wall time (the catalog's ``duration_increments``: 1-day steps
  up to 14 days, then 7-day steps up to 182) and costs nodes x booked days x 24 h x p; a run
  longer than the longest block has no capacity-block price;
* **owned hardware**: the hourly equivalent of the TCO is paid every hour, so a run costs
  nodes x run hours x p / (utilisation x goodput) (its share of a cluster bought whole, the
  idle share included) and a month costs nodes x 730 h x p;
* **per million tokens served**: the serving fleet's monthly cost / tokens served per month.

Interruptions (spot reclaims and node failures) follow the checkpoint/restart model:
the fleet's mean time between interruptions is ``M = 1 / (rate per node-hour x nodes)``;
the checkpoint interval is Young's first-order optimum ``sqrt(2 delta M)`` (Young 1974,
"A first order approximation to the optimum checkpoint interval", CACM 17(9)) refined by
Daly's higher-order estimate (Daly 2006, "A higher order estimate of the optimum
checkpoint interval for restart dumps", FGCS 22(3), the perturbation solution of its
complete model): ``tau = sqrt(2 delta M) [1 + (1/3) sqrt(delta/2M) + (1/9)(delta/2M)] -
delta`` for ``delta < 2M``, else ``tau = M``. The expected wall time of ``T_s`` hours of
work is Daly's complete model ``T_w = M e^(R/M) (e^((tau + delta)/M) - 1) T_s / tau``;
goodput = ``T_s / T_w``.

On premises (total cost of ownership): capex (nodes, and network where priced) amortised
straight-line over the depreciation years, plus facility energy (facility power x hours x
price per kWh, at full draw all year: an upper bound), plus operations per node and staff.
The hourly equivalent is then treated as a committed price. Break-even utilisation
against on-demand renting = owned cost per year / (8,760 h x nodes x on-demand price):
above it, owning is cheaper. Shared storage joins both sides like for like: the owned cost
carries the storage capex (or a quoted yearly rate), the rented side the cloud tier, held
while the rented fleet runs (as each run's cost counts it: its wall hours), at its price per
month x 12 a year of use, so
``u* = owned per year / (8,760 h x nodes x price + cloud storage per year)``; when either
side has no storage price, storage is left out of both and the figure says so.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from gpuplan.catalogs.names import name_key
from gpuplan.catalogs.schema import Instance, period_start
from gpuplan.plan.context import PlanContext
from gpuplan.plan.provenance import (
    Figure,
    FigureDict,
    Provenance,
    Text,
    derived,
    input_fig,
    missing_fig,
)

if TYPE_CHECKING:
    from gpuplan.catalogs.schema import PriceObservation
    from gpuplan.plan.options import Option
    from gpuplan.plan.scenario import PriceOverride

if TYPE_CHECKING:
    from gpuplan.catalogs.schema import Instance
    from gpuplan.plan.scenario import PriceOverride

HOURS_PER_YEAR = 8760.0  # 365 x 24 (calendar)
HOURS_PER_MONTH = HOURS_PER_YEAR / 12.0  # 730

#: Years of each term commitment (the kind's name says it; AWS, GCP and Azure sell 1 and 3).
TERM_YEARS: dict[str, int] = {
    "reserved_1y": 1,
    "reserved_3y": 3,
    "savings_plan_1y": 1,
    "savings_plan_3y": 3,
    "cud_1y": 1,
    "cud_3y": 3,
}
TERM_COMMITTED = tuple(TERM_YEARS)
PAY_PER_USE = ("on_demand", "spot", "capacity_block")
COMMITTED = (*TERM_COMMITTED, "onprem")
#: Cloud purchase kinds the plan prices; ``reserved`` (a term nobody stated) is not costed.
CLOUD_KINDS = ("on_demand", "spot", *TERM_COMMITTED, "capacity_block")
#: Shown for every cloud option (missing when the catalog has no rate); the other kinds only
#: where the catalog has an observation or the scenario an override.
BASELINE_CLOUD_KINDS = ("on_demand", "spot", "reserved_1y", "reserved_3y")
PURCHASING_MODELS = (*CLOUD_KINDS, "onprem")
MODEL_LABEL = {
    "on_demand": "on-demand",
    "reserved_1y": "1-year commitment",
    "reserved_3y": "3-year commitment",
    "savings_plan_1y": "1-year Savings Plan",
    "savings_plan_3y": "3-year Savings Plan",
    "cud_1y": "1-year committed use discount",
    "cud_3y": "3-year committed use discount",
    "spot": "spot",
    "capacity_block": "capacity block",
    "onprem": "owned (TCO)",
}


@dataclass(frozen=True)
class PurchaseTerms:
    """Booking rules of a capacity block, from the catalog price observation."""

    #: ((step_days, up_to_days), ...) in increasing order
    duration_increments: tuple[tuple[int, int], ...] | None = None
    max_instances: int | None = None
    source: str | None = None
    #: the catalog observation the rules come from (``instance/<id> prices.capacity_block``)
    ref: str = "capacity block booking rules"
    as_of: str | None = None

    @property
    def max_duration_days(self) -> int | None:
        return self.duration_increments[-1][1] if self.duration_increments else None

    def rule_text(self) -> str:
        """The increments in words: '1-day steps up to 14 days, then 7-day steps up to 182'."""
        parts = [f"{a}-day steps up to {b} days" for a, b in self.duration_increments or ()]
        return ", then ".join(parts) if parts else "booking rules unknown"

    def _fig(self, value: object, unit: str, label: str) -> Figure:
        prov = Provenance("catalog", self.ref, source=self.source, retrieved=self.as_of)
        return Figure(value, unit, label, prov)

    def max_duration_fig(self) -> Figure | None:
        if self.max_duration_days is None:
            return None
        return self._fig(self.max_duration_days, "days", "longest capacity block")

    def to_json(self) -> FigureDict:
        return {
            "booking_rule": self.rule_text(),
            "max_duration_days": self.max_duration_fig(),
            "max_instances_per_block": (
                self._fig(self.max_instances, "instances", "instances per capacity block")
                if self.max_instances
                else None
            ),
        }


def block_days(days: float, increments: tuple[tuple[int, int], ...]) -> int | None:
    """The shortest bookable duration (days) covering ``days``, or None past the longest.

    >>> inc = ((1, 14), (7, 182))
    >>> block_days(0.4, inc), block_days(10.2, inc), block_days(14.5, inc), block_days(39, inc)
    (1, 11, 21, 42)
    >>> block_days(183, inc) is None
    True
    """
    for step, up_to in increments:
        if days <= up_to:
            return max(step, math.ceil(days / step - 1e-9) * step)
    return None


def term_hours_fig(model: str) -> Figure:
    """The hours of a term commitment (years x 8,760 h, calendar)."""
    years = TERM_YEARS[model]
    return input_fig(
        years * HOURS_PER_YEAR,
        "h",
        f"{MODEL_LABEL[model]} term",
        f"{model}: a {years}-year term, {years} x 8,760 h (every hour paid)",
        default=True,
    )


# ------------------------------------------------------------------ Young / Daly


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum checkpoint interval ``sqrt(2 delta M)`` (Young 1974).

    >>> round(young_interval_s(300.0, 24 * 3600.0) / 60.0, 1)
    120.0
    """
    if checkpoint_s < 0 or mtbf_s <= 0:
        raise ValueError("checkpoint time >= 0 and MTBF > 0")
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum checkpoint interval (Daly 2006, perturbation solution).

    ``tau = sqrt(2 delta M) [1 + (1/3) sqrt(delta/2M) + (1/9)(delta/2M)] - delta`` for
    ``delta < 2M``, else ``M``. Daly's figure 3 case (M = 24 h, delta = 5 min) gives
    117 min:

    >>> round(daly_interval_s(300.0, 24 * 3600.0) / 60.0)
    117
    """
    if checkpoint_s < 0 or mtbf_s <= 0:
        raise ValueError("checkpoint time >= 0 and MTBF > 0")
    if checkpoint_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = checkpoint_s / (2.0 * mtbf_s)
    return (
        math.sqrt(2.0 * checkpoint_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - checkpoint_s
    )


def daly_wall_time_s(
    solve_s: float, interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float
) -> float:
    """Expected wall time for ``solve_s`` of work (Daly 2006, complete model).

    ``T_w = M e^(R/M) (e^((tau + delta)/M) - 1) T_s / tau``; without interruptions
    (``M`` infinite) there is no need to checkpoint and ``T_w = T_s``.
    """
    if math.isinf(mtbf_s):
        return solve_s
    m = mtbf_s
    return (
        m
        * math.exp(restart_s / m)
        * math.expm1((interval_s + checkpoint_s) / m)
        * solve_s
        / interval_s
    )


@dataclass
class Reliability:
    """Checkpoint interval and goodput of one training run under interruptions."""

    rate_per_node_hour: Figure
    mtbf_s: Figure
    interval_s: Figure
    young_interval_s: Figure
    goodput: Figure

    def to_json(self) -> FigureDict:
        return {
            "interruptions_per_node_hour": self.rate_per_node_hour,
            "fleet_mtbf_s": self.mtbf_s,
            "checkpoint_interval_s": self.interval_s,
            "young_interval_s": self.young_interval_s,
            "goodput": self.goodput,
        }


def reliability(
    *, nodes: Figure, rate_per_node_hour: Figure, checkpoint_s: Figure, restart_s: Figure
) -> Reliability:
    """Young/Daly checkpoint interval and goodput for ``nodes`` nodes (module docstring)."""
    rate = rate_per_node_hour.value if rate_per_node_hour.ok else 0.0
    label = "fleet mean time between interruptions"
    if rate <= 0:
        mtbf = derived(
            None,
            "s",
            label,
            "no interruptions given: none expected",
            [rate_per_node_hour],
            missing="no interruption rate given: none expected, no checkpoint interval needed",
        )
        none = derived(
            None,
            "s",
            "checkpoint interval (Daly 2006)",
            "no interruptions: no optimum",
            [mtbf],
            missing="no interruption rate: checkpoint interval not needed",
        )
        young = derived(
            None,
            "s",
            "checkpoint interval (Young 1974)",
            "no interruptions: no optimum",
            [mtbf],
            missing="no interruption rate",
        )
        good = derived(1.0, "fraction", "goodput", "no interruptions: goodput 1", [mtbf])
        return Reliability(rate_per_node_hour, mtbf, none, young, good)
    mtbf = derived(
        3600.0 / (rate * nodes.value),
        "s",
        label,
        "3600 s / (interruptions per node-hour x nodes)",
        [rate_per_node_hour, nodes],
    )
    if not checkpoint_s.ok or not restart_s.ok:
        reason = checkpoint_s.missing or restart_s.missing or "checkpoint/restart time unknown"
        mi = missing_fig("s", "checkpoint interval (Daly 2006)", reason, [mtbf, checkpoint_s])
        my = missing_fig("s", "checkpoint interval (Young 1974)", reason, [mtbf, checkpoint_s])
        mg = missing_fig("fraction", "goodput", reason, [mtbf, checkpoint_s, restart_s])
        return Reliability(rate_per_node_hour, mtbf, mi, my, mg)
    tau = daly_interval_s(checkpoint_s.value, mtbf.value)
    interval = derived(
        tau,
        "s",
        "checkpoint interval (Daly 2006)",
        "sqrt(2 delta M)[1 + sqrt(delta/2M)/3 + (delta/2M)/9] - delta (Daly 2006)",
        [checkpoint_s, mtbf],
    )
    young = derived(
        young_interval_s(checkpoint_s.value, mtbf.value),
        "s",
        "checkpoint interval (Young 1974)",
        "sqrt(2 delta M) (Young 1974)",
        [checkpoint_s, mtbf],
    )
    wall_per_work = daly_wall_time_s(1.0, tau, checkpoint_s.value, restart_s.value, mtbf.value)
    good = derived(
        1.0 / wall_per_work,
        "fraction",
        "goodput",
        "T_s / T_w with T_w = M e^(R/M)(e^((tau+delta)/M) - 1) T_s/tau (Daly 2006)",
        [mtbf, interval, checkpoint_s, restart_s],
    )
    return Reliability(rate_per_node_hour, mtbf, interval, young, good)


# ------------------------------------------------------------------ price look-up

#: Default age past which a price is flagged stale (``costs.price_max_age_days``).
PRICE_MAX_AGE_DAYS = 365


def price_age(
    price: Figure, *, max_age_days: int = PRICE_MAX_AGE_DAYS, today: _dt.date | None = None
) -> FigureDict | None:
    """How old a price figure is, from the date its provenance carries (a catalog
    observation's ``as_of`` or a quote's ``as_of``).

    Returns ``{"as_of", "age_days", "max_age_days", "stale"}``; ``stale`` is true when the
    price is older than ``max_age_days`` or carries no date at all (an undated quote cannot
    be shown current). A period such as ``2025-H1`` counts from its first day. ``None``
    when the price is missing or derived from other figures (its inputs carry the dates).

    >>> from gpuplan.plan.provenance import Provenance
    >>> p = Figure(1.0, "USD/node-hour", "p", Provenance("input", "r", retrieved="2025-H1"))
    >>> price_age(p, today=_dt.date(2026, 7, 1))["age_days"].value
    546
    """
    if not price.ok or price.prov.kind not in ("catalog", "input"):
        return None
    limit = input_fig(
        max_age_days,
        "days",
        "price age limit",
        "default costs.price_max_age_days (365)"
        if max_age_days == PRICE_MAX_AGE_DAYS
        else "scenario: costs.price_max_age_days",
        default=max_age_days == PRICE_MAX_AGE_DAYS,
    )
    when = price.prov.retrieved
    start = None
    if when is not None and str(when).strip():
        try:
            start = period_start(str(when).strip())
        except ValueError:
            start = None
    if start is None:
        age = missing_fig("days", f"age of {price.label}", "the price carries no date", [price])
        return {"as_of": when, "age_days": age, "max_age_days": limit, "stale": True}
    plan_day = today or _dt.date.today()
    days = (plan_day - start).days
    age = derived(
        days,
        "days",
        f"age of {price.label}",
        f"plan date {plan_day.isoformat()} - first day of as_of {when}",
        [price, limit],
    )
    return {
        "as_of": str(when),
        "age_days": age,
        "max_age_days": limit,
        "stale": days > max_age_days,
    }


def find_override(
    overrides: Mapping[str, PriceOverride], instance: Instance
) -> tuple[str, PriceOverride] | None:
    """The scenario's ``costs.price_overrides`` entry for ``instance``, matched by id or alias
    (case-insensitively, like every catalog name); ``(key as written, entry)`` or None."""
    names = {name_key(n) for n in (instance.id, *getattr(instance, "aliases", ()))}
    for key, entry in overrides.items():
        if name_key(key) in names:
            return key, entry
    return None


# ------------------------------------------------------------------ loads


@dataclass
class TrainingLoad:
    """One training run on an option: its nodes and its run time without interruptions."""

    name: str
    nodes: Figure
    run_s: Figure


@dataclass
class ServingLoad:
    """One serving workload on an option."""

    name: str
    nodes: Figure
    output_tokens_per_month: Figure
    hours_per_month: Figure
    cost_interval_factors: tuple[float, float] | None = None


@dataclass
class ModelCost:
    """Costs under one purchasing model."""

    model: str
    price_usd_per_node_hour: Figure
    per_run_usd: dict[str, Figure] = field(default_factory=dict)
    per_month_usd: Figure | None = None
    per_million_tokens_usd: dict[str, Figure] = field(default_factory=dict)
    goodput: dict[str, Reliability] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: :func:`price_age` of the price (None when missing or derived)
    price_age: FigureDict | None = None
    #: term commitments: the term's hours and the fleet's committed spend for one term
    term_hours: Figure | None = None
    committed_spend_usd: Figure | None = None
    #: capacity blocks: the booking rules and each run's booked days
    terms: PurchaseTerms | None = None
    booked_days: dict[str, Figure] = field(default_factory=dict)
    #: cloud: the shared storage tier's price, a line of its own in the month and each run
    #: (:func:`add_cloud_storage`); what the cost leaves out, with why
    storage_usd_per_month: Figure | None = None
    storage_per_run_usd: dict[str, Figure] = field(default_factory=dict)
    excludes: list[str] = field(default_factory=list)

    @property
    def available(self) -> bool:
        return self.price_usd_per_node_hour.ok

    def run_total(self) -> Figure | None:
        runs = list(self.per_run_usd.values())
        if not runs:
            return None
        if not all(r.ok for r in runs):
            bad = next(r for r in runs if not r.ok)
            return missing_fig("USD", f"{self.model}: all training runs", bad.missing or "", runs)
        interval = None
        ivs = [r.interval for r in runs if r.interval is not None]
        if len(ivs) == len(runs):
            interval = (sum(iv[0] for iv in ivs), sum(iv[1] for iv in ivs))
        return derived(
            sum(r.value for r in runs),
            "USD",
            f"{self.model}: all training runs",
            "sum of runs",
            runs,
            interval=interval,
        )

    def to_json(self) -> FigureDict:
        return {
            "model": self.model,
            "label": MODEL_LABEL.get(self.model, self.model),
            "pay_per_use": self.model in PAY_PER_USE,
            "term": f"{TERM_YEARS[self.model]}-year" if self.model in TERM_YEARS else None,
            "term_hours": self.term_hours,
            "committed_spend_usd": self.committed_spend_usd,
            "whole_term_costed": self.model in TERM_COMMITTED,
            "capacity_block": (
                {**self.terms.to_json(), "booked_days": self.booked_days}
                if self.model == "capacity_block" and self.terms is not None
                else None
            ),
            "price_usd_per_node_hour": self.price_usd_per_node_hour,
            "price_age": self.price_age,
            "per_run_usd": self.per_run_usd,
            "all_runs_usd": self.run_total(),
            "per_month_usd": self.per_month_usd,
            "per_million_output_tokens_usd": self.per_million_tokens_usd,
            "reliability": {k: v.to_json() for k, v in self.goodput.items()},
            "notes": self.notes,
            **(
                {
                    "storage_usd_per_month": self.storage_usd_per_month,
                    "storage_per_run_usd": self.storage_per_run_usd,
                }
                if self.storage_usd_per_month is not None
                else {}
            ),
            **({"excludes": self.excludes} if self.excludes else {}),
        }


def price_model(
    model: str,
    price: Figure,
    *,
    trainings: list[TrainingLoad],
    servings: list[ServingLoad],
    utilisation: Figure,
    interruptions: dict[str, Reliability],
    fleet_nodes: Figure | None = None,
    max_price_age_days: int = PRICE_MAX_AGE_DAYS,
    today: _dt.date | None = None,
    terms: PurchaseTerms | None = None,
) -> ModelCost:
    """Costs of the loads under purchasing model ``model`` at ``price`` per node-hour
    (module docstring: pay per use, term commitments, capacity blocks, owned hardware).

    ``interruptions`` maps each training name to its :class:`Reliability` under this model
    (spot reclaims and failures for spot, failures only otherwise). ``fleet_nodes``, when it
    exceeds the workloads' nodes (a fleet grown for the teams' p95 wait target,
    :func:`gpuplan.plan.shared.fleet_parts_with_teams`), adds the extra nodes to the month
    as standing capacity paid every hour under every model; runs are not charged for them.
    ``terms`` are a capacity block's booking rules (without them a block is charged per hour
    used, and the notes say so).
    """
    term = model in TERM_COMMITTED
    owned = model == "onprem"
    block = model == "capacity_block"
    paid_every_hour = term or owned
    out = ModelCost(model, price, goodput=interruptions, terms=terms)
    if not owned:
        out.price_age = price_age(price, max_age_days=max_price_age_days, today=today)
        if out.price_age is not None and out.price_age["stale"]:
            when = out.price_age["as_of"] or "an undated source"
            out.notes.append(
                f"{model} price is stale: from {when}, older than "
                f"{max_price_age_days} days (check it, or set costs.price_overrides)"
            )
    label = f"{model}"
    term_h = term_hours_fig(model) if term else None
    out.term_hours = term_h
    if block and terms is None:
        out.notes.append(
            "capacity block booking rules unknown for this price: charged per hour used"
        )
    month_parts: list[Figure] = []
    for t in trainings:
        rel = interruptions[t.name]
        ok = price.ok and rel.goodput.ok and t.run_s.ok
        run_label = f"{label}: cost of training run {t.name}"
        why_missing = price.missing or rel.goodput.missing or t.run_s.missing
        if term and term_h is not None:
            out.per_run_usd[t.name] = _term_run_cost(
                t, price, rel, term_h, run_label, ok, why_missing, out.notes, model
            )
        elif block and terms is not None and terms.duration_increments:
            out.per_run_usd[t.name] = _block_run_cost(
                t, price, rel, terms, run_label, ok, why_missing, out
            )
        else:
            inputs = [t.nodes, t.run_s, price, rel.goodput]
            if owned:
                inputs.append(utilisation)
            value = None
            if ok:
                value = t.nodes.value * t.run_s.value / 3600.0 * price.value / rel.goodput.value
                if owned:
                    value /= utilisation.value
            interval = None
            if ok and t.run_s.interval is not None:
                lo, hi = t.run_s.interval
                scale = value / t.run_s.value
                interval = (lo * scale, hi * scale)
            formula = "nodes x run hours x price / goodput" + (" / utilisation" if owned else "")
            out.per_run_usd[t.name] = derived(
                value,
                "USD",
                run_label,
                formula,
                inputs,
                interval=interval,
                missing=None if ok else why_missing,
            )
        if price.ok:
            if paid_every_hour:
                part = derived(
                    t.nodes.value * HOURS_PER_MONTH * price.value,
                    "USD/month",
                    f"{label}: training fleet {t.name} per month",
                    "nodes x 730 h x price (paid every hour of the term)",
                    [t.nodes, price],
                )
            else:
                part = derived(
                    t.nodes.value * HOURS_PER_MONTH * utilisation.value * price.value,
                    "USD/month",
                    f"{label}: training fleet {t.name} per month",
                    "nodes x 730 h x utilisation x price (busy hours only)",
                    [t.nodes, utilisation, price],
                )
            month_parts.append(part)
    for s in servings:
        if model == "spot":
            reason = "spot capacity can be reclaimed at any time; not used for SLO-bound serving"
            out.per_million_tokens_usd[s.name] = missing_fig(
                "USD/Mtok", f"{label}: {s.name} per million output tokens", reason
            )
            out.notes.append(reason)
            month_parts.append(missing_fig("USD/month", f"{label}: {s.name} per month", reason))
            continue
        if not price.ok:
            m = missing_fig(
                "USD/month", f"{label}: {s.name} per month", price.missing or "", [price]
            )
            month_parts.append(m)
            out.per_million_tokens_usd[s.name] = missing_fig(
                "USD/Mtok", f"{label}: {s.name} per million output tokens", price.missing or ""
            )
            continue
        if paid_every_hour or block:
            monthly = derived(
                s.nodes.value * HOURS_PER_MONTH * price.value,
                "USD/month",
                f"{label}: serving fleet {s.name} per month",
                "nodes x 730 h x price (paid every hour of the term)"
                if not block
                else "nodes x 730 h x price (a booked block is paid every hour)",
                [s.nodes, price],
            )
            if block and terms is not None and terms.max_duration_days:
                out.notes.append(
                    f"a service on capacity blocks rebooks them at least every "
                    f"{terms.max_duration_days} days; capacity for the next block is not "
                    "guaranteed"
                )
        else:
            monthly = derived(
                s.nodes.value * s.hours_per_month.value * price.value,
                "USD/month",
                f"{label}: serving fleet {s.name} per month",
                "nodes x serving hours per month x price",
                [s.nodes, s.hours_per_month, price],
            )
        month_parts.append(monthly)
        per_mtok = monthly.value / s.output_tokens_per_month.value * 1e6
        mtok_interval = None
        if s.cost_interval_factors is not None:
            mtok_interval = (
                per_mtok * s.cost_interval_factors[0],
                per_mtok * s.cost_interval_factors[1],
            )
        out.per_million_tokens_usd[s.name] = derived(
            per_mtok,
            "USD/Mtok",
            f"{label}: {s.name} per million output tokens",
            "serving cost per month / output tokens served per month x 1e6",
            [monthly, s.output_tokens_per_month],
            interval=mtok_interval,
        )
    workload_nodes = [t.nodes for t in trainings] + [s.nodes for s in servings]
    if fleet_nodes is not None and price.ok:
        extra = fleet_nodes.value - sum(n.value for n in workload_nodes)
        if extra > 0:
            kept = derived(
                extra,
                "nodes",
                "nodes kept for the teams",
                "fleet nodes - the workloads' nodes",
                [fleet_nodes, *workload_nodes],
            )
            month_parts.append(
                derived(
                    extra * HOURS_PER_MONTH * price.value,
                    "USD/month",
                    f"{label}: nodes kept for the teams per month",
                    "extra nodes x 730 h x price (standing capacity, paid every hour)",
                    [kept, price],
                )
            )
    if term and term_h is not None:
        out.committed_spend_usd = _committed_spend(
            model, price, term_h, fleet_nodes, workload_nodes
        )
    if month_parts:
        if all(p.ok for p in month_parts):
            out.per_month_usd = derived(
                sum(p.value for p in month_parts),
                "USD/month",
                f"{label}: fleet cost per month",
                "sum of the training and serving fleets per month",
                month_parts,
            )
        else:
            bad = next(p for p in month_parts if not p.ok)
            out.per_month_usd = missing_fig(
                "USD/month", f"{label}: fleet cost per month", bad.missing or "", month_parts
            )
    return out


def add_cloud_storage(
    mc: ModelCost,
    storage_usd_per_month: Figure | None,
    *,
    tier: str | None,
    trainings: list[TrainingLoad],
    excluded: str | None = None,
) -> None:
    """Add the shared storage tier the plan chose for a cloud option to its costs.

    The tier is billed by the month whether the instances run or not, so the month gains
    the tier's price per month as a line of its own, and each training run gains the tier
    for the run's wall time: storage per month x (run hours / goodput) / 730 h. A tier with
    no price (or no tier) leaves the cost as it is and lists the storage in ``excludes``
    (``excluded`` says why).
    """
    if storage_usd_per_month is None or not storage_usd_per_month.ok:
        why = excluded or (
            storage_usd_per_month.missing if storage_usd_per_month is not None else None
        )
        if why:
            mc.excludes.append(f"shared storage ({why})")
        return
    label = f"{mc.model}: shared storage {tier or ''}".rstrip()
    st = derived(
        storage_usd_per_month.value,
        "USD/month",
        f"{label} per month",
        "the chosen storage tier's price per month (the option's storage section)",
        [storage_usd_per_month],
    )
    mc.storage_usd_per_month = st
    for t in trainings:
        run = mc.per_run_usd.get(t.name)
        rel = mc.goodput.get(t.name)
        if run is None or rel is None:
            continue
        if not (run.ok and rel.goodput.ok and t.run_s.ok):
            continue  # the run has no cost to add storage to; it says why already
        hours = _wall_hours(t, rel, t.run_s.value)
        per_hour = st.value / HOURS_PER_MONTH
        interval = None
        if t.run_s.interval is not None:
            lo, hi = t.run_s.interval
            interval = (
                per_hour * hours * lo / t.run_s.value,
                per_hour * hours * hi / t.run_s.value,
            )
        share = derived(
            per_hour * hours,
            "USD",
            f"{label} during training run {t.name}",
            "storage per month x wall hours of the run (run hours / goodput) / 730 h",
            [st, t.run_s, rel.goodput],
            interval=interval,
        )
        mc.storage_per_run_usd[t.name] = share
        inst_label = f"{run.label} (instances)"
        instances = replace(
            run,
            label=inst_label,
            prov=replace(run.prov, ref=inst_label) if run.prov.kind == "derived" else run.prov,
        )
        total_iv = None
        if run.interval is not None and interval is not None:
            total_iv = (run.interval[0] + interval[0], run.interval[1] + interval[1])
        mc.per_run_usd[t.name] = derived(
            run.value + share.value,
            "USD",
            run.label,
            "instances + shared storage for the run",
            [instances, share],
            interval=total_iv,
        )
    month = mc.per_month_usd
    # a purchasing model with no fleet month (no price) gets none: storage alone is not its cost
    if month is not None and month.ok:
        mc.per_month_usd = derived(
            month.value + st.value,
            "USD/month",
            month.label,
            "the fleet per month + shared storage per month",
            [month, st],
        )


def _wall_hours(t: TrainingLoad, rel: Reliability, run_s: float) -> float:
    return float(run_s / 3600.0 / rel.goodput.value)


def _term_run_cost(
    t: TrainingLoad,
    price: Figure,
    rel: Reliability,
    term_h: Figure,
    run_label: str,
    ok: bool,
    why_missing: str | None,
    notes: list[str],
    model: str,
) -> Figure:
    """A run on a term commitment pays the whole terms it needs (committed spend)."""
    inputs = [t.nodes, t.run_s, rel.goodput, term_h, price]
    if not ok:
        return derived(None, "USD", run_label, "missing", inputs, missing=why_missing)

    def cost(run_s: float) -> float:
        terms_needed = max(1, math.ceil(_wall_hours(t, rel, run_s) / term_h.value - 1e-9))
        return float(t.nodes.value * terms_needed * term_h.value * price.value)

    wall = _wall_hours(t, rel, t.run_s.value)
    interval = None
    if t.run_s.interval is not None:
        interval = (cost(t.run_s.interval[0]), cost(t.run_s.interval[1]))
    used = wall / term_h.value
    if used < 1.0:
        notes.append(
            f"{MODEL_LABEL[model]}: run {t.name} takes {wall / 24.0:,.1f} days, "
            f"{used:.1%} of the {term_h.value / 24.0:,.0f}-day term; the whole term is costed "
            "(committed spend), the rest is idle unless other work uses it"
        )
    return derived(
        cost(t.run_s.value),
        "USD",
        run_label,
        "nodes x ceil(wall hours / term hours) x term hours x price "
        "(wall hours = run hours / goodput; the whole commitment is paid)",
        inputs,
        interval=interval,
    )


def _block_run_cost(
    t: TrainingLoad,
    price: Figure,
    rel: Reliability,
    terms: PurchaseTerms,
    run_label: str,
    ok: bool,
    why_missing: str | None,
    out: ModelCost,
) -> Figure:
    """A run on capacity blocks books the shortest allowed duration covering its wall time."""
    assert terms.duration_increments
    inc = terms.duration_increments
    rule = terms.max_duration_fig()
    assert rule is not None
    inputs = [t.nodes, t.run_s, rel.goodput, price, rule]
    if not ok:
        return derived(None, "USD", run_label, "missing", inputs, missing=why_missing)
    wall_days = _wall_hours(t, rel, t.run_s.value) / 24.0
    days = block_days(wall_days, inc)
    if days is None:
        reason = (
            f"run {t.name} needs {wall_days:,.1f} days; a capacity block (with its "
            f"extensions) lasts at most {terms.max_duration_days} days"
        )
        out.notes.append(reason)
        return derived(None, "USD", run_label, "missing", inputs, missing=reason)
    booked = derived(
        days,
        "days",
        f"capacity block booked for {t.name}",
        f"shortest bookable duration >= run hours / goodput / 24 ({terms.rule_text()})",
        [t.run_s, rel.goodput, rule],
    )
    out.booked_days[t.name] = booked
    if terms.max_instances and t.nodes.value > terms.max_instances:
        blocks = math.ceil(t.nodes.value / terms.max_instances)
        out.notes.append(
            f"run {t.name} needs {t.nodes.value:g} instances: {blocks} capacity blocks of at "
            f"most {terms.max_instances} instances each"
        )

    def cost(run_s: float) -> float | None:
        d = block_days(_wall_hours(t, rel, run_s) / 24.0, inc)
        return None if d is None else t.nodes.value * d * 24.0 * price.value

    interval = None
    if t.run_s.interval is not None:
        lo, hi = cost(t.run_s.interval[0]), cost(t.run_s.interval[1])
        if lo is not None and hi is not None:
            interval = (lo, hi)
    return derived(
        t.nodes.value * days * 24.0 * price.value,
        "USD",
        run_label,
        "nodes x booked days x 24 h x price (booked up front, paid whether used or not)",
        [t.nodes, booked, price],
        interval=interval,
    )


def _committed_spend(
    model: str,
    price: Figure,
    term_h: Figure,
    fleet_nodes: Figure | None,
    workload_nodes: list[Figure],
) -> Figure:
    """The fleet's spend over one term of the commitment: nodes x term hours x price."""
    if fleet_nodes is not None and fleet_nodes.ok:
        value, src = fleet_nodes.value, [fleet_nodes]
    else:
        value, src = sum(n.value for n in workload_nodes if n.ok), workload_nodes
    label = f"{MODEL_LABEL[model]}: committed spend for the term"
    if not price.ok or value <= 0:
        reason = price.missing or "no nodes sized"
        return derived(None, "USD", label, "missing", [price, term_h, *src], missing=reason)
    return derived(
        value * term_h.value * price.value,
        "USD",
        label,
        "fleet nodes x term hours x price (paid whether used or not)",
        [*src, term_h, price],
    )


# ------------------------------------------------------------------ on premises


@dataclass
class OnPremTCO:
    """Owned fleet: capex, yearly costs and the hourly equivalent per node."""

    capex_usd: Figure
    capex_per_year_usd: Figure
    energy_per_year_usd: Figure
    ops_per_year_usd: Figure
    total_per_year_usd: Figure
    usd_per_node_hour: Figure
    excludes: list[str]
    storage_per_year_usd: Figure | None = None
    #: the shared storage's share of the yearly cost (capex / depreciation years, or a quoted
    #: yearly rate); None when the owned cost has no storage in it
    storage_in_total_per_year_usd: Figure | None = None

    def to_json(self) -> FigureDict:
        out = {
            "capex_usd": self.capex_usd,
            "capex_per_year_usd": self.capex_per_year_usd,
            "energy_per_year_usd": self.energy_per_year_usd,
            "operations_per_year_usd": self.ops_per_year_usd,
            "total_per_year_usd": self.total_per_year_usd,
            "usd_per_node_hour": self.usd_per_node_hour,
            "excludes": self.excludes,
        }
        if self.storage_in_total_per_year_usd is not None:
            out["storage_in_total_per_year_usd"] = self.storage_in_total_per_year_usd
        if self.storage_per_year_usd is not None:
            out["storage_per_year_usd"] = self.storage_per_year_usd
        return out


def onprem_tco(
    *,
    nodes: Figure,
    node_price_usd: Figure,
    network_capex_usd: Figure,
    depreciation_years: Figure,
    facility_power_w: Figure,
    electricity_usd_per_kwh: Figure,
    ops_usd_per_node_per_year: Figure,
    staff_usd_per_year: Figure,
    storage_capex_usd: Figure | None = None,
    storage_usd_per_year: Figure | None = None,
) -> OnPremTCO:
    """Total cost of ownership of an owned fleet (module docstring).

    Shared storage is its own line: ``storage_capex_usd`` (appliances bought) joins the
    capex, ``storage_usd_per_year`` (a quoted monthly rate x 12) the yearly total; a storage
    figure that is missing is listed in ``excludes``.
    """
    excludes: list[str] = []
    node_capex = derived(
        nodes.value * node_price_usd.value if node_price_usd.ok else None,
        "USD",
        "node capex",
        "nodes x node price",
        [nodes, node_price_usd],
    )
    parts = [node_capex]
    names = ["node capex"]
    if network_capex_usd.ok:
        parts.append(network_capex_usd)
        names.append("network capex")
    else:
        excludes.append(f"network equipment ({network_capex_usd.missing or 'no price'})")
    if storage_capex_usd is not None and storage_capex_usd.ok:
        parts.append(storage_capex_usd)
        names.append("storage capex")
    elif storage_capex_usd is not None and storage_usd_per_year is None:
        excludes.append(f"shared storage ({storage_capex_usd.missing or 'no price'})")
    capex = derived(
        sum(p.value for p in parts) if all(p.ok for p in parts) else None,
        "USD",
        "capex",
        " + ".join(names),
        parts,
    )
    if not depreciation_years.ok:
        capex_y = missing_fig(
            "USD/year",
            "capex per year",
            "no depreciation period: add costs.depreciation_years",
            [capex],
        )
    else:
        capex_y = derived(
            capex.value / depreciation_years.value if capex.ok else None,
            "USD/year",
            "capex per year",
            "capex / depreciation years (straight line)",
            [capex, depreciation_years],
        )
    if electricity_usd_per_kwh.ok and facility_power_w.ok:
        energy = derived(
            facility_power_w.value / 1000.0 * HOURS_PER_YEAR * electricity_usd_per_kwh.value,
            "USD/year",
            "energy per year",
            "facility kW x 8,760 h x USD per kWh (full draw all year: upper bound)",
            [facility_power_w, electricity_usd_per_kwh],
        )
    else:
        reason = (
            "no electricity price: add costs.electricity_usd_per_kwh"
            if not electricity_usd_per_kwh.ok
            else (facility_power_w.missing or "facility power unknown")
        )
        energy = missing_fig(
            "USD/year", "energy per year", reason, [facility_power_w, electricity_usd_per_kwh]
        )
    ops_parts: list[Figure] = []
    if ops_usd_per_node_per_year.ok:
        ops_parts.append(
            derived(
                nodes.value * ops_usd_per_node_per_year.value,
                "USD/year",
                "operations per year (per node)",
                "nodes x operations per node-year",
                [nodes, ops_usd_per_node_per_year],
            )
        )
    else:
        excludes.append("operations per node (add costs.ops_usd_per_node_per_year)")
    if staff_usd_per_year.ok:
        ops_parts.append(staff_usd_per_year)
    else:
        excludes.append("staff (add costs.staff_usd_per_year)")
    ops = derived(
        sum(p.value for p in ops_parts) if ops_parts else 0.0,
        "USD/year",
        "operations per year",
        "operations per node x nodes + staff" if ops_parts else "none given",
        ops_parts or [nodes],
    )
    total_parts = [capex_y, energy, ops]
    total_formula = "capex per year + energy per year + operations per year"
    if storage_usd_per_year is not None:
        total_parts.append(storage_usd_per_year)
        total_formula += " + storage per year"
    total_ok = all(p.ok for p in total_parts)
    total = derived(
        sum(p.value for p in total_parts) if total_ok else None,
        "USD/year",
        "owned fleet cost per year",
        total_formula,
        total_parts,
    )
    per_node_hour = derived(
        total.value / (nodes.value * HOURS_PER_YEAR) if total.ok else None,
        "USD/node-hour",
        "owned cost per node-hour",
        "cost per year / (nodes x 8,760 h)",
        [total, nodes],
    )
    storage_in: Figure | None = None
    if storage_usd_per_year is not None and storage_usd_per_year.ok:
        storage_in = storage_usd_per_year
    elif storage_capex_usd is not None and storage_capex_usd.ok and depreciation_years.ok:
        storage_in = derived(
            storage_capex_usd.value / depreciation_years.value,
            "USD/year",
            "storage capex per year",
            "storage capex / depreciation years (straight line)",
            [storage_capex_usd, depreciation_years],
        )
    return OnPremTCO(
        capex,
        capex_y,
        energy,
        ops,
        total,
        per_node_hour,
        excludes,
        storage_usd_per_year,
        storage_in_total_per_year_usd=storage_in,
    )


def break_even_utilisation(tco: OnPremTCO, nodes: Figure, on_demand: Figure) -> Figure:
    """Utilisation above which owning beats renting on demand.

    ``u* = owned cost per year / (8,760 h x nodes x on-demand price per node-hour)``; above
    1 owning never pays off at that price.
    """
    return break_even_against(tco.total_per_year_usd, nodes, on_demand)


def break_even_against(
    owned_per_year: Figure,
    nodes: Figure,
    price: Figure,
    rented_storage_per_year: Figure | None = None,
    storage_left_out: str | None = None,
) -> Figure:
    """:func:`break_even_utilisation` from the owned cost per year and any rented price per
    owned-node-equivalent hour.

    Renting at utilisation u costs ``u x (8,760 h x nodes x price + S)`` a year, with ``S``
    the cloud storage for a year of use (``rented_storage_per_year``: the tier is held while
    the rented fleet runs, as a run's cost counts it); owning costs ``O`` (its own storage in
    it). They are equal at ``u* = O / (8,760 h x nodes x price + S)``. Give ``S`` only when
    ``O`` holds the owned storage too (like for like, :func:`storage_like_for_like`);
    ``storage_left_out`` says why storage is in neither.

    >>> own = input_fig(876000.0, "USD/year", "owned", "r")
    >>> n = input_fig(10, "nodes", "n", "r")
    >>> break_even_against(own, n, input_fig(20.0, "USD/node-hour", "p", "r")).value
    0.5
    >>> s = input_fig(1752000.0, "USD/year", "cloud storage", "r")
    >>> break_even_against(own, n, input_fig(20.0, "USD/node-hour", "p", "r"), s).value
    0.25
    """
    if not owned_per_year.ok or not price.ok:
        return missing_fig(
            "fraction",
            "break-even utilisation (own vs rent)",
            owned_per_year.missing or price.missing or "missing price",
            [owned_per_year, price],
        )
    if rented_storage_per_year is not None and rented_storage_per_year.ok:
        return derived(
            owned_per_year.value
            / (HOURS_PER_YEAR * nodes.value * price.value + rented_storage_per_year.value),
            "fraction",
            f"break-even utilisation (own vs {price.label}, storage on both sides)",
            "owned cost per year (its storage in it) / (8,760 h x nodes x rented price per "
            "node-hour + cloud storage for a year of use)",
            [owned_per_year, rented_storage_per_year, nodes, price],
        )
    formula = "owned cost per year / (8,760 h x nodes x rented price per node-hour)"
    if storage_left_out:
        formula += f"; shared storage left out of both sides ({storage_left_out})"
    return derived(
        owned_per_year.value / (HOURS_PER_YEAR * nodes.value * price.value),
        "fraction",
        f"break-even utilisation (own vs {price.label})",
        formula,
        [owned_per_year, nodes, price],
    )


def storage_like_for_like(
    owned_per_year: Figure,
    owned_storage_per_year: Figure | None,
    cloud_storage_per_month: Figure | None,
    cloud: str,
) -> tuple[Figure, Figure | None, str | None]:
    """Owned cost and cloud storage per year to compare like for like, and what is left out.

    Both priced: the owned cost as it is (its storage in it) and the cloud tier's price per
    month x 12. The cloud tier unpriced: the owned storage per year is taken out of the owned
    cost and storage is in neither side. The owned storage unpriced: the cloud storage is not
    counted. A break-even with storage on one side only would favour the side without it.

    >>> o = input_fig(1000.0, "USD/year", "owned", "r")
    >>> own_st = input_fig(200.0, "USD/year", "owned storage", "r")
    >>> m = input_fig(10.0, "USD/month", "cloud storage", "r")
    >>> [f.value if f is not None else None for f in storage_like_for_like(o, own_st, m, "aws")[:2]]
    [1000.0, 120.0]
    >>> storage_like_for_like(o, own_st, None, "aws")[0].value
    800.0
    """
    cloud_ok = cloud_storage_per_month is not None and cloud_storage_per_month.ok
    owned_ok = owned_storage_per_year is not None and owned_storage_per_year.ok
    if owned_ok and cloud_ok and cloud_storage_per_month is not None:
        rented = derived(
            cloud_storage_per_month.value * 12,
            "USD/year",
            f"{cloud} shared storage per year",
            "the cloud tier's price per month x 12 (a year of use)",
            [cloud_storage_per_month],
        )
        return owned_per_year, rented, None
    if owned_ok and owned_storage_per_year is not None and owned_per_year.ok:
        without = derived(
            owned_per_year.value - owned_storage_per_year.value,
            "USD/year",
            "owned cost per year without its storage",
            "owned cost per year - owned storage per year",
            [owned_per_year, owned_storage_per_year],
        )
        return (
            without,
            None,
            f"the {cloud} storage tier has no price, so the owned storage is out too",
        )
    if cloud_ok:
        return (
            owned_per_year,
            None,
            "the owned storage has no price, so the cloud storage is out too",
        )
    return owned_per_year, None, "neither the owned nor the cloud storage has a price"


def per_owned_node_price(
    price: Figure, rented_gpus_per_node: Figure, owned_gpus_per_node: Figure, label: str
) -> Figure:
    """A rented price per node-hour expressed per owned node of another size (per GPU-hour x
    the owned node's GPUs).

    >>> p = input_fig(40.0, "USD/node-hour", "p", "r")
    >>> per_owned_node_price(p, input_fig(8, "GPUs", "a", "r"), input_fig(4, "GPUs", "b", "r"), "x").value
    20.0
    """
    return derived(
        price.value / rented_gpus_per_node.value * owned_gpus_per_node.value if price.ok else None,
        "USD/node-hour",
        label,
        "rented price / GPUs per rented node x GPUs per owned node",
        [price, rented_gpus_per_node, owned_gpus_per_node],
    )


def discounted_price(on_demand: Figure, discount: Figure, model: str) -> Figure:
    """A commitment price from the on-demand price and a discount the user gave."""
    return derived(
        on_demand.value * (1.0 - discount.value) if on_demand.ok else None,
        "USD/node-hour",
        f"{model} price (on-demand less the scenario's discount)",
        "on-demand price x (1 - commitment discount)",
        [on_demand, discount],
    )


def scaled(fig: Figure, factor: float, why: str) -> Figure:
    """``fig`` x ``factor`` (sensitivity cases), with the factor as a default input."""
    f = input_fig(factor, "x", why, f"sensitivity factor: {why}", default=True)
    return derived(
        fig.value * factor if fig.ok else None,
        fig.unit,
        f"{fig.label} x {factor:g}",
        f"{fig.label} x sensitivity factor",
        [fig, f],
    )


# ------------------------------------------------------------------ the option's prices and costs (moved from options.py)
def instance_multiple_fig(ctx: PlanContext, opt: Option) -> Figure | None:
    """The catalog's ``instance_multiple`` of a cloud option's instance (None if sold singly)."""
    if opt.kind != "cloud" or not opt.instance_row.instance_multiple:
        return None
    inst = opt.instance_row
    return ctx.cat(
        "instance", inst, "instance_multiple", "instances", f"{inst.id} instances per UltraServer"
    )


def whole_units(ctx: PlanContext, opt: Option, nodes: Figure) -> Figure:
    """``nodes`` rounded up to whole UltraServers where the instance is sold only in them."""
    mult = instance_multiple_fig(ctx, opt)
    if mult is None or not nodes.ok or nodes.value % mult.value == 0:
        return nodes
    return derived(
        math.ceil(nodes.value / mult.value) * mult.value,
        "nodes",
        f"{nodes.label} in whole UltraServers",
        "ceil(nodes / instances per UltraServer) x instances per UltraServer",
        [nodes, mult],
    )


def _loads(ctx: PlanContext, opt: Option) -> tuple[list[TrainingLoad], list[ServingLoad]]:
    """The workloads as the cost models see them: each on the nodes it is billed for (whole
    UltraServers where the instance is sold only in them)."""
    tl = [
        TrainingLoad(t.name, whole_units(ctx, opt, t.nodes), t.run_s)
        for t in opt.training
        if t.nodes is not None and t.run_s is not None
    ]
    sl = [
        ServingLoad(
            s.name,
            whole_units(ctx, opt, s.nodes),
            s.output_tokens_per_month,
            s.hours_per_month,
            s.cost_interval_factors,
        )
        for s in opt.serving
        if s.nodes is not None
        and s.output_tokens_per_month is not None
        and s.hours_per_month is not None
    ]
    return tl, sl


def _reliabilities(
    ctx: PlanContext, opt: Option, trainings: list[TrainingLoad], spot: bool
) -> dict[str, Reliability]:
    costs = ctx.scenario.costs
    fail = ctx.inp(("costs", "node_failures_per_node_hour"), "1/node-hour", "node failure rate")
    if spot:
        sp = ctx.inp(
            ("costs", "spot_interruptions_per_node_hour"), "1/node-hour", "spot interruption rate"
        )
        if not sp.ok:
            rate = missing_fig(
                "1/node-hour",
                "interruption rate (spot)",
                "no spot interruption rate: add costs.spot_interruptions_per_node_hour",
            )
        else:
            rate = derived(
                sp.value + (fail.value if fail.ok else 0.0),
                "1/node-hour",
                "interruption rate (spot)",
                "spot interruptions + node failures per node-hour",
                [sp, fail] if fail.ok else [sp],
            )
    else:
        rate = (
            fail
            if fail.ok
            else input_fig(
                0.0,
                "1/node-hour",
                "node failure rate",
                "default costs.node_failures_per_node_hour (none given)",
                default=True,
            )
        )
    delta = opt.storage.get("checkpoint_write_s") if opt.storage else None
    if delta is None:
        delta = missing_fig("s", "checkpoint write time", "no training storage sized")
    if costs.restart_s is not None:
        restart = ctx.inp(("costs", "restart_s"), "s", "restart time")
    elif opt.storage.get("restart_read_s") is not None:
        restart = opt.storage["restart_read_s"]
    else:
        restart = derived(
            delta.value if delta.ok else None,
            "s",
            "restart time (= checkpoint write time)",
            "no restart time given: taken equal to the checkpoint write time",
            [delta],
        )
    out = {}
    for t in trainings:
        if not rate.ok:
            g = missing_fig("fraction", "goodput", rate.missing or "")
            out[t.name] = Reliability(rate, g, g, g, g)
            continue
        out[t.name] = reliability(
            nodes=t.nodes, rate_per_node_hour=rate, checkpoint_s=delta, restart_s=restart
        )
    return out


def _cloud_kinds(inst: Instance, override: tuple[str, PriceOverride] | None) -> list[str]:
    """The purchase kinds priced for a cloud instance: the baseline kinds, every kind the
    catalog has an observation of (a rate or a documented gap) and every kind overridden."""
    kinds = list(BASELINE_CLOUD_KINDS)
    extra = set(inst.price_kinds())
    if override is not None:
        extra |= {k for k in CLOUD_KINDS if getattr(override[1], k, None) is not None}
    kinds += [k for k in CLOUD_KINDS if k in extra and k not in kinds]
    return kinds


def _block_terms(inst: Instance) -> PurchaseTerms | None:
    """A capacity block's booking rules from the catalog (they hold for negotiated rates too)."""
    obs = [p for p in inst.prices if p.model == "capacity_block" and p.duration_increments]
    if not obs:
        return None
    o = max(obs, key=lambda p: p.as_of_date)
    return _terms_of(inst, o)


def _terms_of(inst: Instance, o: PriceObservation) -> PurchaseTerms:
    return PurchaseTerms(
        o.duration_increments,
        o.max_instances,
        o.source,
        ref=f"catalog instance/{inst.id} prices.capacity_block ({o.region or 'any region'})",
        as_of=o.as_of,
    )


def _cloud_prices(ctx: PlanContext, opt: Option) -> dict[str, tuple[Figure, PurchaseTerms | None]]:
    """Price per node-hour of every purchase kind of a cloud option (with a capacity block's
    booking rules): the scenario's negotiated rate, else the catalog's latest in the
    region, else a commitment discount off on-demand (reserved kinds), else missing with
    the catalog's note or what to add."""
    inst = opt.instance_row
    region = ctx.scenario.constraints.region_for(inst.cloud)
    override = find_override(ctx.scenario.costs.price_overrides, inst)
    prices: dict[str, tuple[Figure, PurchaseTerms | None]] = {}
    for model in _cloud_kinds(inst, override):
        obs = inst.price(model, region)
        label = f"{inst.id} {model} price"
        terms = _block_terms(inst) if model == "capacity_block" else None
        if override is not None and getattr(override[1], model, None) is not None:
            path = ("costs", "price_overrides", override[0], model)
            prices[model] = (ctx.quote(path, "USD/node-hour", f"{label} (negotiated)"), terms)
            continue
        if obs is not None:
            if model == "capacity_block" and obs.duration_increments:
                terms = _terms_of(inst, obs)
            prices[model] = (ctx.price(inst, obs, label), terms)
            continue
        where = f" in {region}" if region else ""
        reason = f"the catalog has no {model} price for {inst.id}{where}"
        gap = inst.price_gap(model)
        if gap is not None:
            reason += f": {gap.notes.strip()} ({gap.as_of})"
        if model in ("reserved_1y", "reserved_3y"):
            disc = getattr(ctx.scenario.costs.commitment_discounts, model)
            od = prices.get("on_demand")
            if disc is not None and od is not None and od[0].ok:
                d = ctx.inp(
                    ("costs", "commitment_discounts", model), "fraction", f"{model} discount"
                )
                prices[model] = (discounted_price(od[0], d, model), None)
                continue
            reason += f" (add costs.commitment_discounts.{model} to derive one from on-demand)"
        elif region and inst.price(model) is not None:
            reason += (
                f" (prices exist in other regions; set constraints.regions.{inst.cloud}"
                f" or costs.price_overrides.{inst.id}.{model})"
            )
        elif gap is None:
            reason += f" (set costs.price_overrides.{inst.id}.{model} to a quoted rate)"
        prices[model] = (missing_fig("USD/node-hour", label, reason), None)
    return prices


def _storage_costs(opt: Option) -> dict[str, Figure]:
    """The chosen storage tier's capex, or its quoted monthly price x 12, for the owned TCO."""
    st = opt.storage or {}
    if st.get("chosen") is None:
        return {}
    monthly = st.get("usd_per_month")
    if monthly is not None and monthly.ok:
        # a quote per GiB-month: the storage is paid as it is used, not bought (no capex)
        return {
            "storage_usd_per_year": derived(
                monthly.value * 12,
                "USD/year",
                "shared storage per year",
                "storage cost per month x 12",
                [monthly],
            )
        }
    capex = st.get("capex_usd")
    if capex is not None:
        return {"storage_capex_usd": capex}
    return {
        "storage_capex_usd": missing_fig(
            "USD", "storage capex", f"no price for storage tier {st['chosen']}"
        )
    }


def _cloud_storage(opt: Option, mc: ModelCost, trainings: list[TrainingLoad]) -> None:
    """The storage tier chosen for a cloud option, in its cost (see cost.add_cloud_storage)."""
    st = opt.storage or {}
    chosen = st.get("chosen")
    if chosen is not None:
        monthly = st.get("usd_per_month")
        why = None
        if monthly is None or not monthly.ok:
            reason = monthly.missing if monthly is not None else None
            why = reason if reason and chosen in reason else f"{chosen}: {reason or 'no price'}"
        add_cloud_storage(mc, monthly, tier=chosen, trainings=trainings, excluded=why)
    elif "capacity_bytes" in st:
        add_cloud_storage(
            mc, None, tier=None, trainings=trainings, excluded="no catalog storage tier fits"
        )


def price_option(ctx: PlanContext, opt: Option) -> None:
    """Every purchasing model of the option (see gpuplan.plan.cost)."""
    trainings, servings = _loads(ctx, opt)
    util = ctx.inp(("costs", "utilisation"), "fraction", "utilisation")
    if opt.kind == "cloud":
        prices = _cloud_prices(ctx, opt)
        for model, (price, terms) in prices.items():
            rel = _reliabilities(ctx, opt, trainings, spot=model == "spot")
            opt.costs[model] = price_model(
                model,
                price,
                trainings=trainings,
                servings=servings,
                utilisation=util,
                interruptions=rel,
                fleet_nodes=opt.nodes,
                max_price_age_days=ctx.scenario.costs.price_max_age_days,
                terms=terms,
            )
            _cloud_storage(opt, opt.costs[model], trainings)
        return
    node = opt.node_row
    c = ctx.scenario.costs
    if node.id in c.onprem_node_prices_usd:
        node_price = ctx.quote(
            ("costs", "onprem_node_prices_usd", node.id), "USD", f"{node.id} price"
        )
    else:
        node_price = ctx.cat(
            "node",
            node,
            "price_usd",
            "USD",
            f"{node.id} price",
            missing=f"no price for node {node.id}: add costs.onprem_node_prices_usd.{node.id} (a quote)",
        )
    net = opt.fabric.get("capex_usd") or missing_fig("USD", "network capex", "fabric not designed")
    facility = opt.power.get("facility_power_w") or missing_fig(
        "W", "facility power", "no power model"
    )
    opt.tco = onprem_tco(
        nodes=opt.sized_nodes,
        node_price_usd=node_price,
        network_capex_usd=net,
        depreciation_years=ctx.inp(("costs", "depreciation_years"), "years", "depreciation"),
        facility_power_w=facility,
        electricity_usd_per_kwh=ctx.inp(
            ("costs", "electricity_usd_per_kwh"), "USD/kWh", "electricity price"
        ),
        ops_usd_per_node_per_year=ctx.inp(
            ("costs", "ops_usd_per_node_per_year"), "USD/node-year", "operations per node"
        ),
        staff_usd_per_year=ctx.inp(("costs", "staff_usd_per_year"), "USD/year", "staff"),
        **_storage_costs(opt),
    )
    rel = _reliabilities(ctx, opt, trainings, spot=False)
    opt.costs["onprem"] = price_model(
        "onprem",
        opt.tco.usd_per_node_hour,
        trainings=trainings,
        servings=servings,
        utilisation=util,
        interruptions=rel,
        fleet_nodes=opt.nodes,
    )
    if opt.tco.excludes:
        opt.notes.append("owned cost excludes: " + "; ".join(opt.tco.excludes))


def link_break_even(options: list[Option]) -> None:
    """Break-even utilisation of each on-premises option against the cheapest cloud
    on-demand price per GPU-hour for the same GPU (see gpuplan.plan.cost)."""
    for opt in options:
        if opt.kind != "onprem" or opt.tco is None:
            continue
        best = None
        for other in options:
            if other.kind != "cloud" or other.gpu.id != opt.gpu.id:
                continue
            cand = other.costs.get("on_demand")
            if cand is None or not cand.price_usd_per_node_hour.ok:
                continue
            per_gpu = cand.price_usd_per_node_hour.value / other.gpus_per_node.value
            if best is None or per_gpu < best[0]:
                best = (per_gpu, other, cand)
        if best is None:
            opt.break_even = missing_fig(
                "fraction",
                "break-even utilisation (own vs on-demand)",
                f"no cloud on-demand price for {opt.gpu.id} among the candidates",
            )
            continue
        _, other, od = best
        od_price = od.price_usd_per_node_hour
        per_node_equiv = derived(
            od_price.value / other.gpus_per_node.value * opt.gpus_per_node.value,
            "USD/node-hour",
            f"{other.platform.id} on-demand per {opt.platform.id}-sized node",
            "on-demand price / GPUs per instance x GPUs per owned node",
            [od_price, other.gpus_per_node, opt.gpus_per_node],
        )
        own_y, rented_st, left_out = storage_like_for_like(
            opt.tco.total_per_year_usd,
            opt.tco.storage_in_total_per_year_usd,
            od.storage_usd_per_month,
            other.id,
        )
        opt.break_even = break_even_against(
            own_y, opt.sized_nodes, per_node_equiv, rented_st, left_out
        )
        opt.break_even_against = other.id


def check_budget(ctx: PlanContext, opt: Option) -> None:
    """Mark purchasing models over budget; the option binds when none is within it."""
    c = ctx.scenario.constraints
    if c.budget_usd_per_month is None and c.budget_usd_per_run is None:
        return
    ok_any = False
    worst_msgs = []
    for model, mc in opt.costs.items():
        ok = mc.available
        if c.budget_usd_per_month is not None:
            month = mc.per_month_usd
            if month is None or not month.ok:
                ok = False  # a cost that cannot be computed cannot be shown within budget
            elif month.value > c.budget_usd_per_month:
                ok = False
                worst_msgs.append((month, "budget_usd_per_month", model))
        if c.budget_usd_per_run is not None:
            for run in mc.per_run_usd.values():
                if not run.ok:
                    ok = False
                elif run.value > c.budget_usd_per_run:
                    ok = False
                    worst_msgs.append((run, "budget_usd_per_run", model))
        opt.within_budget[model] = ok
        ok_any = ok_any or ok
    if not ok_any and worst_msgs:
        fig, which, _ = min(worst_msgs, key=lambda x: x[0].value)
        limit = ctx.inp(("constraints", which), "USD", which)
        opt.binding.append(
            {
                "constraint": which,
                "option": opt.id,
                "message": Text(
                    "the cheapest purchasing model costs {needed}; the budget is {limit}",
                    {"needed": fig, "limit": limit},
                ),
                "needed": fig,
                "limit": limit,
            }
        )
