"""``gpuplan validate inference`` reports TTFT and TPOT as metrics of their own."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpuplan.forecast.validation_inference import (
    ENGINE_LATENCY_METRICS,
    forecast_engine_row,
    forecast_engine_row_all,
    load_engine_rows,
    validate_engines,
)


def test_json_has_throughput_ttft_and_tpot_apart(run_cli) -> None:
    proc = run_cli("validate", "inference", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    by_metric = doc["by_metric"]
    assert {"throughput_per_gpu", "ttft", "ttft_mean_burst", "tpot_median_burst"} <= set(by_metric)
    assert {"ttft_median_online", "tpot_median_online"} <= set(by_metric)
    assert set(doc["metrics"]) == set(by_metric)
    engine_rows = load_engine_rows()
    for col, _, name, kind in ENGINE_LATENCY_METRICS:
        published = [
            r
            for r in engine_rows
            if float(r[col] or 0) > 0 and (r["request_rate"] == "inf") == (kind == "burst")
        ]
        assert by_metric[name]["rows"] == len(published) >= 4
        assert by_metric[name]["forecast"] == by_metric[name]["rows"]
    # the per-profile table: throughput, TTFT and TPOT apart, for every engine with rows
    profiles = doc["profiles"]
    assert {"trtllm@0.9", "vllm@0.5.4", "vllm@0.6.0", "sglang@0.3.0"} <= set(profiles)
    for name, p in profiles.items():
        assert p["throughput"]["rows"] == p["rows"]
        if name != "trtllm@0.9":
            assert p["ttft"]["forecast"] >= 1 and p["tpot"]["forecast"] >= 1
    # the overall score stays the published-table one (throughput + batch-1 TTFT rows)
    assert (
        doc["overall"]["rows"]
        == by_metric["throughput_per_gpu"]["rows"] + by_metric["ttft"]["rows"]
    )


def test_latency_errors_are_forecast_against_the_published_column() -> None:
    res = validate_engines()
    for name in ("ttft_mean_burst", "tpot_median_burst", "ttft_median_online"):
        errs = [r[name]["error_pct"] for r in res["rows"] if name in r]
        assert errs
        for r in res["rows"]:
            if name not in r:
                continue
            m = r[name]
            assert m["error_pct"] == pytest.approx(
                (m["forecast_s"] - m["published_s"]) / m["published_s"] * 100
            )
            lo, hi = m["interval_s"]
            assert lo <= m["forecast_s"] <= hi
        s = res["by_metric"][name]
        assert s["median_abs_pct_error"] == pytest.approx(np.median(np.abs(errs)))
    # TPOT of an 8B model on one H100 is milliseconds, not seconds or microseconds
    row = next(r for r in res["rows"] if r["model"] == "llama3-8b" and "H100" in r["gpu"])
    assert 1e-3 < row["tpot_median_burst"]["forecast_s"] < 0.1


def test_throughput_is_unchanged_by_the_shared_simulation() -> None:
    row = load_engine_rows()[0]
    assert forecast_engine_row(row) == forecast_engine_row_all(row)["throughput"]


def test_table_lists_the_latency_metrics(run_cli) -> None:
    proc = run_cli("validate", "inference")
    assert proc.returncode == 0, proc.stderr
    assert "tpot_median_burst" in proc.stdout and "ttft_mean_burst" in proc.stdout
    assert "Per engine profile" in proc.stdout
    assert "vllm@0.5.4" in proc.stdout and "sglang@0.3.0" in proc.stdout
    assert "Traceback" not in proc.stderr
