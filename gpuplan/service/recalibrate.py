"""Recalibration of the pooled results: after new accepted runs, fit a new artifact.

The fit is :func:`gpuplan.calibration.fit.calibrate_documents` on every accepted or
approved run (flagged runs are left out), ordered by run id, with the shipped reference
measurements included, exactly as ``gpuplan calibrate`` does on the same files locally; it
is deterministic for the same inputs except ``created_at``. The artifact is stored with its
provenance (run ids, a hash of the inputs, gpuplan version, duration) under a unique
``inputs_sha256``, so the same set of runs is never fitted twice, even by several server
processes sharing one database.

In ``background`` mode a single worker thread refits whenever asked, once the uploads have
been quiet for a moment; requests that arrive while it works are coalesced into one more
fit, so a burst of 1,000 uploads costs a few fits rather than 1,000. The fit itself runs
in a separate (spawned, reused) process, so that it does not hold the GIL of the process
that serves the uploads. ``sync`` refits inside the upload request (for small deployments
and tests), ``off`` only on ``POST /v1/calibration/refresh``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from gpuplan import __version__
from gpuplan.errors import GpuplanError
from gpuplan.service.db import ArtifactRow, Database, RunRow, iso_utc, utcnow

log = logging.getLogger("gpuplan.service")

Mode = Literal["background", "sync", "off"]
INCLUDED_STATUSES = ("accepted", "approved")


@dataclass
class RecalibrationStatus:
    mode: str
    running: bool = False
    pending: bool = False
    last_started_at: str | None = None
    last_finished_at: str | None = None
    last_error: str | None = None
    fits: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def calibration_inputs(db: Database) -> tuple[list[tuple[str, str, str]], str]:
    """``[(run_id, content_sha256, document_json)]`` of the included runs and their hash."""
    with db.read() as s:
        rows = s.execute(
            select(RunRow.run_id, RunRow.content_sha256, RunRow.document)
            .where(RunRow.status.in_(INCLUDED_STATUSES))
            .order_by(RunRow.run_id)
        ).all()
    items = [(r[0], r[1], r[2]) for r in rows]
    return items, _inputs_digest([(rid, sha) for rid, sha, _ in items])


def calibration_inputs_page(
    db: Database, *, cursor: str | None, limit: int, max_bytes: int
) -> dict[str, Any]:
    """One page of the included documents, in run id order, after run id ``cursor``.

    At most ``limit`` documents and about ``max_bytes`` of stored JSON (always at least one
    document, so that a page moves on). ``inputs_sha256`` is the hash of the whole set (as
    :func:`calibration_inputs`), so that a client paging through can tell when the set
    changed under it and start over.
    """
    from sqlalchemy import func

    with db.read() as s:
        keys = s.execute(
            select(RunRow.run_id, RunRow.content_sha256)
            .where(RunRow.status.in_(INCLUDED_STATUSES))
            .order_by(RunRow.run_id)
        ).all()
        where = [RunRow.status.in_(INCLUDED_STATUSES)]
        if cursor is not None:
            where.append(RunRow.run_id > cursor)
        page = s.execute(
            select(RunRow.run_id, RunRow.size_bytes, func.length(RunRow.document))
            .where(*where)
            .order_by(RunRow.run_id)
            .limit(limit + 1)
        ).all()
        chosen: list[str] = []
        total_bytes = 0
        for rid, _, length in page[:limit]:
            if chosen and total_bytes + int(length or 0) > max_bytes:
                break
            chosen.append(rid)
            total_bytes += int(length or 0)
        docs = dict(
            s.execute(select(RunRow.run_id, RunRow.document).where(RunRow.run_id.in_(chosen))).all()
        )
    more = len(chosen) < len(page)
    return {
        "inputs_sha256": _inputs_digest([(r[0], r[1]) for r in keys]),
        "total": len(keys),
        "limit": limit,
        "cursor": cursor,
        "next_cursor": chosen[-1] if more and chosen else None,
        "run_ids": chosen,
        "documents": [json.loads(docs[rid]) for rid in chosen],
    }


def _inputs_digest(keys: list[tuple[str, str]]) -> str:
    key = {"gpuplan_version": __version__, "runs": [[rid, sha] for rid, sha in keys]}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def fit_documents(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """Run the calibration on decoded result documents (the same call as the client's refit
    and the local ``gpuplan calibrate``)."""
    from gpuplan.service.client import refit_documents

    return refit_documents(documents)


def _fit_json(documents_json: list[str]) -> str:
    """:func:`fit_documents` in a worker process: JSON text in, JSON text out."""
    artifact = fit_documents([json.loads(d) for d in documents_json])
    return json.dumps(artifact, sort_keys=True, allow_nan=False)


def _watch_parent(parent_pid: int, interval_s: float = 0.2) -> None:
    """Initializer of the fit worker: exit as soon as the server process is gone.

    A worker blocked on its task queue never notices that the server was SIGKILLed (nothing
    closes the queue), and would live on holding a few hundred MB. Linux's
    ``PR_SET_PDEATHSIG`` fires when the *thread* that started the child exits, not the
    process (prctl(2)), and the pool starts workers from whichever thread submits first, so
    a daemon thread polls ``getppid()`` instead: it changes when the parent dies and the
    worker is re-parented (POSIX, on every platform the service runs on).
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval_s)
        os._exit(0)

    if os.getppid() != parent_pid:
        os._exit(0)
    threading.Thread(target=watch, name="gpuplan-parent-watch", daemon=True).start()


