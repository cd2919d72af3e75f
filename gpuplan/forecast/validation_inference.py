"""``gpuplan validate inference``: forecast every published serving run shipped with gpuplan.

The table (``data/inference_runs.csv``, a copy of the project's published-results table with
its ``source`` columns) holds NVIDIA's TensorRT-LLM v0.9.0 performance tables: static-batch
throughput ("Throughput (out tok/s/GPU)", ``gptSessionBenchmark``) and batch-1 first-token
latency, for GPT-J 6B, Mistral 7B, Mixtral 8x7B, Llama-2 7B/70B and Falcon 180B on A100
(FP16), H100 and H200 (FP8 weights and KV cache).

Like with like:

* throughput rows: a static batch of ``batch_or_concurrency`` requests (prefill of the whole
  batch, then ``output_len - 1`` decode steps), output tokens/s divided by the GPUs of the
  replica (``tp x pp``), compared with ``out_tokens_per_s_per_gpu`` (the table's per-GPU
  metric; the total is per-GPU x TP as its notes say);
* latency rows: the batch-1 prefill of ``input_len`` tokens with output length 1, compared
  with ``ttft_mean_ms``.

Scores are held out: the framework constants of :mod:`gpuplan.forecast.inference_fit` are
refitted without the model (``leave-one-model-out``, default) or the GPU
(``leave-one-gpu-out``) being scored.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from operator import ne
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeAlias, TypedDict, TypeVar, cast

import numpy as np

from gpuplan.errors import GpuplanError, InputError
from gpuplan.forecast.inference_fit import (
    DATA_DIR,
    FIT_PARAMS,
    INTERVAL_LEVEL,
    Cases,
    EngineConstants,
    FittedOverheads,
    SourceTransfer,
    VendorMoeRecord,
    _subset,
    fit_params,
    load_overheads,
    overheads_from,
    predict_cases,
    residual_quantiles,
    widen,
    write_overheads,
)
from gpuplan.forecast.inference_step import FAST, SLOW, VALUE, OverheadParams
from gpuplan.numeric import FloatArray, JSONDict

if TYPE_CHECKING:
    from typing_extensions import NotRequired

    from gpuplan.calibration.api import DevicePerf
    from gpuplan.catalogs.catalog import Catalog
    from gpuplan.forecast.inference import DroppedLayout
    from gpuplan.forecast.inference_arch import Utilization
    from gpuplan.forecast.inference_step import DeviceRates
    from gpuplan.forecast.serving import Candidate, ReplicaModel
    from gpuplan.forecast.speculative import Speculation

PerfFor: TypeAlias = "Callable[[str], DevicePerf]"
"""Looks up the calibrated performance of a catalog GPU id (default:
:func:`gpuplan.forecast.inference.device_perf_for`)."""

CSV_PATH = DATA_DIR / "inference_runs.csv"

SCHEMES = {"leave-one-model-out": "model", "leave-one-gpu-out": "gpu"}
METRICS = ("throughput_per_gpu", "ttft")


# ---------------------------------------------------------------------------------------------
# Records: the shapes of the ``gpuplan validate inference`` JSON parts
# ---------------------------------------------------------------------------------------------
class RowCase(TypedDict):
    """What a published row measured (:func:`row_case`)."""

    metric: str
    published: float
    batch: int
    input: int
    output: int
    tp: int
    pp: int
    ep: int


class PreparedRow(TypedDict):
    """A published row that can be forecast (:func:`prepare`): what it measured and where."""

    run_id: str
    metric: str
    published: float
    model: str
    gpu: str
    source: str
    table: str
    gpus: int
    batch: int
    input: int
    output: int
    tp: int
    precision: str


class RowForecast(TypedDict):
    """One row of ``gpuplan validate inference`` (``rows``): published, forecast, interval
    and error (None where the row was not forecast)."""

    run_id: str
    metric: str
    model: str
    gpu: str
    precision: str
    tp: int
    batch: int
    input: int
    output: int
    published: float
    forecast: float | None
    interval: list[float] | None
    error_pct: float | None


class Skipped(TypedDict):
    """A row that was not forecast, and why."""

    run_id: str
    reason: str


class Fold(TypedDict):
    """One fold of :func:`cross_validate`: the group held out and the constants fitted."""

    held_out: str
    rows: int
    params: dict[str, float]


class Score(TypedDict):
    """Coverage and error figures of a set of rows (:func:`score`); only the counts where
    no row was forecast."""

    rows: int
    forecast: int
    coverage: NotRequired[float]
    median_abs_pct_error: NotRequired[float]
    p90_abs_pct_error: NotRequired[float]
    bias_pct: NotRequired[float]
    interval_coverage: NotRequired[float]


ScoreFigure: TypeAlias = Literal[
    "coverage", "median_abs_pct_error", "p90_abs_pct_error", "bias_pct", "interval_coverage"
]
#: the figures of a :class:`Score` beyond its counts, in their order
SCORE_FIGURES: tuple[ScoreFigure, ...] = (
    "coverage",
    "median_abs_pct_error",
    "p90_abs_pct_error",
    "bias_pct",
    "interval_coverage",
)
ErrorFigure: TypeAlias = Literal["median_abs_pct_error", "p90_abs_pct_error", "bias_pct"]
_ERROR_FIGURES: tuple[ErrorFigure, ...] = ("median_abs_pct_error", "p90_abs_pct_error", "bias_pct")

EngineMetric: TypeAlias = Literal[
    "throughput", "ttft_mean_burst", "tpot_median_burst", "ttft_median_online", "tpot_median_online"
]
"""A metric an engine row's replay gives (:func:`simulate_engine_row`)."""
LatencyMetric: TypeAlias = Literal[
    "ttft_mean_burst", "tpot_median_burst", "ttft_median_online", "tpot_median_online"
]
_TTFT_METRICS: tuple[LatencyMetric, ...] = ("ttft_mean_burst", "ttft_median_online")


class LatencyPoint(TypedDict):
    """A latency metric of one engine row: published, forecast and its interval (s)."""

    published_s: float
    forecast_s: float
    interval_s: list[float]
    error_pct: float


class EngineRow(TypedDict):
    """One engine row of :func:`validate_engines` (``rows``): the constants it was scored
    with, its throughput (bursts) and its latency metrics."""

    run_id: str | None
    engine: str
    model: str
    gpu: str | None
    tp: str | None
    kind: str
    time_scale: float
    overhead_per_layer_s: float
    frontend_s_per_request: float
    fitted_on: str
    published: NotRequired[float]
    forecast: NotRequired[float]
    interval: NotRequired[list[float]]
    error_pct: NotRequired[float]
    ttft_mean_burst: NotRequired[LatencyPoint]
    tpot_median_burst: NotRequired[LatencyPoint]
    ttft_median_online: NotRequired[LatencyPoint]
    tpot_median_online: NotRequired[LatencyPoint]


class EngineFit(TypedDict):
    """Engine-profile constants (:meth:`_EngineData.fit`): the time scales and per-layer
    overhead; a finished fit adds the front-end cost and its row counts (interval quantiles
    come from held-out residuals: :func:`validate_engines`, :func:`fit_engine_constants`)."""

    time_scale: float
    moe_time_scale: float
    overhead_per_layer_s: float
    frontend_s_per_request: NotRequired[float]
    rows: NotRequired[int]
    moe_rows: NotRequired[int]


class EngineProfile(Score):
    """An engine profile's scores on its rows (:func:`validate_engines`, ``profiles``)."""

    latency: dict[str, Score]
    ttft: Score | None
    tpot: Score | None
    models: list[str]
    rows_total: int
    skipped: int
    calibrated: bool
    constants: str
    note: str


class EngineValidation(TypedDict):
    """What :func:`validate_engines` returns."""

    data: str
    scheme: str
    convention: str
    profiles: dict[str, EngineProfile]
    by_metric: dict[str, Score]
    overall: Score
    rows: list[EngineRow]
    skipped: list[Skipped]


class ProfileRow(TypedDict):
    """One engine profile of ``gpuplan validate inference`` (:func:`engine_profile_table`)."""

    rows: int
    throughput: Score
    ttft: Score | None
    tpot: Score | None
    calibrated: bool
    constants: str
    models: NotRequired[list[str]]
    held_out: str
    leave_one_engine_out: dict[str, float] | None
    note: NotRequired[str]


class InferenceValidation(TypedDict):
    """The JSON of ``gpuplan validate inference`` (:func:`validate_inference`)."""

    data: str
    scheme: str
    convention: str
    fitted: list[str]
    interval: str
    skipped: list[Skipped]
    overall: NotRequired[Score]
    folds: NotRequired[list[Fold]]
    by_source: NotRequired[dict[str, Score]]
    by_table: NotRequired[dict[str, Score]]
    by_metric: NotRequired[dict[str, Score]]
    profiles: NotRequired[dict[str, ProfileRow]]
    engine_rows: NotRequired[list[EngineRow]]
    engine_skipped: NotRequired[list[Skipped]]
    metrics: NotRequired[dict[str, str]]
    by_model: NotRequired[dict[str, Score]]
    by_gpu: NotRequired[dict[str, Score]]
    rows: NotRequired[list[RowForecast]]
    sweeps: NotRequired[SweepValidation]
    speculative: NotRequired[SpecValidation]
    disaggregated: NotRequired[DisaggValidation]
    offline: NotRequired[OfflineValidation]
    nim: NotRequired[NimValidation]
    neuron: NotRequired[NimValidation]
    gaudi: NotRequired[NimValidation]


def load_rows(path: str | Path | None = None) -> list[dict[str, str]]:
    """Rows of the published table (a CSV with the columns of ``inference_runs.csv``)."""
    p = Path(path) if path else CSV_PATH
    if not p.exists():
        raise InputError(f"no such file: {p}", hint="give --data a CSV like the shipped table")
    with p.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    need = {
        "run_id",
        "model",
        "precision",
        "gpu_type",
        "tp",
        "batch_or_concurrency",
        "input_len",
        "output_len",
    }
    missing = need - set(rows[0] if rows else ())
    if missing:
        raise InputError(
            f"{p} lacks the columns {', '.join(sorted(missing))}",
            hint="use the header of gpuplan/forecast/data/inference_runs.csv",
        )
    return rows


def _num(text: str | None) -> float | None:
    if text is None or str(text).strip() == "":
        return None
    try:
        return float(text)
    except ValueError:
        return None


def engine_of(row: dict[str, str]) -> str:
    """The engine profile of a published row (its ``framework`` column)."""
    fw = (row.get("framework") or "").lower()
    if "tensorrt-llm" in fw and "v0.9" in fw:
        return "trtllm-0.9"
    return "modern"


def row_case(row: dict[str, str]) -> RowCase:
    """What a published row measured, in the model's terms (raises for rows it cannot use)."""
    scenario = (row.get("scenario") or "").lower()
    tp = int(_num(row.get("tp")) or 1)
    pp = int(_num(row.get("pp")) or 1)
    ep = int(_num(row.get("ep")) or 1)
    inp = int(_num(row.get("input_len")) or 0)
    out = int(_num(row.get("output_len")) or 0)
    if inp <= 0 or out <= 0:
        raise InputError("input_len/output_len missing")
    if "latency" in scenario or (
        _num(row.get("ttft_mean_ms")) and not _num(row.get("out_tokens_per_s_per_gpu"))
    ):
        v = _num(row.get("ttft_mean_ms"))
        if v is None:
            raise InputError("no ttft_mean_ms")
        return dict(
            metric="ttft", published=v / 1e3, batch=1, input=inp, output=1, tp=tp, pp=pp, ep=ep
        )
    per_gpu = _num(row.get("out_tokens_per_s_per_gpu"))
    if per_gpu is None:
        total = _num(row.get("out_tokens_per_s_total"))
        if total is None:
            raise InputError("no throughput value")
        per_gpu = total / (tp * pp)
    batch = _num(row.get("batch_or_concurrency"))
    if batch is None:
        raise InputError("no static batch size")
    return dict(
        metric="throughput_per_gpu",
        published=per_gpu,
        batch=int(batch),
        input=inp,
        output=out,
        tp=tp,
        pp=pp,
        ep=ep,
    )


def prepare(
    rows: list[dict[str, str]],
    *,
    artifact: JSONDict | str | None = None,
    perf_for: PerfFor | None = None,
    catalog: Catalog | None = None,
) -> tuple[Cases | None, list[PreparedRow], list[Skipped]]:
    """Turn published rows into :class:`Cases`; rows that cannot be forecast are returned
    with the reason (they count against coverage)."""
    from gpuplan.forecast.inference import device_perf_for
    from gpuplan.forecast.inference_arch import Layout, resolve_precision, shard
    from gpuplan.forecast.inference_step import DeviceRates, static_run_parts
    from gpuplan.forecast.model import arch_from

    if catalog is None:
        from gpuplan.catalogs import get_catalog

        catalog = get_catalog()
    perfs: dict[str, DevicePerf] = {}
    rates_cache: dict[tuple[str, str, str, int, int, int], DeviceRates] = {}
    kept: list[PreparedRow] = []
    runs = []
    skipped: list[Skipped] = []
    for row in rows:
        rid = row.get("run_id", "?")
        try:
            case = row_case(row)
            model = catalog.model(row["model"])
            gpu = catalog.gpu(row["gpu_type"])
            prec_name = (row.get("precision") or "bf16").strip().lower()
            if gpu.id not in perfs:
                perfs[gpu.id] = perf_for(gpu.id) if perf_for else device_perf_for(gpu.id, artifact)
            key = (model.id, gpu.id, prec_name, case["tp"], case["pp"], case["ep"])
            if key not in rates_cache:
                prec = resolve_precision(prec_name, gpu)
                sh = shard(arch_from(model), Layout(case["tp"], case["pp"], case["ep"]), prec)
                rates_cache[key] = DeviceRates(perfs[gpu.id], gpu, sh, engine=engine_of(row))
            run = static_run_parts(rates_cache[key], case["batch"], case["input"], case["output"])
        except GpuplanError as exc:
            skipped.append({"run_id": rid, "reason": exc.one_line()})
            continue
        kept.append(
            dict(
                run_id=rid,
                metric=case["metric"],
                published=case["published"],
                model=model.id,
                gpu=gpu.id,
                source=row.get("source", ""),
                table=row.get("source_locator", ""),
                gpus=case["tp"] * case["pp"],
                batch=case["batch"],
                input=case["input"],
                output=case["output"],
                tp=case["tp"],
                precision=prec_name,
            )
        )
        runs.append(run)
    cases = Cases.build(kept, runs) if kept else None
    return cases, kept, skipped


def cross_validate(
    cases: Cases, scheme: str = "leave-one-model-out", base: OverheadParams | None = None
) -> tuple[FloatArray, list[Fold]]:
    """Held-out forecasts ``(R, 3)`` with widened intervals, and the fold records."""
    if scheme not in SCHEMES:
        raise InputError(f"unknown scheme {scheme!r}", hint=f"use one of {', '.join(SCHEMES)}")
    groups = cases.model if SCHEMES[scheme] == "model" else cases.gpu
    pred = np.full((len(cases), 3), np.nan)
    folds: list[Fold] = []
    for g in sorted(set(groups.tolist())):
        test = groups == g
        train = ~test
        if not train.any():
            continue
        params = fit_params(cases, train, base)
        p = predict_cases(_subset(cases, test), params)
        idx = np.flatnonzero(test)
        for metric in METRICS:
            m_train = train & (cases.metric == metric)
            m_test = cases.metric[test] == metric
            if not m_test.any():
                continue
            q = residual_quantiles(cases, params, m_train if m_train.any() else train)
            lo, hi = widen(p[m_test, VALUE], p[m_test, 1], p[m_test, 2], *q)
            rows = idx[m_test]
            pred[rows, VALUE] = p[m_test, VALUE]
            pred[rows, 1] = lo
            pred[rows, 2] = hi
        folds.append({"held_out": g, "rows": int(test.sum()), "params": params.as_dict()})
    return pred, folds


def score(published: FloatArray, pred: FloatArray, total_rows: int) -> Score:
    """Coverage, median / p90 absolute percentage error, bias and interval coverage."""
    ok = np.isfinite(pred[:, VALUE])
    n = int(ok.sum())
    if n == 0:
        return {"rows": total_rows, "forecast": 0, "coverage": 0.0}
    err = (pred[ok, VALUE] - published[ok]) / published[ok]
    ape = np.abs(err)
    inside = (published[ok] >= pred[ok, 1]) & (published[ok] <= pred[ok, 2])
    return {
        "rows": int(total_rows),
        "forecast": n,
        "coverage": n / total_rows if total_rows else 0.0,
        "median_abs_pct_error": float(np.median(ape) * 100),
        "p90_abs_pct_error": float(np.quantile(ape, 0.9) * 100),
        "bias_pct": float(np.median(err) * 100),
        "interval_coverage": float(inside.mean()),
    }


