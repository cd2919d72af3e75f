"""Serve-probe results -> ``gpuplan calibrate`` -> the inference forecast's serving factors.

The server is the CPU stand-in of ``tests/probes/serve_server.py`` (a tiny random-weight
torch transformer, not a GPU engine): its latencies say nothing about an H100. The run is
mapped to a catalog GPU with ``--device-id h100`` and to a catalog model with
``--catalog-model`` so that the factor path -- per (device, engine), measured over forecast
-- is exercised for real; the factor values themselves are those of a CPU.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gpuplan.calibration.serving import serving_points, validate_serving
from gpuplan.errors import SchemaError
from gpuplan.forecast.inference import forecast_inference
from gpuplan.paths import results_dir
from gpuplan.results.schema import ResultDocument
from tests.probes.serve_server import running_server

MODEL = "llama3.1-8b"
GPU = "h100-sxm5-80gb"


@pytest.fixture(scope="module")
def server() -> str:
    with running_server() as url:
        yield url


@pytest.fixture
def calibrated(server, run_cli, tmp_path):
    """One serve run (--engine vllm on --device-id h100), calibrated into an artifact."""
    proc = run_cli(
        "probe",
        "--workload",
        "serve",
        "--endpoint",
        server,
        "--model",
        "tiny",
        "--catalog-model",
        MODEL,
        "--device-id",
        "h100",
        "--engine",
        "vllm",
        "--concurrency",
        "1,4",
        "--input-tokens",
        "32",
        "--output-tokens",
        "16",
        "--requests-per-level",
        "8",
        "--no-progress",
    )
    assert proc.returncode == 0, proc.stderr
    [path] = sorted(results_dir().rglob("*.json"))
    artifact_path = tmp_path / "cal.json"
    cal = run_cli("calibrate", str(results_dir()), "--out", str(artifact_path))
    assert cal.returncode == 0, cal.stderr
    return ResultDocument.model_validate(json.loads(path.read_text())), artifact_path


def test_calibrate_writes_the_serving_section(calibrated):
    doc, artifact_path = calibrated
    artifact = json.loads(artifact_path.read_text())
    entry = artifact["serving"][GPU]["vllm@0.6.0"]  # the alias resolved to its profile
    assert entry["basis"] == "measured" and entry["inputs"] == [doc.run_id]
    levels = doc.probe("serve")[0].measurements
    assert [p["concurrency"] for p in entry["points"]] == [1, 4]
    for point, level in zip(entry["points"], levels, strict=True):
        tpots = [r["tpot_s"] for r in level["requests"]]
        assert point["tpot_s"]["p50"] == pytest.approx(np.percentile(tpots, 50), rel=1e-9)
        assert point["ttft_s"]["p90"] == pytest.approx(
            np.percentile([r["ttft_s"] for r in level["requests"]], 90), rel=1e-9
        )
        assert (point["catalog_model"], point["tp"], point["precision"]) == (MODEL, 1, "bf16")
    # the hardware quantities are untouched: the serve run adds no device record
    assert "cpu:" not in " ".join(artifact["devices"])


def test_forecast_applies_the_factors_on_that_device_and_engine_only(calibrated):
    _, artifact_path = calibrated
    artifact = json.loads(artifact_path.read_text())
    points = artifact["serving"][GPU]["vllm@0.6.0"]["points"]
    # the factor by hand: geometric mean of measured p50 / the simulated p50 of the probe's
    # own closed loop (its concurrency and completed requests) at each level
    ratios = []
    for p in points:
        raw_p = forecast_inference(
            MODEL,
            GPU,
            tp=1,
            input_tokens=32,
            output_tokens=16,
            concurrency=p["concurrency"],
            closed_loop_requests=p["completed"],
            engine="vllm",
            artifact=str(artifact_path),
            serving_calibration=False,
        )
        ratios.append(p["tpot_s"]["p50"] / raw_p["closed_loop"]["tpot_p50_s"])
    factor = math.exp(np.mean(np.log(ratios)))

    kw = dict(tp=1, input_tokens=512, output_tokens=128, batch=2, artifact=str(artifact_path))
    raw = forecast_inference(MODEL, GPU, engine="vllm", serving_calibration=False, **kw)
    out = forecast_inference(MODEL, GPU, engine="vllm", **kw)
    sc = out["serving_calibration"]
    assert sc["applied"] is True and out["basis"] == "measured"
    assert sc["tpot_factor"]["value"] == pytest.approx(factor, rel=1e-9)
    assert out["tpot_s"] == pytest.approx(raw["tpot_s"] * factor, rel=1e-9)
    assert out["throughput_output_tokens_per_s"] == pytest.approx(
        raw["throughput_output_tokens_per_s"] / factor, rel=1e-9
    )
    lo, hi = out["intervals"]["tpot_s"]
    assert lo <= out["tpot_s"] <= hi
    assert sc["tpot_factor"]["low"] <= factor <= sc["tpot_factor"]["high"]
    # another engine, another GPU: no factor, the forecast is the raw one
    other_engine = forecast_inference(MODEL, GPU, engine="sglang", **kw)
    assert "serving_calibration" not in other_engine
    other_gpu = forecast_inference(MODEL, "h200", engine="vllm", **kw)
    assert "serving_calibration" not in other_gpu
    assert other_engine["basis"] == raw["basis"] != "measured"


def test_forecast_cli_reports_the_factor(calibrated, run_cli):
    _, artifact_path = calibrated
    proc = run_cli(
        "forecast",
        "infer",
        "--model",
        MODEL,
        "--gpu",
        "h100",
        "--batch",
        "2",
        "--engine",
        "vllm",
        "--calibration",
        str(artifact_path),
        "--format",
        "json",
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["basis"] == "measured"
    assert data["serving_calibration"]["engine"] == "vllm@0.6.0"
    raw = data["serving_calibration"]["raw"]["tpot_s"]
    assert data["tpot_s"] == pytest.approx(
        raw * data["serving_calibration"]["tpot_factor"]["value"]
    )


def test_interrupted_levels_and_runs_without_a_catalog_model():
    """A level flagged ``interrupted`` is left out; a run with no catalog model is kept but
    the forecast says why it cannot use it."""
    base = {
        "schema_version": 1,
        "run_id": "r1",
        "started_at": "2026-01-01T00:00:00Z",
        "gpuplan_version": "0",
        "host": {"machine_id": "m", "cpu_model": "cpu"},
    }
    req = {"ok": True, "output_tokens": 4, "ttft_s": 0.01, "e2e_s": 0.04, "tpot_s": 0.01}
    level = {
        "concurrency": 1,
        "num_requests": 1,
        "completed": 1,
        "input_tokens": 8,
        "output_tokens": 4,
        "duration_s": 0.04,
        "request_throughput_per_s": 25.0,
        "output_throughput_tokens_per_s": 100.0,
        "total_output_tokens": 4,
        "requests": [req],
    }
    doc = ResultDocument.model_validate(
        {
            **base,
            "probes": [
                {
                    "probe": "serve",
                    "probe_version": 1,
                    "status": "interrupted",
                    "error": "interrupted by SIGINT (Ctrl-C)",
                    "params": {"device": "cpu", "device_id": GPU, "engine": "vllm@0.6.0"},
                    "measurements": [level, {**level, "concurrency": 2, "interrupted": True}],
                }
            ],
        }
    )
    section = serving_points([doc])
    points = section[GPU]["vllm@0.6.0"]["points"]
    assert [p["concurrency"] for p in points] == [1]
    assert points[0]["catalog_model"] is None
    artifact = {"serving": section}
    out = forecast_inference(MODEL, GPU, engine="vllm", batch=1, artifact=_with_hw(artifact))
    assert out["serving_calibration"]["applied"] is False
    assert "--catalog-model" in out["serving_calibration"]["reason"]
    bad = {GPU: {"vllm@0.6.0": {"points": [{**points[0], "concurrency": 0}]}}}
    with pytest.raises(SchemaError, match=r"points\[0\]\.concurrency"):
        validate_serving(bad)


def _with_hw(extra: dict) -> dict:
    from gpuplan.calibration import load_artifact

    return {**load_artifact(None), **extra}
