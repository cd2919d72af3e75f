"""The probe suite: runs the probes in order, keeps going past failures, writes one document.

Guarantees (DESIGN.md sections 3.1 and 6):

* a probe that raises (fio missing, NCCL error, out of memory, a bug) or runs past its
  time budget is recorded ``failed`` with the reason, and the next probe runs;
* Ctrl-C (or SIGTERM, e.g. a Slurm time limit, or SIGHUP) stops the suite, and what was
  measured so far is written with ``interrupted: true``; the probe it stopped is
  ``interrupted`` and keeps the points it had measured;
* after every probe, and every few points inside one, a checkpoint
  ``<stem>.partial.json`` (a normal result document, ``interrupted: true``) is written
  next to the final file ``<stem>.json``, so that even a SIGKILLed run leaves its finished
  probes behind where ``results ls`` and ``calibrate`` see them; the final file is written
  atomically and never overwrites another one, and the checkpoint is then removed;
* if neither ``--out`` nor a rescue place can be written, the document is handed back for
  printing (:class:`ResultNotSaved`): a run is never lost;
* one run per machine at a time (the probe lock); children die with the run and scratch
  files are removed, by the next run if this one was killed;
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
import time
import uuid
from collections.abc import Callable, Sequence
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
    accelerator_for,
    import_torch,
    resolve_device,
)
from gpuplan.probes.procs import kill_children
from gpuplan.probes.scratch import remove_stale
from gpuplan.probes.timing import DEFAULT_TIMING as DEFAULT_TIMING
from gpuplan.probes.timing import QUICK_TIMING as QUICK_TIMING
from gpuplan.results import runlock
from gpuplan.results.privacy import filter_env
from gpuplan.results.schema import ResultDocument
from gpuplan.results.store import result_path, save_result, write_json_atomic

#: Probe names a user can ask for, in the order they run.
PROBES: tuple[str, ...] = (
    "matmul",
    "membw",
    "pcie",
    "p2p",
    "collectives",
    "storage",
    "health",  # last: reads the run's flags and re-reads the health counters
)

#: Workload probes: run only when asked for by ``--workload`` (never part of the suite).
WORKLOADS: tuple[str, ...] = ("serve", "train", "soak")

_MODULES = {name: f"gpuplan.probes.{name}" for name in (*PROBES, *WORKLOADS)}


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
    workload: dict[str, Any] = field(default_factory=dict)

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


class ResultNotSaved(EnvironmentProblem):
    """The result could not be written under ``--out``.

    ``rescue`` is where it was written instead, or None when no rescue place could be
    written either: then the caller must print ``document`` (the CLI puts it on stdout).
    """

    def __init__(
        self, message: str, *, hint: str, document: ResultDocument, rescue: Path | None
    ) -> None:
        super().__init__(message, hint=hint)
        self.document = document
        self.rescue = rescue


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Signals:
    """SIGTERM and SIGHUP raise KeyboardInterrupt like SIGINT does, and say which came.

    A Slurm time limit sends SIGTERM, a closed ssh session SIGHUP: both stop the suite
    the way Ctrl-C does. Installed only in the main thread (signal handlers live there);
    a signal that is ignored (``nohup``, a background job) stays ignored, and SIGINT is
    left alone when the caller handles it.
    With :attr:`deferring` set, a signal only marks the run interrupted.
    """

    CAUGHT = ("SIGTERM", "SIGHUP")

    def __init__(self) -> None:
        self.received: str | None = None
        self.deferring = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is not threading.main_thread():
            return self
        for name in ("SIGINT", *self.CAUGHT):
            sig = getattr(signal, name, None)
            if sig is None:
                continue
            current = signal.getsignal(sig)
            if current is signal.SIG_IGN or (
                name == "SIGINT" and current is not signal.default_int_handler
            ):
                continue  # nohup, a background job, or a caller's own handler: respected
            self._old[sig] = signal.signal(sig, self._handler)
        return self

    def _handler(self, signum: int, frame: Any) -> None:
        self.received = signal.Signals(signum).name
        if not self.deferring:
            raise KeyboardInterrupt

    def reason(self) -> str:
        name = self.received or "SIGINT"
        return f"interrupted by {name}{' (Ctrl-C)' if name == 'SIGINT' else ''}"

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()


def _index_map(accelerators: list[dict[str, Any]]) -> dict[int, int]:
    """torch index -> NVML/amdsmi index of every matched GPU."""
    return {
        int(a["torch_index"]): int(a["mgmt_index"])
        for a in accelerators
        if a.get("torch_index") is not None and a.get("mgmt_index") is not None
    }


def _spec_lookup(accelerators: list[dict[str, Any]]) -> Callable[[int, str], float | None]:
    """Catalog dense peak by (accelerator index, precision); None when it does not resolve."""
    from gpuplan.probes.inventory import catalog_gpu

    def lookup(index: int, precision: str) -> float | None:
        acc = accelerator_for(accelerators, index)
        if acc is None:
            return None
        row = catalog_gpu(acc["name"])
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
    on_plan: Callable[[Any], None] | None = None,
) -> SuiteOutcome:
    """Run the suite and write the result document (rank 0).

    The run holds the machine's probe lock (:mod:`gpuplan.results.runlock`) from start to
    end: under torchrun only local rank 0 of each node takes it, since the ranks of one
    node share the machine on purpose (and two "nodes" of one job on one machine share
    it). Children (fio, spawned ranks) are killed on every way out.

    Parameters
    ----------
    options:
        What to run and where to write.
    progress:
        Receives one task per probe (the CLI draws bars on stderr).
    on_probe:
        Called with each probe's name before it runs.
    on_plan:
        Called once before the first probe with the planned duration
        (:class:`gpuplan.probes.budget.SuiteBudget`; the CLI prints it).

    Raises
    ------
    EnvironmentProblem
        Another probe run holds the lock (the message names it).
    ResultNotSaved
        The result could not be written under ``options.out_dir``.
    """
    from gpuplan.probes.collectives import torchrun_env

    run_id = str(uuid.uuid4())
    denv = torchrun_env()
    argv = list(options.argv) or ["gpuplan", *sys.argv[1:]]
    holds_lock = False
    with contextlib.ExitStack() as stack:
        if denv is None or denv.local_rank == 0:
            holder = stack.enter_context(
                runlock.acquire(
                    run_id,
                    argv=argv,
                    out_dir=options.out_dir,
                    job=None if denv is None else denv.job,
                )
            )
            holds_lock = holder.pid == os.getpid()  # else: shared with a node of our job
        stack.callback(kill_children)
        return _run_locked(
            options,
            run_id=run_id,
            argv=argv,
            denv=denv,
            holds_lock=holds_lock,
            progress=progress,
            on_probe=on_probe,
            on_plan=on_plan,
        )


def _run_locked(
    options: SuiteOptions,
    *,
    run_id: str,
    argv: list[str],
    denv: Any,
    holds_lock: bool,
    progress: Progress | None,
    on_probe: Callable[[str], None] | None,
    on_plan: Callable[[Any], None] | None = None,
) -> SuiteOutcome:
    from gpuplan.probes.inventory import host_facts

    started_at = _now()
    torch = import_torch()
    device = resolve_device(options.device)
    rank = denv.rank if denv is not None else 0
    host = host_facts(record_hostname=options.record_hostname, torch=torch)
    if holds_lock:
        remove_stale(
            [options.out_dir, options.storage_path],
            machine_id=host["machine_id"],
            results_root=options.out_dir if options.write else None,
        )
    power = None
    if device.is_gpu:
        from gpuplan.probes.power import default_sampler

        power = default_sampler(index_map=_index_map(host["accelerators"]))
    ctx = ProbeContext(
        device=device,
        quick=options.quick,
        timing=QUICK_TIMING if options.quick else DEFAULT_TIMING,
        progress=progress or NullProgress(),
        storage_path=options.storage_path,
        storage_size_bytes=options.storage_size_bytes,
        out_dir=options.out_dir,
        run_id=run_id,
        machine_id=host["machine_id"],
        gloo_ranks=options.gloo_ranks,
        probe_timeout_s=options.probe_timeout_s,
        power=power,
        spec_lookup=_spec_lookup(host["accelerators"]),
        accelerators=host["accelerators"],
        workload=dict(options.workload),
    )
    order = list(options.only)
    if denv is not None:
        # every rank starts the job together: run the collectives (and the training
        # step's TP group) first, then rank 0 alone measures its node
        every_rank = ("collectives", "train")
        order = [p for p in order if p in every_rank] + (
            [p for p in order if p not in every_rank] if rank == 0 else []
        )
    document_base: dict[str, Any] = {
        "schema_version": 1,
        "run_id": run_id,
        "started_at": started_at,
        "gpuplan_version": __version__,
        "host": host,
        "argv": argv,
        "env": filter_env(os.environ),
    }
    if denv is not None:
        document_base["torchrun"] = {
            "world_size": denv.world_size,
            "num_nodes": denv.num_nodes,
            "local_world_size": denv.local_world_size,
        }
    from gpuplan.probes.budget import plan as plan_budget
    from gpuplan.probes.budget import with_actuals

    budget = plan_budget(
        order,
        quick=options.quick,
        gpus=device.count if device.is_gpu else 0,
        timing=ctx.timing,
        soak_s=options.workload.get("duration_s") if "soak" in order else None,
    )
    document_base["budget"] = with_actuals(budget, {})
    if on_plan is not None and rank == 0:
        on_plan(budget)
    interrupted = False
    writes = options.write and rank == 0
    checkpoint = _Checkpoint(options.out_dir, document_base, ctx) if writes else None
    if checkpoint is not None:
        ctx.on_point = checkpoint.point_done
    with _Signals() as signals:
        for name in order:
            first = len(ctx.recorders)
            try:
                if on_probe is not None:
                    on_probe(name)
                ctx.start_deadline()
                try:
                    module = importlib.import_module(_MODULES[name])
                    module.run(ctx)
                except KeyboardInterrupt:
                    raise
                except ProbeTimeout as exc:
                    _close_open(ctx, first, name, str(exc))
                except Exception as exc:
                    _close_open(ctx, first, name, f"{type(exc).__name__}: {exc}")
                finally:
                    kill_children()  # a probe's helpers never outlive it
                if checkpoint is not None:
                    checkpoint.write()
            except KeyboardInterrupt:
                interrupted = True
                _interrupt_open(ctx, first, name, signals.reason())
                break
        # from here on a signal only marks the run interrupted: the document gets written
        signals.deferring = True
        durations: dict[str, float] = {}
        for r in ctx.recorders:
            durations[r.probe] = durations.get(r.probe, 0.0) + (r.duration_s or 0.0)
        doc = ResultDocument.model_validate(
            {
                **document_base,
                "budget": with_actuals(budget, durations),
                "ended_at": _now(),
                "probes": [r.as_dict() for r in ctx.recorders],
                "interrupted": interrupted,
            }
        )
        path = None
        if writes:
            path = save_or_rescue(doc, options.out_dir)
            if checkpoint is not None:
                checkpoint.remove()
        interrupted = interrupted or signals.received is not None
    return SuiteOutcome(document=doc, path=path, interrupted=interrupted, rank=rank)


def rescue_places(run_id: str) -> list[Path]:
    """Where a result goes when ``--out`` cannot be written, in order: a results tree
    under the temporary folder, then one file named after the run directly in it (and in
    ``/tmp`` when the temporary folder is elsewhere)."""
    tmp = Path(tempfile.gettempdir())
    places = [tmp / "gpuplan-results", tmp / f"gpuplan-run-{run_id}.json"]
    if tmp != Path("/tmp"):
        places.append(Path("/tmp") / f"gpuplan-run-{run_id}.json")
    return places


def save_or_rescue(
    doc: ResultDocument, out_dir: str | Path, rescue: Sequence[Path] | None = None
) -> Path:
    """Save ``doc`` under ``out_dir``; if that fails, in the first rescue place that works.

    Parameters
    ----------
    doc:
        The result document.
    out_dir:
        The result folder (``--out``).
    rescue:
        Rescue places (default :func:`rescue_places`): a folder (``save_result`` layout)
        or a ``.json`` file name.

    Returns
    -------
    Path
        The file written under ``out_dir``.

    Raises
    ------
    ResultNotSaved
        ``out_dir`` could not be written; ``.rescue`` is where the document went, or None
        when nowhere could be written (the caller must then print ``.document``).
    """
    try:
        return save_result(doc, out_dir)
    except OSError as exc:  # disk full, directory removed, read-only...
        why = exc.strerror or str(exc)
    message = f"could not write the result under {out_dir} ({why})"
    for place in rescue_places(doc.run_id) if rescue is None else rescue:
        try:
            if place.suffix == ".json":
                saved = write_json_atomic(place, doc.model_dump(mode="json"))
            else:
                saved = save_result(doc, place)
        except OSError:
            continue
        raise ResultNotSaved(
            message, hint=f"the run was saved to {saved} instead", document=doc, rescue=saved
        )
    raise ResultNotSaved(
        message + ", nor in a rescue folder",
        hint="the whole result document is printed on stdout",
        document=doc,
        rescue=None,
    )


def _close_open(ctx: ProbeContext, first: int, name: str, reason: str) -> None:
    opened = ctx.recorders[first:]
    if not opened:
        rec = ctx.record(name, 1)
        rec.fail(reason)
        return
    for rec in opened:
        if rec.open:
            rec.fail(reason)


def _interrupt_open(ctx: ProbeContext, first: int, name: str, reason: str) -> None:
    """Close the interrupted probe's recorders as ``interrupted``, keeping their points."""
    opened = ctx.recorders[first:]
    if not opened:
        ctx.record(name, 1).interrupt(f"{reason} before its first point")
        return
    for rec in opened:
        if rec.open:
            rec.interrupt(f"{reason}; the {len(rec.measurements)} points measured are kept")


