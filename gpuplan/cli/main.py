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

import click

from gpuplan import __version__
from gpuplan.errors import GpuplanError

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


class LazyGroup(click.Group):
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


@click.group(
    cls=LazyGroup, help=ROOT_HELP, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(__version__, prog_name="gpuplan")
def cli() -> None:
    """Root group (see ROOT_HELP)."""


def _usage_line(exc: click.UsageError) -> str:
    where = exc.ctx.command_path if exc.ctx is not None else "gpuplan"
    message = " ".join(exc.format_message().split())
    return f"{where}: error: {message} (see '{where} --help')"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpuplan`` console script; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = cli.main(args=args, prog_name="gpuplan", standalone_mode=False)
    except GpuplanError as exc:
        click.echo(f"gpuplan: error: {exc.one_line()}", err=True)
        return exc.exit_code
    except click.exceptions.UsageError as exc:
        click.echo(_usage_line(exc), err=True)
        return 2
    except click.exceptions.BadParameter as exc:  # pragma: no cover - subclass of UsageError
        click.echo(f"gpuplan: error: {exc.format_message()}", err=True)
        return 2
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("gpuplan: interrupted", err=True)
        return 130
    except click.ClickException as exc:
        click.echo(f"gpuplan: error: {' '.join(exc.format_message().split())}", err=True)
        return exc.exit_code
    except BrokenPipeError:  # e.g. `gpuplan ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
