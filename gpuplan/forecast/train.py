"""Typed entry point of the training forecast: a :class:`TrainRequest` in, a frozen
:class:`TrainForecast` out (issue 14.5).

Job of this module: sit above :mod:`gpuplan.forecast.training` and
:mod:`gpuplan.forecast.search` (which it wraps, unchanged) so that a caller such as the plan
reads a training forecast by attribute, never by string key. :meth:`TrainForecast.to_json`
is the one place that writes the DESIGN.md 3.3 ``forecast train`` JSON from the record:
the figures the record types (step time, throughput, MFU, time to train, memory, layout,
framework ...) are written from its fields, in the JSON's own key order, and the rest
(breakdowns, runners-up, provenance detail) is carried as it came. Every figure with an
interval is one :class:`~gpuplan.forecast.band.Band` (value, low, high).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import cast

from gpuplan.forecast.band import Band

#: A JSON object as the forecast writes it.
JsonDict = dict[str, object]

#: DESIGN.md 3.3 keys whose value (and ``intervals.<key>``) a :class:`TrainForecast` types.
BANDED = (
    "step_time_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "model_tflops_per_gpu",
    "hardware_tflops_per_gpu",
    "mfu",
    "hfu",
    "time_to_train_s",
    "gpu_hours",
)
_TYPED = (
    *BANDED,
    "step_time_interval_s",
    "num_gpus",
    "memory_per_gpu_bytes",
    "fits_in_memory",
    "memory_overshoot_bytes",
    "parallelism",
    "to_fit",
    "notes",
    "framework",
    "framework_basis",
    "framework_profile",
    "profile_basis",
    "model",
    "gpu",
    "precision",
    "seq_len",
    "global_batch",
    "global_batch_tokens",
    "tokens",
    "target_days",
)


def _dict(value: object, what: str) -> JsonDict:
    if not isinstance(value, dict):
        raise TypeError(f"training forecast JSON: {what} is not an object")
    return cast(JsonDict, value)


def _num(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"training forecast JSON: {what} is not a number")
    return float(value)


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"training forecast JSON: {what} is not a number")
    return int(value)


def _opt_num(value: object, what: str) -> float | None:
    return None if value is None else _num(value, what)


def _pair(value: object, what: str) -> tuple[float, float] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise TypeError(f"training forecast JSON: {what} is not a [low, high] pair")
    return (_num(value[0], what), _num(value[1], what))


def _strings(value: object) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(str(x) for x in value)


@dataclass(frozen=True)
class TrainLayout:
    """The parallel layout a training forecast chose (``parallelism`` of DESIGN.md 3.3)."""

    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    vp: int
    micro_batch: int
    recompute: str
    zero: int
    fsdp: bool
    num_microbatches: int
    hsdp_shard_size: int | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> TrainLayout:
        def i(k: str) -> int:
            return _int(d[k], f"parallelism.{k}")

        hsdp = d.get("hsdp_shard_size")
        return cls(
            tp=i("tp"),
            pp=i("pp"),
            dp=i("dp"),
            cp=i("cp"),
            ep=i("ep"),
            vp=i("vp"),
            micro_batch=i("micro_batch"),
            recompute=str(d["recompute"]),
            zero=i("zero"),
            fsdp=bool(d["fsdp"]),
            num_microbatches=i("num_microbatches"),
            hsdp_shard_size=None if hsdp is None else _int(hsdp, "parallelism.hsdp_shard_size"),
        )

    def to_json(self) -> dict[str, int | str | bool]:
        out: dict[str, int | str | bool] = {
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "cp": self.cp,
            "ep": self.ep,
            "vp": self.vp,
            "micro_batch": self.micro_batch,
            "recompute": self.recompute,
            "zero": self.zero,
            "fsdp": self.fsdp,
            "num_microbatches": self.num_microbatches,
        }
        if self.hsdp_shard_size is not None:
            out["hsdp_shard_size"] = self.hsdp_shard_size
        return out

    def text(self) -> str:
        """``tp=8 pp=16 dp=... `` in the JSON's field order."""
        return " ".join(f"{k}={v}" for k, v in self.to_json().items())


