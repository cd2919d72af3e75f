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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gpuplan.errors import GpuplanError, InputError
from gpuplan.forecast.inference_fit import (
    DATA_DIR,
    FIT_PARAMS,
    INTERVAL_LEVEL,
    Cases,
    _subset,
    fit_params,
    load_overheads,
    predict_cases,
    residual_quantiles,
    widen,
    write_overheads,
)
from gpuplan.forecast.inference_step import VALUE, OverheadParams

CSV_PATH = DATA_DIR / "inference_runs.csv"

#: Precision a framework version actually ran, where its table says otherwise. The v0.9.0
#: Hopper page lists every model as FP8, but FP8 quantisation of Mixtral only arrived in
#: v0.10.0 ("Added FP8 quantization support for Mixtral", TensorRT-LLM 0.10.0 release notes,
#: https://github.com/NVIDIA/TensorRT-LLM/pull/1734; the v0.9.0 quantize script fails on
#: Mixtral, https://github.com/NVIDIA/TensorRT-LLM/issues/1229), so those rows ran with FP16
#: weights and KV cache.
PRECISION_AS_RUN: dict[tuple[str, str, str], str] = {}
SCHEMES = {"leave-one-model-out": "model", "leave-one-gpu-out": "gpu"}
METRICS = ("throughput_per_gpu", "ttft")


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


def row_case(row: dict[str, str]) -> dict[str, Any]:
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
    artifact: Any = None,
    perf_for: Callable[[str], Any] | None = None,
    catalog: Any = None,
) -> tuple[Cases | None, list[dict[str, Any]], list[dict[str, Any]]]:
    """Turn published rows into :class:`Cases`; rows that cannot be forecast are returned
    with the reason (they count against coverage)."""
    from gpuplan.forecast.inference import device_perf_for
    from gpuplan.forecast.inference_arch import Layout, arch_from, resolve_precision, shard
    from gpuplan.forecast.inference_step import DeviceRates, static_run_parts

    if catalog is None:
        from gpuplan.catalogs import get_catalog

        catalog = get_catalog()
    perfs: dict[str, Any] = {}
    rates_cache: dict[tuple, Any] = {}
    kept: list[dict[str, Any]] = []
    runs = []
    skipped: list[dict[str, Any]] = []
    for row in rows:
        rid = row.get("run_id", "?")
        try:
            case = row_case(row)
            model = catalog.model(row["model"])
            gpu = catalog.gpu(row["gpu_type"])
            prec_name = (row.get("precision") or "bf16").strip().lower()
            for (version, mid, listed), ran in PRECISION_AS_RUN.items():
                if (
                    version in (row.get("framework") or "")
                    and model.id == mid
                    and prec_name == listed
                ):
                    prec_name = ran
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
):
    """Held-out forecasts ``(R, 3)`` with widened intervals, and the fold records."""
    if scheme not in SCHEMES:
        raise InputError(f"unknown scheme {scheme!r}", hint=f"use one of {', '.join(SCHEMES)}")
    groups = cases.model if SCHEMES[scheme] == "model" else cases.gpu
    pred = np.full((len(cases), 3), np.nan)
    folds = []
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


def score(published: np.ndarray, pred: np.ndarray, total_rows: int) -> dict[str, Any]:
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
    key: np.ndarray, cases: Cases, pred: np.ndarray, skipped_keys: list[str]
) -> dict[str, Any]:
    out = {}
    for g in sorted(set(key.tolist()) | set(skipped_keys)):
        sel = key == g
        total = int(sel.sum()) + skipped_keys.count(g)
        out[g] = score(cases.published[sel], pred[sel], total)
    return out


