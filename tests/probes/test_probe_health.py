"""Node health: NIC/HCA inventory, GPU-NIC affinity, GPUDirect RDMA, ECC/remap state, verdict.

sysfs is a fake tree under ``tmp_path`` laid out as Linux lays it out (PCI devices as
symlinks into ``/sys/devices/pci<dom>:<bus>/...``, ``/sys/class/infiniband``, ``/sys/class/net``,
``/sys/module``); the code reads it for real, and reads this machine's ``/sys`` too (which
must not crash, whatever it holds). NVML and amdsmi are small fakes answering the way the
libraries do (no GPU here); the verdict code is the real one.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from gpuplan.probes import health, nics
from gpuplan.probes.base import DeviceInfo, ProbeContext, ProbeRecorder
from gpuplan.probes.inventory import amdsmi_health, host_facts, nvml_health
from gpuplan.results.schema import HealthMeasurement, Host, ProbeResult

# GPU 0 and mlx5_0 under one PCIe switch (upstream 01:00.0, downstream 02:00.0 / 02:01.0);
# GPU 1 under another root port of the same host bridge; GPU 2 on the second socket.
TREE = {
    "0000:03:00.0": "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
    "0000:04:00.0": "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
    "0000:06:00.0": "pci0000:00/0000:00:02.0/0000:06:00.0",
    "0000:81:00.0": "pci0000:80/0000:80:01.0/0000:81:00.0",
    "0000:82:00.0": "pci0000:80/0000:80:02.0/0000:82:00.0",
    "0000:00:03.0": "pci0000:00/0000:00:03.0",
}
NUMA = {
    "0000:03:00.0": 0,
    "0000:04:00.0": 0,
    "0000:06:00.0": 0,
    "0000:81:00.0": 1,
    "0000:82:00.0": 1,
    "0000:00:03.0": 0,
}
GPUS = [
    {
        "name": "NVIDIA H100",
        "vendor": "nvidia",
        "pci_bus_id": "0000:03:00.0",
        "torch_index": 0,
        "mgmt_index": 0,
    },
    {
        "name": "NVIDIA H100",
        "vendor": "nvidia",
        "pci_bus_id": "0000:06:00.0",
        "torch_index": 1,
        "mgmt_index": 1,
    },
    {
        "name": "NVIDIA H100",
        "vendor": "nvidia",
        "pci_bus_id": "0000:81:00.0",
        "torch_index": 2,
        "mgmt_index": 2,
    },
]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def fake_sys(root: Path, *, port_state: str = "4: ACTIVE", peermem: bool = True) -> Path:
    for bus, rel in TREE.items():
        real = root / "sys/devices" / rel
        real.mkdir(parents=True)
        _write(real / "numa_node", str(NUMA[bus]))
        link = root / "sys/bus/pci/devices" / bus
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(real)
    drivers = root / "sys/bus/pci/drivers"
    (drivers / "mlx5_core").mkdir(parents=True)
    for name, bus, state in (
        ("mlx5_0", "0000:04:00.0", "4: ACTIVE"),
        ("mlx5_1", "0000:82:00.0", port_state),
    ):
        dev = root / "sys/devices" / TREE[bus]
        (dev / "driver").symlink_to(drivers / "mlx5_core")
        ib = root / "sys/class/infiniband" / name
        ib.mkdir(parents=True)
        (ib / "device").symlink_to(dev)
        _write(ib / "ports/1/rate", "400 Gb/sec (4X NDR)")
        _write(ib / "ports/1/state", state)
        _write(ib / "ports/1/phys_state", "5: LinkUp" if "ACTIVE" in state else "3: Disabled")
        _write(ib / "ports/1/link_layer", "InfiniBand")
    # ib0 is mlx5_0's netdev; eth0 a virtio NIC below a PCI function; lo has no device
    ib0 = root / "sys/class/net/ib0"
    ib0.mkdir(parents=True)
    (ib0 / "device").symlink_to(root / "sys/devices" / TREE["0000:04:00.0"])
    (root / "sys/devices" / TREE["0000:04:00.0"] / "net/ib0").mkdir(parents=True)
    virtio = root / "sys/devices" / TREE["0000:00:03.0"] / "virtio2"
    virtio.mkdir()
    eth0 = root / "sys/class/net/eth0"
    eth0.mkdir(parents=True)
    (eth0 / "device").symlink_to(virtio)
    _write(eth0 / "speed", "-1")
    _write(eth0 / "operstate", "up")
    (root / "sys/class/net/lo").mkdir(parents=True)
    (root / "sys/module/nvidia").mkdir(parents=True)
    if peermem:
        (root / "sys/module/nvidia_peermem").mkdir(parents=True)
    return root


def test_relations_follow_nvidia_smi_topo_legend(tmp_path):
    root = fake_sys(tmp_path)
    assert nics.relation("0000:03:00.0", "0000:04:00.0", root) == ("PIX", None)
    assert nics.relation("0000:06:00.0", "0000:04:00.0", root) == ("PHB", None)
    assert nics.relation("0000:81:00.0", "0000:04:00.0", root) == ("SYS", None)
    assert nics.relation("0000:81:00.0", "0000:82:00.0", root) == ("PHB", None)
    rel, why = nics.relation("0000:99:00.0", "0000:04:00.0", root)
    assert rel is None and "not readable" in why
    assert nics.pci_path("0000:03:00.0", root) == [
        "pci0000:00",
        "0000:00:01.0",
        "0000:01:00.0",
        "0000:02:00.0",
        "0000:03:00.0",
    ]


def test_nic_inventory_with_rate_state_numa_and_gpu_affinity(tmp_path):
    root = fake_sys(tmp_path)
    rows = {r["name"]: r for r in nics.nic_inventory(GPUS, root)}
    assert set(rows) == {"mlx5_0", "mlx5_1", "eth0"}  # ib0 folded into mlx5_0, lo left out
    hca = rows["mlx5_0"]
    assert hca["pci_bus_id"] == "0000:04:00.0" and hca["numa_node"] == 0
    assert hca["rate_gbps"] == 400.0 and hca["state"] == "ACTIVE" and hca["netdevs"] == ["ib0"]
    assert hca["driver"] == "mlx5_core" and hca["ports"][0]["link_layer"] == "InfiniBand"
    assert hca["nearest_gpus"] == [0]
    assert [(a["gpu"], a["relation"]) for a in hca["gpu_affinity"]] == [
        (0, "PIX"),
        (1, "PHB"),
        (2, "SYS"),
    ]
    assert rows["mlx5_1"]["nearest_gpus"] == [2] and rows["mlx5_1"]["numa_node"] == 1
    eth = rows["eth0"]
    assert eth["kind"] == "net" and eth["pci_bus_id"] == "0000:00:03.0"
    assert eth["rate_gbps"] is None and eth["state"] == "UP" and "'-1'" in eth["rate_unknown"]
    assert "rate_unknown" not in hca


def test_gpudirect_rdma_state(tmp_path):
    root = fake_sys(tmp_path)
    found = nics.nic_inventory(GPUS, root)
    on = nics.gpudirect_rdma("nvidia", found, root)
    assert (
        on["state"] == "enabled" and on["modules"] == ["nvidia_peermem"] and on["rdma_devices"] == 2
    )
    off = nics.gpudirect_rdma("nvidia", found, fake_sys(tmp_path / "b", peermem=False))
    assert off["state"] == "absent" and "nvidia_peermem" in off["reason"]
    assert nics.gpudirect_rdma(None, found, root)["state"] is None
    # AMD: amdgpu loaded and a peer-memory client registered with MLNX_OFED's PeerDirect
    amd = tmp_path / "amd"
    (amd / "sys/module/amdgpu").mkdir(parents=True)
    assert nics.gpudirect_rdma("amd", found, amd)["state"] == "absent"
    (amd / "sys/kernel/mm/memory_peers/amdkfd").mkdir(parents=True)
    got = nics.gpudirect_rdma("amd", found, amd)
    assert got["state"] == "enabled" and got["peer_clients"] == ["amdkfd"]


class FakeNvml(types.SimpleNamespace):
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    NVML_FEATURE_ENABLED = 1

    def __init__(self, ecc, rows=(0, 0, 0, 0), pages=None, pending=0):
        super().__init__()
        self.ecc, self.rows, self.pages, self.pending = ecc, rows, pages, pending

    def nvmlDeviceGetTotalEccErrors(self, h, err, counter):
        return self.ecc[(err, counter)]

    def nvmlDeviceGetRemappedRows(self, h):
        return self.rows

    def nvmlDeviceGetRetiredPages(self, h, cause):
        if self.pages is None:
            raise RuntimeError("NVMLError_NotSupported: Not Supported")
        return self.pages[cause]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        return self.pending


def _ecc(vc=0, vu=0, ac=0, au=0):
    return {(0, 0): vc, (1, 0): vu, (0, 1): ac, (1, 1): au}


def test_nvml_health_maps_counters_and_says_why_a_field_is_null():
    got = nvml_health(FakeNvml(_ecc(3, 0, 10, 1), rows=(2, 1, 1, 0)), "h")
    assert got["ecc"] == {
        "volatile_corrected": 3,
        "volatile_uncorrected": 0,
        "aggregate_corrected": 10,
        "aggregate_uncorrected": 1,
    }
    assert got["remapped_rows"] == {
        "corrected": 2,
        "uncorrected": 1,
        "pending": True,
        "failure": False,
    }
    assert got["retired_pages"] == {"pending": False}
    assert "NotSupported" in got["unreadable"]["retired_pages.single_bit"]
    bare = nvml_health(types.SimpleNamespace(), "h")  # an NVML without these queries
    assert bare["ecc"]["volatile_uncorrected"] is None and bare["remapped_rows"] is None
    assert set(bare["unreadable"]) >= {
        "ecc.volatile_uncorrected",
        "remapped_rows",
        "retired_pages.pending",
    }


def test_amdsmi_health():
    smi = types.SimpleNamespace(
        amdsmi_get_gpu_total_ecc_count=lambda h: {
            "correctable_count": 5,
            "uncorrectable_count": 0,
            "deferred_count": 0,
        },
        amdsmi_get_gpu_bad_page_info=lambda h: [
            {"page_address": 1, "status": "AmdSmiMemoryPageStatus.PENDING"}
        ],
    )
    got = amdsmi_health(smi, "h")
    assert got["ecc"]["volatile_corrected"] == 5 and got["ecc"]["deferred"] == 0
    assert got["retired_pages"] == {"total": 1, "pending": True}
    assert got["remapped_rows"] is None and "retired pages" in got["unreadable"]["remapped_rows"]


def _with_health(h: dict) -> list[dict]:
    return [dict(g, health=h) for g in GPUS]


CLEAN = nvml_health(FakeNvml(_ecc(), pages={0: [], 1: []}), "h")


def test_verdict_healthy_on_a_clean_node(tmp_path):
    root = fake_sys(tmp_path)
    found = nics.nic_inventory(GPUS, root)
    got = health.verdict(_with_health(CLEAN), found, nics.gpudirect_rdma("nvidia", found, root), [])
    HealthMeasurement.model_validate(got)
    assert got["verdict"] == "healthy" and got["reasons"] == []
    assert got["unchecked"] == [] and got["gpudirect_rdma"] == "enabled"
    # GPU 1 and 2 share no switch with an HCA: worth knowing, not a fault
    assert any("no RDMA NIC under their PCIe switch: 1, 2" in n for n in got["notes"])


@pytest.mark.parametrize(
    ("nvml", "needle"),
    [
        (
            FakeNvml(_ecc(vu=2), pages={0: [], 1: []}),
            "2 uncorrectable ECC errors since the driver loaded",
        ),
        (FakeNvml(_ecc(), rows=(0, 0, 1, 0), pages={0: [], 1: []}), "row remap is pending"),
        (FakeNvml(_ecc(), rows=(0, 3, 0, 1), pages={0: [], 1: []}), "row remapping failed"),
        (FakeNvml(_ecc(), pages={0: [], 1: [7]}, pending=1), "retired page is pending"),
    ],
)
def test_verdict_degraded_by_memory_faults(tmp_path, nvml, needle):
    root = fake_sys(tmp_path)
    found = nics.nic_inventory(GPUS, root)
    got = health.verdict(
        _with_health(nvml_health(nvml, "h")), found, nics.gpudirect_rdma("nvidia", found, root), []
    )
    assert got["verdict"] == "degraded"
    assert any(needle in r for r in got["reasons"]), got["reasons"]


def test_verdict_degraded_by_fabric_run_and_new_errors(tmp_path):
    root = fake_sys(tmp_path, port_state="1: DOWN", peermem=False)
    found = nics.nic_inventory(GPUS, root)
    p2p = ProbeRecorder("p2p", 1, params={"flag_fraction": 0.9})
    p2p.add(
        {"mode": "unidirectional", "src": 0, "dst": 2, "bytes_per_s": 1.0, "below_median": True}
    )
    later = {i: nvml_health(FakeNvml(_ecc(vc=4), pages={0: [], 1: []}), "h") for i in range(3)}
    got = health.verdict(
        _with_health(CLEAN), found, nics.gpudirect_rdma("nvidia", found, root), [p2p], later
    )
    text = " | ".join(got["reasons"])
    assert "mlx5_1 port 1 is DOWN (Disabled)" in text
    assert "GPUDirect RDMA not enabled" in text
    assert "1 peer-to-peer copies below 90%" in text
    assert "GPU 0: 4 corrected ECC errors during the run" in text


def test_verdict_says_what_it_could_not_check():
    got = health.verdict([dict(GPUS[0])], [], None, [])
    assert got["verdict"] == "healthy"
    assert any("memory health not readable" in u for u in got["unchecked"])
    assert any("no RDMA device" in n for n in got["notes"])


def test_health_probe_and_inventory_on_this_machine():
    """The real /sys, NVML/amdsmi as installed (absent here): nothing may crash."""
    facts = host_facts()
    host = Host.model_validate(facts)
    assert isinstance(host.nics, list)
    assert host.gpudirect_rdma is not None and "state" in host.gpudirect_rdma
    for row in host.nics:
        assert row["kind"] in ("rdma", "net") and row["pci_bus_id"]
        assert row["numa_node"] is not None or row["numa_node_unknown"]
    ctx = ProbeContext(device=DeviceInfo(kind="cpu", count=0), accelerators=facts["accelerators"])
    health.run(ctx)
    (rec,) = ctx.recorders
    result = ProbeResult.model_validate(rec.as_dict())
    assert result.status == "ok"
    (m,) = result.measurements
    assert m["verdict"] in ("healthy", "degraded")
    if not facts["accelerators"]:
        assert m["unchecked"] == ["GPU memory health: no accelerator in the inventory"]


def test_results_show_prints_the_verdict_and_the_matrix(tmp_path, capsys):
    from gpuplan.cli.main import main
    from gpuplan.results.schema import ResultDocument
    from gpuplan.results.store import save_result
    from gpuplan.results.summary import headline, health_line

    degraded = {
        "verdict": "degraded",
        "reasons": ["mlx5_1 port 1 is DOWN"],
        "notes": ["no peer access"],
        "unchecked": [],
    }
    pair = {
        "mode": "unidirectional",
        "src": 0,
        "dst": 1,
        "peer_access": False,
        "size_bytes": 1 << 30,
        "bytes_moved": 1 << 30,
        "bytes_per_s": 2e10,
        "median_fraction": 0.5,
        "below_median": True,
        "samples_s": [0.05],
    }
    doc = ResultDocument.model_validate(
        {
            "run_id": "0123456789abcdef0123456789abcdef",
            "started_at": "2026-12-01T00:00:00Z",
            "gpuplan_version": "test",
            "host": {"machine_id": "00000000000000aa"},
            "probes": [
                {"probe": "p2p", "probe_version": 1, "status": "ok", "measurements": [pair]},
                {"probe": "health", "probe_version": 1, "status": "ok", "measurements": [degraded]},
            ],
        }
    )
    assert health_line(doc) == "health: degraded (mlx5_1 port 1 is DOWN)"
    unchecked = doc.model_copy(deep=True)
    unchecked.probes[1].measurements[0].update(verdict="healthy", reasons=[], unchecked=["x"])
    assert health_line(unchecked) == "health: healthy; 1 check not made"
    assert headline(doc.probes[1]) == {"label": "degraded", "value": 1, "unit": "reasons"}
    assert headline(doc.probes[0])["label"] == "median GPU->GPU, 1 flagged"
    path = save_result(doc, tmp_path)
    assert main(["results", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "health: degraded (mlx5_1 port 1 is DOWN)" in out
    assert "GPU 0->1 1024 MiB" in out and "FLAGGED 50% of median" in out and "no peer access" in out


def test_the_suite_runs_p2p_and_health_on_this_cpu(tmp_path):
    """The real suite on this machine's CPU: p2p is skipped, health ends the run with a verdict."""
    from gpuplan.probes.suite import PROBES, SuiteOptions, run_suite

    assert PROBES.index("p2p") == PROBES.index("pcie") + 1 and PROBES[-1] == "health"
    outcome = run_suite(
        SuiteOptions(only=("p2p", "health"), quick=True, device="cpu", out_dir=str(tmp_path))
    )
    got = {p.probe: p for p in outcome.document.probes}
    assert got["p2p"].status == "skipped" and "no GPU" in got["p2p"].error
    assert got["health"].status == "ok" and got["health"].measurements[0]["verdict"] in (
        "healthy",
        "degraded",
    )
    assert outcome.document.host.gpudirect_rdma is not None and outcome.path is not None


