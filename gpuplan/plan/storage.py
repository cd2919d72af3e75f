"""Storage sizing: capacity, sustained read for the data pipeline, checkpoint write bandwidth.

The formulas come first; :func:`build_storage` (at the end) sizes an option's shared tier
from the catalog's storage rows and the training workloads with them.

Method
------
* Checkpoint size = parameters x bytes per parameter (mixed-precision Adam keeps bf16
  weights plus fp32 master weights and two fp32 moments: 2 + 12 = 14 bytes per parameter
  without gradients; Rajbhandari et al. 2020, "ZeRO", section 3.1).
* Capacity = dataset + retained checkpoints.
* Sustained read = training tokens/s x bytes per token (or samples/s x bytes per sample).
  Bytes per token default to the smallest integer type that holds the vocabulary
  (2 bytes up to 65,536 tokens, else 4).
* Checkpoint write bandwidth = checkpoint size / write budget.
* A parallel file system tier whose throughput scales with capacity (MB/s per TiB, as
  Lustre-type tiers are sold) is provisioned at the largest of: the capacity needed, the
  capacity that gives the read bandwidth, the capacity that gives the write bandwidth;
  rounded up to the tier's increment and at least its minimum. The pipeline reads and
  the checkpoint writes are not concurrent, so each is checked on its own.
* An appliance tier (DDN EXAScaler AI400X2-class, IBM Storage Scale System, VAST DBox,
  WEKA backends, HPE ClusterStor: throughput and capacity per box, not per TiB) is bought
  in whole appliances: n = max(ceil(capacity / usable bytes per appliance), ceil(read B/s /
  read B/s per appliance), ceil(min(write B/s, writers' cap) / write B/s per appliance)),
  reads and writes each against the datasheet figure for that direction; boxes beyond what
  the writers' links can fill are not bought, and never fewer than the vendor's minimum
  system (``min_appliances``). The appliances' rack units, power and capex
  are n x the per-appliance figures where the catalog has them. A per-appliance figure the
  catalog lacks leaves the tier "not sized" and names the field.
* Whatever the tier delivers, a checkpoint is written by N writers (nodes), each no
  faster than its own link to storage: write B/s = min(tier write B/s, N x per-client
  B/s). The checkpoint fits when size / that rate is within ``checkpoint.write_budget_s``;
  when the clients are the cap, more storage does not help and the fit says so.
* The trial node's fio sequential read (per node) tells whether node-local NVMe could
  feed the pipeline instead: per-node need = sustained read / nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuplan.plan.context import PlanContext
from gpuplan.plan.provenance import (
    Figure,
    derived,
    missing_fig,
)

if TYPE_CHECKING:
    from gpuplan.catalogs.schema import StorageTier as StorageTierRow
    from gpuplan.plan.options import Option

TIB = 2**40
GIB = 2**30


def bytes_per_token_for_vocab(vocab: int) -> int:
    """Smallest integer width (2 or 4 bytes) that stores token ids of a vocabulary.

    >>> bytes_per_token_for_vocab(32000), bytes_per_token_for_vocab(128256)
    (2, 4)
    """
    return 2 if vocab <= 2**16 else 4


@dataclass(frozen=True)
class StorageTier:
    """A storage tier normalised from the catalog (throughput scales with capacity).

    Throughputs are bytes/s per TiB provisioned (``None`` when the catalog has no such
    figure); capacities in bytes; ``price_usd_per_gib_month`` may be missing.
    Each numeric attribute is a :class:`Figure` so the plan can cite it.
    """

    id: str
    name: str
    read_bytes_per_s_per_tib: Figure
    write_bytes_per_s_per_tib: Figure
    min_capacity_bytes: Figure
    max_capacity_bytes: Figure
    increment_bytes: Figure
    price_usd_per_gib_month: Figure
    cloud: str | None = None
    throughput_increment_bytes_per_s: Figure | None = None
    gpudirect_storage: bool | None = None
    #: where the price comes from, or why there is none (:func:`price_status`)
    price_status: str = ""


def checkpoint_bytes(params: Figure, bytes_per_param: Figure) -> Figure:
    """Size of one checkpoint: parameters x bytes per parameter (ZeRO sec. 3.1)."""
    return derived(
        params.value * bytes_per_param.value,
        "B",
        "checkpoint size",
        "parameters x bytes per parameter (Rajbhandari et al. 2020, ZeRO, sec. 3.1)",
        [params, bytes_per_param],
    )


def capacity_bytes(dataset: Figure, ckpt: Figure, retained: Figure) -> Figure:
    """Dataset plus retained checkpoints."""
    return derived(
        dataset.value + retained.value * ckpt.value,
        "B",
        "storage capacity needed",
        "dataset + retained checkpoints x checkpoint size",
        [dataset, retained, ckpt],
    )


def read_bandwidth(tokens_per_s: Figure, bytes_per_token: Figure) -> Figure:
    """Sustained read of the data pipeline: tokens/s x bytes per token."""
    interval = None
    if tokens_per_s.interval is not None:
        interval = (
            tokens_per_s.interval[0] * bytes_per_token.value,
            tokens_per_s.interval[1] * bytes_per_token.value,
        )
    return derived(
        tokens_per_s.value * bytes_per_token.value,
        "B/s",
        "sustained read for the data pipeline",
        "training tokens/s x bytes per token",
        [tokens_per_s, bytes_per_token],
        interval=interval,
    )


def read_bandwidth_samples(
    tokens_per_s: Figure, seq_len: Figure, bytes_per_sample: Figure
) -> Figure:
    """Sustained read for sample-based data: (tokens/s / seq len) x bytes per sample."""
    return derived(
        tokens_per_s.value / seq_len.value * bytes_per_sample.value,
        "B/s",
        "sustained read for the data pipeline",
        "(training tokens/s / sequence length) samples/s x bytes per sample",
        [tokens_per_s, seq_len, bytes_per_sample],
    )


def write_bandwidth(ckpt: Figure, budget_s: Figure) -> Figure:
    """Checkpoint write bandwidth to write one checkpoint within the budget."""
    return derived(
        ckpt.value / budget_s.value,
        "B/s",
        "checkpoint write bandwidth needed",
        "checkpoint size / write budget",
        [ckpt, budget_s],
    )


@dataclass(frozen=True)
class ApplianceTier:
    """A storage tier bought in whole appliances (building blocks), from a datasheet.

    Attributes
    ----------
    read_bytes_per_s_per_appliance, write_bytes_per_s_per_appliance:
        Sequential throughput of one appliance, B/s (a datasheet giving one figure for
        both directions is read as both).
    capacity_bytes_per_appliance:
        Usable capacity of one appliance, bytes.
    price_usd_per_gib_month:
        Usually a quote from the scenario: on-premises prices are rarely published.
    gpudirect_storage:
        Whether the tier's client supports NVIDIA GPUDirect Storage.
    rack_units_per_appliance, power_w_per_appliance, capex_usd_per_appliance:
        Height (U), power (W) and purchase price (USD) of one appliance, where published.
    """

    id: str
    name: str
    read_bytes_per_s_per_appliance: Figure
    write_bytes_per_s_per_appliance: Figure
    capacity_bytes_per_appliance: Figure
    price_usd_per_gib_month: Figure
    cloud: str | None = None
    gpudirect_storage: bool | None = None
    rack_units_per_appliance: Figure | None = None
    power_w_per_appliance: Figure | None = None
    capex_usd_per_appliance: Figure | None = None
    min_appliances: Figure | None = None
    #: where the price comes from, or why there is none (:func:`price_status`)
    price_status: str = ""


def client_write_cap(writers: Figure, per_client_bytes_per_s: Figure) -> Figure:
    """The most N writers can push to storage: N x per-client bandwidth, B/s.

    >>> from gpuplan.plan.provenance import input_fig
    >>> client_write_cap(input_fig(64, "nodes", "n", "t"), input_fig(50e9, "B/s", "c", "t")).value
    3200000000000.0
    """
    return derived(
        writers.value * per_client_bytes_per_s.value,
        "B/s",
        "checkpoint write cap of the writers",
        "writers x per-client bandwidth to storage",
        [writers, per_client_bytes_per_s],
    )


def _capped_write(tier_id: str, tier_write: Figure, cap: Figure | None) -> tuple[Figure, bool]:
    """min(tier write B/s, writers cap); True when the writers are the limit."""
    if cap is None or not cap.ok or not tier_write.ok or cap.value > tier_write.value * (1 + 1e-9):
        # (a tier bought to just match the writers' cap is limited by the writers)
        return tier_write, False
    return (
        derived(
            cap.value,
            "B/s",
            f"{tier_id} checkpoint write bandwidth",
            "min(tier write bandwidth, writers x per-client bandwidth): the writers bind",
            [tier_write, cap],
        ),
        True,
    )


@dataclass
class TierFit:
    """A storage tier provisioned for the needs, with what it delivers and costs."""

    tier: StorageTier | ApplianceTier
    provisioned_bytes: Figure
    read_bytes_per_s: Figure
    write_bytes_per_s: Figure
    checkpoint_write_s: Figure
    usd_per_month: Figure
    fits: bool
    reason: str | None
    sized_by: str
    appliances: Figure | None = None
    gpudirect_storage: bool | None = None
    capex_usd: Figure | None = None
    rack_units: Figure | None = None
    power_w: Figure | None = None
    missing: list[str] = field(default_factory=list)
    budget_s: Figure | None = None

    @property
    def sized(self) -> bool:
        """True when every figure the sizing needs is in the catalog."""
        return not self.missing

    def to_json(self) -> dict[str, Any]:
        return {
            "tier": self.tier.id,
            "name": self.tier.name,
            "cloud": self.tier.cloud,
            "sized": self.sized,
            "missing": list(self.missing),
            "appliances": self.appliances,
            "rack_units": self.rack_units,
            "power_w": self.power_w,
            "capex_usd": self.capex_usd,
            "checkpoint_write_budget_s": self.budget_s,
            "gpudirect_storage": self.gpudirect_storage,
            "provisioned_bytes": self.provisioned_bytes,
            "read_bytes_per_s": self.read_bytes_per_s,
            "write_bytes_per_s": self.write_bytes_per_s,
            "checkpoint_write_s": self.checkpoint_write_s,
            "usd_per_month": self.usd_per_month,
            "fits": self.fits,
            "reason": self.reason,
            "sized_by": self.sized_by,
            "price_status": self.tier.price_status,
        }


def fit_tier(
    tier: StorageTier | ApplianceTier,
    *,
    capacity: Figure,
    read_bps: Figure,
    write_bps: Figure,
    ckpt: Figure,
    write_cap: Figure | None = None,
    budget_s: Figure | None = None,
) -> TierFit:
    """Provision ``tier`` for the capacity, read and write needs (see module docstring).

    ``write_cap`` (N writers x per-client B/s, :func:`client_write_cap`) limits what a
    checkpoint can be written at; with ``budget_s`` a write slower than the budget does
    not fit.
    """
    if isinstance(tier, ApplianceTier):
        return fit_appliances(
            tier,
            capacity=capacity,
            read_bps=read_bps,
            write_bps=write_bps,
            ckpt=ckpt,
            write_cap=write_cap,
            budget_s=budget_s,
        )
    per_tib_r = tier.read_bytes_per_s_per_tib
    per_tib_w = tier.write_bytes_per_s_per_tib
    inc = tier.throughput_increment_bytes_per_s
    if not per_tib_r.ok and not per_tib_w.ok and inc is not None and inc.ok:
        f = _fit_by_increment(
            tier, inc, capacity=capacity, read_bps=read_bps, write_bps=write_bps, ckpt=ckpt
        )
        f.write_bytes_per_s, f.checkpoint_write_s, f.fits, f.reason = _apply_write_cap(
            tier.id,
            f.write_bytes_per_s,
            f.checkpoint_write_s,
            ckpt,
            write_cap,
            budget_s,
            f.fits,
            f.reason,
        )
        f.budget_s = budget_s
        return f
    if not per_tib_w.ok and per_tib_r.ok:
        # tiers quoted with one throughput figure serve reads and writes alike
        per_tib_w = per_tib_r
    candidates: list[tuple[float, str]] = [(float(capacity.value), "capacity")]
    used = [capacity]
    if per_tib_r.ok and per_tib_r.value > 0:
        candidates.append((read_bps.value / per_tib_r.value * TIB, "read bandwidth"))
        used += [read_bps, per_tib_r]
    if per_tib_w.ok and per_tib_w.value > 0:
        candidates.append((write_bps.value / per_tib_w.value * TIB, "checkpoint writes"))
        used += [write_bps, per_tib_w]
    need, sized_by = max(candidates, key=lambda c: c[0])
    if tier.min_capacity_bytes.ok:
        if need < tier.min_capacity_bytes.value:
            sized_by = "tier minimum"
        need = max(need, tier.min_capacity_bytes.value)
        used.append(tier.min_capacity_bytes)
    if tier.increment_bytes.ok and tier.increment_bytes.value > 0:
        need = math.ceil(need / tier.increment_bytes.value - 1e-9) * tier.increment_bytes.value
        used.append(tier.increment_bytes)
    provisioned = derived(
        need,
        "B",
        f"{tier.id} provisioned capacity",
        "max(capacity, read B/s / (B/s per TiB), write B/s / (B/s per TiB)), "
        "at least the tier minimum, rounded up to the increment",
        used,
    )
    fits, reason = True, None
    if tier.max_capacity_bytes.ok and need > tier.max_capacity_bytes.value:
        fits = False
        reason = (
            f"needs {need / TIB:.4g} TiB, the tier's maximum is "
            f"{tier.max_capacity_bytes.value / TIB:.4g} TiB per file system "
            f"({math.ceil(need / tier.max_capacity_bytes.value)} file systems would hold it, "
            "with the data split between them)"
        )
    if per_tib_r.ok:
        rbw = derived(
            per_tib_r.value * need / TIB,
            "B/s",
            f"{tier.id} read bandwidth",
            "provisioned TiB x read B/s per TiB",
            [provisioned, per_tib_r],
        )
    else:
        rbw = missing_fig("B/s", f"{tier.id} read bandwidth", f"{tier.id} has no throughput figure")
    if per_tib_w.ok:
        wbw = derived(
            per_tib_w.value * need / TIB,
            "B/s",
            f"{tier.id} write bandwidth",
            "provisioned TiB x write B/s per TiB",
            [provisioned, per_tib_w],
        )
    else:
        wbw = missing_fig(
            "B/s", f"{tier.id} write bandwidth", f"{tier.id} has no throughput figure"
        )
    ckpt_s = _checkpoint_time(tier.id, ckpt, wbw)
    missing: list[str] = []
    if not per_tib_r.ok and not per_tib_w.ok:
        fits = False
        missing = ["read_bytes_per_s_per_tib"]
        reason = f"{tier.id} not sized: the catalog has no read_bytes_per_s_per_tib"
    wbw, ckpt_s, fits, reason = _apply_write_cap(
        tier.id, wbw, ckpt_s, ckpt, write_cap, budget_s, fits, reason
    )
    usd = _monthly_cost(tier, need, provisioned)
    return TierFit(
        tier,
        provisioned,
        rbw,
        wbw,
        ckpt_s,
        usd,
        fits,
        reason,
        sized_by,
        gpudirect_storage=tier.gpudirect_storage,
        missing=missing,
        budget_s=budget_s,
    )


def _checkpoint_time(tier_id: str, ckpt: Figure, wbw: Figure) -> Figure:
    """Checkpoint write time on a tier: checkpoint size / the tier's write bandwidth."""
    if not wbw.ok:
        return missing_fig("s", f"checkpoint write time on {tier_id}", wbw.missing or "")
    return derived(
        ckpt.value / wbw.value,
        "s",
        f"checkpoint write time on {tier_id}",
        "checkpoint size / tier write bandwidth",
        [ckpt, wbw],
    )


