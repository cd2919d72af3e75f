"""The probe suite: runs the probes in order, keeps going past failures, writes one document.

Guarantees (DESIGN.md sections 3.1 and 6):

* a probe that raises (fio missing, NCCL error, out of memory, a bug) or runs past its
  time budget is recorded ``failed`` with the reason, and the next probe runs;
* Ctrl-C (or SIGTERM, e.g. a Slurm time limit) stops the suite, and what was measured so
  far is written with ``interrupted: true``;
* after every probe a checkpoint ``.<name>.partial.json`` is written next to the final
  file, so that even a killed process leaves its measurements behind; the final file is
  written atomically and never overwrites another one, and the checkpoint is then removed;
* under torchrun only rank 0 writes; the other ranks take part in the collectives only.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import os
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan import __version__
from gpuplan.errors import EnvironmentProblem, InputError
from gpuplan.probes.base import (
    NullProgress,
    ProbeContext,
    ProbeTimeout,
    Progress,
    import_torch,
    resolve_device,
)
from gpuplan.probes.timing import TimingConfig
from gpuplan.results.privacy import filter_env
from gpuplan.results.schema import ResultDocument
from gpuplan.results.store import result_path, save_result, write_json_atomic

#: Probe names a user can ask for, in the order they run.
PROBES: tuple[str, ...] = ("matmul", "membw", "pcie", "collectives", "storage")

_MODULES = {name: f"gpuplan.probes.{name}" for name in PROBES}

#: Timing of one point in quick and default mode (see docs/probes.md).
QUICK_TIMING = TimingConfig(warmups=1, min_sample_s=0.02, samples=5, min_samples=3, max_point_s=2.0)
DEFAULT_TIMING = TimingConfig(
    warmups=2, min_sample_s=0.1, samples=10, min_samples=5, max_point_s=10.0
)


def parse_only(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"matmul,membw"`` -> ("matmul", "membw") in suite order; unknown names are an error."""
    if text is None:
        return PROBES
    items = text.split(",") if isinstance(text, str) else [p for t in text for p in t.split(",")]
    names = [p.strip().lower() for p in items if p.strip()]
    unknown = [n for n in names if n not in PROBES]
    if unknown:
        raise InputError(
            f"unknown probe {', '.join(repr(u) for u in unknown)}",
            hint=f"--only takes a comma-separated list of: {', '.join(PROBES)}",
        )
    if not names:
        raise InputError("--only is empty", hint=f"give one or more of: {', '.join(PROBES)}")
    return tuple(p for p in PROBES if p in names)


@dataclass(kw_only=True)
class SuiteOptions:
    """What ``gpuplan probe`` was asked to do."""

    only: tuple[str, ...] = PROBES
    quick: bool = False
    device: str = "auto"
    storage_path: str | None = None
    storage_size_bytes: int | None = None
    out_dir: str = "results"
    record_hostname: bool = False
    gloo_ranks: int = 2
    probe_timeout_s: float | None = None
    argv: list[str] = field(default_factory=list)
    write: bool = True

    def __post_init__(self) -> None:
        if self.device not in ("auto", "cuda", "cpu"):
            raise InputError(
                f"unknown device '{self.device}'", hint="use --device auto, cuda or cpu"
            )
        if self.gloo_ranks < 2:
            raise InputError(
                "--ranks must be at least 2", hint="collectives need two or more ranks"
            )
        if self.storage_path is not None and "storage" in self.only:
            from gpuplan.probes.storage import check_storage_path

            check_storage_path(self.storage_path)
        if self.write:
            out = Path(self.out_dir)
            if out.exists() and not out.is_dir():
                raise InputError(
                    f"--out {out} is not a directory", hint="give a directory for the result files"
                )
            try:
                out.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InputError(
                    f"--out {out}: cannot create it ({exc.strerror})",
                    hint="pick a writable directory",
                ) from None
            if not out.is_dir() or not os.access(out, os.W_OK):
                raise InputError(
                    f"--out {out} is not a writable directory", hint="pick a writable directory"
                )


@dataclass
class SuiteOutcome:
    document: ResultDocument
    path: Path | None
    interrupted: bool
    rank: int = 0


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while the suite runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _spec_lookup(accelerators: list[dict[str, Any]]) -> Callable[[int, str], float | None]:
    """Catalog dense peak by (accelerator index, precision); None when it does not resolve."""
    from gpuplan.probes.inventory import catalog_gpu

    def lookup(index: int, precision: str) -> float | None:
        if index >= len(accelerators):
            return None
        row = catalog_gpu(accelerators[index]["name"])
        if row is None:
            return None
        try:
            value = row.peak_flops_per_s(precision)
        except Exception:
            return None
        return float(value) if value else None

    return lookup


