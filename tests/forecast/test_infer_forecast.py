"""``forecast_inference`` and ``gpuplan forecast infer`` on the real catalog and calibration."""

from __future__ import annotations

import json

import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.inference import forecast_inference

CONTRACT = (
    "ttft_s",
    "tpot_s",
    "throughput_output_tokens_per_s",
    "throughput_output_tokens_per_s_per_gpu",
    "batch",
    "max_batch",
    "kv_cache_bytes_per_token",
    "memory_per_gpu_bytes",
    "fits_in_memory",
    "bottleneck",
    "intervals",
)


@pytest.fixture(scope="module")
def single():
    return forecast_inference(
        "llama3.3-70b", gpu="h100", precision="fp8", input_tokens=2048, output_tokens=256, batch=16
    )


def test_single_forecast_has_the_contract_fields(single):
    r = single
    for key in CONTRACT:
        assert key in r, key
    # 72 GB of fp8 weights (bf16 embeddings) fit one 80 GB H100 but leave KV room for one
    # request only; batch 16 needs the next TP
    assert r["tp"] == 2
    assert r["kv_cache_bytes_per_token"] == 2 * 80 * 8 * 128 * 1
    assert r["bottleneck"] in ("compute", "memory", "communication")
    assert r["throughput_output_tokens_per_s_per_gpu"] == pytest.approx(
        r["throughput_output_tokens_per_s"] / r["tp"]
    )
    for key in (
        "ttft_s",
        "tpot_s",
        "throughput_output_tokens_per_s",
        "throughput_output_tokens_per_s_per_gpu",
    ):
        lo, hi = r["intervals"][key]
        assert lo < r[key] < hi, key
    assert r["memory_breakdown_bytes"]["total"] == pytest.approx(r["memory_per_gpu_bytes"])
    assert r["fits_in_memory"] is True
    assert r["max_batch"] >= 16


def test_more_gpus_per_replica_lowers_latency(single):
    tp4 = forecast_inference("llama3.3-70b", gpu="h100", precision="fp8", tp=4, batch=16)
    assert tp4["tpot_s"] < single["tpot_s"]
    assert tp4["ttft_s"] < single["ttft_s"]
    assert tp4["breakdown_s"]["decode_step"]["communication"] > 0


def test_max_throughput_beats_batch_one():
    one = forecast_inference("llama3.1-8b", gpu="h100", input_tokens=1024, output_tokens=256)
    best = forecast_inference(
        "llama3.1-8b", gpu="h100", input_tokens=1024, output_tokens=256, max_throughput=True
    )
    assert one["batch"] == 1
    assert 1 < best["batch"] <= best["max_batch"]
    assert best["throughput_output_tokens_per_s"] > 5 * one["throughput_output_tokens_per_s"]
    assert best["fits_in_memory"]


def test_static_batching_mode():
    r = forecast_inference(
        "llama2-7b",
        gpu="h100",
        precision="fp8",
        batch=64,
        input_tokens=2048,
        output_tokens=128,
        batching="static",
    )
    s = r["static_batch"]
    assert (
        r["ttft_s"] == s["ttft_s"]
        and r["throughput_output_tokens_per_s"] == s["throughput_output_tokens_per_s"]
    )


def test_fp8_on_a100_is_refused():
    with pytest.raises(InputError, match="no FP8"):
        forecast_inference("llama3.1-8b", gpu="a100-sxm4-80gb", precision="fp8")


def test_model_that_does_not_fit_names_the_smallest_tp():
    with pytest.raises(InputError) as exc:
        forecast_inference("llama3.1-405b", gpu="h100", tp=2, precision="bf16")
    msg = exc.value.one_line()
    assert "does not fit" in msg and "even at batch 1" in msg
    assert "weights" in msg and "KV" in msg
    assert "smallest TP that fits is" in msg