def test_links_nvlinks_down_slow_host_link_and_capped_slot():
    accs = [
        dict(g, health=CLEAN, nvlink_links=18, pcie_gen=5, pcie_gen_gpu_max=5, pcie_width=16)
        for g in GPUS
    ]
    accs[1]["nvlink_links"] = 16
    accs[2]["pcie_gen"] = 4  # a Gen5 GPU in a Gen4 slot
    recs = []
    for i, h2d in enumerate((55e9, 54e9, 27e9)):
        rec = ProbeRecorder("pcie", 2, params={"device": f"cuda:{i}"})
        for direction, bps in (("h2d", h2d), ("d2h", 50e9)):
            rec.add(
                {
                    "direction": direction,
                    "memory": "pinned",
                    "size_bytes": 1 << 30,
                    "bytes_per_s": bps,
                }
            )
        rec.add({"direction": "h2d", "memory": "pinned", "size_bytes": 1 << 20, "bytes_per_s": 1e9})
        recs.append(rec)
    got = health.verdict(accs, [], None, recs)
    assert got["verdict"] == "degraded"
    assert "GPU 1: 16 of 18 NVLinks active" in got["reasons"]
    (slow,) = [r for r in got["reasons"] if "pinned" in r]
    assert slow.startswith("cuda:2: pinned h2d at 27.0 GB/s is 50% of the node's median 54.0 GB/s")
    assert "GPU 2: the slot caps PCIe at Gen4 (the GPU supports Gen5)" in got["notes"]


