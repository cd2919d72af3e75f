#!/usr/bin/env bash
# Every GPU branch of the probes on one GPU machine, within 10 minutes:
#   1. the tests marked `gpu`: inventory matched to torch by UUID/PCI id, energy counter,
#      matmul (flushed event timing, warm-up, mamf shapes; TunableOp/hipBLASLt and the fp8
#      type on ROCm), membw (past every cache, memcpy and kernel copy), pcie on every GPU,
#      a one-rank NCCL/RCCL communicator through every collective case, storage with
#      kvikio (GDS labelling per file) when kvikio is installed;
#   2. a quick probe of the whole suite, written as ONE result file under results/
#      (collectives are skipped below 2 GPUs: step 1 ran them on one rank), and listed.
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
say "1/2 GPU tests (every GPU branch)"
timeout 330 "$PY" -m pytest tests/gpu -m gpu -q -p no:cacheprovider -o addopts="" -rs
say "2/2 quick probe of the whole suite -> results/ (one file)"
mkdir -p results
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
before=$(find results -name '*.json' 2>/dev/null | wc -l)
timeout 240 "$PY" -m gpuplan probe --quick --out results/ --no-progress \
  --storage-path "$scratch" --storage-size 256M
after=$(find results -name '*.json' 2>/dev/null | wc -l)
[ $((after - before)) -eq 1 ] || { say "expected one new result file, found $((after - before))"; exit 1; }
"$PY" -m gpuplan results ls --dir results
say "done in $(( $(date +%s) - start )) s"
