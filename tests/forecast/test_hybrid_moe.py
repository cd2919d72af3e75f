"""Hybrid Mamba models in the forecasts: MoE blocks (Nemotron 3), and serving that prices
the blocks a hybrid model really has (attention KV on its attention blocks only, Mamba-2
projections and recurrent state)."""

from __future__ import annotations

import dataclasses

import pytest

from gpuplan.catalogs.catalog import get_catalog
from gpuplan.errors import InputError
from gpuplan.forecast.inference_arch import PRECISIONS, Layout, MemoryPlan, shard
from gpuplan.forecast.model import ModelArch, arch_from_catalog


def _model(name: str) -> ModelArch:
    return arch_from_catalog(get_catalog().model(name))


def test_nemotron3_nano_counts_match_the_model_card():
    """31.6B parameters, 3.6B active with the embeddings (NVIDIA's model card); 23 Mamba-2,
    6 attention and 23 MoE blocks of 128 experts, top 6, one shared expert."""
    m = _model("nemotron3-nano-30b-a3b")
    assert m.num_moe_layers == 23 and m.num_dense_mlp_blocks == 0
    assert m.params_total() == pytest.approx(31.6e9, rel=0.01)
    assert m.params_active() == pytest.approx(3.6e9, rel=0.01)


def test_hybrid_with_experts_keeps_every_mlp_block_moe():
    m = _model("nemotron3-nano-30b-a3b")
    with pytest.raises(InputError, match="every MLP block"):
        dataclasses.replace(m, first_dense_layers=2)


def test_hybrid_serving_weights_and_kv_are_the_blocks_it_has():
    """Nemotron-H 8B at bf16 is its 8.1B parameters x 2 bytes (it was 24.8 GB when every
    layer was priced as attention + MLP), and its KV cache is 4 attention blocks' worth."""
    m = _model("nemotron-h-8b")
    sh = shard(m, Layout(tp=1), PRECISIONS["bf16"])
    assert sh.weight_bytes_per_gpu == pytest.approx(2 * 8.1e9, rel=0.01)
    assert sh.kv_bytes_per_token_per_gpu() == 4 * 2 * 8 * 128 * 2
    assert sh.weight_breakdown_bytes["mamba"] == pytest.approx(24 * m.mamba_params() * 2, rel=1e-9)