def _group_scores(
    key: np.ndarray, cases: Cases, pred: FloatArray, skipped_keys: list[str]
) -> dict[str, Score]:
    out: dict[str, Score] = {}
    for g in sorted(set(key.tolist()) | set(skipped_keys)):
        sel = key == g
        total = int(sel.sum()) + skipped_keys.count(g)
        out[g] = score(cases.published[sel], pred[sel], total)
    return out


def engine_profile_table(
    result: InferenceValidation, engines: EngineValidation, transfer: EngineValidation
) -> dict[str, ProfileRow]:
    """One entry per engine profile with published rows: throughput (median / p90 / bias /
    interval coverage), TTFT and TPOT errors apart, held out by model (and, for the serving
    engines, by engine: ``leave_one_engine_out``), and what its constants are."""
    from gpuplan.forecast.inference_step import MIN_ROWS_CALIBRATED, engine_profile

    out: dict[str, ProfileRow] = {}
    bm = result.get("by_metric", {})
    if "throughput_per_gpu" in bm:
        prof = engine_profile("trtllm@0.9")
        out[prof.name] = {
            "rows": bm["throughput_per_gpu"]["rows"],
            "throughput": bm["throughput_per_gpu"],
            "ttft": bm.get("ttft"),
            "tpot": None,
            "calibrated": bool(bm["throughput_per_gpu"]["rows"] >= MIN_ROWS_CALIBRATED),
            "constants": prof.basis + " (every framework constant, static-batch tables)",
            "held_out": result["scheme"],
            "leave_one_engine_out": None,
        }
    for name, p in engines.get("profiles", {}).items():
        # the profile's throughput score: its counts and figures, in their order
        thr: Score = {"rows": p["rows"], "forecast": p["forecast"]}
        for fig in SCORE_FIGURES:
            if fig in p:
                thr[fig] = p[fig]
        loeo = transfer.get("profiles", {}).get(name)
        loeo_errors: dict[str, float] = (
            {k: loeo[k] for k in _ERROR_FIGURES if k in loeo} if loeo is not None else {}
        )
        out[name] = {
            "rows": p["rows"],
            "throughput": thr,
            "ttft": p.get("ttft"),
            "tpot": p.get("tpot"),
            "calibrated": p["calibrated"],
            "constants": p["constants"],
            "models": p["models"],
            "held_out": engines["scheme"],
            "leave_one_engine_out": loeo_errors or None,
            "note": p["note"],
        }
    return out


def validate_inference(
    data: str | Path | None = None,
    *,
    scheme: str = "leave-one-model-out",
    artifact: JSONDict | str | None = None,
    perf_for: PerfFor | None = None,
    catalog: Catalog | None = None,
) -> InferenceValidation:
    """Held-out errors of the inference forecast on the published table.

    Returns the JSON of ``gpuplan validate inference``: ``overall``, ``by_source``,
    ``by_table``, ``by_metric`` and ``by_model`` scores, one entry per row (published,
    forecast, interval, error), the skipped rows with reasons, and the conventions used.
    """
    rows = load_rows(data)
    cases, kept, skipped = prepare(rows, artifact=artifact, perf_for=perf_for, catalog=catalog)
    result: InferenceValidation = {
        "data": str(Path(data) if data else CSV_PATH.name),
        "scheme": scheme,
        "convention": (
            "throughput rows: output tokens/s per GPU of a static batch of the given size "
            "(prefill of the whole batch, then output_len-1 decode steps), replica throughput "
            "divided by tp*pp, against out_tokens_per_s_per_gpu; latency rows: batch-1 prefill "
            "of input_len tokens against ttft_mean_ms"
        ),
        "fitted": sorted(FIT_PARAMS),
        "interval": (
            f"calibration low/high combined in quadrature (log space) with the {INTERVAL_LEVEL:.0%} "
            "quantiles of the fitting rows' residuals"
        ),
        "skipped": skipped,
    }
    by_src_skip = [
        next((r.get("source", "") for r in rows if r.get("run_id") == s["run_id"]), "")
        for s in skipped
    ]
    by_tab_skip = [
        next((r.get("source_locator", "") for r in rows if r.get("run_id") == s["run_id"]), "")
        for s in skipped
    ]
    if cases is None:
        result["overall"] = {"rows": len(rows), "forecast": 0, "coverage": 0.0}
        return result
    pred, folds = cross_validate(cases, scheme)
    result["folds"] = folds
    result["overall"] = score(cases.published, pred, len(rows))
    result["by_source"] = _group_scores(cases.source, cases, pred, by_src_skip)
    result["by_table"] = _group_scores(cases.table, cases, pred, by_tab_skip)
    result["by_metric"] = _group_scores(cases.metric, cases, pred, [])
    engines = validate_engines(catalog=catalog, perf_for=perf_for)
    transfer = validate_engines(catalog=catalog, perf_for=perf_for, scheme="leave-one-engine-out")
    result["by_metric"].update(engines.get("by_metric", {}))
    result["profiles"] = engine_profile_table(result, engines, transfer)
    result["engine_rows"] = engines["rows"]
    result["engine_skipped"] = engines["skipped"]
    result["sweeps"] = validate_sweeps(catalog=catalog, perf_for=perf_for)
    result["speculative"] = validate_speculative(catalog=catalog, perf_for=perf_for)
    result["disaggregated"] = validate_disaggregated(catalog=catalog, perf_for=perf_for)
    result["offline"] = validate_offline(catalog=catalog, perf_for=perf_for)
    result["nim"] = validate_nim(catalog=catalog, perf_for=perf_for)
    result["neuron"] = validate_neuron(catalog=catalog, perf_for=perf_for)
    result["gaudi"] = validate_gaudi(catalog=catalog, perf_for=perf_for)
    result["metrics"] = {
        "throughput_per_gpu": f"static-batch output tokens/s per GPU ({result['data']})",
        "ttft": f"batch-1 first-token latency, ttft_mean_ms ({result['data']})",
        "ttft_mean_burst": (
            f"mean TTFT of a request burst, ttft_mean_ms ({engines['data']}; scored with the "
            "profile's time scale fitted without the row's model)"
        ),
        "tpot_median_burst": (
            f"median TPOT of a request burst, tpot_median_ms ({engines['data']}; held out "
            "like the bursts' throughput)"
        ),
        "ttft_median_online": (
            f"median TTFT at a fixed Poisson request rate, ttft_median_ms ({engines['data']})"
        ),
        "tpot_median_online": (
            f"median TPOT at a fixed Poisson request rate, tpot_median_ms ({engines['data']})"
        ),
    }
    result["metrics"] = {k: v for k, v in result["metrics"].items() if k in result["by_metric"]}
    result["by_model"] = _group_scores(cases.model, cases, pred, [])
    result["by_gpu"] = _group_scores(cases.gpu, cases, pred, [])
    per_row: list[RowForecast] = []
    for i, k in enumerate(kept):
        v, lo, hi = pred[i]
        per_row.append(
            {
                "run_id": k["run_id"],
                "metric": k["metric"],
                "model": k["model"],
                "gpu": k["gpu"],
                "precision": k["precision"],
                "tp": k["tp"],
                "batch": k["batch"],
                "input": k["input"],
                "output": k["output"],
                "published": float(cases.published[i]),
                "forecast": float(v) if math.isfinite(v) else None,
                "interval": [float(lo), float(hi)] if math.isfinite(v) else None,
                "error_pct": float((v - cases.published[i]) / cases.published[i] * 100)
                if math.isfinite(v)
                else None,
            }
        )
    result["rows"] = per_row
    return result


# ---------------------------------------------------------------------------------------------
# Engine profiles: published serving-benchmark rows of other engines
# ---------------------------------------------------------------------------------------------
ENGINE_CSV_PATH = DATA_DIR / "inference_engine_runs.csv"

#: The exact ShareGPT trace (vLLM ``benchmark_serving``, 80 prompts, Llama-3 tokenizer) whose
#: shape stands in for rows that publish only mean lengths: its prompt and answer lengths are
#: rescaled to the row's means (answers that returned no token are dropped first).
SHAREGPT_SHAPE_ROW = "lambda_vllm054_llama3-8b_H100_tp1_sharegpt80"
#: Requests simulated for a row that publishes only mean lengths: a saturated burst reaches
#: its steady state long before, and an online run at a fixed rate is stationary.
SIM_MAX_REQUESTS = 600
#: seed of the Poisson arrivals of an online row (the benchmark's own arrivals are not
#: published; sglang.bench_serving draws exponential gaps the same way)
ONLINE_SEED = 0

#: metrics of the engine rows: (column, unit scale, name in ``by_metric``, row kind).
#: Throughput is scored on bursts only: an online run at a fixed rate outputs what is offered.
ENGINE_METRICS: tuple[tuple[str, float, EngineMetric, str], ...] = (
    ("out_tokens_per_s_total", 1.0, "throughput", "burst"),
    ("ttft_mean_ms", 1e-3, "ttft_mean_burst", "burst"),
    ("tpot_median_ms", 1e-3, "tpot_median_burst", "burst"),
    ("ttft_median_ms", 1e-3, "ttft_median_online", "online"),
    ("tpot_median_ms", 1e-3, "tpot_median_online", "online"),
)
#: the latency metrics alone
ENGINE_LATENCY_METRICS = tuple(m for m in ENGINE_METRICS if m[2] != "throughput")
#: which TTFT metric a profile's TTFT interval quantiles come from
ENGINE_SCHEMES = ("leave-one-model-out", "leave-one-engine-out")


def _read_rows(path: str | Path | None, shipped: Path) -> list[dict[str, str]]:
    """The rows of a published-results CSV: ``path``, else the ``shipped`` table."""
    p = Path(path) if path else shipped
    if not p.exists():
        raise InputError(f"no such file: {p}", hint="use the header of " + shipped.name)
    with p.open(newline="") as fh:
        return list(csv.DictReader(fh))


def load_engine_rows(path: str | Path | None = None) -> list[dict[str, str]]:
    """Rows of the engines' published serving benchmarks (``inference_engine_runs.csv``)."""
    return _read_rows(path, ENGINE_CSV_PATH)


def _trace(text: str | None, name: str) -> np.ndarray:
    try:
        return np.array([int(x) for x in (text or "").split()], dtype=np.int64)
    except ValueError:
        raise InputError(f"{name} must be space-separated token counts") from None


def row_kind(row: dict[str, str]) -> str:
    """``burst`` (request rate inf) or ``online`` (a fixed Poisson rate)."""
    rate = (row.get("request_rate") or "").strip().lower()
    if rate == "inf":
        return "burst"
    if _num(rate) is None or float(rate) <= 0:
        raise InputError(
            f"{row.get('run_id')}: request_rate {rate!r} is neither inf nor a positive rate",
            hint="give requests/s, or inf for a burst",
        )
    return "online"


def row_requests(
    row: dict[str, str], shape: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(arrivals s, prompt lengths, answer lengths)`` a row's benchmark sent.

    A row with its exact traces (``trace_input_lens``/``trace_output_lens``) sends those;
    answers of 0 tokens (the request returned nothing) are dropped. A row with only mean
    lengths (``mean_input_len``/``mean_output_len``) sends ``min(num_requests,
    SIM_MAX_REQUESTS)`` requests of the ShareGPT shape (``shape``, the exact trace of
    :data:`SHAREGPT_SHAPE_ROW`) rescaled to those means. A burst arrives at 0; an online row
    at Poisson times of its rate (seed :data:`ONLINE_SEED`).
    """
    rid = row.get("run_id")
    kind = row_kind(row)
    if (row.get("trace_input_lens") or "").strip():
        lin = _trace(row.get("trace_input_lens"), "trace_input_lens")
        lout = _trace(row.get("trace_output_lens"), "trace_output_lens")
        if lin.size == 0 or lin.size != lout.size:
            raise InputError(f"{rid}: input and output traces differ in length")
        keep = lout > 0
        lin, lout = lin[keep], lout[keep]
    else:
        mi, mo = _num(row.get("mean_input_len")), _num(row.get("mean_output_len"))
        n = int(_num(row.get("num_requests")) or 0)
        if not mi or not mo or n <= 0 or shape is None:
            raise InputError(
                f"{rid}: neither request traces nor mean lengths and a request count",
                hint="give trace_input_lens/trace_output_lens or mean_input_len/mean_output_len",
            )
        n = min(n, SIM_MAX_REQUESTS)
        si, so = (np.resize(a.astype(float), n) for a in shape)
        lin = np.maximum(np.rint(si * mi / si.mean()), 1).astype(np.int64)
        lout = np.maximum(np.rint(so * mo / so.mean()), 1).astype(np.int64)
    if kind == "burst":
        arrivals = np.zeros(lin.size)
    else:
        rate = float(row["request_rate"])
        gaps = np.random.default_rng(ONLINE_SEED).exponential(1.0 / rate, lin.size)
        arrivals = np.cumsum(gaps) - gaps[0]
    return arrivals, lin, lout


def _shape(rows: list[dict[str, str]]) -> tuple[np.ndarray, np.ndarray] | None:
    ref = next((r for r in rows if r.get("run_id") == SHAREGPT_SHAPE_ROW), None)
    if ref is None:
        ref = next((r for r in load_engine_rows() if r.get("run_id") == SHAREGPT_SHAPE_ROW), None)
    if ref is None:
        return None
    _, lin, lout = row_requests(ref)
    return lin, lout


def simulate_engine_row(
    row: dict[str, str],
    *,
    time_scale: float | None = None,
    overhead_per_layer_s: float | None = None,
    fitted: FittedOverheads | None = None,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
    shape: tuple[np.ndarray, np.ndarray] | None = None,
    frontend_s_per_request: float | None = None,
) -> dict[EngineMetric, FloatArray]:
    """One row's benchmark replayed through the continuous-batching simulation.

    Returns ``[value, slow, fast]`` per metric the row's kind has: ``throughput`` (total
    output tokens over the time the last request finishes: vLLM ``benchmark_serving`` and
    ``sglang.bench_serving``), ``ttft_mean_burst`` / ``ttft_median_online`` (arrival to first
    token) and ``tpot_median_burst`` / ``tpot_median_online`` ((last - first token) /
    (answer - 1), per request). ``time_scale``, ``overhead_per_layer_s`` and
    ``frontend_s_per_request`` replace the profile's fitted ones.
    """
    from gpuplan.forecast.inference_step import FAST, SLOW, engine_profile
    from gpuplan.forecast.model import arch_from
    from gpuplan.forecast.serving import simulate_requests

    if catalog is None:
        from gpuplan.catalogs import get_catalog

        catalog = get_catalog()
    fitted = fitted or load_overheads()
    engine = engine_profile(row["engine"]).name
    if (
        time_scale is not None
        or overhead_per_layer_s is not None
        or frontend_s_per_request is not None
    ):
        base = fitted.params_for(engine, arch_from(catalog.model(row["model"])).is_moe)
        over: dict[str, float] = {}
        if time_scale is not None:
            over["time_scale"] = float(time_scale)
        if overhead_per_layer_s is not None:
            over["overhead_per_layer_s"] = float(overhead_per_layer_s)
        if frontend_s_per_request is not None:
            over["frontend_s_per_request"] = float(frontend_s_per_request)
        fitted = FittedOverheads(replace(base, **over), fitted.quantiles, fitted.record)
    kind = row_kind(row)
    arrivals, lin, lout = row_requests(row, shape if shape is not None else _shape([row]))
    rep = _row_replica(row, engine, fitted, catalog, perf_for, lin, lout)
    out: dict[EngineMetric, list[float]] = {}
    for scn in (VALUE, SLOW, FAST):
        sim = simulate_requests(rep, arrivals, lin, lout, max_queue=lin.size + 1, scenario=scn)
        if kind == "burst":
            thr = sim.output_tokens / sim.duration_s if sim.duration_s > 0 else math.nan
            out.setdefault("throughput", []).append(thr)
            out.setdefault("ttft_mean_burst", []).append(
                float(np.mean(sim.ttft_s)) if sim.ttft_s.size else math.nan
            )
            out.setdefault("tpot_median_burst", []).append(
                float(np.median(sim.tpot_s)) if sim.tpot_s.size else math.nan
            )
        else:
            out.setdefault("ttft_median_online", []).append(
                float(np.median(sim.ttft_s)) if sim.ttft_s.size else math.nan
            )
            out.setdefault("tpot_median_online", []).append(
                float(np.median(sim.tpot_s)) if sim.tpot_s.size else math.nan
            )
    return {k: np.array(v) for k, v in out.items()}


def _row_replica(
    row: dict[str, str],
    engine: str,
    fitted: FittedOverheads,
    catalog: Catalog,
    perf_for: PerfFor | None,
    lin: np.ndarray,
    lout: np.ndarray,
    speculation: Speculation | None = None,
) -> ReplicaModel:
    """The replica a published row's server ran (:func:`_row_candidate`)."""
    return _row_candidate(row, engine, fitted, catalog, perf_for, lin, lout, speculation).replica


