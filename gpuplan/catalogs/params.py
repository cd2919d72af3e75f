"""The parameter count of a transformer language model, written once.

Job of this module: how many weights a model has, block by block, for the catalog row
(:meth:`gpuplan.catalogs.schema.ModelArch.params_total`, checked against each model's
published size) and for the forecasts' architecture record
(:class:`gpuplan.forecast.model.ModelArch`, whose memory and FLOP counts are built from
the same blocks). It lives in ``catalogs``, the lowest layer that holds model
architectures, next to the KV-cache formula (:mod:`gpuplan.catalogs.kv_cache`). Pure
arithmetic on :class:`ArchParams`: no catalog, no I/O.

Counting follows the layer definitions of the models' reference implementations
(Hugging Face transformers ``LlamaDecoderLayer``, ``MixtralSparseMoeBlock``,
``DeepseekV3Attention`` with its ``q_a_layernorm`` / ``kv_a_layernorm`` latent norms;
Megatron-core ``MambaMixer`` for Mamba-2, Dao & Gu 2024): attention projections (MHA, GQA,
MQA, MLA) with optional biases and QK-norm, a gated (3 matrices) or plain (2) MLP with
optional biases, routed and shared experts with the router, norms per block, embeddings,
learned positions and the LM head when untied.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field


class MLAConfig(BaseModel):
    """Multi-head latent attention dimensions (DeepSeek-V2/V3)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    q_lora_rank: int | None = Field(description="None: queries projected directly from hidden")
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


class DSAConfig(BaseModel):
    """DeepSeek Sparse Attention (DeepSeek-V3.2): a lightning indexer scores every cached
    token with a few FP8 heads and the MLA attention reads only the ``topk`` best
    (DeepSeek-AI 2025, "DeepSeek-V3.2-Exp: Boosting Long-Context Efficiency with DeepSeek
    Sparse Attention"; github deepseek-ai/DeepSeek-V3.2-Exp inference/model.py ``Indexer``:
    ``wq_b`` q_lora -> heads x head_dim, ``wk`` hidden -> head_dim, LayerNorm ``k_norm``,
    ``weights_proj`` hidden -> heads, and a cache of one FP8 key with an fp32 scale per
    token)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    indexer_heads: int = Field(gt=0, description="index_n_heads")
    indexer_head_dim: int = Field(gt=0, description="index_head_dim")
    topk: int = Field(gt=0, description="index_topk: keys the sparse attention reads per query")


class MambaConfig(BaseModel):
    """Mamba-2 mixer sizes of a hybrid model (Dao & Gu 2024; Megatron-core MambaMixer)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    state: int = Field(gt=0, description="SSM state size N")
    groups: int = Field(1, gt=0, description="B/C groups (n_groups)")
    conv_kernel: int = Field(4, gt=0)


