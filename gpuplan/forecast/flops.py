"""Transformer architecture, parameter counts, per-rank GEMM shapes and FLOP counts.

Pure functions, no I/O. Shared by the training (#5) and inference (#6) forecasts: the
architecture record :class:`ModelArch`, the parameter counts, the per-layer GEMM shapes on
one tensor-parallel rank (they shrink with TP), and the FLOP conventions used to report
MFU/HFU.

Conventions
-----------
* FLOPs count a multiply-add as 2 FLOPs; a GEMM ``(m x k) @ (k x n)`` costs ``2*m*n*k``.
* Model FLOPs per token follow PaLM (Chowdhery et al. 2022, appendix B):
  ``6*N + 12*L*h*s`` where ``N`` counts the parameters that take part in matmuls for one
  token (for a mixture of experts only the *active* experts; the input embedding lookup is
  not a matmul, the output projection is) and the attention term counts the full
  (non-causal) ``QK^T`` and ``AV`` products for forward and backward.
* Hardware FLOPs add what activation recomputation re-executes: with full recompute one
  more forward of every transformer layer (Narayanan et al. 2021, eq. 3:
  ``96*B*s*L*h^2*(1 + s/(6h) + V/(16*L*h))`` per step for a GPT), with selective recompute
  the attention core forward (Korthikanti et al. 2022, section 5).

Examples
--------
>>> gpt3 = ModelArch(name="gpt3-175b", layers=96, hidden=12288, heads=96, ffn_hidden=49152,
...                  vocab=51200, gated_mlp=False, tied_embeddings=True)
>>> round(gpt3.params_total() / 1e9, 1)
174.6
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuplan.errors import InputError

ATTENTION_KINDS = ("mha", "gqa", "mqa", "mla")


@dataclass(frozen=True, kw_only=True)
class ModelArch:
    """Architecture of a decoder-only transformer (dense or mixture of experts).

    Sizes are counts (not bytes). Validation happens in ``__post_init__``; a bad value
    raises :class:`gpuplan.errors.InputError` naming the field.
    """

    name: str = "custom"
    """Identifier shown in outputs (catalog id when the model came from the catalog)."""
    layers: int
    """Number of transformer blocks ``L``."""
    hidden: int
    """Model width ``h`` (residual stream)."""
    heads: int
    """Attention (query) heads ``a``."""
    ffn_hidden: int
    """Intermediate size of a dense MLP block."""
    vocab: int
    """Vocabulary size ``V``."""
    kv_heads: int | None = None
    """Key/value heads (GQA/MQA); ``None`` means as many as ``heads`` (MHA)."""
    head_dim: int | None = None
    """Per-head dimension; ``None`` means ``hidden // heads``."""
    tied_embeddings: bool = False
    """Input embedding and output projection share one matrix."""
    gated_mlp: bool = True
    """SwiGLU/GeGLU MLP with three matrices (True) or a GELU MLP with two (False)."""
    num_experts: int = 0
    """Routed experts per MoE layer; 0 or 1 means a dense model."""
    top_k: int = 0
    """Routed experts each token is sent to."""
    num_shared_experts: int = 0
    """Always-active shared experts per MoE layer (DeepSeek style)."""
    max_nodes_per_token: int | None = None
    """Node-limited routing: the router sends each token to experts on at most this many
    EP nodes (DeepSeek-V3's ``topk_group`` 4 of ``n_group`` 8 expert groups, one group per
    node at EP64 over 8 nodes; DeepSeek-AI 2024, arXiv 2412.19437, section 2.1.2
    "Node-Limited Routing", M = 4). ``None``: no limit (each of the ``top_k`` copies may
    go to another node)."""
    moe_ffn_hidden: int | None = None
    """Intermediate size of one expert; ``None`` means ``ffn_hidden``."""
    first_dense_layers: int = 0
    """Leading layers that use a dense MLP in an MoE model."""
    moe_layer_freq: int = 1
    """Every ``moe_layer_freq``-th layer (after the dense ones) is an MoE layer."""
    attention: str = "mha"
    """``mha`` | ``gqa`` | ``mqa`` | ``mla``."""
    mla: dict[str, int] | None = None
    """Multi-head latent attention ranks: q_lora_rank (0 = none), kv_lora_rank,
    qk_nope_head_dim, qk_rope_head_dim, v_head_dim (DeepSeek-V2/V3)."""
    dropout: bool = False
    """Dropout layers present (GPT-era training); adds masks to the activation memory."""
    causal: bool = True
    """Causal (decoder) attention: flash-attention kernels skip the masked half."""
    sliding_window: int | None = None
    """Tokens a local (sliding-window) attention layer attends to; None = full attention."""
    full_attention_interval: int | None = None
    """With ``sliding_window``: every N-th layer attends to the full context (Gemma 3: 6,
    GPT-OSS: 2); None = every layer local."""
    mamba_layers: int = 0
    """Hybrid models (Nemotron-H): blocks whose mixer is a Mamba-2 layer. With it (or with
    ``attention_layers``) every one of the ``layers`` is a single block, as in Megatron's
    hybrid_override_pattern: ``mamba_layers`` Mamba-2, ``attention_layers`` self-attention
    and the rest MLP blocks, each with its own pre-norm and residual."""
    attention_layers: int | None = None
    """Hybrid models: self-attention blocks; None = a standard transformer (every layer has
    attention and MLP)."""
    mamba: dict[str, int] | None = None
    """Mamba-2 mixer sizes: heads, head_dim, state, groups, conv_kernel (Dao & Gu 2024)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form provenance (catalog source, notes)."""

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "ffn_hidden", "vocab"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value <= 0:
                raise InputError(
                    f"model {self.name!r}: {name} must be a positive integer, got {value!r}",
                    hint=f"pass --{name.replace('_', '-')} N with N >= 1",
                )
        if self.kv_heads is not None and (self.kv_heads <= 0 or self.heads % self.kv_heads != 0):
            raise InputError(
                f"model {self.name!r}: kv_heads={self.kv_heads} must be positive and divide "
                f"heads={self.heads}",
                hint="use --kv-heads equal to --heads (MHA), a divisor of it (GQA) or 1 (MQA)",
            )
        if self.head_dim is not None and self.head_dim <= 0:
            raise InputError(f"model {self.name!r}: head_dim must be positive")
        if self.head_dim is None and self.hidden % self.heads != 0 and self.mla is None:
            raise InputError(
                f"model {self.name!r}: hidden={self.hidden} is not divisible by heads={self.heads}",
                hint="give head_dim explicitly or choose heads dividing hidden",
            )
        if self.attention not in ATTENTION_KINDS:
            raise InputError(
                f"model {self.name!r}: unknown attention kind {self.attention!r}",
                hint="one of " + ", ".join(ATTENTION_KINDS),
            )
        if self.attention == "mla" and not self.mla:
            raise InputError(f"model {self.name!r}: attention 'mla' needs the mla ranks")
        if self.num_experts > 1:
            if not 1 <= self.top_k <= self.num_experts:
                raise InputError(
                    f"model {self.name!r}: top_k={self.top_k} must be between 1 and "
                    f"num_experts={self.num_experts}",
                    hint="pass --top-k K with 1 <= K <= --experts",
                )
            if self.moe_ffn_hidden is not None and self.moe_ffn_hidden <= 0:
                raise InputError(f"model {self.name!r}: moe_ffn_hidden must be positive")
        if not 0 <= self.first_dense_layers <= self.layers:
            raise InputError(f"model {self.name!r}: first_dense_layers out of range")
        if self.sliding_window is not None and self.sliding_window <= 0:
            raise InputError(f"model {self.name!r}: sliding_window must be positive")
        if self.full_attention_interval is not None and self.full_attention_interval <= 0:
            raise InputError(f"model {self.name!r}: full_attention_interval must be positive")
        if self.is_hybrid:
            n_attn = self.attention_layers or 0
            if self.mamba_layers < 0 or n_attn < 0 or self.mamba_layers + n_attn > self.layers:
                raise InputError(
                    f"model {self.name!r}: mamba_layers + attention_layers must be at most "
                    f"layers={self.layers}"
                )
            if self.mamba_layers and not self.mamba:
                raise InputError(f"model {self.name!r}: mamba_layers needs the mamba sizes")
            if self.num_experts > 1:
                raise InputError(
                    f"model {self.name!r}: hybrid Mamba models with experts are not modelled",
                    hint="drop --experts, or describe the model without Mamba blocks",
                )

    # ----------------------------------------------------------------- derived sizes
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden if self.moe_ffn_hidden is not None else self.ffn_hidden

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def qk_head_dim(self) -> int:
        """Per-head width of the query/key dot product (nope + rope for MLA)."""
        if self.attention == "mla" and self.mla:
            return int(self.mla["qk_nope_head_dim"]) + int(self.mla["qk_rope_head_dim"])
        return self.d_head

    @property
    def v_head_dim(self) -> int:
        if self.attention == "mla" and self.mla:
            return int(self.mla["v_head_dim"])
        return self.d_head

    @property
    def num_moe_layers(self) -> int:
        if not self.is_moe:
            return 0
        rest = self.layers - self.first_dense_layers
        return rest // max(1, self.moe_layer_freq)

    @property
    def num_dense_layers(self) -> int:
        return self.layers - self.num_moe_layers

    # ------------------------------------------------------------- hybrid (Mamba) blocks
    @property
    def is_hybrid(self) -> bool:
        return self.mamba_layers > 0 or self.attention_layers is not None

    @property
    def attention_fraction(self) -> float:
        """Share of the layers with self-attention (1 for a standard transformer)."""
        return (self.attention_layers or 0) / self.layers if self.is_hybrid else 1.0

    @property
    def mlp_fraction(self) -> float:
        """Share of the layers with an MLP (1 for a standard transformer)."""
        if not self.is_hybrid:
            return 1.0
        return (self.layers - self.mamba_layers - (self.attention_layers or 0)) / self.layers

    @property
    def mamba_fraction(self) -> float:
        return self.mamba_layers / self.layers if self.is_hybrid else 0.0

    @property
    def blocks_per_layer(self) -> float:
        """Pre-norm + residual blocks per layer: 2 (attention, MLP), 1 in a hybrid model."""
        return 1.0 if self.is_hybrid else 2.0

    def mamba_dims(self) -> tuple[int, int, int, int, int]:
        """(heads, head_dim, state, groups, conv_kernel) of the Mamba-2 mixer."""
        m = self.mamba or {}
        return (
            int(m.get("heads", 0)),
            int(m.get("head_dim", 64)),
            int(m.get("state", 128)),
            int(m.get("groups", 1)),
            int(m.get("conv_kernel", 4)),
        )

    def mamba_params(self) -> int:
        """Weights of one Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs", section 7;
        Megatron-core MambaMixer): in_proj ``h x (2*d_in + 2*G*N + H)`` (z, x, B, C, dt),
        depthwise conv over ``x, B, C``, per-head ``A``, ``D``, ``dt`` bias, the gated norm
        and out_proj ``d_in x h``, with ``d_in = H * P``."""
        heads, p, n, g, k = self.mamba_dims()
        d_in = heads * p
        conv_ch = d_in + 2 * g * n
        return (
            self.hidden * (2 * d_in + 2 * g * n + heads)
            + conv_ch * (k + 1)
            + 3 * heads
            + d_in
            + d_in * self.hidden
        )

    def ssd_flops_per_token(self) -> float:
        """Forward FLOPs of the Mamba-2 SSD scan per token (beyond its projections).

        The chunked algorithm (Dao & Gu 2024, section 6) computes, per head, an intra-chunk
        ``C B^T`` and its product with ``x`` (``2*Q*(N + P)`` per token for chunk length
        ``Q``, counted non-causally as attention is) and the chunk states in and out
        (``4*N*P``). ``Q`` = 128, the Megatron-core / mamba_ssm default chunk size.
        """
        heads, p, n, _, _ = self.mamba_dims()
        chunk = 128.0
        return float(heads) * (2.0 * chunk * (n + p) + 4.0 * n * p)

    @property
    def num_local_attention_layers(self) -> int:
        """Layers with sliding-window attention (the others attend to the full context)."""
        if self.sliding_window is None:
            return 0
        if self.full_attention_interval is None:
            return self.layers
        return self.layers - self.layers // self.full_attention_interval

    def attention_keys_per_query(self, seq_len: Any, *, executed: bool = False) -> Any:
        """Keys each query attends to, averaged over the layers, in PaLM's non-causal units.

        A full-attention layer counts ``s`` (PaLM appendix B). A sliding-window layer counts
        the window ``min(s, w)`` for the model FLOPs: a query attends to ``w`` keys, so the
        attention cost is ``O(s*w)`` (Beltagy et al. 2020, "Longformer", section 3.1; Jiang
        et al. 2023, "Mistral 7B", section 2). With ``executed`` the count is the work a
        causal kernel runs, in the same units as the full layers' ``s`` (which do half of
        it, the masked half skipped): ``2w - w^2/s`` for ``w < s`` (every query of a causal
        window sees ``min(i, w)`` keys), so that one fitted attention factor serves both.

        >>> a = ModelArch(layers=6, hidden=64, heads=4, ffn_hidden=256, vocab=10,
        ...               sliding_window=1024, full_attention_interval=6)
        >>> float(a.attention_keys_per_query(8192)), float(a.attention_keys_per_query(8192, executed=True))
        (2218.6666666666665, 2965.3333333333335)
        """
        s = np.asarray(seq_len, dtype=float)
        n_local = self.num_local_attention_layers
        if not n_local:
            return s
        w = np.minimum(float(self.sliding_window or 0), s)
        local = np.where(w < s, 2.0 * w - w * w / s, s) if executed else w
        return ((self.layers - n_local) * s + n_local * local) / self.layers

    # ---------------------------------------------------------------- parameter counts
    def attention_params(self) -> int:
        """Weights of one attention block (projections only, biases ignored)."""
        h, a = self.hidden, self.heads
        if self.attention == "mla" and self.mla:
            m = self.mla
            q_lora = int(m.get("q_lora_rank") or 0)
            kv_lora = int(m["kv_lora_rank"])
            nope, rope, v = (
                int(m["qk_nope_head_dim"]),
                int(m["qk_rope_head_dim"]),
                int(m["v_head_dim"]),
            )
            q = h * q_lora + q_lora * a * (nope + rope) if q_lora else h * a * (nope + rope)
            kv = h * (kv_lora + rope) + kv_lora * a * (nope + v)
            return q + kv + a * v * h
        d = self.d_head
        return h * a * d + 2 * h * self.n_kv_heads * d + a * d * h

    def dense_mlp_params(self) -> int:
        return self.mlp_matrices * self.hidden * self.ffn_hidden

    def expert_params(self) -> int:
        """Weights of one routed (or shared) expert."""
        return self.mlp_matrices * self.hidden * self.expert_ffn

    def moe_mlp_params(self, *, active: bool) -> int:
        """Router + experts of one MoE layer; ``active`` counts only top_k + shared."""
        routed = self.top_k if active else self.num_experts
        return (
            self.hidden * self.num_experts
            + (routed + self.num_shared_experts) * self.expert_params()
        )

    def layer_params(self, *, active: bool = False) -> int:
        """Weights of all transformer blocks (norms included)."""
        if self.is_hybrid:
            n_attn = self.attention_layers or 0
            n_mlp = self.layers - self.mamba_layers - n_attn
            return (
                self.mamba_layers * self.mamba_params()
                + n_attn * self.attention_params()
                + n_mlp * self.dense_mlp_params()
                + self.layers * self.hidden
            )
        norms = 2 * self.hidden
        dense = self.attention_params() + self.dense_mlp_params() + norms
        total = self.num_dense_layers * dense
        if self.is_moe:
            moe = self.attention_params() + self.moe_mlp_params(active=active) + norms
            total += self.num_moe_layers * moe
        return total

    def embedding_params(self) -> int:
        """Input embedding plus (untied) output projection."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    def params_total(self) -> int:
        """All parameters (every expert counted)."""
        return self.layer_params(active=False) + self.embedding_params() + self.hidden

    def params_active(self) -> int:
        """Parameters touched by one token (top_k + shared experts only)."""
        return self.layer_params(active=True) + self.embedding_params() + self.hidden

    def matmul_params_active(self) -> int:
        """``N`` of the ``6N`` rule: active parameters taking part in matmuls per token.

        The input embedding is a lookup, not a matmul, so it is left out; the output
        projection (``V*h``, shared or not) is in.
        """
        return self.layer_params(active=True) + self.vocab * self.hidden

    def with_(self, **changes: Any) -> ModelArch:
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("extra", None)
        return d


def _as_dict(value: Any) -> dict[str, int] | None:
    if value is None:
        return None
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    return {k: int(v) for k, v in dict(value).items() if v is not None}


def arch_from_catalog(row: Any) -> ModelArch:
    """Build a :class:`ModelArch` from a catalog model row (``get_catalog().model(id)``).

    The row is read by attribute name (see docs/dev/INTERFACES.md); missing optional
    attributes fall back to the dense defaults.
    """

    def get(name: str, default: Any = None) -> Any:
        value = getattr(row, name, default)
        return default if value is None else value

    num_experts = int(get("num_experts", 0) or 0)
    attention = str(get("attention", "mha") or "mha").lower()
    mla = get("mla")
    if mla is not None and not isinstance(mla, dict):
        if hasattr(mla, "model_dump"):
            mla = mla.model_dump()
        elif hasattr(mla, "keys"):
            mla = dict(mla)
        else:
            mla = dataclasses.asdict(mla)
    return ModelArch(
        name=str(get("id", "custom")),
        layers=int(get("layers")),
        hidden=int(get("hidden")),
        heads=int(get("heads")),
        kv_heads=int(get("kv_heads")) if get("kv_heads") else None,
        head_dim=int(get("head_dim")) if get("head_dim") else None,
        ffn_hidden=int(get("ffn_hidden")),
        vocab=int(get("vocab")),
        tied_embeddings=bool(get("tied_embeddings", False)),
        gated_mlp=bool(get("gated_mlp", True)),
        num_experts=num_experts if num_experts > 1 else 0,
        top_k=int(get("top_k", 0) or 0) if num_experts > 1 else 0,
        num_shared_experts=int(get("num_shared_experts", 0) or 0),
        max_nodes_per_token=(
            int(get("max_nodes_per_token", get("topk_group")))
            if get("max_nodes_per_token", get("topk_group"))
            else None
        ),
        moe_ffn_hidden=int(get("moe_ffn_hidden")) if get("moe_ffn_hidden") else None,
        first_dense_layers=int(get("first_dense_layers", 0) or 0),
        moe_layer_freq=int(get("moe_layer_interval", get("moe_layer_freq", 1)) or 1),
        attention=attention if attention in ATTENTION_KINDS else "mha",
        mla=mla if attention == "mla" else None,
        sliding_window=int(get("sliding_window")) if get("sliding_window") else None,
        mamba_layers=int(get("mamba_layers", 0) or 0),
        attention_layers=(
            int(get("attention_layers")) if get("attention_layers") is not None else None
        ),
        mamba=_as_dict(get("mamba")),
        full_attention_interval=(
            int(get("full_attention_interval")) if get("full_attention_interval") else None
        ),
        extra={"source": get("source"), "retrieved": str(get("retrieved", ""))},
    )


# ------------------------------------------------------------------------ FLOP counts
def attention_core_flops_per_token_layer(
    arch: ModelArch, seq_len: Any, *, executed: bool = False
) -> Any:
    """Forward FLOPs of ``QK^T`` and ``AV`` for one token in one layer, non-causal.

    ``2*s*a*(d_qk + d_v)``; for standard heads (``a*d = h``) this is ``4*s*h``, the forward
    third of PaLM's ``12*L*h*s`` attention term (Chowdhery et al. 2022, appendix B). With
    sliding-window layers ``s`` is the layer average of
    :meth:`ModelArch.attention_keys_per_query` (``executed``: the kernel's work).
    """
    keys = arch.attention_keys_per_query(seq_len, executed=executed)
    attn = 2.0 * keys * arch.heads * (arch.qk_head_dim + arch.v_head_dim)
    if not arch.is_hybrid:
        return attn
    # Hybrid: the layer average of the attention blocks' core and the Mamba blocks' scan.
    return attn * arch.attention_fraction + arch.ssd_flops_per_token() * arch.mamba_fraction


def model_flops_per_token(arch: ModelArch, seq_len: Any) -> Any:
    """Training FLOPs per token, PaLM appendix B: ``6*N + 12*L*h*s`` (forward + backward).

    ``N`` = :meth:`ModelArch.matmul_params_active` (active parameters only for MoE). This
    is the numerator of MFU: recomputation is never counted.

    >>> arch = ModelArch(layers=2, hidden=64, heads=4, ffn_hidden=256, vocab=100,
    ...                  gated_mlp=False)
    >>> int(model_flops_per_token(arch, 128)) == 6 * arch.matmul_params_active() + 12 * 2 * 64 * 128
    True
    """
    n = arch.matmul_params_active()
    return 6.0 * n + 3.0 * arch.layers * attention_core_flops_per_token_layer(arch, seq_len)


def recompute_flops_per_token(arch: ModelArch, seq_len: Any, recompute: Any) -> Any:
    """FLOPs re-executed per token by activation recomputation (forward only).

    ``recompute`` is 0 (none), 1 (selective: attention core, Korthikanti et al. 2022
    section 5) or 2 (full: every transformer layer's forward, Narayanan et al. 2021 eq. 3
    which recomputes all layers but not the output projection). Vectorised over
    ``recompute`` and ``seq_len``.
    """
    recompute = np.asarray(recompute)
    attn = arch.layers * attention_core_flops_per_token_layer(arch, seq_len)
    layers = 2.0 * arch.layer_params(active=True) + attn
    return np.where(recompute >= 2, layers, np.where(recompute == 1, attn, 0.0))


def hardware_flops_per_token(arch: ModelArch, seq_len: Any, recompute: Any) -> Any:
    """Model FLOPs plus the recomputed forward (the numerator of HFU)."""
    return model_flops_per_token(arch, seq_len) + recompute_flops_per_token(
        arch, seq_len, recompute
    )


def megatron_flops_per_step(
    batch: Any, seq_len: Any, layers: Any, hidden: Any, vocab: Any, *, full_recompute: bool
) -> Any:
    """FLOPs per iteration as Narayanan et al. (2021) count them, eq. 3.

    ``96*B*s*L*h^2*(1 + s/(6h) + V/(16*L*h))`` with full recomputation; without it the
    layer part is 3/4 of that (``72*B*s*L*h^2*(1 + s/(6h)) + 6*B*s*h*V``). Used by the
    validation to read the paper's TFLOP/s back into a step time with the paper's own
    convention (GPT blocks with a 4h MLP).

    >>> f = megatron_flops_per_step(1, 2048, 24, 2304, 51200, full_recompute=True)
    >>> round(float(f) / 1e12, 1)
    30.2
    """
    b, s, lyr, h, v = (np.asarray(x, dtype=float) for x in (batch, seq_len, layers, hidden, vocab))
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
    m: Any
    n: Any
    k: Any
    count: Any
    kind: str
    per: str  # "layer" (every layer), "dense" (dense-MLP layers), "moe" (MoE layers), "model"

    def flops(self) -> Any:
        return 2.0 * self.m * self.n * self.k * self.count


#: Rows of one M tile of the grouped GEMM that runs the routed experts: each expert's
#: token block is computed in whole tiles of 128 rows (DeepGEMM's contiguous grouped layout
#: aligns every expert's M to its 128-row block, deepseek-ai/DeepGEMM README, "grouped
#: GEMMs (contiguous layout)"; CUTLASS grouped GEMM threadblock tiles of 128 rows,
#: NVIDIA/cutlass examples/24_gemm_grouped; retrieved 2026-12-01). A kernel's tile, not a
#: hardware figure.
GROUPED_GEMM_TILE_ROWS = 128


def grouped_gemm_rows(tokens_per_expert: Any, tile: float = GROUPED_GEMM_TILE_ROWS) -> Any:
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
    m = np.maximum(np.asarray(tokens_per_expert, dtype=float), 0.0)
    t = float(tile)
    pad = (t - 1.0) / 2.0 * np.minimum(1.0, m / t)
    return np.maximum(t * -np.expm1(-m), m + pad)


def expert_rank_imbalance(rows_per_rank: Any, ep: Any) -> Any:
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
    mu = np.maximum(np.asarray(rows_per_rank, dtype=float), 1.0)
    e = np.maximum(np.asarray(ep, dtype=float), 1.0)
    return 1.0 + np.sqrt(2.0 * np.log(e)) * np.sqrt((1.0 - 1.0 / e) / mu)


def layer_gemms(
    arch: ModelArch,
    tokens: Any,
    tp: Any,
    ep: Any = 1,
    *,
    etp: Any = None,
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
    t = np.asarray(tokens, dtype=float)
    tp = np.asarray(tp, dtype=float)
    ep = np.asarray(ep, dtype=float)
    etp_ = tp if etp is None else np.asarray(etp, dtype=float)
    one = np.ones_like(t * tp * ep * etp_)
    h, a = arch.hidden, arch.heads
    g: list[Gemm] = []
    if arch.attention == "mla" and arch.mla:
        m = arch.mla
        q_lora = int(m.get("q_lora_rank") or 0)
        kv_lora = int(m["kv_lora_rank"])
        nope, rope, v = int(m["qk_nope_head_dim"]), int(m["qk_rope_head_dim"]), int(m["v_head_dim"])
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
    else:
        d = arch.d_head
        qkv = (a + 2 * arch.n_kv_heads) * d
        w_attn = arch.attention_fraction * one  # per layer: a hybrid model's attention share
        g.append(Gemm("qkv", t, qkv / tp, h * one, w_attn, "attn_proj", "layer"))
        g.append(Gemm("attn_out", t, h * one, a * d / tp, w_attn, "attn_proj", "layer"))
    up = 2 if arch.gated_mlp else 1
    if arch.is_hybrid:
        # Hybrid blocks (Megatron-core MambaMixer / MLP): the MLP and Mamba projections at
        # their share of the layers; in_proj split by output columns, out_proj by rows.
        f = arch.ffn_hidden
        w_mlp = arch.mlp_fraction * one
        g.append(Gemm("mlp_up", t, up * f / tp, h * one, w_mlp, "mlp", "layer"))
        g.append(Gemm("mlp_down", t, h * one, f / tp, w_mlp, "mlp", "layer"))
        if arch.mamba_layers:
            heads, p, n, grp, _ = arch.mamba_dims()
            d_in = heads * p
            w_m = arch.mamba_fraction * one
            g.append(
                Gemm(
                    "mamba_in",
                    t,
                    (2 * d_in + 2 * grp * n + heads) / tp,
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
            fs = arch.num_shared_experts * fe
            g.append(Gemm("shared_up", t, up * fs / tp, h * one, one, "mlp", "moe"))
            g.append(Gemm("shared_down", t, h * one, fs / tp, one, "mlp", "moe"))
    if include_logits:
        g.append(Gemm("logits", t, arch.vocab / tp, h * one, one, "logits", "model"))
    return g


def attention_core_shape(
    arch: ModelArch, micro_batch: Any, seq_len: Any, tp: Any, cp: Any
) -> tuple[Any, Any, Any, Any]:
    """Batched GEMM of the attention core on one rank: ``(m, n, k)`` and its batch.

    Query rows of this rank (``seq_len/cp`` per sequence) against all keys (``seq_len``)
    with ``k = d_qk``, batched over ``micro_batch * heads/tp``. Used to read the achieved
    GEMM rate at the attention shape (flash attention runs these products tile by tile).
    """
    s = np.asarray(seq_len, dtype=float)
    m = s / np.asarray(cp, dtype=float)
    batch = np.asarray(micro_batch, dtype=float) * arch.heads / np.asarray(tp, dtype=float)
    return m, s * np.ones_like(m), arch.qk_head_dim * np.ones_like(m), batch
