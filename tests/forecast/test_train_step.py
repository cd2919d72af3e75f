"""The step model on a synthetic device (test_train_fakes.FakePerf): hand-checked relations
and the invariants the issue asks for, with hypothesis.

The device is synthetic because these tests check the *formulas*; the shipped calibration is
exercised by test_train_validation.py and test_train_cli.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpuplan.errors import InputError
from gpuplan.forecast.model import ModelArch
from gpuplan.forecast.train import forecast_training
from gpuplan.forecast.training import (
    BREAKDOWN_KEYS,
    Framework,
    default_constants,
    evaluate_layouts,
    layouts_from_dict,
    memory_only,
)

from .test_train_cli import DESIGN_FIELDS
from .test_train_fakes import FakePerf, fake_hardware

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
BASE = dict(tp=2, pp=4, cp=1, ep=1, dp=4, vp=1, micro_batch=1, recompute=0, zero=1)


def run(layout=None, hw=None, arch=ARCH, gbs=64, seq=4096, precision="bf16", fw=None, c=None):
    hw = hw or fake_hardware()
    lay = layouts_from_dict({**BASE, **(layout or {})})
    return evaluate_layouts(
        arch,
        hw,
        lay,
        seq_len=seq,
        global_batch=gbs,
        precision=precision,
        framework=fw or Framework(),
        constants=c or default_constants(),
    )


def test_breakdown_sums_to_step_time_in_every_corner():
    res = run()
    total = sum(np.asarray(res["breakdown_s"][k]) for k in BREAKDOWN_KEYS)
    np.testing.assert_allclose(total, res["step_time_s"], rtol=1e-12)
    step = np.asarray(res["step_time_s"])[:, 0]
    assert step[1] < step[0] < step[2]  # [value, low, high]


def test_pipeline_bubble_matches_1f1b_formula():
    c = default_constants()
    for pp, vp, gbs, dp in [(4, 1, 64, 4), (4, 2, 64, 4), (8, 4, 256, 2)]:
        res = run({"pp": pp, "vp": vp, "dp": dp}, gbs=gbs, c=c)
        m = gbs / dp
        b = {k: float(np.asarray(v)[0, 0]) for k, v in res["breakdown_s"].items()}
        per_mb = (b["compute"] + b["tp_comm"] + b["cp_comm"] + b["ep_comm"]) / m
        # Narayanan et al. 2021: bubble time = (p-1)/v micro-batch times, i.e. a fraction
        # (p-1)/(m*v + p-1) of the pipelined part of the step.
        assert b["pp_bubble"] == pytest.approx((pp - 1) / vp * per_mb, rel=1e-9)
        pipelined = b["pp_bubble"] + per_mb * m
        assert b["pp_bubble"] / pipelined == pytest.approx((pp - 1) / (m * vp + pp - 1), rel=1e-9)
    no_pp = run({"pp": 1, "dp": 16})
    assert float(np.asarray(no_pp["breakdown_s"]["pp_bubble"])[0, 0]) == 0.0
    assert float(np.asarray(no_pp["breakdown_s"]["pp_comm"])[0, 0]) == 0.0


def test_tensor_parallel_inside_the_node_is_cheaper_than_across():
    hw = fake_hardware(node_size=8)
    inside = run({"tp": 8, "pp": 1, "dp": 4}, hw=hw)
    hw_small = fake_hardware(node_size=4)  # now TP=8 spans two scale-up domains
    across = run({"tp": 8, "pp": 1, "dp": 4}, hw=hw_small)
    t_in = float(np.asarray(inside["breakdown_s"]["tp_comm"])[0, 0])
    t_out = float(np.asarray(across["breakdown_s"]["tp_comm"])[0, 0])
    assert t_out > 3 * t_in > 0


def test_recompute_trades_time_for_memory():
    t = {}
    mem = {}
    for rc in (0, 1, 2):
        res = run({"recompute": rc})
        t[rc] = float(np.asarray(res["step_time_s"])[0, 0])
        mem[rc] = float(res["memory"]["activations"][0])
    assert t[0] < t[1] < t[2]
    assert mem[0] > mem[1] > mem[2]


def test_dp_overlap_hides_gradient_reduction():
    hw = fake_hardware(nic=5e9)  # slow scale-out so that the reduction matters
    on = run({"zero": 1}, hw=hw, fw=Framework(dp_overlap=True))
    off = run({"zero": 1}, hw=hw, fw=Framework(dp_overlap=False))
    e_on = float(np.asarray(on["breakdown_s"]["dp_comm_exposed"])[0, 0])
    e_off = float(np.asarray(off["breakdown_s"]["dp_comm_exposed"])[0, 0])
    assert 0 <= e_on < e_off


def test_zero3_gathers_every_micro_batch():
    # FSDP/ZeRO-3 all-gathers weights for every micro-batch: with no compute to hide it
    # behind (very slow network), exposed time grows with the number of micro-batches.
    hw = fake_hardware(nic=1e9, inter_busbw=1e9)
    few = run({"tp": 1, "pp": 1, "dp": 32, "zero": 3}, hw=hw, gbs=32)
    many = run({"tp": 1, "pp": 1, "dp": 32, "zero": 3}, hw=hw, gbs=128)
    e_few = float(np.asarray(few["breakdown_s"]["dp_comm_exposed"])[0, 0])
    e_many = float(np.asarray(many["breakdown_s"]["dp_comm_exposed"])[0, 0])
    assert e_many > 3 * e_few > 0


def _gemm_s(res):
    return float(np.asarray(res["compute_detail_s"]["gemm"])[0, 0])


def test_fp8_is_faster_than_bf16_for_gemm_bound_work():
    small_vocab = dataclasses.replace(ARCH, vocab=64)  # the output layer stays in bf16
    bf = run(precision="bf16", arch=small_vocab)
    f8 = run(precision="fp8", arch=small_vocab)
    g_bf, g_f8 = _gemm_s(bf), _gemm_s(f8)
    assert g_f8 == pytest.approx(g_bf / 2, rel=0.05)  # fake peak doubles, same efficiency curve
    # with a real vocabulary the output layer (bf16 in Megatron-core) keeps FP8 above half
    big = dataclasses.replace(ARCH, vocab=256000)
    assert _gemm_s(run(precision="fp8", arch=big)) > 0.52 * _gemm_s(run(precision="bf16", arch=big))
    bf, f8 = run(precision="bf16"), run(precision="fp8")
    # casts add memory traffic
    assert float(np.asarray(f8["compute_detail_s"]["memory_bound"])[0, 0]) > float(
        np.asarray(bf["compute_detail_s"]["memory_bound"])[0, 0]
    )


def test_moe_expert_parallel_all_to_all():
    moe = ModelArch(
        name="moe",
        layers=16,
        hidden=2048,
        heads=16,
        ffn_hidden=8192,
        vocab=32000,
        num_experts=16,
        top_k=2,
        moe_ffn_hidden=1024,
    )
    res1 = run({"tp": 1, "pp": 1, "dp": 16, "ep": 1}, arch=moe)
    res8 = run({"tp": 1, "pp": 1, "dp": 16, "ep": 8}, arch=moe)
    assert float(np.asarray(res1["breakdown_s"]["ep_comm"])[0, 0]) == 0.0
    assert float(np.asarray(res8["breakdown_s"]["ep_comm"])[0, 0]) > 0.0
    # expert weights spread over 8 ranks
    assert float(res8["memory"]["weights"][0]) < float(res1["memory"]["weights"][0]) / 3


def test_context_parallel_splits_activations_and_adds_ring_traffic():
    res1 = run({"cp": 1, "dp": 4}, seq=32768, gbs=16)
    res2 = run({"cp": 2, "dp": 2}, seq=32768, gbs=16)
    assert float(res2["memory"]["activations"][0]) < float(res1["memory"]["activations"][0])
    assert float(np.asarray(res1["breakdown_s"]["cp_comm"])[0, 0]) == 0.0


def test_summary_fields_and_mfu_definition():
    hw = fake_hardware()
    out = forecast_training(
        ARCH,
        num_gpus=32,
        seq_len=4096,
        global_batch=64,
        hardware=hw,
        parallelism=dict(BASE),
        tokens=1e12,
    )
    for key in DESIGN_FIELDS:
        assert key in out, key
    assert set(out["parallelism"]) >= {
        "tp",
        "pp",
        "dp",
        "cp",
        "ep",
        "vp",
        "micro_batch",
        "recompute",
        "zero",
    }
    assert set(out["breakdown_s"]) >= set(BREAKDOWN_KEYS)
    tokens_per_step = 64 * 4096
    assert out["tokens_per_s"] == pytest.approx(tokens_per_step / out["step_time_s"])
    flops = 6 * ARCH.matmul_params_active() + 12 * 32 * 4096 * 4096
    assert out["mfu"] == pytest.approx(flops * out["tokens_per_s"] / 32 / 1000e12)
    assert out["hfu"] == out["mfu"]  # no recompute
    assert out["time_to_train_s"] == pytest.approx(1e12 / out["tokens_per_s"])
    assert out["gpu_hours"] == pytest.approx(out["time_to_train_s"] * 32 / 3600)
    lo, hi = out["step_time_interval_s"]
    assert lo < out["step_time_s"] < hi
    tlo, thi = out["intervals"]["time_to_train_s"]
    assert tlo < out["time_to_train_s"] < thi


# ------------------------------------------------------------------ property tests
@st.composite
def configs(draw):
    heads = draw(st.sampled_from([8, 16, 32]))
    head_dim = draw(st.sampled_from([64, 128]))
    kv = draw(st.sampled_from([h for h in (1, 2, 4, 8, heads) if heads % h == 0]))
    layers = draw(st.sampled_from([4, 8, 12, 16, 24, 32]))
    arch = ModelArch(
        name="p",
        layers=layers,
        hidden=heads * head_dim,
        heads=heads,
        kv_heads=kv,
        ffn_hidden=draw(st.integers(1, 8)) * 512,
        vocab=draw(st.integers(1000, 150000)),
        gated_mlp=draw(st.booleans()),
    )
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if heads % t == 0]))
    pp = draw(st.sampled_from([p for p in (1, 2, 4) if layers % p == 0]))
    vp = draw(
        st.sampled_from([v for v in (1, 2) if (layers // pp) % v == 0 and (v == 1 or pp > 1)])
    )
    dp = draw(st.sampled_from([1, 2, 4, 8]))
    mb = draw(st.sampled_from([1, 2, 4]))
    m = draw(st.sampled_from([1, 2, 4, 8]))
    layout = dict(
        tp=tp,
        pp=pp,
        cp=1,
        ep=1,
        dp=dp,
        vp=vp,
        micro_batch=mb,
        recompute=draw(st.sampled_from([0, 1, 2])),
        zero=draw(st.sampled_from([0, 1] if pp > 1 else [0, 1, 2, 3])),
    )
    seq = draw(st.sampled_from([512, 2048, 8192]))
    return arch, layout, seq, dp * mb * m


PROPS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(configs(), st.floats(1.0, 4.0), st.floats(1.0, 4.0), st.floats(1.0, 4.0))
def test_more_flops_or_bandwidth_never_slows_a_step(cfg, f_flops, f_mem, f_net):
    arch, layout, seq, gbs = cfg
    slow = FakePerf()
    fast = dataclasses.replace(
        slow,
        peak={k: v * f_flops for k, v in slow.peak.items()},
        membw=slow.membw * f_mem,
        intra_busbw=slow.intra_busbw * f_net,
        inter_busbw=slow.inter_busbw * f_net,
    )
    hw_slow = fake_hardware()
    hw_fast = dataclasses.replace(hw_slow, perf=fast, inter_node_bandwidth_bytes_per_s=50e9 * f_net)
    hw_slow = dataclasses.replace(hw_slow, perf=slow)
    a = run(layout, hw=hw_slow, arch=arch, gbs=gbs, seq=seq)
    b = run(layout, hw=hw_fast, arch=arch, gbs=gbs, seq=seq)
    assert np.all(np.asarray(b["step_time_s"]) <= np.asarray(a["step_time_s"]) * (1 + 1e-12))


MEMORY_EDGE = (
    ModelArch(name="e", layers=4, hidden=512, heads=8, ffn_hidden=2048, vocab=1000),
    dict(tp=1, pp=1, cp=1, ep=1, dp=1, vp=1, micro_batch=1, recompute=0, zero=2),
    512,
    4,
)


@PROPS
@given(configs(), st.sampled_from(["tp", "pp", "zero"]))
@example(MEMORY_EDGE, "zero")
@example((MEMORY_EDGE[0], {**MEMORY_EDGE[1], "dp": 2}, 512, 4), "zero")
def test_memory_never_grows_with_more_sharding(cfg, knob):
    arch, layout, seq, gbs = cfg
    hw = fake_hardware()
    more = dict(layout)
    if knob == "tp":
        if arch.heads % (layout["tp"] * 2):
            return
        more["tp"] = layout["tp"] * 2
    elif knob == "pp":
        if arch.layers % (layout["pp"] * 2) or layout["vp"] != 1:
            # Interleaving keeps 1 + (p-1)/(p*v) stages of activations (Korthikanti et al.
            # 2022, 4.2.3), which can grow with p: only the non-interleaved schedule is
            # monotone.
            return
        more["pp"] = layout["pp"] * 2
        if more["zero"] > 1:
            return
    else:
        if layout["zero"] == 3 or (layout["pp"] > 1 and layout["zero"] >= 1):
            return
        more["zero"] = layout["zero"] + 1
    kw = dict(seq_len=seq, global_batch=gbs, framework=Framework(), constants=default_constants())
    m0 = memory_only(arch, hw, layouts_from_dict(layout), **kw)["total"][0]
    m1 = memory_only(arch, hw, layouts_from_dict(more), **kw)["total"][0]
    assert m1 <= m0 * (1 + 1e-12)


@PROPS
@given(configs(), st.sampled_from(["bf16", "fp8"]))
def test_mfu_never_exceeds_one(cfg, precision):
    arch, layout, seq, gbs = cfg
    # A device that reaches its peak at every shape, with free memory and network: the
    # most favourable case for MFU.
    perf = FakePerf(
        gemm_eff=1.0,
        gemm_knee=1e-9,
        membw=1e18,
        intra_busbw=1e18,
        inter_busbw=1e18,
        alpha_s=0.0,
        rel_band=0.0,
    )
    hw = dataclasses.replace(fake_hardware(), perf=perf, inter_node_bandwidth_bytes_per_s=1e18)
    n = layout["tp"] * layout["pp"] * layout["dp"]
    out = forecast_training(
        arch,
        num_gpus=n,
        seq_len=seq,
        global_batch=gbs,
        hardware=hw,
        parallelism=layout,
        precision=precision,
    )
    assert 0 < out["mfu"] <= 1.0
    assert out["mfu"] <= out["hfu"] <= 1.0 + 1e-12
    assert max(out["intervals"]["mfu"]) <= 1.0


FP4_PEAKS = {"bf16": 1000e12, "fp16": 1000e12, "fp8": 2000e12, "fp4": 4000e12, "int8": 2000e12}


def test_fp4_runs_most_linear_layers_at_the_fp4_peak():
    """NVFP4 recipe (arXiv 2509.25149): 16% of the linear layers stay in bf16, the rest run at
    the fp4 peak on the fp8 efficiency curve. Hand-computed: 0.84 / 4 + 0.16 / 1 = 0.37 of
    the bf16 GEMM time (tiny vocabulary, so the bf16 output layer does not count)."""
    hw = fake_hardware(peak=dict(FP4_PEAKS))
    small_vocab = dataclasses.replace(ARCH, vocab=64)
    g_bf = _gemm_s(run(precision="bf16", arch=small_vocab, hw=hw))
    g_f4 = _gemm_s(run(precision="fp4", arch=small_vocab, hw=hw))
    assert g_f4 == pytest.approx(0.37 * g_bf, rel=0.03)
    g_i8 = _gemm_s(run(precision="int8", arch=small_vocab, hw=hw))
    assert g_i8 == pytest.approx(0.5 * g_bf, rel=0.03)  # bf16 curve x int8/bf16 peak


def test_fp4_mfu_is_against_the_fp4_peak():
    hw = fake_hardware(peak=dict(FP4_PEAKS))
    kw = dict(
        model=ARCH, num_gpus=32, seq_len=4096, global_batch=64, hardware=hw, parallelism=dict(BASE)
    )
    f4 = forecast_training(precision="fp4", **kw)
    bf = forecast_training(precision="bf16", **kw)
    # same model FLOPs: MFU ratio = (step_bf / step_f4) * (peak_bf / peak_f4)
    expected = bf["mfu"] * bf["step_time_s"] / f4["step_time_s"] / 4.0
    assert f4["mfu"] == pytest.approx(expected, rel=1e-9)
    assert f4["precision"] == "fp4"


@pytest.mark.parametrize("precision", ["fp4", "mxfp8"])
def test_precision_the_chip_lacks_names_what_it_has(precision):
    hw = fake_hardware()  # bf16, fp16, fp8, fp32: no fp4 tensor cores
    with pytest.raises(
        InputError,
        match=rf"no dense fp4 peak.*--precision {precision}.*"
        r"it has bf16, fp16, fp8",
    ):
        forecast_training(
            ARCH,
            num_gpus=32,
            seq_len=4096,
            global_batch=64,
            hardware=hw,
            precision=precision,
            parallelism=dict(BASE),
        )


def test_unknown_precision_lists_the_known_ones():
    with pytest.raises(InputError, match="unknown precision 'fp3'") as err:
        forecast_training(
            ARCH,
            num_gpus=32,
            seq_len=4096,
            global_batch=64,
            hardware=fake_hardware(),
            precision="fp3",
            parallelism=dict(BASE),
        )
    assert "mxfp8" in str(err.value.hint) and "int8" in str(err.value.hint)
