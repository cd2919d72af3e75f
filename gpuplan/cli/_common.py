"""Shared pieces of the command modules: the --format option, output and progress.

Rules every command follows:

* ``--format json`` prints exactly one JSON document on stdout and nothing else;
* tables go to stdout in ``--format table``; progress, logs and warnings go to stderr;
* a :class:`gpuplan.errors.GpuplanError` raised by the library becomes one line on stderr
  and exit code 2 (see :func:`gpuplan.cli.main.main`).
"""

from __future__ import annotations

import enum
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

# Display helpers (SI inside the code, display units only at the edges, STYLE.md) live in
# gpuplan.units; re-exported for the commands.
from gpuplan.fsio import to_json_text as to_json_text
from gpuplan.units import fmt_bytes as fmt_bytes
from gpuplan.units import fmt_duration as fmt_duration
from gpuplan.units import fmt_si as fmt_si


class Format(str, enum.Enum):
    table = "table"
    json = "json"


FORMAT_OPTION = typer.Option(
    Format.table, "--format", "-f", help="Output format: a table for people or JSON for tools."
)


def _check_number(value: Any, flag: str, bound: str) -> None:
    """Refuse NaN, infinities and values below ``bound`` (``positive`` or ``non_negative``)."""
    if value is None:
        return
    from gpuplan.errors import InputError

    v = float(value)
    if math.isfinite(v) and (v > 0 if bound == "positive" else v >= 0):
        return
    if isinstance(value, int):
        low = 1 if bound == "positive" else 0
        raise InputError(f"{flag} must be >= {low} (got {value})", hint=f"e.g. {flag} {low + 1}")
    wanted = "> 0" if bound == "positive" else ">= 0"
    raise InputError(
        f"{flag} must be a finite number {wanted} (got {value!r})",
        hint="nan and inf are not accepted" if not math.isfinite(v) else None,
    )


def number_option(
    default: Any,
    *flags: str,
    help: str,
    bound: str = "positive",
    maximum: float | None = None,
    **kwargs: Any,
) -> Any:
    """A ``typer.Option`` for a number that refuses NaN, inf and out-of-range values.

    ``bound`` is ``"positive"`` (> 0, the default) or ``"non_negative"`` (>= 0);
    ``maximum`` an upper limit (one of :mod:`gpuplan.limits`). A refused
    value is a usage error: one line on stderr, exit code 2. Every float option (and every
    count that must be >= 1) of the planning and forecasting commands is declared with it,
    so the check exists once.
    """
    # the check raises InputError (one line, exit 2 in gpuplan.cli.main) while the command
    # line is parsed, before any work
    if bound not in ("positive", "non_negative"):
        raise ValueError(f"bound must be 'positive' or 'non_negative', not {bound!r}")

    def check(param: typer.CallbackParam, value: Any) -> Any:
        flag = param.opts[0] if param.opts else str(param.name)
        for v in value if isinstance(value, (list, tuple)) else [value]:
            _check_number(v, flag, bound)
            if maximum is not None and v is not None and v > maximum:
                from gpuplan.errors import InputError

                raise InputError(
                    f"{flag} must be <= {maximum:,.0f} (got {v:,})"
                    if isinstance(v, int)
                    else f"{flag} must be <= {maximum:g} (got {v:g})",
                    hint="a bound on what gpuplan's searches can answer (gpuplan/limits.py)",
                )
        return value

    return typer.Option(default, *flags, help=help, callback=check, **kwargs)


def text_file_option(default: Any, *flags: str, help: str, **kwargs: Any) -> Any:
    """A ``typer.Option`` naming an input text file (a CSV table, ...): a missing, folder,
    unreadable, binary or non-UTF-8 file is one line and exit 2 while the command line is
    parsed (:func:`gpuplan.userfiles.read_text`), not a traceback inside the reader."""

    def check(param: typer.CallbackParam, value: Path | None) -> Path | None:
        if value is not None:
            from gpuplan.userfiles import read_text

            read_text(value, what=param.opts[0] if param.opts else str(param.name))
        return value

    return typer.Option(default, *flags, help=help, callback=check, **kwargs)