def _apply_write_cap(
    tier_id: str,
    wbw: Figure,
    ckpt_s: Figure,
    ckpt: Figure,
    write_cap: Figure | None,
    budget_s: Figure | None,
    fits: bool,
    reason: str | None,
) -> tuple[Figure, Figure, bool, str | None]:
    """Cap the tier's write bandwidth at the writers' and check the write budget."""
    wbw, clients_bind = _capped_write(tier_id, wbw, write_cap)
    if clients_bind:
        ckpt_s = derived(
            ckpt.value / wbw.value,
            "s",
            f"checkpoint write time on {tier_id}",
            "checkpoint size / min(tier write bandwidth, writers x per-client bandwidth)",
            [ckpt, wbw],
        )
    if fits and budget_s is not None and ckpt_s.ok and ckpt_s.value > budget_s.value * (1 + 1e-9):
        fits = False
        who = "the writers' links (N x per-client)" if clients_bind else "the tier"
        reason = (
            f"a checkpoint takes {ckpt_s.value:.4g} s on {tier_id}, over the "
            f"{budget_s.value:.4g} s write budget: {who} bind"
        )
    return wbw, ckpt_s, fits, reason


#: catalog field of each per-appliance figure, named when it is missing
APPLIANCE_FIELD = {
    "capacity": "capacity_bytes_per_appliance",
    "read bandwidth": "read_bytes_per_s_per_appliance",
    "checkpoint writes": "write_bytes_per_s_per_appliance",
}


