"""The results service: a FastAPI application over one SQL database.

Routes (``/v1`` JSON API, bearer tokens; HTML pages with a session cookie):

=====================================  =======  ====================================================
``GET  /healthz``                      none     database reachable? schema revision, upload limit
``GET  /v1/whoami``                    read     the token's team and scopes
``POST /v1/results``                   write    upload one result document (201 new, 200 repeat)
``GET  /v1/results``                   read     list runs (``device``, ``team``, ``status`` filters)
``GET  /v1/results/{run_id}``          read     one run with its stored document
``POST /v1/results/{run_id}/approve``  admin    let a flagged run into the calibration
``GET  /v1/calibration``               read     latest artifact with its provenance
``GET  /v1/calibration/artifact``      read     the artifact alone (DESIGN.md 3.2)
``GET  /v1/calibration/status``        read     recalibration worker state
``GET  /v1/calibration/inputs``        read     the documents the calibration is fitted on
``POST /v1/calibration/refresh``       write    refit now (synchronously)
``GET  /``, ``/runs/{id}``, ``/compare``   cookie   browse and compare runs (``/login`` first)
=====================================  =======  ====================================================

Uploads: the body is read with a size limit (413), parsed as JSON, stripped of
environment secrets and host names (:mod:`gpuplan.service.sanitize`), validated and upgraded
by :func:`gpuplan.results.store.parse_result` (422 naming the field; newer schema refused),
checked against the catalog (:mod:`gpuplan.service.plausibility`) and inserted in one
transaction. The run id plus the sha256 of the canonical sanitised document make uploads
idempotent: the same document again answers 200 with the same row id, another document
under a known run id answers 409. A database that cannot be reached answers 503 with
``Retry-After``.
"""

from __future__ import annotations

import json
import logging
import re
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

from gpuplan import __version__
from gpuplan.errors import GpuplanError, SchemaError
from gpuplan.results.migrations import upgrade
from gpuplan.results.safejson import loads_limited
from gpuplan.results.schema import ResultDocument
from gpuplan.results.store import parse_result
from gpuplan.service import models
from gpuplan.service.db import Database, RunRow, iso_utc, utcnow
from gpuplan.service.plausibility import (
    RunPool,
    check_document,
    identify_device,
    pool_flags,
    resolve_device_query,
)
from gpuplan.service.recalibrate import (
    INCLUDED_STATUSES,
    Recalibrator,
    artifact_provenance,
    calibration_inputs_page,
    latest_artifact,
)
from gpuplan.service.sanitize import canonical_json, content_sha256, sanitize_document
from gpuplan.service.tokens import Principal, verify_token

log = logging.getLogger("gpuplan.service")

RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
COOKIE = "gpuplan_session"
DEFAULT_MAX_UPLOAD_BYTES = 16 * 2**20
RETRY_AFTER_S = 5
# Limits on an upload body beyond its size (gpuplan.results.safejson): a result document
# nests 7 levels, its integers have at most 20 digits and its longest strings (a topology
# matrix, a tool's error output) stay in the kilobytes.
BODY_MAX_DEPTH = 32
BODY_MAX_INT_DIGITS = 32
BODY_MAX_STR_CHARS = 256 * 1024
INPUTS_DEFAULT_LIMIT = 20
INPUTS_MAX_LIMIT = 100
INPUTS_MAX_PAGE_BYTES = 32 * 2**20
HEALTH_WRITE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ServiceSettings:
    """Configuration of one server process.

    Parameters
    ----------
    database_url:
        ``sqlite:///path.db`` (default of ``gpuplan serve``) or ``postgresql://...``.
    max_upload_bytes:
        largest accepted request body; larger uploads get 413.
    recalibrate:
        ``background`` (refit in a worker thread after new accepted runs), ``sync`` (inside
        the upload request) or ``off`` (only on ``POST /v1/calibration/refresh``).
    sqlite_busy_timeout_s:
        how long an SQLite writer waits for the lock before the request answers 503.
    migrate:
        apply the Alembic migrations at start-up (the default).
    """

    database_url: str
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    recalibrate: str = "background"
    sqlite_busy_timeout_s: float = 15.0
    migrate: bool = True


class ApiError(Exception):
    """An HTTP error answer with a message and a hint (rendered as ``ErrorResponse``)."""

    def __init__(
        self, status: int, detail: str, hint: str | None = None, headers: dict | None = None
    ):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.hint = hint
        self.headers = headers or {}


