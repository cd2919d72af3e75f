"""gpuplan calibrate / gpuplan validate microbench, run as a user would."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.calibration.conftest import make_doc


def test_calibrate_writes_artifact_and_prints_report(run_cli, tmp_path):
    out = tmp_path / "cal.json"
    proc = run_cli("calibrate", "--out", str(out), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # only JSON on stdout
    assert data["artifact"] == str(out) and out.exists()
    # every published reference document (no local results in the isolated results dir)
    from gpuplan.calibration.reference import build_reference_documents, read_microbench
    from gpuplan.catalogs import get_catalog

    reference, _, _ = build_reference_documents(read_microbench(), catalog=get_catalog())
    assert data["inputs"] == len(reference)
    assert data["held_out_error"]["matmul_bf16"]["scheme"] == "group k-fold by machine"
    loo = data["leave_one_device_out"]
    assert {r["device"] for r in loo["rows"]} >= {"h100-sxm5-80gb", "mi300x"}
    from gpuplan.calibration import load_artifact

    assert (
        load_artifact(out)["devices"]["h100-sxm5-80gb"]["matmul_bf16_flops_per_s"]["basis"]
        == "measured"
    )


def test_calibrate_table_shows_held_out_error_and_loo(run_cli, tmp_path):
    proc = run_cli("calibrate", "--out", str(tmp_path / "c.json"))
    assert proc.returncode == 0, proc.stderr
    assert "Held-out error" in proc.stdout
    assert "Leave-one-device-out" in proc.stdout
    assert "interval coverage" in proc.stdout


def test_bad_result_file_in_a_folder_is_skipped_alone_is_exit_2(run_cli, tmp_path):
    bad = tmp_path / "runs" / "x.json"
    bad.parent.mkdir()
    bad.write_text('{"schema_version": 1, "run_id": "r"}')
    out = tmp_path / "c.json"
    args = ("--out", str(out), "--no-validate", "--format", "json")
    proc = run_cli("calibrate", str(bad.parent), *args)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "skipped" in lines[0] and "x.json" in lines[0], lines
    assert json.loads(proc.stdout)["local_runs"] == 0 and out.exists()
    out.unlink()
    alone = run_cli("calibrate", str(bad), *args)
    assert alone.returncode == 2
    lines = alone.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuplan: error") and "x.json" in lines[0]
    assert "started_at" in lines[0] and "Traceback" not in alone.stderr
    assert not out.exists()


def test_mixed_probe_versions_exit_2(run_cli, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    for i, version in enumerate((1, 2)):
        doc = make_doc(
            run_id=f"00000000-0000-4000-8000-00000000001{i}",
            machine_id=f"node{i}",
            accelerators=[{"name": "NVIDIA H100 80GB HBM3"}],
            probes=[
                {
                    "probe": "membw",
                    "probe_version": version,
                    "status": "ok",
                    "params": {"device": "cuda:0"},
                    "measurements": [{"op": "copy", "size_bytes": 2**30, "bytes_per_s": 2.5e12}],
                }
            ],
        )
        (runs / f"run{i}.json").write_text(json.dumps(doc))
    proc = run_cli("calibrate", str(runs), "--out", str(tmp_path / "c.json"), "--no-validate")
    assert proc.returncode == 2
    assert "different probe versions" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "c.json").exists()  # nothing half-written


def test_validate_microbench_json_and_help(run_cli, tmp_path):
    proc = run_cli("validate", "microbench", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["summary"]["matmul_bf16_flops_per_s"]["cases"] == 6
    help_ = run_cli("validate", "microbench", "--help")
    assert "Examples:" in help_.stdout
    assert "Examples:" in run_cli("calibrate", "--help").stdout
    missing = run_cli("validate", "microbench", "--data", str(tmp_path / "none.csv"))
    assert missing.returncode == 2 and len(missing.stderr.splitlines()) == 1
    assert "none.csv" in missing.stderr and "Traceback" not in missing.stderr


# --- issue 13: bad result files, --out checked before the fit, writes that fail ---------

from tests.results.test_loader import BAD, h100_doc, v1  # noqa: E402

_FAST = ("--no-validate", "--format", "json")
_NAMED_BY_THE_ISSUE = ["binary", "utf16-bom", "infinity", "int-5000-digits", "nesting-200000"]


def _only_error_line(proc) -> str:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr)
    assert lines[0].startswith("gpuplan: error: ")
    return lines[0]


@pytest.mark.parametrize("name", _NAMED_BY_THE_ISSUE)
def test_calibrate_a_bad_file_named_alone_is_one_line_exit_2(run_cli, tmp_path, name):
    content, expected = BAD[name]
    bad = tmp_path / f"{name}.json"
    bad.write_bytes(content)
    out = tmp_path / "c.json"
    line = _only_error_line(run_cli("calibrate", str(bad), "--out", str(out), *_FAST))
    assert str(bad) in line and expected in line
    assert not out.exists()


def test_calibrate_a_folder_skips_bad_files_and_fits_the_good_ones(run_cli, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    for name, (content, _) in BAD.items():
        (runs / f"{name}.json").write_bytes(content)
    os.mkfifo(runs / "fifo.json")
    (runs / "calibration.json").write_text('{"artifact_version": 1}')
    good = h100_doc()
    (runs / "good.json").write_text(json.dumps(good))
    out = tmp_path / "c.json"
    proc = run_cli("calibrate", str(runs), "--out", str(out), *_FAST, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    warnings = [line for line in lines if line.startswith("gpuplan: warning: skipped ")]
    assert len(warnings) == len(BAD) + 1  # + the FIFO
    assert len(lines) == len(warnings) + 1 and "calibration.json: not a result file" in lines[-1]
    assert json.loads(proc.stdout)["local_runs"] == 1
    assert good["run_id"] in json.loads(out.read_text())["inputs"]


def test_calibrate_one_run_id_in_two_folders_with_different_content_is_exit_2(run_cli, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    doc = v1()
    (a / "run.json").write_text(json.dumps(doc))
    doc["host"]["hostname"] = "edited"
    (b / "run.json").write_text(json.dumps(doc))
    out = tmp_path / "c.json"
    line = _only_error_line(run_cli("calibrate", str(a), str(b), "--out", str(out), *_FAST))
    assert str(a / "run.json") in line and str(b / "run.json") in line
    assert not out.exists()


def test_calibrate_uses_the_finished_probes_of_an_interrupted_run(run_cli, tmp_path):
    doc = h100_doc(run_id="33333333-0000-4000-8000-000000000003")
    doc["interrupted"] = True
    doc["probes"][1] = {**doc["probes"][1], "status": "failed", "error": "interrupted"}
    runs = tmp_path / "runs" / "h100-node"
    runs.mkdir(parents=True)
    (runs / "20260101T000000Z_33333333.partial.json").write_text(json.dumps(doc))
    out = tmp_path / "c.json"
    proc = run_cli("calibrate", str(tmp_path / "runs"), "--out", str(out), *_FAST)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["local_runs"] == 1
    assert doc["run_id"] in json.loads(out.read_text())["inputs"]
    from gpuplan.calibration.dataset import extract
    from gpuplan.results.loader import read_result_file

    records = extract([read_result_file(runs / "20260101T000000Z_33333333.partial.json")])
    assert {r.quantity for r in records.records} == {"matmul"}  # the ok probe, not the failed
    assert len(records.records) == 2


def _out_problem(run_cli, tmp_path, out: Path) -> str:
    # table format: the progress bar would print to stderr once the fit starts, so one
    # stderr line proves the check came first
    return _only_error_line(run_cli("calibrate", "--out", str(out), "--no-validate"))


def test_calibrate_out_a_directory_is_refused_before_the_fit(run_cli, tmp_path):
    line = _out_problem(run_cli, tmp_path, tmp_path)
    assert f"--out {tmp_path} is a directory" in line


def test_calibrate_out_under_a_file_is_refused_before_the_fit(run_cli, tmp_path):
    (tmp_path / "f").write_text("keep me")
    line = _out_problem(run_cli, tmp_path, tmp_path / "f" / "sub" / "c.json")
    assert "is a file, not a folder" in line
    assert (tmp_path / "f").read_text() == "keep me"


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux /proc")
def test_calibrate_out_in_an_unwritable_folder_is_refused_before_the_fit(run_cli, tmp_path):
    # /proc refuses new files even to root (a chmod 555 folder would not stop root)
    line = _out_problem(run_cli, tmp_path, Path("/proc/gpuplan-test-calibration.json"))
    assert "folder /proc is not writable" in line


def test_calibrate_write_failure_is_one_line_and_keeps_the_old_artifact(tmp_path):
    """A full disk, simulated with RLIMIT_FSIZE: every write past 4 KiB fails with EFBIG
    (Python ignores SIGXFSZ), as a write to a full disk fails with ENOSPC."""
    import resource
    import subprocess
    import sys

    out = tmp_path / "c.json"
    out.write_text('{"previous": "artifact"}')

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    proc = subprocess.run(
        [sys.executable, "-m", "gpuplan", "calibrate", "--out", str(out), *_FAST],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    line = _only_error_line(proc)
    assert f"could not write {out}" in line and "nothing was written" in line
    assert out.read_text() == '{"previous": "artifact"}'
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]  # no temporary file left
