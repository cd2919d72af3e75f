"""Per-rank GEMM shapes and the FLOP conventions of the training forecast.

Job of this module: the forward GEMMs of one layer on one tensor-/expert-parallel rank
(:func:`layer_gemms`; they shrink with TP), the grouped-GEMM tile padding and the
expert-parallel load imbalance of routed experts, the attention-core GEMM shape, and the
Megatron paper's FLOP convention (:func:`megatron_flops_per_step`) the validation reads
published TFLOP/s with. Pure functions, no I/O.

The architecture record and the per-token counts (parameters, FLOPs per token, KV bytes)
are in :mod:`gpuplan.forecast.model`.

Conventions
-----------
* FLOPs count a multiply-add as 2 FLOPs; a GEMM ``(m x k) @ (k x n)`` costs ``2*m*n*k``.
* Tensor parallelism splits the matrices as Megatron-LM does (Shoeybi et al. 2019,
  section 3); the shapes are numpy arrays broadcast over the layouts being evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuplan.forecast.model import ModelArch
from gpuplan.numeric import FloatArray, Num


def megatron_flops_per_step(
    batch: Num, seq_len: Num, layers: Num, hidden: Num, vocab: Num, *, full_recompute: bool
) -> FloatArray:
    """FLOPs per iteration as Narayanan et al. (2021) count them, eq. 3.

    ``96*B*s*L*h^2*(1 + s/(6h) + V/(16*L*h))`` with full recomputation; without it the
    layer part is 3/4 of that (``72*B*s*L*h^2*(1 + s/(6h)) + 6*B*s*h*V``). Used by the
    validation to read the paper's TFLOP/s back into a step time with the paper's own
    convention (GPT blocks with a 4h MLP).

    >>> f = megatron_flops_per_step(1, 2048, 24, 2304, 51200, full_recompute=True)
    >>> round(float(f) / 1e12, 1)
    30.2
    """
    b, s, lyr, h, v = (
        np.asarray(x, dtype=np.float64) for x in (batch, seq_len, layers, hidden, vocab)
    )
    layer_part = 24.0 * b * s * lyr * h * h * (1.0 + s / (6.0 * h))
    logits = 6.0 * b * s * h * v
    return layer_part * (4.0 if full_recompute else 3.0) + logits


# ------------------------------------------------------------------------ GEMM shapes
@dataclass(frozen=True)
class Gemm:
    """One GEMM of a layer's forward on one rank: ``(m x k) @ (k x n)``, ``count`` times.

    ``m``/``n``/``k``/``count`` are numpy arrays broadcast over the layouts being
    evaluated. ``kind`` groups GEMMs for the breakdown (``attn_proj``, ``mlp``, ``expert``,
    ``router``, ``logits``); ``per`` says whether ``count`` is per dense layer, per MoE
    layer or per model (logits).
    """

    name: str
    m: FloatArray
    n: FloatArray
    k: FloatArray
    count: FloatArray
    kind: str
    per: str  # "layer" (every layer), "dense" (dense-MLP layers), "moe" (MoE layers), "model"

    def flops(self) -> FloatArray:
        return 2.0 * self.m * self.n * self.k * self.count


#: Rows of one M tile of the grouped GEMM that runs the routed experts: each expert's
#: token block is computed in whole tiles of 128 rows (DeepGEMM's contiguous grouped layout
#: aligns every expert's M to its 128-row block, deepseek-ai/DeepGEMM README, "grouped
#: GEMMs (contiguous layout)"; CUTLASS grouped GEMM threadblock tiles of 128 rows,
#: NVIDIA/cutlass examples/24_gemm_grouped; retrieved 2026-12-01). A kernel's tile, not a
#: hardware figure.
GROUPED_GEMM_TILE_ROWS = 128


def grouped_gemm_rows(tokens_per_expert: Num, tile: float = GROUPED_GEMM_TILE_ROWS) -> FloatArray:
    """Rows the grouped GEMM computes per expert for ``tokens_per_expert`` routed rows (mean).

    Each expert's block is padded to whole tiles of ``tile`` rows. Routed counts vary from
    expert to expert around the mean, so from one tile up their remainders modulo the tile
    are spread evenly and the expected padding is ``(tile - 1) / 2`` rows (taken in
    proportion ``m / tile`` below one tile, so the function is continuous); and an expert
    computes a whole tile whenever it has a token, which with Poisson counts of mean ``m``
    happens with probability ``1 - exp(-m)``::

        rows = max(tile (1 - exp(-m)), m + (tile - 1)/2 x min(1, m / tile))

    Never fewer than ``m``; 0 for 0.

    >>> [round(float(grouped_gemm_rows(m)), 1) for m in (0, 16, 512, 4096)]
    [0.0, 128.0, 575.5, 4159.5]
    """
    m = np.maximum(np.asarray(tokens_per_expert, dtype=np.float64), 0.0)
    t = float(tile)
    pad = (t - 1.0) / 2.0 * np.minimum(1.0, m / t)
    return np.maximum(t * -np.expm1(-m), m + pad)


def expert_rank_imbalance(rows_per_rank: Num, ep: Num) -> FloatArray:
    """Busiest expert-parallel rank's routed rows over the mean under balanced routing.

    With routing balanced in expectation (what an auxiliary or bias balancing loss aims
    at: Fedus et al. 2021, Switch Transformer, section 2.2; Wang et al. 2024, arXiv
    2408.15664), each of a micro-batch's ``ep x mu`` routed rows (token copies, ``mu =
    tokens x top_k`` per rank: ``rows_per_rank``) lands on a rank with probability
    ``1/ep``: a rank's load is binomial with mean ``mu`` and variance ``mu (1 - 1/ep)``,
    and the largest of ``ep`` such loads exceeds
    the mean by about ``sqrt(2 ln ep)`` standard deviations (the Gaussian extreme-value
    asymptote). The step waits for that rank::

        imbalance = 1 + sqrt(2 ln ep) x sqrt((1 - 1/ep) / mu)

    This is the floor that sampling alone imposes (1 for ``ep = 1``); skewed routing adds
    to it (``Framework.expert_load_imbalance`` takes a measured figure instead).

    >>> [round(float(expert_rank_imbalance(4096 * 8, e)), 4) for e in (1, 8, 64)]
    [1.0, 1.0105, 1.0158]
    """
    mu = np.maximum(np.asarray(rows_per_rank, dtype=np.float64), 1.0)
    e = np.maximum(np.asarray(ep, dtype=np.float64), 1.0)
    return 1.0 + np.sqrt(2.0 * np.log(e)) * np.sqrt((1.0 - 1.0 / e) / mu)


def layer_gemms(
    arch: ModelArch,
    tokens: Num,
    tp: Num,
    ep: Num = 1,
    *,
    etp: Num | None = None,
    include_logits: bool = True,
) -> list[Gemm]:
    """Forward GEMMs of one layer (and the output projection) on one TP rank.

    Megatron's column/row split (Shoeybi et al. 2019, section 3): the QKV and MLP-up
    matrices are split by output columns, the attention-output and MLP-down matrices by
    input rows, so that ``n`` or ``k`` shrinks by ``tp`` while ``m`` (the tokens of the
    micro-batch on this rank, all-gathered over TP with sequence parallelism) does not.
    Routed experts are spread over ``ep`` ranks and split by ``tp`` inside
    (expert-tensor-parallel = TP, the Megatron-core default); with balanced top-k routing
    each local expert sees ``tokens*top_k*ep/E`` tokens. With MoE parallel folding the
    experts are split by ``etp < tp`` instead, and the ``tp/etp`` TP ranks that share a
    micro-batch's tokens take disjoint shares of them (``tokens*top_k*ep/E * etp/tp`` per
    expert): the expert FLOPs per GPU are the same, at other GEMM shapes.

    Parameters
    ----------
    tokens:
        Tokens of one micro-batch on this rank, ``micro_batch * seq_len / cp``.
    tp, ep:
        Tensor- and expert-parallel sizes (arrays broadcast with ``tokens``).
    """
    t = np.asarray(tokens, dtype=np.float64)
    tp = np.asarray(tp, dtype=np.float64)
    ep = np.asarray(ep, dtype=np.float64)
    etp_ = tp if etp is None else np.asarray(etp, dtype=np.float64)
    one = np.ones_like(t * tp * ep * etp_)
    h, a = arch.hidden, arch.heads
    g: list[Gemm] = []
    if arch.attention == "mla" and arch.mla:
        m = arch.mla
        q_lora = m.q_lora_rank or 0
        kv_lora = m.kv_lora_rank
        nope, rope, v = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
        if q_lora:
            # The down-projections are small and replicated across TP ranks in Megatron.
            g.append(Gemm("q_down", t, q_lora * one, h * one, one, "attn_proj", "layer"))
            g.append(
                Gemm("q_up", t, a * (nope + rope) / tp, q_lora * one, one, "attn_proj", "layer")
            )
        else:
            g.append(Gemm("q_proj", t, a * (nope + rope) / tp, h * one, one, "attn_proj", "layer"))
        g.append(Gemm("kv_down", t, (kv_lora + rope) * one, h * one, one, "attn_proj", "layer"))
        g.append(Gemm("kv_up", t, a * (nope + v) / tp, kv_lora * one, one, "attn_proj", "layer"))
        g.append(Gemm("attn_out", t, h * one, a * v / tp, one, "attn_proj", "layer"))
        if arch.dsa is not None:
            # DSA's lightning indexer, replicated on every TP rank (reference Indexer: plain
            # Linear layers): its queries from the query latent, one key and the head weights
            n_i, d_i = arch.dsa.indexer_heads, arch.dsa.indexer_head_dim
            g.append(
                Gemm("index_q", t, n_i * d_i * one, (q_lora or h) * one, one, "attn_proj", "layer")
            )
            g.append(Gemm("index_kw", t, (d_i + n_i) * one, h * one, one, "attn_proj", "layer"))
    else:
        d = arch.d_head
        qkv = (a + 2 * arch.n_kv_heads) * d + (a * d if arch.attention_output_gate else 0)
        w_attn = arch.attention_fraction * one  # per layer: a hybrid model's attention share
        g.append(Gemm("qkv", t, qkv / tp, h * one, w_attn, "attn_proj", "layer"))
        g.append(Gemm("attn_out", t, h * one, a * d / tp, w_attn, "attn_proj", "layer"))
    up = 2 if arch.gated_mlp else 1
    if arch.is_hybrid:
        # Hybrid blocks (Megatron-core MambaMixer / MLP): the MLP and Mamba projections at
        # their share of the layers; in_proj split by output columns, out_proj by rows.
        # (a hybrid model with experts has MoE blocks instead: added below, per MoE layer)
        f = arch.ffn_hidden
        w_mlp = arch.mlp_fraction * one
        if arch.num_dense_mlp_blocks:
            g.append(Gemm("mlp_up", t, up * f / tp, h * one, w_mlp, "mlp", "layer"))
            g.append(Gemm("mlp_down", t, h * one, f / tp, w_mlp, "mlp", "layer"))
        if arch.mamba_layers:
            in_width, _, d_in = arch.mamba_widths()
            w_m = arch.mamba_fraction * one
            g.append(
                Gemm(
                    "mamba_in",
                    t,
                    in_width / tp,
                    h * one,
                    w_m,
                    "mamba",
                    "layer",
                )
            )
            g.append(Gemm("mamba_out", t, h * one, d_in / tp, w_m, "mamba", "layer"))
    elif arch.num_dense_layers:
        f = arch.ffn_hidden
        g.append(Gemm("mlp_up", t, up * f / tp, h * one, one, "mlp", "dense"))
        g.append(Gemm("mlp_down", t, h * one, f / tp, one, "mlp", "dense"))
    if arch.is_moe:
        e, k_top, fe = arch.num_experts, arch.top_k, arch.expert_ffn
        local_experts = e / ep
        tokens_per_expert = t * k_top * ep / e * etp_ / tp
        g.append(Gemm("router", t, e * one, h * one, one, "router", "moe"))
        g.append(
            Gemm(
                "expert_up",
                tokens_per_expert,
                up * fe / etp_,
                h * one,
                local_experts,
                "expert",
                "moe",
            )
        )
        g.append(
            Gemm(
                "expert_down", tokens_per_expert, h * one, fe / etp_, local_experts, "expert", "moe"
            )
        )
        if arch.num_shared_experts:
            fs = arch.num_shared_experts * arch.shared_expert_ffn
            g.append(Gemm("shared_up", t, up * fs / tp, h * one, one, "mlp", "moe"))
            g.append(Gemm("shared_down", t, h * one, fs / tp, one, "mlp", "moe"))
    if include_logits:
        g.append(Gemm("logits", t, arch.vocab / tp, h * one, one, "logits", "model"))
    return g


def attention_core_shape(
    arch: ModelArch, micro_batch: Num, seq_len: Num, tp: Num, cp: Num
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Batched GEMM of the attention core on one rank: ``(m, n, k)`` and its batch.

    Query rows of this rank (``seq_len/cp`` per sequence) against all keys (``seq_len``)
    with ``k = d_qk``, batched over ``micro_batch * heads/tp``. Used to read the achieved
    GEMM rate at the attention shape (flash attention runs these products tile by tile).
    """
    s = np.asarray(seq_len, dtype=np.float64)
    m = s / np.asarray(cp, dtype=np.float64)
    batch = (
        np.asarray(micro_batch, dtype=np.float64) * arch.heads / np.asarray(tp, dtype=np.float64)
    )
    return m, s * np.ones_like(m), arch.qk_head_dim * np.ones_like(m), batch


