"""Catalog rows that the training forecast needs for every current chip (issue 15).

Each figure is the one the row's cited source prints (or derives, as the row's notes say).
"""

from __future__ import annotations

import pytest

from gpuplan.catalogs import get_catalog

CAT = get_catalog()
GIB = 2**30


@pytest.mark.parametrize(
    ("name", "row_id", "memory_gib", "bf16", "fp8", "fp4"),
    [
        ("GB300", "gb300-gpu", 279, 2500e12, 5000e12, 15000e12),
        ("Ironwood", "tpu7x", 192, 2307e12, 4614e12, None),
        ("MI350X", "mi350x", 288, 2300e12, 4600e12, 9200e12),
        ("H800", "h800-sxm5-80gb", 80, 989.4e12, 1978.9e12, None),
        ("H20", "h20-96gb", 96, 148e12, 296e12, None),
        ("Trainium2", "trainium2", 96, 667e12, 1299e12, None),
    ],
)
def test_training_chips_complete(name, row_id, memory_gib, bf16, fp8, fp4):
    row = CAT.gpu(name)
    assert row.id == row_id
    assert row.memory_bytes == memory_gib * GIB
    assert row.memory_bandwidth_bytes_per_s and row.memory_bandwidth_bytes_per_s > 1e12
    assert row.peak_flops_per_s("bf16") == bf16
    assert row.peak_flops_per_s("fp8") == fp8
    assert row.peak_flops_per_s("fp4") == fp4
    assert row.scale_up_bandwidth_bytes_per_s and row.scale_up_domain_size
    assert row.source and row.retrieved


def test_scale_up_bandwidth_where_it_was_missing():
    # TPU v4: 1.1 PB/s all-reduce bandwidth per 4096-chip pod (Google's v4 page)
    assert CAT.gpu("tpu-v4").scale_up_bandwidth_bytes_per_s == pytest.approx(
        1.1e15 / 4096, rel=1e-3
    )
    # MI355X: 7 xGMI links of 153.6 GB/s bidirectional, per direction
    assert CAT.gpu("mi355x").scale_up_bandwidth_bytes_per_s == pytest.approx(7 * 153.6e9 / 2)
    # H800: NVLink cut to 400 GB/s bidirectional
    assert CAT.gpu("h800").scale_up_bandwidth_bytes_per_s == 200e9
