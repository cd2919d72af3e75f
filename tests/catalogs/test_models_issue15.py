"""Model rows added for issue 15: parameter counts from each model's own config match the
sizes their reports publish, and the attention pattern is recorded."""

from __future__ import annotations

import pytest

from gpuplan.catalogs import get_catalog

CAT = get_catalog()
NEW = ["gpt-oss-120b", "gpt-oss-20b", "gemma3-27b", "gemma3-12b", "kimi-k2", "glm4.5", "glm4.5-air"]


@pytest.mark.parametrize("model_id", NEW)
def test_total_params_match_the_published_size(model_id):
    m = CAT.model(model_id)
    assert m.params_total() == pytest.approx(m.published_params, rel=0.03)
    assert m.source and m.retrieved


@pytest.mark.parametrize(
    ("model_id", "embeddings_counted"),
    [("kimi-k2", 2), ("gpt-oss-120b", 1), ("gpt-oss-20b", 1), ("glm4.5", 0), ("glm4.5-air", 0)],
)
def test_active_params_match_the_published_count(model_id, embeddings_counted):
    """Publishers differ in which embedding matrices their active count includes (notes)."""
    m = CAT.model(model_id)
    left_out = (2 - embeddings_counted) * m.vocab * m.hidden
    assert m.params_active() - left_out == pytest.approx(m.published_active_params, rel=0.03)


def test_sliding_window_patterns():
    g = CAT.model("Gemma 3 27B")
    assert (g.sliding_window, g.full_attention_interval) == (1024, 6)  # 5 local : 1 global
    o = CAT.model("gpt-oss-120b")
    assert (o.sliding_window, o.full_attention_interval) == (128, 2)  # alternating
    assert CAT.model("llama3.1-8b").sliding_window is None
