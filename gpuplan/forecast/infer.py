"""Typed entry point of the serving forecast: frozen :class:`ServingFleet` (a fleet sized for
a load) and :class:`InferForecast` (one replica) records (issue 14.5).

Job of this module: sit above :mod:`gpuplan.forecast.inference` and
:mod:`gpuplan.forecast.serving` (which it wraps, unchanged) so that a caller such as the
plan reads a serving forecast by attribute, never by string key. ``to_json`` is the one
place that writes the DESIGN.md 3.3 ``forecast infer`` JSON from a record: the figures the
record types are written from its fields in the JSON's own key order, the rest (candidates,
simulation, breakdowns) is carried as it came. Every figure with an interval is one
:class:`~gpuplan.forecast.band.Band` (value, low, high); the replica count keeps its own
integer interval.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import cast

from gpuplan.forecast.band import Band
from gpuplan.forecast.inference import (
    DEFAULT_INPUT_TOKENS,
    DEFAULT_OUTPUT_TOKENS,
    ServingDemand,
    size_serving_fleet,
)

JsonDict = dict[str, object]

#: Latency and throughput keys a record types with their ``intervals.<key>`` as a Band.
BANDED = (
    "ttft_s",
    "tpot_s",
    "throughput_output_tokens_per_s",
    "throughput_output_tokens_per_s_per_gpu",
)


def _num(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"inference forecast JSON: {what} is not a number")
    return float(value)


def _int(value: object, what: str) -> int:
    return int(_num(value, what))


def _opt_num(value: object, what: str) -> float | None:
    return None if value is None else _num(value, what)


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _dict(value: object, what: str) -> JsonDict:
    if not isinstance(value, dict):
        raise TypeError(f"inference forecast JSON: {what} is not an object")
    return cast(JsonDict, value)


def _band(d: Mapping[str, object], intervals: Mapping[str, object], key: str) -> Band:
    iv = intervals.get(key)
    pair = None
    if isinstance(iv, (list, tuple)) and len(iv) == 2:
        pair = (_num(iv[0], f"intervals.{key}"), _num(iv[1], f"intervals.{key}"))
    return Band.of(_num(d[key], key), pair)


@dataclass(frozen=True)
class Factor:
    """A measured-over-forecast serving factor: its band and its basis (``measured``)."""

    band: Band
    basis: str | None

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> Factor:
        return cls(
            Band(_num(d["value"], "value"), _num(d["low"], "low"), _num(d["high"], "high")),
            _opt_str(d.get("basis")),
        )

    def to_json(self) -> JsonDict:
        return {
            "value": self.band.value,
            "low": self.band.low,
            "high": self.band.high,
            "basis": self.basis,
        }


@dataclass(frozen=True)
class ServingCalibration:
    """What the serve-probe factors did to a sizing (``serving_calibration`` of the JSON)."""

    applied: bool
    reason: str | None = None
    engine: str | None = None
    ttft_factor: Factor | None = None
    tpot_factor: Factor | None = None
    inputs: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> ServingCalibration:
        tf, pf = d.get("ttft_factor"), d.get("tpot_factor")
        inputs = d.get("inputs")
        return cls(
            applied=bool(d.get("applied")),
            reason=_opt_str(d.get("reason")),
            engine=_opt_str(d.get("engine")),
            ttft_factor=None if tf is None else Factor.from_json(_dict(tf, "ttft_factor")),
            tpot_factor=None if pf is None else Factor.from_json(_dict(pf, "tpot_factor")),
            inputs=tuple(str(x) for x in inputs) if isinstance(inputs, (list, tuple)) else (),
        )


def _rebuild(
    d_typed: JsonDict,
    iv_typed: JsonDict,
    detail: Mapping[str, object],
    key_order: tuple[str, ...],
    interval_order: tuple[str, ...],
) -> JsonDict:
    rest = copy.deepcopy(dict(detail))
    iv = _dict(rest.pop("intervals", {}), "intervals")
    iv.update(iv_typed)
    merged = {**rest, **d_typed}
    if interval_order or "intervals" in key_order:
        merged["intervals"] = {k: iv[k] for k in interval_order if k in iv}
    return {k: merged[k] for k in key_order if k in merged}


@dataclass(frozen=True)
class ServingFleet:
    """The fleet :func:`size_fleet` chose for a load (``forecast infer --qps`` JSON), typed.

    ``gpu, tp, pp, ep, gpus_per_replica, replicas, num_gpus``: the cheapest layout meeting
    the SLOs and how many replicas of it (``replicas_interval`` from the latency bands);
    ``ttft_s, tpot_s``: simulated at the SLO percentile; throughput per replica and per GPU;
    the fleet price and price per million output tokens (None without a catalog price);
    ``sized_from``: the distributions and percentile sized for, in words;
    ``serving_calibration``: the serve-probe factors applied, or None. ``detail`` is every
    other field of the JSON as the forecast wrote it.
    """

    gpu: str
    tp: int
    pp: int
    ep: int
    gpus_per_replica: int
    replicas: int
    replicas_interval: tuple[int, int] | None
    num_gpus: int
    ttft_s: Band
    tpot_s: Band
    throughput_output_tokens_per_s: Band
    throughput_output_tokens_per_s_per_gpu: Band
    usd_per_hour: float | None
    usd_per_million_output_tokens: float | None
    cost_derivation: str | None
    sized_from: str
    serving_calibration: ServingCalibration | None
    detail: Mapping[str, object] = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] = field(default=(), repr=False)
    interval_order: tuple[str, ...] = field(default=(), repr=False)

    _TYPED = (
        *BANDED,
        "gpu",
        "tp",
        "pp",
        "ep",
        "gpus_per_replica",
        "replicas",
        "num_gpus",
        "usd_per_hour",
        "usd_per_million_output_tokens",
        "cost_derivation",
        "sized_from",
    )

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> ServingFleet:
        intervals = _dict(d.get("intervals") or {}, "intervals")
        rep_iv = intervals.get("replicas")
        replicas_interval = None
        if isinstance(rep_iv, (list, tuple)) and len(rep_iv) == 2:
            replicas_interval = (_int(rep_iv[0], "replicas"), _int(rep_iv[1], "replicas"))
        cal = d.get("serving_calibration")
        detail = {k: copy.deepcopy(v) for k, v in d.items() if k not in cls._TYPED}
        detail["intervals"] = {
            k: copy.deepcopy(v) for k, v in intervals.items() if k not in BANDED and k != "replicas"
        }
        return cls(
            gpu=str(d["gpu"]),
            tp=_int(d["tp"], "tp"),
            pp=_int(d["pp"], "pp"),
            ep=_int(d["ep"], "ep"),
            gpus_per_replica=_int(d["gpus_per_replica"], "gpus_per_replica"),
            replicas=_int(d["replicas"], "replicas"),
            replicas_interval=replicas_interval,
            num_gpus=_int(d["num_gpus"], "num_gpus"),
            ttft_s=_band(d, intervals, "ttft_s"),
            tpot_s=_band(d, intervals, "tpot_s"),
            throughput_output_tokens_per_s=_band(d, intervals, "throughput_output_tokens_per_s"),
            throughput_output_tokens_per_s_per_gpu=_band(
                d, intervals, "throughput_output_tokens_per_s_per_gpu"
            ),
            usd_per_hour=_opt_num(d.get("usd_per_hour"), "usd_per_hour"),
            usd_per_million_output_tokens=_opt_num(
                d.get("usd_per_million_output_tokens"), "usd_per_million_output_tokens"
            ),
            cost_derivation=_opt_str(d.get("cost_derivation")),
            sized_from=str(d["sized_from"]),
            serving_calibration=(
                ServingCalibration.from_json(_dict(cal, "serving_calibration")) if cal else None
            ),
            detail=detail,
            key_order=tuple(d),
            interval_order=tuple(intervals),
        )

    @property
    def layout_text(self) -> str:
        """``tp=8 pp=1 ep=1``."""
        return f"tp={self.tp} pp={self.pp} ep={self.ep}"

    def to_json(self) -> JsonDict:
        """The DESIGN.md 3.3 ``forecast infer --qps`` JSON of this fleet (a fresh dict)."""
        typed: JsonDict = {k: cast(Band, getattr(self, k)).value for k in BANDED}
        typed.update(
            gpu=self.gpu,
            tp=self.tp,
            pp=self.pp,
            ep=self.ep,
            gpus_per_replica=self.gpus_per_replica,
            replicas=self.replicas,
            num_gpus=self.num_gpus,
            usd_per_hour=self.usd_per_hour,
            usd_per_million_output_tokens=self.usd_per_million_output_tokens,
            cost_derivation=self.cost_derivation,
            sized_from=self.sized_from,
        )
        iv: JsonDict = {k: cast(Band, getattr(self, k)).pair() for k in BANDED}
        if self.replicas_interval is not None:
            iv["replicas"] = list(self.replicas_interval)
        return _rebuild(typed, iv, self.detail, self.key_order, self.interval_order)


@dataclass(frozen=True)
class InferForecast:
    """One replica's serving forecast (``forecast infer`` without ``--qps``), typed.

    Latency and throughput as bands; the layout, batch, memory and bottleneck; ``detail``
    is every other field of the JSON as the forecast wrote it.
    """

    gpu: str
    tp: int
    pp: int
    ep: int
    gpus_per_replica: int
    batch: int
    max_batch: int
    ttft_s: Band
    tpot_s: Band
    throughput_output_tokens_per_s: Band
    throughput_output_tokens_per_s_per_gpu: Band
    memory_per_gpu_bytes: float
    fits_in_memory: bool
    bottleneck: str
    detail: Mapping[str, object] = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] = field(default=(), repr=False)
    interval_order: tuple[str, ...] = field(default=(), repr=False)

    _TYPED = (
        *BANDED,
        "gpu",
        "tp",
        "pp",
        "ep",
        "gpus_per_replica",
        "batch",
        "max_batch",
        "memory_per_gpu_bytes",
        "fits_in_memory",
        "bottleneck",
    )

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> InferForecast:
        intervals = _dict(d.get("intervals") or {}, "intervals")
        detail = {k: copy.deepcopy(v) for k, v in d.items() if k not in cls._TYPED}
        detail["intervals"] = {k: copy.deepcopy(v) for k, v in intervals.items() if k not in BANDED}
        return cls(
            gpu=str(d["gpu"]),
            tp=_int(d["tp"], "tp"),
            pp=_int(d["pp"], "pp"),
            ep=_int(d["ep"], "ep"),
            gpus_per_replica=_int(d["gpus_per_replica"], "gpus_per_replica"),
            batch=_int(d["batch"], "batch"),
            max_batch=_int(d["max_batch"], "max_batch"),
            ttft_s=_band(d, intervals, "ttft_s"),
            tpot_s=_band(d, intervals, "tpot_s"),
            throughput_output_tokens_per_s=_band(d, intervals, "throughput_output_tokens_per_s"),
            throughput_output_tokens_per_s_per_gpu=_band(
                d, intervals, "throughput_output_tokens_per_s_per_gpu"
            ),
            memory_per_gpu_bytes=_num(d["memory_per_gpu_bytes"], "memory_per_gpu_bytes"),
            fits_in_memory=bool(d["fits_in_memory"]),
            bottleneck=str(d["bottleneck"]),
            detail=detail,
            key_order=tuple(d),
            interval_order=tuple(intervals),
        )

    def to_json(self) -> JsonDict:
        """The DESIGN.md 3.3 ``forecast infer`` JSON of this forecast (a fresh dict)."""
        typed: JsonDict = {k: cast(Band, getattr(self, k)).value for k in BANDED}
        typed.update(
            gpu=self.gpu,
            tp=self.tp,
            pp=self.pp,
            ep=self.ep,
            gpus_per_replica=self.gpus_per_replica,
            batch=self.batch,
            max_batch=self.max_batch,
            memory_per_gpu_bytes=self.memory_per_gpu_bytes,
            fits_in_memory=self.fits_in_memory,
            bottleneck=self.bottleneck,
        )
        iv: JsonDict = {k: cast(Band, getattr(self, k)).pair() for k in BANDED}
        return _rebuild(typed, iv, self.detail, self.key_order, self.interval_order)


def size_fleet(
    demand: ServingDemand,
    *,
    artifact: object = None,
    progress: Callable[[], None] | None = None,
) -> ServingFleet:
    """Size the cheapest fleet for ``demand`` (:func:`gpuplan.forecast.inference.size_serving_fleet`), typed."""
    sizing = size_serving_fleet(demand, artifact=artifact, progress=progress)
    return ServingFleet.from_json(sizing.as_dict())


def forecast_replica(
    model: str,
    gpu: str = "h100",
    *,
    artifact: object = None,
    tp: int | None = None,
    pp: int = 1,
    ep: int = 1,
    precision: str = "bf16",
    input_tokens: int = DEFAULT_INPUT_TOKENS,
    output_tokens: int = DEFAULT_OUTPUT_TOKENS,
    batch: int | None = None,
    engine: str | None = None,
) -> InferForecast:
    """One replica's forecast (:func:`gpuplan.forecast.inference.forecast_inference`), typed."""
    from gpuplan.forecast.inference import forecast_inference
    from gpuplan.forecast.inference_step import DEFAULT_ENGINE

    result = forecast_inference(
        model,
        gpu,
        tp=tp,
        pp=pp,
        ep=ep,
        precision=precision,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        batch=batch,
        artifact=artifact,
        engine=engine or DEFAULT_ENGINE,
    )
    return InferForecast.from_json(result)
