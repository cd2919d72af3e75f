"""A batch larger than the KV cache holds runs max_batch at a time (issue 16)."""

from __future__ import annotations

import pytest

from gpuplan.forecast.inference import forecast_inference


def _run(batch: int, batching: str) -> dict:
    return forecast_inference(
        "llama3.1-8b", "h100", tp=1, batch=batch, input_tokens=1024, output_tokens=1024,
        precision="bf16", batching=batching,
    )  # fmt: skip


@pytest.mark.parametrize("batching", ["continuous", "static"])
def test_a_batch_beyond_the_kv_cache_is_not_forecast_as_if_it_ran_at_once(batching):
    cap = _run(1, batching)["max_batch"]
    at_cap, over = _run(cap, batching), _run(4 * cap, batching)
    assert at_cap["fits_in_memory"] and at_cap["batch_note"] is None
    assert over["batch"] == 4 * cap and over["batch_running"] == cap
    assert not over["fits_in_memory"] and str(cap) in over["batch_note"]
    # the step is that of the running batch, and throughput cannot exceed it by more than
    # the static waves' better prefill/decode overlap
    assert over["tpot_s"] == pytest.approx(at_cap["tpot_s"])
    assert over["throughput_output_tokens_per_s"] <= 1.05 * at_cap["throughput_output_tokens_per_s"]


def test_static_waves_take_the_time_of_each_wave():
    cap = _run(1, "static")["max_batch"]
    one, two = _run(cap, "static"), _run(2 * cap, "static")
    # two full waves: twice the requests in twice the time
    assert two["throughput_output_tokens_per_s"] == pytest.approx(
        one["throughput_output_tokens_per_s"], rel=1e-9
    )
