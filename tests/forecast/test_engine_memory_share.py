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
    for name in ("vllm@0.8.4", "modern"):
        assert engine_profile(name).kv_memory_of == "total"
    assert engine_profile("sglang@0.5").kv_memory_of == "static"


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


def test_sglang_holds_weights_and_kv_in_its_static_share_activations_beside() -> None:
    """SGLang's ``--mem-fraction-static`` is the share for the weights and the KV pool;
    the activations of a prefill chunk live in the memory it leaves."""
    cap, weights, act = 80 * GIB, 60 * GIB, 3 * GIB
    static = MemoryShare(0.85, "static")
    assert static.usable_bytes(cap, weights + act, act) == pytest.approx(0.85 * cap + act)
    kv = static.usable_bytes(cap, weights + act, act) - weights - act
    assert kv == pytest.approx(0.85 * cap - weights)  # the KV pool SGLang allots
    # vLLM's share of the total holds the activations inside it: less KV at one fraction
    total_kv = MemoryShare(0.85).usable_bytes(cap, weights + act) - weights - act
    assert total_kv == pytest.approx(kv - act)
    # never more than the device
    assert MemoryShare(1.0, "static").usable_bytes(cap, weights + act, act) == cap
    assert "activations beside" in static.describe(cap, weights + act)


@pytest.mark.parametrize(
    ("gib", "chunk", "tp", "fraction"),
    [
        # H100 80 GiB, TP 8: 512 + 8192 x 1.5 + 512 graphs x 2 + 8/8 GiB = 14,848 MiB reserved
        (80, 8192, 8, round((81920 - 14848) / 81920, 3)),
        # TP 1: 256 graphs, 1/8 GiB: 13,440 MiB
        (80, 8192, 1, round((81920 - 13440) / 81920, 3)),
        # B200 180 GiB at its 16K chunk, TP 8: 27,136 MiB
        (180, 16384, 8, round((184320 - 27136) / 184320, 3)),
        # a short chunk on a large GPU: the 10 GiB floor
        (141, 2048, 1, round((144384 - 10240) / 144384, 3)),
        # a 24 GiB GPU, TP 1: 512 + 3072 + 24 x 2 + 128 = 3,760 MiB, no floor
        (24, 2048, 1, round((24576 - 3760) / 24576, 3)),
    ],
)
def test_sglang_default_static_fraction_by_device(gib, chunk, tp, fraction) -> None:
    from gpuplan.forecast.inference_arch import sglang_static_fraction

    assert sglang_static_fraction(gib * GIB, chunk, tp) == pytest.approx(fraction)


def test_sglang_forecast_uses_its_own_default_on_the_device() -> None:
    """With no memory setting, an SGLang 0.5 forecast holds its weights and KV cache in
    SGLang's default share for that GPU, chunk and TP (0.819 of an 80 GiB H100 at TP 8
    with its 8K chunk); a setting given replaces it; vLLM keeps 0.9 of everything."""
    out = forecast_inference(
        "llama3.1-70b", "h100", tp=8, precision="fp8", engine="sglang@0.5", batch=8
    )
    m = out["memory_breakdown_bytes"]
    assert out["chunk_tokens"] == 8192
    assert (m["usable"] - m["activations"]) / m["capacity"] == pytest.approx(0.819)
    given = forecast_inference(
        "llama3.1-70b",
        "h100",
        tp=8,
        precision="fp8",
        engine="sglang@0.5",
        batch=8,
        memory_utilization=0.7,
    )["memory_breakdown_bytes"]
    assert (given["usable"] - given["activations"]) / given["capacity"] == pytest.approx(0.7)
    vllm = forecast_inference(
        "llama3.1-70b", "h100", tp=8, precision="fp8", engine="vllm@0.8.4", batch=8
    )["memory_breakdown_bytes"]
    assert vllm["usable"] / vllm["capacity"] == pytest.approx(0.9)
    assert engine_profile("sglang@0.5").describe()["memory_default_by_device"] is True


def test_the_fleet_search_takes_the_engines_default_memory_when_given_none() -> None:
    from gpuplan.catalogs import get_catalog
    from gpuplan.forecast.inference import build_candidates, device_perf_for, load_overheads
    from gpuplan.forecast.model import arch_from
    from gpuplan.forecast.serving import LengthDist

    cat = get_catalog()
    cands, _ = build_candidates(
        arch=arch_from(cat.model("llama3.1-70b")),
        gpus=[cat.gpu("h100")],
        precision="fp8",
        kv_precision=None,
        tp=8,
        pp=1,
        ep=1,
        inputs=LengthDist(1024),
        outputs=LengthDist(256),
        batch=8,
        fitted=load_overheads(),
        get_perf=device_perf_for,
        catalog=cat,
        chunk_tokens=None,
        utilization=None,
        engine="sglang@0.5",
    )
    mp = cands[0].extra["memory"]
    assert (mp.usable_bytes - mp.activation_bytes) / mp.capacity_bytes == pytest.approx(0.819)


@pytest.mark.parametrize(("tp", "fraction"), [(1, 0.88), (2, 0.87), (4, 0.85), (8, 0.81)])
def test_sglang_04_default_is_its_tp_table(tp: int, fraction: float) -> None:
    """SGLang 0.4 sets ``--mem-fraction-static`` by TP alone (server_args.py of the 0.4
    releases), the weights and the KV pool within it, the activations beside."""
    out = forecast_inference(
        "llama3.1-8b", "h100", tp=tp, precision="bf16", engine="sglang@0.4.5", batch=8
    )
    m = out["memory_breakdown_bytes"]
    assert (m["usable"] - m["activations"]) / m["capacity"] == pytest.approx(fraction)
    assert out["engine_profile"]["memory_default_rule"] == "sglang-0.4"


def test_data_parallel_attention_ranks_count_as_the_engines_tp() -> None:
    """Under --enable-dp-attention SGLang's tp_size is every GPU of the stage: a wide-EP
    DeepSeek-R1 replica on 8 H200 (TP 1 attention x 8) takes the TP 8 default, 0.81, not
    the TP 1 one."""
    from gpuplan.forecast.inference_arch import MemoryShare

    share = engine_profile("sglang@0.4.5").memory_share(None)
    assert isinstance(share, MemoryShare) and share.rule == "sglang-0.4"
    assert share.fraction_on(141 * GIB, 8192, tp=8) == 0.81
    out = forecast_inference(
        "deepseek-r1", "h200", tp=1, ep=8, precision="fp8", engine="sglang@0.4.5", batch=8
    )
    m = out["memory_breakdown_bytes"]
    assert out["gpus_per_replica"] == 8
    assert (m["usable"] - m["activations"]) / m["capacity"] == pytest.approx(0.81)