# ----------------------------------------------------------------------------- LoRA
#: GEMM kinds a LoRA fine-tune adapts: every linear projection of the blocks (attention,
#: dense and shared-expert MLP, Mamba in/out), as PEFT's ``target_modules="all-linear"``
#: and NeMo AutoModel's ``target_modules: '*_proj'`` do. Routed experts (grouped-GEMM
#: weights, not linear modules), the router and the output layer are left frozen.
LORA_KINDS = ("attn_proj", "mlp", "mamba")
#: ``--lora-modules``: ``all`` (every linear projection above), ``attention`` (the attention
#: projections: q, k, v and o, or MLA's), ``qkv`` (the query/key/value projections only:
#: NeMo 1.x's default ``attention_qkv``). MLPerf Training's Llama 2 70B LoRA reference
#: adapts ``qkv_proj`` and ``o_proj`` of a fused-QKV checkpoint (github mlcommons/training
#: llama2_70b_lora/run_llama_70B_scrolls_r16.sh): ``attention``, fused.
LORA_MODULES = ("all", "attention", "qkv")


def lora_adapts(g: Gemm, modules: str = "all") -> bool:
    """Whether ``--lora-modules modules`` puts an adapter on GEMM ``g``."""
    if modules == "all":
        return g.kind in LORA_KINDS
    if modules == "attention":
        return g.kind == "attn_proj"
    return g.kind == "attn_proj" and g.name != "attn_out"