def _row_candidate(
    row: dict[str, str],
    engine: str,
    fitted: FittedOverheads,
    catalog: Catalog,
    perf_for: PerfFor | None,
    lin: np.ndarray,
    lout: np.ndarray,
    speculation: Speculation | None = None,
) -> Candidate:
    """The candidate (replica with its layout's extras) a published row's server ran: the
    row's model, GPU, precisions, TP/EP and prefill chunk, with the engine's (or the row's
    ``max_num_seqs``) running cap, else the largest batch memory allows; the row's
    ``memory_fraction`` (when given) sets the memory the engine may use
    (:func:`engine_memory_utilization`), else the engine's default setting
    (:meth:`~gpuplan.forecast.inference_step.EngineProfile.memory_share`: 0.9 of the memory
    the weights leave for TensorRT-LLM, 0.9 of all of it for vLLM, SGLang 0.5's own
    static fraction by device)."""
    from gpuplan.forecast.inference import (
        build_candidates,
        device_perf_for,
    )
    from gpuplan.forecast.inference_step import engine_profile
    from gpuplan.forecast.model import arch_from
    from gpuplan.forecast.serving import LengthDist

    arch = arch_from(catalog.model(row["model"]))
    gpu = catalog.gpu(row["gpu_type"])
    cap = int(_num(row.get("max_num_seqs")) or engine_profile(engine).running_cap(gpu) or 0)

    def candidates(utilization: Utilization) -> tuple[list[Candidate], list[DroppedLayout]]:
        return build_candidates(
            arch=arch,
            gpus=[gpu],
            precision=(row.get("precision") or "bf16").lower(),
            kv_precision=(row.get("kv_precision") or "").strip().lower() or None,
            tp=int(_num(row.get("tp")) or 1),
            pp=1,
            ep=int(_num(row.get("ep")) or 1),
            inputs=LengthDist.from_trace(lin),
            outputs=LengthDist.from_trace(lout),
            batch=cap or None,
            fitted=fitted,
            get_perf=perf_for or (lambda gid: device_perf_for(gid)),
            catalog=catalog,
            chunk_tokens=int(_num(row.get("max_num_batched_tokens")) or 0) or None,
            utilization=utilization,
            engine=engine,
            speculation=speculation,
        )

    fraction = _num(row.get("memory_fraction"))
    utilization: Utilization = engine_profile(engine).memory_share(None)
    if fraction is not None:
        whole, _ = candidates(1.0)  # the fixed memory of the layout: weights, activations
        if whole:
            mp = whole[0].extra["memory"]
            utilization = engine_memory_utilization(
                fraction,
                row.get("memory_fraction_of") or "total",
                fixed_bytes=mp.weights_bytes + mp.activation_bytes,
                activation_bytes=mp.activation_bytes,
                capacity_bytes=mp.capacity_bytes,
            )
    cands, dropped = candidates(utilization)
    if not cands:
        raise InputError(f"{row.get('run_id')}: {dropped[0]['reason'] if dropped else 'no layout'}")
    # the scheduler's cap, else memory's (the largest candidate cap)
    return max(cands, key=lambda c: c.replica.max_batch)


def engine_memory_utilization(
    fraction: float,
    of: str,
    *,
    fixed_bytes: float,
    activation_bytes: float,
    capacity_bytes: float,
) -> float:
    """The share of device memory the forecast's memory plan may use (weights, activations
    and KV cache) for an engine's memory setting.

    ``of="static"``: SGLang ``--mem-fraction-static`` is the share of all memory for the
    weights and the KV pool, activations outside it, so the plan's share is the fraction
    plus the activations. ``of="free"``: TensorRT-LLM
    ``kv_cache_config.free_gpu_memory_fraction`` is the share of the memory left after the
    weights load and a profiling pass takes its activations, all of it KV cache.
    ``of="total"``: vLLM ``gpu_memory_utilization``, the share of all memory for everything.
    (:class:`~gpuplan.forecast.inference_arch.MemoryShare` holds the three formulas.)
    """
    from gpuplan.forecast.inference_arch import MemoryShare

    if not 0.0 < fraction <= 1.0:
        raise InputError(f"memory_fraction {fraction} is outside (0, 1]")
    if of not in ("total", "free", "static"):
        raise InputError(f"memory_fraction_of {of!r} is not one of total, free, static")
    share = MemoryShare(fraction, of)  # type: ignore[arg-type]  # checked above
    return share.usable_bytes(capacity_bytes, fixed_bytes, activation_bytes) / capacity_bytes


def _catalog_or_default(catalog: Catalog | None) -> Catalog:
    if catalog is None:
        from gpuplan.catalogs import get_catalog

        return get_catalog()
    return catalog


def _with_interval(
    v3: np.ndarray,
    name: str,
    q_thr: tuple[float, float],
    q_ttft: tuple[float, float],
    q_tpot: tuple[float, float] | None = None,
) -> tuple[float, float, float]:
    """``(value, low, high)``: the calibration's slow/fast ends widened by the model-error
    quantiles: a throughput's, a TTFT's, and any other time (TPOT, the inverse of a decode
    rate) by ``q_tpot``, else the throughput quantiles mirrored."""
    if name == "throughput":
        lo, hi = widen(v3[VALUE], v3[1], v3[2], *q_thr)
    elif name.startswith("ttft"):
        lo, hi = widen(v3[VALUE], v3[2], v3[1], *q_ttft)
    else:
        q = q_tpot if q_tpot is not None else (-q_thr[1], -q_thr[0])
        lo, hi = widen(v3[VALUE], v3[2], v3[1], *q)
    return float(v3[VALUE]), float(lo), float(hi)


def forecast_engine_row_all(
    row: dict[str, str],
    *,
    fitted: FittedOverheads | None = None,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
) -> dict[EngineMetric, tuple[float, float, float]]:
    """Every metric of one engine row with the shipped constants of its profile, each
    ``(value, low, high)`` (:func:`simulate_engine_row`, intervals as new forecasts get)."""
    from gpuplan.forecast.inference_step import engine_profile
    from gpuplan.forecast.model import arch_from

    fitted = fitted or load_overheads()
    engine = engine_profile(row["engine"]).name
    moe = arch_from(_catalog_or_default(catalog).model(row["model"])).is_moe
    params = fitted.params_for(engine, moe)
    sims = simulate_engine_row(
        row,
        time_scale=params.time_scale,
        overhead_per_layer_s=params.overhead_per_layer_s,
        fitted=fitted,
        catalog=catalog,
        perf_for=perf_for,
    )
    q = fitted.interval_quantiles("throughput_per_gpu", engine, moe)
    q_ttft = fitted.interval_quantiles("ttft", engine, moe)
    q_tpot = fitted.interval_quantiles("tpot", engine, moe)
    return {name: _with_interval(v3, name, q, q_ttft, q_tpot) for name, v3 in sims.items()}


def forecast_engine_row(
    row: dict[str, str],
    *,
    fitted: FittedOverheads | None = None,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
) -> tuple[float, float, float]:
    """Output tokens/s of the replica for a burst row: ``(value, low, high)``."""
    return forecast_engine_row_all(row, fitted=fitted, catalog=catalog, perf_for=perf_for)[
        "throughput"
    ]


def _q(r: np.ndarray) -> tuple[float, float]:
    a = (1 - INTERVAL_LEVEL) / 2
    if r.size == 0:
        return 0.0, 0.0
    return float(np.quantile(r, a)), float(np.quantile(r, 1 - a))


def fit_time_scale(log_ratio: np.ndarray) -> float:
    """A profile constant: ``exp(median(log(forecast at scale 1 / published)))`` of the
    fitting rows' throughput (robust to one odd row). Exact for bursts: every iteration
    scaled by ``s`` scales the duration by ``s``, so throughput becomes ``forecast / s``."""
    return float(np.exp(np.median(log_ratio))) if log_ratio.size else 1.0


#: Per-layer overhead values (s) an engine profile's fit chooses from. The TensorRT-LLM v0.9
#: tables fit 112 us per layer and pass (no CUDA graphs in its gptSessionBenchmark); engines
#: that capture decode in CUDA graphs, but schedule in Python every step, pay another.
OVERHEAD_GRID_S = (0.0, 20e-6, 40e-6, 60e-6, 80e-6, 112e-6)


class _EngineData:
    """The engine rows simulated at ``time_scale`` 1 for every per-layer overhead of
    :data:`OVERHEAD_GRID_S`, the basis of every fit (a burst scales exactly with the time
    scale, so these are all the simulations a fit needs)."""

    def __init__(
        self,
        rows: list[dict[str, str]],
        catalog: Catalog,
        perf_for: PerfFor | None,
        vendor_moe: float | None = None,
    ) -> None:
        from gpuplan.forecast.inference_fit import _vendor_moe_applies
        from gpuplan.forecast.inference_step import engine_profile
        from gpuplan.forecast.model import arch_from

        self.catalog, self.perf_for = catalog, perf_for
        #: the shipped vendor MoE factor (fitted on another source), which a MoE row of a
        #: vendor-kernel profile runs at, as its forecast does
        self.vendor_moe = (
            load_overheads().vendor_moe_time_scale if vendor_moe is None else vendor_moe
        )
        self.vendor: list[bool] = []
        self.shape = _shape(rows)
        self.rows: list[dict[str, str]] = []
        self.engine: list[str] = []
        self.model: list[str] = []
        self.moe: list[bool] = []
        self.base: list[dict[float, dict[EngineMetric, FloatArray]]] = []
        self.slopes: list[dict[float, dict[EngineMetric, float]]] = []
        self.n_requests: list[int] = []
        self.skipped: list[Skipped] = []
        for row in rows:
            rid = row.get("run_id", "?")
            try:
                engine = engine_profile(row["engine"]).name
                model = catalog.model(row["model"]).id
                # the MoE factor applies to engines whose experts run Triton fused_moe
                is_moe = arch_from(catalog.model(row["model"])).is_moe
                moe = is_moe and engine_profile(row["engine"]).pays_moe_factor
                vendor = is_moe and _vendor_moe_applies(engine)
                sims = {
                    o: simulate_engine_row(
                        row,
                        time_scale=1.0,
                        overhead_per_layer_s=o,
                        catalog=catalog,
                        perf_for=perf_for,
                        shape=self.shape,
                        frontend_s_per_request=0.0,
                    )
                    for o in OVERHEAD_GRID_S
                }
                probe = {
                    o: simulate_engine_row(
                        row,
                        time_scale=1.0,
                        overhead_per_layer_s=o,
                        catalog=catalog,
                        perf_for=perf_for,
                        shape=self.shape,
                        frontend_s_per_request=FRONTEND_PROBE_S,
                    )
                    for o in OVERHEAD_GRID_S
                }
                slopes = {o: _sensitivities(sims[o], probe[o]) for o in OVERHEAD_GRID_S}
                n_req = int(row_requests(row, self.shape)[0].size)
            except (GpuplanError, KeyError, ValueError) as exc:
                reason = exc.one_line() if isinstance(exc, GpuplanError) else f"bad field: {exc}"
                self.skipped.append({"run_id": rid, "reason": reason})
                continue
            self.rows.append(row)
            self.engine.append(engine)
            self.model.append(model)
            self.moe.append(bool(moe))
            self.vendor.append(bool(vendor))
            self.base.append(sims)
            self.slopes.append(slopes)
            self.n_requests.append(n_req)

    def published(self, i: int, name: str) -> float | None:
        col, scale = next((c, s) for c, s, n, _ in ENGINE_METRICS if n == name)
        v = _num(self.rows[i].get(col))
        return v * scale if v and v > 0 else None

    def scale(self, i: int, f: EngineFit) -> float:
        """The time scale row ``i`` runs at under the constants ``f`` (and the vendor MoE
        factor for a MoE row of a vendor-kernel profile)."""
        moe = float(f["moe_time_scale"]) if self.moe[i] else 1.0
        return float(f["time_scale"]) * moe * (self.vendor_moe if self.vendor[i] else 1.0)

    def log_ratios(self, idx: list[int], f: EngineFit) -> dict[EngineMetric, FloatArray]:
        """``log(forecast / published)`` per metric over rows ``idx`` under constants ``f``."""
        out: dict[EngineMetric, list[float]] = {}
        c = float(f.get("frontend_s_per_request", 0.0))
        for i in idx:
            s = self.scale(i, f)
            o = f["overhead_per_layer_s"]
            for name, v3 in self.base[i][o].items():
                pub = self.published(i, name)
                if pub is None or not math.isfinite(v3[VALUE]):
                    continue
                v = _at(name, float(v3[VALUE]), s, c, self.slopes[i][o].get(name, 0.0))
                out.setdefault(name, []).append(math.log(v / pub))
        return {k: np.array(v) for k, v in out.items()}

    def fit_frontend(self, idx: list[int], f: EngineFit) -> float:
        """:func:`_frontend_estimate` over the burst TTFT rows of ``idx`` at constants ``f``."""
        pub, fc, sl = [], [], []
        o = f["overhead_per_layer_s"]
        for i in idx:
            v3 = self.base[i][o].get("ttft_mean_burst")
            p = self.published(i, "ttft_mean_burst")
            if v3 is None or p is None or not math.isfinite(v3[VALUE]):
                continue
            pub.append(p)
            fc.append(float(v3[VALUE]) * self.scale(i, f))
            sl.append((self.n_requests[i] + 1) / 2.0)
        return _frontend_estimate(np.array(pub), np.array(fc), np.array(sl))

    def fit(self, idx: list[int]) -> EngineFit:
        """Constants fitted on rows ``idx`` from their burst throughput: for each per-layer
        overhead of :data:`OVERHEAD_GRID_S`, ``time_scale`` is the median log ratio over the
        dense models' rows (every model's when none is dense); the overhead kept is the one
        whose dense residuals have the least absolute sum (robust, like the median). Then
        ``moe_time_scale``, the median over the mixture-of-experts rows after those (1
        without one: an engine's MoE kernel against its dense GEMMs), and the 90% quantiles
        of the fitting rows' residuals (throughput; TTFT)."""
        dense = [i for i in idx if not self.moe[i]]
        moe = [i for i in idx if self.moe[i]]
        best: tuple[float, float, float] | None = None
        for o in OVERHEAD_GRID_S:
            one: EngineFit = {"time_scale": 1.0, "moe_time_scale": 1.0, "overhead_per_layer_s": o}
            lr_d = self.log_ratios(dense or idx, one).get("throughput", np.array([]))
            ts = fit_time_scale(lr_d)
            loss = float(np.abs(lr_d - math.log(ts)).sum()) if lr_d.size else 0.0
            if best is None or loss < best[0] - 1e-12:
                best = (loss, o, ts)
        assert best is not None
        _, o, ts = best
        f: EngineFit = {"time_scale": ts, "moe_time_scale": 1.0, "overhead_per_layer_s": o}
        lr_m = self.log_ratios(moe, f).get("throughput", np.array([]))
        f["moe_time_scale"] = fit_time_scale(lr_m)
        # the front end, then the time scales again with it (a burst's duration includes
        # the front end's queue), twice: each moves the other little
        for _ in range(2):
            f["frontend_s_per_request"] = self.fit_frontend(idx, f)
            for _ in range(3):
                lr_d = self.log_ratios(dense or idx, f).get("throughput", np.array([]))
                f["time_scale"] *= fit_time_scale(lr_d)
            for _ in range(3):
                lr_m = self.log_ratios(moe, f).get("throughput", np.array([]))
                f["moe_time_scale"] *= fit_time_scale(lr_m)
        thr = self.log_ratios(idx, f).get("throughput", np.array([]))
        return {**f, "rows": int(thr.size), "moe_rows": int(lr_m.size)}


#: front-end cost (s per request) of the one extra replay per row that measures how its
#: metrics respond to the front end (:func:`_sensitivities`)
FRONTEND_PROBE_S = 5e-3


def _sensitivities(
    base: dict[EngineMetric, FloatArray], probe: dict[EngineMetric, FloatArray]
) -> dict[EngineMetric, float]:
    """How each metric of a row moves per second of front-end cost per request, from its
    replays at 0 and :data:`FRONTEND_PROBE_S` (time scale 1): time metrics in s per s,
    throughput as its inverse (s per token per s)."""
    out: dict[EngineMetric, float] = {}
    for name, v0 in base.items():
        v1 = probe.get(name)
        if v1 is None or not (math.isfinite(v0[VALUE]) and math.isfinite(v1[VALUE])):
            continue
        if name == "throughput":
            out[name] = (1.0 / float(v1[VALUE]) - 1.0 / float(v0[VALUE])) / FRONTEND_PROBE_S
        else:
            out[name] = (float(v1[VALUE]) - float(v0[VALUE])) / FRONTEND_PROBE_S
    return out


