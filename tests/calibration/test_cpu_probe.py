"""A real quick CPU probe (torch on this machine, gloo collectives) calibrates the CPU."""

from __future__ import annotations

import json

import pytest

from gpuplan.calibration import device_perf
from gpuplan.calibration.fit import calibrate_documents
from gpuplan.results.store import load_results


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    import os
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path_factory.mktemp("cpu-probe")
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuplan",
            "probe",
            "--quick",
            "--device",
            "cpu",
            "--only",
            "matmul,membw,collectives",
            "--out",
            str(out),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    json.loads(proc.stdout)
    docs = [doc for _, doc in load_results([out])]
    assert len(docs) == 1
    return docs[0]


@pytest.mark.slow
def test_quick_cpu_probe_calibrates_the_cpu_as_measured(cpu_run, catalog):
    artifact = calibrate_documents([cpu_run], catalog=catalog, cross_validation=False)
    cpu_ids = [d for d in artifact["devices"] if d.startswith("cpu:")]
    assert len(cpu_ids) == 1
    summary = artifact["devices"][cpu_ids[0]]
    for q in (
        "matmul_fp32_flops_per_s",
        "matmul_bf16_flops_per_s",
        "memory_bandwidth_bytes_per_s",
        "allreduce_busbw_bytes_per_s",
    ):
        assert summary[q]["basis"] == "measured", q
        assert 0 < summary[q]["low"] <= summary[q]["value"] <= summary[q]["high"], q
    # no peak is known for a CPU: the achieved value is what the probe reached, not a spec
    measured_best = max(
        m["flops_per_s"]
        for p in cpu_run.probes
        if p.probe == "matmul" and p.params["dtype"] == "float32"
        for m in p.measurements
    )
    assert summary["matmul_fp32_flops_per_s"]["value"] == pytest.approx(measured_best, rel=1.0)
    perf = device_perf(cpu_ids[0], artifact, catalog=catalog)
    assert perf.peak_flops_per_s("fp32") is None
    t = perf.collective_time_s("all_reduce", 2**20, 2)
    assert t.basis == "measured" and t.value > 0
    # the GPU catalog devices are still there, calibrated from the reference set
    assert artifact["devices"]["h100-sxm5-80gb"]["matmul_bf16_flops_per_s"]["basis"] == "measured"
