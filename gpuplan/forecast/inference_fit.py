"""Framework constants of the inference model, fitted on published serving runs.

The calibration measures GEMMs, memory copies and collectives in isolation; a serving engine
adds what no microbenchmark sees: kernel launches per layer, scheduling and sampling per step,
fused kernels that reach a different fraction of the GEMM and copy rates. Those few
constants (:class:`gpuplan.forecast.inference_step.OverheadParams`) are fitted here by
robust least squares on log errors (``scipy.optimize.least_squares``, soft-L1 loss).

Honesty rule: a row is never scored by constants fitted on it. :func:`cross_validate` fits
on all models but one and forecasts the held-out model (leave-one-model-out; also
leave-one-GPU-out), and the interval half-widths for the model error come from the
residuals of the fitting rows only. The constants shipped in
``data/inference_overheads.json`` are fitted on every row (used for new forecasts) and
record the held-out errors that describe them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, TypedDict, cast

import numpy as np

from gpuplan.forecast.inference_step import (
    FAST,
    SLOW,
    VALUE,
    OverheadParams,
    PassParts,
    StaticRunParts,
    combine,
)
from gpuplan.fsio import write_atomic
from gpuplan.numeric import FloatArray, JSONDict, Num

DATA_DIR = Path(__file__).resolve().parent / "data"
OVERHEADS_JSON = DATA_DIR / "inference_overheads.json"

#: fitted parameters, their bounds and the scale used by the optimiser
FIT_PARAMS: dict[str, tuple[float, float, float]] = {
    # name: (lower, upper, initial)
    "gemm_efficiency": (0.2, 1.5, 0.8),
    "bandwidth_efficiency": (0.3, 1.5, 0.85),
    "roofline_sharpness": (1.0, 12.0, 3.0),
    "overhead_per_layer_s": (0.0, 300e-6, 20e-6),
    "overhead_per_step_s": (0.0, 20e-3, 0.5e-3),
    "vector_attention_efficiency": (0.02, 1.0, 0.2),
}
#: nominal coverage of the model-error part of the intervals
INTERVAL_LEVEL = 0.9


# ---------------------------------------------------------------------------------------------
# Stacking many runs for vectorised evaluation
# ---------------------------------------------------------------------------------------------
def stack_passes(passes: list[PassParts]) -> PassParts:
    """Stack passes along a leading row axis, padding the GEMM lists with empty entries."""
    g = max(len(p.names) for p in passes)

    def pad(a: np.ndarray, width: int) -> np.ndarray:
        out = np.zeros((*a.shape[:-1], width))
        out[..., : a.shape[-1]] = a
        return out

    return PassParts(
        names=tuple(f"g{i}" for i in range(g)),
        gemm_compute_s=np.stack([pad(p.gemm_compute_s, g) for p in passes]),
        gemm_memory_s=np.stack([pad(p.gemm_memory_s, g) for p in passes]),
        gemm_count=np.stack([pad(p.gemm_count[None, :], g) for p in passes]),
        attn_compute_s=np.stack([p.attn_compute_s for p in passes]),
        attn_memory_s=np.stack([p.attn_memory_s for p in passes]),
        kv_read_s=np.stack([np.broadcast_to(np.asarray(p.kv_read_s, float), (3,)) for p in passes]),
        kv_group=np.array([float(p.kv_group) for p in passes]),
        bandwidth_cap=np.stack(
            [np.broadcast_to(np.asarray(p.bandwidth_cap, float), (3,)) for p in passes]
        ),
        attn_vector_compute_s=np.stack(
            [np.broadcast_to(np.asarray(p.attn_vector_compute_s, float), (3,)) for p in passes]
        ),
        elementwise_s=np.stack([p.elementwise_s for p in passes]),
        comm_s=np.stack([p.comm_s for p in passes]),
        layers=np.array([p.layers for p in passes]),  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class Cases:
    """Published rows prepared for fitting: stacked runs plus what each row measured.

    ``metric`` is ``"throughput_per_gpu"`` (output tokens/s per GPU of a static batch) or
    ``"ttft"`` (first-token latency at batch 1, seconds).
    """

    ids: tuple[str, ...]
    metric: np.ndarray  # str
    published: np.ndarray
    model: np.ndarray
    gpu: np.ndarray
    source: np.ndarray
    table: np.ndarray
    prefill: PassParts
    decode: PassParts
    hop_prefill: np.ndarray  # (R, 3)
    hop_decode: np.ndarray
    batch: np.ndarray
    output_tokens: np.ndarray
    pp: np.ndarray
    micro_batches: np.ndarray
    gpus: np.ndarray

    @classmethod
    def build(cls, rows: Sequence[Mapping[str, object]], runs: list[StaticRunParts]) -> Cases:
        """``rows``: one mapping per run with the columns of :class:`Cases` (``run_id``,
        ``metric``, ``published``, ``model``, ``gpu``, ``source``, ``table``, ``gpus``)."""

        def col(k: str) -> np.ndarray:
            return np.array([r[k] for r in rows])

        return cls(
            ids=tuple(str(r["run_id"]) for r in rows),
            metric=col("metric"),
            published=col("published").astype(float),
            model=col("model"),
            gpu=col("gpu"),
            source=col("source"),
            table=col("table"),
            prefill=stack_passes([r.prefill for r in runs]),
            decode=stack_passes([r.decode for r in runs]),
            hop_prefill=np.stack([r.hop_prefill_s for r in runs]),
            hop_decode=np.stack([r.hop_decode_s for r in runs]),
            batch=np.array([r.batch for r in runs]),
            output_tokens=np.array([r.output_tokens for r in runs]),
            pp=np.array([r.pp for r in runs], dtype=float),
            micro_batches=np.array([r.micro_batches for r in runs], dtype=float),
            gpus=col("gpus").astype(float),
        )

    def __len__(self) -> int:
        return len(self.ids)


def predict_cases(cases: Cases, params: OverheadParams) -> np.ndarray:
    """Forecast of each case's published metric, ``(R, 3)`` = [value, low, high]."""
    pre = combine(cases.prefill, params).total_s
    dec = combine(cases.decode, params).total_s
    pp = cases.pp[:, None]
    mb = cases.micro_batches[:, None]
    ttft = (pp + mb - 1) * pre + (pp - 1) * cases.hop_prefill
    tpot = pp * dec + (pp - 1) * cases.hop_decode
    steps = np.maximum(cases.output_tokens - 1, 0)[:, None]
    total = ttft + steps * tpot
    thr = cases.batch[:, None] * cases.output_tokens[:, None] / total / cases.gpus[:, None]
    is_thr = (cases.metric == "throughput_per_gpu")[:, None]
    val = np.where(is_thr, thr, ttft)
    # [value, low, high]: a slow device gives low throughput but high latency
    lo = np.where(is_thr[:, 0], val[:, SLOW], val[:, FAST])
    hi = np.where(is_thr[:, 0], val[:, FAST], val[:, SLOW])
    return np.stack([val[:, VALUE], lo, hi], axis=1)


