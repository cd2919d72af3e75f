"""Catalog loading speed: every forecast loads the catalog, so it must stay cheap.

Fixed work: parse + validate every shipped catalog file (about 230 rows), in fresh
processes so that nothing is cached. Prints the median of several runs for

* ``import``: ``import gpuplan.catalogs`` (pydantic, PyYAML);
* ``load``: the first ``get_catalog()`` (read, validate, cross-check, index);
* ``cached``: a later ``get_catalog()`` (the lru_cache);
* ``resolve``: one alias look-up through the descriptive-name rule.

Target: ``load`` under 50 ms on a 2-core CI machine (issue 3). Run::

    python -m benchmarks.catalog_load
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

TARGET_LOAD_S = 0.050

_CHILD = r"""
import json, time
t0 = time.perf_counter()
import gpuplan.catalogs as c
t1 = time.perf_counter()
cat = c.get_catalog()
t2 = time.perf_counter()
c.get_catalog()
t3 = time.perf_counter()
cat.gpu("H100 80GB HBM3 (host 2x Xeon Platinum 8470)")
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "cached": t3 - t2, "resolve": t4 - t3,
                  "rows": len(cat.rows())}))
"""


def run(repeats: int = 7) -> dict[str, float]:
    samples: dict[str, list[float]] = {}
    rows = 0
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True
        ).stdout
        data = json.loads(out)
        rows = data.pop("rows")
        for key, value in data.items():
            samples.setdefault(key, []).append(value)
    result = {key: statistics.median(values) for key, values in samples.items()}
    result["rows"] = rows
    return result


def main() -> int:
    r = run()
    print(f"catalog rows: {r['rows']}")
    for key in ("import", "load", "cached", "resolve"):
        print(f"{key:>8}: {r[key] * 1e3:8.3f} ms (median of 7 fresh processes)")
    verdict = "meets" if r["load"] <= TARGET_LOAD_S else "MISSES"
    print(f"load {verdict} the {TARGET_LOAD_S * 1e3:.0f} ms target")
    return 0 if r["load"] <= TARGET_LOAD_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
