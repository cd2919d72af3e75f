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
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from gpuplan.errors import InputError
from gpuplan.forecast.band import Band
from gpuplan.forecast.flops import lora_trainable_params
from gpuplan.forecast.hardware import Hardware, resolve_hardware
from gpuplan.forecast.layout import ParallelLayout, json_int
from gpuplan.forecast.memory import RECOMPUTE_CODES
from gpuplan.forecast.model import ModelRef, arch_from
from gpuplan.forecast.training import (
    CP_COMM_CLI,
    CP_LAYOUTS,
    EP_OVERLAP_MODES,
    FRAMEWORK_CHOICES,
    Constants,
    Framework,
    FrameworkOverrides,
    Progress,
    SearchOptions,
    TrainingForecast,
    default_constants,
    default_framework,
    fp8_param_gather_on,
    global_batch_sequences,
    precision_recipe,
    profile_constants,
    profile_of,
)
from gpuplan.numeric import JSONDict

if TYPE_CHECKING:
    from gpuplan.calibration.api import DevicePerf

#: Framework profiles whose ZeRO-3 keeps the sharded fp32 parameters as the master weights
#: and no persistent 16-bit copy (:attr:`Framework.params_are_master`): PyTorch FSDP1/FSDP2
#: under mixed precision, and MaxText, whose parameters are fp32 (``weight_dtype``) and cast
#: to bf16 per layer for the computation (AI-Hypercomputer/maxtext ``configs/base.yml``).
FSDP_MASTER_PROFILES = frozenset({"fsdp", "torchtitan", "maxtext"})

#: ``fine_tuning.adapted`` in words, per ``--lora-modules``.
LORA_ADAPTED = {
    "all": "every linear projection of the blocks (attention, dense and shared-expert MLP, "
    "Mamba); routed experts, router and output layer frozen",
    "attention": "the attention projections (q, k, v, o); everything else frozen",
    "qkv": "the query, key and value projections; everything else frozen",
}

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
class TrainRequest:
    """What to forecast: the arguments of
    :func:`gpuplan.forecast.train.forecast_training` a caller sets (same defaults)."""

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
    parallelism: ParallelLayout
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
            num_gpus=json_int(d["num_gpus"], "num_gpus"),
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
            parallelism=ParallelLayout.from_json(_dict(d["parallelism"], "parallelism")),
            framework=str(d["framework"]),
            framework_basis=str(d["framework_basis"]),
            framework_profile=str(d["framework_profile"]),
            profile_basis=str(d["profile_basis"]),
            model=str(d["model"]),
            gpu=str(d["gpu"]),
            precision=str(d["precision"]),
            seq_len=json_int(d["seq_len"], "seq_len"),
            global_batch=json_int(d["global_batch"], "global_batch"),
            global_batch_tokens=json_int(d["global_batch_tokens"], "global_batch_tokens"),
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
    """Forecast ``request`` (:func:`forecast_training`), typed.

    Raises the same :class:`~gpuplan.errors.InputError` lines as the untyped function.
    """
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


