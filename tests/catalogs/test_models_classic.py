"""The large dense models of 2021-2023 that published training runs name (OPT, BLOOM,
MT-NLG, PaLM, LLaMA, Code Llama / Llama 2 34B, GPT-NeoX) and two current checkpoints' names
(Mistral Small 3.1/3.2, Mistral Large 24.11): each row counts its publisher's parameters and
resolves from the names papers and Hugging Face use."""

from __future__ import annotations

import pytest

from gpuplan.catalogs.catalog import get_catalog

CAT = get_catalog()


@pytest.mark.parametrize(
    "model_id",
    [
        "opt-175b",
        "bloom-176b",
        "mt-nlg-530b",
        "palm-540b",
        "llama-65b",
        "codellama-34b",
        "gpt-neox-20b",
        "mistral-small-3.1-24b",
    ],
)
def test_rows_count_the_published_parameters(model_id):
    m = CAT.model(model_id)
    assert m.params_total() == pytest.approx(m.published_params, rel=0.03)
    assert m.source and m.retrieved and m.published_params_source


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("facebook/opt-175b", "opt-175b"),
        ("OPT-175B", "opt-175b"),
        ("bigscience/bloom", "bloom-176b"),
        ("BLOOM-176B", "bloom-176b"),
        ("MT-NLG 530B", "mt-nlg-530b"),
        ("Megatron-Turing NLG 530B", "mt-nlg-530b"),
        ("PaLM 540B", "palm-540b"),
        ("LLaMA 65B", "llama-65b"),
        ("Llama 2 34B", "codellama-34b"),
        ("codellama/CodeLlama-34b-Instruct-hf", "codellama-34b"),
        ("EleutherAI/gpt-neox-20b", "gpt-neox-20b"),
        ("mistralai/Mistral-Small-3.1-24B-Instruct-2503", "mistral-small-3.1-24b"),
        ("mistralai/Mistral-Large-Instruct-2411", "mistral-large-123b"),
    ],
)
def test_published_names_resolve(name, expected):
    assert CAT.model(name).id == expected


def test_palm_is_multi_query_with_a_narrow_attention_and_parallel_layers():
    """PaLM's 48 heads of 256 are 12,288 wide in an 18,432-wide model, with one shared K/V
    head: the attention projections are a small share of a layer."""
    m = CAT.model("palm-540b")
    assert m.attention == "mqa" and m.kv_heads == 1 and m.heads * m.head_dim < m.hidden
    assert m.parallel_attention


def test_mistral_small_31_is_mistral_small_3_with_a_longer_context():
    a, b = CAT.model("mistral-small-3.1-24b"), CAT.model("mistral-small-24b")
    assert (a.layers, a.hidden, a.heads, a.kv_heads, a.ffn_hidden) == (
        b.layers, b.hidden, b.heads, b.kv_heads, b.ffn_hidden,
    )  # fmt: skip
    assert a.max_context > b.max_context
    assert not set(a.aliases) & set(b.aliases)
