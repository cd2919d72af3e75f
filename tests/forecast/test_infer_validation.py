"""``gpuplan validate inference`` against the shipped published runs: the issue's targets,
held-out honesty, and the shipped constants."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from gpuplan.forecast.validation_inference import (
    CSV_PATH,
    engine_of,
    load_rows,
    prepare,
    row_case,
    validate_inference,
)


@pytest.fixture(scope="module")
def lomo():
    return validate_inference(scheme="leave-one-model-out")


def test_targets_of_issue_6_are_met_held_out(lomo):
    o = lomo["overall"]
    assert o["rows"] == 108
    assert o["coverage"] >= 0.95
    assert o["median_abs_pct_error"] <= 12.0
    assert o["p90_abs_pct_error"] <= 30.0
    assert o["interval_coverage"] >= 0.80


def test_per_source_and_table_scores(lomo):
    assert len(lomo["by_source"]) == 1  # one publication: the TensorRT-LLM v0.9.0 tables
    assert len(lomo["by_table"]) == 6  # throughput and latency pages for A100, H100, H200
    assert sum(v["rows"] for v in lomo["by_table"].values()) == 108
    # the published table's two metrics, and the engine runs' TTFT and TPOT apart
    assert set(lomo["by_metric"]) == {
        "throughput_per_gpu",
        "ttft",
        "ttft_mean_burst",
        "tpot_median_burst",
        "ttft_median_online",
        "tpot_median_online",
    }
    for row in lomo["rows"]:
        lo, hi = row["interval"]
        assert lo < row["forecast"] < hi


def test_a_held_out_model_is_never_fitted_on(lomo):
    # multiply the published values of one model by 3: its held-out forecasts must not move
    rows = load_rows()
    cases, _kept, _ = prepare(rows)
    from gpuplan.forecast.validation_inference import cross_validate

    tampered = cases.__class__(
        **{
            **cases.__dict__,
            "published": np.where(cases.model == "llama2-7b", cases.published * 3, cases.published),
        }
    )
    pred_a, _ = cross_validate(cases)
    pred_b, _ = cross_validate(tampered)
    sel = cases.model == "llama2-7b"
    np.testing.assert_allclose(pred_a[sel, 0], pred_b[sel, 0], rtol=1e-12)
    # ...while the other models' forecasts do move (the tampered rows were in their fits)
    assert not np.allclose(pred_a[~sel, 0], pred_b[~sel, 0], rtol=1e-6)


def test_leave_one_gpu_out_also_scores():
    r = validate_inference(scheme="leave-one-gpu-out")
    assert r["overall"]["coverage"] == 1.0
    assert r["overall"]["median_abs_pct_error"] <= 15.0
    assert {f["held_out"] for f in r["folds"]} == {
        "a100-sxm4-80gb",
        "h100-sxm5-80gb",
        "h200-sxm-141gb",
    }


def test_like_with_like_conventions():
    rows = {r["run_id"]: r for r in load_rows()}
    thr = row_case(rows["trtllm09_LLaMA70B_H100_tp2_128_128"])
    assert thr["metric"] == "throughput_per_gpu"
    assert thr["published"] == 3214.0 and thr["batch"] == 1024 and thr["tp"] == 2
    lat = row_case(rows["trtllm09_lat_Falcon180B_A100_tp8_2048"])
    assert lat == {
        **lat,
        "metric": "ttft",
        "published": pytest.approx(0.456),
        "batch": 1,
        "output": 1,
        "tp": 8,
    }
    assert engine_of(rows["trtllm09_lat_Falcon180B_A100_tp8_2048"]) == "trtllm-0.9"


def test_shipped_copy_keeps_the_sources():
    with CSV_PATH.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 108
    assert all(r["source"] and r["source_locator"] for r in rows)


def test_shipped_constants_match_a_fresh_fit():
    from gpuplan.forecast.inference_fit import fit_params, load_overheads, predict_cases

    rows = load_rows()
    cases, _, _ = prepare(rows)
    shipped = load_overheads()
    fresh = fit_params(cases)
    a = predict_cases(cases, shipped.params)[:, 0]
    b = predict_cases(cases, fresh)[:, 0]
    # regenerate with: python -m gpuplan.forecast.validation_inference --write
    assert np.median(np.abs(a / b - 1)) < 0.03
    assert shipped.record["held_out"]["leave-one-model-out"]["rows"] == 108


def test_bandwidth_efficiency_is_pinned_where_the_rows_stop_deciding_it():
    """Every fitted row reads its bandwidth at min(efficiency, spec / calibrated): past the
    largest such cap the rows cannot tell one efficiency from another, so the fit keeps
    that cap, and a GPU whose calibrated copy sits further below its figure (MI300X) is
    not sped up by wherever the optimiser happened to stop."""
    from dataclasses import replace

    from gpuplan.forecast.inference_fit import fit_params, load_overheads, predict_cases

    cases, _, _ = prepare(load_rows())
    caps = np.concatenate([cases.prefill.bandwidth_cap[:, 0], cases.decode.bandwidth_cap[:, 0]])
    top = float(caps.max())
    shipped = load_overheads().params
    assert shipped.bandwidth_efficiency == pytest.approx(top)
    assert fit_params(cases).bandwidth_efficiency == pytest.approx(top)
    # flat above the cap: the rows' forecasts do not move
    above = predict_cases(cases, replace(shipped, bandwidth_efficiency=1.4))[:, 0]
    np.testing.assert_allclose(above, predict_cases(cases, shipped)[:, 0], rtol=1e-12)
    # ...and below it they do: the cap is where the rows stop deciding, not a free choice
    below = predict_cases(cases, replace(shipped, bandwidth_efficiency=0.9 * top))[:, 0]
    assert np.max(np.abs(below / predict_cases(cases, shipped)[:, 0] - 1)) > 0.05


def test_bad_data_file(tmp_path):
    from gpuplan.errors import InputError

    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="lacks the columns"):
        validate_inference(bad)
    with pytest.raises(InputError, match="no such file"):
        validate_inference(tmp_path / "missing.csv")


def test_unresolvable_rows_count_against_coverage(tmp_path):
    all_rows = load_rows()
    rows = [all_rows[i] for i in (0, 4, 12, 16)]  # GPT-J, Mistral, Llama-2 7B and 70B
    rows[0] = {**rows[0], "model": "no-such-model-xyz"}
    p = tmp_path / "few.csv"
    with p.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    r = validate_inference(p)
    assert r["overall"]["rows"] == 4 and r["overall"]["forecast"] == 3
    assert r["overall"]["coverage"] == pytest.approx(0.75)
    assert r["skipped"][0]["run_id"] == rows[0]["run_id"]


def test_cli_json(run_cli):
    p = run_cli("validate", "inference", "--format", "json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["overall"]["coverage"] == 1.0 and r["scheme"] == "leave-one-model-out"
