"""Memory per GPU: weights, gradients, optimizer states, activations, KV cache, overhead.

Pure functions, vectorised over parallel layouts (numpy arrays broadcast together).

Sources
-------
* Mixed-precision Adam states: 2 B (16-bit weights) + 4 B (fp32 main gradients) + 12 B
  (fp32 master weights, first and second moments) = 18 B per parameter; with the
  distributed optimizer (ZeRO stage 1) ``6 + 12/d`` (Megatron-core developer guide,
  "Distributed Optimizer", table of bytes per parameter; Rajbhandari et al. 2020, ZeRO,
  section 5). Stage 2 also shards the gradients, stage 3 (= PyTorch FSDP FULL_SHARD) the
  weights; FSDP SHARD_GRAD_OP is stage 2.
* Optimizer dtypes (:func:`optimizer_bytes_per_param`): the 12 B are fp32 master weights
  (4) and two fp32 Adam moments (2 x 4). BF16 moments (``optimizer_dtype="bf16"``:
  Megatron-core's precision-aware optimizer, ``--use-precision-aware-optimizer
  --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16``; DeepSeek-V3, arXiv 2412.19437 section
  3.3.3, "Low-Precision Optimizer States": BF16 moments, FP32 master weights and gradients)
  make it 4 + 2 x 2 = 8 B; ``master_weights="bf16"`` keeps a 16-bit master copy (2 B),
  ``"none"`` updates the 16-bit weights in place (pure BF16 training, 0 B).
* PyTorch FSDP under mixed precision (``params_are_master``): the sharded parameters are
  the fp32 originals and the optimizer steps them, so they are the master weights; the
  16-bit weights exist only as the gathered units of the forward and backward (PyTorch
  docs, ``torch.distributed.fsdp.MixedPrecisionPolicy``: ``param_dtype`` is "the dtype
  for the unsharded parameter", "the optimizer step uses the sharded parameter in the
  original dtype", and FSDP "does not require any extra memory to keep a high-precision
  copy of the parameters for the optimizer step"). ZeRO-3 then holds 4 + 4 + 8 = 16 B per
  parameter with fp32 gradients and moments, not Megatron's 2 + 4 + 12 = 18 B.
* Fine-grained recomputation (``recompute_modules`` of Megatron-core's TransformerConfig,
  with ``--recompute-granularity selective``): ``layernorm`` drops the outputs of the two
  block norms (the QKV and MLP-up inputs), ``mla_up_proj`` the MLA up-projection outputs (Q,
  K, V; the latents stay), ``moe_act`` the experts' activation-function output (the
  down-projection input); all three are "output-discarding checkpointing", recomputed in the
  backward. DeepSeek-V3 recomputes RMSNorm and the MLA up-projections (section 3.2.3) and
  caches the SwiGLU inputs of its experts in FP8 (section 3.3.3: ``act_cache_bytes``).
* DualPipe (DeepSeek-V3 section 3.2.1, Table 2): each rank holds two stages (``i`` and
  ``p-1-i``), i.e. twice the parameters, and ``p + 1`` micro-batches of activations.
* Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models", section 4: ``s*b*h*(34 + 5*a*s/h)`` bytes per layer for a GPT block
  in 16-bit without parallelism; ``s*b*h*(10 + 24/t + 5*a*s/(h*t))`` with tensor
  parallelism ``t``; ``s*b*h*(34/t + 5*a*s/(h*t))`` with sequence parallelism; ``34*s*b*h/t``
  with selective recomputation; ``2*s*b*h`` (the layer input) with full recomputation.
  The pipeline's first stage keeps ``p`` micro-batches in flight, so it holds the
  activations of ``L`` layers; with ``v`` interleaved stages times ``1 + (p-1)/(p*v)``
  (section 4.2.3). :func:`activation_bytes_per_layer` generalises the 34 to GQA/MQA,
  gated MLPs, any FFN width, MoE and flash attention, and reduces to the paper's
  coefficients for a GPT block (a doctest checks it).
* The KV cache is serving's, not training's: its one function is
  :func:`gpuplan.forecast.model.kv_cache_bytes_per_token`.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from gpuplan.errors import InputError
from gpuplan.forecast.model import ModelArch
from gpuplan.numeric import BoolArray, Flag, FloatArray, Int, Num

BYTES_16BIT = 2.0
WEIGHT_BYTES_PER_PARAM = 2.0
GRAD_BYTES_PER_PARAM = 4.0
OPTIMIZER_BYTES_PER_PARAM = 12.0
STATE_DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0}
MASTER_WEIGHT_BYTES = {**STATE_DTYPE_BYTES, "none": 0.0}
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act")
PIPELINE_SCHEDULES = ("1f1b", "dualpipe")

RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}
RECOMPUTE_NAMES = {v: k for k, v in RECOMPUTE_CODES.items()}


class _ActivationOptions(TypedDict):
    """The keyword options :func:`training_memory_per_gpu` passes to
    :func:`activation_bytes_per_layer` for its dense and its MoE layers alike."""

    sequence_parallel: Flag
    flash_attention: bool
    linear_input_bytes: float
    recompute_modules: tuple[str, ...]
    act_cache_bytes: float


def fmt_gib(value: float) -> str:
    """Memory for messages, in GiB: ``fmt_gib(80 * 2**30)`` -> ``'80 GiB'``."""
    return f"{value / 2**30:.3g} GiB"


def optimizer_bytes_per_param(
    optimizer_dtype: str = "fp32", master_weights: str = "fp32", grad_bytes: float = 4.0
) -> float:
    """Optimizer-state bytes per parameter: master weights + Adam's two moments.

    With 16-bit gradient buffers an fp32 optimizer also keeps an fp32 copy of its gradient
    shard (Megatron-core guide: "float16 param, float16 grads: 20 = 4 + 16/d").

    >>> optimizer_bytes_per_param()
    12.0
    >>> optimizer_bytes_per_param("bf16")
    8.0
    >>> optimizer_bytes_per_param("bf16", "none")
    4.0
    >>> optimizer_bytes_per_param(grad_bytes=2.0)
    16.0
    """
    moment = STATE_DTYPE_BYTES[optimizer_dtype]
    master = MASTER_WEIGHT_BYTES[master_weights]
    fp32_grad_copy = 4.0 if grad_bytes < 4.0 and master_weights == "fp32" else 0.0
    return master + 2.0 * moment + fp32_grad_copy


def korthikanti_activation_bytes(
    s: Num, b: Num, h: Num, a: Num, t: Num = 1, *, sequence_parallel: bool, recompute: str
) -> FloatArray:
    """The paper's per-layer activation bytes for a GPT block (Korthikanti et al. 2022, eqs. 2-5).

    >>> float(korthikanti_activation_bytes(2048, 1, 12288, 96, sequence_parallel=False,
    ...                                    recompute="none")) / (2048 * 12288)
    114.0
    >>> float(korthikanti_activation_bytes(2048, 1, 12288, 96, 8, sequence_parallel=True,
    ...                                    recompute="selective")) / (2048 * 12288)
    4.25
    """
    s, b, h, a, t = (np.asarray(x, dtype=float) for x in (s, b, h, a, t))
    sbh = s * b * h
    if recompute == "full":
        return 2.0 * sbh / (t if sequence_parallel else 1.0)
    attn = 0.0 if recompute == "selective" else 5.0 * a * s / h
    if sequence_parallel:
        return sbh * (34.0 / t + attn / t)
    return sbh * (10.0 + 24.0 / t + attn / t)


def activation_bytes_per_layer(
    arch: ModelArch,
    seq_len: Num,
    micro_batch: Num,
    tp: Num,
    cp: Num,
    recompute: Int,
    *,
    sequence_parallel: Flag = True,
    flash_attention: bool = True,
    moe: bool = False,
    linear_input_bytes: float = BYTES_16BIT,
    recompute_modules: tuple[str, ...] = (),
    act_cache_bytes: float = BYTES_16BIT,
) -> FloatArray:
    """Activation bytes one layer keeps for the backward pass, on one rank.

    Generalises Korthikanti et al. (2022) section 4.1 term by term (16-bit tensors):
    attention block: QKV input ``2sbh``, Q and K ``2sb(d_q + d_k)``, V ``2sb*d_v``, output
    projection input ``2sbh``, dropout mask ``sbh``; score matrices ``5as^2b`` (softmax
    output, dropout mask and output) unless flash attention keeps only the per-row
    log-sum-exp (``4asb``, fp32); MLP: input ``2sbh``, intermediate tensors ``2sbf`` each
    (two for GELU, three for a gated MLP), dropout mask ``sbh``; two layer norms ``4sbh``.
    With sequence parallelism every term is divided by ``t``; without it the norms, the two
    block inputs and the dropout masks (``8 + 2`` units) are replicated. MoE layers store
    the dispatched copy of each token for ``top_k`` experts and their intermediates.
    ``recompute`` 0/1/2 = none/selective (drop the score matrices)/full (keep the layer
    input only). Context parallelism divides the sequence by ``cp``. MLA also keeps its
    latents (the up-projections' inputs and their norms' inputs, ``(2 + lb)(q_lora +
    kv_lora)``, computed unsplit by TP).

    Under selective recompute, ``recompute_modules`` (Megatron-core's fine-grained
    recomputation, see the module docstring) also drops: ``layernorm`` the two norm outputs
    (``2 lb h``), ``mla_up_proj`` Q, K and V, ``moe_act`` the routed experts' activation
    output. ``act_cache_bytes`` is the dtype of the routed experts' cached activation inputs
    (2: BF16; about 1: FP8 with 1x128-tile scales, DeepSeek-V3 section 3.3.3).

    >>> gpt = ModelArch(layers=1, hidden=12288, heads=96, ffn_hidden=4 * 12288, vocab=1,
    ...                 gated_mlp=False, dropout=True)
    >>> float(activation_bytes_per_layer(gpt, 2048, 1, 1, 1, 0, flash_attention=False) / (2048 * 12288))
    114.0
    >>> float(activation_bytes_per_layer(gpt, 2048, 1, 8, 1, 1) / (2048 * 12288))
    4.25
    """
    s = np.asarray(seq_len, dtype=float) / np.asarray(cp, dtype=float)
    b = np.asarray(micro_batch, dtype=float)
    t = np.asarray(tp, dtype=float)
    recompute = np.asarray(recompute)
    sp = np.asarray(sequence_parallel, dtype=bool)
    h = float(arch.hidden)
    sb = s * b
    drop = 1.0 if arch.dropout else 0.0
    dq = arch.heads * arch.qk_head_dim
    dk = arch.n_kv_heads * arch.qk_head_dim if arch.attention != "mla" else dq
    dv = (
        arch.n_kv_heads * arch.v_head_dim
        if arch.attention != "mla"
        else arch.heads * arch.v_head_dim
    )
    lb = float(linear_input_bytes)
    mods = frozenset(recompute_modules)
    unknown = mods - set(RECOMPUTE_MODULES)
    if unknown:
        raise InputError(
            f"unknown recompute module(s) {', '.join(sorted(unknown))}",
            hint="use any of " + ", ".join(RECOMPUTE_MODULES),
        )
    qkv = 2.0 * (dq + dk) + 2.0 * dv  # Q, K, V (16-bit), the attention core's inputs
    out_in = lb * (arch.heads * arch.v_head_dim)  # output-projection input (the context)
    latents = 0.0
    if arch.attention == "mla" and arch.mla:
        ranks = float(arch.mla.q_lora_rank or 0) + float(arch.mla.kv_lora_rank)
        latents = (2.0 + lb) * ranks
    # Terms that tensor parallelism always splits (per token, in bytes): Q, K, V and the
    # output-projection input (the per-head context).
    split_attn = qkv + out_in
    # MLP intermediates: GELU keeps its input (16-bit) and output (the down-projection
    # input); a gated MLP keeps gate and up outputs (16-bit) and their product.
    n_16 = 2.0 if arch.gated_mlp else 1.0
    ab = float(act_cache_bytes)

    def mlp_terms(drop_act_out: bool) -> float:
        if moe and arch.is_moe:
            fe = float(arch.expert_ffn)
            routed = (ab * n_16 + (0.0 if drop_act_out else lb)) * fe
            shared = (2.0 * n_16 + lb) * fe
            return float(arch.top_k * (lb * h + routed) + arch.num_shared_experts * shared)
        return float((2.0 * n_16 + lb) * arch.ffn_hidden)

    split_mlp = mlp_terms(False)
    # Replicated without sequence parallelism: two norms (4h), the two block inputs (the
    # QKV and MLP-up inputs, 2 x lb x h) and two dropout masks (2h).
    norm_out = 2.0 * lb * h
    replicated = 4.0 * h + norm_out + 2.0 * drop * h + latents
    # Korthikanti's accounting puts the output-projection input (2h) among the split
    # terms (it is the per-head context, split by TP).
    split = split_attn + split_mlp
    # What fine-grained recomputation (selective only) drops, per token.
    dropped_split = (qkv if "mla_up_proj" in mods and arch.attention == "mla" else 0.0) + (
        split_mlp - mlp_terms(True) if "moe_act" in mods else 0.0
    )
    dropped_replicated = norm_out if "layernorm" in mods else 0.0
    if arch.is_hybrid:
        # One block per layer (norm input, block input, dropout mask) and the layer average
        # of the block kinds. A Mamba-2 block keeps its in_proj output (z, x, B, C, dt), the
        # conv output, the scan output, the gated norm's input and output and the out_proj
        # input (the tensors of the Mamba-2 block, Dao & Gu 2024 figure 6).
        heads, p, n, grp, _ = arch.mamba_dims()
        d_in = float(heads * p)
        split_mamba = (
            2.0 * (2.0 * d_in + 2.0 * grp * n + heads)
            + 2.0 * (d_in + 2.0 * grp * n)
            + 2.0 * d_in
            + 4.0 * d_in
            + lb * d_in
        )
        replicated = 2.0 * h + lb * h + drop * h
        dropped_replicated = lb * h if "layernorm" in mods else 0.0
        dropped_split = 0.0
        # the MLP blocks: dense, or (``moe``) every one an MoE block (Nemotron 3)
        mlp_share = arch.num_moe_layers / arch.layers if moe else arch.mlp_fraction
        split = (
            arch.attention_fraction * split_attn
            + mlp_share * split_mlp
            + arch.mamba_fraction * split_mamba
        )
    per_token = np.where(sp, (replicated + split) / t, replicated + split / t)
    fine = np.where(
        sp,
        (replicated - dropped_replicated + split - dropped_split) / t,
        replicated - dropped_replicated + (split - dropped_split) / t,
    )
    if flash_attention:
        scores = 4.0 * arch.heads * np.ones_like(s) / t  # fp32 log-sum-exp per row and head
    else:
        scores = (2.0 + 3.0 * drop) * arch.heads * s / t
    scores = scores * arch.attention_fraction
    none = sb * (per_token + scores)
    selective = sb * fine
    full = sb * 2.0 * h / np.where(sp, t, 1.0)
    out: FloatArray = np.where(recompute >= 2, full, np.where(recompute == 1, selective, none))
    return out


def pipeline_inflight_factor(pp: Num, vp: Num, num_microbatches: Num) -> FloatArray:
    """Micro-batches whose activations the first pipeline stage holds at its peak.

    1F1B keeps ``min(p, m)`` in flight; interleaving ``v`` chunks multiplies the stage's
    memory by ``1 + (p-1)/(p*v)`` (Korthikanti et al. 2022, section 4.2.3; Narayanan et al.
    2021, section 2.2.2).
    """
    p = np.asarray(pp, dtype=float)
    v = np.asarray(vp, dtype=float)
    m = np.asarray(num_microbatches, dtype=float)
    inflight = np.minimum(p, m)
    factor: FloatArray = inflight * np.where(v > 1, 1.0 + (p - 1.0) / (p * v), 1.0)
    return factor


def pipeline_split(arch: ModelArch, pp: Num) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Transformer layers on the first, each middle and the last pipeline stage.

    ``L/p`` everywhere when ``p`` divides the layers. Otherwise every middle stage takes
    ``m = ceil(L/p)`` layers and the remainder ``R = L - m*(p-2)`` goes to the first and last
    stages (``ceil(R/2)`` and ``floor(R/2)``), which also hold the input embedding and the
    output layer and loss: Megatron-core's uneven first/last stages
    (``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``). When
    ``p`` divides ``L + 2`` this is the split with the embedding and the loss counted as one
    layer each (``account_for_embedding_in_pipeline_split`` /
    ``account_for_loss_in_pipeline_split``), as Llama 3 405B trained its 126 layers on 16
    stages (Dubey et al. 2024, section 3.3.2: one layer fewer on the first and last stage).
    Invalid ``p`` (:func:`valid_pipeline`) give a split with a stage of no layers.

    >>> arch = ModelArch(layers=126, hidden=64, heads=4, ffn_hidden=256, vocab=10)
    >>> [float(x) for x in pipeline_split(arch, 16)]
    [7.0, 8.0, 7.0]
    >>> [float(x) for x in pipeline_split(arch.with_(layers=61), 16)]
    [3.0, 4.0, 2.0]
    >>> [float(x) for x in pipeline_split(arch.with_(layers=80), 8)]
    [10.0, 10.0, 10.0]
    """
    p = np.maximum(np.asarray(pp, dtype=float), 1.0)
    L = float(arch.layers)
    even = np.mod(L, p) == 0
    m = np.ceil(L / p)
    rest = np.where(p > 2, L - m * (p - 2.0), L)
    first = np.ceil(rest / 2.0)
    last = np.floor(rest / 2.0)
    first = np.where(even, L / p, np.where(p > 1, first, L))
    middle = np.where(even, L / p, np.where(p > 2, m, first))
    last = np.where(even, L / p, np.where(p > 1, last, L))
    return first, middle, last


