"""The probe image's Dockerfile: its build context holds what ``pip install .`` needs.

No Docker daemon (nor registry) is reachable here, so the image is not built; what can go
wrong in it on this side is checked instead: the files the Dockerfile copies are exactly
what .dockerignore lets into the context, a wheel builds from that context alone with the
package data (catalogs) inside, and the launcher's needs (bash, gpuplan on PATH, fio, the
AWS CLI for --results-s3, torch >= 2.5 kept from the base image) are in the recipe.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _context_files() -> list[Path]:
    """Files of the repo that .dockerignore lets into the build context (Docker's rules:
    later patterns win; '!' re-includes; a pattern matches a path or a folder above it)."""
    rules = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            rules.append((line.startswith("!"), line.lstrip("!").rstrip("/")))
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    kept = []
    for rel in tracked:
        parts = rel.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        included = True
        for negate, pattern in rules:
            pat = pattern.removeprefix("**/")
            hit = any(fnmatch.fnmatchcase(p, pattern) for p in prefixes) or (
                pattern.startswith("**/") and any(fnmatch.fnmatchcase(x, pat) for x in parts)
            )
            if hit:
                included = negate
        if included and (REPO / rel).is_file():
            kept.append(Path(rel))
    return kept


def test_dockerfile_copies_what_the_context_holds_and_a_wheel_builds(tmp_path):
    dockerfile = (REPO / "Dockerfile").read_text()
    copied = set()
    for m in re.finditer(r"^COPY\s+(.+?)\s+\S+$", dockerfile, re.MULTILINE):
        copied |= set(m.group(1).split())
    files = _context_files()
    top = {f.parts[0] for f in files}
    assert copied == top == {"pyproject.toml", "README.md", "gpuplan"}
    assert not any(f.parts[0] in (".venv", "results", "out", "tests", ".git") for f in files)
    ctx = tmp_path / "ctx"
    for f in files:
        (ctx / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, ctx / f)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-q", "-w", str(tmp_path / "dist"), str(ctx)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("gpuplan-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpuplan/probes/emit.py" in names
    data = [n for n in names if n.startswith("gpuplan/catalogs/") and n.endswith((".yaml", ".csv"))]
    assert data, "catalog data missing from the wheel"


def test_dockerfile_recipe_has_what_the_launchers_run():
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=\S+", text, re.MULTILINE)
    assert "FROM ${BASE_IMAGE}" in text
    assert "gpuplan:latest" not in text
    install = next(line for line in text.splitlines() if "pip install" in line)
    assert "awscli" in install  # the --results-s3 upload step runs `aws s3 cp`
    assert "[probes]" not in install  # torch stays the base image's build (CUDA/NCCL match)
    assert "fio" in text and "gpuplan --help" in text and ">= (2, 5)" in text
