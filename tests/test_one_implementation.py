"""One implementation of each shared thing (issue 14): the atomic writer, the size parser,
the SI formatter, the nccl-tests bus-bandwidth table and the JSON text helper.

Each is imported from its one home and checked on values that could be wrong; then the
package source is searched for the definitions that used to be copies of them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import gpuplan
from gpuplan.errors import InputError
from gpuplan.fsio import to_json_text, write_atomic, write_json_atomic
from gpuplan.units import BUSBW_FACTORS, busbw_factor, fmt_si, parse_size_bytes

PACKAGE = Path(gpuplan.__file__).resolve().parent


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4G", 4 * 2**30),  # bare letter: binary, like fio and nccl-tests -b/-e
        ("4g", 4 * 2**30),
        ("4GiB", 4 * 2**30),
        ("4GB", 4 * 10**9),  # spelled SI unit: decimal
        ("0.9MB", 900_000),
        ("32768K", 32 * 2**20),
        ("1 MiB", 2**20),
        ("512", 512),
        ("1,000 B", 1000),
        ("1.5GiB", 3 * 2**29),
    ],
)
def test_one_size_parser_and_its_convention(text, expected):
    assert parse_size_bytes(text, strict=True) == expected


def test_size_parser_strict_and_free_text():
    assert parse_size_bytes("up to 4GiB") == 4 * 2**30
    with pytest.raises(InputError, match="--storage-size 'up to 4GiB' is not a size"):
        parse_size_bytes("up to 4GiB", strict=True, what="--storage-size")
    with pytest.raises(InputError, match="cannot read a size from 'lots'"):
        parse_size_bytes("lots")


def test_storage_size_flag_keeps_fio_shorthand(run_cli):
    """``--storage-size`` goes through the one parser: a bad value is one line, exit 2."""
    res = run_cli("probe", "--storage-size", "4 lots", "--only", "storage")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--storage-size '4 lots' is not a size" in lines[0]
    assert "Traceback" not in res.stderr


def test_one_si_formatter():
    assert fmt_si(2.5e12, "FLOP/s") == "2.5 TFLOP/s"
    assert fmt_si(3.2e9, "B/s") == "3.2 GB/s"  # 1 G = 1e9, like nccl-tests
    assert fmt_si(950.0, "W") == "950 W"
    assert fmt_si(None, "W") == "-" and fmt_si(float("inf"), "W") == "-"


@pytest.mark.parametrize(
    ("op", "ranks", "factor"),
    [
        ("all_reduce", 8, 1.75),
        ("all_reduce", 2, 1.0),
        ("all_gather", 4, 0.75),
        ("reduce_scatter", 16, 0.9375),
        ("all_to_all", 8, 0.875),
        ("broadcast", 8, 1.0),
        ("p2p", 2, 1.0),
    ],
)
def test_one_busbw_table(op, ranks, factor):
    assert busbw_factor(op, ranks) == factor
    assert BUSBW_FACTORS[op](float(ranks)) == factor


def test_busbw_table_works_on_arrays_and_refuses_unknown_ops():
    np = pytest.importorskip("numpy")
    got = busbw_factor("all_reduce", np.array([2.0, 4.0, 8.0]))
    assert got.tolist() == [1.0, 1.5, 1.75]
    with pytest.raises(InputError, match="unknown collective 'allreduce'"):
        busbw_factor("allreduce", 8)
    with pytest.raises(ValueError):
        busbw_factor("all_reduce", 0)


def test_the_layers_reexport_the_one_implementation():
    from gpuplan.calibration import curves
    from gpuplan.calibration import units as cal_units
    from gpuplan.cli import _common
    from gpuplan.probes import collectives
    from gpuplan.results import store

    assert store.write_json_atomic is write_json_atomic
    assert cal_units.parse_size_bytes is parse_size_bytes
    assert curves.busbw_factor is busbw_factor
    assert collectives.busbw_factor is busbw_factor
    assert collectives.BUSBW_FACTORS is BUSBW_FACTORS
    assert _common.fmt_si is fmt_si
    assert _common.to_json_text is to_json_text
    assert callable(write_atomic)


#: Definitions that were copies of the above before issue 14 (name, where they may live).
REMOVED: dict[str, str | list[str] | None] = {
    r"def write_json_atomic\(": "fsio.py",
    r"def _publish_new\(": "fsio.py",
    r"def _write_one\(": None,  # userfiles' per-file writer
    r"def write_atomic\(": "fsio.py",
    r"def parse_size\(": None,  # cli/probe.py
    r"def _parse_size\(": None,  # probes/inventory.py
    r"def parse_size_bytes\(": "units.py",
    r"def fmt_si\(": "units.py",
    r"def _si\(": None,  # plan/provenance.py
    r"def si\(": None,  # service/web.py
    r"def busbw_factor\(": "units.py",
    r"def _busbw_factor\(": None,  # results/compare.py
    r"BUSBW_FACTORS\b.*=\s*\{": "units.py",
    r"def to_json_text\(": "fsio.py",
    # the forecast core (issue 14.1-14.3): one architecture record and its resolver, one
    # KV-cache function per record (the formula, the catalog row's and the forecast
    # record's view of it), one set of training layout rules, one hardware record
    r"^class Arch\b": None,  # inference_arch.py's record with the tuple-encoded MLA
    r"^class ModelArch\b": ["catalogs/schema.py", "forecast/model.py"],
    r"^def arch_from\(": "forecast/model.py",
    r"^def arch_from_catalog\(": "forecast/model.py",
    r"^def resolve_model\(": None,  # training.py and inference.py each had one
    r"def kv_cache_bytes_per_token\(": [
        "catalogs/kv_cache.py",
        "catalogs/schema.py",
        "forecast/model.py",
    ],
    r"^def layout_violation\(": "forecast/layout_rules.py",
    r"^def check_layout\(": "forecast/training.py",
    r"^class Hardware\b": "forecast/hardware.py",
    r"^class ParallelLayout\b": "forecast/layout.py",
    r"^class TrainLayout\b": None,  # train.py's record, now forecast/layout.py's
    # one parameter count (catalogs/params.py) for the catalog row and the forecast record
    r"^class MLAConfig\b": "catalogs/params.py",
    r"def _params\(self": None,
    r"def _attention_params\(": None,
    r"def _mlp_params\(": None,
    r"def _mamba_params\(": None,
    r"^def model_params\(": "catalogs/params.py",
    r"^def resolve_hardware\(": "forecast/hardware.py",
}


def test_the_forecast_core_has_one_of_each():
    """The one record, resolver, KV function, layout rules and hardware record, imported
    from their homes and checked on values that could be wrong."""
    from gpuplan.catalogs import get_catalog
    from gpuplan.forecast.hardware import (
        Hardware,
        memory_capacity_bytes,
        resolve_hardware,
        scale_up_domain,
    )
    from gpuplan.forecast.layout_rules import layout_violation
    from gpuplan.forecast.model import ModelArch, arch_from, kv_cache_bytes_per_token

    row = get_catalog().model("llama3.1-70b")
    arch = arch_from("llama3.1-70b")
    assert isinstance(arch, ModelArch) and arch == arch_from(row)
    assert kv_cache_bytes_per_token(arch, 2.0) == 2 * 80 * 8 * 128 * 2
    ds = arch_from("deepseek-v3")
    assert ds.mla is not None and kv_cache_bytes_per_token(ds, 1.0) == 61 * (512 + 64)
    gpu = get_catalog().gpu("h100")
    hw = resolve_hardware("h100")
    assert isinstance(hw, Hardware) and hw.node_size == scale_up_domain(gpu) == 8
    assert hw.memory_bytes == memory_capacity_bytes(gpu) == 80 * 2**30
    with pytest.raises(InputError, match="no memory size for h100"):
        memory_capacity_bytes(gpu.model_copy(update={"memory_bytes": None}))
    ok = dict(tp=8, pp=4, cp=1, ep=1, dp=4, vp=1, micro_batch=1, recompute=0, zero=1)
    assert layout_violation(arch, 128, ok, seq_len=8192, global_batch=64) is None


def test_one_parameter_count_for_the_catalog_and_the_forecast():
    """Every catalog model: its row and the forecast record built from it count the same
    parameters (biases, QK-norm, MLA latent norms, shared experts included), and the counts
    match the published sizes the catalog tests hold them to."""
    from gpuplan.catalogs import get_catalog
    from gpuplan.forecast.model import arch_from

    rows = get_catalog().models
    assert len(rows) > 30
    for row in rows:
        arch = arch_from(row)
        assert (arch.params_total(), arch.params_active()) == (
            row.params_total(),
            row.params_active(),
        ), row.id
    ds = arch_from("deepseek-v3")
    assert 0.99 * 671e9 < ds.params_total() < 1.01 * 671e9
    assert 0.99 * 37e9 < ds.params_active() < 1.02 * 37e9


def test_the_old_copies_are_gone():
    hits: dict[str, list[str]] = {}
    sources = {p: p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py")}
    for pattern, home in REMOVED.items():
        where = sorted(
            str(p.relative_to(PACKAGE))
            for p, text in sources.items()
            if re.search(pattern, text, re.MULTILINE)
        )
        allowed = sorted([home] if isinstance(home, str) else (home or []))
        if where != allowed:
            hits[pattern] = where
    assert hits == {}


def test_no_atomic_writer_outside_fsio():
    """Nothing but gpuplan.fsio renames a temp file into place."""
    offenders = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name != "fsio.py"
        and re.search(r"os\.replace\(|\.replace\(p\)|tmp\.replace\(", p.read_text("utf-8"))
    )
    assert offenders == []