def validate_inference(
    data: str | Path | None = None,
    *,
    scheme: str = "leave-one-model-out",
    artifact: Any = None,
    perf_for: Callable[[str], Any] | None = None,
    catalog: Any = None,
) -> dict[str, Any]:
    """Held-out errors of the inference forecast on the published table.

    Returns the JSON of ``gpuplan validate inference``: ``overall``, ``by_source``,
    ``by_table``, ``by_metric`` and ``by_model`` scores, one entry per row (published,
    forecast, interval, error), the skipped rows with reasons, and the conventions used.
    """
    rows = load_rows(data)
    cases, kept, skipped = prepare(rows, artifact=artifact, perf_for=perf_for, catalog=catalog)
    result: dict[str, Any] = {
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
    result["by_metric"].update(engines.get("by_metric", {}))
    result["metrics"] = {
        "throughput_per_gpu": f"static-batch output tokens/s per GPU ({result['data']})",
        "ttft": f"batch-1 first-token latency, ttft_mean_ms ({result['data']})",
        "ttft_mean_burst": (
            f"mean TTFT of a request burst, ttft_mean_ms ({engines['data']}; every row held "
            "out: no constant is fitted on these rows)"
        ),
        "tpot_median_burst": (
            f"median TPOT of a request burst, tpot_median_ms ({engines['data']}; every row "
            "held out)"
        ),
    }
    result["by_model"] = _group_scores(cases.model, cases, pred, [])
    result["by_gpu"] = _group_scores(cases.gpu, cases, pred, [])
    per_row = []
    for i, k in enumerate(kept):
        v, lo, hi = pred[i]
        per_row.append(
            {
                **{
                    key: k[key]
                    for key in (
                        "run_id",
                        "metric",
                        "model",
                        "gpu",
                        "precision",
                        "tp",
                        "batch",
                        "input",
                        "output",
                    )
                },
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


def load_engine_rows(path: str | Path | None = None) -> list[dict[str, str]]:
    """Rows of the engines' published serving benchmarks (``inference_engine_runs.csv``)."""
    p = Path(path) if path else ENGINE_CSV_PATH
    if not p.exists():
        raise InputError(f"no such file: {p}", hint="use the header of " + ENGINE_CSV_PATH.name)
    with p.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _trace(text: str | None, name: str) -> np.ndarray:
    try:
        return np.array([int(x) for x in (text or "").split()], dtype=np.int64)
    except ValueError:
        raise InputError(f"{name} must be space-separated token counts") from None


def forecast_engine_row(
    row: dict[str, str], *, fitted: Any = None, catalog: Any = None, perf_for: Any = None
) -> tuple[float, float, float]:
    """Forecast one serving-benchmark row: ``(value, low, high)`` output tokens/s (replica).

    A burst (``request_rate`` inf, vLLM ``benchmark_serving``): every request of the row's
    own trace arrives at 0 and the discrete-event simulation of continuous batching runs
    them with the profile's scheduler cap (``max_num_seqs``); output throughput is the
    total output tokens over the time the last one finishes, the benchmark's definition.
    Requests that returned no token are not simulated (they cost the server ~nothing).
    """
    return forecast_engine_row_all(row, fitted=fitted, catalog=catalog, perf_for=perf_for)[
        "throughput"
    ]


#: latency metrics of the engine rows: (column, unit scale to s, name in ``by_metric``)
ENGINE_LATENCY_METRICS = (
    ("ttft_mean_ms", 1e-3, "ttft_mean_burst"),
    ("tpot_median_ms", 1e-3, "tpot_median_burst"),
)


def forecast_engine_row_all(
    row: dict[str, str], *, fitted: Any = None, catalog: Any = None, perf_for: Any = None
) -> dict[str, tuple[float, float, float]]:
    """One simulation of an engine row, every metric: ``throughput`` (output tokens/s of the
    replica, :func:`forecast_engine_row`), ``ttft_mean_burst`` (mean TTFT over the burst's
    requests, s) and ``tpot_median_burst`` (median TPOT, s), each ``(value, low, high)``.

    TTFT and TPOT follow vLLM ``benchmark_serving``: arrival (all at 0) to first token, and
    (last token - first token) / (output tokens - 1) per request. Their intervals: the
    simulation at the calibration's slow and fast ends, widened by the held-out TTFT
    quantiles and (TPOT, the inverse of a decode rate) the throughput quantiles.
    """
    from gpuplan.forecast.inference import build_candidates, device_perf_for
    from gpuplan.forecast.inference_arch import arch_from
    from gpuplan.forecast.inference_step import FAST, SLOW, engine_profile
    from gpuplan.forecast.serving import LengthDist, simulate_requests

    if catalog is None:
        from gpuplan.catalogs import get_catalog

        catalog = get_catalog()
    fitted = fitted or load_overheads()
    if (row.get("request_rate") or "").strip().lower() != "inf":
        raise InputError(f"{row.get('run_id')}: only bursts (request_rate inf) are modelled")
    lin = _trace(row.get("trace_input_lens"), "trace_input_lens")
    lout = _trace(row.get("trace_output_lens"), "trace_output_lens")
    if lin.size == 0 or lin.size != lout.size:
        raise InputError(f"{row.get('run_id')}: input and output traces differ in length")
    keep = lout > 0
    lin, lout = lin[keep], lout[keep]
    engine = engine_profile(row["engine"]).name
    cap = int(_num(row.get("max_num_seqs")) or engine_profile(engine).max_running_requests or 256)
    arch = arch_from(catalog.model(row["model"]))
    gpu = catalog.gpu(row["gpu_type"])
    cands, dropped = build_candidates(
        arch=arch,
        gpus=[gpu],
        precision=(row.get("precision") or "bf16").lower(),
        kv_precision=None,
        tp=int(_num(row.get("tp")) or 1),
        pp=1,
        ep=1,
        inputs=LengthDist.from_trace(lin),
        outputs=LengthDist.from_trace(lout),
        batch=cap,
        fitted=fitted,
        get_perf=perf_for or (lambda gid: device_perf_for(gid)),
        catalog=catalog,
        chunk_tokens=8192,
        utilization=0.9,
        engine=engine,
    )
    if not cands:
        raise InputError(f"{row.get('run_id')}: {dropped[0]['reason'] if dropped else 'no layout'}")
    rep = cands[0].replica
    out, ttft, tpot = [], [], []
    for scn in (VALUE, SLOW, FAST):
        sim = simulate_requests(
            rep, np.zeros(lin.size), lin, lout, max_queue=lin.size + 1, scenario=scn
        )
        out.append(sim.output_tokens / sim.duration_s if sim.duration_s > 0 else math.nan)
        ttft.append(float(np.mean(sim.ttft_s)) if sim.ttft_s.size else math.nan)
        tpot.append(float(np.median(sim.tpot_s)) if sim.tpot_s.size else math.nan)
    q = fitted.interval_quantiles("throughput_per_gpu", engine)
    q_ttft = fitted.interval_quantiles("ttft", engine)

    def interval(
        v: list[float], lo_i: int, hi_i: int, qq: tuple[float, float]
    ) -> tuple[float, float, float]:
        lo, hi = widen(np.array([v[0]]), np.array([v[lo_i]]), np.array([v[hi_i]]), *qq)
        return v[0], float(lo[0]), float(hi[0])

    return {
        "throughput": interval(out, 1, 2, q),
        # times: the slow end is the high one
        "ttft_mean_burst": interval(ttft, 2, 1, q_ttft),
        "tpot_median_burst": interval(tpot, 2, 1, (-q[1], -q[0])),
    }


def validate_engines(
    data: str | Path | None = None, *, catalog: Any = None, perf_for: Any = None
) -> dict[str, Any]:
    """Held-out error of each engine profile on its published serving rows.

    No constant is fitted on these rows (every profile except ``trtllm@0.9`` transfers the
    constants fitted on the TensorRT-LLM v0.9 tables), so every row is held out: by model
    and by engine at once. A profile with fewer than ``MIN_ROWS_CALIBRATED`` rows is
    reported ``calibrated: false`` and forecasts with widened intervals.
    """
    from gpuplan.forecast.inference_step import MIN_ROWS_CALIBRATED, engine_profile

    rows = load_engine_rows(data)
    per_row: list[dict[str, Any]] = []
    by_engine: dict[str, list[int]] = {}
    published: list[float] = []
    pred: list[tuple[float, float, float]] = []
    skipped: list[dict[str, Any]] = []
    latency: dict[str, list[tuple[float, tuple[float, float, float]]]] = {}
    for row in rows:
        rid = row.get("run_id", "?")
        try:
            all_m = forecast_engine_row_all(row, catalog=catalog, perf_for=perf_for)
            v, lo, hi = all_m["throughput"]
            pub = float(row["out_tokens_per_s_total"])
            engine = engine_profile(row["engine"]).name
        except (GpuplanError, KeyError, ValueError) as exc:
            reason = exc.one_line() if isinstance(exc, GpuplanError) else f"bad field: {exc}"
            skipped.append({"run_id": rid, "reason": reason})
            continue
        by_engine.setdefault(engine, []).append(len(published))
        published.append(pub)
        pred.append((v, lo, hi))
        per_row.append(
            {
                "run_id": rid,
                "engine": engine,
                "model": row.get("model"),
                "gpu": row.get("gpu_type"),
                "tp": row.get("tp"),
                "published": pub,
                "forecast": v,
                "interval": [lo, hi],
                "error_pct": (v - pub) / pub * 100,
            }
        )
        for col, scale, name in ENGINE_LATENCY_METRICS:
            pub_l = _num(row.get(col))
            if pub_l is None or pub_l <= 0:
                continue
            lv, llo, lhi = all_m[name]
            latency.setdefault(name, []).append((pub_l * scale, (lv, llo, lhi)))
            per_row[-1][name] = {
                "published_s": pub_l * scale,
                "forecast_s": lv,
                "interval_s": [llo, lhi],
                "error_pct": (lv - pub_l * scale) / (pub_l * scale) * 100,
            }
    pub_a = np.array(published, dtype=float)
    pred_a = np.array(pred, dtype=float).reshape(-1, 3)
    profiles: dict[str, Any] = {}
    for engine, idx in sorted(by_engine.items()):
        n_total = len(idx) + sum(
            1
            for r in rows
            if r.get("engine") == engine and r.get("run_id") in {s["run_id"] for s in skipped}
        )
        sc = score(pub_a[idx], pred_a[idx], n_total)
        prof = engine_profile(engine)
        sc.update(
            models=sorted({per_row[i]["model"] for i in idx}),
            calibrated=bool(prof.calibrated and len(idx) >= MIN_ROWS_CALIBRATED),
            constants=prof.basis,
            note=(
                f"{len(idx)} rows < {MIN_ROWS_CALIBRATED}: not claimed calibrated; constants "
                f"{prof.basis}, interval widened"
                if len(idx) < MIN_ROWS_CALIBRATED
                else "calibrated"
            ),
        )
        profiles[engine] = sc
    return {
        "data": str(Path(data) if data else ENGINE_CSV_PATH.name),
        "scheme": "every row held out (no constant fitted on engine rows); by model and engine",
        "convention": (
            "burst rows: output tokens/s of the whole replica for the row's own request "
            "trace sent at once (vLLM benchmark_serving --request-rate inf)"
        ),
        "profiles": profiles,
        # every row that publishes the latency counts, forecast or not
        "by_metric": {
            name: score(
                np.array([p for p, _ in pts], dtype=float),
                np.array([f for _, f in pts], dtype=float).reshape(-1, 3),
                sum(1 for r in rows if (_num(r.get(col)) or 0) > 0),
            )
            for col, _, name in ENGINE_LATENCY_METRICS
            if (pts := latency.get(name))
        },
        "overall": score(pub_a, pred_a, len(rows))
        if published
        else {"rows": len(rows), "forecast": 0},
        "rows": per_row,
        "skipped": skipped,
    }


def refit(
    data: str | Path | None = None,
    *,
    artifact: Any = None,
    perf_for: Callable[[str], Any] | None = None,
    write: bool = False,
) -> dict[str, Any]:
    """Fit the shipped constants on every row; record the held-out scores that describe them.

    The interval quantiles stored for new forecasts are those of the *held-out*
    (leave-one-model-out) residuals, per metric.
    """
    rows = load_rows(data)
    cases, _, skipped = prepare(rows, artifact=artifact, perf_for=perf_for)
    if cases is None:
        raise InputError("no usable row in the published table")
    params = fit_params(cases)
    held: dict[str, Any] = {}
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
    doc = {
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
        "engines": validate_engines(perf_for=perf_for).get("profiles", {}),
        "regenerate": "python -m gpuplan.forecast.validation_inference --write",
    }
    if write:
        write_overheads(doc)
    return doc


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    import argparse
    import json

    ap = argparse.ArgumentParser(description="Refit the inference framework constants.")
    ap.add_argument("--write", action="store_true", help="write data/inference_overheads.json")
    args = ap.parse_args()
    print(json.dumps(refit(write=args.write), indent=2))
