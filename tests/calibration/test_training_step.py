"""Training-step probe results -> ``gpuplan calibrate`` -> the artifact's ``training`` section.

The probe runs for real on the CPU (shrunk blocks of a catalog model, nothing mocked);
``--device-id h100`` maps the run to a catalog GPU so that the section is keyed as a GPU
run would be. The times are a CPU's: what is checked is that the section carries the
run's shapes and the percentiles of its own timed iterations, and that a malformed
section is refused with one line naming the field.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuplan.calibration.training_step import (
    framework_key,
    training_points,
    validate_training,
)
from gpuplan.errors import SchemaError
from gpuplan.results.schema import ResultDocument

GPU = "h100-sxm5-80gb"
REPO = Path(__file__).resolve().parents[2]


def _gpuplan(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "gpuplan", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=env,
    )


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """One real CPU probe run (mapped to an H100), calibrated with the reference set."""
    root = tmp_path_factory.mktemp("train-cal")
    proc = _gpuplan(
        "probe",
        "--workload",
        "train",
        "--model",
        "llama3.1-8b",
        "--framework",
        "TorchTitan",
        "--device-id",
        "h100",
        "--seq-len",
        "64",
        "--quick",
        "--no-progress",
        "--out",
        str(root / "results"),
    )
    assert proc.returncode == 0, proc.stderr
    [path] = sorted((root / "results").rglob("*.json"))
    out = root / "cal.json"
    cal = _gpuplan("calibrate", str(root / "results"), "--out", str(out))
    assert cal.returncode == 0, cal.stderr
    return ResultDocument.model_validate(json.loads(path.read_text())), out


def test_calibrate_writes_the_training_section(calibrated):
    doc, path = calibrated
    artifact = json.loads(path.read_text())
    entry = artifact["training"][GPU]["torchtitan"]  # label folded to lower case
    assert entry["basis"] == "measured" and entry["inputs"] == [doc.run_id]
    [probe] = doc.probe("train")
    [m] = probe.measurements
    [point] = entry["points"]
    assert point["block"] == probe.params["block"] and point["scale"] == probe.params["scale"]
    assert (point["seq_len"], point["micro_batch"], point["tp"]) == (64, 1, 1)
    per_block = (
        np.asarray(m["forward"]["samples_s"]) + np.asarray(m["backward"]["samples_s"])
    ) / m["blocks"]
    for q in (10, 50, 90):
        assert point["compute_s"][f"p{q}"] == pytest.approx(np.percentile(per_block, q), rel=1e-9)
    opt = np.asarray(m["optimizer"]["samples_s"]) / m["blocks"]
    assert point["optimizer_s"]["p50"] == pytest.approx(np.median(opt), rel=1e-9)
    assert point["attention_backend"] == m["attention_backend"]
    validate_training(artifact["training"])
    # the probe's runs do not enter the device model fit (they have a section of their own)
    assert doc.run_id in artifact["inputs"]


def test_training_points_keys_a_cpu_run_by_its_cpu(calibrated):
    doc, _ = calibrated
    bare = copy.deepcopy(doc)
    bare.probes[0].params.pop("device_id")
    bare.probes[0].params.pop("framework")
    section = training_points([bare])
    [device] = section
    assert device.startswith("cpu:") and list(section[device]) == ["pytorch-eager"]


def test_failed_runs_are_left_out(calibrated):
    doc, _ = calibrated
    failed = copy.deepcopy(doc)
    failed.probes[0].status = "failed"
    failed.probes[0].error = "out of memory"
    assert training_points([failed]) == {}


def _section() -> dict:
    point = {
        "tp": 1,
        "seq_len": 64,
        "micro_batch": 1,
        "scale": 1,
        "block": {"hidden": 64, "heads": 2, "kv_heads": 2, "head_dim": 32, "ffn_hidden": 128},
        "compute_s": {"p10": 1e-3, "p50": 2e-3, "p90": 3e-3},
        "optimizer_s": {"p10": 1e-4, "p50": 2e-4, "p90": 3e-4},
    }
    return {GPU: {"megatron": {"basis": "measured", "points": [point]}}}


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("seq_len",), 0, "points[0].seq_len must be a positive integer"),
        (("tp",), True, "points[0].tp must be a positive integer"),
        (("block", "heads"), -2, "points[0].block needs positive integers"),
        (("compute_s", "p50"), 0.0, "points[0].compute_s needs p10, p50 and p90"),
        (("optimizer_s",), None, "points[0].optimizer_s needs p10, p50 and p90"),
    ],
)
def test_validate_names_the_field(path, value, message):
    section = _section()
    validate_training(section)  # the good one passes
    node = section[GPU]["megatron"]["points"][0]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(SchemaError, match=message.replace("[", r"\[").replace("]", r"\]")):
        validate_training(section)


def test_validate_refuses_other_shapes():
    with pytest.raises(SchemaError, match="'training' must be a JSON object"):
        validate_training([])
    with pytest.raises(SchemaError, match="needs a 'points' list"):
        validate_training({GPU: {"megatron": {"points": {}}}})


def test_framework_labels_fold():
    assert framework_key("Megatron-Core") == framework_key("megatron") == "megatron"
    assert framework_key(None) == framework_key("pytorch") == "pytorch-eager"
    assert framework_key(" TorchTitan ") == "torchtitan"
