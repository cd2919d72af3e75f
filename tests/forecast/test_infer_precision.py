"""Low-precision serving: FP4 (NVFP4 / MXFP4), INT8, INT4 and an FP8 KV cache (issue 16)."""

from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.inference import forecast_inference


def _run(gpu: str, precision: str, **kw) -> dict:
    kw.setdefault("batch", 1)
    return forecast_inference("llama3.3-70b", gpu, tp=kw.pop("tp", 8), precision=precision, **kw)


@pytest.mark.parametrize("gpu", ["b200", "gb200", "mi355x"])
def test_fp4_runs_where_the_chip_has_fp4_and_reads_fewer_weight_bytes(gpu):
    fp4, fp8 = _run(gpu, "fp4"), _run(gpu, "fp8")
    w4 = fp4["memory_breakdown_bytes"]["weights"]
    w8 = fp8["memory_breakdown_bytes"]["weights"]
    # embeddings and LM head stay 16-bit; the layers go from 1 byte to 0.53-0.56 bytes
    assert 0.5 < w4 / w8 < 0.62
    assert fp4["tpot_s"] < fp8["tpot_s"]
    assert fp4["basis"] == "transferred"  # the calibration has no fp4 matmul model
    assert fp4["kv_cache_bytes_per_token"] == fp8["kv_cache_bytes_per_token"]  # FP8 KV


def test_fp4_is_nvfp4_on_nvidia_and_mxfp4_on_amd():
    assert "NVFP4" in _run("b200", "fp4")["precision_detail"]
    assert "MXFP4" in _run("mi355x", "fp4")["precision_detail"]


def test_int8_gemms_scale_the_fp8_curve_by_the_peak_ratio():
    # W8A8 on H100: the int8 dense peak equals the fp8 one in the catalog, so the prefill
    # runs at the FP8 rate, faster than bf16
    i8 = _run("h100", "int8", input_tokens=4096, output_tokens=2)
    bf = _run("h100", "bf16", input_tokens=4096, output_tokens=2)
    assert i8["ttft_s"] < bf["ttft_s"]


def test_int4_weight_only_halves_the_weights_again():
    i4, fp8 = _run("h100", "int4"), _run("h100", "fp8")
    assert i4["memory_breakdown_bytes"]["weights"] < 0.6 * fp8["memory_breakdown_bytes"]["weights"]


def test_fp8_kv_cache_halves_the_kv_bytes():
    bf = _run("h100", "bf16")
    kv8 = _run("h100", "bf16", kv_precision="fp8")
    assert kv8["kv_cache_bytes_per_token"] == pytest.approx(bf["kv_cache_bytes_per_token"] / 2)


@pytest.mark.parametrize("gpu", ["a100", "h100"])
def test_fp4_where_the_chip_has_none_is_refused_naming_what_works(gpu):
    with pytest.raises(InputError, match=r"no FP4.*--precision fp4 cannot run") as e:
        _run(gpu, "fp4")
    assert "bf16" in e.value.one_line()
    # a 4-bit checkpoint on a chip without FP4 math runs as W4A16: the hint names the flags
    last = e.value.one_line().rsplit(";", 1)[-1]
    assert "--precision mxfp4" in last and "int4" in last


@pytest.mark.parametrize("gpu", ["a100", "h100", "mi300x"])
def test_an_mxfp4_checkpoint_runs_its_weights_in_16_bit_gemms_without_fp4(gpu):
    """``mxfp4`` names a checkpoint format, and one runs where its math does not: the 4-bit
    weights in 16-bit GEMMs with a 16-bit KV cache (vLLM's gpt-oss path on Hopper, Ampere
    and CDNA3), where ``fp4``, the vendor's FP4 math, is refused (above)."""
    mx, bf = _run(gpu, "mxfp4"), _run(gpu, "bf16")
    assert "dequantised into bf16 GEMMs" in mx["precision_detail"]
    assert mx["kv_cache_bytes_per_token"] == bf["kv_cache_bytes_per_token"]
    w4 = mx["memory_breakdown_bytes"]["weights"]
    assert 0.25 < w4 / bf["memory_breakdown_bytes"]["weights"] < 0.3
    assert mx["tpot_s"] < bf["tpot_s"]  # batch 1 reads a quarter of the bytes


def test_mxfp4_keeps_its_fp4_math_where_the_chip_has_it():
    assert "weights and activations" in _run("b200", "mxfp4")["precision_detail"]
    assert "weights and activations" in _run("mi355x", "mxfp4")["precision_detail"]


def test_fp8_where_the_chip_has_none_names_no_4bit_fallback():
    with pytest.raises(InputError, match=r"no FP8") as e:
        _run("a100", "fp8")
    assert "4-bit checkpoint" not in e.value.one_line()


@pytest.mark.parametrize("gpu", ["t4", "v100-sxm2-32gb"])
def test_int4_without_bf16_runs_its_gemms_in_fp16(gpu):
    """V100 and T4 have no bf16 tensor cores; AWQ/GPTQ's W4A16 kernels dequantise into
    fp16 GEMMs there, so int4 runs (it was refused for want of bf16) at the fp16 rate."""
    # TP 2 for both: 16 GB of fp16 weights do not fit one T4
    i4 = forecast_inference("llama3.1-8b", gpu, tp=2, precision="int4", batch=1)
    f16 = forecast_inference("llama3.1-8b", gpu, tp=2, precision="fp16", batch=1)
    assert "fp16 GEMMs" in i4["precision_detail"]
    assert i4["kv_cache_bytes_per_token"] == f16["kv_cache_bytes_per_token"]  # fp16 KV
    w4, w16 = i4["memory_breakdown_bytes"]["weights"], f16["memory_breakdown_bytes"]["weights"]
    assert w4 < 0.6 * w16
    assert i4["tpot_s"] < f16["tpot_s"]  # a memory-bound decode reads fewer bytes
    with pytest.raises(InputError, match="no BF16"):
        forecast_inference("llama3.1-8b", gpu, precision="bf16", batch=1)


def test_int8_without_bf16_scales_the_fp16_curve():
    """T4 has INT8 tensor cores (130 TOPS) but neither FP8 nor BF16: W8A8 GEMMs scale its
    calibrated fp16 curve by the peak ratio (it was refused: no curve to scale), and the
    16-bit parts (attention, LM head) run in fp16."""
    i8 = forecast_inference("llama3.1-8b", "t4", tp=2, precision="int8", batch=1, input_tokens=4096)
    f16 = forecast_inference(
        "llama3.1-8b", "t4", tp=2, precision="fp16", batch=1, input_tokens=4096
    )
    assert "16-bit math in fp16" in i8["precision_detail"]
    assert i8["ttft_s"] < f16["ttft_s"]  # the compute-bound prefill at twice the peak
    assert i8["kv_cache_bytes_per_token"] == pytest.approx(f16["kv_cache_bytes_per_token"] / 2)
