"""Result documents: JSON Schema file, validation, round trips, versions, atomic no-overwrite."""

from __future__ import annotations

import copy
import json
import os
import statistics
from pathlib import Path

import jsonschema
import pytest

from gpuplan.errors import InputError, NotFoundError, SchemaError
from gpuplan.results import migrations
from gpuplan.results.schema import (
    SCHEMA_FILE,
    SCHEMA_VERSION,
    ProbeResult,
    ResultDocument,
    json_schema_text,
)
from gpuplan.results.store import (
    find_result,
    load_result,
    load_results,
    parse_result,
    save_result,
    write_json_atomic,
)

DATA = Path(__file__).parent / "data"
V1 = DATA / "v1-cpu-quick.json"  # a real `gpuplan probe --quick` run: keep it forever


def v1() -> dict:
    return json.loads(V1.read_text())


def test_committed_schema_file_is_up_to_date():
    assert SCHEMA_FILE.read_text() == json_schema_text(), (
        "gpuplan/results/result.schema.json is stale: run `python -m gpuplan.results.schema`"
    )


def test_real_probe_document_validates_against_the_schema_file():
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(v1(), schema)


def test_schema_file_rejects_a_wrong_measurement():
    schema = json.loads(SCHEMA_FILE.read_text())
    doc = v1()
    matmul = next(p for p in doc["probes"] if p["probe"] == "matmul")
    del matmul["measurements"][0]["flops_per_s"]
    with pytest.raises(jsonschema.ValidationError, match="flops_per_s"):
        jsonschema.validate(doc, schema)


def test_v1_fixture_loads_forever():
    doc = load_result(V1)
    assert doc.schema_version == 1
    assert doc.run_id == "c5166205-c96a-4a8b-83dd-bc4efe61a7c6"
    names = {p.probe for p in doc.probes}
    assert {"matmul", "membw", "collectives", "storage"} <= names
    matmul = doc.probe("matmul")[0].typed()
    assert matmul[0].shape.m > 0 and matmul[0].flops_per_s > 0
    assert all(m.median_s == pytest.approx(statistics.median(m.samples_s)) for m in matmul)


def test_round_trip_is_lossless(tmp_path):
    doc = load_result(V1)
    path = save_result(doc, tmp_path)
    again = load_result(path)
    assert again.model_dump(mode="json") == doc.model_dump(mode="json")
    assert (
        json.loads(path.read_text())["probes"][0]["measurements"][0]["samples_s"]
        == (doc.probes[0].measurements[0]["samples_s"])
    )
    assert oct(path.stat().st_mode & 0o777) != "0o600"  # readable like other files


def test_unknown_fields_survive_a_round_trip(tmp_path):
    data = v1()
    data["future_field"] = {"x": 1}
    data["probes"][0]["measurements"][0]["future_metric"] = 3.5
    doc = parse_result(data)
    back = doc.model_dump(mode="json")
    assert back["future_field"] == {"x": 1}
    assert back["probes"][0]["measurements"][0]["future_metric"] == 3.5


def test_newer_version_is_refused_with_a_clear_message(tmp_path):
    data = v1()
    data["schema_version"] = SCHEMA_VERSION + 1
    f = tmp_path / "new.json"
    f.write_text(json.dumps(data))
    with pytest.raises(
        SchemaError, match=r"schema_version 2 is newer than this gpuplan understands \(1\)"
    ) as exc:
        load_result(f)
    assert "upgrade gpuplan" in exc.value.one_line()


def test_missing_version_and_bad_fields_are_schema_errors():
    data = v1()
    del data["schema_version"]
    with pytest.raises(SchemaError, match="no integer 'schema_version'"):
        parse_result(data)
    data = v1()
    data["probes"][0]["status"] = "great"
    with pytest.raises(SchemaError, match=r"probes\.0\.status"):
        parse_result(data, where="x.json")
    data = v1()
    data["probes"][0]["status"] = "failed"
    data["probes"][0]["error"] = None
    with pytest.raises(SchemaError, match="must say why"):
        parse_result(data)


