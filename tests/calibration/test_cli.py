"""gpuplan calibrate / gpuplan validate microbench, run as a user would."""

from __future__ import annotations

import json

from tests.calibration.conftest import make_doc


def test_calibrate_writes_artifact_and_prints_report(run_cli, tmp_path):
    out = tmp_path / "cal.json"
    proc = run_cli("calibrate", "--out", str(out), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # only JSON on stdout
    assert data["artifact"] == str(out) and out.exists()
    assert data["inputs"] == 29
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
    assert missing.returncode == 2 and "no such file" in missing.stderr
