"""Terms that transfer across stacks (issue 15): fixed per-step costs, context parallel
(ring attention, causal imbalance, Ulysses all-to-all), the fused-attention backward,
DeepSpeed's partial overlap and the MoE permutation passes.

Each expectation is computed from the formula's own inputs (the synthetic device of
test_train_fakes.FakePerf, mocked at the GPU edge: no GPU here), never a stored result.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuplan.forecast import comm as comm_mod
from gpuplan.forecast.model import ModelArch
from gpuplan.forecast.training import (
    CAUSAL_TILE_ROWS,
    FLASH_ATTENTION_BWD_FLOPS_RATIO,
    UNFUSED_ATTENTION_BWD_FLOPS_RATIO,
    Framework,
    cp_causal_imbalance,
    default_constants,
    evaluate_layouts,
    layouts_from_dict,
    ring_attention_exposed,
    ulysses_all_to_all_bytes,
)

from .test_train_fakes import fake_hardware

ARCH = ModelArch(
    name="t",
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    ffn_hidden=14336,
    vocab=32000,
    attention="gqa",
)
MOE = ModelArch(
    name="moe",
    layers=24,
    hidden=2048,
    heads=32,
    kv_heads=4,
    ffn_hidden=6144,
    vocab=32000,
    attention="gqa",
    num_experts=128,
    top_k=8,
    moe_ffn_hidden=768,
)
BASE = dict(tp=2, pp=1, cp=1, ep=1, dp=4, vp=1, micro_batch=1, recompute=0, zero=1)


def run(layout=None, arch=ARCH, gbs=64, seq=4096, fw=None, hw=None):
    lay = layouts_from_dict({**BASE, **(layout or {})})
    return evaluate_layouts(
        arch,
        hw or fake_hardware(),
        lay,
        seq_len=seq,
        global_batch=gbs,
        precision="bf16",
        framework=fw or Framework(),
        constants=default_constants(),
        with_memory=False,
    )


@pytest.mark.parametrize(
    "layout",
    [
        {},
        {"tp": 1, "dp": 64, "zero": 3},
        {"tp": 8, "pp": 4, "dp": 16, "micro_batch": 1},
        {"tp": 1, "cp": 4, "dp": 16, "zero": 3, "recompute": 2},
    ],
)
def test_step_never_below_the_sum_of_exposed_fixed_costs(layout):
    """Small steps expose per-layer launch cost, the first ZeRO-3 gather, the grad-norm
    all-reduce and the optimizer pass; the step time can never be below their sum."""
    for gbs in (64, 1024):
        res = run(layout, gbs=gbs, seq=2048)
        fixed = sum(np.asarray(v) for v in res["fixed_costs_s"].values())
        assert np.all(res["step_time_s"] >= fixed * (1 - 1e-12))
        assert np.all(res["fixed_costs_s"]["grad_norm_all_reduce"] > 0)


def test_grad_norm_all_reduce_is_the_collective_latency_over_the_gradient_holders():
    hw = fake_hardware()
    res = run({"tp": 2, "dp": 8, "zero": 1}, hw=hw)
    world = 2 * 8
    expect = comm_mod.collective_time3(
        hw.perf,
        "all_reduce",
        np.array([4.0]),
        np.array([world]),
        ranks_per_node=np.array([min(hw.node_size, world)]),
        inter_node_bandwidth_bytes_per_s=hw.inter_node_bandwidth_bytes_per_s,
    )
    np.testing.assert_allclose(res["fixed_costs_s"]["grad_norm_all_reduce"], expect)
    # the optimizer breakdown carries it on top of the memory-bound Adam pass
    np.testing.assert_allclose(
        res["breakdown_s"]["optimizer"],
        res["fixed_costs_s"]["optimizer_step"] + expect,
    )


def test_ring_exposure_formula():
    # transfer 3, block 1, 5 ranks: 4 steps x 2 exposed; none when the block is longer
    assert float(ring_attention_exposed(3.0, 1.0, 5)) == pytest.approx(8.0)
    assert float(ring_attention_exposed(1.0, 3.0, 5)) == 0.0
    assert float(ring_attention_exposed(3.0, 1.0, 1)) == 0.0


def test_cp_ring_traffic_grows_with_seq_over_cp_as_the_formula_says():
    """Total ring traffic per micro-batch = p2p(K/V block of s/cp tokens) x (cp-1) x layers
    x 3 passes (forward K/V, backward K/V + dK/dV)."""
    hw = fake_hardware()
    kv_width = ARCH.n_kv_heads * (ARCH.qk_head_dim + ARCH.v_head_dim)
    totals = {}
    for seq, cp in ((32768, 4), (65536, 4), (65536, 8)):
        tp = 2
        res = run({"tp": tp, "cp": cp, "dp": 2}, seq=seq, gbs=8)
        tokens = seq / cp
        p2p = comm_mod.p2p_time3(
            hw.perf,
            np.array([tokens * kv_width * 2.0 / tp]),
            np.array([tp * cp <= hw.node_size]),
            inter_node_bandwidth_bytes_per_s=hw.inter_node_bandwidth_bytes_per_s,
        )
        m_micro = 8 / 2
        expect = m_micro * p2p * (cp - 1) * ARCH.layers * 3.0
        np.testing.assert_allclose(res["cp_comm_detail_s"]["total"], expect, rtol=1e-12)
        totals[(seq, cp)] = float(res["cp_comm_detail_s"]["total"][0, 0])
        assert np.all(res["cp_comm_detail_s"]["exposed"] <= res["cp_comm_detail_s"]["total"])
    # doubling the sequence at the same cp doubles the block bytes: more traffic
    assert totals[(65536, 4)] > totals[(32768, 4)]


def test_ring_exchange_hidden_once_block_attention_outlasts_it():
    """Attention per block grows with (s/cp)*s, the block transfer with s/cp: the exposed
    share of the ring traffic falls with the sequence length at a fixed cp."""
    slow_net = fake_hardware(nic=1e9)
    shares = []
    for seq in (8192, 32768, 131072):
        res = run({"tp": 8, "cp": 4, "dp": 1}, seq=seq, gbs=1, hw=slow_net)
        tot = float(res["cp_comm_detail_s"]["total"][0, 0])
        shares.append(float(res["cp_comm_detail_s"]["exposed"][0, 0]) / tot)
    assert shares[0] > shares[1] > shares[2]


def test_causal_imbalance_without_zig_zag():
    assert float(cp_causal_imbalance(4, False)) == pytest.approx(7.0 / 4.0)
    bal = run({"cp": 4, "dp": 1}, seq=32768, gbs=4)
    unbal = run({"cp": 4, "dp": 1}, seq=32768, gbs=4, fw=Framework(cp_load_balance=False))
    np.testing.assert_allclose(
        unbal["compute_detail_s"]["attention"],
        bal["compute_detail_s"]["attention"] * 7.0 / 4.0,
        rtol=1e-12,
    )


@pytest.mark.parametrize(
    ("flash", "ratio"),
    [(True, FLASH_ATTENTION_BWD_FLOPS_RATIO), (False, UNFUSED_ATTENTION_BWD_FLOPS_RATIO)],
)
def test_attention_backward_ratio(flash, ratio):
    """Attention time = forward x (1 + bwd ratio), plus one forward under recompute."""
    fw = Framework(flash_attention=flash)
    none = run({"recompute": 0}, fw=fw)["compute_detail_s"]["attention"]
    sel = run({"recompute": 1}, fw=fw)["compute_detail_s"]["attention"]
    np.testing.assert_allclose(sel / none, (2.0 + ratio) / (1.0 + ratio), rtol=1e-12)


def test_ulysses_all_to_all_matches_the_collective_model():
    hw = fake_hardware()
    tp, cp, seq, gbs, dp = 1, 8, 65536, 2, 1
    res = run({"tp": tp, "cp": cp, "dp": dp}, seq=seq, gbs=gbs, fw=Framework(cp_comm="a2a"))
    kv_width = ARCH.n_kv_heads * (ARCH.qk_head_dim + ARCH.v_head_dim)
    q_width = ARCH.heads * ARCH.qk_head_dim
    b = ulysses_all_to_all_bytes(seq / cp, q_width, kv_width) / tp
    a2a = comm_mod.collective_time3(
        hw.perf,
        "all_to_all",
        np.array([b]),
        np.array([float(cp)]),
        ranks_per_node=comm_mod.group_ranks_per_node(cp, tp, hw.node_size),
        inter_node_bandwidth_bytes_per_s=hw.inter_node_bandwidth_bytes_per_s,
    )
    expect = gbs / dp * a2a * ARCH.layers * 2.0  # forward and backward sets, not hidden
    np.testing.assert_allclose(res["breakdown_s"]["cp_comm"], expect, rtol=1e-12)
    with pytest.raises(Exception, match="cp_comm"):
        Framework(cp_comm="ring")


def test_deepspeed_exposes_gradient_reduction_but_prefetches_gathers():
    # compute-bound enough that the backward can hide the reduction (inside one node)
    lay = {"tp": 1, "dp": 8, "zero": 3, "micro_batch": 4}
    both = run(lay, fw=Framework())["breakdown_s"]["dp_comm_exposed"]
    gathers = run(lay, fw=Framework(grad_reduce_overlap=False))["breakdown_s"]["dp_comm_exposed"]
    none = run(lay, fw=Framework(dp_overlap=False))["breakdown_s"]["dp_comm_exposed"]
    assert np.all(both <= gathers) and np.all(gathers <= none)
    assert np.all(gathers > both)


def test_moe_permutation_bytes_grow_with_top_k():
    """Permute + unpermute read and write every routed copy (8 B x top_k x hidden per
    token), three passes (forward, two in the backward): the memory-bound time grows by at
    least that much per extra expert per token."""
    hw = fake_hardware()
    lay = {"tp": 1, "ep": 8, "dp": 8}
    times = {}
    for k in (2, 8):
        arch = dataclasses.replace(MOE, top_k=k)
        times[k] = run(lay, arch=arch, seq=4096, gbs=64)["compute_detail_s"]["memory_bound"]
    membw = comm_mod.estimate3(hw.perf.memory_bandwidth_bytes_per_s(None), rate=True)
    c = default_constants()
    tokens, m_micro = 4096.0, 64 / 8
    perm = 8.0 * (8 - 2) * MOE.hidden * tokens * MOE.num_moe_layers * 3.0
    floor = m_micro * c["nongemm_traffic_factor"] * perm / membw.reshape(3, 1)
    assert np.all(times[8] - times[2] >= floor * (1 - 1e-9))


def test_overlapped_dp_collectives_slow_the_compute_they_hide_behind():
    """Hidden DP collectives hold a share f of the SMs (dp_overlap_comm_sm_fraction): a
    compute-bound ZeRO-1 step exposes exactly f x (reduce-scatter + all-gather), the time
    the same step exposes with no overlap at all."""
    f = 0.2
    lay = {"tp": 1, "dp": 8, "zero": 1, "micro_batch": 4}
    c0 = {**default_constants(), "dp_overlap_comm_sm_fraction": 0.0}
    cf = {**default_constants(), "dp_overlap_comm_sm_fraction": f}

    def exposed(fw, c):
        lay_ = layouts_from_dict({**BASE, **lay})
        res = evaluate_layouts(
            ARCH,
            fake_hardware(),
            lay_,
            seq_len=4096,
            global_batch=64,
            precision="bf16",
            framework=fw,
            constants=c,
            with_memory=False,
        )
        return res["breakdown_s"]["dp_comm_exposed"]

    none = exposed(Framework(dp_overlap=False), c0)
    assert np.all(exposed(Framework(), c0) == 0.0)  # fully hidden without contention
    np.testing.assert_allclose(exposed(Framework(), cf), f * none, rtol=1e-12)


@pytest.mark.parametrize("seq", [512, 2048, 32768])
def test_causal_diagonal_tiles_cost_b_over_s(seq):
    """A fused causal kernel runs its diagonal tiles in full: attention time is 1 + B/s of
    the same model without the causal skip's tile overhead (a non-causal model), B = 128."""
    causal = run({}, seq=seq, gbs=8)["compute_detail_s"]["attention"]
    plain = run({}, arch=dataclasses.replace(ARCH, causal=False), seq=seq, gbs=8)
    np.testing.assert_allclose(
        causal / plain["compute_detail_s"]["attention"], 1.0 + CAUSAL_TILE_ROWS / seq, rtol=1e-12
    )