def lora_module_parts(arch: ModelArch, g: Gemm) -> int:
    """Linear modules one fused GEMM of :func:`layer_gemms` stands for, each with its own
    adapter: ``q_proj``, ``k_proj``, ``v_proj`` for ``qkv``; ``gate_proj`` and ``up_proj``
    for a gated MLP's up-projection; one otherwise."""
    if g.name == "qkv":
        return 3
    if g.name in ("mlp_up", "shared_up") and arch.gated_mlp:
        return 2
    return 1


def lora_adapter_io(
    arch: ModelArch, g: Gemm, modules: str = "all", fused: bool = False
) -> tuple[FloatArray, FloatArray] | None:
    """Summed input and output widths of the LoRA adapters on GEMM ``g`` (``None`` when
    the GEMM is not adapted): each of its ``p`` modules has ``A`` (in x r) and ``B``
    (r x out); the fused GEMM's ``p`` modules share its input width ``k`` and split its
    output ``n``, so the adapters read ``p*k`` and write ``n`` per token (Hu et al. 2021,
    "LoRA", arXiv 2106.09685, section 4: ``h = W0 x + B A x``). ``fused``: the framework
    adapts the fused matrix as one module (``p = 1``: Megatron-core's ``linear_qkv`` and
    ``linear_fc1``, NeMo's LoRA)."""
    if not lora_adapts(g, modules):
        return None
    p = 1.0 if fused else float(lora_module_parts(arch, g))
    return p * np.asarray(g.k, dtype=float), np.asarray(g.n, dtype=float)


def lora_trainable_params(
    arch: ModelArch, rank: int, modules: str = "all", fused: bool = False
) -> float:
    """Parameters of the LoRA adapters of rank ``rank`` on every adapted module of the model:
    ``r * (in + out)`` per module (Hu et al. 2021, section 4.2); ``modules`` and ``fused``
    as in :func:`lora_adapter_io`."""
    per = {"layer": arch.layers, "dense": arch.num_dense_layers, "moe": arch.num_moe_layers}
    total = 0.0
    for g in layer_gemms(arch, 1.0, 1.0, 1.0, include_logits=False):
        io = lora_adapter_io(arch, g, modules, fused)
        if io is None:
            continue
        width = float(np.sum(io[0] + io[1]))
        total += float(rank) * width * float(np.max(g.count)) * per[g.per]
    return total
