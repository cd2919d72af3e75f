"""``gpuplan results``: list, show and compare probe results (and upload them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gpuplan.cli import results_upload
from gpuplan.cli._common import (
    FORMAT_OPTION,
    Format,
    emit,
    fmt_bytes,
    fmt_duration,
    fmt_si,
    make_app,
    simple_table,
)

HELP = """List, show and compare probe results; upload them to a results service.

Result files live under results/<machine_id>/ (one per run, never overwritten). A RUN is
a file path, a run id or a unique prefix of one.

\b
Examples:
  gpuplan results ls
  gpuplan results show 3f2a9c1e
  gpuplan results show results/d454.../20260101T120000Z_3f2a9c1e.json --format json
  gpuplan results compare 3f2a9c1e 7b01d2aa
  gpuplan results upload results/ --server https://gpuplan.example.org
"""

app = make_app(HELP)
results_upload.register(app)

DIR_OPTION = typer.Option(
    None,
    "--dir",
    help="Results directory to search [default: results/, or $GPUPLAN_RESULTS].",
    show_default=False,
)


def _results_dir(given: Path | None) -> Path:
    from gpuplan.paths import results_dir

    return given if given is not None else results_dir()


def catalog_peak_lookup() -> Any:
    """The catalog peak lookup of the loader's plausibility check (see results.loader)."""
    from gpuplan.calibration.dataset import catalog_peaks
    from gpuplan.catalogs import get_catalog

    return catalog_peaks(get_catalog())


def load_reporting(paths: list[Path]) -> Any:
    """Load the result files under ``paths`` with the shared loader and print one stderr
    line per skipped file or note; returns the :class:`LoadedResults`."""
    from gpuplan.cli._common import info, warn
    from gpuplan.results.loader import load_result_files

    loaded = load_result_files(paths, peaks=catalog_peak_lookup())
    for _, reason in loaded.skipped:
        warn(f"skipped {reason}")
    for note in loaded.notes:
        info(note)
    return loaded


def run_status(doc: Any, holder: Any) -> str:
    """``running`` (the live probe run holding the lock), ``interrupted`` or ``complete``."""
    if holder is not None and holder.run_id == doc.run_id:
        return "running"
    return "interrupted" if doc.interrupted else "complete"


def _unit(metric: str) -> str:
    return "FLOP/s" if metric.startswith("flops") else "B/s"


@app.command("ls")
def ls(
    paths: list[Path] = typer.Argument(None, help="Files or directories (default: --dir)."),
    results_dir: Path = DIR_OPTION,
    server: str = typer.Option(
        None, "--server", envvar="GPUPLAN_SERVER", help="List a results service instead."
    ),
    token: str = typer.Option(
        None, "--token", envvar="GPUPLAN_TOKEN", help="API token for --server."
    ),
    device: str = typer.Option(None, "--device", help="With --server: only this catalog device."),
    team: str = typer.Option(None, "--team", help="With --server: only this team's runs."),
    limit: int = typer.Option(100, "--limit", help="With --server: at most this many runs."),
    fmt: Format = FORMAT_OPTION,
) -> None:
    """List result files: run, start time, machine, accelerators, probe statuses.

    \b
    Examples:
      gpuplan results ls
      gpuplan results ls results/reference --format json
      gpuplan results ls --server http://127.0.0.1:8000 --device h100 --team vision
    """
    if server:
        results_upload.ls_server(server, token, device=device, team=team, limit=limit, fmt=fmt)
        return
    from gpuplan.errors import InputError
    from gpuplan.results.runlock import current_holder
    from gpuplan.results.summary import status_counts

    results_dir = _results_dir(results_dir)
    roots = list(paths) if paths else [results_dir]
    if not paths and not results_dir.exists():
        raise InputError(
            f"no results directory {results_dir}",
            hint="run 'gpuplan probe --quick' first, or pass --dir",
        )
    loaded = load_reporting(roots)
    holder = current_holder()
    rows: list[dict[str, Any]] = []
    for path, doc in loaded.documents:
        accs = doc.host.accelerators
        rows.append(
            {
                "run_id": doc.run_id,
                "started_at": doc.started_at,
                "machine_id": doc.host.machine_id,
                "accelerators": f"{len(accs)}x {accs[0].name}"
                if accs
                else doc.host.cpu_model or "cpu",
                # `status` keeps its 0.1 meaning (per-probe counts) for scripts that read it
                "status": status_counts(doc),
                "run_status": run_status(doc, holder),
                "interrupted": doc.interrupted,
                "source": doc.source,
                "path": str(path),
            }
        )
    rows.sort(key=lambda r: r["started_at"])

    def table(console: Any) -> None:
        console.print(
            simple_table(
                f"{len(rows)} result files",
                [
                    "run",
                    "started",
                    "machine",
                    "accelerators",
                    "status",
                    "ok/failed/skipped",
                    "path",
                ],
                [
                    (
                        r["run_id"][:8],
                        r["started_at"][:19],
                        r["machine_id"][:12],
                        r["accelerators"],
                        r["run_status"],
                        "{ok}/{failed}/{skipped}".format(**r["status"]),
                        r["path"],
                    )
                    for r in rows
                ],
            )
        )

    emit({"results": rows, "skipped": [str(p) for p, _ in loaded.skipped]}, fmt, table)