def fit_appliances(
    tier: ApplianceTier,
    *,
    capacity: Figure,
    read_bps: Figure,
    write_bps: Figure,
    ckpt: Figure,
    write_cap: Figure | None = None,
    budget_s: Figure | None = None,
) -> TierFit:
    """Size an appliance tier in whole appliances (see the module docstring).

    Each need (capacity, read B/s, write B/s) asks for ceil(need / per-appliance figure)
    appliances; the largest count is bought. The write need counts no more than the
    writers can push (``write_cap``): appliances past that would sit idle. A per-appliance
    figure that is missing leaves the tier not sized and the fit names the catalog field.
    """
    cap_per = tier.capacity_bytes_per_appliance
    r_per = tier.read_bytes_per_s_per_appliance
    w_per = tier.write_bytes_per_s_per_appliance
    if not w_per.ok and r_per.ok:
        # a datasheet with one throughput figure: it serves both directions
        w_per = r_per
    write_need = write_bps
    if write_cap is not None and write_cap.ok and write_cap.value < write_bps.value:
        write_need = derived(
            write_cap.value,
            "B/s",
            f"{tier.id} write bandwidth worth buying",
            "min(checkpoint write bandwidth needed, writers x per-client bandwidth)",
            [write_bps, write_cap],
        )
    counts: list[tuple[int, str]] = []
    used: list[Figure] = []
    missing: list[str] = []
    for need, per, label in (
        (capacity, cap_per, "capacity"),
        (read_bps, r_per, "read bandwidth"),
        (write_need, w_per, "checkpoint writes"),
    ):
        if per.ok and per.value > 0:
            counts.append((max(1, math.ceil(need.value / per.value - 1e-9)), label))
            used += [need, per]
        else:
            missing.append(APPLIANCE_FIELD[label])
    not_sized = (
        f"{tier.id} not sized: the catalog has no " + ", ".join(missing) if missing else None
    )
    if missing:
        # a partial count would read as a sizing: report the tier as not sized, and what
        # the figures the catalog does have would ask for
        why = not_sized or ""
        if counts:
            part = max(counts, key=lambda c: c[0])
            why += f" (the {part[1]} figure alone asks for {part[0]} appliances)"
        return TierFit(
            tier,
            missing_fig("B", f"{tier.id} provisioned capacity", why),
            missing_fig("B/s", f"{tier.id} read bandwidth", why),
            missing_fig("B/s", f"{tier.id} write bandwidth", why),
            missing_fig("s", f"checkpoint write time on {tier.id}", why),
            missing_fig("USD/month", f"{tier.id} cost per month", why),
            False,
            why,
            "none",
            appliances=missing_fig("appliances", f"{tier.id} appliances", why),
            gpudirect_storage=tier.gpudirect_storage,
            missing=missing,
            budget_s=budget_s,
        )
    n, sized_by = max(counts, key=lambda c: c[0])
    floor = ""
    mini = tier.min_appliances
    if mini is not None and mini.ok:
        used.append(mini)
        floor = ", at least the vendor's minimum system"
        if mini.value > n:
            n, sized_by = int(mini.value), "tier minimum"
    appliances = derived(
        n,
        "appliances",
        f"{tier.id} appliances",
        "max(ceil(capacity / usable per appliance), ceil(read B/s / read per appliance), "
        "ceil(min(write B/s, writers' cap) / write per appliance))" + floor,
        used,
    )

    def scaled(per: Figure | None, unit: str, label: str) -> Figure | None:
        if per is None:
            return None
        if not per.ok:
            return missing_fig(
                unit, f"{tier.id} {label}", per.missing or f"{tier.id} has no {label} per appliance"
            )
        return derived(
            n * per.value,
            unit,
            f"{tier.id} {label}",
            f"appliances x {label} per appliance",
            [appliances, per],
        )

    provisioned = scaled(cap_per, "B", "usable capacity")
    rbw = scaled(r_per, "B/s", "read bandwidth")
    wbw = scaled(w_per, "B/s", "write bandwidth")
    assert provisioned is not None and rbw is not None and wbw is not None
    ckpt_s = _checkpoint_time(tier.id, ckpt, wbw)
    wbw, ckpt_s, fits, reason = _apply_write_cap(
        tier.id, wbw, ckpt_s, ckpt, write_cap, budget_s, True, None
    )
    if provisioned.ok:
        usd = _monthly_cost(tier, provisioned.value, provisioned)
    else:
        usd = missing_fig("USD/month", f"{tier.id} cost per month", provisioned.missing or "")
    return TierFit(
        tier,
        provisioned,
        rbw,
        wbw,
        ckpt_s,
        usd,
        fits,
        reason,
        sized_by,
        appliances=appliances,
        gpudirect_storage=tier.gpudirect_storage,
        capex_usd=scaled(tier.capex_usd_per_appliance, "USD", "capex"),
        rack_units=scaled(tier.rack_units_per_appliance, "U", "rack units"),
        power_w=scaled(tier.power_w_per_appliance, "W", "power"),
        missing=missing,
        budget_s=budget_s,
    )


