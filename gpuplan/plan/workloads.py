"""Forecast the scenario's workloads on each candidate GPU (through gpuplan.forecast only).

Training runs are sized for their deadline with :func:`gpuplan.forecast.train.forecast_train`
(``target_days``) and then re-forecast at the GPU count rounded up to whole nodes. Serving
workloads are sized by :func:`gpuplan.forecast.infer.size_fleet` (the typed wrapper of
:func:`gpuplan.forecast.inference.size_serving_fleet`, the function ``gpuplan forecast
infer --qps`` calls): requests drawn from the scenario's length distributions (mean and its
highest percentile given, or fixed at the mean), the TTFT/TPOT targets held at the
scenario's ``slo_percentile`` (p99 by default), so that the plan and ``forecast infer``
give the same GPU count for the same workload; the plan then rounds it up to whole nodes.
A forecast that cannot be made (the model does not fit, the deadline cannot be met) is
recorded as the reason the option is infeasible, never raised. Forecasts come back as the
frozen records :class:`~gpuplan.forecast.train.TrainForecast` and
:class:`~gpuplan.forecast.infer.ServingFleet`; the plan reads their attributes (bands for
every interval), never result dicts by key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuplan.errors import GpuplanError
from gpuplan.forecast.hardware import within_node
from gpuplan.forecast.infer import ServingFleet, size_fleet
from gpuplan.forecast.inference import ServingDemand
from gpuplan.forecast.inference_step import DEFAULT_ENGINE, engine_resolution
from gpuplan.forecast.serving import LengthDist
from gpuplan.forecast.train import TrainForecast, TrainRequest, forecast_train
from gpuplan.plan.context import PlanContext, TrainKey
from gpuplan.plan.provenance import Binding, Figure, FigureDict, Text, derived
from gpuplan.plan.scenario import InferenceService, LengthDistribution, TrainingWorkload

SECONDS_PER_DAY = 86400.0


def _args_text(kwargs: Mapping[str, object]) -> str:
    shown = {k: v for k, v in kwargs.items() if v is not None}
    return ", ".join(f"{k}={v}" for k, v in shown.items())


def _call_args(req: TrainRequest) -> dict[str, object]:
    """The request's arguments in ``forecast_training``'s order (the ledger's call line)."""
    args: dict[str, object] = dict(
        model=req.model,
        gpu=req.gpu,
        num_gpus=req.num_gpus,
        seq_len=req.seq_len,
        global_batch=req.global_batch,
        global_batch_tokens=req.global_batch_tokens,
        precision=req.precision,
        parallelism=None if req.parallelism is None else dict(req.parallelism),
        tokens=req.tokens,
        target_days=req.target_days,
        top=1,
    )
    if req.node is not None:
        args["node"] = req.node
    if req.instance is not None:
        args["instance"] = req.instance
    if req.inter_node_bandwidth_bytes_per_s is not None:
        args["inter_node_bandwidth_bytes_per_s"] = req.inter_node_bandwidth_bytes_per_s
    return args


def training_request(
    w: TrainingWorkload,
    gpu_id: str,
    *,
    num_gpus: int | None,
    target_days: float | None,
    platform: tuple[str, str] | None = None,
    inter_node_bandwidth_bytes_per_s: float | None = None,
) -> TrainRequest:
    """The forecast request of training workload ``w`` on ``gpu_id``."""
    return TrainRequest(
        model=w.model,
        gpu=gpu_id,
        num_gpus=num_gpus,
        seq_len=w.seq_len,
        global_batch=w.global_batch,
        global_batch_tokens=w.global_batch_tokens,
        precision=w.precision,
        parallelism=dict(w.parallelism) if w.parallelism else None,
        tokens=w.tokens,
        target_days=target_days,
        node=platform[1] if platform is not None and platform[0] == "node" else None,
        instance=platform[1] if platform is not None and platform[0] == "instance" else None,
        inter_node_bandwidth_bytes_per_s=inter_node_bandwidth_bytes_per_s,
    )


def forecast_training_cached(
    ctx: PlanContext,
    w: TrainingWorkload,
    gpu_id: str,
    *,
    num_gpus: int | None,
    target_days: float | None,
    platform: tuple[str, str] | None = None,
    inter_node_bandwidth_bytes_per_s: float | None = None,
) -> tuple[TrainForecast | None, str | None]:
    """One training forecast (cached); returns (forecast, error line).

    ``platform`` is ``("node", id)`` or ``("instance", id)``: the forecast then takes the
    scale-out bandwidth per GPU from that row; ``inter_node_bandwidth_bytes_per_s``
    overrides it (the fabric's figure when it is lower).
    """
    key: TrainKey = (
        w.name,
        gpu_id,
        num_gpus,
        target_days,
        platform,
        inter_node_bandwidth_bytes_per_s,
    )
    hit = ctx.training_cache.get(key)
    if hit is not None:
        return hit
    req = training_request(
        w,
        gpu_id,
        num_gpus=num_gpus,
        target_days=target_days,
        platform=platform,
        inter_node_bandwidth_bytes_per_s=inter_node_bandwidth_bytes_per_s,
    )
    ctx.progress(
        f"forecast train {w.name} on {gpu_id} ({_args_text({'num_gpus': num_gpus, 'target_days': target_days})})"
    )
    result: TrainForecast | None
    try:
        result, err = forecast_train(req, artifact=ctx.artifact), None
    except GpuplanError as exc:
        result, err = None, exc.one_line()
    ctx.ledger.forecasts.append(
        {
            "kind": "train",
            "workload": w.name,
            "gpu": gpu_id,
            "call": f"forecast_training({_args_text(_call_args(req))})",
            "error": err,
        }
    )
    ctx.training_cache[key] = (result, err)
    return result, err


def length_dist(d: LengthDistribution) -> LengthDist:
    """The forecast's :class:`LengthDist` of a scenario ``LengthDistribution``.

    The mean and the highest percentile given (p99, else p90, else p50) fix a lognormal;
    with only a mean every request has it; ``max`` clips the samples; ``min`` and ``max``
    alone are uniform lengths (:meth:`LengthDist.uniform`).
    """
    if d.min is not None and d.max is not None:
        return LengthDist.uniform(int(d.min), int(d.max))
    assert d.mean is not None  # the scenario's check: a mean, or min and max
    return LengthDist(
        float(d.mean),
        p99=d.p99,
        p90=d.p90,
        p50=d.p50,
        max_tokens=None if d.max is None else int(d.max),
    )


def serving_demand(s: InferenceService, gpu_id: str, node_gpus: int | None = None) -> ServingDemand:
    """The sizing input of scenario serving workload ``s`` on ``gpu_id``, on machines of
    ``node_gpus`` GPUs (the option's instance or node; None: the GPU's own server)."""
    return ServingDemand(
        model=s.model,
        gpus=(gpu_id,),
        qps=float(s.qps),
        inputs=length_dist(s.input_tokens),
        outputs=length_dist(s.output_tokens),
        ttft_slo_s=s.ttft_slo_s,
        tpot_slo_s=s.tpot_slo_s,
        slo_percentile=s.slo_percentile,
        precision=s.precision,
        tp=s.tp,
        pp=s.pp,
        engine=s.engine or DEFAULT_ENGINE,
        node_gpus=node_gpus,
        speculation=s.speculative.speculation() if s.speculative else None,
    )


def size_serving_cached(
    ctx: PlanContext, s: InferenceService, gpu_id: str, node_gpus: int | None = None
) -> tuple[ServingFleet | None, str | None]:
    """One serving fleet sizing (cached per workload, GPU and machine size); returns
    (sizing, error line). A replica's TP stays inside one machine of ``node_gpus``."""
    row = ctx.catalog.gpu(gpu_id)
    if node_gpus is not None and within_node(row, node_gpus) is row:
        node_gpus = None  # the GPU's own server fits the machine: one sizing for every size
    key = (s.name, gpu_id, node_gpus)
    hit = ctx.serving_cache.get(key)
    if hit is not None:
        return hit
    demand = serving_demand(s, gpu_id, node_gpus)
    ctx.progress(f"forecast infer {s.name} on {gpu_id}")
    sizing: ServingFleet | None
    try:
        sizing, err = size_fleet(demand, artifact=ctx.artifact), None
    except GpuplanError as exc:
        sizing, err = None, exc.one_line()
    call = (
        f"size_serving_fleet(model={s.model}, gpu={gpu_id}, qps={s.qps:g}, "
        f"inputs={demand.inputs.text()}, outputs={demand.outputs.text()}, "
        f"ttft_slo_s={s.ttft_slo_s}, tpot_slo_s={s.tpot_slo_s}, "
        f"slo_percentile={s.slo_percentile}, precision={s.precision}, tp={s.tp}, pp={s.pp}, "
        f"engine={demand.engine}, node_gpus={node_gpus}"
        + (f", speculation={demand.speculation.describe()}" if demand.speculation else "")
        + ")"
    )
    note = engine_resolution(demand.engine)
    if note is not None:
        call += f" [{note}]"
    ctx.ledger.forecasts.append(
        {"kind": "infer", "workload": s.name, "gpu": gpu_id, "call": call, "error": err}
    )
    ctx.serving_cache[key] = (sizing, err)
    return sizing, err


@dataclass
class TrainingOnOption:
    """One training workload sized on one option (GPU type and GPUs per node)."""

    name: str
    index: int
    gpus: Figure | None = None
    nodes: Figure | None = None
    run_s: Figure | None = None
    tokens_per_s: Figure | None = None
    mfu: Figure | None = None
    step_time_s: Figure | None = None
    memory_per_gpu_bytes: Figure | None = None
    parallelism: str | None = None
    forecast: TrainForecast | None = None
    error: str | None = None
    binding: list[Binding] = field(default_factory=list)
    platform: tuple[str, str] | None = None
    run_on_fabric_s: Figure | None = None
    notes: list[Text] = field(default_factory=list)

    def to_json(self) -> FigureDict:
        return {
            "name": self.name,
            "gpus": self.gpus,
            "nodes": self.nodes,
            "time_to_train_s": self.run_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "step_time_s": self.step_time_s,
            "memory_per_gpu_bytes": self.memory_per_gpu_bytes,
            "parallelism": self.parallelism,
            "time_to_train_on_fabric_s": self.run_on_fabric_s,
            "error": self.error,
        }


@dataclass
class ServingOnOption:
    """One serving workload sized on one option."""

    name: str
    index: int
    gpus: Figure | None = None
    nodes: Figure | None = None
    replicas: Figure | None = None
    throughput_per_replica: Figure | None = None
    ttft_s: Figure | None = None
    tpot_s: Figure | None = None
    output_tokens_per_month: Figure | None = None
    hours_per_month: Figure | None = None
    sized_at: str | None = None
    cost_interval_factors: tuple[float, float] | None = None
    error: str | None = None
    gpus_for_load: Figure | None = None
    sizing: ServingFleet | None = None

    def to_json(self) -> FigureDict:
        return {
            "name": self.name,
            "gpus": self.gpus,
            "gpus_for_load": self.gpus_for_load,
            "layout": None if self.sizing is None else self.sizing.layout_text,
            "nodes": self.nodes,
            "replicas": self.replicas,
            "throughput_output_tokens_per_s_per_replica": self.throughput_per_replica,
            "ttft_s": self.ttft_s,
            "tpot_s": self.tpot_s,
            "output_tokens_per_month": self.output_tokens_per_month,
            "sized_at": self.sized_at,
            "serving_calibration": self.serving_calibration(),
            "error": self.error,
        }

    def serving_calibration(self) -> dict[str, object] | None:
        """The serve-probe factors the sizing applied on this GPU, in short; None without."""
        cal = None if self.sizing is None else self.sizing.serving_calibration
        if cal is None:
            return None
        if not cal.applied:
            return {"applied": False, "reason": cal.reason}
        return {
            "applied": True,
            "engine": cal.engine,
            "ttft_factor": None if cal.ttft_factor is None else cal.ttft_factor.to_json(),
            "tpot_factor": None if cal.tpot_factor is None else cal.tpot_factor.to_json(),
            "inputs": list(cal.inputs),
        }


def size_training(
    ctx: PlanContext,
    w: TrainingWorkload,
    index: int,
    gpu_id: str,
    gpus_per_node: Figure,
    platform: tuple[str, str] | None = None,
) -> TrainingOnOption:
    """Size training workload ``w`` on ``gpu_id`` with ``gpus_per_node`` (module docstring)."""
    out = TrainingOnOption(w.name, index)
    out.platform = platform
    base = ("workloads", "training", index)
    gpn = int(gpus_per_node.value)
    max_gpus = ctx.scenario.constraints.max_gpus
    if w.num_gpus is not None:
        asked = ctx.inp((*base, "num_gpus"), "GPUs", f"{w.name}: GPUs asked")
        n = math.ceil(w.num_gpus / gpn) * gpn
        gpus = derived(
            n,
            "GPUs",
            f"{w.name}: GPUs",
            "ceil(GPUs asked / GPUs per node) x GPUs per node",
            [asked, gpus_per_node],
        )
        result, err = forecast_training_cached(
            ctx, w, gpu_id, num_gpus=n, target_days=None, platform=platform
        )
    else:
        deadline = ctx.inp((*base, "deadline_days"), "days", f"{w.name}: deadline")
        sized, err = forecast_training_cached(
            ctx, w, gpu_id, num_gpus=None, target_days=w.deadline_days, platform=platform
        )
        if sized is None:
            out.error = err
            out.binding.append(
                {
                    "constraint": "deadline_days",
                    "message": f"{w.name}: no cluster of {gpu_id} meets the deadline: {err}",
                }
            )
            return out
        ref = f"forecast train {w.name} on {gpu_id} (target_days={w.deadline_days:g})"
        n0 = ctx.fc(sized.num_gpus, "num_gpus", "GPUs", f"{w.name}: GPUs for the deadline", ref)
        if not n0.ok:
            out.error = n0.missing
            return out
        n = math.ceil(n0.value / gpn) * gpn
        gpus = derived(
            n,
            "GPUs",
            f"{w.name}: GPUs",
            "ceil(GPUs for the deadline / GPUs per node) x GPUs per node",
            [n0, gpus_per_node, deadline],
        )
        if max_gpus is not None and n > max_gpus:
            limit = ctx.inp(("constraints", "max_gpus"), "GPUs", "GPU limit")
            capped = (max_gpus // gpn) * gpn
            out.binding.append(
                {
                    "constraint": "max_gpus",
                    "message": Text(
                        f"{w.name}: meeting the deadline of {{deadline}} on {gpu_id} needs "
                        "{needed}; the limit is {limit}",
                        {"deadline": deadline, "needed": gpus, "limit": limit},
                    ),
                    "needed": gpus,
                    "limit": limit,
                }
            )
            if capped < gpn:
                out.error = "constraints.max_gpus is below one node"
                return out
            n = capped
            gpus = derived(
                n,
                "GPUs",
                f"{w.name}: GPUs (capped)",
                "floor(GPU limit / GPUs per node) x GPUs per node",
                [limit, gpus_per_node],
            )
        if n == n0.value:
            result = sized
        else:
            result, err = forecast_training_cached(
                ctx, w, gpu_id, num_gpus=n, target_days=None, platform=platform
            )
    if result is None:
        out.error = err
        return out
    ref = f"forecast train {w.name} on {gpu_id} x{n}"
    out.forecast = result
    out.gpus = gpus
    out.nodes = derived(
        n // gpn, "nodes", f"{w.name}: nodes", "GPUs / GPUs per node", [gpus, gpus_per_node]
    )
    out.run_s = ctx.fc(
        result.time_to_train_s, "time_to_train_s", "s", f"{w.name}: time to train", ref
    )
    out.tokens_per_s = ctx.fc(
        result.tokens_per_s, "tokens_per_s", "tokens/s", f"{w.name}: tokens/s", ref
    )
    out.mfu = ctx.fc(result.mfu, "mfu", "fraction", f"{w.name}: MFU", ref)
    out.step_time_s = ctx.fc(result.step_time_s, "step_time_s", "s", f"{w.name}: step time", ref)
    out.memory_per_gpu_bytes = ctx.fc(
        result.memory_per_gpu_bytes, "memory_per_gpu_bytes", "B", f"{w.name}: memory per GPU", ref
    )
    out.parallelism = result.parallelism.text()
    if w.deadline_days is not None and out.run_s.ok:
        deadline = ctx.inp((*base, "deadline_days"), "days", f"{w.name}: deadline")
        if out.run_s.value > w.deadline_days * SECONDS_PER_DAY * (1 + 1e-9):
            out.binding.append(
                {
                    "constraint": "deadline_days",
                    "message": Text(
                        f"{w.name}: takes {{run}} on {{gpus}} of {gpu_id}, over the deadline "
                        "of {deadline}",
                        {"run": out.run_s, "gpus": out.gpus, "deadline": deadline},
                    ),
                    "needed": out.run_s,
                    "limit": deadline,
                }
            )
        elif (
            out.run_s.interval is not None
            and out.run_s.interval[1] > w.deadline_days * SECONDS_PER_DAY
        ):
            upper = derived(
                out.run_s.interval[1],
                "s",
                f"{w.name}: time to train, upper end of the interval",
                "forecast interval of the time to train (high end)",
                [out.run_s],
            )
            out.notes.append(
                Text(
                    f"{w.name}: meets the deadline of {{deadline}} at the forecast's central "
                    "value, but the interval reaches {upper}: a risk to plan for",
                    {"deadline": deadline, "upper": upper},
                )
            )
    return out


def size_serving(
    ctx: PlanContext, s: InferenceService, index: int, gpu_id: str, gpus_per_node: Figure
) -> ServingOnOption:
    """Size serving workload ``s`` on ``gpu_id`` (module docstring)."""
    out = ServingOnOption(s.name, index)
    base = ("workloads", "inference", index)
    gpn = int(gpus_per_node.value)
    sizing, err = size_serving_cached(ctx, s, gpu_id, gpn)
    if sizing is None:
        out.error = err or "no forecast"
        return out
    out.sizing = sizing
    ref = f"forecast infer {s.name} on {gpu_id}"
    out.sized_at = sizing.sized_from
    need = ctx.fc(sizing.num_gpus, "num_gpus", "GPUs", f"{s.name}: GPUs for the load and SLOs", ref)
    out.gpus_for_load = need
    out.replicas = ctx.fc(
        sizing.replicas,
        "replicas",
        "replicas",
        f"{s.name}: replicas",
        ref,
        interval=sizing.replicas_interval,
    )
    n = math.ceil(sizing.num_gpus / gpn) * gpn
    out.gpus = derived(
        n,
        "GPUs",
        f"{s.name}: GPUs",
        "ceil(GPUs for the load / GPUs per node) x GPUs per node",
        [need, gpus_per_node],
    )
    out.nodes = derived(
        n // gpn, "nodes", f"{s.name}: nodes", "GPUs / GPUs per node", [out.gpus, gpus_per_node]
    )
    out.throughput_per_replica = ctx.fc(
        sizing.throughput_output_tokens_per_s,
        "throughput_output_tokens_per_s",
        "tokens/s",
        f"{s.name}: output tokens/s per replica",
        ref,
    )
    out.ttft_s = ctx.fc(sizing.ttft_s, "ttft_s", "s", f"{s.name}: TTFT", ref)
    out.tpot_s = ctx.fc(sizing.tpot_s, "tpot_s", "s", f"{s.name}: TPOT", ref)
    qps = ctx.inp((*base, "qps"), "requests/s", f"{s.name}: load")
    if s.output_tokens.min is not None:  # uniform lengths: the mean of the range
        ends = [
            ctx.inp((*base, "output_tokens", k), "tokens", f"{s.name}: {k} output")
            for k in ("min", "max")
        ]
        mean_out = derived(
            length_dist(s.output_tokens).mean,
            "tokens",
            f"{s.name}: mean output",
            "(min + max) / 2 (uniform lengths)",
            ends,
        )
    else:
        mean_out = ctx.inp((*base, "output_tokens", "mean"), "tokens", f"{s.name}: mean output")
    out.hours_per_month = ctx.inp((*base, "hours_per_month"), "h", f"{s.name}: hours per month")
    out.output_tokens_per_month = derived(
        qps.value * mean_out.value * 3600.0 * out.hours_per_month.value,
        "tokens/month",
        f"{s.name}: output tokens per month",
        "QPS x mean output tokens x 3600 s x serving hours per month",
        [qps, mean_out, out.hours_per_month],
    )
    thr = out.throughput_per_replica
    if thr.ok and thr.interval is not None and thr.value > 0:
        lo, hi = thr.interval
        # fewer tokens/s per replica -> more replicas for the same load -> higher cost
        if lo > 0 and hi > 0:
            out.cost_interval_factors = (thr.value / hi, thr.value / lo)
    return out
