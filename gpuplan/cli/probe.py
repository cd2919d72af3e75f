"""``gpuplan probe``: measure this node (or emit a launcher for several)."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Any

import typer

from gpuplan.cli._common import (
    FORMAT_OPTION,
    Format,
    emit,
    fmt_duration,
    fmt_si,
    info,
    make_app,
    progress,
    simple_table,
    warn,
)

HELP = """Measure this node: matmul, memory bandwidth, host-device copies, collectives, storage.

Each probe is timed with warmups kept apart, loops calibrated so that one sample lasts
long enough, and repeated samples (median and spread); results are checked for
correctness. A probe that fails is recorded as failed with its reason and the suite goes
on; Ctrl-C (or SIGTERM) still writes what was measured, the interrupted probe's points
included. The result file goes to --out (never overwriting); --format json prints the
same document on stdout. While it runs, <file>.partial.json beside it holds what is
finished (a killed run leaves it; 'gpuplan results ls' lists it). One probe run per
machine at a time: a second one is refused and told which run holds the machine.

\b
Examples:
  gpuplan probe --quick                         the whole suite in about a minute
  gpuplan probe                                 the full sweep (about 10 min on 8 GPUs)
  gpuplan probe --only matmul,membw --device cpu
  gpuplan probe --storage-path /mnt/nvme --storage-size 8G
  gpuplan probe --quick --format json > run.json
  gpuplan probe --emit slurm --nodes 2 --gpus-per-node 8   sbatch script for 2 nodes
  gpuplan probe --emit k8s --nodes 4 --gpus-per-node 8 --image registry/gpuplan:0.1
"""

app = make_app(HELP, single=True)

PROBE_NAMES = ("matmul", "membw", "pcie", "collectives", "storage")


class Device(str, enum.Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


class Emit(str, enum.Enum):
    slurm = "slurm"
    k8s = "k8s"


def _storage_size_bytes(text: str) -> int:
    """--storage-size in bytes ('8G' = 8 GiB like fio, '8GB' = 8e9: :mod:`gpuplan.units`)."""
    from gpuplan.errors import InputError
    from gpuplan.units import parse_size_bytes

    size = parse_size_bytes(text, strict=True, what="--storage-size")
    if size < 16 << 20:
        raise InputError(f"--storage-size {text} is too small", hint="use at least 16M")
    return size


class _BarAdapter:
    """gpuplan.probes.base.Progress on top of a rich Progress."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar

    def task(self, description: str, total: int) -> Any:
        bar, task_id = self.bar, self.bar.add_task(description, total=max(1, total))

        class _Task:
            def advance(self, n: int = 1) -> None:
                bar.advance(task_id, n)

        return _Task()


def _forwarded_args(
    quick: bool,
    only: str | None,
    device: Device,
    storage_path: str | None,
    storage_size: str | None,
) -> list[str]:
    args = []
    if quick:
        args.append("--quick")
    if only:
        args += ["--only", only]
    if device != Device.auto:
        args += ["--device", device.value]
    if storage_path:
        args += ["--storage-path", storage_path]
    if storage_size:
        args += ["--storage-size", storage_size]
    return args


def _summary_table(doc: Any, path: Path | None) -> Any:
    from gpuplan.results.summary import headline, variant

    rows = []
    for p in doc.probes:
        head = headline(p)
        figure = f"{fmt_si(head['value'], head['unit'])} ({head['label']})" if head else "-"
        note = p.error or ("; ".join(p.warnings) if p.warnings else "")
        rows.append(
            [
                p.probe,
                variant(p),
                p.status,
                len(p.measurements),
                figure,
                fmt_duration(p.duration_s),
                note[:90],
            ]
        )
    caption = f"written to {path}" if path else None
    if doc.interrupted:
        caption = (caption + "; " if caption else "") + "interrupted: partial results"
    return simple_table(
        f"gpuplan probe {doc.run_id[:8]}",
        ["probe", "variant", "status", "points", "headline", "time", "note"],
        rows,
        caption=caption,
    )


