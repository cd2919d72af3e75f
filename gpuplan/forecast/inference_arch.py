"""Inference view of a model: precision, parallel layout, per-GPU GEMM shapes, weights and KV.

Pure functions of a model architecture (the one record :class:`gpuplan.forecast.model.ModelArch`,
built from a catalog row, a mapping or ``--model-file`` by :func:`gpuplan.forecast.model.arch_from`)
and a layout. Nothing here reads a file or a device
model: :mod:`gpuplan.forecast.inference_step` turns the shapes into time with a
:class:`gpuplan.calibration.api.DevicePerf`.

Conventions
-----------
* Tensor parallelism (TP) follows Megatron-LM (Shoeybi et al. 2019, Sec. 3): attention heads
  and the FFN width are split over ``tp`` GPUs, KV heads too, replicated when there are fewer
  KV heads than GPUs (as TensorRT-LLM and vLLM do for GQA). The vocabulary is split as well.
* Expert parallelism (EP) lives inside the TP group, the TensorRT-LLM convention
  ``moe_tp_size x moe_ep_size = tp_size``: ``tp`` must be a multiple of ``ep``; each GPU holds
  ``num_experts / ep`` experts, each sharded ``tp / ep`` ways. A replica has ``tp x pp`` GPUs.
* Wide expert parallelism with data-parallel attention (``dp > 1``, SGLang's
  ``--enable-dp-attention`` with ``--ep-size``; DeepSeek-V3 technical report, section 3.4,
  decoding with attention DP and experts over 320 GPUs): ``dp`` ranks each hold the whole
  attention, dense MLP and embeddings (TP 1) and serve their own requests (their own KV
  cache); the experts are spread over all ``ep = dp`` ranks, the tokens dispatched to them
  and combined back by an all-to-all per MoE layer. A replica has ``dp`` GPUs; per-GPU
  figures average over the ranks (requests balanced over them). When ``ep`` does not divide
  the experts, each rank holds ``ceil(experts / ep)`` expert slots, the spare ones copies of
  busy experts (:func:`expert_slots`: DeepSeek-V3 report section 3.4 "redundant experts";
  SGLang ``--ep-num-redundant-experts`` with EPLB, github.com/deepseek-ai/EPLB: 256 experts
  + 32 copies on 48 GPUs), and the tokens spread over all the slots.
* Pipeline parallelism (PP) splits the layers into ``pp`` equal stages; figures are for the
  average stage (``layers / pp`` layers).
* Embeddings and the LM head stay in the activation dtype when the weights are quantised
  (the default of AWQ, SmoothQuant and NVIDIA ModelOpt FP8 recipes).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Literal, TypeAlias

import numpy as np

from gpuplan.catalogs.schema import Accelerator
from gpuplan.errors import InputError
from gpuplan.forecast.model import (
    ModelArch,
    chunked_pairs,
    kv_cache_bytes_per_token,
    window_pairs,
)
from gpuplan.numeric import BoolArray, FloatArray, Num


# ---------------------------------------------------------------------------------------------
# Precision
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PrecisionSpec:
    """How one ``--precision`` choice stores weights and KV and which tensor-core rate it uses.

    Attributes
    ----------
    name:
        The ``--precision`` value (bf16, fp16, fp8, int8, w8a16, int4, fp4, mxfp4).
    weight_bytes:
        Bytes per weight of the transformer layers, quantisation scales included.
    kv_bytes:
        Bytes per KV-cache element.
    gemm_dtype:
        Catalog dtype whose peak the layer GEMMs run at.
    activation_dtype:
        Dtype of activations, attention math, embeddings and the LM head.
    requires:
        Catalog dtypes the accelerator must support (peak not empty).
    """

    name: str
    weight_bytes: float
    kv_bytes: float
    gemm_dtype: str
    activation_dtype: str
    requires: tuple[str, ...]
    description: str

    @property
    def activation_bytes(self) -> float:
        return 2.0


#: The precisions of ``forecast infer --precision``. Scale overheads: AWQ (Lin et al. 2024)
#: stores one fp16 scale per 128 int4 weights (16/128 bit per weight); NVFP4 one FP8 (E4M3)
#: scale per 16 FP4 values (NVIDIA, "Introducing NVFP4", 2025). FP8, SmoothQuant INT8
#: (Xiao et al. 2023) and INT8 weight-only (W8A16: TensorRT-LLM ``int8_wo``, Transformers
#: NeuronX ``weight storage int8``, LLM.int8()-style per-channel absmax, Dettmers et al. 2022)
#: use per-tensor/per-channel scales, negligible per weight. MXFP4 (OCP Microscaling Formats
#: v1.0, 2023) one 8-bit E8M0 scale per 32 FP4 values.
PRECISIONS: dict[str, PrecisionSpec] = {
    "bf16": PrecisionSpec("bf16", 2.0, 2.0, "bf16", "bf16", ("bf16",), "bf16 weights, KV, math"),
    "fp16": PrecisionSpec("fp16", 2.0, 2.0, "fp16", "fp16", ("fp16",), "fp16 weights, KV, math"),
    "fp8": PrecisionSpec(
        "fp8", 1.0, 1.0, "fp8", "bf16", ("fp8",), "FP8 weights and KV cache, FP8 GEMMs"
    ),
    "int8": PrecisionSpec(
        "int8", 1.0, 1.0, "int8", "bf16", ("int8",), "W8A8 (SmoothQuant) with INT8 KV cache"
    ),
    "w8a16": PrecisionSpec(
        "w8a16",
        1.0,
        2.0,
        "bf16",
        "bf16",
        ("bf16",),
        "W8A16 weight-only (INT8 weights, per-channel scales): bf16 GEMMs, bf16 KV cache",
    ),
    "int4": PrecisionSpec(
        "int4",
        0.5 + 2.0 / 128,
        2.0,
        "bf16",
        "bf16",
        ("bf16",),
        "W4A16 weight-only (AWQ/GPTQ, group 128): bf16 GEMMs, bf16 KV cache",
    ),
    "fp4": PrecisionSpec(
        "fp4",
        0.5 + 1.0 / 16,
        1.0,
        "fp4",
        "bf16",
        ("fp4", "fp8"),
        "NVFP4 weights and activations, FP8 KV cache",
    ),
    "mxfp4": PrecisionSpec(
        "mxfp4",
        0.5 + 1.0 / 32,
        1.0,
        "fp4",
        "bf16",
        ("fp4", "fp8"),
        "MXFP4 weights and activations (one E8M0 scale per 32 values), FP8 KV cache",
    ),
}


def _math_in_fp16(spec: PrecisionSpec, gpu: Accelerator) -> PrecisionSpec:
    """``spec`` on ``gpu``: on a GPU without bf16 tensor cores but with fp16 ones (V100,
    T4) the 16-bit GEMMs and activations of a quantised precision run in fp16, as the
    engines cast there (vLLM's ``--dtype auto``; AWQ's and GPTQ's W4A16 kernels are fp16
    ones, Lin et al. 2024, Frantar et al. 2023). ``--precision bf16`` itself is not
    changed (it is refused there, naming fp16)."""
    if spec.name == "bf16" or dtype_peak(gpu, "bf16") or not dtype_peak(gpu, "fp16"):
        return spec
    if "bf16" not in (spec.gemm_dtype, spec.activation_dtype, *spec.requires):
        return spec

    def swap(d: str) -> str:
        return "fp16" if d == "bf16" else d

    return replace(
        spec,
        gemm_dtype=swap(spec.gemm_dtype),
        activation_dtype=swap(spec.activation_dtype),
        requires=tuple(swap(d) for d in spec.requires),
        description=f"{spec.description.replace('bf16', 'fp16')}; "
        "16-bit math in fp16 (no bf16 on this GPU)",
    )


#: torch's and the OCP names of the dtypes, for weights and KV cache alike
_DTYPE_SPELLINGS: dict[str, str] = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float8": "fp8",
    "e4m3": "fp8",
    "fp8-e4m3": "fp8",
}
#: Other spellings of the precisions, as published runs and checkpoint cards write them
#: (matched after lower-casing, with ``_`` read as ``-``): vLLM's ``--quantization`` and
#: ``--kv-cache-dtype`` values, TensorRT-LLM's ``--qformat``, the W/A notation.
PRECISION_SPELLINGS: dict[str, str] = {
    **_DTYPE_SPELLINGS,
    "fp8-dynamic": "fp8",
    "fp8-block": "fp8",
    "fp8-blockwise": "fp8",
    "w8a8-fp8": "fp8",
    "w8a8": "int8",
    "int8-sq": "int8",
    "smoothquant": "int8",
    "w8a8-int8": "int8",
    "int8-wo": "w8a16",
    "int8-weight-only": "w8a16",
    "w4a16": "int4",
    "awq": "int4",
    "gptq": "int4",
    "int4-awq": "int4",
    "int4-gptq": "int4",
    "int4-wo": "int4",
    "w4a16-awq": "int4",
    "gptq-int4": "int4",  # Qwen's checkpoint names: Qwen2.5-72B-Instruct-GPTQ-Int4
    "awq-int4": "int4",
    "gptq-int8": "w8a16",
    "nvfp4": "fp4",
    "w4a4-nvfp4": "fp4",
    # OCP Microscaling MXFP8 (E4M3 with one E8M0 scale per 32 values): FP8's byte width and
    # FP8 tensor-core rate (block-scaled MMA on Blackwell and CDNA4), the scales 1/32 more
    "mxfp8": "fp8",
}
#: ... and of the KV-cache dtypes (vLLM ``--kv-cache-dtype fp8_e4m3``)
KV_PRECISION_SPELLINGS: dict[str, str] = {**_DTYPE_SPELLINGS, "fp8-e5m2": "fp8"}


def plain_name(text: str) -> str:
    """``text`` lower-cased, without parenthesised notes and with single spaces: a note
    restates or qualifies the name ("FP4 (NVFP4)", "vLLM (ROCm) 0.9.2").

    >>> plain_name(" vLLM (ROCm)  0.9.2 ")
    'vllm 0.9.2'
    """
    return " ".join(re.sub(r"\([^)]*\)", " ", str(text)).split()).lower()


def canonical_precision(precision: str) -> str:
    """The ``--precision`` name of ``precision`` (:data:`PRECISION_SPELLINGS`); a name
    it does not know comes back lower-cased, for :func:`resolve_precision` to refuse.

    >>> canonical_precision("AWQ"), canonical_precision("fp8_dynamic"), canonical_precision("W8A16")
    ('int4', 'fp8', 'w8a16')
    >>> canonical_precision("FP4 (NVFP4)"), canonical_precision("GPTQ-Int4")
    ('fp4', 'int4')
    """
    key = plain_name(precision)  # "FP4 (NVFP4)", "FP8 (e4m3)": the note restates the format
    return PRECISION_SPELLINGS.get(key.replace("_", "-"), key)


#: ``--precision fp4`` means the vendor's FP4 format: NVFP4 on NVIDIA, MXFP4 (OCP
#: Microscaling Formats v1.0, the format of AMD CDNA4's FP4 tensor cores) elsewhere.
FP4_BY_VENDOR = {"nvidia": "fp4"}

KV_PRECISIONS: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0}


def dtype_peak(gpu: Accelerator, dtype: str) -> float | None:
    """The catalog's dense tensor-core peak of ``gpu`` for ``dtype`` (None: not supported)."""
    fn = getattr(gpu, "peak_flops_per_s", None)
    if fn is None:
        return None
    try:
        value = fn(dtype)
    except Exception:  # unknown dtype for this catalog version
        return None
    return None if value is None else float(value)


