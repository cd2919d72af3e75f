"""Search over parallel layouts and cluster sizes for a training run.

Every valid ``(tp, pp, cp, ep, dp, vp, micro_batch, recompute, zero)`` for a GPU count is
enumerated as numpy arrays, layouts that cannot run (divisibility, batch, unsupported
combinations) are dropped, layouts that do not fit in memory are pruned with the cheap
memory model, and the rest are timed in one vectorised call of
:func:`gpuplan.forecast.training.evaluate_layouts`. With a token budget and a deadline every
cluster size the search can use, in whole cluster units, is evaluated from the FLOP lower
bound upward and the first that meets the date is returned (:func:`smallest_cluster`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TypeAlias, TypedDict

import numpy as np

from gpuplan.errors import InputError
from gpuplan.forecast.hardware import Hardware
from gpuplan.forecast.layout_rules import layout_violation, valid_layout_mask
from gpuplan.forecast.memory import fmt_gib, valid_pipeline
from gpuplan.forecast.model import ModelArch, model_flops_per_token
from gpuplan.forecast.training import (
    LAYOUT_KEYS,
    SECONDS_PER_DAY,
    Constants,
    Framework,
    Layouts,
    Progress,
    RunnerUp,
    SearchOptions,
    TrainingForecast,
    check_layout,
    evaluate_layouts,
    layouts_from_dict,
    memory_only,
    peak_flops,
    precision_recipe,
    summarise,
    take_layouts,
    usable_memory_bytes,
)

MAX_SEARCH_CP = 32
MAX_SEARCH_VP = 8
MAX_SEARCH_MICRO_BATCH = 16
MAX_CLUSTER_GPUS = 1 << 21

Fixed: TypeAlias = Mapping[str, int | None]
"""The layout dimensions the user fixed (``None`` or absent: searched)."""


def _powers_of_two(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def _divisors(n: int, limit: int | None = None) -> list[int]:
    ds = [d for d in range(1, n + 1) if n % d == 0]
    return [d for d in ds if limit is None or d <= limit]


def candidate_values(
    arch: ModelArch,
    num_gpus: int,
    fixed: Fixed,
    *,
    seq_len: int,
    global_batch: int,
    node_size: int,
) -> dict[str, list[int]]:
    """Values each layout dimension may take (before the joint validity filter)."""
    cand: dict[str, list[int]] = {}
    cand["tp"] = [
        t for t in _powers_of_two(min(max(node_size, 1), num_gpus)) if arch.heads % t == 0
    ]
    # Every stage count that divides the GPU count and can hold the layers: even splits,
    # the embedding and loss counted as layers, or uneven first/last stages (DeepSeek-V3's
    # 61 layers on 16 stages, 80 layers on 11).
    cand["pp"] = [p for p in _divisors(num_gpus, arch.layers) if bool(valid_pipeline(arch, p))]
    cand["cp"] = [
        c for c in _powers_of_two(min(MAX_SEARCH_CP, num_gpus)) if c == 1 or seq_len % (2 * c) == 0
    ]
    if arch.is_moe:
        cand["ep"] = _divisors(arch.num_experts, num_gpus)
    else:
        cand["ep"] = [1]
    cand["vp"] = [v for v in (1, 2, 3, 4, 5, 6, 8) if v <= MAX_SEARCH_VP]
    cand["micro_batch"] = [b for b in _powers_of_two(MAX_SEARCH_MICRO_BATCH) if b <= global_batch]
    cand["recompute"] = [0, 1, 2]
    cand["zero"] = [0, 1, 2, 3]
    for key, value in fixed.items():
        if key in cand and value is not None:
            cand[key] = [int(value)]
    return cand


def enumerate_layouts(
    arch: ModelArch,
    num_gpus: int,
    fixed: Fixed,
    *,
    seq_len: int,
    global_batch: int,
    node_size: int,
) -> Layouts:
    """All valid layouts for ``num_gpus`` as arrays (keys of ``LAYOUT_KEYS``)."""
    cand = candidate_values(
        arch, num_gpus, fixed, seq_len=seq_len, global_batch=global_batch, node_size=node_size
    )
    keys = ["tp", "pp", "cp", "ep", "vp", "micro_batch", "recompute", "zero"]
    # Cartesian product without a Python loop per layout.
    grids = np.meshgrid(*(np.asarray(cand[k], dtype=np.int64) for k in keys), indexing="ij")
    L = {k: g.reshape(-1) for k, g in zip(keys, grids, strict=True)}
    tp, pp, cp, zero = (L[k] for k in ("tp", "pp", "cp", "zero"))
    model_par = tp * pp * cp
    dp = np.where(num_gpus % model_par == 0, num_gpus // np.maximum(model_par, 1), 0)
    L["dp"] = dp
    ok = valid_layout_mask(arch, num_gpus, L, seq_len=seq_len, global_batch=global_batch)
    fixed_dp = fixed.get("dp")
    if fixed_dp is not None:
        ok &= dp == int(fixed_dp)
    # A search preference, not a validity rule: ZeRO-2 with pipelining only when asked
    # for (FSDP2 + PP); Megatron's default is ZeRO-1.
    if fixed.get("zero") is None:
        ok &= (zero <= 1) | (pp == 1)
    return {k: L[k][ok] for k in LAYOUT_KEYS}


def nearest_valid_batch(
    arch: ModelArch,
    num_gpus: int,
    fixed: Fixed,
    *,
    seq_len: int,
    global_batch: int,
    hw: Hardware,
) -> int | None:
    """The global batch nearest ``global_batch`` (sequences) that some layout on ``num_gpus``
    divides (data parallelism x micro-batch), or None when no layout exists at any batch.

    Ties go to the smaller batch. Only the batch moves: the layout rules stay as they are.
    """
    cand = candidate_values(
        arch, num_gpus, fixed, seq_len=seq_len, global_batch=global_batch, node_size=hw.node_size
    )
    dps = {
        num_gpus // (t * p * c)
        for t in cand["tp"]
        for p in cand["pp"]
        for c in cand["cp"]
        if num_gpus % (t * p * c) == 0
    }
    fixed_dp = fixed.get("dp")
    if fixed_dp is not None:
        dps &= {int(fixed_dp)}
    step = max(int(fixed.get("micro_batch") or 1), 1)
    options: set[int] = set()
    for d in dps:
        unit = d * step
        below = (global_batch // unit) * unit
        options.update(b for b in (below, below + unit) if b >= unit)
    for b in sorted(options, key=lambda b: (abs(b - global_batch), b)):
        if b == global_batch:
            continue
        found = enumerate_layouts(
            arch, num_gpus, fixed, seq_len=seq_len, global_batch=b, node_size=hw.node_size
        )
        if found["tp"].size:
            return int(b)
    return None


def _no_layout_error(arch: ModelArch, num_gpus: int, fixed: Fixed, global_batch: int) -> InputError:
    given = ", ".join(f"{k}={v}" for k, v in fixed.items() if v is not None) or "none"
    return InputError(
        f"no valid parallel layout of {arch.name} on {num_gpus} GPUs with a global batch of "
        f"{global_batch} sequences (fixed: {given})",
        hint="check that --gpus is divisible by the fixed parallel sizes and that the global "
        "batch is divisible by the data-parallel size",
    )


def fit_suggestions(
    arch: ModelArch,
    hw: Hardware,
    num_gpus: int,
    layout: dict[str, int],
    *,
    seq_len: int,
    global_batch: int,
    framework: Framework,
    constants: Constants,
    precision: str = "bf16",
) -> list[str]:
    """Single changes to a layout that would make it fit, e.g. ``--recompute full (61 GiB)``."""
    variants: list[tuple[str, dict[str, int]]] = []
    if layout["recompute"] != 2:
        variants.append(("--recompute full", {"recompute": 2}))
    if layout["pp"] == 1 and layout["zero"] != 3:
        variants.append(("--zero 3", {"zero": 3}))
    if layout["pp"] > 1 and layout["zero"] < 1:
        variants.append(("--zero 1", {"zero": 1}))
    if layout["micro_batch"] > 1:
        variants.append(("--micro-batch 1", {"micro_batch": 1}))
    for key in ("tp", "pp", "cp"):
        if layout["dp"] % 2 == 0:
            variants.append(
                (f"--{key} {layout[key] * 2}", {key: layout[key] * 2, "dp": layout["dp"] // 2})
            )
    # Framework options that shrink the state or the activations without a new layout.
    fw_variants: list[tuple[str, Framework]] = []
    if framework.optimizer_dtype == "fp32":
        fw_variants.append(
            ("--optimizer-dtype bf16", dataclasses.replace(framework, optimizer_dtype="bf16"))
        )
    if layout["recompute"] == 1:
        mods = ["layernorm"] + (["mla_up_proj"] if arch.attention == "mla" else [])
        mods += ["moe_act"] if arch.is_moe else []
        if not set(mods) <= set(framework.recompute_modules):
            fw_variants.append(
                (
                    "--recompute-modules " + ",".join(mods),
                    dataclasses.replace(framework, recompute_modules=tuple(mods)),
                )
            )
    out: list[str] = []
    for label, fw_change in fw_variants:
        mem = memory_only(
            arch,
            hw,
            layouts_from_dict(layout),
            seq_len=seq_len,
            global_batch=global_batch,
            framework=fw_change,
            constants=constants,
            precision=precision,
        )
        total = float(mem["total"][0])
        if total <= usable_memory_bytes(hw, constants):
            out.append(f"{label} ({fmt_gib(total)})")
    for label, change in variants:
        par = {**layout, **change}
        try:
            check_layout(
                arch,
                num_gpus,
                par,
                seq_len=seq_len,
                global_batch=global_batch,
                node_size=hw.node_size,
            )
        except InputError:
            continue
        mem = memory_only(
            arch,
            hw,
            layouts_from_dict(par),
            seq_len=seq_len,
            global_batch=global_batch,
            framework=framework,
            constants=constants,
            precision=precision,
        )
        total = float(mem["total"][0])
        if total <= usable_memory_bytes(hw, constants):
            out.append(f"{label} ({fmt_gib(total)})")
    if not out:
        out.append(f"more GPUs (or a GPU with more than {fmt_gib(hw.memory_bytes)})")
    return out


def best_layouts(
    arch: ModelArch,
    hw: Hardware,
    num_gpus: int,
    fixed: Fixed,
    *,
    seq_len: int,
    global_batch: int,
    precision: str,
    framework: Framework,
    constants: Constants,
    top: int = 1,
    raise_if_none_fits: bool = True,
    round_batch: bool = True,
) -> TrainingForecast:
    """Best layout for ``num_gpus`` (DESIGN 3.3 fields) with ``runners_up`` (``top - 1``).

    When every layout dimension is given the layout is checked (one-line error naming the
    problem) and forecast even if it does not fit; ``to_fit`` then lists single changes
    that would make it fit. When some are searched, only fitting layouts are ranked. When
    no layout divides the global batch (``round_batch``), the nearest global batch that one
    divides is used instead and ``global_batch_rounded_from`` says so.
    """
    given: dict[str, int] = {k: v for k, v in fixed.items() if v is not None}
    if not arch.is_moe:
        given.setdefault("ep", 1)  # nothing to search: a dense model has no experts
    user_fixed = any(k != "ep" or arch.is_moe for k in given)
    complete = all(
        k in given for k in ("tp", "pp", "cp", "ep", "vp", "micro_batch", "recompute", "zero")
    )
    if complete:
        par = dict(given)
        _check_partial(arch, num_gpus, par, seq_len=seq_len)
        par.setdefault("dp", num_gpus // (int(par["tp"]) * int(par["pp"]) * int(par["cp"])))
        check_layout(
            arch, num_gpus, par, seq_len=seq_len, global_batch=global_batch, node_size=hw.node_size
        )
        layouts = layouts_from_dict({k: par[k] for k in LAYOUT_KEYS})
    else:
        # Check what was given, one dimension at a time, for a precise message.
        _check_partial(arch, num_gpus, given, seq_len=seq_len)
        layouts = enumerate_layouts(
            arch,
            num_gpus,
            given,
            seq_len=seq_len,
            global_batch=global_batch,
            node_size=hw.node_size,
        )
        if layouts["tp"].size == 0:
            near = (
                nearest_valid_batch(
                    arch, num_gpus, given, seq_len=seq_len, global_batch=global_batch, hw=hw
                )
                if round_batch
                else None
            )
            if near is None:
                raise _no_layout_error(arch, num_gpus, given, global_batch)
            out = best_layouts(
                arch,
                hw,
                num_gpus,
                given,
                seq_len=seq_len,
                global_batch=near,
                precision=precision,
                framework=framework,
                constants=constants,
                top=top,
                raise_if_none_fits=raise_if_none_fits,
                round_batch=False,
            )
            out["global_batch_rounded_from"] = int(global_batch)
            out["global_batch_used"] = int(near)
            return out
    mem = memory_only(
        arch,
        hw,
        layouts,
        seq_len=seq_len,
        global_batch=global_batch,
        framework=framework,
        constants=constants,
        precision=precision,
    )
    fits = mem["total"] <= usable_memory_bytes(hw, constants)
    if not complete:
        if not np.any(fits) and user_fixed and raise_if_none_fits:
            # The user fixed part of the layout: forecast the completion closest to fitting,
            # with fits_in_memory false, its overshoot and what would make it fit. Only the
            # search over free dimensions prunes.
            fits = mem["total"] <= np.min(mem["total"])
        elif not np.any(fits):
            if not raise_if_none_fits:
                return {"fits_in_memory": False, "num_gpus": num_gpus}
            j = int(np.argmin(mem["total"]))
            parts = ", ".join(f"{k} {fmt_gib(float(v[j]))}" for k, v in mem.items() if k != "total")
            lay = ", ".join(f"{k}={int(layouts[k][j])}" for k in LAYOUT_KEYS)
            raise InputError(
                f"{arch.name} does not fit on {num_gpus} x {hw.gpu_id}: the smallest layout "
                f"({lay}) needs {fmt_gib(float(mem['total'][j]))} per GPU "
                f"({parts}) of {fmt_gib(hw.memory_bytes)}",
                hint="use more GPUs, a GPU with more memory, or a shorter --seq-len",
            )
        layouts = take_layouts(layouts, fits)
    res = evaluate_layouts(
        arch,
        hw,
        layouts,
        seq_len=seq_len,
        global_batch=global_batch,
        precision=precision,
        framework=framework,
        constants=constants,
    )
    step = np.asarray(res["step_time_s"])[0]
    order = np.argsort(step, kind="stable")
    kw: _SummaryOptions = {
        "seq_len": seq_len,
        "global_batch": global_batch,
        "precision": precision,
        "num_gpus": num_gpus,
        "constants": constants,
        "fsdp": given.get("zero") == 3 and given.get("pp") == 1,
        "frozen_weights": framework.lora_rank is not None,
    }
    best = summarise(arch, hw, res, int(order[0]), layouts, **kw)
    runners: list[RunnerUp] = []
    for j in order[1:top]:
        s = summarise(arch, hw, res, int(j), layouts, **kw)
        runners.append(
            {
                "parallelism": s["parallelism"],
                "step_time_s": s["step_time_s"],
                "step_time_interval_s": s["step_time_interval_s"],
                "tokens_per_s_per_gpu": s["tokens_per_s_per_gpu"],
                "mfu": s["mfu"],
                "memory_per_gpu_bytes": s["memory_per_gpu_bytes"],
                "fits_in_memory": s["fits_in_memory"],
                "breakdown_s": s["breakdown_s"],
            }
        )
    best["runners_up"] = runners
    best["layouts_evaluated"] = int(step.size)
    if not best["fits_in_memory"]:
        best["to_fit"] = fit_suggestions(
            arch,
            hw,
            num_gpus,
            {
                k: int(best["parallelism"][k])
                if k != "recompute"
                else int(layouts["recompute"][int(order[0])])
                for k in LAYOUT_KEYS
            },
            seq_len=seq_len,
            global_batch=global_batch,
            framework=framework,
            constants=constants,
            precision=precision,
        )
    else:
        best["to_fit"] = []
    return best


def _check_partial(arch: ModelArch, num_gpus: int, fixed: Fixed, *, seq_len: int) -> None:
    """Raise :class:`InputError` for the first rule the user-fixed dimensions break alone.

    The global batch is not checked here: a search rounds it to the nearest one a layout
    divides (:func:`nearest_valid_batch`).
    """
    given: dict[str, int] = {k: v for k, v in fixed.items() if k in LAYOUT_KEYS and v is not None}
    violation = layout_violation(arch, num_gpus, given, seq_len=seq_len)
    if violation is not None:
        raise violation.error()


def cluster_sizes(
    arch: ModelArch,
    hw: Hardware,
    fixed: Fixed,
    *,
    seq_len: int,
    global_batch: int,
    smallest: int = 1,
    largest: int = MAX_CLUSTER_GPUS,
) -> list[int]:
    """Every cluster size in ``[smallest, largest]`` the layout search can use, ascending.

    A size is ``tp * pp * cp * dp`` over the search's candidate values (:func:`candidate_values`;
    ``dp`` a divisor of the global batch) that is a whole number of the chip's cluster units
    (``hw.cluster_unit``: an HGX node, an NVL72 compute tray, a TPU host). Sizes with no
    layout at all are never listed, so a scan of this list is a scan of every size.
    """
    unit = max(int(hw.cluster_unit or hw.node_size or 1), 1)
    cand = candidate_values(
        arch,
        largest,
        fixed,
        seq_len=seq_len,
        global_batch=global_batch,
        node_size=hw.node_size,
    )
    if fixed.get("pp") is None:
        cand["pp"] = [p for p in range(1, arch.layers + 1) if bool(valid_pipeline(arch, p))]
    fixed_dp = fixed.get("dp")
    dps = [int(fixed_dp)] if fixed_dp is not None else _divisors(global_batch)
    sizes = {
        t * p * c * d
        for t in cand["tp"]
        for p in cand["pp"]
        for c in cand["cp"]
        for d in dps
        if smallest <= t * p * c * d <= largest and (t * p * c * d) % unit == 0
    }
    return sorted(sizes)


def flops_lower_bound_gpus(
    arch: ModelArch, hw: Hardware, *, tokens: float, target_s: float, seq_len: int, precision: str
) -> int:
    """GPUs below which no layout can meet the date: the model FLOPs at the dense peak.

    Every layout executes at least the model FLOPs (PaLM appendix B; recomputation only adds)
    and no GEMM runs above the dense peak of its dtype, so ``tokens * F / (n * peak) <=
    target`` needs ``n >= tokens * F / (peak * target)``.
    """
    peak = peak_flops(hw, precision_recipe(precision).peak_dtype) or 0.0
    if peak <= 0 or target_s <= 0:
        return 1
    flops = float(model_flops_per_token(arch, seq_len)) * tokens
    return max(1, int(np.floor(flops / (peak * target_s))))


def smallest_cluster(
    arch: ModelArch,
    hw: Hardware,
    fixed: Fixed,
    *,
    tokens: float,
    target_days: float,
    seq_len: int,
    global_batch: int,
    precision: str,
    framework: Framework,
    constants: Constants,
    top: int = 1,
    progress: Progress | None = None,
) -> TrainingForecast:
    """Smallest number of GPUs that trains ``tokens`` in ``target_days``.

    Time to train is not monotone in the cluster size (divisibility decides which layouts
    exist), so nothing is bisected: every size the search can use (:func:`cluster_sizes`,
    whole cluster units) from the FLOP lower bound (:func:`flops_lower_bound_gpus`) upward
    is evaluated in turn, and the first that meets the date is the answer. Every size
    evaluated is in ``gpus_vs_days`` (``[num_gpus, days]``, ``days`` None when no layout
    fits), the GPUs-versus-days curve.
    """
    target_s = target_days * SECONDS_PER_DAY
    kw: SearchOptions = {
        "seq_len": seq_len,
        "global_batch": global_batch,
        "precision": precision,
        "framework": framework,
        "constants": constants,
    }
    lower = flops_lower_bound_gpus(
        arch, hw, tokens=tokens, target_s=target_s, seq_len=seq_len, precision=precision
    )
    sizes = cluster_sizes(
        arch, hw, fixed, seq_len=seq_len, global_batch=global_batch, smallest=lower
    )
    curve: list[list[float | None]] = []
    evaluated: list[int] = []
    timed: list[tuple[int, float]] = []  # (num_gpus, days) of the sizes where a layout fits
    found: TrainingForecast | None = None
    found_time = 0.0
    for n in sizes:
        res: TrainingForecast | None
        try:
            res = best_layouts(
                arch, hw, n, fixed, top=top, raise_if_none_fits=False, round_batch=False, **kw
            )
        except InputError:
            res = None
        if res is not None and not res.get("fits_in_memory", False):
            res = None
        days: float | None = None
        if res is not None:
            time_s = tokens / res["tokens_per_s"]
            res["time_to_train_s"] = time_s
            days = time_s / SECONDS_PER_DAY
            timed.append((n, days))
        curve.append([n, days])
        evaluated.append(n)
        if progress is not None:
            progress(n, res)
        t = None if res is None else res["time_to_train_s"]
        if res is not None and t is not None and t <= target_s:
            found, found_time = res, t
            break
    if found is None:
        fastest = min(timed, key=lambda c: c[1], default=None)
        best = (
            f"; the fastest size found, {fastest[0]} GPUs, takes {fastest[1]:.3g} days"
            if fastest
            else ""
        )
        raise InputError(
            f"no cluster of {hw.gpu_id} GPUs trains {tokens:.3g} tokens of {arch.name} in "
            f"{target_days:g} days with a global batch of {global_batch} sequences{best}",
            hint=f"data parallelism must divide the global batch ({_factor_text(global_batch)}): "
            "raise --target-days, or choose a --global-batch with more divisors (a power of two)",
        )
    n_best = int(found["num_gpus"])
    out = found.copy()
    out["num_gpus"] = n_best
    out["gpu_hours"] = found_time * n_best / 3600.0
    lo, hi = out["intervals"]["tokens_per_s"]
    out["intervals"]["time_to_train_s"] = [tokens / hi, tokens / lo]
    out["intervals"]["gpu_hours"] = [tokens / hi * n_best / 3600.0, tokens / lo * n_best / 3600.0]
    out["cluster_sizes_evaluated"] = evaluated
    out["gpus_vs_days"] = curve
    out["cluster_unit"] = int(hw.cluster_unit or hw.node_size or 1)
    units = purchase_units(n_best, hw)
    out["purchase_unit"] = units["purchase_unit"]
    out["purchase_units"] = units["purchase_units"]
    out["gpus_purchased"] = units["gpus_purchased"]
    out["gpus_idle"] = units["gpus_idle"]
    out["gpus_lower_bound"] = lower
    return out


class PurchaseUnits(TypedDict):
    """What is bought for a job (:func:`purchase_units`)."""

    purchase_unit: int
    purchase_units: int
    gpus_purchased: int
    gpus_idle: int


class _SummaryOptions(TypedDict):
    seq_len: int
    global_batch: int
    precision: str
    num_gpus: int
    constants: Constants
    fsdp: bool
    frozen_weights: bool


def purchase_units(num_gpus: int, hw: Hardware) -> PurchaseUnits:
    """What is bought for a job of ``num_gpus``: whole purchase units (an NVL72 rack).

    Cluster sizes are scanned in cluster units (an NVL72 compute tray), so a job may use part
    of its last rack; the rack is still bought whole and the rest of it idles for this job.
    Units bought grow with the job size, so the first size that meets a date is also the one
    that buys the fewest units.

    >>> from types import SimpleNamespace
    >>> purchase_units(6656, SimpleNamespace(purchase_unit=72, cluster_unit=4, node_size=72))
    {'purchase_unit': 72, 'purchase_units': 93, 'gpus_purchased': 6696, 'gpus_idle': 40}
    """
    unit = int(hw.purchase_unit or hw.cluster_unit or hw.node_size or 1)
    units = -(-int(num_gpus) // unit)
    return {
        "purchase_unit": unit,
        "purchase_units": units,
        "gpus_purchased": units * unit,
        "gpus_idle": units * unit - int(num_gpus),
    }


def _factor_text(n: int) -> str:
    """``1953 = 3^2 x 7 x 31`` for messages about divisibility."""
    factors: list[str] = []
    rest, p = int(n), 2
    while p * p <= rest:
        k = 0
        while rest % p == 0:
            rest //= p
            k += 1
        if k:
            factors.append(f"{p}^{k}" if k > 1 else str(p))
        p += 1
    if rest > 1:
        factors.append(str(rest))
    return f"{n} = {' x '.join(factors) or '1'}"
