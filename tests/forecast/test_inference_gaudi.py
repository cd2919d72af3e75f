"""Intel's Gaudi 2 and Gaudi 3 throughput tables (Intel Gaudi software 1.18, fp8, one batch
size per row), scored with the default constants, fitted on nothing: how far the device
model and the GPU-fitted engine constants carry to Gaudi.

Measured when the table was added (2026-12-07, all 40 rows forecast): output tokens/s median
|error| 11.1%, p90 31.9%, bias +7.2%, 92.5% of the published figures inside the interval
(Gaudi 2: 7.5% median, Gaudi 3: 12.5%). The largest misses are forecasts above the
published figure at large batches of 70B on two cards (Gaudi 2 TP 4 128/2,048: +81%;
Gaudi 3 Llama 3.1 70B TP 2 128/128 at batch 3,516: +64%) and the 2,048-in / 128-out rows
of the 7B models (+29..+31%); 70B on eight Gaudi 3 is below (-10..-23%), where the
forecast's all-reduces are 46% of a decode step. The guards below
hold the table to those figures, so a change that moves the Gaudi forecast shows here.
"""

from __future__ import annotations

import pytest

from gpuplan.forecast.validation_inference import (
    NimValidation,
    load_gaudi_rows,
    simulate_gaudi_row,
    validate_gaudi,
)


@pytest.fixture(scope="module")
def gaudi() -> NimValidation:
    return validate_gaudi()


def test_every_row_is_forecast_on_its_own_card(gaudi) -> None:
    rows = load_gaudi_rows()
    assert len(rows) == 40 and len(gaudi["rows"]) == 40 and not gaudi["skipped"]
    assert {r["gpu"] for r in gaudi["rows"]} == {"gaudi2", "gaudi3"}
    assert gaudi["fitted_on"].startswith("nothing")
    assert all(r["source"].startswith("Intel, Model Performance Data") for r in rows)
    assert all(r["engine"] == "modern" for r in rows)


def test_the_default_constants_carry_to_gaudi_within_these_errors(gaudi) -> None:
    thr = gaudi["by_metric"]["throughput"]
    assert 8.0 < thr["median_abs_pct_error"] < 14.0
    assert 25.0 < thr["p90_abs_pct_error"] < 40.0
    assert 0.0 < thr["bias_pct"] < 12.0
    assert thr["interval_coverage"] >= 0.85
    by_card = gaudi["by_gpu_engine"]
    assert by_card["gaudi2 modern"]["throughput"]["median_abs_pct_error"] < 10.0
    assert by_card["gaudi3 modern"]["throughput"]["median_abs_pct_error"] < 15.0


def test_the_order_of_the_published_rows_is_kept(gaudi) -> None:
    """Within one card and model, a longer answer at its batch gives more tokens/s than a
    longer prompt, in the table and in the forecast."""
    by_id = {r["run_id"]: r["metrics"]["throughput"] for r in gaudi["rows"]}
    for card in ("intel2", "intel3"):
        for model in ("llama2-7b", "mistral-7b"):
            long_out = next(
                v for k, v in by_id.items() if k.startswith(f"{card}_{model}_tp1_128_2048")
            )
            long_in = next(
                v for k, v in by_id.items() if k.startswith(f"{card}_{model}_tp1_2048_128")
            )
            for key in ("published_s", "forecast_s"):
                assert long_out[key] > 3.0 * long_in[key], (card, model, key)


def test_gaudi3_is_faster_than_gaudi2_on_the_same_row() -> None:
    """Same model, lengths and card count, Gaudi 3 at its own batch: more tokens/s, as
    published (Llama 2 7B 128/128: 19,810 against 13,137)."""
    rows = {r["run_id"]: r for r in load_gaudi_rows()}
    g3 = simulate_gaudi_row(rows["intel3_llama2-7b_tp1_128_128_b1536"])["throughput"]
    g2 = simulate_gaudi_row(rows["intel2_llama2-7b_tp1_128_128_b1230"])["throughput"]
    assert g3[0] > 1.2 * g2[0]
    assert g3[1] <= g3[0] <= g3[2]


def test_a_row_without_its_batch_is_refused() -> None:
    from gpuplan.errors import InputError

    row = dict(load_gaudi_rows()[0], max_concurrency="")
    with pytest.raises(InputError, match="batch size"):
        simulate_gaudi_row(row)
