"""INT8 weight-only serving (``--precision w8a16``) and the other spellings of the serving
precisions that published runs and checkpoint cards use (awq, w8a8, nvfp4, fp8_dynamic...):
each is read as the precision it is, and a name none of them is still refused with the fix."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from gpuplan.catalogs.catalog import get_catalog
from gpuplan.errors import InputError
from gpuplan.forecast.inference import forecast_inference
from gpuplan.forecast.inference_arch import (
    KV_PRECISION_SPELLINGS,
    KV_PRECISIONS,
    PRECISION_SPELLINGS,
    PRECISIONS,
    canonical_precision,
    resolve_precision,
)
from gpuplan.plan.scenario import InferenceService


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        ("AWQ", "int4"),
        ("gptq", "int4"),
        ("W4A16", "int4"),
        ("int4_awq", "int4"),
        ("w8a8", "int8"),
        ("int8_sq", "int8"),
        ("int8_wo", "w8a16"),
        ("W8A16", "w8a16"),
        ("NVFP4", "fp4"),
        ("fp8_dynamic", "fp8"),
        ("FP8", "fp8"),
        ("bfloat16", "bf16"),
        ("float16", "fp16"),
        ("mxfp4", "mxfp4"),
        ("GPTQ-Int4", "int4"),
        ("GPTQ-Int8", "w8a16"),
        ("MXFP8", "fp8"),
        ("FP4 (NVFP4)", "fp4"),
        ("FP8 (e4m3)", "fp8"),
    ],
)
def test_a_spelling_is_read_as_its_precision(spelling: str, name: str) -> None:
    assert canonical_precision(spelling) == name
    assert name in PRECISIONS


def test_every_spelling_names_a_precision_the_forecast_has() -> None:
    assert set(PRECISION_SPELLINGS.values()) <= set(PRECISIONS)
    assert set(KV_PRECISION_SPELLINGS.values()) <= set(KV_PRECISIONS)


def test_w8a16_reads_one_byte_a_weight_and_keeps_16_bit_math_and_kv() -> None:
    h100 = get_catalog().gpu("h100")
    w8, bf, fp8 = (resolve_precision(p, h100) for p in ("w8a16", "bf16", "fp8"))
    assert w8.weight_bytes == fp8.weight_bytes == bf.weight_bytes / 2
    assert w8.kv_bytes == bf.kv_bytes
    assert w8.gemm_dtype == "bf16" and w8.requires == ("bf16",)
    # fp8 KV on request, as vLLM's --kv-cache-dtype fp8_e4m3 writes it
    assert resolve_precision("w8a16", h100, "fp8_e4m3").kv_bytes == 1.0


def test_w8a16_decode_sits_between_int4_and_bf16() -> None:
    """One request's decode streams the weights: 1 byte a weight is faster than 2 and slower
    than 0.52; the prefill (compute-bound, 16-bit GEMMs either way) is no faster than bf16."""
    out = {
        p: forecast_inference(
            "llama3.1-8b", "h100", precision=p, batch=1, input_tokens=4096, output_tokens=64
        )
        for p in ("int4", "w8a16", "bf16")
    }
    assert out["int4"]["tpot_s"] < out["w8a16"]["tpot_s"] < out["bf16"]["tpot_s"]
    assert out["w8a16"]["ttft_s"] >= 0.9 * out["bf16"]["ttft_s"]
    weights = {p: o["memory_breakdown_bytes"]["weights"] for p, o in out.items()}
    assert 0.5 < weights["w8a16"] / weights["bf16"] < 0.6  # embeddings and LM head stay 16-bit


def test_the_forecast_reports_the_precision_it_ran() -> None:
    awq = forecast_inference("llama3.1-8b", "h100", precision="AWQ", batch=1)
    int4 = forecast_inference("llama3.1-8b", "h100", precision="int4", batch=1)
    assert awq["precision"] == "int4"
    assert awq["tpot_s"] == int4["tpot_s"]


def test_w8a16_runs_in_fp16_where_the_gpu_has_no_bf16() -> None:
    w8 = forecast_inference("llama3.1-8b", "t4", tp=2, precision="w8a16", batch=1)
    assert "fp16 GEMMs" in w8["precision_detail"]


def test_an_unknown_precision_is_refused_naming_the_choices_and_spellings() -> None:
    with pytest.raises(InputError, match="unknown precision 'w3a16'") as e:
        resolve_precision("w3a16", get_catalog().gpu("h100"))
    line = e.value.one_line()
    assert "w8a16" in line and "awq" in line


def test_the_cli_reads_a_spelling_and_says_the_precision_it_forecast(run_cli) -> None:
    res = run_cli(
        "forecast", "infer", "--model", "llama3.1-8b", "--gpu", "h100", "--precision", "AWQ",
        "--format", "json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["precision"] == "int4"
    # a checkpoint whose name says AWQ matches --precision awq: no mismatch warning
    res = run_cli(
        "forecast", "infer", "--model", "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4",
        "--gpu", "h100", "--precision", "awq", "--format", "json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "says" not in res.stderr
    # RedHat AI's INT8 weight-only checkpoint: its name is read, and so is what it states
    res = run_cli(
        "forecast", "infer", "--model", "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a16",
        "--gpu", "h100", "--format", "json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["model"]["id"] == "llama3.1-8b"
    assert "says w8a16 weights" in res.stderr and "--precision w8a16" in res.stderr


def test_a_serving_workload_takes_the_spellings_too() -> None:
    base = {"name": "chat", "model": "llama3.1-8b", "qps": 1.0}
    base |= {"input_tokens": 512, "output_tokens": 128}
    assert InferenceService(**base, precision="AWQ").precision == "int4"
    assert InferenceService(**base, precision="w8a16").precision == "w8a16"
    with pytest.raises(ValidationError):
        InferenceService(**base, precision="w3a16")