def _mxfp4_weight_only(spec: PrecisionSpec, gpu: Accelerator) -> PrecisionSpec | None:
    """An MXFP4 checkpoint on a GPU without FP4 tensor cores: its 4-bit weights (scales
    included) dequantised into 16-bit GEMMs, activations and KV cache 16-bit, as the
    engines serve gpt-oss on Hopper, Ampere and CDNA3 (vLLM's Marlin and Triton MXFP4 MoE
    kernels take bf16 activations; ``--kv-cache-dtype auto``). None where the GPU has no
    16-bit tensor cores either."""
    w4a16 = _math_in_fp16(PRECISIONS["int4"], gpu)
    if not all(dtype_peak(gpu, d) for d in w4a16.requires):
        return None
    gpu_name = getattr(gpu, "id", str(gpu))
    math_dtype = w4a16.gemm_dtype
    return replace(
        spec,
        kv_bytes=w4a16.kv_bytes,
        gemm_dtype=math_dtype,
        activation_dtype=w4a16.activation_dtype,
        requires=w4a16.requires,
        description=f"MXFP4 weights (one E8M0 scale per 32 values) dequantised into "
        f"{math_dtype} GEMMs, {math_dtype} KV cache: {gpu_name} has no FP4 tensor cores "
        "(W4A16, as vLLM serves gpt-oss there)",
    )


def resolve_precision(
    precision: str, gpu: Accelerator, kv_precision: str | None = None
) -> PrecisionSpec:
    """The :class:`PrecisionSpec` for ``precision`` on ``gpu``; refuses what the GPU lacks.

    The catalog's dense peak per dtype decides: an empty FP8 peak (A100) means no FP8 tensor
    cores, so ``--precision fp8`` is refused with the alternatives that do work. The one
    exception is a checkpoint format that runs without its math: ``--precision mxfp4`` (the
    format gpt-oss is released in) on a GPU without FP4 tensor cores is its weights in
    16-bit GEMMs (:func:`_mxfp4_weight_only`); ``fp4`` (the vendor's FP4 math) is refused
    there.
    """
    key = canonical_precision(precision)
    if key not in PRECISIONS:
        raise InputError(
            f"unknown precision {precision!r}",
            hint=f"use one of {', '.join(PRECISIONS)} (or a spelling such as awq, w4a16, "
            "w8a8, nvfp4, fp8_dynamic)",
        )
    if key == "fp4":
        vendor = str(getattr(gpu, "vendor", "nvidia") or "nvidia").lower()
        key = FP4_BY_VENDOR.get(vendor, "mxfp4")
    spec = _math_in_fp16(PRECISIONS[key], gpu)
    gpu_name = getattr(gpu, "id", str(gpu))
    ok = [
        p
        for p in PRECISIONS.values()
        if all(dtype_peak(gpu, d) for d in _math_in_fp16(p, gpu).requires)
    ]
    missing = [d for d in spec.requires if not dtype_peak(gpu, d)]
    if missing and canonical_precision(precision) == "mxfp4":  # asked for, not fp4 on AMD
        weight_only = _mxfp4_weight_only(spec, gpu)
        if weight_only is not None:
            spec, missing = weight_only, []
    if missing:
        hint = f"use --precision {' or '.join(p.name for p in ok) or 'bf16'} on this GPU"
        if spec.gemm_dtype == "fp4" and any(p.name == "int4" for p in ok):
            # an FP4 checkpoint (gpt-oss's MXFP4) on a GPU without FP4 math runs as 4-bit
            # weights dequantised into 16-bit GEMMs, which is what int4 (W4A16) models
            hint += (
                "; a 4-bit checkpoint runs here as 4-bit weights with 16-bit math: "
                "--precision mxfp4 for an MXFP4 one (gpt-oss), int4 for another"
            )
        raise InputError(
            f"{gpu_name} has no {'/'.join(missing).upper()} tensor-core rate in the catalog, "
            f"so --precision {key} cannot run on it",
            hint=hint,
        )
    if kv_precision is not None:
        kv = str(kv_precision).strip().lower()
        kv = KV_PRECISION_SPELLINGS.get(kv.replace("_", "-"), kv)
        if kv not in KV_PRECISIONS:
            raise InputError(
                f"unknown KV-cache precision {kv_precision!r}",
                hint=f"use one of {', '.join(KV_PRECISIONS)}",
            )
        if kv == "fp8" and not dtype_peak(gpu, "fp8"):
            raise InputError(
                f"{gpu_name} has no FP8 support in the catalog, so an FP8 KV cache cannot run",
                hint="use --kv-precision int8 or bf16",
            )
        spec = PrecisionSpec(
            spec.name,
            spec.weight_bytes,
            KV_PRECISIONS[kv],
            spec.gemm_dtype,
            spec.activation_dtype,
            spec.requires,
            f"{spec.description}; KV cache {kv}",
        )
    return spec