# ---------------------------------------------------------------------------------------------
# Fitting
# ---------------------------------------------------------------------------------------------
def _to_params(x: np.ndarray, base: OverheadParams) -> OverheadParams:
    return replace(base, **{k: float(v) for k, v in zip(FIT_PARAMS, x, strict=True)})


def fit_params(
    cases: Cases, index: np.ndarray | None = None, base: OverheadParams | None = None
) -> OverheadParams:
    """Fit :data:`FIT_PARAMS` on the cases selected by boolean ``index`` (all by default).

    Minimises the soft-L1 loss of ``log(forecast / published)`` (scale 0.1, i.e. errors
    beyond ~10% count linearly), so that one odd row does not dominate.

    ``bandwidth_efficiency`` multiplies the calibrated copy bandwidth up to the vendor's
    figure (:func:`~gpuplan.forecast.inference_step.combine`); once it reaches every fitted
    GPU's cap (spec / calibrated) the loss is flat above it, and wherever the optimiser
    stops there would decide a GPU with a higher cap (MI300X: 1.29 against the NVIDIA
    parts' 1.13). It is pinned to the largest cap among the rows fitted, the least it can be
    and still reach those parts' figure, so the data alone decide it.
    """
    from scipy.optimize import least_squares

    base = base or OverheadParams()
    sel = np.ones(len(cases), bool) if index is None else np.asarray(index, bool)
    pub = cases.published[sel]
    lo = np.array([b[0] for b in FIT_PARAMS.values()])
    hi = np.array([b[1] for b in FIT_PARAMS.values()])
    x0 = np.array([b[2] for b in FIT_PARAMS.values()])
    scale = np.maximum(hi - lo, 1e-12)

    sub = _subset(cases, sel)

    def resid(z: np.ndarray) -> np.ndarray:
        p = _to_params(lo + z * scale, base)
        pred = predict_cases(sub, p)[:, VALUE]
        return np.asarray(np.log(pred / pub), dtype=float)

    best = None
    # a few starts: the smooth roofline makes the loss mildly non-convex
    for start in (x0, lo + 0.25 * scale, lo + 0.75 * scale):
        z0 = np.clip((start - lo) / scale, 1e-6, 1 - 1e-6)
        res = least_squares(resid, z0, bounds=(0.0, 1.0), loss="soft_l1", f_scale=0.1, x_scale=0.1)
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    fitted = _to_params(lo + best.x * scale, base)
    caps = np.concatenate(
        [np.asarray(p.bandwidth_cap, float)[:, VALUE] for p in (sub.prefill, sub.decode)]
    )
    finite = caps[np.isfinite(caps)]
    if finite.size and fitted.bandwidth_efficiency > float(finite.max()):
        fitted = replace(fitted, bandwidth_efficiency=float(finite.max()))
    return fitted


