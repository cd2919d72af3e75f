"""fio output parsing, on outputs captured from real fio 3.33 runs (tests/probes/data/fio)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.probes.base import PointFailed
from gpuplan.probes.storage import (
    FioPoint,
    measurement_from_fio,
    parse_bw_log,
    parse_fio_json,
    pick_ioengine,
)
from gpuplan.results.schema import StorageMeasurement

DATA = Path(__file__).parent / "data" / "fio"
M = 1 << 20


def load(name: str) -> str:
    return (DATA / f"{name}.stdout.txt").read_text()


def test_plain_json_read_is_parsed_with_its_numbers():
    doc = parse_fio_json(load("fio-3.33-read-1M-qd16-libaio-direct"))
    m = measurement_from_fio(doc, FioPoint("read", M, 16))
    # values as printed by fio in the captured file
    assert m["bw_bytes_per_s"] == 1080601473
    assert m["io_bytes"] == 1096810496
    assert m["iops"] == pytest.approx(1030.541872)
    assert m["clat"]["p99_s"] == pytest.approx(20054016e-9)
    assert m["direct"] is True
    assert m["ioengine"] == "libaio"
    StorageMeasurement.model_validate(m)  # fits the schema


def test_text_before_the_json_is_skipped():
    text = load("fio-3.33-randread-4k-qd4-psync-note")
    assert text.startswith("note: both iodepth >= 1 and synchronous I/O engine")
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # what a naive parser would do
    doc = parse_fio_json(text)
    m = measurement_from_fio(doc, FioPoint("randread", 4096, 4))
    assert m["bw_bytes_per_s"] == 56713846
    assert m["iops"] == pytest.approx(13846.153846)
    assert m["clat"]["p99_s"] == pytest.approx(127488e-9)
    assert m["ioengine"] == "psync"


def test_write_section_is_read_for_write_jobs():
    doc = parse_fio_json(load("fio-3.33-write-1M-qd16-libaio-direct"))
    m = measurement_from_fio(doc, FioPoint("write", M, 16))
    assert m["bw_bytes_per_s"] == 2211693569
    assert m["io_bytes"] == 2227175424
    # the read section of a write job is all zeros: reading it instead must fail
    with pytest.raises(PointFailed, match="moved no data"):
        measurement_from_fio(doc, FioPoint("read", M, 16))


def test_group_reporting_of_two_jobs_and_percentiles_in_seconds():
    doc = parse_fio_json(load("fio-3.33-randread-4k-qd32-jobs2-libaio-direct"))
    m = measurement_from_fio(doc, FioPoint("randread", 4096, 32, numjobs=2))
    assert m["bw_bytes_per_s"] == 326481070
    assert m["numjobs"] == 2
    clat = m["clat"]
    assert 0 < clat["p50_s"] <= clat["p90_s"] <= clat["p99_s"] <= clat["p99_9_s"] < 1.0


def test_text_after_the_json_and_garbage_before_are_tolerated():
    core = load("fio-3.33-read-1M-qd16-libaio-direct")
    noisy = "fio: {weird} brace in a warning\n" + core + "\nfio: trailing line\n"
    assert parse_fio_json(noisy)["jobs"][0]["jobname"] == "gpuplan"


@pytest.mark.parametrize("text", ["", "fio: unrecognized option '--bogus=1'\n", '{"not": "fio"}'])
def test_no_document_is_a_clear_error(text):
    with pytest.raises(ValueError, match="no fio JSON document"):
        parse_fio_json(text)


def test_job_error_from_a_real_failed_run():
    text = load("fio-3.33-error-unlink")
    stderr = (DATA / "fio-3.33-error-unlink.stderr.txt").read_text()
    assert "Operation not permitted" in stderr
    doc = parse_fio_json(text)
    with pytest.raises(PointFailed, match="fio job error 1"):
        measurement_from_fio(doc, FioPoint("write", M, 1))


def test_older_fio_without_bw_bytes_and_clat_ns():
    # fio 2.x reported bandwidth in KiB/s ('bw') and latencies in usec ('clat'): the same
    # captured run with its keys renamed that way must give the same figures
    doc = parse_fio_json(load("fio-3.33-read-1M-qd16-libaio-direct"))
    read = doc["jobs"][0]["read"]
    bw_kib = read["bw"]
    p99_ns = read["clat_ns"]["percentile"]["99.000000"]
    del read["bw_bytes"], read["io_bytes"]
    clat = read.pop("clat_ns")
    clat["percentile"] = {k: v / 1000 for k, v in clat["percentile"].items()}
    read["clat"] = clat
    m = measurement_from_fio(doc, FioPoint("read", M, 16))
    assert m["bw_bytes_per_s"] == bw_kib * 1024
    assert m["io_bytes"] == read["io_kbytes"] * 1024
    assert m["clat"]["p99_s"] == pytest.approx(p99_ns * 1e-9)


def test_bw_log_in_kib_per_s_summed_over_jobs():
    one = sorted(DATA.glob("fio-3.33-randread-4k-qd32-jobs2-libaio-direct.bw.*.log"))
    assert len(one) == 2
    summed = parse_bw_log(one)
    first = [parse_bw_log([p])[0] for p in one]
    assert summed[0] == pytest.approx(sum(first))
    # first lines of the two captured logs: 172128 and 169088 KiB/s
    assert summed[0] == pytest.approx((172128 + 169088) * 1024)


def test_ioengine_preference():
    assert pick_ioengine({"psync", "libaio", "io_uring"}) == "io_uring"
    assert pick_ioengine({"psync", "libaio"}) == "libaio"
    assert pick_ioengine({"sync"}) == "psync"
