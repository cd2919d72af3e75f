"""The shared result-file loader (gpuplan.results.loader) and its JSON limits (safejson).

Every bad input of issue 13 is tried in process and through the real CLI: a bad file named
alone is exit 2 with one stderr line naming it; among good files it is skipped with one
warning line and the good files still load; never a traceback.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import socket
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuplan.errors import GpuplanError, InputError, SchemaError
from gpuplan.results.loader import (
    LoadedResults,
    NotAResultError,
    check_physical,
    load_result_files,
    read_result_file,
)
from gpuplan.results.safejson import loads_limited
from gpuplan.results.schema import ResultDocument

V1 = Path(__file__).parent / "data" / "v1-cpu-quick.json"
H100 = "NVIDIA H100 80GB HBM3"


def v1(run_id: str = "11111111-0000-4000-8000-000000000001") -> dict:
    """The real CPU quick run of the fixture, under another run id."""
    data = json.loads(V1.read_text())
    data["run_id"] = run_id
    return data


def h100_doc(run_id: str = "22222222-0000-4000-8000-000000000002", **kw) -> dict:
    """An H100 run: one bf16 matmul probe at 60 % and 70 % of the catalog peak (carried in
    spec_flops_per_s) and one membw probe at 80 % of the catalog bandwidth (no spec field,
    so only a catalog lookup can check it)."""
    from gpuplan.catalogs import get_catalog
    from tests.calibration.conftest import make_doc

    gpu = get_catalog().gpu("h100")
    peak = gpu.peak_flops_per_s("bf16")
    bw = gpu.memory_bandwidth_bytes_per_s
    mm = [
        {
            "shape": {"m": n, "n": n, "k": n},
            "median_s": 2 * n**3 / (f * peak),
            "samples_s": [2 * n**3 / (f * peak)] * 3,
            "flops_per_s": f * peak,
            "spec_flops_per_s": peak,
        }
        for n, f in ((4096, 0.6), (8192, 0.7))
    ]
    membw = [{"op": "copy", "size_bytes": 2**30, "bytes_per_s": 0.8 * bw, "median_s": 2**31 / bw}]
    return make_doc(
        run_id=run_id,
        machine_id="h100-node",
        accelerators=[{"name": H100}],
        probes=[
            {
                "probe": "matmul",
                "probe_version": 1,
                "status": "ok",
                "params": {"dtype": "bfloat16", "device": "cuda:0"},
                "measurements": mm,
            },
            {
                "probe": "membw",
                "probe_version": 1,
                "status": "ok",
                "params": {"device": "cuda:0"},
                "measurements": membw,
            },
        ],
        **kw,
    )


def _text(doc: dict) -> bytes:
    return json.dumps(doc, indent=1).encode()


def _edit(edit: Callable[[dict], None], base: Callable[[], dict] = v1) -> bytes:
    doc = base()
    edit(doc)
    return _text(doc)


def _replace_first(doc_text: bytes, old: bytes, new: bytes) -> bytes:
    assert old in doc_text
    return doc_text.replace(old, new, 1)


def _set(path: tuple, value) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


def _scale_matmul(factor: float) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        for m in doc["probes"][0]["measurements"]:
            m["flops_per_s"] *= factor
            m["median_s"] /= factor
            m["samples_s"] = [s / factor for s in m["samples_s"]]

    return edit


_MEDIAN = b'"median_s": '


def _bad_files() -> dict[str, tuple[bytes, str]]:
    """name -> (file content, text the one-line error must contain)."""
    good = _text(v1())
    rng = random.Random(13)
    return {
        "binary": (bytes(rng.randrange(256) for _ in range(4096)), "not UTF-8"),
        "utf16-bom": (good.decode().encode("utf-16"), "UTF-16"),
        "utf16-no-bom": (good.decode().encode("utf-16-le"), "NUL bytes"),
        "empty": (b"", "not valid JSON"),
        "truncated": (good[: len(good) // 2], "not valid JSON"),
        "infinity": (_replace_first(good, _MEDIAN, _MEDIAN + b'Infinity, "x": '), "Infinity"),
        "nan": (_replace_first(good, _MEDIAN, _MEDIAN + b'NaN, "x": '), "NaN"),
        "overflow-1e400": (_replace_first(good, _MEDIAN, _MEDIAN + b'1e400, "x": '), "1e400"),
        "int-5000-digits": (
            _edit(_set(("host", "memory_bytes"), 0)).replace(
                b'"memory_bytes": 0', b'"memory_bytes": ' + b"9" * 5000
            ),
            "host.memory_bytes",
        ),
        "nesting-200000": (
            good[:-2] + b', "deep": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
            "nesting deeper",
        ),
        "string-2MiB": (_edit(_set(("host", "topology"), "x" * (2 << 20))), "host.topology"),
        "future-schema": (_edit(_set(("schema_version",), 99)), "newer than"),
        "missing-field": (_edit(lambda d: d.pop("started_at")), "started_at"),
        "zero-median": (
            _edit(_set(("probes", 0, "measurements", 0, "median_s"), 0.0)),
            "probes.0.measurements.0.median_s",
        ),
        "negative-sample": (
            _edit(_set(("probes", 0, "measurements", 0, "samples_s", 1), -1e-3)),
            "probes.0.measurements.0.samples_s.1",
        ),
        "zero-throughput": (
            _edit(_set(("probes", 2, "measurements", 0, "bytes_per_s"), 0.0)),
            "probes.2.measurements.0.bytes_per_s",
        ),
        "flops-1e308": (
            _edit(_set(("probes", 0, "measurements", 1, "flops_per_s"), 1e308), h100_doc),
            "probes.0.measurements.1.flops_per_s",
        ),
        "flops-1000x-too-low": (_edit(_scale_matmul(1e-4), h100_doc), "best point"),
        "membw-over-catalog-peak": (
            _edit(
                _set(("probes", 1, "measurements", 0, "bytes_per_s"), 1e20), h100_doc
            ),  # no spec_* field: the catalog lookup catches it
            "probes.1.measurements.0.bytes_per_s",
        ),
    }


BAD = _bad_files()


# --- safejson ------------------------------------------------------------------------


def test_safejson_refusals_name_the_field_or_position():
    cases = {
        b'{"a": {"b": [1, NaN]}}': "field 'a.b.1': NaN",
        b'{"a": -Infinity}': "field 'a': -Infinity",
        b'{"a": 1e999}': "field 'a': number 1e999 is out of range",
        b'{"n": -' + b"1" * 40 + b"}": "field 'n': an integer of 40 digits",
        b"[" * 40 + b"]" * 40: "nesting deeper than 32 levels (at line 1)",
        b'{"s": "' + b"y" * 100 + b'"}': "field 's': a string of 100 characters",
        b"\xfe\xff\x00{": "UTF-16",
        b'{"a": "\xff"}': "byte 0xff at offset 7",
        b'{"a": 1,\n "b": }': "not valid JSON (Expecting value at line 2 column 7)",
    }
    for data, expected in cases.items():
        with pytest.raises(SchemaError) as err:
            loads_limited(data, where="f.json", max_str_chars=50)
        assert err.value.message.startswith("f.json: ") and expected in err.value.one_line()


def test_safejson_accepts_what_json_accepts_within_limits():
    text = '\ufeff{"a": [1, -2.5e3, "[[[{{{", "\\"]]]"], "b": {"c": null, "d": true}}'
    assert loads_limited(text.encode(), where="x") == json.loads(text[1:])
    # brackets inside strings do not count as nesting
    assert loads_limited('["' + "[" * 100 + '"]', where="x") == ["[" * 100]
    assert loads_limited(b"[" * 32 + b"]" * 32, where="x", max_depth=32) is not None
    with pytest.raises(SchemaError, match="larger than the limit of 10"):
        loads_limited(b"[" + b" " * 20 + b"]", where="x", max_bytes=10)


def test_deep_nesting_is_refused_without_recursion():
    data = b"[" * 1_000_000 + b"]" * 1_000_000
    with pytest.raises(SchemaError, match="nesting deeper"):
        loads_limited(data, where="deep.json")


# --- one file ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def peaks():
    from gpuplan.calibration.dataset import catalog_peaks
    from gpuplan.catalogs import get_catalog

    return catalog_peaks(get_catalog())


@pytest.mark.parametrize("name", sorted(BAD))
def test_each_bad_file_is_one_domain_error_naming_file_and_field(tmp_path, peaks, name):
    content, expected = BAD[name]
    path = tmp_path / f"{name}.json"
    path.write_bytes(content)
    with pytest.raises(GpuplanError) as err:
        read_result_file(path, peaks=peaks)
    line = err.value.one_line()
    assert str(path) in line and expected in line, line
    assert "\n" not in line


def test_good_documents_load_and_the_shipped_ones_are_all_plausible(tmp_path, peaks):
    path = tmp_path / "h100.json"
    path.write_bytes(_text(h100_doc()))
    assert read_result_file(path, peaks=peaks).host.accelerators[0].name == H100
    repo = Path(__file__).resolve().parents[2]
    loaded = load_result_files([repo / "results" / "reference", V1], peaks=peaks)
    assert loaded.skipped == [] and loaded.notes == []
    assert len(loaded.documents) == len(list((repo / "results" / "reference").glob("*.json"))) + 1


def test_small_points_far_below_the_peak_are_fine_when_the_best_one_is_not(tmp_path, peaks):
    doc = h100_doc()
    doc["probes"][0]["measurements"][0]["flops_per_s"] *= 1e-5  # a tiny shape: latency bound
    path = tmp_path / "r.json"
    path.write_bytes(_text(doc))
    assert read_result_file(path, peaks=peaks).run_id == doc["run_id"]


def test_catalog_peak_is_only_checked_with_a_lookup(tmp_path, peaks):
    content, _ = BAD["membw-over-catalog-peak"]
    path = tmp_path / "r.json"
    path.write_bytes(content)
    read_result_file(path)  # the results layer alone does not know the catalog
    with pytest.raises(SchemaError, match="device's peak"):
        read_result_file(path, peaks=peaks)


def test_nan_built_in_process_is_refused_too():
    doc = ResultDocument.model_validate(v1())
    doc.probes[0].measurements[0]["max_s"] = float("nan")
    with pytest.raises(SchemaError, match=r"probes\.0\.measurements\.0\.max_s': nan"):
        check_physical(doc, where="doc")


def test_fifo_is_refused_without_opening_it(tmp_path):
    fifo = tmp_path / "x.json"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"x.json: is a FIFO \(named pipe\), not a regular file"):
        read_result_file(fifo)


def test_devices_sockets_and_directories_are_refused(tmp_path):
    dev = tmp_path / "null.json"
    dev.symlink_to("/dev/null")
    with pytest.raises(InputError, match="is a device"):
        read_result_file(dev)
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(InputError, match="is a directory"):
        read_result_file(tmp_path / "dir.json")
    sock_path = tmp_path / "s.json"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(sock_path))
    except OSError:  # path too long for AF_UNIX on this machine
        pytest.skip("cannot bind a unix socket under tmp_path")
    try:
        with pytest.raises(InputError, match="is a socket"):
            read_result_file(sock_path)
    finally:
        sock.close()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_unreadable_file_is_one_line(tmp_path):
    path = tmp_path / "r.json"
    path.write_bytes(_text(v1()))
    path.chmod(0)
    with pytest.raises(InputError, match=r"r\.json: permission denied"):
        read_result_file(path)


# --- folders -------------------------------------------------------------------------


def test_bad_files_are_skipped_with_one_reason_each_and_good_ones_load(tmp_path, peaks):
    for name, (content, _) in BAD.items():
        (tmp_path / f"{name}.json").write_bytes(content)
    (tmp_path / "good.json").write_bytes(_text(v1()))
    os.mkfifo(tmp_path / "fifo.json")
    loaded = load_result_files([tmp_path], peaks=peaks)
    assert isinstance(loaded, LoadedResults)
    assert [p.name for p, _ in loaded.documents] == ["good.json"]
    skipped = {p.name: reason for p, reason in loaded.skipped}
    assert set(skipped) == {f"{n}.json" for n in BAD} | {"fifo.json"}
    for name, (_, expected) in BAD.items():
        assert expected in skipped[f"{name}.json"]
    assert len(loaded.warnings()) == len(BAD) + 1


def test_non_result_json_is_a_note_and_an_error_when_named_alone(tmp_path):
    (tmp_path / "calibration.json").write_text('{"artifact_version": 1, "models": {}}')
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "good.json").write_bytes(_text(v1()))
    loaded = load_result_files([tmp_path])
    assert len(loaded.documents) == 1 and loaded.skipped == []
    assert any("calibration.json: not a result file" in n and "artifact" in n for n in loaded.notes)
    assert any("list.json: not a result file" in n for n in loaded.notes)
    with pytest.raises(NotAResultError, match="calibration artifact"):
        load_result_files([tmp_path / "calibration.json"])


def test_one_run_id_twice(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "r.json").write_bytes(_text(v1()))
    (b / "r.json").write_text(json.dumps(v1()))  # same document, other formatting
    loaded = load_result_files([a, b])
    assert len(loaded.documents) == 1
    assert loaded.notes == [
        f"{b / 'r.json'}: run {v1()['run_id']} also in {a / 'r.json'}, kept once"
    ]
    other = v1()
    other["host"]["hostname"] = "elsewhere"
    (b / "r.json").write_text(json.dumps(other))
    with pytest.raises(SchemaError) as err:
        load_result_files([a, b])
    assert str(a / "r.json") in err.value.message and str(b / "r.json") in err.value.message


def test_final_file_supersedes_the_partial_one_of_the_same_run(tmp_path):
    partial = v1()
    partial["interrupted"] = True
    partial["probes"] = partial["probes"][:2]
    (tmp_path / "run.partial.json").write_text(json.dumps(partial))
    (tmp_path / "run.json").write_bytes(_text(v1()))
    loaded = load_result_files([tmp_path])
    assert [p.name for p, _ in loaded.documents] == ["run.json"]
    assert "interrupted copy" in loaded.notes[0] and "run.partial.json" in loaded.notes[0]


# --- the property test ---------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


_BASES = {"cpu": v1(), "h100": h100_doc()}
_BASE_PATHS = {k: [p for p in _paths(d) if p] for k, d in _BASES.items()}


@st.composite
def mutated_files(draw) -> bytes:
    base = draw(st.sampled_from(sorted(_BASES)))
    doc = copy.deepcopy(_BASES[base])
    for _ in range(draw(st.integers(0, 3))):
        paths = [p for p in _paths(doc) if p]
        path = draw(st.sampled_from(paths or _BASE_PATHS[base]))
        with contextlib.suppress(KeyError, IndexError, TypeError):
            _set(path, draw(_json))(doc)
    text = json.dumps(doc, allow_nan=True).encode()
    kind = draw(st.sampled_from(["as-is", "truncate", "nan", "deep", "huge-int", "bytes"]))
    if kind == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif kind == "nan":
        at = text.find(b": ", draw(st.integers(0, len(text))))
        if at >= 0:
            text = (
                text[: at + 2]
                + draw(st.sampled_from([b"NaN", b"Infinity", b"-1e999"]))
                + b', "_": '
                + text[at + 2 :]
            )
    elif kind == "deep":
        depth = draw(st.integers(30, 5000))
        text = text[:-1] + b', "deep": ' + b"[" * depth + b"]" * depth + b"}"
    elif kind == "huge-int":
        text = text[:-1] + b', "big": ' + b"7" * draw(st.integers(20, 6000)) + b"}"
    elif kind == "bytes":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.binary(min_size=1, max_size=16)) + text[at:]
    return text


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=mutated_files())
def test_mutated_files_load_or_raise_a_domain_error(tmp_path_factory, peaks, content):
    path = tmp_path_factory.mktemp("prop") / "r.json"
    path.write_bytes(content)
    try:
        doc = read_result_file(path, peaks=peaks)
    except GpuplanError as exc:
        line = exc.one_line()
        assert line and "\n" not in line and str(path) in line
    else:
        assert isinstance(doc, ResultDocument)


# --- through the CLI -----------------------------------------------------------------


def _one_error_line(proc: subprocess.CompletedProcess, *must: str) -> str:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr)
    assert lines[0].startswith("gpuplan: error: ")
    for text in must:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("name", sorted(BAD))
def test_results_show_of_each_bad_file_is_one_line_exit_2(run_cli, tmp_path, name):
    content, expected = BAD[name]
    path = tmp_path / f"{name}.json"
    path.write_bytes(content)
    proc = run_cli("results", "show", str(path), "--format", "json")
    _one_error_line(proc, str(path), expected)
    assert proc.stdout == ""
    assert path.read_bytes() == content  # the loader never rewrites a file


def test_results_ls_skips_every_bad_file_with_one_line_each(run_cli, tmp_path):
    for name, (content, _) in BAD.items():
        (tmp_path / f"{name}.json").write_bytes(content)
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "null.json").symlink_to("/dev/null")
    (tmp_path / "dir.json").mkdir()
    (tmp_path / "calibration.json").write_text('{"artifact_version": 1}')
    good = v1()
    (tmp_path / "good.json").write_bytes(_text(good))
    proc = run_cli("results", "ls", str(tmp_path), "--format", "json", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = json.loads(proc.stdout)["results"]
    assert [r["run_id"] for r in rows] == [good["run_id"]]
    lines = proc.stderr.splitlines()
    warnings = [line for line in lines if line.startswith("gpuplan: warning: skipped ")]
    bad_names = [*(f"{n}.json" for n in BAD), "fifo.json", "null.json", "dir.json"]
    assert len(warnings) == len(bad_names)
    for name in bad_names:
        assert sum(f"/{name}:" in w for w in warnings) == 1, name
    assert [line for line in lines if line not in warnings] == [
        f"{tmp_path / 'calibration.json'}: not a result file, skipped (a calibration artifact)"
    ]


@pytest.mark.parametrize("command", [("results", "ls"), ("results", "show", "latest")])
def test_a_fifo_in_the_results_folder_never_hangs(run_cli, tmp_path, command):
    os.mkfifo(tmp_path / "x.json")
    (tmp_path / "good.json").write_bytes(_text(v1()))
    proc = run_cli(*command, "--dir", str(tmp_path), "--format", "json", timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)  # the good run
    assert stat.S_ISFIFO(os.stat(tmp_path / "x.json").st_mode)


def test_results_show_of_a_fifo_is_one_line(run_cli, tmp_path):
    os.mkfifo(tmp_path / "x.json")
    proc = run_cli("results", "show", str(tmp_path / "x.json"), timeout=30)
    _one_error_line(proc, "x.json", "FIFO")


def test_ls_status_complete_interrupted_running(run_cli, tmp_path):
    from gpuplan.results.runlock import acquire

    done = v1("aaaaaaaa-0000-4000-8000-000000000001")
    killed = v1("bbbbbbbb-0000-4000-8000-000000000002")
    killed["interrupted"] = True
    live = v1("cccccccc-0000-4000-8000-000000000003")
    live["interrupted"] = True
    for doc in (done, killed, live):
        (tmp_path / f"{doc['run_id'][:8]}.partial.json").write_bytes(_text(doc))
    with acquire(live["run_id"]):
        proc = run_cli("results", "ls", "--dir", str(tmp_path), "--format", "json")
        table = run_cli("results", "ls", "--dir", str(tmp_path), env={"COLUMNS": "250"})
    assert proc.returncode == 0, proc.stderr
    status = {r["run_id"][:8]: r["run_status"] for r in json.loads(proc.stdout)["results"]}
    assert status == {"aaaaaaaa": "complete", "bbbbbbbb": "interrupted", "cccccccc": "running"}
    assert "interrupted" in table.stdout and "running" in table.stdout
    after = run_cli("results", "ls", "--dir", str(tmp_path), "--format", "json")
    assert {r["run_status"] for r in json.loads(after.stdout)["results"]} == {
        "complete",
        "interrupted",
    }


def test_show_and_compare_refuse_an_impossible_run(run_cli, tmp_path):
    content, _ = BAD["membw-over-catalog-peak"]
    (tmp_path / "r.json").write_bytes(content)
    proc = run_cli("results", "show", "22222222", "--dir", str(tmp_path))
    _one_error_line(proc, "r.json", "probes.1.measurements.0.bytes_per_s", "peak")
    (tmp_path / "good.json").write_bytes(_text(v1()))
    cmp = run_cli("results", "compare", "11111111", "22222222", "--dir", str(tmp_path))
    _one_error_line(cmp, "r.json", "bytes_per_s")


def test_plan_trial_of_an_unknown_run_is_exit_2(run_cli, tmp_path):
    repo = Path(__file__).resolve().parents[2]
    scenario = sorted((repo / "examples").glob("*.yaml"))[0]
    (tmp_path / "good.json").write_bytes(_text(v1()))
    proc = run_cli(
        "plan",
        str(scenario),
        "--results",
        str(tmp_path),
        "--trial",
        "deadbeef",
        "--out",
        str(tmp_path / "plan"),
    )
    _one_error_line(proc, "--trial deadbeef", "no probe run")
    assert not (tmp_path / "plan").exists()


def test_cli_runs_of_generated_files_never_trace(run_cli, tmp_path):
    """A handful of the property test's inputs through the real CLI (the in-process test
    covers many more, at a fraction of the time)."""
    rng = random.Random(7)
    names = sorted(BAD)
    for i in range(4):
        content = bytearray(BAD[rng.choice(names)][0][:200_000])
        for _ in range(3):
            content[rng.randrange(len(content) or 1) if content else 0 : 0] = bytes(
                rng.randrange(256) for _ in range(4)
            )
        path = tmp_path / f"gen{i}.json"
        path.write_bytes(bytes(content))
        proc = run_cli("results", "show", str(path), "--format", "json")
        assert "Traceback" not in proc.stderr
        assert proc.returncode in (0, 2) and len(proc.stderr.splitlines()) <= 1, proc.stderr


def test_busbw_zero_is_right_for_one_rank_only():
    data = v1()
    coll = next(p for p in data["probes"] if p["probe"] == "collectives")
    coll["measurements"][0].update(ranks=1, busbw_bytes_per_s=0.0)
    check_physical(ResultDocument.model_validate(data))  # nccl-tests' factor is 0 at n=1
    coll["measurements"][0]["ranks"] = 2
    with pytest.raises(SchemaError, match=r"probes\.4\.measurements\.0\.busbw_bytes_per_s"):
        check_physical(ResultDocument.model_validate(data))


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path, run_cli):
    from gpuplan.results.safejson import MAX_BYTES

    big = tmp_path / "big.json"
    with big.open("wb") as fh:  # sparse: no disk space used
        fh.truncate(MAX_BYTES + 1)
    with pytest.raises(InputError, match="larger than a result file can be"):
        read_result_file(big)
    proc = run_cli("results", "show", str(big), "--format", "json")
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "big.json" in proc.stderr and "Traceback" not in proc.stderr
