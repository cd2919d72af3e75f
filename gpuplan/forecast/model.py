"""The one architecture record of the forecasts, and what follows from the architecture alone.

Job of this module: :class:`ModelArch` describes a decoder-only language model (dense,
mixture of experts with routed, shared and fine-grained experts and leading dense layers,
full / sliding-window / multi-head latent attention, hybrid Mamba-2 state-space blocks) for
both the training and the inference forecasts and the planner. It is built from a catalog
row (:func:`arch_from_catalog`), from any of the accepted inputs (:func:`arch_from`: a
catalog row, a mapping with the same field names, or a record), from ``--model-file`` and
explicit flags (:mod:`gpuplan.cli._model`, which also reads a Hugging Face ``config.json``).

One function each, citing its source:

* parameters: :meth:`ModelArch.params_total`, :meth:`ModelArch.params_active`,
  :meth:`ModelArch.embedding_params` (and the per-block counts they add up);
* FLOPs per token: :func:`model_flops_per_token` (forward + backward, PaLM appendix B),
  :func:`recompute_flops_per_token`, :func:`hardware_flops_per_token`, with the attention
  core :func:`attention_core_flops_per_token_layer`;
* KV-cache bytes per token: :func:`kv_cache_bytes_per_token`, which evaluates the one
  formula :func:`gpuplan.catalogs.kv_cache.kv_cache_bytes_per_token` for the record.

The per-rank GEMM shapes of training live in :mod:`gpuplan.forecast.flops`, the inference
sharding in :mod:`gpuplan.forecast.inference_arch`.

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeAlias

import numpy as np

from gpuplan.catalogs import params
from gpuplan.catalogs.kv_cache import kv_cache_bytes_per_token as kv_cache_formula
from gpuplan.catalogs.params import ArchParams, DSAConfig, MambaConfig, MLAConfig
from gpuplan.catalogs.schema import ModelArch as CatalogModel
from gpuplan.errors import InputError
from gpuplan.numeric import FloatArray, Num

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
    mla: MLAConfig | None = None
    """Multi-head latent attention ranks (the catalog's record): q_lora_rank (None or 0 =
    queries projected directly), kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
    v_head_dim (DeepSeek-V2/V3). A mapping with those keys is accepted and converted."""
    dsa: DSAConfig | None = None
    """DeepSeek Sparse Attention on the MLA layers (DeepSeek-V3.2): indexer_heads,
    indexer_head_dim and topk (:class:`gpuplan.catalogs.params.DSAConfig`). The main
    attention reads the ``topk`` keys a lightning indexer picks; the indexer scores every
    cached key. A mapping with those keys is accepted and converted."""
    dropout: bool = False
    """Dropout layers present (GPT-era training); adds masks to the activation memory."""
    causal: bool = True
    """Causal (decoder) attention: flash-attention kernels skip the masked half."""
    sliding_window: int | None = None
    """Tokens a local (sliding-window) attention layer attends to; None = full attention."""
    attention_chunk: int | None = None
    """Chunked local attention (Llama 4's ``attention_chunk_size`` 8192): a local layer's
    query attends to the earlier keys of its own block of this many tokens (transformers
    ``Llama4TextModel``'s chunked mask on the RoPE layers); None = none."""
    full_attention_interval: int | None = None
    """With ``sliding_window`` or ``attention_chunk``: every N-th layer attends to the full
    context (Gemma 3: 6, GPT-OSS: 2, Llama 4: 4); None = every layer local."""
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
    shared_expert_ffn_hidden: int | None = None
    """Intermediate size of one shared expert; ``None`` means ``moe_ffn_hidden`` (Qwen-MoE
    style models give the shared expert its own width)."""
    parallel_attention: bool = False
    """Attention and MLP read the same input and are summed (GPT-J / PaLM "parallel
    layers"): one tensor-parallel all-reduce per layer instead of two."""
    max_context: int | None = None
    """Longest context the model was trained for (tokens), where known."""
    attention_bias: bool = False
    """Biases on the Q, K, V (and output) projections (Qwen2, GPT-2 style)."""
    mlp_bias: bool = False
    """Biases on the MLP projections."""
    qk_norm: bool = False
    """RMSNorm on queries and keys per head (Qwen3, OLMo 2)."""
    attention_output_gate: bool = False
    """Gated attention: the query projection also writes a per-head gate on the attention
    output (``heads x head_dim`` more columns; Qiu et al. 2025, "Gated Attention for Large
    Language Models", arXiv 2505.06708; Qwen3-Next's ``attn_output_gate``)."""
    norm_bias: bool = False
    """LayerNorm with a shift (GPT-era models) instead of RMSNorm's scale alone."""
    norms_per_layer: int = 2
    """Norms per transformer block (2: before attention and before the MLP)."""
    router_bias: bool = False
    """A bias on the MoE router."""
    learned_positions: int = 0
    """Rows of a learned absolute position embedding (0: rotary or none)."""
    lm_head_bias: bool = False
    """A bias on the output projection."""
    extra: dict[str, str | None] = field(default_factory=dict)
    """Free-form provenance (catalog source, retrieved date, notes)."""

    def __post_init__(self) -> None:
        if self.mla is not None and not isinstance(self.mla, MLAConfig):
            ranks: object = self.mla
            if not isinstance(ranks, Mapping):
                raise InputError(f"model {self.name!r}: mla must give the MLA ranks by name")
            try:
                mla = MLAConfig(
                    q_lora_rank=int(ranks.get("q_lora_rank") or 0) or None,
                    kv_lora_rank=int(ranks["kv_lora_rank"]),
                    qk_nope_head_dim=int(ranks["qk_nope_head_dim"]),
                    qk_rope_head_dim=int(ranks["qk_rope_head_dim"]),
                    v_head_dim=int(ranks["v_head_dim"]),
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise InputError(
                    f"model {self.name!r}: incomplete MLA ranks ({exc})",
                    hint="give q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, "
                    "v_head_dim",
                ) from exc
            object.__setattr__(self, "mla", mla)
        if self.dsa is not None and not isinstance(self.dsa, DSAConfig):
            spec: object = self.dsa
            try:
                if not isinstance(spec, Mapping):
                    raise TypeError("not a mapping")
                dsa = DSAConfig(
                    indexer_heads=int(spec["indexer_heads"]),
                    indexer_head_dim=int(spec["indexer_head_dim"]),
                    topk=int(spec["topk"]),
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise InputError(
                    f"model {self.name!r}: incomplete DSA sizes ({exc})",
                    hint="give indexer_heads, indexer_head_dim and topk",
                ) from exc
            object.__setattr__(self, "dsa", dsa)
        if self.dsa is not None and (
            self.attention != "mla"
            or self.mla is None
            or self.sliding_window is not None
            or self.attention_chunk is not None
        ):
            raise InputError(
                f"model {self.name!r}: DeepSeek Sparse Attention (dsa) runs on MLA layers",
                hint="give attention 'mla' with its ranks, and no sliding_window",
            )
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
        if self.attention_chunk is not None and (
            self.attention_chunk <= 0 or self.sliding_window is not None
        ):
            raise InputError(
                f"model {self.name!r}: attention_chunk must be positive and not combined with "
                "sliding_window",
                hint="a local layer is either a sliding window or a chunk",
            )
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
            if self.num_experts > 1 and (self.first_dense_layers or self.moe_layer_freq != 1):
                raise InputError(
                    f"model {self.name!r}: in a hybrid model with experts every MLP block is "
                    "an MoE block (Nemotron 3's 'E' blocks)",
                    hint="drop --first-dense-layers and the MoE layer interval",
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
    def shared_expert_ffn(self) -> int:
        """Intermediate size of one shared expert."""
        return self.shared_expert_ffn_hidden or self.expert_ffn

    @property
    def qk_head_dim(self) -> int:
        """Per-head width of the query/key dot product (nope + rope for MLA)."""
        if self.attention == "mla" and self.mla:
            return self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim
        return self.d_head

    @property
    def v_head_dim(self) -> int:
        if self.attention == "mla" and self.mla:
            return self.mla.v_head_dim
        return self.d_head

    @property
    def num_moe_layers(self) -> int:
        """MoE layers; in a hybrid model with experts, its MLP blocks (Nemotron 3: every
        block that is neither Mamba-2 nor attention, the pattern's ``E``)."""
        if not self.is_moe:
            return 0
        if self.is_hybrid:
            return self.num_mlp_blocks
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
        """Share of the layers with a dense MLP (1 for a standard transformer; a hybrid
        model's MLP blocks, none when they are MoE blocks)."""
        if not self.is_hybrid:
            return 1.0
        return self.num_dense_mlp_blocks / self.layers

    @property
    def num_dense_mlp_blocks(self) -> int:
        """Blocks with a dense MLP: the dense layers of a transformer, a hybrid model's MLP
        blocks that are not MoE blocks."""
        if not self.is_hybrid:
            return self.num_dense_layers
        return self.num_mlp_blocks - self.num_moe_layers

    @property
    def num_mlp_blocks(self) -> int:
        """A hybrid model's blocks that are neither Mamba-2 nor attention (dense or MoE)."""
        return self.layers - self.mamba_layers - (self.attention_layers or 0)

    @property
    def num_attention_blocks(self) -> int:
        """Blocks with self-attention: every layer, or a hybrid model's attention blocks."""
        return (self.attention_layers or 0) if self.is_hybrid else self.layers

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

    def mamba_widths(self) -> tuple[int, int, int]:
        """``(in_proj columns, conv channels, d_in)`` of the Mamba-2 mixer: in_proj writes z,
        x, B, C and dt (``2*d_in + 2*G*N + H``), the convolution runs over x, B and C
        (``d_in + 2*G*N``), ``d_in = H*P`` (Dao & Gu 2024, section 7)."""
        heads, p, n, grp, _ = self.mamba_dims()
        d_in = heads * p
        conv = d_in + 2 * grp * n
        return d_in + conv + heads, conv, d_in

    def mamba_elementwise_elements_per_token(self) -> int:
        """Elements one Mamba-2 block's element-wise passes read and write per token: conv +
        SiLU over x, B, C (read + write) and the gate and gated RMSNorm over the scan output
        (3 reads, 2 writes)."""
        _, conv, d_in = self.mamba_widths()
        return 2 * conv + 5 * d_in

    def mamba_params(self) -> int:
        """Weights of one Mamba-2 mixer (:func:`gpuplan.catalogs.params.mamba_params`)."""
        return params.mamba_params(self.arch_params)

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
        """Layers with local attention, a sliding window or a chunk (the others attend to the
        full context)."""
        if self.sliding_window is None and self.attention_chunk is None:
            return 0
        if self.full_attention_interval is None:
            return self.layers
        return self.layers - self.layers // self.full_attention_interval

    def attention_keys_per_query(self, seq_len: Num, *, executed: bool = False) -> FloatArray:
        """Keys each query attends to, averaged over the layers, in PaLM's non-causal units.

        A full-attention layer counts ``s`` (PaLM appendix B). A sliding-window layer counts
        the window ``min(s, w)`` for the model FLOPs: a query attends to ``w`` keys, so the
        attention cost is ``O(s*w)`` (Beltagy et al. 2020, "Longformer", section 3.1; Jiang
        et al. 2023, "Mistral 7B", section 2). With ``executed`` the count is the work a
        causal kernel runs, in the same units as the full layers' ``s`` (which do half of
        it, the masked half skipped): ``2w - w^2/s`` for ``w < s`` (every query of a causal
        window sees ``min(i, w)`` keys), so that one fitted attention factor serves both.
        DeepSeek Sparse Attention counts its ``topk`` the same way on every layer (a query
        reads ``min(i, k)`` keys); its indexer is :func:`attention_core_flops_per_token_layer`'s.
        A chunked layer (Llama 4) is a full layer over each chunk: ``2 P(s) / s`` with
        :func:`chunked_pairs` in both units (its causal kernel skips the masked half too).

        >>> a = ModelArch(layers=6, hidden=64, heads=4, ffn_hidden=256, vocab=10,
        ...               sliding_window=1024, full_attention_interval=6)
        >>> float(a.attention_keys_per_query(8192)), float(a.attention_keys_per_query(8192, executed=True))
        (2218.6666666666665, 2965.3333333333335)
        """
        s = np.asarray(seq_len, dtype=np.float64)
        n_local = self.num_local_attention_layers
        window = self.sliding_window
        if self.dsa is not None:  # every layer reads its indexer's top-k keys
            n_local, window = self.layers, self.dsa.topk
        if not n_local:
            return s
        local: FloatArray
        if self.attention_chunk is not None:
            # a chunk is a full causal layer of its length: 2 P(s) / s in either unit
            local = 2.0 * chunked_pairs(s, float(self.attention_chunk)) / np.maximum(s, 1e-12)
            return ((self.layers - n_local) * s + n_local * local) / self.layers
        w = float(window or 0)
        if executed:  # 2 P(s) / s: 2w - w^2/s past the window, s within it
            local = 2.0 * window_pairs(s, w) / np.maximum(s, 1e-12)
        else:
            local = np.minimum(w, s)
        return ((self.layers - n_local) * s + n_local * local) / self.layers

    # ---------------------------------------------------------------- parameter counts
    @cached_property
    def arch_params(self) -> ArchParams:
        """The fields the one parameter count reads (:mod:`gpuplan.catalogs.params`)."""
        mamba = None
        if self.mamba_layers:
            heads, head_dim, state, groups, conv_kernel = self.mamba_dims()
            mamba = MambaConfig(
                heads=heads, head_dim=head_dim, state=state, groups=groups, conv_kernel=conv_kernel
            )
        return ArchParams(
            layers=self.layers,
            hidden=self.hidden,
            heads=self.heads,
            kv_heads=self.n_kv_heads,
            head_dim=self.d_head,
            ffn_hidden=self.ffn_hidden,
            vocab=self.vocab,
            gated_mlp=self.gated_mlp,
            tied_embeddings=self.tied_embeddings,
            mla=self.mla if self.attention == "mla" else None,
            dsa=self.dsa,
            attention_bias=self.attention_bias,
            mlp_bias=self.mlp_bias,
            qk_norm=self.qk_norm,
            attention_output_gate=self.attention_output_gate,
            norm_bias=self.norm_bias,
            norms_per_layer=self.norms_per_layer,
            num_experts=self.num_experts if self.is_moe else 0,
            top_k=self.top_k if self.is_moe else 0,
            num_shared_experts=self.num_shared_experts if self.is_moe else 0,
            moe_ffn_hidden=self.expert_ffn if self.is_moe else 0,
            shared_expert_ffn_hidden=self.shared_expert_ffn if self.is_moe else 0,
            moe_layers=self.num_moe_layers,
            router_bias=self.router_bias,
            learned_positions=self.learned_positions,
            lm_head_bias=self.lm_head_bias,
            mamba=mamba,
            mamba_layers=self.mamba_layers,
            attention_layers=self.attention_layers,
        )

    def attention_params(self) -> int:
        """Weights of one attention block (:func:`gpuplan.catalogs.params.attention_params`)."""
        return params.attention_params(self.arch_params)

    def dense_mlp_params(self) -> int:
        return params.mlp_params(self.arch_params, self.ffn_hidden)

    def expert_params(self) -> int:
        """Weights of one routed expert."""
        return params.expert_params(self.arch_params)

    def shared_expert_params(self) -> int:
        """Weights of one shared expert."""
        return params.shared_expert_params(self.arch_params)

    def moe_mlp_params(self, *, active: bool) -> int:
        """Router + experts of one MoE layer; ``active`` counts only top_k + shared."""
        return params.moe_mlp_params(self.arch_params, active=active)

    def layer_params(self, *, active: bool = False) -> int:
        """Weights of all transformer blocks (norms included)."""
        return params.layer_params(self.arch_params, active=active)

    def embedding_params(self) -> int:
        """Input embedding, learned positions and (untied) output projection."""
        return params.embedding_params(self.arch_params)

    def params_total(self) -> int:
        """All parameters (every expert counted)."""
        return params.model_params(self.arch_params, active=False)

    def params_active(self) -> int:
        """Parameters touched by one token (top_k + shared experts only)."""
        return params.model_params(self.arch_params, active=True)

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


def arch_from_catalog(row: CatalogModel) -> ModelArch:
    """Build a :class:`ModelArch` from a catalog model row (``get_catalog().model(id)``).

    A catalog "mixture" of one expert is a dense model (no experts, no routing).
    """
    moe = row.num_experts > 1
    return ModelArch(
        name=row.id,
        layers=row.layers,
        hidden=row.hidden,
        heads=row.heads,
        kv_heads=row.kv_heads or None,
        head_dim=row.head_dim or None,
        ffn_hidden=row.ffn_hidden,
        vocab=row.vocab,
        tied_embeddings=row.tied_embeddings,
        gated_mlp=row.gated_mlp,
        num_experts=row.num_experts if moe else 0,
        top_k=row.top_k if moe else 0,
        num_shared_experts=row.num_shared_experts,
        max_nodes_per_token=row.max_nodes_per_token or None,
        moe_ffn_hidden=row.moe_ffn_hidden or None,
        shared_expert_ffn_hidden=row.shared_expert_ffn_hidden or None,
        first_dense_layers=row.first_dense_layers,
        moe_layer_freq=row.moe_layer_interval or 1,
        attention=row.attention,
        mla=row.mla if row.attention == "mla" else None,
        dsa=row.dsa,
        sliding_window=row.sliding_window or None,
        attention_chunk=row.attention_chunk or None,
        mamba_layers=row.mamba_layers,
        attention_layers=row.attention_layers,
        mamba=(
            {k: int(v) for k, v in row.mamba.model_dump().items() if v is not None}
            if row.mamba is not None
            else None
        ),
        full_attention_interval=row.full_attention_interval or None,
        parallel_attention=row.parallel_attention,
        max_context=row.max_context,
        attention_bias=row.attention_bias,
        mlp_bias=row.mlp_bias,
        qk_norm=row.qk_norm,
        attention_output_gate=row.attention_output_gate,
        norm_bias=row.norm_bias,
        norms_per_layer=row.norms_per_layer,
        router_bias=row.router_bias,
        learned_positions=row.learned_positions,
        lm_head_bias=row.lm_head_bias,
        extra={"source": row.source, "retrieved": str(row.retrieved or "")},
    )


ModelRef: TypeAlias = "ModelArch | CatalogModel | Mapping[str, object] | str"
"""What a forecast accepts as the model: the record, a catalog row, a catalog id, or a
mapping of the record's fields (:func:`arch_from` resolves each)."""

#: Catalog spellings of record fields (a mapping may use either).
_ALIASES = {
    "id": "name",
    "moe_layer_interval": "moe_layer_freq",
    "topk_group": "max_nodes_per_token",
}
_FIELDS = frozenset(f.name for f in dataclasses.fields(ModelArch))


def arch_from(model: ModelRef) -> ModelArch:
    """The :class:`ModelArch` of a record, a catalog row, a catalog id or a mapping.

    The one resolver both forecasts use. A mapping gives the record's field names (or the
    catalog's spellings ``id``, ``moe_layer_interval``, ``topk_group``); catalog-only
    fields (family, source, params_total, ...) are ignored, anything else is refused with
    the list of field names.
    """
    if isinstance(model, ModelArch):
        return model
    if isinstance(model, CatalogModel):
        return arch_from_catalog(model)
    if isinstance(model, str):
        from gpuplan.catalogs import get_catalog

        return arch_from_catalog(get_catalog().model(model))
    fields: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in model.items():
        name = _ALIASES.get(key, key)
        if name in _FIELDS:
            if name not in fields or key == name:
                fields[name] = value
        elif key not in CatalogModel.model_fields and key not in _CATALOG_EXTRAS:
            unknown.append(key)
    if unknown:
        raise InputError(
            f"model description has unknown field(s): {', '.join(sorted(unknown))}",
            hint="fields: " + ", ".join(sorted(_FIELDS - {"extra"})),
        )
    if int(str(fields.get("num_experts") or 0)) <= 1:
        fields["num_experts"] = 0
    try:
        return ModelArch(**fields)
    except TypeError as exc:
        raise InputError(
            f"model description is incomplete: {exc}",
            hint="give layers, hidden, heads, ffn_hidden and vocab (kv_heads, head_dim, "
            "num_experts, top_k, moe_ffn_hidden, ... optional)",
        ) from None


#: Keys of a catalog row's ``to_dict()`` that are derived, not fields.
#: keys a mapping may carry that are not record fields: catalog-only values, and
#: ``arch_params``, the cached value a record's ``__dict__`` holds once it was computed
_CATALOG_EXTRAS = frozenset({"params_total", "params_active", "head_dim", "kind", "arch_params"})


def kv_cache_bytes_per_token(
    arch: ModelArch,
    bytes_per_element: float,
    *,
    kv_layers: float | None = None,
    kv_heads: float | None = None,
) -> float:
    """KV-cache bytes one token adds, by the one formula
    :func:`gpuplan.catalogs.kv_cache.kv_cache_bytes_per_token` (MLA: the compressed latent
    and the decoupled RoPE key, DeepSeek-AI 2024, arXiv 2405.04434, section 2.1).

    ``kv_layers`` defaults to the layers that cache keys and values: every layer, or in a
    hybrid model only its attention blocks (Mamba-2 blocks keep a fixed-size state instead,
    Dao & Gu 2024); ``kv_heads`` defaults to the model's KV heads (pass the heads one
    tensor-parallel rank holds for a per-GPU figure).

    >>> a = ModelArch(name="x", layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672,
    ...               vocab=32000)
    >>> kv_cache_bytes_per_token(a, 2.0)
    327680.0
    """
    if kv_layers is None:
        hybrid = arch.is_hybrid and arch.mla is None
        kv_layers = (arch.attention_layers or 0) if hybrid else arch.layers
    return kv_cache_formula(
        kv_layers=kv_layers,
        kv_heads=arch.n_kv_heads if kv_heads is None else kv_heads,
        head_dim=arch.d_head,
        bytes_per_element=bytes_per_element,
        mla_kv_lora_rank=arch.mla.kv_lora_rank if arch.mla is not None else None,
        mla_qk_rope_head_dim=arch.mla.qk_rope_head_dim if arch.mla is not None else None,
    )


# ------------------------------------------------------------------------ FLOP counts
def window_pairs(x: Num, window: float) -> FloatArray:
    """Causal query-key pairs of the first ``x`` positions of a sliding-window layer: each
    position ``i`` sees ``min(i, w)`` keys, so ``x**2 / 2`` up to ``w`` and
    ``w**2 / 2 + w * (x - w)`` beyond (Beltagy et al. 2020, "Longformer", section 3.1).

    >>> float(window_pairs(100, 128)), float(window_pairs(1024, 128))
    (5000.0, 122880.0)
    """
    v = np.asarray(x, dtype=np.float64)
    out: FloatArray = np.where(
        v <= window, v * v / 2.0, window * window / 2.0 + window * (v - window)
    )
    return out


def chunked_pairs(x: Num, chunk: float) -> FloatArray:
    """Causal query-key pairs of the first ``x`` positions of a chunked-attention layer: each
    whole chunk of ``C`` is a causal square (``C**2 / 2``, FlashAttention's count) and the
    open chunk adds ``r**2 / 2`` for its ``r = x mod C`` positions.

    >>> float(chunked_pairs(20000, 8192)), float(chunked_pairs(100, 8192))
    (73646592.0, 5000.0)
    """
    v = np.asarray(x, dtype=np.float64)
    r = np.mod(v, chunk)
    out: FloatArray = np.floor(v / chunk) * chunk * chunk / 2.0 + r * r / 2.0
    return out


def attention_core_flops_per_token_layer(
    arch: ModelArch, seq_len: Num, *, executed: bool = False
) -> FloatArray:
    """Forward FLOPs of ``QK^T`` and ``AV`` for one token in one layer, non-causal.

    ``2*s*a*(d_qk + d_v)``; for standard heads (``a*d = h``) this is ``4*s*h``, the forward
    third of PaLM's ``12*L*h*s`` attention term (Chowdhery et al. 2022, appendix B). With
    sliding-window layers ``s`` is the layer average of
    :meth:`ModelArch.attention_keys_per_query` (``executed``: the kernel's work). With
    DeepSeek Sparse Attention the MLA reads ``min(s, topk)`` keys and the indexer adds
    ``2*s*indexer_heads*indexer_head_dim`` (DeepSeek-V3.2-Exp report, section 2.1).
    """
    keys = arch.attention_keys_per_query(seq_len, executed=executed)
    attn = 2.0 * keys * arch.heads * (arch.qk_head_dim + arch.v_head_dim)
    if arch.dsa is not None:
        # the lightning indexer scores every key with its heads (QK only, no values)
        attn = attn + 2.0 * np.asarray(seq_len, dtype=np.float64) * arch.dsa.indexer_heads * (
            arch.dsa.indexer_head_dim
        )
    if not arch.is_hybrid:
        return attn
    # Hybrid: the layer average of the attention blocks' core and the Mamba blocks' scan.
    return attn * arch.attention_fraction + arch.ssd_flops_per_token() * arch.mamba_fraction


def model_flops_per_token(arch: ModelArch, seq_len: Num) -> FloatArray:
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


def frozen_weights_flops_per_token(arch: ModelArch, seq_len: Num) -> FloatArray:
    """Training FLOPs per token when the weights are frozen (a LoRA fine-tune): the forward
    ``2*N`` and the data gradients ``2*N`` of every matmul, without the weight gradients'
    ``2*N``, plus the attention core's forward and backward as in
    :func:`model_flops_per_token` (it has no weights). The adapters' own FLOPs,
    ``6*r*(in + out)`` per module and token (under 1 % at rank 16), are not counted.
    NeMo AutoModel's fine-tuning throughput tables count two thirds of the pre-training
    figure instead (its ``flops_utils`` x 2/3), which differs in the attention term only.

    >>> arch = ModelArch(layers=2, hidden=64, heads=4, ffn_hidden=256, vocab=100,
    ...                  gated_mlp=False)
    >>> full, frozen = model_flops_per_token(arch, 128), frozen_weights_flops_per_token(arch, 128)
    >>> int(full - frozen) == 2 * arch.matmul_params_active()
    True
    """
    n = arch.matmul_params_active()
    return 4.0 * n + 3.0 * arch.layers * attention_core_flops_per_token_layer(arch, seq_len)


def recompute_flops_per_token(arch: ModelArch, seq_len: Num, recompute: Num) -> FloatArray:
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


def hardware_flops_per_token(arch: ModelArch, seq_len: Num, recompute: Num) -> FloatArray:
    """Model FLOPs plus the recomputed forward (the numerator of HFU)."""
    return model_flops_per_token(arch, seq_len) + recompute_flops_per_token(
        arch, seq_len, recompute
    )
