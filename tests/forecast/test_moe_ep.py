"""Expert-parallel all-to-all bytes, its overlap (none | dualpipe | 1f1b-overlap) and the
DeepSeek-V3 pre-training cost against its technical report.

The formula tests run on the synthetic device of test_train_fakes (round numbers chosen
there, not hardware claims); the DeepSeek-V3 case runs on the shipped catalog and
calibration.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.errors import InputError
from gpuplan.forecast.model import ModelArch, arch_from
from gpuplan.forecast.train import forecast_training
from gpuplan.forecast.training import (
    BREAKDOWN_KEYS,
    Framework,
    default_constants,
    ep_all_to_all_bytes,
    ep_exposed_time,
    ep_inter_node_copy_fraction,
    evaluate_layouts,
    layouts_from_dict,
)

from .test_train_fakes import fake_hardware

MOE = ModelArch(
    name="small-moe",
    layers=8,
    hidden=1024,
    heads=16,
    kv_heads=4,
    ffn_hidden=4096,
    vocab=32000,
    attention="gqa",
    num_experts=16,
    top_k=2,
    moe_ffn_hidden=512,
)
LAYOUT = dict(tp=1, pp=2, cp=1, ep=8, dp=8, vp=1, micro_batch=1, recompute=0, zero=1)


def step(fw, layout=None, arch=MOE, precision="bf16", hw=None):
    return evaluate_layouts(
        arch,
        hw or fake_hardware(),
        layouts_from_dict({**LAYOUT, **(layout or {})}),
        seq_len=2048,
        global_batch=64,
        precision=precision,
        framework=fw,
        constants=default_constants(),
    )


def test_all_to_all_bytes_hand_computed():
    # 2048 tokens x top-2 x hidden 1024 x 2 B = 8 MiB per dispatch; FP8 + 1/128-tile scales
    assert ep_all_to_all_bytes(2048, 2, 1024, 2.0) == 2048 * 2 * 1024 * 2 == 8 * 2**20
    assert ep_all_to_all_bytes(2048, 2, 1024, 1.0 + 4.0 / 128.0) == pytest.approx(
        2048 * 2 * 1024 * 1.03125
    )


def test_step_all_to_all_matches_hand_computed_collectives():
    """ep_comm of a bf16 step = (dispatch + combine) x MoE layers per stage x (fwd + bwd)
    x micro-batches, each an all-to-all of tokens x top_k x hidden x 2 B over EP8."""
    hw = fake_hardware()
    res = step(Framework())
    from gpuplan.forecast import comm as comm_mod

    one = comm_mod.collective_time3(
        hw.perf,
        "all_to_all",
        np.asarray([2048 * 2 * 1024 * 2.0]),
        np.asarray([8.0]),
        ranks_per_node=np.asarray([8.0]),
        inter_node_bandwidth_bytes_per_s=hw.inter_node_bandwidth_bytes_per_s,
    )[0, 0]
    microbatches = 64 / (8 * 1)
    expected = 2 * one * (8 / 2) * 2 * microbatches
    assert float(res["breakdown_s"]["ep_comm"][0, 0]) == pytest.approx(expected, rel=1e-12)
    assert float(res["ep_comm_detail_s"]["total"][0, 0]) == pytest.approx(expected, rel=1e-12)


def test_deepep_in_one_node_sends_a_token_once_per_rank():
    """EP 8 inside one node, top-2 of 16 experts: DeepEP's dispatch sends a token once to
    each rank holding one of its experts, 8 (1 - (7/8)^2) = 1.875 of its 2 copies, and
    combines a rank's outputs before sending them back; NCCL's all-to-all sends both."""
    from gpuplan.forecast import comm as comm_mod

    hw = fake_hardware()
    frac = float(ep_inter_node_copy_fraction(2, 8, None, dedup=True))
    assert frac == pytest.approx(1.875 / 2)
    one = comm_mod.collective_time3(
        hw.perf,
        "all_to_all",
        np.asarray([2048 * 2 * 1024 * 2.0 * frac]),
        np.asarray([8.0]),
        ranks_per_node=np.asarray([8.0]),
        inter_node_bandwidth_bytes_per_s=hw.inter_node_bandwidth_bytes_per_s,
    )[0, 0]
    res = step(Framework(ep_kernels="deepep"))
    expected = 2 * one * (8 / 2) * 2 * (64 / 8)
    assert float(res["ep_comm_detail_s"]["total"][0, 0]) == pytest.approx(expected, rel=1e-12)
    nccl = step(Framework(ep_kernels="nccl"))
    assert res["ep_comm_detail_s"]["total"][0, 0] < nccl["ep_comm_detail_s"]["total"][0, 0]


def test_node_dedup_fraction():
    # EP64 over 8 nodes, top-8, node-limited to 4 (DeepSeek-V3): one copy per node, 4 of 8
    assert float(ep_inter_node_copy_fraction(8, 8, 4, dedup=True)) == 0.5
    # no limit: expected distinct nodes 8 (1 - (7/8)^8) of 8 copies
    assert float(ep_inter_node_copy_fraction(8, 8, None, dedup=True)) == pytest.approx(
        1 - (7 / 8) ** 8
    )
    assert float(ep_inter_node_copy_fraction(8, 1, 4, dedup=True)) == 1.0


def test_exposed_equals_total_without_overlap_and_never_exceeds_it():
    none = step(Framework(ep_overlap="none"))
    d = none["ep_comm_detail_s"]
    assert np.array_equal(d["exposed"], d["total"])
    for mode in ("dualpipe", "1f1b-overlap"):
        r = step(Framework(ep_overlap=mode, ep_kernels="nccl"))
        assert np.all(r["ep_comm_detail_s"]["exposed"] <= r["ep_comm_detail_s"]["total"] + 1e-15)
        total = sum(np.asarray(r["breakdown_s"][k]) for k in BREAKDOWN_KEYS)
        np.testing.assert_allclose(total, r["step_time_s"], rtol=1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pp=st.sampled_from([1, 2, 4]),
    ep=st.sampled_from([2, 4, 8]),
    mb=st.sampled_from([1, 2]),
    nic=st.sampled_from([5e9, 50e9, 400e9]),
    precision=st.sampled_from(["bf16", "fp8"]),
)
def test_dualpipe_never_slower(pp, ep, mb, nic, precision):
    """At vp = 1 (DualPipe has no interleaved stages), on any fabric."""
    hw = fake_hardware(nic=nic)
    lay = dict(pp=pp, ep=ep, micro_batch=mb, dp=8)
    base = step(Framework(), lay, precision=precision, hw=hw)["step_time_s"]
    for mode in ("dualpipe", "1f1b-overlap"):
        t = step(Framework(ep_overlap=mode), lay, precision=precision, hw=hw)["step_time_s"]
        assert np.all(t <= base * (1 + 1e-12))


def test_exposed_formula():
    assert float(ep_exposed_time(2.0, 5.0, "dualpipe", 0.0)) == 0.0
    assert float(ep_exposed_time(5.0, 2.0, "dualpipe", 0.0)) == 3.0
    assert float(ep_exposed_time(5.0, 2.0, "none", 0.5)) == 5.0
    # the communication kernels' SM share slows the paired compute: f x c at least
    assert float(ep_exposed_time(2.0, 5.0, "1f1b-overlap", 0.25)) == 0.5


def test_unknown_overlap_is_an_input_error():
    with pytest.raises(InputError, match="ep_overlap"):
        Framework(ep_overlap="zero-bubble")
    with pytest.raises(InputError, match=r"ep-overlap.*dualpipe"):
        forecast_training(MOE, gpu="h100", num_gpus=16, ep_overlap="sometimes")


DEEPSEEK_V3_PUBLISHED_GPU_HOURS = 2.664e6
"""DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv 2412.19437), Table 1: 2664K
H800 GPU-hours of pre-training on 14.8T tokens. Layout (section 3.2): PP16 with DualPipe,
EP64 over 8 nodes, ZeRO-1 DP, no TP; FP8 training (section 3.3); 4K sequences, batch of
15360 sequences after the ramp (section 4.2); node-limited routing to 4 nodes (2.1.2)."""


def test_deepseek_v3_dualpipe_within_band_of_report():
    """Tolerance 15%: the held-out p90 error of the training forecast is 21% and its
    median 8.6% (README); 15% sits between, for a run whose overlap schedule is modelled
    from the report's own description. The batch ramp (first 469B tokens at smaller
    batches) is ignored: a step at the final batch is the longest-running regime."""
    arch = dataclasses.replace(arch_from("deepseek-v3"), max_nodes_per_token=4)
    kw = dict(
        gpu="h800",
        num_gpus=2048,
        seq_len=4096,
        global_batch=15360,
        precision="fp8",
        parallelism=dict(tp=1, pp=16, ep=64, cp=1, zero=1, recompute="selective"),
        tokens=14.8e12,
    )
    dual = forecast_training(arch, ep_overlap="dualpipe", **kw)
    none = forecast_training(arch, ep_overlap="none", **kw)
    rel = dual["gpu_hours"] / DEEPSEEK_V3_PUBLISHED_GPU_HOURS - 1.0
    assert abs(rel) <= 0.15, f"{dual['gpu_hours']:.4g} GPU-h is {rel:+.1%} off the report"
    assert none["gpu_hours"] > dual["gpu_hours"]
    ep = dual["ep_comm_s"]
    assert ep["ep_overlap"] == "dualpipe"
    assert ep["ep_comm_exposed"] < ep["ep_comm_total"]
    assert ep["ep_comm_exposed"] == pytest.approx(dual["breakdown_s"]["ep_comm"])
    assert ep["dispatch_bytes_per_element"] == pytest.approx(1.03125)  # FP8 dispatch
    assert none["ep_comm_s"]["ep_comm_exposed"] == none["ep_comm_s"]["ep_comm_total"]


def test_ep_group_that_is_the_whole_stage_stays_inside_its_node():
    """EP 8 over CP 2 x DP 4 on one 8-GPU node: the group is every rank of the node. Its
    stride (TP x CP = 2) cannot carry it past the stage's 8 ranks, so each dispatch and
    combine is the intra-node all-to-all of the micro-batch's tokens. It used to be placed
    as every other rank of two nodes (4 ranks per node), its all-to-all priced on the
    network."""
    from gpuplan.forecast import comm as comm_mod

    hw = fake_hardware()
    layout = dict(tp=1, pp=1, ep=8, vp=1, micro_batch=2, recompute=0, zero=1, cp=2, dp=4)
    res = step(Framework(), layout, hw=hw)
    tokens = 2 * 2048 / 2  # micro-batch x sequence / CP

    def a2a(ranks_per_node: float) -> float:
        return float(
            comm_mod.collective_time3(
                hw.perf,
                "all_to_all",
                np.asarray([tokens * 2 * 1024 * 2.0]),
                np.asarray([8.0]),
                ranks_per_node=np.asarray([ranks_per_node]),
                inter_node_bandwidth_bytes_per_s=hw.inter_node_bandwidth_bytes_per_s,
            )[0, 0]
        )

    microbatches = 64 / (4 * 2)
    expected = 2 * a2a(8.0) * 8 * 2 * microbatches  # dispatch + combine, 8 layers, fwd + bwd
    assert a2a(4.0) > 1.5 * a2a(8.0)  # the misplacement mattered on this device
    assert float(res["breakdown_s"]["ep_comm"][0, 0]) == pytest.approx(expected, rel=1e-12)


def test_deepep_across_nodes_sends_each_token_once_at_its_nic_share():
    """EP 16 over two 8-GPU nodes, bf16 (dispatch 2 B): DeepEP's normal kernels send the
    deduplicated bytes over RDMA at deepep_internode_nic_fraction of the NIC while NVLink
    forwards inside the node; the slower sets the pace (hand-computed with the fake GPU's
    NVLink all-to-all over the node's 8 ranks). NCCL's all-to-all keeps its calibrated
    model, and the fraction 0 restores it for DeepEP too."""
    from gpuplan.forecast import comm as comm_mod

    hw = fake_hardware()  # 50 GB/s NIC per GPU, 8 GPUs a node
    lay = dict(ep=16, dp=16, pp=1)
    c = {**default_constants(), "deepep_internode_nic_fraction": 0.8}

    def run(fw, consts):
        return evaluate_layouts(
            MOE,
            hw,
            layouts_from_dict({**LAYOUT, **lay}),
            seq_len=2048,
            global_batch=64,
            precision="bf16",
            framework=fw,
            constants=consts,
        )

    deepep = run(Framework(ep_kernels="deepep"), c)
    size = 2048 * 2 * 1024 * 2.0 * float(ep_inter_node_copy_fraction(2, 2, None, dedup=True))
    rdma = size * (2 - 1) / 2 / (50e9 * 0.8)
    # NVLink carries a token once to each distinct rank of its experts (of the 16)
    to_ranks = 2048 * 2 * 1024 * 2.0 * float(ep_inter_node_copy_fraction(2, 16, None, dedup=True))
    nvlink = comm_mod.collective_time3(
        hw.perf, "all_to_all", np.asarray([to_ranks]), np.asarray([8.0]),
        ranks_per_node=np.asarray([8.0]), inter_node_bandwidth_bytes_per_s=50e9,
    )[0, 0]  # fmt: skip
    microbatches = 64 / 16
    expected = 2 * max(rdma, nvlink) * (8 / 1) * 2 * microbatches
    assert float(deepep["ep_comm_detail_s"]["total"][0, 0]) == pytest.approx(expected, rel=1e-12)
    off = run(Framework(ep_kernels="deepep"), {**c, "deepep_internode_nic_fraction": 0.0})
    nccl_model = comm_mod.collective_time3(
        hw.perf, "all_to_all", np.asarray([size]), np.asarray([16.0]),
        ranks_per_node=np.asarray([8.0]), inter_node_bandwidth_bytes_per_s=50e9,
    )[0, 0]  # fmt: skip
    assert float(off["ep_comm_detail_s"]["total"][0, 0]) == pytest.approx(
        2 * nccl_model * 8 * 2 * microbatches, rel=1e-12
    )


# NeMo AutoModel's performance summary, one DGX-H100 node, bf16, EP 8 over FSDP 8, local
# batch 4, GBS 512, 4,096 tokens, DeepEP, activation checkpointing (github
# NVIDIA-NeMo/Automodel docs/performance-summary.mdx and the examples/llm_benchmark configs
# qwen/qwen3_moe_30b_te_deepep.yaml and nemotron/nemotron_nano_v3_te_deepep.yaml at
# 36044ad3d). Held out, never fitted. With every top-k copy on NVLink the forecasts were
# 9,548 (-21%) and 14,630 (-13%); sent once per rank as DeepEP does, 10,352 (-14%) and
# 15,287 (-9%), inside the 15% the other AutoModel rows are held to.
AUTOMODEL_ONE_NODE_MOE = [("qwen3-30b-a3b", 12040.0), ("nemotron3-nano-30b-a3b", 16789.0)]


@pytest.mark.parametrize(("model", "published"), AUTOMODEL_ONE_NODE_MOE)
def test_one_node_deepep_moe_against_automodel_held_out(model, published):
    r = forecast_training(
        model,
        gpu="h100",
        num_gpus=8,
        seq_len=4096,
        global_batch=512,
        parallelism=dict(tp=1, pp=1, cp=1, ep=8, micro_batch=4, recompute="full", zero=3),
        framework_name="torchtitan",
        ep_kernels="deepep",
    )
    assert r["fits_in_memory"]
    err = r["tokens_per_s_per_gpu"] / published - 1.0
    assert abs(err) <= 0.15, f"{r['tokens_per_s_per_gpu']:.0f} is {err:+.1%} off {published}"
