"""Reading the trial node's probe results (synthetic H100 run, see trialdata.py)."""

from __future__ import annotations

import pytest

from gpuplan.plan.trial import find_trial_run, gemm_intensity, summarise_run
from gpuplan.results.store import save_result

from .trialdata import (
    FIO_READ_BYTES_PER_S,
    FIO_WRITE_BYTES_PER_S,
    GPU_POWER_W,
    MEMBW_BYTES_PER_S,
    trial_document,
)


def test_summary_takes_the_best_of_each_probe(tmp_path):
    path = save_result(trial_document(), tmp_path)
    t = summarise_run(path, trial_document())
    assert t.catalog_id == "h100-sxm5-80gb" and t.device == "cuda:0"
    assert t.matmul_flops_per_s["bf16"].value == 7.0e14
    assert "8192x8192x8192" in t.matmul_flops_per_s["bf16"].prov.ref
    assert t.memory_bandwidth_bytes_per_s.value == MEMBW_BYTES_PER_S
    assert t.gpu_power_w.value == GPU_POWER_W
    assert t.storage_read_bytes_per_s.value == FIO_READ_BYTES_PER_S  # sequential, not randread
    assert t.storage_write_bytes_per_s.value == FIO_WRITE_BYTES_PER_S
    assert t.probes["pcie"] == "failed"
    assert len(t.matmul_points) == 4
    assert all(p["flops_per_s"].prov.kind == "measurement" for p in t.matmul_points)


def test_gemm_intensity():
    # 2 x 8192^3 / (2 B x 3 x 8192^2) = 8192 / 3
    assert gemm_intensity(8192, 8192, 8192, 2) == pytest.approx(8192 / 3)


def test_latest_run_wins_and_reference_runs_are_skipped(tmp_path):
    old = trial_document("2026-01-01T00:00:00Z", run_id="aaaaaaaa-0000-0000-0000-000000000000")
    new = trial_document("2026-06-01T00:00:00Z", run_id="bbbbbbbb-0000-0000-0000-000000000000")
    save_result(old, tmp_path)
    save_result(new, tmp_path)
    ref = trial_document("2027-01-01T00:00:00Z", run_id="cccccccc-0000-0000-0000-000000000000")
    ref.source = "published table (reference)"
    save_result(ref, tmp_path)
    assert find_trial_run([tmp_path]).run_id.startswith("bbbbbbbb")
    assert find_trial_run([tmp_path], run="aaaa").run_id.startswith("aaaaaaaa")
    assert find_trial_run([tmp_path / "missing"]) is None
    (tmp_path / "junk.json").write_text("{not json")
    assert find_trial_run([tmp_path]).run_id.startswith("bbbbbbbb")  # unreadable skipped