def _monthly_cost(
    tier: StorageTier | ApplianceTier, size_bytes: float, provisioned: Figure
) -> Figure:
    """The tier's price per month for ``size_bytes`` provisioned, or a missing figure."""
    price = tier.price_usd_per_gib_month
    if price.ok:
        return derived(
            size_bytes / GIB * price.value,
            "USD/month",
            f"{tier.id} cost per month",
            "provisioned GiB x USD per GiB-month",
            [provisioned, price],
        )
    return missing_fig(
        "USD/month",
        f"{tier.id} cost per month",
        price.missing or f"no price for {tier.id}: add costs.storage_usd_per_gib_month.{tier.id}",
    )


def _fit_by_increment(
    tier: StorageTier,
    inc: Figure,
    *,
    capacity: Figure,
    read_bps: Figure,
    write_bps: Figure,
    ckpt: Figure,
) -> TierFit:
    """A tier whose throughput is bought in fixed increments, apart from its capacity."""
    need_bw = max(read_bps.value, write_bps.value)
    bw = derived(
        math.ceil(need_bw / inc.value - 1e-9) * inc.value,
        "B/s",
        f"{tier.id} provisioned throughput",
        "ceil(max(read, write) / throughput increment) x increment",
        [read_bps, write_bps, inc],
    )
    cap = capacity.value
    used = [capacity]
    if tier.min_capacity_bytes.ok:
        cap = max(cap, tier.min_capacity_bytes.value)
        used.append(tier.min_capacity_bytes)
    if tier.increment_bytes.ok and tier.increment_bytes.value > 0:
        cap = math.ceil(cap / tier.increment_bytes.value - 1e-9) * tier.increment_bytes.value
        used.append(tier.increment_bytes)
    provisioned = derived(
        cap,
        "B",
        f"{tier.id} provisioned capacity",
        "capacity needed, at least the tier minimum, rounded up to the increment",
        used,
    )
    ckpt_s = derived(
        ckpt.value / bw.value,
        "s",
        f"checkpoint write time on {tier.id}",
        "checkpoint size / provisioned throughput",
        [ckpt, bw],
    )
    usd = _monthly_cost(tier, cap, provisioned)
    fits, reason = True, None
    if tier.max_capacity_bytes.ok and cap > tier.max_capacity_bytes.value:
        fits, reason = False, "needs more capacity than the tier's maximum"
    sized_by = "read bandwidth" if read_bps.value >= write_bps.value else "checkpoint writes"
    return TierFit(
        tier,
        provisioned,
        bw,
        bw,
        ckpt_s,
        usd,
        fits,
        reason,
        sized_by,
        gpudirect_storage=tier.gpudirect_storage,
    )


