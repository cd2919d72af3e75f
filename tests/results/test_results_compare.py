"""Comparing two runs: ratios per point and the significance rule."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest

from gpuplan.results.compare import compare_documents, significance
from gpuplan.results.schema import ResultDocument

V1 = Path(__file__).parent / "data" / "v1-cpu-quick.json"


def doc() -> dict:
    return json.loads(V1.read_text())


def scaled(data: dict, probe: str, factor: float, rng: random.Random | None = None) -> dict:
    """Copy of ``data`` where ``probe`` ran ``factor`` times faster (samples shrink)."""
    out = copy.deepcopy(data)
    out["run_id"] = "b" * 8 + out["run_id"][8:]
    for p in out["probes"]:
        if p["probe"] != probe:
            continue
        for m in p["measurements"]:
            m["samples_s"] = [
                s / factor * (1 + (rng.uniform(-1e-3, 1e-3) if rng else 0)) for s in m["samples_s"]
            ]
            m["median_s"] = m["min_s"] = m["max_s"] = m["iqr_s"] = None
            for key in ("flops_per_s", "bytes_per_s", "busbw_bytes_per_s", "algbw_bytes_per_s"):
                if key in m and m[key] is not None:
                    m[key] *= factor
            if "bw_samples_bytes_per_s" in m:
                m["bw_samples_bytes_per_s"] = [v * factor for v in m["bw_samples_bytes_per_s"]]
                m["bw_bytes_per_s"] *= factor
    return out


def test_a_run_against_itself_is_all_ratio_one_and_never_significant():
    a = ResultDocument.model_validate(doc())
    result = compare_documents(a, a)
    assert result["points"]
    assert all(pt["ratio"] == pytest.approx(1.0) for pt in result["points"])
    assert not any(pt["significant"] for pt in result["points"])
    assert {p["probe"] for p in result["probes"]} >= {"matmul", "membw", "collectives", "storage"}


def quiet(data: dict) -> dict:
    """Samples within 4 % of each other (a quiet machine), same medians."""
    out = copy.deepcopy(data)
    for p in out["probes"]:
        for m in p["measurements"]:
            if m.get("samples_s"):
                med = m["median_s"]
                m["samples_s"] = [med * (1 + 0.01 * i) for i in (-2, -1, 0, 1, 2)]
                m["min_s"] = m["max_s"] = m["iqr_s"] = None
    return out


def test_a_clearly_faster_matmul_is_significant_and_other_probes_are_not():
    a = ResultDocument.model_validate(quiet(doc()))
    b = ResultDocument.model_validate(scaled(quiet(doc()), "matmul", 1.5, random.Random(0)))
    result = compare_documents(a, b)
    matmul = [pt for pt in result["points"] if pt["probe"] == "matmul"]
    assert matmul and all(pt["ratio"] == pytest.approx(1.5, rel=1e-9) for pt in matmul)
    # 5 vs 5 fully separated samples: exact two-sided p = 2/252 < 0.05
    five = [pt for pt in matmul if pt["samples"] == [5, 5]]
    assert len(five) == len(matmul)
    assert all(pt["verdict"] == "faster" and pt["p_value"] == pytest.approx(2 / 252) for pt in five)
    summary = {(p["probe"], p["variant"]): p for p in result["probes"]}
    assert summary[("matmul", "float32 cpu")]["geomean_ratio"] == pytest.approx(1.5)
    others = [pt for pt in result["points"] if pt["probe"] != "matmul"]
    assert all(pt["verdict"] in ("same", "n/a") for pt in others)


def test_small_differences_within_the_spread_are_not_significant():
    rng = random.Random(42)
    a = [1.0 + rng.gauss(0, 0.05) for _ in range(10)]
    b = [1.005 + rng.gauss(0, 0.05) for _ in range(10)]
    assert significance(a, b) > 0.05
    assert significance([1.0] * 3, [2.0] * 3) is None  # too few samples to decide
    far = significance([1.0, 1.1, 0.9, 1.05], [2.0, 2.1, 1.9, 2.05])
    assert far == pytest.approx(2 / 70)  # exact two-sided p for 4 vs 4, fully separated


def test_points_only_in_one_run_are_listed():
    data = doc()
    other = copy.deepcopy(data)
    other["probes"] = [p for p in other["probes"] if p["probe"] != "storage"]
    result = compare_documents(
        ResultDocument.model_validate(data), ResultDocument.model_validate(other)
    )
    assert any("(storage)" in x for x in result["only_in_a"]) and result["only_in_b"] == []


def test_per_gpu_points_are_matched_gpu_by_gpu():
    """A per-GPU loop runs one shape on every GPU alone and on all at once: each GPU's point is
    compared with the same GPU's point of the other run, never with another GPU's."""
    data = doc()
    matmul = next(p for p in data["probes"] if p["probe"] == "matmul")
    base = matmul["measurements"][0]
    points = []
    for index in (0, 1):
        for concurrent in (False, True):
            m = copy.deepcopy(base)
            m.update(device_index=index, concurrent=concurrent)
            points.append(m)
    per_device = {
        **copy.deepcopy(matmul),
        "params": {**matmul["params"], "device": "cuda:all", "scope": "per_device"},
        "measurements": points,
    }
    data["probes"].append(per_device)
    b = copy.deepcopy(data)
    b["run_id"] = "b" * 8 + b["run_id"][8:]
    slow = next(p for p in b["probes"] if p["params"].get("scope") == "per_device")
    gpu1_alone = next(
        m for m in slow["measurements"] if m["device_index"] == 1 and not m["concurrent"]
    )
    gpu1_alone["flops_per_s"] *= 0.5
    result = compare_documents(
        ResultDocument.model_validate(data), ResultDocument.model_validate(b)
    )
    rows = {pt["point"]: pt["ratio"] for pt in result["points"] if "GPU" in pt["point"]}
    assert len(rows) == 4
    assert [label for label, r in rows.items() if r != pytest.approx(1.0)] == [
        next(label for label in rows if label.endswith("GPU 1"))
    ]
    assert rows[next(label for label in rows if label.endswith("GPU 1"))] == pytest.approx(0.5)
