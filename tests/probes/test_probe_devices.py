"""Devices matched between NVML/amdsmi and torch by UUID or PCI bus id, MIG, PCIe, energy.

There is no GPU on the machines that run this suite, so NVML, amdsmi and torch's CUDA
device table are replaced at the edge by small fakes (``FakeNvml``, ``FakeAmdsmi``,
``FakeTorch``) that answer the way the real libraries do (NVML ``GPU-``/``MIG-`` UUIDs and
8-digit PCI domains, torch's bare UUIDs, amdsmi's ``pcie_static``/``pcie_metric``). The code
under test is the real matching, inventory and power-sampling code. ``tests/gpu`` runs the
same paths against the real libraries on a GPU machine.
"""

from __future__ import annotations

import sys
import time
import types
from dataclasses import dataclass, field

import pytest

from gpuplan.probes import inventory, power
from gpuplan.probes.inventory import match_devices, normalize_bus_id, normalize_uuid
from gpuplan.probes.suite import _index_map, accelerator_for
from gpuplan.results.schema import Host

HEX = ["8a1b2c3d-0000-1111-2222-33334444555{}", "9f00aa11-1234-5678-9abc-def01234567{}"]


@dataclass
class FakeGpu:
    uuid: str
    bus_id: str
    name: str = "NVIDIA H100 80GB HBM3"
    gen_max: int = 5
    gen_now: int = 1  # idle: the link downtrains
    mig_uuids: list[str] = field(default_factory=list)
    energy_mj: float = 0.0
    energy_rate_w: float = 0.0


class FakeNvml(types.ModuleType):
    """The part of pynvml the inventory and the power sampler use."""

    NVML_FEATURE_ENABLED = 1
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_NVLINK_MAX_LINKS = 2

    def __init__(self, gpus: list[FakeGpu]) -> None:
        super().__init__("pynvml")
        self.gpus = gpus
        self.t0 = time.monotonic()

    def nvmlInit(self):
        return None

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def _gpu(self, h):
        if h[0] == "mig":
            raise RuntimeError("not supported on a MIG handle")
        return self.gpus[h[1]]

    def nvmlDeviceGetUUID(self, h):
        if h[0] == "mig":
            return self.gpus[h[1]].mig_uuids[h[2]]
        return self._gpu(h).uuid

    def nvmlDeviceGetName(self, h):
        return self.gpus[h[1]].name

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(total=(10 << 30) if h[0] == "mig" else (80 << 30))

    def nvmlDeviceGetPciInfo(self, h):
        return types.SimpleNamespace(busId=self._gpu(h).bus_id.encode())

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._gpu(h).gen_max

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._gpu(h).gen_now

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetNvLinkState(self, h, link):
        return 1

    def nvmlDeviceGetEccMode(self, h):
        return (1, 1)

    def nvmlDeviceGetMigMode(self, h):
        g = self._gpu(h)
        return (1, 1) if g.mig_uuids else (0, 0)

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, j):
        if j >= len(self._gpu(h).mig_uuids):
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return ("mig", h[1], j)

    def nvmlDeviceGetPowerUsage(self, h):
        return self._gpu(h).energy_rate_w * 1e3

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        g = self._gpu(h)
        return g.energy_mj + g.energy_rate_w * 1e3 * (time.monotonic() - self.t0)

    def nvmlSystemGetDriverVersion(self):
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040


class FakeTorch:
    """torch.cuda's device table as torch reports it under CUDA_VISIBLE_DEVICES."""

    def __init__(self, props: list[dict]) -> None:
        self._props = props
        self.version = types.SimpleNamespace(cuda="12.4", hip=None)
        self.cuda = types.SimpleNamespace(
            device_count=lambda: len(props),
            is_available=lambda: bool(props),
            get_device_properties=lambda i: types.SimpleNamespace(**props[i]),
        )


def node(n: int = 4) -> list[FakeGpu]:
    return [
        FakeGpu(
            uuid=f"GPU-{HEX[0].format(i).upper()}", bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0"
        )
        for i in range(n)
    ]


