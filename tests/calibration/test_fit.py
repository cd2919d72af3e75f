"""calibrate_documents: the artifact contract, determinism, overrides and input errors."""

from __future__ import annotations

import copy
import json
import math

import pytest

from gpuplan.calibration.artifact import (
    artifact_differences,
    artifact_text,
    default_artifact_path,
)
from gpuplan.calibration.fit import calibrate_documents
from gpuplan.errors import InputError
from tests.calibration.conftest import make_doc

SUMMARY_QUANTITIES = (
    "matmul_bf16_flops_per_s",
    "memory_bandwidth_bytes_per_s",
    "h2d_bandwidth_bytes_per_s",
    "d2h_bandwidth_bytes_per_s",
    "allreduce_busbw_bytes_per_s",
)


def _matmul_probe(dtype: str, points: list[tuple[int, int, int, float]], version: int = 1) -> dict:
    return {
        "probe": "matmul",
        "probe_version": version,
        "status": "ok",
        "params": {"dtype": dtype, "device": "cuda:0"},
        "measurements": [
            {"shape": {"m": m, "n": n, "k": k}, "flops_per_s": f, "samples_s": [], "correct": True}
            for m, n, k, f in points
        ],
    }


H100 = [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0"}]


def test_artifact_follows_design_3_2(reference_artifact, catalog):
    a = reference_artifact
    for key in (
        "artifact_version",
        "created_at",
        "gpuplan_version",
        "sklearn_version",
        "training_data_sha256",
        "inputs",
        "models",
        "devices",
    ):
        assert key in a
    assert a["artifact_version"] == 1 and len(a["training_data_sha256"]) == 64
    # one input per published reference document
    from gpuplan.calibration.reference import build_reference_documents, read_microbench

    assert len(a["inputs"]) == len(build_reference_documents(read_microbench(), catalog=catalog)[0])
    for model in a["models"].values():
        assert model["estimator"].startswith("gpuplan.calibration.estimators.")
        assert {"params", "coefficients", "feature_names", "cv"} <= set(model)
        assert model["cv"]["scheme"] == "group k-fold by machine"
        assert "mape" in model["cv"]
    # held-out error exists where several machines measured the quantity
    assert a["models"]["matmul_bf16"]["cv"]["mape"] < 0.25
    assert a["models"]["collective_all_reduce_intra"]["cv"]["n_machines"] >= 5
    h100 = a["devices"]["h100-sxm5-80gb"]
    for q in SUMMARY_QUANTITIES:
        v = h100[q]
        assert v["low"] <= v["value"] <= v["high"], q
        assert v["basis"] in ("measured", "transferred", "spec")
    assert h100["matmul_bf16_flops_per_s"]["basis"] == "measured"
    assert h100["matmul_bf16_flops_per_s"]["value"] == pytest.approx(794.5e12, rel=0.01)
    assert h100["allreduce_busbw_bytes_per_s"]["value"] == pytest.approx(467e9, rel=0.1)
    # every catalog accelerator with a bf16 peak is calibrated, never above its peak
    for gpu in catalog.gpus:
        peak = gpu.peak_flops_per_s("bf16")
        if peak is None:
            continue
        v = a["devices"][gpu.id]["matmul_bf16_flops_per_s"]
        assert 0 < v["value"] <= peak and v["high"] <= peak * (1 + 1e-9), gpu.id
    storage = [d for d, q in a["devices"].items() if "storage_read_bytes_per_s" in q]
    assert storage == ["storage:samsung-ssd-980-pro-2tb-nvme-pcie4-local"]
    json.loads(artifact_text(a))  # strict JSON: no NaN, no pickles


def test_transferred_intervals_are_wider_than_measured(reference_artifact):
    d = reference_artifact["devices"]
    measured = d["h100-sxm5-80gb"]["matmul_bf16_flops_per_s"]
    transferred = d["h200-sxm-141gb"]["matmul_bf16_flops_per_s"]
    assert transferred["basis"] == "transferred"
    width = lambda v: math.log(v["high"] / v["low"])  # noqa: E731
    assert width(transferred) > width(measured)
    # H200 has H100's tensor cores: the transfer comes from its generation
    model = reference_artifact["models"]["matmul_bf16"]["coefficients"]["devices"]["h200-sxm-141gb"]
    assert model["transfer"]["pool"] == "generation"
    assert model["transfer"]["from_devices"] == ["h100-sxm5-80gb"]


def test_deterministic_except_created_at(reference_artifact, catalog):
    again = calibrate_documents([], catalog=catalog, created_at="2030-05-05T00:00:00Z")
    assert again["created_at"] != reference_artifact["created_at"]
    again["created_at"] = reference_artifact["created_at"]
    assert artifact_text(again) == artifact_text(reference_artifact)


def test_default_artifact_is_current(reference_artifact):
    # floats within ARTIFACT_REL_TOL (BLAS summation order differs between CPUs), all
    # else exactly: a stale artifact still fails, a newer CPU does not
    shipped = json.loads(default_artifact_path().read_text(encoding="utf-8"))
    rebuilt = json.loads(artifact_text(reference_artifact))
    moved = artifact_differences(shipped, rebuilt)
    assert not moved, (
        "stale default artifact: run .venv/bin/python scripts/build_reference.py --artifact; "
        + "; ".join(moved[:5])
    )


def test_artifact_comparison_separates_noise_from_staleness(reference_artifact):
    rebuilt = json.loads(artifact_text(reference_artifact))
    noisy = copy.deepcopy(rebuilt)
    stale = copy.deepcopy(rebuilt)
    summary = next(iter(noisy["devices"].values()))
    quantity = next(iter(summary))
    summary[quantity]["value"] *= 1 + 1e-11  # the 12th-digit flip seen on a newer CPU
    stale_summary = stale["devices"][next(iter(stale["devices"]))]
    stale_summary[quantity]["value"] *= 1 + 1e-6  # smallest real change worth catching
    assert artifact_differences(rebuilt, noisy) == []
    assert len(artifact_differences(rebuilt, stale)) == 1
    stale["inputs"] = [*stale["inputs"], "extra-run"]
    assert any("inputs" in d for d in artifact_differences(rebuilt, stale))


def test_local_measurements_override_the_reference(catalog):
    # a slower local node: 700 TFLOP/s roof, 3 TB/s, 5 us launch (roofline-generated)
    from gpuplan.calibration.estimators import MatmulRoofline

    shapes = [(s, s, s) for s in (512, 1024, 2048, 4096, 8192)] + [(16, 8192, 8192)]
    points = []
    for m, n, k in shapes:
        f, b = MatmulRoofline.work(m, n, k, 2)
        points.append((m, n, k, float(f / (5e-6 + max(f / 700e12, b / 3e12)))))
    doc = make_doc(accelerators=H100, probes=[_matmul_probe("bfloat16", points)])
    a = calibrate_documents([doc], catalog=catalog, cross_validation=False)
    h100 = a["devices"]["h100-sxm5-80gb"]["matmul_bf16_flops_per_s"]
    assert h100["basis"] == "measured"
    assert h100["value"] == pytest.approx(
        700e12, rel=0.02
    )  # the local node, not the published 794.5
    entry = a["models"]["matmul_bf16"]["coefficients"]["devices"]["h100-sxm5-80gb"]
    assert entry["machines"] == ["test-node"]
    assert doc["run_id"] in a["inputs"]


def test_training_hash_tracks_the_inputs(reference_artifact, catalog):
    doc = make_doc(
        accelerators=H100, probes=[_matmul_probe("bfloat16", [(8192, 8192, 8192, 700e12)])]
    )
    a = calibrate_documents([doc], catalog=catalog, cross_validation=False)
    assert a["training_data_sha256"] != reference_artifact["training_data_sha256"]


def test_refuses_to_pool_probe_versions(catalog):
    a = make_doc(
        run_id="00000000-0000-4000-8000-00000000000a",
        accelerators=H100,
        probes=[_matmul_probe("bfloat16", [(8192, 8192, 8192, 700e12)], version=1)],
    )
    b = make_doc(
        run_id="00000000-0000-4000-8000-00000000000b",
        accelerators=H100,
        probes=[_matmul_probe("bfloat16", [(8192, 8192, 8192, 690e12)], version=2)],
    )
    with pytest.raises(
        InputError, match=r"cannot pool 'matmul' results of different probe versions"
    ) as exc:
        calibrate_documents([a, b], catalog=catalog)
    assert "00000000-0000-4000-8000-00000000000a" in exc.value.message
    assert exc.value.hint


def test_nothing_to_fit_is_an_input_error(catalog):
    failed = make_doc(
        probes=[
            {
                "probe": "matmul",
                "probe_version": 1,
                "status": "failed",
                "error": "no GPU",
                "params": {"dtype": "bfloat16", "device": "cuda:0"},
            }
        ],
        accelerators=H100,
    )
    with pytest.raises(InputError, match="no usable measurement"):
        calibrate_documents([failed], include_reference=False, catalog=catalog)


def test_bad_documents_are_refused_with_the_field(catalog):
    from gpuplan.errors import SchemaError

    bad = make_doc(
        accelerators=H100, probes=[_matmul_probe("bfloat16", [(8192, 8192, 8192, 700e12)])]
    )
    bad["probes"][0]["measurements"][0]["shape"]["m"] = -1
    with pytest.raises(SchemaError, match="shape"):
        calibrate_documents([bad], catalog=catalog)


def test_points_of_an_interrupted_probe_are_used(catalog):
    from gpuplan.calibration.dataset import extract
    from gpuplan.results.store import parse_result

    points = [(8192, 8192, 8192, 700e12), (4096, 4096, 4096, 650e12)]
    stopped = {**_matmul_probe("bfloat16", points), "status": "interrupted"}
    failed = {**_matmul_probe("bfloat16", points), "status": "failed", "error": "boom"}
    for probe, expected in ((stopped, 2), (failed, 0)):
        doc = parse_result(make_doc(accelerators=H100, probes=[probe]))
        records = [r for r in extract([doc], catalog).records if r.quantity.startswith("matmul")]
        assert len(records) == expected


def test_hbm_is_fitted_only_past_the_cache_and_gds_apart_from_posix(catalog):
    """In-cache membw points (MI300X: 256 MB Infinity Cache) and GPUDirect/kvikio storage
    points never enter the HBM and POSIX fits; the best sample is used where it was kept."""
    from gpuplan.calibration.dataset import extract
    from gpuplan.results.store import parse_result

    membw = {
        "probe": "membw",
        "probe_version": 1,
        "status": "ok",
        "params": {"device": "cuda:0"},
        "measurements": [
            # 64 MiB sits in the cache: 9 TB/s is the cache, not HBM
            {"op": "copy", "size_bytes": 2**26, "bytes_per_s": 9e12, "past_cache": False},
            {
                "op": "copy",
                "size_bytes": 2**31,
                "bytes_per_s": 4.1e12,
                "best_bytes_per_s": 4.3e12,
                "past_cache": True,
            },
            {"op": "copy", "size_bytes": 2**32, "bytes_per_s": 4.2e12},  # older run: no flag
        ],
    }

    def storage(params: dict, gds: bool) -> dict:
        point = {"rw": "read", "block_size_bytes": 2**20, "iodepth": 16, "bw_bytes_per_s": 5e9}
        return {
            "probe": "storage",
            "probe_version": 1,
            "status": "ok",
            "params": params,
            "measurements": [{**point, "gds": gds}],
        }

    doc = make_doc(
        accelerators=H100,
        probes=[
            membw,
            storage({"path": "/data"}, False),
            storage({"path": "/data", "transport": "gds"}, True),
            storage({"path": "/data", "transport": "kvikio-posix-compat"}, False),
        ],
    )
    records = extract([parse_result(doc)], catalog).records
    hbm = sorted((r.x[0], r.y) for r in records if r.quantity == "membw")
    assert hbm == [(2**31, 4.3e12), (2**32, 4.2e12)]
    assert len([r for r in records if r.quantity == "storage"]) == 1  # POSIX only


def test_all_gpus_at_once_points_stay_out_of_the_device_fit(catalog):
    """The per-GPU loop's concurrent points (every GPU at once, shared power and host) feed
    the spread and the outlier flag, not the device model: only the alone points are fitted."""
    from gpuplan.calibration.dataset import extract
    from gpuplan.results.store import parse_result

    def point(size, bw, concurrent):
        return {
            "op": "copy",
            "size_bytes": size,
            "bytes_per_s": bw,
            "past_cache": True,
            "device_index": 1,
            "concurrent": concurrent,
        }

    membw = {
        "probe": "membw",
        "probe_version": 2,
        "status": "ok",
        "params": {"device": "cuda:all", "scope": "per_device"},
        "measurements": [point(2**31, 4.2e12, False), point(2**31, 3.1e12, True)],
    }
    doc = make_doc(accelerators=H100, probes=[membw])
    records = extract([parse_result(doc)], catalog).records
    assert [r.y for r in records if r.quantity == "membw"] == [4.2e12]
