"""Host-device probe: NUMA binding from sysfs, per-GPU, bidirectional and all-GPUs records.

The NUMA code runs for real: against a fake sysfs tree under ``tmp_path`` (a node whose CPUs
are ones this process may use, so ``sched_setaffinity`` really binds), and against this
machine's ``/sys``. The GPU copies are faked at the torch.cuda edge (``_fakecuda``: no GPU
here; copies advance a fake clock by bytes / bandwidth), so the figures are exact.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuplan.probes import pcie
from gpuplan.probes.base import DeviceInfo, ProbeContext
from gpuplan.probes.nics import node_cpus, parse_cpulist, pci_numa_node
from gpuplan.probes.timing import TimingConfig
from gpuplan.results.schema import ProbeResult

from ._fakecuda import FakeCudaTorch

FAST = TimingConfig(warmups=1, min_sample_s=0.0, samples=3, min_samples=3)
GPU_BUS = ["0000:1b:00.0", "0000:9b:00.0"]


def _can_bind() -> bool:
    try:
        os.sched_setaffinity(0, os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return False
    return True


needs_affinity = pytest.mark.skipif(not _can_bind(), reason="sched_setaffinity not permitted here")


def fake_sys(root: Path, numa: dict[str, int], cpulists: dict[int, str]) -> Path:
    """``sys/bus/pci/devices/<bus>/numa_node`` and ``sys/devices/system/node/nodeN/cpulist``."""
    for bus, node in numa.items():
        d = root / "sys/bus/pci/devices" / bus
        d.mkdir(parents=True)
        (d / "numa_node").write_text(f"{node}\n")
    for node, text in cpulists.items():
        d = root / f"sys/devices/system/node/node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(text + "\n")
    return root


def test_cpulist_and_numa_node_parsing(tmp_path):
    root = fake_sys(tmp_path, {GPU_BUS[0]: 1, GPU_BUS[1]: -1}, {1: "4-6,9"})
    assert parse_cpulist("0-3,8-11") == {0, 1, 2, 3, 8, 9, 10, 11}
    assert pci_numa_node(GPU_BUS[0], root) == (1, None)
    node, why = pci_numa_node(GPU_BUS[1], root)
    assert node is None and "numa_node = -1" in why
    assert node_cpus(1, root) == ({4, 5, 6, 9}, None)
    cpus, why = node_cpus(0, root)
    assert cpus is None and "node0/cpulist" in why


@needs_affinity
def test_binding_really_binds_and_restores(tmp_path):
    before = os.sched_getaffinity(0)
    cpu = min(before)
    root = fake_sys(tmp_path, {GPU_BUS[0]: 0}, {0: f"{cpu}"})
    with pcie.numa_bound(GPU_BUS[0], root) as binding:
        inside = os.sched_getaffinity(0)
    assert binding.bound and binding.numa_node == 0 and binding.cpus == 1 and binding.reason is None
    assert inside == {cpu}
    assert os.sched_getaffinity(0) == before


def test_binding_refused_when_the_node_has_no_allowed_cpu(tmp_path):
    allowed = os.sched_getaffinity(0)
    outside = max(allowed) + 1000  # a CPU this process may not use
    root = fake_sys(tmp_path, {GPU_BUS[0]: 0, GPU_BUS[1]: -1}, {0: f"{outside}"})
    with pcie.numa_bound(GPU_BUS[0], root) as binding:
        assert os.sched_getaffinity(0) == allowed
    assert not binding.bound and "cgroup or taskset" in binding.reason
    with pcie.numa_bound(GPU_BUS[1], root) as binding:
        pass
    assert not binding.bound and binding.numa_node is None and "-1" in binding.reason
    with pcie.numa_bound(None, root) as binding:
        pass
    assert not binding.bound and "bus id is unknown" in binding.reason


def test_binding_against_this_machines_sys_does_not_crash():
    before = os.sched_getaffinity(0)
    buses = sorted(p.name for p in Path("/sys/bus/pci/devices").glob("*"))
    for bus in buses[:4] or [None]:
        with pcie.numa_bound(bus) as binding:
            pass
        d = binding.as_dict()
        assert set(d) == {"pci_bus_id", "numa_node", "bound", "cpus", "reason"}
        assert binding.bound or binding.reason  # never silent about not binding
    assert os.sched_getaffinity(0) == before


def _ctx(n: int) -> ProbeContext:
    accs = [
        {"name": "NVIDIA H100", "pci_bus_id": GPU_BUS[i], "torch_index": i, "mgmt_index": i}
        for i in range(n)
    ]
    return ProbeContext(
        device=DeviceInfo(kind="cuda", count=n, vendor="nvidia"),
        quick=True,
        timing=FAST,
        accelerators=accs,
    )


@pytest.fixture
def fake(monkeypatch, tmp_path):
    torch = FakeCudaTorch(count=2, host_bw=[50e9, 25e9])  # GPU 1: a link at half rate
    monkeypatch.setattr(pcie, "import_torch", lambda: torch)
    monkeypatch.setattr(pcie, "timer_for", torch.timer)
    monkeypatch.setattr(pcie, "WallTimer", torch.timer)
    monkeypatch.setattr(pcie, "sizes", lambda quick: [1 << 20, 64 << 20])
    cpu = min(os.sched_getaffinity(0))
    root = fake_sys(tmp_path, {GPU_BUS[0]: 0, GPU_BUS[1]: -1}, {0: f"{cpu}"})
    monkeypatch.setattr(pcie, "SYSFS_ROOT", root)
    return torch


@needs_affinity
def test_pcie_probe_per_gpu_bidirectional_and_all_gpus(fake):
    ctx = _ctx(2)
    pcie.run(ctx)
    results = [ProbeResult.model_validate(r.as_dict()) for r in ctx.recorders]
    per_gpu = [r for r in results if r.probe == "pcie"]
    concurrent = [r for r in results if r.probe == "pcie_concurrent"]
    assert [r.status for r in results] == ["ok"] * 5
    assert [r.params["device"] for r in per_gpu] == ["cuda:0", "cuda:1"]
    # GPU 0's node is readable and its CPU allowed: bound; GPU 1's platform reports none
    assert per_gpu[0].params["numa"]["bound"] is True
    assert per_gpu[1].params["numa"]["bound"] is False
    assert any("not bound" in w for w in per_gpu[1].warnings)
    # the curve on GPU 0 (2 sizes x pinned/pageable x 2 directions), the top size on GPU 1
    assert len(per_gpu[0].measurements) == 8 and len(per_gpu[1].measurements) == 4
    top = 64 << 20
    for gpu, bw in ((0, 50e9), (1, 25e9)):
        for m in per_gpu[gpu].measurements:
            want = bw if m["memory"] == "pinned" else bw * fake.pageable_factor
            assert m["bytes_per_s"] == pytest.approx(want, rel=1e-9)
    # the fake runs the two directions one after the other: half of full duplex
    bidir = [r for r in concurrent if r.params["mode"] == "bidirectional"]
    assert [r.params["device"] for r in bidir] == ["cuda:0", "cuda:1"]
    for r, bw in zip(bidir, (50e9, 25e9), strict=True):
        (m,) = r.measurements
        assert m["bytes_moved"] == 2 * top and m["direction"] == "both"
        assert m["bytes_per_s"] == pytest.approx(bw, rel=1e-9)
        assert m["vs_alone"] == pytest.approx(0.5, rel=1e-9)
    (every,) = [r for r in concurrent if r.params["mode"] == "all_gpus"]
    assert [m["direction"] for m in every.measurements] == ["h2d", "d2h"]
    assert [n["bound"] for n in every.params["numa"]] == [True, False]
    for m in every.measurements:
        # serialised copies: 2 x 64 MiB in 64 MiB/50e9 + 64 MiB/25e9 seconds
        want = 2 * top / (top / 50e9 + top / 25e9)
        assert m["devices"] == [0, 1] and m["bytes_moved"] == 2 * top
        assert m["bytes_per_s"] == pytest.approx(want, rel=1e-9)
        assert m["vs_alone"] == pytest.approx(want / 75e9, rel=1e-9)


def test_pcie_probe_one_gpu_has_no_all_gpus_record(fake):
    fake.count = 1
    ctx = _ctx(1)
    pcie.run(ctx)
    assert [(r.probe, r.params.get("mode")) for r in ctx.recorders] == [
        ("pcie", None),
        ("pcie_concurrent", "bidirectional"),
    ]


def test_pcie_probe_on_cpu_is_skipped():
    ctx = ProbeContext(device=DeviceInfo(kind="cpu", count=0))
    pcie.run(ctx)
    (rec,) = ctx.recorders
    assert rec.status == "skipped" and "no GPU" in rec.error