def _load(ref: str, results_dir: Path | None) -> tuple[Path, Any]:
    """The one run ``ref`` names; any problem with its file is an error (exit 2)."""
    from gpuplan.results.loader import read_result_file
    from gpuplan.results.store import find_result

    path = find_result(ref, [_results_dir(results_dir)])
    return path, read_result_file(path, peaks=catalog_peak_lookup())


def _point_text(probe: str, m: dict[str, Any]) -> tuple[str, str]:
    """(point, figure) for one measurement, for people."""
    if probe == "matmul":
        s = m["shape"]
        ok = "" if m.get("correct") is not False else " WRONG"
        return f"{m.get('label') or ''} {s['m']}x{s['n']}x{s['k']}".strip(), fmt_si(
            m["flops_per_s"], "FLOP/s"
        ) + ok
    if probe == "membw":
        return f"{m['op']} {fmt_bytes(m['size_bytes'])}", fmt_si(m["bytes_per_s"], "B/s")
    if probe == "pcie":
        return f"{m['direction']} {m['memory']} {fmt_bytes(m['size_bytes'])}", fmt_si(
            m["bytes_per_s"], "B/s"
        )
    if probe == "collectives":
        return (
            f"{m['op']} {fmt_bytes(m['size_bytes'])} x{m['ranks']} {m['scope']}",
            f"busbw {fmt_si(m['busbw_bytes_per_s'], 'B/s')}, algbw {fmt_si(m['algbw_bytes_per_s'], 'B/s')}",
        )
    if probe == "storage":
        p99 = (m.get("clat") or {}).get("p99_s")
        return (
            f"{m['rw']} bs={fmt_bytes(m['block_size_bytes'])} qd={m['iodepth']} jobs={m['numjobs']}",
            f"{fmt_si(m['bw_bytes_per_s'], 'B/s')}, {fmt_si(m.get('iops'), 'IOPS')}, p99 {fmt_duration(p99)}",
        )
    if probe == "serve":
        return (
            f"concurrency {m['concurrency']} ({m['completed']}/{m['num_requests']} ok)",
            f"{fmt_si(m['output_throughput_tokens_per_s'], 'tok/s')}, TTFT p50 "
            f"{fmt_duration(m.get('ttft_p50_s'))} p99 {fmt_duration(m.get('ttft_p99_s'))}, "
            f"TPOT p50 {fmt_duration(m.get('tpot_p50_s'))}",
        )
    if probe == "train":
        return (
            f"{m['blocks']} blocks, {m['micro_batch']} x {m['seq_len']} tokens, tp {m['tp']}",
            f"per block: fwd {fmt_duration(m['forward_per_block_s'])}, bwd "
            f"{fmt_duration(m['backward_per_block_s'])}, AdamW "
            f"{fmt_duration(m['optimizer_per_block_s'])}; peak "
            f"{fmt_bytes(m.get('peak_memory_bytes'))}; SDPA {m.get('attention_backend')}",
        )
    from gpuplan.results.summary import point_text

    return point_text(probe, m) or ("", "")


