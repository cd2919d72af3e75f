"""Forecast of LLM serving: latency, throughput, KV cache, memory and fleet size for a load.

:func:`forecast_inference` is the library form of ``gpuplan forecast infer`` and returns
exactly its JSON (DESIGN.md section 3.3). Method (DESIGN.md section 4, "Forecast:
inference"):

* **Prefill** is compute-bound: every GEMM at its real per-GPU shape at the calibrated GEMM
  rate, plus causal attention FLOPs (:mod:`gpuplan.forecast.inference_step`).
* **Decode** streams the weights and the KV cache at the calibrated HBM bandwidth, until
  the batch crosses the roofline and the GEMMs become compute-bound; MoE layers read only
  the experts the batch touches, ``E * (1 - (1 - k/E)**tokens)`` of them.
* **TP** adds all-reduces per layer of small messages, at the calibrated collective time
  (latency-dominated); EP adds all-to-alls, PP a send per stage boundary.
* **Memory**: weights (quantised bytes incl. scales), KV cache
  ``2 * layers * kv_heads * head_dim * bytes`` per token (MLA: the latent), activations of
  one layer, within ``memory_utilization`` of the GPU memory (vLLM's
  ``gpu_memory_utilization`` default, 0.9). ``max_batch`` is what fits.
* **Framework constants** (per-layer and per-step overheads, achieved fractions of the
  calibrated rates) are fitted on the published TensorRT-LLM runs and scored held-out
  (:mod:`gpuplan.forecast.inference_fit`, ``gpuplan validate inference``).
* **Load**: with ``qps`` and TTFT/TPOT targets, replicas come from a discrete-event
  simulation of continuous batching under Poisson arrivals (:mod:`gpuplan.forecast.serving`),
  comparing TP choices, batch caps and GPU types; the cheapest GPU count wins.

Intervals: the calibration's low/high taken together, combined in quadrature (log space)
with the held-out model error quantiles recorded with the fitted constants.

**Serving calibration** (:func:`serving_factors`): when the artifact has ``serve`` probe runs
of the same engine profile on the same device (its ``serving`` section), a single-replica
forecast multiplies TTFT and TPOT by the measured-over-forecast factors of those runs (and
divides throughput by the TPOT factor); the output says so under ``serving_calibration``
and its ``basis`` is then ``measured``. Fleet sizing (``--qps``, and so ``plan``) applies
the same factors of each candidate GPU: the replica model's TTFT and TPOT are multiplied by
them before every SLO check (single-request floor, analytic rates, simulation), and the
sizing result carries ``serving_calibration`` too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from typing import TYPE_CHECKING, TypeAlias, TypedDict, cast

import numpy as np

from gpuplan.catalogs.names import names_every_gpu
from gpuplan.catalogs.schema import ModelArch as CatalogModel
from gpuplan.errors import GpuplanError, InputError
from gpuplan.forecast.hardware import (
    memory_capacity_bytes,
    scale_up_domain,
    server_size,
    within_node,
)
from gpuplan.forecast.inference_arch import (
    Layout,
    MemoryPlan,
    PrecisionSpec,
    Sharded,
    Utilization,
    canonical_precision,
    check_serving_layout,
    divisors,
    memory_share,
    resolve_precision,
    shard,
)
from gpuplan.forecast.inference_fit import FittedOverheads, load_overheads, widen
from gpuplan.forecast.inference_step import (
    DEFAULT_ENGINE,
    FAST,
    SLOW,
    VALUE,
    DeviceRates,
    PassTime,
    SpeculativeStep,
    StepCostModel,
    collective3,
    combine,
    continuous_iteration,
    continuous_passes,
    engine_profile,
    pass_parts,
    prefill_chunks,
    prompts_per_iteration,
    speculative_iteration,
    speculative_passes,
    static_run_parts,
    static_run_passes,
    static_run_time,
)
from gpuplan.forecast.model import ModelArch, ModelRef, arch_from
from gpuplan.forecast.serving import (
    PERCENTILES,
    Candidate,
    LengthDist,
    ReplicaModel,
    SimResult,
    SimSummary,
    check_num_requests,
    simulate,
    simulate_requests,
    size_fleet,
)
from gpuplan.forecast.serving_deviations import serving_caveats
from gpuplan.forecast.speculative import Speculation, draft_sharded
from gpuplan.forecast.speculative import speculation as measured_speculation
from gpuplan.numeric import JSONDict

if TYPE_CHECKING:
    from typing_extensions import NotRequired, Unpack

    from gpuplan.calibration.api import DevicePerf
    from gpuplan.catalogs.catalog import Catalog
    from gpuplan.catalogs.schema import Accelerator

BATCHING_MODES = ("continuous", "static")
#: request lengths of a forecast that is given none (``forecast infer``'s defaults)
DEFAULT_INPUT_TOKENS = 2048
DEFAULT_OUTPUT_TOKENS = 256

#: looks up the calibrated performance of a catalog GPU id (:func:`device_perf_for`)
PerfLookup: TypeAlias = Callable[[str], "DevicePerf"]
#: a model to forecast: a catalog id, a catalog row, an architecture record or a mapping of
#: its fields (:func:`gpuplan.forecast.model.arch_from`)
#: called once per simulated fleet candidate (the CLI's progress line)
Progress: TypeAlias = Callable[[], object]


# ---------------------------------------------------------------------------------------------
# Result records: the shapes of the ``forecast infer`` JSON parts (DESIGN.md section 3.3)
# ---------------------------------------------------------------------------------------------
class CrossNodeTP(TypedDict):
    """What a TP group beyond a GPU's scale-up domain assumes (:func:`check_tp_domain`)."""

    nodes: int
    scale_up_domain: int
    fabric: str
    note: str


class DroppedLayout(TypedDict):
    """A (GPU, layout) the fleet search left out, with the reason (:func:`build_candidates`)."""

    gpu: str
    reason: str
    tp: NotRequired[int]
    pp: NotRequired[int]
    memory_breakdown_bytes: NotRequired[dict[str, float]]


class ServingPoint(TypedDict):
    """One concurrency level of a ``serve`` probe run in the artifact's ``serving`` section
    (its shape checked by :func:`gpuplan.calibration.serving.validate_serving`)."""

    concurrency: int
    input_tokens: int
    output_tokens: int
    #: p10, p50 and p90 of the measured per-request latency (seconds)
    ttft_s: dict[str, float]
    tpot_s: dict[str, float]
    catalog_model: NotRequired[str | None]
    tp: NotRequired[int | None]
    precision: NotRequired[str | None]
    run_id: NotRequired[str | None]
    #: requests of the level that completed (the closed loop's request count)
    completed: NotRequired[int]
    #: the server's speculative decoding over the level (its Prometheus counters)
    speculative: NotRequired[SpecPoint]


class SpecPoint(TypedDict):
    """Speculative decoding a ``serve`` level measured: draft tokens per step and tokens
    emitted per step, and a draft tree's shape where the server ran one
    (:func:`gpuplan.probes.serve_spec.speculative_summary`)."""

    draft_tokens: int
    acceptance_length: float
    tree_width: NotRequired[int]
    verify_tokens: NotRequired[int]


class ServingEntry(TypedDict):
    """The ``serving.<gpu>.<engine>`` entry of an artifact: its points and run ids."""

    points: list[ServingPoint]
    inputs: NotRequired[list[str]]


class Factor(TypedDict):
    """A measured-over-forecast latency factor with its interval."""

    value: float
    low: float
    high: float
    basis: str


class FactorPoint(TypedDict):
    """One serving point compared with its forecast (:func:`serving_factors`)."""

    run_id: str | None
    catalog_model: str | None
    concurrency: int
    measured_ttft_p50_s: float
    forecast_ttft_s: float
    measured_tpot_p50_s: float
    forecast_tpot_s: float
    ttft_ratio: dict[str, float]
    tpot_ratio: dict[str, float]
    #: the level's speculative decoding, forecast with it
    speculative: NotRequired[SpecPoint]


class ServingFactors(TypedDict):
    """What :func:`serving_factors` returns; ``applied`` says whether the factors exist."""

    device: str
    engine: str
    inputs: list[str]
    points: list[FactorPoint]
    skipped: list[str]
    convention: str
    applied: NotRequired[bool]
    reason: NotRequired[str]
    ttft_factor: NotRequired[Factor]
    tpot_factor: NotRequired[Factor]


class ServingCalibration(ServingFactors):
    """A result's ``serving_calibration`` when the factors were applied: the raw latencies
    they scaled and the hardware basis the forecast had before."""

    raw: dict[str, float]
    hardware_basis: str | None


class FleetServingCalibration(ServingCalibration):
    """A sized fleet's ``serving_calibration``: also what the factors were applied to."""

    applied_to: str


class BaseInfo(TypedDict):
    """The request a forecast answers (:func:`_base_info`): model, precision, lengths, engine."""

    model: Mapping[str, object]
    precision: str
    input_tokens: JSONDict
    output_tokens: JSONDict
    batching: str
    engine: str
    engine_profile: Mapping[str, object]
    framework_constants: Mapping[str, object]


class _ReplicaExtras(TypedDict, total=False):
    """The keys a replica's forecast has only in some cases."""

    #: data-parallel attention ranks of a wide-EP replica
    dp_attention: int
    #: what a replica spanning nodes assumes (:func:`multi_node_info`)
    multi_node: JSONDict
    #: TP over the PCIe cards of one server (:func:`pcie_tp_info`)
    pcie_tp: JSONDict
    cross_node_tp: CrossNodeTP
    serving_calibration: ServingFactors | ServingCalibration
    #: published runs known to be slower than this forecast (:mod:`.serving_deviations`)
    caveats: list[str]
    #: speculative decoding: draft tokens, acceptance length and, for one replica, the
    #: step's passes (:mod:`gpuplan.forecast.speculative`)
    speculative: JSONDict


class _FleetExtras(_ReplicaExtras, total=False):
    """The keys a sized fleet has only in some cases."""

    disaggregated: Disaggregated
    sized_from: str


def _dp_attention(dp: int) -> _ReplicaExtras:
    """``dp_attention`` of a wide-EP replica (data-parallel attention ranks), else nothing."""
    return {"dp_attention": dp} if dp > 1 else {}


def _multi_node(info: JSONDict | None) -> _FleetExtras:
    """``multi_node`` of a replica spanning nodes (:func:`multi_node_info`), else nothing."""
    return {"multi_node": info} if info else {}


def _pcie_tp(info: JSONDict | None) -> _FleetExtras:
    """``pcie_tp`` of a replica with TP over PCIe cards (:func:`pcie_tp_info`), else nothing."""
    return {"pcie_tp": info} if info else {}


class LayoutResult(_ReplicaExtras):
    """One replica's forecast at no load (:func:`_single_layout`); ``_rates`` and
    ``_memory`` are the device model and memory plan, dropped before the JSON leaves."""

    ttft_s: float
    tpot_s: float
    throughput_output_tokens_per_s: float
    throughput_output_tokens_per_s_per_gpu: float
    batch: int
    batch_running: int
    batch_note: str | None
    max_batch: int
    kv_cache_bytes_per_token: float
    #: a sliding-window or chunked model's local layers' KV per sequence at most, whole
    #: model (0 for others)
    kv_cache_window_bytes_per_sequence: float
    kv_cache_bytes_per_token_per_gpu: float
    memory_per_gpu_bytes: float
    fits_in_memory: bool
    bottleneck: str
    intervals: dict[str, list[float]]
    tp: int
    pp: int
    ep: int
    gpus_per_replica: int
    memory_breakdown_bytes: dict[str, float]
    breakdown_s: dict[str, dict[str, float]]
    pp_hop_decode_s: float
    static_batch: dict[str, float]
    _rates: NotRequired[DeviceRates]
    _memory: NotRequired[MemoryPlan]


class InferenceResult(BaseInfo, LayoutResult):
    """The ``forecast infer`` JSON of one replica (:func:`forecast_inference` without qps)."""

    gpu: str
    basis: str | None
    precision_detail: str
    #: the token budget of one scheduler step forecast (given, or the engine's default on
    #: this GPU: ``engine_profile.chunk_rule``)
    chunk_tokens: int


class ClosedLoopResult(InferenceResult):
    """``forecast infer --concurrency C``: the replica's forecast and its closed-loop run."""

    closed_loop: ClosedLoop


class PoolInfo(TypedDict):
    """One pool of a disaggregated fleet (:func:`size_disaggregated`)."""

    tp: int
    pp: int
    ep: int
    batch_cap: int
    gpus_per_replica: int
    replicas: int
    num_gpus: int
    qps_per_replica: float
    ttft_s: float
    tpot_s: float | None
    mean_running_requests: float


class DecodePool(PoolInfo):
    admission_wait_s: float


class Disaggregated(TypedDict, total=False):
    """Separate prefill and decode pools (:func:`size_disaggregated`); only ``num_gpus``
    (None) and ``reason`` when no such fleet meets the SLOs."""

    method: str
    gpu: str
    slo_percentile: str
    prefill: PoolInfo
    decode: DecodePool
    prefill_decode_gpu_ratio: float
    kv_transfer: dict[str, float | str]
    ttft_s: float
    tpot_s: float
    ttft_note: str
    num_gpus: int | None
    reason: str
    usd_per_hour: float | None
    usd_per_million_output_tokens: float | None
    cost_derivation: str | None
    colocated_num_gpus: int
    colocated_usd_per_hour: float | None
    verdict: str


class FleetResult(BaseInfo, _FleetExtras):
    """The ``forecast infer --qps`` JSON: the fleet sized for a load (:func:`size_serving_fleet`)."""

    gpu: str
    basis: str | None
    ttft_s: float
    tpot_s: float
    throughput_output_tokens_per_s: float
    throughput_output_tokens_per_s_per_gpu: float
    batch: int
    max_batch: int
    kv_cache_bytes_per_token: float
    #: a sliding-window or chunked model's local layers' KV per sequence at most, whole
    #: model (0 for others)
    kv_cache_window_bytes_per_sequence: float
    kv_cache_bytes_per_token_per_gpu: float
    memory_per_gpu_bytes: float
    fits_in_memory: bool
    bottleneck: str
    intervals: dict[str, list[float] | None]
    tp: int
    pp: int
    ep: int
    gpus_per_replica: int
    replicas: int
    num_gpus: int
    usd_per_hour: float | None
    price_source: str | None
    usd_per_million_output_tokens: float | None
    cost_derivation: str | None
    memory_breakdown_bytes: dict[str, float]
    load: dict[str, float | str | None]
    simulation: Mapping[str, object]
    ranked_by: str
    #: GPUs of the comparison without a catalog price when others have one: their layouts
    #: rank after every priced one, by GPU count (empty otherwise)
    unpriced_gpus: list[str]
    #: one row per (GPU, layout): :meth:`Candidate.as_dict` with its cost, or a dropped layout
    candidates: list[dict[str, object]]


_PERF_CACHE: dict[tuple[str, str | int | None], tuple[object, DevicePerf]] = {}


def device_perf_for(gpu_id: str, artifact: object = None) -> DevicePerf:
    """The calibrated :class:`DevicePerf` of a catalog GPU (default artifact when None),
    cached per GPU and artifact (path, or the dict's identity) for repeated forecasts."""
    from gpuplan.calibration import device_perf

    key = (gpu_id, artifact if artifact is None or isinstance(artifact, str) else id(artifact))
    hit = _PERF_CACHE.get(key)
    if hit is None or (not isinstance(key[1], (str, type(None))) and hit[0] is not artifact):
        if len(_PERF_CACHE) > 64:
            _PERF_CACHE.clear()
        hit = (artifact, device_perf(gpu_id, artifact=artifact))
        _PERF_CACHE[key] = hit
    return hit[1]


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------
def model_with_provenance(model: ModelRef, catalog: Catalog) -> tuple[ModelArch, JSONDict]:
    """An :class:`ModelArch` and its provenance from a catalog id, a catalog row, a dict or an arch."""
    if isinstance(model, str):
        model = catalog.model(model)
    arch = arch_from(model)
    if isinstance(model, CatalogModel):
        # the catalog's own count (biases, QK-norm and router biases included)
        info: JSONDict = {"id": model.id, "source": model.source}
        total, active = float(model.params_total()), float(model.params_active())
    elif isinstance(model, dict):
        info = {"id": arch.name, "source": model.get("source", "given architecture")}
        given_total, given_active = model.get("params_total"), model.get("params_active")
        total = float(given_total) if given_total is not None else float(arch.params_total())
        active = float(given_active) if given_active is not None else float(arch.params_active())
    else:
        info = {"id": arch.name, "source": getattr(model, "source", None) or "given architecture"}
        total, active = float(arch.params_total()), float(arch.params_active())
    info["params_total"] = total
    info["params_active"] = active
    return arch, info