@app.command()
def probe(
    quick: bool = typer.Option(
        False, "--quick", help="Short sweeps: the whole suite in about a minute."
    ),
    only: str = typer.Option(
        None,
        "--only",
        help=f"Comma-separated probes to run: {', '.join(PROBE_NAMES)} (default: all).",
    ),
    device: Device = typer.Option(
        Device.auto, "--device", help="auto: GPUs when torch sees any, else the CPU."
    ),
    storage_path: str = typer.Option(
        None,
        "--storage-path",
        help="Directory on the filesystem to probe with fio (default: under --out).",
    ),
    storage_size: str = typer.Option(
        None,
        "--storage-size",
        help="Size of the fio test file: 4G or 4GiB = 4 GiB (like fio), 4GB = 4e9 B "
        "(default: 128M quick, 4G full).",
    ),
    out: Path = typer.Option(
        Path("results"),
        "--out",
        envvar="GPUPLAN_RESULTS",
        help="Directory of result files (one file per run).",
    ),
    ranks: int = typer.Option(
        2, "--ranks", help="gloo ranks (processes) for collectives without GPUs."
    ),
    timeout: float = typer.Option(
        None, "--timeout", help="Time budget per probe in seconds (default: none)."
    ),
    record_hostname: bool = typer.Option(
        False,
        "--record-hostname",
        help="Record the hostname in the result (off: only a hashed machine id).",
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars on stderr."),
    emit_kind: Emit = typer.Option(
        None, "--emit", help="Write a launcher for several nodes instead: slurm or k8s."
    ),
    nodes: int = typer.Option(None, "--nodes", help="With --emit: number of nodes."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="With --emit: GPUs per node."),
    image: str = typer.Option(
        "gpuplan:latest", "--image", help="With --emit k8s: container image with gpuplan."
    ),
    partition: str = typer.Option(None, "--partition", help="With --emit slurm: partition."),
    time_limit: str = typer.Option("00:30:00", "--time", help="With --emit slurm: time limit."),
    fmt: Format = FORMAT_OPTION,
) -> None:
    from gpuplan.errors import InputError

    if only is not None:
        from gpuplan.probes.suite import parse_only

        parse_only(only)
    if timeout is not None and timeout <= 0:
        raise InputError(f"--timeout must be positive (got {timeout:g})", hint="e.g. --timeout 300")
    size_bytes = _storage_size_bytes(storage_size) if storage_size else None
    if emit_kind is None and nodes is not None:
        raise InputError("--nodes only applies with --emit", hint="add --emit slurm or --emit k8s")
    if emit_kind is not None:
        _emit(
            emit_kind,
            nodes,
            gpus_per_node,
            image,
            partition,
            time_limit,
            out,
            fmt,
            _forwarded_args(quick, only, device, storage_path, storage_size),
        )
        return
    _run(
        quick,
        only,
        device,
        storage_path,
        size_bytes,
        out,
        ranks,
        timeout,
        record_hostname,
        no_progress,
        fmt,
    )


def _emit(
    kind: Emit,
    nodes: int | None,
    gpus_per_node: int,
    image: str,
    partition: str | None,
    time_limit: str,
    out: Path,
    fmt: Format,
    probe_args: list[str],
) -> None:
    from gpuplan.errors import InputError
    from gpuplan.probes import emit as emitters

    if nodes is None:
        raise InputError(
            "--emit needs --nodes N", hint="e.g. --emit slurm --nodes 2 --gpus-per-node 8"
        )
    if kind == Emit.slurm:
        text = emitters.slurm_script(
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            probe_args=probe_args,
            out_dir=str(out),
            partition=partition,
            time_limit=time_limit,
        )
        name = f"gpuplan-probe-{nodes}x{gpus_per_node}.sbatch"
    else:
        text = emitters.k8s_manifest(
            nodes=nodes, gpus_per_node=gpus_per_node, probe_args=probe_args, image=image
        )
        name = f"gpuplan-probe-{nodes}x{gpus_per_node}.yaml"
    out.mkdir(parents=True, exist_ok=True)
    path = _write_new(out / name, text)
    data = {
        "emit": kind.value,
        "path": str(path),
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "text": text,
    }

    def table(console: Any) -> None:
        # the script itself, byte for byte: a console would wrap it at its width (80 columns
        # on a pipe), which breaks `> job.sbatch` and `| kubectl apply -f -`
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except OSError:
            pass
        info(
            f"wrote {path}"
            + (
                "  (submit: sbatch " + str(path) + ")"
                if kind == Emit.slurm
                else f"  (apply: kubectl apply -f {path})"
            )
        )

    emit(data, fmt, table)


def _write_new(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` or a numbered sibling; never overwrite."""
    for i in range(1000):
        candidate = path if i == 0 else path.with_name(f"{path.stem}.{i}{path.suffix}")
        try:
            with open(candidate, "x", encoding="utf-8") as fh:
                fh.write(text)
        except FileExistsError:
            continue
        if candidate.suffix == ".sbatch":
            candidate.chmod(0o755)
        return candidate
    raise FileExistsError(path)


def _print_document(doc: Any) -> None:
    import json

    try:
        sys.stdout.write(json.dumps(doc.model_dump(mode="json"), indent=2) + "\n")
        sys.stdout.flush()
    except OSError:
        pass


def _run(
    quick: bool,
    only: str | None,
    device: Device,
    storage_path: str | None,
    size_bytes: int | None,
    out: Path,
    ranks: int,
    timeout: float | None,
    record_hostname: bool,
    no_progress: bool,
    fmt: Format,
) -> None:
    from gpuplan.probes.suite import ResultNotSaved, SuiteOptions, parse_only, run_suite

    options = SuiteOptions(
        only=parse_only(only),
        quick=quick,
        device=device.value,
        storage_path=storage_path,
        storage_size_bytes=size_bytes,
        out_dir=str(out),
        record_hostname=record_hostname,
        gloo_ranks=ranks,
        probe_timeout_s=timeout,
        argv=["gpuplan", *sys.argv[1:]],
    )
    try:
        with progress(enabled=not no_progress) as bar:
            outcome = run_suite(options, progress=_BarAdapter(bar) if not no_progress else None)
    except ResultNotSaved as exc:
        if exc.rescue is None:  # nowhere on disk: the run goes to stdout, never lost
            _print_document(exc.document)
        raise
    if outcome.rank != 0:
        return  # under torchrun only rank 0 reports
    doc = outcome.document
    if outcome.path is not None:
        info(f"gpuplan: wrote {outcome.path}")
    for p in doc.probes:
        if p.status in ("failed", "interrupted"):
            warn(f"{p.probe} {p.params.get('dtype') or ''}: {p.status}: {p.error}")
    emit(
        doc.model_dump(mode="json"),
        fmt,
        lambda console: console.print(_summary_table(doc, outcome.path)),
    )
    if outcome.interrupted:
        raise typer.Exit(130)