def stage_layers(arch: ModelArch, pp: Num) -> tuple[FloatArray, FloatArray]:
    """Transformer layers on the busiest pipeline stage, and how many fewer the last has.

    The busiest stage sets the pipeline's pace (its bubble and every micro-batch step);
    the last stage's deficit is the room its output layer fills (:func:`pipeline_split`).

    >>> arch = ModelArch(layers=126, hidden=64, heads=4, ffn_hidden=256, vocab=10)
    >>> [float(x) for x in stage_layers(arch, 16)]
    [8.0, 1.0]
    """
    first, middle, last = pipeline_split(arch, pp)
    busiest = np.maximum(first, middle)
    return busiest, busiest - last


def valid_pipeline(arch: ModelArch, pp: Num) -> BoolArray:
    """``p`` stages that each keep at least one transformer layer (:func:`pipeline_split`)."""
    p = np.asarray(pp, dtype=float)
    _, _, last = pipeline_split(arch, p)
    return (p >= 1) & (p <= arch.layers) & (last >= 1)


def expert_tensor_parallel(tp: Num, cp: Num, dp: Num, ep: Num) -> FloatArray:
    """Tensor-parallel size inside each expert (ETP).

    Experts are split by the attention's TP when ``ep`` divides ``dp*cp`` (Megatron-core's
    default, ETP = TP). A larger ``ep`` folds the TP ranks into the expert-parallel group
    (MoE parallel folding, Liu et al. 2025, arXiv 2504.14960: EP x ETP x EDP = TP x CP x DP
    per stage), leaving ``ETP = TP*CP*DP/EP``.

    >>> [float(expert_tensor_parallel(2, 1, 16, e)) for e in (8, 32)]
    [2.0, 1.0]
    """
    tp, cp, dp, ep = (np.asarray(x, dtype=float) for x in (tp, cp, dp, ep))
    folded = np.mod(dp * cp, ep) != 0
    return np.where(folded, np.maximum(tp * dp * cp / ep, 1.0), tp)