def _subset(cases: Cases, sel: np.ndarray) -> Cases:
    def pick(p: PassParts) -> PassParts:
        return PassParts(
            names=p.names,
            gemm_compute_s=p.gemm_compute_s[sel],
            gemm_memory_s=p.gemm_memory_s[sel],
            gemm_count=p.gemm_count[sel],
            attn_compute_s=p.attn_compute_s[sel],
            attn_memory_s=p.attn_memory_s[sel],
            kv_read_s=np.asarray(p.kv_read_s)[sel],
            kv_group=np.asarray(p.kv_group)[sel],
            bandwidth_cap=np.asarray(p.bandwidth_cap)[sel],
            attn_vector_compute_s=np.asarray(p.attn_vector_compute_s)[sel],
            elementwise_s=p.elementwise_s[sel],
            comm_s=p.comm_s[sel],
            layers=np.asarray(p.layers)[sel],
        )

    return Cases(
        ids=tuple(np.array(cases.ids)[sel]),
        metric=cases.metric[sel],
        published=cases.published[sel],
        model=cases.model[sel],
        gpu=cases.gpu[sel],
        source=cases.source[sel],
        table=cases.table[sel],
        prefill=pick(cases.prefill),
        decode=pick(cases.decode),
        hop_prefill=cases.hop_prefill[sel],
        hop_decode=cases.hop_decode[sel],
        batch=cases.batch[sel],
        output_tokens=cases.output_tokens[sel],
        pp=cases.pp[sel],
        micro_batches=cases.micro_batches[sel],
        gpus=cases.gpus[sel],
    )


def residual_quantiles(
    cases: Cases, params: OverheadParams, index: np.ndarray, level: float = INTERVAL_LEVEL
) -> tuple[float, float]:
    """Quantiles ``((1-level)/2, (1+level)/2)`` of ``log(forecast / published)`` on ``index``."""
    pred = predict_cases(_subset(cases, index), params)[:, VALUE]
    r = np.log(pred / cases.published[index])
    a = (1 - level) / 2
    return float(np.quantile(r, a)), float(np.quantile(r, 1 - a))


def widen(
    value: Num, low: Num, high: Num, q_lo: float, q_hi: float, *, is_time: bool = False
) -> tuple[FloatArray, FloatArray]:
    """Combine the calibration interval with the model-error quantiles, in log space.

    ``q_lo, q_hi`` are quantiles of ``log(forecast / truth)`` for the quantity; the truth then
    lies in ``[forecast * exp(-q_hi), forecast * exp(-q_lo)]``. The calibration's log
    half-widths and these are added in quadrature (independent errors).
    """
    v = np.asarray(value, float)
    down_cal = np.log(v / np.asarray(low, float))
    up_cal = np.log(np.asarray(high, float) / v)
    down_mod = max(q_hi, 0.0)
    up_mod = max(-q_lo, 0.0)
    lo = v * np.exp(-np.sqrt(down_cal**2 + down_mod**2))
    hi = v * np.exp(np.sqrt(up_cal**2 + up_mod**2))
    return lo, hi


