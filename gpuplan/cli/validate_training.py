"""``gpuplan validate training``: forecast every published training run, report the error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gpuplan.cli._common import (
    FORMAT_OPTION,
    Format,
    calibration_option,
    emit,
    info,
    simple_table,
    text_file_option,
)

HELP = """Forecast every published training run shipped with gpuplan that has a complete
configuration (Megatron-LM papers, NVIDIA NeMo, MosaicML llm-foundry, IBM fms-fsdp) and
compare like with like: step time, tokens/s per GPU, or TFLOP/s with the source's own FLOP convention.
Prints coverage, median and p90 absolute percentage error, signed bias and how often the
forecast interval contains the published value, per publication, per framework profile
(megatron incl. NeMo, fsdp, deepspeed...), per source and overall.

Each row is forecast with its framework profile's constants: fitted on that profile's rows
from the other publications where there are at least 10, else the pooled constants.

By default each row is forecast with framework-efficiency constants fitted WITHOUT its
publication (--scheme leave-one-source-out); --scheme shipped uses the shipped constants,
which were fitted on all rows (in-sample, for reference only).

\b
Examples:
  gpuplan validate training
  gpuplan validate training --rows --format json > training-validation.json
  gpuplan validate training --scheme shipped
  gpuplan validate training --fit-constants gpuplan/forecast/data/training_constants.json
"""


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _short(name: str, width: int = 38) -> str:
    """Head and tail of a long source name (the tail tells tables of one paper apart)."""
    if len(name) <= width:
        return name
    tail = width // 2 - 1
    return name[: width - tail - 1] + "…" + name[-tail:]


def _table(result: dict[str, Any], show_rows: bool):
    def draw(console) -> None:
        cols = ["rows", "fcst", "cover", "med", "p90", "bias", "in int"]

        def line(name: str, s: dict[str, Any]) -> tuple:
            return (
                name,
                s["rows"],
                f"{s['rows_forecast']}/{s['rows_complete']}",
                _pct(s["coverage"]),
                _pct(s["median_abs_error"]),
                _pct(s["p90_abs_error"]),
                _pct(s["bias"]),
                _pct(s["interval_coverage"]),
            )

        rows = [line(_short(k, 30), v) for k, v in result["per_group"].items()]
        rows.append(line("OVERALL", result["overall"]))
        caption = (
            "fcst = forecast/complete rows; med, p90 = absolute error; bias = mean "
            "signed error; in int = published value inside the forecast interval"
        )
        console.print(
            simple_table(
                f"Training forecast vs published runs ({result['scheme']})",
                ["publication", *cols],
                rows,
                caption=caption,
            )
        )
        prof_rows = [
            (*line(k, v), "own fit" if v.get("own_constants") else "pooled")
            for k, v in result.get("per_profile", {}).items()
        ]
        members = "; ".join(
            f"{k}: {', '.join(v.get('frameworks', []))}"
            for k, v in result.get("per_profile", {}).items()
        )
        console.print(
            simple_table(
                "Per framework profile (held out by publication)",
                ["profile", *cols, "constants"],
                prof_rows,
                caption=(
                    "own fit = the profile's rows (>= 10) fit its own constants; pooled = "
                    f"fewer rows, the pooled constants. Frameworks: {members}"
                ),
            )
        )
        src_rows = [line(_short(k), v) for k, v in result["per_source"].items()]
        console.print(simple_table("Per source", ["source", *cols], src_rows))
        metrics = {}
        for r in result["rows"]:
            metrics.setdefault(r["group"], set()).add(r["metric"])
        console.print(
            "Compared: "
            + "; ".join(
                f"{_short(g, 30)}: {', '.join(sorted(m))}" for g, m in sorted(metrics.items())
            )
        )
        if show_rows:
            console.print(
                simple_table(
                    "Rows",
                    ["run", "metric", "published", "forecast", "interval", "error", "layout"],
                    [
                        (
                            r["run_id"],
                            r["metric"],
                            f"{r['published']:.4g}",
                            f"{r['forecast']:.4g}",
                            f"{r['interval'][0]:.4g} .. {r['interval'][1]:.4g}",
                            _pct(r["error"]),
                            "tp{tp} pp{pp} cp{cp} dp{dp} vp{vp} mb{micro_batch} rc{recompute} z{zero}".format(
                                **r["layout"]
                            ),
                        )
                        for r in result["rows"]
                    ],
                )
            )
        if result["incomplete"]:
            console.print(
                f"{len(result['incomplete'])} rows without a complete configuration "
                "(not forecast): "
                + "; ".join(f"{r['run_id']}: {r['reason']}" for r in result["incomplete"])
            )
        if result["failed"]:
            console.print(
                "Failed: " + "; ".join(f"{r['run_id']}: {r['reason']}" for r in result["failed"])
            )

    return draw


def register(app: typer.Typer) -> None:
    """Add ``training`` to the ``validate`` group."""

    @app.command("training", help=HELP)
    def training(
        data: Path | None = text_file_option(
            None, "--data", help="Published-runs CSV (default: the shipped table)."
        ),
        scheme: str = typer.Option(
            "leave-one-source-out",
            "--scheme",
            help="leave-one-source-out (held-out error) or shipped (in-sample).",
        ),
        rows: bool = typer.Option(False, "--rows", help="Also list every row (table format)."),
        calibration: Path | None = calibration_option("Calibration artifact JSON."),
        fit_constants: Path | None = typer.Option(
            None,
            "--fit-constants",
            help="Refit the shipped constants on all rows and write them here.",
        ),
        fmt: Format = FORMAT_OPTION,
    ) -> None:
        from gpuplan.forecast import validation_training as vt

        artifact = None
        if calibration is not None:
            from gpuplan.calibration import load_artifact

            artifact = load_artifact(calibration)
        if fit_constants is not None:
            from gpuplan.userfiles import check_output_file

            check_output_file(fit_constants, what="--fit-constants")  # before the fit
        if fit_constants is not None:
            constants = vt.fit_shipped_constants(data=data, artifact=artifact)
            vt.write_constants(fit_constants, constants)
            info(f"wrote {fit_constants}")
            emit(constants, fmt, lambda console: console.print_json(data=constants))
            return

        def step(group: str) -> None:
            if fmt == Format.table:
                info(f"fitting constants without {group} ...")

        result = vt.validate(data=data, artifact=artifact, scheme=scheme, progress=step)
        emit(result, fmt, _table(result, rows))
