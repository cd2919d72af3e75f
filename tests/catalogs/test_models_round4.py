"""Model rows and aliases added in round 4 (Qwen2-72B, Qwen1.5-72B, Cohere Command R / R+,
DeepSeekMoE 16B, Code Llama 7B / 70B-Instruct, Yi-34B, StarCoder2-15B, Phi-3-mini, JAIS-30B v3,
Granite 3.1 8B; Llama Guard 3 8B and DeepSeek-Coder-V2 as aliases): each row's parameter count
from its config matches the size its publisher states, and each checkpoint name resolves to the
architecture it was verified against."""

from __future__ import annotations

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.errors import NotFoundError

CAT = get_catalog()

NEW_ROWS = [
    "qwen2-72b",
    "qwen1.5-72b",
    "command-r-plus-104b",
    "command-r-35b",
    "command-r-08-2024",
    "deepseek-moe-16b",
    "codellama-7b",
    "codellama-7b-python",
    "codellama-70b-instruct",
    "yi-34b",
    "starcoder2-15b",
    "phi-3-mini-4k",
    "phi-3-mini-128k",
    "jais-30b-v3",
    "granite-3.1-8b",
]


@pytest.mark.parametrize("model_id", NEW_ROWS)
def test_total_params_match_the_published_size(model_id):
    m = CAT.model(model_id)
    assert m.params_total() == pytest.approx(m.published_params, rel=0.03)
    assert m.source and m.retrieved and m.published_params_source


def test_exact_published_counts_are_met_exactly():
    """StarCoder2-15B's safetensors count and the Hub's Yi-34B count (34.389B) are exact
    tensor sums: the architecture fields reproduce them, biases and LayerNorms included."""
    assert CAT.model("starcoder2-15b").params_total() == 15_957_889_024
    assert round(CAT.model("yi-34b").params_total() / 1e6) == 34_389


def test_deepseek_moe_counts_shared_experts_and_the_dense_first_layer():
    m = CAT.model("deepseek-moe-16b")
    assert m.moe_layer_indices() == list(range(1, 28))
    assert (m.num_experts, m.top_k, m.num_shared_experts) == (64, 6, 2)
    # 2.83B per token: 6 routed + 2 shared experts of 1408 in 27 layers, the dense layer 0
    assert m.params_active() == pytest.approx(2.83e9, rel=0.01)
    assert m.params_active() < m.params_total()


ALIASES = {
    "Qwen2-72B": "qwen2-72b",
    "Qwen/Qwen2-72B": "qwen2-72b",
    "Qwen/Qwen2-72B-Instruct": "qwen2-72b",
    "Qwen/Qwen1.5-72B": "qwen1.5-72b",
    "Qwen/Qwen1.5-72B-Chat": "qwen1.5-72b",
    "CohereForAI/c4ai-command-r-plus": "command-r-plus-104b",
    "CohereForAI/c4ai-command-r-plus-08-2024": "command-r-plus-104b",
    "CohereLabs/c4ai-command-r-plus-08-2024": "command-r-plus-104b",
    "Command R+": "command-r-plus-104b",
    "CohereForAI/c4ai-command-r-v01": "command-r-35b",
    "CohereForAI/c4ai-command-r-08-2024": "command-r-08-2024",
    "CohereLabs/c4ai-command-r-08-2024": "command-r-08-2024",
    "deepseek-ai/deepseek-moe-16b-base": "deepseek-moe-16b",
    "deepseek-ai/deepseek-moe-16b-chat": "deepseek-moe-16b",
    "codellama/CodeLlama-7b-hf": "codellama-7b",
    "codellama/CodeLlama-7b-Instruct-hf": "codellama-7b",
    "codellama/CodeLlama-7b-Python-hf": "codellama-7b-python",
    "codellama/CodeLlama-70b-Instruct-hf": "codellama-70b-instruct",
    "01-ai/Yi-34B": "yi-34b",
    "01-ai/Yi-34B-Chat": "yi-34b",
    "bigcode/starcoder2-15b": "starcoder2-15b",
    "microsoft/Phi-3-mini-4k-instruct": "phi-3-mini-4k",
    "microsoft/Phi-3-mini-128k-instruct": "phi-3-mini-128k",
    "core42/jais-30b-v3": "jais-30b-v3",
    "inceptionai/jais-30b-v3": "jais-30b-v3",
    "core42/jais-30b-chat-v3": "jais-30b-v3",
    "inceptionai/jais-30b-chat-v3": "jais-30b-v3",
    "ibm-granite/granite-3.1-8b-instruct": "granite-3.1-8b",
    "ibm-granite/granite-3.1-8b-base": "granite-3.1-8b",
    "meta-llama/Llama-Guard-3-8B": "llama3.1-8b",
    "Llama-Guard-3-8B": "llama3.1-8b",
    "deepseek-ai/DeepSeek-Coder-V2-Instruct": "deepseek-v2",
    "deepseek-ai/DeepSeek-Coder-V2-Base": "deepseek-v2",
    "DeepSeek-Coder-V2-Instruct": "deepseek-v2",
}