def torch_props(gpu: FakeGpu, *, with_uuid=True, with_pci=True, uuid=None) -> dict:
    bus = int(gpu.bus_id.split(":")[1], 16)
    p = {"name": gpu.name, "total_memory": 80 << 30}
    if with_uuid:
        p["uuid"] = uuid or gpu.uuid.removeprefix("GPU-").lower()
    if with_pci:
        p.update(pci_bus_id=bus, pci_domain_id=0, pci_device_id=0)
    return p


@pytest.fixture
def fake_nvml(monkeypatch):
    def install(gpus):
        fake = FakeNvml(gpus)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        monkeypatch.setitem(sys.modules, "amdsmi", None)  # import amdsmi -> ImportError
        return fake

    return install


def test_identifiers_normalise_across_libraries():
    assert normalize_uuid("GPU-8A1B2C3D-0000-1111-2222-333344445550") == normalize_uuid(
        "8a1b2c3d-0000-1111-2222-333344445550"
    )
    assert normalize_uuid("MIG-9f00aa11-1234-5678-9abc-def012345670") == normalize_uuid(
        "9f00aa11-1234-5678-9abc-def012345670"
    )
    assert normalize_uuid("") is None and normalize_uuid(None) is None
    assert normalize_bus_id(b"00000000:1B:00.0") == "0000:1b:00.0"
    assert normalize_bus_id("0001:c1:00.1") == "0001:c1:00.1"
    assert normalize_bus_id("not a bus") is None


def test_shuffled_visible_devices_match_by_uuid_not_by_index(fake_nvml, monkeypatch):
    gpus = node(4)
    fake_nvml(gpus)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    torch = FakeTorch([torch_props(gpus[2]), torch_props(gpus[0])])
    accs, extras = inventory.accelerators(torch)
    assert [a["mgmt_index"] for a in accs] == [2, 0, 1, 3]
    assert [a["torch_index"] for a in accs] == [0, 1, None, None]
    assert [a["matched_by"] for a in accs[:2]] == ["uuid", "uuid"]
    assert accs[0]["uuid"] == gpus[2].uuid and accs[0]["pci_bus_id"] == "0000:38:00.0"
    assert extras["driver_version"] == "550.54.15"
    # the power sampler and the spec lookup of torch device 0 go to NVML device 2
    assert _index_map(accs) == {0: 2, 1: 0}
    assert accelerator_for(accs, 0)["mgmt_index"] == 2
    assert accelerator_for(accs, 5) is None
    Host.model_validate({"machine_id": "x", "accelerators": accs})


def test_pci_bus_id_matches_when_torch_has_no_uuid(fake_nvml, monkeypatch):
    gpus = node(3)
    fake_nvml(gpus)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-whatever")
    torch = FakeTorch([torch_props(gpus[1], with_uuid=False)])
    accs, _ = inventory.accelerators(torch)
    assert accs[0]["mgmt_index"] == 1 and accs[0]["matched_by"] == "pci_bus_id"


def test_without_identity_the_visible_list_then_position_is_used():
    managed = [{"uuid": None}, {"uuid": None}, {"uuid": None}]
    visible = [{"index": 0}, {"index": 1}]
    assert match_devices(visible, managed, {"CUDA_VISIBLE_DEVICES": "2,1"}) == [
        (2, "visible_devices"),
        (1, "visible_devices"),
    ]
    assert match_devices(visible, managed, {}) == [
        (0, "index (unverified)"),
        (1, "index (unverified)"),
    ]


def test_mig_instances_are_recorded_and_matched_to_their_gpu(fake_nvml, monkeypatch):
    gpus = node(2)
    gpus[1].mig_uuids = [f"MIG-{HEX[1].format(0)}", f"MIG-{HEX[1].format(1)}"]
    fake_nvml(gpus)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", gpus[1].mig_uuids[1])
    torch = FakeTorch([torch_props(gpus[1], with_pci=False, uuid=HEX[1].format(1))])
    accs, _ = inventory.accelerators(torch)
    first = accs[0]
    assert first["mgmt_index"] == 1 and first["torch_index"] == 0
    assert first["matched_by"] == "uuid"
    assert first["mig_instance_uuid"] == HEX[1].format(1)
    assert first["mig"]["enabled"] is True
    assert [d["uuid"] for d in first["mig"]["devices"]] == gpus[1].mig_uuids
    assert first["mig"]["devices"][0]["memory_bytes"] == 10 << 30
    assert accs[1]["mig"] == {"enabled": False, "pending": False, "devices": []}


