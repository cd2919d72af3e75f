"""The typed forecast records (gpuplan.forecast.train / gpuplan.forecast.infer, issue 14.5).

``to_json()`` of each record must give back exactly the DESIGN.md 3.3 JSON the CLI prints
for the README examples (same keys, same order, same values); the records type what the
plan reads (bands, the layout, the fleet) and are frozen. Real catalog and the shipped
calibration; nothing is mocked.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.band import Band
from gpuplan.forecast.infer import (
    InferForecast,
    ServingFleet,
    forecast_replica,
    size_fleet,
)
from gpuplan.forecast.inference import ServingDemand, forecast_inference, size_serving_fleet
from gpuplan.forecast.serving import LengthDist
from gpuplan.forecast.train import TrainForecast, TrainRequest, forecast_train, forecast_training

# README.md "Forecast training" and "Forecast serving" rows
README_TRAIN = dict(model="llama3.1-405b", gpu="h100", num_gpus=16384, tokens=15.6e12)
README_INFER = dict(
    model="llama3.3-70b",
    gpu="h100",
    qps=20.0,
    input_tokens=2048,
    input_tokens_p99=8192,
    output_tokens=256,
    ttft_slo_s=1.0,
    tpot_slo_s=0.05,
)


def _same_document(record_json: dict[str, object], printed: dict[str, object]) -> None:
    """Equal as values and as the JSON text (key order included)."""
    assert record_json == printed
    assert json.dumps(record_json) == json.dumps(printed)


@pytest.fixture(scope="module")
def readme_train() -> tuple[TrainForecast, dict[str, object]]:
    req = TrainRequest(**README_TRAIN)
    return forecast_train(req), forecast_training(**README_TRAIN)


@pytest.fixture(scope="module")
def readme_fleet() -> tuple[ServingFleet, dict[str, object]]:
    demand = ServingDemand(
        model="llama3.3-70b",
        gpus=("h100",),
        qps=20.0,
        inputs=LengthDist(2048.0, p99=8192.0),
        outputs=LengthDist(256.0),
        ttft_slo_s=1.0,
        tpot_slo_s=0.05,
    )
    return size_fleet(demand), forecast_inference(**README_INFER)


def test_train_to_json_is_the_forecast_train_json(readme_train, run_cli):
    typed, raw = readme_train
    _same_document(typed.to_json(), raw)
    r = run_cli(
        "forecast",
        "train",
        "--model",
        "llama3.1-405b",
        "--gpu",
        "h100",
        "--gpus",
        "16384",
        "--tokens",
        "15.6e12",
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr
    printed = json.loads(r.stdout)
    assert json.loads(json.dumps(typed.to_json())) == printed
    assert list(printed) == list(typed.to_json())


def test_train_record_types_what_the_plan_reads(readme_train):
    typed, raw = readme_train
    p = typed.parallelism
    assert p.tp * p.pp * p.cp * p.dp == typed.num_gpus == 16384
    assert p.text() == " ".join(f"{k}={v}" for k, v in raw["parallelism"].items())
    # one band per interval, ends as the JSON's intervals say
    assert typed.step_time_s.pair() == raw["step_time_interval_s"]
    assert typed.time_to_train_s is not None and typed.mfu is not None
    assert typed.time_to_train_s.low < typed.time_to_train_s.value < typed.time_to_train_s.high
    assert typed.time_to_train_s.value == pytest.approx(15.6e12 / typed.tokens_per_s.value)
    assert typed.mfu.low < typed.mfu.value < typed.mfu.high
    assert typed.fits_in_memory and typed.memory_per_gpu_bytes > 0
    bw = typed.inter_node_bandwidth_bytes_per_s
    assert bw is not None and bw > 0
    assert typed.inter_node_bandwidth_basis  # where the scale-out figure came from


def test_train_deadline_search_round_trips():
    """The smallest-cluster path adds its own fields (gpus_vs_days ...): kept, in order."""
    raw = forecast_training("llama3.1-8b", gpu="h100", tokens=1e12, target_days=30, top=2)
    typed = TrainForecast.from_json(raw)
    _same_document(typed.to_json(), raw)
    assert typed.target_days == 30.0
    assert typed.gpu_hours is not None
    assert typed.gpu_hours.value == pytest.approx(
        typed.time_to_train_s.value * typed.num_gpus / 3600
    )


def test_train_without_tokens_has_no_time_to_train():
    raw = forecast_training("llama3.1-8b", gpu="h100", num_gpus=64)
    typed = TrainForecast.from_json(raw)
    assert typed.time_to_train_s is None and typed.gpu_hours is None
    _same_document(typed.to_json(), raw)


def test_records_are_frozen_and_to_json_is_a_fresh_copy(readme_train, readme_fleet):
    typed, _ = readme_train
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.num_gpus = 1
    doc = typed.to_json()
    doc["breakdown_s"]["compute"] = -1.0
    doc["intervals"]["mfu"] = None
    assert typed.to_json()["breakdown_s"]["compute"] > 0
    assert typed.to_json()["intervals"]["mfu"] == typed.mfu.pair()
    fleet, _ = readme_fleet
    with pytest.raises(dataclasses.FrozenInstanceError):
        fleet.replicas = 1


def test_fleet_to_json_is_the_forecast_infer_json(readme_fleet, run_cli):
    fleet, raw = readme_fleet
    _same_document(fleet.to_json(), raw)
    r = run_cli(
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
        "--input-tokens-p99",
        "8192",
        "--output-tokens",
        "256",
        "--ttft-slo-s",
        "1",
        "--tpot-slo-s",
        "0.05",
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr
    printed = json.loads(r.stdout)
    assert json.loads(json.dumps(fleet.to_json())) == printed
    assert list(printed) == list(fleet.to_json())


def test_fleet_record_types_what_the_plan_reads(readme_fleet):
    fleet, raw = readme_fleet
    assert fleet.num_gpus == fleet.replicas * fleet.gpus_per_replica
    assert fleet.gpus_per_replica == fleet.tp * fleet.pp
    assert fleet.layout_text == f"tp={raw['tp']} pp={raw['pp']} ep={raw['ep']}"
    # the SLOs the fleet was sized for hold at the central value
    assert fleet.ttft_s.value <= 1.0 and fleet.tpot_s.value <= 0.05
    assert fleet.ttft_s.pair() == raw["intervals"]["ttft_s"]
    lo, hi = fleet.replicas_interval or (0, 0)
    assert isinstance(lo, int) and lo <= fleet.replicas <= hi
    assert fleet.serving_calibration is None  # the shipped artifact has no serve probe


def test_size_fleet_matches_the_untyped_sizing():
    demand = ServingDemand(
        model="llama3.1-8b",
        gpus=("h100",),
        qps=5.0,
        inputs=LengthDist(512.0),
        outputs=LengthDist(128.0),
        ttft_slo_s=0.5,
        tpot_slo_s=0.05,
    )
    fleet = size_fleet(demand)
    sizing = size_serving_fleet(demand)
    _same_document(fleet.to_json(), sizing.as_dict())
    assert (fleet.num_gpus, fleet.tp, fleet.replicas) == (
        sizing.num_gpus,
        sizing.tp,
        sizing.replicas,
    )


def test_replica_forecast_round_trips():
    raw = forecast_inference("llama3.3-70b", gpu="h100")
    typed = forecast_replica("llama3.3-70b", "h100")
    _same_document(typed.to_json(), raw)
    _same_document(InferForecast.from_json(raw).to_json(), raw)
    assert typed.gpus_per_replica == typed.tp * typed.pp
    assert typed.ttft_s.low <= typed.ttft_s.value <= typed.ttft_s.high


def test_bad_request_is_the_same_one_line_error():
    with pytest.raises(InputError) as typed_err:
        forecast_train(TrainRequest("llama3.1-8b", num_gpus=0))
    with pytest.raises(InputError) as raw_err:
        forecast_training("llama3.1-8b", num_gpus=0)
    assert typed_err.value.one_line() == raw_err.value.one_line()
    assert "--gpus must be >= 1" in typed_err.value.one_line()


def test_band_keeps_value_low_high_in_that_order():
    b = Band.of(2.0, [1.0, 3.0])
    assert (b.value, b.low, b.high) == (2.0, 1.0, 3.0)
    assert b.pair() == [1.0, 3.0] and b.interval() == (1.0, 3.0)
    assert Band.of(5, None) == Band(5.0, 5.0, 5.0)