def _gpu_list(gpu: str | Sequence[str]) -> list[str]:
    if isinstance(gpu, (list, tuple)):
        names = [str(g).strip() for g in gpu]
    else:
        # a comma inside parentheses belongs to the name ("B300 SXM 288GB (HGX/DGX B300,
        # Blackwell Ultra)"), the others separate GPUs
        names = [g.strip() for g in re.split(r",(?![^()]*\))", str(gpu))]
    names = [n for n in names if n]
    if not names:
        raise InputError("no GPU given", hint="use --gpu h100 (or several: --gpu h100,h200,a100)")
    return names


def _catalog_gpus(names: Sequence[str], catalog: Catalog) -> list[str]:
    """``names``, or for ``all`` every catalog accelerator the serving model can price (its
    memory and its bandwidth): a fleet comparison across the whole catalog."""
    if not names_every_gpu(names):
        return list(names)
    return [g.id for g in catalog.gpus if g.memory_bytes and g.memory_bandwidth_bytes_per_s]


def _positive_int(name: str, value: float | str) -> int:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise InputError(f"--{name} must be an integer, got {value!r}") from None
    if not (math.isfinite(f) and f >= 1 and f == int(f)):
        raise InputError(f"--{name} must be a positive integer, got {value!r}")
    return int(f)


def _positive(name: str, value: float | str | None) -> float | None:
    if value is None:
        return None
    v = float(value)
    if not (v > 0 and math.isfinite(v)):
        raise InputError(f"--{name} must be a positive number, got {value!r}")
    return v


def usd_per_gpu_hour(catalog: Catalog, gpu_id: str) -> tuple[float | None, str | None]:
    """Cheapest published on-demand price per GPU-hour of any instance with this GPU."""
    best: tuple[float | None, str | None] = (None, None)
    for inst in getattr(catalog, "instances", []) or []:
        if getattr(inst, "accelerator_id", None) != gpu_id:
            continue
        price = inst.price("on_demand") if hasattr(inst, "price") else None
        if price is None:
            continue
        per = price.usd_per_hour / inst.accelerators_per_node
        if best[0] is None or per < best[0]:
            best = (per, f"{inst.id} on-demand {price.region or ''} {price.as_of} ({price.source})")
    return best


# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------


def memory_plan(
    sh: Sharded,
    gpu: Accelerator,
    *,
    tokens_in_pass: float,
    rows: float,
    utilization: Utilization,
    speculation: Speculation | None = None,
    step_budget: float | None = None,
) -> MemoryPlan:
    """The replica's memory per GPU; with ``speculation``, the draft head's weights too
    (``draft_layers`` of the stage's average transformer layer), or a separate draft
    model's weights and KV cache (:func:`~gpuplan.forecast.speculative.draft_sharded`; its
    KV per token joins the target's, since every sequence is cached in both).
    ``step_budget``: the engine's tokens per step (default ``tokens_in_pass``), which an
    engine's own memory default may depend on (SGLang's reserve for a prefill chunk)."""
    cap = memory_capacity_bytes(gpu)
    draft = draft_kv = 0.0
    dsh = draft_sharded(sh, speculation)
    if dsh is not None:
        draft = dsh.weight_bytes_per_gpu
        draft_kv = dsh.kv_bytes_per_token_per_gpu()
    elif speculation is not None:
        wb = sh.weight_breakdown_bytes
        per_layer = (wb.get("attention", 0.0) + wb.get("mlp", 0.0)) / max(sh.layers_per_stage, 1)
        draft = speculation.draft_layers * per_layer
    weights = sh.weight_bytes_per_gpu + draft
    activations = float(sh.activation_bytes_peak(tokens_in_pass, rows))
    return MemoryPlan(
        capacity_bytes=cap,
        usable_bytes=memory_share(utilization).usable_bytes(
            cap,
            weights + activations,
            activations,
            chunk_tokens=tokens_in_pass if step_budget is None else step_budget,
            # the engine's tensor-parallel size: a stage's GPUs, data-parallel attention
            # ranks included (SGLang's tp_size under --enable-dp-attention)
            tp=sh.layout.gpus // max(sh.layout.pp, 1),
            pp=sh.layout.pp,
        ),
        weights_bytes=weights,
        activation_bytes=activations,
        kv_bytes_per_token=sh.kv_bytes_per_token_per_gpu() + draft_kv,
        state_bytes_per_seq=sh.state_bytes_per_seq_gpu(),
        window_kv_bytes_per_token=sh.window_kv_bytes_per_token_gpu(),
        kv_window=sh.kv_window or 0.0,
    )


def continuous_memory_plan(
    sh: Sharded,
    gpu: Accelerator,
    *,
    chunk_tokens: float,
    utilization: Utilization,
    speculation: Speculation | None = None,
    max_sequences: int | None = None,
) -> MemoryPlan:
    """The memory a continuous-batching replica plans for: the activations of a full
    prefill chunk of ``chunk_tokens`` tokens beside the weights; the rest holds KV cache.

    A pass computes logits only for the last token of each sequence in it (each verified
    position with ``speculation``), so the fp32 logits are for at most ``max_sequences``
    sequences, the engine's running cap, as vLLM's memory profile samples them (V0
    ``ModelRunner.profile_run`` with ``max_num_seqs`` sequences; V1 ``_dummy_sampler_run``
    over one row per request, ``min(max_num_tokens, max_num_reqs)`` requests). Without a
    cap (None) every token of the chunk may be a sequence of its own: a decode batch of
    that many."""
    rows = float(chunk_tokens)
    if max_sequences is not None:
        per_seq = speculation.queries if speculation is not None else 1
        rows = min(rows, float(max_sequences * per_seq))
    return memory_plan(
        sh,
        gpu,
        tokens_in_pass=chunk_tokens,
        rows=rows,
        utilization=utilization,
        speculation=speculation,
    )


def logit_sequences(engine: str, gpu: Accelerator, batch: int | None = None) -> int | None:
    """The sequences whose logits a replica of ``engine`` on ``gpu`` sets memory aside for
    (:func:`continuous_memory_plan`), for an engine that profiles them per sequence
    (:attr:`~gpuplan.forecast.inference_step.EngineProfile.profiles_logits_per_sequence`):
    ``batch`` when the replica runs with that cap (``max_num_seqs``), else the engine's
    default running cap on ``gpu``. None (a whole chunk of rows) for other engines."""
    prof = engine_profile(engine)
    if not prof.profiles_logits_per_sequence:
        return None
    return batch if batch is not None else prof.running_cap(gpu)


def longest_request_tokens(inputs: LengthDist, outputs: LengthDist) -> float:
    """The tokens of the longest request a replica must hold: prompt and answer at their
    99.9th percentiles (a replica that cannot cache it is not kept)."""
    return float(inputs.quantile(0.999) + outputs.quantile(0.999))


def _fmt_gib(x: float) -> str:
    return f"{x / 2**30:.1f} GiB"


