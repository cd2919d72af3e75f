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
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B": "llama3.3-70b",
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": "llama3.1-8b",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": "qwen2.5-32b",
    "Qwen/QwQ-32B": "qwen2.5-32b",
    "nvidia/Llama-3.1-Nemotron-70B-Instruct-HF": "llama3.1-70b",
    "zai-org/GLM-4.6": "glm4.5",
    "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8": "qwen3-coder-480b-a35b",
    "MiniMaxAI/MiniMax-M2": "minimax-m2",
    "microsoft/phi-4": "phi-4",
    "mistralai/Mistral-Small-24B-Instruct-2501": "mistral-small-24b",
}


@pytest.mark.parametrize(("name", "expected"), sorted(DERIVATIVES.items()))
def test_derivative_checkpoints_resolve_to_their_architecture(name, expected):
    assert CAT.model(name).id == expected


@pytest.mark.parametrize("name", ["DeepSeek-V3.2-Exp", "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B"])
def test_checkpoints_of_another_architecture_are_not_aliased(name):
    """V3.2 adds sparse attention; the 14B distill's base (Qwen2.5-14B) is not catalogued."""
    with pytest.raises(NotFoundError):
        CAT.model(name)


@pytest.mark.parametrize(
    "model_id", ["qwen3-coder-480b-a35b", "minimax-m2", "phi-4", "mistral-small-24b"]
)
def test_new_rows_count_the_published_parameters(model_id):
    m = CAT.model(model_id)
    assert m.params_total() == pytest.approx(m.published_params, rel=0.03)
    assert m.source and m.retrieved


@pytest.mark.parametrize(
    ("model_id", "embeddings_counted"), [("qwen3-coder-480b-a35b", 2), ("minimax-m2", 0)]
)
def test_new_moe_rows_count_the_published_active_parameters(model_id, embeddings_counted):
    m = CAT.model(model_id)
    left_out = (2 - embeddings_counted) * m.vocab * m.hidden
    assert m.params_active() - left_out == pytest.approx(m.published_active_params, rel=0.03)