# ---------------------------------------------------------------------------------------------
# Layout and sharding
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """Parallel layout of one serving replica (``tp x pp x dp`` GPUs; ``dp`` > 1 is wide
    EP with data-parallel attention, see the module docstring)."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


def check_serving_layout(arch: ModelArch, layout: Layout) -> None:
    """Raise :class:`InputError` for a serving layout the model cannot be split into.

    The serving replica's rules (TP divides the heads, EP inside the TP group, wide EP with
    data-parallel attention); a training layout is checked by the rules of
    :mod:`gpuplan.forecast.layout_rules`, written once for the scalar and the grid search."""
    tp, pp, ep = layout.tp, layout.pp, layout.ep
    for name, v in (("tp", tp), ("pp", pp), ("ep", ep)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"--{name} must be a positive integer, got {v!r}")
    if arch.heads % tp:
        raise InputError(
            f"--tp {tp} does not divide the {arch.heads} attention heads of {arch.name}",
            hint=f"use a tp among {', '.join(str(d) for d in divisors(arch.heads) if d <= 64)}",
        )
    if pp > arch.layers:
        raise InputError(
            f"--pp {pp} is more than the {arch.layers} layers of {arch.name}",
            hint=f"use --pp {arch.layers} or less",
        )
    if layout.dp > 1:
        dp = layout.dp
        if not arch.is_moe or tp != 1 or pp != 1 or ep != dp:
            raise InputError(
                f"wide expert parallelism over {dp} GPUs needs a mixture-of-experts model, "
                f"TP 1 and PP 1 per attention rank and --ep {dp} ({arch.name}: "
                f"{arch.num_experts} experts)",
                hint="use --ep N alone (attention data-parallel over the N GPUs)",
            )
        return
    if ep > 1:
        if not arch.is_moe:
            raise InputError(
                f"--ep {ep} needs a mixture-of-experts model; {arch.name} is dense",
                hint="drop --ep",
            )
        if tp % ep or arch.num_experts % ep:
            raise InputError(
                f"--ep {ep} must divide both --tp {tp} and the {arch.num_experts} experts "
                "(expert parallelism runs inside the TP group: moe_tp x moe_ep = tp)",
                hint=f"use --tp {ep * max(1, tp // ep)} or an --ep dividing {tp}",
            )


def expert_slots(arch: ModelArch, layout: Layout) -> tuple[int, int]:
    """``(expert slots per GPU, physical experts of the replica)`` of a MoE layer.

    Inside a TP group ``ep`` divides the experts: ``experts / ep`` each. Wide EP over ``ep``
    ranks that do not divide them holds ``ceil(experts / ep)`` per rank, the spare slots
    redundant copies of busy experts (DeepSeek-V3 technical report, section 3.4.1; EPLB),
    so ``ep * ceil(experts / ep)`` physical experts in all.

    >>> from gpuplan.forecast.model import arch_from
    >>> expert_slots(arch_from({"name": "m", "layers": 2, "hidden": 64, "heads": 4,
    ...     "ffn_hidden": 128, "vocab": 100, "num_experts": 256, "top_k": 8}), Layout(1, 1, 48, 48))
    (6, 288)
    """
    e, ep = arch.num_experts, max(layout.ep, 1)
    if e <= 0:
        return 0, 0
    slots = -(-e // ep)
    return slots, (slots * ep if layout.dp > 1 else e)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def expected_distinct_experts(num_experts: int, top_k: int, tokens: Num) -> FloatArray:
    """Expected number of distinct experts that ``tokens`` tokens route to.

    With uniform routing each token picks ``top_k`` of ``E`` experts, so an expert is missed by
    one token with probability ``1 - k/E`` and by all of them with ``(1 - k/E)**tokens``:
    ``E * (1 - (1 - k/E)**tokens)`` (occupancy problem; as used for MoE decode in e.g.
    the DeepSpeed-MoE inference analysis, Rajbhandari et al. 2022, Sec. 5).

    >>> round(float(expected_distinct_experts(8, 2, 1)), 6)
    2.0
    >>> round(float(expected_distinct_experts(8, 2, 1000)), 6)
    8.0
    """
    t = np.asarray(tokens, dtype=np.float64)
    if num_experts <= 0:
        return np.zeros_like(t)
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** t)


@dataclass(frozen=True)
class Gemms:
    """The GEMMs of one forward pass on one GPU of the average pipeline stage.

    Arrays of one length: ``m`` (rows = tokens), ``n``, ``k``, ``count`` (how many such
    GEMMs per pass, fractional for expected expert counts) and ``weight_bytes_per_elem``.
    ``names`` labels each entry for breakdowns.
    """

    names: tuple[str, ...]
    m: FloatArray
    n: FloatArray
    k: FloatArray
    count: FloatArray
    weight_bytes_per_elem: FloatArray
    quantised: BoolArray  # bool: runs at the precision's GEMM dtype (else activation dtype)


@dataclass(frozen=True)
class Sharded:
    """A model split over a layout at a precision: the per-GPU quantities the step model uses."""

    arch: ModelArch
    layout: Layout
    precision: PrecisionSpec
    # per GPU, average stage
    layers_per_stage: float
    dense_layers_per_stage: float
    moe_layers_per_stage: float
    q_heads_per_gpu: int
    kv_heads_per_gpu: int
    weight_bytes_per_gpu: float
    weight_breakdown_bytes: dict[str, float] = field(default_factory=dict)
    attention_layers_per_stage: float | None = None
    """Blocks with attention on the average stage (None: every layer; a hybrid model's
    attention blocks)."""
    mamba_layers_per_stage: float = 0.0
    """Mamba-2 blocks on the average stage (hybrid models)."""

    @property
    def overhead_layers(self) -> float:
        """Transformer-layer equivalents on the stage for the per-layer launch overhead: a
        hybrid model's block (a norm and one mixer or MLP, about five kernels) is half of a
        transformer layer (attention and MLP, about ten)."""
        if self.arch.is_hybrid:
            return self.layers_per_stage * self.arch.blocks_per_layer / 2.0
        return self.layers_per_stage

    @property
    def attn_layers(self) -> float:
        """Attention blocks on the average stage."""
        if self.attention_layers_per_stage is None:
            return self.layers_per_stage
        return self.attention_layers_per_stage

    # ---- KV cache ---------------------------------------------------------------------
    def kv_bytes_per_token_per_layer_per_gpu(self) -> float:
        """KV bytes one token adds to one layer on one GPU (MLA: the latent, replicated)."""
        kv = kv_cache_bytes_per_token(
            self.arch, self.precision.kv_bytes, kv_layers=1, kv_heads=self.kv_heads_per_gpu
        )
        return kv / self.layout.dp

    def kv_bytes_per_token_per_gpu(self) -> float:
        """KV bytes one more token of a sequence adds on the largest stage: every attention
        layer, or with :attr:`kv_window` only the full-attention ones (a sliding-window layer
        holds a fixed window per sequence, :meth:`window_kv_bytes_per_seq_gpu`)."""
        layers = self.arch.num_attention_blocks
        if self.kv_window is not None:
            layers -= self.arch.num_local_attention_layers
        per_layer = self.kv_bytes_per_token_per_layer_per_gpu()
        if self.arch.dsa is not None:
            per_layer += self.index_bytes_per_token_per_layer_per_gpu()
        return per_layer * math.ceil(layers / self.layout.pp)

    def index_bytes_per_token_per_layer_per_gpu(self) -> float:
        """A DSA indexer's cached key of one token in one layer on one GPU: ``index_head_dim``
        FP8 values and one fp32 scale per 128 of them (reference ``Indexer.k_cache`` and
        ``k_scale_cache``), kept on every TP rank like MLA's latent; 0 without DSA."""
        d = self.arch.dsa
        if d is None:
            return 0.0
        return (d.indexer_head_dim + 4.0 * math.ceil(d.indexer_head_dim / 128)) / self.layout.dp

    def index_bytes_per_ctx_token_stage(self) -> float:
        """Indexer key bytes a decode query reads per cached token, whole stage (it scores
        every cached token); 0 without DSA."""
        return self.index_bytes_per_token_per_layer_per_gpu() * self.attn_layers

    def index_flops_per_ctx_token(self) -> float:
        """Indexer FLOPs per cached token of one query, whole stage: ``2 * heads * head_dim``
        per layer (QK scores only), every head on every TP rank; 0 without DSA."""
        d = self.arch.dsa
        if d is None:
            return 0.0
        return 2.0 * d.indexer_heads * d.indexer_head_dim * self.attn_layers / self.layout.dp

    def decode_kv_read_bytes(self, batch: float, ctx: float, spread: float = 0.0) -> float:
        """KV bytes ``batch`` decode queries of ``ctx`` cached tokens each read, whole stage:
        the attended context's KV (:meth:`attended_ctx`, contexts ``ctx +- spread``) and,
        with DSA, every cached token's indexer key."""
        attended = float(self.attended_ctx(ctx, spread))
        out = batch * attended * self.kv_bytes_per_ctx_token_stage()
        if self.arch.dsa is not None:
            out += batch * ctx * self.index_bytes_per_ctx_token_stage()
        return out

    def decode_attention_flops(self, batch: float, ctx: float, spread: float = 0.0) -> float:
        """Attention FLOPs of ``batch`` decode queries of ``ctx`` cached tokens each, whole
        stage, over the attended context (:meth:`attended_ctx`; a DSA indexer's scores are
        :meth:`index_flops_per_ctx_token`, at their own rate)."""
        attended = float(self.attended_ctx(ctx, spread))
        return batch * attended * self.attention_flops_decode_per_ctx_token()

    def window_kv_bytes_per_seq_gpu(self, tokens: Num | None = None) -> Num:
        """KV bytes the sliding-window layers of the largest stage hold for one sequence of
        ``tokens`` tokens (default: the whole window, what an engine keeps for a sequence
        longer than it); 0 without :attr:`kv_window`."""
        w = self.kv_window
        if w is None:
            return 0.0
        held = w if tokens is None else np.minimum(np.asarray(tokens, dtype=float), w)
        return self.window_kv_bytes_per_token_gpu() * held

    def window_kv_bytes_per_token_gpu(self) -> float:
        """KV bytes one token adds to the local layers of the largest stage while it is in
        their window (or chunk); 0 without :attr:`kv_window`."""
        if self.kv_window is None:
            return 0.0
        local = math.ceil(self.arch.num_local_attention_layers / self.layout.pp)
        return self.kv_bytes_per_token_per_layer_per_gpu() * local

    def kv_bytes_per_seq_gpu(self, tokens: Num) -> Num:
        """KV bytes of one sequence of ``tokens`` tokens on the largest stage (what a
        disaggregated prefill hands to its decode pool)."""
        return np.asarray(tokens, dtype=float) * self.kv_bytes_per_token_per_gpu() + (
            self.window_kv_bytes_per_seq_gpu(tokens)
        )

    def model_kv_bytes_per_token(self) -> float:
        """KV bytes one more token of a sequence adds to the whole model (all GPUs): every
        attention layer, or with :attr:`kv_window` the full-attention ones (DSA: and its
        indexer keys)."""
        layers = None
        if self.kv_window is not None:
            layers = self.arch.num_attention_blocks - self.arch.num_local_attention_layers
        kv = kv_cache_bytes_per_token(self.arch, self.precision.kv_bytes, kv_layers=layers)
        if self.arch.dsa is not None:
            kv += self.index_bytes_per_token_per_layer_per_gpu() * self.layout.dp * self.arch.layers
        return kv

    def model_window_kv_bytes_per_seq(self) -> float:
        """KV bytes the sliding-window layers hold for one sequence at the full window, whole
        model; 0 without :attr:`kv_window`."""
        if self.kv_window is None:
            return 0.0
        local = self.arch.num_local_attention_layers
        kv = kv_cache_bytes_per_token(self.arch, self.precision.kv_bytes, kv_layers=local)
        return kv * self.kv_window

    # ---- sliding-window attention -------------------------------------------------------
    @property
    def window(self) -> float | None:
        """Keys a query of a windowed layer reads at most: a DSA model's ``topk`` (every
        layer; its KV is kept whole, the indexer scores all of it), or the sliding window
        (:attr:`kv_window` without :attr:`chunk`); None otherwise."""
        if self.arch.dsa is not None:
            return float(self.arch.dsa.topk)
        return None if self.chunk is not None else self.kv_window

    @property
    def chunk(self) -> float | None:
        """Llama 4's chunked local attention: the chunk a local layer's query attends within
        (keys ``i mod C`` of its block), when the model has full-attention layers too."""
        if self.arch.attention_chunk is None or not self._has_local_and_full:
            return None
        return float(self.arch.attention_chunk)

    @property
    def _has_local_and_full(self) -> bool:
        a = self.arch
        local = a.num_local_attention_layers
        return not a.is_hybrid and 0 < local < a.layers

    @property
    def kv_window(self) -> float | None:
        """Tokens of KV a local layer keeps per sequence: its sliding window (Gemma 2/3,
        gpt-oss) or its chunk (Llama 4), when the model has full-attention layers too; None
        otherwise (a model whose every layer is local, or a hybrid, is priced at full
        attention).

        Serving engines keep only that much KV for those layers (vLLM's hybrid KV cache
        manager, docs/design/hybrid_kv_cache_manager.md, with its sliding-window and
        chunked-local specs; SGLang's SWA memory pool; TensorRT-LLM's variable
        sliding-window attention) and their attention kernels read no more
        (FlashAttention's ``window_size``)."""
        a = self.arch
        size = a.sliding_window if a.sliding_window is not None else a.attention_chunk
        if size is None or not self._has_local_and_full:
            return None
        return float(size)

    @property
    def local_attention_fraction(self) -> float:
        """The attention layers that attend locally (gpt-oss: 1/2; Gemma 3: 5/6; Llama 4:
        3/4; DSA: all)."""
        if self.window is None and self.chunk is None:
            return 0.0
        if self.arch.dsa is not None:
            return 1.0
        return self.arch.num_local_attention_layers / self.arch.layers

    def attended_ctx(self, ctx: Num, spread: Num = 0.0) -> Num:
        """Cached tokens one decode query reads, averaged over the attention layers: ``ctx``
        in a full-attention layer, ``min(ctx, w)`` in a sliding-window one (Beltagy et al.
        2020, "Longformer", section 3.1) and ``ctx mod C`` in a chunked one, averaged over
        contexts spread evenly over ``ctx +- spread`` (the decode of a request of ``O``
        tokens: ``spread = O / 2``) as ``(P(ctx + spread) - P(ctx - spread)) / 2 spread``
        with ``P`` = :func:`~gpuplan.forecast.model.chunked_pairs`, whose slope is
        ``x mod C``."""
        w, ch = self.window, self.chunk
        if w is None and ch is None:
            return ctx
        f = self.local_attention_fraction
        c = np.asarray(ctx, dtype=float)
        if ch is not None:
            d = np.asarray(spread, dtype=float)
            lo = np.maximum(c - d, 0.0)
            hi = c + d
            width = np.maximum(hi - lo, 1e-12)
            spread_avg = (chunked_pairs(hi, ch) - chunked_pairs(lo, ch)) / width
            local = np.where(hi - lo > 0.5, spread_avg, np.where(c <= ch, c, np.mod(c, ch)))
        else:
            local = np.minimum(c, float(w or 0.0))
        out: FloatArray = (1.0 - f) * c + f * local
        return out

    def local_pairs(self, x: Num) -> FloatArray:
        """Causal query-key pairs of the first ``x`` positions of a local layer: a window
        ``P(x) = x**2 / 2`` up to ``w`` and ``w**2 / 2 + w * (x - w)`` beyond; a chunk
        :func:`~gpuplan.forecast.model.chunked_pairs`; a full layer ``x**2 / 2``."""
        v = np.asarray(x, dtype=np.float64)
        if self.chunk is not None:
            return chunked_pairs(v, self.chunk)
        w = self.window
        if w is None:
            out: FloatArray = v * v / 2.0
            return out
        return window_pairs(v, w)

    def causal_pairs(self, seq_len: Num, prefix: Num = 0) -> FloatArray:
        """Query-key pairs of a causal prefill chunk of ``s`` tokens after ``c`` cached ones,
        averaged over the attention layers: ``s * c + s**2 / 2`` in a full-attention layer,
        ``P(c + s) - P(c)`` in a local one (:meth:`local_pairs`: each position ``i`` sees
        ``min(i, w)`` keys of a window, ``i mod C`` of a chunk).

        >>> from gpuplan.forecast.model import ModelArch
        >>> from gpuplan.forecast.inference_arch import PRECISIONS, Layout, shard
        >>> a = ModelArch(layers=2, hidden=64, heads=4, ffn_hidden=256, vocab=10,
        ...               sliding_window=128, full_attention_interval=2)
        >>> sh = shard(a, Layout(), PRECISIONS["bf16"])
        >>> float(sh.causal_pairs(1024)), float(sh.causal_pairs(64))
        (323584.0, 2048.0)
        """
        s = np.asarray(seq_len, dtype=np.float64)
        c = np.asarray(prefix, dtype=np.float64)
        full: FloatArray = s * c + s * s / 2.0
        if self.window is None and self.chunk is None:
            return full
        f = self.local_attention_fraction
        return (1.0 - f) * full + f * (self.local_pairs(c + s) - self.local_pairs(c))

    def state_bytes_per_seq_stage(self) -> float:
        """Recurrent state one sequence keeps on one GPU, whole stage: a Mamba-2 block's
        SSM state (``H x P x N``, fp32 as mamba_ssm keeps it and Nemotron 3's config asks,
        ``mamba_ssm_cache_dtype: float32``) and its convolution window (``(K-1)`` columns
        of x, B and C at the activation dtype), Dao & Gu 2024, section 7. A decode step
        reads and writes it once per sequence; 0 for a transformer."""
        if not self.mamba_layers_per_stage:
            return 0.0
        heads, p, n, _, conv_k = self.arch.mamba_dims()
        tp = self.layout.tp
        ssm = heads * p * n / tp * 4.0
        channels = self.arch.mamba_widths()[1]
        conv = (conv_k - 1) * channels / tp * self.precision.activation_bytes
        return (ssm + conv) * self.mamba_layers_per_stage / self.layout.dp

    def state_traffic_bytes_per_seq_stage(self) -> float:
        """What one decode step moves of a sequence's recurrent state: read and written."""
        return 2.0 * self.state_bytes_per_seq_stage()

    def state_bytes_per_seq_gpu(self) -> float:
        """:meth:`state_bytes_per_seq_stage` on the largest stage (the memory a sequence
        holds besides its KV cache)."""
        if not self.mamba_layers_per_stage:
            return 0.0
        per_layer = self.state_bytes_per_seq_stage() / self.mamba_layers_per_stage
        return per_layer * math.ceil(self.arch.mamba_layers / self.layout.pp)

    # ---- GEMMs ------------------------------------------------------------------------
    def gemms(self, tokens: float, logit_rows: float) -> Gemms:
        """GEMMs of one forward pass over ``tokens`` tokens, ``logit_rows`` of which need logits."""
        a, lay, p = self.arch, self.layout, self.precision
        tp, ep = lay.tp, lay.ep
        h = a.hidden
        wb = p.weight_bytes
        ab = p.activation_bytes
        rows: list[tuple[str, float, float, float, float, float]] = []
        ld, lm = self.dense_layers_per_stage, self.moe_layers_per_stage
        layers = self.attn_layers
        qh, kvh = self.q_heads_per_gpu, self.kv_heads_per_gpu
        # the replica's tokens; with data-parallel attention each rank runs 1/dp of them
        # through everything but the experts (which see every rank's tokens)
        all_tokens = tokens
        tokens = tokens / lay.dp
        logit_rows = logit_rows / lay.dp
        # attention projections
        if a.mla is None:
            gate = qh if a.attention_output_gate else 0  # gated attention's output gate
            rows.append(("qkv", tokens, (qh + gate + 2 * kvh) * a.d_head, h, layers, wb))
            rows.append(("attn_out", tokens, h, qh * a.d_head, layers, wb))
        else:
            m = a.mla
            q_lora, kv_lora = m.q_lora_rank or 0, m.kv_lora_rank
            nope, rope, vd = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
            if q_lora:
                rows.append(("q_down", tokens, q_lora, h, layers, wb))
                rows.append(("q_up", tokens, qh * (nope + rope), q_lora, layers, wb))
            else:
                rows.append(("q", tokens, qh * (nope + rope), h, layers, wb))
            rows.append(("kv_down", tokens, kv_lora + rope, h, layers, wb))
            rows.append(("kv_up", tokens, qh * (nope + vd), kv_lora, layers, wb))
            rows.append(("attn_out", tokens, h, qh * vd, layers, wb))
            if a.dsa is not None:  # the lightning indexer, replicated on every TP rank
                n_i, d_i = a.dsa.indexer_heads, a.dsa.indexer_head_dim
                rows.append(("index_q", tokens, n_i * d_i, q_lora or h, layers, wb))
                rows.append(("index_kw", tokens, d_i + n_i, h, layers, wb))
        up = 2 if a.gated_mlp else 1
        if ld:
            f = a.ffn_hidden / tp
            rows.append(("mlp_up", tokens, up * f, h, ld, wb))
            rows.append(("mlp_down", tokens, h, f, ld, wb))
        if lm:
            e_tp = tp * lay.dp / ep  # each expert sharded this many ways
            fe = a.expert_ffn / e_tp
            # the tokens spread over the physical experts (copies of busy ones included)
            physical = expert_slots(a, lay)[1]
            distinct = float(expected_distinct_experts(physical, a.top_k, all_tokens))
            per_expert = all_tokens * a.top_k / max(distinct, 1e-12)
            local = distinct / ep
            rows.append(("router", tokens, a.num_experts, h, lm, ab))
            rows.append(("expert_up", per_expert, up * fe, h, lm * local, wb))
            rows.append(("expert_down", per_expert, h, fe, lm * local, wb))
            if a.num_shared_experts:
                fs = a.num_shared_experts * a.shared_expert_ffn / tp
                rows.append(("shared_up", tokens, up * fs, h, lm, wb))
                rows.append(("shared_down", tokens, h, fs, lm, wb))
        if self.mamba_layers_per_stage:
            # Mamba-2 in_proj (z, x, B, C, dt) split by columns, out_proj by rows
            in_width, _, d_in = a.mamba_widths()
            lmb = self.mamba_layers_per_stage
            rows.append(("mamba_in", tokens, in_width / tp, h, lmb, wb))
            rows.append(("mamba_out", tokens, h, d_in / tp, lmb, wb))
        # LM head on the last stage only: 1/pp of it on the average stage
        rows.append(("lm_head", logit_rows, a.vocab / tp, h, 1.0 / lay.pp, ab))
        names = tuple(r[0] for r in rows)
        arr = np.array([r[1:] for r in rows], dtype=np.float64)
        quantised = np.array([n not in ("router", "lm_head") for n in names])
        return Gemms(names, arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4], quantised)

    # ---- element-wise traffic -----------------------------------------------------------
    def elementwise_bytes_per_token(self) -> float:
        """Bytes read + written per token by the unfused element-wise kernels of the stage.

        Counted per layer: ``norms_per_layer`` norms (read + write ``h``), two residual adds
        (read 2h, write h), the MLP activation (gated: read 2f, write f; else read f, write
        f) and RoPE on q and k (read + write) -- the non-GEMM traffic the Megatron analysis
        (Korthikanti et al. 2022, Sec. 4) lists as activations.
        """
        a, p = self.arch, self.precision
        tp = self.layout.tp
        h = a.hidden
        ab = p.activation_bytes
        rope = 2 * (self.q_heads_per_gpu + self.kv_heads_per_gpu) * a.qk_head_dim
        dense_f = a.ffn_hidden / tp
        moe_f = (a.top_k * a.expert_ffn + a.num_shared_experts * a.shared_expert_ffn) / tp
        act = 3 if a.gated_mlp else 2
        if a.is_hybrid:
            # one block per layer (a norm and a residual add), RoPE in the attention blocks,
            # and the Mamba-2 passes: conv + SiLU over x, B, C (read + write), gate and
            # gated norm over the scan output (3 reads, 2 writes), as the training model;
            # in elements (the total is taken at the activation bytes below)
            mamba = a.mamba_elementwise_elements_per_token() / tp
            per_block = 2 * h + 3 * h
            blocks = self.layers_per_stage * per_block + self.attn_layers * rope
            blocks += self.mamba_layers_per_stage * mamba
        else:
            blocks = self.layers_per_stage * (2 * 2 * h + 2 * 3 * h + rope)
        total = (
            blocks
            + self.dense_layers_per_stage * act * dense_f
            + self.moe_layers_per_stage * act * moe_f
        )
        return total * ab / self.layout.dp

    # ---- attention ----------------------------------------------------------------------
    def attention_flops_prefill(self, seq_len: Num, prefix: Num = 0) -> FloatArray:
        """Attention FLOPs of one sequence's prefill chunk on one GPU, whole stage.

        ``2 * heads * (d_qk + d_v) * (s * c + s**2 / 2)`` for a chunk of ``s`` tokens after
        ``c`` cached ones: QK^T and PV each cost ``2 * s * ctx * d`` per head, and causal
        masking halves the square part (FlashAttention, Dao et al. 2022, Sec. 3 counts);
        sliding-window layers count their window (:meth:`causal_pairs`), a DSA model its
        ``topk`` (its indexer: :meth:`index_flops_prefill`).
        """
        s = np.asarray(seq_len, dtype=np.float64)
        c = np.asarray(prefix, dtype=np.float64)
        a = self.arch
        dsum = a.qk_head_dim + a.v_head_dim
        out: FloatArray = (
            2.0
            * self.q_heads_per_gpu
            * dsum
            * self.causal_pairs(s, c)
            * self.attn_layers
            / self.layout.dp
        )
        return out

    def index_flops_prefill(self, seq_len: Num, prefix: Num = 0) -> FloatArray:
        """A DSA indexer's score FLOPs over a prefill chunk, whole stage: every causal pair
        (``s * c + s**2 / 2``) at :meth:`index_flops_per_ctx_token`; 0 without DSA."""
        s = np.asarray(seq_len, dtype=np.float64)
        c = np.asarray(prefix, dtype=np.float64)
        out: FloatArray = self.index_flops_per_ctx_token() * (s * c + s * s / 2.0)
        return out

    def attention_flops_decode_per_ctx_token(self) -> float:
        """Decode attention FLOPs per cached token of one sequence on one GPU, whole stage.

        ``2 * heads * (d_qk + d_v)`` per cached token and layer; with MLA the absorbed form
        attends over the latent: ``d_qk = kv_lora + rope`` and ``d_v = kv_lora`` (DeepSeek-V2,
        Appendix C).
        """
        a = self.arch
        if a.mla is not None:
            dsum = (a.mla.kv_lora_rank + a.mla.qk_rope_head_dim) + a.mla.kv_lora_rank
        else:
            dsum = a.qk_head_dim + a.v_head_dim
        return 2.0 * self.q_heads_per_gpu * dsum * self.attn_layers / self.layout.dp

    def activation_bytes_peak(self, tokens: Num, logit_rows: Num) -> FloatArray:
        """Peak activation memory of one forward pass over ``tokens`` tokens on one GPU.

        Inference keeps no activations between layers, so the peak is one layer's working
        set: the residual stream, the normalised input and the layer output (3h) plus the
        widest intermediate (the QKV + attention output, or the MLP up-projection and its
        activation), and the fp32 logits of the ``logit_rows`` rows that need them.
        """
        a, p = self.arch, self.precision
        tp = self.layout.tp
        attn_w = (self.q_heads_per_gpu * 2 + 2 * self.kv_heads_per_gpu) * a.qk_head_dim
        up = 3 if a.gated_mlp else 2
        mlp_w = up * max(a.ffn_hidden, a.top_k * a.expert_ffn) / tp
        per_token = (3 * a.hidden + max(attn_w, mlp_w)) * p.activation_bytes
        t = np.asarray(tokens, dtype=np.float64) / self.layout.dp
        rows = np.asarray(logit_rows, dtype=np.float64) / self.layout.dp
        return t * per_token + rows * a.vocab / tp * 4.0

    @property
    def kv_group(self) -> float:
        """Query heads per KV head on one GPU (1 for MHA and for MLA's shared latent, whose
        decode kernels are built to reuse it)."""
        if self.arch.mla is not None:
            return 1.0
        return self.q_heads_per_gpu / max(self.kv_heads_per_gpu, 1)

    def kv_bytes_per_ctx_token_stage(self) -> float:
        """KV bytes read per cached token of one sequence in one decode step, whole stage."""
        return self.kv_bytes_per_token_per_layer_per_gpu() * self.attn_layers

    # ---- communication volumes ----------------------------------------------------------
    def tp_allreduces_per_pass(self) -> float:
        """All-reduces of ``tokens x hidden`` activations per pass on the stage (Megatron: one
        after attention and one after the MLP; one per layer with parallel attention+MLP)."""
        if self.layout.tp == 1:
            return 0.0
        if self.arch.is_hybrid:  # one row-parallel output per block; MoE blocks: all-to-all
            moe = self.moe_layers_per_stage if self.layout.ep > 1 else 0.0
            return self.layers_per_stage - moe
        per_layer = 1.0 if self.arch.parallel_attention else 2.0
        if self.layout.ep > 1:
            # MoE layers exchange tokens by all-to-all instead of reducing the MLP output
            # (see :func:`gpuplan.forecast.inference_step.pass_parts`)
            return per_layer * self.dense_layers_per_stage + 1.0 * self.moe_layers_per_stage
        return per_layer * self.layers_per_stage


