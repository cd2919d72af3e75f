"""The logits a continuous-batching replica sets memory aside for: one fp32 row per sequence a
pass can hold (the engine's running cap), not one per token of the prefill chunk, as vLLM's
memory profile samples them; and vLLM V1's running cap by device."""

from __future__ import annotations

import pytest

from gpuplan.catalogs.catalog import load_catalog
from gpuplan.forecast.inference import (
    continuous_memory_plan,
    forecast_inference,
    logit_sequences,
)
from gpuplan.forecast.inference_arch import Layout, resolve_precision, shard
from gpuplan.forecast.inference_step import engine_profile
from gpuplan.forecast.model import arch_from
from gpuplan.forecast.speculative import Speculation

CHUNK = 8192


@pytest.fixture(scope="module")
def llama70b_tp2():  # type: ignore[no-untyped-def]
    cat = load_catalog()
    gpu = cat.gpu("h100")
    arch = arch_from(cat.model("llama3.3-70b"))
    return shard(arch, Layout(2), resolve_precision("bf16", gpu, None)), gpu


@pytest.mark.parametrize(
    ("gpu", "cap"),
    [("h100", 1024), ("h200", 1024), ("mi300x", 1024), ("a100", 256), ("l40s", 256), ("l4", 256)],
)
def test_vllm_v1_runs_its_default_max_num_seqs_by_device(gpu: str, cap: int) -> None:
    assert engine_profile("vllm@0.8.4").running_cap(load_catalog().gpu(gpu)) == cap


def test_tpus_and_fixed_caps() -> None:
    cat = load_catalog()
    v1 = engine_profile("vllm@0.8.4")
    # a TPU v5p has 95 GiB, but vLLM's TPU defaults stay at 256 sequences
    assert v1.running_cap(cat.gpu("tpu-v5p")) == 256
    h100 = cat.gpu("h100")
    assert engine_profile("vllm@0.5.4").running_cap(h100) == 256
    assert engine_profile("trtllm@0.17").running_cap(h100) is None
    assert engine_profile("modern").running_cap(h100) is None


def test_only_engines_that_profile_per_sequence_reserve_fewer_rows() -> None:
    h100 = load_catalog().gpu("h100")
    assert logit_sequences("vllm@0.8.4", h100) == 1024
    assert logit_sequences("vllm@0.5.4", h100, batch=64) == 64  # a fleet's own cap
    # TensorRT-LLM keeps a whole chunk of rows, even with a batch cap (docs: the offline
    # tables' KV-bound rows moved away from the published figures with fewer rows)
    assert logit_sequences("trtllm@0.17", h100, batch=64) is None
    assert logit_sequences("sglang@0.5", h100) is None


def test_logits_are_reserved_for_the_capped_sequences(llama70b_tp2) -> None:  # type: ignore[no-untyped-def]
    sh, gpu = llama70b_tp2
    whole = continuous_memory_plan(sh, gpu, chunk_tokens=CHUNK, utilization=0.9)
    capped = continuous_memory_plan(
        sh, gpu, chunk_tokens=CHUNK, utilization=0.9, max_sequences=1024
    )
    # fp32 logits of the 128,256-token vocabulary split over TP 2, per row
    row = sh.arch.vocab / 2 * 4.0
    assert whole.activation_bytes - capped.activation_bytes == pytest.approx((CHUNK - 1024) * row)
    assert capped.kv_capacity_tokens > whole.kv_capacity_tokens
    # a cap above the chunk changes nothing: a pass has at most a chunk of sequences
    above = continuous_memory_plan(
        sh, gpu, chunk_tokens=CHUNK, utilization=0.9, max_sequences=4 * CHUNK
    )
    assert above.activation_bytes == whole.activation_bytes


def test_speculation_reserves_every_verified_position(llama70b_tp2) -> None:  # type: ignore[no-untyped-def]
    sh, gpu = llama70b_tp2
    plain = continuous_memory_plan(sh, gpu, chunk_tokens=CHUNK, utilization=0.9, max_sequences=256)
    spec = continuous_memory_plan(
        sh,
        gpu,
        chunk_tokens=CHUNK,
        utilization=0.9,
        max_sequences=256,
        speculation=Speculation(3, 2.5),
    )
    row = sh.arch.vocab / 2 * 4.0
    draft = spec.weights_bytes - plain.weights_bytes
    assert spec.activation_bytes - plain.activation_bytes == pytest.approx(3 * 256 * row)
    assert draft > 0  # the draft head's weights join too


def test_a_tight_vllm_replica_holds_more_requests_than_a_whole_chunk_of_logits_allows() -> None:
    """70B bf16 on two H100s leaves about 6 GB per GPU beside the weights: reserving 8,192
    rows of logits (2.1 GB) instead of vLLM's 1,024 (0.26 GB) costs a third of the batch.
    (Compared with SGLang, which reads its memory setting as vLLM does; TensorRT-LLM's is a
    share of the free memory, tests/forecast/test_engine_memory_share.py.)"""
    q = dict(model="llama3.3-70b", gpu="h100", tp=2, max_throughput=True)
    vllm = forecast_inference(**q, engine="vllm@0.8.4")
    whole_chunk = forecast_inference(**q, engine="sglang@0.5")
    assert vllm["max_batch"] > 1.3 * whole_chunk["max_batch"]
    per_gpu = vllm["memory_breakdown_bytes"]
    assert per_gpu["total"] <= per_gpu["usable"]


def test_the_running_cap_bounds_the_fleets_replicas() -> None:
    """An 8B model on an L40S has KV room for more than vLLM's 256 running requests: a
    vLLM fleet's replicas run 256 at most; an engine without a cap runs what fits."""
    q = dict(model="llama3.1-8b", gpu="l40s", input_tokens=512, output_tokens=128, qps=20)
    assert forecast_inference(**q, engine="vllm@0.8.4")["max_batch"] == 256
    assert forecast_inference(**q, engine="trtllm@0.17")["max_batch"] > 256
