"""A tensor-parallel group larger than the scale-up domain is forecast (its all-reduces
cross the scale-out network) and said, in the result's notes and on the CLI's stderr; on
Neuron chips the note says that Neuron configurations count NeuronCores, not chips."""

from __future__ import annotations

from gpuplan.forecast.train import forecast_training

KW = dict(seq_len=4096, global_batch=64, tokens=1.0e10)


def test_tp_beyond_the_nvlink_domain_is_said():
    r = forecast_training("llama3.1-8b", "h100", 32, parallelism={"tp": 16, "pp": 1}, **KW)
    notes = r.get("notes") or []
    assert any("tensor parallelism 16 spans 2 scale-up domains of 8" in n for n in notes), notes
    assert not any("NeuronCore" in n for n in notes)
    inside = forecast_training("llama3.1-8b", "h100", 32, parallelism={"tp": 8, "pp": 1}, **KW)
    assert not any("spans" in n for n in inside.get("notes") or [])
    # crossing the node costs: the step is slower than with TP inside it
    assert r["step_time_s"] > inside["step_time_s"]


def test_neuron_tp_in_neuroncores_gets_the_fix():
    r = forecast_training("llama3.1-8b", "trn1", 64, parallelism={"tp": 32, "pp": 1}, **KW)
    notes = r.get("notes") or []
    assert any("count NeuronCores" in n and "--tp and --gpus in chips" in n for n in notes)


def test_cli_prints_the_notes(run_cli):
    res = run_cli(
        "forecast", "train", "--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "32",
        "--tp", "16", "--pp", "1", "--seq-len", "4096", "--global-batch", "64",
        "--tokens", "1e10", "--format", "json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "spans 2 scale-up domains" in res.stderr
