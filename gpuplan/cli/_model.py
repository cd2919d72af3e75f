"""The model a forecast command is about: ``--model ID``, ``--model-file YAML`` or the
explicit architecture flags (DESIGN.md 3.3), turned into what the forecast libraries take."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gpuplan.cli._common import number_option

REQUIRED_ARCH_FLAGS = ("layers", "hidden", "heads", "ffn_hidden", "vocab")

# The options both ``forecast train`` and ``forecast infer`` take to name the model
# (DESIGN.md 3.3); declared once so the two commands cannot drift apart.
MODEL_OPTION = typer.Option(
    None, "--model", "-m", help="Catalog model id (gpuplan catalog ls models)."
)
MODEL_FILE_OPTION = typer.Option(
    None,
    "--model-file",
    help="YAML file with the architecture fields, or a Hugging Face config.json.",
)
LAYERS_OPTION = number_option(None, "--layers", help="Transformer layers.")
HIDDEN_OPTION = number_option(None, "--hidden", help="Model width.")
HEADS_OPTION = number_option(None, "--heads", help="Attention heads.")
KV_HEADS_OPTION = number_option(None, "--kv-heads", help="Key/value heads (GQA/MQA).")
HEAD_DIM_OPTION = number_option(None, "--head-dim", help="Per-head width (default hidden/heads).")
FFN_HIDDEN_OPTION = number_option(None, "--ffn-hidden", help="MLP intermediate size.")
VOCAB_OPTION = number_option(None, "--vocab", help="Vocabulary size.")
EXPERTS_OPTION = number_option(
    None, "--experts", help="Routed experts (MoE).", bound="non_negative"
)
TOP_K_OPTION = number_option(None, "--top-k", help="Experts per token (MoE).", bound="non_negative")
MOE_FFN_HIDDEN_OPTION = number_option(None, "--moe-ffn-hidden", help="Expert intermediate size.")
GATED_MLP_OPTION = typer.Option(
    True, "--gated-mlp/--gelu-mlp", help="SwiGLU (3 matrices) or GELU (2) MLP."
)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def model_argument(
    model: str | None,
    model_file: Path | None,
    arch: dict[str, Any],
    *,
    gated_mlp: bool = True,
    tied_embeddings: bool = False,
) -> Any:
    """A catalog id (``--model``), or a dict of architecture fields.

    ``arch`` maps flag names (``layers``, ``hidden``, ``heads``, ``kv_heads``, ``head_dim``,
    ``ffn_hidden``, ``vocab``, ``experts``, ``top_k``, ``moe_ffn_hidden``,
    ``shared_experts``, ``first_dense_layers``) to the values given, ``None`` when absent.
    Exactly one of the three ways must be used; anything else is an ``InputError``.
    """
    from gpuplan.errors import InputError

    given = [name for name, v in arch.items() if v is not None]
    sources = sum([model is not None, model_file is not None, bool(given)])
    if sources == 0:
        raise InputError(
            "no model given",
            hint="use --model ID (see 'gpuplan catalog ls models'), --model-file YAML, or "
            "--layers/--hidden/--heads/--ffn-hidden/--vocab",
        )
    if sources > 1:
        got = [*(["--model"] if model else []), *(["--model-file"] if model_file else [])]
        raise InputError(
            "give only one of --model, --model-file or explicit architecture flags "
            f"(got {' '.join(got + [_flag(g) for g in given])})"
        )
    if model is not None:
        return model
    if model_file is not None:
        return load_model_file(model_file)
    missing = [f for f in REQUIRED_ARCH_FLAGS if arch.get(f) is None]
    if missing:
        raise InputError("explicit architecture is missing " + ", ".join(_flag(m) for m in missing))
    renamed = {"experts": "num_experts", "shared_experts": "num_shared_experts"}
    out: dict[str, Any] = {renamed.get(k, k): v for k, v in arch.items() if v is not None}
    kv_heads = arch.get("kv_heads")
    out.update(
        name="custom",
        gated_mlp=gated_mlp,
        tied_embeddings=tied_embeddings,
        attention="gqa" if kv_heads and kv_heads != arch["heads"] else "mha",
    )
    if out.get("num_experts"):
        out.setdefault("top_k", 0)
    return out


# ------------------------------------------------------------------ model files
#: Hugging Face ``config.json`` keys -> gpuplan model fields (DESIGN.md 3.3 names).
_HF_FIELDS = {
    "num_hidden_layers": "layers",
    "hidden_size": "hidden",
    "num_attention_heads": "heads",
    "num_key_value_heads": "kv_heads",
    "head_dim": "head_dim",
    "intermediate_size": "ffn_hidden",
    "vocab_size": "vocab",
    "tie_word_embeddings": "tied_embeddings",
    "num_local_experts": "num_experts",  # Mixtral
    "num_experts": "num_experts",  # Qwen MoE, OLMoE
    "n_routed_experts": "num_experts",  # DeepSeek V2/V3
    "num_experts_per_tok": "top_k",
    "moe_intermediate_size": "moe_ffn_hidden",
    "n_shared_experts": "num_shared_experts",  # DeepSeek
    "first_k_dense_replace": "first_dense_layers",  # DeepSeek
    "decoder_sparse_step": "moe_layer_freq",  # Qwen MoE
    "interleave_moe_layer_step": "moe_layer_freq",  # Llama 4
    "moe_layer_freq": "moe_layer_freq",
}
_HF_REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
_HF_MLA = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
#: model types whose MLP has two matrices (GELU), not three (SwiGLU/GeGLU)
_HF_UNGATED = {"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi", "starcoder2", "mpt"}
#: weights a config.json does not name but the model type's reference implementation has
#: (Hugging Face transformers models/<type>/modeling_<type>.py): per-head RMSNorm on queries
#: and keys (Qwen3 ``q_norm``/``k_norm``, Gemma 3), a router score bias (DeepSeek-V3's
#: ``e_score_correction_bias`` with ``topk_method: noaux_tc``; GLM-4.5), Q/K/V biases (Qwen2)
_HF_QK_NORM = {
    "qwen3",
    "qwen3_moe",
    "gemma3",
    "gemma3_text",
    "qwen3_next",
    "qwen3_5",
    "qwen3_5_text",
    "qwen3_5_moe",
    "qwen3_5_moe_text",
}
_HF_ROUTER_BIAS = {"deepseek_v3", "glm4_moe", "gpt_oss"}
_HF_QKV_BIAS = {"qwen2", "qwen2_moe"}
#: keys of architectures gpuplan's forecasts do not model (state-space and hybrid layers,
#: encoder-decoders, cross-attention): refused by name rather than forecast wrongly
_HF_UNMODELLED = (
    "ssm_cfg",
    "mamba_d_state",
    "mamba_expand",
    "state_size",
    "attn_layer_period",
    "hybrid_override_pattern",
    "linear_num_key_heads",
    "cross_attention_layers",
    "encoder_layers",
    "num_encoder_layers",
    "d_conv",
)


def _is_hf_config(data: dict[str, Any]) -> bool:
    """A Hugging Face ``config.json``: its decoder keys at the top, or under ``text_config``
    (the multimodal configs of Gemma 3, Llama 4, Qwen3.5)."""
    keys = ("num_hidden_layers", "hidden_size", "num_attention_heads")
    text = data.get("text_config")
    return any(k in data for k in keys) or (isinstance(text, dict) and any(k in text for k in keys))


def _hf_to_model(data: dict[str, Any], where: str) -> dict[str, Any]:
    """A Hugging Face ``config.json`` as the model record the forecasts take."""
    from gpuplan.errors import InputError

    if "text_config" in data and "num_hidden_layers" not in data:
        if not isinstance(data["text_config"], dict):
            raise InputError(f"{where}: text_config must be a mapping")
        data = {**data["text_config"], "model_type": data.get("model_type")}
    nas = _hf_nas_blocks(data, where)
    if nas is not None:  # the widths the record takes from the blocks, as plain config keys
        data = {**data, **nas.pop("config_keys")}
    hybrid = nas or _hf_hybrid_blocks(data, where) or _hf_linear_attention_blocks(data, where)
    skip = {"hybrid_override_pattern", "linear_num_key_heads"} if hybrid else set()
    unmodelled = [
        k for k in _HF_UNMODELLED if k not in skip and data.get(k) not in (None, 0, [], False)
    ]
    if data.get("is_encoder_decoder"):
        unmodelled.append("is_encoder_decoder")
    # Gemma 4 / 3n: global layers of another head shape, K shared with V, KV shared across
    # layers, per-layer input embeddings (one head shape per model is what gpuplan prices)
    global_dim = data.get("global_head_dim")
    if global_dim not in (None, 0, data.get("head_dim")):
        unmodelled.append("global_head_dim (global layers of another head size)")
    for key in ("attention_k_eq_v", "num_kv_shared_layers", "hidden_size_per_layer_input"):
        if data.get(key) not in (None, 0, False):
            unmodelled.append(key)
    layer_types = data.get("layer_types")
    modelled = {"full_attention", "linear_attention"} if hybrid else set(_HF_LAYER_KINDS)
    if isinstance(layer_types, list) and any(t not in modelled for t in layer_types):
        kinds = sorted({str(t) for t in layer_types} - modelled)
        unmodelled.append(f"layer_types ({', '.join(kinds)})")
    if unmodelled:
        raise InputError(
            f"{where}: gpuplan cannot model this architecture: {', '.join(unmodelled)}",
            hint="it forecasts decoder-only transformers (dense, MoE, GQA, MLA); describe the "
            "model with --layers/--hidden/... if an approximation will do",
        )
    missing = [k for k in _HF_REQUIRED if data.get(k) is None]
    if "intermediate_size" not in data and "moe_intermediate_size" not in data:
        missing.append("intermediate_size")
    if missing:
        raise InputError(
            f"{where}: Hugging Face config lacks {', '.join(missing)}",
            hint="give the model's full config.json (or --layers/--hidden/... flags)",
        )
    out: dict[str, Any] = {}
    for key, field_name in _HF_FIELDS.items():
        if data.get(key) is not None and field_name not in out:
            out[field_name] = data[key]
    out.setdefault("tied_embeddings", False)
    if str(data.get("model_type") or "").startswith("llama4") and out.get("num_experts"):
        # Llama 4 (transformers Llama4TextMoe): experts of intermediate_size plus one shared
        # expert of the same width; the dense layers' MLP is intermediate_size_mlp
        out["moe_ffn_hidden"] = out["ffn_hidden"]
        out["ffn_hidden"] = data.get("intermediate_size_mlp") or out["ffn_hidden"]
        out.setdefault("num_shared_experts", 1)
    out.setdefault("ffn_hidden", out.get("moe_ffn_hidden"))
    shared_width = data.get("shared_expert_intermediate_size")
    if shared_width:  # Qwen MoE: one shared expert of its own width, in expert-width units
        moe_width = out.get("moe_ffn_hidden") or out["ffn_hidden"]
        if not isinstance(shared_width, int) or shared_width % moe_width:
            raise InputError(
                f"{where}: shared_expert_intermediate_size {shared_width!r} is not a multiple "
                f"of the expert width {moe_width}",
                hint="gpuplan models shared experts as whole experts",
            )
        out["num_shared_experts"] = shared_width // moe_width
    if all(data.get(k) is not None for k in _HF_MLA[1:]):
        out["attention"] = "mla"
        out["mla"] = {k: data.get(k) or 0 for k in _HF_MLA}
        if data.get("index_topk"):  # DeepSeek Sparse Attention (deepseek_v32, glm_moe_dsa)
            if int(data.get("index_topk_freq") or 1) != 1:
                raise InputError(
                    f"{where}: index_topk_freq {data['index_topk_freq']!r} (one indexer shared "
                    "by several layers) is not modelled",
                    hint="write the model as a YAML record with a dsa block per layer, or drop "
                    "index_topk_freq to price an indexer in every layer",
                )
            out["dsa"] = {
                "indexer_heads": data.get("index_n_heads"),
                "indexer_head_dim": data.get("index_head_dim"),
                "topk": data.get("index_topk"),
            }
    else:
        kv = out.get("kv_heads") or out["heads"]
        out["attention"] = "mha" if kv == out["heads"] else ("mqa" if kv == 1 else "gqa")
    model_type = str(data.get("model_type") or "")
    out["gated_mlp"] = model_type not in _HF_UNGATED
    out["attention_bias"] = bool(data.get("attention_bias")) or model_type in _HF_QKV_BIAS
    out["mlp_bias"] = bool(data.get("mlp_bias"))
    out["qk_norm"] = model_type in _HF_QK_NORM
    out["attention_output_gate"] = bool(data.get("attn_output_gate")) or model_type == "qwen3_next"
    out["router_bias"] = data.get("topk_method") == "noaux_tc" or model_type in _HF_ROUTER_BIAS
    if out.get("num_experts", 0) and out["num_experts"] <= 1:
        out.pop("num_experts")
        out.pop("top_k", None)
    name = data.get("_name_or_path") or model_type or "hf-config"
    out["name"] = str(name)
    if isinstance(data.get("max_position_embeddings"), int):
        out["max_context"] = data["max_position_embeddings"]
    if hybrid:
        out.update(hybrid)
        if model_type.startswith("nemotron_h"):
            out["gated_mlp"] = False  # Nemotron-H's MLP and experts: squared ReLU, 2 matrices
        out["ffn_hidden"] = out.get("ffn_hidden") or out.get("moe_ffn_hidden")
        if out.get("num_experts"):
            shared = data.get("moe_shared_expert_intermediate_size")
            if shared:
                out["shared_expert_ffn_hidden"] = int(shared)
                out.setdefault("num_shared_experts", 1)
    else:
        out.update(_hf_local_attention(data, where))
    out["extra"] = {"source": f"Hugging Face config {where}"}
    return out


#: ``layer_types`` a transformer config.json may list: the local kinds map to the record's
#: sliding_window or attention_chunk (with full_attention_interval for the global layers)
_HF_LAYER_KINDS = {
    "full_attention": None,
    "sliding_attention": "sliding_window",
    "chunked_attention": "attention_chunk_size",
}


def _hf_local_attention(data: dict[str, Any], where: str) -> dict[str, Any]:
    """Local attention layers of a transformer config.json as the record's fields.

    ``layer_types`` (transformers' per-layer list: gpt-oss, Gemma 3, Llama 4) gives the
    kind of every layer; older configs say it in other keys: Llama 4's
    ``attention_chunk_size`` with ``no_rope_layers`` (1 = a RoPE layer, which attends in
    chunks; 0 = a global NoPE layer) or ``no_rope_layer_interval``; Gemma 3's
    ``sliding_window_pattern``; Gemma 2 alternates (its modeling code). A model's
    ``sliding_window`` alone is not read (Qwen2's configs carry one with
    ``use_sliding_window: false``). The global layers must come every N-th layer."""
    from gpuplan.errors import InputError

    layers = int(data["num_hidden_layers"])
    kinds = data.get("layer_types")
    model_type = str(data.get("model_type") or "")
    if isinstance(kinds, list) and len(kinds) == layers:
        local = [k for k in kinds if k != "full_attention"]
        if not local:
            return {}
        kind = local[0]
        flags = [k == "full_attention" for k in kinds]
    elif data.get("attention_chunk_size"):
        kind = "chunked_attention"
        rope = data.get("no_rope_layers")
        if isinstance(rope, list) and len(rope) == layers:
            flags = [not bool(r) for r in rope]
        else:
            n = int(data.get("no_rope_layer_interval") or 4)
            flags = [(i + 1) % n == 0 for i in range(layers)]
    elif data.get("sliding_window") and model_type in ("gemma3", "gemma3_text", "gemma2"):
        kind = "sliding_attention"
        n = 2 if model_type == "gemma2" else int(data.get("sliding_window_pattern") or 6)
        flags = [(i + 1) % n == 0 for i in range(layers)]
    else:
        return {}
    if len({k for k in (kinds or []) if k != "full_attention"}) > 1:
        raise InputError(
            f"{where}: layer_types mixes sliding and chunked attention",
            hint="gpuplan models one kind of local attention per model",
        )
    key = _HF_LAYER_KINDS.get(kind)
    size = data.get(key) if key else None
    if not isinstance(size, int) or size <= 0:
        raise InputError(f"{where}: {kind} layers need a positive {key}")
    out: dict[str, Any] = {
        "sliding_window" if kind == "sliding_attention" else "attention_chunk": size
    }
    full = [i + 1 for i, f in enumerate(flags) if f]
    if full:
        n = full[0]
        if full != list(range(n, layers + 1, n)):
            raise InputError(
                f"{where}: the full-attention layers ({', '.join(map(str, full[:6]))}...) do not "
                "come every N-th layer",
                hint="gpuplan models global layers at a fixed interval (full_attention_interval)",
            )
        out["full_attention_interval"] = n
    return out


def _hf_linear_attention_blocks(data: dict[str, Any], where: str) -> dict[str, Any] | None:
    """Qwen3-Next / Qwen3.5 layers (a Gated DeltaNet or a full-attention mixer, then an MLP or
    MoE) as single blocks: ``2 x num_hidden_layers`` of them, the Gated DeltaNet mixers priced
    as Mamba-2 blocks of the same shapes (value heads, value dim, key dim as the state, key
    heads as the groups; Yang et al. 2024, arXiv 2412.06464); None for other configs."""
    from gpuplan.errors import InputError

    names = ("linear_num_value_heads", "linear_value_head_dim", "linear_key_head_dim")
    if data.get("linear_num_key_heads") is None:
        return None
    layers, kinds = data.get("num_hidden_layers"), data.get("layer_types")
    interval = data.get("full_attention_interval")
    if not isinstance(layers, int) or any(not isinstance(data.get(k), int) for k in names):
        raise InputError(
            f"{where}: a linear-attention config needs num_hidden_layers and " + ", ".join(names),
            hint="give the model's full config.json",
        )
    if isinstance(kinds, list):
        linear = sum(1 for t in kinds if t == "linear_attention")
    elif isinstance(interval, int) and interval > 0:
        linear = layers - layers // interval
    else:
        raise InputError(
            f"{where}: a linear-attention config needs layer_types or full_attention_interval",
            hint="give the model's full config.json",
        )
    return {
        "layers": 2 * layers,
        "mamba_layers": linear,
        "attention_layers": layers - linear,
        "mamba": {
            "heads": data["linear_num_value_heads"],
            "head_dim": data["linear_value_head_dim"],
            "state": data["linear_key_head_dim"],
            "groups": int(data["linear_num_key_heads"]),
            "conv_kernel": int(data.get("linear_conv_kernel_dim") or 4),
        },
    }


def _nas_ffn_width(ffn_mult: float, hidden: int) -> int:
    """DeciLM's FFN width for ``ffn_mult``: ``int(2 * ffn_mult * hidden / 3)`` rounded up to
    a multiple of 256 (``_ffn_mult_to_intermediate_size`` in the DeciLM modeling code of
    the Llama-Nemotron checkpoints, as vLLM's ``nemotron_nas.py`` and TensorRT-LLM's
    ``modeling_nemotron_nas.py`` carry it)."""
    width = int(2 * ffn_mult * hidden / 3)
    return -(-width // 256) * 256


def _hf_nas_blocks(data: dict[str, Any], where: str) -> dict[str, Any] | None:
    """A DeciLM / Llama-Nemotron ``block_configs`` list (the per-layer architecture found
    by neural architecture search; Bercovich et al. 2024, "Puzzle", arXiv 2411.19146) as
    the blocks of the hybrid record; None for other configs.

    Each layer has an attention block (``n_heads_in_group`` query heads per KV head) or
    none (``no_op``), and an FFN block of ``ffn_mult`` or none. Every block that is there
    is one block of the record (its own norm and residual, as in the reference model):
    ``attention_layers`` the layers with attention, ``layers`` those plus the layers with
    an FFN. The FFN blocks keep their mean width (``ffn_hidden``): GEMM FLOPs and weight
    bytes are linear in the width, so the mean keeps both totals; only the per-GEMM shape
    is averaged. ``config_keys`` carries the widths as config keys for the caller.
    """
    from gpuplan.errors import InputError

    blocks = data.get("block_configs")
    if blocks is None:
        return None
    hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
    if not isinstance(blocks, list) or not blocks or not all(isinstance(b, dict) for b in blocks):
        raise InputError(
            f"{where}: block_configs must be a list of per-layer mappings",
            hint="give the model's unedited config.json",
        )
    if not isinstance(hidden, int) or not isinstance(heads, int):
        raise InputError(
            f"{where}: a block_configs config needs hidden_size and num_attention_heads",
            hint="give the model's full config.json",
        )
    groups: set[int] = set()
    widths: list[int] = []
    for i, block in enumerate(blocks):
        attn, ffn = block.get("attention") or {}, block.get("ffn") or {}
        for kind, part in (("attention", attn), ("ffn", ffn)):
            odd = [
                k
                for k in ("replace_with_linear", "sparsify", "window_length", "num_sink_tokens")
                if part.get(k) not in (None, False, 0)
            ]
            if odd:
                raise InputError(
                    f"{where}: block_configs[{i}].{kind} has {', '.join(odd)}, which gpuplan "
                    "does not model",
                    hint="it models attention and FFN blocks that are present or no_op",
                )
        if not attn.get("no_op"):
            g = attn.get("n_heads_in_group")
            if not isinstance(g, int) or g <= 0 or heads % g:
                raise InputError(
                    f"{where}: block_configs[{i}].attention.n_heads_in_group must divide "
                    f"num_attention_heads ({heads}), got {g!r}",
                    hint="give the model's unedited config.json",
                )
            groups.add(g)
        if not ffn.get("no_op"):
            mult = ffn.get("ffn_mult")
            if isinstance(mult, bool) or not isinstance(mult, (int, float)) or mult <= 0:
                raise InputError(
                    f"{where}: block_configs[{i}].ffn.ffn_mult must be a positive number, "
                    f"got {mult!r}",
                    hint="give the model's unedited config.json",
                )
            widths.append(_nas_ffn_width(float(mult), hidden))
    if len(groups) != 1 or not widths:
        raise InputError(
            f"{where}: block_configs with "
            + (f"KV groups {sorted(groups) or 'none'}" if widths else "no FFN block")
            + " is not modelled",
            hint="gpuplan models one KV-head count per model and at least one FFN block",
        )
    attention = sum(1 for b in blocks if not (b.get("attention") or {}).get("no_op"))
    return {
        "layers": attention + len(widths),
        "mamba_layers": 0,
        "attention_layers": attention,
        "config_keys": {
            "num_key_value_heads": heads // groups.pop(),
            "intermediate_size": round(sum(widths) / len(widths)),
        },
    }


def _hf_hybrid_blocks(data: dict[str, Any], where: str) -> dict[str, Any] | None:
    """A Nemotron-H ``hybrid_override_pattern`` (``M`` Mamba-2, ``*`` attention, ``-`` MLP,
    ``E`` MoE, one block per character; Megatron-core ``mamba_hybrid_layer_allocation``)
    as the block counts and Mamba-2 sizes of the model record; None without one."""
    from gpuplan.errors import InputError

    pattern = data.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or not pattern:
        return None
    kinds = set(pattern) - set("M*-E")
    if kinds or ("E" in pattern and "-" in pattern):
        raise InputError(
            f"{where}: gpuplan cannot model hybrid_override_pattern {pattern!r}",
            hint="it models M (Mamba-2), * (attention) and either - (MLP) or E (MoE) blocks",
        )
    layers = data.get("num_hidden_layers")
    if isinstance(layers, int) and layers != len(pattern):
        raise InputError(
            f"{where}: hybrid_override_pattern has {len(pattern)} blocks but "
            f"num_hidden_layers is {layers}",
            hint="give the model's unedited config.json",
        )
    heads, head_dim = data.get("mamba_num_heads"), data.get("mamba_head_dim")
    if not isinstance(heads, int) or not isinstance(head_dim, int):
        raise InputError(
            f"{where}: a hybrid config needs mamba_num_heads and mamba_head_dim",
            hint="give the model's full config.json",
        )
    return {
        "layers": len(pattern),
        "mamba_layers": pattern.count("M"),
        "attention_layers": pattern.count("*"),
        "mamba": {
            "heads": heads,
            "head_dim": head_dim,
            "state": int(data.get("ssm_state_size") or 128),
            "groups": int(data.get("n_groups") or 1),
            "conv_kernel": int(data.get("conv_kernel") or 4),
        },
    }


def _model_fields() -> dict[str, str]:
    """Field name -> annotation (as text) of the forecasts' model record."""
    import dataclasses

    from gpuplan.forecast.model import ModelArch

    return {f.name: str(f.type) for f in dataclasses.fields(ModelArch)}


def _check_model_record(data: dict[str, Any], where: str) -> dict[str, Any]:
    """Field names and value types of a model record, each error naming the field."""
    import difflib

    from gpuplan.errors import InputError

    fields = _model_fields()
    for key, value in data.items():
        if not isinstance(key, str) or key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            raise InputError(
                f"{where}: unknown field {key!r}"
                + (f" (did you mean {close[0]!r}?)" if close else ""),
                hint="fields: " + ", ".join(f for f in fields if f != "extra"),
            )
        kind = fields[key].replace(" | None", "")
        if value is None and "None" in fields[key]:
            continue
        if kind == "int":
            bad = isinstance(value, bool) or not isinstance(value, int) or value < 0
            wanted = "a whole number >= 0"
        elif kind == "bool":
            bad, wanted = not isinstance(value, bool), "true or false"
        elif kind == "str":
            bad, wanted = not isinstance(value, str), "a string"
        elif kind.startswith("dict"):
            bad, wanted = not isinstance(value, dict), "a mapping"
            if not bad and key == "mla":
                bad = any(
                    isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value.values()
                )
                wanted = "a mapping of whole numbers"
        else:  # pragma: no cover - a new field type: let the forecast validate it
            bad, wanted = False, ""
        if bad:
            raise InputError(f"{where}: {key} must be {wanted}, got {value!r}")
    return data


def load_model_file(path: Path) -> dict[str, Any]:
    """A ``--model-file``: gpuplan's YAML architecture fields or a Hugging Face
    ``config.json``, as the model record both forecasts take (field names of
    :class:`gpuplan.forecast.model.ModelArch`). Every problem is one ``InputError`` naming
    the file and the field."""
    import yaml

    from gpuplan.errors import InputError
    from gpuplan.userfiles import read_text

    where = f"--model-file {path}"
    text = read_text(path, what="--model-file", hint="give a YAML file or a config.json")
    try:
        data = yaml.safe_load(text)  # JSON is YAML: a config.json parses too
    except yaml.YAMLError as exc:
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"{where}{line} is not valid YAML: {problem}") from None
    except RecursionError:
        raise InputError(f"{where} is nested too deeply to be a model description") from None
    if not isinstance(data, dict):
        raise InputError(
            f"{where} must hold a mapping of architecture fields",
            hint="e.g. layers: 32, hidden: 4096, heads: 32, ffn_hidden: 11008, vocab: 32000",
        )
    if _is_hf_config(data):
        data = _hf_to_model(data, where)
    else:
        data = {("num_experts" if k == "experts" else k): v for k, v in data.items()}
        data.setdefault("name", path.stem)
    return _check_model_record(data, where)