# ---------------------------------------------------------------------------------------------
# The shipped constants
# ---------------------------------------------------------------------------------------------
class EngineConstants(TypedDict, total=False):
    """One engine profile's shipped constants (``engine_constants`` of
    ``data/inference_overheads.json``, fitted by
    :func:`gpuplan.forecast.validation_inference.fit_engine_constants`). Partial
    (``total=False``): a file written before a constant existed lacks it and
    :meth:`FittedOverheads.params_for` falls back to the shared value; only
    ``time_scale`` is always read."""

    time_scale: float
    moe_time_scale: float
    overhead_per_layer_s: float
    frontend_s_per_request: float
    rows: int
    basis: str
    log_residual_quantiles: dict[str, list[float]]
    #: pooled only: quantiles of the leave-one-engine-out residuals, the measured error of
    #: constants carried to an engine none of whose rows fitted them
    transfer_log_residual_quantiles: dict[str, list[float]]
    #: pooled only: the transfer error measured on every source of published serving runs
    #: the pooled constants did not fit (:class:`SourceTransfer`)
    source_transfer: SourceTransfer


class SourceTransfer(TypedDict):
    """The measured error of the pooled constants on the published serving sources that did
    not fit them (``engine_constants.pooled.source_transfer``, written by
    :func:`gpuplan.forecast.validation_inference.fit_source_transfer`): 5% and 95%
    quantiles of ``log(forecast / published)`` per metric (``throughput_per_gpu``,
    ``tpot``) over the residuals of every source, and over every source but one (what a
    row of that source is scored with: leave one source out)."""

    #: residuals per source and metric
    sources: dict[str, dict[str, int]]
    log_residual_quantiles: dict[str, list[float]]
    leave_one_source_out: dict[str, dict[str, list[float]]]
    basis: str


class VendorMoeRecord(TypedDict):
    """The MoE factor of engines whose experts run vendor grouped-GEMM kernels (``vendor_moe``
    of ``data/inference_overheads.json``, fitted by
    :func:`gpuplan.forecast.validation_inference.fit_vendor_moe`)."""

    #: multiplier on the pass time of a mixture-of-experts model
    time_scale: float
    rows: int
    #: the factor fitted without each model's rows (how each model's rows are scored)
    held_out: dict[str, float]
    #: 5% and 95% quantiles of log(forecast / published) throughput of the fitting rows,
    #: each scored with the factor fitted without its model
    log_residual_quantiles: list[float]
    basis: str


class OverheadsRecord(TypedDict, total=False):
    """The document ``data/inference_overheads.json`` (written by
    :func:`gpuplan.forecast.validation_inference.refit`); ``note`` alone where none is shipped."""

    version: int
    what: str
    fitted_on: str
    skipped: list[JSONDict]
    params: dict[str, float]
    interval: JSONDict
    held_out: dict[str, JSONDict]
    engines: dict[str, JSONDict]
    engine_constants: dict[str, EngineConstants]
    vendor_moe: VendorMoeRecord
    regenerate: str
    note: str


