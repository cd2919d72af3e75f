"""Forecast of one training step, and of a whole pre-training run, on a GPU cluster.

The step model is a pure, vectorised function of the architecture, a set of parallel
layouts (numpy arrays: ``tp, pp, cp, ep, dp, vp, micro_batch, recompute, zero``) and the
calibrated device (:class:`gpuplan.calibration.api.DevicePerf`). One code path serves a
single forecast (arrays of length 1) and the search over every layout of a cluster
(:mod:`gpuplan.forecast.search`).

Method (DESIGN.md section 4, "Forecast: training")
---------------------------------------------------
Per micro-batch and pipeline stage:

* **GEMMs** at their real per-rank shapes (:func:`gpuplan.forecast.flops.layer_gemms`,
  they shrink with TP), forward ``(m,n,k)``, data-gradient ``(m,k,n)`` and weight-gradient
  ``(k,n,m)``, each timed at the calibrated achieved GEMM rate for that shape and dtype.
* **Attention core** (``QK^T``, ``AV``; PaLM's non-causal count) at the calibrated GEMM
  rate of the attention shape (``k = head_dim``), forward + 2x backward, plus the forward
  again under selective or full recomputation.
* **Non-GEMM work** (norms, residual adds, rotary, activation functions, MoE permutation,
  FP8 casts, cross-entropy) as bytes moved at the calibrated memory bandwidth.
* **Tensor-parallel** all-gather/reduce-scatter (or all-reduce) per layer, **context-
  parallel** ring exchange of K/V overlapped with the attention core, **expert-parallel**
  all-to-all dispatch and combine, each with the calibrated collective model for its scope
  (:mod:`gpuplan.forecast.comm`).

Per step: ``m`` micro-batches plus the 1F1B bubble ``(p-1)/v`` micro-batch times
(Narayanan et al. 2021, section 2.2: bubble fraction ``(p-1)/(m*v+p-1)`` of the step),
pipeline point-to-point sends, data-parallel gradient/parameter collectives with the
part the framework does not hide behind the backward/forward (ZeRO/FSDP per micro-batch
for stage 3), and the Adam step (memory-bound).

Four **framework-efficiency constants** scale the physical terms: GEMM time (sustained
vs. best-case microbenchmark rate), attention-kernel time, non-GEMM traffic (unfused
kernels) and a per-layer fixed overhead (kernel launches). They are fitted to the
published runs shipped with the package by non-negative least squares on relative error;
``gpuplan validate training`` reports the error of every row *held out* from the fit
(leave-one-source-out), never the in-sample error alone. See docs/forecast-training.md.

The interval combines the calibration interval (every rate and time taken at its low and
high end together) with the model-form error: the 5th/95th percentiles of
``published/forecast`` step-time ratios on the rows of the fit.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Literal, TypeAlias, TypedDict

import numpy as np

from gpuplan.errors import InputError
from gpuplan.forecast import comm as comm_mod
from gpuplan.forecast.flops import (
    LORA_MODULES,
    attention_core_shape,
    expert_rank_imbalance,
    grouped_gemm_rows,
    layer_gemms,
    lora_adapter_io,
    lora_trainable_params,
)
from gpuplan.forecast.hardware import Hardware
from gpuplan.forecast.layout import ParallelLayout, TrainParallelism
from gpuplan.forecast.layout_rules import layout_violation
from gpuplan.forecast.memory import (
    GRAD_BYTES_PER_PARAM,
    MASTER_WEIGHT_BYTES,
    RECOMPUTE_MODULES,
    RECOMPUTE_NAMES,
    STATE_DTYPE_BYTES,
    WEIGHT_BYTES_PER_PARAM,
    expert_tensor_parallel,
    param_counts_per_rank,
    stage_layers,
    training_memory_per_gpu,
)
from gpuplan.forecast.model import (
    ModelArch,
    attention_core_flops_per_token_layer,
    frozen_weights_flops_per_token,
    hardware_flops_per_token,
    model_flops_per_token,
)
from gpuplan.numeric import BoolArray, Flag, FloatArray, IntArray, JSONDict, Num

if TYPE_CHECKING:
    from gpuplan.calibration.api import DevicePerf

Constants: TypeAlias = Mapping[str, object]
"""Framework-efficiency constants (``forecast/data/training_constants.json``, a profile's
fitted values, a refit of :mod:`gpuplan.forecast.validation_training`): JSON values, narrowed
where read (:func:`constant`)."""
Layouts: TypeAlias = dict[str, IntArray]
"""Parallel layouts: one integer array per key of :data:`LAYOUT_KEYS`, all of one shape."""

PRECISIONS = ("bf16", "fp16", "fp8", "mxfp8", "fp4", "int8")
LayoutKey: TypeAlias = Literal[
    "tp", "pp", "cp", "ep", "dp", "vp", "micro_batch", "recompute", "zero"
]
LAYOUT_KEYS: tuple[LayoutKey, ...] = (
    "tp",
    "pp",
    "cp",
    "ep",
    "dp",
    "vp",
    "micro_batch",
    "recompute",
    "zero",
)
BREAKDOWN_KEYS = (
    "compute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_bubble",
    "pp_comm",
    "dp_comm_exposed",
    "optimizer",
)
# Adam step bytes per local parameter: read fp32 weight, gradient, m, v (16 B); write
# weight, m, v (12 B) and the 16-bit copy (2 B); the gradient-norm pass reads the
# gradient again (4 B). Counted from the update rule (Kingma & Ba 2015, algorithm 1).
ADAM_BYTES_PER_PARAM = 34.0
OPTIMIZER_DTYPES = ("fp32", "bf16")
MASTER_WEIGHT_DTYPES = ("fp32", "bf16", "none")
MOE_ACT_CACHE_DTYPES = {"bf16": 2.0, "fp8": 1.0 + 4.0 / 128.0}  # fp8: one fp32 scale / 1x128


def adam_step_bytes_per_param(optimizer_dtype: str = "fp32", master_weights: str = "fp32") -> float:
    """HBM bytes the Adam step moves per local parameter (the count of
    ``ADAM_BYTES_PER_PARAM`` with the state dtypes): read and write the master weight (or
    the 16-bit weight when there is no master copy) and both moments, read the fp32
    gradient twice (update and norm), write the 16-bit copy when a master exists.

    >>> adam_step_bytes_per_param()
    34.0
    >>> adam_step_bytes_per_param("bf16")
    26.0
    """
    moment = STATE_DTYPE_BYTES[optimizer_dtype]
    master = MASTER_WEIGHT_BYTES[master_weights]
    weight = master if master > 0 else WEIGHT_BYTES_PER_PARAM
    copy = WEIGHT_BYTES_PER_PARAM if master > 0 else 0.0
    return 2.0 * weight + 4.0 * moment + 2.0 * GRAD_BYTES_PER_PARAM + copy


SECONDS_PER_DAY = 86400.0
DEFAULT_GLOBAL_BATCH_TOKENS = 2**24
EP_OVERLAP_MODES = ("none", "dualpipe", "1f1b-overlap")
EP_KERNELS = ("auto", "nccl", "deepep")
CP_COMM_MODES = ("p2p", "a2a")
CP_COMM_CLI = {"ring": "p2p", "a2a": "a2a"}
"""``--cp-comm`` values: ``ring`` is ring attention (``Framework.cp_comm`` ``p2p``)."""
CP_LAYOUTS = {"zigzag": True, "contiguous": False}
"""``--cp-layout`` values -> ``Framework.cp_load_balance``."""
# FLOPs of a fused-attention backward over its forward: dQ, dK, dV and the recomputed
# scores (QK^T) and probabilities, five matmuls against the forward's two (the
# convention of Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py,
# flops(): "bwd" = 2.5 x "fwd"; retrieved 2026-12-01). An unfused attention stores its
# scores and its backward is two data/weight-gradient pairs: 2 x forward.
FLASH_ATTENTION_BWD_FLOPS_RATIO = 2.5
UNFUSED_ATTENTION_BWD_FLOPS_RATIO = 2.0
CAUSAL_TILE_ROWS = 128.0
FP8_TILE_SCALE_BYTES_PER_ELEMENT = 4.0 / 128.0
"""One fp32 scale per 1x128 activation tile (DeepSeek-AI 2024, arXiv 2412.19437, section
3.3.2 "Fine-Grained Quantization"): the overhead of an FP8 dispatch per element."""
"""Default tokens per step when none is given: 16 Mi tokens, the final batch of Llama 3
405B pre-training (Dubey et al. 2024, "The Llama 3 Herd of Models", section 3.4.1)."""


# ------------------------------------------------------------------------ precisions
@dataclass(frozen=True, kw_only=True)
class PrecisionRecipe:
    """Which GEMMs of a training step run in which dtype, for one ``--precision``.

    Attention cores (``QK^T``, ``AV``, softmax) run in 16 bits in every recipe here
    (Transformer Engine's FP8/FP4 recipes quantize the linear layers only).
    """

    name: str
    """The ``--precision`` value."""
    peak_dtype: str
    """Catalog dtype of the dense peak the low-precision GEMMs run at (and MFU uses)."""
    curve_dtype: str
    """Dtype whose calibrated GEMM-rate curve is scaled by ``peak(peak_dtype) /
    peak(curve_dtype)`` (the same fraction of peak at the same shape; the calibration has no
    fp4/int8 matmul model). Equal to ``peak_dtype`` when the calibration has the dtype."""
    requires: tuple[str, ...]
    """Catalog dtypes the chip must have a dense peak for."""
    low_precision: bool = False
    """GEMM inputs are cast (quantized) before every GEMM: counted as memory traffic."""
    high_precision_kinds: tuple[str, ...] = ()
    """GEMM kinds (:class:`gpuplan.forecast.flops.Gemm` ``kind``) kept in 16 bits."""
    high_precision_layer_fraction: float = 0.0
    """Share of the transformer layers whose linear GEMMs stay in 16 bits."""
    saved_input_bytes: float = 2.0
    """Bytes per element of a linear layer's input kept for the weight gradient."""
    basis: str = ""
    """Where the recipe comes from."""


_TE_LINEAR_ONLY = (
    "Transformer Engine quantizes the linear layers of the transformer blocks only; "
    "Megatron-core's output layer and the MoE router are plain 16-bit GEMMs "
    "(megatron/core/models/gpt/gpt_model.py output_layer = tensor_parallel.ColumnParallelLinear; "
    "megatron/core/transformer/moe/router.py)"
)

PRECISION_RECIPES: dict[str, PrecisionRecipe] = {
    "bf16": PrecisionRecipe(name="bf16", peak_dtype="bf16", curve_dtype="bf16", requires=("bf16",)),
    "fp16": PrecisionRecipe(name="fp16", peak_dtype="fp16", curve_dtype="fp16", requires=("fp16",)),
    "fp8": PrecisionRecipe(
        name="fp8",
        peak_dtype="fp8",
        curve_dtype="fp8",
        requires=("fp8",),
        low_precision=True,
        high_precision_kinds=("logits", "router"),
        saved_input_bytes=1.0,
        basis="FP8 (tensor-wise delayed/current or block-wise scaling). " + _TE_LINEAR_ONLY,
    ),
    "mxfp8": PrecisionRecipe(
        name="mxfp8",
        peak_dtype="fp8",
        curve_dtype="fp8",
        # MX block scaling needs microscaling tensor cores, which every chip with FP4 tensor
        # cores has (OCP Microscaling Formats v1.0; NVIDIA Blackwell, AMD CDNA4).
        requires=("fp8", "fp4"),
        low_precision=True,
        high_precision_kinds=("logits", "router"),
        saved_input_bytes=1.0 + 1.0 / 32.0,  # one E8M0 scale per 32 values
        basis="MXFP8: FP8 E4M3 with one E8M0 scale per 32 values (OCP MX v1.0) at the FP8 "
        "tensor-core rate. " + _TE_LINEAR_ONLY,
    ),
    "fp4": PrecisionRecipe(
        name="fp4",
        peak_dtype="fp4",
        curve_dtype="fp8",
        requires=("fp4", "fp8"),
        low_precision=True,
        high_precision_kinds=("logits", "router"),
        # NVIDIA's NVFP4 pre-training recipe keeps about 16% of the linear layers (the first
        # two and the last eight blocks of its 12B model) in BF16 for stability, and
        # quantizes Fprop, Dgrad and Wgrad of the others (NVIDIA 2025, "Pretraining Large
        # Language Models with NVFP4", arXiv 2509.25149, section 4).
        high_precision_layer_fraction=0.16,
        saved_input_bytes=0.5 + 1.0 / 16.0,  # E2M1 values, one E4M3 scale per 16
        basis="NVFP4/MXFP4 linear layers at the catalog FP4 peak; ~16% of the layers, the "
        "attention cores, output layer and router in BF16 (arXiv 2509.25149). " + _TE_LINEAR_ONLY,
    ),
    "int8": PrecisionRecipe(
        name="int8",
        peak_dtype="int8",
        curve_dtype="bf16",
        requires=("int8", "bf16"),
        low_precision=True,
        high_precision_kinds=("logits", "router"),
        saved_input_bytes=1.0,
        basis="INT8 quantized training of the linear layers (e.g. Google AQT on TPU), output "
        "layer and router in 16 bits; rate = calibrated bf16 curve x int8/bf16 peak",
    ),
}


#: Other spellings of the recipes (published runs write NVFP4, MXFP4, BF16, torch names).
PRECISION_ALIASES: dict[str, str] = {
    "nvfp4": "fp4",
    "mxfp4": "fp4",
    "bfloat16": "bf16",
    "float16": "fp16",
    "float8": "fp8",
    "e4m3": "fp8",
    "fp8-delayed": "fp8",
    "fp8-current": "fp8",
    "fp8-blockwise": "fp8",
}


def peak_flops(hw: Hardware, dtype: str) -> float | None:
    """Dense peak FLOP/s (op/s for int8) of ``dtype`` on ``hw``: the catalog row's figure,
    else the calibration's spec."""
    value = hw.peaks_flops_per_s.get(dtype)
    if value:
        return float(value)
    try:
        peak = hw.perf.peak_flops_per_s(dtype)
    except InputError:
        return None
    return float(peak) if peak else None


def precision_recipe(precision: str, hw: Hardware | None = None) -> PrecisionRecipe:
    """The :class:`PrecisionRecipe` of ``precision``; with ``hw``, refuse what the chip lacks.

    >>> precision_recipe("fp4").high_precision_kinds
    ('logits', 'router')
    >>> precision_recipe("NVFP4").name, precision_recipe("mxfp4").name
    ('fp4', 'fp4')
    """
    key = str(precision).strip().lower()
    key = PRECISION_ALIASES.get(key, key)
    if key not in PRECISION_RECIPES:
        raise InputError(
            f"unknown precision {precision!r}", hint="use one of " + ", ".join(PRECISIONS)
        )
    recipe = PRECISION_RECIPES[key]
    missing = [d for d in recipe.requires if hw is not None and not peak_flops(hw, d)]
    if hw is not None and missing:
        have = [
            p for p, r in PRECISION_RECIPES.items() if all(peak_flops(hw, d) for d in r.requires)
        ]
        raise InputError(
            f"{hw.gpu_id} has no dense {'/'.join(missing)} peak in the catalog, so "
            f"--precision {key} cannot run on it; it has {', '.join(have) or 'none'}",
            hint=f"use --precision {' or '.join(have) or 'bf16'}",
        )
    return recipe


def gemm_rates3(hw: Hardware, m: Num, n: Num, k: Num, dtype: str) -> FloatArray:
    """Achieved GEMM FLOP/s ``[value, high, low]`` at shapes ``(m, n, k)`` in ``dtype``.

    ``dtype`` is a recipe name or a 16-bit dtype. A dtype the calibration models is read
    from it; fp4 and int8 scale the calibrated curve of the recipe's ``curve_dtype`` by the
    ratio of the catalog's dense peaks (same fraction of peak at the same shape).
    """
    recipe = PRECISION_RECIPES.get(dtype)
    if recipe is None or recipe.curve_dtype == recipe.peak_dtype:
        calib = recipe.curve_dtype if recipe is not None else dtype
        return comm_mod.estimate3(hw.perf.matmul_flops_per_s(m, n, k, calib), rate=True)
    base = comm_mod.estimate3(hw.perf.matmul_flops_per_s(m, n, k, recipe.curve_dtype), rate=True)
    ratio = float(peak_flops(hw, recipe.peak_dtype) or 0.0) / float(
        peak_flops(hw, recipe.curve_dtype) or 1.0
    )
    return base * ratio


# ------------------------------------------------------------------------- constants
@lru_cache(maxsize=4)
def _load_constants_file(name: str) -> JSONDict:
    text = resources.files("gpuplan.forecast").joinpath("data").joinpath(name).read_text("utf-8")
    data = json.loads(text)
    if not isinstance(data, dict):
        raise InputError(f"forecast/data/{name} is not a JSON object", hint="reinstall gpuplan")
    return data


def default_constants() -> JSONDict:
    """The shipped framework-efficiency constants (``forecast/data/training_constants.json``)."""
    return dict(_load_constants_file("training_constants.json"))


def _number(value: object, what: str) -> float:
    """``value`` as a float, or an :class:`InputError` naming ``what`` when it is no number."""
    if not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(
            f"{what} must be a number, got {value!r}",
            hint="fix the training constants (forecast/data/training_constants.json)",
        )
    return float(value)


def constant(constants: Constants, key: str, default: float | None = None) -> float:
    """The number ``key`` of ``constants`` (``default`` when it is absent)."""
    return _number(constants.get(key, default), f"training constant {key}")


def constant_list(constants: Constants, key: str, default: list[float]) -> list[float]:
    """The list of numbers ``key`` of ``constants`` (``default`` when it is absent)."""
    value = constants.get(key, default)
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise InputError(
            f"training constant {key} must be a list of numbers, got {value!r}",
            hint="fix the training constants (forecast/data/training_constants.json)",
        )
    return [_number(v, f"training constant {key}") for v in value]


def _table(value: object) -> Mapping[str, object]:
    """A JSON object of the constants (``{}`` for a missing or empty one)."""
    return value if isinstance(value, dict) else {}


# ------------------------------------------------------------------ framework profiles
FRAMEWORK_CHOICES = ("megatron", "nemo", "torchtitan", "fsdp", "deepspeed", "maxtext", "neuronx")
"""Values of ``forecast train --framework``."""

PROFILE_OF_FRAMEWORK = {
    # NeMo trains through Megatron-core (the same kernels, distributed optimizer and
    # overlap), so its rows and the megatron rows fit one profile.
    "megatron": "megatron",
    "nemo": "megatron",
    "fsdp": "fsdp",
    "composer-fsdp": "fsdp",  # MosaicML Composer wraps PyTorch FSDP (FULL/SHARD_GRAD_OP)
    "pytorch-fsdp": "fsdp",
    "torchtitan": "torchtitan",
    "torchtitan-fsdp2": "torchtitan",
    "deepspeed": "deepspeed",
    "maxtext": "maxtext",
    "jax": "maxtext",
    "neuronx": "neuronx",
}
"""Framework (``training_runs.csv`` ``framework`` column or ``--framework``) -> profile."""

MIN_PROFILE_ROWS = 10
"""A profile gets its own fitted constants with at least this many published rows."""

PROFILE_FIT_KEYS = (
    "gemm_time_factor",
    "attention_time_factor",
    "nongemm_traffic_factor",
    "layer_overhead_s",
    "residual_ratio_quantiles",
)


def profile_of(framework: str) -> str:
    """The profile a framework name belongs to (unknown names are their own profile)."""
    key = framework.strip().lower()
    return PROFILE_OF_FRAMEWORK.get(key, key)


def default_framework(hw: Hardware, parallelism: Mapping[str, int | None], fsdp: bool) -> str:
    """The framework a layout on ``hw`` most likely runs under.

    TPU -> maxtext (JAX), Trainium -> neuronx, ZeRO-3/FSDP without tensor or pipeline
    parallelism -> fsdp, anything else -> megatron.
    """
    gen = str(hw.generation or "").lower()
    gid = hw.gpu_id.lower()
    if gen.startswith("tpu") or gid.startswith("tpu"):
        return "maxtext"
    if gen.startswith("trainium") or gid.startswith("trainium"):
        return "neuronx"
    zero3 = fsdp or parallelism.get("zero") == 3
    tp, pp = parallelism.get("tp", 1), parallelism.get("pp", 1)
    if zero3 and tp is not None and int(tp) == 1 and pp is not None and int(pp) == 1:
        return "fsdp"
    return "megatron"


def profile_constants(constants: Constants, framework: str) -> tuple[dict[str, object], str]:
    """``constants`` with the framework profile's fitted values, and the basis in words.

    A profile fitted on at least :data:`MIN_PROFILE_ROWS` published rows of its framework
    (``profiles`` in ``training_constants.json``) replaces the pooled step-model constants;
    otherwise the pooled ones stay and the basis says how many rows the profile has.
    """
    profile = profile_of(framework)
    entry = _table(_table(constants.get("profiles")).get(profile))
    rows = int(_number(entry.get("rows", 0), f"profiles.{profile}.rows"))
    if rows >= MIN_PROFILE_ROWS and all(k in entry for k in PROFILE_FIT_KEYS):
        out = {**constants, **{k: entry[k] for k in PROFILE_FIT_KEYS}}
        return out, f"fitted ({rows} rows)"
    return dict(constants), f"pooled ({rows} rows < {MIN_PROFILE_ROWS})"


@dataclass(frozen=True, kw_only=True)
class Framework:
    """What the training framework does that changes the step time or memory."""

    name: str = "megatron-core"
    """Label for outputs."""
    sequence_parallel: bool = True
    """Megatron sequence parallelism with TP > 1 (Korthikanti et al. 2022)."""
    flash_attention: bool = True
    """Fused attention that never stores the score matrix (Dao et al. 2022)."""
    attention_kernel: str = "auto"
    """Which fused-attention kernel (a key of ``attention_kernels`` in the constants, e.g.
    ``flash-attention-2``); ``auto`` takes the best published one for the GPU generation."""
    dp_overlap: bool = True
    """Gradient reduce-scatter overlapped with the backward and parameter all-gather with
    the next forward (Megatron-core overlap_grad_reduce / overlap_param_gather; FSDP
    prefetch)."""
    grad_reduce_overlap: bool = True
    """With ``dp_overlap``, whether the gradient reduce-scatter (or all-reduce) also runs
    behind the backward. FSDP2 and Megatron-core overlap both directions; DeepSpeed ZeRO-3
    prefetches the parameter all-gathers but, with its default ``overlap_comm: false``,
    reduces the gradients on the critical path (microsoft/DeepSpeed
    docs/_pages/config-json.md, "overlap_comm", retrieved 2026-12-01)."""
    cp_load_balance: bool = True
    """Context parallel with a causal mask: the sequence is cut into ``2*cp`` chunks and
    rank ``i`` holds chunks ``i`` and ``2cp-1-i`` ("zig-zag"), so every rank computes the
    same share of the unmasked blocks (Megatron-core / Transformer Engine context
    parallel; Brandon et al. 2023, "Striped Attention", arXiv 2311.09431, for the imbalance
    of the plain split). False: contiguous chunks, the last rank attends to the whole
    prefix and sets the pace (:func:`cp_causal_imbalance`)."""
    cp_comm: str = "p2p"
    """Context-parallel exchange: ``p2p`` (ring attention, K/V blocks passed around the CP
    ring; Liu et al. 2023, "Ring Attention with Blockwise Transformers", arXiv 2310.01889)
    or ``a2a`` (DeepSpeed-Ulysses: all-to-all of Q, K, V and the output between the
    sequence and the head split; Jacobs et al. 2023, arXiv 2309.14509)."""
    tp_overlap: bool = False
    """TP collectives overlapped with GEMMs (Transformer Engine userbuffers)."""
    grad_reduce_bytes: float = 4.0
    """Bytes per gradient element in the data-parallel reduction (fp32 main grads)."""
    param_gather_bytes: float = 2.0
    """Bytes per weight element in the ZeRO/FSDP all-gather (16-bit weights)."""
    grad_buffer_bytes: float = 4.0
    """Bytes per element of the gradient buffer kept for every local parameter (fp32 main
    gradients in Megatron-LM; 16-bit in Megatron-core with grad_reduce_in_fp32=False)."""
    zero3_unit_params: float | None = None
    """Parameters gathered at once under ZeRO-3 (None: one transformer layer, as FSDP's
    per-block wrapping; DeepSpeed: stage3_max_live_parameters)."""
    ep_overlap: str = "none"
    """Expert-parallel all-to-all overlap: ``none`` (Megatron-core default: dispatch and
    combine on the critical path), ``dualpipe`` (DeepSeek-V3's DualPipe: the all-to-all of
    one micro-batch's chunk runs behind the other micro-batch's compute, and the pipeline
    bubble is DualPipe's; arXiv 2412.19437 section 3.2.1) or ``1f1b-overlap`` (the same
    forward/backward pairing inside the 1F1B steady state, with the 1F1B bubble;
    Megatron-core ``--overlap-moe-expert-parallel-comm``)."""
    optimizer_dtype: str = "fp32"
    """Adam moments' dtype: ``fp32`` (Megatron mixed precision, the default) or ``bf16``
    (Megatron-core ``--use-precision-aware-optimizer`` with bf16 exp_avg/exp_avg_sq;
    DeepSeek-V3 section 3.3.3)."""
    master_weights: str = "fp32"
    """Optimizer's master copy of the weights: ``fp32`` (default, Megatron mixed
    precision), ``bf16`` or ``none`` (the 16-bit weights are updated in place)."""
    recompute_modules: tuple[str, ...] = ()
    """Fine-grained recomputation beyond the attention core under ``--recompute
    selective`` (Megatron-core ``--recompute-modules``): any of ``layernorm``,
    ``mla_up_proj``, ``moe_act`` (``core_attn`` is selective recompute itself)."""
    moe_act_cache: str = "bf16"
    """Dtype in which routed experts cache their activation-function inputs: ``bf16`` or
    ``fp8`` (DeepSeek-V3 section 3.3.3, with 1x128-tile scales)."""
    hsdp_shard_size: int | None = None
    """HSDP (FSDP ``HYBRID_SHARD``; FSDP2 on a 2-D device mesh): with ZeRO-3 the states are
    sharded over groups of this many data-parallel ranks (the all-gathers and
    reduce-scatters stay inside a group) and replicated across ``dp*cp/size`` groups, whose
    gradient shards are all-reduced once per step (Zhao et al. 2023, "PyTorch FSDP",
    section 3.2.2, hybrid sharding). None: shard over the whole group (FULL_SHARD)."""
    lora_rank: int | None = None
    """The job fine-tunes LoRA adapters of this rank on every linear projection of the
    blocks (:data:`gpuplan.forecast.flops.LORA_KINDS`) with the base weights frozen (Hu et
    al. 2021, "LoRA", arXiv 2106.09685): no weight gradients for the base matmuls, no
    gradients, optimizer states or gradient reduction for the base weights, and the
    adapters' activation traffic. None: every weight is trained."""
    lora_modules: str = "all"
    """Which projections get adapters (:data:`gpuplan.forecast.flops.LORA_MODULES`):
    ``all``, ``attention`` or ``qkv``."""
    lora_fused: bool = False
    """Adapters on the fused QKV and gate/up matrices as one module each (Megatron-core and
    NeMo's LoRA, MLPerf's fused-QKV reference) rather than one per Hugging Face module
    (PEFT on ``q_proj``, ``k_proj``, ``v_proj``, ``gate_proj``, ``up_proj``)."""
    params_are_master: bool = False
    """Under ZeRO-3, the sharded parameters are the optimizer's fp32 master weights and
    16-bit weights exist only as gathered units: PyTorch FSDP (FSDP1 ``MixedPrecision``,
    FSDP2 ``MixedPrecisionPolicy``), as torchtitan, NeMo AutoModel and Composer run it
    (:func:`gpuplan.forecast.memory.model_state_bytes`). False: Megatron-style 16-bit
    weights beside an fp32 master copy."""
    fp8_param_gather: bool = True
    """FSDP (ZeRO-3) under the ``fp8`` recipe all-gathers the transformer blocks' linear
    weights as FP8 (1 byte, one scale per tensor) instead of BF16: FSDP2's float8
    all-gather (torchao ``enable_fsdp_float8_all_gather``; PyTorch blog "Supercharging
    Training using float8 and FSDP2", 2024). Embedding, output layer and norms stay 16-bit."""
    expert_load_imbalance: float | None = None
    """Busiest expert-parallel rank's routed tokens over the mean (>= 1), applied to the
    routed experts' GEMM time under EP (the step waits for that rank). None: the floor
    that sampling imposes on routing balanced in expectation
    (:func:`gpuplan.forecast.flops.expert_rank_imbalance`); give a measured figure where
    the routing is skewed."""
    ep_kernels: str = "auto"
    """All-to-all implementation: ``nccl`` (16-bit dispatch and combine, every one of the
    ``top_k`` copies sent), ``deepep`` (DeepEP-style: FP8 dispatch under a low-precision
    recipe, BF16 combine, one inter-node copy per target node that NVLink forwards inside
    the node; arXiv 2412.19437 sections 3.2.2 and 3.3.4) or ``auto`` (``deepep`` with
    ``dualpipe``, else ``nccl``)."""

    def __post_init__(self) -> None:
        if self.ep_overlap not in EP_OVERLAP_MODES:
            raise InputError(
                f"unknown ep_overlap {self.ep_overlap!r}",
                hint="use one of " + ", ".join(EP_OVERLAP_MODES),
            )
        checks = (
            ("--optimizer-dtype", self.optimizer_dtype, OPTIMIZER_DTYPES),
            ("--master-weights", self.master_weights, MASTER_WEIGHT_DTYPES),
            ("--moe-act-cache", self.moe_act_cache, tuple(MOE_ACT_CACHE_DTYPES)),
        )
        for label, value, allowed in checks:
            if value not in allowed:
                raise InputError(
                    f"unknown {label} {value!r}", hint="use one of " + ", ".join(allowed)
                )
        bad = set(self.recompute_modules) - set(RECOMPUTE_MODULES)
        if bad:
            raise InputError(
                f"unknown --recompute-modules {', '.join(sorted(bad))}",
                hint="use any of " + ", ".join(RECOMPUTE_MODULES),
            )
        if self.cp_comm not in CP_COMM_MODES:
            raise InputError(
                f"unknown cp_comm {self.cp_comm!r}",
                hint="use one of " + ", ".join(CP_COMM_MODES),
            )
        if self.expert_load_imbalance is not None and not self.expert_load_imbalance >= 1.0:
            raise InputError(
                f"expert_load_imbalance must be >= 1 (busiest rank over the mean), "
                f"got {self.expert_load_imbalance}"
            )
        if self.lora_rank is not None and not int(self.lora_rank) >= 1:
            raise InputError(
                f"--lora-rank must be >= 1, got {self.lora_rank}",
                hint="e.g. --lora-rank 16 (PEFT's and NeMo's usual rank)",
            )
        if self.lora_modules not in LORA_MODULES:
            raise InputError(
                f"unknown --lora-modules {self.lora_modules!r}",
                hint="use one of " + ", ".join(LORA_MODULES),
            )
        if self.ep_kernels not in EP_KERNELS:
            raise InputError(
                f"unknown --ep-kernels {self.ep_kernels!r}",
                hint="use one of " + ", ".join(EP_KERNELS),
            )

    @property
    def ep_deepep(self) -> bool:
        """Whether the all-to-all runs DeepEP-style (see ``ep_kernels``)."""
        if self.ep_kernels == "auto":
            return self.ep_overlap == "dualpipe"
        return self.ep_kernels == "deepep"


# -------------------------------------------------------------------- result records


class FactorPoint(TypedDict):
    """One probe point of ``calibration.training_step.points``, with its ratios."""

    run_id: str | None
    model: str | None
    scale: int
    tp: int
    seq_len: int
    micro_batch: int
    attention_backend: str | None
    measured_compute_per_block_s: float
    forecast_compute_per_block_s: float
    ratio: dict[str, float]
    measured_optimizer_per_block_s: float
    forecast_optimizer_per_block_s: float


class TrainingStepFactor(TypedDict, total=False):
    """``calibration.training_step`` of a training forecast (:func:`training_step_factor`):
    ``applied`` with the factor and its points, or not applied with the ``reason``."""

    applied: bool
    factor: float
    low: float
    high: float
    device: str
    framework: str
    matched: str
    reason: str
    basis: str
    inputs: list[str]
    points: list[FactorPoint]
    warning: str


class EpCommDetail(TypedDict):
    """Expert-parallel all-to-all time of every layout (``[value, low, high]`` rows)."""

    total: FloatArray
    exposed: FloatArray
    dispatch_bytes_per_element: float
    combine_bytes_per_element: float


class _StepEvaluationParts(TypedDict):
    step_time_s: FloatArray
    breakdown_s: dict[str, FloatArray]
    compute_detail_s: dict[str, FloatArray]
    num_microbatches: FloatArray
    dp_comm_bytes: dict[str, FloatArray]
    fixed_costs_s: dict[str, FloatArray]
    cp_comm_detail_s: dict[str, FloatArray]
    ep_comm_detail_s: EpCommDetail
    fit_basis: dict[str, FloatArray]


class StepEvaluation(_StepEvaluationParts, total=False):
    """What :func:`evaluate_layouts` returns: per-layout arrays, times as ``(3, n)``
    ``[value, low, high]`` rows (before the model-error band)."""

    memory: dict[str, FloatArray]
    """Memory per GPU by part (``with_memory``), :func:`gpuplan.forecast.memory.training_memory_per_gpu`."""


class MemoryOptions(TypedDict):
    """The framework's keyword options of :func:`gpuplan.forecast.memory.training_memory_per_gpu`."""

    grad_bytes: float
    linear_input_bytes: float
    zero3_unit_params: float | None
    optimizer_dtype: str
    master_weights: str
    recompute_modules: tuple[str, ...]
    act_cache_bytes: float
    gathered_weight_bytes: float
    pipeline_schedule: str
    shard_ranks: int | None
    params_are_master: bool
    trainable_params: float | None


class TrainIntervals(TypedDict, total=False):
    """``intervals``: ``[low, high]`` of each banded figure (``time_to_train_s`` and
    ``gpu_hours`` with a token budget)."""

    step_time_s: list[float]
    tokens_per_s: list[float]
    tokens_per_s_per_gpu: list[float]
    model_tflops_per_gpu: list[float]
    hardware_tflops_per_gpu: list[float]
    mfu: list[float] | None
    hfu: list[float] | None
    breakdown_s: dict[str, list[float]]
    time_to_train_s: list[float]
    gpu_hours: list[float]


class EpCommSummary(TypedDict, total=False):
    """``ep_comm_s``: expert-parallel all-to-all time of the step (empty for a dense model)."""

    ep_comm_total: float
    ep_comm_exposed: float
    ep_comm_hidden: float
    dispatch_bytes_per_element: float
    combine_bytes_per_element: float
    ep_overlap: str


class RunnerUp(TypedDict):
    """One of ``runners_up``: the next-best layouts."""

    parallelism: TrainParallelism
    step_time_s: float
    step_time_interval_s: list[float]
    tokens_per_s_per_gpu: float
    mfu: float | None
    memory_per_gpu_bytes: float
    fits_in_memory: bool
    breakdown_s: dict[str, float]


class FineTuning(TypedDict):
    """``fine_tuning`` of a LoRA forecast (``forecast train --lora-rank``)."""

    method: str
    rank: int
    modules: str
    fused: bool
    trainable_params: float
    adapted: str


class TrainingForecast(TypedDict, total=False):
    """The DESIGN.md 3.3 ``forecast train`` JSON (:func:`forecast_training`).

    :func:`summarise` sets the figures of one layout (``step_time_s`` to ``cp_comm_s``); the
    search adds ``runners_up``, ``layouts_evaluated``, ``to_fit`` and, sizing a cluster, the
    ``gpus_vs_days`` curve and the purchase units; :func:`forecast_training` adds the run,
    the inputs and ``provenance``. A search that finds no fitting layout returns only
    ``fits_in_memory`` (false) and ``num_gpus``.
    """

    step_time_s: float
    step_time_interval_s: list[float]
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float | None
    hfu: float | None
    memory_per_gpu_bytes: float
    fits_in_memory: bool
    memory_overshoot_bytes: float
    parallelism: TrainParallelism
    breakdown_s: dict[str, float]
    intervals: TrainIntervals
    num_gpus: int
    memory_breakdown_bytes: dict[str, float]
    memory_capacity_bytes: float
    memory_usable_bytes: float
    memory_headroom_fraction: float
    ep_comm_s: EpCommSummary
    dp_comm_bytes: dict[str, float]
    compute_detail_s: dict[str, float]
    fixed_costs_s: dict[str, float]
    cp_comm_s: dict[str, float]
    # the search (gpuplan.forecast.search)
    runners_up: list[RunnerUp]
    layouts_evaluated: int
    to_fit: list[str]
    global_batch_rounded_from: int
    global_batch_used: int
    time_to_train_s: float | None
    gpu_hours: float | None
    cluster_sizes_evaluated: list[int]
    gpus_vs_days: list[list[float | None]]
    cluster_unit: int
    purchase_unit: int
    purchase_units: int
    gpus_purchased: int
    gpus_idle: int
    gpus_lower_bound: int
    # the run and its inputs (forecast_training)
    framework: str
    framework_basis: str
    framework_profile: str
    profile_basis: str
    model: str
    gpu: str
    precision: str
    seq_len: int
    notes: list[str]
    global_batch: int
    global_batch_tokens: int
    tokens: float | None
    target_days: float | None
    provenance: JSONDict
    context_parallel: dict[str, str]
    fine_tuning: FineTuning | None
    calibration: dict[str, TrainingStepFactor]


class FrameworkOverrides(TypedDict, total=False):
    """:class:`Framework` fields a forecast's options replace (``dataclasses.replace``)."""

    optimizer_dtype: str
    master_weights: str
    moe_act_cache: str
    recompute_modules: tuple[str, ...]
    hsdp_shard_size: int
    cp_comm: str
    cp_load_balance: bool
    ep_kernels: str
    lora_rank: int
    lora_modules: str


class SearchOptions(TypedDict):
    """The keyword options every layout search of one forecast shares
    (:func:`gpuplan.forecast.search.best_layouts`, ``smallest_cluster``)."""

    seq_len: int
    global_batch: int
    precision: str
    framework: Framework
    constants: Constants


Progress: TypeAlias = Callable[[int, "TrainingForecast | None"], object]
"""Called after each cluster size a search evaluates, with its best fitting layout (or None)."""


# -------------------------------------------------------------------------- layouts
def layouts_from_dict(values: Mapping[str, Num]) -> Layouts:
    """Broadcast a dict of layout values (scalars or arrays) to int64 arrays."""
    arrays = {k: np.asarray(values[k]) for k in LAYOUT_KEYS}
    shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
    shape = shape if shape else (1,)
    return {k: np.broadcast_to(a, shape).astype(np.int64) for k, a in arrays.items()}


def take_layouts(layouts: Layouts, index: BoolArray | IntArray | int) -> Layouts:
    return {k: np.asarray(v)[index] for k, v in layouts.items()}


def _dtype_for_attention(precision: str) -> str:
    # Attention kernels run in 16-bit even in FP8 recipes (Transformer Engine).
    return "fp16" if precision == "fp16" else "bf16"


def attention_kernel_figure(
    generation: str | None, kernel: str, constants: Constants
) -> dict[str, object] | None:
    """The published efficiency row of a fused-attention kernel on a GPU generation.

    ``kernel="auto"`` picks the constants' ``attention_kernel_auto`` entry for the
    generation. Returns ``None`` when no figure is published for the pair.
    """
    table = _table(constants.get("attention_kernels", {}))
    if kernel == "auto":
        kernel = str(_table(constants.get("attention_kernel_auto", {})).get(str(generation), ""))
    row = _table(table.get(kernel, {})).get(str(generation))
    return {**row, "kernel": kernel} if isinstance(row, dict) and row else None


def attention_rate3(
    perf: DevicePerf, generation: str | None, dtype: str, kernel: str, constants: Constants
) -> FloatArray:
    """Fused-attention FLOP/s ``[value, high, low]``: published fraction x dense peak.

    Without a published figure for the kernel and generation, the best achievable dense
    GEMM rate of the calibration stands in (no evidence that attention is slower).
    """
    row = attention_kernel_figure(generation, kernel, constants)
    peak = perf.peak_flops_per_s(dtype)
    if row is None or not peak:
        return _best_matmul3(perf, dtype)
    frac = _number(row["fraction_of_peak"], "attention_kernels fraction_of_peak")
    lo = _number(row.get("low", frac), "attention_kernels low")
    hi = _number(row.get("high", frac), "attention_kernels high")
    return np.array([frac, hi, lo]).reshape(3, 1) * float(peak)


def _best_matmul3(perf: DevicePerf, dtype: str) -> FloatArray:
    """Best achievable dense GEMM rate ``[value, high, low]`` (DESIGN 3.2 summary quantity)."""
    try:
        est = perf.summary().get(f"matmul_{dtype}_flops_per_s")
    except Exception:
        est = None
    if est is None:
        big = 16384.0
        est = perf.matmul_flops_per_s(big, big, big, dtype)
    return comm_mod.estimate3(est, rate=True).reshape(3, 1)


def _unique_rows(*cols: Num) -> tuple[tuple[FloatArray, ...], IntArray]:
    stacked = np.stack([np.asarray(c, dtype=float) for c in cols], axis=1)
    uniq, inverse = np.unique(stacked, axis=0, return_inverse=True)
    return tuple(uniq[:, i] for i in range(uniq.shape[1])), inverse.reshape(-1)


# --------------------------------------------------------------- expert parallel
def ep_all_to_all_bytes(
    tokens: Num, top_k: float, hidden: float, bytes_per_element: float
) -> FloatArray:
    """Bytes one rank sends in one MoE dispatch (or combine): ``tokens x top_k x hidden x b``.

    Every token goes to its ``top_k`` routed experts and comes back weighted (GShard,
    Lepikhin et al. 2020, section 2.2; DeepSeek-AI 2024, arXiv 2412.19437, section 3.2.2):
    this is the nccl-tests ``size`` of the all-to-all (the rank's whole send buffer).

    >>> float(ep_all_to_all_bytes(4096, 8, 7168, 2.0))
    469762048.0
    """
    return np.asarray(tokens, dtype=float) * float(top_k) * float(hidden) * float(bytes_per_element)


def ep_inter_node_copy_fraction(
    top_k: float, num_nodes: Num, max_nodes_per_token: int | None, *, dedup: bool
) -> FloatArray:
    """Inter-node bytes of a deduplicating dispatch per inter-node byte of a plain one.

    A plain all-to-all sends each of the ``top_k`` copies of a token on its own: the
    calibration's model puts ``(N-1)/N`` of them on the NIC (node ``N`` of ``N`` nodes).
    DeepEP-style dispatch sends a token once to every *node* holding one of its experts
    and forwards it over NVLink inside that node (arXiv 2412.19437, section 3.2.2): the
    inter-node copies are the distinct nodes, ``N (1 - (1 - 1/N)^k)`` in expectation under
    uniform routing, at most ``M`` with node-limited routing (section 2.1.2), of which
    ``(N-1)/N`` are remote too. Returns ``min(M, N (1 - (1-1/N)^k)) / k`` (1 without
    ``dedup`` or on one node).

    >>> float(ep_inter_node_copy_fraction(8, 8, 4, dedup=True))
    0.5
    >>> float(ep_inter_node_copy_fraction(8, 8, None, dedup=False))
    1.0
    """
    n = np.maximum(np.asarray(num_nodes, dtype=float), 1.0)
    k = float(top_k)
    distinct = n * (1.0 - (1.0 - 1.0 / n) ** k)
    if max_nodes_per_token:
        distinct = np.minimum(distinct, float(max_nodes_per_token))
    frac = np.minimum(distinct / k, 1.0)
    return np.where(dedup & (n > 1), frac, 1.0)


def ep_exposed_time(
    comm_s: Num, overlapped_compute_s: Num, overlap: str, comm_sm_fraction: float = 0.0
) -> FloatArray:
    """All-to-all time left on the critical path after the framework's overlap.

    ``none``: all of it. ``dualpipe`` / ``1f1b-overlap``: the dispatch and combine of one
    micro-batch run while the paired micro-batch computes (arXiv 2412.19437, section
    3.2.1, figure 4); the communication kernels hold a share ``f`` of the SMs (20 of
    132 on H800, section 3.2.2), so the paired compute ``C`` runs at ``1 - f`` speed while
    the ``c`` seconds of communication are in flight. The pair then takes ``max(c, C + f c)``
    and the exposed part is ``max(c - C, f c)``: never more than ``c`` (never slower than
    no overlap), and ``max(0, c - C)`` with ``f = 0``.

    >>> float(ep_exposed_time(3.0, 1.0, "none")), float(ep_exposed_time(3.0, 1.0, "dualpipe"))
    (3.0, 2.0)
    >>> float(ep_exposed_time(1.0, 4.0, "dualpipe", 0.25))
    0.25
    """
    c = np.asarray(comm_s, dtype=float)
    if overlap == "none":
        return c
    f = min(max(float(comm_sm_fraction), 0.0), 1.0)
    exposed: FloatArray = np.minimum(
        np.maximum(c - np.asarray(overlapped_compute_s, dtype=float), f * c), c
    )
    return exposed


def cp_causal_imbalance(cp: Num, load_balance: Flag) -> FloatArray:
    """Attention time of the slowest CP rank over the balanced share, causal mask.

    With contiguous chunks rank ``i`` (of ``cp``) attends to ``i`` full blocks and one
    diagonal half block, the last rank to ``cp - 1/2`` blocks while the average is
    ``cp/2``: the step waits ``(2cp-1)/cp`` times the balanced time. The zig-zag split
    (``load_balance``) gives every rank the same work: 1 (Brandon et al. 2023, "Striped
    Attention", arXiv 2311.09431, section 3; Megatron-core context parallel).

    >>> [float(cp_causal_imbalance(c, False)) for c in (1, 2, 8)]
    [1.0, 1.5, 1.875]
    >>> float(cp_causal_imbalance(8, True))
    1.0
    """
    c = np.maximum(np.asarray(cp, dtype=float), 1.0)
    return np.where(np.asarray(load_balance, dtype=bool), 1.0, (2.0 * c - 1.0) / c)


def ring_attention_exposed(
    step_comm: Num, block_compute: Num, cp: Num, passes: Num = 1.0
) -> FloatArray:
    """Exposed time of the ring exchange of one layer's attention pass.

    The ring runs ``cp`` steps; in each of the first ``cp - 1`` a rank sends the K/V block
    it holds to the next rank while it computes attention against that block, so only the
    part of a transfer longer than one block's attention is exposed:
    ``(cp - 1) * max(step_comm - block_compute, 0)`` (Liu et al. 2023, "Ring Attention with
    Blockwise Transformers", arXiv 2310.01889, section 3: overlap requires the block
    compute to outlast the block transfer). ``block_compute`` is one step's attention (the
    rank's pass over ``cp``); ``passes`` multiplies (forward, backward, recompute).

    >>> float(ring_attention_exposed(2.0, 0.5, 4))
    4.5
    >>> float(ring_attention_exposed(0.5, 2.0, 4))
    0.0
    """
    steps = np.maximum(np.asarray(cp, dtype=float) - 1.0, 0.0)
    exposed: FloatArray = (
        passes * steps * np.maximum(np.asarray(step_comm) - np.asarray(block_compute), 0.0)
    )
    return exposed


def ulysses_all_to_all_bytes(tokens: Num, q_width: float, kv_width: float) -> FloatArray:
    """Bytes one rank passes to one all-to-all set of a DeepSpeed-Ulysses attention layer.

    Ulysses swaps the sequence split for a head split before the attention core and back
    after it: Q, K, V in (``q_width + kv_width`` per token, K and V together) and the
    output out (``q_width``), 16-bit, ``tokens`` being the rank's sequence shard (Jacobs
    et al. 2023, "DeepSpeed Ulysses", arXiv 2309.14509, section 3.1). The buffer is the
    rank's whole input (nccl-tests size convention); the collective model charges the
    ``(cp-1)/cp`` that leaves the rank.

    >>> float(ulysses_all_to_all_bytes(1024, 4096, 1024))
    18874368.0
    """
    return np.asarray(tokens, dtype=float) * (2.0 * q_width + kv_width) * 2.0


def dualpipe_bubble(pp: Num, fb_s: Num, b_s: Num, w_s: Num) -> FloatArray:
    """DualPipe's pipeline bubble, ``(PP/2 - 1) (F&B + B - 3W)``.

    DeepSeek-AI 2024 (arXiv 2412.19437), Table 2: ``F&B`` is the time of a pair of
    mutually overlapped forward and backward chunks, ``B`` a full backward chunk and ``W``
    its weight-gradient part (compare 1F1B's ``(PP-1)(F+B)``). Odd ``PP`` (DualPipe needs
    an even stage count) gets the 1F1B bubble ``(PP-1)(F&B)``.

    >>> float(dualpipe_bubble(16, 3.0, 2.0, 0.5))
    24.5
    """
    stages = np.asarray(pp, dtype=float)
    dual = np.maximum(stages / 2.0 - 1.0, 0.0) * np.maximum(fb_s + b_s - 3.0 * w_s, 0.0)
    return np.where(stages % 2 == 0, dual, (stages - 1.0) * fb_s)


# ------------------------------------------------------------------------ step model
def evaluate_layouts(
    arch: ModelArch,
    hw: Hardware,
    layouts: Layouts,
    *,
    seq_len: int,
    global_batch: int,
    precision: str,
    framework: Framework | None = None,
    constants: Constants | None = None,
    with_memory: bool = True,
) -> StepEvaluation:
    """Step time (with breakdown and interval) and memory of every layout.

    Parameters
    ----------
    arch:
        The model.
    hw:
        Calibrated device, memory, scale-up domain and scale-out bandwidth.
    layouts:
        Arrays ``tp, pp, cp, ep, dp, vp, micro_batch, recompute (0/1/2), zero (0-3)`` of
        one shape; validity (divisibility, batch) is the caller's job
        (:func:`gpuplan.forecast.search.enumerate_layouts` or :func:`check_layout`).
    seq_len:
        Tokens per sequence.
    global_batch:
        Sequences per optimizer step.
    precision:
        GEMM dtype: bf16, fp16, fp8 or fp4.

    Returns
    -------
    dict
        ``step_time_s`` (3, n) [value, low, high] before the model-error band,
        ``breakdown_s`` {key: (3, n)}, ``compute_detail_s``, ``memory`` {part: (n,)} and the
        derived quantities used by :func:`summarise`.
    """
    fw = framework or Framework()
    c = constants or default_constants()
    perf = hw.perf
    L = {k: np.asarray(v) for k, v in layouts.items()}
    tp = L["tp"].astype(float)
    pp = L["pp"].astype(float)
    cp = L["cp"].astype(float)
    ep = L["ep"].astype(float)
    dp = L["dp"].astype(float)
    vp = L["vp"].astype(float)
    mb = L["micro_batch"].astype(float)
    rc = L["recompute"].astype(np.int64)
    zero = L["zero"].astype(np.int64)
    s = float(seq_len)
    h = float(arch.hidden)
    m_micro = float(global_batch) / (dp * mb)  # micro-batches per step per pipeline
    layers_per_stage, last_deficit = stage_layers(arch, pp)
    etp = expert_tensor_parallel(tp, cp, dp, ep)
    dense_per_stage = layers_per_stage * (arch.num_dense_layers / arch.layers)
    moe_per_stage = layers_per_stage * (arch.num_moe_layers / arch.layers)
    sp = np.asarray(fw.sequence_parallel) & (tp > 1)
    tokens = mb * s / cp  # tokens of one micro-batch on one rank (after CP split)
    full = (rc >= 2).astype(float)
    any_rc = (rc >= 1).astype(float)

    # ---- GEMM rates on the unique (tokens, tp, ep) combinations only (the search has
    # thousands of layouts but a few dozen distinct GEMM shapes).
    (u_t, u_tp, u_ep, u_etp), inv = _unique_rows(tokens, tp, ep, etp)
    gemms = layer_gemms(arch, u_t, u_tp, u_ep, etp=u_etp)
    n_u = u_t.size
    shapes = []
    for g in gemms:
        # routed experts: the grouped GEMM's rate at the per-expert block it really
        # computes, padded to whole M tiles (grouped_gemm_rows)
        gm = np.maximum(grouped_gemm_rows(g.m) if g.kind == "expert" else g.m, 1.0)
        # forward (m,n,k), data gradient (m,k,n), weight gradient (k,n,m)
        for dims in ((gm, g.n, g.k), (gm, g.k, g.n), (g.k, g.n, gm)):
            shapes.append([np.broadcast_to(np.asarray(x, dtype=float), (n_u,)) for x in dims])
    big = [np.concatenate([sh[j] for sh in shapes]) for j in range(3)]
    recipe = precision_recipe(precision)
    gemm_rates = gemm_rates3(hw, big[0], big[1], big[2], precision)
    hp_dtype = _dtype_for_attention(precision)
    mixed = recipe.low_precision and (
        recipe.high_precision_kinds or recipe.high_precision_layer_fraction > 0.0
    )
    hp_rates = gemm_rates3(hw, big[0], big[1], big[2], hp_dtype) if mixed else gemm_rates
    groups = ("layer", "dense", "moe", "model")
    fwd_u = {k: np.zeros((3, n_u)) for k in groups}
    bwd_u = {k: np.zeros((3, n_u)) for k in groups}
    cast_fwd_elems = {k: np.zeros(n_u) for k in groups}
    cast_bwd_elems = {k: np.zeros(n_u) for k in groups}
    wgrad_u = {k: np.zeros((3, n_u)) for k in groups}
    # LoRA (Framework.lora_rank): the base weights are frozen, so no weight gradients; the
    # adapters' activation traffic per pass, bytes (their FLOPs are under 1 % at rank 16).
    lora = fw.lora_rank is not None
    lora_fwd_u = {k: np.zeros(n_u) for k in groups}
    lora_bwd_u = {k: np.zeros(n_u) for k in groups}
    up_proj_fwd_u = np.zeros((3, n_u))  # MLA up-projections, rerun by mla_up_proj recompute
    for i, g in enumerate(gemms):
        sl = slice(3 * i * n_u, 3 * (i + 1) * n_u)
        r_lp = gemm_rates[:, sl].reshape(3, 3, n_u)
        r_hp = hp_rates[:, sl].reshape(3, 3, n_u)
        # Share of this GEMM's FLOPs the recipe keeps in 16 bits (PrecisionRecipe).
        w_hp = (
            1.0
            if g.kind in recipe.high_precision_kinds
            else (recipe.high_precision_layer_fraction if g.per != "model" else 0.0)
        )
        flops = np.broadcast_to(g.flops(), (n_u,))
        if g.kind == "expert":
            # padding rows cost time, not model FLOPs; and under EP the step waits for the
            # busiest rank (expert_rank_imbalance, or the framework's measured figure)
            m_pad = grouped_gemm_rows(g.m)
            imb = (
                expert_rank_imbalance(g.m * g.count, u_ep)
                if fw.expert_load_imbalance is None
                else np.where(u_ep > 1, float(fw.expert_load_imbalance), 1.0)
            )
            flops = flops * np.broadcast_to(imb * m_pad / np.maximum(g.m, 1e-30), (n_u,))
        # [corner, pass (fwd, dgrad, wgrad), shape]
        t = flops * ((1.0 - w_hp) / r_lp + w_hp / r_hp)
        fwd_u[g.per] = fwd_u[g.per] + t[:, 0]
        if lora:
            bwd_u[g.per] = bwd_u[g.per] + t[:, 1]
            io = lora_adapter_io(arch, g, fw.lora_modules, fw.lora_fused)
            if io is not None:
                rows = np.broadcast_to(g.m * g.count, (n_u,))
                # 16-bit activations: the forward reads the input once per module (p*k)
                # and writes B's output, which the sum with the base output reads again
                # and writes back (3n); the backward reads dy for B (n), the input again
                # for A's weight gradient and reads and writes dx for A's data gradient
                # (3*p*k).
                lora_fwd_u[g.per] = lora_fwd_u[g.per] + 2.0 * rows * (io[0] + 3.0 * io[1])
                lora_bwd_u[g.per] = lora_bwd_u[g.per] + 2.0 * rows * (3.0 * io[0] + io[1])
        else:
            bwd_u[g.per] = bwd_u[g.per] + t[:, 1] + t[:, 2]
            wgrad_u[g.per] = wgrad_u[g.per] + t[:, 2]
        if g.name in ("q_up", "kv_up"):
            up_proj_fwd_u = up_proj_fwd_u + t[:, 0]
        cnt = np.broadcast_to(g.count, (n_u,)) * (1.0 - w_hp)
        cast_fwd_elems[g.per] = cast_fwd_elems[g.per] + cnt * np.broadcast_to(g.m * g.k, (n_u,))
        cast_bwd_elems[g.per] = cast_bwd_elems[g.per] + cnt * np.broadcast_to(g.m * g.n, (n_u,))

    def per_layout(u: FloatArray) -> FloatArray:
        return u[..., inv]

    mult = {
        "layer": layers_per_stage,
        "dense": dense_per_stage,
        "moe": moe_per_stage,
        "model": np.ones_like(pp),
    }
    # With uneven or balanced ends the last stage runs ``last_deficit`` layers fewer plus the
    # output layer: only the part of the output layer longer than those layers adds to the
    # busiest stage's time (pipeline_split).
    layer_fwd = sum(
        per_layout(fwd_u[k])[0] * w
        for k, w in (
            ("layer", 1.0),
            ("dense", arch.num_dense_layers / arch.layers),
            ("moe", arch.num_moe_layers / arch.layers),
        )
    )
    logits_fwd = per_layout(fwd_u["model"])[0]
    extra = np.clip(
        (logits_fwd - last_deficit * layer_fwd) / np.maximum(logits_fwd, 1e-30), 0.0, 1.0
    )
    mult["model"] = np.where(last_deficit > 0, extra, 1.0)
    gemm_fwd = sum(per_layout(fwd_u[k]) * mult[k] for k in groups)
    gemm_bwd = sum(per_layout(bwd_u[k]) * mult[k] for k in groups)
    gemm_fwd_layers = gemm_fwd - per_layout(fwd_u["model"]) * mult["model"]  # no logits recompute
    # Fine-grained recompute (selective only) reruns what it discarded in the backward:
    # the MLA up-projection GEMMs, the block norms and the experts' activation function.
    mods = set(fw.recompute_modules)
    selective_only = (rc == 1).astype(float)
    rerun_up = (
        selective_only * per_layout(up_proj_fwd_u) * layers_per_stage
        if "mla_up_proj" in mods and arch.attention == "mla"
        else 0.0
    )
    gemm_factor = constant(c, "gemm_time_factor")
    gemm_time = gemm_factor * (gemm_fwd + gemm_bwd + full * gemm_fwd_layers + rerun_up)
    gemm_fwd_c = gemm_factor * gemm_fwd
    wgrad_time = gemm_factor * sum(per_layout(wgrad_u[k]) * mult[k] for k in groups)

    # ---- attention core (PaLM's non-causal FLOP count) per layer on this rank. Not halved
    # for a fused causal kernel: fused and unfused rows share the attention factor, and a
    # halved fused count left held-out long-sequence rows 73 % off (docs, "Terms that
    # transfer"); the factor carries the causal skip.
    attn_fwd_flops = (
        tokens
        * attention_core_flops_per_token_layer(arch, s, executed=True)
        / tp
        * layers_per_stage
    )
    attn_dtype = _dtype_for_attention(precision)
    score_bytes: Num = 0.0
    if fw.flash_attention:
        # Flash attention keeps the score tiles on chip (Dao et al. 2022, section 3.1): it
        # is compute-bound, at the fraction of the dense peak its kernel reaches on this
        # GPU generation (published kernel figures, see attention_rate3); the fitted
        # attention factor carries the rest (backward pass, causal blocks skipped).
        attn_rate = attention_rate3(perf, hw.generation, attn_dtype, fw.attention_kernel, c)
    else:
        # Unfused attention: two batched GEMMs that write/read the score matrix, timed at
        # the calibrated rate of their shapes, and the softmax (+ dropout) passes over the
        # scores as memory traffic (Korthikanti et al. 2022, section 4.1 lists the tensors).
        (a_mb, a_cp, a_tp), a_inv = _unique_rows(mb, cp, tp)
        am, an, ak, abatch = attention_core_shape(arch, a_mb, s, a_tp, a_cp)
        qk = comm_mod.estimate3(perf.matmul_flops_per_s(am * abatch, an, ak, attn_dtype), rate=True)
        av = comm_mod.estimate3(
            perf.matmul_flops_per_s(
                am * abatch, arch.v_head_dim * np.ones_like(am), an, attn_dtype
            ),
            rate=True,
        )
        w_qk = arch.qk_head_dim / (arch.qk_head_dim + arch.v_head_dim)
        attn_rate = 1.0 / (w_qk / qk + (1.0 - w_qk) / av)[..., a_inv]
        scores = mb * (arch.heads / tp) * (s / cp) * s * layers_per_stage
        per_elem = 4.0 + (5.0 if arch.dropout else 0.0)  # softmax r/w; dropout r/w + mask
        score_bytes = scores * per_elem
    # A causal mask split over CP ranks without the zig-zag order leaves the last rank
    # most of the unmasked blocks (cp_causal_imbalance); its attention sets the pace.
    imbalance = np.where(
        (cp > 1) & bool(arch.causal), cp_causal_imbalance(cp, fw.cp_load_balance), 1.0
    )
    # A fused causal kernel computes the diagonal tiles in full and masks half of each:
    # with query/key tiles of B rows it runs n(n+1)/2 tiles for n = s/B where n^2/2 carry
    # the causal work, 1 + B/s times the work (Dao 2023, FlashAttention-2, section 3.1.1:
    # only the diagonal block of each row needs the mask; B = 128, the query-tile rows
    # (kBlockM) of the FlashAttention-2/3 forward kernels at head dim 128, an
    # approximation for other head dims and the key-tile width). Independent of cp under
    # zig-zag: the s/B diagonal tiles are spread over the ranks.
    diag = 1.0 + CAUSAL_TILE_ROWS / s if (fw.flash_attention and arch.causal) else 1.0
    attn_factor = constant(c, "attention_time_factor")
    attn_fwd_balanced = attn_factor * attn_fwd_flops / attn_rate * diag
    attn_fwd = attn_fwd_balanced * imbalance
    bwd_ratio = (
        FLASH_ATTENTION_BWD_FLOPS_RATIO if fw.flash_attention else UNFUSED_ATTENTION_BWD_FLOPS_RATIO
    )
    attn_bwd = bwd_ratio * attn_fwd + any_rc * attn_fwd
    attn_time = attn_fwd + attn_bwd

    # ---- non-GEMM traffic (bytes) per micro-batch per stage.
    f = float(arch.ffn_hidden)
    dq = arch.heads * arch.qk_head_dim
    dk = arch.n_kv_heads * arch.qk_head_dim if arch.attention != "mla" else dq
    seq_split = np.where(sp, tp, 1.0)
    per_token_layer = (
        # per block: a norm (read+write) and a residual add (2 reads + write); 2 blocks
        10.0 * arch.blocks_per_layer * h / seq_split
        + 4.0 * (dq + dk) / tp * arch.attention_fraction  # rotary on q and k
    )
    act_dense = (6.0 * f if arch.gated_mlp else 4.0 * f) / tp * arch.mlp_fraction
    if arch.mamba_layers:
        # Mamba-2 elementwise passes: conv + SiLU over x, B, C (read + write), gate and
        # gated RMSNorm over the scan output (3 reads, 2 writes), 2 bytes each.
        per_token_layer = (
            per_token_layer
            + arch.mamba_fraction * 2.0 * float(arch.mamba_elementwise_elements_per_token()) / tp
        )
    if arch.is_moe:
        fe = float(arch.expert_ffn)
        act_moe = (
            arch.top_k * (6.0 * fe if arch.gated_mlp else 4.0 * fe)
            + arch.num_shared_experts * (6.0 * fe if arch.gated_mlp else 4.0 * fe)
        ) / tp + 8.0 * arch.top_k * h / seq_split  # permute + unpermute (read + write)
    else:
        act_moe = np.zeros(1)
    fwd_bytes = (
        tokens
        * (
            per_token_layer * layers_per_stage
            + act_dense * dense_per_stage
            + act_moe * moe_per_stage
        )
        + score_bytes
    )
    if recipe.low_precision:
        # Transformer Engine casts every quantized GEMM input to 8 bits (read 2 B, write 1
        # B) and the output gradients in the backward (fp4: 0.56 B written; 1 B kept as a
        # bound for the amax/scale passes).
        cast_f = sum(per_layout(cast_fwd_elems[k]) * mult[k] for k in mult)
        cast_b = sum(per_layout(cast_bwd_elems[k]) * mult[k] for k in mult)
        fwd_bytes = fwd_bytes + 3.0 * cast_f
        bwd_cast = 3.0 * cast_b
    else:
        bwd_cast = 0.0
    # Cross-entropy over the logits on the last stage: 16-bit logits read, fp32 softmax
    # written and read back in the backward (2 + 4 + 4 + 2 B per element).
    ce_bytes = tokens * arch.vocab / tp * 12.0 * mult["model"]
    rerun_bytes: Num = 0.0
    if "layernorm" in mods:  # two norms per layer: read the input, write the output (2 B)
        rerun_bytes = rerun_bytes + 8.0 * h / seq_split * layers_per_stage
    if "moe_act" in mods and arch.is_moe:  # SwiGLU: read gate and up, write the product
        rerun_bytes = rerun_bytes + arch.top_k * 6.0 * float(arch.expert_ffn) / tp * moe_per_stage
    lora_fwd: Num = 0.0
    lora_bwd: Num = 0.0
    if lora:
        lora_fwd = sum(per_layout(lora_fwd_u[k]) * mult[k] for k in groups)
        lora_bwd = sum(per_layout(lora_bwd_u[k]) * mult[k] for k in groups)
    nongemm_bytes = (
        fwd_bytes * (3.0 + full)
        + bwd_cast
        + ce_bytes
        + selective_only * tokens * rerun_bytes
        + lora_fwd * (1.0 + full)
        + lora_bwd
    )
    membw = comm_mod.estimate3(perf.memory_bandwidth_bytes_per_s(None), rate=True).reshape(3, 1)
    traffic_factor = constant(c, "nongemm_traffic_factor")
    mem_time = traffic_factor * nongemm_bytes / membw
    mem_fwd = traffic_factor * (fwd_bytes + ce_bytes / 3.0 + lora_fwd) / membw
    launch = (
        constant(c, "layer_overhead_s") * layers_per_stage * (1.0 + full / 3.0) * np.ones((3, 1))
    )

    compute_mb = gemm_time + attn_time + mem_time + launch
    fwd_mb = gemm_fwd_c + attn_fwd + mem_fwd + launch * 0.25
    # the training-step probe's measured/forecast factor (forecast/train_calibration.py)
    step_f = np.asarray(
        constant_list(c, "compute_time_factor", [1.0, 1.0, 1.0]), dtype=float
    ).reshape(3, 1)
    compute_mb, fwd_mb = compute_mb * step_f, fwd_mb * step_f
    bwd_mb = np.maximum(compute_mb - fwd_mb, 0.0)

    # ---- tensor parallel
    nic = hw.inter_node_bandwidth_bytes_per_s
    node = float(hw.node_size)
    act_bytes = tokens * h * 2.0
    tp_layer = comm_mod.tp_layer_comm_time3(
        perf, act_bytes, tp, node, sequence_parallel=sp, inter_node_bandwidth_bytes_per_s=nic
    )
    # tp_layer is a standard layer's two blocks; a hybrid layer is one block
    tp_mb = tp_layer * layers_per_stage * (2.0 + full) * (arch.blocks_per_layer / 2.0) * step_f
    if fw.tp_overlap:
        tp_mb = np.maximum(tp_mb - gemm_time, 0.0)

    # ---- context parallel: ring exchange of K and V, overlapped with the attention core.
    if arch.attention == "mla":
        kv_width = arch.heads * (arch.qk_head_dim + arch.v_head_dim)
    else:
        kv_width = arch.n_kv_heads * (arch.qk_head_dim + arch.v_head_dim)
    kv_bytes = tokens * kv_width * 2.0 / tp * arch.attention_fraction
    same_node_cp = tp * cp <= node
    n_layers = np.maximum(layers_per_stage, 1.0)
    if fw.cp_comm == "a2a":
        # DeepSpeed-Ulysses: one all-to-all set before and after the attention core in the
        # forward, the same for the gradients in the backward, again under recompute; on
        # the critical path (the core needs the whole sequence of its heads).
        q_width = arch.heads * arch.qk_head_dim
        a2a_bytes = ulysses_all_to_all_bytes(tokens, q_width, kv_width) / tp
        a2a_bytes = a2a_bytes * arch.attention_fraction
        cp_a2a = comm_mod.collective_time3(
            perf,
            "all_to_all",
            a2a_bytes,
            cp,
            ranks_per_node=comm_mod.group_ranks_per_node(cp, tp, node),
            inter_node_bandwidth_bytes_per_s=nic,
        )
        cp_total = cp_a2a * layers_per_stage * (2.0 + any_rc)
        cp_mb = np.where(cp > 1, cp_total, 0.0)
    else:
        # Ring attention: per layer and pass, cp-1 block transfers each hidden behind one
        # block's attention (ring_attention_exposed). Forward (and its recompute): K and V;
        # backward: K and V again plus their gradients dK, dV (twice the bytes) against the
        # backward block. Blocks are the balanced share; imbalance is in attn_time.
        # only layouts with CP send blocks (collective_time3 skips the zero-byte ones)
        cp_p2p = comm_mod.p2p_time3(
            perf,
            np.where(cp > 1, kv_bytes, 0.0),
            same_node_cp,
            inter_node_bandwidth_bytes_per_s=nic,
        )
        blk_fwd = attn_fwd_balanced / n_layers / np.maximum(cp, 1.0)
        cp_total = cp_p2p * np.maximum(cp - 1.0, 0.0) * layers_per_stage * (3.0 + any_rc)
        cp_mb = layers_per_stage * (
            ring_attention_exposed(cp_p2p, blk_fwd, cp, 1.0 + any_rc)
            + ring_attention_exposed(2.0 * cp_p2p, bwd_ratio * blk_fwd, cp)
        )
        cp_mb = np.where(cp > 1, cp_mb, 0.0)

    # ---- expert parallel: all-to-all dispatch and combine per MoE layer, forward and
    # backward (the backward of a dispatch is a combine and vice versa), again under full
    # recompute; each moves ep_all_to_all_bytes over the EP group's placement.
    deepep = fw.ep_deepep
    dispatch_b = 1.0 + FP8_TILE_SCALE_BYTES_PER_ELEMENT if deepep and recipe.low_precision else 2.0
    combine_b = 2.0  # BF16 combine in every recipe (arXiv 2412.19437, section 3.3.4)
    if arch.is_moe:
        ep_tokens = tokens / np.where(sp, tp, 1.0)
        # EP groups stride over TP x CP, or over ETP when folded into the TP ranks; a group
        # of ``ep`` ranks lies inside its stage's TP x CP x DP ranks, so its stride is at most
        # (TP x CP x DP) / EP: with EP = CP x DP (8 GPUs: CP 2, DP 4, EP 8) the group is the
        # whole node, not every other rank of two nodes.
        ep_stride = np.minimum(
            np.where(etp < tp, etp, tp * cp), np.maximum(tp * cp * dp / np.maximum(ep, 1.0), 1.0)
        )
        ep_rpn = comm_mod.group_ranks_per_node(ep, ep_stride, node)
        ep_nodes = np.ceil(ep / np.maximum(ep_rpn, 1.0))
        dedup = ep_inter_node_copy_fraction(
            arch.top_k, ep_nodes, arch.max_nodes_per_token, dedup=deepep
        )
        # DeepEP sends a token once to each *rank* holding one of its experts and combines
        # the rank's expert outputs before sending them back (its dispatch layout:
        # ``is_token_in_rank``; github deepseek-ai/DeepEP README "normal kernels"), so the
        # NVLink copies are the distinct ranks, ``R (1 - (1 - 1/R)^k)`` of the ``k`` copies
        # NCCL's all-to-all sends (the same expectation as the nodes', over the EP ranks).
        rank_dedup = ep_inter_node_copy_fraction(arch.top_k, ep, None, dedup=deepep)

        f_deepep = constant(c, "deepep_internode_nic_fraction", 0.0)

        def a2a_time(b: float) -> FloatArray:
            full_size = ep_all_to_all_bytes(ep_tokens, arch.top_k, h, b)
            size = full_size * dedup
            t = comm_mod.collective_time3(
                perf,
                "all_to_all",
                np.where(ep_nodes > 1, size, full_size * rank_dedup),
                ep,
                ranks_per_node=ep_rpn,
                inter_node_bandwidth_bytes_per_s=nic,
            )
            if not (deepep and nic and f_deepep > 0.0):
                return t
            # DeepEP's normal kernels across nodes: each token goes once over RDMA to its
            # target node, at the share of the NIC its kernels reach (constants,
            # deepep_internode_nic_fraction), while NVLink forwards it to the target GPU
            # inside that node in parallel (at most the whole buffer per rank over NVLink).
            # The slower of the two sets the pace; NCCL's calibrated all-to-all otherwise.
            nodes = np.maximum(ep_nodes, 1.0)
            rdma = size * (nodes - 1.0) / nodes / (float(nic) * f_deepep)
            nvlink = comm_mod.collective_time3(
                perf,
                "all_to_all",
                full_size * rank_dedup,
                np.minimum(ep, ep_rpn),
                ranks_per_node=ep_rpn,
                inter_node_bandwidth_bytes_per_s=nic,
            )
            return np.where(ep_nodes > 1, np.maximum(rdma, nvlink), t)

        ep_total_mb = (a2a_time(dispatch_b) + a2a_time(combine_b)) * moe_per_stage * (2.0 + full)
    else:
        ep_total_mb = np.zeros_like(compute_mb)
    ep_mb = ep_exposed_time(
        ep_total_mb,
        compute_mb,
        fw.ep_overlap,
        constant(c, "ep_overlap_comm_sm_fraction", 0.0),
    )

    t_mb = compute_mb + tp_mb + cp_mb + ep_mb
    if fw.ep_overlap == "dualpipe":
        bubble = dualpipe_bubble(pp, t_mb, bwd_mb, wgrad_time)
    else:
        bubble = (pp - 1.0) / vp * t_mb

    # ---- pipeline point-to-point (scatter/gather optimisation: 1/t of the activation).
    pp_bytes = act_bytes / tp
    same_node_pp = tp * cp * dp * 2.0 <= node
    p2p = comm_mod.p2p_time3(perf, pp_bytes, same_node_pp, inter_node_bandwidth_bytes_per_s=nic)
    pp_comm = np.where(pp > 1, 2.0 * p2p * (m_micro * vp + pp - 1.0), 0.0)

    # ---- data parallel (dense weights over dp*cp; experts over dp*cp/ep)
    counts = param_counts_per_rank(arch, tp, pp, ep, etp)
    # The parameters that get gradients: all of them, or a LoRA job's adapters (on the
    # dense parameters' ranks, none on the routed experts).
    if lora:
        trained = {
            "dense": lora_trainable_params(
                arch, int(fw.lora_rank or 0), fw.lora_modules, fw.lora_fused
            )
            / (tp * pp),
            "expert": np.zeros_like(counts["expert"]),
        }
    else:
        trained = counts
    dense_grp = dp * cp
    expert_grp = np.maximum(dense_grp * tp / (ep * etp), 1.0)  # expert-data-parallel group
    # HSDP: ZeRO-3 collectives inside shard groups; the replicas all-reduce their gradient
    # shards once per step (below).
    replicas = np.ones_like(dense_grp)
    if fw.hsdp_shard_size is not None:
        hsdp = (zero >= 3) & (float(fw.hsdp_shard_size) < dense_grp)
        replicas = np.where(hsdp, dense_grp / float(fw.hsdp_shard_size), 1.0)
        dense_grp = dense_grp / replicas
        expert_grp = np.maximum(expert_grp / replicas, 1.0)
    # ZeRO-3 units: one transformer layer (FSDP per-block wrapping) or the framework's cap.
    unit_params = (counts["dense"] + counts["expert"]) / np.maximum(layers_per_stage, 1.0)
    if fw.zero3_unit_params is not None:
        unit_params = np.minimum(unit_params, fw.zero3_unit_params)
    chunks = np.ceil((counts["dense"] + counts["expert"]) / np.maximum(unit_params, 1.0))
    # ZeRO-3/FSDP gather bytes: with FSDP2's float8 all-gather the transformer blocks'
    # linear weights travel as their FP8 casts (1 byte + one fp32 scale per tensor,
    # negligible), half the BF16 bytes; the embedding and output layer (kept in BF16 by
    # the recipe) and the norms stay 16-bit (PyTorch blog, "Supercharging Training using
    # float8 and FSDP2", 2024; torchao float8 ``enable_fsdp_float8_all_gather``). ZeRO-1/2
    # gather their updated 16-bit weights as before.
    if fp8_param_gather_on(fw, precision):
        emb = arch.vocab * arch.hidden * (1.0 if arch.tied_embeddings else 2.0) / tp
        emb = np.minimum(np.where(pp > 1, arch.vocab * arch.hidden / tp, emb), counts["dense"])
        fp8_bytes = (counts["dense"] - emb) * 1.0 + emb * fw.param_gather_bytes
        z3_on = zero >= 3
        dense_gather = np.where(z3_on, fp8_bytes, counts["dense"] * fw.param_gather_bytes)
        expert_gather_per_param = np.where(z3_on, 1.0, fw.param_gather_bytes)
    else:
        dense_gather = counts["dense"] * fw.param_gather_bytes
        expert_gather_per_param = fw.param_gather_bytes * np.ones_like(counts["dense"])
    if lora:
        # ZeRO-3 still gathers the frozen base weights; ZeRO-1/2 gather the updated
        # adapters only.
        dense_gather = np.where(zero >= 3, dense_gather, trained["dense"] * fw.param_gather_bytes)
        expert_gather_per_param = np.where(zero >= 3, expert_gather_per_param, 0.0)
    dense = comm_mod.data_parallel_times3(
        perf,
        grad_bytes=trained["dense"] * fw.grad_reduce_bytes,
        param_bytes=dense_gather,
        ranks=dense_grp,
        stride=tp,
        node_size=node,
        zero=zero,
        inter_node_bandwidth_bytes_per_s=nic,
        zero3_chunks=chunks,
        latency=hw.collective_latency,
    )
    grad_t, param_t = dense["grad"], dense["param"]
    if arch.is_moe:
        exp_grp = expert_grp
        expert = comm_mod.data_parallel_times3(
            perf,
            grad_bytes=trained["expert"] * fw.grad_reduce_bytes,
            param_bytes=counts["expert"] * expert_gather_per_param,
            ranks=exp_grp,
            stride=etp * ep,
            node_size=node,
            zero=zero,
            inter_node_bandwidth_bytes_per_s=nic,
            zero3_chunks=chunks,
            latency=hw.collective_latency,
        )
        grad_t = grad_t + expert["grad"]
        param_t = param_t + expert["param"]
    z3 = zero >= 3
    # HSDP's replica all-reduce of the local gradient shard, once per step, overlapped with
    # the last backward like a DDP all-reduce.
    replica_ar = np.zeros_like(grad_t)
    if fw.hsdp_shard_size is not None:
        shard_grads = (
            trained["dense"] / dense_grp + trained["expert"] / expert_grp
        ) * fw.grad_reduce_bytes
        replica_ar = np.where(
            replicas > 1,
            comm_mod.data_parallel_times3(
                perf,
                grad_bytes=shard_grads,
                param_bytes=0.0,
                ranks=replicas,
                stride=tp * dense_grp,
                node_size=node,
                zero=np.zeros_like(zero),
                inter_node_bandwidth_bytes_per_s=nic,
                latency=hw.collective_latency,
            )["grad"],
            0.0,
        )
    # Overlap as FSDP does it: the next unit's all-gather is issued while the current unit
    # computes (forward prefetch; backward prefetch gathers unit i-1 before unit i's
    # gradient reduce-scatter), so per micro-batch only what exceeds the forward (gathers)
    # and the backward (gathers + reduce-scatters) is exposed, plus the first unit's gather
    # that nothing hides (Zhao et al. 2023, "PyTorch FSDP", VLDB, section 3.3: backward and
    # forward prefetching; FSDP2 issues them on separate streams). Megatron-core's
    # distributed optimizer overlaps its one reduce-scatter / all-gather per step with the
    # last backward / first forward (overlap_grad_reduce / overlap_param_gather).
    # With ``grad_reduce_overlap`` off (DeepSpeed ZeRO-3's default) only the gathers are
    # prefetched; every gradient reduction waits on the critical path.
    # Overlapped collectives are not free: their kernels hold a share f of the SMs, so the
    # compute they hide behind runs at 1 - f (ep_exposed_time's model, the same SM share).
    f_dp = constant(c, "dp_overlap_comm_sm_fraction", 0.0)

    def hidden_behind(comm: Num, compute: Num) -> FloatArray:
        return ep_exposed_time(comm, compute, "overlap", f_dp)

    if fw.dp_overlap and fw.grad_reduce_overlap:
        once = hidden_behind(grad_t, bwd_mb) + hidden_behind(param_t, fwd_mb)
        per_mb = hidden_behind(param_t, fwd_mb) + hidden_behind(param_t + grad_t, bwd_mb)
        first_layer = param_t / np.maximum(layers_per_stage, 1.0)
        dp_exposed = np.where(z3, m_micro * per_mb + first_layer, once)
        dp_exposed = dp_exposed + hidden_behind(replica_ar, bwd_mb)
    elif fw.dp_overlap:
        once = grad_t + hidden_behind(param_t, fwd_mb)
        per_mb = hidden_behind(param_t, fwd_mb) + hidden_behind(param_t, bwd_mb) + grad_t
        first_layer = param_t / np.maximum(layers_per_stage, 1.0)
        dp_exposed = np.where(z3, m_micro * per_mb + first_layer, once) + replica_ar
    else:
        dp_exposed = np.where(z3, m_micro * (2.0 * param_t + grad_t), grad_t + param_t)
        dp_exposed = dp_exposed + replica_ar

    # ---- optimizer step (memory-bound Adam over the local shard)
    local_params = trained["dense"] / np.where(zero >= 1, dense_grp, 1.0) + trained[
        "expert"
    ] / np.where(zero >= 1, expert_grp, 1.0)
    optimizer = (
        local_params * adam_step_bytes_per_param(fw.optimizer_dtype, fw.master_weights) / membw
    )
    # Gradient clipping needs the global gradient norm: one fp32 all-reduce of the squared
    # local norms over every rank holding a distinct gradient shard (the model-parallel
    # group, and the data-parallel group when the gradients are sharded), issued after the
    # last reduction and before the update, so nothing hides it (Megatron-core
    # optimizer/clip_grads.py get_grad_norm_fp32; PyTorch FSDP clip_grad_norm_). Its cost
    # is the collective's latency (alpha) at that group size from the calibration.
    world = tp * pp * cp * dp
    norm_grp = np.where(zero >= 1, world, tp * pp * cp)
    grad_norm = comm_mod.collective_time3(
        perf,
        "all_reduce",
        4.0 * np.ones_like(world),
        norm_grp,
        ranks_per_node=np.minimum(node, norm_grp),
        inter_node_bandwidth_bytes_per_s=nic,
    )

    breakdown = {
        "compute": m_micro * compute_mb,
        "tp_comm": m_micro * tp_mb,
        "cp_comm": m_micro * cp_mb,
        "ep_comm": m_micro * ep_mb,
        "pp_bubble": bubble,
        "pp_comm": pp_comm,
        "dp_comm_exposed": dp_exposed,
        "optimizer": optimizer * np.ones_like(bubble) + grad_norm,
    }
    step = sum(breakdown.values())
    detail = {
        "gemm": m_micro * gemm_time,
        "attention": m_micro * attn_time,
        "memory_bound": m_micro * mem_time,
        "layer_overhead": m_micro * launch * np.ones_like(gemm_time),
    }
    out: StepEvaluation = {
        "step_time_s": step,
        "breakdown_s": breakdown,
        "compute_detail_s": detail,
        "num_microbatches": m_micro,
        # Bytes each rank sends per data-parallel collective of one step's units (the
        # all-gather of its weights, the reduce-scatter / all-reduce of its gradients).
        "dp_comm_bytes": {
            "param_gather": dense_gather
            + (counts["expert"] * expert_gather_per_param if arch.is_moe else 0.0),
            "grad_reduce": (trained["dense"] + trained["expert"]) * fw.grad_reduce_bytes,
        },
        # Costs that do not shrink with the work per GPU: what a small step exposes.
        "fixed_costs_s": {
            "layer_overhead": m_micro * launch * np.ones_like(gemm_time),
            "zero3_first_gather": np.where(
                z3 & bool(fw.dp_overlap), param_t / np.maximum(layers_per_stage, 1.0), 0.0
            ),
            "grad_norm_all_reduce": grad_norm,
            "optimizer_step": optimizer * np.ones_like(bubble),
        },
        "cp_comm_detail_s": {"total": m_micro * cp_total, "exposed": m_micro * cp_mb},
        "ep_comm_detail_s": {
            "total": m_micro * ep_total_mb,
            "exposed": m_micro * ep_mb,
            "dispatch_bytes_per_element": dispatch_b,
            "combine_bytes_per_element": combine_b,
        },
        # Linear decomposition used by the constants fit (validation_training.py):
        # step = sum_i c_i * basis_i + rest, with the bubble spread over the basis terms.
        "fit_basis": {
            "gemm_time_factor": (m_micro + (pp - 1.0) / vp) * gemm_time / gemm_factor,
            "attention_time_factor": (m_micro + (pp - 1.0) / vp) * attn_time / attn_factor,
            "nongemm_traffic_factor": (m_micro + (pp - 1.0) / vp) * mem_time / traffic_factor,
            "layer_overhead_s": (m_micro + (pp - 1.0) / vp)
            * layers_per_stage
            * (1.0 + full / 3.0)
            * np.ones((3, 1)),
        },
    }
    if with_memory:
        out["memory"] = training_memory_per_gpu(
            arch,
            seq_len=s,
            micro_batch=mb,
            num_microbatches=m_micro,
            tp=tp,
            pp=pp,
            cp=cp,
            ep=ep,
            dp=dp,
            vp=vp,
            recompute=rc,
            zero=zero,
            overhead_bytes=constant(c, "framework_overhead_bytes"),
            sequence_parallel=sp,
            flash_attention=fw.flash_attention,
            **_memory_options(fw, precision, arch),
        )
    return out


def memory_only(
    arch: ModelArch,
    hw: Hardware,
    layouts: Layouts,
    *,
    seq_len: int,
    global_batch: int,
    framework: Framework | None = None,
    constants: Constants | None = None,
    precision: str = "bf16",
) -> dict[str, FloatArray]:
    """Memory per GPU of each layout (cheap; used to prune the search before timing)."""
    fw = framework or Framework()
    c = constants or default_constants()
    L = {k: np.asarray(v).astype(float) for k, v in layouts.items()}
    sp = np.asarray(fw.sequence_parallel) & (L["tp"] > 1)
    return training_memory_per_gpu(
        arch,
        seq_len=float(seq_len),
        micro_batch=L["micro_batch"],
        num_microbatches=float(global_batch) / (L["dp"] * L["micro_batch"]),
        tp=L["tp"],
        pp=L["pp"],
        cp=L["cp"],
        ep=L["ep"],
        dp=L["dp"],
        vp=L["vp"],
        recompute=L["recompute"].astype(np.int64),
        zero=L["zero"].astype(np.int64),
        overhead_bytes=constant(c, "framework_overhead_bytes"),
        sequence_parallel=sp,
        flash_attention=fw.flash_attention,
        **_memory_options(fw, precision, arch),
    )


def usable_memory_bytes(hw: Hardware, constants: Constants) -> float:
    """HBM a layout may fill: capacity less ``memory_headroom_fraction`` of it (constants;
    default 0, since ``framework_overhead_bytes`` already holds the CUDA context and the
    communication buffers and published layouts run packed to 97-99 % of HBM)."""
    return float(hw.memory_bytes) * (1.0 - constant(constants, "memory_headroom_fraction", 0.0))


def fp8_param_gather_on(fw: Framework, precision: str) -> bool:
    """Whether ZeRO-3/FSDP all-gathers FP8 linear weights (:attr:`Framework.fp8_param_gather`)."""
    return bool(fw.fp8_param_gather) and precision_recipe(precision).name == "fp8"


def _memory_options(fw: Framework, precision: str, arch: ModelArch) -> MemoryOptions:
    return {
        "grad_bytes": fw.grad_buffer_bytes,
        "linear_input_bytes": precision_recipe(precision).saved_input_bytes,
        "zero3_unit_params": fw.zero3_unit_params,
        "optimizer_dtype": fw.optimizer_dtype,
        "master_weights": fw.master_weights,
        "recompute_modules": tuple(fw.recompute_modules),
        "act_cache_bytes": MOE_ACT_CACHE_DTYPES[fw.moe_act_cache],
        "gathered_weight_bytes": 1.0 if fp8_param_gather_on(fw, precision) else 2.0,
        "pipeline_schedule": "dualpipe" if fw.ep_overlap == "dualpipe" else "1f1b",
        "shard_ranks": fw.hsdp_shard_size,
        "params_are_master": fw.params_are_master,
        "trainable_params": (
            lora_trainable_params(arch, fw.lora_rank, fw.lora_modules, fw.lora_fused)
            if fw.lora_rank is not None
            else None
        ),
    }


# ------------------------------------------------------------------------- checks
def check_layout(
    arch: ModelArch,
    num_gpus: int,
    par: dict[str, int],
    *,
    seq_len: int,
    global_batch: int,
    node_size: int,
) -> None:
    """Raise :class:`InputError` naming the first thing wrong with a fully given layout.

    The rules are those of :func:`gpuplan.forecast.layout_rules.layout_violation`. A TP
    group larger than ``node_size`` is allowed: its collectives leave the node, which the
    hardware scope accounts for.
    """
    for key in ("tp", "pp", "cp", "ep", "dp", "vp", "micro_batch", "zero"):
        if key not in par:
            raise InputError(f"layout has no {key!r}", hint="give every layout dimension")
    violation = layout_violation(
        arch,
        num_gpus,
        {k: par[k] for k in LAYOUT_KEYS if k in par},
        seq_len=seq_len,
        global_batch=global_batch,
    )
    if violation is not None:
        raise violation.error()


# ------------------------------------------------------------------------ summaries
def summarise(
    arch: ModelArch,
    hw: Hardware,
    result: StepEvaluation,
    index: int,
    layouts: Layouts,
    *,
    seq_len: int,
    global_batch: int,
    precision: str,
    num_gpus: int,
    constants: Constants,
    fsdp: bool = False,
    frozen_weights: bool = False,
) -> TrainingForecast:
    """The DESIGN.md 3.3 JSON fields for layout ``index`` of an evaluation.

    ``frozen_weights`` (a LoRA fine-tune): model FLOPs are
    :func:`gpuplan.forecast.model.frozen_weights_flops_per_token`, without the weight
    gradients.
    """
    i = index
    step3 = np.asarray(result["step_time_s"])[:, i]
    r_lo, r_hi = constant_list(constants, "residual_ratio_quantiles", [1.0, 1.0])
    step = float(step3[0])
    step_lo = float(min(step3[1] * r_lo, step))
    step_hi = float(max(step3[2] * r_hi, step))
    tokens_per_step = float(global_batch) * seq_len
    rc = int(layouts["recompute"][i])
    peak = peak_flops(hw, precision_recipe(precision).peak_dtype)
    model_flops = float(model_flops_per_token(arch, seq_len)) * tokens_per_step
    hw_flops = float(hardware_flops_per_token(arch, seq_len, rc)) * tokens_per_step
    if frozen_weights:
        frozen = float(frozen_weights_flops_per_token(arch, seq_len)) * tokens_per_step
        hw_flops, model_flops = hw_flops - model_flops + frozen, frozen

    def per_gpu_tflops(flops: float, t: float) -> float:
        return flops / t / num_gpus / 1e12

    def band(fn: Callable[[float], float]) -> list[float]:
        return [fn(step_hi), fn(step_lo)]

    mem = {k: float(np.asarray(v)[i]) for k, v in result["memory"].items()}
    usable = usable_memory_bytes(hw, constants)
    fits = mem["total"] <= usable
    tps = tokens_per_step / step
    par = ParallelLayout(
        tp=int(layouts["tp"][i]),
        pp=int(layouts["pp"][i]),
        dp=int(layouts["dp"][i]),
        cp=int(layouts["cp"][i]),
        ep=int(layouts["ep"][i]),
        vp=int(layouts["vp"][i]),
        micro_batch=int(layouts["micro_batch"][i]),
        recompute=RECOMPUTE_NAMES[rc],
        zero=int(layouts["zero"][i]),
        fsdp=bool(fsdp and int(layouts["zero"][i]) == 3),
        num_microbatches=round(float(np.asarray(result["num_microbatches"])[i])),
    ).to_json()
    breakdown = {k: float(np.asarray(v)[0, i]) for k, v in result["breakdown_s"].items()}
    breakdown_iv = {
        k: [float(np.asarray(v)[1, i]), float(np.asarray(v)[2, i])]
        for k, v in result["breakdown_s"].items()
    }
    out: TrainingForecast = {
        "step_time_s": step,
        "step_time_interval_s": [step_lo, step_hi],
        "tokens_per_s": tps,
        "tokens_per_s_per_gpu": tps / num_gpus,
        "model_tflops_per_gpu": per_gpu_tflops(model_flops, step),
        "hardware_tflops_per_gpu": per_gpu_tflops(hw_flops, step),
        "mfu": model_flops / step / num_gpus / peak if peak else None,
        "hfu": hw_flops / step / num_gpus / peak if peak else None,
        "memory_per_gpu_bytes": mem["total"],
        "fits_in_memory": bool(fits),
        "memory_overshoot_bytes": max(0.0, mem["total"] - usable),
        "parallelism": par,
        "breakdown_s": breakdown,
        "intervals": {
            "step_time_s": [step_lo, step_hi],
            "tokens_per_s": band(lambda t: tokens_per_step / t),
            "tokens_per_s_per_gpu": band(lambda t: tokens_per_step / t / num_gpus),
            "model_tflops_per_gpu": band(lambda t: per_gpu_tflops(model_flops, t)),
            "hardware_tflops_per_gpu": band(lambda t: per_gpu_tflops(hw_flops, t)),
            "mfu": band(lambda t: model_flops / t / num_gpus / peak) if peak else None,
            "hfu": band(lambda t: hw_flops / t / num_gpus / peak) if peak else None,
            "breakdown_s": breakdown_iv,
        },
        "num_gpus": int(num_gpus),
        "memory_breakdown_bytes": {k: v for k, v in mem.items() if k != "total"},
        "memory_capacity_bytes": float(hw.memory_bytes),
        "memory_usable_bytes": usable,
        "memory_headroom_fraction": constant(constants, "memory_headroom_fraction", 0.0),
        "ep_comm_s": _ep_comm_summary(result, i),
        "dp_comm_bytes": {
            k: float(np.asarray(v).reshape(-1)[i] if np.ndim(v) else v)
            for k, v in (result.get("dp_comm_bytes") or {}).items()
        },
        "compute_detail_s": {
            k: float(np.asarray(v)[0, i]) for k, v in result["compute_detail_s"].items()
        },
        # what a small step exposes whatever the work per GPU (evaluate_layouts)
        "fixed_costs_s": {
            k: float(np.broadcast_to(np.asarray(v), np.shape(result["step_time_s"]))[0, i])
            for k, v in (result.get("fixed_costs_s") or {}).items()
        },
        "cp_comm_s": {
            f"cp_comm_{k}": float(
                np.broadcast_to(np.asarray(v), np.shape(result["step_time_s"]))[0, i]
            )
            for k, v in (result.get("cp_comm_detail_s") or {}).items()
        },
    }
    return out


def _ep_comm_summary(result: StepEvaluation, i: int) -> EpCommSummary:
    """``ep_comm_s``: total and exposed expert-parallel all-to-all time of the step.

    ``breakdown_s.ep_comm`` is the exposed part (the breakdown sums to the step time)."""
    d = result.get("ep_comm_detail_s") or {}
    if not d:
        return {}
    total = float(np.asarray(d["total"])[0, i])
    exposed = float(np.asarray(d["exposed"])[0, i])
    return {
        "ep_comm_total": total,
        "ep_comm_exposed": exposed,
        "ep_comm_hidden": max(total - exposed, 0.0),
        "dispatch_bytes_per_element": float(d["dispatch_bytes_per_element"]),
        "combine_bytes_per_element": float(d["combine_bytes_per_element"]),
    }


# ------------------------------------------------------------------- resolution
def global_batch_sequences(
    seq_len: int, global_batch: int | None, global_batch_tokens: float | None
) -> int:
    """Sequences per step from ``--global-batch`` or ``--global-batch-tokens`` (or the default)."""
    if global_batch is not None and global_batch_tokens is not None:
        raise InputError(
            "give either --global-batch (sequences) or --global-batch-tokens, not both"
        )
    if global_batch is not None:
        if int(global_batch) < 1:
            raise InputError(f"--global-batch must be >= 1, got {global_batch}")
        return int(global_batch)
    tokens = DEFAULT_GLOBAL_BATCH_TOKENS if global_batch_tokens is None else global_batch_tokens
    if tokens <= 0:
        raise InputError(f"--global-batch-tokens must be positive, got {tokens}")
    seqs = round(float(tokens) / seq_len)
    if seqs < 1:
        raise InputError(
            f"--global-batch-tokens {tokens:g} is less than one sequence of {seq_len} tokens",
            hint="raise --global-batch-tokens or lower --seq-len",
        )
    return seqs