class _Checkpoint:
    """The run so far, in a visible ``<stem>.partial.json`` beside the final file.

    Written (atomically, replacing the previous one) after every probe and, inside a
    probe, every :attr:`EVERY_POINTS` points or :attr:`EVERY_S` seconds, whichever comes
    first; a probe still running reads ``interrupted`` in it. A run that is killed leaves
    it behind as a normal result document with ``interrupted: true``; a run that ends
    removes it once the final file is written.
    """

    EVERY_POINTS = 5
    EVERY_S = 10.0

    def __init__(self, out_dir: str, base: dict[str, Any], ctx: ProbeContext) -> None:
        self.out_dir, self.base, self.ctx = out_dir, base, ctx
        self.path: Path | None = None
        self._points = 0
        self._last = time.monotonic()

    def point_done(self) -> None:
        self._points += 1
        if self._points >= self.EVERY_POINTS or time.monotonic() - self._last >= self.EVERY_S:
            self.write()

    def write(self) -> None:
        self._points, self._last = 0, time.monotonic()
        data = {
            **self.base,
            "ended_at": _now(),
            "probes": [r.as_dict() for r in self.ctx.recorders],
            "interrupted": True,
        }
        try:
            doc = ResultDocument.model_validate(data)
            if self.path is None:
                self.path = partial_path(result_path(Path(self.out_dir), doc))
            write_json_atomic(self.path, doc.model_dump(mode="json"), overwrite=True)
        except Exception:  # a checkpoint must never stop the run (disk full: keep going)
            return

    def remove(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()


def partial_path(final: Path) -> Path:
    """The checkpoint of the run whose final file is ``final``: ``<stem>.partial.json``."""
    return final.with_name(f"{final.stem}.partial.json")