def tp_options(arch: ModelArch, gpu: Accelerator, ep: int = 1, pp: int = 1) -> list[int]:
    """TP degrees to consider: powers of two dividing the heads, within one node (the
    scale-up domain, or the PCIe server of cards without one: :func:`server_size`)."""
    domain = server_size(gpu)
    out = []
    t = 1
    while t <= max(domain // max(pp, 1), 1):
        if arch.heads % t == 0 and t % ep == 0:
            out.append(t)
        t *= 2
    return out or [1]


def smallest_fitting_tp(
    arch: ModelArch,
    gpu: Accelerator,
    prec: PrecisionSpec,
    *,
    pp: int,
    ep: int,
    request_tokens: float,
    chunk: float,
    utilization: Utilization,
) -> int | None:
    """The smallest TP (a divisor of the heads, a multiple of ``ep``) that holds one request
    (:func:`fits_one_request`); None when none does."""
    for t in [d for d in divisors(arch.heads) if d % ep == 0]:
        layout = Layout(t, pp, ep)
        if fits_one_request(
            arch,
            gpu,
            prec,
            layout,
            request_tokens=request_tokens,
            chunk=chunk,
            utilization=utilization,
        ):
            return t
    return None


def fits_one_request(
    arch: ModelArch,
    gpu: Accelerator,
    prec: PrecisionSpec,
    layout: Layout,
    *,
    request_tokens: float,
    chunk: float,
    utilization: Utilization,
) -> bool:
    """Whether ``layout`` holds the weights, one pass's activations and one request's KV."""
    sh = shard(arch, layout, prec)
    mp = memory_plan(
        sh,
        gpu,
        tokens_in_pass=min(chunk, request_tokens),
        rows=1,
        utilization=utilization,
        step_budget=chunk,
    )
    return mp.kv_capacity_tokens >= request_tokens


#: most nodes one replica may span when a layout is searched (a fixed ``--nodes`` may be more)
MAX_AUTO_NODES = 8
#: ... or, on machines smaller than an 8-GPU node (one GH200 superchip, a one-GPU VM), as many
#: nodes as make this many GPUs: the 64 GPUs of 8 HGX nodes
MAX_AUTO_REPLICA_GPUS = 64


def auto_node_counts(domain: int) -> range:
    """Node counts a searched multi-node replica may take on nodes of ``domain`` GPUs: 2 up
    to :data:`MAX_AUTO_NODES`, or up to :data:`MAX_AUTO_REPLICA_GPUS` GPUs on small nodes."""
    return range(2, max(MAX_AUTO_NODES, MAX_AUTO_REPLICA_GPUS // max(domain, 1)) + 1)


def multi_node_layout(
    arch: ModelArch,
    gpu: Accelerator,
    prec: PrecisionSpec,
    *,
    ep: int,
    request_tokens: float,
    chunk: float,
    utilization: Utilization,
    nodes: int | None = None,
    tp: int | None = None,
) -> Layout | None:
    """The smallest replica over whole nodes that holds the model: TP inside each node's
    scale-up domain, pipeline stages across nodes.

    Tensor parallelism all-reduces twice per layer and stays inside the scale-up domain;
    pipeline parallelism sends one activation per stage boundary and is the parallelism to
    cross nodes with (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
    on GPU Clusters Using Megatron-LM", section 3.3; the same split vLLM documents for
    multi-node serving: tensor_parallel_size = GPUs per node, pipeline_parallel_size =
    nodes, https://docs.vllm.ai/en/latest/serving/distributed_serving.html). ``nodes`` fixes
    the node count; None takes the fewest nodes (:func:`auto_node_counts`) that fit.
    Returns None when no such layout fits.
    """
    domain = server_size(gpu)
    t = tp or max((d for d in divisors(arch.heads) if d <= domain and d % ep == 0), default=1)
    counts = [nodes] if nodes is not None else list(auto_node_counts(domain))
    for n in counts:
        if (n * domain) % t:
            continue
        pp = n * domain // t
        if pp > arch.layers:
            continue
        lay = Layout(t, pp, ep)
        if nodes is not None or fits_one_request(
            arch,
            gpu,
            prec,
            lay,
            request_tokens=request_tokens,
            chunk=chunk,
            utilization=utilization,
        ):
            return lay
    return None


def wide_ep_layout(ep: int) -> Layout:
    """Wide expert parallelism over ``ep`` GPUs with data-parallel attention (each GPU a TP-1
    attention rank with its own requests; the experts spread over all ``ep``): SGLang's
    ``--enable-dp-attention --ep-size N`` (https://docs.sglang.ai/advanced_features/
    expert_parallelism.html) and the DeepSeek-V3 technical report's decoding deployment
    (section 3.4.2); the dispatch and combine all-to-alls per MoE layer cross nodes when
    ``ep`` exceeds the scale-up domain (DeepEP; NVIDIA Dynamo's wide-EP recipes)."""
    return Layout(1, 1, ep, dp=ep)


def multi_node_info(
    layout: Layout, gpu: Accelerator, hop_s: float | None = None
) -> JSONDict | None:
    """What a replica spanning nodes assumes (None inside one node: a scale-up domain, or a
    PCIe server for cards without one, :func:`server_size`)."""
    domain = server_size(gpu)
    if layout.gpus <= domain:
        return None
    nodes = math.ceil(layout.gpus / domain)
    if layout.dp > 1:
        return {
            "nodes": nodes,
            "scale_up_domain": domain,
            "wide_ep": True,
            "tp_inside_node": True,
            "fabric": "scale-out network between the nodes (calibrated inter-node all-to-all)",
            "note": (
                f"wide expert parallelism over {layout.ep} GPUs on {nodes} nodes: attention "
                "data-parallel on every GPU (its own requests and KV cache), the experts spread "
                "over all; each MoE layer dispatches and combines its tokens by all-to-all over "
                "the scale-out fabric. Per-GPU figures average over balanced ranks: a lone "
                "request's prefill runs on one rank, so TTFT at low load is optimistic"
            ),
        }
    stages_per_node = max(1, domain // layout.tp)
    boundaries = max(0, min(layout.pp - 1, nodes - 1)) if layout.tp <= domain else 0
    out: JSONDict = {
        "nodes": nodes,
        "scale_up_domain": scale_up_domain(gpu),
        "gpus_per_node": domain,
        "tp_inside_node": layout.tp <= domain,
        "pp_stages_per_node": stages_per_node if layout.tp <= domain else None,
        "pp_boundaries_across_nodes": boundaries,
        "fabric": "scale-out network between the nodes (calibrated inter-node point-to-point)",
        "note": (
            f"one replica spans {nodes} nodes of {domain} GPUs: TP {layout.tp} inside each node, "
            f"{layout.pp} pipeline stages, each stage boundary sends the activations of the "
            "pass's tokens (hidden x activation bytes per token) over the scale-out fabric; "
            "a decode batch smaller than the stage count leaves stages idle (pipeline bubble)"
            if layout.tp <= domain
            else f"TP {layout.tp} spans {nodes} nodes: every TP all-reduce crosses the network"
        ),
    }
    if hop_s is not None:
        out["pp_hop_decode_s"] = hop_s
    return out


def no_fit_error(
    arch: ModelArch,
    gpu: Accelerator,
    prec: PrecisionSpec,
    layout: Layout,
    mp: MemoryPlan,
    request_tokens: float,
    chunk: float,
    utilization: Utilization,
    draft: Sharded | None = None,
) -> InputError:
    """The one-line error for a model that does not fit even at batch 1 (``draft``: a
    separate draft model's split, whose weights and KV the plan holds too)."""
    need = mp.weights_bytes + mp.activation_bytes + request_tokens * mp.kv_bytes_per_token
    smallest = smallest_fitting_tp(
        arch,
        gpu,
        prec,
        pp=layout.pp,
        ep=layout.ep,
        request_tokens=request_tokens,
        chunk=chunk,
        utilization=utilization,
    )
    domain = server_size(gpu)
    if smallest is None:
        hint = (
            f"no TP up to {arch.heads} fits with pp={layout.pp}: add pipeline stages (--pp), "
            "a smaller --precision, or a GPU with more memory"
        )
    elif smallest * layout.pp > domain:
        hint = f"the smallest TP that fits is {smallest} (more than the {domain}-GPU scale-up domain); consider --pp or a smaller --precision"
    else:
        hint = f"the smallest TP that fits is --tp {smallest}"
    if draft is not None:
        hint = f"a smaller draft model (without one: {hint})"
    with_draft = (
        f" (with the draft model {draft.arch.name}'s {_fmt_gib(draft.weight_bytes_per_gpu)})"
        if draft is not None
        else ""
    )
    return InputError(
        f"{arch.name} at {prec.name} does not fit on {getattr(gpu, 'id', gpu)} with "
        f"tp={layout.tp} pp={layout.pp} even at batch 1: per GPU weights {_fmt_gib(mp.weights_bytes)}{with_draft} + "
        f"activations {_fmt_gib(mp.activation_bytes)} + KV of one {int(request_tokens)}-token request "
        f"{_fmt_gib(request_tokens * mp.kv_bytes_per_token)} = {_fmt_gib(need)} > usable "
        f"{_fmt_gib(mp.usable_bytes)} ("
        f"{memory_share(utilization).describe(mp.capacity_bytes, mp.weights_bytes + mp.activation_bytes, chunk_tokens=chunk, tp=layout.tp, pp=layout.pp)})",
        hint=hint,
    )


# ---------------------------------------------------------------------------------------------
# One layout, no load
# ---------------------------------------------------------------------------------------------
def _interval(
    value: float, low: float, high: float, q: tuple[float, float], *, is_time: bool
) -> list[float]:
    """[low, high] for a forecast: calibration interval widened by the held-out model error."""
    lo, hi = widen(value, low, high, *q)
    return [float(lo), float(hi)]


def _best_batch(
    cost: StepCostModel,
    prompt: float,
    answer: float,
    max_batch: int,
    mode: str,
    coef: float,
    chunk_tokens: float,
) -> int:
    """Batch with the highest output throughput (vectorised over 1..max_batch); continuous
    batching takes the mean iteration of :func:`continuous_iteration` (whole prompt chunks, a
    Poisson count per iteration)."""
    b = np.arange(1, max(max_batch, 1) + 1, dtype=float)
    ctx = prompt + answer / 2.0
    if mode == "static":
        ttft = cost.time(b * prompt, b, 0.0, b * coef * prompt**2 / 2.0, b * prompt)
        tpot = cost.time(b, b, b * ctx)
        thr = b * answer / (ttft + max(answer - 1, 0) * tpot)
    else:
        m, c = prefill_chunks(prompt, chunk_tokens)
        k, w = prompts_per_iteration(b / max(answer, 1.0) * m)
        rows = b[:, None]
        t = cost.time(rows + k * c, rows, rows * ctx, k * coef * prompt**2 / 2.0 / m, k * c)
        thr = b / (w * t).sum(axis=1)
    return int(b[int(np.argmax(thr))])


def _single_layout(
    *,
    arch: ModelArch,
    gpu: Accelerator,
    perf: DevicePerf,
    prec: PrecisionSpec,
    layout: Layout,
    fitted: FittedOverheads,
    input_tokens: int,
    output_tokens: int,
    batch: int | None,
    max_throughput: bool,
    batching: str,
    chunk_tokens: int,
    utilization: Utilization,
    engine: str = "modern",
    speculation: Speculation | None = None,
) -> LayoutResult:
    params = fitted.params_for(engine, arch.is_moe)
    sh = shard(arch, layout, prec)
    rates = DeviceRates(perf, gpu, sh, engine=engine, speculation=speculation)
    spec_step: SpeculativeStep | None = None
    req = float(input_tokens + output_tokens)
    static = batching == "static"
    # memory: continuous batching prefills at most a chunk per iteration
    mp1 = memory_plan(
        sh,
        gpu,
        tokens_in_pass=min(chunk_tokens, input_tokens) if not static else input_tokens,
        rows=1,
        utilization=utilization,
        speculation=speculation,
        step_budget=chunk_tokens,
    )
    if mp1.kv_capacity_tokens < req:
        raise no_fit_error(
            arch,
            gpu,
            prec,
            layout,
            mp1,
            req,
            chunk_tokens,
            utilization,
            draft_sharded(sh, speculation),
        )
    if static:
        per_req = (
            float(sh.kv_bytes_per_seq_gpu(req))
            + sh.state_bytes_per_seq_gpu()
            + float(sh.activation_bytes_peak(input_tokens, 1))
        )
        budget = mp1.usable_bytes - mp1.weights_bytes
        max_batch = int(budget // per_req)
    else:
        mp_chunk = continuous_memory_plan(
            sh,
            gpu,
            chunk_tokens=chunk_tokens,
            utilization=utilization,
            speculation=speculation,
            max_sequences=logit_sequences(engine, gpu),
        )
        max_batch = max(mp_chunk.max_batch(req), 1) if mp_chunk.kv_capacity_tokens >= req else 1
    coef = float(sh.attention_flops_prefill(1.0, 0.0)) * 2.0  # coef * s**2/2 = prefill FLOPs
    sched_note = None
    if max_throughput:
        # the engine's scheduler runs at most its default cap at once (vLLM max_num_seqs):
        # the search stops there, as a run at the engine's defaults does; an explicit
        # --batch is the user's own cap and is not held to it
        sched = None if static else engine_profile(engine).running_cap(gpu)
        search_cap = min(max_batch, sched) if sched else max_batch
        top_tokens = max_batch * input_tokens if static else chunk_tokens + search_cap
        cost = StepCostModel.build(
            rates, params, max_tokens=max(top_tokens, 2), typical_prompt=input_tokens
        )
        batch = _best_batch(
            cost, input_tokens, output_tokens, search_cap, batching, coef, chunk_tokens
        )
        if search_cap < max_batch and batch == search_cap:
            sched_note = (
                f"{engine} runs at most {search_cap} requests at once by default (its "
                f"max_num_seqs on {gpu.id}); memory holds {max_batch}: pass --batch to "
                "forecast a larger cap"
            )
    elif batch is None:
        batch = 1
    # The engine holds only the KV caches that fit: a larger batch runs max_batch requests
    # at a time and the rest wait (vLLM's scheduler admits a request when its KV blocks are
    # free; TensorRT-LLM's capacity scheduler likewise), so throughput and TPOT are those
    # of the running batch; a static batch runs in waves.
    b_req = int(batch)
    b = min(b_req, max(int(max_batch), 1))
    pp = layout.pp
    # the running batch is split into pp micro-batches, one per stage in flight; with
    # fewer requests than stages a micro-batch is one request and stages idle (decode
    # pipeline bubble): TPOT = pp stage passes of max(b / pp, 1) rows + the hops
    mb_rows = max(b / pp, 1.0)
    # every pass this forecast prices, its GEMMs and collectives in one call each
    passes = static_run_passes(pp, b, input_tokens)
    if not static:
        passes += (
            speculative_passes(mb_rows, input_tokens, output_tokens, chunk_tokens, speculation)
            if speculation is not None
            else continuous_passes(mb_rows, input_tokens, output_tokens, chunk_tokens)
        )
        passes.append((mb_rows + min(input_tokens, chunk_tokens), mb_rows + 1))  # prompt_pass
    rates.prime(passes)
    run = static_run_parts(rates, b, input_tokens, output_tokens)
    st = static_run_time(run, params)
    if static:
        ttft3, tpot3, thr3 = st.ttft_s, st.tpot_s, st.throughput_tokens_per_s
        if b_req > b:
            full, last = divmod(b_req, b)
            total3 = full * st.total_s
            if last:
                total3 = (
                    total3
                    + static_run_time(
                        static_run_parts(rates, last, input_tokens, output_tokens), params
                    ).total_s
                )
            thr3 = b_req * output_tokens / total3
        mem_pass = b * input_tokens
        phase_ttft, phase_tpot = st.prefill, st.decode
        hop_dec = run.hop_decode_s
    else:
        if speculation is not None:  # per emitted token: the step over its tokens
            it, hop, spec_step = speculative_iteration(
                rates, params, mb_rows, input_tokens, output_tokens, chunk_tokens
            )
        else:
            it, hop = continuous_iteration(
                rates, params, mb_rows, input_tokens, output_tokens, chunk_tokens
            )
        # a speculative step's hops carry its tau tokens: per emitted token, 1/tau of them
        hop_per_token = hop / speculation.acceptance_length if speculation is not None else hop
        tpot3 = pp * it.total_s + (pp - 1) * hop_per_token
        thr3 = b / tpot3
        # a new request: wait for the running iteration, then the iterations holding its
        # prompt, one chunk each. The chunks' causal attention adds up to the whole prompt's
        # (chunk i of c tokens attends to i*c cached ones: sum = s**2/2, FlashAttention
        # counts), so each carries 1/chunks of it and of the KV written, not all of it.
        chunks = math.ceil(input_tokens / chunk_tokens)
        mean_ctx = input_tokens + output_tokens / 2

        def prompt_pass(r: DeviceRates) -> PassTime:
            """The iteration holding one chunk of the new prompt, on ``r``'s model."""
            s = r.sharded
            parts, _ = pass_parts(
                r,
                tokens=mb_rows + min(input_tokens, chunk_tokens),
                logit_rows=mb_rows + 1,
                attn_flops=float(
                    s.attention_flops_prefill(input_tokens) / chunks
                    + s.decode_attention_flops(mb_rows, mean_ctx, output_tokens / 2)
                ),
                attn_bytes=input_tokens / chunks * s.kv_bytes_per_ctx_token_stage(),
                kv_read_bytes=s.decode_kv_read_bytes(mb_rows, mean_ctx, output_tokens / 2),
                index_flops=mb_rows * mean_ctx * s.index_flops_per_ctx_token(),
                index_prefill=(
                    float(s.index_flops_prefill(input_tokens)) / chunks,
                    min(input_tokens, chunk_tokens),
                ),
                attn_shape=(input_tokens, input_tokens, s.arch.qk_head_dim),
            )
            return combine(parts, params)

        first = prompt_pass(rates)
        # a separate draft model runs over the prompt too (its own KV cache)
        draft_first = prompt_pass(rates.draft).total_s if rates.draft is not None else 0.0
        ttft3 = (
            0.5 * tpot3
            + chunks * (pp * first.total_s + (pp - 1) * hop + draft_first)
            + params.frontend_s_per_request
        )
        mem_pass = min(chunk_tokens, b + input_tokens)
        phase_ttft, phase_tpot = first, it
        hop_dec = hop
    mp = memory_plan(
        sh,
        gpu,
        tokens_in_pass=mem_pass,
        rows=b,
        utilization=utilization,
        speculation=speculation,
        step_budget=chunk_tokens,
    )
    kv_tokens = b * req
    mb = mp.breakdown(kv_tokens, b)
    fits = mb["total"] <= mp.usable_bytes and b_req <= b
    gpus = layout.gpus
    q_thr = fitted.interval_quantiles("throughput_per_gpu", engine, arch.is_moe)
    q_ttft = fitted.interval_quantiles("ttft", engine, arch.is_moe)
    # TPOT's own where measured, else the throughput's mirrored (throughput = batch / TPOT)
    q_tpot = fitted.interval_quantiles("tpot", engine, arch.is_moe)
    ttft = float(ttft3[VALUE])
    tpot = float(tpot3[VALUE])
    thr = float(thr3[VALUE])
    # which phase dominates a request decides the bottleneck
    decode_share = (output_tokens - 1) * tpot
    bottleneck = phase_tpot.bottleneck if decode_share >= ttft else phase_ttft.bottleneck
    intervals = {
        "ttft_s": _interval(ttft, float(ttft3[FAST]), float(ttft3[SLOW]), q_ttft, is_time=True),
        "tpot_s": _interval(tpot, float(tpot3[FAST]), float(tpot3[SLOW]), q_tpot, is_time=True),
        "throughput_output_tokens_per_s": _interval(
            thr, float(thr3[SLOW]), float(thr3[FAST]), q_thr, is_time=False
        ),
    }
    intervals["throughput_output_tokens_per_s_per_gpu"] = [
        v / gpus for v in intervals["throughput_output_tokens_per_s"]
    ]
    return {
        "ttft_s": ttft,
        "tpot_s": tpot,
        "throughput_output_tokens_per_s": thr,
        "throughput_output_tokens_per_s_per_gpu": thr / gpus,
        "batch": b_req,
        "batch_running": b,
        "batch_note": sched_note
        if b_req <= b
        else (
            f"a batch of {b_req} does not fit: the KV cache holds {b} requests of "
            f"{int(req)} tokens, so {b} run at a time and the rest wait"
        ),
        "max_batch": int(max_batch),
        "kv_cache_bytes_per_token": sh.model_kv_bytes_per_token(),
        "kv_cache_window_bytes_per_sequence": sh.model_window_kv_bytes_per_seq(),
        "kv_cache_bytes_per_token_per_gpu": sh.kv_bytes_per_token_per_gpu(),
        "memory_per_gpu_bytes": mb["total"],
        "fits_in_memory": bool(fits),
        "bottleneck": bottleneck,
        "intervals": intervals,
        "tp": layout.tp,
        "pp": layout.pp,
        "ep": layout.ep,
        **_dp_attention(layout.dp),
        "gpus_per_replica": gpus,
        "memory_breakdown_bytes": mb,
        "breakdown_s": {
            "first_token": {**phase_ttft.breakdown(), "total": float(phase_ttft.total_s[VALUE])},
            "decode_step": {**phase_tpot.breakdown(), "total": float(phase_tpot.total_s[VALUE])},
        },
        # one activation send between two stages per decode step (0 without PP)
        "pp_hop_decode_s": float(np.asarray(hop_dec)[VALUE]) if layout.pp > 1 else 0.0,
        "static_batch": {
            "ttft_s": float(st.ttft_s[VALUE]),
            "tpot_s": float(st.tpot_s[VALUE]),
            "throughput_output_tokens_per_s": float(st.throughput_tokens_per_s[VALUE]),
            "request_latency_s": float(st.total_s[VALUE]),
        },
        **_speculative(speculation, spec_step, sh),
        "_rates": rates,
        "_memory": mp,
    }


def _speculative(
    spec: Speculation | None, step: SpeculativeStep | None = None, sh: Sharded | None = None
) -> _ReplicaExtras:
    """``speculative`` of a forecast with speculative decoding (its settings and, for one
    replica, the step's passes per GPU stage, and a separate draft model's split and memory
    per GPU), else nothing."""
    if spec is None:
        return {}
    out: JSONDict = spec.as_dict()
    if step is not None:
        out.update(step.as_dict())
    dsh = draft_sharded(sh, spec) if sh is not None else None
    if dsh is not None:
        out["draft_tp"] = dsh.layout.tp
        out["draft_weights_bytes_per_gpu"] = dsh.weight_bytes_per_gpu
        out["draft_kv_cache_bytes_per_token_per_gpu"] = dsh.kv_bytes_per_token_per_gpu()
    out["method"] = (
        "per emitted token: (verification pass over draft tokens + 1 per request + "
        "draft passes) / acceptance length; Leviathan et al. 2023 (arXiv 2211.17192)"
    )
    return {"speculative": out}


#: what the closed-loop client of ``forecast infer --concurrency`` is, in the benchmarks' terms
CLOSED_LOOP_CLIENT = (
    "closed loop: {c} requests in flight, the next sent when one finishes (vLLM "
    "benchmark_serving --max-concurrency {c} --request-rate inf; genai-perf --concurrency {c}); "
    "TTFT from the send, TPOT = (latency - TTFT) / (output tokens - 1) per request"
)


class ClosedLoop(SimSummary):
    """``forecast infer --concurrency C``: the replica's discrete-event simulation driven by
    a closed-loop client of C slots (:func:`closed_loop`)."""

    concurrency: int
    client: str
    requests_per_s: float


def closed_loop(
    *,
    arch: ModelArch,
    gpu: Accelerator,
    layout: Layout,
    precision: str,
    kv_precision: str | None,
    inputs: LengthDist,
    outputs: LengthDist,
    concurrency: int,
    fitted: FittedOverheads,
    get_perf: PerfLookup,
    catalog: Catalog,
    chunk_tokens: int,
    utilization: Utilization,
    engine: str,
    seed: int = 0,
    factors: tuple[float, float] = (1.0, 1.0),
    num_requests: int | None = None,
    speculation: Speculation | None = None,
) -> ClosedLoop:
    """Simulate ``concurrency`` clients that each send their next request when the last one
    finishes, against one replica of ``layout`` (``simulate_requests`` with
    ``concurrency``; the replica holds as many running requests as memory and the engine's
    scheduler allow). ``num_requests`` requests (default ``10 x concurrency``, at least
    200, as InferenceX runs ``benchmark_serving``), lengths drawn from ``inputs`` /
    ``outputs`` with ``seed``. ``factors``: the serving calibration's (TTFT, TPOT)
    multipliers."""
    cands, dropped = build_candidates(
        arch=arch,
        gpus=[gpu],
        precision=precision,
        kv_precision=kv_precision,
        tp=layout.tp,
        pp=layout.pp,
        ep=layout.ep,
        inputs=inputs,
        outputs=outputs,
        batch=None,
        fitted=fitted,
        get_perf=get_perf,
        catalog=catalog,
        chunk_tokens=chunk_tokens,
        utilization=utilization,
        engine=engine,
        speculation=speculation,
    )
    same = (layout.tp, layout.pp, layout.ep, layout.dp)
    cands = [c for c in cands if (c.tp, c.pp, c.ep, c.dp) == same]
    if not cands:
        why = dropped[0]["reason"] if dropped else "no replica of this layout"
        raise InputError(f"--concurrency {concurrency}: {why}", hint="try a larger --tp or --pp")
    replica = max(cands, key=lambda c: c.replica.max_batch).replica
    n = int(num_requests) if num_requests else max(10 * concurrency, 200)
    rng = np.random.default_rng(seed)
    lin, lout = inputs.sample(rng, n), outputs.sample(rng, n)
    sim = simulate_requests(
        replica, np.zeros(n), lin, lout, concurrency=concurrency, max_queue=n + 1
    )
    summary = sim.summary()
    ft, fp = factors
    for key in ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "ttft_mean_s"):
        summary[key] *= ft
    for key in ("tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "tpot_mean_s"):
        summary[key] *= fp  # type: ignore[literal-required]
    summary["throughput_output_tokens_per_s"] /= fp
    out_per_req = float(lout.mean())
    return {
        **summary,
        "concurrency": int(concurrency),
        "client": CLOSED_LOOP_CLIENT.format(c=int(concurrency)),
        "requests_per_s": summary["throughput_output_tokens_per_s"] / out_per_req,
    }


# ---------------------------------------------------------------------------------------------
# Fleet sizing: the one function ``forecast infer --qps`` and ``plan`` both call
# ---------------------------------------------------------------------------------------------
#: percentile at which the TTFT/TPOT targets hold unless the caller says otherwise
DEFAULT_SLO_PERCENTILE = "p99"


@dataclass(frozen=True, kw_only=True)
class ServingDemand:
    """A load to serve and the targets it must meet: the input of :func:`size_serving_fleet`.

    Attributes
    ----------
    model:
        Catalog id, catalog row, architecture dict or ``ModelArch``.
    gpus:
        Catalog GPU names compared (at least one).
    qps:
        Requests per second (Poisson arrivals), > 0.
    inputs, outputs:
        Prompt and answer length distributions (tokens): fixed, lognormal by mean and a
        percentile, or a trace of request lengths (:class:`LengthDist`). The fleet is sized
        for requests drawn from them, never for every request at the tail lengths.
    ttft_slo_s, tpot_slo_s:
        Latency targets in seconds (at least one should be given), at ``slo_percentile``.
    slo_percentile:
        p50, p90, p95 or p99 of the per-request TTFT / TPOT (default
        :data:`DEFAULT_SLO_PERCENTILE`, p99).
    precision, kv_precision:
        Weight/GEMM precision and an optional KV-cache dtype override.
    tp, pp, ep:
        Replica layout; ``tp=None`` compares every TP of the scale-up domain.
    batch:
        A fixed running-request cap; None searches the caps.
    engine:
        Serving-engine profile (:func:`gpuplan.forecast.inference_step.engine_profile`).
    chunk_tokens, memory_utilization:
        Per-iteration token budget and usable fraction of GPU memory.
    seed, num_requests:
        The simulation's seed and requests per replica count tried.
    allow_cross_node_tp:
        A ``tp`` beyond the scale-up domain is refused unless this is true.
    nodes:
        Nodes per replica (TP inside each node, PP across them); None: one node, or the
        fewest nodes that hold a model too big for one (:func:`fleet_layouts`).
    disaggregate:
        Also size separate prefill and decode pools (:func:`size_disaggregated`).
    node_gpus:
        GPUs per machine the fleet runs on (a cloud instance's count, an on-premises
        node's): tensor parallelism stays inside one (:func:`gpuplan.forecast.hardware.
        within_node`); None: the GPU's own server. ``plan`` passes each option's.
    speculation:
        Speculative decoding of every replica (:func:`gpuplan.forecast.speculative.speculation`).
    """

    model: ModelRef
    gpus: tuple[str, ...]
    qps: float
    inputs: LengthDist
    outputs: LengthDist
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    slo_percentile: str = DEFAULT_SLO_PERCENTILE
    precision: str = "bf16"
    kv_precision: str | None = None
    tp: int | None = None
    pp: int = 1
    ep: int = 1
    batch: int | None = None
    engine: str = DEFAULT_ENGINE
    #: None: the engine's default on each GPU (:meth:`EngineProfile.chunk_tokens`)
    chunk_tokens: int | None = None
    #: None: the engine's default (:meth:`EngineProfile.memory_share`)
    memory_utilization: float | None = None
    seed: int = 0
    num_requests: int = 2000
    allow_cross_node_tp: bool = False
    nodes: int | None = None
    disaggregate: bool = False
    node_gpus: int | None = None
    speculation: Speculation | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", tuple(_gpu_list(self.gpus)))
        _positive("qps", self.qps)
        if self.node_gpus is not None:
            object.__setattr__(self, "node_gpus", _positive_int("node-gpus", self.node_gpus))
        _positive("ttft-slo-s", self.ttft_slo_s)
        _positive("tpot-slo-s", self.tpot_slo_s)
        if self.slo_percentile not in PERCENTILES:
            raise InputError(
                f"unknown SLO percentile {self.slo_percentile!r}",
                hint=f"use one of {', '.join(PERCENTILES)}",
            )
        for name in ("pp", "ep"):
            _positive_int(name, getattr(self, name))
        if self.chunk_tokens is not None:
            _positive_int("chunk-tokens", self.chunk_tokens)
        if self.tp is not None:
            _positive_int("tp", self.tp)
        if self.batch is not None:
            _positive_int("batch", self.batch)
        if self.nodes is not None:
            _positive_int("nodes", self.nodes)
        if self.memory_utilization is not None and not 0 < self.memory_utilization <= 1:
            raise InputError(f"memory utilization must be in (0, 1], got {self.memory_utilization}")
        engine_profile(self.engine)
        check_num_requests(self.num_requests)


@dataclass(frozen=True, kw_only=True)
class FleetSizing:
    """The fleet :func:`size_serving_fleet` chose, typed; :meth:`as_dict` is the full JSON.

    Attributes
    ----------
    gpu, tp, pp, ep, gpus_per_replica, replicas, num_gpus:
        The cheapest layout that meets the SLOs and how many replicas of it.
    ttft_s, tpot_s:
        Simulated TTFT and TPOT at the SLO percentile (seconds).
    throughput_output_tokens_per_s:
        Output tokens/s of one replica at its share of the load.
    usd_per_hour, usd_per_million_output_tokens:
        Fleet price (cheapest on-demand price per GPU-hour x GPUs) and that price per
        million output tokens served at the sized load; None without a catalog price.
    cost_derivation:
        The arithmetic of ``usd_per_million_output_tokens`` with its numbers.
    sized_from:
        The request-length distributions and SLO percentile sized for, in words.
    result:
        Everything else (``forecast infer --format json``), including every candidate with
        its own cost per million tokens.
    """

    gpu: str
    tp: int
    pp: int
    ep: int
    gpus_per_replica: int
    replicas: int
    num_gpus: int
    ttft_s: float
    tpot_s: float
    throughput_output_tokens_per_s: float
    usd_per_hour: float | None
    usd_per_million_output_tokens: float | None
    cost_derivation: str | None
    sized_from: str
    result: FleetResult

    def as_dict(self) -> FleetResult:
        return self.result


def output_tokens_per_hour(qps: float, mean_output_tokens: float) -> float:
    """Output tokens served per hour at ``qps`` requests/s of ``mean_output_tokens`` each.

    >>> output_tokens_per_hour(20, 256)
    18432000.0
    """
    return float(qps) * float(mean_output_tokens) * 3600.0


def cost_per_million_output_tokens(
    usd_per_gpu_hour: float | None, num_gpus: int | None, qps: float, mean_output_tokens: float
) -> tuple[float | None, str | None]:
    """Price per million output tokens at the sized load, and its derivation in words.

    ``usd_per_gpu_hour x num_gpus / (qps x mean output tokens x 3600 s) x 1e6``: the fleet
    is paid every hour it serves; the tokens are those the load asks for (not the fleet's
    capacity), so spare capacity is paid for.

    >>> round(cost_per_million_output_tokens(2.0, 16, 20, 256)[0], 3)
    1.736
    """
    if usd_per_gpu_hour is None or num_gpus is None:
        return None, None
    tph = output_tokens_per_hour(qps, mean_output_tokens)
    value = usd_per_gpu_hour * num_gpus / tph * 1e6
    text = (
        f"{usd_per_gpu_hour:.4g} USD per GPU-hour x {num_gpus} GPUs / ({qps:g} requests/s x "
        f"{mean_output_tokens:g} mean output tokens x 3600 s = {tph:.4g} tokens/h) x 1e6 "
        f"= {value:.4g} USD per million output tokens"
    )
    return value, text


def _base_info(
    arch: ModelArch,
    model_info: Mapping[str, object],
    precision: str,
    inputs: LengthDist,
    outputs: LengthDist,
    batching: str,
    engine: str,
    fitted: FittedOverheads,
) -> BaseInfo:
    return {
        "model": model_info,
        "precision": precision,
        "input_tokens": inputs.describe(),
        "output_tokens": outputs.describe(),
        "batching": batching,
        "engine": engine,
        "engine_profile": _engine_block(engine),
        "framework_constants": {
            **fitted.params_for(engine, arch.is_moe).as_dict(),
            "fitted_on": fitted.record.get("fitted_on"),
            "held_out": fitted.record.get("held_out", {}).get("leave-one-model-out"),
            "engine_time_scale": fitted.time_scale_basis(engine, arch.is_moe),
        },
    }


def _engine_block(engine: str) -> JSONDict:
    """The profile an engine name runs on, and why when the name is a release without a
    profile of its own (:func:`~gpuplan.forecast.inference_step.engine_resolution`)."""
    from gpuplan.forecast.inference_step import engine_resolution

    out = engine_profile(engine).describe()
    note = engine_resolution(engine)
    if note is not None:
        out["resolved_from"] = engine
        out["resolution"] = note
    return out


def size_serving_fleet(
    demand: ServingDemand,
    *,
    artifact: object = None,
    catalog: Catalog | None = None,
    perf_for: PerfLookup | None = None,
    overheads: FittedOverheads | None = None,
    progress: Progress | None = None,
    serving_calibration: bool = True,
) -> FleetSizing:
    """Size the cheapest fleet that serves ``demand`` within its SLOs.

    The one sizing function of the project: ``gpuplan forecast infer --qps`` and
    ``gpuplan plan`` both call it, so the same workload gets the same GPU count. Candidates
    (GPU x TP x batch cap) are ranked by an analytic steady state and the cheapest checked by
    a discrete-event simulation of requests drawn from the length distributions
    (:func:`gpuplan.forecast.serving.size_fleet`).

    Parameters
    ----------
    demand:
        Load, lengths, SLOs and layout limits.
    artifact:
        Calibration artifact (path or dict); None for the shipped default.
    catalog, perf_for, overheads, progress:
        Injected catalog, device-model lookup, fitted constants and progress callback.
    serving_calibration:
        Scale each candidate's TTFT and TPOT by the artifact's serving factors of
        ``demand.engine`` on its GPU (:func:`serving_factors`, the same as a single-replica
        forecast) before every SLO check; the result says so under ``serving_calibration``.
        False (or an injected ``perf_for``) sizes with the raw model.

    Returns
    -------
    FleetSizing
        The chosen fleet; raises :class:`InputError` when nothing can serve the load.
    """
    if catalog is None:
        from gpuplan.catalogs import get_catalog

        catalog = get_catalog()
    arch, model_info = model_with_provenance(demand.model, catalog)
    max_ctx = arch.max_context
    inputs, outputs = demand.inputs, demand.outputs
    if max_ctx and inputs.max_tokens is None:
        inputs = dc_replace(inputs, max_tokens=max_ctx)
    if max_ctx and outputs.max_tokens is None:
        outputs = dc_replace(outputs, max_tokens=max_ctx)
    fitted = overheads or load_overheads()
    gpus = [within_node(catalog.gpu(g), demand.node_gpus) for g in demand.gpus]
    cross_node = None
    if demand.tp is not None:
        cross_node = check_tp_domain(
            demand.tp,
            gpus,
            catalog,
            allow=demand.allow_cross_node_tp,
            node_gpus=demand.node_gpus,
        )
    get_perf = perf_for or (lambda gid: device_perf_for(gid, artifact))
    factors: dict[str, ServingFactors] = {}
    if serving_calibration and perf_for is None:
        for g in gpus:
            f = serving_factors(artifact, g.id, demand.engine, catalog=catalog, overheads=fitted)
            if f is not None:
                factors[g.id] = f
    base = _base_info(
        arch,
        model_info,
        demand.precision,
        inputs,
        outputs,
        "continuous",
        demand.engine,
        fitted,
    )
    sized = _size_for_load(
        arch=arch,
        gpus=gpus,
        base=base,
        precision=demand.precision,
        kv_precision=demand.kv_precision,
        tp=demand.tp,
        pp=demand.pp,
        ep=demand.ep,
        inputs=inputs,
        outputs=outputs,
        qps=float(demand.qps),
        ttft_slo_s=demand.ttft_slo_s,
        tpot_slo_s=demand.tpot_slo_s,
        percentile=demand.slo_percentile,
        batch=demand.batch,
        fitted=fitted,
        get_perf=get_perf,
        catalog=catalog,
        chunk_tokens=demand.chunk_tokens,
        utilization=engine_profile(demand.engine).memory_share(demand.memory_utilization),
        engine=demand.engine,
        seed=demand.seed,
        num_requests=demand.num_requests,
        progress=progress,
        serving=factors,
        nodes=demand.nodes,
        speculation=demand.speculation,
    )
    if demand.disaggregate:
        sized["disaggregated"] = size_disaggregated(
            arch=arch,
            gpus=gpus,
            demand=dc_replace(demand, inputs=inputs, outputs=outputs),
            colocated=sized,
            fitted=fitted,
            get_perf=get_perf,
            catalog=catalog,
        )
    if cross_node and sized.get("gpu") in cross_node:
        sized["cross_node_tp"] = cross_node[sized["gpu"]]
    sized_from = (
        f"requests drawn from input {inputs.text()} / output {outputs.text()} tokens, "
        f"{demand.qps:g} requests/s, SLOs at {demand.slo_percentile}"
    )
    sized["sized_from"] = sized_from
    if demand.speculation is not None:
        sized["speculative"] = _speculative(demand.speculation)["speculative"]
    # the user's own serving calibration of a GPU replaces the shipped constants there
    caveats = serving_caveats(
        [g.id for g in gpus if g.id not in factors], arch.attention, arch.num_experts
    )
    if caveats:
        sized["caveats"] = caveats
    return FleetSizing(
        gpu=sized["gpu"],
        tp=int(sized["tp"]),
        pp=int(sized["pp"]),
        ep=int(sized["ep"]),
        gpus_per_replica=int(sized["gpus_per_replica"]),
        replicas=int(sized["replicas"]),
        num_gpus=int(sized["num_gpus"]),
        ttft_s=float(sized["ttft_s"]),
        tpot_s=float(sized["tpot_s"]),
        throughput_output_tokens_per_s=float(sized["throughput_output_tokens_per_s"]),
        usd_per_hour=sized["usd_per_hour"],
        usd_per_million_output_tokens=sized["usd_per_million_output_tokens"],
        cost_derivation=sized["cost_derivation"],
        sized_from=sized_from,
        result=sized,
    )


# ---------------------------------------------------------------------------------------------
# Public entry point
# ---------------------------------------------------------------------------------------------
def forecast_inference(
    model: ModelRef,
    gpu: str | Sequence[str] = "h100",
    tp: int | None = None,
    pp: int = 1,
    ep: int = 1,
    precision: str = "bf16",
    input_tokens: int = DEFAULT_INPUT_TOKENS,
    output_tokens: int = DEFAULT_OUTPUT_TOKENS,
    batch: int | None = None,
    max_throughput: bool = False,
    qps: float | None = None,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
    slo_percentile: str = "p99",
    artifact: object = None,
    *,
    kv_precision: str | None = None,
    input_tokens_p99: float | None = None,
    output_tokens_p99: float | None = None,
    min_length_ratio: float | None = None,
    batching: str = "continuous",
    engine: str = DEFAULT_ENGINE,
    chunk_tokens: int | None = None,
    memory_utilization: float | None = None,
    seed: int = 0,
    num_requests: int = 2000,
    catalog: Catalog | None = None,
    perf_for: PerfLookup | None = None,
    overheads: FittedOverheads | None = None,
    progress: Progress | None = None,
    allow_cross_node_tp: bool = False,
    serving_calibration: bool = True,
    nodes: int | None = None,
    disaggregate: bool = False,
    concurrency: int | None = None,
    closed_loop_requests: int | None = None,
    node_gpus: int | None = None,
    speculation: Speculation | None = None,
) -> InferenceResult | FleetResult:
    """Forecast serving ``model`` on ``gpu``; with ``qps``, size the fleet for the SLOs.

    Parameters
    ----------
    model:
        Catalog id (``"llama3.3-70b"``), catalog row, architecture dict or ``ModelArch``.
    gpu:
        Catalog GPU name; with ``qps`` several may be given (``"h100,h200,a100"`` or a list)
        and compared.
    tp, pp, ep:
        Parallel layout of one replica (``tp x pp`` GPUs; EP inside the TP group). ``tp=None``
        picks the smallest TP that fits (with ``qps``: every TP in the scale-up domain is
        compared).
    precision:
        bf16, fp16, fp8, int8 (W8A8), int4 (W4A16) or fp4; refused where the catalog lists
        no peak for the GPU (e.g. fp8 on A100). ``kv_precision`` overrides the KV-cache dtype.
    input_tokens, output_tokens:
        Mean prompt and answer lengths; ``*_p99`` makes them lognormal with that p99.
    min_length_ratio:
        r in (0, 1]: each prompt and answer length drawn uniformly from ``int(r x L)`` to
        ``L`` (``L`` the ``input_tokens`` / ``output_tokens``), as the random dataset of the
        serving benchmarks with ``--random-range-ratio r`` (:meth:`LengthDist.uniform`); the
        point forecast is of the mean lengths.
    batch, max_throughput:
        Concurrent requests (default 1), or the batch with the highest throughput that fits.
    qps, ttft_slo_s, tpot_slo_s, slo_percentile:
        Load (requests/s) and latency targets at the percentile (p50, p90, p95, p99).
    batching:
        ``continuous`` (in-flight batching with chunked prefill, default) or ``static``
        (a batch of requests that start together, as in TensorRT-LLM's gptSessionBenchmark).
    engine:
        Decode-attention kernels: ``modern`` (tensor cores for every head shape) or
        ``trtllm-0.9`` (the engine of the validation data; see
        :data:`gpuplan.forecast.inference_step.ENGINES`).
    artifact:
        Calibration artifact (path or dict); None for the shipped default.
    allow_cross_node_tp:
        A ``tp`` larger than the GPU's scale-up domain (``--tp 16`` on 8-GPU H100 nodes) is
        refused unless this is true; then the TP all-reduces span ``tp / domain`` nodes over
        the scale-out fabric (the calibrated inter-node model and the library's network
        steps), and the result says so under ``cross_node_tp``.
    serving_calibration:
        Apply the artifact's serving factors of this engine on this GPU
        (:func:`serving_factors`) when it has any; False for the raw forecast.
    nodes:
        Nodes per replica: TP inside each node, pipeline stages across them (with ``tp`` or
        ``pp`` the other follows). Without it a model that fits no node gets the fewest nodes
        that hold it (:func:`multi_node_layout`); the result says so under ``multi_node``.
    disaggregate:
        With ``qps``: also size separate prefill and decode pools
        (:func:`size_disaggregated`) and compare them with the co-located fleet.
    concurrency:
        Without ``qps``: also simulate a closed-loop client of this many slots (the
        ``--max-concurrency`` of the serving benchmarks) against the replica, for latency
        percentiles and throughput (:func:`closed_loop`, under ``closed_loop``); the
        steady-state figures are those of ``batch = concurrency``.
    closed_loop_requests:
        Requests the closed-loop client sends (default ``max(10 x concurrency, 200)``).
    node_gpus:
        GPUs per machine the replica runs on (``--node-gpus``; :attr:`ServingDemand.node_gpus`):
        TP stays inside one; None: the GPU's own server.
    speculation:
        Speculative decoding (``--spec-tokens``; :func:`gpuplan.forecast.speculative.
        speculation`): TPOT and throughput per emitted token; continuous batching only.

    Returns
    -------
    dict
        The ``forecast infer`` JSON: ``ttft_s``, ``tpot_s``, ``throughput_output_tokens_per_s``
        (replica), ``..._per_gpu``, ``batch``, ``max_batch``, ``kv_cache_bytes_per_token``,
        ``memory_per_gpu_bytes``, ``fits_in_memory``, ``bottleneck``, ``intervals``, ``tp``,
        ``pp``, ``ep``, breakdowns, and with ``qps`` also ``replicas``, ``num_gpus``,
        ``candidates`` and the simulated latencies.
    """
    if catalog is None:
        from gpuplan.catalogs import get_catalog

        catalog = get_catalog()
    arch, model_info = model_with_provenance(model, catalog)
    input_tokens = _positive_int("input-tokens", input_tokens)
    output_tokens = _positive_int("output-tokens", output_tokens)
    pp = _positive_int("pp", pp)
    ep = _positive_int("ep", ep)
    if tp is not None:
        tp = _positive_int("tp", tp)
    if nodes is not None:
        nodes = _positive_int("nodes", nodes)
    if node_gpus is not None:
        node_gpus = _positive_int("node-gpus", node_gpus)
    if disaggregate and qps is None:
        raise InputError("--disaggregate sizes a fleet for a load", hint="add --qps and SLOs")
    if batch is not None:
        batch = _positive_int("batch", batch)
        if max_throughput:
            raise InputError("give either --batch or --max-throughput, not both")
    if concurrency is not None:
        concurrency = _positive_int("concurrency", concurrency)
        if qps is not None:
            raise InputError(
                "give either --qps (an open-loop load to size a fleet for) or --concurrency "
                "(a closed-loop client against one replica), not both"
            )
        if max_throughput or (batch is not None and batch != concurrency):
            raise InputError("--concurrency sets the batch", hint="drop --batch / --max-throughput")
        if batching != "continuous":
            raise InputError(
                "--concurrency simulates continuous batching", hint="drop --batching static"
            )
        batch = concurrency
    if chunk_tokens is not None:
        chunk_tokens = _positive_int("chunk-tokens", chunk_tokens)
    precision = canonical_precision(precision)  # awq, nvfp4, ...: the name it forecasts
    if speculation is not None and batching != "continuous":
        raise InputError(
            "speculative decoding is forecast for continuous batching only",
            hint="drop --batching static or --spec-tokens",
        )
    if memory_utilization is not None and not 0 < memory_utilization <= 1:
        raise InputError(f"memory utilization must be in (0, 1], got {memory_utilization}")
    engine_profile(engine)
    if speculation is not None and speculation.draft_model is not None:
        d = speculation.draft_model
        if d.vocab != arch.vocab:
            raise InputError(
                f"the draft model {d.name} has a vocabulary of {d.vocab} tokens and "
                f"{arch.name} of {arch.vocab}: a draft must share the target's tokenizer",
                hint="pick a smaller model of the same family (Llama 3.2 1B for Llama 3.x)",
            )
    if batching not in BATCHING_MODES:
        raise InputError(f"unknown batching {batching!r}", hint="use continuous or static")
    if slo_percentile not in PERCENTILES:
        raise InputError(
            f"unknown SLO percentile {slo_percentile!r}",
            hint=f"use one of {', '.join(PERCENTILES)}",
        )
    qps = _positive("qps", qps)
    ttft_slo_s = _positive("ttft-slo-s", ttft_slo_s)
    tpot_slo_s = _positive("tpot-slo-s", tpot_slo_s)
    if (ttft_slo_s or tpot_slo_s) and qps is None:
        raise InputError("SLO targets need a load", hint="add --qps (requests per second)")
    max_ctx = arch.max_context
    inputs = LengthDist.from_options(
        input_tokens,
        _positive("input-tokens-p99", input_tokens_p99),
        min_ratio=min_length_ratio,
        max_tokens=max_ctx,
        option="input-tokens",
    )
    outputs = LengthDist.from_options(
        output_tokens,
        _positive("output-tokens-p99", output_tokens_p99),
        min_ratio=min_length_ratio,
        max_tokens=max_ctx,
        option="output-tokens",
    )
    if max_ctx and input_tokens + output_tokens > max_ctx:
        raise InputError(
            f"{input_tokens} + {output_tokens} tokens exceed the {max_ctx}-token context of {arch.name}",
            hint="shorten --input-tokens or --output-tokens",
        )
    if min_length_ratio is not None:  # the point forecast's request: the mean lengths
        input_tokens, output_tokens = round(inputs.mean), round(outputs.mean)
    fitted = overheads or load_overheads()
    names = _gpu_list(gpu)
    if names_every_gpu(names) and qps is None:
        raise InputError(
            "--gpu all compares the fleets every catalog accelerator needs for a load",
            hint="add --qps and the SLOs, or name one GPU",
        )
    gpus = [within_node(catalog.gpu(g), node_gpus) for g in _catalog_gpus(names, catalog)]
    if qps is not None:
        demand = ServingDemand(
            model=arch,
            gpus=tuple(g.id for g in gpus),
            qps=qps,
            inputs=inputs,
            outputs=outputs,
            ttft_slo_s=ttft_slo_s,
            tpot_slo_s=tpot_slo_s,
            slo_percentile=slo_percentile,
            precision=precision,
            kv_precision=kv_precision,
            tp=tp,
            pp=pp,
            ep=ep,
            batch=batch,
            engine=engine,
            chunk_tokens=chunk_tokens,
            memory_utilization=memory_utilization,
            seed=seed,
            num_requests=num_requests,
            allow_cross_node_tp=allow_cross_node_tp,
            nodes=nodes,
            disaggregate=disaggregate,
            node_gpus=node_gpus,
            speculation=speculation,
        )
        sized = size_serving_fleet(
            demand,
            artifact=artifact,
            catalog=catalog,
            perf_for=perf_for,
            overheads=fitted,
            progress=progress,
        ).as_dict()
        sized["model"] = model_info
        return sized
    cross_node = None
    if tp is not None:
        cross_node = check_tp_domain(
            tp, gpus, catalog, allow=allow_cross_node_tp, node_gpus=node_gpus
        )
    get_perf = perf_for or (lambda gid: device_perf_for(gid, artifact))
    base = _base_info(arch, model_info, precision, inputs, outputs, batching, engine, fitted)
    if len(gpus) > 1:
        raise InputError(
            "several GPUs are compared only when sizing for a load",
            hint="add --qps and SLO targets, or give one --gpu",
        )
    g = gpus[0]
    prec = resolve_precision(precision, g, kv_precision)
    perf = get_perf(g.id)
    if chunk_tokens is None:
        chunk_tokens = engine_profile(engine).chunk_tokens(g)
    common = _LayoutInputs(
        arch=arch,
        gpu=g,
        perf=perf,
        prec=prec,
        fitted=fitted,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        batch=batch,
        max_throughput=max_throughput,
        batching=batching,
        chunk_tokens=chunk_tokens,
        utilization=engine_profile(engine).memory_share(memory_utilization),
        engine=engine,
        speculation=speculation,
    )
    layout = _choose_layout(tp=tp, pp=pp, ep=ep, nodes=nodes, **common)
    if concurrency is not None and tp is None and nodes is None:
        layout = _closed_loop_layout(layout, inputs, outputs, **common)
    check_serving_layout(arch, layout)
    out = _single_layout(layout=layout, **common)
    mn = multi_node_info(layout, g, out["pp_hop_decode_s"])
    if mn is not None:
        out["multi_node"] = mn
    pcie = pcie_tp_info(layout, g)
    if pcie is not None:
        out["pcie_tp"] = pcie
    out.pop("_rates")
    out.pop("_memory")
    basis = _basis(perf)
    if cross_node:
        out["cross_node_tp"] = cross_node[g.id]
    factors = None
    if serving_calibration and perf_for is None:
        factors = serving_factors(artifact, g.id, engine, catalog=catalog, overheads=fitted)
        if factors is not None:
            basis = _apply_serving_factors(out, factors, basis)
    result: InferenceResult = {
        **base,
        "gpu": g.id,
        "basis": basis,
        "precision_detail": prec.description,
        "chunk_tokens": chunk_tokens,
        **out,
    }
    if factors is None:
        caveats = serving_caveats([g.id], arch.attention, arch.num_experts)
        if caveats:
            result["caveats"] = caveats
    if concurrency is not None:
        loop = closed_loop(
            arch=arch,
            gpu=g,
            layout=layout,
            precision=precision,
            kv_precision=kv_precision,
            inputs=inputs,
            outputs=outputs,
            concurrency=concurrency,
            fitted=fitted,
            get_perf=get_perf,
            catalog=catalog,
            chunk_tokens=chunk_tokens,
            utilization=engine_profile(engine).memory_share(memory_utilization),
            engine=engine,
            seed=seed,
            factors=_latency_factors(factors),
            num_requests=closed_loop_requests,
            speculation=speculation,
        )
        with_loop: ClosedLoopResult = {**result, "closed_loop": loop}
        return with_loop
    return result


# ---------------------------------------------------------------------------------------------
# Serving calibration: the user's own server, measured by ``gpuplan probe --workload serve``
# ---------------------------------------------------------------------------------------------
_FACTOR_CACHE: dict[tuple[str | int | None, str, str], tuple[JSONDict, ServingFactors | None]] = {}


def _artifact_dict(artifact: object) -> JSONDict:
    from gpuplan.calibration import load_artifact

    if isinstance(artifact, dict):
        return artifact
    return load_artifact(artifact)


def serving_factors(
    artifact: object,
    gpu_id: str,
    engine: str,
    *,
    catalog: Catalog | None = None,
    overheads: FittedOverheads | None = None,
) -> ServingFactors | None:
    """Measured-over-forecast TTFT and TPOT factors of ``engine`` on ``gpu_id``, or None.

    For every point of the artifact's ``serving.<gpu_id>.<engine>`` section (one concurrency
    level of a ``serve`` probe run, see :mod:`gpuplan.calibration.serving`) this simulates
    the same experiment without serving factors: the same model, TP, precision and fixed
    lengths, the probe's closed-loop client (its concurrency and request count,
    :func:`closed_loop`), and takes the ratios of the measured p10/p50/p90 to the simulated
    p50. The factor is the geometric
    mean of the p50 ratios; its interval runs from the smallest p10 ratio to the largest
    p90 ratio (the spread of requests and of levels together).

    Parameters
    ----------
    artifact:
        Calibration artifact (dict or path; None: the shipped default, which has none).
    gpu_id:
        Catalog GPU id.
    engine:
        Engine profile name or alias (``vllm`` = ``vllm@0.6.0``).

    Returns
    -------
    dict or None
        ``ttft_factor`` and ``tpot_factor`` (``value``, ``low``, ``high``, ``basis``
        ``measured``), ``points`` (each with its ratios) and ``inputs`` (run ids); None
        when the artifact has no point of this engine on this device. A section whose points
        cannot be forecast (no catalog model) gives ``applied: False`` and the reason.
    """
    from gpuplan.calibration.serving import validate_serving

    data = _artifact_dict(artifact)
    section = data.get("serving")
    if not section:
        return None
    name = engine_profile(engine).name
    key = (artifact if isinstance(artifact, str) or artifact is None else id(data), gpu_id, name)
    hit = _FACTOR_CACHE.get(key)
    if hit is not None and hit[0] is data:
        return hit[1]
    devices = validate_serving(section)
    entry = devices.get(gpu_id, {}).get(name)
    result = None if not entry else _fit_factors(data, entry, gpu_id, name, catalog, overheads)
    if len(_FACTOR_CACHE) > 64:
        _FACTOR_CACHE.clear()
    _FACTOR_CACHE[key] = (data, result)
    return result


def _fit_factors(
    data: JSONDict,
    entry: ServingEntry,
    gpu_id: str,
    engine: str,
    catalog: Catalog | None,
    overheads: FittedOverheads | None,
) -> ServingFactors:
    points: list[FactorPoint] = []
    skipped: list[str] = []
    for p in entry["points"]:
        model_id = p.get("catalog_model")
        if not model_id:
            skipped.append(f"c={p['concurrency']}: no catalog model (probe with --catalog-model)")
            continue
        spec = p.get("speculative")
        try:
            raw = forecast_inference(
                model_id,
                gpu_id,
                speculation=(
                    measured_speculation(
                        spec["draft_tokens"],
                        spec["acceptance_length"],
                        tree_width=spec.get("tree_width"),
                        verify_tokens=spec.get("verify_tokens"),
                    )
                    if spec
                    else None
                ),
                tp=int(p.get("tp") or 1),
                precision=str(p.get("precision") or "bf16"),
                input_tokens=int(p["input_tokens"]),
                output_tokens=int(p["output_tokens"]),
                concurrency=int(p["concurrency"]),
                closed_loop_requests=int(p.get("completed") or 0) or None,
                artifact=data,
                engine=engine,
                catalog=catalog,
                overheads=overheads,
                serving_calibration=False,
            )
        except GpuplanError as exc:
            skipped.append(
                f"c={p['concurrency']}: {exc.message if hasattr(exc, 'message') else exc}"
            )
            continue
        # the reference is the probe's own experiment simulated: its clients, its request
        # count and its fixed lengths (they keep the clients in step, so TTFT comes in
        # waves), not the steady state of a server whose requests arrive spread out
        loop = cast("ClosedLoop", raw["closed_loop"])  # type: ignore[typeddict-item]
        if loop["saturated"]:
            skipped.append(f"c={p['concurrency']}: the simulated replica does not keep up")
            continue
        measured_vs_raw = {
            "ttft": (p["ttft_s"], loop["ttft_p50_s"]),
            "tpot": (p["tpot_s"], loop["tpot_p50_s"]),
        }
        ratios = {
            q: {k: float(measured[k]) / float(fc) for k in ("p10", "p50", "p90")}
            for q, (measured, fc) in measured_vs_raw.items()
        }
        point: FactorPoint = {
            "run_id": p.get("run_id"),
            "catalog_model": p["catalog_model"],
            "concurrency": p["concurrency"],
            "measured_ttft_p50_s": p["ttft_s"]["p50"],
            "forecast_ttft_s": loop["ttft_p50_s"],
            "measured_tpot_p50_s": p["tpot_s"]["p50"],
            "forecast_tpot_s": loop["tpot_p50_s"],
            "ttft_ratio": ratios["ttft"],
            "tpot_ratio": ratios["tpot"],
        }
        if spec:
            point["speculative"] = spec
        points.append(point)
    out: ServingFactors = {
        "device": gpu_id,
        "engine": engine,
        "inputs": list(entry.get("inputs", [])),
        "points": points,
        "skipped": skipped,
        "convention": "vLLM benchmark_serving metric definitions (gpuplan.probes.serve); "
        "forecast = the p50 of the probe's closed loop simulated (its concurrency, request "
        "count and lengths)",
    }
    if not points:
        out["applied"] = False
        out["reason"] = "no serving point could be forecast: " + "; ".join(skipped)
        return out
    out["ttft_factor"] = _factor([pt["ttft_ratio"] for pt in points])
    out["tpot_factor"] = _factor([pt["tpot_ratio"] for pt in points])
    out["applied"] = True
    return out


def _factor(r: list[dict[str, float]]) -> Factor:
    """The factor of the points' ratios: geometric mean of the p50 ratios, from the smallest
    p10 ratio to the largest p90 ratio."""
    value = math.exp(sum(math.log(x["p50"]) for x in r) / len(r))
    return {
        "value": value,
        "low": min(value, min(x["p10"] for x in r)),
        "high": max(value, max(x["p90"] for x in r)),
        "basis": "measured",
    }


def _apply_serving_factors(
    out: LayoutResult, factors: ServingFactors, basis: str | None
) -> str | None:
    """Scale a single-replica forecast ``out`` in place by the serving factors; its basis."""
    if not factors.get("applied"):
        out["serving_calibration"] = factors
        return basis
    ft, fp = factors["ttft_factor"], factors["tpot_factor"]
    raw = {
        "ttft_s": out["ttft_s"],
        "tpot_s": out["tpot_s"],
        "throughput_output_tokens_per_s": out["throughput_output_tokens_per_s"],
    }
    gpus = out["gpus_per_replica"]
    out["ttft_s"] = raw["ttft_s"] * ft["value"]
    out["tpot_s"] = raw["tpot_s"] * fp["value"]
    out["throughput_output_tokens_per_s"] = raw["throughput_output_tokens_per_s"] / fp["value"]
    out["throughput_output_tokens_per_s_per_gpu"] = out["throughput_output_tokens_per_s"] / gpus
    thr = raw["throughput_output_tokens_per_s"]
    out["intervals"] = {
        **out["intervals"],
        "ttft_s": [raw["ttft_s"] * ft["low"], raw["ttft_s"] * ft["high"]],
        "tpot_s": [raw["tpot_s"] * fp["low"], raw["tpot_s"] * fp["high"]],
        "throughput_output_tokens_per_s": [thr / fp["high"], thr / fp["low"]],
        "throughput_output_tokens_per_s_per_gpu": [thr / fp["high"] / gpus, thr / fp["low"] / gpus],
    }
    calibration: ServingCalibration = {**factors, "raw": raw, "hardware_basis": basis}
    out["serving_calibration"] = calibration
    return "measured"


def check_tp_domain(
    tp: int,
    gpus: Sequence[Accelerator],
    catalog: Catalog,
    *,
    allow: bool,
    node_gpus: int | None = None,
) -> dict[str, CrossNodeTP] | None:
    """Refuse a TP group larger than a GPU's scale-up domain unless ``allow``.

    Tensor parallelism all-reduces twice per layer and pass; outside the scale-up domain
    those run over the scale-out NICs, an order of magnitude slower (Narayanan et al. 2021,
    section 3.3: tensor parallelism inside the node). Returns, per GPU whose domain the
    group exceeds, what the forecast then assumes (``None`` when every group fits).
    ``node_gpus`` is the machine the GPUs were cut to (:func:`within_node`), for the message.
    """
    out: dict[str, CrossNodeTP] = {}
    for g in gpus:
        domain = server_size(g)
        if tp <= domain:
            continue
        if not allow and node_gpus is not None and domain == node_gpus:
            raise InputError(
                f"--tp {tp} spans {math.ceil(tp / domain)} machines of {node_gpus} GPU(s) "
                f"(--node-gpus {node_gpus}), and TP all-reduces between machines run over the "
                "network",
                hint=(
                    f"use --tp {domain} with --pp {math.ceil(tp / domain)}, a machine with more "
                    "GPUs (--node-gpus), or allow cross-node tensor parallelism explicitly "
                    "(--allow-cross-node-tp)"
                ),
            )
        if not allow:
            vendor = getattr(g, "vendor", None)
            bigger = sorted(
                (getattr(x, "vendor", None) != vendor, int(x.scale_up_domain_size), x.id)
                for x in getattr(catalog, "gpus", [])
                if (getattr(x, "scale_up_domain_size", None) or 0) >= tp
            )
            chip = (
                f", or a GPU with a larger domain ({bigger[0][2]}: {bigger[0][1]} GPUs)"
                if bigger
                else ""
            )
            raise InputError(
                f"--tp {tp} spans {math.ceil(tp / domain)} nodes: the {_node_word(g)} of {g.id} "
                f"is {domain} GPUs, and TP all-reduces outside it run over the network",
                hint=(
                    f"use --tp {domain} with --pp {math.ceil(tp / domain)}{chip}; "
                    "or allow cross-node tensor parallelism explicitly (--allow-cross-node-tp)"
                ),
            )
        out[g.id] = {
            "nodes": math.ceil(tp / domain),
            "scale_up_domain": scale_up_domain(g),
            "fabric": "scale-out network between the nodes (calibrated inter-node collectives)",
            "note": f"TP {tp} exceeds the {domain}-GPU {_node_word(g)} of {g.id}: every TP all-reduce crosses nodes",
        }
    return out or None


def _node_word(gpu: Accelerator) -> str:
    """What one node of ``gpu`` is, for messages: its scale-up domain or its PCIe server."""
    return "PCIe server" if server_size(gpu) > scale_up_domain(gpu) else "scale-up domain"


def pcie_tp_info(layout: Layout, gpu: Accelerator) -> JSONDict | None:
    """What a TP group beyond the scale-up domain but inside one PCIe server assumes (None
    otherwise): the all-reduces leave the cards over PCIe (TensorRT-LLM, vLLM and SGLang run
    TP on PCIe cards with NCCL over PCIe), priced by
    :func:`gpuplan.forecast.comm.library_latency`'s PCIe constants."""
    domain, server = scale_up_domain(gpu), server_size(gpu)
    if layout.tp <= domain or layout.tp > server:
        return None
    return {
        "tp": layout.tp,
        "scale_up_domain": domain,
        "server_gpus": server,
        "fabric": "PCIe inside one server (NCCL's ring over PCIe, or the calibrated collectives)",
        "note": (
            f"TP {layout.tp} inside one {server}-GPU PCIe server of {gpu.id} (no NVLink): every "
            "TP all-reduce leaves the cards over PCIe, priced as NCCL's LL ring with a PCIe hop "
            "per step or the calibrated collectives between devices, whichever is faster"
        ),
    }


class _LayoutInputs(TypedDict):
    """What :func:`forecast_inference` passes to the layout choice and the replica model."""

    arch: ModelArch
    gpu: Accelerator
    perf: DevicePerf
    prec: PrecisionSpec
    fitted: FittedOverheads
    input_tokens: int
    output_tokens: int
    batch: int | None
    max_throughput: bool
    batching: str
    chunk_tokens: int
    utilization: Utilization
    engine: str
    speculation: Speculation | None


class _FitArgs(TypedDict):
    """The request and memory figures a layout must hold (:func:`fits_one_request`)."""

    request_tokens: float
    chunk: float
    utilization: Utilization


def _choose_layout(
    *, tp: int | None, pp: int, ep: int, nodes: int | None, **common: Unpack[_LayoutInputs]
) -> Layout:
    """The replica layout of a single forecast: the given one; else the smallest TP inside
    the scale-up domain that holds the batch; else, when the model fits no node (and
    neither ``--pp`` nor ``--tp`` is fixed), the fewest nodes with TP inside each node and
    pipeline stages across them (:func:`multi_node_layout`). ``nodes`` fixes the node count.
    """
    arch, gpu, prec = common["arch"], common["gpu"], common["prec"]
    req = float(common["input_tokens"] + common["output_tokens"])
    domain = server_size(gpu)
    fit_kw = _FitArgs(
        request_tokens=req,
        chunk=common["chunk_tokens"],
        utilization=common["utilization"],
    )
    if nodes is not None:
        if pp > 1 and tp is not None:
            if tp * pp != nodes * domain:
                raise InputError(
                    f"--tp {tp} x --pp {pp} = {tp * pp} GPUs is not --nodes {nodes} x {domain} GPUs",
                    hint="give --nodes with --tp or --pp, not both, or make them agree",
                )
            return Layout(tp, pp, ep)
        if pp > 1:
            if (nodes * domain) % pp:
                raise InputError(
                    f"--pp {pp} does not divide the {nodes * domain} GPUs of --nodes {nodes}",
                    hint=f"use a --pp dividing {nodes * domain}",
                )
            return Layout(nodes * domain // pp, pp, ep)
        lay = multi_node_layout(arch, gpu, prec, ep=ep, nodes=nodes, tp=tp, **fit_kw)
        if lay is None:
            raise InputError(
                f"no layout of {nodes} node(s) of {domain} {gpu.id} GPUs splits {arch.name}",
                hint="use a --tp dividing the heads and the node's GPUs, or another --nodes",
            )
        return lay
    if ep > 1 and pp == 1 and (tp == 1 or (tp is None and ep > domain)):
        # wide EP: attention data-parallel on every GPU, the experts over all of them
        return wide_ep_layout(ep)
    if tp is not None:
        return Layout(tp, pp, ep)
    t = _default_tp(pp=pp, ep=ep, **common)
    lay = Layout(t, pp, ep)
    if pp == 1 and not fits_one_request(arch, gpu, prec, lay, **fit_kw):
        multi = multi_node_layout(arch, gpu, prec, ep=ep, **fit_kw)
        if multi is not None:
            return multi
    return lay


def _closed_loop_layout(
    layout: Layout, inputs: LengthDist, outputs: LengthDist, **common: Unpack[_LayoutInputs]
) -> Layout:
    """The layout a closed-loop client (``--concurrency``) runs on when no TP was given:
    ``layout`` when its replica can plan a continuous-batching pass for the longest requests
    (:func:`continuous_memory_plan`, the rule :func:`build_candidates` keeps a replica by),
    else the smallest larger TP inside the node that can, so that the single forecast and
    the simulated client describe the same replica. ``layout`` itself where none can (the
    client then says why) and for wide-EP layouts."""
    arch, gpu, prec = common["arch"], common["gpu"], common["prec"]
    if layout.dp > 1:
        return layout
    req_max = longest_request_tokens(inputs, outputs)

    def holds(lay: Layout) -> bool:
        mp = continuous_memory_plan(
            shard(arch, lay, prec),
            gpu,
            chunk_tokens=common["chunk_tokens"],
            utilization=common["utilization"],
            speculation=common["speculation"],
            max_sequences=logit_sequences(common["engine"], gpu),
        )
        return mp.kv_capacity_tokens >= req_max

    if holds(layout):
        return layout
    for t in tp_options(arch, gpu, layout.ep, layout.pp):
        if t > layout.tp and holds(Layout(t, layout.pp, layout.ep)):
            return Layout(t, layout.pp, layout.ep)
    return layout


def _default_tp(
    *,
    arch: ModelArch,
    gpu: Accelerator,
    perf: DevicePerf,
    prec: PrecisionSpec,
    pp: int,
    ep: int,
    fitted: FittedOverheads,
    input_tokens: int,
    output_tokens: int,
    batch: int | None,
    max_throughput: bool,
    batching: str,
    chunk_tokens: int,
    utilization: Utilization,
    engine: str,
    speculation: Speculation | None = None,
) -> int:
    """TP when none is given: the smallest that holds the requested batch (batch 1 by
    default); with ``max_throughput`` the TP of the scale-up domain with the highest output
    tokens/s per GPU. Falls back to the smallest TP that fits one request."""
    req = float(input_tokens + output_tokens)
    need = float(batch or 1) * req
    options = tp_options(arch, gpu, ep, pp)
    fitting = []
    for t in options:
        sh = shard(arch, Layout(t, pp, ep), prec)
        mp = memory_plan(
            sh,
            gpu,
            tokens_in_pass=min(chunk_tokens, input_tokens),
            rows=1,
            utilization=utilization,
            step_budget=chunk_tokens,
        )
        if mp.kv_capacity_tokens >= need:
            fitting.append(t)
    if not fitting:
        smallest = smallest_fitting_tp(
            arch,
            gpu,
            prec,
            pp=pp,
            ep=ep,
            request_tokens=req,
            chunk=chunk_tokens,
            utilization=utilization,
        )
        domain = server_size(gpu)
        # never a TP group beyond one node (server_size) unless asked (--tp with
        # --allow-cross-node-tp): the layout search takes PP across nodes instead
        if smallest is not None and smallest <= domain:
            return smallest
        return options[-1]
    if not max_throughput:
        return fitting[0]
    best, best_thr = fitting[0], -1.0
    for t in fitting:
        r = _single_layout(
            arch=arch,
            gpu=gpu,
            perf=perf,
            prec=prec,
            layout=Layout(t, pp, ep),
            fitted=fitted,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            batch=None,
            max_throughput=True,
            batching=batching,
            chunk_tokens=chunk_tokens,
            utilization=utilization,
            engine=engine,
        )
        if r["throughput_output_tokens_per_s_per_gpu"] > best_thr:
            best, best_thr = t, r["throughput_output_tokens_per_s_per_gpu"]
    return best


def _basis(perf: DevicePerf) -> str | None:
    try:
        s = perf.summary()
        bases = {e.basis for e in s.values()}
        order = ["spec", "transferred", "measured"]
        for b in order:
            if b in bases:
                return b
    except Exception:
        return None
    return None


def fleet_layouts(
    arch: ModelArch,
    gpu: Accelerator,
    prec: PrecisionSpec,
    *,
    tp: int | None,
    pp: int,
    ep: int,
    nodes: int | None,
    request_tokens: float,
    chunk_tokens: int,
    utilization: Utilization,
    max_sequences: int | None = None,
) -> list[Layout]:
    """Replica layouts the fleet search compares on one GPU type.

    Every TP of the scale-up domain (or the given one); with ``nodes`` the replica of that
    many nodes (:func:`multi_node_layout`); and, when none of the one-node layouts holds
    the longest request at a full chunk (``pp`` and ``tp`` not fixed), the fewest nodes
    that do, so a model too big for one node is served by multi-node replicas and the
    fleet counts replicas of that size.
    """
    domain = server_size(gpu)
    if nodes is not None:
        if tp is not None and pp > 1:
            return [Layout(tp, pp, ep)]
        lay = multi_node_layout(
            arch,
            gpu,
            prec,
            ep=ep,
            request_tokens=request_tokens,
            chunk=chunk_tokens,
            utilization=utilization,
            nodes=nodes,
            tp=tp,
        )
        return [lay] if lay is not None else []
    if ep > 1 and pp == 1 and (tp == 1 or (tp is None and ep > domain)):
        # wide EP, as the single-replica forecast reads TP 1 with EP, or an EP larger than
        # the scale-up domain without a TP (_choose_layout)
        return [wide_ep_layout(ep)]
    layouts = [
        Layout(t, pp, ep) for t in ([tp] if tp is not None else tp_options(arch, gpu, ep, pp))
    ]
    if tp is not None or pp > 1:
        return layouts

    def holds(lay: Layout) -> bool:
        if arch.heads % lay.tp:
            return False
        mp = continuous_memory_plan(
            shard(arch, lay, prec),
            gpu,
            chunk_tokens=chunk_tokens,
            utilization=utilization,
            max_sequences=max_sequences,
        )
        return mp.kv_capacity_tokens >= request_tokens

    if any(holds(x) for x in layouts):
        return layouts
    t = max((d for d in divisors(arch.heads) if d <= domain and d % ep == 0), default=1)
    for n in auto_node_counts(domain):
        lay = Layout(t, n * domain // t, ep)
        extra = []
        if lay.pp <= arch.layers and holds(lay):
            extra.append(lay)
        # wide EP over the same nodes (MoE whose experts divide over the GPUs)
        if arch.is_moe and ep == 1 and arch.num_experts % (n * domain) == 0:
            w = wide_ep_layout(n * domain)
            if holds(w):
                extra.append(w)
        if extra:
            return [*layouts, *extra]
    return layouts


def build_candidates(
    *,
    arch: ModelArch,
    gpus: list[Accelerator],
    precision: str,
    kv_precision: str | None,
    tp: int | None,
    pp: int,
    ep: int,
    inputs: LengthDist,
    outputs: LengthDist,
    batch: int | None,
    fitted: FittedOverheads,
    get_perf: PerfLookup,
    catalog: Catalog,
    chunk_tokens: int | None,
    utilization: Utilization | None,
    engine: str = "modern",
    nodes: int | None = None,
    speculation: Speculation | None = None,
) -> tuple[list[Candidate], list[DroppedLayout]]:
    """Every (GPU, layout, batch cap) that could serve, with a replica model each.
    ``chunk_tokens`` None: the engine's default step budget on each GPU; ``utilization``
    None: the engine's default memory setting (:meth:`EngineProfile.memory_share`).

    Returns the candidates and the (gpu, tp) layouts left out with the reason.
    """
    params = fitted.params_for(engine, arch.is_moe)
    if utilization is None:
        utilization = engine_profile(engine).memory_share(None)
    cands: list[Candidate] = []
    dropped: list[DroppedLayout] = []
    req_mean = inputs.mean + outputs.mean
    req_max = longest_request_tokens(inputs, outputs)
    for g in gpus:
        try:
            prec = resolve_precision(precision, g, kv_precision)
        except InputError as exc:
            dropped.append({"gpu": g.id, "reason": exc.one_line()})
            continue
        price, price_src = usd_per_gpu_hour(catalog, g.id)
        perf: DevicePerf | None = None
        # a fleet's batch is its replicas' cap on running requests (max_num_seqs)
        seqs = logit_sequences(engine, g, batch)
        sched_cap = engine_profile(engine).running_cap(g)
        chunk = chunk_tokens if chunk_tokens is not None else engine_profile(engine).chunk_tokens(g)
        for layout in fleet_layouts(
            arch,
            g,
            prec,
            tp=tp,
            pp=pp,
            ep=ep,
            nodes=nodes,
            request_tokens=req_max,
            chunk_tokens=chunk,
            utilization=utilization,
            max_sequences=seqs,
        ):
            t = layout.tp
            try:
                check_serving_layout(arch, layout)
            except InputError as exc:
                dropped.append({"gpu": g.id, "tp": t, "pp": layout.pp, "reason": exc.one_line()})
                continue
            sh = shard(arch, layout, prec)
            mp = continuous_memory_plan(
                sh,
                g,
                chunk_tokens=chunk,
                utilization=utilization,
                speculation=speculation,
                max_sequences=seqs,
            )
            if mp.kv_capacity_tokens < req_max:
                dropped.append(
                    {
                        "gpu": g.id,
                        "tp": t,
                        "pp": layout.pp,
                        "reason": f"does not fit: {mp.kv_capacity_tokens:.0f} KV tokens free for requests of up to {req_max:.0f}",
                        "memory_breakdown_bytes": mp.breakdown(0),
                    }
                )
                continue
            max_b = max(mp.max_batch(req_mean), 1)
            if sched_cap is not None:
                max_b = min(max_b, sched_cap)
            try:
                perf = perf or get_perf(g.id)
                rates = DeviceRates(perf, g, sh, engine=engine, speculation=speculation)
                cost = StepCostModel.build(
                    rates, params, max_tokens=chunk + max_b, typical_prompt=inputs.mean
                )
            except GpuplanError as exc:  # e.g. no collective model for a GPU never measured
                dropped.append({"gpu": g.id, "tp": t, "pp": layout.pp, "reason": exc.one_line()})
                continue
            coef = float(sh.attention_flops_prefill(1.0, 0.0)) * 2.0
            hop_s = float(rates.comm(1.0)[1][VALUE])  # one PP hop, the same for every cap
            caps = (
                [batch]
                if batch is not None
                else sorted({c for c in (2**i for i in range(3, 16)) if c < max_b} | {max_b})
            )
            for cap in caps:
                rep = ReplicaModel(
                    cost=cost,
                    max_batch=int(cap),
                    kv_capacity_tokens=mp.kv_capacity_tokens,
                    prefill_flops_coef=coef,
                    chunk_tokens=chunk,
                    label=f"{g.id} tp={t} pp={layout.pp} cap={cap}",
                    frontend_s_per_request=params.frontend_s_per_request,
                    state_tokens_per_request=mp.state_bytes_per_seq / mp.kv_bytes_per_token,
                    window_tokens=mp.kv_window,
                    window_ratio=mp.pool_tokens_per_token(),
                )
                cands.append(
                    Candidate(
                        gpu=g.id,
                        tp=t,
                        pp=layout.pp,
                        ep=layout.ep,
                        dp=layout.dp,
                        replica=rep,
                        usd_per_gpu_hour=price,
                        extra={
                            "price_source": price_src,
                            "memory": mp,
                            "sharded": sh,
                            "rates": rates,
                            "kv_max_batch": max_b,
                            "multi_node": multi_node_info(layout, g, hop_s),
                            "pcie_tp": pcie_tp_info(layout, g),
                        },
                    )
                )
    return cands, dropped


def _size_for_load(
    *,
    arch: ModelArch,
    gpus: list[Accelerator],
    base: BaseInfo,
    precision: str,
    kv_precision: str | None,
    tp: int | None,
    pp: int,
    ep: int,
    inputs: LengthDist,
    outputs: LengthDist,
    qps: float,
    ttft_slo_s: float | None,
    tpot_slo_s: float | None,
    percentile: str,
    batch: int | None,
    fitted: FittedOverheads,
    get_perf: PerfLookup,
    catalog: Catalog,
    chunk_tokens: int | None,
    utilization: Utilization,
    engine: str,
    seed: int,
    num_requests: int,
    progress: Progress | None,
    serving: dict[str, ServingFactors] | None = None,
    nodes: int | None = None,
    speculation: Speculation | None = None,
) -> FleetResult:
    serving = serving or {}
    cands, dropped = build_candidates(
        nodes=nodes,
        speculation=speculation,
        arch=arch,
        gpus=gpus,
        precision=precision,
        kv_precision=kv_precision,
        tp=tp,
        pp=pp,
        ep=ep,
        inputs=inputs,
        outputs=outputs,
        batch=batch,
        fitted=fitted,
        get_perf=get_perf,
        catalog=catalog,
        chunk_tokens=chunk_tokens,
        utilization=utilization,
        engine=engine,
    )
    if not cands:
        reasons = "; ".join(
            f"{d['gpu']}{' tp=' + str(d['tp']) if 'tp' in d else ''}: {d['reason']}"
            for d in dropped[:4]
        )
        raise InputError(
            f"no layout can serve {arch.name} at {precision}: {reasons}",
            hint="try --pp, a smaller --precision or a GPU with more memory",
        )
    for c in cands:
        c.latency_factors = _latency_factors(serving.get(c.gpu))
    # single-request latency: the floor no number of replicas can beat
    q = PERCENTILES[percentile] / 100.0
    i_q = inputs.quantile(q) if q > 0.5 else inputs.quantile(0.5)
    o_q = outputs.quantile(q) if q > 0.5 else outputs.quantile(0.5)
    floors: dict[tuple[str, int, int, int], tuple[float, float]] = {}
    for c in cands:
        key = (c.gpu, c.tp, c.pp, c.dp)
        if key not in floors:
            t1, p1 = c.replica.single_request(i_q, o_q)
            floors[key] = (t1 * c.latency_factors[0], p1 * c.latency_factors[1])
        ttft1, tpot1 = floors[key]
        why = []
        if ttft_slo_s is not None and ttft1 > ttft_slo_s:
            why.append(f"TTFT {ttft1:.3g} s alone > {ttft_slo_s:g} s")
        if tpot_slo_s is not None and tpot1 > tpot_slo_s:
            why.append(f"TPOT {tpot1:.3g} s alone > {tpot_slo_s:g} s")
        if why:
            c.reason = "SLO below the single-request latency: " + ", ".join(why)
    if all(c.reason for c in cands):
        best_ttft = min(floors.values(), key=lambda x: x[0])[0]
        best_tpot = min(floors.values(), key=lambda x: x[1])[1]
        parts = []
        if ttft_slo_s is not None and best_ttft > ttft_slo_s:
            parts.append(
                f"--ttft-slo-s {ttft_slo_s:g} is below the fastest single-request TTFT {best_ttft:.3g} s"
            )
        if tpot_slo_s is not None and best_tpot > tpot_slo_s:
            parts.append(
                f"--tpot-slo-s {tpot_slo_s:g} is below the fastest single-request TPOT {best_tpot:.3g} s"
            )
        if not parts:
            parts.append("no layout meets both SLOs even for a single request")
        raise InputError(
            "impossible SLO: "
            + "; ".join(parts)
            + f" ({percentile} lengths, best layout of {', '.join(g.id for g in gpus)})",
            hint="relax the SLO, use a larger --tp, a faster GPU or shorter prompts; more replicas cannot help",
        )
    best, all_cands = size_fleet(
        cands,
        qps,
        inputs,
        outputs,
        ttft_slo_s,
        tpot_slo_s,
        percentile,
        num_requests=num_requests,
        seed=seed,
        progress=progress,
    )
    # one line per (gpu, tp): the cheapest batch cap
    table: dict[tuple[str, int, int, int], Candidate] = {}
    for c in all_cands:
        k = (c.gpu, c.tp, c.pp, c.dp)
        cur = table.get(k)
        rc = c.replicas or c.replicas_analytic
        if cur is None:
            table[k] = c
            continue
        rcur = cur.replicas or cur.replicas_analytic
        if rc is not None and (
            rcur is None or (c.replicas is not None, -rc) > (cur.replicas is not None, -rcur)
        ):
            table[k] = c
    cand_rows = [c.as_dict() for c in table.values()]
    for d in cand_rows:
        per_mtok, how = cost_per_million_output_tokens(
            d["usd_per_hour"] / d["num_gpus"] if d.get("usd_per_hour") else None,
            d.get("num_gpus"),
            qps,
            outputs.mean,
        )
        d["usd_per_million_output_tokens"] = per_mtok
        d["cost_derivation"] = how
    cand_rows += [{k: v for k, v in d.items() if k != "memory_breakdown_bytes"} for d in dropped]
    sized = [d for d in cand_rows if d.get("num_gpus") is not None]
    # as size_fleet ranks them: by cost where a layout has a price, the unpriced after
    by_price = any(d.get("usd_per_hour") for d in sized)
    rank = "usd_per_hour" if by_price else "num_gpus"
    unpriced = sorted({str(d["gpu"]) for d in sized if by_price and not d.get("usd_per_hour")})
    cand_rows.sort(
        key=lambda d: (
            d.get("num_gpus") is None,
            by_price and not d.get("usd_per_hour"),
            d.get(rank) or d.get("num_gpus") or 0,
            d.get("num_gpus") or 0,
            d.get("gpu"),
            d.get("tp", 0),
        )
    )
    if best is None or best.replicas is None:
        raise InputError(
            f"no layout meets the SLOs at {qps:g} requests/s in simulation",
            hint="relax the SLOs or try other GPUs / --tp",
        )
    sim_val = simulate(
        best.replica, qps / best.replicas, inputs, outputs, num_requests=num_requests, seed=seed
    )
    # replicas at the calibration's slow and fast ends (analytic ratio)
    from gpuplan.forecast.serving import max_rate_meeting

    def reps(scn: int) -> int | None:
        r = max_rate_meeting(
            best.replica, inputs, outputs, *best.slos(ttft_slo_s, tpot_slo_s), percentile, scn
        )
        if r <= 0 or not best.max_rate or best.replicas is None:
            return None
        return max(1, math.ceil(best.replicas * best.max_rate / r))

    r_slow, r_fast = reps(SLOW), reps(FAST)
    r_lo = min(r_fast or best.replicas, best.replicas)
    r_hi = max(r_slow or best.replicas, best.replicas)
    # the slow end's latencies are those of the fleet the slow end needs (r_hi replicas,
    # as the throughput interval says), not of this fleet overloaded by a slower device
    sim_slow = simulate(
        best.replica,
        qps / r_hi,
        inputs,
        outputs,
        num_requests=num_requests,
        seed=seed,
        scenario=SLOW,
    )
    sim_fast = simulate(
        best.replica,
        qps / best.replicas,
        inputs,
        outputs,
        num_requests=num_requests,
        seed=seed,
        scenario=FAST,
    )
    pct = PERCENTILES[percentile]
    sv = sim_val.summary()
    mp: MemoryPlan = best.extra["memory"]
    sh: Sharded = best.extra["sharded"]
    gpr = best.gpus_per_replica
    thr_rep = sv["throughput_output_tokens_per_s"]
    mean_running = sv["mean_running_requests"]
    kv_tokens = mean_running * (inputs.mean + outputs.mean)
    mb = mp.breakdown(kv_tokens, mean_running)
    q_ttft = fitted.interval_quantiles("ttft", engine, arch.is_moe)
    # TPOT's own where measured, else the throughput's mirrored (throughput = batch / TPOT)
    q_tpot = fitted.interval_quantiles("tpot", engine, arch.is_moe)
    ft, fp = best.latency_factors
    ttft_v = sim_val.percentile("ttft", pct) * ft
    tpot_v = sim_val.percentile("tpot", pct) * fp
    rates: DeviceRates = best.extra["rates"]
    decode_parts = continuous_iteration(
        rates,
        fitted.params_for(engine, arch.is_moe),
        max(mean_running, 1.0),
        inputs.mean,
        outputs.mean,
        best.replica.chunk_tokens,
    )[0]
    per_mtok, per_mtok_how = cost_per_million_output_tokens(
        best.usd_per_gpu_hour, best.replicas * gpr, qps, outputs.mean
    )
    out: FleetResult = {
        **base,
        "gpu": best.gpu,
        "basis": _basis(rates.perf),
        "ttft_s": ttft_v,
        "tpot_s": tpot_v,
        "throughput_output_tokens_per_s": thr_rep,
        "throughput_output_tokens_per_s_per_gpu": thr_rep / gpr,
        "batch": best.replica.max_batch,
        "max_batch": int(best.extra["kv_max_batch"]),
        "kv_cache_bytes_per_token": sh.model_kv_bytes_per_token(),
        "kv_cache_window_bytes_per_sequence": sh.model_window_kv_bytes_per_seq(),
        "kv_cache_bytes_per_token_per_gpu": sh.kv_bytes_per_token_per_gpu(),
        "memory_per_gpu_bytes": mb["total"],
        "fits_in_memory": bool(mb["total"] <= mp.usable_bytes),
        "bottleneck": decode_parts.bottleneck,
        "intervals": {
            "ttft_s": _interval(
                ttft_v,
                sim_fast.percentile("ttft", pct) * ft,
                sim_slow.percentile("ttft", pct) * ft,
                q_ttft,
                is_time=True,
            )
            if math.isfinite(ttft_v)
            else None,
            "tpot_s": _interval(
                tpot_v,
                sim_fast.percentile("tpot", pct) * fp,
                sim_slow.percentile("tpot", pct) * fp,
                q_tpot,
                is_time=True,
            )
            if math.isfinite(tpot_v)
            else None,
            # the load is fixed: a slower device needs more replicas, each carrying less
            "throughput_output_tokens_per_s": [
                thr_rep * best.replicas / r_hi,
                thr_rep * best.replicas / r_lo,
            ],
            "throughput_output_tokens_per_s_per_gpu": [
                thr_rep * best.replicas / r_hi / gpr,
                thr_rep * best.replicas / r_lo / gpr,
            ],
            "replicas": [r_lo, r_hi],
        },
        "tp": best.tp,
        "pp": best.pp,
        "ep": best.ep,
        **_dp_attention(best.dp),
        "gpus_per_replica": gpr,
        **_multi_node(best.extra.get("multi_node")),
        **_pcie_tp(best.extra.get("pcie_tp")),
        "replicas": best.replicas,
        "num_gpus": best.replicas * gpr,
        "usd_per_hour": None
        if best.usd_per_gpu_hour is None
        else best.usd_per_gpu_hour * best.replicas * gpr,
        "price_source": best.extra.get("price_source"),
        "usd_per_million_output_tokens": per_mtok,
        "cost_derivation": per_mtok_how,
        "memory_breakdown_bytes": mb,
        "load": {
            "qps": qps,
            "qps_per_replica": qps / best.replicas,
            "slo_percentile": percentile,
            "ttft_slo_s": ttft_slo_s,
            "tpot_slo_s": tpot_slo_s,
            "mean_running_requests": mean_running,
            "batch_cap": best.replica.max_batch,
            "chunk_tokens": best.replica.chunk_tokens,
        },
        "simulation": {
            "method": "discrete-event simulation of one continuous-batching replica, Poisson arrivals split evenly over replicas",
            "seed": seed,
            **sv,
        },
        "ranked_by": rank,
        "unpriced_gpus": unpriced,
        "candidates": cand_rows,
    }
    if best.gpu in serving:
        out["serving_calibration"] = _fleet_serving_calibration(
            serving[best.gpu],
            raw={"ttft_s": ttft_v / ft, "tpot_s": tpot_v / fp},
            hardware_basis=out["basis"],
        )
        if serving[best.gpu].get("applied"):
            out["basis"] = "measured"
    return out


def _latency_factors(factors: ServingFactors | None) -> tuple[float, float]:
    """(TTFT, TPOT) multipliers of :func:`serving_factors`' result; (1, 1) without one."""
    if not factors or not factors.get("applied"):
        return (1.0, 1.0)
    return (float(factors["ttft_factor"]["value"]), float(factors["tpot_factor"]["value"]))


def _fleet_serving_calibration(
    factors: ServingFactors, *, raw: dict[str, float], hardware_basis: str | None
) -> ServingFactors | FleetServingCalibration:
    """The sizing result's ``serving_calibration``: the factors, what they scaled, the raw
    latencies at the SLO percentile."""
    if not factors.get("applied"):
        return factors
    return {
        **factors,
        "raw": raw,
        "hardware_basis": hardware_basis,
        "applied_to": (
            "every candidate on this GPU: the model's TTFT and TPOT (analytic and simulated, "
            "at the SLO percentile) times the factors before each SLO check; the simulation "
            "section keeps the model's own latencies"
        ),
    }


# ---------------------------------------------------------------------------------------------
# Disaggregated prefill and decode (DistServe, Splitwise, NVIDIA Dynamo)
# ---------------------------------------------------------------------------------------------
#: message size at which the calibrated inter-node point-to-point model gives the link's
#: sustained bandwidth for the KV transfer (a KV cache of a few thousand tokens is tens to
#: hundreds of MB; latency-free at this size)
KV_TRANSFER_PROBE_BYTES = 256 * 2**20


#: a sized pool: (GPUs, the candidate, its replicas, the simulation at that count)
_Sized: TypeAlias = tuple[int, Candidate, int, SimResult]


def inter_node_link_bytes_per_s(rates: DeviceRates) -> tuple[float, str]:
    """Per-GPU bandwidth between two nodes from the calibrated point-to-point model (one
    rank per node), and its basis: the link a prefill GPU sends its KV shard over."""
    t3, basis = collective3(
        rates.perf, "p2p", float(KV_TRANSFER_PROBE_BYTES), 2, ranks_per_node=1, latency=None
    )
    return float(KV_TRANSFER_PROBE_BYTES / t3[VALUE]), basis


def _min_replicas(ok: Callable[[int], bool], start: int, limit: int = 4096) -> int | None:
    """Smallest replica count ``r >= 1`` with ``ok(r)`` (monotone), doubling then bisecting."""
    lo, hi = 0, max(1, start)
    while not ok(hi):
        lo, hi = hi, hi * 2
        if hi > limit:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def size_disaggregated(
    *,
    arch: ModelArch,
    gpus: list[Accelerator],
    demand: ServingDemand,
    colocated: FleetResult,
    fitted: FittedOverheads,
    get_perf: PerfLookup,
    catalog: Catalog,
) -> Disaggregated:
    """Separate prefill and decode pools for ``demand``, compared with the co-located fleet.

    Method (DistServe, Zhong et al., OSDI 2024, section 4: each phase on its own instances,
    sized for its own SLO; Splitwise, Patel et al., ISCA 2024; NVIDIA Dynamo's disaggregated
    serving sizes the prefill and decode workers the same way):

    * **Decode pool**: replicas that receive prompts with their KV cache
      (:attr:`ReplicaModel.prefilled`) and only decode; the fewest replicas (and best batch
      cap) whose simulated TPOT at the SLO percentile meets ``tpot_slo_s``. Its admission wait
      (arrival at the decode replica to its first step) is measured too.
    * **KV transfer**: the prompt's KV cache per GPU (prompt tokens at the SLO percentile x KV
      bytes per token per GPU) over the calibrated inter-node link
      (:func:`gpuplan.forecast.serving.kv_transfer_time_s`).
    * **Prefill pool**: replicas that only prefill (answers of one token); the fewest whose
      simulated TTFT at the percentile is within ``ttft_slo_s`` minus the KV transfer and the
      decode pool's admission wait (percentiles added: conservative).

    Both pools use the GPU and the layouts the co-located search considered; each pool
    takes its own layout. Returns the two pools, the prefill:decode GPU ratio, the KV
    transfer with its inputs, the fleet's GPUs and price, and which fleet is cheaper.
    """
    from gpuplan.forecast.serving import kv_transfer_time_s

    gpu_id = colocated["gpu"]
    g = next(x for x in gpus if x.id == gpu_id)
    cands, _ = build_candidates(
        arch=arch,
        gpus=[g],
        precision=demand.precision,
        kv_precision=demand.kv_precision,
        tp=demand.tp,
        pp=demand.pp,
        ep=demand.ep,
        inputs=demand.inputs,
        outputs=demand.outputs,
        batch=demand.batch,
        fitted=fitted,
        get_perf=get_perf,
        catalog=catalog,
        chunk_tokens=demand.chunk_tokens,
        utilization=engine_profile(demand.engine).memory_share(demand.memory_utilization),
        engine=demand.engine,
        nodes=demand.nodes,
        speculation=demand.speculation,
    )
    if not cands:
        return {"num_gpus": None, "reason": f"no layout of {gpu_id} for separate pools"}
    pct = PERCENTILES[demand.slo_percentile]
    q = pct / 100.0
    qps = float(demand.qps)
    n_req, seed = demand.num_requests, demand.seed
    one = LengthDist(1.0)
    prompt_q = demand.inputs.quantile(q) if q > 0.5 else demand.inputs.quantile(0.5)
    colo_reps = int(colocated["replicas"]) * int(colocated["gpus_per_replica"])

    def top_caps(cs: list[Candidate], per_layout: int) -> list[Candidate]:
        out: list[Candidate] = []
        for key in sorted({(c.tp, c.pp) for c in cs}):
            same = sorted(
                (c for c in cs if (c.tp, c.pp) == key), key=lambda c: -c.replica.max_batch
            )
            out += same[:per_layout]
        return out

    dec_cands = top_caps(cands, 3)
    pf_cands = top_caps(cands, 1)

    def size_decode(wait_cap: float | None) -> _Sized | None:
        best: _Sized | None = None
        for c in dec_cands:
            rep = dc_replace(c.replica, prefilled=True, label=c.replica.label + " decode")

            def ok(r: int, rep: ReplicaModel = rep) -> bool:
                sim = simulate(
                    rep, qps / r, demand.inputs, demand.outputs, num_requests=n_req, seed=seed
                )
                if sim.overloaded:
                    return False
                if wait_cap is not None and sim.percentile("ttft", pct) > wait_cap:
                    return False
                return demand.tpot_slo_s is None or sim.percentile("tpot", pct) <= demand.tpot_slo_s

            r = _min_replicas(ok, max(1, colo_reps // max(c.gpus_per_replica, 1) // 4))
            if r is None or (best is not None and r * c.gpus_per_replica >= best[0]):
                continue
            sim = simulate(
                rep, qps / r, demand.inputs, demand.outputs, num_requests=n_req, seed=seed
            )
            best = (r * c.gpus_per_replica, c, r, sim)
        return best

    def size_prefill(budget: float | None) -> _Sized | None:
        best: _Sized | None = None
        for c in pf_cands:
            # a prefill replica verifies no drafts: its passes are the model's alone
            rep = dc_replace(
                c.replica,
                label=c.replica.label + " prefill",
                cost=dc_replace(c.replica.cost, speculation=None),
            )

            def ok(r: int, rep: ReplicaModel = rep) -> bool:
                sim = simulate(rep, qps / r, demand.inputs, one, num_requests=n_req, seed=seed)
                if sim.overloaded:
                    return False
                return budget is None or sim.percentile("ttft", pct) <= budget

            r = _min_replicas(ok, 1, limit=256)
            if r is None or (best is not None and r * c.gpus_per_replica >= best[0]):
                continue
            sim = simulate(rep, qps / r, demand.inputs, one, num_requests=n_req, seed=seed)
            best = (r * c.gpus_per_replica, c, r, sim)
        return best

    # the TTFT SLO is shared by the prefill pool's queue and prefill, the KV transfer and the
    # decode pool's admission wait: try a few splits and keep the fewest GPUs in all
    slo = demand.ttft_slo_s
    splits = [None] if slo is None else [0.05, 0.15, 0.3]
    found: tuple[int, _Sized, _Sized, float, float] | None = None
    reasons: list[str] = []
    for frac in splits:
        dec = size_decode(None if slo is None or frac is None else frac * slo)
        if dec is None:
            reasons.append("no decode pool meets the TPOT SLO in simulation")
            continue
        dwait = dec[3].percentile("ttft", pct)
        link_bw, link_basis = inter_node_link_bytes_per_s(dec[1].extra["rates"])
        kvb = float(dec[1].extra["sharded"].kv_bytes_per_seq_gpu(prompt_q))
        kv_t = kv_transfer_time_s(kvb, link_bw)
        budget = None if slo is None else slo - kv_t - dwait
        if budget is not None and budget <= 0:
            reasons.append(
                f"the KV transfer ({kv_t:.3g} s) and the decode admission wait ({dwait:.3g} s) "
                f"leave nothing of the {slo:g} s TTFT SLO for prefill"
            )
            continue
        pf = size_prefill(budget)
        if pf is None:
            reasons.append("no prefill pool meets the TTFT SLO in simulation")
            continue
        if found is None or pf[0] + dec[0] < found[0]:
            found = (pf[0] + dec[0], pf, dec, kv_t, link_bw)
            found_basis = link_basis
    if found is None:
        return {"num_gpus": None, "reason": "; ".join(dict.fromkeys(reasons))}
    _, best_pf, best_dec, kv_s, link_bw = found
    link_basis = found_basis
    _, dc, dr, dsim = best_dec
    dec_wait = dsim.percentile("ttft", pct)
    kv_per_gpu = float(dc.extra["sharded"].kv_bytes_per_seq_gpu(prompt_q))
    _, pc, pr, psim = best_pf
    n_p, n_d = pr * pc.gpus_per_replica, dr * dc.gpus_per_replica
    total = n_p + n_d
    price = pc.usd_per_gpu_hour
    usd = None if price is None else price * total
    colo_usd = colocated.get("usd_per_hour")
    per_mtok, how = cost_per_million_output_tokens(price, total, qps, demand.outputs.mean)
    ttft_total = psim.percentile("ttft", pct) + kv_s + dec_wait
    if total < colo_reps:
        verdict = f"disaggregated is cheaper: {total} GPUs against {colo_reps} co-located"
    elif total > colo_reps:
        verdict = f"co-located is cheaper: {colo_reps} GPUs against {total} disaggregated"
    else:
        verdict = f"the same {total} GPUs either way"

    def pool(c: Candidate, r: int, sim: SimResult) -> PoolInfo:
        return {
            "tp": c.tp,
            "pp": c.pp,
            "ep": c.ep,
            "batch_cap": c.replica.max_batch,
            "gpus_per_replica": c.gpus_per_replica,
            "replicas": r,
            "num_gpus": r * c.gpus_per_replica,
            "qps_per_replica": qps / r,
            "ttft_s": sim.percentile("ttft", pct),
            "tpot_s": sim.percentile("tpot", pct) if sim.tpot_s.size else None,
            "mean_running_requests": sim.mean_running,
        }

    return {
        "method": (
            "prefill and decode on separate replicas of the same GPU (DistServe OSDI'24, "
            "Splitwise ISCA'24, NVIDIA Dynamo): decode pool simulated with prompts arriving "
            "prefilled, sized for the TPOT SLO; prefill pool simulated with one-token answers, "
            "sized for the TTFT SLO minus the KV transfer and the decode admission wait"
        ),
        "gpu": gpu_id,
        "slo_percentile": demand.slo_percentile,
        "prefill": pool(pc, pr, psim),
        "decode": {**pool(dc, dr, dsim), "admission_wait_s": dec_wait},
        "prefill_decode_gpu_ratio": n_p / n_d,
        "kv_transfer": {
            "prompt_tokens": float(prompt_q),
            "kv_bytes_per_token_per_gpu": float(dc.extra["sharded"].kv_bytes_per_token_per_gpu()),
            "kv_bytes_per_gpu": kv_per_gpu,
            "link_bytes_per_s": link_bw,
            "link_basis": link_basis,
            "link": "scale-out network between the pools (calibrated inter-node point-to-point, per GPU)",
            "seconds": kv_s,
            "formula": (
                "prompt tokens x KV bytes per token per GPU (+ a sliding-window layer's window) "
                "/ link bytes per second"
            ),
        },
        "ttft_s": ttft_total,
        "tpot_s": dsim.percentile("tpot", pct),
        "ttft_note": "prefill TTFT + KV transfer + decode admission wait, each at the percentile",
        "num_gpus": total,
        "usd_per_hour": usd,
        "usd_per_million_output_tokens": per_mtok,
        "cost_derivation": how,
        "colocated_num_gpus": colo_reps,
        "colocated_usd_per_hour": colo_usd,
        "verdict": verdict,
    }