def test_recurrent_state_is_per_sequence_and_limits_the_batch():
    """A Mamba-2 block keeps H x P x N fp32 state and a (K-1)-wide conv window per
    sequence; the memory plan charges it per sequence, besides the KV cache."""
    m = _model("nemotron3-nano-30b-a3b")
    sh = shard(m, Layout(tp=2), PRECISIONS["bf16"])
    per_layer = 64 * 64 * 128 / 2 * 4.0 + 3 * (64 * 64 + 2 * 8 * 128) / 2 * 2.0
    assert sh.state_bytes_per_seq_stage() == pytest.approx(23 * per_layer)
    kv = sh.kv_bytes_per_token_per_gpu()
    budget = 40e9
    plain = MemoryPlan(budget, budget, 0.0, 0.0, kv)
    hybrid = MemoryPlan(budget, budget, 0.0, 0.0, kv, sh.state_bytes_per_seq_gpu())
    assert hybrid.max_batch(4096) == int(budget // (4096 * kv + sh.state_bytes_per_seq_gpu()))
    assert hybrid.max_batch(4096) < plain.max_batch(4096)


def test_transformer_has_no_recurrent_state():
    sh = shard(_model("llama3.1-8b"), Layout(tp=1), PRECISIONS["bf16"])
    assert sh.state_bytes_per_seq_stage() == 0.0 and sh.attn_layers == 32


NEMOTRON3_NANO_CONFIG = {  # the fields of its config.json that matter here
    "model_type": "nemotron_h",
    "hidden_size": 2688,
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "intermediate_size": 1856,
    "mamba_head_dim": 64,
    "mamba_num_heads": 64,
    "n_groups": 8,
    "ssm_state_size": 128,
    "conv_kernel": 4,
    "max_position_embeddings": 262144,
    "moe_intermediate_size": 1856,
    "moe_shared_expert_intermediate_size": 3712,
    "n_routed_experts": 128,
    "n_shared_experts": 1,
    "num_attention_heads": 32,
    "num_experts_per_tok": 6,
    "num_hidden_layers": 52,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "tie_word_embeddings": False,
    "vocab_size": 131072,
}


def test_a_pattern_with_mlp_and_moe_blocks_is_refused():
    from gpuplan.cli._model import _hf_to_model

    cfg = dict(NEMOTRON3_NANO_CONFIG, hybrid_override_pattern="M-M*E" + "M" * 47)
    with pytest.raises(InputError, match="cannot model hybrid_override_pattern"):
        _hf_to_model(cfg, "config.json")


QWEN3_NEXT_CONFIG = {  # Qwen/Qwen3-Next-80B-A3B-Instruct config.json, the fields read here
    "model_type": "qwen3_next",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "intermediate_size": 5120,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "vocab_size": 151936,
    "max_position_embeddings": 262144,
    "linear_num_value_heads": 32,
    "linear_num_key_heads": 16,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "shared_expert_intermediate_size": 512,
    "moe_intermediate_size": 512,
    "full_attention_interval": 4,
    "tie_word_embeddings": False,
}


def test_qwen3_next_as_single_blocks_matches_its_checkpoint():
    """48 layers of (Gated DeltaNet or gated attention) + MoE are 96 single blocks. The
    checkpoint's tensors sum to 79,674,391,296 and 3,874,929,408 per token; the derived
    counts (the attention output gate included) leave out the 64-column beta/alpha
    projections, and no more."""
    m = _model("qwen3-next-80b-a3b")
    assert (m.layers, m.mamba_layers, m.attention_layers, m.num_moe_layers) == (96, 36, 12, 48)
    assert m.attention_output_gate
    assert m.params_total() == pytest.approx(79_674_391_296, rel=0.001)
    assert m.params_active() == pytest.approx(3_874_929_408, rel=0.001)
    sh = shard(m, Layout(tp=1), PRECISIONS["bf16"])
    assert sh.kv_bytes_per_token_per_gpu() == 12 * 2 * 2 * 256 * 2  # K and V, 12 blocks
    assert sh.state_bytes_per_seq_stage() == pytest.approx(
        36 * (32 * 128 * 128 * 4.0 + 3 * (32 * 128 + 2 * 16 * 128) * 2.0)
    )


def test_qwen35_397b_counts_match_its_name():
    """397B total, 17B activated (the card; without the 2 x 1.0B embedding matrices): derived
    398.6B and 17.57B, the latter against a figure rounded to the billion (so 4%)."""
    m = _model("qwen3.5-397b-a17b")
    assert m.params_total() == pytest.approx(397e9, rel=0.01)
    embeddings = 2 * 248320 * 4096
    assert m.params_active() - embeddings == pytest.approx(17e9, rel=0.04)


KINDS = (["linear_attention"] * 3 + ["full_attention"]) * 16
QWEN36_27B_CONFIG = {  # Qwen/Qwen3.6-27B config.json (6a9e13bd), the fields read here
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "text_config": {
        "model_type": "qwen3_5_text",
        "attn_output_gate": True,
        "hidden_size": 5120,
        "num_hidden_layers": 64,
        "layer_types": KINDS,
        "num_attention_heads": 24,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "intermediate_size": 17408,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 48,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "vocab_size": 248320,
        "max_position_embeddings": 262144,
        "tie_word_embeddings": False,
    },
    "vision_config": {"depth": 27, "hidden_size": 1152},
}


def test_a_nested_config_json_is_read_on_the_command_line(run_cli, tmp_path):
    """A multimodal config.json has no decoder keys at its top (they are under text_config):
    ``--model-file`` still reads it as a Hugging Face config, not as a model record."""
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN36_27B_CONFIG))
    r = run_cli("forecast", "infer", "--model-file", str(path), "--gpu", "h100", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["model"]["params_total"] == _model("qwen3.6-27b").params_total()


def _from_config(cfg: dict) -> ModelArch:
    from gpuplan.cli._model import _hf_to_model

    rec = _hf_to_model(dict(cfg), "config.json")
    rec.pop("extra")
    return ModelArch(**rec)


def _nano_v2(pattern: str, hidden: int, ffn: int) -> dict:
    """A Nemotron Nano v2 config.json's fields, from NVIDIA/NeMo ssm.py @8cfedd7203
    (NemotronNano9Bv2 / NemotronNano12Bv2 on NemotronHConfigBase)."""
    return {
        "model_type": "nemotron_h",
        "hybrid_override_pattern": pattern,
        "num_hidden_layers": len(pattern),
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "mamba_num_heads": 128,
        "mamba_head_dim": 80,
        "ssm_state_size": 128,
        "n_groups": 8,
        "conv_kernel": 4,
        "vocab_size": 131072,
        "tie_word_embeddings": False,
        "max_position_embeddings": 131072,
    }


NANO_9B_V2 = _nano_v2("M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-", 4480, 15680)
NANO_12B_V2 = _nano_v2(
    "M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-", 5120, 20480
)


@pytest.mark.parametrize(
    ("cfg", "row", "blocks"),
    [
        (NEMOTRON3_NANO_CONFIG, "nemotron3-nano-30b-a3b", (52, 23, 6, 23)),
        (NANO_9B_V2, "nemotron-nano-9b-v2", (56, 27, 4, 0)),
        (NANO_12B_V2, "nemotron-nano-12b-v2", (62, 28, 6, 0)),
        (QWEN3_NEXT_CONFIG, "qwen3-next-80b-a3b", (96, 36, 12, 48)),
        (QWEN36_27B_CONFIG, "qwen3.6-27b", (128, 48, 16, 0)),
    ],
)
def test_a_hybrid_config_json_reads_as_the_catalog_row(cfg, row, blocks):
    """Nemotron-H's hybrid_override_pattern, Qwen3-Next's full_attention_interval and
    Qwen3.6's nested text_config with layer_types read as the rows' single blocks (layers,
    Mamba-2 or Gated DeltaNet, attention, MoE) and parameter counts."""
    m, r = _from_config(cfg), _model(row)
    assert (m.layers, m.mamba_layers, m.attention_layers, m.num_moe_layers) == blocks
    assert m.params_total() == r.params_total()
    assert m.params_active() == r.params_active()


def test_qwen36_27b_is_a_dense_hybrid_of_its_card_size():
    """128 single blocks, 64 of them dense SwiGLU MLPs; the card's 27B (a rounded figure,
    with a ~0.46B vision encoder gpuplan does not model) within the catalog's 3%, the gated
    attention's output gate (0.50B) counted."""
    m = _model("qwen3.6-27b")
    assert m.num_dense_mlp_blocks == 64 and m.attention_output_gate
    assert m.params_total() == pytest.approx(27e9, rel=0.03)


def test_the_serving_simulation_admits_a_request_with_its_state():
    """A request of 600 KV tokens fits a 1,000-token pool alone, but not with a recurrent
    state worth 500 more: the simulation says it can never be admitted."""
    import numpy as np

    from gpuplan.forecast.serving import ReplicaModel, simulate_requests

    from .test_infer_serving import flat_cost

    arrivals = np.arange(8, dtype=float)
    lin, lout = np.full(8, 500.0), np.full(8, 100.0)
    plain = ReplicaModel(flat_cost(0.01), 4, 1000.0, 0.0)
    ok = simulate_requests(plain, arrivals, lin, lout)
    assert not ok.saturated and ok.ttft_s.size > 0
    hybrid = ReplicaModel(flat_cost(0.01), 4, 1000.0, 0.0, state_tokens_per_request=500.0)
    refused = simulate_requests(hybrid, arrivals, lin, lout)
    assert refused.saturated and refused.ttft_s.size == 0


def test_a_hybrid_block_is_half_a_layer_of_launch_overhead():
    """Nemotron-H 8B's 52 single blocks launch about the kernels of 26 transformer layers."""
    sh = shard(_model("nemotron-h-8b"), Layout(tp=1), PRECISIONS["bf16"])
    assert sh.overhead_layers == 26.0
    assert shard(_model("llama3.1-8b"), Layout(tp=1), PRECISIONS["bf16"]).overhead_layers == 32
