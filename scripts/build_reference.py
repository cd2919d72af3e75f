#!/usr/bin/env python
"""Rebuild ``results/reference/`` from the published microbenchmarks shipped with gpuplan.

Reads ``gpuplan/calibration/data/microbench.csv`` (a copy of the project's published
table, source columns kept), writes one result document per (source, hardware) and
removes reference files it no longer produces. Rows that cannot be expressed as a
measurement are listed with the reason on stderr.

Examples:
    .venv/bin/python scripts/build_reference.py
    .venv/bin/python scripts/build_reference.py --check     # exit 1 if results/reference is stale
    .venv/bin/python scripts/build_reference.py --artifact  # also rebuild the default artifact
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: created_at of the shipped default artifact: fixed, so that rebuilding it on unchanged
#: inputs gives the same file (the test that checks it is current compares bytes).
DEFAULT_CREATED_AT = "2026-01-01T00:00:00Z"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--csv", type=Path, default=None, help="published table (default: the packaged copy)"
    )
    parser.add_argument("--out", type=Path, default=REPO / "results" / "reference")
    parser.add_argument(
        "--check", action="store_true", help="compare only; exit 1 when files differ"
    )
    parser.add_argument(
        "--artifact",
        action="store_true",
        help="also rebuild gpuplan/calibration/data/default_artifact.json from the reference set",
    )
    args = parser.parse_args(argv)

    sys.path.insert(0, str(REPO))
    from gpuplan.calibration.reference import (
        MICROBENCH_CSV,
        build_reference_documents,
        read_microbench,
        reference_file_name,
    )
    from gpuplan.catalogs import get_catalog

    rows = read_microbench(args.csv or MICROBENCH_CSV)
    docs, skipped, unresolved = build_reference_documents(rows, catalog=get_catalog())
    for s in skipped:
        print(f"skipped {s.bench_id}: {s.reason}", file=sys.stderr)
    for note in unresolved:
        print(f"not in the catalog: {note}", file=sys.stderr)

    wanted = {reference_file_name(d): json.dumps(d, indent=2, allow_nan=False) + "\n" for d in docs}
    existing = (
        {p.name: p.read_text(encoding="utf-8") for p in args.out.glob("*.json")}
        if args.out.exists()
        else {}
    )
    if args.check:
        stale = sorted(set(wanted) ^ set(existing)) + sorted(
            n for n in wanted if n in existing and wanted[n] != existing[n]
        )
        for name in stale:
            print(f"stale: {args.out / name}", file=sys.stderr)
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in wanted.items():
        if existing.get(name) != text:
            (args.out / name).write_text(text, encoding="utf-8")
    for name in set(existing) - set(wanted):
        (args.out / name).unlink()
    if args.artifact:
        from gpuplan.calibration.artifact import artifact_text, default_artifact_path
        from gpuplan.calibration.fit import calibrate_documents

        artifact = calibrate_documents([], include_reference=True, created_at=DEFAULT_CREATED_AT)
        default_artifact_path().write_text(artifact_text(artifact), encoding="utf-8")
        print(f"default artifact -> {default_artifact_path()}", file=sys.stderr)
    measured = sum(len(p["measurements"]) for d in docs for p in d["probes"])
    print(
        f"{len(docs)} reference documents, {measured} measurements, {len(skipped)} rows skipped -> {args.out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
