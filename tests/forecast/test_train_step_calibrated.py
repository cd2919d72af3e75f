"""``forecast train`` with an artifact holding training-step probe points.

The measured block times in these artifacts are stand-ins for a GPU run of
``gpuplan probe --workload train`` (there is no GPU here): that is the only thing made
up, at the GPU edge. The factor is checked against an independent forecast of the same
block through the public API (two-layer minus one-layer model), and the calibrated forecast
against the uncalibrated one times that factor; nothing expected is hard-coded.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.calibration import load_artifact
from gpuplan.forecast.train import forecast_training
from gpuplan.forecast.training import Framework

GPU = "h100-sxm5-80gb"
REPO = Path(__file__).resolve().parents[2]
MODEL = "llama3.1-8b"
LAYOUT = dict(tp=2, pp=1, cp=1, ep=1, dp=4, vp=1, micro_batch=1, recompute="none", zero=1)
BLOCK = {
    "hidden": 4096,
    "heads": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "ffn_hidden": 14336,
    "gated_mlp": True,
}


def _point(p50: float, *, tp: int = 1, seq_len: int = 2048, micro_batch: int = 1) -> dict:
    return {
        "run_id": f"stand-in-{p50}",
        "model": MODEL,
        "block": dict(BLOCK),
        "scale": 1,
        "tp": tp,
        "seq_len": seq_len,
        "micro_batch": micro_batch,
        "blocks": 2,
        "attention_backend": "flash",
        "precision": "bf16",
        "compute_s": {"p10": 0.9 * p50, "p50": p50, "p90": 1.2 * p50},
        "optimizer_s": {"p10": 1e-4, "p50": 2e-4, "p90": 3e-4},
    }


def _artifact(**frameworks: list[dict]) -> dict:
    art = copy.deepcopy(load_artifact(None))
    art["training"] = {
        GPU: {
            name.replace("_", "-"): {"basis": "measured", "inputs": [], "points": pts}
            for name, pts in frameworks.items()
        }
    }
    return art


def _block_forecast(artifact: dict, point: dict) -> float:
    """Forward + backward (+ TP) seconds of one block: 2-layer minus 1-layer forecast."""
    tp, mb = point["tp"], point["micro_batch"]
    times = []
    for layers in (1, 2):
        model = {
            "name": "block",
            "layers": layers,
            "vocab": 32768,
            "attention": "gqa",
            **{k: v for k, v in BLOCK.items()},
        }
        out = forecast_training(
            model,
            gpu=GPU,
            num_gpus=tp,
            seq_len=point["seq_len"],
            global_batch=mb,
            parallelism=dict(
                tp=tp, pp=1, cp=1, ep=1, dp=1, vp=1, micro_batch=mb, recompute="none", zero=0
            ),
            artifact={k: v for k, v in artifact.items() if k != "training"},
            framework=Framework(sequence_parallel=False, dp_overlap=False),
        )
        times.append(out["breakdown_s"]["compute"] + out["breakdown_s"]["tp_comm"])
    return times[1] - times[0]


def _forecast(artifact: dict | None) -> dict:
    return forecast_training(
        MODEL, gpu=GPU, num_gpus=8, seq_len=2048, global_batch=64, parallelism=LAYOUT,
        artifact=artifact,
    )  # fmt: skip


@pytest.fixture(scope="module")
def raw() -> dict:
    return _forecast(copy.deepcopy(load_artifact(None)))


def test_factor_is_measured_over_the_forecast_of_the_same_block():
    points = [_point(0.05), _point(0.08, tp=2, seq_len=1024, micro_batch=2)]
    art = _artifact(megatron=points)
    cal = _forecast(art)["calibration"]["training_step"]
    ratios = [p["compute_s"]["p50"] / _block_forecast(art, p) for p in points]
    assert cal["applied"] and cal["device"] == GPU and cal["framework"] == "megatron"
    assert cal["factor"] == pytest.approx((ratios[0] * ratios[1]) ** 0.5, rel=1e-9)
    assert cal["low"] == pytest.approx(0.9 * min(ratios), rel=1e-9)
    assert cal["high"] == pytest.approx(1.2 * max(ratios), rel=1e-9)
    for p, got in zip(points, cal["points"], strict=True):
        assert got["forecast_compute_per_block_s"] == pytest.approx(
            _block_forecast(art, p), rel=1e-9
        )
    assert cal["basis"].startswith("measured")


def test_forecast_moves_by_the_factor(raw):
    art = _artifact(megatron=[_point(0.05)])
    out = _forecast(art)
    cal = out["calibration"]["training_step"]
    f, lo, hi = cal["factor"], cal["low"], cal["high"]
    assert out["parallelism"] == raw["parallelism"]
    b, r = out["breakdown_s"], raw["breakdown_s"]
    assert b["compute"] == pytest.approx(r["compute"] * f, rel=1e-9)
    assert b["tp_comm"] == pytest.approx(r["tp_comm"] * f, rel=1e-9)
    assert b["optimizer"] == pytest.approx(r["optimizer"], rel=1e-12)
    iv, riv = out["intervals"]["breakdown_s"], raw["intervals"]["breakdown_s"]
    assert iv["compute"][0] == pytest.approx(riv["compute"][0] * lo, rel=1e-9)
    assert iv["compute"][1] == pytest.approx(riv["compute"][1] * hi, rel=1e-9)
    assert (out["step_time_s"] > raw["step_time_s"]) == (f > 1.0)
    lo_iv, hi_iv = out["step_time_interval_s"]
    assert lo_iv <= out["step_time_s"] <= hi_iv


def test_without_a_section_nothing_changes(raw):
    for art in (None, copy.deepcopy(load_artifact(None))):
        out = _forecast(art)
        assert "calibration" not in out
        assert out["step_time_s"] == raw["step_time_s"]
        assert out["breakdown_s"] == raw["breakdown_s"]
        assert out["intervals"] == raw["intervals"]


def test_framework_of_its_own_before_the_generic_blocks():
    own, generic = _point(0.05), _point(0.2)
    cal = _forecast(_artifact(megatron=[own], pytorch_eager=[generic]))["calibration"]
    assert cal["training_step"]["matched"] == "megatron"
    only_generic = _forecast(_artifact(pytorch_eager=[generic]))["calibration"]["training_step"]
    assert only_generic["matched"] == "pytorch-eager" and "generic" in only_generic["basis"]
    assert only_generic["factor"] == pytest.approx(4.0 * cal["training_step"]["factor"], rel=1e-9)


def test_another_framework_is_not_applied(raw):
    out = _forecast(_artifact(torchtitan=[_point(0.05)]))
    step = out["calibration"]["training_step"]
    assert step["applied"] is False and "torchtitan" in step["reason"]
    assert out["step_time_s"] == raw["step_time_s"]


def test_a_bad_section_is_one_line_exit_2(tmp_path):
    art = _artifact(megatron=[_point(0.05)])
    art["training"][GPU]["megatron"]["points"][0]["seq_len"] = 0
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(art))
    proc = subprocess.run(
        [sys.executable, "-m", "gpuplan", "forecast", "train", "--model", MODEL, "--gpu", GPU,
         "--gpus", "8", "--calibration", str(path)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.returncode == 2
    assert "training.h100-sxm5-80gb.megatron.points[0].seq_len" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_the_table_says_it_is_calibrated(tmp_path):
    art = _artifact(megatron=[_point(0.05)])
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(art))
    proc = subprocess.run(
        [sys.executable, "-m", "gpuplan", "forecast", "train", "--model", MODEL, "--gpu", GPU,
         "--gpus", "8", "--calibration", str(path)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    factor = _forecast(art)["calibration"]["training_step"]["factor"]
    assert "training-step calibration" in proc.stdout and f"compute x {factor:.4g}" in proc.stdout
