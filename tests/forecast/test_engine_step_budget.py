"""The token budget of one scheduler step is the engine's default on the device it runs on:
vLLM V1's OpenAI server batches 8192 tokens per step on a large GPU other than an A100 and
2048 elsewhere; SGLang's chunked prefill takes 2048, 8192 or 16384 tokens by device memory;
TensorRT-LLM and the other profiles 8192 everywhere. A prompt longer than the budget
prefills in several steps, so the budget reaches the time to first token."""

from __future__ import annotations

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.forecast.inference import (
    build_candidates,
    device_perf_for,
    forecast_inference,
    load_overheads,
)
from gpuplan.forecast.inference_step import (
    DEFAULT_CHUNK_TOKENS,
    ENGINES,
    engine_profile,
)
from gpuplan.forecast.model import arch_from
from gpuplan.forecast.serving import LengthDist

CAT = get_catalog()


@pytest.mark.parametrize(
    ("gpu", "tokens"),
    [
        ("h100", 8192),
        ("h200", 8192),
        ("mi300x", 8192),
        ("b200", 8192),
        ("a100", 2048),  # 80 GB, but vLLM keeps the A100 on the small defaults (PR #17885)
        ("l40s", 2048),  # under 70 GiB
        ("l4", 2048),
    ],
)
def test_vllm_v1_budget_by_device(gpu: str, tokens: int) -> None:
    assert engine_profile("vllm@0.8.4").chunk_tokens(CAT.gpu(gpu)) == tokens
    # a later V1 release runs on the 0.8.4 profile and takes the same rule
    assert engine_profile("vllm@0.10.1").chunk_tokens(CAT.gpu(gpu)) == tokens


@pytest.mark.parametrize(
    ("gpu", "tokens"),
    [
        ("l4", 2048),
        ("a100", 8192),
        ("h100", 8192),
        ("h200", 8192),
        ("b200", 16384),
        ("mi300x", 16384),
    ],
)
def test_sglang_budget_by_device_memory(gpu: str, tokens: int) -> None:
    for name in ("sglang@0.4.5", "sglang@0.5"):
        assert engine_profile(name).chunk_tokens(CAT.gpu(gpu)) == tokens


def test_the_other_profiles_keep_one_budget_everywhere() -> None:
    ruled = {name for name, prof in ENGINES.items() if prof.chunk_rule != "fixed"}
    assert ruled == {"vllm@0.8.4", "sglang@0.4.5", "sglang@0.5"}
    for name in set(ENGINES) - ruled:
        for gpu in ("a100", "l4", "b200"):
            assert ENGINES[name].chunk_tokens(CAT.gpu(gpu)) == DEFAULT_CHUNK_TOKENS
    assert engine_profile("vllm@0.8.4").describe()["chunk_rule"] == "vllm-v1"


def _forecast(gpu: str, **kw):
    return forecast_inference(
        "llama3.1-8b",
        gpu,
        engine="vllm@0.8.4",
        batch=1,
        input_tokens=6000,
        output_tokens=128,
        **kw,
    )


def test_the_budget_reaches_the_first_token() -> None:
    """On an A100 vLLM V1 prefills a 6000-token prompt in three 2048-token steps; given a
    budget of 8192 it takes one. Each step adds its fixed cost, so the default is slower
    to the first token, and the result says which budget it used."""
    default = _forecast("a100")
    one_step = _forecast("a100", chunk_tokens=8192)
    assert default["chunk_tokens"] == 2048
    assert one_step["chunk_tokens"] == 8192
    assert default["ttft_s"] > one_step["ttft_s"]
    assert _forecast("h100")["chunk_tokens"] == 8192


def test_the_fleet_search_takes_each_gpus_own_budget() -> None:
    arch = arch_from(CAT.model("llama3.1-8b"))
    cands, _ = build_candidates(
        arch=arch,
        gpus=[CAT.gpu("a100"), CAT.gpu("h100")],
        precision="bf16",
        kv_precision=None,
        tp=1,
        pp=1,
        ep=1,
        inputs=LengthDist(1024),
        outputs=LengthDist(256),
        batch=8,
        fitted=load_overheads(),
        get_perf=device_perf_for,
        catalog=CAT,
        chunk_tokens=None,
        utilization=engine_profile("vllm@0.8.4").memory_share(0.9),
        engine="vllm@0.8.4",
    )
    assert {c.gpu: c.replica.chunk_tokens for c in cands} == {
        CAT.gpu("a100").id: 2048,
        CAT.gpu("h100").id: 8192,
    }