class DocumentInvalid(Exception):
    """A 422 answer: ``errors`` as FastAPI's ``[{loc, msg, type}]``, ``message`` one line."""

    def __init__(self, errors: list[dict[str, Any]], message: str):
        super().__init__(message)
        self.errors = errors
        self.message = message


def _err(status: int, description: str) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": models.ErrorResponse, "description": description}}


AUTH_ERRORS = {
    **_err(401, "missing, unknown or revoked token"),
    **_err(403, "token lacks the scope"),
}
DB_ERRORS = _err(503, "database unavailable: retry later (Retry-After)")
bearer = HTTPBearer(auto_error=False, description="a token from 'gpuplan serve token create'")


def _principal(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Principal:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError(
            401,
            "missing bearer token",
            "send 'Authorization: Bearer <token>' (gpuplan: --token or GPUPLAN_TOKEN)",
            {"WWW-Authenticate": "Bearer"},
        )
    principal = verify_token(request.app.state.db, credentials.credentials)
    if principal is None:
        raise ApiError(
            401,
            "unknown, malformed or revoked token",
            "ask the service admin for a token ('gpuplan serve token create --team T')",
            {"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )
    request.state.principal = principal
    return principal


def require(scope: str):
    """A dependency that returns the request's :class:`Principal` if it holds ``scope``."""

    def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> Principal:
        principal = _principal(request, credentials)
        if not principal.allows(scope):
            raise ApiError(
                403,
                f"token {principal.token_id} lacks the '{scope}' scope",
                f"create a token with --scope {scope}",
            )
        return principal

    return dependency


# ---------------------------------------------------------------------------------------------
# helpers


def _run_summary(row: RunRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "run_id": row.run_id,
        "team": row.team,
        "device_id": row.device_id,
        "device_name": row.device_name,
        "num_accelerators": row.num_accelerators,
        "machine_id": row.machine_id,
        "started_at": row.started_at,
        "uploaded_at": iso_utc(row.uploaded_at),
        "status": row.status,
        "num_flags": len(json.loads(row.flags)),
        "content_sha256": row.content_sha256,
        "size_bytes": row.size_bytes,
        "uploaded_schema_version": row.uploaded_schema_version,
    }


def _run_detail(row: RunRow) -> dict[str, Any]:
    return {
        **_run_summary(row),
        "flags": json.loads(row.flags),
        "approved_by": row.approved_by,
        "approved_at": iso_utc(row.approved_at),
        "document": json.loads(row.document),
    }


def _field_errors(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": ["body", *err["loc"]], "msg": err["msg"], "type": err["type"]}
        for err in exc.errors()
    ]


def validate_document(data: Any) -> ResultDocument:
    """``parse_result`` with every field error listed (not only the first) for the 422."""
    try:
        return parse_result(data, where="document")
    except SchemaError as exc:
        errors: list[dict[str, Any]] = []
        if isinstance(data, dict):
            try:
                ResultDocument.model_validate(upgrade(dict(data), where="document"))
            except ValidationError as verr:
                errors = _field_errors(verr)
            except SchemaError:
                pass
        if not errors:
            loc: list[str | int] = ["body"]
            if isinstance(data, dict):
                loc.append("schema_version")
            errors = [{"loc": loc, "msg": exc.message, "type": "schema"}]
        raise DocumentInvalid(errors, exc.one_line()) from None


_FIELD_RE = re.compile(r"field '([^']*)'")


def _loc_of(message: str) -> list[str | int]:
    """``["body", "probes", 0, ...]`` from a safejson message naming ``field 'probes.0...'``."""
    m = _FIELD_RE.search(message)
    if m is None:
        return ["body"]
    return ["body", *(int(p) if p.isdigit() else p for p in m.group(1).split(".") if p)]


def parse_body(body: bytes) -> Any:
    """The upload body as JSON within the service's limits, or :class:`DocumentInvalid` (422)
    naming the field: no NaN/Infinity, no deep nesting, no huge integers or strings."""
    try:
        return loads_limited(
            body,
            where="body",
            max_bytes=len(body),  # the size limit was applied while reading (413)
            max_depth=BODY_MAX_DEPTH,
            max_int_digits=BODY_MAX_INT_DIGITS,
            max_str_chars=BODY_MAX_STR_CHARS,
        )
    except SchemaError as exc:
        msg = exc.one_line()
        raise DocumentInvalid(
            [{"loc": _loc_of(exc.message), "msg": msg, "type": "json_invalid"}], msg
        ) from None


def check_limits(doc: ResultDocument) -> None:
    """The service's length limits on identifying fields (:class:`models.UploadLimits`)."""
    try:
        models.UploadLimits.model_validate(doc, from_attributes=True)
    except ValidationError as exc:
        errors = _field_errors(exc)
        first = errors[0]
        msg = f"field '{'.'.join(str(p) for p in first['loc'][1:])}': {first['msg']}"
        raise DocumentInvalid(errors, msg) from None


@dataclass(frozen=True)
class PreparedUpload:
    """An upload body parsed, validated, sanitised and hashed (see :func:`prepare_upload`)."""

    doc: ResultDocument
    report: Any
    uploaded_version: int
    sha: str


def prepare_upload(body: bytes, keep_hostname: bool) -> PreparedUpload:
    """Everything CPU-bound about an upload, run in a worker thread (never on the event
    loop, which would stall every other request, ``/healthz`` included, for seconds on a
    large body)."""
    data = parse_body(body)
    # the document as sent must be valid: nothing is "fixed up"
    check_limits(validate_document(data))
    sanitized, report = sanitize_document(data, keep_hostname=keep_hostname)
    doc = validate_document(sanitized)
    if not RUN_ID_RE.fullmatch(doc.run_id):
        msg = (
            "field 'run_id': must be 1-64 letters, digits, '.', '_' or '-' (a uuid4 from the probe)"
        )
        raise DocumentInvalid([{"loc": ["body", "run_id"], "msg": msg, "type": "value_error"}], msg)
    uploaded_version = int(sanitized.get("schema_version", 0))
    return PreparedUpload(doc, report, uploaded_version, content_sha256(sanitized))


def plausibility_flags(
    db: Database, pool: RunPool, doc: ResultDocument
) -> tuple[list[dict[str, Any]], list[str]]:
    """Catalog flags plus flags against the pooled runs of the same device."""
    flags, notes = check_document(doc)
    device = identify_device(doc)
    if device.in_catalog:
        pooled, trusted = pool.pooled(db, device.device_id)
        flags += pool_flags(doc, device.device_id, pooled, trusted)
    return flags, notes


async def _read_body(request: Request, limit: int) -> bytes:
    too_big = ApiError(
        413,
        f"upload larger than the server's limit of {limit} bytes",
        "split the run or ask the admin to raise 'gpuplan serve --max-upload-bytes'",
    )
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise too_big
        except ValueError:
            raise ApiError(400, "invalid Content-Length header") from None
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


def _store_run(
    db: Database,
    principal: Principal,
    doc: ResultDocument,
    sha: str,
    size_bytes: int,
    uploaded_version: int,
    flags: list[dict[str, Any]],
    keep_hostname: bool,
) -> tuple[RunRow, bool]:
    """Insert the run in one transaction; returns (row, created). 409 on a different document."""
    device = identify_device(doc)
    stored = canonical_json(doc.model_dump(mode="json")).decode()
    row = RunRow(
        run_id=doc.run_id,
        content_sha256=sha,
        team=principal.team,
        token_id=principal.token_id,
        uploaded_at=utcnow(),
        started_at=doc.started_at[:64] if doc.started_at else None,
        machine_id=doc.host.machine_id[:200],
        device_id=device.device_id,
        device_name=(device.device_name or "")[:200] or None,
        num_accelerators=len(doc.host.accelerators),
        uploaded_schema_version=uploaded_version,
        size_bytes=size_bytes,
        status="flagged" if flags else "accepted",
        flags=json.dumps(flags),
        hostname_kept=keep_hostname,
        document=stored,
    )
    try:
        with db.write() as s:
            existing = s.scalars(select(RunRow).where(RunRow.run_id == doc.run_id)).first()
            if existing is None:
                s.add(row)
                s.flush()
                return row, True
    except IntegrityError:  # a concurrent upload of the same run id won the race
        pass
    with db.read() as s:
        existing = s.scalars(select(RunRow).where(RunRow.run_id == doc.run_id)).one()
    if existing.content_sha256 != sha:
        raise ApiError(
            409,
            f"run {doc.run_id} already exists with different content "
            f"(stored sha256 {existing.content_sha256[:12]}, this upload {sha[:12]})",
            "results are immutable: a re-measured run needs a new run id (run the probe again)",
        )
    return existing, False


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


# ---------------------------------------------------------------------------------------------
# application


def create_app(settings: ServiceSettings) -> FastAPI:
    """The FastAPI application for ``settings`` (database opened and migrated at start-up)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        db = Database(settings.database_url, sqlite_busy_timeout_s=settings.sqlite_busy_timeout_s)
        if settings.migrate:
            await run_in_threadpool(db.migrate)
        app.state.db = db
        app.state.pool = RunPool()
        app.state.recalibrator = Recalibrator(db, mode=settings.recalibrate)  # type: ignore[arg-type]
        app.state.recalibrator.start()
        try:
            yield
        finally:
            app.state.recalibrator.stop()
            db.dispose()

    app = FastAPI(
        title="gpuplan results service",
        version=__version__,
        description="Pools probe results from many nodes, recalibrates, serves the calibration.",
        lifespan=lifespan,
        # no public docs from a CDN: /docs and /openapi.json are local and need a read
        # token (gpuplan.service.web)
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.settings = settings
    from gpuplan.service.web import SecurityHeaders

    app.add_middleware(SecurityHeaders)

    # --- error handlers -------------------------------------------------------------------
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(
            {"detail": exc.detail, "hint": exc.hint}, status_code=exc.status, headers=exc.headers
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names only the first route's methods; list every method of the path
            # (RFC 9110 section 15.5.6: Allow carries the methods the resource supports).
            methods: set[str] = set()
            for route in request.app.router.routes:
                if isinstance(route, Route) and route.matches(request.scope)[0] != Match.NONE:
                    methods |= set(route.methods or ())
            headers["Allow"] = ", ".join(sorted(methods))
        return JSONResponse(
            {"detail": str(exc.detail), "hint": None}, status_code=exc.status_code, headers=headers
        )

    @app.exception_handler(DocumentInvalid)
    async def _doc_invalid(request: Request, exc: DocumentInvalid) -> JSONResponse:
        return JSONResponse({"detail": exc.errors, "message": exc.message}, status_code=422)

    @app.exception_handler(RequestValidationError)
    async def _request_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {
                "loc": list(e.get("loc", [])),
                "msg": str(e.get("msg", "")),
                "type": str(e.get("type", "")),
            }
            for e in exc.errors()
        ]
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"])
        return JSONResponse(
            {"detail": errors, "message": f"{where}: {first['msg']}"}, status_code=422
        )

    async def _db_down(request: Request, exc: Exception) -> JSONResponse:
        log.warning("database unavailable: %s", str(getattr(exc, "orig", exc)).splitlines()[0:1])
        return JSONResponse(
            {
                "detail": "database unavailable",
                "hint": f"retry in {RETRY_AFTER_S} s; your file is kept",
            },
            status_code=503,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )

    for kind in (OperationalError, InterfaceError, PoolTimeoutError):
        app.add_exception_handler(kind, _db_down)

    @app.exception_handler(DBAPIError)
    async def _dbapi(request: Request, exc: DBAPIError) -> JSONResponse:
        if exc.connection_invalidated:
            return await _db_down(request, exc)
        raise exc

    @app.exception_handler(GpuplanError)
    async def _gpuplan_error(request: Request, exc: GpuplanError) -> JSONResponse:
        status = 503 if exc.__class__.__name__ == "EnvironmentProblem" else 422
        return JSONResponse({"detail": exc.message, "hint": exc.hint}, status_code=status)

    # --- health ---------------------------------------------------------------------------
    @app.get(
        "/healthz",
        response_model=models.Health,
        responses={503: {"model": models.Health, "description": "database unavailable"}},
        tags=["service"],
    )
    def healthz(request: Request) -> Any:
        """Liveness, and whether the database answers *and accepts writes* (a write in a
        transaction that is rolled back); 503 when either fails. No token needed."""
        db: Database = request.app.state.db
        error: str | None = None
        revision = None
        try:
            db.ping()
            revision = db.current_revision()
        except (OperationalError, InterfaceError, PoolTimeoutError, DBAPIError) as exc:
            state, error = "unavailable", _first_line(exc)
        else:
            try:
                db.check_writable(
                    timeout_s=min(HEALTH_WRITE_TIMEOUT_S, settings.sqlite_busy_timeout_s)
                )
                state = "ok"
            except (OperationalError, InterfaceError, PoolTimeoutError, DBAPIError) as exc:
                state, error = "unwritable", _first_line(exc)
        body = {
            "status": "ok" if state == "ok" else "degraded",
            "database": state,
            "database_error": error,
            "schema_revision": revision,
            "version": __version__,
            "max_upload_bytes": settings.max_upload_bytes,
        }
        if error:
            log.warning("healthz: database %s: %s", state, error)
        return JSONResponse(body, status_code=200 if state == "ok" else 503)

    @app.get(
        "/v1/whoami",
        response_model=models.WhoAmI,
        responses={**AUTH_ERRORS, **DB_ERRORS},
        tags=["service"],
    )
    def whoami(principal: Annotated[Principal, Depends(require("read"))]) -> Any:
        """The team and scopes of the token used."""
        return {
            "token_id": principal.token_id,
            "team": principal.team,
            "scopes": sorted(principal.scopes),
        }

    # --- results --------------------------------------------------------------------------
    result_schema_ref = {"$ref": "#/components/schemas/ResultDocument"}

    @app.post(
        "/v1/results",
        response_model=models.UploadResponse,
        status_code=201,
        tags=["results"],
        responses={
            200: {
                "model": models.UploadResponse,
                "description": "the same document was already stored",
            },
            400: {"model": models.ErrorResponse, "description": "bad request headers"},
            **AUTH_ERRORS,
            409: {"model": models.ErrorResponse, "description": "run id exists with other content"},
            413: {"model": models.ErrorResponse, "description": "body over the size limit"},
            422: {
                "model": models.ValidationErrorResponse,
                "description": "document does not validate",
            },
            **DB_ERRORS,
        },
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": result_schema_ref}},
                "description": "a result document (DESIGN.md 3.1), as written by 'gpuplan probe'",
            }
        },
    )
    async def upload_result(
        request: Request,
        principal: Annotated[Principal, Depends(require("write"))],
        keep_hostname: Annotated[
            bool, Query(description="keep host names (stripped by default)")
        ] = False,
    ) -> Any:
        """Upload one result document. Idempotent by run id + content hash."""
        body = await _read_body(request, settings.max_upload_bytes)
        prepared = await run_in_threadpool(prepare_upload, body, keep_hostname)
        doc, report, uploaded_version, sha = (
            prepared.doc,
            prepared.report,
            prepared.uploaded_version,
            prepared.sha,
        )
        flags, notes = await run_in_threadpool(
            plausibility_flags, request.app.state.db, request.app.state.pool, doc
        )
        db: Database = request.app.state.db
        row, created = await run_in_threadpool(
            _store_run, db, principal, doc, sha, len(body), uploaded_version, flags, keep_hostname
        )
        log.info(
            "upload run=%s team=%s token=%s status=%s created=%s",
            row.run_id,
            principal.team,
            principal.token_id,
            row.status,
            created,
        )
        if created and row.status in INCLUDED_STATUSES:
            await run_in_threadpool(request.app.state.recalibrator.request)
        payload = {
            "id": row.id,
            "run_id": row.run_id,
            "content_sha256": row.content_sha256,
            "created": created,
            "status": row.status,
            "team": row.team,
            "device_id": row.device_id,
            "flags": json.loads(row.flags),
            "notes": notes,
            "sanitized": report.as_dict(),
        }
        return JSONResponse(payload, status_code=201 if created else 200)

    @app.get(
        "/v1/results",
        response_model=models.RunList,
        responses={**AUTH_ERRORS, **DB_ERRORS},
        tags=["results"],
    )
    def list_results(
        request: Request,
        principal: Annotated[Principal, Depends(require("read"))],
        device: Annotated[
            str | None, Query(max_length=200, description="catalog id or alias")
        ] = None,
        team: Annotated[str | None, Query(max_length=100)] = None,
        status: Annotated[str | None, Query(pattern="^(accepted|flagged|approved)$")] = None,
        machine_id: Annotated[str | None, Query(max_length=200)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
    ) -> Any:
        """Runs, newest first, filtered by device, team, status or machine."""
        db: Database = request.app.state.db
        where = []
        if device:
            where.append(RunRow.device_id == resolve_device_query(device))
        if team:
            where.append(RunRow.team == team)
        if status:
            where.append(RunRow.status == status)
        if machine_id:
            where.append(RunRow.machine_id == machine_id)
        with db.read() as s:
            total = s.scalar(select(func.count()).select_from(RunRow).where(*where)) or 0
            rows = s.scalars(
                select(RunRow)
                .where(*where)
                .order_by(RunRow.uploaded_at.desc(), RunRow.id.desc())
                .limit(limit)
                .offset(offset)
            ).all()
            runs = [_run_summary(r) for r in rows]
        return {"total": total, "limit": limit, "offset": offset, "runs": runs}

    def _get_run(db: Database, run_id: str) -> RunRow:
        with db.read() as s:
            row = s.scalars(select(RunRow).where(RunRow.run_id == run_id)).first()
        if row is None:
            raise ApiError(
                404, f"no run {run_id!r} on this server", "list runs with GET /v1/results"
            )
        return row

    @app.get(
        "/v1/results/{run_id}",
        response_model=models.RunDetail,
        responses={**AUTH_ERRORS, **_err(404, "no such run"), **DB_ERRORS},
        tags=["results"],
    )
    def get_result(
        request: Request, run_id: str, principal: Annotated[Principal, Depends(require("read"))]
    ) -> Any:
        """One run with its stored (sanitised, upgraded) document."""
        return _run_detail(_get_run(request.app.state.db, run_id))

    @app.post(
        "/v1/results/{run_id}/approve",
        response_model=models.RunSummary,
        responses={**AUTH_ERRORS, **_err(404, "no such run"), **DB_ERRORS},
        tags=["results"],
    )
    def approve_result(
        request: Request, run_id: str, principal: Annotated[Principal, Depends(require("admin"))]
    ) -> Any:
        """Let a flagged run into the calibration (admin scope)."""
        db: Database = request.app.state.db
        with db.write() as s:
            row = s.scalars(select(RunRow).where(RunRow.run_id == run_id)).first()
            if row is None:
                raise ApiError(
                    404, f"no run {run_id!r} on this server", "list runs with GET /v1/results"
                )
            changed = row.status == "flagged"
            if changed:
                row.status = "approved"
                row.approved_by = principal.token_id
                row.approved_at = utcnow()
            summary = _run_summary(row)
        log.info("approve run=%s token=%s changed=%s", run_id, principal.token_id, changed)
        if changed:
            request.app.state.recalibrator.request()
        return summary

    # --- calibration ----------------------------------------------------------------------
    no_artifact = ApiError(
        404,
        "no calibration artifact yet",
        "it is being fitted (see /v1/calibration/status) or POST /v1/calibration/refresh",
    )

    @app.get(
        "/v1/calibration",
        response_model=models.CalibrationResponse,
        responses={**AUTH_ERRORS, **_err(404, "nothing fitted yet"), **DB_ERRORS},
        tags=["calibration"],
    )
    def get_calibration(
        request: Request, principal: Annotated[Principal, Depends(require("read"))]
    ) -> Any:
        """The latest calibration artifact with its provenance (which runs, which inputs hash)."""
        row = latest_artifact(request.app.state.db)
        if row is None:
            raise no_artifact
        return artifact_provenance(row)

    @app.get(
        "/v1/calibration/artifact",
        responses={
            200: {
                "description": "the artifact (DESIGN.md 3.2)",
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
            **AUTH_ERRORS,
            **_err(404, "nothing fitted yet"),
            **DB_ERRORS,
        },
        tags=["calibration"],
    )
    def get_artifact(
        request: Request, principal: Annotated[Principal, Depends(require("read"))]
    ) -> Response:
        """The latest artifact alone, ready for ``--calibration FILE``."""
        row = latest_artifact(request.app.state.db)
        if row is None:
            raise no_artifact
        return Response(
            row.artifact,
            media_type="application/json",
            headers={
                "X-Gpuplan-Artifact-Id": str(row.id),
                "X-Gpuplan-Inputs-Sha256": row.inputs_sha256,
            },
        )

    @app.get(
        "/v1/calibration/status",
        response_model=models.CalibrationStatus,
        responses={**AUTH_ERRORS, **DB_ERRORS},
        tags=["calibration"],
    )
    def calibration_status(
        request: Request, principal: Annotated[Principal, Depends(require("read"))]
    ) -> Any:
        """Recalibration worker state, the latest provenance and how many runs count."""
        db: Database = request.app.state.db
        row = latest_artifact(db)
        with db.read() as s:
            included = s.scalar(
                select(func.count()).select_from(RunRow).where(RunRow.status.in_(INCLUDED_STATUSES))
            )
            flagged = s.scalar(
                select(func.count()).select_from(RunRow).where(RunRow.status == "flagged")
            )
        return {
            "recalibration": request.app.state.recalibrator.status.as_dict(),
            "latest": artifact_provenance(row, include_artifact=False) if row else None,
            "included_runs": included or 0,
            "flagged_runs": flagged or 0,
        }

    @app.get(
        "/v1/calibration/inputs",
        response_model=models.CalibrationInputs,
        responses={**AUTH_ERRORS, **DB_ERRORS},
        tags=["calibration"],
    )
    def get_inputs(
        request: Request,
        principal: Annotated[Principal, Depends(require("read"))],
        limit: Annotated[
            int,
            Query(ge=1, le=INPUTS_MAX_LIMIT, description="documents per page (at most 100)"),
        ] = INPUTS_DEFAULT_LIMIT,
        cursor: Annotated[
            str | None,
            Query(
                max_length=64,
                pattern=f"^{RUN_ID_RE.pattern}$",
                description="next_cursor of the previous page (absent: the first page)",
            ),
        ] = None,
    ) -> Any:
        """The documents the calibration is fitted on (accepted and approved runs), one page
        at a time in run id order: at most ``limit`` documents and about 32 MiB per page.
        Follow ``next_cursor`` until it is null; if ``inputs_sha256`` changes between pages,
        the set changed meanwhile: start again."""
        return calibration_inputs_page(
            request.app.state.db, cursor=cursor, limit=limit, max_bytes=INPUTS_MAX_PAGE_BYTES
        )

    @app.post(
        "/v1/calibration/refresh",
        response_model=models.Provenance,
        responses={**AUTH_ERRORS, **_err(404, "nothing to fit"), **DB_ERRORS},
        tags=["calibration"],
    )
    def refresh_calibration(
        request: Request, principal: Annotated[Principal, Depends(require("write"))]
    ) -> Any:
        """Fit now (synchronously) if the inputs changed; returns the latest provenance."""
        row = request.app.state.recalibrator.run_once()
        if row is None:
            raise no_artifact
        return artifact_provenance(row, include_artifact=False)

    # --- HTML -------------------------------------------------------------------------------
    from gpuplan.service import web

    web.add_routes(app, cookie=COOKIE)

    # --- OpenAPI: the result document schema as a component ---------------------------------
    def custom_openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, sub in result_document_schemas().items():
            components.setdefault(name, sub)
        app.openapi_schema = schema
        return schema

    app.openapi = custom_openapi  # type: ignore[method-assign]
    return app


def result_document_schemas() -> dict[str, Any]:
    """The result document's JSON Schema (``gpuplan.results.schema.json_schema``: the models
    plus one measurement rule per probe) as OpenAPI components, with the server's own extra
    rules written down: the run id's characters and a required ``schema_version``. One rule
    stays in prose (the models enforce it, answering 422): a probe with ``status: failed``
    must say why in ``error``."""
    from gpuplan.results.schema import json_schema

    def retarget(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: (
                    v.replace("#/$defs/", "#/components/schemas/")
                    if k == "$ref" and isinstance(v, str)
                    else retarget(v)
                )
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [retarget(v) for v in node]
        return node

    doc = retarget(json_schema())
    defs = doc.pop("$defs", {})
    for key in ("$schema", "$id"):
        doc.pop(key, None)
    doc["properties"]["run_id"] = {
        **doc["properties"]["run_id"],
        "pattern": f"^{RUN_ID_RE.pattern}$",
    }
    # the upgrade chain must know which version a document was written in
    doc["required"] = sorted({*doc.get("required", []), "schema_version"})
    return {**defs, "ResultDocument": doc}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI schema of the service (exported to docs/service-openapi.json)."""
    app = create_app(ServiceSettings(database_url="sqlite:///unused.db", migrate=False))
    schema = app.openapi()
    schema["info"]["version"] = "v1"  # stable across package versions
    return schema


__all__ = ["ServiceSettings", "create_app", "openapi_document"]