def param_counts_per_rank(
    arch: ModelArch, tp: Num, pp: Num, ep: Num, etp: Num | None = None, *, stage: str = "busiest"
) -> dict[str, FloatArray]:
    """Parameters held by one rank of a pipeline stage: dense (non-expert) and expert parts.

    ``stage`` is ``first`` (its layers + the input embedding), ``middle``, ``last`` (its
    layers + the output layer; a second ``V*h`` copy even when tied, as Megatron keeps one on
    each end) or ``busiest`` (the largest of the three, part by part). With ``pp == 1`` the
    one stage holds everything (one ``V*h`` copy if tied). Transformer layers are split by
    ``tp``; routed experts over ``ep`` ranks and by ``etp`` inside (default ``tp``).
    """
    tp = np.asarray(tp, dtype=float)
    pp = np.asarray(pp, dtype=float)
    ep = np.asarray(ep, dtype=float)
    etp = tp if etp is None else np.asarray(etp, dtype=float)
    first, middle, last = pipeline_split(arch, pp)
    expert_total = arch.num_moe_layers * arch.num_experts * arch.expert_params()
    layer_dense = (arch.layer_params(active=False) - expert_total) / arch.layers
    layer_expert = expert_total / arch.layers
    vh = float(arch.vocab * arch.hidden)
    emb_single = vh * (1.0 if arch.tied_embeddings else 2.0)

    def counts(layers: FloatArray, emb: Num) -> dict[str, FloatArray]:
        return {
            "dense": layer_dense * layers / tp + emb / tp,
            "expert": layer_expert * layers / (ep * etp),
        }

    per_stage = {
        "first": counts(first, np.where(pp > 1, vh, emb_single)),
        "middle": counts(middle, 0.0),
        "last": counts(last, np.where(pp > 1, vh, emb_single)),
    }
    if stage != "busiest":
        return per_stage[stage]
    return {
        k: np.maximum(
            np.maximum(per_stage["first"][k], per_stage["middle"][k]), per_stage["last"][k]
        )
        for k in ("dense", "expert")
    }


