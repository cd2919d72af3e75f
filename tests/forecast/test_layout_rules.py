"""The one layout validity function: scalar verdicts, vectorised verdicts, and its callers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpuplan.errors import InputError
from gpuplan.forecast import search, training
from gpuplan.forecast.layout_rules import RULES, layout_violation, valid_layout_mask
from gpuplan.forecast.model import ModelArch

DENSE = ModelArch(
    name="d", layers=6, hidden=1536, heads=12, kv_heads=4, ffn_hidden=4096, vocab=1000
)
MOE = ModelArch(
    name="m",
    layers=6,
    hidden=1024,
    heads=16,
    ffn_hidden=4096,
    vocab=1000,
    num_experts=8,
    top_k=2,
)
KEYS = ("tp", "pp", "cp", "ep", "dp", "vp", "micro_batch", "recompute", "zero")


def _grid(arch: ModelArch) -> dict[str, np.ndarray]:
    values = {
        "tp": [0, 1, 2, 3, 8],
        "pp": [1, 2, 4, 8],
        "cp": [1, 3],
        "ep": [1, 3, 4, 16],
        "dp": [1, 2, 4, 16],
        "vp": [1, 2],
        "micro_batch": [1, 3],
        "recompute": [0, 5],
        "zero": [1, 3, 4],
    }
    rows = np.array(list(itertools.product(*(values[k] for k in KEYS))), dtype=np.int64)
    return {k: rows[:, i] for i, k in enumerate(KEYS)}


@pytest.mark.parametrize("arch", [DENSE, MOE], ids=["dense", "moe"])
def test_vectorised_verdicts_equal_scalar_ones_over_a_grid(arch: ModelArch) -> None:
    grid = _grid(arch)
    n = len(grid["tp"])
    broken: set[str] = set()
    valid = 0
    for num_gpus in (8, 24):
        mask = valid_layout_mask(arch, num_gpus, grid, seq_len=1024, global_batch=16)
        verdicts = [
            layout_violation(
                arch, num_gpus, {k: int(grid[k][i]) for k in KEYS}, seq_len=1024, global_batch=16
            )
            for i in range(n)
        ]
        assert mask.shape == (n,)
        assert mask.tolist() == [v is None for v in verdicts]
        valid += int(mask.sum())
        broken |= {v.rule for v in verdicts if v is not None}
    assert valid > 0  # the grid exercises both verdicts ...
    # ... and every rule that applies to the model is the first one broken somewhere
    assert broken == {r.name for r in RULES if r.moe is None or r.moe == arch.is_moe}


def test_first_violation_is_reported_with_its_message() -> None:
    v = layout_violation(DENSE, 8, {"tp": 8, "pp": 1, "cp": 1, "dp": 1})
    assert v is not None and v.rule == "tp_heads"
    assert v.message == "attention heads (12) are not divisible by --tp 8"
    v = layout_violation(DENSE, 8, {"tp": 2, "pp": 31, "cp": 1, "dp": 1})
    assert v is not None and v.rule == "gpu_count"  # the GPU count is checked before the split
    v = layout_violation(DENSE, 62, {"tp": 2, "pp": 31, "cp": 1, "dp": 1})
    assert v is not None and v.rule == "pipeline_split" and "--pp" in (v.hint or "")


def test_partial_layout_checks_only_rules_its_fields_decide() -> None:
    # dp x micro-batch vs the batch is not checked without a global batch
    assert layout_violation(DENSE, 8, {"dp": 8, "micro_batch": 3}) is None
    v = layout_violation(DENSE, 8, {"dp": 8, "micro_batch": 3}, global_batch=16)
    assert v is not None and v.rule == "global_batch"
    # given fields divide the GPU count: the rest is searched
    assert layout_violation(DENSE, 8, {"tp": 2}) is None
    v = layout_violation(DENSE, 8, {"tp": 3})
    assert v is not None and v.rule == "gpu_count" and "does not divide --gpus 8" in v.message


def test_check_layout_and_check_partial_raise_the_rule_message() -> None:
    par = dict(tp=2, pp=2, cp=1, ep=1, dp=2, vp=1, micro_batch=1, recompute=0, zero=3)
    with pytest.raises(InputError, match="ZeRO stage 3 with pipeline parallelism") as err:
        training.check_layout(DENSE, 8, par, seq_len=1024, global_batch=8, node_size=8)
    assert err.value.hint.startswith("use --zero 0, 1 or 2 with --pp > 1")
    assert "--zero 2" in err.value.hint.split("(", 1)[1]  # the FSDP2 + PP spelling
    with pytest.raises(InputError, match="experts \\(8\\) are not divisible by --ep 3"):
        search._check_partial(MOE, 8, {"ep": 3}, seq_len=1024)
    with pytest.raises(InputError, match="--recompute must be none, selective or full"):
        search._check_partial(DENSE, 8, {"recompute": 7}, seq_len=1024)


def test_enumerate_layouts_keeps_exactly_the_valid_candidates() -> None:
    got = search.enumerate_layouts(MOE, 16, {}, seq_len=1024, global_batch=32, node_size=8)
    n = got["tp"].size
    assert n > 0
    for i in range(n):
        layout = {k: int(got[k][i]) for k in KEYS}
        assert layout_violation(MOE, 16, layout, seq_len=1024, global_batch=32) is None
        # the search preference on top of the rules: ZeRO-2/3 with pipelining only when asked
        assert layout["zero"] <= 1 or layout["pp"] == 1
