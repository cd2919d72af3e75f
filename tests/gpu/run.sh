#!/usr/bin/env bash
# GPU checks in one go (under 5 minutes on one GPU machine):
#   1. the tests marked `gpu` (real CUDA/ROCm code paths of the probes);
#   2. a quick probe of the machine, written under results/ and listed.
# Usage: tests/gpu/run.sh            (from anywhere; uses .venv when present)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export PYTHONUNBUFFERED=1
say() { printf 'tests/gpu/run.sh: %s\n' "$*" >&2; }

"$PY" - <<'PY' || { echo "tests/gpu/run.sh: no GPU visible to torch; nothing to run" >&2; exit 2; }
import sys, torch
sys.exit(0 if torch.cuda.is_available() else 1)
PY

start=$(date +%s)
say "1/2 GPU tests"
timeout 210 "$PY" -m pytest tests/gpu -m gpu -q -p no:cacheprovider -o addopts="" -rs
say "2/2 quick probe -> results/"
mkdir -p results
timeout 120 "$PY" -m gpuplan probe --quick --out results/ --no-progress
"$PY" -m gpuplan results ls --dir results
say "done in $(( $(date +%s) - start )) s"
