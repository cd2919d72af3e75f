"""Deadline sizing on rack-scale systems reports the racks to buy (issue 15.8).

A GB200 NVL72 cluster is scanned in compute trays (4 GPUs: a job may leave part of its last
rack idle) but bought in NVL72 racks; the answer names how many racks, and no size that
needs fewer racks meets the date.
"""

from __future__ import annotations

import math

from gpuplan.catalogs import get_catalog
from gpuplan.forecast.train import forecast_training


def test_gb200_deadline_answer_is_in_racks():
    rack = get_catalog().gpu("gb200").purchase_unit
    out = forecast_training(
        "llama3.1-70b", "gb200", None, seq_len=8192, global_batch=2048, tokens=2e12, target_days=20
    )
    assert out["purchase_unit"] == rack
    assert out["purchase_units"] == math.ceil(out["num_gpus"] / rack)
    assert out["gpus_purchased"] == out["purchase_units"] * rack
    assert out["gpus_idle"] == out["gpus_purchased"] - out["num_gpus"]
    # every evaluated size that needs fewer racks misses the date (or has no layout)
    for n, days in out["gpus_vs_days"]:
        if math.ceil(n / rack) < out["purchase_units"]:
            assert days is None or days > 20


def test_hgx_nodes_are_bought_as_the_nodes_scanned():
    out = forecast_training(
        "llama3.1-8b", "h100", None, seq_len=8192, global_batch=1024, tokens=1e12, target_days=10
    )
    assert out["purchase_unit"] == out["cluster_unit"] == 8
    assert out["gpus_idle"] == 0 and out["gpus_purchased"] == out["num_gpus"]