def test_older_versions_are_upgraded_by_the_migration_chain(monkeypatch):
    """A registered test chain 0 -> 1 (and 1 -> 2 with a target of 2) runs in order."""
    calls = []

    def to_1(doc):
        calls.append(1)
        doc["host"] = {"machine_id": doc.pop("machine")}
        return doc

    def to_2(doc):
        calls.append(2)
        doc["upgraded"] = True
        return doc

    monkeypatch.setitem(migrations.UPGRADES, 1, to_1)
    monkeypatch.setitem(migrations.UPGRADES, 2, to_2)
    old = v1()
    old["schema_version"] = 0
    old["machine"] = old.pop("host")["machine_id"]
    doc = parse_result(copy.deepcopy(old))
    assert (
        calls == [1]
        and doc.schema_version == 1
        and doc.host.machine_id == v1()["host"]["machine_id"]
    )
    calls.clear()
    up = migrations.upgrade(copy.deepcopy(old), target=2)
    assert calls == [1, 2] and up["schema_version"] == 2 and up["upgraded"] is True


def test_a_gap_in_the_chain_is_an_error():
    old = v1()
    old["schema_version"] = 0
    with pytest.raises(SchemaError, match="no upgrade path"):
        parse_result(old)


def test_atomic_write_never_overwrites(tmp_path):
    path = tmp_path / "a" / "r.json"
    write_json_atomic(path, {"x": 1})
    with pytest.raises(FileExistsError):
        write_json_atomic(path, {"x": 2})
    assert json.loads(path.read_text()) == {"x": 1}
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temp file left
    write_json_atomic(path, {"x": 3}, overwrite=True)
    assert json.loads(path.read_text()) == {"x": 3}


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    with pytest.raises(ValueError):
        write_json_atomic(tmp_path / "bad.json", {"x": float("nan")})
    assert list(tmp_path.iterdir()) == []


def test_saving_the_same_run_twice_keeps_both(tmp_path):
    doc = load_result(V1)
    p1 = save_result(doc, tmp_path)
    p2 = save_result(doc, tmp_path)
    assert p1 != p2 and p1.exists() and p2.exists()
    assert p1.parent.name == doc.host.machine_id
    assert p1.read_text() == p2.read_text()
    assert len(load_results([tmp_path])) == 2


def test_find_result_by_id_prefix_and_path(tmp_path):
    doc = load_result(V1)
    path = save_result(doc, tmp_path)
    assert find_result(doc.run_id[:8], [tmp_path]) == path
    assert find_result(str(path), []) == path
    with pytest.raises(NotFoundError, match="no result file or run id"):
        find_result("ffffffff", [tmp_path])
    later = doc.model_copy(
        update={"run_id": "f" * 8 + doc.run_id[8:], "started_at": "2099-01-01T00:00:00Z"}
    )
    later_path = save_result(later, tmp_path)
    assert find_result("latest", [tmp_path]) == later_path
    save_result(doc, tmp_path)
    with pytest.raises(NotFoundError, match="matches 2 results"):
        find_result(doc.run_id[:8], [tmp_path])


def test_loading_missing_or_broken_files_says_what_is_wrong(tmp_path):
    with pytest.raises(InputError, match="no result file"):
        load_result(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(SchemaError, match="not valid JSON"):
        load_result(bad)


def test_timing_summary_is_filled_from_samples():
    p = ProbeResult.model_validate(
        {
            "probe": "membw",
            "probe_version": 1,
            "status": "ok",
            "measurements": [
                {
                    "op": "copy",
                    "size_bytes": 8,
                    "bytes_per_s": 1.0,
                    "samples_s": [3.0, 1.0, 2.0, 10.0],
                }
            ],
        }
    )
    m = p.measurements[0]
    assert m["median_s"] == 2.5 and m["min_s"] == 1.0 and m["max_s"] == 10.0
    assert m["iqr_s"] == pytest.approx(4.75 - 1.75)


def test_partial_checkpoints_are_not_listed(tmp_path):
    doc = ResultDocument.model_validate(v1())
    save_result(doc, tmp_path)
    hidden = tmp_path / doc.host.machine_id / ".x.partial.json"
    hidden.write_text("{}")
    assert len(load_results([tmp_path])) == 1
    assert os.path.exists(hidden)