def _at(name: str, v0: float, s: float, c: float, slope: float) -> float:
    """A metric at time scale ``s`` and front-end cost ``c`` from its replay at (1, 0):
    every engine time scales with ``s`` and the front end adds ``slope x c`` (linear in
    ``c``; exact at ``c = 0``): time ``s v0 + slope c``, throughput ``1 / (s / v0 + slope c)``.

    >>> round(_at("ttft_mean_burst", 0.4, 1.5, 0.005, 20.0), 12)
    0.7
    """
    if name == "throughput":
        return 1.0 / (s / v0 + slope * c)
    return s * v0 + slope * c


def _frontend_estimate(published_s: np.ndarray, forecast_s: np.ndarray, slope: np.ndarray) -> float:
    """Front-end cost per request from burst rows' mean TTFT: ``forecast`` is the replay
    without a front end (at the fitted time scale); a burst of ``N`` requests through a
    serial front end of ``c`` s each adds ``c (N + 1) / 2`` to the mean TTFT (request ``i``
    enters at ``(i + 1) c``), the ``slope`` :meth:`_EngineData.fit_frontend` passes; so
    ``c = median((published - forecast) / slope)``, at least 0 (the median is robust to the
    rows the GPU model misses for other reasons). The replay's own response to the front
    end is smaller (a later entry waits less for the GPU), so this is the front end's cost
    alone, not a fudge on the GPU queue.

    >>> round(_frontend_estimate(np.array([0.5, 0.6]), np.array([0.3, 0.4]), np.array([40.0, 40.0])), 12)
    0.005
    """
    ok = slope > 0
    if not ok.any():
        return 0.0
    c = (published_s[ok] - forecast_s[ok]) / slope[ok]
    return float(max(0.0, np.median(c)))


def _train_rows(data: _EngineData, i: int, scheme: str) -> tuple[list[int], str]:
    """The rows that fit the constants scoring row ``i``, and what they are."""
    from gpuplan.forecast.inference_step import MIN_ROWS_CALIBRATED

    eng, mod = data.engine[i], data.model[i]
    n = len(data.rows)
    if scheme == "leave-one-engine-out":
        return [j for j in range(n) if data.engine[j] != eng], "other engines' rows"
    own = [
        j
        for j in range(n)
        if data.engine[j] == eng and "throughput" in data.base[j][OVERHEAD_GRID_S[0]]
    ]
    if len(own) >= MIN_ROWS_CALIBRATED:
        return [j for j in own if data.model[j] != mod], f"{eng} rows of other models"
    return [j for j in range(n) if data.model[j] != mod], "every engine's rows of other models"


def validate_engines(
    data: str | Path | None = None,
    *,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
    scheme: str = "leave-one-model-out",
    vendor_moe: float | None = None,
) -> EngineValidation:
    """Held-out error of each engine profile on the published serving rows.

    ``leave-one-model-out`` (default): a profile with at least ``MIN_ROWS_CALIBRATED``
    burst rows of its own scores each row with the time scale fitted on its rows of the
    other models; a profile with fewer, with the pooled time scale of every engine's rows of
    the other models. ``leave-one-engine-out``: with the time scale of every other engine's
    rows (the transfer to an engine never seen). Interval quantiles come from the fitting
    rows' *held-out* residuals (each scored by the fold that held its own model out), as the
    shipped constants' do. Throughput, TTFT and TPOT are scored apart (``by_metric``).
    """
    from gpuplan.forecast.inference_step import MIN_ROWS_CALIBRATED, engine_profile

    if scheme not in ENGINE_SCHEMES:
        raise InputError(
            f"unknown scheme {scheme!r} for the engine rows",
            hint=f"use one of {', '.join(ENGINE_SCHEMES)}",
        )
    if catalog is None:
        from gpuplan.catalogs import get_catalog

        catalog = get_catalog()
    rows = load_engine_rows(data)
    d = _EngineData(rows, catalog, perf_for, vendor_moe)
    fits: dict[tuple[int, ...], EngineFit] = {}
    per_row: list[EngineRow] = []
    points: dict[tuple[str, str], list[tuple[float, tuple[float, float, float]]]] = {}
    # (row, metric, forecast at the calibration's value/slow/fast, published, rows that fitted it)
    scored: list[tuple[int, EngineMetric, np.ndarray, float, list[int]]] = []
    for i, row in enumerate(d.rows):
        train, basis = _train_rows(d, i, scheme)
        key = tuple(train)
        if key not in fits:
            fits[key] = d.fit(train)
        f = fits[key]
        sims = simulate_engine_row(
            row,
            time_scale=d.scale(i, f),
            overhead_per_layer_s=f["overhead_per_layer_s"],
            catalog=catalog,
            perf_for=perf_for,
            shape=d.shape,
            frontend_s_per_request=f["frontend_s_per_request"],
        )
        rec: EngineRow = {
            "run_id": row.get("run_id"),
            "engine": d.engine[i],
            "model": d.model[i],
            "gpu": row.get("gpu_type"),
            "tp": row.get("tp"),
            "kind": row_kind(row),
            "time_scale": d.scale(i, f),
            "overhead_per_layer_s": f["overhead_per_layer_s"],
            "frontend_s_per_request": f["frontend_s_per_request"],
            "fitted_on": f"{f['rows']} {basis}",
        }
        for name, v3 in sims.items():
            pub = d.published(i, name)
            if pub is not None:
                scored.append((i, name, v3, pub, train))
        per_row.append(rec)

    # The model-error quantiles of a row's interval are those of the *held-out* residuals
    # of the rows that fitted its constants, as the shipped constants' are
    # (fit_engine_constants): in-sample residuals of a fit are narrower than its error on
    # a model it has not seen (the jackknife+ of Barber et al. 2021, "Predictive inference
    # with the jackknife+", Ann. Statist. 49(1), with each training row's residual taken
    # from the fold that held its model out).
    held_res: dict[str, dict[int, float]] = {"throughput": {}, "ttft": {}}
    for i, name, v3, pub, _ in scored:
        kind = "throughput" if name == "throughput" else "ttft" if name.startswith("ttft") else None
        if kind is not None:
            held_res[kind][i] = math.log(float(v3[VALUE]) / pub)
    quantiles: dict[tuple[tuple[int, ...], str], tuple[float, float]] = {}

    def held_quantiles(train: list[int], kind: str) -> tuple[float, float]:
        key = (tuple(train), kind)
        if key not in quantiles:
            res = held_res[kind]
            quantiles[key] = _q(np.array([res[j] for j in train if j in res], dtype=float))
        return quantiles[key]

    for i, name, v3, pub, train in scored:
        rec = per_row[i]
        v, lo, hi = _with_interval(
            v3, name, held_quantiles(train, "throughput"), held_quantiles(train, "ttft")
        )
        points.setdefault((d.engine[i], name), []).append((pub, (v, lo, hi)))
        if name == "throughput":
            rec.update(
                {
                    "published": pub,
                    "forecast": v,
                    "interval": [lo, hi],
                    "error_pct": (v - pub) / pub * 100,
                }
            )
        else:
            rec[name] = {
                "published_s": pub,
                "forecast_s": v,
                "interval_s": [lo, hi],
                "error_pct": (v - pub) / pub * 100,
            }

    def sc(pts: list[tuple[float, tuple[float, float, float]]], total: int) -> Score:
        return score(
            np.array([p for p, _ in pts], dtype=float),
            np.array([f for _, f in pts], dtype=float).reshape(-1, 3),
            total,
        )

    skipped_ids = {s["run_id"] for s in d.skipped}
    profiles: dict[str, EngineProfile] = {}
    for engine in sorted(set(d.engine) | {engine_profile(r["engine"]).name for r in rows}):
        prof = engine_profile(engine)
        thr_pts = points.get((engine, "throughput"), [])
        n_thr = sum(
            1
            for r in rows
            if engine_profile(r["engine"]).name == engine
            and _num(r.get("out_tokens_per_s_total"))
            and (r.get("request_rate") or "").strip().lower() == "inf"
        )
        thr_score: Score = sc(thr_pts, n_thr) if thr_pts else {"rows": n_thr, "forecast": 0}
        latency = {
            name: sc(pts, len(pts))
            for (e, name), pts in sorted(points.items())
            if e == engine and name != "throughput"
        }
        ttft_tpot: dict[str, Score | None] = {}
        for what in ("ttft", "tpot"):
            pts = [
                p for (e, n), ps in points.items() if e == engine and n.startswith(what) for p in ps
            ]
            ttft_tpot[what] = sc(pts, len(pts)) if pts else None
        calibrated = prof.calibrated and n_thr >= MIN_ROWS_CALIBRATED
        profiles[engine] = {
            **thr_score,
            "latency": latency,
            "ttft": ttft_tpot["ttft"],
            "tpot": ttft_tpot["tpot"],
            "models": sorted({d.model[i] for i in range(len(d.rows)) if d.engine[i] == engine}),
            "rows_total": sum(1 for r in rows if engine_profile(r["engine"]).name == engine),
            "skipped": sum(
                1
                for r in rows
                if engine_profile(r["engine"]).name == engine and r.get("run_id") in skipped_ids
            ),
            "calibrated": bool(calibrated),
            "constants": prof.basis,
            "note": (
                "calibrated: time scale fitted on its own rows"
                if calibrated
                else f"{n_thr} throughput rows < {MIN_ROWS_CALIBRATED}: not claimed calibrated; "
                f"{prof.basis}, interval widened"
            ),
        }
    by_metric: dict[str, Score] = {}
    for _, _, name, _ in ENGINE_METRICS:
        if name == "throughput":
            continue
        pts = [p for (e, n), ps in points.items() if n == name for p in ps]
        if pts:
            by_metric[name] = sc(pts, len(pts))
    thr_all = [p for (e, n), ps in points.items() if n == "throughput" for p in ps]
    n_thr_all = sum(
        1
        for r in rows
        if _num(r.get("out_tokens_per_s_total"))
        and (r.get("request_rate") or "").strip().lower() == "inf"
    )
    return {
        "data": str(Path(data) if data else ENGINE_CSV_PATH.name),
        "scheme": scheme,
        "convention": (
            "burst rows: output tokens/s of the whole replica for the row's requests sent at "
            "once (vLLM benchmark_serving / sglang.bench_serving --request-rate inf); online "
            "rows: median TTFT and TPOT at the row's Poisson rate; rows with mean lengths only "
            "replay the ShareGPT shape of " + SHAREGPT_SHAPE_ROW + " rescaled to them"
        ),
        "profiles": profiles,
        "by_metric": by_metric,
        "overall": sc(thr_all, n_thr_all) if thr_all else {"rows": n_thr_all, "forecast": 0},
        "rows": per_row,
        "skipped": d.skipped,
    }


def _engine_is(name: str, r: EngineRow) -> bool:
    return bool(r["engine"] == name)


def fit_engine_constants(
    data: str | Path | None = None,
    *,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
    vendor_moe: float | None = None,
    loeo: EngineValidation | None = None,
) -> dict[str, EngineConstants]:
    """The shipped engine constants: each calibrated profile's time scale fitted on all its
    rows, and the ``pooled`` one on every engine's rows; interval quantiles from the
    held-out (leave-one-model-out) residuals of :func:`validate_engines`, and the pooled
    profile's transfer quantiles (what a profile with no rows of its own gets) from its
    leave-one-engine-out residuals. ``vendor_moe``: the vendor MoE factor a MoE row of a
    vendor-kernel profile runs at (default: the shipped one)."""
    from gpuplan.forecast.inference_step import ENGINES, MIN_ROWS_CALIBRATED

    if catalog is None:
        from gpuplan.catalogs import get_catalog

        catalog = get_catalog()
    rows = load_engine_rows(data)
    d = _EngineData(rows, catalog, perf_for, vendor_moe)
    held = validate_engines(data, catalog=catalog, perf_for=perf_for, vendor_moe=vendor_moe)
    # the transfer to an engine never seen, measured: each engine's rows scored with the
    # constants of every other engine's rows (``loeo``: that scoring, done already)
    if loeo is None:
        loeo = validate_engines(
            data,
            catalog=catalog,
            perf_for=perf_for,
            scheme="leave-one-engine-out",
            vendor_moe=vendor_moe,
        )

    def held_q(
        select: Callable[[EngineRow], bool], scored: EngineValidation = held
    ) -> dict[str, list[float]]:
        thr = [
            math.log(r["forecast"] / r["published"])
            for r in scored["rows"]
            if select(r) and "forecast" in r
        ]
        # a row has at most one TTFT metric (burst or online), so the order of the keys
        # checked does not matter
        ttft = [
            math.log(r[k]["forecast_s"] / r[k]["published_s"])
            for r in scored["rows"]
            if select(r)
            for k in _TTFT_METRICS
            if k in r
        ]
        return {
            "throughput_per_gpu": list(_q(np.array(thr))),
            "ttft": list(_q(np.array(ttft))),
        }

    out: dict[str, EngineConstants] = {}
    all_idx = list(range(len(d.rows)))
    f = d.fit(all_idx)
    out["pooled"] = {
        "time_scale": f["time_scale"],
        "moe_time_scale": f["moe_time_scale"],
        "overhead_per_layer_s": f["overhead_per_layer_s"],
        "frontend_s_per_request": f["frontend_s_per_request"],
        "rows": f["rows"],
        "basis": f"pooled: fitted on {f['rows']} burst rows of every engine",
        "log_residual_quantiles": held_q(lambda r: True),
        "transfer_log_residual_quantiles": held_q(lambda r: True, loeo),
    }
    for name, prof in ENGINES.items():
        if not prof.calibrated or name == "trtllm@0.9":
            continue
        idx = [i for i in all_idx if d.engine[i] == name]
        f = d.fit(idx)
        if f["rows"] < MIN_ROWS_CALIBRATED:
            continue
        out[name] = {
            "time_scale": f["time_scale"],
            "moe_time_scale": f["moe_time_scale"],
            "overhead_per_layer_s": f["overhead_per_layer_s"],
            "frontend_s_per_request": f["frontend_s_per_request"],
            "rows": f["rows"],
            "basis": f"calibrated: fitted on {f['rows']} {name} burst rows",
            "log_residual_quantiles": held_q(partial(_engine_is, name)),
        }
    return out


#: the burst rows' name among the sources of the pooled profiles' transfer error (each
#: engine's rows scored with the constants of the others', leave one engine out)
ENGINE_SOURCE = "engine-bursts"


def _log_residuals(points: Iterable[LatencyPoint]) -> list[float]:
    return [math.log(p["forecast_s"] / p["published_s"]) for p in points]


def fit_source_transfer(
    fitted: FittedOverheads,
    *,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
    engine_loeo: EngineValidation | None = None,
) -> SourceTransfer:
    """The transfer error of the pooled constants (``fitted``) measured on every published
    serving source that did not fit them: the burst rows scored leave one engine out, and
    the InferenceX aggregated sweeps and disaggregated runs (rows of the profiles that run
    on the pooled constants). Quantiles of ``log(forecast / published)`` throughput and
    median TPOT over every source, and over every source but each one: the interval a row
    of that source is scored with does not use its own residuals (leave one source out).

    The two InferenceX sources come from one project and one client (benchmark_serving),
    but different runs, fleets and serving modes: holding one out is weaker than holding
    out an independent source, and the note says so."""
    from gpuplan.forecast.inference_step import engine_profile

    if engine_loeo is None:
        engine_loeo = validate_engines(
            catalog=catalog,
            perf_for=perf_for,
            scheme="leave-one-engine-out",
            vendor_moe=fitted.vendor_moe_time_scale,
        )
    eng_rows = engine_loeo["rows"]
    res: dict[str, dict[str, list[float]]] = {
        ENGINE_SOURCE: {
            "throughput_per_gpu": [
                math.log(r["forecast"] / r["published"]) for r in eng_rows if "forecast" in r
            ],
            "tpot": _log_residuals(
                [r["tpot_median_burst"] for r in eng_rows if "tpot_median_burst" in r]
                + [r["tpot_median_online"] for r in eng_rows if "tpot_median_online" in r]
            ),
        }
    }

    def pooled(engine: str) -> bool:
        prof = engine_profile(engine)
        return prof.fitted_on == "pooled" and not prof.calibrated

    scored: list[tuple[str, Sequence[SweepRow] | Sequence[DisaggRow]]] = [
        (SWEEP_SOURCE, validate_sweeps(catalog=catalog, perf_for=perf_for, fitted=fitted)["rows"]),
        (
            DISAGG_SOURCE,
            validate_disaggregated(catalog=catalog, perf_for=perf_for, fitted=fitted)["rows"],
        ),
    ]
    for name, rows in scored:
        mine = [r["metrics"] for r in rows if pooled(r["engine"])]
        res[name] = {
            "throughput_per_gpu": _log_residuals(
                m["throughput"] for m in mine if "throughput" in m
            ),
            "tpot": _log_residuals(m["tpot_median"] for m in mine if "tpot_median" in m),
        }

    def quantiles(keep: Callable[[str], bool]) -> dict[str, list[float]]:
        return {
            metric: list(
                _q(np.array([x for src, r in res.items() if keep(src) for x in r[metric]]))
            )
            for metric in ("throughput_per_gpu", "tpot")
        }

    return {
        "sources": {src: {m: len(v) for m, v in r.items()} for src, r in res.items()},
        "log_residual_quantiles": quantiles(lambda src: True),
        "leave_one_source_out": {out: quantiles(partial(ne, out)) for out in res},
        "basis": (
            "5%/95% quantiles of log(forecast / published) of the pooled constants on the "
            f"sources that did not fit them: {ENGINE_SOURCE} (each engine scored with the "
            f"other engines' constants), {SWEEP_SOURCE} and {DISAGG_SOURCE} (InferenceX, "
            "one project and client: leaving one out is weaker than an independent source)"
        ),
    }


