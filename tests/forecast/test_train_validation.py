"""The training forecast against the published runs shipped with gpuplan (issue 5 targets).

Every figure asserted here is a *held-out* error: each row is forecast with constants fitted
without its publication (leave-one-source-out). A change that makes the model worse on the
published runs fails these tests.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuplan.forecast import validation_training as vt

from .test_train_fakes import FakePerf, fake_hardware


@pytest.fixture(scope="module")
def loso():
    return vt.validate(scheme="leave-one-source-out")


def test_issue_targets_held_out(loso):
    o = loso["overall"]
    # coverage >= 95% of rows with a complete configuration
    assert o["rows_complete"] >= 250
    assert o["coverage"] >= 0.95
    # median absolute error <= 10%, p90 <= 25%
    assert o["median_abs_error"] <= 0.10
    assert o["p90_abs_error"] <= 0.25
    # the interval contains the published value in >= 80% of rows
    assert o["interval_coverage"] >= 0.80


def test_every_publication_is_held_out_and_reported(loso):
    groups = loso["per_group"]
    # every publication of the table, the four Megatron/NeMo/MosaicML ones and the added
    # framework sources (IBM fms-fsdp ...)
    assert set(groups) == {vt.publication(r["source"]) for r in vt.load_rows()}
    assert len(groups) >= 5
    for name, stats in groups.items():
        assert stats["rows_forecast"] > 0, name
        assert name in loso["constants"]["folds"]
    for row in loso["rows"]:
        assert row["constants_fitted_without"] == row["group"]
    # per-source statistics cover every source column value of the table
    sources = {r["source"] for r in vt.load_rows()}
    assert set(loso["per_source"]) == sources


def test_like_with_like_metrics(loso):
    by_id = {r["run_id"]: r for r in loso["rows"]}
    assert by_id["megatron21_t1_1008.0B"]["metric"] == "megatron_tflops_per_gpu"
    assert by_id["korthikanti22_530B_seqpar+selective"]["metric"] == "step_time_s"
    assert by_id["nemo2407_LLAMA3-70B_64"]["metric"] == "tokens_per_s_per_gpu"
    assert by_id["mpt_H10080GBBF_7b_2048_8_amp_bf16"]["metric"] == "tokens_per_s_per_gpu"
    # the published layout is used as given
    lay = by_id["nemo2407_LLAMA3-70B_64"]["layout"]
    assert (lay["tp"], lay["pp"], lay["cp"], lay["dp"], lay["vp"]) == (4, 4, 2, 2, 5)
    k = by_id["korthikanti22_530B_seqpar+selective"]["layout"]
    assert (k["tp"], k["pp"], k["vp"], k["recompute"]) == (8, 35, 3, 1)


def test_rows_without_configuration_are_explained(loso):
    reasons = {r["run_id"]: r["reason"] for r in loso["incomplete"]}
    assert "megatron21_text_gpt3_1024" in reasons
    assert "not published" in reasons["megatron21_text_gpt3_1024"]
    assert loso["failed"] == []


def test_memory_model_fits_published_layouts(loso):
    # A published run ran, so its layout fitted: our memory model must agree on almost all.
    fits = np.array([r["layout_fits_in_memory"] for r in loso["rows"]])
    assert fits.mean() >= 0.95


def test_shipped_constants_are_the_in_sample_fit_and_physical():
    c = vt.default_constants()
    for key, (lo, hi) in vt.FIT_BOUNDS.items():
        assert lo <= c[key] <= hi
    assert c["residual_ratio_quantiles"][0] <= 1.0 <= c["residual_ratio_quantiles"][1]
    assert "fitted_on" in c["provenance"]
    for kernel in c["attention_kernels"].values():
        for row in kernel.values():
            assert 0 < row["fraction_of_peak"] <= 1 and row["source"] and row["retrieved"]


def test_fit_recovers_known_constants():
    """Synthetic published values made by the model with known constants are fitted back."""
    ctx_hw = fake_hardware()
    ctx = vt.Context(catalog=None, hardware=lambda gpu: ctx_hw)
    rows = vt.load_rows()
    from gpuplan.catalogs import get_catalog

    cat = get_catalog()
    cfgs = [vt.row_config(r, cat) for r in rows]
    cfgs = [c for c in cfgs if c.complete][::6]  # a spread of 40-odd rows, all sources
    truth = {
        **vt.default_constants(),
        "gemm_time_factor": 1.4,
        "attention_time_factor": 1.7,
        "nongemm_traffic_factor": 2.5,
        "layer_overhead_s": 2e-4,
    }
    layouts: dict = {}
    vt.choose_layouts(cfgs, ctx, layouts, [])
    for cfg in cfgs:
        e = vt.evaluate_row(cfg, ctx_hw, truth, layouts[cfg.run_id])
        cfg.published_step_time_s = float(e.step3[0])

    def evals(c):
        return [vt.evaluate_row(cfg, ctx_hw, c, layouts[cfg.run_id]) for cfg in cfgs]

    start = {
        **vt.default_constants(),
        "gemm_time_factor": 1.0,
        "attention_time_factor": 1.0,
        "nongemm_traffic_factor": 1.0,
        "layer_overhead_s": 0.0,
    }
    fitted = vt.fit_constants(evals, start, iterations=6)
    assert fitted["gemm_time_factor"] == pytest.approx(1.4, rel=0.02)
    assert fitted["attention_time_factor"] == pytest.approx(1.7, rel=0.05)
    assert fitted["nongemm_traffic_factor"] == pytest.approx(2.5, rel=0.1)
    assert fitted["layer_overhead_s"] == pytest.approx(2e-4, rel=0.2)
    lo, hi = fitted["residual_ratio_quantiles"]
    assert 0.98 < lo <= 1.0 <= hi < 1.02  # a perfect model has a tight band


def test_validation_with_a_different_device_changes_the_answer():
    # The validation really uses the device model: a device twice as slow everywhere
    # forecasts slower steps for every row.
    slow = dataclasses.replace(
        fake_hardware(), perf=FakePerf(peak={"bf16": 100e12, "fp16": 100e12, "fp8": 200e12})
    )
    fast = fake_hardware()
    from gpuplan.catalogs import get_catalog

    cat = get_catalog()
    cfg = next(
        c
        for c in (vt.row_config(r, cat) for r in vt.load_rows())
        if c.run_id == "nemo2407_LLAMA3-8B_8"
    )
    c = vt.default_constants()
    a = vt.evaluate_row(cfg, fast, c)
    b = vt.evaluate_row(cfg, slow, c, a.layout)
    assert b.step3[0] > 2 * a.step3[0]


def test_bad_data_file(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(vt.SchemaError, match="not a training-runs table"):
        vt.load_rows(bad)
    with pytest.raises(vt.InputError, match="cannot read"):
        vt.load_rows(tmp_path / "missing.csv")
