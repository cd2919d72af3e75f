"""``gpuplan plan`` end to end in a subprocess: outputs, JSON on stdout, one-line errors."""

from __future__ import annotations

import json
import textwrap

SMALL = textwrap.dedent(
    """\
    name: cli-test
    workloads:
      inference:
        - name: chat
          model: llama3.1-8b
          qps: 2
          input_tokens: 512
          output_tokens: 128
          ttft_slo_s: 1.0
          tpot_slo_s: 0.05
    candidates:
      gpus: [h100]
      instances: [p5.48xlarge]
      onprem_nodes: []
    """
)


def _one_line_error(proc):
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gpuplan: error:")
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_plan_writes_three_outputs_and_json_on_stdout(run_cli, tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(SMALL)
    out = tmp_path / "report"
    proc = run_cli(
        "plan",
        str(scen),
        "--out",
        str(out),
        "--format",
        "json",
        "--no-progress",
        "--results",
        str(tmp_path / "no-results"),
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # nothing but JSON on stdout
    assert doc["scenario"]["name"] == "cli-test"
    assert doc["summary"]["rank_by"] == "mtok"
    for kind, name in (("html", "report.html"), ("md", "report.md"), ("json", "plan.json")):
        assert (out / name).exists()
        assert doc["report_files"][kind].endswith(name)
    assert json.loads((out / "plan.json").read_text())["summary"] == doc["summary"]
    assert f"report: {out / 'report.html'}" in proc.stderr


def test_table_output(run_cli, tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(SMALL)
    proc = run_cli(
        "plan",
        str(scen),
        "--out",
        str(tmp_path / "r"),
        "--no-progress",
        "--results",
        str(tmp_path / "none"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "Recommended:" in proc.stdout and "p5.48xlarge" in proc.stdout


def test_bad_scenario_is_one_line_with_the_line_number(run_cli, tmp_path):
    scen = tmp_path / "bad.yaml"
    scen.write_text(SMALL.replace("qps: 2", "qsp: 2"))
    line = _one_line_error(run_cli("plan", str(scen), "--no-progress"))
    assert "bad.yaml line 6" in line and "unknown field 'qsp'" in line and "qps" in line


def test_unknown_gpu_lists_the_closest(run_cli, tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(SMALL.replace("gpus: [h100]", "gpus: [h1000]"))
    line = _one_line_error(run_cli("plan", str(scen), "--no-progress"))
    assert "h1000" in line


def test_missing_files(run_cli, tmp_path):
    assert "does not exist" in _one_line_error(run_cli("plan", str(tmp_path / "nope.yaml")))
    scen = tmp_path / "s.yaml"
    scen.write_text(SMALL)
    line = _one_line_error(
        run_cli("plan", str(scen), "--calibration", str(tmp_path / "cal.json"), "--no-progress")
    )
    assert "gpuplan calibrate" in line


def test_help_has_examples(run_cli):
    proc = run_cli("plan", "--help")
    assert proc.returncode == 0
    assert "Examples:" in proc.stdout and "examples/llama-pretrain.yaml" in proc.stdout