@dataclass(frozen=True)
class FittedOverheads:
    """The shipped framework constants, the held-out error quantiles per metric, and the
    engine profiles' own constants (``engines``: ``time_scale`` and quantiles per profile
    fitted on that engine's serving rows, plus ``pooled`` for profiles with fewer rows).
    ``vendor_moe_time_scale``: the pass-time factor of a mixture-of-experts model on an
    engine whose experts run vendor grouped-GEMM kernels and that has no constants of its
    own (1 in a record of the constants alone)."""

    params: OverheadParams
    quantiles: dict[str, tuple[float, float]]
    record: OverheadsRecord
    engines: dict[str, EngineConstants] = field(default_factory=dict)
    vendor_moe_time_scale: float = 1.0

    def engine_constants(self, engine: str | None) -> EngineConstants | None:
        """The fitted constants a profile uses: its own (calibrated), the pooled ones (a
        profile with fewer than ``MIN_ROWS_CALIBRATED`` rows of its own), or None (the
        TensorRT-LLM v0.9 constants as they are)."""
        if engine is None:
            return None
        from gpuplan.forecast.inference_step import engine_profile

        prof = engine_profile(engine)
        if prof.calibrated and prof.name in self.engines:
            return self.engines[prof.name]
        if prof.fitted_on == "pooled":
            return self.engines.get("pooled")
        return None

    def params_for(self, engine: str | None, moe: bool = False) -> OverheadParams:
        """:attr:`params` with the engine profile's ``time_scale`` (times its
        ``moe_time_scale`` for a mixture-of-experts model, ``moe``), its own per-layer
        overhead and its front-end cost per request; a mixture-of-experts model on a vendor-
        kernel profile without constants of its own also takes
        :attr:`vendor_moe_time_scale`."""
        out = self._params_for(engine, moe)
        if moe and _vendor_moe_applies(engine) and self.vendor_moe_time_scale != 1.0:
            out = replace(out, time_scale=out.time_scale * self.vendor_moe_time_scale)
        return out

    def _params_for(self, engine: str | None, moe: bool) -> OverheadParams:
        rec = self.engine_constants(engine)
        if rec is None:
            factor = self._transferred_moe_factor(engine, moe)
            if factor is not None:
                return replace(self.params, time_scale=self.params.time_scale * factor)
            return self.params
        moe = moe and _pays_moe_factor(engine)
        ts = float(rec["time_scale"]) * (float(rec.get("moe_time_scale", 1.0)) if moe else 1.0)
        ovh = float(rec.get("overhead_per_layer_s", self.params.overhead_per_layer_s))
        fe = float(rec.get("frontend_s_per_request", self.params.frontend_s_per_request))
        return replace(
            self.params, time_scale=ts, overhead_per_layer_s=ovh, frontend_s_per_request=fe
        )

    def time_scale_basis(self, engine: str | None, moe: bool = False) -> str | None:
        """Where :meth:`params_for`'s ``time_scale`` comes from, in words (None: the
        TensorRT-LLM v0.9 constants' own 1)."""
        vendor = moe and _vendor_moe_applies(engine) and self.vendor_moe_time_scale != 1.0
        vendor_note = (
            f"vendor MoE factor {self.vendor_moe_time_scale:.3g} (TensorRT-LLM 0.17 Mixtral "
            "offline rows)"
        )
        rec = self.engine_constants(engine)
        if rec is not None:
            basis = str(rec.get("basis")) if rec.get("basis") is not None else None
            if vendor and basis is not None:
                basis += f"; {vendor_note}"
            elif moe and not _pays_moe_factor(engine) and basis is not None:
                basis += "; no MoE factor (vendor grouped-GEMM MoE kernels)"
            return basis
        factor = self._transferred_moe_factor(engine, moe)
        if factor is not None:
            return f"MoE factor {factor:.3g} of the pooled serving rows (no rows of this engine)"
        return vendor_note if vendor else None

    def _transferred_moe_factor(self, engine: str | None, moe: bool) -> float | None:
        """The pooled serving rows' MoE factor for a MoE model on a profile without rows of
        its own (:func:`_moe_factor_transfers`): no engine here ran experts at the dense
        roofline (docs/forecast-inference.md, "MoE on every engine"). None otherwise."""
        pooled = self.engines.get("pooled")
        if moe and pooled is not None and _moe_factor_transfers(engine):
            return float(pooled.get("moe_time_scale", 1.0))
        return None

    def interval_quantiles(
        self,
        metric: str,
        engine: str | None = None,
        moe: bool = False,
        held_out_source: str | None = None,
    ) -> tuple[float, float]:
        """Log-space model-error quantiles for ``metric`` (``throughput_per_gpu``, ``ttft``
        or ``tpot``): a calibrated profile's own (from its held-out rows); for a profile
        whose constants are pooled from other engines, the transfer error measured on the
        published sources that did not fit them (:class:`SourceTransfer`; with
        ``held_out_source``, those of every other source, so a row of that source is scored
        leave one source out), else the pooled fit's leave-one-engine-out quantiles, else,
        in a file written before those were recorded, its own widened by
        ``TRANSFER_INTERVAL_WIDEN``. ``tpot`` without quantiles of its own mirrors the
        throughput's (throughput = batch / TPOT in decode). A mixture-of-experts model
        (``moe``) on a profile that takes the vendor MoE factor gets the envelope of those
        and the factor's own held-out residual quantiles (``vendor_moe.log_residual_quantiles``;
        a time metric mirrored): the profile's quantiles were measured without the factor."""
        q = self._interval_quantiles(metric, engine, held_out_source)
        if q is None:  # tpot without quantiles of its own: the throughput's, mirrored
            thr = self._interval_quantiles("throughput_per_gpu", engine, held_out_source)
            t_lo, t_hi = thr if thr is not None else (0.0, 0.0)
            q = (-t_hi, -t_lo)
        lo, hi = q
        vendor = self.record.get("vendor_moe")
        vq = vendor.get("log_residual_quantiles") if vendor else None
        if moe and vq and self.vendor_moe_time_scale != 1.0 and _vendor_moe_applies(engine):
            v_lo, v_hi = float(vq[0]), float(vq[1])
            if metric != "throughput_per_gpu":
                v_lo, v_hi = -v_hi, -v_lo
            lo, hi = min(lo, v_lo), max(hi, v_hi)
        return lo, hi

    def _interval_quantiles(
        self, metric: str, engine: str | None, held_out_source: str | None
    ) -> tuple[float, float] | None:
        q = self.quantiles.get(metric)
        if q is None and metric == "tpot":
            q_own: tuple[float, float] | None = None
        else:
            q_own = q or self.quantiles.get("all", (0.0, 0.0))
        if engine is None:
            return q_own
        from gpuplan.forecast.inference_step import TRANSFER_INTERVAL_WIDEN, engine_profile

        prof = engine_profile(engine)
        rec = self.engine_constants(engine) or {}
        own = rec.get("log_residual_quantiles", {})
        if metric in own:
            q_own = (float(own[metric][0]), float(own[metric][1]))
        elif metric == "tpot":
            q_own = None
        if prof.calibrated or prof.family == "modern":
            return q_own
        st = rec.get("source_transfer")
        if st is not None:
            loso = st["leave_one_source_out"].get(held_out_source or "", {})
            pick = loso.get(metric) or st["log_residual_quantiles"].get(metric)
            if pick is not None:
                return float(pick[0]), float(pick[1])
        moved = rec.get("transfer_log_residual_quantiles", {})
        if metric in moved:
            return float(moved[metric][0]), float(moved[metric][1])
        if q_own is None:
            return None
        return q_own[0] * TRANSFER_INTERVAL_WIDEN, q_own[1] * TRANSFER_INTERVAL_WIDEN


