"""A part measured in one dtype but not another transfers the other from its *own* matrix
units: its measured efficiency times the ratio of the two dtypes' efficiencies on the
parts that measured both (``models._own_dtype_ratio``), not another part's efficiency.

Published set: the MI300X measures bf16 (mamf-finder, 51% of peak) and fp8 (hipBLASLt on
Azure's ND MI300X v5, 44%); the MI325X and MI355X measure bf16 only (60%, 68%).
"""

from __future__ import annotations

import pytest

from gpuplan.calibration.fit import calibrate_documents
from gpuplan.calibration.reference import build_reference_documents, read_microbench


@pytest.fixture(scope="module")
def matmul(catalog):
    docs, _, _ = build_reference_documents(read_microbench(), catalog=catalog)
    artifact = calibrate_documents(
        docs, include_reference=False, catalog=catalog, cross_validation=False
    )
    return {
        dtype: artifact["models"][f"matmul_{dtype}"]["coefficients"]["devices"]
        for dtype in ("bf16", "fp8")
    }


def test_mi355x_fp8_is_its_own_bf16_efficiency_times_the_amd_fp8_bf16_ratio(matmul) -> None:
    bf16, fp8 = matmul["bf16"], matmul["fp8"]
    assert bf16["mi300x"]["basis"] == fp8["mi300x"]["basis"] == "measured"
    assert bf16["mi355x"]["basis"] == "measured"
    ratio = fp8["mi300x"]["fraction"] / bf16["mi300x"]["fraction"]
    entry = fp8["mi355x"]
    assert entry["basis"] == "transferred"
    assert entry["fraction"] == pytest.approx(bf16["mi355x"]["fraction"] * ratio, rel=1e-9)
    assert entry["transfer"]["note"] == "own bf16 efficiency x fp8/bf16 ratio"
    assert entry["transfer"]["from_devices"] == ["mi300x"]
    # a part that reaches more of its bf16 peak than the MI300X is read faster in fp8 too
    assert entry["fraction"] > fp8["mi300x"]["fraction"]
    low, high = entry["interval"]
    assert low < 1.0 < high


def test_a_part_with_no_related_measurement_still_transfers_by_pool(matmul) -> None:
    """A part with no measurement of its own in a related dtype keeps the
    vendor/generation pool transfer (no note about its own efficiency)."""
    for device, entry in matmul["fp8"].items():
        if entry["basis"] != "transferred":
            continue
        own_bf16 = matmul["bf16"].get(device, {}).get("basis") == "measured"
        note = (entry.get("transfer") or {}).get("note")
        assert (note == "own bf16 efficiency x fp8/bf16 ratio") is own_bf16, device