def forecast_training(
    model: ModelRef,
    gpu: str = "h100",
    num_gpus: int | None = None,
    seq_len: int = 8192,
    global_batch: int | None = None,
    global_batch_tokens: float | None = None,
    precision: str = "bf16",
    parallelism: Mapping[str, int | str | None] | None = None,
    tokens: float | None = None,
    target_days: float | None = None,
    top: int = 1,
    artifact: object = None,
    *,
    fsdp: bool = False,
    node: str | None = None,
    instance: str | None = None,
    inter_node_bandwidth_bytes_per_s: float | None = None,
    framework: Framework | None = None,
    constants: Constants | None = None,
    hardware: Hardware | None = None,
    progress: Progress | None = None,
    ep_overlap: str | None = None,
    optimizer_dtype: str | None = None,
    master_weights: str | None = None,
    recompute_modules: str | Iterable[str] | None = None,
    moe_act_cache: str | None = None,
    memory_headroom: float | None = None,
    hsdp_shard_size: int | None = None,
    framework_name: str | None = None,
    cp_comm: str | None = None,
    cp_layout: str | None = None,
    ep_kernels: str | None = None,
    lora_rank: int | None = None,
    lora_modules: str | None = None,
) -> TrainingForecast:
    """Forecast pre-training of ``model`` on ``gpu`` (DESIGN.md 3.3 ``forecast train`` JSON).

    Parameters
    ----------
    model:
        Catalog id (``"llama3.1-405b"``), a :class:`ModelArch`, or a dict of its fields.
    gpu:
        Catalog GPU name or alias.
    num_gpus:
        Cluster size; ``None`` with ``target_days`` searches the smallest cluster.
    seq_len, global_batch, global_batch_tokens:
        Sequence length (tokens) and batch per step (sequences, or tokens).
    precision:
        bf16 | fp16 | fp8 | fp4 (GEMM dtype; MFU uses the dense peak of this dtype).
    parallelism:
        Some of ``tp pp cp ep dp vp micro_batch recompute zero``; missing ones are searched.
    tokens:
        Total training tokens: adds ``time_to_train_s`` and ``gpu_hours``.
    target_days:
        With ``tokens``: find the smallest cluster that trains within this many days.
    top:
        Number of layouts to return (the best first, then ``runners_up``).
    artifact:
        Calibration artifact (dict or path); ``None`` = the shipped default.
    fsdp:
        Use PyTorch FSDP (ZeRO-3 without pipeline parallelism) semantics.
    hardware:
        A ready :class:`Hardware` (tests, validation); otherwise built from the catalog.
    ep_overlap:
        ``none`` | ``dualpipe`` | ``1f1b-overlap``: overrides ``framework.ep_overlap``
        (see :class:`Framework`); ``dualpipe`` fixes ``vp`` to 1 unless given.
    optimizer_dtype, master_weights, recompute_modules, moe_act_cache:
        Override the :class:`Framework` fields of the same names (Adam moments
        ``fp32|bf16``; master weights ``fp32|bf16|none``; fine-grained recompute modules,
        a list or a comma-separated string; routed experts' activation cache
        ``bf16|fp8``). Defaults: Megatron mixed precision (fp32 master, fp32 moments), no
        extra modules, bf16 cache.
    hsdp_shard_size:
        HSDP with ZeRO-3/FSDP: shard over groups of this many data-parallel ranks
        (:attr:`Framework.hsdp_shard_size`); must divide the layout's ``dp*cp``.
    memory_headroom:
        Share of HBM kept free, in [0, 1): a layout fits when its peak is at most
        ``(1 - memory_headroom) x capacity``; default the constants' 0.
    framework_name:
        One of :data:`FRAMEWORK_CHOICES`: selects the framework profile's fitted constants
        (:func:`profile_constants`); ``None`` = :func:`default_framework` of the chip and
        the layout. The output says ``framework``, ``framework_basis`` (``default`` or
        ``given``), ``framework_profile`` and ``profile_basis``.
    cp_comm, cp_layout:
        Context-parallel exchange ``ring`` (ring attention, :attr:`Framework.cp_comm`
        ``p2p``) or ``a2a`` (DeepSpeed-Ulysses), and sequence split ``zigzag`` (load
        balanced, :attr:`Framework.cp_load_balance`) or ``contiguous``; the output's
        ``context_parallel`` says which were used.
    ep_kernels:
        ``nccl`` | ``deepep`` | ``auto``: the expert-parallel all-to-all implementation
        (:attr:`Framework.ep_kernels`): ``deepep`` for Megatron-core's flex dispatcher with
        DeepEP (``--moe-token-dispatcher-type flex --moe-enable-deepep``) or NeMo
        AutoModel's DeepEP dispatcher; ``auto`` takes it with ``dualpipe`` only. The
        output's ``provenance.ep_kernels`` says which was used.
    lora_rank:
        Fine-tune LoRA adapters of this rank on every linear projection with the base
        weights frozen (:attr:`Framework.lora_rank`); ``None`` pre-trains every weight. The
        output's ``fine_tuning`` gives the method, rank and trainable parameters, and
        ``model_tflops_per_gpu``/``mfu`` count no weight gradients.
    lora_modules:
        With ``lora_rank``: ``all`` (default), ``attention`` or ``qkv``
        (:attr:`Framework.lora_modules`). Under the megatron/nemo profile the adapters sit on
        the fused QKV and gate/up matrices (:attr:`Framework.lora_fused`).

    Returns
    -------
    dict
        Fields of DESIGN.md 3.3 plus ``runners_up``, ``model``, ``gpu``, ``precision``,
        ``seq_len``, ``global_batch``, ``global_batch_tokens`` and ``provenance``.
    """
    from gpuplan.forecast import search as search_mod

    precision = precision_recipe(precision).name
    if int(seq_len) < 1:
        raise InputError(f"--seq-len must be >= 1, got {seq_len}")
    if top < 1:
        raise InputError(f"--top must be >= 1, got {top}")
    if tokens is not None and not tokens > 0:
        raise InputError(f"--tokens must be positive, got {tokens}")
    if target_days is not None:
        if not target_days > 0:
            raise InputError(f"--target-days must be positive, got {target_days}")
        if tokens is None:
            raise InputError(
                "--target-days needs --tokens (the total training tokens)",
                hint="add --tokens 15e12 (for example)",
            )
    if num_gpus is None and target_days is None:
        raise InputError(
            "give --gpus N, or --tokens and --target-days to have the cluster size searched"
        )
    if num_gpus is not None and int(num_gpus) < 1:
        raise InputError(f"--gpus must be >= 1, got {num_gpus}")
    arch = arch_from(model)
    hw = hardware or resolve_hardware(
        gpu,
        artifact=artifact,
        node=node,
        instance=instance,
        inter_node_bandwidth_bytes_per_s=inter_node_bandwidth_bytes_per_s,
    )
    precision_recipe(precision, hw)
    gbs = global_batch_sequences(int(seq_len), global_batch, global_batch_tokens)
    par: dict[str, int | None] = {}
    for key, value in (parallelism or {}).items():
        if key == "recompute" and isinstance(value, str):
            if value not in RECOMPUTE_CODES:
                raise InputError(
                    f"unknown --recompute {value!r}", hint="use none, selective or full"
                )
            value = RECOMPUTE_CODES[value]
        elif isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise InputError(f"--{key} must be an integer, got {value!r}") from None
        par[key] = value
    if fsdp:
        if par.get("zero", 3) != 3:
            raise InputError(
                "--fsdp shards weights, gradients and optimizer (ZeRO-3); "
                "drop --zero or use --zero 3"
            )
        if par.get("pp", 1) != 1:
            raise InputError(
                "--fsdp cannot be combined with --pp > 1 (ZeRO-3 would gather every stage's "
                "weights again for every micro-batch)",
                hint="for FSDP2 with pipeline stages, as torchtitan and NeMo AutoModel run it "
                "(no resharding after the forward), use --zero 2 --pp N instead of --fsdp; "
                "or drop --pp",
            )
        par["zero"] = 3
        par["pp"] = 1
        par.setdefault("tp", 1)
    fw = framework or Framework()
    if ep_overlap is not None:
        mode = str(ep_overlap).strip().lower()
        if mode not in EP_OVERLAP_MODES:
            raise InputError(
                f"unknown --ep-overlap {ep_overlap!r}: use one of " + ", ".join(EP_OVERLAP_MODES),
            )
        fw = dataclasses.replace(fw, ep_overlap=mode)
    overrides: FrameworkOverrides = {}
    if optimizer_dtype is not None:
        overrides["optimizer_dtype"] = str(optimizer_dtype).strip().lower()
    if master_weights is not None:
        overrides["master_weights"] = str(master_weights).strip().lower()
    if moe_act_cache is not None:
        overrides["moe_act_cache"] = str(moe_act_cache).strip().lower()
    if recompute_modules is not None:
        items = (
            recompute_modules.split(",")
            if isinstance(recompute_modules, str)
            else list(recompute_modules)
        )
        overrides["recompute_modules"] = tuple(
            sorted({str(x).strip().lower() for x in items if str(x).strip()} - {"core_attn"})
        )
    if hsdp_shard_size is not None:
        if int(hsdp_shard_size) < 1:
            raise InputError(f"--hsdp-shard-size must be >= 1, got {hsdp_shard_size}")
        if not fsdp and par.get("zero") != 3:
            raise InputError(
                "--hsdp-shard-size shards ZeRO-3/FSDP states; add --fsdp (or --zero 3)"
            )
        overrides["hsdp_shard_size"] = int(hsdp_shard_size)
    if cp_comm is not None:
        mode = str(cp_comm).strip().lower()
        if mode not in CP_COMM_CLI:
            raise InputError(
                f"unknown --cp-comm {cp_comm!r}", hint="use one of " + ", ".join(CP_COMM_CLI)
            )
        overrides["cp_comm"] = CP_COMM_CLI[mode]
    # Framework.__post_init__ checks the values (one line naming the flag and its choices)
    if lora_rank is not None:
        overrides["lora_rank"] = int(lora_rank)
    if lora_modules is not None:
        if lora_rank is None:
            raise InputError(
                "--lora-modules chooses where LoRA adapters go; add --lora-rank (e.g. 16)"
            )
        overrides["lora_modules"] = str(lora_modules).strip().lower()
    if ep_kernels is not None:
        overrides["ep_kernels"] = str(ep_kernels).strip().lower()
    if cp_layout is not None:
        lay = str(cp_layout).strip().lower()
        if lay not in CP_LAYOUTS:
            raise InputError(
                f"unknown --cp-layout {cp_layout!r}", hint="use one of " + ", ".join(CP_LAYOUTS)
            )
        overrides["cp_load_balance"] = CP_LAYOUTS[lay]
    if overrides:
        fw = dataclasses.replace(fw, **overrides)
    if fw.ep_overlap == "dualpipe":
        par.setdefault("vp", 1)  # DualPipe's two directions replace interleaved stages
    c = constants or default_constants()
    if memory_headroom is not None:
        if not 0.0 <= float(memory_headroom) < 1.0:
            raise InputError(
                f"--memory-headroom must be in [0, 1), got {memory_headroom}",
                hint="e.g. --memory-headroom 0.1 keeps 10% of HBM free",
            )
        c = {**c, "memory_headroom_fraction": float(memory_headroom)}
    if framework_name is not None:
        fname = str(framework_name).strip().lower()
        if fname not in FRAMEWORK_CHOICES:
            raise InputError(
                f"unknown --framework {framework_name!r}",
                hint="use one of " + ", ".join(FRAMEWORK_CHOICES),
            )
        fbasis = "given"
    else:
        fname, fbasis = default_framework(hw, par, fsdp), "default"
    c, profile_basis = profile_constants(c, fname)
    if fname == "deepspeed" and framework is None:
        # DeepSpeed ZeRO-3 defaults: gathers prefetched, reductions not overlapped.
        fw = dataclasses.replace(fw, grad_reduce_overlap=False)
    if profile_of(fname) == "megatron" and framework is None:
        # Megatron-core / NeMo LoRA adapts linear_qkv and linear_fc1 as one module each.
        fw = dataclasses.replace(fw, lora_fused=True)
    if profile_of(fname) in FSDP_MASTER_PROFILES and framework is None:
        # PyTorch FSDP (torchtitan, Composer) and JAX (MaxText) step fp32 parameters: the
        # sharded parameter is the master copy (Framework.params_are_master).
        fw = dataclasses.replace(fw, params_are_master=True)
    from gpuplan.forecast.train_calibration import apply_training_step

    c, step_cal = apply_training_step(artifact, hw, fname, c)  # probe --workload train
    common: SearchOptions = {
        "seq_len": int(seq_len),
        "global_batch": gbs,
        "precision": precision,
        "framework": fw,
        "constants": c,
    }
    if num_gpus is None:
        out = search_mod.smallest_cluster(
            arch,
            hw,
            par,
            tokens=float(tokens or 0.0),
            target_days=float(target_days or 0.0),
            top=top,
            progress=progress,
            **common,
        )
    else:
        out = search_mod.best_layouts(arch, hw, int(num_gpus), par, top=top, **common)
        if tokens is not None:
            time_s = float(tokens) / out["tokens_per_s"]
            out["time_to_train_s"] = time_s
            out["gpu_hours"] = time_s * int(num_gpus) / 3600.0
            lo, hi = out["intervals"]["tokens_per_s"]
            out["intervals"]["time_to_train_s"] = [float(tokens) / hi, float(tokens) / lo]
            out["intervals"]["gpu_hours"] = [
                float(tokens) / hi * int(num_gpus) / 3600.0,
                float(tokens) / lo * int(num_gpus) / 3600.0,
            ]
    if fw.hsdp_shard_size is not None:
        group = int(out["parallelism"]["dp"]) * int(out["parallelism"]["cp"])
        if group % fw.hsdp_shard_size != 0:
            divisors = [d for d in range(1, group + 1) if group % d == 0]
            raise InputError(
                f"--hsdp-shard-size {fw.hsdp_shard_size} does not divide the data-parallel "
                f"group of the layout (dp x cp = {group})",
                hint="use one of " + ", ".join(map(str, divisors)) + " or fix --tp/--cp",
            )
        out["parallelism"]["hsdp_shard_size"] = fw.hsdp_shard_size
    out.setdefault("time_to_train_s", None)
    out.setdefault("gpu_hours", None)
    out["framework"] = fname
    out["framework_basis"] = fbasis
    out["framework_profile"] = profile_of(fname)
    out["profile_basis"] = profile_basis
    out["model"] = arch.name
    out["gpu"] = hw.gpu_id
    out["precision"] = precision
    out["seq_len"] = int(seq_len)
    used = int(out.pop("global_batch_used", gbs))
    if used != gbs:
        out.setdefault("notes", []).append(
            f"global batch rounded from {gbs} to {used} sequences: no layout on "
            f"{out['num_gpus']} GPUs divides {gbs} (data parallelism x micro-batch must)"
        )
    out["global_batch"] = used
    tp_used = int(out["parallelism"]["tp"])
    if tp_used > hw.node_size:
        domains = -(-tp_used // int(hw.node_size))
        note = (
            f"tensor parallelism {tp_used} spans {domains} scale-up domains of {hw.node_size} "
            f"{hw.gpu_id}: its all-reduces cross the scale-out network"
        )
        if hw.vendor == "aws":
            note += (
                "; Neuron configurations count NeuronCores, several per chip (TP=32 on a "
                "trn1.32xlarge is its 16 chips): give --tp and --gpus in chips"
            )
        out.setdefault("notes", []).append(note)
    out["global_batch_tokens"] = used * int(seq_len)
    out["tokens"] = float(tokens) if tokens is not None else None
    out["target_days"] = float(target_days) if target_days is not None else None
    fitted = c.get("provenance", {})  # the constants' fit (a JSON object)
    out["provenance"] = {
        **hw.provenance,
        "calibration_basis": _basis_summary(hw.perf, precision_recipe(precision).curve_dtype),
        "constants": fitted if isinstance(fitted, dict) else {},
        "framework": fw.name,
        "ep_overlap": fw.ep_overlap,
        "ep_kernels": "deepep" if fw.ep_deepep else "nccl",
        "optimizer_dtype": fw.optimizer_dtype,
        "master_weights": fw.master_weights,
        "recompute_modules": list(fw.recompute_modules),
        "moe_act_cache": fw.moe_act_cache,
        "fsdp_fp8_all_gather": fp8_param_gather_on(fw, precision),
    }
    out["fine_tuning"] = (
        {
            "method": "lora",
            "rank": int(fw.lora_rank),
            "modules": fw.lora_modules,
            "fused": fw.lora_fused,
            "trainable_params": lora_trainable_params(
                arch, int(fw.lora_rank), fw.lora_modules, fw.lora_fused
            ),
            "adapted": LORA_ADAPTED[fw.lora_modules]
            + (", fused QKV and gate/up matrices one module each" if fw.lora_fused else ""),
        }
        if fw.lora_rank is not None
        else None
    )
    out["context_parallel"] = {
        "comm": next(k for k, v in CP_COMM_CLI.items() if v == fw.cp_comm),
        "layout": "zigzag" if fw.cp_load_balance else "contiguous",
    }
    if out.get("ep_comm_s"):
        out["ep_comm_s"]["ep_overlap"] = fw.ep_overlap
    if step_cal is not None:
        out["calibration"] = {"training_step": step_cal}
    return out


def _basis_summary(perf: DevicePerf, precision: str) -> JSONDict:
    try:
        summary = perf.summary()
    except Exception:  # a DevicePerf without a summary still forecasts
        return {}
    keep = (
        f"matmul_{precision}_flops_per_s",
        "memory_bandwidth_bytes_per_s",
        "allreduce_busbw_bytes_per_s",
    )
    return {k: v.basis for k, v in summary.items() if k in keep}
