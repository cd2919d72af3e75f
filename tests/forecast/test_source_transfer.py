"""The pooled engine constants' transfer error, measured on every published serving source
that did not fit them (``engine_constants.pooled.source_transfer``): what a profile without
rows of its own gets as its interval, and leave one source out when a shipped row of one of
those sources is scored."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplan.forecast.inference_fit import load_overheads
from gpuplan.forecast.validation_inference import (
    DISAGG_SOURCE,
    ENGINE_SOURCE,
    SWEEP_SOURCE,
    _HeldOutScores,
    _with_interval,
    fit_source_transfer,
    forecast_disagg_row,
    load_disagg_rows,
)

POOLED = ("sglang@0.5", "trtllm@1.2", "atom@0.1", "vllm@0.6.0")


@pytest.fixture(scope="module")
def fresh():
    """The source transfer of the shipped constants, measured again (about a minute)."""
    return fit_source_transfer(load_overheads())


def test_the_shipped_source_transfer_is_what_the_sources_give_now(fresh) -> None:
    """Regenerate with ``python -m gpuplan.forecast.validation_inference --write``."""
    shipped = load_overheads().engines["pooled"]["source_transfer"]
    assert set(fresh["sources"]) == {ENGINE_SOURCE, SWEEP_SOURCE, DISAGG_SOURCE}
    assert fresh["sources"] == shipped["sources"]
    for name in ("log_residual_quantiles",):
        for metric, q in fresh[name].items():
            assert shipped[name][metric] == pytest.approx(q, rel=1e-6), metric
    for out, qs in fresh["leave_one_source_out"].items():
        for metric, q in qs.items():
            assert shipped["leave_one_source_out"][out][metric] == pytest.approx(q, rel=1e-6)
    # every source has rows of both metrics, and the InferenceX ones many
    for src, n in fresh["sources"].items():
        assert n["throughput_per_gpu"] >= 20 and n["tpot"] >= 20, src


def test_leaving_a_source_out_drops_its_residuals(fresh) -> None:
    """Each leave-one-source-out entry is the quantiles of the other sources' residuals
    alone: dropping a source moves them (they would be equal to the all-source quantiles
    if the source were ignored, or to nothing if it were the only one kept)."""
    all_q = fresh["log_residual_quantiles"]
    moved = 0
    for out, qs in fresh["leave_one_source_out"].items():
        for metric, q in qs.items():
            lo, hi = q
            assert lo < 0 < hi, (out, metric)
            moved += q != pytest.approx(all_q[metric], rel=1e-9)
    assert moved >= 4


def test_pooled_profiles_take_the_transfer_measured_on_every_source() -> None:
    fitted = load_overheads()
    st = fitted.engines["pooled"]["source_transfer"]
    for engine in POOLED:
        for metric in ("throughput_per_gpu", "tpot"):
            q = fitted.interval_quantiles(metric, engine)
            assert q == pytest.approx(tuple(st["log_residual_quantiles"][metric])), engine
            loso = fitted.interval_quantiles(metric, engine, held_out_source=DISAGG_SOURCE)
            assert loso == pytest.approx(tuple(st["leave_one_source_out"][DISAGG_SOURCE][metric]))
        # a source that did not measure the transfer leaves the all-source quantiles
        q = fitted.interval_quantiles("tpot", engine, held_out_source="someone-else")
        assert q == pytest.approx(tuple(st["log_residual_quantiles"]["tpot"]))


def test_tpot_without_quantiles_of_its_own_mirrors_the_throughputs() -> None:
    """A calibrated profile, a transferred one and the bare constants have no TPOT
    quantiles of their own: TPOT's are the throughput's mirrored, as before."""
    fitted = load_overheads()
    for engine in ("vllm@0.5.4", "trtllm@0.17", "trtllm@0.9", None):
        lo, hi = fitted.interval_quantiles("throughput_per_gpu", engine)
        assert fitted.interval_quantiles("tpot", engine) == pytest.approx((-hi, -lo)), engine


def test_a_shipped_row_is_scored_without_its_own_source() -> None:
    """A disaggregated row of a pooled profile is scored with the quantiles of the other
    sources; a user's own table of such rows (no shipped source) with every source's."""
    fitted = load_overheads()
    st = fitted.engines["pooled"]["source_transfer"]
    row = next(r for r in load_disagg_rows() if r["engine"].startswith("trtllm@1.2"))
    sims = forecast_disagg_row(row, fitted=fitted)
    cols = (("tpot_median_ms", 1e-3, "tpot_median"), ("out_tokens_per_s_total", 1.0, "throughput"))
    mine = _HeldOutScores(fitted, DISAGG_SOURCE).add(row, sims, cols, "trtllm@1.2", "gpu", True)
    users = _HeldOutScores(fitted).add(row, sims, cols, "trtllm@1.2", "gpu", True)
    for source, got in ((DISAGG_SOURCE, mine), (None, users)):
        q_tpot = fitted.interval_quantiles("tpot", "trtllm@1.2", True, held_out_source=source)
        q_thr = fitted.interval_quantiles("throughput_per_gpu", "trtllm@1.2", True, source)
        _, lo, hi = _with_interval(sims["tpot_median"], "tpot_median", q_thr, (0.0, 0.0), q_tpot)
        assert got["tpot_median"]["interval_s"] == pytest.approx([lo, hi])
    # the quantiles of each: the other sources', or every source's
    assert fitted.interval_quantiles(
        "tpot", "trtllm@1.2", held_out_source=DISAGG_SOURCE
    ) == pytest.approx(tuple(st["leave_one_source_out"][DISAGG_SOURCE]["tpot"]))
    assert mine["tpot_median"]["interval_s"] != pytest.approx(users["tpot_median"]["interval_s"])
    assert np.isfinite(mine["throughput"]["interval_s"]).all()
