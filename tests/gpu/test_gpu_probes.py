"""GPU probes on a real CUDA/ROCm device (marker `gpu`: skipped without one).

Run them with tests/gpu/run.sh on a GPU machine. Every check here runs the real code path
on the device; the physical bounds (achieved <= catalog peak) come from the catalog rows.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from gpuplan.probes import matmul, membw, pcie  # noqa: E402
from gpuplan.probes.base import ProbeContext, resolve_device  # noqa: E402
from gpuplan.probes.inventory import catalog_gpu, host_facts  # noqa: E402
from gpuplan.probes.timing import CudaEventTimer, TimingConfig, WallTimer, measure  # noqa: E402
from gpuplan.results.schema import Host, ProbeResult  # noqa: E402

pytestmark = pytest.mark.gpu

FAST = TimingConfig(warmups=2, min_sample_s=0.02, samples=5, min_samples=3)


@pytest.fixture(scope="module")
def device():
    return resolve_device("cuda")


def test_device_and_inventory(device):
    assert device.is_gpu and device.count >= 1 and device.vendor in ("nvidia", "amd")
    host = Host.model_validate(host_facts(torch=torch))
    assert len(host.accelerators) == device.count
    acc = host.accelerators[0]
    assert acc.memory_bytes and acc.memory_bytes > 1 << 30
    if device.vendor == "nvidia":
        assert acc.uuid and acc.uuid.startswith("GPU-")
        assert acc.power_limit_w and acc.power_limit_w > 10
        assert acc.sm_clock_max_mhz and acc.sm_clock_max_mhz > 100
        assert host.driver_version


def test_cuda_events_agree_with_host_clock(device):
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")

    def fn():
        return a @ b

    ev = measure(fn, CudaEventTimer(torch, torch.device("cuda", 0)), FAST)
    wall = measure(fn, WallTimer(sync=torch.cuda.synchronize), FAST)
    assert ev.median_s == pytest.approx(wall.median_s, rel=0.25)


def test_matmul_all_precisions_correct_and_below_peak(device, monkeypatch):
    monkeypatch.setattr(
        matmul,
        "shapes",
        lambda gpu, quick: (
            matmul.square([2048, 8192])
            + matmul.transformer_layer(
                "llama3-70b", hidden=8192, ffn=28672, heads=64, kv_heads=8, tokens=2048, tp=8
            )
        ),
    )
    facts = host_facts(torch=torch)
    row = catalog_gpu(facts["accelerators"][0]["name"])
    ctx = ProbeContext(
        device=device,
        quick=True,
        timing=FAST,
        spec_lookup=lambda i, p: row.peak_flops_per_s(p) if row is not None else None,
    )
    matmul.run(ctx)
    results = [ProbeResult.model_validate(r.as_dict()) for r in ctx.recorders]
    by_prec = {r.params["precision"]: r for r in results}
    assert {"fp32", "tf32", "bf16", "fp16", "fp8"} == set(by_prec)
    for prec in ("fp32", "bf16", "fp16"):
        assert by_prec[prec].status == "ok", by_prec[prec].error
    for r in results:
        if r.status == "skipped":
            assert r.error  # e.g. fp8 before sm_89
            continue
        assert r.status == "ok", (r.params, r.error, r.warnings)
        for m in r.typed():
            assert m.correct is True
            if m.spec_flops_per_s:
                assert m.flops_per_s <= 1.05 * m.spec_flops_per_s  # never above the datasheet peak
    # tensor cores: bf16 at 8192^3 beats fp32 by a wide margin on every GPU with them
    best = {
        p: max(m["flops_per_s"] for m in r.measurements)
        for p, r in by_prec.items()
        if r.measurements
    }
    assert best["bf16"] > 2 * best["fp32"]


def test_membw_past_l2_and_below_catalog_bandwidth(device):
    ctx = ProbeContext(device=device, quick=True, timing=FAST)
    membw.run(ctx)
    (rec,) = ctx.recorders
    r = ProbeResult.model_validate(rec.as_dict())
    assert r.status == "ok", r.error
    assert r.params["llc_source"].startswith("torch")
    largest = max(m["size_bytes"] for m in r.measurements)
    assert largest >= 8 * r.params["llc_bytes"]
    row = catalog_gpu(torch.cuda.get_device_name(0))
    copy_big = max((m for m in r.measurements if m["op"] == "copy"), key=lambda m: m["size_bytes"])
    assert copy_big["bytes_per_s"] > 100e9  # any datacenter GPU of the last decade
    if row is not None and row.memory_bandwidth_bytes_per_s:
        assert copy_big["bytes_per_s"] <= 1.05 * row.memory_bandwidth_bytes_per_s


def test_pcie_pinned_both_directions_every_gpu(device):
    ctx = ProbeContext(device=device, quick=True, timing=FAST)
    pcie.run(ctx)
    assert len(ctx.recorders) == device.count
    for rec in ctx.recorders:
        r = ProbeResult.model_validate(rec.as_dict())
        assert r.status == "ok", r.error
        kinds = {(m["direction"], m["memory"]) for m in r.measurements}
        assert kinds == {
            ("h2d", "pinned"),
            ("d2h", "pinned"),
            ("h2d", "pageable"),
            ("d2h", "pageable"),
        }
        big = max(m["size_bytes"] for m in r.measurements)
        h2d_pinned = next(
            m
            for m in r.measurements
            if m["size_bytes"] == big and m["direction"] == "h2d" and m["memory"] == "pinned"
        )
        assert 1e9 < h2d_pinned["bytes_per_s"] < 200e9


def test_collectives_nccl_over_local_gpus(device):
    from gpuplan.probes import collectives

    ctx = ProbeContext(device=device, quick=True, timing=FAST)
    collectives.run(ctx, denv=None)
    (rec,) = ctx.recorders
    if device.count < 2:
        assert rec.status == "skipped" and "at least 2" in rec.error
        return
    assert rec.status == "ok", rec.error
    assert rec.params["backend"].startswith("nccl") and rec.params["ranks"] == device.count
    assert all(m["correct"] for m in rec.measurements)


def test_power_is_sampled_with_nvml(device):
    if device.vendor != "nvidia":
        pytest.skip("NVML power on NVIDIA only")
    from gpuplan.probes.power import default_sampler

    sampler = default_sampler(interval_s=0.05)
    assert sampler is not None
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    with sampler.sampling([0]) as samples:
        for _ in range(200):
            a @ a
        torch.cuda.synchronize()
    summary = sampler.summary(samples, [0])
    assert summary is not None and summary["samples"] >= 1 and summary["max"] > 20


def test_quick_probe_cli_on_gpu(run_cli, tmp_path):
    r = run_cli(
        "probe",
        "--quick",
        "--only",
        "matmul,membw,pcie",
        "--format",
        "json",
        "--out",
        str(tmp_path),
        "--no-progress",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["host"]["accelerators"]
    for p in doc["probes"]:
        assert p["status"] in ("ok", "skipped"), (p["probe"], p["params"], p["error"])
        if (
            p["probe"] == "matmul"
            and p["status"] == "ok"
            and doc["host"]["accelerators"][0].get("vendor") == "nvidia"
        ):
            assert p["power_w"] is not None and p["power_w"]["max"] > 0
