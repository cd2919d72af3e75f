"""Malformed catalog files: every problem names the file, the row and the field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuplan.catalogs import load_catalog, validate_catalog
from gpuplan.catalogs.loader import default_data_dir
from gpuplan.errors import SchemaError


@pytest.fixture
def catalog_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "catalog"
    shutil.copytree(default_data_dir(), dst)
    return dst


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"fixture text {old!r} not found in {path.name}"
    path.write_text(text.replace(old, new, 1))


def test_copy_of_shipped_catalog_loads(catalog_copy: Path) -> None:
    cat = load_catalog(catalog_copy)
    assert cat.gpu("h100").id == "h100-sxm5-80gb"


def test_wrong_type_names_file_row_field(catalog_copy: Path) -> None:
    _edit(catalog_copy / "accelerators.yaml", "tdp_w: 700\n", "tdp_w: seven hundred\n")
    problems = validate_catalog(catalog_copy)
    hit = [p for p in problems if p.field == "tdp_w"]
    assert hit and hit[0].file == "accelerators.yaml"
    assert "h100-sxm5-80gb" in hit[0].row
    with pytest.raises(
        SchemaError, match=r"accelerators\.yaml: row \d+ \(h100-sxm5-80gb\): field tdp_w"
    ):
        load_catalog(catalog_copy)


def test_nested_field_is_named(catalog_copy: Path) -> None:
    _edit(catalog_copy / "instances.yaml", "usd_per_hour: 55.04", "usd_per_hour: -55.04")
    problems = validate_catalog(catalog_copy)
    assert any(
        p.file == "instances.yaml" and "p5.48xlarge" in p.row and p.field == "prices.0.usd_per_hour"
        for p in problems
    ), problems


def test_dense_above_sparse_is_rejected(catalog_copy: Path) -> None:
    _edit(
        catalog_copy / "accelerators.yaml",
        "peak_flops_per_s: {fp64: 66.9e+12, fp32: 66.9e+12, tf32: 494.7e+12, bf16: 989.4e+12",
        "peak_flops_per_s: {fp64: 66.9e+12, fp32: 66.9e+12, tf32: 494.7e+12, bf16: 1979.4e+12",
    )
    problems = validate_catalog(catalog_copy)
    assert any("above the sparse peak" in p.message and "h100-sxm5-80gb" in p.row for p in problems)


def test_unknown_field_is_reported_as_typo(catalog_copy: Path) -> None:
    _edit(catalog_copy / "nodes.yaml", "max_power_w: 10200", "max_power_kw: 10.2")
    problems = validate_catalog(catalog_copy)
    fields = {(p.row.split(" ")[-1], p.field, p.message) for p in problems}
    assert ("(dgx-h100)", "max_power_kw", "unknown field (typo?)") in fields
    assert ("(dgx-h100)", "max_power_w", "required field is missing") in fields


def test_missing_source_and_date(catalog_copy: Path) -> None:
    text = (catalog_copy / "optics.yaml").read_text()
    text = text.replace("    retrieved: 2026-11-30\n", "", 1)
    (catalog_copy / "optics.yaml").write_text(text)
    problems = validate_catalog(catalog_copy)
    assert any(p.file == "optics.yaml" and p.field == "retrieved" for p in problems)


def test_bad_yaml_names_file_and_line(catalog_copy: Path) -> None:
    path = catalog_copy / "switches.yaml"
    path.write_text(path.read_text() + "  - id: [unclosed\n")
    problems = validate_catalog(catalog_copy)
    assert len(problems) == 1
    assert problems[0].file == "switches.yaml" and "line" in problems[0].message


def test_dangling_reference(catalog_copy: Path) -> None:
    _edit(catalog_copy / "instances.yaml", "accelerator_id: mi300x", "accelerator_id: mi400x")
    problems = validate_catalog(catalog_copy)
    assert any(
        p.field == "accelerator_id"
        and "standard-nd96isr-mi300x-v5" in p.row
        and "mi400x" in p.message
        for p in problems
    ), problems


def test_duplicate_alias_across_rows(catalog_copy: Path) -> None:
    _edit(catalog_copy / "accelerators.yaml", "aliases: [l4, ", "aliases: [h100, l4, ")
    problems = validate_catalog(catalog_copy)
    assert any(p.field == "aliases" and "'h100'" in p.message for p in problems), problems


def test_bad_id_reported_by_index(catalog_copy: Path) -> None:
    _edit(catalog_copy / "fabrics.yaml", "- id: nvlink2\n", "- id: NVLink_2\n")
    problems = validate_catalog(catalog_copy)
    assert any(
        p.file == "fabrics.yaml" and p.field == "id" and p.row.startswith("0") for p in problems
    )


def test_unverified_must_name_a_field(catalog_copy: Path) -> None:
    _edit(
        catalog_copy / "nodes.yaml",
        "unverified: [max_power_w, rack_units, cpu]",
        "unverified: [max_powr_w]",
    )
    problems = validate_catalog(catalog_copy)
    assert any("max_powr_w" in p.message and "dgx-h100" in p.row for p in problems)


def test_price_without_date_rejected(catalog_copy: Path) -> None:
    _edit(
        catalog_copy / "instances.yaml",
        "as_of: 2026-11-09, source: DATARECEIPTS}",
        "as_of: soon, source: DATARECEIPTS}",
    )
    problems = validate_catalog(catalog_copy)
    assert any(p.field.endswith("as_of") and p.file == "instances.yaml" for p in problems)


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="does not exist"):
        load_catalog(tmp_path / "nope")


def test_parsed_cache_is_used_and_never_stale(catalog_copy: Path, _private_cache: Path) -> None:
    first = load_catalog(catalog_copy)
    cached = list((_private_cache / "gpuplan").glob("catalog-*.json"))
    assert len(cached) == 1
    assert load_catalog(catalog_copy).gpu("h100").tdp_w == first.gpu("h100").tdp_w == 700
    # An edited file changes the cache key: the new value is served, not the cached one.
    _edit(catalog_copy / "accelerators.yaml", "tdp_w: 700\n", "tdp_w: 701\n")
    assert load_catalog(catalog_copy).gpu("h100").tdp_w == 701
    assert len(list((_private_cache / "gpuplan").glob("catalog-*.json"))) == 2


def test_corrupt_cache_is_ignored(catalog_copy: Path, _private_cache: Path) -> None:
    load_catalog(catalog_copy)
    (cache_file,) = (_private_cache / "gpuplan").glob("catalog-*.json")
    cache_file.write_text("{not json")
    assert load_catalog(catalog_copy).gpu("h200").memory_bytes == 141 * 2**30