def test_impossible_slo_is_reported_at_once():
    with pytest.raises(InputError, match="impossible SLO") as exc:
        forecast_inference("llama3.3-70b", gpu="h100", qps=5, ttft_slo_s=0.001, tpot_slo_s=0.05)
    assert "single-request" in exc.value.one_line()


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(InputError, match="--output-tokens"):
        forecast_inference("llama3.1-8b", gpu="h100", output_tokens=0)
    with pytest.raises(InputError, match="need a load"):
        forecast_inference("llama3.1-8b", gpu="h100", ttft_slo_s=1)
    with pytest.raises(InputError, match="several GPUs"):
        forecast_inference("llama3.1-8b", gpu="h100,h200")
    with pytest.raises(InputError, match="context"):
        forecast_inference("llama2-7b", gpu="h100", input_tokens=4000, output_tokens=500)


def test_sizing_is_deterministic_and_meets_its_slos():
    kw = dict(
        gpu="h100",
        precision="fp8",
        qps=8,
        input_tokens=1024,
        output_tokens=128,
        ttft_slo_s=1.0,
        tpot_slo_s=0.05,
        num_requests=800,
    )
    a = forecast_inference("llama3.1-8b", **kw)
    b = forecast_inference("llama3.1-8b", **kw)
    assert a["replicas"] == b["replicas"] and a["tp"] == b["tp"]
    assert a["num_gpus"] == a["replicas"] * a["tp"] * a["pp"]
    assert a["ttft_s"] <= 1.0 and a["tpot_s"] <= 0.05
    assert a["load"]["qps_per_replica"] == pytest.approx(8 / a["replicas"])
    verified = [c for c in a["candidates"] if c.get("verified_by_simulation")]
    assert min(c["num_gpus"] for c in verified) == a["num_gpus"]


def test_sizing_compares_gpu_types():
    r = forecast_inference(
        "llama3.1-8b",
        gpu="h100,a100-sxm4-80gb",
        precision="bf16",
        qps=4,
        input_tokens=512,
        output_tokens=128,
        ttft_slo_s=2,
        tpot_slo_s=0.1,
        num_requests=600,
    )
    gpus = {c["gpu"] for c in r["candidates"]}
    assert {"h100-sxm5-80gb", "a100-sxm4-80gb"} <= gpus
    assert r["gpu"] in gpus


def test_cli_done_when_example(run_cli):
    p = run_cli(
        "forecast",
        "infer",
        "--model",
        "llama3.3-70b",
        "--gpu",
        "h100",
        "--qps",
        "20",
        "--input-tokens",
        "2048",
        "--output-tokens",
        "256",
        "--ttft-slo-s",
        "1",
        "--tpot-slo-s",
        "0.05",
        "--format",
        "json",
    )
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)  # stdout is exactly one JSON document
    assert r["replicas"] >= 1 and r["tp"] in (1, 2, 4, 8)
    assert r["num_gpus"] == r["replicas"] * r["tp"] * r["pp"]
    assert r["ttft_s"] <= 1.0 and r["tpot_s"] <= 0.05
    for key in CONTRACT:
        assert key in r


def test_cli_errors_are_one_line_exit_2(run_cli):
    p = run_cli(
        "forecast",
        "infer",
        "--model",
        "llama3.1-8b",
        "--gpu",
        "a100-sxm4-80gb",
        "--precision",
        "fp8",
    )
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert "--precision" in p.stderr
    p = run_cli("forecast", "infer", "--help")
    assert p.returncode == 0 and "Examples:" in p.stdout


def test_table_rates_below_one_token_per_second_are_not_zero():
    """A 64-card L4 replica of a 671B model makes a fraction of a token/s per GPU: the table
    shows its digits (it printed 0 and [0 .. 0]), whole tokens/s from 100 up."""
    import doctest

    from gpuplan.cli import forecast_infer

    assert forecast_infer._tokens_per_s(0.2688) == "0.269"
    assert forecast_infer._tokens_per_s(12_345.4) == "12,345"
    failures, tried = doctest.testmod(forecast_infer, verbose=False)
    assert tried > 0 and failures == 0


