"""The model a forecast command is about: ``--model ID``, ``--model-file YAML`` or the
explicit architecture flags (DESIGN.md 3.3), turned into what the forecast libraries take."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

REQUIRED_ARCH_FLAGS = ("layers", "hidden", "heads", "ffn_hidden", "vocab")

# The options both ``forecast train`` and ``forecast infer`` take to name the model
# (DESIGN.md 3.3); declared once so the two commands cannot drift apart.
MODEL_OPTION = typer.Option(
    None, "--model", "-m", help="Catalog model id (gpuplan catalog ls models)."
)
MODEL_FILE_OPTION = typer.Option(
    None, "--model-file", help="YAML file with the architecture fields."
)
LAYERS_OPTION = typer.Option(None, "--layers", help="Transformer layers.")
HIDDEN_OPTION = typer.Option(None, "--hidden", help="Model width.")
HEADS_OPTION = typer.Option(None, "--heads", help="Attention heads.")
KV_HEADS_OPTION = typer.Option(None, "--kv-heads", help="Key/value heads (GQA/MQA).")
HEAD_DIM_OPTION = typer.Option(None, "--head-dim", help="Per-head width (default hidden/heads).")
FFN_HIDDEN_OPTION = typer.Option(None, "--ffn-hidden", help="MLP intermediate size.")
VOCAB_OPTION = typer.Option(None, "--vocab", help="Vocabulary size.")
EXPERTS_OPTION = typer.Option(None, "--experts", help="Routed experts (MoE).")
TOP_K_OPTION = typer.Option(None, "--top-k", help="Experts per token (MoE).")
MOE_FFN_HIDDEN_OPTION = typer.Option(None, "--moe-ffn-hidden", help="Expert intermediate size.")
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
        import yaml

        try:
            data = yaml.safe_load(model_file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(f"cannot read --model-file {model_file}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise InputError(f"--model-file {model_file} is not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise InputError(
                f"--model-file {model_file} must hold a mapping of architecture fields"
            )
        data = {("num_experts" if k == "experts" else k): v for k, v in data.items()}
        data.setdefault("name", model_file.stem)
        return data
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
