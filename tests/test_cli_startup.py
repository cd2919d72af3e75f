"""`gpuplan --help` stays light: it must not import torch (nor the heavy stacks)."""

from __future__ import annotations

import json
import subprocess
import sys

CODE = """
import json, sys
from gpuplan.cli.main import main
code = main(["--help"])
heavy = sorted(m for m in ("torch", "sklearn", "pandas", "scipy", "matplotlib") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
"""


def run(code: str) -> dict:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stderr.strip().splitlines()[-1])


def test_root_help_does_not_import_torch():
    out = run(CODE)
    assert out["code"] == 0
    assert "torch" not in out["heavy"], out["heavy"]


def test_probe_and_results_help_do_not_import_torch():
    for cmd in ("probe", "results"):
        out = run(CODE.replace('main(["--help"])', f'main(["{cmd}", "--help"])'))
        assert out["code"] == 0
        assert "torch" not in out["heavy"], (cmd, out["heavy"])


def test_the_check_would_see_torch():
    # the probe itself does import torch: the check above is able to fail
    out = run(
        CODE.replace(
            'code = main(["--help"])', "import gpuplan.probes.base as b; b.import_torch(); code = 0"
        )
    )
    assert "torch" in out["heavy"]