def monthly_equivalent(fit: TierFit, months: Figure | None = None) -> float | None:
    """USD per month to rank a tier: its monthly price, else its capex over ``months``."""
    if fit.usd_per_month.ok:
        return float(fit.usd_per_month.value)
    if fit.capex_usd is not None and fit.capex_usd.ok and months is not None and months.ok:
        return float(fit.capex_usd.value) / float(months.value)
    return None


def pick_tier(fits: list[TierFit], months: Figure | None = None) -> TierFit | None:
    """The cheapest fitting tier; without prices, the smallest provisioned one.

    A tier bought outright (capex) is ranked by its capex spread over ``months`` (the
    depreciation period), so it compares with tiers priced per month.
    """
    ok = [f for f in fits if f.fits]
    if not ok:
        return None
    priced = [(monthly_equivalent(f, months), f) for f in ok]
    priced_ok = [(v, f) for v, f in priced if v is not None]
    if priced_ok:
        return min(priced_ok, key=lambda p: p[0])[1]
    return min(ok, key=lambda f: f.provisioned_bytes.value)


def local_nvme_check(
    read_bps: Figure, nodes: Figure, fio_read_bps_per_node: Figure
) -> dict[str, Any]:
    """Can node-local NVMe (as the trial node's fio measured it) feed the pipeline?"""
    per_node = derived(
        read_bps.value / nodes.value,
        "B/s",
        "sustained read needed per node",
        "sustained read / nodes",
        [read_bps, nodes],
    )
    enough = bool(fio_read_bps_per_node.ok and fio_read_bps_per_node.value >= per_node.value)
    return {
        "read_needed_per_node_bytes_per_s": per_node,
        "measured_read_per_node_bytes_per_s": fio_read_bps_per_node,
        "local_nvme_sufficient": enough,
    }


