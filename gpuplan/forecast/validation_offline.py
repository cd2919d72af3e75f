"""Offline maximum-throughput tables (``trtllm-bench throughput``), scored held out.

TensorRT-LLM's ``perf-overview.md`` of release 0.17 publishes the output tokens/s of an
offline run: ``N`` requests of one fixed prompt and answer length, all queued at once, served
by in-flight batching until the last one finishes. The dense rows fit nothing (the ``trtllm@0.17``
profile transfers the TensorRT-LLM v0.9 constants as they are), so their error measures how
the forecast carries to a newer engine, four GPUs and FP8 weights with FP8 KV cache. The
mixture-of-experts rows fit one constant, the vendor MoE factor (:func:`fit_vendor_moe`:
the pass-time factor of a MoE model on engines whose experts run vendor grouped-GEMM
kernels), and are scored with it fitted without their model (leave-one-model-out); the
InferenceX runs of DeepSeek-R1 score it held out by source.

The run is replayed by the continuous-batching simulation
(:func:`gpuplan.forecast.serving.simulate_requests`) with the engine build
``trtllm-bench build --dataset`` chooses (:func:`trtllm_bench_build`): its largest batch and
its token budget per step come from the dataset's lengths and the memory left after the
weights, and the runtime then fits as many requests as the KV cache holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeAlias, TypedDict

import numpy as np

from gpuplan.errors import InputError
from gpuplan.forecast.inference_fit import (
    DATA_DIR,
    FittedOverheads,
    VendorMoeRecord,
    load_overheads,
)
from gpuplan.forecast.inference_step import FAST, SLOW, VALUE
from gpuplan.numeric import FloatArray

if TYPE_CHECKING:
    from gpuplan.catalogs.catalog import Catalog
    from gpuplan.forecast.validation_inference import (
        LatencyPoint,
        PerfFor,
        Score,
        Skipped,
    )

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
    from gpuplan.forecast.validation_inference import _read_rows

    return _read_rows(path, OFFLINE_CSV_PATH)


def _build_of(row: dict[str, str], catalog: Catalog) -> BenchBuild:
    from gpuplan.forecast.inference_arch import resolve_precision
    from gpuplan.forecast.model import arch_from
    from gpuplan.forecast.validation_inference import _num

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
    from gpuplan.forecast.serving import simulate_requests
    from gpuplan.forecast.validation_inference import (
        _catalog_or_default,
        _num,
        _profile_overheads,
        _row_replica,
    )

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
    run = dict(row)
    run["max_num_seqs"] = str(build.max_batch_size)
    run["max_num_batched_tokens"] = str(build.max_num_tokens)
    lin, lout = np.full(n, isl, dtype=np.int64), np.full(n, osl, dtype=np.int64)
    rep = _row_replica(run, engine, own, catalog, perf_for, lin, lout)
    out: list[float] = []
    for scn in (VALUE, SLOW, FAST):
        sim = simulate_requests(rep, np.zeros(n), lin, lout, max_queue=n + 1, scenario=scn)
        out.append(sim.output_tokens / sim.duration_s if sim.duration_s > 0 else math.nan)
    return {"throughput": np.array(out)}


def _is_moe(row: dict[str, str], catalog: Catalog) -> bool:
    from gpuplan.forecast.model import arch_from

    return arch_from(catalog.model(row["model"])).is_moe


def _unit_factor(fitted: FittedOverheads) -> FittedOverheads:
    """``fitted`` without the vendor MoE factor (every row simulated at factor 1; a pass-time
    factor ``s`` then divides an offline row's throughput by ``s`` exactly)."""
    from dataclasses import replace

    return replace(fitted, vendor_moe_time_scale=1.0)


def _moe_log_ratios(
    rows: list[dict[str, str]],
    sims: dict[str, FloatArray],
    catalog: Catalog,
) -> dict[str, list[float]]:
    """``log(forecast at factor 1 / published)`` of the MoE rows' throughput, by model."""
    from gpuplan.forecast.validation_inference import _num

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
    from gpuplan.errors import GpuplanError

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
    offline table's mixture-of-experts rows (:func:`~gpuplan.forecast.validation_inference.
    fit_time_scale`, robust to odd rows), and the same fitted without each model's rows.

    The TensorRT-LLM 0.17 Mixtral rows run its MoE plugin (CUTLASS grouped GEMMs) and come
    out 15% faster than the dense roofline gives them, at every GPU and TP; the
    InferenceX DeepSeek-R1 runs on NVIDIA parts (SGLang, TensorRT-LLM 1.x) lean the same way.
    The factor multiplies the whole pass time of a MoE model, as the pooled ``moe_time_scale``
    of the Triton engines does.
    """
    from gpuplan.forecast.validation_inference import _catalog_or_default, _q, fit_time_scale

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

    from gpuplan.forecast.validation_inference import (
        _catalog_or_default,
        _HeldOutScores,
        _num,
        _score_points,
    )

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
    by_model: dict[str, list[tuple[float, tuple[float, float, float]]]] = {}
    by_tp: dict[str, list[tuple[float, tuple[float, float, float]]]] = {}
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
        point = metrics.get("throughput")
        if point is not None:
            lo, hi = point["interval_s"]
            p = (point["published_s"], (point["forecast_s"], lo, hi))
            by_model.setdefault(per_row[-1]["model"], []).append(p)
            by_tp.setdefault(f"tp{tp}", []).append(p)
    sources = sorted({r.get("source", "") for r in rows} - {""})
    return {
        "data": str(Path(data) if data else OFFLINE_CSV_PATH.name),
        "source": "; ".join(sources),
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
        "by_model": {k: _score_points(v) for k, v in sorted(by_model.items())},
        "by_tp": {k: _score_points(v) for k, v in sorted(by_tp.items())},
        "rows": per_row,
        "skipped": skipped,
    }
