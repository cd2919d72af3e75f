"""Without --precision the forecasts run bf16, or fp16 on a GPU without bf16 tensor cores
(V100, T4), as vLLM's ``--dtype auto`` does there; an explicit --precision is kept."""

from __future__ import annotations

import json


def test_infer_on_a_gpu_without_bf16_forecasts_fp16(run_cli):
    res = run_cli("forecast", "infer", "--model", "llama3.1-8b", "--gpu", "t4", "--format", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["precision"] == "fp16"
    assert "no bf16 tensor cores; forecasting fp16" in res.stderr


def test_infer_default_stays_bf16_where_the_gpu_has_it(run_cli):
    res = run_cli(
        "forecast", "infer", "--model", "llama3.1-8b", "--gpu", "h100,v100", "--qps", "2",
        "--input-tokens", "512", "--output-tokens", "128", "--ttft-slo-s", "2",
        "--tpot-slo-s", "0.1", "--format", "json",
    )  # fmt: skip
    # one GPU of the list lacks bf16: the comparison runs fp16 on all (same rates on H100)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["precision"] == "fp16"
    res = run_cli(
        "forecast", "infer", "--model", "llama3.1-8b", "--gpu", "h100", "--format", "json"
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["precision"] == "bf16"
    assert "forecasting fp16" not in res.stderr


def test_an_explicit_bf16_on_v100_is_refused_with_the_fix(run_cli):
    res = run_cli(
        "forecast", "infer", "--model", "llama3.1-8b", "--gpu", "v100", "--precision", "bf16"
    )
    assert res.returncode == 2
    assert "fp16" in res.stderr and "Traceback" not in res.stderr


def test_train_on_v100_forecasts_fp16(run_cli):
    res = run_cli(
        "forecast", "train", "--model", "llama3.1-8b", "--gpu", "v100-sxm2-32gb",
        "--gpus", "64", "--tokens", "1e10", "--format", "json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["precision"] == "fp16", out.get("precision")