def artifact_provenance(row: ArtifactRow, *, include_artifact: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "artifact_id": row.id,
        "created_at": iso_utc(row.created_at),
        "inputs_sha256": row.inputs_sha256,
        "num_runs": row.num_runs,
        "run_ids": json.loads(row.run_ids),
        "gpuplan_version": row.gpuplan_version,
        "duration_s": row.duration_s,
    }
    if include_artifact:
        out["artifact"] = json.loads(row.artifact)
    return out


def latest_artifact(db: Database) -> ArtifactRow | None:
    with db.read() as s:
        return s.scalars(select(ArtifactRow).order_by(ArtifactRow.id.desc()).limit(1)).first()


class Recalibrator:
    """Fits new artifacts when asked; see the module docstring for the modes."""

    def __init__(
        self,
        db: Database,
        mode: Mode = "background",
        *,
        quiet_s: float = 1.0,
        in_process: bool = False,
    ) -> None:
        self.db = db
        self.mode = mode
        self.quiet_s = quiet_s
        self.in_process = in_process
        self._executor: Any = None
        self.status = RecalibrationStatus(mode=mode)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self.mode != "background" or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="gpuplan-recalibrate", daemon=True)
        self._thread.start()
        self.request()  # a first artifact (reference measurements + whatever is stored)

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            if self._stop.is_set():
                return
            self._wake.clear()
            # Debounce: let a burst of uploads finish (quiet for quiet_s, at most 10x that)
            # so that it costs one fit, not one per upload.
            deadline = time.monotonic() + 10 * self.quiet_s
            while time.monotonic() < deadline and self._wake.wait(self.quiet_s):
                self._wake.clear()
                if self._stop.is_set():
                    return
            self.status.pending = False
            try:
                self.run_once()
            except Exception as exc:  # keep the worker alive; the error is in the status
                log.error("recalibration failed: %s", exc)

    # API ---------------------------------------------------------------------------------
    def request(self) -> None:
        """Ask for a refit after new accepted data (returns at once in background mode)."""
        if self.mode == "background":
            self.status.pending = True
            self._wake.set()
        elif self.mode == "sync":
            try:
                self.run_once()
            except GpuplanError as exc:
                log.error("recalibration failed: %s", exc.one_line())

    def run_once(self) -> ArtifactRow | None:
        """Fit now if the inputs changed since the latest artifact; returns the latest.

        Raises
        ------
        GpuplanError
            when the calibration cannot run (it is also kept in ``status.last_error``).
        """
        with self._lock:
            self.status.running = True
            self.status.last_started_at = iso_utc(utcnow())
            try:
                return self._fit_if_changed()
            except GpuplanError as exc:
                self.status.last_error = exc.one_line()
                raise
            except Exception as exc:
                self.status.last_error = f"{type(exc).__name__}: {exc}"
                raise
            finally:
                self.status.running = False
                self.status.last_finished_at = iso_utc(utcnow())

    def _fit(self, documents_json: list[str]) -> str:
        """Fit in a worker process (spawned once, reused): the fit is CPU-bound Python and
        would otherwise hold the GIL and stall the uploads served by this process."""
        if self.in_process:
            return _fit_json(documents_json)
        if self._executor is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self._executor = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_watch_parent,
                initargs=(os.getpid(),),
            )
        try:
            return self._executor.submit(_fit_json, documents_json).result()
        except Exception as exc:
            from concurrent.futures.process import BrokenProcessPool

            if isinstance(exc, BrokenProcessPool):  # the worker died (OOM kill ...): start anew
                self._executor = None
            raise

    def _fit_if_changed(self) -> ArtifactRow | None:
        items, digest = calibration_inputs(self.db)
        with self.db.read() as s:
            existing = s.scalars(
                select(ArtifactRow).where(ArtifactRow.inputs_sha256 == digest)
            ).first()
        if existing is not None:
            self.status.last_error = None
            return latest_artifact(self.db)
        t0 = time.perf_counter()
        artifact_json = self._fit([doc for _, _, doc in items])
        duration_s = time.perf_counter() - t0
        row = ArtifactRow(
            created_at=utcnow(),
            inputs_sha256=digest,
            run_ids=json.dumps([rid for rid, _, _ in items]),
            num_runs=len(items),
            gpuplan_version=__version__,
            duration_s=duration_s,
            artifact=artifact_json,
        )
        try:
            with self.db.write() as s:
                s.add(row)
        except IntegrityError:
            log.info("recalibration: another process stored the same inputs first")
        else:
            self.status.fits += 1
            log.info(
                "recalibrated from %d runs in %.2f s (artifact %s)", len(items), duration_s, row.id
            )
        self.status.last_error = None
        return latest_artifact(self.db)
