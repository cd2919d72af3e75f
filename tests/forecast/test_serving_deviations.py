"""Known serving deviations (``data/serving_deviations.yaml``): every measured figure is what
the validator says on its shipped table, and a matching forecast says its caveat."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.forecast.inference import forecast_inference
from gpuplan.forecast.serving_deviations import serving_caveats, serving_deviations
from gpuplan.forecast.validation_inference import DATA_DIR, validate_sweeps


def _matching_rows(dev, tmp_path):
    """The rows of the entry's table that the entry covers, as a CSV of their own."""
    cat = get_catalog()
    with (DATA_DIR / dev.measured.table).open(newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames
        rows = []
        for r in reader:
            if r["engine"] != dev.measured.engine:
                continue
            m = cat.model(r["model"])
            if dev.matches(cat.gpu(r["gpu_type"]).id, m.attention, m.num_experts):
                rows.append(r)
    path = tmp_path / dev.measured.table
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return path, len(rows)


@pytest.mark.parametrize("dev", serving_deviations(), ids=lambda d: d.id)
def test_measured_figures_are_what_the_validator_says(dev, tmp_path):
    path, n = _matching_rows(dev, tmp_path)
    assert n == dev.measured.rows
    got = validate_sweeps(path)["rows"]
    assert len(got) == n
    thr = np.array(
        [r["metrics"]["throughput"]["forecast_s"] / r["metrics"]["throughput"]["published_s"]
         for r in got]
    )  # fmt: skip
    tpot = np.array(
        [r["metrics"]["tpot_median"]["published_s"] / r["metrics"]["tpot_median"]["forecast_s"]
         for r in got]
    )  # fmt: skip
    for want, arr in ((dev.measured.throughput_ratio, thr), (dev.measured.tpot_ratio, tpot)):
        assert (want.min, want.median, want.max) == pytest.approx(
            (arr.min(), float(np.median(arr)), arr.max()), abs=0.005
        )
    # every covered run was slower than forecast: the caveat's claim
    assert thr.min() > 1 and tpot.min() > 1


def test_the_corroborating_ratio_is_what_the_forecast_gives():
    """The paper's pair (DeepSeek V3.2 against Llama-3.1-405B on 8 MI325X) as the caveat
    words it: this forecast gives the MoE model 1.76x the dense one's output tokens/s."""
    kw = dict(gpu="mi325x", precision="fp8", tp=8, batch=100, input_tokens=2048,
              output_tokens=512, engine="vllm@0.8.4")  # fmt: skip
    moe = forecast_inference("deepseek-v3.2", **kw)["throughput_output_tokens_per_s"]
    dense = forecast_inference("llama3.1-405b", **kw)["throughput_output_tokens_per_s"]
    assert "1.76x" in serving_deviations()[0].corroboration
    assert moe / dense == pytest.approx(1.76, abs=0.005)


def test_which_forecasts_carry_the_caveat():
    assert serving_caveats(["mi300x"], "mla", 256)
    assert serving_caveats(["h200-sxm-141gb", "mi325x"], "mla", 256)
    assert "(mi325x)" in serving_caveats(["h200-sxm-141gb", "mi325x"], "mla", 256)[0]
    assert not serving_caveats(["h200-sxm-141gb"], "mla", 256)
    assert not serving_caveats(["mi355x"], "mla", 256)  # CDNA4 rows are within the error
    assert not serving_caveats(["mi300x"], "gqa", 0)  # dense Llama: no evidence either way


def test_forecast_infer_says_the_caveat(run_cli):
    base = ("forecast", "infer", "--precision", "fp8", "--tp", "8", "--format", "json")
    p = run_cli(*base, "--model", "deepseek-r1", "--gpu", "mi300x")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert len(out["caveats"]) == 1 and "ran slower" in p.stderr
    assert "gpuplan probe --workload serve" in out["caveats"][0]
    p = run_cli(*base, "--model", "deepseek-r1", "--gpu", "h200")
    assert p.returncode == 0 and "caveats" not in json.loads(p.stdout)
    assert "ran slower" not in p.stderr


def test_the_users_own_serving_calibration_replaces_the_caveat():
    """A serve-probe calibration of the engine on MI325X (an artifact as ``gpuplan calibrate``
    writes it) replaces the shipped constants there: no caveat for MI325X, one still for the
    uncalibrated MI300X compared beside it."""
    from gpuplan.forecast.inference import ServingDemand, size_serving_fleet
    from gpuplan.forecast.serving import LengthDist

    from .test_serving_calibrated_fleet import calibrated_artifact

    art = calibrated_artifact(1.5, 1.5, gpu="mi325x", engine="sglang@0.5")
    kw = dict(tp=8, precision="fp8", engine="sglang@0.5", input_tokens=1024, output_tokens=1024)
    calibrated = forecast_inference("deepseek-v3", "mi325x", artifact=art, **kw)
    assert calibrated.get("serving_calibration") and "caveats" not in calibrated
    assert forecast_inference("deepseek-v3", "mi325x", **kw)["caveats"]
    demand = ServingDemand(
        model="deepseek-v3", gpus=("mi325x", "mi300x"), qps=1, inputs=LengthDist(1024.0),
        outputs=LengthDist(256.0), precision="fp8", engine="sglang@0.5", num_requests=300,
    )  # fmt: skip
    said = size_serving_fleet(demand, artifact=art).as_dict()["caveats"]
    assert len(said) == 1 and "(mi300x)" in said[0]
