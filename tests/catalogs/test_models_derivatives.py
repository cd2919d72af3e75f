"""Checkpoints published under their own names resolve to the architecture they share
(the model cards and the DeepSeek-R1 distillation table say which), and the dense and MoE
rows added with them count the parameters their publishers state."""

from __future__ import annotations

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.errors import NotFoundError

CAT = get_catalog()

DERIVATIVES = {
    "deepseek-ai/DeepSeek-V3-0324": "deepseek-v3",
    "DeepSeek-V3.1": "deepseek-v3",
    "deepseek-ai/DeepSeek-V3.1-Terminus": "deepseek-v3",
    "deepseek-ai/DeepSeek-R1-0528": "deepseek-v3",
    "DeepSeek-V3.2-Exp": "deepseek-v3.2",
    "deepseek-ai/DeepSeek-V3.2": "deepseek-v3.2",
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B": "llama3.3-70b",
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": "llama3.1-8b",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": "qwen2.5-32b",
    "Qwen/QwQ-32B": "qwen2.5-32b",
    "nvidia/Llama-3.1-Nemotron-70B-Instruct-HF": "llama3.1-70b",
    "zai-org/GLM-4.6": "glm4.6",
    "zai-org/GLM-4.5-FP8": "glm4.5",
    "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8": "qwen3-coder-480b-a35b",
    "MiniMaxAI/MiniMax-M2": "minimax-m2",
    "microsoft/phi-4": "phi-4",
    "mistralai/Mistral-Small-24B-Instruct-2501": "mistral-small-24b",
    "Qwen/Qwen3-235B-A22B-Thinking-2507": "qwen3-235b-a22b-2507",
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": "qwen3-235b-a22b-2507",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "Qwen/Qwen3-30B-A3B-Thinking-2507-FP8": "qwen3-30b-a3b-2507",
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": "qwen3-30b-a3b-2507",
    "moonshotai/Kimi-K2-Thinking": "kimi-k2-0905",
    "moonshotai/Kimi-K2-Instruct-0905": "kimi-k2-0905",
    "moonshotai/Kimi-K2-Instruct": "kimi-k2",
    "moonshotai/Kimi-K2.5": "kimi-k2.5",
    "zai-org/GLM-4.7": "glm4.7",
    "zai-org/GLM-4.7-FP8": "glm4.7",
    "zai-org/GLM-4.7-Flash": "glm4.7-flash",
    "zai-org/GLM-5-FP8": "glm5",
    "Qwen/Qwen2.5-Coder-32B-Instruct": "qwen2.5-32b",
    "Qwen/Qwen3-VL-235B-A22B-Thinking": "qwen3-vl-235b-a22b",
    "Qwen/Qwen3-VL-30B-A3B-Instruct": "qwen3-vl-30b-a3b",
    "mistralai/Devstral-Small-2507": "devstral-small-24b",
    "mistralai/Mistral-Large-3-675B-Instruct-2512": "mistral-large-3",
    "ByteDance-Seed/Seed-OSS-36B-Instruct": "seed-oss-36b",
    "baidu/ERNIE-4.5-300B-A47B-PT": "ernie4.5-300b-a47b",
    "baidu/ERNIE-4.5-21B-A3B-PT": "ernie4.5-21b-a3b",
}


@pytest.mark.parametrize(("name", "expected"), sorted(DERIVATIVES.items()))
def test_derivative_checkpoints_resolve_to_their_architecture(name, expected):
    assert CAT.model(name).id == expected


@pytest.mark.parametrize(
    "name",
    [
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
        "Qwen/Qwen3-VL-8B-Instruct",  # a vision model without a row: "VL" stays in the name
        "XiaomiMiMo/MiMo-V2-Flash",  # two KV-head counts and a V head narrower than Q/K
    ],
)
def test_checkpoints_of_another_architecture_are_not_aliased(name):
    """The 14B distill is not an alias of qwen2.5-14b (no copy of its config was found to check
    its shape against); a Qwen3-VL checkpoint without a row of its own is not the text model of
    its size; MiMo-V2-Flash's hybrid attention does not fit the schema. (DeepSeek-V3.2 adds
    sparse attention: its own row, not V3's.)"""
    with pytest.raises(NotFoundError):
        CAT.model(name)


