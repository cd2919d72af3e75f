"""What an engine's memory setting is a share of: vLLM's ``gpu_memory_utilization`` of all
the memory (weights, activations and KV cache inside it), TensorRT-LLM's
``free_gpu_memory_fraction`` of the memory the weights and activations leave (all of it KV
cache). Both default to 0.9; for a model that fills most of a GPU they differ by a factor in
KV cache, and so in the batch a replica holds."""

from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.inference import forecast_inference
from gpuplan.forecast.inference_arch import MemoryShare, memory_share
from gpuplan.forecast.inference_step import ENGINES, TRTLLM_KV_MEMORY_SOURCE, engine_profile

GIB = 2.0**30


def test_a_share_of_the_total_or_of_what_the_weights_leave() -> None:
    cap, fixed = 80 * GIB, 70 * GIB
    assert MemoryShare(0.9).usable_bytes(cap, fixed) == pytest.approx(72 * GIB)
    assert MemoryShare(0.9, "free").usable_bytes(cap, fixed) == pytest.approx(79 * GIB)
    # weights beyond the device: nothing left to share, nothing negative
    assert MemoryShare(0.9, "free").usable_bytes(cap, 90 * GIB) == pytest.approx(90 * GIB)
    assert memory_share(0.8) == MemoryShare(0.8, "total")
    assert MemoryShare(0.9, "free").describe(cap, fixed) == (
        "weights and activations + 90% of the 10.0 GiB they leave"
    )
    assert MemoryShare(0.9).describe(cap, fixed) == "90% of 80.0 GiB"


def test_tensorrt_llm_profiles_share_the_free_memory_and_say_where_from() -> None:
    free = {name for name, prof in ENGINES.items() if prof.kv_memory_of == "free"}
    assert free == {"trtllm@0.17", "trtllm@0.19", "trtllm@1.0", "trtllm@1.2"}
    for name in free:
        assert TRTLLM_KV_MEMORY_SOURCE in ENGINES[name].sources
    assert "llm_args.py" in TRTLLM_KV_MEMORY_SOURCE
    assert engine_profile("trtllm").describe()["kv_memory_of"] == "free"
    for name in ("vllm@0.8.4", "sglang@0.5", "modern"):
        assert engine_profile(name).kv_memory_of == "total"


def _mem(engine: str, **kw) -> dict[str, float]:
    out = forecast_inference(
        "llama3.3-70b",
        "h100",
        tp=1,
        precision="fp8",
        engine=engine,
        batch=1,
        input_tokens=1024,
        output_tokens=1024,
        **kw,
    )
    return {**out["memory_breakdown_bytes"], "max_batch": float(out["max_batch"])}


def test_a_70b_model_on_one_h100_holds_more_kv_cache_under_tensorrt_llm() -> None:
    """Llama 3.3 70B in FP8 fills 68 of the H100's 80 GiB: vLLM's 0.9 of all the memory
    leaves it about 4 GiB of KV cache, TensorRT-LLM's 0.9 of the free memory about 10."""
    vllm, trt = _mem("vllm@0.8.4"), _mem("trtllm@1.0")
    assert vllm["weights"] == trt["weights"]
    assert vllm["usable"] == pytest.approx(0.9 * vllm["capacity"])
    fixed = trt["weights"] + trt["activations"]
    assert trt["usable"] == pytest.approx(fixed + 0.9 * (trt["capacity"] - fixed))
    assert trt["usable"] > vllm["usable"] + 5 * GIB
    assert trt["max_batch"] > 2 * vllm["max_batch"]


def test_a_given_setting_is_read_as_the_engine_reads_it() -> None:
    trt = _mem("trtllm@1.0", memory_utilization=0.5)
    fixed = trt["weights"] + trt["activations"]
    assert trt["usable"] == pytest.approx(fixed + 0.5 * (trt["capacity"] - fixed))
    vllm = _mem("vllm@0.8.4", memory_utilization=0.95)
    assert vllm["usable"] == pytest.approx(0.95 * vllm["capacity"])


def test_a_model_too_big_says_which_share_it_missed() -> None:
    with pytest.raises(InputError) as err:
        forecast_inference(
            "llama3.1-405b", "h100", tp=4, precision="fp8", engine="trtllm@1.0", batch=1
        )
    line = err.value.one_line()
    assert "does not fit" in line and "GiB they leave" in line
    with pytest.raises(InputError) as err:
        forecast_inference(
            "llama3.1-405b", "h100", tp=4, precision="fp8", engine="vllm@0.8.4", batch=1
        )
    assert "90% of" in err.value.one_line()
