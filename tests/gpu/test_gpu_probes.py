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
    # matched to torch by UUID or PCI bus id, in torch's order, never by position alone
    facts = host_facts(torch=torch)
    visible = [a for a in facts["accelerators"] if a.get("torch_index") is not None]
    assert [a["torch_index"] for a in visible] == list(range(device.count))
    assert all(a["matched_by"] in ("uuid", "pci_bus_id") for a in visible), visible
    for a in visible:
        if a.get("pcie_gen") and a.get("pcie_gen_current"):
            assert a["pcie_gen"] >= a["pcie_gen_current"]  # the maximum, not the idle link
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
            + matmul.mamf_grid([2048], [13312])
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
    first = results[0].params
    assert first["l2_flush_bytes"] >= 2 * first["llc_bytes"] and first["device_warmup_s"] > 0.5
    if device.vendor == "amd":  # TunableOp and hipBLASLt set and recorded
        assert first["tunableop"] is True and first["blas_library"] == "hipblaslt"
        fp8 = by_prec["fp8"]
        arch = first["gfx_arch"] or ""
        if arch.startswith("gfx94"):
            assert fp8.params["dtype"] == "float8_e4m3fnuz"
        elif arch.startswith("gfx95"):
            assert fp8.params["dtype"] == "float8_e4m3fn"
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
    # the sweep on GPU 0, then the per-GPU loop (every GPU alone, then all at once)
    sweep, loop = (ProbeResult.model_validate(rec.as_dict()) for rec in ctx.recorders)
    assert loop.params["scope"] == "per_device" and loop.status == "ok", loop.error
    assert {m["concurrent"] for m in loop.measurements} == {False, True}
    assert {m["device_index"] for m in loop.measurements} == set(range(device.count))
    r = sweep
    assert "scope" not in r.params
    assert r.status == "ok", r.error
    assert r.params["llc_source"].startswith(("torch", "catalog"))
    largest = max(m["size_bytes"] for m in r.measurements)
    assert largest >= 4 * r.params["llc_bytes"] and largest >= 1 << 30
    methods = {(m["op"], m["method"]) for m in r.measurements}
    assert methods == {("copy", "memcpy"), ("copy", "kernel"), ("triad", "kernel")}
    assert any(m["past_cache"] for m in r.measurements)
    assert all(m["best_bytes_per_s"] >= m["bytes_per_s"] for m in r.measurements)
    row = catalog_gpu(torch.cuda.get_device_name(0))
    copy_big = max((m for m in r.measurements if m["op"] == "copy"), key=lambda m: m["size_bytes"])
    assert copy_big["bytes_per_s"] > 100e9  # any datacenter GPU of the last decade
    if row is not None and row.memory_bandwidth_bytes_per_s:
        assert copy_big["bytes_per_s"] <= 1.05 * row.memory_bandwidth_bytes_per_s


def test_pcie_pinned_both_directions_every_gpu(device):
    ctx = ProbeContext(device=device, quick=True, timing=FAST)
    pcie.run(ctx)
    results = [ProbeResult.model_validate(rec.as_dict()) for rec in ctx.recorders]
    per_gpu = [r for r in results if r.probe == "pcie"]
    both_ways = [r for r in results if r.params.get("mode") == "bidirectional"]
    all_gpus = [r for r in results if r.params.get("mode") == "all_gpus"]
    assert len(per_gpu) == len(both_ways) == device.count
    assert len(all_gpus) == (1 if device.count > 1 else 0)
    for r in both_ways + all_gpus:
        assert r.probe == "pcie_concurrent" and r.status == "ok", r.error
        for m in r.measurements:
            assert 1e9 < m["bytes_per_s"] < 400e9
            # both ways at once can gain over one way (full duplex), never exceed the sum
            if m.get("vs_alone") is not None and m["mode"] == "bidirectional":
                assert 0.3 < m["vs_alone"] <= 1.1
    for r in per_gpu:
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


def test_one_rank_nccl_communicator_runs_every_case(device, tmp_path):
    """On one GPU the suite skips collectives (they need 2 ranks); a one-rank NCCL (RCCL)
    communicator still runs every code path: bf16/fp32, in-place/out-of-place, the
    64-bit sized buffers, the per-rank average, the NCCL log."""
    from gpuplan.probes import collectives as c
    from gpuplan.probes.base import ProbeRecorder

    plan = c.Plan(
        backend="nccl",
        ops=(),
        sizes=(1 << 10, 64 << 20, 1 << 30),
        timing=FAST,
        num_nodes=1,
        timeout_s=240,
        cases=c.cases(gpu=True, quick=False),
        nccl_log_dir=str(tmp_path),
    )
    rec = ProbeRecorder("collectives", 1)
    c.run_local(plan, 1, gpu=True, on_point=rec.add, deadline_s=300)
    assert len(rec.measurements) == len(plan.cases) * 3
    for m in rec.measurements:
        assert m["correct"] is True, m
        assert m["time_over_ranks"] == "avg" and m["ranks"] == 1
    c.annotate_with_nccl(rec, tmp_path)
    assert "nccl_algorithms" in rec.params  # a list, or why it is not recorded


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
    if sampler.energy is not None:  # Volta and newer: from the energy counter
        assert summary["source"] == "nvml-energy" and summary["energy_j"] > 0
        assert summary["mean"] > 20


def test_storage_with_kvikio_labels_gds_by_file(device, tmp_path):
    pytest.importorskip("kvikio")
    from gpuplan.probes import storage

    if storage.shutil.which("fio") is None:
        pytest.skip("fio is not installed")
    ctx = ProbeContext(
        device=device,
        quick=True,
        timing=FAST,
        storage_path=str(tmp_path),
        storage_size_bytes=64 << 20,
        out_dir=str(tmp_path),
    )
    storage.run(ctx)
    kv = [r for r in ctx.recorders if r.params.get("transport")]
    assert len(kv) == 1, [r.as_dict() for r in ctx.recorders]
    rec = kv[0]
    assert rec.status == "ok", rec.error
    (m,) = rec.measurements
    assert rec.params["transport"] == ("gds" if m["gds"] else "kvikio-posix-compat")
    assert m["gds_check"]


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