# ------------------------------------------------------------------ the option's storage (moved from options.py)
CLOUD_PROVIDER_NAMES = {
    "aws": ("aws", "amazon"),
    "gcp": ("gcp", "google"),
    "azure": ("azure", "microsoft"),
}


def _tiers_for(ctx: PlanContext, opt: Option) -> list[StorageTierRow]:
    cat = ctx.catalog
    want = ctx.scenario.storage.tier
    if want:
        return [cat.storage_tier(want)]
    tiers = []
    cloud_names = {n for names in CLOUD_PROVIDER_NAMES.values() for n in names}
    for t in cat.storage:
        if getattr(t, "kind_of_storage", None) == "local_nvme":
            continue
        prov = str(getattr(t, "provider", "")).lower()
        if opt.kind == "cloud":
            if any(n in prov for n in CLOUD_PROVIDER_NAMES.get(opt.cloud or "", ())):
                tiers.append(t)
        elif not any(n in prov for n in cloud_names):
            tiers.append(t)
    return tiers


APPLIANCE_FIELDS = (
    "read_bytes_per_s_per_appliance",
    "write_bytes_per_s_per_appliance",
    "capacity_bytes_per_appliance",
)


#: why a cloud tier has no catalog price when its row gives no reason of its own
CLOUD_PRICE_NOT_RETRIEVED = (
    "price not in the catalog: the provider publishes a rate on its pricing page, but no"
    " dated copy of it was retrieved for this tier"
)


def missing_price_reason(tier_id: str, not_published: str | None, cloud: bool) -> str:
    """Why a tier has no price, and how a scenario prices it (a negotiated rate).

    >>> missing_price_reason("x", "the vendor sells by quote", False)
    'price not published: the vendor sells by quote; give your rate in costs.storage_usd_per_gib_month.x'
    """
    why = (
        f"price not published: {not_published}"
        if not_published
        else (CLOUD_PRICE_NOT_RETRIEVED if cloud else "price not published")
    )
    return f"{why}; give your rate in costs.storage_usd_per_gib_month.{tier_id}"


def price_status(ctx: PlanContext, t: StorageTierRow) -> str:
    """Where a tier's price comes from (scenario quote, catalog row) or why it has none."""
    quotes = ctx.scenario.costs.storage_usd_per_gib_month
    if t.id in quotes:
        return f"scenario quote (costs.storage_usd_per_gib_month.{t.id})"
    for name in ("price_usd_per_tib_month", "price_usd_per_appliance", "price_usd_per_tib"):
        if getattr(t, name, None):
            flag = " (secondary source)" if t.is_unverified(name) else ""
            return f"catalog {name}, as of {t.price_as_of}{flag}"
    prov = str(getattr(t, "provider", "")).lower()
    cloud = any(n in prov for names in CLOUD_PROVIDER_NAMES.values() for n in names)
    return missing_price_reason(t.id, getattr(t, "price_not_published", None), cloud)


def _tier_figures(ctx: PlanContext, t: StorageTierRow) -> StorageTier | ApplianceTier:
    tib = TIB

    def get(field_name: str, unit: str, label: str) -> Figure:
        return ctx.cat("storage", t, field_name, unit, f"{t.id} {label}")

    price_fields = ctx.scenario.costs.storage_usd_per_gib_month
    status = price_status(ctx, t)
    if t.id in price_fields:
        price = ctx.quote(
            ("costs", "storage_usd_per_gib_month", t.id), "USD/GiB-month", f"{t.id} price"
        )
    elif getattr(t, "price_usd_per_tib_month", None):
        per_tib = get("price_usd_per_tib_month", "USD/TiB-month", "price per TiB-month")
        price = derived(
            per_tib.value / 1024.0,
            "USD/GiB-month",
            f"{t.id} price per GiB-month",
            "USD per TiB-month / 1024",
            [per_tib],
        )
    else:
        # a bought tier priced per appliance or per TiB has a capex, not a monthly rate
        capex_priced = bool(
            getattr(t, "price_usd_per_appliance", None) or getattr(t, "price_usd_per_tib", None)
        )
        price = missing_fig(
            "USD/GiB-month",
            f"{t.id} price",
            f"bought, not rented: priced by its capex ({status})" if capex_priced else status,
        )
    del tib
    if getattr(t, "per_appliance", False) or any(getattr(t, n, None) for n in APPLIANCE_FIELDS):
        # sold in whole appliances: sized by gpuplan.plan.storage.fit_appliances
        cap_per = get(APPLIANCE_FIELDS[2], "B", "usable per appliance")
        return ApplianceTier(
            id=t.id,
            name=getattr(t, "name", t.id),
            read_bytes_per_s_per_appliance=get(APPLIANCE_FIELDS[0], "B/s", "read per appliance"),
            write_bytes_per_s_per_appliance=get(APPLIANCE_FIELDS[1], "B/s", "write per appliance"),
            capacity_bytes_per_appliance=cap_per,
            price_usd_per_gib_month=price,
            cloud=getattr(t, "provider", None),
            gpudirect_storage=getattr(t, "gpudirect_storage", None),
            rack_units_per_appliance=get("rack_units_per_appliance", "U", "height per appliance"),
            power_w_per_appliance=get("power_w_per_appliance", "W", "power per appliance"),
            capex_usd_per_appliance=_appliance_capex(ctx, t, cap_per),
            min_appliances=(
                get("min_appliances", "appliances", "minimum system")
                if getattr(t, "min_appliances", None)
                else None
            ),
            price_status=status,
        )
    return StorageTier(
        id=t.id,
        name=getattr(t, "name", t.id),
        read_bytes_per_s_per_tib=get("read_bytes_per_s_per_tib", "B/s per TiB", "read per TiB"),
        write_bytes_per_s_per_tib=get("write_bytes_per_s_per_tib", "B/s per TiB", "write per TiB"),
        min_capacity_bytes=get("capacity_min_bytes", "B", "minimum capacity"),
        max_capacity_bytes=get("capacity_max_bytes", "B", "maximum capacity"),
        increment_bytes=get("capacity_step_bytes", "B", "capacity step"),
        price_usd_per_gib_month=price,
        cloud=getattr(t, "provider", None),
        throughput_increment_bytes_per_s=(
            get("throughput_increment_bytes_per_s", "B/s", "throughput increment")
            if getattr(t, "throughput_increment_bytes_per_s", None)
            else None
        ),
        gpudirect_storage=getattr(t, "gpudirect_storage", None),
        price_status=status,
    )


