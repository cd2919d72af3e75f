"""Time of one inference forward pass (prefill, decode step, or a mixed continuous-batching
iteration) from the calibrated device model.

Every pass is split into the parts a reader can audit (per GPU, average pipeline stage):

* **GEMMs** at the real shapes: compute ``2*m*n*k / F(m, n, k)`` with ``F`` the calibrated
  GEMM rate (:meth:`DevicePerf.matmul_flops_per_s`), memory ``(weights + inputs + outputs) /
  B`` with ``B`` the calibrated HBM bandwidth; the two combine by a smooth roofline
  ``(c**p + m**p)**(1/p)`` (Williams et al. 2009 roofline, made smooth as in the "smooth max"
  of the LLM-Viewer/roofline analyses; ``p -> inf`` is the hard ``max``).
* **attention**: FLOPs of QK^T and PV (FlashAttention counts) against streaming the KV cache.
* **element-wise** kernels (norms, residuals, activation, RoPE): bandwidth only.
* **communication**: Megatron TP all-reduces per layer, MoE all-to-alls, PP sends, each from
  the calibrated collective model at the real (small) message size, where latency dominates.
* **overhead**: per-layer and per-step time the calibration cannot see (kernel launches,
  scheduling, sampling) -- framework constants fitted on published runs, see
  :mod:`gpuplan.forecast.inference_fit`.

Every quantity carries a scenario axis of length 3: ``[value, slow, fast]``: the calibrated
central value, the pessimistic end (low FLOP/s and bandwidth, high collective time) and the
optimistic end, so that intervals come from the calibration's ``low``/``high``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

import numpy as np

from gpuplan.forecast.comm import (
    TRTLLM_CUSTOM_ALLREDUCE_MAX_BYTES,
    VLLM_CUSTOM_ALLREDUCE_MAX_BYTES,
    LibraryLatency,
    custom_allreduce_max_bytes,
    library_latency,
    serving_collective_time3,
)
from gpuplan.forecast.flops import GROUPED_GEMM_TILE_ROWS, grouped_gemm_rows
from gpuplan.forecast.inference_arch import (
    DEFAULT_MEMORY_FRACTION,
    Gemms,
    MemoryDefaultRule,
    MemoryFractionOf,
    MemoryShare,
    Sharded,
    dtype_peak,
    plain_name,
)
from gpuplan.forecast.model import chunked_pairs, window_pairs
from gpuplan.forecast.speculative import draft_sharded
from gpuplan.numeric import BoolArray, FloatArray, JSONDict, Num

if TYPE_CHECKING:
    from gpuplan.calibration.api import DevicePerf, Estimate
    from gpuplan.catalogs.schema import Accelerator
    from gpuplan.forecast.speculative import Speculation

#: Rows below which a GEMM's compute ceiling is read at this many rows. The calibrated rate
#: of a thin GEMM already contains its weight traffic at the probe's element size; this model
#: counts that traffic itself, with the real (possibly quantised) weight bytes, on the memory
#: side of the roofline. Reading the compute side at >= 1024 rows, where GEMMs of transformer
#: widths are compute-bound on current GPUs, avoids counting the weights twice.
COMPUTE_CEILING_MIN_ROWS = 1024.0

#: index of the scenario axis
VALUE, SLOW, FAST = 0, 1, 2
_BASIS_ORDER = {"measured": 0, "transferred": 1, "spec": 2}


@dataclass(frozen=True)
class EngineProfile:
    """A serving engine at a version: what its kernels and scheduler do that changes the
    physics, and how far its constants are calibrated.

    Attributes
    ----------
    name:
        ``family@version`` (``vllm@0.5.4``); the id the forecast and the validation use.
    xqa_shapes:
        ``(head_dim, query heads per KV head)`` pairs for which the engine has a tensor-core
        decode-attention kernel; ``None`` means every shape. Other shapes run the masked
        multi-head attention kernel, whose dot products run on the CUDA cores (FP32), one
        query head per thread block.
    description:
        One line for the result.
    custom_allreduce:
        The engine runs its own one-shot/two-shot all-reduce for small TP messages inside
        the scale-up domain (TensorRT-LLM's AllReduce plugin; vLLM's ``custom_all_reduce``,
        PR 2192; SGLang), besides NCCL.
    custom_allreduce_max_bytes:
        The largest message those kernels take (groups of at most two ranks, larger
        groups): their workspace; NCCL runs larger ones
        (:func:`gpuplan.forecast.comm.custom_allreduce_max_bytes`).
    family, version:
        ``trtllm``, ``vllm`` or ``sglang`` (``modern``: any current engine), and its release.
    max_running_requests:
        The scheduler's cap on running requests by default (vLLM ``max_num_seqs``); the
        sizing never plans a larger batch. None: memory decides (or ``running_cap_rule``).
    running_cap_rule:
        ``fixed``: the cap is ``max_running_requests`` on every accelerator. ``vllm-v1``:
        vLLM V1's default by device (:meth:`running_cap`).
    chunk_rule:
        The default token budget of one scheduler step (vLLM ``max_num_batched_tokens``,
        SGLang ``--chunked-prefill-size``, TensorRT-LLM ``max_num_tokens``): ``fixed``
        (:data:`DEFAULT_CHUNK_TOKENS` everywhere), ``vllm-v1``, ``sglang-0.4`` or
        ``sglang-0.5`` (set by device memory; :meth:`chunk_tokens`).
    kv_memory_of:
        What the engine's memory setting is a share of (:meth:`memory_share`): ``total``
        (vLLM's ``gpu_memory_utilization``: weights, activations and KV cache within the
        share of all memory), ``free`` (TensorRT-LLM's ``free_gpu_memory_fraction``: the
        KV cache gets the share of what the weights and activations leave) or ``static``
        (SGLang's ``--mem-fraction-static``: weights and KV cache within the share of all
        memory, activations beside it).
    memory_default_by_device, memory_default_rule:
        With no setting given the engine computes its own by device, by the rule named
        (SGLang 0.5: :func:`~gpuplan.forecast.inference_arch.sglang_static_fraction`, by
        memory, prefill chunk and TP; SGLang 0.4:
        :func:`~gpuplan.forecast.inference_arch.sglang_04_static_fraction`, by TP);
        otherwise 0.9.
    fitted_on:
        The engine whose published rows fitted the framework constants this profile uses.
        Equal to ``name`` only when the profile has at least :data:`MIN_ROWS_CALIBRATED`
        published rows of its own; otherwise the constants are *transferred* and the
        forecast's intervals are widened (:data:`TRANSFER_INTERVAL_WIDEN`).
    sources:
        Where the kernel and scheduler facts come from.
    fp8_moe:
        The engine has FP8 kernels for the routed experts' grouped GEMMs. False: with an FP8
        precision the expert GEMMs run at the activation dtype's (16-bit) tensor-core rate
        (:meth:`DeviceRates.gemm_rates`); the dense GEMMs stay FP8.
    moe_kernels:
        ``triton``: the routed experts run the Triton ``fused_moe`` kernel (vLLM up to 0.8,
        SGLang up to 0.4 by default), whose pass over a MoE model is slower than the dense
        roofline by the pooled serving rows' MoE factor (fitted on vLLM 0.5.4's Mixtral
        bursts). ``vendor``: a vendor grouped GEMM (TensorRT-LLM's CUTLASS MoE, FlashInfer's
        TRT-LLM MoE runner, DeepGEMM, ROCm aiter), run at the dense roofline like the other
        GEMMs (docs/forecast-inference.md, "MoE on every engine").
    """

    name: str
    xqa_shapes: tuple[tuple[int, int], ...] | None
    description: str
    custom_allreduce: bool = True
    custom_allreduce_max_bytes: tuple[float, float] = VLLM_CUSTOM_ALLREDUCE_MAX_BYTES
    family: str = "modern"
    version: str | None = None
    max_running_requests: int | None = None
    running_cap_rule: Literal["fixed", "vllm-v1"] = "fixed"
    chunk_rule: Literal["fixed", "vllm-v1", "sglang-0.4", "sglang-0.5"] = "fixed"
    kv_memory_of: MemoryFractionOf = "total"
    memory_default_by_device: bool = False
    memory_default_rule: MemoryDefaultRule = "sglang-0.5"
    fitted_on: str = "trtllm@0.9"
    sources: tuple[str, ...] = ()
    fp8_moe: bool = True
    moe_kernels: Literal["triton", "vendor"] = "vendor"
    #: the oldest release this profile stands for when a version without a profile of its
    #: own is named (default: ``version``; :func:`engine_profile`)
    covers_from: str | None = None

    def running_cap(self, gpu: Accelerator) -> int | None:
        """The most requests the engine runs at once on ``gpu`` by default; None where
        memory alone decides.

        vLLM V1 (``running_cap_rule="vllm-v1"``) sets ``max_num_seqs`` by device
        (vllm/engine/arg_utils.py, the usage-context defaults, and its test
        ``test_defaults_with_usage_context``): 1024 on a GPU of at least 70 GiB other
        than an A100 (vllm-project/vllm PR #17885 keeps A100 on the small defaults), 256
        on smaller GPUs and on TPUs.
        """
        if self.running_cap_rule == "vllm-v1":
            return VLLM_V1_MAX_NUM_SEQS[1 if self._vllm_v1_large(gpu) else 0]
        return self.max_running_requests

    def chunk_tokens(self, gpu: Accelerator) -> int:
        """The engine's default token budget per scheduler step on ``gpu``.

        * ``vllm-v1``: the OpenAI server's ``max_num_batched_tokens`` (vllm/engine/
          arg_utils.py, ``get_batch_defaults``): 8192 on a GPU of at least 70 GiB other
          than an A100 (vllm-project/vllm PR #17885: a larger budget lowered A100
          throughput), 2048 on the others; the same device test as :meth:`running_cap`.
        * ``sglang-0.4``: ``chunked_prefill_size`` by the device's memory (sgl-project/sglang
          python/sglang/srt/server_args.py, ``ServerArgs.__post_init__``, 0.4: "A10, L40,
          4090" under 35 GiB 2048; "H100, H200, A100, H20" under 160 GiB 8192; "B200,
          MI300" 16384). ``sglang-0.5``: the same file in 0.5 adds "A100 (40GB), L40"
          under 60 GiB at 4096.
        * ``fixed``: :data:`DEFAULT_CHUNK_TOKENS` (TensorRT-LLM's ``max_num_tokens``
          default; vLLM V0 and SGLang 0.3's chunked-prefill default).
        """
        mem = gpu.memory_bytes
        if self.chunk_rule == "vllm-v1":
            return VLLM_V1_CHUNK_TOKENS[1 if self._vllm_v1_large(gpu) else 0]
        tiers = {
            "sglang-0.4": SGLANG_04_CHUNK_TOKENS_BY_MEMORY,
            "sglang-0.5": SGLANG_05_CHUNK_TOKENS_BY_MEMORY,
        }.get(self.chunk_rule)
        if tiers is not None and mem is not None:
            return next((t for below, t in tiers if mem < below), SGLANG_CHUNK_TOKENS_LARGE)
        return DEFAULT_CHUNK_TOKENS

    @staticmethod
    def _vllm_v1_large(gpu: Accelerator) -> bool:
        """vLLM V1's large-device test: at least 70 GiB, not an A100, a GPU."""
        big = gpu.memory_bytes is not None and gpu.memory_bytes >= VLLM_V1_LARGE_GPU_BYTES
        return big and gpu.vendor in ("nvidia", "amd") and "a100" not in gpu.name.lower()

    def memory_share(self, fraction: float | None) -> MemoryShare:
        """The engine's memory setting ``fraction`` as the share of memory it means; None:
        the engine's default (:data:`DEFAULT_MEMORY_FRACTION`, or its own by device)."""
        if fraction is None:
            return MemoryShare(
                DEFAULT_MEMORY_FRACTION,
                self.kv_memory_of,
                by_device=self.memory_default_by_device,
                rule=self.memory_default_rule,
            )
        return MemoryShare(fraction, self.kv_memory_of)

    @property
    def profiles_logits_per_sequence(self) -> bool:
        """True when the engine sizes its KV cache after a profile pass whose logits are
        one fp32 row per sequence, up to ``max_num_seqs`` (vLLM: V0
        ``ModelRunner.profile_run``, V1 ``_dummy_sampler_run``), so the memory set aside
        for logits is that many rows (:func:`gpuplan.forecast.inference.logit_sequences`).
        Other engines keep a reserve of a whole prefill chunk of rows."""
        return self.family == "vllm"

    @property
    def pays_moe_factor(self) -> bool:
        """True when a MoE model's pass takes the fitted MoE factor (Triton ``fused_moe``)."""
        return self.moe_kernels == "triton"

    @property
    def calibrated(self) -> bool:
        """True when this engine's own published rows fitted its constants."""
        return self.fitted_on == self.name

    @property
    def basis(self) -> str:
        if self.calibrated:
            return "calibrated"
        if self.fitted_on == "pooled":
            return POOLED_BASIS
        return f"transferred from {self.fitted_on}"

    def describe(self) -> JSONDict:
        return {
            "name": self.name,
            "family": self.family,
            "version": self.version,
            "description": self.description,
            "custom_allreduce": self.custom_allreduce,
            "fp8_moe": self.fp8_moe,
            "max_running_requests": self.max_running_requests,
            "running_cap_rule": self.running_cap_rule,
            "chunk_rule": self.chunk_rule,
            "kv_memory_of": self.kv_memory_of,
            "memory_default_by_device": self.memory_default_by_device,
            "memory_default_rule": self.memory_default_rule
            if self.memory_default_by_device
            else None,
            "constants": self.basis,
            "calibrated": self.calibrated,
            "sources": list(self.sources),
        }

    def vector_decode_attention(self, sh: Sharded) -> bool:
        if self.xqa_shapes is None or sh.arch.mla is not None:
            return False
        group = round(sh.kv_group)
        return (sh.arch.head_dim, group) not in self.xqa_shapes


#: A profile claims calibrated constants only with at least this many published rows of
#: its own engine (held out by model when scored); below it the constants are transferred.
MIN_ROWS_CALIBRATED = 10
#: Factor on the log-space model-error quantiles of the interval when a profile's constants
#: are transferred from another engine (it has fewer than MIN_ROWS_CALIBRATED rows).
TRANSFER_INTERVAL_WIDEN = 2.0
#: What a profile with fewer than MIN_ROWS_CALIBRATED rows of its own runs on.
POOLED_BASIS = (
    "pooled fallback (fewer than 10 rows of its own): per-layer overhead and time scales "
    "fitted on every engine's published serving rows"
)

_VLLM_DOCS = "https://docs.vllm.ai/en/latest/serving/engine_args.html (max_num_seqs 256)"
#: vLLM V1's default ``max_num_seqs`` (small devices, large ones) and the device memory from
#: which a GPU counts as large (``device_memory >= 70 * GiB_bytes``): vllm/engine/arg_utils.py
#: usage-context defaults (:meth:`EngineProfile.running_cap`).
VLLM_V1_MAX_NUM_SEQS = (256, 1024)
VLLM_V1_LARGE_GPU_BYTES = 70 * 2**30
#: vLLM V1's OpenAI-server ``max_num_batched_tokens`` (small devices, large ones), same
#: source (:meth:`EngineProfile.chunk_tokens`)
VLLM_V1_CHUNK_TOKENS = (2048, 8192)
#: SGLang's ``chunked_prefill_size`` by device memory, (below this many bytes, tokens) in
#: order, and above the last: sgl-project/sglang python/sglang/srt/server_args.py
#: (0.4: ``gpu_mem < 35 * 1024`` and ``< 160 * 1024`` MiB; 0.5 adds ``< 60 * 1024`` at
#: 4096; :meth:`EngineProfile.chunk_tokens`)
SGLANG_04_CHUNK_TOKENS_BY_MEMORY = ((35 * 2**30, 2048), (160 * 2**30, 8192))
SGLANG_05_CHUNK_TOKENS_BY_MEMORY = ((35 * 2**30, 2048), (60 * 2**30, 4096), (160 * 2**30, 8192))
SGLANG_CHUNK_TOKENS_LARGE = 16384
#: the token budget of one scheduler step where the engine sets none by device (vLLM
#: ``max_num_batched_tokens`` with chunked prefill, TensorRT-LLM ``max_num_tokens``; a
#: serving setting, not a hardware figure)
DEFAULT_CHUNK_TOKENS = 8192

#: Engine profiles (``family@version``). The shipped framework constants are fitted on the
#: TensorRT-LLM v0.9.0 tables (``trtllm@0.9``). A profile with at least MIN_ROWS_CALIBRATED
#: published serving rows of its own (``vllm@0.5.4``) has its own per-layer overhead,
#: ``time_scale`` and ``moe_time_scale`` fitted on them (``fitted_on`` = its name); one with
#: fewer (``vllm@0.6.0``, ``vllm@0.8.4``, ``sglang@0.3.0``, ``trtllm@0.19``) uses the pooled
#: ones of every engine's serving rows (``fitted_on`` = ``pooled``); the rest (``modern``,
#: ``trtllm@1.0``) transfer the v0.9 constants as they are, times the pooled MoE factor for
#: a mixture-of-experts model (:meth:`FittedOverheads.params_for`), and every result says
#: which. ``trtllm@0.9``: its precompiled XQA kernels covered head_dim 128 with 8 query heads
#: per KV head (kernel files
#: ``cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/cubin/xqa_kernel_*_d_128_*_nqpkv_8_m_8_sm_90``
#: in NVIDIA/TensorRT-LLM; the 0.10.0 release notes, PR #1734, name Llama-2-70B as the XQA
#: model); every other shape used the masked MHA kernel. Its custom all-reduce plugin was
#: opt-in (``PluginConfig.use_custom_all_reduce = False`` by default in the 0.x releases,
#: ``tensorrt_llm/plugin/plugin.py``; the published table does not say it was enabled), so
#: TP all-reduces ran on NCCL. Its MoE layers had no FP8 path: FP8 quantisation of
#: Mixtral arrived in 0.10.0 ("Added FP8 quantization support for Mixtral", 0.10.0 release
#: notes, docs/source/release-notes.md; NVIDIA/TensorRT-LLM issue #1229 "When will FP8 be
#: available for Mixtral?") and FP8 for the non-plugin MoE in 0.12.0 ("Supported FP8 OOTB
#: MoE"), so ``fp8_moe=False``: the expert GEMMs of its "FP8" Mixtral rows ran at the
#: 16-bit rate (the published H100/A100 throughput ratio of those rows is 1.6-2.0, against
#: 3.5-4.7 for the dense models of the same table). ``modern``: tensor-core decode attention for any
#: MHA/GQA/MQA/MLA shape (FlashInfer, FlashAttention-3, FlashMLA, TensorRT-LLM's JIT XQA).
#: where the TensorRT-LLM profiles' ``kv_memory_of="free"`` comes from
TRTLLM_KV_MEMORY_SOURCE = (
    "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py KvCacheConfig.free_gpu_memory_fraction "
    "(default 0.9: 'The fraction of GPU memory fraction that should be allocated for the KV "
    "cache. Default is 90%'; the memory left after the weights load and a profiling pass)"
)
ENGINES: dict[str, EngineProfile] = {
    "modern": EngineProfile(
        "modern",
        None,
        "any current engine: tensor-core decode attention for every shape, custom all-reduce",
    ),
    "trtllm@0.9": EngineProfile(
        "trtllm@0.9",
        ((128, 8),),
        "TensorRT-LLM v0.9.0: XQA for head_dim 128 with 8 query heads per KV head, masked MHA "
        "otherwise; NCCL all-reduce",
        custom_allreduce=False,
        fp8_moe=False,
        family="trtllm",
        custom_allreduce_max_bytes=TRTLLM_CUSTOM_ALLREDUCE_MAX_BYTES,
        version="0.9.0",
        fitted_on="trtllm@0.9",
        sources=(
            "NVIDIA/TensorRT-LLM v0.9.0 docs/source/performance.md (the fitted rows)",
            "NVIDIA/TensorRT-LLM docs/source/release-notes.md: 0.10.0 'Added FP8 quantization "
            "support for Mixtral', 0.12.0 'Supported FP8 OOTB MoE' (retrieved 2026-12-02)",
        ),
    ),
    "trtllm@0.17": EngineProfile(
        "trtllm@0.17",
        None,
        "TensorRT-LLM 0.17: TensorRT engine built by trtllm-bench, in-flight batching with "
        "chunked context, JIT XQA decode attention for every GQA shape, AllReduce plugin",
        family="trtllm",
        kv_memory_of="free",
        custom_allreduce_max_bytes=TRTLLM_CUSTOM_ALLREDUCE_MAX_BYTES,
        version="0.17",
        sources=(
            TRTLLM_KV_MEMORY_SOURCE,
            "NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md @ 258c7540 "
            "(version 0.17 throughput tables, the scored rows; build and run commands)",
            "NVIDIA/TensorRT-LLM tensorrt_llm/bench/build/tuning.py (trtllm-bench's build "
            "heuristic: max_batch_size, max_num_tokens)",
        ),
    ),
    "trtllm@1.0": EngineProfile(
        "trtllm@1.0",
        None,
        "TensorRT-LLM 1.0: JIT XQA decode attention for every GQA shape, AllReduce plugin "
        "(one-shot/two-shot) by default",
        family="trtllm",
        kv_memory_of="free",
        custom_allreduce_max_bytes=TRTLLM_CUSTOM_ALLREDUCE_MAX_BYTES,
        version="1.0",
        sources=(
            TRTLLM_KV_MEMORY_SOURCE,
            "NVIDIA/TensorRT-LLM release notes 0.10-1.0 (XQA JIT, AllReduce plugin)",
        ),
    ),
    "vllm@0.5.4": EngineProfile(
        "vllm@0.5.4",
        None,
        "vLLM 0.5.4: FlashAttention decode (tensor cores), custom all-reduce, CUDA graphs up "
        "to batch 256, max_num_seqs 256",
        family="vllm",
        version="0.5.4",
        max_running_requests=256,
        moe_kernels="triton",
        fitted_on="vllm@0.5.4",
        sources=(
            _VLLM_DOCS,
            "vllm-project/vllm PR 2192 (custom all-reduce)",
            "LambdaLabsML/vllm-benchmark raw benchmark_serving JSON (the fitted rows)",
        ),
    ),
    "vllm@0.6.0": EngineProfile(
        "vllm@0.6.0",
        None,
        "vLLM 0.6.0: as 0.5.4 plus multi-step scheduling (--num-scheduler-steps) and the "
        "asynchronous output processor",
        family="vllm",
        version="0.6.0",
        max_running_requests=256,
        moe_kernels="triton",
        fitted_on="pooled",
        sources=(
            _VLLM_DOCS,
            "https://blog.vllm.ai/2024/09/05/perf-update.html",
            "sgl-project/sglang benchmark/benchmark_vllm_060/README.md (scored rows)",
        ),
    ),
    "vllm@0.8.4": EngineProfile(
        "vllm@0.8.4",
        None,
        "vLLM 0.8.4: the V1 engine (engine core in its own process, scheduling overlapped "
        "with the forward pass), FlashMLA/FlashAttention decode, piecewise CUDA graphs, "
        "chunked prefill, custom all-reduce; max_num_seqs by GPU (1024 on H100/H200)",
        family="vllm",
        version="0.8.4",
        running_cap_rule="vllm-v1",
        chunk_rule="vllm-v1",
        moe_kernels="triton",
        fitted_on="pooled",
        sources=(
            "https://blog.vllm.ai/2025/01/27/v1-alpha-release.html (V1 engine architecture)",
            "vllm/engine/arg_utils.py _set_default_args_v1 of 0.8 and its test "
            "test_defaults_with_usage_context: on H100/H200 the OpenAI server batches "
            "8192 tokens per step and runs up to 1024 sequences (2048 and 256 elsewhere)",
            "simon-mo/R1-Benchmark saved-results/v0.8.4 raw benchmark_serving JSON (scored rows)",
        ),
    ),
    "trtllm@0.19": EngineProfile(
        "trtllm@0.19",
        None,
        "TensorRT-LLM main of 2025-04 (0.19 development), PyTorch backend: overlap "
        "scheduler, CUDA graphs, attention TP with expert parallelism, AllReduce plugin",
        family="trtllm",
        kv_memory_of="free",
        custom_allreduce_max_bytes=TRTLLM_CUSTOM_ALLREDUCE_MAX_BYTES,
        version="0.19",
        fitted_on="pooled",
        sources=(
            TRTLLM_KV_MEMORY_SOURCE,
            "simon-mo/R1-Benchmark trt-guide.md and LOG.md 2025-04-18 (launch flags, scored rows)",
        ),
    ),
    "sglang@0.4.5": EngineProfile(
        "sglang@0.4.5",
        None,
        "SGLang 0.4.5: overlap scheduler, FlashAttention-3 MLA, DeepGEMM FP8 GEMMs, "
        "data-parallel attention (--enable-dp-attention), chunked prefill",
        family="sglang",
        version="0.4.5",
        chunk_rule="sglang-0.4",
        kv_memory_of="static",
        memory_default_by_device=True,
        memory_default_rule="sglang-0.4",
        moe_kernels="triton",
        fitted_on="pooled",
        sources=(
            "simon-mo/R1-Benchmark Justfile and LOG.md 2025-04-18 (launch flags, scored rows)",
            "sgl-project/sglang python/sglang/srt/server_args.py (0.4: mem_fraction_static "
            "0.88 at TP 1, 0.87 at TP 2, 0.85 at TP 4, 0.81 at TP 8, 0.79 at TP 16, the "
            "weights and KV pool within it)",
        ),
    ),
    "sglang@0.5": EngineProfile(
        "sglang@0.5",
        None,
        "SGLang 0.5.6-0.5.12: overlap scheduler, CUDA graphs, chunked prefill, TRT-LLM MLA "
        "and FlashInfer attention on NVIDIA, aiter kernels on ROCm, FP8/FP4 MoE runners",
        family="sglang",
        version="0.5",
        chunk_rule="sglang-0.5",
        kv_memory_of="static",
        memory_default_by_device=True,
        fitted_on="pooled",
        sources=(
            "SemiAnalysisAI/InferenceX benchmarks/single_node/fixed_seq_len/dsr1_*.sh "
            "(launch flags of the scored rows)",
            "sgl-project/sglang python/sglang/srt/server_args.py (0.5: chunked_prefill_size "
            "and cuda_graph_max_bs by GPU memory; mem_fraction_static = (GPU memory - "
            "reserved_mem) / GPU memory, the weights and KV pool within it)",
        ),
    ),
    "trtllm@1.2": EngineProfile(
        "trtllm@1.2",
        None,
        "TensorRT-LLM 1.1-1.3 release candidates, PyTorch backend (trtllm-serve): overlap "
        "scheduler, padded CUDA graphs, attention DP with expert parallelism, AllReduce plugin",
        family="trtllm",
        kv_memory_of="free",
        custom_allreduce_max_bytes=TRTLLM_CUSTOM_ALLREDUCE_MAX_BYTES,
        version="1.2",
        covers_from="1.1",
        fitted_on="pooled",
        sources=(
            TRTLLM_KV_MEMORY_SOURCE,
            "SemiAnalysisAI/InferenceX benchmarks/single_node/fixed_seq_len/dsr1_*_trt.sh "
            "(launch flags of the scored rows)",
        ),
    ),
    "atom@0.1": EngineProfile(
        "atom@0.1",
        None,
        "AMD ATOM 0.1: a vLLM-style server on ROCm aiter kernels (MLA decode, FP8/MXFP4 MoE)",
        family="atom",
        version="0.1",
        fitted_on="pooled",
        sources=(
            "SemiAnalysisAI/InferenceX benchmarks/single_node/fixed_seq_len/dsr1_*_atom.sh "
            "(launch flags of the scored rows)",
        ),
    ),
    "sglang@0.3.0": EngineProfile(
        "sglang@0.3.0",
        None,
        "SGLang 0.3.0: FlashInfer decode attention (tensor cores), custom all-reduce, "
        "chunked prefill, RadixAttention off for unique prompts",
        family="sglang",
        version="0.3.0",
        moe_kernels="triton",
        fitted_on="pooled",
        sources=(
            "sgl-project/sglang benchmark/benchmark_vllm_060/README.md (launch flags, scored rows)",
        ),
    ),
}
#: Names that resolve to a profile: the family alone is the profile its serving calibrations
#: were recorded under (``vllm`` stays ``vllm@0.6.0``, so an artifact probed as ``vllm`` keeps
#: applying; name ``vllm@0.8.4`` to forecast the V1 engine).
ENGINE_ALIASES = {
    "trtllm-0.9": "trtllm@0.9",
    "trtllm": "trtllm@1.0",
    "vllm": "vllm@0.6.0",
    "sglang": "sglang@0.3.0",
}

#: the engine assumed when none is named
DEFAULT_ENGINE = "modern"


#: Other spellings of the engine families (``family@version`` and the family alone accept them)
ENGINE_FAMILY_ALIASES = {
    "tensorrt-llm": "trtllm",
    "tensorrt_llm": "trtllm",
    "tensorrtllm": "trtllm",
    "trt-llm": "trtllm",
    "trtllm-serve": "trtllm",
    "trtllm-bench": "trtllm",
    "vllm-rocm": "vllm",
    "rocm-vllm": "vllm",
    "rocm/vllm": "vllm",
    "sgl": "sglang",
    # stacks without a profile (UNPROFILED_ENGINES), other spellings
    "tritonserver": "triton",
    "text-generation-inference": "tgi",
    "llamacpp": "llama.cpp",
    "deepspeed-mii": "mii",
}

#: Serving stacks without a profile of their own, and what to name instead: a front end or
#: orchestrator forecasts as the engine it runs; a separate engine as the default ``modern``
#: profile, or as its own server measured by ``gpuplan probe --workload serve``.
_CALIBRATE_IT = (
    "no published runs of it are fitted here: the default engine, 'modern', assumes a current "
    "engine (CUDA graphs, vendor kernels); to use its own speed, run 'gpuplan probe --workload "
    "serve --endpoint URL --model NAME' against it and 'gpuplan calibrate', then forecast with "
    "the default engine"
)
_BACKEND_OF = "name the engine it runs (trtllm@<release>, vllm@<release> or sglang@<release>)"
UNPROFILED_ENGINES = {
    "nim": f"NVIDIA NIM serves through TensorRT-LLM, vLLM or SGLang: {_BACKEND_OF}",
    "dynamo": f"NVIDIA Dynamo orchestrates TensorRT-LLM, vLLM or SGLang workers: {_BACKEND_OF}, "
    "with --disaggregate for its prefill/decode split",
    "triton": f"Triton Inference Server runs a backend: {_BACKEND_OF}",
    "llm-d": f"llm-d schedules vLLM servers: {_BACKEND_OF}",
    "kserve": f"KServe hosts a serving runtime: {_BACKEND_OF}",
    "ray": f"Ray Serve LLM runs vLLM: {_BACKEND_OF}",
    "tgi": f"Text Generation Inference: {_CALIBRATE_IT}",
    "lmdeploy": f"LMDeploy: {_CALIBRATE_IT}",
    "llama.cpp": f"llama.cpp: {_CALIBRATE_IT}",
    "ollama": f"Ollama (llama.cpp): {_CALIBRATE_IT}",
    "mlc-llm": f"MLC LLM: {_CALIBRATE_IT}",
    "mii": f"DeepSpeed-MII: {_CALIBRATE_IT}",
}

#: vLLM's two engine generations, as a name may give them ("vLLM V1", "vllm v0"): the
#: profile of each and why. V1 became the default with vLLM 0.8.0 (vllm-project/vllm
#: docs/source/getting_started/v1_user_guide.md, PR 15064 of 2025-03-18, the 0.8.0 release:
#: "V1 is now enabled by default for all supported use cases"); V0 is the engine before it.
ENGINE_GENERATIONS = {
    ("vllm", "1"): ("vllm@0.8.4", "vLLM's V1 engine, the default from 0.8.0: its profile"),
    ("vllm", "0"): ("vllm@0.6.0", "vLLM's V0 engine, before 0.8.0: its newest profile"),
}
_GENERATION_NAME = re.compile(r"^(?P<family>[a-z_/\-]+?)[\s@:\-]*v(?P<gen>\d)(?:\s+engine)?$")
#: a maker's name before the engine's ("NVIDIA NIM 1.8", "AMD ATOM"), dropped
_MAKER_PREFIX = re.compile(r"^(?:nvidia|amd|aws|google|meta|intel)\s+")

_ENGINE_NAME = re.compile(
    r"^(?P<family>[a-z_/\-]+?)(?:\s*(?:@|==|\s|:|-)\s*v?(?P<version>\d+(?:\.\d+)*)\S*)?$"
)


def _version_key(version: str | None) -> tuple[int, ...]:
    m = re.match(r"v?(\d+(?:\.\d+)*)", version or "")
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


@lru_cache(maxsize=256)
def _resolve_engine(name: str) -> tuple[EngineProfile, str | None]:
    """The profile of ``name`` and, when ``name`` is a release without a profile of its own,
    why this one stands for it (None when it names a profile or an alias)."""
    from gpuplan.errors import InputError

    # a parenthesised note names the build, not the engine: "vLLM (ROCm) 0.9.2"
    key = _MAKER_PREFIX.sub("", plain_name(name))
    key = ENGINE_ALIASES.get(key, key)
    if key in ENGINES:
        return ENGINES[key], None
    gen = _GENERATION_NAME.match(key)
    if gen is not None:
        fam = ENGINE_FAMILY_ALIASES.get(gen.group("family"), gen.group("family"))
        hit = ENGINE_GENERATIONS.get((fam, gen.group("gen")))
        if hit is not None:
            return ENGINES[hit[0]], f"{name!r}: {hit[1]}, {hit[0]}"
    m = _ENGINE_NAME.match(key)
    family = ENGINE_FAMILY_ALIASES.get(m.group("family"), m.group("family")) if m else key
    version = m.group("version") if m else None
    known = sorted(
        (p for p in ENGINES.values() if p.family == family and p.version is not None),
        key=lambda p: _version_key(p.covers_from or p.version),
    )
    if not known:
        hint = UNPROFILED_ENGINES.get(family)
        raise InputError(
            f"unknown engine {name!r}" + (" (no profile of its own)" if hint else ""),
            hint=(f"{hint}; " if hint else "")
            + f"profiles: {', '.join([*ENGINE_ALIASES, *ENGINES])}",
        )
    if version is None:
        alias = ENGINE_ALIASES.get(family)
        if alias is not None:
            return ENGINES[alias], None
        return known[
            -1
        ], f"{name!r} names no release: the newest {family} profile, {known[-1].name}"
    want = _trim(_version_key(version))
    for p in known:
        if _trim(_version_key(p.version)) == want:
            return p, None
    # a release series (vllm@0.8) takes the profile of that series
    series = [p for p in known if _version_key(p.version)[: len(want)] == want]
    if series:
        return series[-1], f"{family} {version}: the {series[-1].name} profile of that series"
    below = [p for p in known if _trim(_version_key(p.covers_from or p.version)) <= want]
    prof = below[-1] if below else known[0]
    if not below:
        how = "older than every profile: the oldest"
    elif prof.covers_from:
        how = f"its range starts at {prof.covers_from}"
    else:
        how = "the nearest release at or below it"
    return prof, (
        f"{family} {version} has no profile of its own; {prof.name} stands for it ({how}; "
        f"profiles: {', '.join(p.name for p in known)})"
    )


def _trim(v: tuple[int, ...]) -> tuple[int, ...]:
    """A version without its trailing zeros (1.0.0 is 1)."""
    while v and v[-1] == 0:
        v = v[:-1]
    return v


def engine_profile(name: str) -> EngineProfile:
    """The profile of ``name``: a profile (``vllm@0.5.4``, ``trtllm@0.9``, ``modern``...), an
    alias (``vllm``, ``trtllm-0.9``), or any release of a known family (``vllm@0.10.1``,
    ``TensorRT-LLM 1.0.0rc4``, ``sglang 0.4.6.post1``), which takes the profile of the
    nearest release at or below it (:func:`engine_resolution` says which and why); an
    unknown family is an error.

    >>> engine_profile("vllm@0.5.4").max_running_requests
    256
    >>> engine_profile("trtllm-0.9").name
    'trtllm@0.9'
    >>> engine_profile("vLLM 0.10.1").name
    'vllm@0.8.4'
    >>> engine_profile("tensorrt-llm@1.1.0rc2").name
    'trtllm@1.2'
    >>> engine_profile("vLLM (ROCm) 0.9.2").name
    'vllm@0.8.4'
    >>> engine_profile("vLLM V0").name, engine_profile("vllm v1").name
    ('vllm@0.6.0', 'vllm@0.8.4')
    """
    return _resolve_engine(name)[0]


def engine_resolution(name: str) -> str | None:
    """Why ``name`` runs on the profile it does, when it names a release without a profile
    of its own (None otherwise)."""
    return _resolve_engine(name)[1]


def _worst(*bases: str) -> str:
    known = [b for b in bases if b in _BASIS_ORDER]
    return max(known, key=_BASIS_ORDER.__getitem__) if known else "spec"


def rate3(est: Estimate) -> FloatArray:
    """``[value, low, high]`` of a rate Estimate: dividing work by it gives [value, slow, fast]."""
    return np.stack(
        [np.asarray(est.value, float), np.asarray(est.low, float), np.asarray(est.high, float)]
    )


@dataclass(frozen=True)
class OverheadParams:
    """Framework constants that the calibration cannot derive, fitted on published runs.

    Attributes
    ----------
    gemm_efficiency:
        Achieved fraction of the calibrated GEMM (and attention) FLOP/s inside the serving
        engine (fused kernels, quantisation epilogues, non-ideal tiles).
    bandwidth_efficiency:
        Achieved fraction of the calibrated HBM copy bandwidth when streaming weights and KV.
    roofline_sharpness:
        Exponent ``p`` of the smooth roofline ``(c**p + m**p)**(1/p)``.
    overhead_per_layer_s:
        Fixed time per layer and forward pass (kernel launches and syncs), seconds.
    overhead_per_step_s:
        Fixed time per forward pass (scheduling, sampling, host work), seconds.
    comm_efficiency:
        Multiplier on the calibrated collective time (1 = as calibrated).
    vector_attention_efficiency:
        Achieved fraction of the calibrated FP32 CUDA-core rate by a decode-attention kernel
        without tensor cores (one query head per thread block, TensorRT-LLM's masked MHA).
    kv_group_exponent:
        Decode attention reads the KV cache ``group**x`` times, ``group`` being the query
        heads per KV head: 0 when the kernel reuses each KV head for its whole group (as
        XQA/FlashInfer kernels for GQA do), 1 when every query head streams its KV head
        again (a per-head masked-attention kernel without reuse).
    time_scale:
        Factor on the whole pass time: the engine profile's constant, fitted on that engine's
        own published serving runs (:mod:`gpuplan.forecast.validation_inference`); 1 for the
        TensorRT-LLM v0.9 tables that fitted the others. Scaling every iteration by the same
        factor scales a burst's duration, TTFT and TPOT by it exactly, so the fit is the
        median log ratio (closed form).
    frontend_s_per_request:
        Serial per-request cost of the engine's front end before a request reaches the
        scheduler (tokenisation, HTTP and streaming set-up, in one API-server process):
        request ``i`` enters at ``max(arrival_i, entry_{i-1}) + c`` (a deterministic
        single-server queue; vLLM's OpenAI server tokenises in its event loop, see the
        vLLM 0.6 performance blog, https://blog.vllm.ai/2024/09/05/perf-update.html, "API
        server" overhead). Fitted on an engine's burst TTFT rows
        (:mod:`gpuplan.forecast.validation_inference`); 0 for the static-batch tables.
    """

    gemm_efficiency: float = 1.0
    bandwidth_efficiency: float = 1.0
    roofline_sharpness: float = 4.0
    overhead_per_layer_s: float = 0.0
    overhead_per_step_s: float = 0.0
    comm_efficiency: float = 1.0
    kv_group_exponent: float = 0.0
    vector_attention_efficiency: float = 1.0
    time_scale: float = 1.0
    frontend_s_per_request: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {k: float(getattr(self, k)) for k in self.__dataclass_fields__}


def smooth_max(c: Num, m: Num, p: float) -> FloatArray:
    """``(c**p + m**p)**(1/p)``, computed without overflow; equals ``max`` as ``p -> inf``.

    >>> float(smooth_max(3.0, 4.0, 2.0))
    5.0
    >>> round(float(smooth_max(1.0, 0.0, 8.0)), 12)
    1.0
    """
    c = np.asarray(c, dtype=float)
    m = np.asarray(m, dtype=float)
    hi = np.maximum(c, m)
    safe = np.where(hi > 0, hi, 1.0)
    return np.where(hi > 0, hi * ((c / safe) ** p + (m / safe) ** p) ** (1.0 / p), 0.0)


@dataclass(frozen=True)
class PassParts:
    """The physical parts of one forward pass on one GPU of the average stage.

    Arrays have the scenario axis first: ``gemm_*`` are ``(3, G)`` per single GEMM,
    the others ``(3,)``. Times are at the calibrated rates, before :class:`OverheadParams`.
    """

    names: tuple[str, ...]
    gemm_compute_s: np.ndarray
    gemm_memory_s: np.ndarray
    gemm_count: np.ndarray
    attn_compute_s: np.ndarray
    attn_memory_s: np.ndarray
    elementwise_s: np.ndarray
    comm_s: np.ndarray
    layers: float
    kv_read_s: Num = 0.0
    kv_group: Num = 1.0
    attn_vector_compute_s: Num = 0.0
    bandwidth_cap: Num = np.inf
    basis: str = "spec"
    flops: float = 0.0
    bytes: float = 0.0


@dataclass(frozen=True)
class PassTime:
    """A combined pass: total and breakdown, each ``(3,)`` = [value, slow, fast]."""

    total_s: np.ndarray
    gemm_s: np.ndarray
    attention_s: np.ndarray
    elementwise_s: np.ndarray
    comm_s: np.ndarray
    overhead_s: np.ndarray
    compute_side_s: np.ndarray
    memory_side_s: np.ndarray

    @property
    def bottleneck(self) -> str:
        v = {
            "compute": float(self.compute_side_s[VALUE]),
            "memory": float(self.memory_side_s[VALUE]),
            "communication": float(self.comm_s[VALUE]),
        }
        return max(v, key=v.__getitem__)

    def breakdown(self) -> dict[str, float]:
        return {
            "gemm": float(self.gemm_s[VALUE]),
            "attention": float(self.attention_s[VALUE]),
            "elementwise": float(self.elementwise_s[VALUE]),
            "communication": float(self.comm_s[VALUE]),
            "overhead": float(self.overhead_s[VALUE]),
        }


def combine(parts: PassParts, params: OverheadParams) -> PassTime:
    """Apply the framework constants and the smooth roofline to the parts of a pass."""
    p = params.roofline_sharpness
    ec = params.gemm_efficiency
    # the achieved streaming bandwidth never exceeds the catalog's spec bandwidth
    em = np.minimum(params.bandwidth_efficiency, np.asarray(parts.bandwidth_cap, dtype=float))
    em = np.broadcast_to(em, parts.attn_memory_s.shape)
    gc = parts.gemm_compute_s / ec
    gm = parts.gemm_memory_s / em[..., None]
    gemm = (parts.gemm_count * smooth_max(gc, gm, p)).sum(axis=-1)
    acv = np.asarray(parts.attn_vector_compute_s, dtype=float) / params.vector_attention_efficiency
    ac = parts.attn_compute_s / ec + acv
    kv = (
        parts.kv_read_s
        * np.asarray(parts.kv_group, dtype=float)[..., None] ** params.kv_group_exponent
    )
    am = (parts.attn_memory_s + kv) / em
    attn = smooth_max(ac, am, p)
    ew = parts.elementwise_s / em
    comm = parts.comm_s * params.comm_efficiency
    ovh = np.broadcast_to(
        np.asarray(parts.layers, dtype=float)[..., None] * params.overhead_per_layer_s
        + params.overhead_per_step_s,
        gemm.shape,
    )
    total = gemm + attn + ew + comm + ovh
    comp = (parts.gemm_count * gc).sum(axis=-1) + ac
    mem = (parts.gemm_count * gm).sum(axis=-1) + am + ew
    k = params.time_scale
    out = [total, gemm, attn, ew, comm, ovh, comp, mem]
    if k != 1.0:
        out = [x * k for x in out]
    return PassTime(*out)


# ---------------------------------------------------------------------------------------------
# Collectives
# ---------------------------------------------------------------------------------------------
def _scale_up_domain(gpu: Accelerator) -> int:
    d = getattr(gpu, "scale_up_domain_size", None)
    return int(d) if d else 1


def collective3(
    perf: DevicePerf,
    op: str,
    size_bytes: Num,
    ranks: int,
    *,
    ranks_per_node: int | None = None,
    latency: LibraryLatency | None = None,
    custom_allreduce: bool = True,
    custom_max_bytes: Num | None = None,
) -> tuple[np.ndarray, str]:
    """Collective time ``[value, slow, fast]`` (zeros for one rank) and its basis.

    ``ranks_per_node`` members of the group share a scale-up domain (default: all);
    ``latency`` adds the collective library's small-message algorithms
    (:func:`gpuplan.forecast.comm.serving_collective_time3`).
    """
    size = np.asarray(size_bytes, dtype=float)
    if ranks <= 1:
        return np.zeros((3, *size.shape)), "measured"
    rpn = ranks if ranks_per_node is None else max(1, min(int(ranks_per_node), ranks))
    kwargs: dict[str, int] = {}
    if rpn < ranks:
        kwargs["ranks_per_node"] = rpn
    basis = perf.collective_time_s(op, 1.0, ranks, **kwargs).basis
    t3, _ = serving_collective_time3(
        perf,
        latency,
        op,
        size,
        ranks,
        ranks_per_node=rpn,
        custom_allreduce=custom_allreduce,
        custom_max_bytes=custom_max_bytes,
    )
    # [value, low, high] -> [value, slow, fast]
    return np.stack([t3[0], t3[2], t3[1]]), basis


# ---------------------------------------------------------------------------------------------
# Routed experts
# ---------------------------------------------------------------------------------------------
def expert_mask(g: Gemms) -> BoolArray:
    """Which of ``g``'s GEMMs are routed-expert GEMMs (one grouped GEMM per layer)."""
    return np.array([n.startswith("expert_") for n in g.names], dtype=bool)


def expert_compute_rows(tokens_per_expert: Num) -> FloatArray:
    """Rows the serving engine's grouped GEMM computes per expert for ``tokens_per_expert``
    routed rows (mean): padded to whole M tiles.

    From one tile of :data:`~gpuplan.forecast.flops.GROUPED_GEMM_TILE_ROWS` rows up this is
    :func:`gpuplan.forecast.flops.grouped_gemm_rows` (the training forecast's rule: half a
    tile of padding per expert on average). Below one tile a serving engine does not run a
    128-row tile for a handful of rows: its MoE GEMM profiler picks the CTA tile per
    problem size among 16- to 128-row shapes (TensorRT-LLM ``CutlassTileConfig``
    candidates of ``moe_gemm_kernels``; vLLM's fused_moe per-size ``BLOCK_SIZE_M``
    configs), so the same padding fraction applies to the smaller tile::

        rows = grouped_gemm_rows(m)                 m >= tile
        rows = m * grouped_gemm_rows(tile) / tile   m <  tile

    Continuous at one tile; padding costs compute time, never weight traffic.

    >>> [round(float(expert_compute_rows(m)), 2) for m in (0, 32, 128, 4096)]
    [0.0, 47.88, 191.5, 4159.5]
    """
    m = np.maximum(np.asarray(tokens_per_expert, dtype=float), 0.0)
    t = float(GROUPED_GEMM_TILE_ROWS)
    full = float(grouped_gemm_rows(t))
    return np.asarray(np.where(m >= t, grouped_gemm_rows(m), m * full / t), dtype=float)


def compute_rows(g: Gemms) -> FloatArray:
    """Rows each GEMM of ``g`` computes: ``m``, and :func:`expert_compute_rows` for the
    routed experts."""
    m = np.asarray(g.m, dtype=float)
    return np.where(expert_mask(g), expert_compute_rows(m), m)


# ---------------------------------------------------------------------------------------------
# Passes
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RatedGemms:
    """The GEMMs of one pass priced on one device (:meth:`DeviceRates.rated_gemms`): their
    rates and times ``(3, G)`` (compute side: 2 x computed rows x n x k FLOPs at the
    calibrated rate; memory side: weights and activations at the calibrated bandwidth),
    and their FLOPs and bytes summed over the pass. Arrays read-only."""

    gemms: Gemms
    rate: np.ndarray
    basis: str
    compute_s: np.ndarray
    memory_s: np.ndarray
    flops: float
    bytes: float


@dataclass
class DeviceRates:
    """Calibrated rates of one device for one precision, cached for many passes."""

    perf: DevicePerf
    gpu: Accelerator
    sharded: Sharded
    engine: str = "modern"
    #: speculative decoding of the replica (:mod:`gpuplan.forecast.speculative`); None: off
    speculation: Speculation | None = None
    bandwidth: np.ndarray = field(init=False)
    bandwidth_basis: str = field(init=False)
    bandwidth_cap: np.ndarray = field(init=False)
    vector_decode_attention: bool = field(init=False)
    #: the collective library's latency constants of the GPU's scale-up fabric (catalog)
    latency: LibraryLatency | None = field(init=False)
    custom_allreduce: bool = field(init=False)
    custom_allreduce_limits: tuple[float, float] = field(init=False)
    #: the engine runs routed-expert GEMMs in FP8 when the precision does (EngineProfile)
    fp8_moe: bool = field(init=False)
    #: the rates of a separate draft model (:func:`gpuplan.forecast.speculative.draft_sharded`)
    draft: DeviceRates | None = field(init=False)
    #: passes of one forecast recur (a static run's decode step and a speculative step's
    #: draft pass over the same rows): their GEMM rates and collectives at a scalar token
    #: count are kept, read-only
    _gemm_memo: dict[tuple[float, float], RatedGemms] = field(
        init=False, default_factory=dict, repr=False, compare=False
    )
    _comm_memo: dict[float, tuple[FloatArray, FloatArray, str]] = field(
        init=False, default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        dsh = draft_sharded(self.sharded, self.speculation)
        self.draft = (
            DeviceRates(self.perf, self.gpu, dsh, engine=self.engine) if dsh is not None else None
        )
        profile = engine_profile(self.engine)
        self.latency = library_latency(self.gpu)
        self.custom_allreduce = profile.custom_allreduce
        self.custom_allreduce_limits = profile.custom_allreduce_max_bytes
        self.fp8_moe = profile.fp8_moe
        est = self.perf.memory_bandwidth_bytes_per_s()
        self.bandwidth = rate3(est)
        self.bandwidth_basis = est.basis
        spec = getattr(self.gpu, "memory_bandwidth_bytes_per_s", None)
        self.bandwidth_cap = spec / self.bandwidth if spec else np.full(3, np.inf)
        self.vector_decode_attention = profile.vector_decode_attention(self.sharded)

    def vector_rate(self) -> tuple[np.ndarray, str]:
        """Calibrated FP32 CUDA-core rate (an FP32 matmul without TF32), or the catalog's
        FP32 peak when the calibration has none."""
        try:
            est = self.perf.matmul_flops_per_s(8192.0, 8192.0, 8192.0, "fp32")
            return rate3(est), est.basis
        except Exception:
            peak = getattr(self.gpu, "peak_flops_per_s", lambda _d: None)("fp32")
            if not peak:
                raise
            return np.full(3, float(peak)), "spec"

    def rated_gemms(self, tokens: float, logit_rows: float) -> RatedGemms:
        """``sh.gemms(tokens, logit_rows)`` priced (:meth:`gemm_rates`), kept per count."""
        key = (float(tokens), float(logit_rows))
        if key not in self._gemm_memo:
            self.prime([key])
        return self._gemm_memo[key]

    def prime(self, passes: Iterable[tuple[float, float]]) -> None:
        """Price the GEMMs and collectives of several passes, ``(tokens, logit_rows)`` each
        (scalar counts), in one vectorised call each, and keep them where
        :meth:`rated_gemms` and :meth:`comm` look. A forecast knows its passes before it
        prices them, and numpy's cost here is per call (~0.1 ms), not per element; the
        values are the same element by element, and so is the basis (a matmul's or a
        collective's basis does not depend on the shape)."""
        todo = list(dict.fromkeys((float(t), float(r)) for t, r in passes))
        new = [p for p in todo if p not in self._gemm_memo]
        if new:
            gs = [self.sharded.gemms(t, r) for t, r in new]
            n_g = len(gs[0].names)
            g_all = Gemms(
                gs[0].names * len(gs),
                *(
                    np.concatenate([getattr(g, f) for g in gs])
                    for f in ("m", "n", "k", "count", "weight_bytes_per_elem", "quantised")
                ),
            )
            rate, basis = self.gemm_rates(g_all)
            ab = self.sharded.precision.activation_bytes
            flops = 2.0 * g_all.m * g_all.n * g_all.k
            bytes_ = (
                g_all.n * g_all.k * g_all.weight_bytes_per_elem + g_all.m * (g_all.k + g_all.n) * ab
            )
            comp = (2.0 * compute_rows(g_all) * g_all.n * g_all.k)[None, :] / rate
            mem = bytes_[None, :] / self.bandwidth[:, None]
            for a in (rate, comp, mem):
                a.setflags(write=False)
            for j, (p, g) in enumerate(zip(new, gs, strict=True)):
                sl = slice(j * n_g, (j + 1) * n_g)
                self._gemm_memo[p] = RatedGemms(
                    g,
                    rate[:, sl],
                    basis,
                    comp[:, sl],
                    mem[:, sl],
                    float((g.count * flops[sl]).sum()),
                    float((g.count * bytes_[sl]).sum()),
                )
        toks = [t for t in dict.fromkeys(t for t, _ in todo) if t not in self._comm_memo]
        if toks:
            t3, hop, basis = self._comm(np.asarray(toks, dtype=float))
            t3.setflags(write=False)
            hop.setflags(write=False)
            for j, tok in enumerate(toks):
                self._comm_memo[tok] = (t3[:, j], hop[:, j], basis)

    def gemm_rates(self, g: Gemms) -> tuple[np.ndarray, str]:
        """Calibrated FLOP/s ``(3, G)`` of each GEMM at its shape and dtype.

        Routed-expert GEMMs of an engine without FP8 MoE kernels (``fp8_moe`` False) run at
        the activation dtype's rate when the precision's GEMMs are FP8."""
        prec = self.sharded.precision
        out = np.empty((3, len(g.names)))
        bases = []
        m = np.maximum(g.m, COMPUTE_CEILING_MIN_ROWS)
        quantised = g.quantised
        if not self.fp8_moe and prec.gemm_dtype == "fp8":
            quantised = quantised & ~expert_mask(g)
        for flag, dtype in ((True, prec.gemm_dtype), (False, prec.activation_dtype)):
            sel = quantised == flag
            if not sel.any():
                continue
            rate, basis = self.matmul_rate3(m[sel], g.n[sel], g.k[sel], dtype)
            out[:, sel] = rate
            bases.append(basis)
        return out, _worst(*bases)

    def matmul_rate3(self, m: Num, n: Num, k: Num, dtype: str) -> tuple[FloatArray, str]:
        """Calibrated GEMM FLOP/s ``[value, low, high]`` in ``dtype``.

        A dtype the calibration does not model (fp4, int8: ``gpuplan.calibration.specs.DTYPES``
        stops at fp8) scales the calibrated curve of the nearest modelled dtype (fp8, else
        bf16, else fp16 on a GPU without bf16) by the ratio of the catalog's dense peaks:
        the same fraction of peak at the same shape, the rule the training forecast uses
        (``training.gemm_rates3``). Basis ``transferred``.
        """
        from gpuplan.calibration.specs import DTYPES

        if dtype in DTYPES:
            est = self.perf.matmul_flops_per_s(m, n, k, dtype)
            return rate3(est), est.basis
        peak = getattr(self.gpu, "peak_flops_per_s", None)
        target = peak(dtype) if peak else None
        for curve in ("fp8", "bf16", "fp16"):
            base = peak(curve) if peak else None
            if not (target and base):
                continue
            est = self.perf.matmul_flops_per_s(m, n, k, curve)
            return rate3(est) * (float(target) / float(base)), _worst(est.basis, "transferred")
        est = self.perf.matmul_flops_per_s(m, n, k, dtype)  # raises the calibration's error
        return rate3(est), est.basis

    def attention_rate(self, m: Num, n: Num, k: Num) -> tuple[FloatArray, str]:
        est = self.perf.matmul_flops_per_s(
            np.maximum(np.asarray(m, float), COMPUTE_CEILING_MIN_ROWS),
            np.maximum(np.asarray(n, float), 1.0),
            np.asarray(k, float),
            self.sharded.precision.activation_dtype,
        )
        return rate3(est), est.basis

    def index_rate(self, queries: Num, n: Num) -> tuple[FloatArray, str]:
        """A DSA indexer's score rate for ``queries`` query tokens over ``n`` cached keys: a
        GEMM of every query's heads (``queries x heads`` rows, the keys being one per
        token) against the keys, ``indexer_head_dim`` deep, in FP8 where the GPU has FP8
        tensor cores (the reference's ``fp8_index``; DeepGEMM's ``fp8_mqa_logits``), else
        at the activation dtype."""
        d = self.sharded.arch.dsa
        if d is None:
            raise ValueError("index_rate needs a DSA model")
        dtype = self.sharded.precision.activation_dtype
        if dtype_peak(self.gpu, "fp8"):
            dtype = "fp8"
        est = self.perf.matmul_flops_per_s(
            d.indexer_heads * np.maximum(np.asarray(queries, float), 1.0),
            np.maximum(np.asarray(n, float), 1.0),
            float(d.indexer_head_dim),
            dtype,
        )
        return rate3(est), est.basis

    @property
    def replica_in_one_domain(self) -> bool:
        return self.sharded.layout.gpus <= _scale_up_domain(self.gpu)

    @property
    def domain_size(self) -> int:
        return _scale_up_domain(self.gpu)

    def _coll(self, op: str, size: Num, ranks: int) -> tuple[FloatArray, str]:
        return collective3(
            self.perf,
            op,
            size,
            ranks,
            ranks_per_node=min(ranks, self.domain_size),
            latency=self.latency,
            custom_allreduce=self.custom_allreduce,
            custom_max_bytes=custom_allreduce_max_bytes(ranks, self.custom_allreduce_limits),
        )

    def comm(self, tokens: Num) -> tuple[FloatArray, FloatArray, str]:
        """Per-pass collective time of the stage and the time of one PP hop, ``(3, *shape)``
        for ``tokens`` of any shape. A TP group larger than the scale-up domain spans
        ``tp / domain`` nodes (the hierarchical model, and the library's network steps)."""
        if np.ndim(tokens) == 0:
            key = float(tokens)
            hit = self._comm_memo.get(key)
            if hit is None:
                t, hop, basis = self._comm(tokens)
                t.setflags(write=False)
                hop.setflags(write=False)
                hit = self._comm_memo[key] = (t, hop, basis)
            return hit
        return self._comm(tokens)

    def _comm(self, tokens: Num) -> tuple[FloatArray, FloatArray, str]:
        sh = self.sharded
        a, lay = sh.arch, sh.layout
        ab = sh.precision.activation_bytes
        tokens = np.asarray(tokens, dtype=float)
        act = tokens * a.hidden * ab
        t = np.zeros((3, *tokens.shape))
        bases = ["measured"]
        n_ar = sh.tp_allreduces_per_pass()
        if n_ar:
            c, b = self._coll("all_reduce", act, lay.tp)
            t = t + n_ar * c
            bases.append(b)
        if lay.ep > 1 and sh.moe_layers_per_stage:
            a2a_size = tokens * a.top_k * a.hidden * ab / lay.ep
            c, b = self._coll("all_to_all", a2a_size, lay.ep)
            t = t + 2 * sh.moe_layers_per_stage * c
            bases.append(b)
            if lay.tp // lay.ep > 1:
                c, b = self._coll("all_reduce", act, lay.tp // lay.ep)
                t = t + sh.moe_layers_per_stage * c
        hop = np.zeros((3, *tokens.shape))
        if lay.pp > 1:
            hop, b = collective3(
                self.perf,
                "p2p",
                act,
                2,
                ranks_per_node=2 if self.replica_in_one_domain else 1,
                latency=self.latency,
            )
            bases.append(b)
        return t, hop, _worst(*bases)


def pass_parts(
    rates: DeviceRates,
    *,
    tokens: float,
    logit_rows: float,
    attn_flops: float,
    attn_bytes: float,
    attn_shape: tuple[float, float, float],
    kv_read_bytes: float = 0.0,
    decode_attn_flops: float = 0.0,
    state_bytes: float = 0.0,
    index_flops: float = 0.0,
    index_prefill: tuple[float, float] | None = None,
    attn_rate: tuple[FloatArray, str] | None = None,
) -> tuple[PassParts, np.ndarray]:
    """Parts of one forward pass over ``tokens`` tokens (and the PP hop time).

    Parameters
    ----------
    tokens:
        Tokens processed by the GEMMs in this pass (prefill tokens + decoding sequences).
    logit_rows:
        Rows that need logits (one per sequence that emits a token).
    attn_flops, attn_bytes:
        Attention FLOPs and other attention bytes (KV writes, Q/O) on one GPU, whole stage.
    kv_read_bytes:
        KV-cache bytes read by decode attention (once per KV head), whole stage.
    decode_attn_flops:
        Decode-attention FLOPs, run by the engine's decode kernel: at the tensor-core rate
        (``attn_shape`` of a decode step) or, for a vector kernel, at the FP32 CUDA-core rate.
    index_flops, index_prefill:
        A DSA indexer's score FLOPs at the tensor-core rate of its shape
        (:meth:`DeviceRates.index_rate`): ``index_flops`` for ``attn_shape[0]`` queries over
        ``attn_shape[1]`` keys, ``index_prefill`` = (FLOPs, chunk tokens) of the prefill
        chunks a mixed pass carries besides its decode rows.
    state_bytes:
        A hybrid model's recurrent (Mamba-2) state read and written by the decoding
        sequences, whole stage: streamed element-wise, at the element-wise bandwidth.
    attn_shape:
        ``(m, n, k)`` of the attention matmuls, for the calibrated rate at that shape.
    attn_rate:
        ``rates.attention_rate(*attn_shape)`` when the caller has it already. The GEMM
        rates and collectives come from ``rates`` (:meth:`DeviceRates.rated_gemms`,
        :meth:`DeviceRates.comm`), which keep those of several passes priced in one
        vectorised call (:meth:`DeviceRates.prime`).
    """
    sh = rates.sharded
    rg = rates.rated_gemms(tokens, logit_rows)
    g = rg.gemms
    arate, b_attn = attn_rate if attn_rate is not None else rates.attention_rate(*attn_shape)
    attn_v = np.zeros(3)
    if rates.vector_decode_attention:
        vrate, b_vec = rates.vector_rate()
        attn_v = decode_attn_flops / vrate
        attn_c = attn_flops / arate
        b_attn = _worst(b_attn, b_vec)
    else:
        attn_c = (attn_flops + decode_attn_flops) / arate
    if index_flops:
        irate, b_idx = rates.index_rate(attn_shape[0], attn_shape[1])
        attn_c = attn_c + index_flops / irate
        b_attn = _worst(b_attn, b_idx)
    if index_prefill is not None and index_prefill[0]:
        irate, b_idx = rates.index_rate(index_prefill[1], attn_shape[1])
        attn_c = attn_c + index_prefill[0] / irate
        b_attn = _worst(b_attn, b_idx)
        index_flops += index_prefill[0]
    attn_m = attn_bytes / rates.bandwidth
    ew = (tokens * sh.elementwise_bytes_per_token() + state_bytes) / rates.bandwidth
    comm_s, hop, b_comm = rates.comm(tokens)
    parts = PassParts(
        names=g.names,
        gemm_compute_s=rg.compute_s,
        gemm_memory_s=rg.memory_s,
        gemm_count=g.count,
        attn_compute_s=np.asarray(attn_c, float).reshape(3),
        attn_memory_s=np.asarray(attn_m, float).reshape(3),
        kv_read_s=np.asarray(kv_read_bytes / rates.bandwidth, float).reshape(3),
        kv_group=sh.kv_group,
        bandwidth_cap=rates.bandwidth_cap,
        attn_vector_compute_s=np.asarray(attn_v, float).reshape(3),
        elementwise_s=np.asarray(ew, float).reshape(3),
        comm_s=comm_s,
        layers=sh.overhead_layers,
        basis=_worst(rg.basis, b_attn, rates.bandwidth_basis, b_comm),
        flops=float(rg.flops + attn_flops + decode_attn_flops + index_flops),
        bytes=float(rg.bytes + attn_bytes + kv_read_bytes + state_bytes),
    )
    return parts, hop


def prefill_pass(
    rates: DeviceRates, batch: float, seq_len: float, prefix: float = 0.0
) -> tuple[PassParts, np.ndarray]:
    """Parts of the prefill of ``batch`` prompts of ``seq_len`` tokens (after ``prefix`` cached)."""
    sh = rates.sharded
    kv = sh.kv_bytes_per_ctx_token_stage()
    return pass_parts(
        rates,
        tokens=batch * seq_len,
        logit_rows=batch,
        attn_flops=float(batch * sh.attention_flops_prefill(seq_len, prefix)),
        attn_bytes=float(batch * seq_len * kv),
        kv_read_bytes=float(sh.decode_kv_read_bytes(batch, prefix)),
        index_flops=float(batch * sh.index_flops_prefill(seq_len, prefix)),
        attn_shape=(seq_len, seq_len + prefix, sh.arch.qk_head_dim),
    )


def decode_pass(
    rates: DeviceRates, batch: float, ctx: float, spread: float = 0.0, queries: float = 1.0
) -> tuple[PassParts, np.ndarray]:
    """Parts of one decode step of ``batch`` sequences with ``ctx`` cached tokens each, or
    averaged over contexts ``ctx +- spread`` (a local layer reads its window or the open
    part of its chunk, :meth:`Sharded.attended_ctx`). ``queries`` > 1: a speculative
    verification pass, that many tokens per sequence through the GEMMs and the attention's
    compute over one read of the KV cache."""
    sh = rates.sharded
    group = max(1, sh.q_heads_per_gpu // max(1, sh.kv_heads_per_gpu))
    return pass_parts(
        rates,
        tokens=batch * queries,
        logit_rows=batch * queries,
        attn_flops=0.0,
        decode_attn_flops=queries * sh.decode_attention_flops(batch, ctx, spread),
        attn_bytes=0.0,
        kv_read_bytes=sh.decode_kv_read_bytes(batch, ctx, spread),
        index_flops=queries * batch * ctx * sh.index_flops_per_ctx_token(),
        state_bytes=batch * sh.state_traffic_bytes_per_seq_stage(),
        attn_shape=(group * queries, ctx, sh.arch.qk_head_dim),
    )


# ---------------------------------------------------------------------------------------------
# Whole requests
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StaticRunParts:
    """A static batch: one prefill of the whole batch, then ``steps`` decode steps.

    Decode attention is linear in the context length and the smooth roofline is homogeneous
    of degree one, so the sum over the steps equals ``steps`` times the step at the mean
    context (exactly, not as an approximation).
    """

    prefill: PassParts
    decode: PassParts
    hop_prefill_s: np.ndarray
    hop_decode_s: np.ndarray
    batch: float
    input_tokens: float
    output_tokens: float
    pp: int
    micro_batches: int

    @property
    def steps(self) -> float:
        return max(self.output_tokens - 1.0, 0.0)


def _micro_batches(batch: float, pp: int) -> int:
    """Micro-batches of a static batch through ``pp`` stages: ``min(batch, pp)`` (GPipe,
    Huang et al. 2019)."""
    return max(1, min(int(batch), pp))


def static_run_passes(pp: int, batch: float, input_tokens: float) -> list[tuple[float, float]]:
    """``(tokens, logit_rows)`` of the passes of :func:`static_run_parts` (its prefill, its
    decode step), for :meth:`DeviceRates.prime`."""
    b = batch / _micro_batches(batch, pp)
    return [(b * input_tokens, b), (b, b)]


def static_run_parts(
    rates: DeviceRates, batch: int, input_tokens: int, output_tokens: int
) -> StaticRunParts:
    """Parts of a static batch of ``batch`` requests (TensorRT-LLM ``gptSessionBenchmark``).

    With PP the batch runs as ``min(batch, pp)`` micro-batches (GPipe, Huang et al. 2019).
    """
    pp = rates.sharded.layout.pp
    mb = _micro_batches(batch, pp)
    pre, hop_p = prefill_pass(rates, batch / mb, input_tokens)
    mean_ctx = input_tokens + (output_tokens) / 2.0
    dec, hop_d = decode_pass(rates, batch / mb, mean_ctx, output_tokens / 2.0)
    return StaticRunParts(
        pre, dec, hop_p, hop_d, float(batch), float(input_tokens), float(output_tokens), pp, mb
    )


@dataclass(frozen=True)
class StaticRunTime:
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    total_s: np.ndarray
    throughput_tokens_per_s: np.ndarray
    prefill: PassTime
    decode: PassTime


def static_run_time(run: StaticRunParts, params: OverheadParams) -> StaticRunTime:
    """TTFT, TPOT and output tokens/s of a static batch (replica-wide), ``(3,)`` each.

    Prefill of the batch through ``pp`` stages in ``mb`` micro-batches takes
    ``(pp + mb - 1)`` stage passes; each decode step of all sequences takes ``pp`` stage
    passes of a micro-batch (the pipeline holds ``mb <= pp`` micro-batches).
    """
    pre = combine(run.prefill, params)
    dec = combine(run.decode, params)
    pp, mb = run.pp, run.micro_batches
    ttft = (pp + mb - 1) * pre.total_s + (pp - 1) * run.hop_prefill_s
    tpot = pp * dec.total_s + (pp - 1) * run.hop_decode_s
    total = ttft + run.steps * tpot
    thr = run.batch * run.output_tokens / total
    return StaticRunTime(ttft, tpot, total, thr, pre, dec)


#: Gauss quadrature nodes over the Poisson count (exact for a cost polynomial of degree 9)
_POISSON_NODES = 5
#: means below which the count is 0 or 1 (0.0001: P(2) is 5e-9) and above which it is
#: normal to within the table's step; the table between them is log-spaced, 4% a step
_POISSON_TABLE_MIN, _POISSON_TABLE_MAX, _POISSON_TABLE_STEPS = 1e-4, 1e6, 601


def _poisson_gauss_rule(mu: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Gauss nodes and weights of Poisson(mu) for each mean (Golub and Welsch 1969): the
    eigenvalues and squared first eigenvector components of the Jacobi matrix of the
    Charlier polynomials, orthogonal under Poisson(mu) with recurrence ``a_k = k + mu``,
    ``b_k = k * mu`` (Chihara 1978)."""
    n = _POISSON_NODES
    i = np.arange(n)
    jac = np.zeros((mu.size, n, n))
    jac[:, i, i] = i + mu[:, None]
    off = np.sqrt(i[1:] * mu[:, None])
    jac[:, i[1:], i[:-1]] = off
    jac[:, i[:-1], i[1:]] = off
    nodes, vecs = np.linalg.eigh(jac)
    return nodes, vecs[:, 0, :] ** 2


def _poisson_table() -> tuple[FloatArray, FloatArray, FloatArray]:
    """The rule on a log grid of means, as weights ``w`` and ``u = w * z`` with the nodes in
    standard units ``z = (node - mu) / sqrt(mu)``: interpolating ``w`` and ``u`` linearly
    keeps the weights summing to one and the mean exact (``sum u = 0`` at every grid point)."""
    log_mu = np.linspace(
        math.log(_POISSON_TABLE_MIN), math.log(_POISSON_TABLE_MAX), _POISSON_TABLE_STEPS
    )
    mu = np.exp(log_mu)
    nodes, w = _poisson_gauss_rule(mu)
    u = w * (nodes - mu[:, None]) / np.sqrt(mu)[:, None]
    u -= w * (u.sum(axis=1) / w.sum(axis=1))[:, None]  # the eigen-solver's rounding
    return log_mu, w / w.sum(axis=1, keepdims=True), u


_POISSON_LOG_MU, _POISSON_W, _POISSON_U = _poisson_table()


def prompts_per_iteration(
    mean: Num, tail: float = 1e-4, *, per_row: bool = False
) -> tuple[FloatArray, FloatArray]:
    """Counts of prompts (or prompt chunks) landing in one iteration and their weights,
    both ``mean.shape + (K,)``, the weights of each row summing to one.

    In steady state the ``batch / output`` requests that finish per iteration finish at
    independent times, so the prompts replacing them arrive as a Poisson count per iteration
    (the same count an open-loop Poisson load gives, rate x iteration time). An iteration's
    time is convex in the tokens it holds, so its mean is taken over that count, not at the
    mean count (Jensen): a prompt is prefilled whole (a chunk at a time) in the iteration it
    arrives, never as a dribble of ``input / output`` tokens per step, which matters where a
    pass's cost is not linear in its tokens (MoE decode touches the experts its tokens route
    to; a 32-token dribble reads nearly every expert of DeepSeek-V3 in every step).

    The expectation is a five-node Gauss quadrature over Poisson(mean)
    (:func:`_poisson_gauss_rule`, exact for a polynomial of degree 9 in the count),
    interpolated from a table of means (the mean stays exact, the variance within 1%);
    means under 1e-4 take the counts 0 and 1, means over 1e6 the normal limit. Nodes that
    no row gives a weight, or a share of its mean, above ``tail`` are dropped (and the rest
    renormalised); with ``per_row`` each row also zeroes its own such nodes, so that a row's
    expectation does not depend on the other rows of the call (the fleet search solves
    every layout's rates in one call: a layout's answer must not depend on the others').
    """
    mu = np.maximum(np.asarray(mean, dtype=float), 0.0)
    flat = mu.reshape(-1)
    t = (np.log(np.clip(flat, _POISSON_TABLE_MIN, _POISSON_TABLE_MAX)) - _POISSON_LOG_MU[0]) / (
        _POISSON_LOG_MU[1] - _POISSON_LOG_MU[0]
    )
    j = np.minimum(t.astype(int), _POISSON_TABLE_STEPS - 2)
    a = (t - j)[:, None]
    w = (1 - a) * _POISSON_W[j] + a * _POISSON_W[j + 1]
    u = (1 - a) * _POISSON_U[j] + a * _POISSON_U[j + 1]
    counts = np.maximum(flat[:, None] + np.sqrt(flat)[:, None] * u / w, 0.0)
    small = flat < _POISSON_TABLE_MIN
    if small.any():  # counts 0 and 1, the mean exact
        counts[small] = np.arange(_POISSON_NODES, dtype=float)
        w[small] = 0.0
        w[small, 0] = 1.0 - flat[small]
        w[small, 1] = flat[small]
    w = w.reshape(*mu.shape, _POISSON_NODES)
    counts = counts.reshape(w.shape)
    # a node stays while some row gives it a weight, or a share of its mean, above tail
    weighty = (w > tail) | (w * counts > tail * mu[..., None])
    keep = weighty.reshape(-1, _POISSON_NODES).any(axis=0)
    if per_row:
        w = np.where(weighty, w, 0.0)
    w = w[..., keep]
    return counts[..., keep], w / w.sum(axis=-1, keepdims=True)


def prefill_chunks(input_tokens: float, chunk_tokens: float) -> tuple[int, float]:
    """Chunks a prompt is prefilled in, and tokens per chunk (chunked prefill,
    Sarathi-Serve, Agrawal et al. 2024: at most ``chunk_tokens`` prompt tokens a pass)."""
    m = max(1, math.ceil(max(input_tokens, 1.0) / max(chunk_tokens, 1.0)))
    return m, max(input_tokens, 0.0) / m


@lru_cache(maxsize=64)
def _iteration_mix(
    batch: float, input_tokens: float, output_tokens: float, chunk_tokens: float
) -> tuple[int, float, FloatArray, FloatArray]:
    """Chunks per prompt, tokens per chunk, and the counts of chunks an iteration holds
    with their weights (:func:`prompts_per_iteration`), for :func:`continuous_iteration`
    and :func:`continuous_passes` (kept: a forecast asks for the same mix twice, to prime
    its passes and to price them; the arrays are read-only)."""
    m, c = prefill_chunks(input_tokens, chunk_tokens)
    ks, w = prompts_per_iteration(batch / max(output_tokens, 1.0) * m)
    ks.setflags(write=False)
    w.setflags(write=False)
    return m, c, ks, w


def continuous_passes(
    batch: float,
    input_tokens: float,
    output_tokens: float,
    chunk_tokens: float,
    queries: float = 1.0,
) -> list[tuple[float, float]]:
    """``(tokens, logit_rows)`` of the passes :func:`continuous_iteration` averages, for
    :meth:`DeviceRates.prime`."""
    _, c, ks, _ = _iteration_mix(batch, input_tokens, output_tokens, chunk_tokens)
    rows = batch * queries
    return [(rows + k * c, rows) for k in ks]


def continuous_iteration(
    rates: DeviceRates,
    params: OverheadParams,
    batch: float,
    input_tokens: float,
    output_tokens: float,
    chunk_tokens: float,
    queries: float = 1.0,
) -> tuple[PassTime, np.ndarray]:
    """Time of the average continuous-batching iteration with ``batch`` running requests
    (and the mean PP hop); ``queries`` tokens per decoding request in a speculative
    verification pass (:func:`decode_pass`).

    In steady state (Orca, Yu et al. 2022; vLLM) each iteration decodes one token of every
    running request and, since ``batch / output_tokens`` requests finish per iteration and
    are replaced, prefills ``batch * input / output`` prompt tokens on average. They come as
    whole prompt chunks (:func:`prefill_chunks`), a Poisson count of them per iteration
    (:func:`prompts_per_iteration`): the iteration holding ``k`` chunks runs ``batch + k *
    chunk`` tokens; the result is the expectation over ``k``. Mean context of a decoding
    request: ``input + output / 2``.
    """
    sh = rates.sharded
    o = max(output_tokens, 1.0)
    m, c, ks, w = _iteration_mix(batch, input_tokens, output_tokens, chunk_tokens)
    mean_ctx = input_tokens + o / 2.0
    kv = sh.kv_bytes_per_ctx_token_stage()
    group = max(1, sh.q_heads_per_gpu // max(1, sh.kv_heads_per_gpu))
    # a chunk carries 1/m of its prompt's causal attention (chunk i of m attends to the i-1
    # before it: the sum over chunks is the whole prompt's)
    chunk_attn = float(sh.attention_flops_prefill(input_tokens)) / m
    chunk_index = float(sh.index_flops_prefill(input_tokens)) / m
    rows = batch * queries
    # every pass's collectives and GEMM rates in one call each
    rates.prime((rows + k * c, rows) for k in ks)
    attn_shape = (max(group, 1) * queries, mean_ctx, sh.arch.qk_head_dim)
    attn_rate = rates.attention_rate(*attn_shape)
    times: list[PassTime] = []
    hops: list[np.ndarray] = []
    for k in ks:
        parts, hop = pass_parts(
            rates,
            tokens=rows + k * c,
            logit_rows=rows,
            attn_flops=k * chunk_attn,
            decode_attn_flops=queries * sh.decode_attention_flops(batch, mean_ctx, o / 2.0),
            attn_bytes=k * c * kv,
            kv_read_bytes=sh.decode_kv_read_bytes(batch, mean_ctx, o / 2.0),
            state_bytes=batch * sh.state_traffic_bytes_per_seq_stage(),
            index_flops=queries * batch * mean_ctx * sh.index_flops_per_ctx_token(),
            index_prefill=(k * chunk_index, c),
            attn_shape=attn_shape,
            attn_rate=attn_rate,
        )
        times.append(combine(parts, params))
        hops.append(np.asarray(hop, dtype=float))
    return weighted_time(w, times), sum(wk * h for wk, h in zip(w, hops, strict=True))


def lm_head_time(parts: PassParts, params: OverheadParams) -> PassTime:
    """The output projection (the ``lm_head`` GEMM) of a pass alone, as :func:`combine`
    prices it (a GEMM: its compute and memory sides, the time scale)."""
    is_lm = np.array([n == "lm_head" for n in parts.names])
    em = np.minimum(params.bandwidth_efficiency, np.asarray(parts.bandwidth_cap, dtype=float))
    em = np.broadcast_to(em, parts.attn_memory_s.shape)
    cnt = parts.gemm_count * is_lm
    gc = parts.gemm_compute_s / params.gemm_efficiency
    gm = parts.gemm_memory_s / em[..., None]
    k = params.time_scale
    gemm = (cnt * smooth_max(gc, gm, params.roofline_sharpness)).sum(axis=-1) * k
    zero = np.zeros_like(gemm)
    comp = (cnt * gc).sum(axis=-1) * k
    mem = (cnt * gm).sum(axis=-1) * k
    return PassTime(gemm, gemm, zero, zero, zero, zero, comp, mem)


def weighted_time(weights: Sequence[float] | FloatArray, times: Sequence[PassTime]) -> PassTime:
    """``sum(w * t)`` of passes, part by part (an expectation, or a step made of passes)."""
    names = [f.name for f in fields(PassTime)]
    return PassTime(
        *[sum(wk * getattr(t, n) for wk, t in zip(weights, times, strict=True)) for n in names]
    )


def speculative_passes(
    batch: float,
    input_tokens: float,
    output_tokens: float,
    chunk_tokens: float,
    spec: Speculation,
) -> list[tuple[float, float]]:
    """``(tokens, logit_rows)`` of the passes :func:`speculative_iteration` prices on the
    target's rates (its step over ``queries`` tokens a request, the verification, a draft
    head's passes over one and over ``tree_width`` tokens a request), for
    :meth:`DeviceRates.prime`."""
    q = float(spec.queries)
    passes = continuous_passes(batch, input_tokens, output_tokens, chunk_tokens, q)
    return passes + [(batch * x, batch * x) for x in (q, 1.0, float(spec.tree_width))]


def speculative_iteration(
    rates: DeviceRates,
    params: OverheadParams,
    batch: float,
    input_tokens: float,
    output_tokens: float,
    chunk_tokens: float,
) -> tuple[PassTime, np.ndarray, SpeculativeStep]:
    """:func:`continuous_iteration` with speculative decoding (:attr:`DeviceRates.speculation`),
    per emitted token of every decoding request, as :meth:`StepCostModel.time` counts it:
    the average step (verification over ``k + 1`` tokens per request, its share of prompt
    chunks, ``k`` draft passes) less ``1 - 1/tau`` of its decode part."""
    spec = rates.speculation
    if spec is None:
        raise ValueError("speculative_iteration needs DeviceRates.speculation")
    q = float(spec.queries)
    k = float(spec.draft_tokens)
    w = float(spec.tree_width)
    o = max(output_tokens, 1.0)
    mean_ctx = input_tokens + o / 2.0
    step, hop = continuous_iteration(
        rates, params, batch, input_tokens, output_tokens, chunk_tokens, queries=q
    )
    verify = combine(decode_pass(rates, batch, mean_ctx, o / 2.0, queries=q)[0], params)
    keep = 1.0 - 1.0 / spec.acceptance_length
    # a step's draft passes: the first over one token per request, the k - 1 others over the
    # tree's w kept tokens per request (w queries over one read of the context)
    if rates.draft is not None:
        # a separate draft model: passes of its own, its first over the prompt chunks too (it
        # keeps a KV cache of every prompt)
        one = combine(decode_pass(rates.draft, batch, mean_ctx, o / 2.0)[0], params)
        wide = (
            combine(decode_pass(rates.draft, batch, mean_ctx, o / 2.0, queries=w)[0], params)
            if w > 1
            else one
        )
        first, _ = continuous_iteration(
            rates.draft, params, batch, input_tokens, output_tokens, chunk_tokens
        )
        per_token = weighted_time(
            [1.0, 1.0, k - 1.0, -keep, -keep, -keep * (k - 1.0)],
            [step, first, wide, verify, one, wide],
        )
        drafts = one.total_s + (k - 1.0) * wide.total_s
    else:
        # a head's pass: draft_layers / layers of a decode pass and the whole LM head
        d = spec.head_share(rates.sharded.arch.layers)
        one_p = decode_pass(rates, batch, mean_ctx, o / 2.0)[0]
        wide_p = decode_pass(rates, batch, mean_ctx, o / 2.0, queries=w)[0] if w > 1 else one_p
        passes = [combine(one_p, params), lm_head_time(one_p, params)]
        passes += [combine(wide_p, params), lm_head_time(wide_p, params)] if w > 1 else passes[:2]
        head = [d, 1.0 - d, (k - 1.0) * d, (k - 1.0) * (1.0 - d)]
        per_token = weighted_time(
            [1.0, *head, -keep, *(-keep * x for x in head)], [step, *passes, verify, *passes]
        )
        drafts = weighted_time(head, passes).total_s
    draft_one = drafts / max(k, 1.0)
    detail = SpeculativeStep(
        verify_s=verify.total_s,
        draft_s=draft_one,
        step_s=step.total_s + drafts,
        tokens_per_step=spec.acceptance_length,
    )
    return per_token, hop, detail


@dataclass(frozen=True)
class SpeculativeStep:
    """A speculative decode step's parts ``(3,)``: its verification pass (decode only), one
    draft pass, the whole average step (with its prompt chunks) and the tokens it emits."""

    verify_s: np.ndarray
    draft_s: np.ndarray
    step_s: np.ndarray
    tokens_per_step: float

    def as_dict(self) -> dict[str, float]:
        return {
            "verify_pass_s": float(self.verify_s[VALUE]),
            "draft_pass_s": float(self.draft_s[VALUE]),
            "step_s": float(self.step_s[VALUE]),
            "tokens_per_step": self.tokens_per_step,
        }


# ---------------------------------------------------------------------------------------------
# A fast iteration-cost model for the serving simulation
# ---------------------------------------------------------------------------------------------
@dataclass
class StepCostModel:
    """Iteration time of one replica as a cheap function of what the iteration holds.

    The GEMM, element-wise and communication parts depend on the number of tokens only and
    are tabulated on a geometric grid (one vectorised call to the calibration); attention
    is linear in the cached context and in the prefill attention FLOPs. Times are the
    ``[value, slow, fast]`` scenarios; :meth:`time` returns one scenario.
    """

    grid_tokens: np.ndarray
    log_grid: np.ndarray
    base_s: np.ndarray  # (3, len(grid)) gemms + elementwise + comm + overhead, one stage
    lm_s: np.ndarray  # (3, len(grid)) LM head by rows that need logits
    attn_s_per_ctx_token: np.ndarray  # (3,) decode attention per cached token
    state_s_per_row: np.ndarray  # (3,) a hybrid model's recurrent state, read + written per row
    attn_s_per_prefill_flop: np.ndarray  # (3,)
    kv_s_per_prefill_token: np.ndarray  # (3,)
    stage_factor: float
    hop_s: np.ndarray  # (3,)
    max_tokens: float
    pp: int
    #: local attention: a sliding window or DSA top-k (:attr:`Sharded.window`) or a chunk
    #: (:attr:`Sharded.chunk`), the share of the attention layers that have it, and the
    #: prefill attention FLOPs of one query-key pair
    window: float | None = None
    chunk: float | None = None
    local_fraction: float = 0.0
    pair_flops: float = 0.0
    #: a DSA model's indexer (it scores every cached key; the attention itself reads the
    #: ``topk``): its time per causal query-key pair of a prefill and per cached token of a
    #: decoding sequence
    index_s_per_pair: np.ndarray = field(default_factory=lambda: np.zeros(3))
    index_s_per_ctx_token: np.ndarray = field(default_factory=lambda: np.zeros(3))
    #: speculative decoding (:attr:`DeviceRates.speculation`), and one draft-head pass as a
    #: share of a one-token decode pass of the target, its LM head aside
    #: (:meth:`Speculation.head_share`)
    speculation: Speculation | None = None
    head_share: float = 0.0
    #: a separate draft model's own cost model (one token per pass, no speculation)
    draft: StepCostModel | None = None
    #: decode attention per cached token of a verification pass: its ``k + 1`` queries run
    #: ``k + 1`` times the compute over one read of the KV cache
    attn_s_per_ctx_token_verify: np.ndarray = field(default_factory=lambda: np.zeros(3))

    @classmethod
    def build(
        cls,
        rates: DeviceRates,
        params: OverheadParams,
        *,
        max_tokens: float,
        typical_prompt: float = 1024.0,
        points: int = 48,
    ) -> StepCostModel:
        sh = rates.sharded
        spec = rates.speculation
        wide = float(max(spec.queries, spec.tree_width)) if spec is not None else 1.0
        draft = (
            cls.build(
                rates.draft,
                params,
                max_tokens=max_tokens * spec.tree_width,
                typical_prompt=typical_prompt,
            )
            if rates.draft is not None and spec is not None
            else None
        )
        if spec is not None:  # a verification pass runs its tokens per decoding row, a tree's
            # draft passes their width
            top = max(max_tokens, 2.0)
            points = int(np.ceil(points * np.log(top * wide) / np.log(top)))
            max_tokens = top * wide
        grid = np.unique(np.round(np.geomspace(1.0, max(max_tokens, 2.0), points)))
        g_all = [sh.gemms(float(t), float(t)) for t in grid]
        # one calibration call per dtype for the whole grid
        names = g_all[0].names
        m = np.concatenate([g.m for g in g_all])
        n = np.concatenate([g.n for g in g_all])
        k = np.concatenate([g.k for g in g_all])
        cnt = np.concatenate([g.count for g in g_all])
        wbe = np.concatenate([g.weight_bytes_per_elem for g in g_all])
        q = np.concatenate([g.quantised for g in g_all])
        big = Gemms(names * len(grid), m, n, k, cnt, wbe, q)
        rate, _ = rates.gemm_rates(big)
        ab = sh.precision.activation_bytes
        flops = 2 * compute_rows(big) * n * k
        bytes_ = n * k * wbe + m * (k + n) * ab
        em = np.minimum(params.bandwidth_efficiency, rates.bandwidth_cap)
        bw = (rates.bandwidth * em)[:, None]
        pcomb = params.roofline_sharpness
        per = cnt * smooth_max(flops / rate / params.gemm_efficiency, bytes_ / bw, pcomb)
        per = per.reshape(3, len(grid), len(names))
        is_lm = np.array([nm == "lm_head" for nm in names])
        gemm = per[:, :, ~is_lm].sum(axis=-1)
        lm = per[:, :, is_lm].sum(axis=-1)
        ew = grid[None, :] * sh.elementwise_bytes_per_token() / bw
        comm = rates.comm(grid)[0] * params.comm_efficiency
        ovh = sh.overhead_layers * params.overhead_per_layer_s + params.overhead_per_step_s
        ts = params.time_scale
        base = (gemm + ew + comm + ovh) * ts
        lm = lm * ts
        # attention: decode streams KV (memory side), prefill is compute-bound
        group = max(1, sh.q_heads_per_gpu // max(1, sh.kv_heads_per_gpu))
        kv = sh.kv_bytes_per_ctx_token_stage()
        dflops = sh.attention_flops_decode_per_ctx_token()
        drate, _ = rates.attention_rate(group, typical_prompt, sh.arch.qk_head_dim)
        prate, _ = rates.attention_rate(typical_prompt, typical_prompt, sh.arch.qk_head_dim)
        bwv = rates.bandwidth * em
        kv_read = kv * sh.kv_group**params.kv_group_exponent
        d_comp: FloatArray
        if rates.vector_decode_attention:
            vrate, _ = rates.vector_rate()
            d_comp = dflops / vrate / params.vector_attention_efficiency
        else:
            d_comp = dflops / drate / params.gemm_efficiency
        attn_ctx = smooth_max(d_comp, kv_read / bwv, pcomb) * ts
        index_ctx: FloatArray = np.zeros(3)
        index_pair: FloatArray = np.zeros(3)
        if sh.arch.dsa is not None:  # the indexer's scores over every cached key
            drate_i, _ = rates.index_rate(1.0, typical_prompt)
            prate_i, _ = rates.index_rate(typical_prompt, typical_prompt)
            i_flops = sh.index_flops_per_ctx_token()
            i_comp = i_flops / drate_i / params.gemm_efficiency
            index_ctx = smooth_max(i_comp, sh.index_bytes_per_ctx_token_stage() / bwv, pcomb) * ts
            index_pair = i_flops / prate_i / params.gemm_efficiency * ts
        attn_pf = ts / prate / params.gemm_efficiency
        kv_pf = ts * kv / bwv
        _, hop, _ = rates.comm(1.0)
        lay = sh.layout
        return cls(
            grid_tokens=grid,
            log_grid=np.log(grid),
            base_s=base,
            lm_s=lm,
            attn_s_per_ctx_token=np.asarray(attn_ctx, float),
            state_s_per_row=np.asarray(ts * sh.state_traffic_bytes_per_seq_stage() / bwv, float),
            attn_s_per_prefill_flop=np.asarray(attn_pf, float),
            kv_s_per_prefill_token=np.asarray(kv_pf, float),
            stage_factor=float(lay.pp),
            hop_s=hop,
            max_tokens=float(grid[-1]),
            pp=lay.pp,
            window=sh.window,
            chunk=sh.chunk,
            local_fraction=sh.local_attention_fraction,
            pair_flops=float(sh.attention_flops_prefill(1.0, 0.0)) * 2.0,
            index_s_per_pair=np.asarray(index_pair, float),
            index_s_per_ctx_token=np.asarray(index_ctx, float),
            speculation=spec,
            head_share=spec.head_share(sh.arch.layers) if spec else 0.0,
            draft=draft,
            attn_s_per_ctx_token_verify=np.asarray(
                smooth_max(spec.queries * d_comp, kv_read / bwv, pcomb) * ts if spec else attn_ctx,
                float,
            )
            * np.ones(3),
        )

    def _spec_decode(self, r: FloatArray, ctx: Num, scenario: int) -> tuple[FloatArray, FloatArray]:
        """``(decode part with its drafts, the drafts)`` of a speculative step over ``r``
        rows holding ``ctx`` cached tokens (:meth:`time`): the two passes of
        :meth:`_pass_time`, written out on one stage without local attention (the same
        sums without its general terms: the analytic search calls this most)."""
        spec = self.speculation
        assert spec is not None
        q = float(spec.queries)
        k = float(spec.draft_tokens)
        w = float(spec.tree_width)
        wr = w * r
        if self.draft is not None:  # the draft model's passes: one row, then w per sequence
            one = self.draft._pass_time(r, r, ctx, 0.0, 0.0, scenario)
            wide = self.draft._pass_time(wr, wr, ctx, 0.0, 0.0, scenario) if w > 1 else one
            drafts = one + (k - 1.0) * wide
            verify = self._pass_time(q * r, r, ctx, 0.0, 0.0, scenario, q)
            return np.asarray(verify + drafts, float), np.asarray(drafts, float)
        # a head's pass: head_share of a decode pass over its rows and the whole LM head
        d = self.head_share
        if self.pp == 1 and self.window is None and self.chunk is None:
            c = np.asarray(ctx, dtype=float)
            state = r * self.state_s_per_row[scenario]

            def head(x: FloatArray) -> FloatArray:
                lm = self.lm(x, scenario)
                body = self.base(x, scenario) + c * self.attn_s_per_ctx_token[scenario] + state
                return np.asarray(d * body + lm, float)

            dec = (
                self.base(q * r, scenario)
                + self.lm(q * r, scenario)
                + c * self.attn_s_per_ctx_token_verify[scenario]
                + state
            )
        else:

            def head(x: FloatArray) -> FloatArray:
                body = self._pass_time(x, x, ctx, 0.0, 0.0, scenario)
                lm = self.lm(x, scenario)
                return np.asarray(d * body + (1.0 - d) * lm, float)

            dec = self._pass_time(q * r, r, ctx, 0.0, 0.0, scenario, q)
        first = head(r)
        drafts = first + (k - 1.0) * (head(wr) if w > 1 else first)
        return np.asarray(dec + drafts, float), np.asarray(drafts, float)

    def windowed(
        self, rows: Num, ctx_tokens: Num, prefill_flops: Num, prefill_tokens: Num
    ) -> tuple[FloatArray, FloatArray]:
        """The decode context read and the prefill attention FLOPs of an iteration once its
        local layers attend to at most :attr:`window` keys (sliding window, DSA top-k) or
        within their :attr:`chunk`.

        The callers give the iteration's totals as if every layer attended to the whole
        context (``ctx_tokens`` over ``rows`` sequences; ``prefill_flops`` =
        ``pair_flops * (s * c + s**2 / 2)`` summed over the chunks). A window layer reads
        ``min(ctx, w)`` per sequence, taken at the mean context; a chunked layer the open
        chunk, with the rows' contexts taken as spread evenly over ``[0, 2 x mean]``. A
        prefill chunk's tokens at mean position ``p`` are counted as a prompt of ``2p``
        tokens from the start, whose window layer sees ``p`` keys per token up to
        ``p = w/2`` and ``w - w**2 / (4p)`` beyond, whose chunked layer ``P(2p) / 2p``
        (exact for a whole prompt; a later chunk of a long prompt is undercounted by at
        most a quarter of its window layers' share). Unchanged without local layers."""
        ctx = np.asarray(ctx_tokens, dtype=float)
        pf = np.asarray(prefill_flops, dtype=float)
        w, ch = self.window, self.chunk
        if w is None and ch is None:
            return ctx, pf
        f = self.local_fraction
        r = np.asarray(rows, dtype=float)
        per_row = ctx / np.maximum(r, 1e-12)
        t = np.asarray(prefill_tokens, dtype=float)
        pos = pf / self.pair_flops / np.maximum(t, 1e-12)
        # a prompt of 2p tokens from the start: P(2p) / 2p keys per token
        size = float(ch if ch is not None else w or 0.0)
        pairs = chunked_pairs if ch is not None else window_pairs

        def per_token(m: FloatArray) -> FloatArray:
            x = 2.0 * m
            out: FloatArray = pairs(x, size) / np.maximum(x, 1e-12)
            return out

        keys = per_token(pos)
        # a window layer reads min(ctx, w) at the mean context; a chunked one the open
        # chunk, the rows' contexts taken as spread evenly over [0, 2 x mean]
        read = per_token(per_row) if ch is not None else np.minimum(per_row, size)
        ctx_w = (1.0 - f) * ctx + f * r * read
        pf_w = (1.0 - f) * pf + f * self.pair_flops * t * keys
        return ctx_w, pf_w

    def base(self, tokens: Num, scenario: int = VALUE) -> FloatArray:
        """GEMM + element-wise + communication + overhead time of ``tokens`` tokens."""
        t = np.maximum(np.asarray(tokens, dtype=float), 1.0)
        return np.asarray(np.interp(np.log(t), self.log_grid, self.base_s[scenario]), float)

    def lm(self, rows: Num, scenario: int = VALUE) -> FloatArray:
        r = np.maximum(np.asarray(rows, dtype=float), 1.0)
        return np.asarray(np.interp(np.log(r), self.log_grid, self.lm_s[scenario]), float)

    def time(
        self,
        tokens: Num,
        rows: Num,
        ctx_tokens: Num,
        prefill_flops: Num = 0.0,
        prefill_tokens: Num = 0.0,
        scenario: int = VALUE,
    ) -> FloatArray:
        """Iteration time (replica) for ``tokens`` GEMM tokens, ``rows`` sequences emitting a
        token, ``ctx_tokens`` cached tokens read by decode attention, and the prefill
        attention FLOPs / newly written KV tokens.

        With ``pp`` stages the iteration's work runs as ``pp`` micro-batches in flight, one
        per stage (vLLM's virtual engines; the micro-batch rows of
        :func:`gpuplan.forecast.inference.forecast_inference`): an iteration takes ``pp``
        stage passes of ``1/pp`` of the work (at least one row) plus ``pp - 1`` hops.

        With :attr:`speculation` (``k`` draft tokens, acceptance length ``tau``) an iteration
        here is one *token* of every decoding row, as without it, so that the callers' token
        accounting (context growth, answers' iterations, Little's law) stays as it is: a
        physical step ``P`` (the verification pass over ``k + 1`` tokens per row plus ``k``
        draft passes) emits ``tau`` tokens per row, and the decode rows' share of it is
        spread over them: ``P_all - (1 - 1/tau) * P_decode``, where ``P_decode`` is the same
        step without its prefill chunks. Summed over a request's life this gives the
        physical time exactly in expectation (a mixed step's prefill is paid whole, its
        decode share per token); a decode-only step is ``P / tau``."""
        spec = self.speculation
        if spec is None:
            return self._pass_time(
                tokens, rows, ctx_tokens, prefill_flops, prefill_tokens, scenario
            )
        q = float(spec.queries)
        r = np.asarray(rows, dtype=float)
        decoding = r > 0
        # the decode part and the drafts depend on the rows and their context only (small
        # arrays in the analytic callers); the step also on its prompt chunks
        dec, draft = self._spec_decode(r, ctx_tokens, scenario)
        # every emitting row is one of the pass's tokens (the analytic callers' rows are
        # at least one while their tokens may be a fraction)
        verify = np.maximum(np.asarray(tokens, dtype=float), r) + (q - 1.0) * r
        p_all = self._pass_time(
            verify, r, ctx_tokens, prefill_flops, prefill_tokens, scenario, q
        ) + np.where(decoding, draft, 0.0)
        if self.draft is not None:
            # the draft model's first pass also runs the prompt chunks (its own KV cache):
            # the iteration's tokens instead of one per decoding row
            pf = np.asarray(prefill_flops, float) * (self.draft.pair_flops / self.pair_flops)
            p_all = (
                p_all
                + self.draft._pass_time(
                    np.maximum(np.asarray(tokens, float), r),
                    r,
                    ctx_tokens,
                    pf,
                    prefill_tokens,
                    scenario,
                )
                - np.where(
                    decoding, self.draft._pass_time(r, r, ctx_tokens, 0.0, 0.0, scenario), 0.0
                )
            )
        p_dec = np.where(decoding, dec, 0.0)
        return np.asarray(p_all - (1.0 - 1.0 / spec.acceptance_length) * p_dec, float)

    def _pass_time(
        self,
        tokens: Num,
        rows: Num,
        ctx_tokens: Num,
        prefill_flops: Num = 0.0,
        prefill_tokens: Num = 0.0,
        scenario: int = VALUE,
        queries: float = 1.0,
    ) -> FloatArray:
        """One physical pass (:meth:`time` without speculation); ``queries`` per decoding
        row, 1 or a verification pass's ``k + 1``, multiply its logits and its decode
        attention's compute, not its KV-cache read."""
        m = float(self.pp)
        index: Num = 0.0
        attn_ctx = self.attn_s_per_ctx_token[scenario]
        lm_rows = np.asarray(rows, float)
        if queries != 1.0:
            if self.speculation is None or queries != self.speculation.queries:
                raise ValueError(f"a pass of {queries} queries needs that speculation")
            attn_ctx = self.attn_s_per_ctx_token_verify[scenario]
            lm_rows = queries * lm_rows
        if self.window is not None or self.chunk is not None:
            # a DSA indexer over every cached key (decode) and every causal pair (prefill)
            index = (
                np.asarray(ctx_tokens, float) * self.index_s_per_ctx_token[scenario] * queries
                + np.asarray(prefill_flops, float)
                / self.pair_flops
                * self.index_s_per_pair[scenario]
            ) / m
            ctx_tokens, prefill_flops = self.windowed(
                rows, ctx_tokens, prefill_flops, prefill_tokens
            )
        return stage_sum(
            self.base(np.asarray(tokens, float) / m, scenario),
            self.lm(lm_rows / m, scenario),
            index,
            rows,
            ctx_tokens,
            prefill_flops,
            prefill_tokens,
            m=m,
            attn_ctx=attn_ctx,
            state=self.state_s_per_row[scenario],
            attn_pf=self.attn_s_per_prefill_flop[scenario],
            kv_pf=self.kv_s_per_prefill_token[scenario],
            stage_factor=self.stage_factor,
            hop=self.hop_s[scenario],
        )


def stage_sum(
    base: Num,
    lm: Num,
    index: Num,
    rows: Num,
    ctx_tokens: Num,
    prefill_flops: Num,
    prefill_tokens: Num,
    *,
    m: Num,
    attn_ctx: Num,
    state: Num,
    attn_pf: Num,
    kv_pf: Num,
    stage_factor: Num,
    hop: Num,
) -> FloatArray:
    """One pass of :class:`StepCostModel` from its parts: the tabulated GEMM + element-wise +
    communication time (``base``) and LM head (``lm``) of a stage's tokens and rows, a DSA
    indexer's time (``index``), and the terms linear in what the pass holds (decode context,
    recurrent state per row, prefill attention FLOPs and KV written), each a ``1/m`` share
    per stage; ``stage_factor`` stage passes plus ``m - 1`` hops
    (:meth:`StepCostModel._pass_time`, :meth:`CostStack.time`)."""
    stage = (
        np.asarray(base, float)
        + lm
        + index
        + np.asarray(ctx_tokens, float) / m * attn_ctx
        + np.asarray(rows, float) / m * state
        + np.asarray(prefill_flops, float) / m * attn_pf
        + np.asarray(prefill_tokens, float) / m * kv_pf
    )
    return np.asarray(stage_factor * stage + (np.asarray(m, float) - 1) * hop, float)


@dataclass
class CostStack:
    """Several plain :class:`StepCostModel` evaluated in one vectorised call: element ``i``
    of every argument of :meth:`time` is priced by model ``which[i]``.

    The analytic fleet search solves one steady state per layout; stacked, the layouts of
    every GPU and TP solve theirs together (numpy's cost per call, not per element, is most
    of a small solve). A model's grid is shifted by its own offset along one concatenated
    axis, so one ``np.interp`` interpolates every element in its own model's table
    (clamped to that table's ends, as :meth:`StepCostModel.base` is). Plain: no
    speculation, no draft model, no local attention (:meth:`stackable`).
    """

    offsets: FloatArray  # (G,) shift of each model's log grid on the common axis
    log_lo: FloatArray  # (G,) its ends, before the shift
    log_hi: FloatArray
    axis: FloatArray  # the shifted log grids, concatenated
    base_s: FloatArray  # (3, len(axis))
    lm_s: FloatArray  # (3, len(axis))
    attn_s_per_ctx_token: FloatArray  # (3, G)
    state_s_per_row: FloatArray
    attn_s_per_prefill_flop: FloatArray
    kv_s_per_prefill_token: FloatArray
    hop_s: FloatArray
    pp: FloatArray  # (G,)
    stage_factor: FloatArray  # (G,)

    @staticmethod
    def stackable(model: StepCostModel) -> bool:
        return (
            model.speculation is None
            and model.draft is None
            and model.window is None
            and model.chunk is None
        )

    @classmethod
    def of(cls, models: Sequence[StepCostModel]) -> CostStack:
        if not models or not all(cls.stackable(c) for c in models):
            raise ValueError("only plain cost models (no speculation or local attention) stack")
        lo = np.array([c.log_grid[0] for c in models])
        hi = np.array([c.log_grid[-1] for c in models])
        span = float((hi - lo).max()) + 1.0
        offsets = np.arange(len(models)) * span - lo

        def col(name: str) -> FloatArray:
            return np.stack([np.asarray(getattr(c, name), float) for c in models], axis=1)

        return cls(
            offsets=offsets,
            log_lo=lo,
            log_hi=hi,
            axis=np.concatenate([c.log_grid + o for c, o in zip(models, offsets, strict=True)]),
            base_s=np.concatenate([c.base_s for c in models], axis=1),
            lm_s=np.concatenate([c.lm_s for c in models], axis=1),
            attn_s_per_ctx_token=col("attn_s_per_ctx_token"),
            state_s_per_row=col("state_s_per_row"),
            attn_s_per_prefill_flop=col("attn_s_per_prefill_flop"),
            kv_s_per_prefill_token=col("kv_s_per_prefill_token"),
            hop_s=col("hop_s"),
            pp=np.array([float(c.pp) for c in models]),
            stage_factor=np.array([c.stage_factor for c in models]),
        )

    def _interp(self, table: FloatArray, x: Num, which: np.ndarray) -> FloatArray:
        lx = np.log(np.maximum(np.asarray(x, dtype=float), 1.0))
        shifted = np.clip(lx, self.log_lo[which], self.log_hi[which]) + self.offsets[which]
        return np.asarray(np.interp(shifted, self.axis, table), float)

    def time(
        self,
        tokens: Num,
        rows: Num,
        ctx_tokens: Num,
        prefill_flops: Num,
        prefill_tokens: Num,
        scenario: int,
        which: np.ndarray,
    ) -> FloatArray:
        """:meth:`StepCostModel.time` of model ``which`` (broadcast with the arguments)."""
        m = self.pp[which]
        return stage_sum(
            self._interp(self.base_s[scenario], np.asarray(tokens, float) / m, which),
            self._interp(self.lm_s[scenario], np.asarray(rows, float) / m, which),
            0.0,
            rows,
            ctx_tokens,
            prefill_flops,
            prefill_tokens,
            m=m,
            attn_ctx=self.attn_s_per_ctx_token[scenario][which],
            state=self.state_s_per_row[scenario][which],
            attn_pf=self.attn_s_per_prefill_flop[scenario][which],
            kv_pf=self.kv_s_per_prefill_token[scenario][which],
            stage_factor=self.stage_factor[which],
            hop=self.hop_s[scenario][which],
        )
