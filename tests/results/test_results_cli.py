"""`gpuplan results ls|show|compare` on result files (no torch needed)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gpuplan.results.schema import ResultDocument
from gpuplan.results.store import save_result

V1 = Path(__file__).parent / "data" / "v1-cpu-quick.json"


@pytest.fixture
def results_dir(tmp_path):
    data = json.loads(V1.read_text())
    for p in data["probes"]:  # samples of a quiet machine (the fixture's came from a busy one)
        for m in p["measurements"]:
            if m.get("samples_s"):
                m["samples_s"] = [m["median_s"] * (1 + 0.01 * i) for i in (-2, -1, 0, 1, 2)]
                m["min_s"] = m["max_s"] = m["iqr_s"] = None
    a = ResultDocument.model_validate(data)
    other = copy.deepcopy(data)
    other["run_id"] = "0123abcd-0000-4000-8000-000000000000"
    other["started_at"] = "2027-01-01T00:00:00.000000Z"
    for p in other["probes"]:
        if p["probe"] == "membw":
            for m in p["measurements"]:
                m["samples_s"] = [s / 2 for s in m["samples_s"]]
                m["bytes_per_s"] *= 2
                m["median_s"] = m["min_s"] = m["max_s"] = m["iqr_s"] = None
    b = ResultDocument.model_validate(other)
    save_result(a, tmp_path)
    save_result(b, tmp_path)
    return tmp_path, a, b


def test_ls_lists_every_run(run_cli, results_dir):
    root, a, b = results_dir
    r = run_cli("results", "ls", "--dir", str(root), "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["results"]
    assert [row["run_id"] for row in rows] == [a.run_id, b.run_id]  # by start time
    assert rows[0]["status"] == {"ok": 5, "failed": 0, "skipped": 1}
    assert rows[0]["run_status"] == "complete" and rows[1]["run_status"] == "complete"
    table = run_cli("results", "ls", "--dir", str(root))
    assert a.run_id[:8] in table.stdout and b.run_id[:8] in table.stdout


def test_show_by_prefix(run_cli, results_dir):
    root, a, _ = results_dir
    r = run_cli("results", "show", a.run_id[:6], "--dir", str(root), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["run_id"] == a.run_id
    t = run_cli("results", "show", a.run_id[:6], "--dir", str(root))
    assert "collectives" in t.stdout and "busbw" in t.stdout


def test_compare_reports_ratio_and_significance(run_cli, results_dir):
    root, a, b = results_dir
    r = run_cli(
        "results", "compare", a.run_id[:8], b.run_id[:8], "--dir", str(root), "--format", "json"
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    membw = [pt for pt in data["points"] if pt["probe"] == "membw"]
    assert membw and all(pt["ratio"] == pytest.approx(2.0) for pt in membw)
    assert all(pt["verdict"] == "faster" and pt["p_value"] < 0.05 for pt in membw)
    assert all(pt["ratio"] == pytest.approx(1.0) for pt in data["points"] if pt["probe"] != "membw")
    assert "Mann-Whitney" in data["rule"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["show", "zzzz"], "no result file or run id 'zzzz'"),
        (["compare", "zzzz", "yyyy"], "no result file or run id"),
        (["ls", "--dir", "/no/such/results"], "no results directory /no/such/results"),
        (["compare", "a", "b", "--alpha", "2"], "--alpha must be between 0 and 1"),
        (["frobnicate"], "No such command"),
    ],
)
def test_errors_are_one_line_exit_2(run_cli, results_dir, args, expected):
    root, _, _ = results_dir
    extra = ["--dir", str(root)] if args[0] in ("show", "compare") else []
    r = run_cli("results", *args, *extra)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], r.stderr


def test_upload_is_registered(run_cli):
    r = run_cli("results", "--help")
    assert r.returncode == 0
    for cmd in ("ls", "show", "compare", "upload"):
        assert cmd in r.stdout


def test_show_describes_a_serve_level():
    from gpuplan.cli.results import _point_text

    level = {
        "concurrency": 8,
        "num_requests": 64,
        "completed": 63,
        "output_throughput_tokens_per_s": 1234.0,
        "ttft_p50_s": 0.0812,
        "ttft_p99_s": 0.25,
        "tpot_p50_s": 0.0151,
    }
    point, figure = _point_text("serve", level)
    assert point == "concurrency 8 (63/64 ok)"
    assert figure == "1.23 ktok/s, TTFT p50 81.2 ms p99 250 ms, TPOT p50 15.1 ms"
