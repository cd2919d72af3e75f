"""RTX 6000 Ada Generation and TPU7x (Ironwood): names and sourced figures.

Each figure is the one the row's cited source prints (or derives, as the row's notes say and
its ``unverified`` list marks).
"""

from __future__ import annotations

import pytest

from gpuplan.catalogs import get_catalog, name_key
from gpuplan.errors import NotFoundError

CAT = get_catalog()
GIB = 2**30
RTX = "rtx-6000-ada-48gb"
PRO = "rtx-pro-6000-blackwell-server"


@pytest.mark.parametrize(
    "name",
    [
        "RTX 6000 Ada",
        "NVIDIA RTX 6000 Ada",
        "NVIDIA RTX 6000 Ada Generation",  # nvidia-smi's name
        "rtx-6000-ada",
        "rtx6000ada",
        "RTX 6000 Ada 48GB",  # a system's name with the memory: rule 5
        RTX,
    ],
)
def test_rtx_6000_ada_names(name: str) -> None:
    assert CAT.gpu(name).id == RTX


@pytest.mark.parametrize(
    "name",
    ["TPU v7", "tpu7x", "TPU7x", "Ironwood", "TPU v7 Ironwood", "Google TPU v7", "tpu7x-64"],
)
def test_ironwood_names(name: str) -> None:
    assert CAT.gpu(name).id == "tpu7x"


@pytest.mark.parametrize("name", ["RTX 6000", "rtx 6000", "NVIDIA RTX 6000", "RTX6000"])
def test_bare_rtx_6000_names_no_row(name: str) -> None:
    # Turing Quadro RTX 6000, RTX 6000 Ada and RTX PRO 6000 Blackwell all go by it: refused as
    # unknown (not silently one of them, not ambiguous), with both catalog parts as hints
    with pytest.raises(NotFoundError) as err:
        CAT.gpu(name)
    assert "ambiguous" not in err.value.message
    assert RTX in err.value.hint and PRO in err.value.hint


@pytest.mark.parametrize("name", ["RTX PRO 6000", "rtx pro 6000", "RTX PRO 6000 Blackwell"])
def test_rtx_pro_6000_still_resolves(name: str) -> None:
    assert CAT.gpu(name).id == PRO


def test_new_names_owned_by_one_row() -> None:
    owner: dict[str, set[str]] = {}
    for r in CAT.rows():
        for n in (r.id, *r.aliases):
            owner.setdefault(name_key(n), set()).add(r.id)
    for rid in (RTX, "tpu7x"):
        for n in (rid, *CAT.gpu(rid).aliases):
            assert owner[name_key(n)] == {rid}, n
    assert "rtx6000" not in owner


def test_rtx_6000_ada_figures() -> None:
    g = CAT.gpu(RTX)
    assert g.vendor == "nvidia" and g.generation == "ada"
    assert g.memory_bytes == 48 * GIB
    assert g.memory_bandwidth_bytes_per_s == 960e9
    assert g.peak_flops_per_s("fp32") == 91.1e12
    # NVIDIA's one tensor figure: 1,457 TFLOPS FP8 with sparsity; dense = half
    assert g.sparse_flops_per_s == {"fp8": 1457e12}
    assert g.peak_flops_per_s("fp8") == 1457e12 / 2
    # the L40/L40S datasheet's ratios for the same AD102 configuration
    assert g.peak_flops_per_s("bf16") == g.peak_flops_per_s("fp16") == 1457e12 / 4
    assert g.peak_flops_per_s("tf32") == 1457e12 / 8
    assert g.peak_flops_per_s("int8") == 1457e12 / 2
    assert g.peak_flops_per_s("fp4") is None  # Ada has no FP4
    assert "peak_flops_per_s.fp64" in g.missing_fields()  # supported, unpublished
    assert g.tdp_w == 300
    assert g.scale_up_bandwidth_bytes_per_s == 0 and g.scale_up_domain_size == 1
    assert g.host_link == "PCIe Gen4 x16" and g.host_link_bandwidth_bytes_per_s == 31e9
    for derived in ("tf32", "bf16", "fp16", "fp8", "int8"):
        assert g.is_unverified(f"peak_flops_per_s.{derived}")
    for read in ("memory_bytes", "memory_bandwidth_bytes_per_s", "tdp_w", "peak_flops_per_s.fp32"):
        assert not g.is_unverified(read)
    assert "rtx6000-datasheet" in g.source and g.retrieved.isoformat() == "2026-12-07"


def test_ironwood_figures() -> None:
    t = CAT.gpu("Ironwood")
    assert t.vendor == "google" and t.generation == "tpu7x"
    assert t.memory_bytes == 192 * GIB
    assert t.memory_bandwidth_bytes_per_s == 7380e9
    assert t.peak_flops_per_s("bf16") == 2307e12
    assert t.peak_flops_per_s("fp8") == 4614e12
    assert t.peak_flops_per_s("int8") is None
    # 1200 GBps bidirectional ICI per chip, per direction as the v5p row
    assert t.scale_up_bandwidth_bytes_per_s == 1200e9 / 2
    assert t.scale_up_bandwidth_bytes_per_s == CAT.gpu("v5p").scale_up_bandwidth_bytes_per_s
    assert t.scale_up_domain_size == 9216
    assert t.cluster_unit == 4
    assert t.tdp_w is None and "tdp_w" in t.missing_fields()
    assert t.host_link_bandwidth_bytes_per_s is None
    assert t.unverified == ()
    fab = CAT.fabric(t.scale_up_fabric_id)
    assert fab.id == "tpu-ici-v7"
    assert fab.per_gpu_bandwidth_bytes_per_s == t.scale_up_bandwidth_bytes_per_s
    assert fab.domain_size == t.scale_up_domain_size
    assert t.retrieved.isoformat() == "2026-12-07"
