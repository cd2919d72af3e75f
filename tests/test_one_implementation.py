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


#: Definitions that were copies of the above before issue 14 (name, where it may live).
REMOVED = {
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
}


def test_the_old_copies_are_gone():
    hits: dict[str, list[str]] = {}
    sources = {p: p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py")}
    for pattern, home in REMOVED.items():
        where = sorted(
            str(p.relative_to(PACKAGE))
            for p, text in sources.items()
            if re.search(pattern, text, re.MULTILINE)
        )
        allowed = [home] if home else []
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