def test_a_model_released_in_fp8_warns_at_bf16(run_cli):
    """DeepSeek-R1 is released as block-scaled fp8 (catalog ``released_precision``): at the
    bf16 default the CLI says so and names the flag; at fp8 it says nothing."""
    base = ("forecast", "infer", "--model", "deepseek-r1", "--gpu", "h200", "--format", "json")
    p = run_cli(*base)
    assert p.returncode == 0, p.stderr
    assert "released with fp8 weights" in p.stderr and "--precision fp8" in p.stderr
    assert json.loads(p.stdout)["gpus_per_replica"] == 16  # bf16 weights need two nodes
    p = run_cli(*base, "--precision", "fp8")
    assert p.returncode == 0, p.stderr
    assert "released with" not in p.stderr
    assert json.loads(p.stdout)["gpus_per_replica"] == 8
    p = run_cli("forecast", "infer", "--model", "llama3.1-8b", "--gpu", "h100", "--format", "json")
    assert p.returncode == 0 and "released with" not in p.stderr


def test_gpt_oss_released_in_mxfp4_runs_as_4_bit_weights_on_hopper(run_cli):
    """gpt-oss ships its experts in MXFP4 (config.json quantization_config): at the bf16
    default the CLI says so and names the flag; at mxfp4 on Hopper (no FP4 tensor cores) its
    4-bit weights run in 16-bit GEMMs, as int4 (W4A16) does with its own scales, it says
    nothing, and the 120B model serves on one 80 GB H100."""
    base = ("forecast", "infer", "--model", "gpt-oss-120b", "--gpu", "h100", "--format", "json")
    p = run_cli(*base)
    assert p.returncode == 0, p.stderr
    assert "released with mxfp4 weights" in p.stderr and "--precision mxfp4" in p.stderr
    assert json.loads(p.stdout)["gpus_per_replica"] > 1
    got = {}
    for prec in ("mxfp4", "int4"):
        p = run_cli(*base, "--precision", prec)
        assert p.returncode == 0, p.stderr
        assert "released with" not in p.stderr
        got[prec] = json.loads(p.stdout)
        assert got[prec]["gpus_per_replica"] == 1
    mx, i4 = got["mxfp4"], got["int4"]
    assert (
        "bf16 GEMMs" in mx["precision_detail"] and "no FP4 tensor cores" in mx["precision_detail"]
    )
    # the same 16-bit math and KV cache; MXFP4's scale is 8 bits per 32 weights, AWQ's 16 per 128
    assert mx["kv_cache_bytes_per_token"] == i4["kv_cache_bytes_per_token"]
    w_mx, w_i4 = mx["memory_breakdown_bytes"]["weights"], i4["memory_breakdown_bytes"]["weights"]
    assert 1.0 < w_mx / w_i4 < (0.5 + 1 / 32) / (0.5 + 2 / 128)  # the 16-bit layers: less
    assert mx["tpot_s"] == pytest.approx(i4["tpot_s"], rel=0.02)


def test_equal_cost_layouts_prefer_the_one_with_more_capacity(run_cli):
    """Llama 3.1 8B at 5 req/s on PCIe L40S: one TP 2 replica and two TP 1 replicas both take
    two cards. The two replicas serve more at the SLOs (no all-reduce over PCIe, two queues),
    so they win the tie; before, the larger batch cap (TP 2) did, at twice the p99 TPOT. The
    fleet is sized without a latency target, and the CLI says so with the latencies it got."""
    p = run_cli(
        "forecast", "infer", "--model", "llama3.1-8b", "--gpu", "l40s", "--qps", "5",
        "--requests", "600", "--format", "json",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    two = [c for c in r["candidates"] if c["num_gpus"] == 2 and c["verified_by_simulation"]]
    assert {c["tp"] for c in two} == {1, 2}, two  # the tie this test is about
    assert two[0]["usd_per_hour"] == pytest.approx(two[1]["usd_per_hour"])
    cap = {c["tp"]: c["replicas"] * c["max_qps_per_replica"] for c in two}
    assert cap[1] > cap[2]
    assert (r["tp"], r["replicas"], r["num_gpus"]) == (1, 2, 2)
    assert "sized for throughput alone" in p.stderr and "--tpot-slo-s" in p.stderr
    assert "TPOT p99 is" in p.stderr
    p = run_cli(
        "forecast", "infer", "--model", "llama3.1-8b", "--gpu", "l40s", "--qps", "5",
        "--requests", "600", "--tpot-slo-s", "0.1", "--format", "json",
    )  # fmt: skip
    assert p.returncode == 0 and "sized for throughput alone" not in p.stderr