def test_each_gpu_knows_its_nearest_hca(tmp_path):
    root = fake_sys(tmp_path)
    found = nics.nic_inventory(GPUS, root)
    assert nics.nearest_nics(GPUS[0], found) == [{"name": "mlx5_0", "relation": "PIX"}]
    assert nics.nearest_nics(GPUS[2], found) == [{"name": "mlx5_1", "relation": "PHB"}]
    hidden = dict(GPUS[1], torch_index=None)  # a GPU torch does not see: its NVML index
    row = next(r for r in found if r["name"] == "mlx5_0")
    assert nics.gpu_id(hidden) == 1 and row["gpu_affinity"][1]["mgmt_index"] == 1


def test_nics_docstring_examples():
    import doctest

    failures, tried = doctest.testmod(nics, verbose=False)
    assert tried > 0 and failures == 0


# the layout of `nvidia-smi topo -m` (tab-separated matrix, legend, NIC legend), made up here
TOPO = (
    "\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV18\tPIX\tSYS\t0-31\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tSYS\tPXB\t32-63\t1\t\tN/A\n"
    "NIC0\tPIX\tSYS\t X \tSYS\n"
    "NIC1\tSYS\tPXB\tSYS\t X \n\n"
    "Legend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect\n\n"
    "NIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n"
)