def model_state_bytes(
    arch: ModelArch,
    tp: Num,
    pp: Num,
    ep: Num,
    dp: Num,
    cp: Num,
    zero: Int,
    *,
    grad_bytes: float = GRAD_BYTES_PER_PARAM,
    zero3_unit_params: float | None = None,
    stage: str = "busiest",
    optimizer_dtype: str = "fp32",
    master_weights: str = "fp32",
    gathered_weight_bytes: float = WEIGHT_BYTES_PER_PARAM,
    shard_ranks: Num | None = None,
    params_are_master: bool = False,
    trainable_params: float | None = None,
) -> dict[str, FloatArray]:
    """Weights, gradients and optimizer states per GPU (bytes), ZeRO-sharded.

    Dense weights are replicated over the ``dp*cp`` ranks of their data-parallel group,
    expert weights over the expert-data-parallel group ``tp*dp*cp/(ep*etp)``
    (:func:`expert_tensor_parallel`; ``dp*cp/ep`` without folding); ZeRO stage >= 1 shards
    the optimizer states over that group, >= 2 the gradients, 3 the weights (Rajbhandari et
    al. 2020). With 16-bit gradient buffers (``grad_bytes=2``) the optimizer also keeps an
    fp32 copy of its gradient shard: 16 instead of 12 bytes per parameter (Megatron-core
    guide: "float16 param, float16 grads: 20 = 4 + 16/d"). Stage 3 also holds gathered
    units: the current and the prefetched one in 16 bits plus the unsharded gradients of one
    (stage 2: the unsharded gradients of one unit) (``zero3_unit_params``: one transformer
    layer for PyTorch FSDP's per-block wrapping; DeepSpeed caps it with
    stage3_max_live_parameters). ``stage`` as in :func:`param_counts_per_rank`.
    ``optimizer_dtype`` and ``master_weights`` as in :func:`optimizer_bytes_per_param`;
    ``gathered_weight_bytes`` is the dtype of the gathered units (1 with FSDP2's float8
    all-gather, which gathers the FP8 casts of the linear weights). ``shard_ranks`` (HSDP,
    stage 3 only): the states are sharded over groups of this many data-parallel ranks and
    replicated across the groups (experts in proportion); None shards over the whole group.
    ``params_are_master`` (PyTorch FSDP under mixed precision, see the module's sources):
    with stage 3 and a master copy, ``weights`` are the sharded master-dtype parameters and
    ``optimizer`` holds the moments only; no persistent 16-bit copy is kept.
    ``trainable_params`` (a LoRA fine-tune, the adapters' parameters of the whole model):
    only they have gradients and optimizer states (spread over the TP x PP ranks like the
    dense weights and ZeRO-sharded over the data-parallel group); the frozen 16-bit base
    weights are sharded by stage 3 as before, and a gathered ZeRO-3 unit has no gradients.
    """
    zero = np.asarray(zero)
    etp = expert_tensor_parallel(tp, cp, dp, ep)
    counts = param_counts_per_rank(arch, tp, pp, ep, etp, stage=stage)
    d_dense = np.asarray(dp, dtype=float) * np.asarray(cp, dtype=float)
    d_expert = np.maximum(
        d_dense * np.asarray(tp, dtype=float) / (np.asarray(ep, dtype=float) * etp), 1.0
    )
    if shard_ranks is not None:
        hsdp = (zero >= 3) & (np.asarray(shard_ranks, dtype=float) < d_dense)
        shard = np.minimum(np.asarray(shard_ranks, dtype=float), d_dense)
        d_expert = np.where(hsdp, np.maximum(d_expert * shard / d_dense, 1.0), d_expert)
        d_dense = np.where(hsdp, shard, d_dense)

    def sharded(per_param: float, stage: int) -> FloatArray:
        on = zero >= stage
        return per_param * (
            counts["dense"] / np.where(on, d_dense, 1.0)
            + counts["expert"] / np.where(on, d_expert, 1.0)
        )

    weights = sharded(WEIGHT_BYTES_PER_PARAM, 3)
    grads = sharded(grad_bytes, 2)
    optimizer = sharded(optimizer_bytes_per_param(optimizer_dtype, master_weights, grad_bytes), 1)
    master = MASTER_WEIGHT_BYTES[master_weights]
    lora = trainable_params is not None
    if lora:
        per_rank = float(trainable_params or 0.0) / (
            np.asarray(tp, dtype=float) * np.asarray(pp, dtype=float)
        )

        def adapters(per_param: float, stage: int) -> FloatArray:
            out: FloatArray = per_param * per_rank / np.where(zero >= stage, d_dense, 1.0)
            return out

        grads = adapters(grad_bytes, 2)
        optimizer = adapters(
            optimizer_bytes_per_param(optimizer_dtype, master_weights, grad_bytes), 1
        )
    elif params_are_master and master > 0.0:
        # FSDP: the sharded parameter is the master copy (stage 3 only; stage 1-2 keep the
        # 16-bit weights whole). The optimizer then holds the moments (and any fp32
        # gradient copy), and the weights are the master bytes, both sharded.
        fsdp = zero >= 3
        weights = np.where(fsdp, sharded(master, 3), weights)
        optimizer = np.where(
            fsdp,
            sharded(
                optimizer_bytes_per_param(optimizer_dtype, master_weights, grad_bytes) - master, 1
            ),
            optimizer,
        )
    layers_per_rank, _ = stage_layers(arch, pp)
    unit = (counts["dense"] + counts["expert"]) / np.maximum(layers_per_rank, 1.0)
    if zero3_unit_params is not None:
        unit = np.minimum(unit, float(zero3_unit_params))
    sharding = d_dense > 1
    # Stage 3 gathers the current and the prefetched unit (16-bit) and holds the unsharded
    # gradients of one; stage 2 holds one unit's unsharded gradients before its
    # reduce-scatter. With a single data-parallel rank nothing is sharded or gathered.
    unit_grad_bytes = 0.0 if lora else grad_bytes  # a frozen unit has no gradients
    gathered = np.where(
        sharding & (zero >= 3),
        unit * (2.0 * float(gathered_weight_bytes) + unit_grad_bytes),
        np.where(sharding & (zero == 2), unit * unit_grad_bytes, 0.0),
    )
    return {
        "weights": weights,
        "gradients": grads,
        "optimizer": optimizer,
        "zero3_buffers": gathered,
    }


