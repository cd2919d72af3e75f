"""Model rows and aliases added in round 3 (Qwen3 and Qwen2.5 sizes, Gemma 3 1B/4B, DeepSeek-V2
and V2-Lite): each row's parameter count from its config matches the size its publisher states,
and each checkpoint name resolves to the architecture it was verified against."""

from __future__ import annotations

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.errors import NotFoundError

CAT = get_catalog()

NEW_ROWS = [
    "qwen3-14b",
    "qwen3-4b",
    "qwen3-4b-2507",
    "qwen3-1.7b",
    "qwen3-0.6b",
    "qwen2.5-14b",
    "qwen2.5-3b",
    "qwen2.5-1.5b",
    "qwen2.5-0.5b",
    "gemma3-4b",
    "gemma3-1b",
    "deepseek-v2",
    "deepseek-v2-lite",
]


@pytest.mark.parametrize("model_id", NEW_ROWS)
def test_total_params_match_the_published_size(model_id):
    m = CAT.model(model_id)
    assert m.params_total() == pytest.approx(m.published_params, rel=0.03)
    assert m.source and m.retrieved and m.published_params_source


@pytest.mark.parametrize("model_id", ["deepseek-v2", "deepseek-v2-lite"])
def test_active_params_match_the_published_count(model_id):
    """DeepSeek's activated counts leave out the input embedding (row notes)."""
    m = CAT.model(model_id)
    assert m.params_active() - m.vocab * m.hidden == pytest.approx(
        m.published_active_params, rel=0.03
    )


ALIASES = {
    "Qwen/Qwen3-14B": "qwen3-14b",
    "Qwen/Qwen3-4B": "qwen3-4b",
    "Qwen/Qwen3-1.7B": "qwen3-1.7b",
    "Qwen/Qwen3-0.6B": "qwen3-0.6b",
    "Qwen/Qwen3-4B-Instruct-2507": "qwen3-4b-2507",
    "Qwen3-4B-Thinking-2507": "qwen3-4b-2507",
    "Qwen/Qwen3-4B-Thinking-2507": "qwen3-4b-2507",
    "Qwen/Qwen2.5-14B-Instruct": "qwen2.5-14b",
    "Qwen/Qwen2.5-3B-Instruct": "qwen2.5-3b",
    "Qwen/Qwen2.5-1.5B-Instruct": "qwen2.5-1.5b",
    "Qwen/Qwen2.5-0.5B-Instruct": "qwen2.5-0.5b",
    "google/gemma-3-4b-it": "gemma3-4b",
    "google/gemma-3-1b-it": "gemma3-1b",
    "deepseek-ai/DeepSeek-V2": "deepseek-v2",
    "deepseek-ai/DeepSeek-V2-Chat": "deepseek-v2",
    "deepseek-ai/DeepSeek-V2-Lite": "deepseek-v2-lite",
    "DeepSeek-V2-Lite-Chat": "deepseek-v2-lite",
    "deepseek-ai/DeepSeek-V2-Lite-Chat": "deepseek-v2-lite",
    "Qwen/Qwen2.5-Coder-7B-Instruct": "qwen2.5-7b",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": "qwen2.5-7b",
}


@pytest.mark.parametrize(("name", "expected"), sorted(ALIASES.items()))
def test_new_names_resolve_to_the_intended_row(name, expected):
    assert CAT.resolve_id("model", name) == expected


@pytest.mark.parametrize(
    "name",
    [
        # untied LM head (copies of its config): not the Qwen2.5-1.5B shape
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        # no copy of these configs was read
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
        "deepseek-ai/DeepSeek-V2.5",
    ],
)
def test_unverified_checkpoints_are_not_aliased(name):
    with pytest.raises(NotFoundError):
        CAT.resolve_id("model", name)


def test_release_row_keeps_the_qwen3_4b_architecture():
    base, release = CAT.model("qwen3-4b"), CAT.model("qwen3-4b-2507")
    assert release.params_total() == base.params_total()
    assert (release.max_context, base.max_context) == (262144, 40960)


def test_architecture_details():
    lite = CAT.model("deepseek-v2-lite")
    assert lite.mla is not None and lite.mla.q_lora_rank is None
    assert CAT.model("deepseek-v2").mla.q_lora_rank == 1536
    g1 = CAT.model("gemma3-1b")
    assert (g1.attention, g1.kv_heads, g1.max_context, g1.sliding_window) == ("mqa", 1, 32768, 512)
    assert CAT.model("qwen2.5-3b").attention_bias and CAT.model("qwen2.5-3b").tied_embeddings
    assert CAT.model("qwen3-0.6b").qk_norm and CAT.model("qwen3-0.6b").tied_embeddings
    assert not CAT.model("qwen3-14b").tied_embeddings
