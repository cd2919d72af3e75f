"""Fleet sizing (``forecast infer --qps``, ``plan``) applies the serve probe's measured
TTFT/TPOT factors of the GPU and engine, as the single-replica forecast does.

The artifact is the shipped default plus a ``serving`` section written the way
``gpuplan calibrate`` writes it (:mod:`gpuplan.calibration.serving`), with measured
latencies set to a known multiple of the raw forecast at the probed point, so the factors
are known exactly. (The real probe -> calibrate path is tested in
tests/probes/test_serve_calibration.py against a real local server.)
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuplan.calibration import load_artifact
from gpuplan.errors import InputError
from gpuplan.forecast.inference import (
    ServingDemand,
    forecast_inference,
    serving_factors,
    size_serving_fleet,
)
from gpuplan.forecast.serving import LengthDist

MODEL = "llama3.1-8b"
GPU = "h100-sxm5-80gb"
ENGINE = "vllm@0.6.0"


def calibrated_artifact(
    ttft_factor: float,
    tpot_factor: float,
    *,
    gpu: str = GPU,
    model: str = MODEL,
    engine: str = ENGINE,
    tp: int = 1,
) -> dict[str, Any]:
    """Default artifact + one serve point whose p50s are the raw forecast of the probe's
    experiment (its closed loop of 8 clients, 8 requests) x the factors."""
    art = copy.deepcopy(load_artifact(None))
    point = {"concurrency": 8, "input_tokens": 512, "output_tokens": 128}
    loop = forecast_inference(
        model,
        gpu,
        tp=tp,
        input_tokens=point["input_tokens"],
        output_tokens=point["output_tokens"],
        concurrency=point["concurrency"],
        closed_loop_requests=8,
        artifact=art,
        engine=engine,
        serving_calibration=False,
    )["closed_loop"]
    raw = {"ttft_s": loop["ttft_p50_s"], "tpot_s": loop["tpot_p50_s"]}

    def spread(v: float) -> dict[str, float]:
        return {"p10": 0.9 * v, "p50": v, "p90": 1.1 * v}

    art["serving"] = {
        gpu: {
            engine: {
                "basis": "measured",
                "inputs": ["run-a"],
                "points": [
                    {
                        "run_id": "run-a",
                        "catalog_model": model,
                        "served_model": "served",
                        "tp": tp,
                        "precision": "bf16",
                        **point,
                        "completed": 8,
                        "ttft_s": spread(raw["ttft_s"] * ttft_factor),
                        "tpot_s": spread(raw["tpot_s"] * tpot_factor),
                        "output_throughput_tokens_per_s": 1.0,
                    }
                ],
            }
        }
    }
    return art


def _demand(**kw: Any) -> ServingDemand:
    args: dict[str, Any] = dict(
        model=MODEL,
        gpus=(GPU,),
        qps=20,
        inputs=LengthDist(1024.0),
        outputs=LengthDist(256.0),
        ttft_slo_s=2.0,
        tpot_slo_s=0.05,
        engine="vllm",
    )
    args.update(kw)
    return ServingDemand(**args)


@pytest.fixture(scope="module")
def slow_server() -> dict[str, Any]:
    return calibrated_artifact(2.0, 3.0)


def test_factors_are_the_measured_over_forecast_ratios(slow_server) -> None:
    f = serving_factors(slow_server, GPU, "vllm")
    assert f is not None and f["applied"]
    assert f["ttft_factor"]["value"] == pytest.approx(2.0, rel=1e-9)
    assert f["tpot_factor"]["value"] == pytest.approx(3.0, rel=1e-9)


def test_a_slower_measured_server_needs_at_least_as_many_gpus(slow_server) -> None:
    raw = size_serving_fleet(_demand(), artifact=slow_server, serving_calibration=False)
    cal = size_serving_fleet(_demand(), artifact=slow_server)
    assert cal.num_gpus >= raw.num_gpus
    # TPOT x3 against a 50 ms SLO: the raw fleet of this load is not enough
    assert cal.num_gpus > raw.num_gpus
    sc = cal.result["serving_calibration"]
    assert sc["applied"] and sc["engine"] == ENGINE and sc["inputs"] == ["run-a"]
    assert cal.ttft_s == pytest.approx(sc["raw"]["ttft_s"] * 2.0, rel=1e-9)
    assert cal.tpot_s == pytest.approx(sc["raw"]["tpot_s"] * 3.0, rel=1e-9)
    assert cal.tpot_s <= 0.05 and cal.ttft_s <= 2.0  # the SLO holds for the scaled latencies
    assert cal.result["basis"] == "measured" and sc["hardware_basis"] == raw.result["basis"]
    lo, hi = cal.result["intervals"]["tpot_s"]
    assert lo <= cal.tpot_s <= hi
    assert "serving_calibration" not in raw.result


def test_factor_one_changes_nothing() -> None:
    same = calibrated_artifact(1.0, 1.0)
    raw = size_serving_fleet(_demand(), artifact=same, serving_calibration=False)
    cal = size_serving_fleet(_demand(), artifact=same)
    assert (cal.num_gpus, cal.tp, cal.replicas) == (raw.num_gpus, raw.tp, raw.replicas)
    assert cal.tpot_s == pytest.approx(raw.tpot_s, rel=1e-6)


def test_factors_apply_only_on_their_gpu_and_engine(slow_server) -> None:
    two = size_serving_fleet(_demand(gpus=(GPU, "h200")), artifact=slow_server)
    rows = [c for c in two.result["candidates"] if c.get("num_gpus") is not None]
    assert {c["gpu"] for c in rows} == {GPU, "h200-sxm-141gb"}
    for c in rows:
        if c["gpu"] == GPU:
            assert c["serving_factors"] == pytest.approx({"ttft": 2.0, "tpot": 3.0})
        else:
            assert "serving_factors" not in c
    other_engine = size_serving_fleet(_demand(engine="trtllm"), artifact=slow_server)
    assert "serving_calibration" not in other_engine.result


def test_forecast_infer_with_qps_carries_the_calibration(slow_server) -> None:
    r = forecast_inference(
        MODEL,
        GPU,
        qps=20,
        input_tokens=1024,
        output_tokens=256,
        ttft_slo_s=2.0,
        tpot_slo_s=0.05,
        engine="vllm",
        artifact=slow_server,
    )
    direct = size_serving_fleet(_demand(), artifact=slow_server)
    assert r["num_gpus"] == direct.num_gpus
    assert r["serving_calibration"]["tpot_factor"]["value"] == pytest.approx(3.0)


def test_an_slo_below_the_measured_single_request_latency_is_impossible() -> None:
    # raw single-request TPOT of an 8B model on H100 is well under 50 ms; x20 is not
    art = calibrated_artifact(1.0, 20.0)
    size_serving_fleet(_demand(tpot_slo_s=0.05), artifact=art, serving_calibration=False)
    with pytest.raises(InputError, match=r"tpot-slo-s 0\.05 is below the fastest single-request"):
        size_serving_fleet(_demand(tpot_slo_s=0.05), artifact=art)


def test_the_reference_is_the_probes_own_closed_loop() -> None:
    """A serve probe's C clients send fixed-length requests at once, so they run in step:
    each wave's prompts prefill together and its TTFT is the wave's prefill, several times
    the steady state's (where prompts arrive spread out). The factors compare the measured
    run with that experiment simulated, so a server the model predicts exactly gets
    factors of 1, not the steady state's ratios."""
    art = calibrated_artifact(1.0, 1.0)
    f = serving_factors(art, GPU, ENGINE)
    assert f is not None and f["applied"]
    assert f["ttft_factor"]["value"] == pytest.approx(1.0, rel=1e-9)
    assert f["tpot_factor"]["value"] == pytest.approx(1.0, rel=1e-9)
    steady = forecast_inference(
        MODEL,
        GPU,
        input_tokens=512,
        output_tokens=128,
        batch=8,
        artifact=art,
        engine=ENGINE,
        serving_calibration=False,
    )
    point = f["points"][0]
    assert point["forecast_ttft_s"] > 2 * steady["ttft_s"]
    assert point["forecast_tpot_s"] < steady["tpot_s"]  # no prefill between a wave's steps