def _appliance_capex(ctx: PlanContext, t: StorageTierRow, cap_per: Figure) -> Figure:
    """Purchase price of one appliance: the catalog's, or its price per TiB x usable TiB."""
    if getattr(t, "price_usd_per_appliance", None):
        return ctx.cat(
            "storage", t, "price_usd_per_appliance", "USD", f"{t.id} price per appliance"
        )
    if getattr(t, "price_usd_per_tib", None) and cap_per.ok:
        per_tib = ctx.cat("storage", t, "price_usd_per_tib", "USD/TiB", f"{t.id} price per TiB")
        return derived(
            per_tib.value * cap_per.value / TIB,
            "USD",
            f"{t.id} price per appliance",
            "price per usable TiB x usable TiB per appliance",
            [per_tib, cap_per],
        )
    status = price_status(ctx, t)
    if t.id in ctx.scenario.costs.storage_usd_per_gib_month:
        # a monthly rate pays for the storage as it is used: nothing is bought
        status = f"no capex: the tier is paid by the month ({status})"
    return missing_fig("USD", f"{t.id} price per appliance", status)


def _writers_cap(ctx: PlanContext, opt: Option, t: StorageTierRow) -> Figure | None:
    """N writers (the option's nodes) x the tier's per-client bandwidth, where the row has one."""
    for name in ("write_bytes_per_s_per_node", "read_bytes_per_s_per_node"):
        if getattr(t, name, None):
            per_client = ctx.cat("storage", t, name, "B/s", f"{t.id} per-client bandwidth")
            return client_write_cap(opt.sized_nodes, per_client)
    return None


def _chosen_summary(f: TierFit) -> str:
    """One line: the chosen tier, its size, checkpoint time against the budget, its price."""
    parts = [f.tier.id]
    if f.appliances is not None and f.appliances.ok:
        parts.append(f"{int(f.appliances.value)} appliances")
    if f.provisioned_bytes.ok:
        parts.append(f"{f.provisioned_bytes.value / TIB:,.0f} TiB")
    if f.checkpoint_write_s.ok:
        budget = f" (budget {f.budget_s.value:,.0f} s)" if f.budget_s is not None else ""
        parts.append(f"checkpoint {f.checkpoint_write_s.value:,.0f} s{budget}")
    if f.usd_per_month.ok:
        parts.append(f"${f.usd_per_month.value:,.0f}/month")
    elif f.capex_usd is not None and f.capex_usd.ok:
        parts.append(f"capex ${f.capex_usd.value:,.0f}")
    else:
        parts.append("no price: " + (f.usd_per_month.missing or "not priced"))
    return ", ".join(parts)


