"""``plan --out DIR`` writes plan.json, report.md and report.html as one set: a failure
(permission, disk full) is one line and exit 2, and the earlier outputs in DIR are intact.

The failures are real: a folder made read-only (mode 555 as a user; as root, who ignores
permission bits, a tmpfs remounted read-only), and a real full file system (a 64 KiB tmpfs).
Mounting needs root (CI runs the suite as root); elsewhere those tests skip and say so.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from gpuplan.errors import EnvironmentProblem, GpuplanError
from gpuplan.report import write_report
from tests.cli._helpers import SMALL_SCENARIO, one_line_error

REPORT = ("plan.json", "report.md", "report.html")


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _plan(run_cli, tmp_path: Path, out: Path, name: str = "cli-robust"):
    scen = tmp_path / f"{name}.yaml"
    scen.write_text(SMALL_SCENARIO.replace("name: cli-robust", f"name: {name}"))
    return run_cli(
        "plan",
        str(scen),
        "--out",
        str(out),
        "--no-progress",
        "--format",
        "json",
        "--results",
        str(tmp_path / "no-results"),
    )


@pytest.fixture
def tiny_fs(tmp_path):
    """Mount a tmpfs of the given size under tmp_path (root only); unmounted afterwards."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        where = tmp_path / f"fs-{len(mounted)}"
        where.mkdir()
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            pytest.skip(
                "a real full/read-only file system needs 'mount -t tmpfs' (root); here it "
                f"failed: {proc.stderr.strip() or proc.returncode}"
            )
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.fixture(scope="module")
def small_plan_doc(tmp_path_factory) -> dict:
    """The JSON document of a real plan of SMALL_SCENARIO (built in-process, ~2 s)."""
    from gpuplan.plan.planner import build_plan
    from gpuplan.plan.scenario import parse_scenario

    empty = tmp_path_factory.mktemp("no-results")
    return build_plan(parse_scenario(SMALL_SCENARIO), results_paths=[empty]).to_json()


def test_second_plan_replaces_the_whole_set_and_keeps_other_files(run_cli, tmp_path):
    out = tmp_path / "report"
    first = _plan(run_cli, tmp_path, out, name="first")
    assert first.returncode == 0, first.stderr
    (out / "notes.txt").write_text("mine\n")
    second = _plan(run_cli, tmp_path, out, name="second")
    assert second.returncode == 0, second.stderr
    assert json.loads((out / "plan.json").read_text())["scenario"]["name"] == "second"
    assert "second" in (out / "report.md").read_text()
    assert "second" in (out / "report.html").read_text()
    assert (out / "notes.txt").read_text() == "mine\n"  # not ours: kept
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".report.")]
    assert leftovers == []  # no staging folder left beside it


def test_unwritable_out_keeps_the_earlier_report(run_cli, tmp_path, tiny_fs):
    if os.geteuid() == 0:
        parent = tiny_fs("32m")
    else:
        parent = tmp_path / "site"
        parent.mkdir()
    out = parent / "report"
    first = _plan(run_cli, tmp_path, out, name="first")
    assert first.returncode == 0, first.stderr
    before = _snapshot(out)
    assert set(before) == set(REPORT)
    if os.geteuid() == 0:
        subprocess.run(["mount", "-o", "remount,ro", str(parent)], check=True)
    else:
        parent.chmod(0o555)
    try:
        proc = _plan(run_cli, tmp_path, out, name="second")
    finally:
        if os.geteuid() != 0:
            parent.chmod(0o755)
    line = one_line_error(proc)
    assert "cannot write --out" in line and str(out) in line
    assert proc.stdout == ""  # checked before planning: no plan computed and thrown away
    assert _snapshot(out) == before  # nothing already written was lost


def test_full_disk_is_refused_before_planning(run_cli, tmp_path, tiny_fs):
    fs = tiny_fs("64k")
    out = fs / "report"
    out.mkdir()
    (out / "plan.json").write_text('{"old": true}\n')
    proc = _plan(run_cli, tmp_path, out)
    line = one_line_error(proc)
    assert "MiB free" in line and str(fs) in line
    assert proc.stdout == ""
    assert (out / "plan.json").read_text() == '{"old": true}\n'


def test_disk_full_while_writing_leaves_the_old_set(tmp_path, tiny_fs, small_plan_doc):
    """The write itself fails (ENOSPC half-way through the set): the old set stays whole."""
    fs = tiny_fs("64k")
    out = fs / "report"
    out.mkdir()
    old = {name: f"old {name}\n" for name in REPORT}
    for name, text in old.items():
        (out / name).write_text(text)
    with pytest.raises(EnvironmentProblem, match="No space left on device") as exc:
        write_report(small_plan_doc, out)
    assert "nothing was changed" in exc.value.one_line()
    assert {p.name: p.read_text() for p in out.iterdir()} == old
    assert sorted(p.name for p in fs.iterdir()) == ["report"]  # staging folder removed


def test_write_into_a_path_under_a_file_is_a_domain_error(tmp_path, small_plan_doc):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(GpuplanError, match="cannot write --out"):
        write_report(small_plan_doc, blocker / "report")
    assert blocker.read_text() == "x"


def test_out_through_a_symlink_replaces_the_target_and_keeps_the_link(tmp_path, small_plan_doc):
    real = tmp_path / "real"
    real.mkdir()
    (real / "plan.json").write_text("old\n")
    (real / "mine.txt").write_text("mine\n")
    link = tmp_path / "link"
    link.symlink_to(real)
    write_report(small_plan_doc, link)
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert json.loads((real / "plan.json").read_text())["scenario"] == small_plan_doc["scenario"]
    assert (real / "mine.txt").read_text() == "mine\n"
    assert set(p.name for p in real.iterdir()) == {*REPORT, "mine.txt"}


def test_the_check_before_planning_creates_nothing(run_cli, tmp_path):
    """A plan refused after the --out check (unknown GPU) leaves no folder behind."""
    scen = tmp_path / "s.yaml"
    scen.write_text(SMALL_SCENARIO.replace("gpus: [h100]", "gpus: [no-such-gpu]"))
    out = tmp_path / "a" / "b" / "report"
    proc = run_cli("plan", str(scen), "--out", str(out), "--no-progress")
    line = one_line_error(proc)
    assert "no-such-gpu" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
