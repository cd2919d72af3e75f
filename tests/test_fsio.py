"""The one atomic writer (gpuplan.fsio): real failures leave no temp file, data is fsync'd
before the rename, permissions follow the umask.

Real file systems throughout: a 64 KiB tmpfs for "disk full" (needs root to mount; skipped
otherwise), strace for the system-call order (skipped where strace is missing or ptrace is
not allowed), a child process for the umask (it is process-wide).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.fsio import to_json_text, write_atomic, write_json_atomic


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_writes_replaces_and_refuses_to_overwrite(tmp_path):
    target = tmp_path / "sub" / "a.json"
    write_json_atomic(target, {"x": 1})
    assert json.loads(target.read_text()) == {"x": 1}
    with pytest.raises(FileExistsError):
        write_json_atomic(target, {"x": 2})
    assert json.loads(target.read_text()) == {"x": 1}  # the earlier file is intact
    assert _leftovers(target.parent) == []  # the temp file of the refused write is gone
    write_json_atomic(target, {"x": 3}, overwrite=True)
    assert json.loads(target.read_text()) == {"x": 3}
    write_atomic(target, b"raw")
    assert target.read_bytes() == b"raw"


def test_parent_is_a_file_fails_and_leaves_nothing(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    with pytest.raises(OSError):
        write_atomic(blocker / "x.json", "{}")
    with pytest.raises(OSError):
        write_atomic(blocker / "x.json", "{}", make_parents=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]
    assert blocker.read_text() == "a file, not a folder"


def test_rename_onto_a_folder_fails_after_the_temp_was_written_and_cleans_it(tmp_path):
    (tmp_path / "out.json").mkdir()
    with pytest.raises(OSError):
        write_atomic(tmp_path / "out.json", "x" * 10_000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    assert (tmp_path / "out.json").is_dir()


def test_disk_full_on_a_64k_tmpfs_leaves_the_old_file_and_no_temp(tmp_path):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    small = tmp_path / "small"
    small.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        target = small / "plan.json"
        write_atomic(target, "old\n")
        with pytest.raises(OSError) as err:
            write_atomic(target, "y" * (1 << 20))  # 1 MiB into 64 KiB
        assert err.value.errno == 28  # ENOSPC, a real one
        assert target.read_text() == "old\n"
        assert sorted(p.name for p in small.iterdir()) == ["plan.json"]
    finally:
        subprocess.run(["umount", str(small)], check=False)


_CHILD = """
import os, sys
os.umask(int(sys.argv[2], 8))
from gpuplan.fsio import write_atomic
write_atomic(sys.argv[1] + "/plain.txt", "x")
write_atomic(sys.argv[1] + "/run.sh", "#!/bin/sh\\n", mode=0o755)
"""


@pytest.mark.parametrize(("umask", "expected"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_mode_follows_the_umask(tmp_path, umask, expected):
    subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), oct(umask)[2:]], check=True)
    assert stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode) == expected
    assert stat.S_IMODE((tmp_path / "run.sh").stat().st_mode) == 0o755  # explicit mode


def test_data_is_fsynced_before_the_rename(tmp_path):
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    log = tmp_path / "trace.txt"
    code = (
        "from gpuplan.fsio import write_atomic; import sys; "
        "write_atomic(sys.argv[1] + '/f.json', 'x' * 100, overwrite=True); "
        "write_atomic(sys.argv[1] + '/g.json', 'y', overwrite=False)"
    )
    done = subprocess.run(
        [
            "strace",
            "-f",
            "-o",
            str(log),
            "-e",
            "trace=fsync,fdatasync,rename,renameat,renameat2,link,linkat",
            sys.executable,
            "-c",
            code,
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"ptrace not allowed: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    calls = [
        line.split("(")[0].split()[-1]
        for line in log.read_text().splitlines()
        if "(" in line and "resumed" not in line
    ]
    publish = [i for i, c in enumerate(calls) if c.startswith(("rename", "link"))]
    assert len(publish) == 2  # one replace, one link
    for i in publish:
        assert calls[i - 1] == "fsync", calls  # the temp file's data, then the new name
        assert calls[i + 1] == "fsync", calls  # and the folder holding the new name
    assert (tmp_path / "f.json").read_text() == "x" * 100


def test_json_text_is_strict(tmp_path):
    assert to_json_text({"a": float("nan"), "b": [float("inf"), 1.5], "p": Path("x")}) == (
        '{\n  "a": null,\n  "b": [\n    null,\n    1.5\n  ],\n  "p": "x"\n}'
    )
    with pytest.raises(ValueError):  # NaN is refused before anything is written
        write_json_atomic(tmp_path / "nan.json", {"a": float("nan")})
    assert list(tmp_path.iterdir()) == []