def shard(arch: ModelArch, layout: Layout, precision: PrecisionSpec) -> Sharded:
    """Split ``arch`` over ``layout`` at ``precision`` (after :func:`check_serving_layout`)."""
    check_serving_layout(arch, layout)
    tp, pp = layout.tp, layout.pp
    h = arch.hidden
    wb = precision.weight_bytes
    ab = precision.activation_bytes
    qh = arch.heads // tp
    kvh = max(1, math.ceil(arch.n_kv_heads / tp))
    layers_stage = arch.layers / pp
    ld = arch.num_dense_mlp_blocks / pp
    lm = arch.num_moe_layers / pp
    # attention weights per GPU and layer
    if arch.mla is None:
        gate = qh if arch.attention_output_gate else 0  # gated attention's output gate
        attn = (qh + gate + 2 * kvh) * arch.d_head * h + qh * arch.d_head * h
    else:
        m = arch.mla
        q_lora, kv_lora = m.q_lora_rank or 0, m.kv_lora_rank
        nope, rope, vd = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
        q = (h * q_lora + q_lora * qh * (nope + rope)) if q_lora else h * qh * (nope + rope)
        attn = q + h * (kv_lora + rope) + kv_lora * qh * (nope + vd) + qh * vd * h
        if arch.dsa is not None:  # the indexer, replicated (reference Indexer: plain Linear)
            n_i, d_i = arch.dsa.indexer_heads, arch.dsa.indexer_head_dim
            attn += (q_lora or h) * n_i * d_i + h * (d_i + n_i)
    up = 3 if arch.gated_mlp else 2
    dense_mlp = up * h * arch.ffn_hidden / tp
    moe_mlp = 0.0
    if arch.is_moe:
        # expert slots per GPU, each expert sharded tp * dp / ep ways
        slots = expert_slots(arch, layout)[0]
        moe_mlp = slots * layout.ep * up * h * arch.expert_ffn / (tp * layout.dp)
        moe_mlp += arch.num_shared_experts * up * h * arch.shared_expert_ffn / tp
    # slowest (largest) stage for memory: ceil of the layers
    frac = math.ceil(arch.layers / pp) / arch.layers
    attn_bytes = attn * arch.num_attention_blocks * frac * wb
    mlp_bytes = (dense_mlp * arch.num_dense_mlp_blocks + moe_mlp * arch.num_moe_layers) * frac * wb
    mamba_bytes = (
        (arch.mamba_params() / tp * arch.mamba_layers * frac * wb) if arch.mamba_layers else 0.0
    )
    router_bytes = (h * arch.num_experts * arch.num_moe_layers * frac * ab) if arch.is_moe else 0.0
    embed = arch.vocab * h / tp * ab
    head = 0.0 if arch.tied_embeddings else arch.vocab * h / tp * ab
    emb_bytes = embed + head if pp == 1 else max(embed, head if head else embed)
    breakdown = {
        "attention": attn_bytes,
        "mlp": mlp_bytes + router_bytes,
        "embeddings": emb_bytes,
    }
    if mamba_bytes:
        breakdown["mamba"] = mamba_bytes
    return Sharded(
        arch=arch,
        layout=layout,
        precision=precision,
        layers_per_stage=layers_stage,
        dense_layers_per_stage=ld,
        moe_layers_per_stage=lm,
        q_heads_per_gpu=qh,
        kv_heads_per_gpu=kvh,
        weight_bytes_per_gpu=sum(breakdown.values()),
        weight_breakdown_bytes=breakdown,
        attention_layers_per_stage=arch.num_attention_blocks / pp if arch.is_hybrid else None,
        mamba_layers_per_stage=arch.mamba_layers / pp,
    )


# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------
#: the share of a GPU's memory an engine plans with when given none (vLLM
#: ``gpu_memory_utilization`` and TensorRT-LLM ``free_gpu_memory_fraction`` default to 0.9:
#: https://docs.vllm.ai/en/latest/serving/engine_args.html, llm_args.py ``KvCacheConfig``);
#: the rest is CUDA context, allocator fragmentation and library workspaces
DEFAULT_MEMORY_FRACTION = 0.9
#: what an engine's memory fraction is a share of (:class:`MemoryShare`)
MemoryFractionOf: TypeAlias = Literal["total", "free", "static"]

#: SGLang 0.5's default ``--mem-fraction-static`` (:func:`sglang_static_fraction`), from
#: sgl-project/sglang python/sglang/srt/server_args.py (``ServerArgs``: "reserved_mem" in
#: MiB, "mem_fraction_static = (GPU memory capacity - reserved_mem) / GPU memory
#: capacity"): a constant 512 MiB; 1.5 MiB per token of the larger of the prefill chunk and
#: 2048 ("for activation during large prefill"); 2 MiB per CUDA-graph batch size; 1 GiB per 8
#: GPUs of TP x PP; at least 10 GiB on a GPU of more than 60 GiB.
SGLANG_RESERVED_BASE_MIB = 512.0
SGLANG_RESERVED_MIB_PER_CHUNK_TOKEN = 1.5
SGLANG_RESERVED_MIN_CHUNK_TOKENS = 2048
SGLANG_RESERVED_MIB_PER_GRAPH_BATCH = 2.0
SGLANG_RESERVED_MIB_PER_RANK = 1024.0 / 8
SGLANG_RESERVED_FLOOR_MIB = 10 * 1024.0
SGLANG_RESERVED_FLOOR_ABOVE_MIB = 60 * 1024.0
#: its ``cuda_graph_max_bs`` by device memory, (below MiB, (TP < 4, TP >= 4)) in order, and
#: above the last (same file: "T4, 4080" 8; "A10, 4090, 5090" 24/80; "A100 (40GB), L40"
#: 32/160; "H100, A100" and "H20, H200" 256/512; "B200, MI300" 512)
SGLANG_GRAPH_BATCH_BY_MEMORY: tuple[tuple[float, tuple[int, int]], ...] = (
    (20 * 1024.0, (8, 8)),
    (35 * 1024.0, (24, 80)),
    (60 * 1024.0, (32, 160)),
    (160 * 1024.0, (256, 512)),
)
SGLANG_GRAPH_BATCH_LARGE = 512