def build_storage(ctx: PlanContext, opt: Option) -> None:
    """Size the shared storage tier for the training workloads (see gpuplan.plan.storage)."""
    sc = ctx.scenario
    trainings = [t for t in opt.training if t.tokens_per_s is not None]
    if not trainings:
        opt.storage = {"note": "no training workload: no shared storage sized"}
        return
    caps, reads, writes, ckpts = [], [], [], []
    per_workload = []
    for t in trainings:
        if t.tokens_per_s is None:  # filtered above; narrows the type
            continue
        w = sc.workloads.training[t.index]
        base = ("workloads", "training", t.index)
        model = ctx.catalog.model(w.model)
        params = ctx.cat(
            "model",
            model,
            "params_total",
            "parameters",
            f"{model.id} parameters",
            value=model.params_total(),
        )
        bpp = ctx.inp(
            (*base, "checkpoint", "bytes_per_param"),
            "B",
            f"{w.name}: checkpoint bytes per parameter",
        )
        ckpt = checkpoint_bytes(params, bpp)
        retained = ctx.inp(
            (*base, "checkpoint", "retained"), "checkpoints", f"{w.name}: checkpoints kept"
        )
        if w.bytes_per_token is not None:
            bpt = ctx.inp((*base, "bytes_per_token"), "B", f"{w.name}: bytes per token")
        else:
            vocab = ctx.cat("model", model, "vocab", "tokens", f"{model.id} vocabulary")
            bpt = derived(
                bytes_per_token_for_vocab(int(vocab.value)),
                "B",
                f"{w.name}: bytes per token",
                "2 if vocabulary <= 65,536 else 4 (smallest integer type for token ids)",
                [vocab],
            )
        if w.dataset_bytes is not None:
            dataset = ctx.inp((*base, "dataset_bytes"), "B", f"{w.name}: dataset")
        else:
            tokens = ctx.inp((*base, "tokens"), "tokens", f"{w.name}: training tokens")
            epochs = ctx.inp((*base, "epochs"), "epochs", f"{w.name}: epochs")
            dataset = derived(
                tokens.value / epochs.value * bpt.value,
                "B",
                f"{w.name}: dataset",
                "training tokens / epochs x bytes per token",
                [tokens, epochs, bpt],
            )
        cap = capacity_bytes(dataset, ckpt, retained)
        if w.bytes_per_sample is not None:
            seq = ctx.inp((*base, "seq_len"), "tokens", f"{w.name}: sequence length")
            bps = ctx.inp((*base, "bytes_per_sample"), "B", f"{w.name}: bytes per sample")
            read = read_bandwidth_samples(t.tokens_per_s, seq, bps)
        else:
            read = read_bandwidth(t.tokens_per_s, bpt)
        budget = ctx.inp(
            (*base, "checkpoint", "write_budget_s"), "s", f"{w.name}: checkpoint write budget"
        )
        write = write_bandwidth(ckpt, budget)
        caps.append(cap)
        reads.append(read)
        writes.append(write)
        ckpts.append(ckpt)
        per_workload.append(
            {
                "workload": w.name,
                "checkpoint_bytes": ckpt,
                "dataset_bytes": dataset,
                "capacity_bytes": cap,
                "read_bytes_per_s": read,
                "checkpoint_write_bytes_per_s": write,
            }
        )

    def total(figs: list[Figure], label: str, unit: str) -> Figure:
        if len(figs) == 1:
            return figs[0]
        return derived(sum(f.value for f in figs), unit, label, "sum over training workloads", figs)

    cap_t = total(caps, "storage capacity needed", "B")
    read_t = total(reads, "sustained read for the data pipeline", "B/s")
    write_t = total(writes, "checkpoint write bandwidth needed", "B/s")
    ckpt_t = total(ckpts, "checkpoint size (all workloads)", "B")
    budget_t = min(
        (
            ctx.inp(("workloads", "training", t.index, "checkpoint", "write_budget_s"), "s")
            for t in trainings
        ),
        key=lambda b: b.value,
    )
    fits = [
        fit_tier(
            _tier_figures(ctx, t),
            capacity=cap_t,
            read_bps=read_t,
            write_bps=write_t,
            ckpt=ckpt_t,
            write_cap=_writers_cap(ctx, opt, t),
            budget_s=budget_t,
        )
        for t in _tiers_for(ctx, opt)
    ]
    months = None
    if opt.kind == "onprem" and sc.costs.depreciation_years:
        years = ctx.inp(("costs", "depreciation_years"), "years", "depreciation")
        months = derived(
            years.value * 12, "months", "depreciation months", "depreciation years x 12", [years]
        )
    chosen = pick_tier(fits, months)
    out: dict[str, Any] = {
        # one line per tier the catalog cannot size, for the top of the storage section
        "not_sized": [f.reason for f in fits if not f.sized and f.reason],
        "workloads": per_workload,
        "capacity_bytes": cap_t,
        "read_bytes_per_s": read_t,
        "checkpoint_write_bytes_per_s": write_t,
        "checkpoint_write_budget_s": budget_t,
        "tiers": [f.to_json() for f in fits],
        "chosen": chosen.tier.id if chosen else None,
    }
    if chosen is not None:
        out["chosen_summary"] = _chosen_summary(chosen)
        for key, fig in (
            ("capex_usd", chosen.capex_usd),
            ("power_w", chosen.power_w),
            ("rack_units", chosen.rack_units),
            ("usd_per_month", chosen.usd_per_month),
        ):
            if fig is not None:
                out[key] = fig
    if chosen is None:
        out["note"] = "no catalog storage tier fits: " + (
            "; ".join(f"{f.tier.id}: {f.reason}" for f in fits)
            if fits
            else "none for this platform"
        )
        opt.notes.append(out["note"])
    if ctx.trial is not None and ctx.trial.storage_read_bytes_per_s is not None:
        out["local_nvme"] = local_nvme_check(
            read_t, opt.sized_nodes, ctx.trial.storage_read_bytes_per_s
        )
    # checkpoint write and restart times for the Young/Daly model
    if chosen is not None and chosen.checkpoint_write_s.ok:
        out["checkpoint_write_s"] = chosen.checkpoint_write_s
        if chosen.read_bytes_per_s.ok:
            out["restart_read_s"] = derived(
                ckpt_t.value / chosen.read_bytes_per_s.value,
                "s",
                "checkpoint read time at restart",
                "checkpoint size / tier read bandwidth",
                [ckpt_t, chosen.read_bytes_per_s],
            )
    else:
        budgets = [
            ctx.inp(("workloads", "training", t.index, "checkpoint", "write_budget_s"), "s")
            for t in trainings
        ]
        out["checkpoint_write_s"] = derived(
            max(b.value for b in budgets),
            "s",
            "checkpoint write time (the budget: no tier matched)",
            "the scenario's checkpoint write budget",
            budgets,
        )
    opt.storage = out
