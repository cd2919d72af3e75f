"""Uniform request lengths (``--min-length-ratio r``): the random dataset of the serving
benchmarks (SGLang ``bench_serving``, vLLM ``benchmark_serving --random-range-ratio r``), so a
closed-loop forecast can be set up as the benchmark it is compared with was run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.inference import forecast_inference
from gpuplan.forecast.serving import LengthDist
from gpuplan.forecast.validation_inference import SWEEP_SEED, sweep_requests


def test_uniform_lengths_cover_the_range_evenly() -> None:
    d = LengthDist.from_options(1024, min_ratio=0.8)
    assert (d.kind, d.low, d.high, d.mean) == ("uniform", 819, 1024, 921.5)
    x = d.sample(np.random.default_rng(1), 20_000)
    assert x.min() == 819 and x.max() == 1024  # both ends drawn
    assert abs(x.mean() - 921.5) < 2.0
    # every whole length about equally often: 206 values, ~97 draws each
    counts = np.bincount(x - 819, minlength=206)
    assert counts.size == 206 and counts.min() > 50 and counts.max() < 150
    assert d.quantile(0.0) == 819 and d.quantile(1.0) == 1024
    assert d.quantile(0.25) < d.quantile(0.5) < d.quantile(0.99)


def test_a_ratio_of_one_is_the_fixed_length() -> None:
    d = LengthDist.from_options(500, min_ratio=1.0)
    assert (d.low, d.high) == (500, 500)
    assert set(d.sample(np.random.default_rng(0), 100).tolist()) == {500}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(min_ratio=0.0), r"in \(0, 1\]"),
        (dict(min_ratio=1.2), r"in \(0, 1\]"),
        (dict(min_ratio=float("nan")), r"in \(0, 1\]"),
        (dict(min_ratio=0.8, p99=4000.0), "lognormal lengths and --min-length-ratio"),
    ],
)
def test_bad_ranges_are_refused(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(InputError, match=match):
        LengthDist.from_options(1024, **kwargs)  # type: ignore[arg-type]


def test_the_sweep_rows_draw_their_lengths_from_the_same_distribution() -> None:
    """The validation's InferenceX rows (``sweep_requests``) and ``--min-length-ratio`` are
    one implementation: the same draws from the same generator."""
    lin, lout = sweep_requests(
        {
            "input_len": "1024",
            "output_len": "1024",
            "random_range_ratio": "0.8",
            "num_requests": "80",
        }
    )
    rng = np.random.default_rng(SWEEP_SEED)
    d = LengthDist.uniform(819, 1024)
    assert lin.tolist() == d.sample(rng, 80).tolist()
    assert lout.tolist() == d.sample(rng, 80).tolist()
    assert lin.min() >= 819 and lin.max() <= 1024


#: DeepSeek-R1 FP8 on 8 H200 under SGLang 0.5, 1k in / 1k out, 8 requests in flight: the
#: InferenceX configuration of its dsr1 SGLang rows (--random-range-ratio 0.8)
R1 = dict(
    model="deepseek-r1",
    gpu="h200",
    tp=8,
    precision="fp8",
    engine="sglang@0.5",
    concurrency=8,
    input_tokens=1024,
    output_tokens=1024,
)


def test_fixed_lengths_keep_a_closed_loop_in_waves_and_a_range_breaks_them() -> None:
    """With every answer the same length, the 8 requests finish on the same step and the
    client's next 8 prefill together: each waits for the whole wave's prefill. With lengths
    drawn from 0.8-1.0 of the nominal ones the finishes spread out, and a new request
    prefills beside the others' decode steps, as a lone request does."""
    fixed = forecast_inference(**R1)
    spread = forecast_inference(**R1, min_length_ratio=0.8)
    lone = fixed["ttft_s"]
    assert fixed["closed_loop"]["ttft_p50_s"] > 3.0 * lone
    assert spread["closed_loop"]["ttft_p50_s"] < 1.3 * spread["ttft_s"]
    # the same engine step costs: TPOT moves only with the shorter contexts
    assert spread["closed_loop"]["tpot_p50_s"] == pytest.approx(
        fixed["closed_loop"]["tpot_p50_s"], rel=0.05
    )
    assert spread["input_tokens"] == {"kind": "uniform", "mean": 921.5, "low": 819, "high": 1024}
    # the point forecast is of the mean request
    assert spread["ttft_s"] < lone


def test_a_fleet_sizes_for_uniform_lengths() -> None:
    fleet = forecast_inference(
        model="llama3.1-8b",
        gpu="h100",
        qps=4,
        input_tokens=2000,
        output_tokens=200,
        min_length_ratio=0.5,
        ttft_slo_s=1.0,
        tpot_slo_s=0.05,
        num_requests=300,
    )
    assert fleet["num_gpus"] >= 1
    assert json.dumps(fleet)  # the result is JSON


def test_the_cli_takes_the_ratio(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(
        "forecast", "infer", "--model", "llama3.1-8b", "--gpu", "h100", "--input-tokens",
        "1000", "--output-tokens", "100", "--min-length-ratio", "0.5", "--concurrency", "4",
        "--format", "json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["input_tokens"] == {"kind": "uniform", "mean": 750.0, "low": 500, "high": 1000}
    assert out["output_tokens"]["low"] == 50
    bad = run_cli(
        "forecast", "infer", "--model", "llama3.1-8b", "--gpu", "h100", "--min-length-ratio", "2"
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "--min-length-ratio" in bad.stderr


def test_the_table_says_which_lengths_it_simulated(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(
        "forecast", "infer", "--model", "llama3.1-8b", "--gpu", "h100", "--input-tokens",
        "1000", "--output-tokens", "100", "--min-length-ratio", "0.5",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "500-1000 uniform / 50-100 uniform" in res.stdout
    res = run_cli(
        "forecast", "infer", "--model", "llama3.1-8b", "--gpu", "h100", "--input-tokens",
        "1000", "--input-tokens-p99", "3000", "--output-tokens", "100",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "mean 1000, p99 3000 lognormal / 100" in res.stdout