@pytest.mark.parametrize(("name", "expected"), sorted(ALIASES.items()))
def test_new_names_resolve_to_the_intended_row(name, expected):
    assert CAT.resolve_id("model", name) == expected


@pytest.mark.parametrize(
    "name",
    [
        # another context (2K) than v3: not aliased
        "core42/jais-30b-v1",
        # 200K context: not aliased to Yi-34B
        "01-ai/Yi-34B-200K",
        # no copy of these configs was read (base 70B keeps 16K per the codellama issue thread)
        "codellama/CodeLlama-70b-hf",
        "codellama/CodeLlama-70b-Python-hf",
        # no copy of its config was opened
        "codellama/CodeLlama-13b-hf",
        # computed 41.3B is 3.3% over the published 40B: not added
        "tiiuae/falcon-40b",
        # the AWQ config's MLP width (29696) differs from Qwen2.5-72B's; no bf16 config was read
        "Qwen/Qwen2.5-VL-72B-Instruct",
    ],
)
def test_unverified_checkpoints_are_not_aliased(name):
    with pytest.raises(NotFoundError):
        CAT.resolve_id("model", name)


def test_cohere_blocks():
    plus, r, r0824 = (
        CAT.model("command-r-plus-104b"),
        CAT.model("command-r-35b"),
        CAT.model("command-r-08-2024"),
    )
    for m in (plus, r, r0824):
        assert m.parallel_attention and m.norms_per_layer == 1
        assert m.norm == "layernorm" and not m.norm_bias and m.tied_embeddings
        assert m.max_context == 131072
    assert plus.qk_norm and not r.qk_norm and not r0824.qk_norm
    # v01 is multi-head; 08-2024 has 8 KV heads and a wider MLP
    assert (r.attention, r.kv_heads, r.ffn_hidden) == ("mha", 64, 22528)
    assert (r0824.attention, r0824.kv_heads, r0824.ffn_hidden) == ("gqa", 8, 24576)


def test_context_and_vocab_distinctions():
    assert CAT.model("qwen2-72b").max_context == 131072
    assert CAT.model("qwen2.5-72b").max_context == 32768
    assert CAT.model("qwen2-72b").params_total() == CAT.model("qwen2.5-72b").params_total()
    assert (CAT.model("codellama-7b").vocab, CAT.model("codellama-7b-python").vocab) == (
        32016,
        32000,
    )
    assert CAT.model("codellama-7b").max_context == 16384
    assert CAT.model("codellama-70b-instruct").max_context == 4096
    short, long = CAT.model("phi-3-mini-4k"), CAT.model("phi-3-mini-128k")
    assert (short.max_context, short.sliding_window) == (4096, 2047)
    assert (long.max_context, long.sliding_window) == (131072, None)
    assert short.params_total() == long.params_total()
    sc2 = CAT.model("starcoder2-15b")
    assert (sc2.sliding_window, sc2.attention_bias, sc2.mlp_bias, sc2.gated_mlp) == (
        4096,
        True,
        True,
        False,
    )
    jais = CAT.model("jais-30b-v3")
    assert (jais.attention, jais.max_context, jais.tied_embeddings) == ("mha", 8192, True)
    assert CAT.model("qwen1.5-72b").attention == "mha"