def refit(
    data: str | Path | None = None,
    *,
    artifact: JSONDict | str | None = None,
    perf_for: PerfFor | None = None,
    write: bool = False,
) -> dict[str, object]:
    """Fit the shipped constants on every row; record the held-out scores that describe them.

    The interval quantiles stored for new forecasts are those of the *held-out*
    (leave-one-model-out) residuals, per metric.
    """
    rows = load_rows(data)
    cases, _, skipped = prepare(rows, artifact=artifact, perf_for=perf_for)
    if cases is None:
        raise InputError("no usable row in the published table")
    params = fit_params(cases)
    held: dict[str, Score] = {}
    quantiles: dict[str, list[float]] = {}
    for scheme in SCHEMES:
        pred, _ = cross_validate(cases, scheme)
        held[scheme] = score(cases.published, pred, len(rows))
        if scheme == "leave-one-model-out":
            r = np.log(pred[:, VALUE] / cases.published)
            a = (1 - INTERVAL_LEVEL) / 2
            for metric in METRICS:
                sel = cases.metric == metric
                quantiles[metric] = [
                    float(np.quantile(r[sel], a)),
                    float(np.quantile(r[sel], 1 - a)),
                ]
            quantiles["all"] = [float(np.quantile(r, a)), float(np.quantile(r, 1 - a))]
    # the vendor MoE factor depends on the framework constants alone (its profile,
    # trtllm@0.17, transfers them), and the engine fits run MoE rows of vendor-kernel
    # profiles at it
    vendor = fit_vendor_moe(
        perf_for=perf_for,
        fitted=FittedOverheads(params, {k: (v[0], v[1]) for k, v in quantiles.items()}, {}),
    )
    k_vendor = vendor["time_scale"]
    # the burst rows scored leave one engine out: the pooled transfer quantiles and the
    # source transfer both read it
    loeo = validate_engines(perf_for=perf_for, scheme="leave-one-engine-out", vendor_moe=k_vendor)
    doc: dict[str, object] = {
        "version": 1,
        "what": "framework constants of the inference forecast (gpuplan.forecast.inference_fit)",
        "fitted_on": f"{len(cases)} rows of {CSV_PATH.name} (TensorRT-LLM v0.9.0 performance tables)",
        "skipped": skipped,
        "params": params.as_dict(),
        "interval": {
            "level": INTERVAL_LEVEL,
            "log_residual_quantiles": quantiles,
            "from": "leave-one-model-out held-out residuals, log(forecast / published)",
        },
        "held_out": held,
        "engines": validate_engines(perf_for=perf_for, vendor_moe=k_vendor).get("profiles", {}),
        "engine_constants": fit_engine_constants(perf_for=perf_for, vendor_moe=k_vendor, loeo=loeo),
        "vendor_moe": vendor,
        "regenerate": "python -m gpuplan.forecast.validation_inference --write",
    }
    # the pooled constants' transfer error on the published sources they did not fit, with
    # the constants just fitted
    consts = cast(dict[str, EngineConstants], doc["engine_constants"])
    if "pooled" in consts:
        consts["pooled"]["source_transfer"] = fit_source_transfer(
            overheads_from(doc), perf_for=perf_for, engine_loeo=loeo
        )
    if write:
        write_overheads(doc)
    return doc


# ---------------------------------------------------------------------------------------------
# Closed-loop concurrency sweeps (InferenceX): scored with the shipped constants, fitted on none
# ---------------------------------------------------------------------------------------------
SWEEP_CSV_PATH = DATA_DIR / "inference_sweep_runs.csv"
#: the sweeps' name among the sources of the pooled profiles' transfer error
SWEEP_SOURCE = "inferencex-sweeps"
#: seed of the random request lengths a sweep row replays (the benchmark's own draw is not
#: published; its distribution is: uniform integers in [ratio * L, L])
SWEEP_SEED = 0
SweepMetric: TypeAlias = Literal["throughput", "tpot_median", "ttft_median", "tpot_p99", "ttft_p99"]
#: (column, unit scale, metric) of a sweep row
SWEEP_METRICS: tuple[tuple[str, float, SweepMetric], ...] = (
    ("out_tokens_per_s_total", 1.0, "throughput"),
    ("tpot_median_ms", 1e-3, "tpot_median"),
    ("ttft_median_ms", 1e-3, "ttft_median"),
    ("tpot_p99_ms", 1e-3, "tpot_p99"),
    ("ttft_p99_ms", 1e-3, "ttft_p99"),
)