@dataclass(frozen=True)
class TrainRequest:
    """What to forecast: the arguments of
    :func:`gpuplan.forecast.training.forecast_training` a caller sets (same defaults)."""

    model: str
    gpu: str = "h100"
    num_gpus: int | None = None
    seq_len: int = 8192
    global_batch: int | None = None
    global_batch_tokens: float | None = None
    precision: str = "bf16"
    parallelism: Mapping[str, int | str] | None = None
    tokens: float | None = None
    target_days: float | None = None
    node: str | None = None
    instance: str | None = None
    inter_node_bandwidth_bytes_per_s: float | None = None
    framework: str | None = None
    fsdp: bool = False


@dataclass(frozen=True)
class TrainForecast:
    """One training forecast (DESIGN.md 3.3 ``forecast train``), typed and frozen.

    The banded figures carry ``intervals.<key>`` as their :class:`Band`; ``mfu``/``hfu``
    are None without a catalog peak for the precision, ``time_to_train_s``/``gpu_hours``
    without a token count. ``inter_node_bandwidth_bytes_per_s`` and
    ``inter_node_bandwidth_basis`` are the scale-out bandwidth per GPU the forecast assumed
    and where it came from (``provenance``). ``detail`` is every other field of the JSON,
    as the forecast wrote it; ``key_order`` and ``interval_order`` keep the JSON's order.
    """

    num_gpus: int
    step_time_s: Band
    tokens_per_s: Band
    tokens_per_s_per_gpu: Band
    model_tflops_per_gpu: Band
    hardware_tflops_per_gpu: Band
    mfu: Band | None
    hfu: Band | None
    time_to_train_s: Band | None
    gpu_hours: Band | None
    memory_per_gpu_bytes: float
    fits_in_memory: bool
    memory_overshoot_bytes: float
    parallelism: TrainLayout
    framework: str
    framework_basis: str
    framework_profile: str
    profile_basis: str
    model: str
    gpu: str
    precision: str
    seq_len: int
    global_batch: int
    global_batch_tokens: int
    tokens: float | None
    target_days: float | None
    inter_node_bandwidth_bytes_per_s: float | None
    inter_node_bandwidth_basis: str | None
    to_fit: tuple[str, ...] = ()
    notes: tuple[str, ...] | None = None
    detail: Mapping[str, object] = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] = field(default=(), repr=False)
    interval_order: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> TrainForecast:
        """The record of a ``forecast_training`` result dict (the dict is not kept)."""
        intervals = _dict(d.get("intervals") or {}, "intervals")

        def band(key: str) -> Band | None:
            value = d.get(key)
            if value is None:
                return None
            return Band.of(_num(value, key), _pair(intervals.get(key), f"intervals.{key}"))

        def need(key: str) -> Band:
            b = band(key)
            if b is None:
                raise TypeError(f"training forecast JSON: no {key}")
            return b

        prov = _dict(d.get("provenance") or {}, "provenance")
        bw = prov.get("inter_node_bandwidth_bytes_per_s")
        basis = prov.get("inter_node_bandwidth")
        detail = {k: copy.deepcopy(v) for k, v in d.items() if k not in _TYPED}
        detail["intervals"] = {k: copy.deepcopy(v) for k, v in intervals.items() if k not in BANDED}
        notes = d.get("notes")
        return cls(
            num_gpus=_int(d["num_gpus"], "num_gpus"),
            step_time_s=need("step_time_s"),
            tokens_per_s=need("tokens_per_s"),
            tokens_per_s_per_gpu=need("tokens_per_s_per_gpu"),
            model_tflops_per_gpu=need("model_tflops_per_gpu"),
            hardware_tflops_per_gpu=need("hardware_tflops_per_gpu"),
            mfu=band("mfu"),
            hfu=band("hfu"),
            time_to_train_s=band("time_to_train_s"),
            gpu_hours=band("gpu_hours"),
            memory_per_gpu_bytes=_num(d["memory_per_gpu_bytes"], "memory_per_gpu_bytes"),
            fits_in_memory=bool(d["fits_in_memory"]),
            memory_overshoot_bytes=_num(d["memory_overshoot_bytes"], "memory_overshoot_bytes"),
            parallelism=TrainLayout.from_json(_dict(d["parallelism"], "parallelism")),
            framework=str(d["framework"]),
            framework_basis=str(d["framework_basis"]),
            framework_profile=str(d["framework_profile"]),
            profile_basis=str(d["profile_basis"]),
            model=str(d["model"]),
            gpu=str(d["gpu"]),
            precision=str(d["precision"]),
            seq_len=_int(d["seq_len"], "seq_len"),
            global_batch=_int(d["global_batch"], "global_batch"),
            global_batch_tokens=_int(d["global_batch_tokens"], "global_batch_tokens"),
            tokens=_opt_num(d.get("tokens"), "tokens"),
            target_days=_opt_num(d.get("target_days"), "target_days"),
            inter_node_bandwidth_bytes_per_s=(
                float(bw)
                if isinstance(bw, (int, float)) and not isinstance(bw, bool) and bw > 0
                else None
            ),
            inter_node_bandwidth_basis=None if basis is None else str(basis),
            to_fit=_strings(d.get("to_fit")),
            notes=None if notes is None else _strings(notes),
            detail=detail,
            key_order=tuple(d),
            interval_order=tuple(intervals),
        )

    def _typed_json(self) -> JsonDict:
        out: JsonDict = {}
        for key in BANDED:
            b = cast("Band | None", getattr(self, key))
            out[key] = None if b is None else b.value
        out["step_time_interval_s"] = self.step_time_s.pair()
        out.update(
            num_gpus=self.num_gpus,
            memory_per_gpu_bytes=self.memory_per_gpu_bytes,
            fits_in_memory=self.fits_in_memory,
            memory_overshoot_bytes=self.memory_overshoot_bytes,
            parallelism=self.parallelism.to_json(),
            to_fit=list(self.to_fit),
            framework=self.framework,
            framework_basis=self.framework_basis,
            framework_profile=self.framework_profile,
            profile_basis=self.profile_basis,
            model=self.model,
            gpu=self.gpu,
            precision=self.precision,
            seq_len=self.seq_len,
            global_batch=self.global_batch,
            global_batch_tokens=self.global_batch_tokens,
            tokens=self.tokens,
            target_days=self.target_days,
        )
        if self.notes is not None:
            out["notes"] = list(self.notes)
        return out

    def to_json(self) -> JsonDict:
        """The DESIGN.md 3.3 ``forecast train`` JSON of this forecast (a fresh dict)."""
        typed = self._typed_json()
        rest = copy.deepcopy(dict(self.detail))
        iv = _dict(rest.pop("intervals", {}), "intervals")
        for key in BANDED:
            b = cast("Band | None", getattr(self, key))
            if b is not None and key in self.interval_order:
                iv[key] = b.pair()
        merged = {**rest, **typed}
        merged["intervals"] = {k: iv[k] for k in self.interval_order if k in iv}
        order = [k for k in self.key_order if k in merged]
        return {k: merged[k] for k in order}


def forecast_train(
    request: TrainRequest,
    *,
    artifact: object = None,
    top: int = 1,
    progress: Callable[[int, object], None] | None = None,
) -> TrainForecast:
    """Forecast ``request`` (:func:`gpuplan.forecast.training.forecast_training`), typed.

    Raises the same :class:`~gpuplan.errors.InputError` lines as the untyped function.
    """
    from gpuplan.forecast.training import forecast_training

    result = forecast_training(
        request.model,
        gpu=request.gpu,
        num_gpus=request.num_gpus,
        seq_len=request.seq_len,
        global_batch=request.global_batch,
        global_batch_tokens=request.global_batch_tokens,
        precision=request.precision,
        parallelism=None if request.parallelism is None else dict(request.parallelism),
        tokens=request.tokens,
        target_days=request.target_days,
        top=top,
        artifact=artifact,
        fsdp=request.fsdp,
        node=request.node,
        instance=request.instance,
        inter_node_bandwidth_bytes_per_s=request.inter_node_bandwidth_bytes_per_s,
        framework_name=request.framework,
        progress=progress,
    )
    return TrainForecast.from_json(result)
