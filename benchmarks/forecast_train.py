"""Training forecast speed (issue 5): one forecast, the 16k-GPU search, the CLI end to end.

Fixed work, measured after one warm-up call (catalog and calibration are loaded once per
process; their cold start is part of the CLI figure only). Each figure is the median of
several runs, as wall time and as CPU time of this process (the CPU time is what to compare
with the target on a shared, loaded machine; numpy runs single-threaded here):

* ``forecast``: one ``forecast_training`` of Llama-3.1-70B on 1024 H100 with the layout
  given (tp 8, pp 4, vp 5, micro-batch 1, selective recompute, ZeRO-1): step time with
  breakdown and interval, memory, summary. Target < 5 ms.
* ``search``: the full layout search for Llama-3.1-405B on 16,384 H100 (every valid
  tp/pp/cp/vp/micro-batch/recompute/ZeRO, memory pruning, timing of every fitting layout).
  Target < 1 s on one core.
* ``cli``: ``gpuplan forecast train --model llama3.1-405b --gpu h100 --gpus 16384 --tokens
  15.6e12 --format json`` in a fresh process (imports, catalog, calibration, search, JSON).
  Target < 2 s.

Run::

    python -m benchmarks.forecast_train
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

TARGETS_S = {"forecast": 0.005, "search": 1.0, "cli": 2.0}


def _timed(fn, repeats: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
    return statistics.median(walls), statistics.median(cpus)


def _cli(repeats: int) -> tuple[float, float]:
    cmd = [
        sys.executable,
        "-m",
        "gpuplan",
        "forecast",
        "train",
        "--model",
        "llama3.1-405b",
        "--gpu",
        "h100",
        "--gpus",
        "16384",
        "--tokens",
        "15.6e12",
        "--format",
        "json",
    ]
    walls, cpus = [], []
    for _ in range(repeats):
        before = os.times()
        w0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        walls.append(time.perf_counter() - w0)
        after = os.times()
        cpus.append(
            (after.children_user - before.children_user)
            + (after.children_system - before.children_system)
        )
        if r.returncode != 0:
            raise SystemExit(f"CLI failed: {r.stderr.strip()}")
        json.loads(r.stdout)
    return statistics.median(walls), statistics.median(cpus)


def main() -> int:
    from gpuplan.forecast.hardware import resolve_hardware
    from gpuplan.forecast.model import arch_from as resolve_model
    from gpuplan.forecast.train import forecast_training

    t0 = time.perf_counter()
    hw = resolve_hardware("h100")
    arch70 = resolve_model("llama3.1-70b")
    arch405 = resolve_model("llama3.1-405b")
    cold = time.perf_counter() - t0

    layout = dict(tp=8, pp=4, cp=1, ep=1, vp=5, micro_batch=1, recompute="selective", zero=1)

    def one() -> None:
        forecast_training(arch70, num_gpus=1024, seq_len=8192, parallelism=layout, hardware=hw)

    def search() -> None:
        forecast_training(arch405, num_gpus=16384, seq_len=8192, tokens=15.6e12, hardware=hw)

    one()
    search()  # warm-up
    figures = {
        "forecast": _timed(one, 50),
        "search": _timed(search, 5),
        "cli": _cli(3),
    }
    res = forecast_training(arch405, num_gpus=16384, seq_len=8192, tokens=15.6e12, hardware=hw)
    print(f"cold start (catalog + calibration, once per process): {cold * 1e3:.0f} ms")
    print(
        f"405B search evaluated {res['layouts_evaluated']} fitting layouts; best "
        f"{res['parallelism']}, MFU {res['mfu']:.3f}"
    )
    ok = True
    for name, (wall, cpu) in figures.items():
        target = TARGETS_S[name]
        met = cpu < target
        ok &= met
        print(
            f"{name:9s} wall {wall * 1e3:9.2f} ms   cpu {cpu * 1e3:9.2f} ms   "
            f"target < {target * 1e3:.0f} ms   {'met' if met else 'NOT MET'}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
