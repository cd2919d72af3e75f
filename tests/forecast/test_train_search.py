"""Layout search, cluster sizing and bad input (synthetic device, see test_train_fakes)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.model import ModelArch
from gpuplan.forecast.search import best_layouts, enumerate_layouts, smallest_cluster
from gpuplan.forecast.train import forecast_training
from gpuplan.forecast.training import (
    LAYOUT_KEYS,
    Framework,
    default_constants,
    evaluate_layouts,
    layouts_from_dict,
    memory_only,
)

from .test_train_fakes import fake_hardware

ARCH = ModelArch(
    name="s",
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    ffn_hidden=14336,
    vocab=32000,
    attention="gqa",
)
KW = dict(
    seq_len=4096,
    global_batch=256,
    precision="bf16",
    framework=Framework(),
    constants=default_constants(),
)


def test_enumeration_hand_count():
    small = ModelArch(name="x", layers=4, hidden=512, heads=8, ffn_hidden=2048, vocab=1000)
    fixed = dict(recompute=0, zero=1, micro_batch=1, cp=1, vp=1)
    lay = enumerate_layouts(small, 8, fixed, seq_len=512, global_batch=8, node_size=8)
    got = sorted(zip(lay["tp"].tolist(), lay["pp"].tolist(), lay["dp"].tolist(), strict=True))
    # pp: divisors of 4, or of 4 + 2 = 6 (embedding and loss as layers) leaving >= 2 per
    # stage: {1, 2, 3, 4}; pp = 3 does not divide 8 GPUs.
    assert got == [
        (1, 1, 8),
        (1, 2, 4),
        (1, 4, 2),
        (2, 1, 4),
        (2, 2, 2),
        (2, 4, 1),
        (4, 1, 2),
        (4, 2, 1),
        (8, 1, 1),
    ]


def test_enumerated_layouts_are_all_valid():
    lay = enumerate_layouts(ARCH, 64, {}, seq_len=4096, global_batch=256, node_size=8)
    n = lay["tp"].size
    assert n > 500
    assert np.all(lay["tp"] * lay["pp"] * lay["cp"] * lay["dp"] == 64)
    assert np.all(ARCH.heads % lay["tp"] == 0)
    assert np.all(256 % (lay["dp"] * lay["micro_batch"]) == 0)
    assert np.all((lay["zero"] <= 1) | (lay["pp"] == 1))
    assert np.all((lay["vp"] == 1) | (lay["pp"] > 1))
    assert np.all(lay["tp"] <= 8)  # search keeps TP inside the scale-up domain
    assert len({tuple(int(lay[k][i]) for k in LAYOUT_KEYS) for i in range(n)}) == n


def test_best_layout_is_the_fastest_fitting_one():
    hw = fake_hardware(memory_bytes=40e9)
    best = best_layouts(ARCH, hw, 64, {}, top=5, **KW)
    lay = enumerate_layouts(ARCH, 64, {}, seq_len=4096, global_batch=256, node_size=8)
    mem = memory_only(
        ARCH,
        hw,
        lay,
        seq_len=4096,
        global_batch=256,
        framework=KW["framework"],
        constants=KW["constants"],
    )
    fits = mem["total"] <= hw.memory_bytes
    assert 0 < fits.sum() < fits.size  # the memory limit prunes some layouts, not all
    res = evaluate_layouts(ARCH, hw, lay, **KW)
    step = np.asarray(res["step_time_s"])[0]
    assert best["step_time_s"] == pytest.approx(float(step[fits].min()))
    assert best["fits_in_memory"] and best["memory_per_gpu_bytes"] <= 40e9
    ups = [r["step_time_s"] for r in best["runners_up"]]
    assert len(ups) == 4 and ups == sorted(ups) and ups[0] >= best["step_time_s"]
    assert all(r["fits_in_memory"] for r in best["runners_up"])


def test_nothing_fits_names_memory_and_fix():
    hw = fake_hardware(memory_bytes=2e9)
    with pytest.raises(InputError, match=r"does not fit on 8 x fake-gpu.*GiB per GPU"):
        best_layouts(ARCH, hw, 8, {}, **KW)


def test_fixed_layout_that_does_not_fit_says_what_would():
    hw = fake_hardware(memory_bytes=60e9)
    par = dict(tp=1, pp=1, cp=1, ep=1, vp=1, micro_batch=4, recompute=0, zero=3)
    out = best_layouts(ARCH, hw, 8, par, **KW)
    assert out["fits_in_memory"] is False
    assert out["to_fit"]
    assert any(s.startswith("--recompute full") for s in out["to_fit"])
    assert any(s.startswith("--micro-batch 1") for s in out["to_fit"])
    # every suggestion really fits
    for s in out["to_fit"]:
        flag, value = s.split(" (")[0].split()
        key = flag[2:].replace("-", "_")
        changed = dict(par, dp=8)
        if key == "recompute":
            changed["recompute"] = 2
        elif key in ("tp", "pp", "cp"):
            changed[key] = int(value)
            changed["dp"] = 8 // int(value)
        else:
            changed[key] = int(value)
        mem = memory_only(
            ARCH,
            hw,
            layouts_from_dict(changed),
            seq_len=4096,
            global_batch=256,
            framework=KW["framework"],
            constants=KW["constants"],
        )
        assert float(mem["total"][0]) <= hw.memory_bytes, s


def test_smallest_cluster_is_the_smallest_of_every_size():
    """Scan every multiple of the cluster unit below the answer with the full search: none
    meets the date (sizes with no layout at all raise or do not fit)."""
    hw = fake_hardware()
    tokens, target_s = 1e11, 2 * 86400
    out = smallest_cluster(ARCH, hw, {}, tokens=tokens, target_days=2.0, top=1, **KW)
    n = out["num_gpus"]
    assert n % 8 == 0
    assert out["time_to_train_s"] <= target_s
    assert out["gpu_hours"] == pytest.approx(out["time_to_train_s"] * n / 3600)
    assert out["gpus_vs_days"][-1] == [n, pytest.approx(out["time_to_train_s"] / 86400)]
    for m in range(8, n, 8):
        try:
            smaller = best_layouts(
                ARCH, hw, m, {}, raise_if_none_fits=False, round_batch=False, **KW
            )
        except InputError:  # no valid layout at all on m GPUs with this batch
            continue
        if smaller.get("fits_in_memory"):
            assert tokens / smaller["tokens_per_s"] > target_s, m
    # a looser deadline never needs more GPUs
    loose = smallest_cluster(ARCH, hw, {}, tokens=tokens, target_days=8.0, top=1, **KW)
    assert loose["num_gpus"] <= n


def test_sizing_starts_at_the_flop_lower_bound():
    from gpuplan.forecast.model import model_flops_per_token
    from gpuplan.forecast.search import flops_lower_bound_gpus

    hw = fake_hardware()
    tokens, target_s = 1e11, 2 * 86400
    low = flops_lower_bound_gpus(
        ARCH, hw, tokens=tokens, target_s=target_s, seq_len=4096, precision="bf16"
    )
    need = tokens * float(model_flops_per_token(ARCH, 4096)) / (1000e12 * target_s)
    assert low == int(need)  # fake peak 1000 TFLOP/s
    out = smallest_cluster(ARCH, hw, {}, tokens=tokens, target_days=2.0, top=1, **KW)
    assert min(out["cluster_sizes_evaluated"]) >= low


@pytest.mark.parametrize(("gpu", "unit"), [("gb200", 4), ("tpu-v5p", 64)])
def test_rack_and_slice_chips_are_sized(gpu, unit):
    out = forecast_training(
        "llama3.1-70b", gpu, None, seq_len=8192, global_batch=2048, tokens=2e12, target_days=30
    )
    assert out["num_gpus"] % unit == 0 and out["cluster_unit"] == unit
    assert out["time_to_train_s"] <= 30 * 86400
    fixed = forecast_training(
        "llama3.1-70b", gpu, out["num_gpus"], seq_len=8192, global_batch=2048, tokens=2e12
    )
    assert fixed["time_to_train_s"] == pytest.approx(out["time_to_train_s"], rel=1e-9)


def test_unreachable_date_names_the_divisibility():
    with pytest.raises(InputError, match="no cluster") as err:
        forecast_training(
            ARCH,
            None,
            seq_len=4096,
            global_batch=1953,
            tokens=1e15,
            target_days=0.01,
            hardware=fake_hardware(),
        )
    assert "1953 = 3^2 x 7 x 31" in str(err.value.hint)


def test_forecast_training_with_target_days_returns_num_gpus():
    out = forecast_training(
        ARCH,
        num_gpus=None,
        seq_len=4096,
        global_batch=256,
        tokens=1e11,
        target_days=3,
        hardware=fake_hardware(),
    )
    assert out["num_gpus"] > 0 and out["time_to_train_s"] <= 3 * 86400
    assert out["target_days"] == 3.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(num_gpus=64, parallelism=dict(tp=8, pp=3)), "do not divide|does not divide"),
        (dict(num_gpus=64, parallelism=dict(tp=8, pp=2, cp=1, dp=3)), "does not divide"),
        (dict(num_gpus=48, parallelism=dict(tp=3)), "heads \\(32\\) are not divisible by --tp 3"),
        (dict(num_gpus=66, parallelism=dict(pp=33)), "32 layers cannot be split over --pp 33"),
        (dict(num_gpus=64, parallelism=dict(ep=2)), "--ep 2 needs a mixture-of-experts model"),
        (dict(num_gpus=64, parallelism=dict(recompute="some")), "unknown --recompute 'some'"),
        (dict(num_gpus=0), "--gpus must be >= 1"),
        (dict(num_gpus=-8), "--gpus must be >= 1"),
        (dict(num_gpus=8, seq_len=0), "--seq-len must be >= 1"),
        (dict(num_gpus=8, global_batch=0), "--global-batch must be >= 1"),
        (
            dict(num_gpus=8, global_batch=None, global_batch_tokens=-5.0),
            "--global-batch-tokens must be positive",
        ),
        (dict(num_gpus=8, tokens=0.0), "--tokens must be positive"),
        (dict(num_gpus=None, target_days=10), "--target-days needs --tokens"),
        (dict(num_gpus=None), "give --gpus N"),
        (dict(num_gpus=8, precision="fp3"), "unknown precision 'fp3'"),
        (dict(num_gpus=8, top=0), "--top must be >= 1"),
    ],
)
def test_bad_input_is_one_line_error(kwargs, message):
    kw = dict(seq_len=4096, global_batch=256, hardware=fake_hardware())
    kw.update(kwargs)
    with pytest.raises(InputError, match=message) as info:
        forecast_training(ARCH, **kw)
    assert "\n" not in info.value.one_line()


def test_full_layout_checks_product_and_batch():
    par = dict(tp=8, pp=2, cp=1, ep=1, vp=1, micro_batch=1, recompute=0, zero=1)
    with pytest.raises(InputError, match="does not divide --gpus 24"):
        forecast_training(
            ARCH,
            num_gpus=24,
            seq_len=4096,
            global_batch=256,
            parallelism=par,
            hardware=fake_hardware(),
        )
    with pytest.raises(InputError, match=r"global batch \(102 sequences\) is not divisible"):
        forecast_training(
            ARCH,
            num_gpus=64,
            seq_len=4096,
            global_batch=102,
            parallelism=par,
            hardware=fake_hardware(),
        )
    with pytest.raises(InputError, match="ZeRO stage 3 with pipeline"):
        forecast_training(
            ARCH,
            num_gpus=64,
            seq_len=4096,
            global_batch=256,
            parallelism=dict(par, zero=3),
            hardware=fake_hardware(),
        )


def test_precision_without_peak_is_refused():
    hw = fake_hardware()
    perf = dataclasses.replace(hw.perf, peak={"bf16": 1e15})
    with pytest.raises(InputError, match="no dense fp8 peak"):
        forecast_training(
            ARCH,
            num_gpus=8,
            seq_len=4096,
            global_batch=64,
            precision="fp8",
            hardware=dataclasses.replace(hw, perf=perf),
        )


def test_moe_search_uses_expert_parallelism():
    moe = ModelArch(
        name="moe",
        layers=16,
        hidden=2048,
        heads=16,
        kv_heads=4,
        ffn_hidden=8192,
        vocab=32000,
        num_experts=64,
        top_k=4,
        moe_ffn_hidden=1024,
        attention="gqa",
    )
    out = forecast_training(
        moe, num_gpus=64, seq_len=4096, global_batch=512, hardware=fake_hardware(memory_bytes=20e9)
    )
    p = out["parallelism"]
    assert p["tp"] * p["pp"] * p["cp"] * p["dp"] == 64
    assert 64 % p["ep"] == 0 and (p["dp"] * p["cp"]) % p["ep"] == 0
    assert out["fits_in_memory"]


def test_fsdp_means_zero3_without_pipeline():
    out = forecast_training(
        ARCH, num_gpus=16, seq_len=4096, global_batch=64, fsdp=True, hardware=fake_hardware()
    )
    assert out["parallelism"]["zero"] == 3 and out["parallelism"]["pp"] == 1
    assert out["parallelism"]["fsdp"] is True
    with pytest.raises(InputError, match="--fsdp cannot be combined with --pp") as err:
        forecast_training(
            ARCH,
            num_gpus=16,
            seq_len=4096,
            global_batch=64,
            fsdp=True,
            parallelism=dict(pp=2),
            hardware=fake_hardware(),
        )
    # the hint names the spelling that runs: FSDP2 without resharding after the forward
    assert "--zero 2 --pp N" in err.value.hint
    staged = forecast_training(
        ARCH,
        num_gpus=16,
        seq_len=4096,
        global_batch=64,
        parallelism=dict(pp=2, zero=2),
        hardware=fake_hardware(),
    )
    assert staged["parallelism"]["pp"] == 2 and staged["parallelism"]["zero"] == 2


def test_batch_no_layout_divides_is_rounded_and_said():
    # 1953 sequences (= 3^2 x 7 x 31) on 184 GPUs (= 8 x 23): no data-parallel size divides
    out = forecast_training(
        ARCH, num_gpus=184, seq_len=4096, global_batch=1953, hardware=fake_hardware()
    )
    dp, mb = out["parallelism"]["dp"], out["parallelism"]["micro_batch"]
    assert out["global_batch"] != 1953 and out["global_batch"] % (dp * mb) == 0
    assert abs(out["global_batch"] - 1953) <= dp * mb
    assert out["global_batch_rounded_from"] == 1953
    assert "rounded from 1953" in out["notes"][0]
    assert out["tokens_per_s"] == pytest.approx(out["global_batch"] * 4096 / out["step_time_s"])


def test_odd_pipeline_sizes_are_searched():
    # 88 GPUs = 8 x 11: 32 layers on 11 stages (3 | 3 x 9 | 2) is a valid uneven split
    out = forecast_training(
        ARCH,
        num_gpus=88,
        seq_len=4096,
        global_batch=64,
        parallelism=dict(tp=8, pp=11),
        hardware=fake_hardware(),
    )
    assert out["parallelism"]["pp"] == 11 and out["parallelism"]["dp"] == 1