def test_pcie_generation_is_the_link_maximum_with_the_current_one_apart(fake_nvml):
    gpus = node(1)
    fake_nvml(gpus)
    accs = inventory.nvml_accelerators(sys.modules["pynvml"])
    assert accs[0]["pcie_gen"] == 5 and accs[0]["pcie_gen_current"] == 1
    assert accs[0]["energy_counter"] is True


class FakeAmdsmi(types.ModuleType):
    def __init__(self, static: dict, metric: dict) -> None:
        super().__init__("amdsmi")
        self.static, self.metric = static, metric

    def amdsmi_init(self):
        return None

    def amdsmi_get_processor_handles(self):
        return ["h0"]

    def amdsmi_get_gpu_asic_info(self, h):
        return {"market_name": "AMD Instinct MI300X", "target_graphics_version": "gfx942"}

    def amdsmi_get_gpu_vram_info(self, h):
        return {"vram_size": 196608}

    def amdsmi_get_power_cap_info(self, h):
        return {"power_cap": 750_000_000}

    def amdsmi_get_pcie_info(self, h):
        return {"pcie_static": self.static, "pcie_metric": self.metric}

    def amdsmi_get_gpu_device_uuid(self, h):
        return "3dff74a1-0000-1000-80b1-96e5a1b1a7d2"

    def amdsmi_get_gpu_device_bdf(self, h):
        return "0000:c1:00.0"

    def amdsmi_get_energy_count(self, h):
        return {"energy_accumulator": 1_000_000, "counter_resolution": 15.3, "timestamp": 1}


def test_amd_pcie_generation_from_the_right_amdsmi_keys():
    smi = FakeAmdsmi(
        {
            "max_pcie_width": 16,
            "max_pcie_speed": 32000,
            "pcie_interface_version": 5,
            "max_pcie_interface_version": 5,
        },
        {"pcie_width": 16, "pcie_speed": 16000},
    )
    acc = inventory.amdsmi_accelerators(smi)[0]
    assert (acc["pcie_gen"], acc["pcie_width"]) == (5, 16)
    assert (acc["pcie_gen_current"], acc["pcie_width_current"]) == (4, 16)
    assert acc["pci_bus_id"] == "0000:c1:00.0" and acc["gfx_arch"] == "gfx942"
    assert acc["memory_bytes"] == 192 << 30 and acc["power_limit_w"] == 750
    # older amdsmi: no max_pcie_interface_version -> from the maximum speed; "N/A" -> None
    old = FakeAmdsmi({"max_pcie_width": 16, "max_pcie_speed": 16000}, {"pcie_speed": "N/A"})
    acc = inventory.amdsmi_accelerators(old)[0]
    assert acc["pcie_gen"] == 4 and acc["pcie_gen_current"] is None


def test_energy_counter_gives_power_and_energy(fake_nvml):
    gpus = node(3)
    gpus[0].energy_rate_w, gpus[1].energy_rate_w, gpus[2].energy_rate_w = 100.0, 50.0, 400.0
    fake_nvml(gpus)
    sampler = power.default_sampler(interval_s=0.02, index_map={0: 2, 1: 0})
    assert sampler is not None and sampler.energy is not None
    with sampler.sampling([0, 1]) as samples:  # torch 0 -> NVML 2 (400 W), 1 -> NVML 0
        time.sleep(0.3)
    summary = sampler.summary(samples, [0, 1])
    assert summary["source"] == "nvml-energy"
    assert summary["median"] == pytest.approx(500.0, rel=0.02)
    assert summary["mean"] == pytest.approx(500.0, rel=0.02)
    assert summary["energy_j"] == pytest.approx(500.0 * summary["duration_s"], rel=0.02)


def test_amdsmi_energy_in_joules():
    assert power.amdsmi_energy_j({"energy_accumulator": 1_000_000, "counter_resolution": 15.3}) == (
        pytest.approx(15.3)
    )
    assert power.amdsmi_energy_j({"counter_resolution": 1.0}) is None
