"""No absolute local path in the report (issue 17: provenance printed the checkout's path).

The real CLI plans a scenario given by absolute path, with the shipped calibration artifact
copied outside the working directory and named by absolute path, and a trial run in a
results folder given by absolute path; the HTML and Markdown must name none of the tmp
dir, the home dir or the checkout, while plan.json keeps the machine record.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

from gpuplan.plan.provenance import portable_text

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

SCENARIO = textwrap.dedent(
    """\
    name: paths
    workloads:
      training:
        - name: train-8b
          model: llama3.1-8b
          tokens: 1.0e11
          deadline_days: 10
          seq_len: 4096
          global_batch_tokens: 2.0e6
    candidates:
      gpus: [h100]
      instances: [p5.48xlarge]
      onprem_nodes: []
    costs:
      utilisation: 0.8
    """
)


def test_report_names_no_absolute_local_path(run_cli, tmp_path):
    from gpuplan.calibration import default_artifact_path

    sys_tmp = tmp_path / "elsewhere"
    sys_tmp.mkdir()
    scenario = sys_tmp / "paths.yaml"
    scenario.write_text(SCENARIO)
    artifact = sys_tmp / "calibration.json"
    shutil.copy(default_artifact_path(), artifact)
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "out"
    r = run_cli(
        "plan",
        str(scenario),
        "--out",
        str(out),
        "--calibration",
        str(artifact),
        "--results",
        str(sys_tmp / "results"),
        "--no-progress",
        cwd=work,
    )
    assert r.returncode == 0, r.stderr
    home = os.path.expanduser("~")
    for name in ("report.html", "report.md"):
        text = (out / name).read_text()
        for forbidden in (str(tmp_path), str(REPO), home + os.sep):
            assert forbidden not in text, (name, forbidden)
        assert "calibration.json" in text  # named, by file name
    assert str(artifact) in (out / "plan.json").read_text()  # the machine record keeps it


def test_the_shipped_artifact_is_named_from_the_package(report_dir):
    html = (report_dir / "report.html").read_text()
    assert "gpuplan/calibration/data/default_artifact.json" in html
    assert str(REPO) not in html


def test_portable_text_rules(tmp_path, monkeypatch):
    f = tmp_path / "sub" / "x.json"
    f.parent.mkdir()
    f.write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert portable_text(f"read {f}; done") == "read sub/x.json; done"
    monkeypatch.chdir(REPO)
    assert portable_text(f"read {f}") == "read .../x.json"
    home = os.path.expanduser("~")
    assert portable_text(f"{home}/a/b.yaml") == "~/a/b.yaml"
    # URLs, units and ratios are not paths
    for s in ("https://docs.nvidia.com/a/b.html", "3.2 TB/s", "1/throughput", "GB/s per GPU"):
        assert portable_text(s) == s
