"""Root of the ``gpuplan`` command.

Sub-commands are loaded lazily: the root only knows their import paths and one-line help,
so ``gpuplan --help`` imports neither torch nor the forecast stack (DESIGN.md section 6).
Every failure a user can fix ends as one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

import typer
import typer.core
import typer.exceptions

from gpuplan import __version__
from gpuplan.errors import GpuplanError

# typer >= 0.20 vendors its own copy of click (typer._click); older releases use click
# itself. Commands raise the exceptions of whichever copy typer uses, so the root group is
# built on typer's classes and main() catches the exceptions of both copies.
try:
    from typer import _click as click
except ImportError:  # pragma: no cover - typer < 0.20
    import click  # type: ignore[no-redef]

_EXC_MODULES = [click.exceptions]
try:  # pragma: no cover - depends on the installed typer
    import click as _real_click

    if _real_click.exceptions is not click.exceptions:
        _EXC_MODULES.append(_real_click.exceptions)
except ImportError:  # pragma: no cover
    pass

_USAGE_ERRORS = tuple(m.UsageError for m in _EXC_MODULES)
_CLICK_ERRORS = tuple(m.ClickException for m in _EXC_MODULES)
_EXITS = (typer.exceptions.Exit, *(m.Exit for m in _EXC_MODULES if hasattr(m, "Exit")))
_ABORTS = (typer.exceptions.Abort, *(m.Abort for m in _EXC_MODULES if hasattr(m, "Abort")))

# name -> (module path, attribute holding a typer.Typer app, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "probe": (
        "gpuplan.cli.probe",
        "app",
        "Measure this node: matmul, memory, PCIe, collectives, storage.",
    ),
    "results": ("gpuplan.cli.results", "app", "List, show, compare and upload probe results."),
    "calibrate": ("gpuplan.cli.calibrate", "app", "Fit calibrated device models from results."),
    "catalog": (
        "gpuplan.cli.catalog",
        "app",
        "Browse the GPU, instance, node, model, storage, network catalogs.",
    ),
    "forecast": ("gpuplan.cli.forecast", "app", "Forecast training or inference at full scale."),
    "validate": (
        "gpuplan.cli.validate",
        "app",
        "Check forecasts and calibration against published runs.",
    ),
    "plan": ("gpuplan.cli.plan", "app", "Turn a scenario file into a capacity plan and report."),
    "schedule": (
        "gpuplan.cli.schedule",
        "app",
        "Simulate a shared cluster under FIFO, fair-share or priority.",
    ),
    "serve": ("gpuplan.cli.serve", "app", "Run the results service that pools probe results."),
}


class LazyGroup(typer.core.TyperGroup):
    """A click group whose sub-commands are typer apps imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attr, _ = entry
        import typer.main

        module = importlib.import_module(module_name)
        command = typer.main.get_command(getattr(module, attr))
        command.name = cmd_name
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help from the table above, so that --help imports no sub-command.
        rows = [(name, help_) for name, (_, _, help_) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


ROOT_HELP = """gpuplan: a benchmark-calibrated capacity planner for GPU clusters.

\b
Examples:
  gpuplan probe --quick                      measure this node (about a minute)
  gpuplan calibrate                          fit device models from results/
  gpuplan catalog ls gpus                    list the accelerators and their sources
  gpuplan forecast train --model llama3.1-70b --gpu h100 --gpus 1024 --tokens 15e12
  gpuplan forecast infer --model llama3.3-70b --gpu h100 --qps 20 --ttft-slo-s 1 --tpot-slo-s 0.05
  gpuplan plan examples/llama-pretrain.yaml --out report/

Every command takes --format table|json; JSON goes to stdout, progress and logs to stderr.
"""


def _print_version(value: bool) -> None:
    if value:
        click.echo(f"gpuplan {__version__}")
        raise typer.Exit()


root_app = typer.Typer(
    cls=LazyGroup,
    help=ROOT_HELP,
    rich_markup_mode=None,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@root_app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Show the version and exit.",
    ),
) -> None:
    """Root options (see ROOT_HELP)."""


def _build_root() -> LazyGroup:
    import typer.main

    return typer.main.get_command(root_app)  # type: ignore[return-value]


def _usage_line(exc: Exception) -> str:
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "gpuplan"
    message = " ".join(exc.format_message().split())
    return f"{where}: error: {message} (see '{where} --help')"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpuplan`` console script; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = _build_root().main(args=args, prog_name="gpuplan", standalone_mode=False)
    except GpuplanError as exc:
        click.echo(f"gpuplan: error: {exc.one_line()}", err=True)
        return exc.exit_code
    except _USAGE_ERRORS as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # a group called bare: show its help
            click.echo(exc.ctx.get_help() if exc.ctx is not None else str(exc), err=True)
        else:
            click.echo(_usage_line(exc), err=True)
        return 2
    except _EXITS as exc:
        return int(getattr(exc, "exit_code", 0) or 0)
    except (*_ABORTS, KeyboardInterrupt):
        click.echo("gpuplan: interrupted", err=True)
        return 130
    except _CLICK_ERRORS as exc:
        click.echo(f"gpuplan: error: {' '.join(exc.format_message().split())}", err=True)
        return exc.exit_code
    except BrokenPipeError:  # e.g. `gpuplan ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
