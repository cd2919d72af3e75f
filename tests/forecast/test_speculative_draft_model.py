"""Speculative decoding with a separate draft model (vLLM's ``draft_model`` method,
TensorRT-LLM's draft-target): each of the ``k`` draft passes is a decode pass of the draft
model on the replica's GPUs, the draft model also runs over every prompt, and its weights and
KV cache take memory from the target's."""

from __future__ import annotations

import json

import pytest

from gpuplan.errors import InputError, NotFoundError
from gpuplan.forecast.inference import forecast_inference
from gpuplan.forecast.speculative import speculation
from tests.forecast._spec_plan import plan_and_forecast_agree

TARGET = "llama3.1-70b"
KW = dict(gpu="h100", tp=4, input_tokens=4096, output_tokens=256)


def _r(spec, **extra):
    return forecast_inference(TARGET, speculation=spec, **{**KW, **extra})


def test_a_draft_pass_is_the_draft_models_own_decode_pass():
    spec = speculation(4, 2.5, draft_model="llama3.2-1b")
    r = _r(spec, batch=1)
    alone = forecast_inference("llama3.2-1b", batch=1, **KW)
    # at batch 1 the draft model's TPOT is one decode pass of it at the target's TP
    assert r["speculative"]["draft_pass_s"] == pytest.approx(alone["tpot_s"], rel=0.02)
    assert r["speculative"]["draft_tp"] == 4
    # a step is the verification pass and four draft passes
    sp = r["speculative"]
    assert sp["step_s"] == pytest.approx(sp["verify_pass_s"] + 4 * sp["draft_pass_s"], rel=0.05)


def test_a_bigger_draft_costs_more_and_a_useless_one_is_slower_than_none():
    plain = _r(None, batch=1)
    small = _r(speculation(4, 2.5, draft_model="llama3.2-1b"), batch=1)
    big = _r(speculation(4, 2.5, draft_model="llama3.1-8b"), batch=1)
    head = _r(speculation(4, 2.5), batch=1)
    assert head["tpot_s"] < small["tpot_s"] < big["tpot_s"] < plain["tpot_s"]
    never = _r(speculation(4, 1.0, draft_model="llama3.2-1b"), batch=1)
    assert never["tpot_s"] > plain["tpot_s"]
    # the draft model's pass over the prompt lengthens TTFT; the 8B's by about 8/70 of it
    extra = big["ttft_s"] - head["ttft_s"]
    assert 0.05 * plain["ttft_s"] < extra < 0.3 * plain["ttft_s"]
    assert small["ttft_s"] - head["ttft_s"] < extra / 3


def test_the_draft_models_weights_and_kv_cache_take_memory():
    plain = _r(None, batch=8)
    spec = _r(speculation(4, 2.5, draft_model="llama3.1-8b"), batch=8)
    sp = spec["speculative"]
    extra = spec["memory_breakdown_bytes"]["weights"] - plain["memory_breakdown_bytes"]["weights"]
    # Llama 3.1 8B at bf16 over 4 GPUs: ~8.0e9 parameters x 2 bytes / 4
    assert extra == pytest.approx(sp["draft_weights_bytes_per_gpu"])
    assert extra == pytest.approx(8.03e9 * 2 / 4, rel=0.02)
    # 32 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes over 4 GPUs
    assert sp["draft_kv_cache_bytes_per_token_per_gpu"] == pytest.approx(32 * 8 * 128 * 2 * 2 / 4)
    assert spec["max_batch"] < plain["max_batch"]


def test_steady_state_and_closed_loop_simulation_agree_with_a_draft_model():
    r = forecast_inference(
        "llama3.3-70b",
        gpu="h200",
        tp=8,
        input_tokens=1024,
        output_tokens=1024,
        concurrency=16,
        closed_loop_requests=160,
        speculation=speculation(4, 2.5, draft_model="llama3.2-1b"),
    )
    assert r["closed_loop"]["tpot_p50_s"] == pytest.approx(r["tpot_s"], rel=0.08)


@pytest.mark.parametrize(
    "args, error, words",
    [
        ((4, None, None, "llama3.2-1b"), InputError, "needs --spec-acceptance"),
        ((4, 2.0, 1.0, "llama3.2-1b"), InputError, "not both"),
        ((None, None, None, "llama3.2-1b"), InputError, "need draft tokens"),
        ((4, 2.0, None, "no-such-model"), NotFoundError, "no-such-model"),
    ],
)
def test_bad_draft_models_are_refused(args, error, words):
    with pytest.raises(error) as exc:
        speculation(*args)
    assert words in exc.value.one_line()


def test_a_draft_of_another_vocabulary_is_refused_in_one_line(run_cli):
    r = run_cli(
        "forecast", "infer", "--model", "llama3.3-70b", "--gpu", "h100", "--tp", "4",
        "--spec-tokens", "4", "--spec-acceptance", "2", "--spec-draft-model", "qwen3-0.6b",
    )  # fmt: skip
    assert r.returncode == 2
    assert "share the target's tokenizer" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_json_names_the_draft_model(run_cli):
    r = run_cli(
        "forecast", "infer", "--model", "llama3.3-70b", "--gpu", "h100", "--tp", "4",
        "--batch", "8", "--spec-tokens", "4", "--spec-acceptance", "2.4",
        "--spec-draft-model", "llama3.2-1b", "--format", "json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    sp = json.loads(r.stdout)["speculative"]
    assert sp["draft_model"] == "llama3.2-1b" and sp["draft_layers"] is None
    assert sp["acceptance_basis"] == "given"


def test_plan_scenario_with_a_draft_model_sizes_as_forecast_infer(run_cli, tmp_path):
    notes = plan_and_forecast_agree(
        run_cli,
        tmp_path,
        qps=10,
        tpot=0.03,
        speculative="{draft_tokens: 4, acceptance_length: 2.4, draft_model: llama3.2-1b}",
        flags=[
            "--spec-tokens",
            "4",
            "--spec-acceptance",
            "2.4",
            "--spec-draft-model",
            "llama3.2-1b",
        ],
    )
    assert any("4 draft tokens from llama3.2-1b" in n for n in notes)


def test_a_draft_that_does_not_fit_is_named_in_the_refusal():
    with pytest.raises(InputError) as exc:
        forecast_inference(
            "llama3.3-70b",
            gpu="l40s",
            precision="fp8",
            tp=2,
            batch=1,
            speculation=speculation(3, 2.0, draft_model="llama3.1-70b"),
        )
    line = exc.value.one_line()
    assert "with the draft model llama3.1-70b's" in line and "a smaller draft model" in line
