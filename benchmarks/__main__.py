"""Run every benchmark in turn and summarise which met its target.

    python -m benchmarks                 # all of them
    python -m benchmarks forecast_train  # some of them, by module name

Each benchmark is a module with a ``main()`` that prints its figures and returns 0 when
its target is met (non-zero otherwise). They run one after the other, in subprocesses, so
that one benchmark's imports and threads do not disturb the next.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _modules() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.py") if not p.stem.startswith("_"))


def main(argv: list[str] | None = None) -> int:
    names = list(sys.argv[1:] if argv is None else argv) or _modules()
    unknown = sorted(set(names) - set(_modules()))
    if unknown:
        print(
            f"benchmarks: unknown {', '.join(unknown)}; choose from {', '.join(_modules())}",
            file=sys.stderr,
        )
        return 2
    summary = []
    for name in names:
        print(f"\n=== benchmarks.{name}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, "-m", f"benchmarks.{name}"], cwd=HERE.parent)
        summary.append((name, rc, time.perf_counter() - t0))
    print("\nbenchmark            target  wall")
    for name, rc, wall in summary:
        print(f"{name:20s} {'met' if rc == 0 else 'MISSED':6s}  {wall:5.0f} s")
    return 0 if all(rc == 0 for _, rc, _ in summary) else 1


if __name__ == "__main__":
    raise SystemExit(main())
