"""device_perf / calibrated_summary: every catalog device, vectorised, bounded, round-tripped."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpuplan.calibration import calibrated_summary, device_perf, load_artifact
from gpuplan.calibration.api import DevicePerf
from gpuplan.calibration.artifact import artifact_text
from gpuplan.errors import InputError, NotFoundError, SchemaError


def test_every_catalog_accelerator_has_a_device_perf(catalog):
    for gpu in catalog.gpus:
        perf = device_perf(gpu.id)
        assert isinstance(perf, DevicePerf)
        summary = perf.summary()
        assert summary, gpu.id
        for q, est in summary.items():
            assert est.low <= est.value <= est.high, (gpu.id, q)
        peak = gpu.peak_flops_per_s("bf16")
        if peak:
            est = perf.matmul_flops_per_s(8192, 8192, 8192, "bf16")
            assert 0 < est.value <= peak and est.high <= peak * (1 + 1e-9)
        if gpu.memory_bandwidth_bytes_per_s:
            assert 0 < perf.memory_bandwidth_bytes_per_s().value <= gpu.memory_bandwidth_bytes_per_s


def test_names_resolve_through_catalog_aliases():
    assert device_perf("H100 80GB HBM3").gpu_id == "h100-sxm5-80gb"
    with pytest.raises(NotFoundError):
        device_perf("no-such-gpu-9000")


def test_vectorised_and_physically_shaped():
    perf = device_perf("h100")
    m = np.arange(1, 4097, dtype=float)
    est = perf.matmul_flops_per_s(m, 8192, 8192, "bf16")
    assert est.value.shape == m.shape
    assert np.all(np.diff(est.value) >= -1e-6 * est.value[1:])  # more rows never slower per FLOP
    assert np.all(est.value <= perf.peak_flops_per_s("bf16"))
    assert est.basis == "measured"
    # decode-shaped GEMMs sit on the memory roof: far below the compute roof
    assert est.value[0] < 0.01 * est.value[-1]
    scalar = perf.matmul_flops_per_s(4096, 4096, 4096, "bfloat16")
    assert isinstance(scalar.value, float)
    with pytest.raises(InputError, match="fp8"):
        device_perf("a100").matmul_flops_per_s(1024, 1024, 1024, "fp8")


def test_collective_times_follow_the_topology():
    perf = device_perf("h100")
    sizes = np.geomspace(2**10, 2**34, 25)
    t = perf.collective_time_s("all_reduce", sizes, 8).value
    assert t.shape == sizes.shape and np.all(np.diff(t) > 0)
    one_gib = perf.collective_time_s("all_reduce", 2**30, 8)
    busbw = 2**30 * 1.75 / one_gib.value
    assert busbw == pytest.approx(467e9, rel=0.1)  # the published H100 nccl-tests sweeps
    assert one_gib.low <= one_gib.value <= one_gib.high
    assert perf.collective_time_s("all_reduce", 2**30, 1).value == 0.0
    # across nodes: more NIC bandwidth is never slower, more nodes never faster
    slow = perf.collective_time_s("all_reduce", 2**30, 64, inter_node_bandwidth_bytes_per_s=25e9)
    fast = perf.collective_time_s("all_reduce", 2**30, 64, inter_node_bandwidth_bytes_per_s=50e9)
    assert fast.value < slow.value
    assert (
        perf.collective_time_s("all_reduce", 2**30, 128).value
        >= perf.collective_time_s("all_reduce", 2**30, 16).value
    )
    assert perf.collective_time_s("all_reduce", 2**30, 16).value > one_gib.value
    # an NVL72 domain extrapolates from the 8-GPU fits: with in-switch reduction (NVLS) the
    # time does not grow with the ranks; a ring/tree fabric (TPU ICI) slows with them
    gb = device_perf("gb200")
    t72 = gb.collective_time_s("all_reduce", 2**24, 72).value
    assert np.isfinite(t72) and t72 >= gb.collective_time_s("all_reduce", 2**24, 8).value
    tpu = device_perf("tpu-v5p")
    assert (
        tpu.collective_time_s("all_reduce", 2**20, 256).value
        > tpu.collective_time_s("all_reduce", 2**20, 8).value
    )
    assert perf.collective_time_s("p2p", 2**26, 2).value > 0
    with pytest.raises(InputError, match="unknown collective"):
        perf.collective_time_s("all_sum", 1, 8)


def test_artifact_round_trip(tmp_path, reference_artifact):
    path = tmp_path / "cal.json"
    path.write_text(artifact_text(reference_artifact))
    loaded = load_artifact(path)
    assert loaded == json.loads(artifact_text(reference_artifact))
    a = device_perf("b200", reference_artifact)
    b = device_perf("b200", str(path))
    for q in ("matmul_bf16_flops_per_s", "allreduce_busbw_bytes_per_s"):
        assert a.summary()[q].value == b.summary()[q].value
    x = a.collective_time_s("all_gather", np.array([2**20, 2**30]), 8).value
    y = b.collective_time_s("all_gather", np.array([2**20, 2**30]), 8).value
    np.testing.assert_array_equal(x, y)


def test_bad_artifacts_get_clear_errors(tmp_path):
    with pytest.raises(InputError, match="no calibration artifact"):
        load_artifact(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SchemaError, match="not valid JSON"):
        load_artifact(bad)
    bad.write_text(json.dumps({"artifact_version": 1}))
    with pytest.raises(SchemaError, match="missing"):
        load_artifact(bad)
    newer = {k: [] for k in ("inputs",)} | {
        "artifact_version": 99,
        "created_at": "",
        "gpuplan_version": "",
        "sklearn_version": "",
        "training_data_sha256": "",
        "models": {},
        "devices": {},
    }
    bad.write_text(json.dumps(newer))
    with pytest.raises(SchemaError, match="newer"):
        load_artifact(bad)


def test_calibrated_summary_gives_spec_and_calibrated(catalog):
    s = calibrated_summary("h100")
    bf16 = s["matmul_bf16_flops_per_s"]
    assert bf16["spec"] == catalog.gpu("h100").peak_flops_per_s("bf16")
    assert bf16["basis"] == "measured" and bf16["low"] <= bf16["value"] <= bf16["high"]
    assert bf16["fraction_of_spec"] == pytest.approx(794.5 / 989.4, rel=0.01)
    assert (
        s["memory_bandwidth_bytes_per_s"]["spec"]
        == catalog.gpu("h100").memory_bandwidth_bytes_per_s
    )
    h200 = calibrated_summary("h200")
    assert h200["matmul_bf16_flops_per_s"]["basis"] == "transferred"


def test_artifact_device_spec_fields_are_read_forward_compatibly(reference_artifact):
    """A non-catalog device's spec is rebuilt from the artifact: a field a later version adds
    is ignored and a field an earlier version lacked takes its default."""
    art = json.loads(artifact_text(reference_artifact))
    dev = "storage:samsung-ssd-980-pro-2tb-nvme-pcie4-local"
    spec = art["device_specs"][dev]
    # written only when known, so that gpuplan 0.1's strict reader loads this artifact
    assert "in_switch_reduction_efficiency" not in spec
    assert art["device_specs"]["b200-sxm-180gb"]["in_switch_reduction_efficiency"] == 0.74
    spec["field_from_a_later_version"] = 1.0
    perf = device_perf(dev, art)
    assert perf.spec.id == dev
    assert perf.spec.in_switch_reduction_efficiency is None