#: SGLang 0.4's default ``--mem-fraction-static`` by tensor-parallel size, (at least this
#: TP, fraction) in order, and below the last: sgl-project/sglang python/sglang/srt/
#: server_args.py of the 0.4 releases (``ServerArgs.__post_init__``, "Set mem fraction
#: static, which depends on the tensor parallelism size": ``tp_size >= 16`` 0.79, ``>= 8``
#: 0.81, ``>= 4`` 0.85, ``>= 2`` 0.87, else 0.88); :func:`sglang_04_static_fraction`
SGLANG_04_STATIC_FRACTION_BY_TP: tuple[tuple[int, float], ...] = (
    (16, 0.79),
    (8, 0.81),
    (4, 0.85),
    (2, 0.87),
)
SGLANG_04_STATIC_FRACTION_TP1 = 0.88
#: the engines' own memory defaults by device (:class:`MemoryShare` ``rule``)
MemoryDefaultRule: TypeAlias = Literal["sglang-0.4", "sglang-0.5"]


def sglang_04_static_fraction(tp: int) -> float:
    """SGLang 0.4's default ``--mem-fraction-static`` on ``tp`` GPUs (its ``tp_size``: the
    GPUs of one pipeline stage, data-parallel attention ranks included).

    >>> sglang_04_static_fraction(8), sglang_04_static_fraction(1)
    (0.81, 0.88)
    """
    return next(
        (f for at_least, f in SGLANG_04_STATIC_FRACTION_BY_TP if tp >= at_least),
        SGLANG_04_STATIC_FRACTION_TP1,
    )