@dataclass(frozen=True, kw_only=True)
class ArchParams:
    """What the parameter count reads of an architecture (sizes are counts, not bytes)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden: int
    vocab: int
    gated_mlp: bool
    tied_embeddings: bool
    mla: MLAConfig | None = None
    dsa: DSAConfig | None = None
    attention_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    attention_output_gate: bool = False
    norm_bias: bool = False
    norms_per_layer: int = 2
    num_experts: int = 0
    top_k: int = 0
    num_shared_experts: int = 0
    moe_ffn_hidden: int = 0
    shared_expert_ffn_hidden: int = 0
    moe_layers: int = 0
    """Layers whose MLP is a mixture of experts (the others are dense)."""
    router_bias: bool = False
    learned_positions: int = 0
    lm_head_bias: bool = False
    mamba: MambaConfig | None = None
    mamba_layers: int = 0
    attention_layers: int | None = None
    """Hybrid models: self-attention blocks; None = a standard transformer."""

    @property
    def is_hybrid(self) -> bool:
        return self.mamba_layers > 0 or self.attention_layers is not None


def attention_params(a: ArchParams) -> int:
    """One attention block: Q, K, V and output projections (MLA: the down/up projections and
    the two latent norms), with biases and QK-norm where the model has them."""
    h, heads = a.hidden, a.heads
    if a.mla is not None:
        m = a.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q_lora = m.q_lora_rank or 0
        q = h * q_lora + q_lora + q_lora * heads * qk if q_lora else h * heads * qk
        kv_down = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
        kv_up = m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv_down + kv_up + heads * m.v_head_dim * h + indexer_params(a)
    d, kv = a.head_dim, a.kv_heads
    n = h * heads * d + 2 * h * kv * d + heads * d * h
    if a.attention_bias:
        n += heads * d + 2 * kv * d + h
    if a.qk_norm:
        n += 2 * d
    if a.attention_output_gate:  # the query projection's per-head output gate
        n += h * heads * d
    return n


def indexer_params(a: ArchParams) -> int:
    """One DSA lightning indexer (:class:`DSAConfig`): ``wq_b`` from the query latent,
    ``wk`` and ``weights_proj`` from the hidden state, and ``k_norm`` (LayerNorm with bias);
    0 without DSA."""
    if a.dsa is None or a.mla is None:
        return 0
    d, n = a.dsa.indexer_head_dim, a.dsa.indexer_heads
    q_in = a.mla.q_lora_rank or a.hidden
    return q_in * n * d + a.hidden * d + 2 * d + a.hidden * n


def mlp_params(a: ArchParams, width: int) -> int:
    """One MLP (or one expert) of intermediate size ``width``: 3 matrices when gated."""
    n = (3 if a.gated_mlp else 2) * a.hidden * width
    if a.mlp_bias:
        n += (2 if a.gated_mlp else 1) * width + a.hidden
    return n


def norm_params(a: ArchParams) -> int:
    """One norm (RMSNorm: a scale; LayerNorm with bias: scale and shift)."""
    return a.hidden * (2 if a.norm_bias else 1)


def mamba_params(a: ArchParams) -> int:
    """One Mamba-2 mixer: in_proj ``h x (2*d_in + 2*G*N + H)`` (z, x, B, C, dt), depthwise
    conv with bias over x, B, C, per-head A, D and dt bias, the gated norm and out_proj
    ``d_in x h`` (Dao & Gu 2024, section 7; Megatron-core MambaMixer), ``d_in = H * P``."""
    m = a.mamba
    if m is None:
        return 0
    d_in = m.heads * m.head_dim
    conv = d_in + 2 * m.groups * m.state
    return (
        a.hidden * (2 * d_in + 2 * m.groups * m.state + m.heads)
        + conv * (m.conv_kernel + 1)
        + 3 * m.heads
        + d_in
        + d_in * a.hidden
    )


def expert_params(a: ArchParams) -> int:
    """One routed expert."""
    return mlp_params(a, a.moe_ffn_hidden or a.ffn_hidden)


def shared_expert_params(a: ArchParams) -> int:
    """One shared expert (its own width where the model gives one)."""
    return mlp_params(a, a.shared_expert_ffn_hidden or a.moe_ffn_hidden or a.ffn_hidden)


def moe_mlp_params(a: ArchParams, *, active: bool) -> int:
    """Router and experts of one MoE layer; ``active`` counts the ``top_k`` routed experts a
    token uses (shared experts and the router always count)."""
    routed = a.top_k if active else a.num_experts
    router = a.hidden * a.num_experts + (a.num_experts if a.router_bias else 0)
    return router + routed * expert_params(a) + a.num_shared_experts * shared_expert_params(a)


def layer_params(a: ArchParams, *, active: bool = False) -> int:
    """Every transformer block, norms included (embeddings and the final norm excluded)."""
    if a.is_hybrid:
        n_attn = a.attention_layers or 0
        n_mlp = a.layers - a.mamba_layers - n_attn
        # MoE blocks (Nemotron 3) are MLP blocks with experts: moe_layers of the n_mlp
        n_moe = min(a.moe_layers, n_mlp)
        return (
            a.mamba_layers * mamba_params(a)
            + n_attn * attention_params(a)
            + (n_mlp - n_moe) * mlp_params(a, a.ffn_hidden)
            + n_moe * moe_mlp_params(a, active=active)
            + a.layers * norm_params(a)  # one pre-norm per block
        )
    common = attention_params(a) + a.norms_per_layer * norm_params(a)
    dense = a.layers - a.moe_layers
    total = dense * (common + mlp_params(a, a.ffn_hidden))
    if a.moe_layers:
        total += a.moe_layers * (common + moe_mlp_params(a, active=active))
    return total


def embedding_params(a: ArchParams) -> int:
    """Token embedding, learned positions and the LM head (one matrix when tied)."""
    n = a.vocab * a.hidden * (1 if a.tied_embeddings else 2) + a.learned_positions * a.hidden
    return n + (a.vocab if a.lm_head_bias else 0)


def model_params(a: ArchParams, *, active: bool = False) -> int:
    """All parameters (``active``: those one token uses), the final norm included.

    >>> llama70 = ArchParams(layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128,
    ...                      ffn_hidden=28672, vocab=128256, gated_mlp=True,
    ...                      tied_embeddings=False)
    >>> round(model_params(llama70) / 1e9, 2)
    70.55
    """
    return layer_params(a, active=active) + embedding_params(a) + norm_params(a)
