"""Serving-engine profiles (trtllm / vllm / sglang at a version): resolution, what a
profile changes, and the held-out score on the engines' own published rows."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.inference import ServingDemand, forecast_inference, size_serving_fleet
from gpuplan.forecast.inference_fit import load_overheads
from gpuplan.forecast.inference_step import (
    ENGINES,
    MIN_ROWS_CALIBRATED,
    TRANSFER_INTERVAL_WIDEN,
    engine_profile,
)
from gpuplan.forecast.serving import LengthDist, simulate_requests
from gpuplan.forecast.validation_inference import ENGINE_CSV_PATH, validate_engines


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("vllm", "vllm@0.6.0"),
        ("VLLM@0.5.4", "vllm@0.5.4"),
        ("sglang", "sglang@0.3.0"),
        ("trtllm", "trtllm@1.0"),
        ("trtllm-0.9", "trtllm@0.9"),
        ("modern", "modern"),
    ],
)
def test_names_resolve_to_a_versioned_profile(name, canonical) -> None:
    assert engine_profile(name).name == canonical


def test_unknown_version_names_the_known_ones() -> None:
    with pytest.raises(InputError, match=r"unknown engine 'vllm@9\.9'") as exc:
        engine_profile("vllm@9.9")
    assert "vllm@0.5.4" in (exc.value.hint or "")
    with pytest.raises(InputError, match="unknown engine 'tgi'"):
        engine_profile("tgi")


def test_only_the_fitted_engine_is_calibrated() -> None:
    assert engine_profile("trtllm@0.9").calibrated
    for name, prof in ENGINES.items():
        if name != "trtllm@0.9":
            assert not prof.calibrated
            assert prof.basis == "transferred from trtllm@0.9"


def test_transferred_profile_has_the_wider_interval() -> None:
    fitted = load_overheads()
    lo9, hi9 = fitted.interval_quantiles("throughput_per_gpu", "trtllm@0.9")
    lo, hi = fitted.interval_quantiles("throughput_per_gpu", "vllm@0.5.4")
    assert (lo, hi) == pytest.approx((lo9 * TRANSFER_INTERVAL_WIDEN, hi9 * TRANSFER_INTERVAL_WIDEN))
    a = forecast_inference("llama3.1-8b", "h100", batch=32, engine="trtllm@0.9")
    b = forecast_inference("llama3.1-8b", "h100", batch=32, engine="vllm@0.5.4")
    wa = np.log(np.divide(*a["intervals"]["throughput_output_tokens_per_s"][::-1]))
    wb = np.log(np.divide(*b["intervals"]["throughput_output_tokens_per_s"][::-1]))
    assert wb > wa
    assert b["engine_profile"]["calibrated"] is False
    assert b["engine_profile"]["constants"] == "transferred from trtllm@0.9"


def test_scheduler_cap_bounds_the_planned_batch() -> None:
    """vLLM runs at most max_num_seqs (256) requests: the sizing never plans more."""
    r = size_serving_fleet(
        ServingDemand(
            model="llama3.1-8b",
            gpus=("h200",),
            qps=40,
            inputs=LengthDist(128),
            outputs=LengthDist(128),
            tpot_slo_s=1.0,
            engine="vllm@0.5.4",
        )
    )
    assert r.result["batch"] <= 256
    assert all(c.get("max_batch", 0) <= 256 for c in r.result["candidates"])


def test_burst_of_requests_all_arrive_at_zero() -> None:
    """simulate_requests with every arrival at 0: the slowest request bounds the run."""
    from gpuplan.catalogs import get_catalog
    from gpuplan.forecast.inference import build_candidates, device_perf_for, resolve_model

    cat = get_catalog()
    arch, _ = resolve_model("llama3.1-8b", cat)
    lin, lout = np.array([100, 100, 100]), np.array([10, 10, 200])
    cands, _ = build_candidates(
        arch=arch,
        gpus=[cat.gpu("h100")],
        precision="bf16",
        kv_precision=None,
        tp=1,
        pp=1,
        ep=1,
        inputs=LengthDist.from_trace(lin),
        outputs=LengthDist.from_trace(lout),
        batch=8,
        fitted=load_overheads(),
        get_perf=device_perf_for,
        catalog=cat,
        chunk_tokens=8192,
        utilization=0.9,
    )
    sim = simulate_requests(cands[0].replica, np.zeros(3), lin, lout, max_queue=4)
    assert sim.output_tokens == 220 and not sim.saturated
    # the 200-token answer decodes alone for its last 190 steps: longer than 190 x one step
    one_step = float(cands[0].replica.cost.time(1.0, 1.0, 200.0, 0.0, 0.0))
    assert sim.duration_s > 190 * one_step


def test_engine_rows_carry_their_sources_and_exact_traces() -> None:
    with ENGINE_CSV_PATH.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows
    for r in rows:
        assert r["source"].startswith("https://") and r["source_locator"] and r["retrieved"]
        ins = [int(x) for x in r["trace_input_lens"].split()]
        outs = [int(x) for x in r["trace_output_lens"].split()]
        assert len(ins) == len(outs) == int(r["num_requests"])
        assert sum(ins) == int(r["total_input_tokens"])
        assert sum(outs) == int(r["total_output_tokens"])
        assert float(r["out_tokens_per_s_total"]) == pytest.approx(
            sum(outs) / float(r["duration_s"]), rel=1e-6
        )


@pytest.fixture(scope="module")
def engines():
    return validate_engines()


def test_every_engine_row_is_forecast_and_scored_per_profile(engines) -> None:
    assert engines["skipped"] == []
    prof = engines["profiles"]["vllm@0.5.4"]
    assert prof["coverage"] == 1.0
    # held out by construction (nothing fitted on these rows): the transfer is this close
    assert prof["median_abs_pct_error"] <= 12.0
    assert prof["interval_coverage"] >= 0.8
    assert len(prof["models"]) >= 3


def test_fewer_than_ten_rows_is_not_claimed_calibrated(engines) -> None:
    for prof in engines["profiles"].values():
        if prof["rows"] < MIN_ROWS_CALIBRATED:
            assert prof["calibrated"] is False
            assert "not claimed calibrated" in prof["note"]