def sglang_static_fraction(
    capacity_bytes: float, chunk_tokens: float, tp: int = 1, pp: int = 1
) -> float:
    """SGLang 0.5's default ``--mem-fraction-static`` on a GPU of ``capacity_bytes``: the
    share of the memory left once its reserve for a prefill chunk's activations, the CUDA
    graphs and the parallel groups is set aside (constants above).

    >>> round(sglang_static_fraction(80 * 2**30, 8192, tp=8), 3)
    0.819
    """
    mib = capacity_bytes / 2**20
    by_tp = 0 if tp < 4 else 1  # the (TP < 4, TP >= 4) column
    graph = next(
        (bs[by_tp] for below, bs in SGLANG_GRAPH_BATCH_BY_MEMORY if mib < below),
        SGLANG_GRAPH_BATCH_LARGE,
    )
    reserved = (
        SGLANG_RESERVED_BASE_MIB
        + SGLANG_RESERVED_MIB_PER_CHUNK_TOKEN * max(chunk_tokens, SGLANG_RESERVED_MIN_CHUNK_TOKENS)
        + SGLANG_RESERVED_MIB_PER_GRAPH_BATCH * graph
        + SGLANG_RESERVED_MIB_PER_RANK * tp * pp
    )
    if mib > SGLANG_RESERVED_FLOOR_ABOVE_MIB:
        reserved = max(reserved, SGLANG_RESERVED_FLOOR_MIB)
    return max(round((mib - reserved) / mib, 3), 0.0)


