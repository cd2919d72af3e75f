"""Shared pieces of the CLI robustness tests: bad files made for real, one-line checks."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

#: a small serving scenario (one cloud instance): plans in about 2 s on one core
SMALL_SCENARIO = textwrap.dedent(
    """\
    name: cli-robust
    workloads:
      inference:
        - name: chat
          model: llama3.1-8b
          qps: 2
          input_tokens: 512
          output_tokens: 128
          ttft_slo_s: 1.0
          tpot_slo_s: 0.05
    candidates:
      gpus: [h100]
      instances: [p5.48xlarge]
      onprem_nodes: []
    """
)

#: Llama 3.1 8B's config.json as published on huggingface.co (the architecture keys)
HF_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "rope_theta": 500000.0,
    "torch_dtype": "bfloat16",
}

#: Mixtral 8x7B's config.json (huggingface.co/mistralai/Mixtral-8x7B-v0.1)
HF_MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "num_attention_heads": 32,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
    "sliding_window": None,
}

#: DeepSeek-V3's config.json (huggingface.co/deepseek-ai/DeepSeek-V3): MLA, 256 routed + 1
#: shared expert, 3 leading dense layers
HF_DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "first_k_dense_replace": 3,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
}

#: Qwen3-30B-A3B's config.json (huggingface.co/Qwen/Qwen3-30B-A3B): 128 experts, top 8
HF_QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "decoder_sparse_step": 1,
    "head_dim": 128,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "moe_intermediate_size": 768,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "sliding_window": None,
    "use_sliding_window": False,
}


def one_line_error(proc, code: int = 2) -> str:
    """The single stderr line of a refused command (and checks there is no traceback)."""
    stderr = proc.stderr
    assert proc.returncode == code, (proc.returncode, stderr[-2000:])
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def binary_file(path: Path) -> Path:
    path.write_bytes(bytes(range(256)) * 4)
    return path


def utf16_file(path: Path, text: str = "name: x\nworkloads: {}\n") -> Path:
    path.write_bytes(text.encode("utf-16"))  # with its byte-order mark, as Windows tools save
    return path


def unreadable_file(path: Path) -> Path:
    """A file that cannot be opened for reading, for real.

    As an ordinary user: mode 000. Root ignores permission bits, so there: a symbolic-link
    loop (open() fails with ELOOP, as for a file behind a broken mount).
    """
    if os.geteuid() != 0:
        path.write_text("{}")
        path.chmod(0)
        return path
    a, b = path, path.with_name(path.name + ".loop")
    a.symlink_to(b.name)
    b.symlink_to(a.name)
    return a


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path