@app.command("show")
def show(
    run: str = typer.Argument(..., help="Result file, run id or unique prefix."),
    results_dir: Path = DIR_OPTION,
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Show one run: host, then every probe and measured point.

    \b
    Examples:
      gpuplan results show 3f2a9c1e
      gpuplan results show 3f2a9c1e --format json | jq '.probes[] | {probe, status}'
    """
    path, doc = _load(run, results_dir)

    def table(console: Any) -> None:
        h = doc.host
        accs = ", ".join(a.name for a in h.accelerators) or "none"
        console.print(
            f"run {doc.run_id}  started {doc.started_at}  gpuplan {doc.gpuplan_version}"
            + ("  INTERRUPTED" if doc.interrupted else "")
        )
        console.print(
            f"machine {h.machine_id}  cpu {h.cpu_model} x{h.cpu_count}  memory {fmt_bytes(h.memory_bytes)}"
            f"  accelerators {accs}  torch {h.torch_version}  fio {h.fio_version}",
            markup=False,
        )
        console.print(f"file {path}", markup=False)
        from gpuplan.results.summary import health_line

        if health_line(doc):
            console.print(health_line(doc), markup=False)
        for p in doc.probes:
            variant = " ".join(
                str(p.params[k]) for k in ("dtype", "device", "backend") if p.params.get(k)
            )
            title = f"{p.probe} {variant} [{p.status}]"
            if p.error:
                title += f" {p.error}"
            if not p.measurements:
                console.print(title, markup=False)
                continue
            rows = [_point_text(p.probe, m) for m in p.measurements]
            console.print(simple_table(title, ["point", "figure"], rows))

    emit(doc.model_dump(mode="json"), fmt, table)


@app.command("compare")
def compare(
    run_a: str = typer.Argument(..., help="Baseline run (A)."),
    run_b: str = typer.Argument(..., help="Run to compare with it (B)."),
    results_dir: Path = DIR_OPTION,
    alpha: float = typer.Option(
        0.05, "--alpha", help="Significance level of the Mann-Whitney U test."
    ),
    all_points: bool = typer.Option(
        False, "--all", help="Table: every point, not only the significant ones."
    ),
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Compare run B with run A: per probe and point, the ratio B/A and its significance.

    A point is significant when a two-sided Mann-Whitney U test on the per-sample
    throughputs gives p < --alpha and the medians differ by more than 1 % (docs/probes.md).

    \b
    Examples:
      gpuplan results compare 3f2a9c1e 7b01d2aa
      gpuplan results compare old.json new.json --all
      gpuplan results compare 3f2a 7b01 --format json | jq '.probes'
    """
    from gpuplan.errors import InputError
    from gpuplan.results.compare import compare_documents

    if not 0 < alpha < 1:
        raise InputError(
            f"--alpha must be between 0 and 1 (got {alpha:g})", hint="e.g. --alpha 0.05"
        )
    _, a = _load(run_a, results_dir)
    _, b = _load(run_b, results_dir)
    data = compare_documents(a, b, alpha=alpha)
    if not data["points"]:
        raise InputError(
            f"runs {a.run_id[:8]} and {b.run_id[:8]} have no measured point in common",
            hint="compare runs of the same probes (same --quick/--only and device kind)",
        )

    def table(console: Any) -> None:
        console.print(
            simple_table(
                f"B {b.run_id[:8]} vs A {a.run_id[:8]}",
                ["probe", "variant", "points", "geomean B/A", "faster", "slower", "same", "n/a"],
                [
                    (
                        p["probe"],
                        p["variant"],
                        p["points"],
                        f"{p['geomean_ratio']:.3f}",
                        p["faster"],
                        p["slower"],
                        p["same"],
                        p["n/a"],
                    )
                    for p in data["probes"]
                ],
                caption=data["rule"],
            )
        )
        shown = [pt for pt in data["points"] if all_points or pt["significant"]]
        if shown:
            console.print(
                simple_table(
                    "points" if all_points else "significant differences",
                    ["probe", "variant", "point", "A", "B", "B/A", "p", "verdict"],
                    [
                        (
                            pt["probe"],
                            pt["variant"],
                            pt["point"],
                            fmt_si(pt["a"], _unit(pt["metric"])),
                            fmt_si(pt["b"], _unit(pt["metric"])),
                            f"{pt['ratio']:.3f}",
                            "-" if pt["p_value"] is None else f"{pt['p_value']:.3g}",
                            pt["verdict"],
                        )
                        for pt in shown
                    ],
                )
            )
        else:
            console.print("no significant difference at any point (--all lists them)")

    emit(data, fmt, table)