def logits_bytes(arch: ModelArch, seq_len: Num, micro_batch: Num, tp: Num, cp: Num) -> FloatArray:
    """Output logits of one micro-batch on the last stage: 16-bit logits plus the fp32
    copy the cross-entropy keeps (``6*s*b*V/t`` bytes)."""
    s = np.asarray(seq_len, dtype=float) / np.asarray(cp, dtype=float)
    out: FloatArray = (
        6.0 * s * np.asarray(micro_batch, dtype=float) * arch.vocab / np.asarray(tp, dtype=float)
    )
    return out


def training_memory_per_gpu(
    arch: ModelArch,
    *,
    seq_len: Num,
    micro_batch: Num,
    num_microbatches: Num,
    tp: Num,
    pp: Num,
    cp: Num,
    ep: Num,
    dp: Num,
    vp: Num,
    recompute: Int,
    zero: Int,
    overhead_bytes: float,
    sequence_parallel: Flag = True,
    flash_attention: bool = True,
    grad_bytes: float = GRAD_BYTES_PER_PARAM,
    linear_input_bytes: float = BYTES_16BIT,
    zero3_unit_params: float | None = None,
    optimizer_dtype: str = "fp32",
    master_weights: str = "fp32",
    recompute_modules: tuple[str, ...] = (),
    act_cache_bytes: float = BYTES_16BIT,
    gathered_weight_bytes: float = WEIGHT_BYTES_PER_PARAM,
    pipeline_schedule: str = "1f1b",
    shard_ranks: Num | None = None,
    params_are_master: bool = False,
    trainable_params: float | None = None,
) -> dict[str, FloatArray]:
    """Peak memory per GPU for training (bytes), with its breakdown.

    Returns ``{"weights", "gradients", "optimizer", "activations", "zero3_buffers",
    "overhead", "total"}``, each an array over the layouts. ``overhead_bytes`` is the
    fixed framework overhead (CUDA context, library workspaces, communication buffers),
    taken from the forecast constants. ``optimizer_dtype``, ``master_weights`` and
    ``gathered_weight_bytes``, ``shard_ranks`` (HSDP), ``params_are_master`` (FSDP) and
    ``trainable_params`` (LoRA) as in :func:`model_state_bytes`;
    ``recompute_modules`` and
    ``act_cache_bytes`` as in :func:`activation_bytes_per_layer`. ``pipeline_schedule``
    ``dualpipe`` puts two stages on each rank (``i`` and ``p-1-i``: the first rank holds
    the first and the last stage, so the embedding and the output head, which DeepSeek-V3's
    MTP module shares with the main model, sit on one rank) and keeps ``p + 1``
    micro-batches of one stage's activations (arXiv 2412.19437 section 3.2.1 and Table 2).
    """
    if pipeline_schedule not in PIPELINE_SCHEDULES:
        raise InputError(
            f"unknown pipeline schedule {pipeline_schedule!r}",
            hint="use one of " + ", ".join(PIPELINE_SCHEDULES),
        )
    pp_f = np.asarray(pp, dtype=float)
    kw: _ActivationOptions = dict(
        sequence_parallel=sequence_parallel,
        flash_attention=flash_attention,
        linear_input_bytes=linear_input_bytes,
        recompute_modules=tuple(recompute_modules),
        act_cache_bytes=act_cache_bytes,
    )
    if arch.is_moe and arch.is_hybrid:  # the block shares are inside the one call
        per_layer = activation_bytes_per_layer(
            arch, seq_len, micro_batch, tp, cp, recompute, moe=True, **kw
        )
    elif arch.is_moe:
        frac_moe = arch.num_moe_layers / arch.layers
        per_layer = (1.0 - frac_moe) * activation_bytes_per_layer(
            arch, seq_len, micro_batch, tp, cp, recompute, **kw
        ) + frac_moe * activation_bytes_per_layer(
            arch, seq_len, micro_batch, tp, cp, recompute, moe=True, **kw
        )
    else:
        per_layer = activation_bytes_per_layer(arch, seq_len, micro_batch, tp, cp, recompute, **kw)
    # 1F1B: stage i keeps min(p - i, m) micro-batches in flight (Narayanan et al. 2021,
    # section 2.2.1); the first stage the most, the second one fewer, the last one. The peak
    # of the GPU is the largest stage total (state + activations), so the first stage's
    # extra micro-batch and the middle stages' extra layer are both looked at.
    first, middle, last = pipeline_split(arch, pp_f)
    logits = logits_bytes(arch, seq_len, micro_batch, tp, cp)
    stages = {
        "first": (first, pipeline_inflight_factor(pp_f, vp, num_microbatches)),
        "middle": (
            middle,
            pipeline_inflight_factor(np.maximum(pp_f - 1.0, 1.0), vp, num_microbatches),
        ),
        "last": (last, np.ones_like(pp_f)),
    }
    parts: dict[str, dict[str, FloatArray]] = {}
    for name, (layers, inflight) in stages.items():
        st = model_state_bytes(
            arch,
            tp,
            pp,
            ep,
            dp,
            cp,
            zero,
            grad_bytes=grad_bytes,
            zero3_unit_params=zero3_unit_params,
            stage=name,
            optimizer_dtype=optimizer_dtype,
            master_weights=master_weights,
            gathered_weight_bytes=gathered_weight_bytes,
            shard_ranks=shard_ranks,
            params_are_master=params_are_master,
            trainable_params=trainable_params,
        )
        act = per_layer * layers * inflight
        if name == "last":
            act = act + logits
        st["activations"] = np.where(
            pp_f > 1, act, per_layer * layers * np.minimum(1.0, inflight) + logits
        )
        parts[name] = st
    keys = ("weights", "gradients", "optimizer", "zero3_buffers", "activations")
    if pipeline_schedule == "dualpipe":
        parts = _dualpipe_ranks(parts, per_layer, logits, first, middle, last, pp_f)
    totals = {n: sum(parts[n][k] for k in keys) for n in parts}
    # the middle stage exists only with p > 2 (with p == 2 it is the last)
    totals["middle"] = np.where(pp_f > 2, totals["middle"], -np.inf)
    peak = np.where(
        totals["first"] >= np.maximum(totals["middle"], totals["last"]),
        0,
        np.where(totals["middle"] >= totals["last"], 1, 2),
    )
    chosen = {
        k: np.choose(peak, [np.broadcast_to(parts[n][k], np.shape(peak)) for n in stages])
        for k in keys
    }
    overhead = np.full_like(np.asarray(chosen["activations"], dtype=float), float(overhead_bytes))
    total = sum(chosen[k] for k in keys) + overhead
    return {
        "weights": chosen["weights"],
        "gradients": chosen["gradients"],
        "optimizer": chosen["optimizer"],
        "activations": chosen["activations"],
        "zero3_buffers": chosen["zero3_buffers"],
        "overhead": overhead,
        "total": total,
    }