RELEASES = {
    # release row: (architecture row, native context the release's card states)
    "qwen3-30b-a3b-2507": ("qwen3-30b-a3b", 262144),
    "qwen3-235b-a22b-2507": ("qwen3-235b-a22b", 262144),
    "kimi-k2-0905": ("kimi-k2", 262144),
    "glm4.6": ("glm4.5", 202752),
    "glm4.7": ("glm4.5", 202752),
    "kimi-k2.5": ("kimi-k2", 262144),
    "qwen3-vl-235b-a22b": ("qwen3-235b-a22b", 262144),
    "qwen3-vl-30b-a3b": ("qwen3-30b-a3b", 262144),
    "devstral-small-24b": ("mistral-small-24b", 131072),
}
ARCH_FIELDS = (
    "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab", "attention",
    "mla", "num_experts", "top_k", "num_shared_experts", "moe_ffn_hidden", "first_dense_layers",
    "gated_mlp", "tied_embeddings", "qk_norm",
)  # fmt: skip


@pytest.mark.parametrize(("release", "base"), sorted(RELEASES.items()))
def test_release_rows_keep_the_architecture_and_lengthen_the_context(release, base):
    """A release row is its architecture's row (YAML merge) with the longer context its card
    states, and its own source; a request between the two contexts is forecast for the
    release and refused for the original."""
    r, b = CAT.model(release), CAT.model(base[0])
    for f in ARCH_FIELDS:
        assert getattr(r, f) == getattr(b, f), f
    assert r.params_total() == b.params_total()
    assert r.max_context == base[1] > b.max_context
    assert r.source != b.source and r.retrieved
    assert not set(r.aliases) & set(b.aliases)


@pytest.mark.parametrize(
    "model_id",
    [
        "qwen3-coder-480b-a35b",
        "minimax-m2",
        "phi-4",
        "mistral-small-24b",
        "glm4.7-flash",
        "glm5",
        "mistral-large-3",
        "seed-oss-36b",
        "ernie4.5-300b-a47b",
    ],
)
def test_new_rows_count_the_published_parameters(model_id):
    m = CAT.model(model_id)
    assert m.params_total() == pytest.approx(m.published_params, rel=0.03)
    assert m.source and m.retrieved


@pytest.mark.parametrize(
    ("model_id", "embeddings_counted"),
    [("qwen3-coder-480b-a35b", 2), ("minimax-m2", 0), ("glm5", 0)],
)
def test_new_moe_rows_count_the_published_active_parameters(model_id, embeddings_counted):
    m = CAT.model(model_id)
    left_out = (2 - embeddings_counted) * m.vocab * m.hidden
    assert m.params_active() - left_out == pytest.approx(m.published_active_params, rel=0.03)


def test_a800_is_the_a100_with_slower_nvlink():
    """The export part: the A100 SXM4 80GB's compute and memory, NVLink 400 of 600 GB/s."""
    a100, a800 = CAT.gpu("a100-sxm4-80gb"), CAT.gpu("a800-sxm4-80gb")
    for dtype in ("fp32", "tf32", "bf16", "fp16", "int8"):
        assert a800.peak_flops_per_s(dtype) == a100.peak_flops_per_s(dtype)
    assert a800.memory_bytes == a100.memory_bytes
    assert a800.memory_bandwidth_bytes_per_s == a100.memory_bandwidth_bytes_per_s
    assert a800.scale_up_bandwidth_bytes_per_s == pytest.approx(
        a100.scale_up_bandwidth_bytes_per_s * 400 / 600
    )


def test_rtx_pro_6000_is_a_pcie_card_of_its_own_generation():
    """No NVLink, eight to a server (AWS g7e.48xlarge), and a generation of its own so the
    calibration does not pool its GDDR7 part with the B200's HBM (transfer by generation)."""
    g = CAT.gpu("rtx-pro-6000-blackwell-server")
    assert g.scale_up_domain_size == 1 and g.pcie_server_size == 8
    assert g.generation != CAT.gpu("b200").generation
    assert g.peak_flops_per_s("fp4") < CAT.gpu("b200").peak_flops_per_s("fp4")