def calibration_option(help: str = "Calibration artifact JSON (default: the shipped one).") -> Any:
    """The ``--calibration FILE`` option: the artifact is loaded and validated while the
    command line is parsed, so a missing, unreadable or invalid file is one line and exit 2
    before any work (one check for every command that takes it)."""

    def check(value: Path | None) -> Path | None:
        if value is not None:
            from gpuplan.calibration import load_artifact

            load_artifact(value)
        return value

    return typer.Option(None, "--calibration", help=help, callback=check)


def make_app(help_text: str, *, single: bool = False) -> typer.Typer:
    """A typer app configured the same way for every command group.

    ``single=True`` for a group with one command (``gpuplan probe``), so that it is invoked
    without a sub-command name.
    """
    return typer.Typer(
        help=help_text,
        no_args_is_help=not single,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )


def print_json(data: Any) -> None:
    """Print one JSON document on stdout."""
    sys.stdout.write(to_json_text(data) + "\n")
    sys.stdout.flush()


def stdout_console():  # -> rich.console.Console
    from rich.console import Console

    return Console(soft_wrap=False)


def stderr_console():  # -> rich.console.Console
    from rich.console import Console

    return Console(stderr=True)


def emit(data: Any, fmt: Format, table: Callable[[Any], None] | None = None) -> None:
    """Print ``data`` as JSON, or call ``table(console)`` to draw it for people."""
    if fmt == Format.json or table is None:
        print_json(data)
    else:
        table(stdout_console())


def simple_table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    caption: str | None = None,
):
    """A rich Table with the given columns and rows (values rendered with ``str``)."""
    from rich.table import Table

    t = Table(title=title, caption=caption, show_lines=False)
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    return t


def warn(message: str) -> None:
    """One warning line on stderr."""
    typer.echo(f"gpuplan: warning: {message}", err=True)


def info(message: str) -> None:
    """One progress/info line on stderr."""
    typer.echo(message, err=True)


@contextmanager
def progress(enabled: bool = True) -> Iterator[Any]:
    """A rich Progress bar on stderr (a no-op object when ``enabled`` is false)."""
    if not enabled:
        yield _NullProgress()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr_console(),
        transient=False,
    ) as bar:
        yield bar


class _NullProgress:
    def add_task(self, *_: Any, **__: Any) -> int:
        return 0

    def update(self, *_: Any, **__: Any) -> None:
        return None

    def advance(self, *_: Any, **__: Any) -> None:
        return None


def sixteen_bit_default(precision: str | None, gpu: str) -> str:
    """``--precision`` when given; else bf16, or fp16 when a named GPU has no bf16 tensor
    cores but has fp16 ones (V100, T4), said on stderr. Serving engines pick the same way:
    vLLM's ``--dtype auto`` casts a bf16 checkpoint to fp16 on GPUs of compute capability
    below 8.0. A name the catalog does not know is left to the forecast's own lookup,
    which says what is wrong."""
    if precision is not None:
        return precision
    from gpuplan.catalogs.catalog import get_catalog
    from gpuplan.errors import NotFoundError
    from gpuplan.forecast.inference_arch import dtype_peak

    lacking: list[str] = []
    for name in (g.strip() for g in str(gpu).split(",")):
        if not name:
            continue
        try:
            row = get_catalog().gpu(name)
        except NotFoundError:
            return "bf16"
        if not dtype_peak(row, "bf16") and dtype_peak(row, "fp16"):
            lacking.append(row.id)
    if not lacking:
        return "bf16"
    warn(
        f"{', '.join(lacking)} has no bf16 tensor cores; forecasting fp16 "
        "(pass --precision to choose)"
    )
    return "fp16"
