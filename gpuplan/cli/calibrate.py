"""``gpuplan calibrate``: fit device models from probe results and the reference set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gpuplan.cli._common import (
    FORMAT_OPTION,
    Format,
    emit,
    make_app,
    progress,
    simple_table,
)

HELP = """Fit calibrated device models from probe results and published measurements.

Merges the given result files (default: results/ and results/reference/) with the
published reference set, fits matmul, memory, host-device, collective and storage models
per device, transfers them to the catalog devices nobody measured (with a wider interval),
and writes the artifact (JSON) to --out. Prints the held-out error per quantity (group
k-fold by machine) and the leave-one-device-out table on the published microbenchmarks.
Results of one probe measured with different probe versions are refused.

\b
Examples:
  gpuplan calibrate                                   results/ + reference -> out/calibration.json
  gpuplan calibrate results/node-a --out h100.json    one machine's runs plus the reference set
  gpuplan calibrate results/ --exclude-reference      only local measurements
  gpuplan calibrate --format json | jq .leave_one_device_out.summary
  gpuplan calibrate --server https://results.example --out pooled.json
"""

app = make_app(HELP, single=True)


def _gather(paths: list[Path], exclude_reference: bool) -> list[Any]:
    """The result documents under ``paths`` (default: the results folder), through the
    shared loader: bad files are skipped with one stderr line each (a file named alone is
    an error), non-result JSON and duplicates are noted, and a run id held by two different
    documents is an error naming both files."""
    from gpuplan.cli.results import load_reporting

    if not paths:
        from gpuplan.paths import results_dir

        paths = [p for p in (results_dir(),) if p.exists()]
    loaded = load_reporting(paths)
    return [doc for _, doc in loaded.documents if not (exclude_reference and doc.source)]


def check_out_path(out: Path) -> None:
    """Refuse an ``--out`` that cannot be written, before the long fit.

    Raises
    ------
    InputError
        ``out`` is a directory, its parent is a file, or the folder is not writable.
    """
    import os
    import tempfile

    from gpuplan.errors import InputError

    if out.is_dir():
        raise InputError(
            f"--out {out} is a directory",
            hint=f"give a file name, e.g. --out {out / 'calibration.json'}",
        )
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent  # the folders calibrate will create
    if not parent.is_dir():
        raise InputError(
            f"--out {out}: {parent} is a file, not a folder", hint="choose another --out path"
        )
    try:  # really create a file: os.access says yes to root on a read-only mount
        fd, probe = tempfile.mkstemp(prefix=".gpuplan-write-check.", dir=parent)
    except OSError as exc:
        raise InputError(
            f"--out {out}: folder {parent} is not writable ({exc.strerror})",
            hint="choose another --out path",
        ) from None
    os.close(fd)
    os.unlink(probe)


def write_artifact(out: Path, artifact: dict[str, Any]) -> None:
    """Write the artifact atomically; a full disk or any OSError is one line and leaves no
    partial file (the previous artifact, if any, stays as it was)."""
    import json

    from gpuplan.calibration.artifact import artifact_text
    from gpuplan.errors import InputError
    from gpuplan.fsio import write_json_atomic

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out, json.loads(artifact_text(artifact)), overwrite=True)
    except OSError as exc:
        raise InputError(
            f"could not write {out}: {exc.strerror or exc}",
            hint="free some space or choose another --out; nothing was written",
        ) from None


@app.command(help=HELP)
def calibrate(
    result_paths: list[Path] = typer.Argument(
        None, help="result files or directories (default: results/, which holds reference/)"
    ),
    out: Path = typer.Option(
        None,
        "--out",
        "-o",
        help="where to write the artifact (JSON; default: out/calibration.json, or $GPUPLAN_OUT)",
    ),
    exclude_reference: bool = typer.Option(
        False, "--exclude-reference", help="leave out the published reference set"
    ),
    validate: bool = typer.Option(
        True, "--validate/--no-validate", help="run the leave-one-device-out table"
    ),
    server: str = typer.Option(
        None,
        "--server",
        envvar="GPUPLAN_SERVER",
        help="results service URL: take the artifact fitted on its pooled runs",
    ),
    token: str = typer.Option(
        None, "--token", envvar="GPUPLAN_TOKEN", help="access token for --server"
    ),
    refit: bool = typer.Option(
        False, "--refit", help="with --server: download the pooled runs and fit them here"
    ),
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Fit device models and write the calibration artifact."""
    from gpuplan.calibration.fit import calibrate_documents
    from gpuplan.calibration.validation import leave_one_device_out
    from gpuplan.catalogs import get_catalog

    if out is None:
        from gpuplan.paths import default_calibration_path

        out = default_calibration_path()
    check_out_path(out)
    catalog = get_catalog()
    if server and (result_paths or exclude_reference):
        from gpuplan.errors import InputError

        raise InputError(
            "--server calibrates the server's pooled runs; it takes no result paths or --exclude-reference",
            hint="drop the paths, or drop --server to calibrate local files",
        )
    with progress(enabled=fmt == Format.table) as bar:
        task = bar.add_task("calibrating", total=3)
        if server:
            from gpuplan.service.client import calibrate_from_server

            docs = []
            artifact = calibrate_from_server(server, token, refit=refit)
        else:
            docs = _gather(list(result_paths or []), exclude_reference)
            bar.advance(task)
            artifact = calibrate_documents(
                docs, include_reference=not exclude_reference, catalog=catalog
            )
        bar.advance(task)
        loo = leave_one_device_out(catalog=catalog) if validate else None
        bar.advance(task)
    write_artifact(out, artifact)
    measured = sorted(
        {
            d
            for d, q in artifact["devices"].items()
            if any(v["basis"] == "measured" for v in q.values())
        }
    )
    data = {
        "artifact": str(out),
        "inputs": len(artifact["inputs"]),
        "local_runs": len([d for d in docs if d.source is None]),
        "training_data_sha256": artifact["training_data_sha256"],
        "devices_measured": measured,
        "held_out_error": {q: m["cv"] for q, m in artifact["models"].items()},
        "leave_one_device_out": loo,
    }
    emit(data, fmt, lambda console: _table(console, data))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


