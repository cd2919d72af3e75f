#!/usr/bin/env bash
# Every GPU branch of the probes on one GPU machine, within 10 minutes:
#   1. the tests marked `gpu`: inventory matched to torch by UUID/PCI id, energy counter,
#      matmul (flushed event timing, warm-up, mamf shapes; TunableOp/hipBLASLt and the fp8
#      type on ROCm), membw (past every cache, memcpy and kernel copy), pcie on every GPU,
#      a one-rank NCCL/RCCL communicator through every collective case, storage with
#      kvikio (GDS labelling per file) when kvikio is installed;
#   2. a quick probe of the whole suite, written as ONE result file under results/
#      (collectives are skipped below 2 GPUs: step 1 ran them on one rank), and listed;
#      its per-GPU loops (matmul and membw on every GPU alone, then all at once) checked;
#   3. a 20-second soak (clocks, temperature, power, energy counter, throttle reasons from
#      NVML/amdsmi) written under the scratch folder and summarised on stderr.
# Budget: step 1 <= 280 s, step 2 <= 240 s, step 3 <= 60 s (timeout caps, 580 s in all).
# A failing step does not stop the next one (device time is scarce: one call should say
# everything); the script exits non-zero at the end, naming the steps that failed.
# Usage: tests/gpu/run.sh            (from anywhere; uses .venv when present)
set -uo pipefail
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
failed=()
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
step1() {
  timeout 280 "$PY" -m pytest tests/gpu -m gpu -q -p no:cacheprovider -o addopts="" -rs
}
step2() {
mkdir -p results
before=$(find results -name '*.json' 2>/dev/null | wc -l)
timeout 240 "$PY" -m gpuplan probe --quick --out results/ --no-progress \
  --storage-path "$scratch" --storage-size 256M
after=$(find results -name '*.json' 2>/dev/null | wc -l)
[ $((after - before)) -eq 1 ] || { say "expected one new result file, found $((after - before))"; exit 1; }
"$PY" -m gpuplan results ls --dir results
"$PY" - results <<'PY'
import json, pathlib, sys
files = [f for f in pathlib.Path(sys.argv[1]).rglob("*.json") if not f.name.endswith(".partial.json")]
doc = json.load(open(max(files, key=lambda f: f.stat().st_mtime)))
loops = [p for p in doc["probes"] if p["params"].get("scope") == "per_device"]
assert {p["probe"] for p in loops} == {"matmul", "membw"}, "no per-GPU loop in the run"
for p in loops:
    assert p["status"] == "ok", (p["probe"], p["error"])
    devices = {m["device_index"] for m in p["measurements"]}
    assert {m["concurrent"] for m in p["measurements"]} == {False, True}
    print(f"per-GPU {p['probe']}: devices {sorted(devices)}, spread {p['params']['spread']}",
          file=sys.stderr)
print(f"budget: {doc['budget']}", file=sys.stderr)
PY
}
step3() {
timeout 60 "$PY" -m gpuplan probe --soak 0.34 --soak-interval 1 --out "$scratch/soak" \
  --no-progress --format json > "$scratch/soak.json"
"$PY" - "$scratch/soak.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
(p,) = doc["probes"]
assert p["probe"] == "soak" and p["status"] == "ok", p["error"]
assert p["params"]["telemetry"] in ("nvml", "amdsmi"), "no NVML/amdsmi telemetry"
for m in p["measurements"]:
    assert m["samples"] >= 10 and m["windows"] >= 1, m
    keep = ("device_index", "uuid", "flops_per_s", "sm_clock_mhz", "temperature_c", "power_w",
            "energy_j", "mean_power_w", "throttle_reasons", "thermal_throttled",
            "power_throttled", "clock_dropped")
    print("soak:", json.dumps({k: m.get(k) for k in keep}), file=sys.stderr)
PY
}
say "1/3 GPU tests (every GPU branch)"
( set -e; step1 ) || failed+=("1 (GPU tests)")
say "2/3 quick probe of the whole suite -> results/ (one file)"
( set -e; step2 ) || failed+=("2 (quick probe)")
say "3/3 soak of 20 s on every GPU (NVML/amdsmi sampled every second)"
( set -e; step3 ) || failed+=("3 (soak)")
say "done in $(( $(date +%s) - start )) s"
if [ ${#failed[@]} -gt 0 ]; then
  say "failed: ${failed[*]}"
  exit 1
fi
