"""Framework profiles of the training forecast (issue 15 item 5).

Every error figure asserted here is held out: each publication's rows are forecast with
their profile's constants fitted without that publication (the profile's own fit where the
other publications give it >= 10 rows, else the pooled fit). The figures are computed here
from the shipped table, never written in.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from gpuplan.forecast import training as tr
from gpuplan.forecast import validation_training as vt

from .test_train_fakes import fake_hardware


@pytest.fixture(scope="module")
def loso():
    return vt.validate(scheme="leave-one-source-out")


def test_targets_per_profile_and_overall(loso):
    profiles = loso["per_profile"]
    big = {k: v for k, v in profiles.items() if v["rows_forecast"] >= tr.MIN_PROFILE_ROWS}
    assert {"megatron", "fsdp"} <= set(big)  # the profiles with enough published rows
    for name, s in [*big.items(), ("overall", loso["overall"])]:
        assert s["median_abs_error"] <= 0.10, (name, s["median_abs_error"])
        assert s["p90_abs_error"] <= 0.25, (name, s["p90_abs_error"])
        assert s["interval_coverage"] >= 0.80, (name, s["interval_coverage"])
        assert s["coverage"] >= 0.95, (name, s["coverage"])


def test_rows_carry_their_framework_and_profile(loso):
    rows = {r["run_id"]: r for r in loso["rows"]}
    assert rows["nemo2407_LLAMA3-70B_64"]["framework"] == "nemo"
    assert rows["nemo2407_LLAMA3-70B_64"]["profile"] == "megatron"  # NeMo = Megatron-core
    assert rows["megatron21_t2_ZeRO-3_174.6B_384"]["profile"] == "deepspeed"
    assert rows["megatron21_t2_PTD_174.6B_384"]["profile"] == "megatron"
    assert rows["mpt_H10080GBBF_7b_2048_8_amp_bf16"]["profile"] == "fsdp"
    assert rows["fmsfsdp_llama2-70b_h100_96"]["framework"] == "pytorch-fsdp"
    # the held-out basis is stated per row, and it is the profile's own fit only with >= 10
    for r in loso["rows"]:
        basis = r["profile_basis"]
        n = int(basis.split("(")[1].split()[0])
        assert basis.startswith("fitted") == (n >= tr.MIN_PROFILE_ROWS), basis
    # a publication's rows never see its own rows in their fit
    fms = [r for r in loso["rows"] if r["run_id"].startswith("fmsfsdp_")]
    assert fms and all(r["profile_basis"] == "fitted (216 rows)" for r in fms)
    mosaic = [r for r in loso["rows"] if r["group"].startswith("MosaicML")]
    assert {r["profile_basis"] for r in mosaic} == {f"pooled ({len(fms)} rows < 10)"}


def test_every_row_has_a_framework_column():
    rows = vt.load_rows()
    assert all(r["framework"] in tr.PROFILE_OF_FRAMEWORK for r in rows)


def test_profile_fit_uses_only_its_rows():
    """A profile's constants change with its own rows and not with another profile's."""
    from gpuplan.catalogs import get_catalog

    hw = fake_hardware()
    ctx = vt.Context(catalog=None, hardware=lambda gpu: hw)
    cat = get_catalog()
    cfgs = [c for c in (vt.row_config(r, cat) for r in vt.load_rows()) if c.complete]
    mega = [c for c in cfgs if c.profile == "megatron"][:12]
    fsdp = [c for c in cfgs if c.profile == "fsdp"][::20][:12]
    layouts: dict = {}
    vt.choose_layouts(mega + fsdp, ctx, layouts, [])
    truth_m = {**vt.default_constants(), "gemm_time_factor": 1.1, "layer_overhead_s": 1e-4}
    truth_f = {**vt.default_constants(), "gemm_time_factor": 1.6, "layer_overhead_s": 1e-4}
    for group, truth in ((mega, truth_m), (fsdp, truth_f)):
        for cfg in group:
            cfg.published_step_time_s = float(
                vt.evaluate_row(cfg, hw, truth, layouts[cfg.run_id]).step3[0]
            )

    def evals_for(subset, c):
        return [vt.evaluate_row(cfg, hw, c, layouts[cfg.run_id]) for cfg in subset]

    start = {**vt.default_constants(), **{k: vt.FIT_BOUNDS[k][0] for k in vt.FIT_KEYS}}
    fits = vt.fit_profiles(mega + fsdp, evals_for, start, {"megatron", "fsdp", "maxtext"})
    assert fits["megatron"]["basis"] == "fitted (12 rows)"
    assert fits["megatron"]["constants"]["gemm_time_factor"] == pytest.approx(1.1, rel=0.03)
    assert fits["fsdp"]["constants"]["gemm_time_factor"] == pytest.approx(1.6, rel=0.03)
    # a profile without rows falls back to the pooled fit (between the two)
    assert fits["maxtext"]["basis"] == "pooled (0 rows < 10)"
    pooled = fits["maxtext"]["constants"]["gemm_time_factor"]
    assert 1.1 < pooled < 1.6


def test_shipped_profiles_have_provenance():
    c = tr.default_constants()
    profiles = c["profiles"]
    for name, entry in profiles.items():
        assert entry["rows"] > 0 and entry["sources"] and entry["fitted_at"], name
        fitted = entry["rows"] >= tr.MIN_PROFILE_ROWS
        assert all(k in entry for k in tr.PROFILE_FIT_KEYS) == fitted, name
        if fitted:
            for key, (lo, hi) in vt.FIT_BOUNDS.items():
                assert lo <= entry[key] <= hi
    assert profiles["megatron"]["frameworks"] == ["megatron", "nemo"]
    # top-level pooled keys stay for other readers
    for key in tr.PROFILE_FIT_KEYS:
        assert key in c


def test_profile_constants_selection():
    c = tr.default_constants()
    fitted, basis = tr.profile_constants(c, "nemo")
    assert basis == f"fitted ({c['profiles']['megatron']['rows']} rows)"
    assert fitted["gemm_time_factor"] == c["profiles"]["megatron"]["gemm_time_factor"]
    pooled, basis = tr.profile_constants(c, "maxtext")
    assert basis == "pooled (0 rows < 10)"
    assert pooled["gemm_time_factor"] == c["gemm_time_factor"]
    _, basis = tr.profile_constants(c, "deepspeed")
    assert basis == f"pooled ({c['profiles']['deepspeed']['rows']} rows < 10)"


@pytest.mark.parametrize(
    ("gpu_id", "generation", "par", "fsdp", "expected"),
    [
        ("tpu-v5p", "tpu-v5p", {}, False, "maxtext"),
        ("trainium2", "trainium2", {}, False, "neuronx"),
        ("h100-sxm5-80gb", "hopper", {}, True, "fsdp"),
        ("h100-sxm5-80gb", "hopper", {"zero": 3, "tp": 1, "pp": 1}, False, "fsdp"),
        ("h100-sxm5-80gb", "hopper", {"zero": 3, "tp": 2}, False, "megatron"),
        ("b200-sxm-180gb", "blackwell", {"tp": 8, "pp": 4}, False, "megatron"),
    ],
)
def test_default_framework(gpu_id, generation, par, fsdp, expected):
    hw = dataclasses.replace(fake_hardware(), gpu_id=gpu_id, generation=generation)
    assert tr.default_framework(hw, par, fsdp) == expected


def test_forecast_train_reports_framework(run_cli):
    args = ["forecast", "train", "--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "64"]
    base = json.loads(run_cli(*args, "--fsdp", "--format", "json").stdout)
    assert base["framework"] == "fsdp" and base["framework_basis"] == "default"
    assert base["profile_basis"].startswith("fitted")
    given = json.loads(
        run_cli(*args, "--fsdp", "--framework", "maxtext", "--format", "json").stdout
    )
    assert given["framework"] == "maxtext" and given["framework_basis"] == "given"
    assert given["profile_basis"] == "pooled (0 rows < 10)"
    # the profile's constants are used: the same layout, another step time
    assert given["parallelism"] == base["parallelism"]
    assert given["step_time_s"] != base["step_time_s"]
    nemo = json.loads(run_cli(*args, "--framework", "nemo", "--format", "json").stdout)
    assert nemo["framework_profile"] == "megatron"


def test_unknown_framework_is_one_line_exit_2(run_cli):
    res = run_cli(
        *("forecast", "train", "--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "8"),
        *("--framework", "jaxx"),
    )
    assert res.returncode == 2
    assert "unknown --framework 'jaxx'" in res.stderr and "megatron" in res.stderr
    assert "Traceback" not in res.stderr