def test_topo_matrix_fills_in_where_sysfs_cannot(tmp_path):
    assert nics.parse_topo_matrix(TOPO) == {
        (0, "mlx5_0"): "PIX",
        (0, "mlx5_1"): "SYS",
        (1, "mlx5_0"): "SYS",
        (1, "mlx5_1"): "PXB",
    }
    old_style = "\tGPU0\tmlx5_0\tCPU Affinity\nGPU0\t X \tNODE\t0-7\nmlx5_0\tNODE\t X \n"
    assert nics.parse_topo_matrix(old_style) == {(0, "mlx5_0"): "NODE"}
    assert nics.parse_topo_matrix(None) == {} and nics.parse_topo_matrix("garbage") == {}
    root = fake_sys(tmp_path)
    # GPU 1's PCI address is not in this sysfs tree (a container that hides it): topo says PXB
    gpus = [GPUS[0], dict(GPUS[1], pci_bus_id="0000:c1:00.0")]
    rows = {r["name"]: r for r in nics.nic_inventory(gpus, root, topo=TOPO)}
    by_gpu = {a["gpu"]: a for a in rows["mlx5_1"]["gpu_affinity"]}
    assert by_gpu[1]["relation"] == "PXB" and by_gpu[1]["source"] == "nvidia-smi topo -m"
    assert by_gpu[0]["relation"] == "SYS" and by_gpu[0]["source"] == "sysfs"  # sysfs first