def _dualpipe_ranks(
    parts: dict[str, dict[str, FloatArray]],
    per_layer: FloatArray,
    logits: FloatArray,
    first: FloatArray,
    middle: FloatArray,
    last: FloatArray,
    pp: FloatArray,
) -> dict[str, dict[str, FloatArray]]:
    """DualPipe's ranks from the 1F1B stage parts: rank 0 holds stages 0 and ``p-1``, a middle
    rank two middle stages; each keeps ``p + 1`` micro-batches of its chunks' mean
    activations (DeepSeek-V3 Table 2: parameters 2x, activations ``PP + 1``). Without
    pipeline parallelism it is the one stage, unchanged."""
    inflight = pp + 1.0
    edge = {k: parts["first"][k] + parts["last"][k] for k in parts["first"]}
    edge["activations"] = per_layer * (first + last) / 2.0 * inflight + logits
    mid = {k: 2.0 * parts["middle"][k] for k in parts["middle"]}
    mid["activations"] = per_layer * middle * inflight
    on = pp > 1
    out: dict[str, dict[str, FloatArray]] = {}
    for name, ranks in (("first", edge), ("middle", mid), ("last", edge)):
        out[name] = {k: np.where(on, ranks[k], parts[name][k]) for k in parts[name]}
    return out
