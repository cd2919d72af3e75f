"""``forecast infer --concurrency C`` without ``--tp``: the single forecast and the simulated
closed-loop client run on one replica, chosen by the rule the client keeps a replica by
(:func:`gpuplan.forecast.inference.continuous_memory_plan`: a full prefill chunk beside the
weights, the longest requests' KV), not on a TP that holds one request but not a chunk."""

from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.inference import forecast_inference

#: Qwen3.6 27B in FP8 on a 32 GiB TPU v6e: the weights fit one chip with room for one
#: request at a short pass, not for a full 8k-token prefill chunk's activations and logits
TIGHT = dict(
    model="qwen3.6-27b", gpu="tpu-v6e", precision="fp8", input_tokens=1024, output_tokens=256
)


def test_the_client_gets_the_smallest_tp_that_holds_a_chunk() -> None:
    alone = forecast_inference(**TIGHT)
    assert alone["tp"] == 1  # one request fits one chip
    with pytest.raises(InputError, match="does not fit"):
        forecast_inference(**TIGHT, tp=1, concurrency=16)  # asked for: said, not changed
    r = forecast_inference(**TIGHT, concurrency=16)
    assert r["tp"] == 2
    loop = r["closed_loop"]
    assert loop["concurrency"] == 16
    # the table and the client describe the same replica: 2 chips
    assert r["gpus_per_replica"] == 2
    assert loop["throughput_output_tokens_per_s"] > 0
    assert loop["mean_running_requests"] > 8  # the 16 requests run side by side


def test_a_layout_that_holds_the_client_is_kept() -> None:
    r = forecast_inference(
        model="llama3.1-8b", gpu="h100", input_tokens=1024, output_tokens=256, concurrency=8
    )
    assert r["tp"] == 1
    assert r["closed_loop"]["concurrency"] == 8
