"""The shipped catalog data: sourced, dated, unique, physically plausible, cross-referenced."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from gpuplan.catalogs import DTYPES, get_catalog, name_key, validate_catalog
from gpuplan.catalogs.schema import period_start

CAT = get_catalog()
TODAY = dt.date.today()

# Every id of the shared catalog_sources/catalog_gpus.csv (kept as aliases of the rows).
CSV_GPU_IDS = [
    "nvidia_a100_40gb_sxm",
    "nvidia_a100_80gb_sxm",
    "nvidia_a100_40gb_pcie",
    "nvidia_a100_80gb_pcie",
    "nvidia_h100_sxm",
    "nvidia_h100_pcie",
    "nvidia_h100_nvl",
    "nvidia_h200_sxm",
    "nvidia_h200_nvl",
    "nvidia_b200",
    "nvidia_gb200_gpu",
    "nvidia_l40s",
    "nvidia_l4",
    "amd_mi250x",
    "amd_mi300x",
    "amd_mi325x",
    "aws_trainium1",
    "aws_trainium2",
    "google_tpu_v4",
    "google_tpu_v5e",
    "google_tpu_v5p",
    "google_tpu_v6e",
    "intel_gaudi3",
]

# Issue 3 item 4.
REQUIRED_INSTANCES = [
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "trn1.32xlarge",
    "trn1n.32xlarge",
    "trn2.48xlarge",
    "a2-highgpu-8g",
    "a2-ultragpu-8g",
    "a3-highgpu-8g",
    "a3-megagpu-8g",
    "a3-ultragpu-8g",
    "tpu-v4-8",
    "tpu-v5litepod-8",
    "tpu-v5p-8",
    "tpu-v6e-8",
    "Standard_ND96asr_v4",
    "ND H100 v5",
    "ND H200 v5",
    "ND MI300X v5",
]


def test_shipped_catalog_is_valid() -> None:
    assert validate_catalog() == []


def test_get_catalog_is_cached() -> None:
    assert get_catalog() is get_catalog()


def test_counts() -> None:
    assert len(CAT.gpus) >= 20
    assert len(CAT.models) >= 28
    assert len(CAT.instances) >= len(REQUIRED_INSTANCES)
    assert {r.kind for r in CAT.network} == {"fabric", "switch", "nic", "optic"}


@pytest.mark.parametrize("csv_id", CSV_GPU_IDS)
def test_every_csv_accelerator_is_present(csv_id: str) -> None:
    assert csv_id in CAT.gpu(csv_id).aliases


@pytest.mark.parametrize("name", REQUIRED_INSTANCES)
def test_required_instances_present(name: str) -> None:
    CAT.instance(name)


def test_extra_accelerators_with_sources() -> None:
    for gid in ("b300-sxm-288gb", "gb300-gpu", "gaudi2", "mi355x"):
        row = CAT.gpu(gid)
        assert row.source and row.peak_flops_per_s("bf16")


def test_ids_unique_and_well_formed() -> None:
    ids = [r.id for r in CAT.rows()]
    assert len(ids) == len(set(ids))
    for i in ids:
        assert re.fullmatch(r"[a-z0-9][a-z0-9.\-]*[a-z0-9]", i), i


def test_names_unique_across_all_rows() -> None:
    owner: dict[str, str] = {}
    for r in CAT.rows():
        for n in (r.id, *r.aliases):
            k = name_key(n)
            assert owner.setdefault(k, r.id) == r.id, f"{n!r} names {owner[k]} and {r.id}"


def test_every_row_sourced_and_dated() -> None:
    for r in CAT.rows():
        assert len(r.source) >= 8, r.id
        assert re.search(r"https?://|github |arXiv|Table|README|\.md|\.csv", r.source), r.id
        assert dt.date(2020, 1, 1) <= r.retrieved <= TODAY, r.id


def test_every_row_can_be_found_by_each_of_its_names() -> None:
    for r in CAT.rows():
        for n in (r.id, *r.aliases):
            assert CAT.find(n).id == r.id


def test_unverified_names_real_fields() -> None:
    for r in CAT.rows():
        fields = set(type(r).model_fields) | {
            f.alias for f in type(r).model_fields.values() if f.alias
        }
        for u in r.unverified:
            assert u.split(".")[0] in fields, (r.id, u)


# ---- accelerators -------------------------------------------------------------------------
@pytest.mark.parametrize("gpu", CAT.gpus, ids=lambda g: g.id)
def test_accelerator_plausible(gpu) -> None:
    for dtype, dense in gpu.dense_flops_per_s.items():
        assert dtype in DTYPES
        sparse = gpu.sparse_flops_per_s.get(dtype)
        if dense is not None and sparse is not None:
            assert dense <= sparse, dtype
        if dense is not None:
            assert 1e11 <= dense <= 3e16, (dtype, dense)
    bf16 = gpu.peak_flops_per_s("bf16")
    if bf16 is None:  # Volta and Turing have no BF16; a low-confidence row may not know it
        assert gpu.generation in ("volta", "turing") or gpu.confidence == "low", gpu.id
    half = bf16 if bf16 is not None else gpu.peak_flops_per_s("fp16")
    assert half is not None and 5e13 <= half <= 1e16
    fp32 = gpu.peak_flops_per_s("fp32")
    if fp32 is not None:
        assert fp32 <= half
    if gpu.memory_bytes is not None:
        assert 8 * 2**30 <= gpu.memory_bytes <= 512 * 2**30
    if gpu.memory_bandwidth_bytes_per_s is not None:
        assert 1e11 <= gpu.memory_bandwidth_bytes_per_s <= 2e13
    if gpu.tdp_w is not None:
        assert 30 <= gpu.tdp_w <= 2000
    if gpu.scale_up_bandwidth_bytes_per_s is not None:
        assert 0 <= gpu.scale_up_bandwidth_bytes_per_s <= 2e12
        if gpu.scale_up_bandwidth_bytes_per_s == 0:
            assert gpu.scale_up_domain_size == 1
    if gpu.host_link_bandwidth_bytes_per_s is not None:
        # PCIe Gen3 x4 up to NVLink-C2C's 450 GB/s per direction (GH200)
        assert 1e9 <= gpu.host_link_bandwidth_bytes_per_s <= 5e11
    if gpu.scale_up_domain_size is not None:
        assert 1 <= gpu.scale_up_domain_size <= 10_000


@pytest.mark.parametrize("gpu", CAT.gpus, ids=lambda g: g.id)
def test_memory_matches_the_name(gpu) -> None:
    for text in (gpu.id, gpu.name):
        m = re.search(r"(\d+)\s*gb\b", text.lower().replace("-", " "))
        if m:
            assert gpu.memory_bytes == int(m.group(1)) * 2**30, text


def test_in_switch_reduction_only_on_nvswitch_gen3_and_later() -> None:
    with_sharp = {g.id for g in CAT.gpus if g.scale_up_in_switch_reduction}
    assert {"h100-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-180gb", "gb200-gpu-186gb"} <= with_sharp
    assert "a100-sxm4-80gb" not in with_sharp and "mi300x" not in with_sharp


def test_generation_groups_for_transfer() -> None:
    assert CAT.gpu("h100").generation == CAT.gpu("h200").generation == "hopper"
    assert CAT.gpu("mi300x").generation == CAT.gpu("mi325x").generation == "cdna3"
    assert CAT.gpu("h100").vendor == "nvidia" and CAT.gpu("mi300x").vendor == "amd"


def test_dtype_spellings() -> None:
    h100 = CAT.gpu("h100")
    assert h100.peak_flops_per_s("bfloat16") == h100.peak_flops_per_s("bf16") == 989.4e12
    assert h100.peak_flops_per_s("torch.float8_e4m3fn") == 1978.9e12
    assert CAT.gpu("a100").peak_flops_per_s("fp8") is None  # Ampere has no FP8


def test_missing_values_are_reported_not_guessed() -> None:
    b300 = CAT.gpu("b300")  # NVIDIA publishes no B300 TDP or host link in an opened source
    assert b300.tdp_w is None
    assert "tdp_w" in b300.missing_fields()
    assert "host_link_bandwidth_bytes_per_s" in b300.to_dict()["missing"]


def test_unverified_values_flagged() -> None:
    nvl = CAT.gpu("h100-nvl-94gb")
    assert nvl.is_unverified("peak_flops_per_s.bf16")
    assert not CAT.gpu("h100").is_unverified("peak_flops_per_s.bf16")
    assert CAT.node("dgx-h100").is_unverified("max_power_w")


# ---- fabrics / network gear -------------------------------------------------------------
def test_fabric_rates() -> None:
    assert CAT.fabric("NDR").port_bandwidth_bits_per_s == 400e9
    assert CAT.fabric("HDR").port_bandwidth_bits_per_s == 200e9
    assert CAT.fabric("XDR").port_bandwidth_bits_per_s == 800e9
    assert CAT.fabric("nvlink5-nvl72").domain_size == 72
    assert CAT.fabric("nvlink4").domain_size == 8
    for f in CAT.fabrics:
        if f.port_bandwidth_bits_per_s and f.lane_bandwidth_bits_per_s:
            assert f.port_bandwidth_bits_per_s == 4 * f.lane_bandwidth_bits_per_s


def test_switches_and_nics_plausible() -> None:
    qm = CAT.switch("QM9700")
    assert (qm.ports, qm.port_bandwidth_bits_per_s) == (64, 400e9)
    sn = CAT.switch("SN5600")
    assert sn.ports * sn.port_bandwidth_bits_per_s == sn.switching_capacity_bits_per_s
    for sw in CAT.switches:
        CAT.fabric(sw.fabric_id)
        if sw.alt_ports and sw.ports:
            assert sw.alt_ports * sw.alt_port_bandwidth_bits_per_s == pytest.approx(
                sw.ports * sw.port_bandwidth_bits_per_s
            )
    for nic in CAT.nics:
        assert 1e10 <= nic.bandwidth_bits_per_s <= 2e12
        for fid in nic.fabric_ids:
            CAT.fabric(fid)
    for o in CAT.optics:
        assert o.max_reach_m is None or 0 < o.max_reach_m <= 10_000


# ---- instances, nodes, prices -------------------------------------------------------------
@pytest.mark.parametrize("inst", CAT.instances, ids=lambda i: i.id)
def test_instance_references_and_prices(inst) -> None:
    gpu = CAT.gpu(inst.accelerator_id)
    assert gpu.id == inst.accelerator_id
    if inst.nic_id is not None:
        CAT.nic(inst.nic_id)
    for p in inst.prices:
        assert dt.date(2020, 1, 1) <= period_start(p.as_of) <= TODAY
        assert p.source and p.currency == "USD"
        if p.usd_per_hour is None:  # a documented gap: no rate found, the note says so
            assert p.notes.strip()
            continue
        assert p.usd_per_hour > 0
        # price per accelerator-hour within a physical range (0.05 to 30 USD)
        assert 0.05 <= p.usd_per_hour / inst.accelerators_per_node <= 30, p
    if inst.network_bandwidth_bits_per_s is not None:
        assert 1e10 <= inst.network_bandwidth_bits_per_s <= 1e13


def test_historical_prices_kept_and_latest_chosen() -> None:
    p5 = CAT.instance("p5.48xlarge")
    on_demand = [p for p in p5.prices if p.model == "on_demand" and p.region == "us-east-1"]
    assert len(on_demand) >= 2
    assert p5.price("on_demand").usd_per_hour == 55.04  # 2026-11-09 beats the 2025-H1 98.32
    assert CAT.instance("a4x-highgpu-4g").price() is None  # unpublished stays missing


@pytest.mark.parametrize("node", CAT.nodes, ids=lambda n: n.id)
def test_node_references_and_power(node) -> None:
    CAT.gpu(node.accelerator_id)
    for nic in node.nics:
        CAT.nic(nic.nic_id)
    if node.max_power_w is not None:
        per_gpu = node.max_power_w / node.accelerators_per_node
        tdp = CAT.gpu(node.accelerator_id).tdp_w
        assert (tdp or 0.0) <= per_gpu <= 3000
    if node.typical_power_w is not None:
        assert node.typical_power_w <= node.max_power_w
    # a rack of this node type holds at least one node, unless the node is the rack
    if node.rack_power_w is not None and node.max_power_w is not None and not node.rack_scale:
        assert node.rack_power_w >= node.max_power_w


def test_node_physics_from_datasheets() -> None:
    # NVIDIA DGX B200 user guide: 14.3 kW max, 10U, 142.4 kg, air-cooled
    b200 = CAT.node("DGX B200")
    assert (b200.max_power_w, b200.rack_units, b200.weight_kg) == (14300, 10, 142.4)
    assert b200.cooling == "air" and not b200.is_unverified("max_power_w")
    nvl = CAT.node("GB200 NVL72 rack")
    assert nvl.rack_scale and nvl.cooling == "liquid"
    assert nvl.typical_power_w >= 120_000 and nvl.max_power_w >= nvl.typical_power_w
    for node in CAT.nodes:
        assert node.cooling in ("air", "liquid"), node.id


def test_required_node_types() -> None:
    for name in ("DGX A100", "DGX H100", "DGX H200", "DGX B200", "DGX B300", "MI300X platform"):
        CAT.node(name)


# ---- storage ------------------------------------------------------------------------------
def test_storage_tiers_plausible() -> None:
    names = {s.id for s in CAT.storage}
    for required in (
        "fsx-lustre-persistent2-1000",
        "gcp-managed-lustre-1000",
        "gcp-parallelstore",
        "gcp-filestore-zonal",
        "azure-managed-lustre-500",
        "wekafs",
        "ibm-storage-scale",
        "vast-data",
        "local-nvme",
    ):
        assert required in names
    for s in CAT.storage:
        if s.read_bytes_per_s_per_tib is not None:
            assert 1e6 <= s.read_bytes_per_s_per_tib <= 1e10, s.id
        if s.capacity_min_bytes and s.capacity_max_bytes:
            assert s.capacity_min_bytes < s.capacity_max_bytes, s.id
        if s.capacity_step_bytes and s.capacity_min_bytes:
            assert s.capacity_step_bytes <= s.capacity_min_bytes, s.id
