"""``gpuplan plan SCENARIO.yaml``: the capacity plan and its report (HTML, Markdown, JSON)."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuplan.cli._common import (
    FORMAT_OPTION,
    Format,
    calibration_option,
    emit,
    info,
    make_app,
    simple_table,
)

app = make_app(
    "Turn a scenario file into a capacity plan and a report (HTML, Markdown, JSON).",
    single=True,
)

HELP = """Plan a GPU fleet for a scenario: size the workloads on every candidate GPU, cloud
instance and on-premises node; build the fabric, storage and power; price every
purchasing model; rank the options; and write a report whose every number has its source.

The report goes to DIR as report.html (self-contained: open it in a browser),
report.md and plan.json, written as one set (a temporary folder beside DIR renamed into
place: a failure never leaves new files mixed with old ones; other files in DIR are kept).
DIR is checked for write access and free space before planning. A constraint that cannot
be met (site power, racks, budget, deadline) does not stop the plan: it says which
constraint binds.

Exit code 0 when some option is feasible; 1 when none is (the report is still written,
and each reason is one line on stderr); 2 for a bad scenario, option or file.

\b
Examples:
  gpuplan plan examples/llama-pretrain.yaml --out out/llama-pretrain
  gpuplan plan examples/llm-serving.yaml --out out/serving --format json > plan.json
  gpuplan plan examples/mixed-teams.yaml --calibration calibration.json --results results/
  gpuplan plan examples/impossible-power.yaml     (says which constraint binds)
"""


@app.command(help=HELP)
def plan(
    scenario: Path = typer.Argument(..., help="Scenario YAML (see examples/ and docs/plan.md)."),
    out: Path = typer.Option(
        None, "--out", "-o", help="Report directory [default: out/<scenario name>]."
    ),
    calibration: Path = calibration_option(
        "Calibration artifact from 'gpuplan calibrate' [default: the shipped one]."
    ),
    results: list[Path] = typer.Option(
        None, "--results", help="Where the trial node's probe results are [default: results/]."
    ),
    trial: str = typer.Option(
        None,
        "--trial",
        help="Run id (or prefix) of the trial-node run to use [default: the latest].",
    ),
    no_progress: bool = typer.Option(
        False, "--no-progress", help="Do not show progress on stderr."
    ),
    fmt: Format = FORMAT_OPTION,
) -> None:
    from gpuplan.paths import out_dir as out_dir_default
    from gpuplan.paths import results_dir
    from gpuplan.plan.planner import build_plan
    from gpuplan.plan.scenario import load_scenario
    from gpuplan.report import write_report
    from gpuplan.userfiles import check_output_dir

    loaded = load_scenario(scenario)
    out_dir = out if out is not None else out_dir_default() / scenario.stem
    # before the long work: a folder that cannot be written fails now, not after the plan
    check_output_dir(out_dir, what="--out", min_free_bytes=REPORT_FREE_BYTES)
    status = None
    if not no_progress:
        from gpuplan.cli._common import stderr_console

        status = stderr_console().status("planning", spinner="dots")
        status.start()

    def on_progress(message: str) -> None:
        if status is not None:
            status.update(message)

    try:
        result = build_plan(
            loaded,
            artifact_path=calibration,
            results_paths=results or [results_dir()],
            trial_run=trial,
            on_progress=on_progress,
        )
        if status is not None:
            status.update("writing the report")
        doc = result.to_json()
        doc["report_files"] = {k: str(out_dir / v) for k, v in _files().items()}
        paths = write_report(doc, out_dir)
    finally:
        if status is not None:
            status.stop()

    def table(console) -> None:
        from gpuplan.plan.provenance import text_plain
        from gpuplan.report.view import fmt as fmt_fig

        console.print(text_plain(doc["summary"]["headline"]))
        rows = [
            (r["rank"], r["option"], r["purchasing_model"], fmt_fig(r["metric"]))
            for r in doc["ranking"]
        ]
        if rows:
            console.print(
                simple_table(
                    f"Options ranked by {doc['summary']['rank_by_label']}",
                    ["rank", "option", "purchasing model", "metric"],
                    rows,
                )
            )
        for u in doc["unranked"]:
            console.print(f"not ranked: {u['option']}: {text_plain(u['reason'])}")

    emit(doc, fmt, table)
    info(f"report: {paths['html']} (also {paths['md'].name} and {paths['json'].name})")
    if not doc["summary"]["feasible"]:
        _refuse_infeasible(doc)


def _refuse_infeasible(doc: dict) -> None:
    """No option meets the scenario: each reason on its own stderr line, exit code 1 (the
    plan and report are still written, and the JSON printed: they say what binds)."""
    from gpuplan.plan.provenance import text_plain

    reasons = [f"{u['option']}: {text_plain(u['reason'])}" for u in doc["unranked"]]
    if not reasons:
        reasons = [text_plain(doc["summary"]["headline"])]
    for reason in reasons:
        info("gpuplan: not feasible: " + " ".join(reason.split()))
    raise typer.Exit(1)


#: Free space ``plan --out`` asks for before planning. Measured: the reports of the shipped
#: examples take 0.5-1.6 MB in all (plan.json + report.md + report.html with its inline
#: charts; llama-pretrain the largest); 16 MiB leaves 10x room for larger scenarios.
REPORT_FREE_BYTES = 16 * 2**20


def _files() -> dict[str, str]:
    from gpuplan.report.render import REPORT_FILES

    return REPORT_FILES