@dataclass(frozen=True)
class MemoryShare:
    """An engine's memory setting: the share of a GPU's memory its replica may plan with.

    ``of="total"``: ``fraction`` of all the memory holds the weights, the activations and
    the KV cache (vLLM ``gpu_memory_utilization``, default 0.9). ``of="free"``: the KV
    cache gets ``fraction`` of the memory the weights and a pass's activations leave
    (TensorRT-LLM ``KvCacheConfig.free_gpu_memory_fraction``, default 0.9, "The fraction of
    GPU memory fraction that should be allocated for the KV cache. Default is 90%":
    ``tensorrt_llm/llmapi/llm_args.py``). ``of="static"``: ``fraction`` of all the memory
    holds the weights and the KV cache, the activations beside it (SGLang
    ``--mem-fraction-static``, "the fraction of the memory used for static allocation (model
    weights and KV cache memory pool)"); ``by_device``: the fraction is the engine's own
    default on the device, not ``fraction``, by ``rule`` (SGLang 0.5:
    :func:`sglang_static_fraction`; 0.4: :func:`sglang_04_static_fraction`). A plain number
    is a share of the total.
    """

    fraction: float
    of: MemoryFractionOf = "total"
    by_device: bool = False
    rule: MemoryDefaultRule = "sglang-0.5"

    def fraction_on(
        self, capacity_bytes: float, chunk_tokens: float = 0.0, tp: int = 1, pp: int = 1
    ) -> float:
        """The fraction in force on a GPU of ``capacity_bytes`` (``by_device``: the
        engine's default for that memory, prefill chunk and parallel group; ``tp`` the
        GPUs of one pipeline stage, SGLang's ``tp_size``)."""
        if self.by_device and self.rule == "sglang-0.4":
            return sglang_04_static_fraction(tp)
        if self.by_device:
            return sglang_static_fraction(capacity_bytes, chunk_tokens, tp, pp)
        return self.fraction

    def usable_bytes(
        self,
        capacity_bytes: float,
        fixed_bytes: float,
        activation_bytes: float = 0.0,
        *,
        chunk_tokens: float = 0.0,
        tp: int = 1,
        pp: int = 1,
    ) -> float:
        """The bytes a replica holding ``fixed_bytes`` of weights and activations (of them
        ``activation_bytes`` activations) may use."""
        f = self.fraction_on(capacity_bytes, chunk_tokens, tp, pp)
        if self.of == "free":
            return fixed_bytes + f * max(capacity_bytes - fixed_bytes, 0.0)
        if self.of == "static":
            return min(f * capacity_bytes + activation_bytes, capacity_bytes)
        return f * capacity_bytes

    def describe(
        self,
        capacity_bytes: float,
        fixed_bytes: float,
        *,
        chunk_tokens: float = 0.0,
        tp: int = 1,
        pp: int = 1,
    ) -> str:
        """``90% of 80.0 GiB``, ``weights and activations + 90% of the 12.3 GiB they
        leave``, or ``82% of 80.0 GiB for weights and KV cache, activations beside``."""
        f = self.fraction_on(capacity_bytes, chunk_tokens, tp, pp)
        if self.of == "free":
            free = max(capacity_bytes - fixed_bytes, 0.0) / 2**30
            return f"weights and activations + {f:.0%} of the {free:.1f} GiB they leave"
        if self.of == "static":
            version = self.rule.removeprefix("sglang-")
            default = f" (SGLang {version}'s default on this GPU)" if self.by_device else ""
            return (
                f"{f:.0%}{default} of {capacity_bytes / 2**30:.1f} GiB for weights and KV "
                "cache, activations beside"
            )
        return f"{f:.0%} of {capacity_bytes / 2**30:.1f} GiB"


#: what the forecast's ``utilization`` arguments take: a share of the total, or an engine's
#: setting (:class:`MemoryShare`)
Utilization: TypeAlias = "float | MemoryShare"


def memory_share(utilization: Utilization) -> MemoryShare:
    """``utilization`` as a :class:`MemoryShare` (a number is a share of the total)."""
    return utilization if isinstance(utilization, MemoryShare) else MemoryShare(utilization)


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory of a layout: what is fixed and what one cached token costs."""

    capacity_bytes: float
    usable_bytes: float
    weights_bytes: float
    activation_bytes: float
    kv_bytes_per_token: float
    state_bytes_per_seq: float = 0.0
    """A hybrid model's recurrent state per sequence (:meth:`Sharded.state_bytes_per_seq_gpu`),
    held from the same pool as the KV cache (vLLM's hybrid cache manager)."""
    window_kv_bytes_per_token: float = 0.0
    """KV bytes a token adds to the local (sliding-window or chunked) layers while it is in
    their window (:meth:`Sharded.window_kv_bytes_per_token_gpu`): a sequence of ``n`` tokens
    holds ``min(n, kv_window)`` of them there."""
    kv_window: float = 0.0

    def per_seq_bytes(self, tokens_per_request: Num) -> FloatArray:
        """KV-pool bytes of one sequence of ``tokens_per_request`` tokens: its per-token KV,
        its window in the local layers and its recurrent state."""
        t = np.maximum(np.asarray(tokens_per_request, dtype=float), 1.0)
        out: FloatArray = t * self.kv_bytes_per_token + self.state_bytes_per_seq
        if self.window_kv_bytes_per_token:
            out = out + np.minimum(t, self.kv_window) * self.window_kv_bytes_per_token
        return out

    @property
    def kv_budget_bytes(self) -> float:
        return self.usable_bytes - self.weights_bytes - self.activation_bytes

    @property
    def kv_capacity_tokens(self) -> float:
        return max(self.kv_budget_bytes, 0.0) / self.kv_bytes_per_token

    def max_batch(self, tokens_per_request: float) -> int:
        """Sequences whose KV cache (with their windows and recurrent state) fit the budget
        at once."""
        if self.state_bytes_per_seq or self.window_kv_bytes_per_token:
            per_seq = float(self.per_seq_bytes(tokens_per_request))
            return int(max(self.kv_budget_bytes, 0.0) // per_seq)
        return int(self.kv_capacity_tokens // max(tokens_per_request, 1.0))

    def pool_tokens_per_token(self) -> float:
        """The local layers' KV per windowed token, in per-token KV units (the serving
        simulation's pool counts tokens)."""
        return self.window_kv_bytes_per_token / self.kv_bytes_per_token

    def breakdown(self, kv_tokens: float, sequences: float = 0.0) -> dict[str, float]:
        """Memory per GPU holding ``kv_tokens`` cached tokens of ``sequences`` sequences (the
        KV-cache pool's entry counts each sequence's :attr:`state_bytes_per_seq` too)."""
        kv = kv_tokens * self.kv_bytes_per_token + sequences * self.state_bytes_per_seq
        if self.window_kv_bytes_per_token and sequences:
            per_seq = min(kv_tokens / sequences, self.kv_window)
            kv += sequences * per_seq * self.window_kv_bytes_per_token
        return {
            "weights": self.weights_bytes,
            "kv_cache": kv,
            "activations": self.activation_bytes,
            "total": self.weights_bytes + kv + self.activation_bytes,
            "usable": self.usable_bytes,
            "capacity": self.capacity_bytes,
        }
