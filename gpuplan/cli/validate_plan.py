"""``gpuplan validate plan``: rebuild published reference designs, print the error per figure."""

from __future__ import annotations

import typer

from gpuplan.cli._common import FORMAT_OPTION, Format, emit, simple_table

HELP = """Rebuild published reference designs with the plan's builders and compare every figure.

The NVIDIA DGX SuperPOD reference architectures (DGX H100, B200, GB200, B300 XDR) are built
from the catalog exactly as `gpuplan plan` builds an on-premises option: switch and cable
counts, nodes per scalable unit, racks and power. Each published figure is printed with
its document, table and the plan's error. Exit code 1 when a compared figure is off by
more than 10%; figures that count what the plan does not model are shown, not compared.

\b
Examples:
  gpuplan validate plan
  gpuplan validate plan --format json | jq .summary
  gpuplan validate plan --design dgx-superpod-h100-4su
"""


def _pct(error: float | None) -> str:
    return "n/a" if error is None else f"{100.0 * error:+.1f}%"


def _num(v: float | None) -> str:
    if v is None:
        return "missing"
    return f"{v:,.0f}" if abs(v) >= 1 else f"{v:.3g}"


def register(app: typer.Typer) -> None:
    """Add ``plan`` to ``gpuplan validate``."""

    @app.command("plan", help=HELP)
    def plan(
        design: str = typer.Option(
            None, "--design", help="only this reference design id (default: every design)"
        ),
        fmt: Format = FORMAT_OPTION,
    ) -> None:
        from gpuplan.catalogs import get_catalog
        from gpuplan.plan.reference_designs import validate_designs

        result = validate_designs(get_catalog(), only=design)

        def table(console) -> None:
            for d in result["designs"]:
                rows = [
                    (
                        f["figure"],
                        _num(f["reference"]),
                        _num(f["plan"]),
                        _pct(f["error"]),
                        ("ok" if f["within"] else "OFF") if f["gated"] else "not compared",
                        f["table"],
                    )
                    for f in d["figures"]
                ]
                caption = f"{d['document']}\n{d['url']} (retrieved {d['retrieved']})"
                notes = [f["note"] for f in d["figures"] if f["note"]]
                if notes:
                    caption += "\n" + "\n".join(f"not compared: {n}" for n in notes)
                console.print(
                    simple_table(
                        f"{d['name']} ({d['node']}, {d['switch']})",
                        ["figure", "published", "plan", "error", "", "table"],
                        rows,
                        caption=caption,
                    )
                )
            s = result["summary"]
            console.print(
                f"{s['within']} of {s['gated_figures']} compared figures within "
                f"{100 * result['tolerance']:.0f}% over {s['designs']} designs; "
                f"largest |error| {_pct(s['max_abs_error'])}"
            )

        emit(result, fmt, table)
        if not result["summary"]["all_within"]:
            raise typer.Exit(1)