_SHORT_NOTES = {
    "no measurement of this quantity": "not measured",
    "one machine only: no held-out error": "one machine",
    "no held-out point could be predicted (no other device measured it)": "no other device",
}


def _table(console: Any, data: dict[str, Any]) -> None:
    rows = []
    for q, cv in data["held_out_error"].items():
        note = cv.get("note", "")
        rows.append(
            [
                q,
                cv.get("n_points", 0),
                cv.get("n_machines", "-"),
                _pct(cv.get("mape")),
                _pct(cv.get("coverage")),
                _SHORT_NOTES.get(note, note),
            ]
        )
    console.print(
        simple_table(
            "Held-out error (group k-fold by machine)",
            ["quantity", "points", "machines", "MAPE", "in interval", "note"],
            rows,
        )
    )
    if data["leave_one_device_out"]:
        print_loo(console, data["leave_one_device_out"])
    console.print(
        f"wrote {data['artifact']}: {data['inputs']} runs ({data['local_runs']} local); "
        f"measured devices: {', '.join(data['devices_measured']) or 'none'}"
    )


_LOO_UNITS = {
    "matmul_bf16_flops_per_s": ("best dense bf16 matmul", 1e12, "TFLOP/s"),
    "allreduce_busbw_bytes_per_s": ("8-GPU intra-node all-reduce busbw", 1e9, "GB/s"),
}


def print_loo(console: Any, loo: dict[str, Any]) -> None:
    """Print the leave-one-device-out tables and summary (shared with validate microbench)."""
    for quantity in sorted({r["quantity"] for r in loo["rows"]}, reverse=True):
        label, scale, unit = _LOO_UNITS.get(quantity, (quantity, 1.0, ""))
        sel = [r for r in loo["rows"] if r["quantity"] == quantity]
        rows = [
            [
                r["device"],
                f"{r['published'] / scale:.0f}",
                f"{r['predicted'] / scale:.0f}",
                f"{r['low'] / scale:.0f}-{r['high'] / scale:.0f}",
                f"{100 * r['error']:+.1f}%",
                "yes" if r["within_target"] else "NO",
                "yes" if r["in_interval"] else "NO",
            ]
            for r in sel
        ]
        caption = "; ".join(f"{r['device']}: {r['note']}, {r['basis']} ({r['pool']})" for r in sel)
        console.print(
            simple_table(
                f"Leave-one-device-out: {label} ({unit})",
                [
                    "device",
                    "pub.",
                    "pred.",
                    "interval",
                    "error",
                    f"<{100 * sel[0]['target']:.0f}%",
                    "in int.",
                ],
                rows,
                caption=caption,
            )
        )
    s = loo["summary"]
    parts = []
    for q, v in s.items():
        if isinstance(v, dict):
            label = _LOO_UNITS.get(q, (q,))[0]
            parts.append(
                f"{label}: {v['within_target']}/{v['cases']} within {100 * v['target']:.0f}% "
                f"(max {100 * v['max_abs_error']:.1f}%)"
            )
    parts.append(
        f"interval coverage {_pct(s['interval_coverage'])} (target {_pct(s['coverage_target'])})"
    )
    console.print(
        "; ".join(parts)
        + (". All targets met." if s["all_targets_met"] else ". Not all targets met.")
    )
