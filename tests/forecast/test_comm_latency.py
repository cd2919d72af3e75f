"""Small-message collectives from the collective library's own latency model (issue 16)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gpuplan.catalogs
from gpuplan.catalogs import get_catalog
from gpuplan.forecast import comm
from gpuplan.forecast.inference import device_perf_for

NCCL = comm.LibraryLatency("nccl", 6.6e-6, 0.6e-6, 2.7e-6, "nvlink4", "NCCL-TUNING")


def test_ring_ll_is_nccls_own_cost_model():
    # ncclTopoTuneModel: baseLat 6.6 us + 2(n-1) x 0.6 us; LL moves data at half the busbw
    t = comm.library_times(
        NCCL, "all_reduce", 1e6, 8, ranks_per_node=8, busbw_bytes_per_s=2e11, custom_allreduce=False
    )
    assert set(t) == {"ring_ll"}
    expected = 6.6e-6 + 14 * 0.6e-6 + 1e6 * 2 * 7 / 8 / (0.5 * 2e11)
    assert float(t["ring_ll"]) == pytest.approx(expected, rel=1e-12)
    # all-gather: n-1 steps and (n-1)/n of the buffer
    ag = comm.library_times(NCCL, "all_gather", 0.0, 4, ranks_per_node=4, busbw_bytes_per_s=1e11)
    assert float(ag["ring_ll"]) == pytest.approx(6.6e-6 + 3 * 0.6e-6)


def test_across_nodes_the_ring_pays_network_steps():
    # 16 ranks on 2 nodes: 30 steps, 2 of them over the network; no one-shot across nodes
    t = comm.library_times(NCCL, "all_reduce", 0.0, 16, ranks_per_node=8, busbw_bytes_per_s=1e11)
    assert float(t["ring_ll"]) == pytest.approx(6.6e-6 + 28 * 0.6e-6 + 2 * 2.7e-6)
    assert np.isinf(t["one_shot"]) and np.isinf(t["two_shot"])


def test_one_rank_costs_nothing():
    t = comm.library_times(NCCL, "all_reduce", 1e6, 1, ranks_per_node=1, busbw_bytes_per_s=1e11)
    assert all(float(v) == 0.0 for v in t.values())


def test_catalog_fabrics_carry_the_library_constants_with_a_source():
    cat = get_catalog()
    h100 = comm.library_latency(cat.gpu("h100"))
    mi300x = comm.library_latency(cat.gpu("mi300x"))
    assert h100 is not None and h100.library == "nccl" and "NCCL-TUNING" in h100.source
    assert mi300x is not None and mi300x.library == "rccl" and "RCCL-TUNING" in mi300x.source
    text = (Path(gpuplan.catalogs.__file__).parent / "data" / "fabrics.yaml").read_text()
    assert "NVIDIA/nccl src/graph/tuning.cc" in text and "ROCm/rccl src/graph/tuning.cc" in text
    assert h100.base_latency_s == pytest.approx(6.6e-6)
    assert mi300x.base_latency_s == pytest.approx(12.0e-6)


@pytest.mark.parametrize(("size", "published_s"), [(512, 5.9e-6), (32768, 7.8e-6)])
def test_one_shot_reproduces_published_h100_tp8_custom_allreduce(size, published_s):
    """SGLang PR 2904 (sgl-project/sglang, H100, tp 8, custom all-reduce without CUDA graph):
    5.9 us at 512 B and 7.8 us at 32 KB. The model is the library's launch + one step."""
    cat = get_catalog()
    gpu = cat.gpu("h100")
    perf = device_perf_for(gpu.id)
    t, algo = comm.serving_collective_time3(
        perf, comm.library_latency(gpu), "all_reduce", float(size), 8, ranks_per_node=8
    )
    assert algo == "one_shot"
    assert float(t[0]) == pytest.approx(published_s, rel=0.25)