@lru_cache(maxsize=4)
def load_overheads(path: str | None = None) -> FittedOverheads:
    """Read ``data/inference_overheads.json`` (written by :func:`write_overheads`)."""
    p = Path(path) if path else OVERHEADS_JSON
    if not p.exists():
        return FittedOverheads(OverheadParams(), {"all": (0.0, 0.0)}, {"note": "not fitted"})
    return overheads_from(json.loads(p.read_text()))


def overheads_from(doc: Mapping[str, Any]) -> FittedOverheads:
    """The constants of an ``inference_overheads.json`` document (one being written, too)."""
    params = OverheadParams(**doc["params"])
    q = {
        k: (float(v[0]), float(v[1])) for k, v in doc["interval"]["log_residual_quantiles"].items()
    }
    vendor = doc.get("vendor_moe") or {}
    return FittedOverheads(
        params,
        q,
        cast(OverheadsRecord, doc),
        dict(doc.get("engine_constants", {})),
        float(vendor.get("time_scale", 1.0)),
    )


def write_overheads(doc: Mapping[str, object], path: Path | None = None) -> Path:
    p = path or OVERHEADS_JSON
    write_atomic(p, json.dumps(doc, indent=2, sort_keys=False) + "\n", make_parents=False)
    load_overheads.cache_clear()
    return p


def _moe_factor_transfers(engine: str | None) -> bool:
    """True for a profile that runs on the TensorRT-LLM v0.9 constants without rows of its
    own and whose MoE runs Triton ``fused_moe``: it takes the pooled MoE factor of the
    serving rows. ``modern`` and ``trtllm@1.0`` run vendor grouped GEMMs and do not;
    ``trtllm@0.9`` keeps its own (its tables fitted every constant, Mixtral included)."""
    if engine is None:
        return False
    from gpuplan.forecast.inference_step import engine_profile

    prof = engine_profile(engine)
    return not prof.calibrated and prof.fitted_on != "pooled" and prof.pays_moe_factor


def _vendor_moe_applies(engine: str | None) -> bool:
    """True for a profile whose experts run vendor grouped-GEMM kernels (not Triton
    ``fused_moe``) and that has no constants of its own: it takes the vendor MoE factor
    (``trtllm@0.9`` keeps its own fit, Mixtral included)."""
    if engine is None:
        return False
    from gpuplan.forecast.inference_step import engine_profile

    prof = engine_profile(engine)
    return not prof.pays_moe_factor and not prof.calibrated


def _pays_moe_factor(engine: str | None) -> bool:
    """True when ``engine``'s MoE runs Triton ``fused_moe`` (:attr:`EngineProfile.moe_kernels`)."""
    if engine is None:
        return True
    from gpuplan.forecast.inference_step import engine_profile

    return engine_profile(engine).pays_moe_factor
