"""InferenceX's MTP runs scored with speculative decoding: at the default acceptance (from
other sources; fitted on nothing), and the acceptance length each run implies."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.forecast.inference_fit import load_overheads
from gpuplan.forecast.speculative import default_acceptance_length
from gpuplan.forecast.validation_inference import (
    SPEC_CSV_PATH,
    _replay_throughput,
    implied_acceptance,
    load_spec_rows,
    simulate_sweep_row,
    validate_speculative,
)


def test_the_mtp_table_names_its_draft_tokens_and_sources():
    rows = load_spec_rows()
    assert len(rows) >= 50
    assert {int(r["spec_draft_tokens"]) for r in rows} == {1, 2, 3}
    for r in rows:
        assert r["run_id"].endswith("_mtp")
        assert "InferenceX" in r["source"] and "actions/runs" in r["source_locator"]
        assert "MTP with" in r["notes"]
        k = int(r["spec_draft_tokens"])
        # the launch scripts: SGLang 2 steps on NVIDIA, 3 on AMD; TensorRT-LLM 1 with DP
        if r["engine"] == "sglang@0.5":
            assert k == (3 if r["gpu_type"].startswith("Instinct") else 2)
        if r["engine"] == "trtllm@1.2":
            assert k == (1 if r["dp_attention"] == "1" else 3)


def test_every_mtp_row_agrees_with_its_own_latencies():
    """A closed loop of C slots emits about C answers per answer's latency."""
    for r in load_spec_rows():
        conc, osl = float(r["max_concurrency"]), float(r["output_len"])
        answer = osl * 0.9
        per = float(r["ttft_median_ms"]) / 1e3 + (answer - 1) * float(r["tpot_median_ms"]) / 1e3
        ratio = float(r["out_tokens_per_s_total"]) / (conc * answer / per)
        assert 0.5 <= ratio <= 2.0, r["run_id"]


def _row(prefix: str) -> dict[str, str]:
    return next(r for r in load_spec_rows() if r["run_id"].startswith(prefix))


def test_a_row_with_draft_tokens_replays_with_speculation():
    row = _row("ix_h200_trt_fp8_tp8_ep8_1024-8192_c16")
    plain = dict(row, spec_draft_tokens="")
    kw = {"scenarios": (0,)}
    fast = simulate_sweep_row(row, acceptance=3.0, **kw)["throughput"][0]
    none = simulate_sweep_row(plain, **kw)["throughput"][0]
    assert fast > 1.5 * none  # c16 decode is memory-bound: 3 tokens a step pay off


def test_implied_acceptance_recovers_the_acceptance_that_made_the_throughput():
    row = _row("ix_h200_sglang_fp8_tp8_ep1_1024-1024_c16")
    kw = {"fitted": load_overheads(), "catalog": get_catalog(), "perf_for": None}
    k = int(row["spec_draft_tokens"])
    tau0 = default_acceptance_length(k)[0]
    thr0 = _replay_throughput(row, tau0, kw)
    for truth in (1.4, 2.8):
        made = dict(row, out_tokens_per_s_total=str(_replay_throughput(row, truth, kw)))
        tau, bound = implied_acceptance(made, tau0, thr0, kw)
        assert bound is None
        assert tau == pytest.approx(truth, rel=0.03)
    slow = dict(row, out_tokens_per_s_total=str(0.2 * thr0))
    assert implied_acceptance(slow, tau0, thr0, kw) == (None, "below 1")
    quick = dict(row, out_tokens_per_s_total=str(5.0 * thr0))
    assert implied_acceptance(quick, tau0, thr0, kw) == (None, f"above {k + 1}")


def test_validate_speculative_on_a_few_rows(tmp_path: Path):
    """Two GPUs of one profile and draft length: each is scored at the acceptance the other
    implies; a row published exactly at the default acceptance implies it."""
    rows = [
        _row("ix_h200_sglang_fp8_tp8_ep1_1024-1024_c16"),
        _row("ix_b200_sglang_fp4_tp8_ep1_1024-1024_c16"),
    ]
    kw = {"fitted": load_overheads(), "catalog": get_catalog(), "perf_for": None}
    tau0 = default_acceptance_length(2)[0]
    rows[0] = dict(rows[0], out_tokens_per_s_total=str(_replay_throughput(rows[0], tau0, kw)))
    path = tmp_path / "spec.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    r = validate_speculative(path)
    assert r["fitted_on"].startswith("nothing")
    assert len(r["rows"]) == 2 and not r["skipped"]
    first = r["rows"][0]
    assert first["implied_acceptance"] == pytest.approx(tau0, rel=0.01)
    assert abs(first["metrics"]["throughput"]["error_pct"]) < 0.5
    summary = r["implied_acceptance"]["sglang@0.5 k=2"]
    assert summary["rows"] == 2 and set(summary["by_gpu_median"]) == {
        "h200-sxm-141gb",
        "b200-sxm-180gb",
    }
    logo = r["held_out_gpu_at_implied_acceptance"]
    assert logo["sglang@0.5 k=2"]["rows"] == 2
    assert "random tokens" in r["note"]


def test_shipped_table_path():
    assert SPEC_CSV_PATH.name == "inference_spec_runs.csv" and SPEC_CSV_PATH.exists()