def sweep_requests(row: dict[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """``(prompt lengths, answer lengths)`` of a sweep row's ``num_requests`` requests:
    ``benchmark_serving --dataset-name random --random-range-ratio r --ignore-eos`` draws
    each length uniformly from the integers in ``[int(r * L), L]`` (InferenceX's copy of
    vLLM's ``sample_random_requests``), so every answer runs to its drawn length.

    >>> lin, lout = sweep_requests({"input_len": "1000", "output_len": "100",
    ...     "random_range_ratio": "0.8", "num_requests": "50"})
    >>> int(lin.min()) >= 800 and int(lin.max()) <= 1000 and lout.size == 50
    True
    """
    ratio = float(_num(row.get("random_range_ratio")) or 1.0)
    n = int(_num(row.get("num_requests")) or 0)
    isl, osl = int(_num(row.get("input_len")) or 0), int(_num(row.get("output_len")) or 0)
    if n <= 0 or isl <= 0 or osl <= 0:
        raise InputError(
            f"{row.get('run_id')}: a sweep row needs num_requests, input_len and output_len",
            hint="give the benchmark's --num-prompts and --random-input-len/--random-output-len",
        )
    from gpuplan.forecast.serving import LengthDist

    rng = np.random.default_rng(SWEEP_SEED)
    lin = LengthDist.from_options(isl, min_ratio=ratio).sample(rng, n)
    lout = LengthDist.from_options(osl, min_ratio=ratio).sample(rng, n)
    return lin, lout


def _profile_overheads(
    row: dict[str, str], fitted: FittedOverheads, catalog: Catalog
) -> tuple[str, FittedOverheads]:
    """The row's engine profile and its shipped constants alone (the held-out rows are
    scored with the profile's own parameters, model-error quantiles kept)."""
    from gpuplan.forecast.inference_step import engine_profile
    from gpuplan.forecast.model import arch_from

    engine = engine_profile(row["engine"]).name
    moe = arch_from(catalog.model(row["model"])).is_moe
    return engine, FittedOverheads(fitted.params_for(engine, moe), fitted.quantiles, fitted.record)


def row_speculation(row: dict[str, str], acceptance: float | None = None) -> Speculation | None:
    """A row's speculative decoding: its ``spec_draft_tokens`` with ``acceptance`` (tokens
    per step), else the default acceptance of that many draft tokens; None without."""
    from gpuplan.forecast.speculative import speculation

    k = int(_num(row.get("spec_draft_tokens")) or 0)
    return speculation(k, acceptance) if k else None


def simulate_sweep_row(
    row: dict[str, str],
    *,
    fitted: FittedOverheads | None = None,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
    acceptance: float | None = None,
    scenarios: tuple[int, ...] = (VALUE, SLOW, FAST),
) -> dict[SweepMetric, FloatArray]:
    """One closed-loop sweep row replayed with its profile's shipped constants: the client's
    ``max_concurrency`` slots send the row's requests (:func:`sweep_requests`) to one replica
    (:func:`~gpuplan.forecast.serving.simulate_requests` with ``concurrency``). Returns
    ``[value, slow, fast]`` per metric: output tokens/s of the replica, median and p99 TPOT
    and TTFT (s), as ``benchmark_serving`` computes them. Data-parallel attention
    (``dp_attention`` 1) runs as the wide-EP layout (tp 1, ep N). A row with
    ``spec_draft_tokens`` runs speculative decoding (:func:`row_speculation`, with
    ``acceptance`` tokens per step when given). ``scenarios``: those simulated (the others
    read NaN)."""
    from gpuplan.forecast.serving import simulate_requests

    catalog = _catalog_or_default(catalog)
    engine, own = _profile_overheads(row, fitted or load_overheads(), catalog)
    run = dict(row)
    if int(_num(row.get("dp_attention")) or 0):
        run["tp"] = "1"
    lin, lout = sweep_requests(row)
    rep = _row_replica(
        run, engine, own, catalog, perf_for, lin, lout, row_speculation(row, acceptance)
    )
    # the scheduler takes requests every recv-th turn, and a turn runs `steps` decode passes
    recv = int(_num(row.get("scheduler_recv_interval")) or 1)
    steps = int(_num(row.get("decode_steps_per_schedule")) or 1)
    if recv * steps > 1:
        rep = replace(rep, recv_interval=recv * steps)
    conc = int(_num(row.get("max_concurrency")) or 0) or None
    out: dict[SweepMetric, list[float]] = {}
    for scn in (VALUE, SLOW, FAST):
        if scn not in scenarios:
            for _, _, name in SWEEP_METRICS:
                out.setdefault(name, []).append(math.nan)
            continue
        sim = simulate_requests(
            rep,
            np.zeros(lin.size),
            lin,
            lout,
            max_queue=lin.size + 1,
            scenario=scn,
            concurrency=conc,
        )
        ok = sim.tpot_s.size and sim.ttft_s.size
        vals: dict[SweepMetric, float] = {
            "throughput": sim.output_tokens / sim.duration_s if sim.duration_s > 0 else math.nan,
            "tpot_median": float(np.median(sim.tpot_s)) if ok else math.nan,
            "ttft_median": float(np.median(sim.ttft_s)) if ok else math.nan,
            "tpot_p99": float(np.percentile(sim.tpot_s, 99)) if ok else math.nan,
            "ttft_p99": float(np.percentile(sim.ttft_s, 99)) if ok else math.nan,
        }
        for k, v in vals.items():
            out.setdefault(k, []).append(v)
    return {k: np.array(v) for k, v in out.items()}


_Point: TypeAlias = tuple[float, tuple[float, float, float]]
_M = TypeVar("_M", bound=str)


def _score_points(p: list[_Point]) -> Score:
    return score(
        np.array([a for a, _ in p], dtype=float),
        np.array([f for _, f in p], dtype=float).reshape(-1, 3),
        len(p),
    )


def _scores_by(groups: dict[str, list[_Point]]) -> dict[str, Score]:
    """A score per group, the groups sorted by name."""
    return {k: _score_points(v) for k, v in sorted(groups.items())}


def _throughput_point(metrics: dict[str, LatencyPoint]) -> _Point | None:
    """A scored row's throughput as ``(published, (forecast, low, high))``, if it has one."""
    point = metrics.get("throughput")
    if point is None:
        return None
    lo, hi = point["interval_s"]
    return point["published_s"], (point["forecast_s"], lo, hi)


def _sources(rows: list[dict[str, str]]) -> str:
    """The distinct ``source`` fields of a table's rows, joined."""
    return "; ".join(sorted({r.get("source", "") for r in rows} - {""}))


class _HeldOutScores:
    """Published against forecast of rows scored with the shipped constants (intervals as
    a new forecast of the row's profile gets them, or, with ``source``, those measured
    without this source: :meth:`FittedOverheads.interval_quantiles`), by metric and by GPU
    and profile."""

    def __init__(self, fitted: FittedOverheads, source: str | None = None) -> None:
        self.fitted = fitted
        self.source = source
        self.pts: dict[str, list[_Point]] = {}
        self.groups: dict[str, dict[str, list[_Point]]] = {}

    def add(
        self,
        row: dict[str, str],
        sims: Mapping[_M, FloatArray],
        columns: Sequence[tuple[str, float, _M]],
        engine: str,
        gpu: str,
        moe: bool = False,
    ) -> dict[str, LatencyPoint]:
        """Score the row's published ``columns`` (column, unit, metric) against ``sims``
        (``[value, slow, fast]`` per metric); returns the row's points."""
        q_thr, q_ttft, q_tpot = (
            self.fitted.interval_quantiles(m, engine, moe, held_out_source=self.source)
            for m in ("throughput_per_gpu", "ttft", "tpot")
        )
        metrics: dict[str, LatencyPoint] = {}
        for col, unit, name in columns:
            pub = _num(row.get(col))
            if not pub or pub <= 0:
                continue
            pub *= unit
            v, lo, hi = _with_interval(sims[name], name, q_thr, q_ttft, q_tpot)
            if not math.isfinite(v):
                continue
            metrics[name] = {
                "published_s": pub,
                "forecast_s": v,
                "interval_s": [lo, hi],
                "error_pct": (v - pub) / pub * 100,
            }
            self.pts.setdefault(name, []).append((pub, (v, lo, hi)))
            group = self.groups.setdefault(f"{gpu} {engine}", {})
            group.setdefault(name, []).append((pub, (v, lo, hi)))
        return metrics

    def score_rows(
        self,
        rows: list[dict[str, str]],
        forecast: Callable[[dict[str, str]], Mapping[_M, FloatArray]],
        columns: Sequence[tuple[str, float, _M]],
        catalog: Catalog,
    ) -> tuple[list[tuple[dict[str, str], str, str, dict[str, LatencyPoint]]], list[Skipped]]:
        """Forecast and score every row: ``(row, engine, gpu, its points)`` for the rows
        forecast, and the rows that could not be, with the one-line reason."""
        from gpuplan.forecast.inference_step import engine_profile
        from gpuplan.forecast.model import arch_from

        done: list[tuple[dict[str, str], str, str, dict[str, LatencyPoint]]] = []
        skipped: list[Skipped] = []
        for row in rows:
            try:
                engine = engine_profile(row["engine"]).name
                sims = forecast(row)
                gpu = catalog.gpu(row["gpu_type"]).id
                moe = arch_from(catalog.model(row["model"])).is_moe
            except (GpuplanError, KeyError, ValueError) as exc:
                reason = exc.one_line() if isinstance(exc, GpuplanError) else f"bad field: {exc}"
                skipped.append({"run_id": row.get("run_id", "?"), "reason": reason})
                continue
            done.append((row, engine, gpu, self.add(row, sims, columns, engine, gpu, moe)))
        return done, skipped

    def by_metric(self) -> dict[str, Score]:
        return {k: _score_points(v) for k, v in self.pts.items()}

    def by_gpu_engine(self) -> dict[str, dict[str, Score]]:
        return {
            g: {k: _score_points(v) for k, v in m.items()} for g, m in sorted(self.groups.items())
        }


class SweepRow(TypedDict):
    """One sweep row of :func:`validate_sweeps`: published, forecast, interval, error per
    metric (throughput in output tokens/s of the replica, latencies in s)."""

    run_id: str
    engine: str
    gpu: str
    precision: str
    tp: int
    ep: int
    concurrency: int
    input_len: int
    output_len: int
    metrics: dict[str, LatencyPoint]


class SweepValidation(TypedDict):
    """:func:`validate_sweeps`: the sweep rows scored with the shipped constants."""

    data: str
    source: str
    convention: str
    fitted_on: str
    by_metric: dict[str, Score]
    by_gpu_engine: dict[str, dict[str, Score]]
    rows: list[SweepRow]
    skipped: list[Skipped]


def _score_sweep_rows(
    rows: list[dict[str, str]],
    shipped: bool,
    catalog: Catalog,
    fitted: FittedOverheads,
    perf_for: PerfFor | None,
) -> tuple[
    _HeldOutScores,
    list[tuple[dict[str, str], str, str, dict[str, LatencyPoint]]],
    list[Skipped],
]:
    """Replay and score closed-loop rows (:func:`simulate_sweep_row`); the ``shipped`` rows
    (InferenceX's) with intervals measured without their source."""
    held = _HeldOutScores(fitted, SWEEP_SOURCE if shipped else None)
    done, skipped = held.score_rows(
        rows,
        partial(simulate_sweep_row, fitted=fitted, catalog=catalog, perf_for=perf_for),
        SWEEP_METRICS,
        catalog,
    )
    return held, done, skipped


def _sweep_row(
    row: dict[str, str], engine: str, gpu: str, metrics: dict[str, LatencyPoint]
) -> SweepRow:
    """A scored sweep row: its configuration and its points."""
    return {
        "run_id": row.get("run_id", "?"),
        "engine": engine,
        "gpu": gpu,
        "precision": row.get("precision") or "",
        "tp": int(_num(row.get("tp")) or 1),
        "ep": int(_num(row.get("ep")) or 1),
        "concurrency": int(_num(row.get("max_concurrency")) or 0),
        "input_len": int(_num(row.get("input_len")) or 0),
        "output_len": int(_num(row.get("output_len")) or 0),
        "metrics": metrics,
    }


def load_sweep_rows(path: str | Path | None = None) -> list[dict[str, str]]:
    """Rows of the closed-loop concurrency sweeps (``inference_sweep_runs.csv``)."""
    return _read_rows(path, SWEEP_CSV_PATH)


def validate_sweeps(
    data: str | Path | None = None,
    *,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
    fitted: FittedOverheads | None = None,
) -> SweepValidation:
    """Error of the shipped serving forecast on published closed-loop concurrency sweeps.

    Every row is held out by source: no constant is fitted on these rows (the engine
    profiles they name are pooled fallbacks). Each row is replayed by
    :func:`simulate_sweep_row`; intervals are the calibration's slow/fast ends widened by
    the profile's model-error quantiles, for the pooled profiles those measured on the
    other sources (leave one source out, :func:`fit_source_transfer`).
    Scored apart: throughput, median and p99 TPOT and TTFT, and by GPU and engine.
    """
    catalog = _catalog_or_default(catalog)
    fitted = fitted or load_overheads()
    rows = load_sweep_rows(data)
    held, done, skipped = _score_sweep_rows(rows, data is None, catalog, fitted, perf_for)
    per_row = [_sweep_row(row, engine, gpu, metrics) for row, engine, gpu, metrics in done]

    return {
        "data": str(Path(data) if data else SWEEP_CSV_PATH.name),
        "source": _sources(rows),
        "convention": (
            "closed loop: benchmark_serving --dataset-name random --random-range-ratio r "
            "--ignore-eos --request-rate inf --max-concurrency C --num-prompts 10*C; "
            "throughput = output tokens / benchmark duration, TPOT = (e2e - TTFT) / "
            "(output - 1) per request, TTFT from the client's send"
        ),
        "fitted_on": (
            "nothing: every constant comes from other sources (held out by source); "
            "the pooled profiles' intervals leave this source out"
        ),
        "by_metric": held.by_metric(),
        "by_gpu_engine": held.by_gpu_engine(),
        "rows": per_row,
        "skipped": skipped,
    }


# ---------------------------------------------------------------------------------------------
# Speculative decoding (InferenceX MTP runs): fitted on none, acceptance not published
# ---------------------------------------------------------------------------------------------
SPEC_CSV_PATH = DATA_DIR / "inference_spec_runs.csv"


class SpecRow(SweepRow):
    """One MTP row of :func:`validate_speculative`: the sweep row's scores at the default
    acceptance, and the acceptance length at which the forecast meets its throughput."""

    draft_tokens: int
    default_acceptance: float
    #: tokens per step that reproduce the published throughput (None: outside [1, k + 1],
    #: then ``implied_bound`` says which end)
    implied_acceptance: float | None
    implied_bound: str | None


class SpecValidation(SweepValidation):
    """:func:`validate_speculative`: the MTP rows at the default acceptance, and the implied
    acceptance lengths by engine profile and draft tokens."""

    rows: list[SpecRow]  # type: ignore[misc]
    implied_acceptance: dict[str, JSONDict]
    #: throughput error of each row at the median acceptance its engine profile and draft
    #: length imply on the other GPUs, by profile and draft length and over all
    held_out_gpu_at_implied_acceptance: dict[str, Score]
    note: str


def load_spec_rows(path: str | Path | None = None) -> list[dict[str, str]]:
    """Rows of the speculative-decoding runs (``inference_spec_runs.csv``)."""
    return _read_rows(path, SPEC_CSV_PATH)


class _Replay(TypedDict):
    """What a row's replay is run with (:func:`simulate_sweep_row`)."""

    fitted: FittedOverheads
    catalog: Catalog
    perf_for: PerfFor | None


def _replay_throughput(row: dict[str, str], tau: float, kw: _Replay) -> float:
    """The replayed row's output tokens/s (calibrated value) at ``tau`` tokens per step."""
    sims = simulate_sweep_row(row, acceptance=tau, scenarios=(VALUE,), **kw)
    return float(sims["throughput"][VALUE])


def implied_acceptance(
    row: dict[str, str], tau0: float, thr0: float, kw: _Replay
) -> tuple[float | None, str | None]:
    """The acceptance length (tokens per step) at which the replayed row's throughput
    equals the published one, given its throughput ``thr0`` at ``tau0``: one more replay at
    the end of ``[1, k + 1]`` on the published side, then linear interpolation of 1 /
    throughput in 1 / tau (exact for decode-only steps, whose per-token time is the step's
    over ``tau``). ``(None, "below 1")`` or ``(None, "above k+1")`` when no acceptance
    reaches it."""
    k = int(_num(row.get("spec_draft_tokens")) or 0)
    pub = _num(row.get("out_tokens_per_s_total"))
    if not k or not pub or not thr0 > 0:
        return None, None
    end = k + 1.0 if pub > thr0 else 1.0
    thr1 = _replay_throughput(row, end, kw)
    if (pub > thr1) if end > tau0 else (pub < thr1):
        return None, f"above {k + 1}" if end > tau0 else "below 1"
    y0, y1, yp = 1.0 / thr0, 1.0 / thr1, 1.0 / pub
    if abs(y1 - y0) < 1e-15:
        return tau0, None
    x = 1.0 / tau0 + (yp - y0) * (1.0 / end - 1.0 / tau0) / (y1 - y0)
    return float(min(max(1.0 / x, 1.0), k + 1.0)), None


def validate_speculative(
    data: str | Path | None = None,
    *,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
    fitted: FittedOverheads | None = None,
) -> SpecValidation:
    """Error of the shipped forecast with speculative decoding on InferenceX's MTP runs.

    Every row is replayed as a sweep row (:func:`simulate_sweep_row`) with its launch
    script's draft tokens and the *default* acceptance (:func:`~gpuplan.forecast.
    speculative.default_acceptance_length`, from DeepSeek's and Nebius's published MTP
    acceptance on real text). The runs' prompts are random tokens, on which InferenceX
    says draft acceptance is low and not representative, and their acceptance is not
    published: the errors at the default measure that gap as much as the step's physics.
    So each row also gets the acceptance length that reproduces its throughput
    (:func:`implied_acceptance`), summarised by engine profile and draft tokens: the same
    engine and draft length should imply one acceptance on every GPU if the verification
    and draft passes are priced right (acceptance depends on the model, the prompts and
    the draft head, not on the hardware). Fitted on nothing.
    """
    catalog = _catalog_or_default(catalog)
    fitted = fitted or load_overheads()
    rows = load_spec_rows(data)
    held, done, skipped = _score_sweep_rows(rows, data is None, catalog, fitted, perf_for)
    from gpuplan.forecast.speculative import default_acceptance_length

    kw: _Replay = {"fitted": fitted, "catalog": catalog, "perf_for": perf_for}
    per_row: list[SpecRow] = []
    implied: dict[str, list[tuple[str, float | None, str | None]]] = {}
    for row, engine, gpu, metrics in done:
        k = int(_num(row.get("spec_draft_tokens")) or 0)
        point = metrics.get("throughput")
        tau, bound = implied_acceptance(
            row, default_acceptance_length(k)[0], point["forecast_s"] if point else 0.0, kw
        )
        implied.setdefault(f"{engine} k={k}", []).append((gpu, tau, bound))
        per_row.append(
            {
                **_sweep_row(row, engine, gpu, metrics),
                "draft_tokens": k,
                "default_acceptance": default_acceptance_length(k)[0],
                "implied_acceptance": tau,
                "implied_bound": bound,
            }
        )
    summary: dict[str, JSONDict] = {}
    for key, vals in sorted(implied.items()):
        taus = np.array([t for _, t, _ in vals if t is not None], dtype=float)
        by_gpu: dict[str, list[float]] = {}
        for g, t, _ in vals:
            if t is not None:
                by_gpu.setdefault(g, []).append(t)
        summary[key] = {
            "rows": len(vals),
            "solved": int(taus.size),
            "median": float(np.median(taus)) if taus.size else None,
            "p10": float(np.percentile(taus, 10)) if taus.size else None,
            "p90": float(np.percentile(taus, 90)) if taus.size else None,
            "by_gpu_median": {g: float(np.median(v)) for g, v in sorted(by_gpu.items())},
            "unsolved": [f"{g}: {b}" for g, t, b in vals if t is None],
        }
    # the step's physics across GPUs: each row at the acceptance its engine and draft length
    # imply on the *other* GPUs (acceptance is the model's, the prompts' and the draft
    # head's, not the hardware's)
    logo: dict[str, list[_Point]] = {}
    for (row, engine, gpu, _), r in zip(done, per_row, strict=True):
        key = f"{engine} k={r['draft_tokens']}"
        others = [t for g, t, _ in implied[key] if g != gpu and t is not None]
        pub = _num(row.get("out_tokens_per_s_total"))
        if not others or not pub:
            continue
        at = _replay_throughput(row, float(np.median(others)), kw)
        logo.setdefault(key, []).append((pub, (at, at, at)))
    logo_scores = {k: _score_points(v) for k, v in sorted(logo.items())}
    every = [p for v in logo.values() for p in v]
    if every:
        logo_scores["all"] = _score_points(every)
    return {
        "data": str(Path(data) if data else SPEC_CSV_PATH.name),
        "source": _sources(rows),
        "convention": (
            "closed loop as the sweeps (benchmark_serving, random prompts with the chat "
            "template, --ignore-eos); MTP draft tokens of the launch scripts; forecast at "
            "the default acceptance length; implied acceptance: the tokens per step at which "
            "the forecast's throughput equals the published one"
        ),
        "fitted_on": "nothing (the default acceptance comes from other sources)",
        "by_metric": held.by_metric(),
        "by_gpu_engine": held.by_gpu_engine(),
        "rows": per_row,
        "skipped": skipped,
        "implied_acceptance": summary,
        "held_out_gpu_at_implied_acceptance": logo_scores,
        "note": (
            "the runs' prompts are random tokens, on which InferenceX says draft acceptance "
            "is low and not representative, and their acceptance length is not published: "
            "the default acceptance (real text) over-predicts them"
        ),
    }


# ---------------------------------------------------------------------------------------------
# Disaggregated prefill/decode fleets (InferenceX, NVIDIA Dynamo and SGLang PD): fitted on none
# ---------------------------------------------------------------------------------------------
DISAGG_CSV_PATH = DATA_DIR / "inference_disagg_runs.csv"
DisaggMetric: TypeAlias = Literal["throughput", "tpot_median", "ttft_median"]
#: (column, unit scale, metric) of a disaggregated row
DISAGG_METRICS: tuple[tuple[str, float, DisaggMetric], ...] = (
    ("out_tokens_per_s_total", 1.0, "throughput"),
    ("tpot_median_ms", 1e-3, "tpot_median"),
    ("ttft_median_ms", 1e-3, "ttft_median"),
)


#: the disaggregated runs' name among the sources of the pooled profiles' transfer error
DISAGG_SOURCE = "inferencex-disaggregated"


def load_disagg_rows(path: str | Path | None = None) -> list[dict[str, str]]:
    """Rows of the disaggregated-fleet runs (``inference_disagg_runs.csv``)."""
    return _read_rows(path, DISAGG_CSV_PATH)


def _pool(row: dict[str, str], side: str) -> tuple[dict[str, str], int]:
    """The replica fields of a row's prefill or decode workers, and how many workers."""
    workers = int(_num(row.get(f"{side}_workers")) or 0)
    if workers < 1:
        raise InputError(
            f"{row.get('run_id')}: {side}_workers must be at least 1",
            hint="give the number of prefill and decode workers the run used",
        )
    run = dict(row)
    run["tp"] = row.get(f"{side}_tp") or "1"
    run["ep"] = row.get(f"{side}_ep") or "1"
    if side == "prefill":
        run["max_num_batched_tokens"] = row.get("prefill_chunk_tokens") or "8192"
    return run, workers


def forecast_disagg_row(
    row: dict[str, str],
    *,
    fitted: FittedOverheads | None = None,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
) -> dict[DisaggMetric, FloatArray]:
    """One disaggregated run: its ``max_concurrency`` clients against its prefill and decode
    workers (each a replica of the row's layout, :func:`_row_candidate`), solved by
    :func:`~gpuplan.forecast.serving.disaggregated_closed_loop` with the mean lengths of
    the benchmark's draw (:func:`sweep_requests`) and the prompt's KV cache moved over the
    scale-out link (:func:`~gpuplan.forecast.serving.kv_transfer_time_s`). Returns
    ``[value, slow, fast]`` per metric: output tokens/s of the fleet, median TPOT and TTFT."""
    from gpuplan.forecast.inference import inter_node_link_bytes_per_s
    from gpuplan.forecast.inference_step import FAST, SLOW
    from gpuplan.forecast.serving import disaggregated_closed_loop, kv_transfer_time_s

    catalog = _catalog_or_default(catalog)
    engine, own = _profile_overheads(row, fitted or load_overheads(), catalog)
    lin, lout = sweep_requests(row)
    pre_row, n_pre = _pool(row, "prefill")
    dec_row, n_dec = _pool(row, "decode")
    pre = _row_candidate(pre_row, engine, own, catalog, perf_for, lin, lout)
    dec = _row_candidate(dec_row, engine, own, catalog, perf_for, lin, lout)
    i_mean, o_mean = float(lin.mean()), float(lout.mean())
    link, _ = inter_node_link_bytes_per_s(dec.extra["rates"])
    kv_s = kv_transfer_time_s(
        i_mean * float(dec.extra["sharded"].kv_bytes_per_token_per_gpu()), link
    )
    conc = int(_num(row.get("max_concurrency")) or 0)
    out: dict[DisaggMetric, list[float]] = {}
    for scn in (VALUE, SLOW, FAST):
        loop = disaggregated_closed_loop(
            pre.replica,
            dec.replica,
            prefill_workers=n_pre,
            decode_workers=n_dec,
            input_tokens=i_mean,
            output_tokens=o_mean,
            concurrency=conc,
            kv_transfer_s=kv_s,
            scenario=scn,
        )
        out.setdefault("throughput", []).append(loop.output_tokens_per_s)
        out.setdefault("tpot_median", []).append(loop.tpot_s)
        out.setdefault("ttft_median", []).append(loop.ttft_s)
    return {k: np.array(v) for k, v in out.items()}


class DisaggRow(TypedDict):
    """One row of :func:`validate_disaggregated`."""

    run_id: str
    engine: str
    gpu: str
    precision: str
    prefill: str
    decode: str
    concurrency: int
    input_len: int
    output_len: int
    metrics: dict[str, LatencyPoint]


class DisaggValidation(TypedDict):
    """:func:`validate_disaggregated`: the disaggregated rows scored with the shipped
    constants."""

    data: str
    source: str
    convention: str
    fitted_on: str
    by_metric: dict[str, Score]
    by_gpu_engine: dict[str, dict[str, Score]]
    rows: list[DisaggRow]
    skipped: list[Skipped]


def _workers(row: dict[str, str], side: str) -> str:
    tp, ep = int(_num(row.get(f"{side}_tp")) or 1), int(_num(row.get(f"{side}_ep")) or 1)
    n = int(_num(row.get(f"{side}_workers")) or 0)
    shape = f"wide EP {ep}" if tp == 1 and ep > 1 else f"TP {tp}" + (f" EP {ep}" if ep > 1 else "")
    return f"{n} x {shape}"


def validate_disaggregated(
    data: str | Path | None = None,
    *,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
    fitted: FittedOverheads | None = None,
) -> DisaggValidation:
    """Error of the shipped forecast on published disaggregated fleets (separate prefill
    and decode workers under a closed-loop client, :func:`forecast_disagg_row`).

    Held out by source: no constant is fitted on these rows; the per-step physics is the
    one every other serving forecast uses. Intervals of the pooled profiles come from the
    other sources' residuals (leave one source out, :func:`fit_source_transfer`). Scored
    apart: output throughput of the fleet, median TPOT (the decode workers) and median
    TTFT, and by GPU and engine profile.
    """
    catalog = _catalog_or_default(catalog)
    fitted = fitted or load_overheads()
    rows = load_disagg_rows(data)
    # the shipped rows are scored with intervals measured without them
    held = _HeldOutScores(fitted, DISAGG_SOURCE if data is None else None)
    done, skipped = held.score_rows(
        rows,
        partial(forecast_disagg_row, fitted=fitted, catalog=catalog, perf_for=perf_for),
        DISAGG_METRICS,
        catalog,
    )
    per_row: list[DisaggRow] = []
    for row, engine, gpu, metrics in done:
        per_row.append(
            {
                "run_id": row.get("run_id", "?"),
                "engine": engine,
                "gpu": gpu,
                "precision": row.get("precision") or "",
                "prefill": _workers(row, "prefill"),
                "decode": _workers(row, "decode"),
                "concurrency": int(_num(row.get("max_concurrency")) or 0),
                "input_len": int(_num(row.get("input_len")) or 0),
                "output_len": int(_num(row.get("output_len")) or 0),
                "metrics": metrics,
            }
        )

    return {
        "data": str(Path(data) if data else DISAGG_CSV_PATH.name),
        "source": _sources(rows),
        "convention": (
            "closed loop (benchmark_serving --max-concurrency C --request-rate inf, random "
            "lengths in [0.8 L, L]) against P prefill and D decode workers; throughput = "
            "output tokens/s of the fleet, TPOT = (e2e - TTFT) / (output - 1), TTFT from the "
            "client's send"
        ),
        "fitted_on": (
            "nothing: every constant comes from other sources (held out by source); "
            "the pooled profiles' intervals leave this source out"
        ),
        "by_metric": held.by_metric(),
        "by_gpu_engine": held.by_gpu_engine(),
        "rows": per_row,
        "skipped": skipped,
    }


# ---------------------------------------------------------------------------------------------
# Offline maximum-throughput tables (trtllm-bench, TensorRT-LLM 0.17), held out by source
# ---------------------------------------------------------------------------------------------
# TensorRT-LLM's perf-overview.md of release 0.17 publishes the output tokens/s of an offline
# run: N requests of one fixed prompt and answer length, all queued at once, served by
# in-flight batching until the last one finishes. The dense rows fit nothing (trtllm@0.17
# transfers the TensorRT-LLM v0.9 constants as they are). The mixture-of-experts rows fit one
# constant, the vendor MoE factor (fit_vendor_moe), and are scored with it fitted without
# their model (leave-one-model-out); the InferenceX runs of DeepSeek-R1 score it held out by
# source. A run is replayed by the continuous-batching simulation with the engine build
# ``trtllm-bench build --dataset`` chooses (trtllm_bench_build).

OFFLINE_CSV_PATH = DATA_DIR / "inference_offline_runs.csv"
#: Requests simulated per row: every published count but the 30,000 of 128/128 (3,000 or
#: fewer). Fewer than a few full batches make the ramp and the drain weigh on throughput.
OFFLINE_MAX_REQUESTS = 3000
OfflineMetric: TypeAlias = Literal["throughput"]
#: (column, unit scale, metric) of an offline row
OFFLINE_METRICS: tuple[tuple[str, float, OfflineMetric], ...] = (
    ("out_tokens_per_s_total", 1.0, "throughput"),
)


@dataclass(frozen=True)
class BenchBuild:
    """What ``trtllm-bench build --dataset`` sets: ``max_batch_size`` and ``max_num_tokens``,
    and the KV-cache requests its estimate assumed."""

    max_batch_size: int
    max_num_tokens: int
    kv_cache_max_requests: float


def trtllm_bench_tuning(
    kv_cache_max_requests: float, input_len: int, output_len: int, pp: int = 1
) -> tuple[int, int]:
    """``(max_batch_size, max_num_tokens)`` from the requests the KV cache holds: the
    "slightly optimistic" rounding of ``finetune_setting`` in
    ``tensorrt_llm/bench/build/tuning.py`` (NVIDIA/TensorRT-LLM): the batch is capped at
    4,096 per pipeline stage and rounded up (at least 64); the token budget is the batch
    times ``1 + input/output`` capped at 32,768, rounded up (at least 2,048).

    >>> trtllm_bench_tuning(100.0, 128, 128)
    (128, 2048)
    >>> trtllm_bench_tuning(5000.0, 2048, 128)
    (4096, 32768)
    >>> trtllm_bench_tuning(300.0, 1000, 1000)
    (384, 2048)
    """
    raw_bs = min(kv_cache_max_requests, 4096) / pp
    raw_token = min(raw_bs * (1 + input_len / output_len), 32768)
    if raw_bs < 256:
        max_bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        max_bs = 128 * math.ceil(raw_bs / 128)
    else:
        max_bs = 256 * math.ceil(raw_bs / 256)
    if raw_token < 4096:
        max_token = max(2048, 256 * math.ceil(raw_token / 256))
    elif raw_token < 8192:
        max_token = 512 * math.ceil(raw_token / 512)
    else:
        max_token = 1024 * math.ceil(raw_token / 1024)
    return int(max_bs), int(max_token)


def trtllm_bench_build(
    *,
    params: int,
    layers: int,
    kv_heads: int,
    head_dim: int,
    weight_bytes: float,
    kv_bytes: float,
    device_memory_bytes: float,
    tp: int,
    input_len: int,
    output_len: int,
    pp: int = 1,
    kv_fraction: float = 0.95,
) -> BenchBuild:
    """The engine build of ``trtllm-bench build --dataset`` (``calc_engine_setting`` in
    ``tensorrt_llm/bench/build/tuning.py``): the memory of ``tp * pp`` devices less the
    weights (``params * weight_bytes``), times ``kv_fraction``, over the KV bytes of one
    request of ``input_len + output_len`` tokens (each rank holds at least one KV head)
    gives the requests the cache holds; :func:`trtllm_bench_tuning` rounds them.

    >>> b = trtllm_bench_build(params=8_030_000_000, layers=32, kv_heads=8, head_dim=128,
    ...     weight_bytes=1.0, kv_bytes=1.0, device_memory_bytes=80 * 2**30, tp=1,
    ...     input_len=128, output_len=128)
    >>> (b.max_batch_size, b.max_num_tokens)
    (4096, 8192)
    """
    per_token = 2 * layers * max(tp, kv_heads) * head_dim * kv_bytes
    available = device_memory_bytes * tp * pp - params * weight_bytes
    if available <= 0:
        raise InputError(
            f"the weights ({params * weight_bytes / 1e9:.0f} GB) exceed the memory of "
            f"{tp * pp} device(s)",
            hint="raise tp or pp",
        )
    requests = available * kv_fraction / (per_token * (input_len + output_len))
    bs, tokens = trtllm_bench_tuning(requests, input_len, output_len, pp)
    return BenchBuild(bs, tokens, requests)


class OfflineRow(TypedDict):
    """One scored offline row: published, forecast, interval and error of its throughput."""

    run_id: str
    engine: str
    gpu: str
    model: str
    precision: str
    tp: int
    input_len: int
    output_len: int
    max_batch_size: int
    max_num_tokens: int
    metrics: dict[str, LatencyPoint]


class OfflineValidation(TypedDict):
    """:func:`validate_offline`: the offline rows scored with the shipped constants."""

    data: str
    source: str
    convention: str
    fitted_on: str
    vendor_moe: VendorMoeRecord
    by_metric: dict[str, Score]
    by_gpu_engine: dict[str, dict[str, Score]]
    by_model: dict[str, Score]
    by_tp: dict[str, Score]
    rows: list[OfflineRow]
    skipped: list[Skipped]


def load_offline_rows(path: str | Path | None = None) -> list[dict[str, str]]:
    """Rows of the offline maximum-throughput tables (``inference_offline_runs.csv``)."""

    return _read_rows(path, OFFLINE_CSV_PATH)


def _build_of(row: dict[str, str], catalog: Catalog) -> BenchBuild:
    from gpuplan.forecast.inference_arch import resolve_precision
    from gpuplan.forecast.model import arch_from

    arch = arch_from(catalog.model(row["model"]))
    gpu = catalog.gpu(row["gpu_type"])
    kv_name = (row.get("kv_precision") or "").strip().lower() or None
    prec = resolve_precision((row.get("precision") or "bf16").lower(), gpu, kv_name)
    if arch.kv_heads is None or arch.head_dim is None or gpu.memory_bytes is None:
        raise InputError(
            f"{row.get('run_id')}: trtllm-bench's build heuristic needs KV heads, a head "
            "size and the GPU's memory",
            hint="give a multi-head (MHA/GQA) model and a GPU with memory in the catalog",
        )
    return trtllm_bench_build(
        params=arch.params_total(),
        layers=arch.layers,
        kv_heads=arch.kv_heads,
        head_dim=arch.head_dim,
        weight_bytes=prec.weight_bytes,
        kv_bytes=prec.kv_bytes,
        device_memory_bytes=float(gpu.memory_bytes),
        tp=int(_num(row.get("tp")) or 1),
        input_len=int(_num(row.get("input_len")) or 0),
        output_len=int(_num(row.get("output_len")) or 0),
        kv_fraction=float(_num(row.get("memory_fraction")) or 0.95),
    )


def simulate_offline_row(
    row: dict[str, str],
    *,
    fitted: FittedOverheads | None = None,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
) -> dict[OfflineMetric, FloatArray]:
    """One offline row replayed with its profile's shipped constants: ``min(num_requests,
    OFFLINE_MAX_REQUESTS)`` requests of the row's fixed lengths arrive at once at one
    replica built as ``trtllm-bench`` builds it (:func:`trtllm_bench_build`: its batch cap
    and its token budget per step; the KV cache gets ``memory_fraction`` of the memory the
    weights and activations leave). Returns ``[value, slow, fast]`` output tokens/s."""
    catalog = _catalog_or_default(catalog)
    engine, own = _profile_overheads(row, fitted or load_overheads(), catalog)
    isl, osl = int(_num(row.get("input_len")) or 0), int(_num(row.get("output_len")) or 0)
    n = min(int(_num(row.get("num_requests")) or 0), OFFLINE_MAX_REQUESTS)
    if isl <= 0 or osl <= 0 or n <= 0:
        raise InputError(
            f"{row.get('run_id')}: an offline row needs input_len, output_len and num_requests",
            hint="give the dataset's fixed lengths and its request count",
        )
    build = _build_of(row, catalog)
    out = _burst_throughput(
        row, engine, own, catalog, perf_for, n, isl, osl, build.max_batch_size, build.max_num_tokens
    )
    return {"throughput": out}


def _burst_throughput(
    row: dict[str, str],
    engine: str,
    fitted: FittedOverheads,
    catalog: Catalog,
    perf_for: PerfFor | None,
    n: int,
    isl: int,
    osl: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
) -> FloatArray:
    """``[value, slow, fast]`` output tokens/s to the last token of ``n`` requests of fixed
    lengths ``isl``/``osl`` sent at once to the row's replica, run with that running cap and
    token budget per step."""
    from gpuplan.forecast.serving import simulate_requests

    run = dict(row)
    run["max_num_seqs"] = str(max_num_seqs)
    run["max_num_batched_tokens"] = str(max_num_batched_tokens)
    lin, lout = np.full(n, isl, dtype=np.int64), np.full(n, osl, dtype=np.int64)
    rep = _row_replica(run, engine, fitted, catalog, perf_for, lin, lout)
    out: list[float] = []
    for scn in (VALUE, SLOW, FAST):
        sim = simulate_requests(rep, np.zeros(n), lin, lout, max_queue=n + 1, scenario=scn)
        out.append(sim.output_tokens / sim.duration_s if sim.duration_s > 0 else math.nan)
    return np.array(out)


def _is_moe(row: dict[str, str], catalog: Catalog) -> bool:
    from gpuplan.forecast.model import arch_from

    return arch_from(catalog.model(row["model"])).is_moe


def _unit_factor(fitted: FittedOverheads) -> FittedOverheads:
    """``fitted`` without the vendor MoE factor (every row simulated at factor 1; a pass-time
    factor ``s`` then divides an offline row's throughput by ``s`` exactly)."""
    return replace(fitted, vendor_moe_time_scale=1.0)


def _moe_log_ratios(
    rows: list[dict[str, str]],
    sims: dict[str, FloatArray],
    catalog: Catalog,
) -> dict[str, list[float]]:
    """``log(forecast at factor 1 / published)`` of the MoE rows' throughput, by model."""

    out: dict[str, list[float]] = {}
    for row in rows:
        sim = sims.get(row.get("run_id", ""))
        pub = _num(row.get("out_tokens_per_s_total"))
        if sim is None or not pub or not math.isfinite(float(sim[VALUE])):
            continue
        if _is_moe(row, catalog):
            model = catalog.model(row["model"]).id
            out.setdefault(model, []).append(math.log(float(sim[VALUE]) / pub))
    return out


def _simulate_all(
    rows: list[dict[str, str]],
    fitted: FittedOverheads,
    catalog: Catalog,
    perf_for: PerfFor | None,
) -> dict[str, FloatArray]:
    """Throughput ``[value, slow, fast]`` of every row that can be forecast, at factor 1."""
    unit = _unit_factor(fitted)
    out: dict[str, FloatArray] = {}
    for row in rows:
        try:
            out[row.get("run_id", "?")] = simulate_offline_row(
                row, fitted=unit, catalog=catalog, perf_for=perf_for
            )["throughput"]
        except GpuplanError:
            continue
    return out


def fit_vendor_moe(
    data: str | Path | None = None,
    *,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
    fitted: FittedOverheads | None = None,
    sims: dict[str, FloatArray] | None = None,
) -> VendorMoeRecord:
    """The vendor MoE factor: ``exp(median(log(forecast at factor 1 / published)))`` of the
    offline table's mixture-of-experts rows (:func:`fit_time_scale`, robust to odd rows), and the same fitted without each model's rows.

    The TensorRT-LLM 0.17 Mixtral rows run its MoE plugin (CUTLASS grouped GEMMs) and come
    out 15% faster than the dense roofline gives them, at every GPU and TP; the
    InferenceX DeepSeek-R1 runs on NVIDIA parts (SGLang, TensorRT-LLM 1.x) lean the same way.
    The factor multiplies the whole pass time of a MoE model, as the pooled ``moe_time_scale``
    of the Triton engines does.
    """

    catalog = _catalog_or_default(catalog)
    fitted = fitted or load_overheads()
    rows = load_offline_rows(data)
    if sims is None:
        sims = _simulate_all([r for r in rows if _is_moe(r, catalog)], fitted, catalog, perf_for)
    by_model = _moe_log_ratios(rows, sims, catalog)
    every = np.array([x for v in by_model.values() for x in v])
    held = {
        m: fit_time_scale(np.array([x for k, v in by_model.items() if k != m for x in v]))
        for m in sorted(by_model)
    }
    resid = np.array([x - math.log(held[m]) for m, v in by_model.items() for x in v])
    return {
        "time_scale": fit_time_scale(every),
        "rows": int(every.size),
        "held_out": held,
        "log_residual_quantiles": list(_q(resid)),
        "basis": (
            f"fitted on {every.size} mixture-of-experts rows of {OFFLINE_CSV_PATH.name} "
            f"(TensorRT-LLM 0.17 offline tables: {', '.join(sorted(by_model))}); applies to "
            "vendor-kernel profiles without constants of their own"
        ),
    }


def validate_offline(
    data: str | Path | None = None,
    *,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
    fitted: FittedOverheads | None = None,
) -> OfflineValidation:
    """Error of the shipped forecast on published offline maximum-throughput tables.

    Held out by source: the dense rows fit nothing. A mixture-of-experts row is scored with
    the vendor MoE factor fitted on the table's other MoE models (:func:`fit_vendor_moe`,
    leave-one-model-out). Intervals are those a new forecast of the row's profile gets.
    Scored by GPU and engine, by model and by tensor-parallel size.
    """

    catalog = _catalog_or_default(catalog)
    fitted = fitted or load_overheads()
    rows = load_offline_rows(data)
    sims = _simulate_all(rows, fitted, catalog, perf_for)
    vendor = fit_vendor_moe(data, catalog=catalog, perf_for=perf_for, fitted=fitted, sims=sims)

    def forecast(row: dict[str, str]) -> dict[OfflineMetric, FloatArray]:
        rid = row.get("run_id", "?")
        if rid not in sims:  # raises the row's one-line reason
            simulate_offline_row(row, fitted=_unit_factor(fitted), catalog=catalog)
        thr = sims[rid]
        if _is_moe(row, catalog):
            thr = thr / vendor["held_out"].get(catalog.model(row["model"]).id, 1.0)
        return {"throughput": thr}

    held = _HeldOutScores(fitted)
    done, skipped = held.score_rows(rows, forecast, OFFLINE_METRICS, catalog)
    per_row: list[OfflineRow] = []
    by_model: dict[str, list[_Point]] = {}
    by_tp: dict[str, list[_Point]] = {}
    for row, engine, gpu, metrics in done:
        build = _build_of(row, catalog)
        tp = int(_num(row.get("tp")) or 1)
        per_row.append(
            {
                "run_id": row.get("run_id", "?"),
                "engine": engine,
                "gpu": gpu,
                "model": catalog.model(row["model"]).id,
                "precision": row.get("precision") or "",
                "tp": tp,
                "input_len": int(_num(row.get("input_len")) or 0),
                "output_len": int(_num(row.get("output_len")) or 0),
                "max_batch_size": build.max_batch_size,
                "max_num_tokens": build.max_num_tokens,
                "metrics": metrics,
            }
        )
        p = _throughput_point(metrics)
        if p is not None:
            by_model.setdefault(per_row[-1]["model"], []).append(p)
            by_tp.setdefault(f"tp{tp}", []).append(p)
    return {
        "data": str(Path(data) if data else OFFLINE_CSV_PATH.name),
        "source": _sources(rows),
        "convention": (
            "offline: trtllm-bench throughput, every request of one fixed input and output "
            "length queued at once (prepare_dataset.py token-norm-dist, stdev 0); throughput "
            "= output tokens / time to the last token, all GPUs of the replica"
        ),
        "fitted_on": (
            "dense rows: nothing (held out by source); mixture-of-experts rows: the vendor "
            "MoE factor fitted on this table's other MoE models (leave-one-model-out)"
        ),
        "vendor_moe": vendor,
        "by_metric": held.by_metric(),
        "by_gpu_engine": held.by_gpu_engine(),
        "by_model": _scores_by(by_model),
        "by_tp": _scores_by(by_tp),
        "rows": per_row,
        "skipped": skipped,
    }


# ---------------------------------------------------------------------------------------------
# NVIDIA NIM concurrency sweeps (AIPerf / genai-perf), held out by source
# ---------------------------------------------------------------------------------------------
# NVIDIA's NIM benchmarking guide publishes closed-loop sweeps of NIM 1.8.0 (its TensorRT-LLM
# fp8 profiles): Llama 3.3 70B on 2 x H100 (TP 2) and Llama 3.1 8B on one H100, five fixed
# input/output lengths from 200/200 to 20,000/2,000, 1 to 250 requests in flight. The client
# (perf_analyzer's measurement windows) reports the average TTFT and inter-token latency and
# the output tokens/s of steady operation, not the ramp up or the drain. Nothing is fitted
# on these rows; the profile transfers the TensorRT-LLM constants (trtllm@0.17).

NIM_CSV_PATH = DATA_DIR / "inference_nim_runs.csv"
NimMetric: TypeAlias = Literal["throughput", "tpot_mean", "ttft_mean"]
#: (column, unit scale, metric) of a NIM row
NIM_METRICS: tuple[tuple[str, float, NimMetric], ...] = (
    ("out_tokens_per_s_total", 1.0, "throughput"),
    ("itl_mean_ms", 1e-3, "tpot_mean"),
    ("ttft_mean_ms", 1e-3, "ttft_mean"),
)
#: Requests a sweep row simulates: the first ``C`` (sent at once, the ramp) and the last
#: ``C`` (the drain, fewer in flight) are not scored, ``NIM_STEADY_ROUNDS`` x ``C`` between.
NIM_STEADY_ROUNDS = 4


def load_nim_rows(path: str | Path | None = None) -> list[dict[str, str]]:
    """Rows of the NIM concurrency sweeps (``inference_nim_runs.csv``)."""
    return _read_rows(path, NIM_CSV_PATH)


def simulate_nim_row(
    row: dict[str, str],
    *,
    fitted: FittedOverheads | None = None,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
) -> dict[NimMetric, FloatArray]:
    """One NIM sweep row replayed with its profile's shipped constants: a closed loop of
    ``max_concurrency`` requests of the row's fixed lengths against one replica
    (:func:`~gpuplan.forecast.serving.simulate_requests` with ``concurrency``), scored in
    steady state as the client's measurement windows are: the requests after the first
    ``C`` and before the last ``C``. Returns ``[value, slow, fast]`` per metric: mean TPOT
    ((last - first token) / (answer - 1), the client's inter-token latency), mean TTFT, and
    output tokens/s by Little's law for a closed loop, ``C x answer / mean latency``."""
    from gpuplan.forecast.serving import simulate_requests

    catalog = _catalog_or_default(catalog)
    engine, own = _profile_overheads(row, fitted or load_overheads(), catalog)
    isl, osl = int(_num(row.get("input_len")) or 0), int(_num(row.get("output_len")) or 0)
    conc = int(_num(row.get("max_concurrency")) or 0)
    if isl <= 0 or osl <= 1 or conc <= 0:
        raise InputError(
            f"{row.get('run_id')}: a NIM row needs input_len, output_len > 1 and max_concurrency",
            hint="give the sweep's fixed lengths and its concurrency",
        )
    n = (NIM_STEADY_ROUNDS + 2) * conc
    lin, lout = np.full(n, isl, dtype=np.int64), np.full(n, osl, dtype=np.int64)
    rep = _row_replica(row, engine, own, catalog, perf_for, lin, lout)
    out: dict[NimMetric, list[float]] = {}
    for scn in (VALUE, SLOW, FAST):
        sim = simulate_requests(
            rep, np.zeros(n), lin, lout, max_queue=n + 1, scenario=scn, concurrency=conc
        )
        if sim.saturated or sim.ttft_s.size < n:
            raise InputError(
                f"{row.get('run_id')}: the replica cannot hold one request of {isl} + {osl} tokens",
                hint="check the model, GPU, precision and TP of the row",
            )
        steady = slice(conc, n - conc)
        ttft = float(np.mean(sim.ttft_s[steady]))
        tpot = float(np.mean(sim.tpot_s[steady]))
        latency = float(np.mean(sim.ttft_s[steady] + (osl - 1) * sim.tpot_s[steady]))
        out.setdefault("throughput", []).append(conc * osl / latency)
        out.setdefault("tpot_mean", []).append(tpot)
        out.setdefault("ttft_mean", []).append(ttft)
    return {k: np.array(v) for k, v in out.items()}


class NimRow(TypedDict):
    """One scored NIM sweep row."""

    run_id: str
    engine: str
    gpu: str
    model: str
    tp: int
    concurrency: int
    input_len: int
    output_len: int
    metrics: dict[str, LatencyPoint]


class NimValidation(TypedDict):
    """:func:`validate_nim`: the NIM sweep rows scored with the shipped constants."""

    data: str
    source: str
    convention: str
    fitted_on: str
    by_metric: dict[str, Score]
    by_gpu_engine: dict[str, dict[str, Score]]
    by_model: dict[str, Score]
    rows: list[NimRow]
    skipped: list[Skipped]


def validate_nim(
    data: str | Path | None = None,
    *,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
    fitted: FittedOverheads | None = None,
) -> NimValidation:
    """Error of the shipped forecast on NVIDIA NIM's published concurrency sweeps (held
    out by source: no constant is fitted on them), by metric, GPU and profile, and model
    (throughput)."""
    return _validate_closed_loop(
        load_nim_rows(data),
        str(Path(data) if data else NIM_CSV_PATH.name),
        simulate_nim_row,
        NIM_METRICS,
        (
            "closed loop (AIPerf / genai-perf --concurrency C, fixed input and output lengths, "
            "ignore_eos): steady-state averages of TTFT and inter-token latency, output "
            "tokens/s of the replica"
        ),
        catalog=catalog,
        perf_for=perf_for,
        fitted=fitted,
    )


def _validate_closed_loop(
    rows: list[dict[str, str]],
    data: str,
    simulate: Callable[..., Mapping[_M, FloatArray]],
    columns: Sequence[tuple[str, float, _M]],
    convention: str,
    *,
    catalog: Catalog | None,
    perf_for: PerfFor | None,
    fitted: FittedOverheads | None,
) -> NimValidation:
    """Rows of closed-loop runs at fixed lengths (``max_concurrency`` in flight) scored with
    the shipped constants, fitted on nothing: by metric, GPU and profile, and model."""
    catalog = _catalog_or_default(catalog)
    fitted = fitted or load_overheads()
    held = _HeldOutScores(fitted)
    done, skipped = held.score_rows(
        rows,
        partial(simulate, fitted=fitted, catalog=catalog, perf_for=perf_for),
        columns,
        catalog,
    )
    per_row: list[NimRow] = []
    by_model: dict[str, list[_Point]] = {}
    for row, engine, gpu, metrics in done:
        model = catalog.model(row["model"]).id
        per_row.append(
            {
                "run_id": row.get("run_id", "?"),
                "engine": engine,
                "gpu": gpu,
                "model": model,
                "tp": int(_num(row.get("tp")) or 1),
                "concurrency": int(_num(row.get("max_concurrency")) or 0),
                "input_len": int(_num(row.get("input_len")) or 0),
                "output_len": int(_num(row.get("output_len")) or 0),
                "metrics": metrics,
            }
        )
        p = _throughput_point(metrics)
        if p is not None:
            by_model.setdefault(model, []).append(p)
    return {
        "data": data,
        "source": _sources(rows),
        "convention": convention,
        "fitted_on": "nothing: every constant comes from other sources (held out by source)",
        "by_metric": held.by_metric(),
        "by_gpu_engine": held.by_gpu_engine(),
        "by_model": _scores_by(by_model),
        "rows": per_row,
        "skipped": skipped,
    }


# ---------------------------------------------------------------------------------------------
# AWS publishes the latency of Transformers NeuronX (Neuron SDK 2.18) on a trn1.32xlarge: one
# request at a time (batch 1, the 'Real Time' table), Llama 2/3, Mistral and CodeLlama over
# 32 NeuronCores (16 Trainium chips), P50 TTFT and TPOT at fixed lengths. There is no Neuron
# engine profile: the rows are scored with the tool's default constants (``modern``, fitted
# on GPU engines), which is what a user gets for ``forecast infer --gpu trn1``. Nothing is
# fitted on them: they measure how far the GPU-fitted constants carry to Trainium.

NEURON_CSV_PATH = DATA_DIR / "inference_neuron_runs.csv"
NeuronMetric: TypeAlias = Literal["throughput", "tpot_median", "ttft_median"]
#: (column, unit scale, metric) of a Neuron row
NEURON_METRICS: tuple[tuple[str, float, NeuronMetric], ...] = (
    ("out_tokens_per_s_total", 1.0, "throughput"),
    ("tpot_p50_ms", 1e-3, "tpot_median"),
    ("ttft_p50_ms", 1e-3, "ttft_median"),
)


def load_neuron_rows(path: str | Path | None = None) -> list[dict[str, str]]:
    """Rows of the Neuron latency table (``inference_neuron_runs.csv``)."""
    return _read_rows(path, NEURON_CSV_PATH)


def simulate_neuron_row(
    row: dict[str, str],
    *,
    fitted: FittedOverheads | None = None,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
) -> dict[NeuronMetric, FloatArray]:
    """One Neuron row replayed as :func:`simulate_nim_row` replays a closed loop: requests of
    the row's fixed lengths, ``max_concurrency`` (the batch, 1) in flight. With one request
    at a time every request is the same, so the simulated mean is the median the table
    publishes."""
    out = simulate_nim_row(row, fitted=fitted, catalog=catalog, perf_for=perf_for)
    return {
        "throughput": out["throughput"],
        "tpot_median": out["tpot_mean"],
        "ttft_median": out["ttft_mean"],
    }


def validate_neuron(
    data: str | Path | None = None,
    *,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
    fitted: FittedOverheads | None = None,
) -> NimValidation:
    """Error of the shipped forecast on AWS's Trn1 latency table (Transformers NeuronX),
    fitted on nothing, by metric, GPU and profile, and model (throughput)."""
    return _validate_closed_loop(
        load_neuron_rows(data),
        str(Path(data) if data else NEURON_CSV_PATH.name),
        simulate_neuron_row,
        NEURON_METRICS,
        (
            "one request at a time (batch 1), fixed input and output lengths: P50 TTFT and "
            "TPOT, output tokens/s of one request"
        ),
        catalog=catalog,
        perf_for=perf_for,
        fitted=fitted,
    )


# ---------------------------------------------------------------------------------------------
# Intel publishes the LLM throughput of Gaudi 2 and Gaudi 3 (Intel Gaudi software 1.18.0,
# PyTorch 2.4.0): per model, HPU count and fixed input/output lengths, one batch size and the
# tokens/s it reached, FP8. There is no Gaudi engine profile: like the Neuron rows they are
# scored with the tool's default constants (``modern``, fitted on GPU engines), what a user
# gets for ``forecast infer --gpu gaudi3 --batch N``, and nothing is fitted
# on them: they measure how far the device model and the GPU-fitted constants carry to Gaudi.

GAUDI_CSV_PATH = DATA_DIR / "inference_gaudi_runs.csv"
#: (column, unit scale, metric) of a Gaudi row
GAUDI_METRICS: tuple[tuple[str, float, OfflineMetric], ...] = (
    ("out_tokens_per_s_total", 1.0, "throughput"),
)


def load_gaudi_rows(path: str | Path | None = None) -> list[dict[str, str]]:
    """Rows of Intel's Gaudi throughput tables (``inference_gaudi_runs.csv``)."""
    return _read_rows(path, GAUDI_CSV_PATH)


def simulate_gaudi_row(
    row: dict[str, str],
    *,
    fitted: FittedOverheads | None = None,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
) -> dict[OfflineMetric, FloatArray]:
    """One Gaudi row replayed as one wave: its batch (``max_concurrency``) of requests of the
    row's fixed lengths arrives at once at a replica that runs at most that many, prefills
    them in passes of the engine's default step budget (``EngineProfile.chunk_tokens``,
    8,192 for ``modern``: the passes' FLOPs and weight reads add up to one pass over the
    whole batch, which would instead be priced with fp32 logits for every token) and decodes
    them together (what ``forecast infer --batch N`` does with N requests; requests memory
    cannot hold wait for a second wave). Returns ``[value, slow, fast]`` generated tokens/s
    to the last token."""
    from gpuplan.forecast.inference_step import engine_profile

    catalog = _catalog_or_default(catalog)
    engine, own = _profile_overheads(row, fitted or load_overheads(), catalog)
    isl, osl = int(_num(row.get("input_len")) or 0), int(_num(row.get("output_len")) or 0)
    batch = int(_num(row.get("max_concurrency")) or 0)
    if isl <= 0 or osl <= 0 or batch <= 0:
        raise InputError(
            f"{row.get('run_id')}: a Gaudi row needs input_len, output_len and max_concurrency "
            "(its batch size)",
            hint="give the table's fixed lengths and batch size",
        )
    budget = engine_profile(engine).chunk_tokens(catalog.gpu(row["gpu_type"]))
    out = _burst_throughput(
        row, engine, own, catalog, perf_for, batch, isl, osl, batch, max(isl, budget)
    )
    return {"throughput": out}


def validate_gaudi(
    data: str | Path | None = None,
    *,
    catalog: Catalog | None = None,
    perf_for: PerfFor | None = None,
    fitted: FittedOverheads | None = None,
) -> NimValidation:
    """Error of the shipped forecast on Intel's Gaudi 2 / Gaudi 3 throughput tables, fitted
    on nothing, by GPU and profile, and model."""
    return _validate_closed_loop(
        load_gaudi_rows(data),
        str(Path(data) if data else GAUDI_CSV_PATH.name),
        simulate_gaudi_row,
        GAUDI_METRICS,
        (
            "one batch: the row's batch of fixed-length requests arrives at once and runs "
            "together (prefill in passes of 8,192 tokens); generated tokens/s of the row's HPUs"
        ),
        catalog=catalog,
        perf_for=perf_for,
        fitted=fitted,
    )


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    import argparse
    import json

    ap = argparse.ArgumentParser(description="Refit the inference framework constants.")
    ap.add_argument("--write", action="store_true", help="write data/inference_overheads.json")
    args = ap.parse_args()
    print(json.dumps(refit(write=args.write), indent=2))