def test_rccl_small_allreduce_on_mi300x_is_tens_of_microseconds():
    """RCCL's LL ring on 8 MI300X: 12 us + 14 x 0.8 us = 23 us (issue 16: ~10-30 us); the
    calibrated alpha-beta line alone gave ~350 us for a 16 KB message."""
    cat = get_catalog()
    gpu = cat.gpu("mi300x")
    perf = device_perf_for(gpu.id)
    lat = comm.library_latency(gpu)
    cal = comm.collective_time3(
        perf, "all_reduce", 16384.0, 8, ranks_per_node=8, inter_node_bandwidth_bytes_per_s=None
    )
    t, _ = comm.serving_collective_time3(
        perf, lat, "all_reduce", 16384.0, 8, ranks_per_node=8, custom_allreduce=False
    )
    assert 10e-6 <= float(t[0]) <= 30e-6 < float(cal[0])
    lo, v, hi = float(t[1]), float(t[0]), float(t[2])
    assert lo <= v <= hi


def test_library_model_only_ever_speeds_up_and_stays_monotone_in_size():
    cat = get_catalog()
    for name in ("h100", "b200", "mi300x", "a100"):
        gpu = cat.gpu(name)
        perf = device_perf_for(gpu.id)
        sizes = np.geomspace(256, 2**30, 40)
        cal = comm.collective_time3(
            perf, "all_reduce", sizes, 8, ranks_per_node=8, inter_node_bandwidth_bytes_per_s=None
        )
        t, _ = comm.serving_collective_time3(
            perf, comm.library_latency(gpu), "all_reduce", sizes, 8, ranks_per_node=8
        )
        assert np.all(t[0] <= cal[0] * (1 + 1e-12)), name
        assert np.all(np.diff(t[0]) >= -1e-15), name
        # large messages stay on the calibrated bandwidth model
        assert float(t[0, -1]) == pytest.approx(float(cal[0, -1]), rel=0.05), name


def test_no_library_constants_means_the_calibrated_model():
    cat = get_catalog()
    gpu = cat.gpu("h100")
    perf = device_perf_for(gpu.id)
    cal = comm.collective_time3(
        perf, "all_reduce", 16384.0, 8, ranks_per_node=8, inter_node_bandwidth_bytes_per_s=None
    )
    t, algo = comm.serving_collective_time3(perf, None, "all_reduce", 16384.0, 8, ranks_per_node=8)
    assert algo == "calibrated"
    np.testing.assert_allclose(t, cal)


def test_custom_kernels_take_messages_only_up_to_their_workspace():
    # vLLM/SGLang: 8 MiB for any group; TensorRT-LLM: 16 MB for two ranks, 8 MB beyond
    def two_shot(size: float, ranks: int, limits=comm.VLLM_CUSTOM_ALLREDUCE_MAX_BYTES) -> float:
        cap = comm.custom_allreduce_max_bytes(ranks, limits)
        t = comm.library_times(
            NCCL,
            "all_reduce",
            size,
            ranks,
            ranks_per_node=ranks,
            busbw_bytes_per_s=4e11,
            custom_max_bytes=cap,
        )
        return float(t["two_shot"])

    assert np.isfinite(two_shot(8 * 2**20, 8))
    assert np.isinf(two_shot(8 * 2**20 + 1, 8))
    trt = comm.TRTLLM_CUSTOM_ALLREDUCE_MAX_BYTES
    assert np.isfinite(two_shot(12e6, 2, trt)) and np.isinf(two_shot(12e6, 4, trt))
    assert np.isinf(two_shot(12e6, 2))  # vLLM's 8 MiB at two ranks as well


def test_a_large_tp8_allreduce_runs_at_nccls_measured_rate():
    """A 49 MB all-reduce (Llama 3.1 70B, TP 8, 3,000 decode tokens) is beyond every custom
    kernel's workspace: its time is NCCL's calibrated curve at that size, not the two-shot
    kernel at the 1 GiB bus bandwidth (198 us against 282 us on H100 before the cap)."""
    from gpuplan.forecast.inference_step import collective3

    perf = device_perf_for("h100-sxm5-80gb")
    lat = comm.library_latency(get_catalog().gpu("h100-sxm5-80gb"))
    size = 3000 * 8192 * 2.0
    capped, _ = collective3(perf, "all_reduce", size, 8, latency=lat)
    nccl = float(perf.collective_time_s("all_reduce", size, 8).value)
    assert float(capped[0]) == pytest.approx(nccl, rel=0.01)
    uncapped, _ = collective3(perf, "all_reduce", size, 8, latency=lat, custom_max_bytes=np.inf)
    assert float(uncapped[0]) < 0.8 * nccl
