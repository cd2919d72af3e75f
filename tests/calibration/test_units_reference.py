"""Size/value parsing and the conversion of the published table into result documents."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.calibration.reference import (
    MICROBENCH_CSV,
    build_reference_documents,
    busbw_factor,
    parse_value,
    read_microbench,
    reference_file_name,
)
from gpuplan.calibration.units import parse_gemm_shape, parse_size_bytes, short_dtype
from gpuplan.errors import InputError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1GiB", 2**30),
        ("32KiB", 32 * 1024),
        ("up to 4GiB", 4 * 2**30),
        ("256MiB (peak)", 256 * 2**20),
        ("8GB", 8_000_000_000),
        ("0.9MB", 900_000),
        ("32,000,000 B", 32_000_000),
        ("1m", 2**20),
        ("16G", 16 * 2**30),
    ],
)
def test_parse_size_bytes(text, expected):
    assert parse_size_bytes(text) == expected


def test_parse_size_rejects_text_without_a_number():
    with pytest.raises(InputError, match="cannot read a size"):
        parse_size_bytes("guidance")


def test_parse_gemm_shape_and_values():
    assert parse_gemm_shape("best shape MxNxK 14336x15360x2048") == (14336, 15360, 2048)
    assert parse_value("84.8 avg; ~96 peak") == (96.0, True)
    assert parse_value("~350 (chart); ~339 (text)") == (339.0, True)
    assert parse_value("1745.0") == (1745.0, False)
    assert short_dtype("float8_e4m3fn") == "fp8"
    with pytest.raises(InputError, match="unknown dtype"):
        short_dtype("float7")


def test_busbw_factors_follow_nccl_tests():
    assert busbw_factor("all_reduce", 8) == pytest.approx(1.75)
    assert busbw_factor("all_gather", 4) == pytest.approx(0.75)
    assert busbw_factor("broadcast", 16) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def converted(catalog):
    return build_reference_documents(read_microbench(), catalog=catalog)


def test_every_row_is_converted_or_skipped_with_a_reason(converted):
    docs, skipped, unresolved = converted
    rows = read_microbench()
    ids = {m["bench_id"] for d in docs for p in d["probes"] for m in p["measurements"]}
    skipped_ids = {s.bench_id for s in skipped}
    assert ids | skipped_ids == {r["bench_id"] for r in rows}
    assert not ids & skipped_ids
    reasons = {s.bench_id: s.reason for s in skipped}
    assert "guidance" in reasons["issue_h100_guidance"]
    assert "block size" in reasons["llama3_tectonic"]
    # every catalog-resolvable accelerator resolved; unresolved notes name the hardware
    assert unresolved == []


def test_documents_are_typed_and_carry_their_source(converted):
    docs, _, _ = converted
    by_bench = {
        m["bench_id"]: (d, p, m) for d in docs for p in d["probes"] for m in p["measurements"]
    }
    d, p, m = by_bench["mamf_bf16_NVIDIA_A100_SXM"]
    assert p["probe"] == "matmul" and p["params"]["dtype"] == "bfloat16"
    assert m["shape"] == {"m": 1024, "n": 10240, "k": 5120}
    assert m["flops_per_s"] == pytest.approx(271.2e12)
    assert d["source"].startswith("stas00/ml-engineering")
    assert d["host"]["accelerators"][0]["catalog_id"] == "a100-sxm4-80gb"

    d, p, m = by_bench["vp_h100_4node_ar_1GiB"]
    assert (m["op"], m["ranks"], m["num_nodes"], m["scope"]) == ("all_reduce", 32, 4, "inter")
    assert m["size_bytes"] == 2**30
    assert m["busbw_bytes_per_s"] == pytest.approx(324.48e9)
    assert m["algbw_bytes_per_s"] == pytest.approx(324.48e9 / (2 * 31 / 32))

    _, p, m = by_bench["vp_h100_d2d_64MB"]
    assert p["probe"] == "membw" and m["op"] == "copy" and m["bytes_moved"] == 2 * m["size_bytes"]
    _, p, m = by_bench["mleng_nvme_fio_1g_read"]
    assert p["probe"] == "storage" and m["block_size_bytes"] == 4096 and m["numjobs"] == 16
    assert m["bw_bytes_per_s"] == pytest.approx(2762.0 * 2**20)
    # the NVLS-off run of the same table row becomes its own ring measurement
    b200 = [x for x in by_bench.values() if x[2]["bench_id"] == "mleng_b200_nvls_8gpu"]
    algos = sorted(
        mm.get("algorithm")
        for dd in docs
        for pp in dd["probes"]
        for mm in pp["measurements"]
        if mm["bench_id"] == "mleng_b200_nvls_8gpu"
    )
    assert b200 and algos == ["nvls", "ring"]


def test_results_reference_is_what_the_script_produces(converted):
    docs, _, _ = converted
    ref_dir = REPO / "results" / "reference"
    on_disk = {p.name: json.loads(p.read_text()) for p in ref_dir.glob("*.json")}
    built = {reference_file_name(d): d for d in docs}
    assert set(on_disk) == set(built), "rebuild with: .venv/bin/python scripts/build_reference.py"
    for name, doc in built.items():
        assert on_disk[name] == doc, f"{name} is stale: run scripts/build_reference.py"


def test_build_script_check_mode_passes():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "skipped issue_h100_guidance" in proc.stderr


def test_packaged_table_keeps_the_source_columns():
    header = MICROBENCH_CSV.read_text(encoding="utf-8").splitlines()[0].split(",")
    for column in ("source", "source_locator", "confidence", "notes", "tool"):
        assert column in header