def run_suite(
    options: SuiteOptions,
    *,
    progress: Progress | None = None,
    on_probe: Callable[[str], None] | None = None,
) -> SuiteOutcome:
    """Run the suite and write the result document (rank 0).

    Parameters
    ----------
    options:
        What to run and where to write.
    progress:
        Receives one task per probe (the CLI draws bars on stderr).
    on_probe:
        Called with each probe's name before it runs.
    """
    from gpuplan.probes.collectives import torchrun_env
    from gpuplan.probes.inventory import host_facts

    started_at = _now()
    run_id = str(uuid.uuid4())
    torch = import_torch()
    device = resolve_device(options.device)
    denv = torchrun_env()
    rank = denv.rank if denv is not None else 0
    host = host_facts(record_hostname=options.record_hostname, torch=torch)
    power = None
    if device.is_gpu:
        from gpuplan.probes.power import default_sampler

        power = default_sampler()
    ctx = ProbeContext(
        device=device,
        quick=options.quick,
        timing=QUICK_TIMING if options.quick else DEFAULT_TIMING,
        progress=progress or NullProgress(),
        storage_path=options.storage_path,
        storage_size_bytes=options.storage_size_bytes,
        out_dir=options.out_dir,
        gloo_ranks=options.gloo_ranks,
        probe_timeout_s=options.probe_timeout_s,
        power=power,
        spec_lookup=_spec_lookup(host["accelerators"]),
    )
    order = list(options.only)
    if denv is not None:
        # every rank starts the job together: run the collectives first, then rank 0
        # alone measures its node while the other ranks are done
        order = [p for p in order if p == "collectives"] + (
            [p for p in order if p != "collectives"] if rank == 0 else []
        )
    document_base: dict[str, Any] = {
        "schema_version": 1,
        "run_id": run_id,
        "started_at": started_at,
        "gpuplan_version": __version__,
        "host": host,
        "argv": list(options.argv) or ["gpuplan", *sys.argv[1:]],
        "env": filter_env(os.environ),
    }
    if denv is not None:
        document_base["torchrun"] = {
            "world_size": denv.world_size,
            "num_nodes": denv.num_nodes,
            "local_world_size": denv.local_world_size,
        }
    interrupted = False
    writes = options.write and rank == 0
    partial: Path | None = None
    with _sigterm_as_interrupt():
        for name in order:
            if on_probe is not None:
                on_probe(name)
            first = len(ctx.recorders)
            ctx.start_deadline()
            try:
                module = importlib.import_module(_MODULES[name])
                module.run(ctx)
            except KeyboardInterrupt:
                interrupted = True
                _close_open(ctx, first, name, "interrupted (Ctrl-C or SIGTERM)")
            except ProbeTimeout as exc:
                _close_open(ctx, first, name, str(exc))
            except Exception as exc:
                _close_open(ctx, first, name, f"{type(exc).__name__}: {exc}")
            if writes:
                partial = _checkpoint(options.out_dir, document_base, ctx, partial)
            if interrupted:
                break
    data = {
        **document_base,
        "ended_at": _now(),
        "probes": [r.as_dict() for r in ctx.recorders],
        "interrupted": interrupted,
    }
    doc = ResultDocument.model_validate(data)
    path = None
    if writes:
        try:
            path = save_result(doc, options.out_dir)
        except OSError as exc:  # disk full, directory removed...: keep the run elsewhere
            rescue = save_result(doc, Path(tempfile.gettempdir()) / "gpuplan-results")
            raise EnvironmentProblem(
                f"could not write the result under {options.out_dir} ({exc.strerror or exc})",
                hint=f"the run was saved to {rescue} instead",
            ) from None
        if partial is not None:
            with contextlib.suppress(OSError):
                partial.unlink()
    return SuiteOutcome(document=doc, path=path, interrupted=interrupted, rank=rank)


def _close_open(ctx: ProbeContext, first: int, name: str, reason: str) -> None:
    opened = ctx.recorders[first:]
    if not opened:
        rec = ctx.record(name, 1)
        rec.fail(reason)
        return
    for rec in opened:
        if rec.open:
            rec.fail(reason)


def _checkpoint(
    out_dir: str, base: dict[str, Any], ctx: ProbeContext, previous: Path | None
) -> Path | None:
    """Write what was measured so far to a hidden partial file (replaced each time)."""
    data = {
        **base,
        "ended_at": _now(),
        "probes": [r.as_dict() for r in ctx.recorders],
        "interrupted": True,
    }
    try:
        doc = ResultDocument.model_validate(data)
        final = result_path(Path(out_dir), doc)
        path = previous or final.with_name(f".{final.stem}.partial.json")
        write_json_atomic(path, doc.model_dump(mode="json"), overwrite=True)
        return path
    except Exception:  # a checkpoint must never stop the run
        return previous
