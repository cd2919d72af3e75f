"""Client of the results service: upload runs, list them, fetch or refit the calibration.

Used by ``gpuplan results upload``, ``gpuplan results ls --server`` and
``gpuplan calibrate --server``. It never modifies or deletes a local result file, whatever
happens: it reads them, sanitises a copy in memory (:mod:`gpuplan.service.sanitize`, so no
environment secret or host name leaves the node unless asked) and sends that.

Retries: connection errors, timeouts, 408, 429 and 5xx answers are retried with
exponential backoff and "full jitter" (the delay before attempt ``n + 1`` is uniform in
``[0, min(cap, base * 2**n)]``; M. Brooker, "Exponential Backoff And Jitter", AWS
Architecture Blog, 2015), and never sooner than a ``Retry-After`` the server sent. Uploads
are idempotent on the server (run id + content hash), so retrying a request whose answer
was lost cannot duplicate a run.

Resuming: a batch upload records each acknowledged run (run id, content hash, server id)
in a small state file, written atomically after every acknowledgement; a batch that died
(killed client, network gone, server down) continues where it stopped when run again.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan.errors import EnvironmentProblem, GpuplanError, InputError, NotFoundError, SchemaError
from gpuplan.service.sanitize import content_sha256, sanitize_document

TOKEN_ENV = "GPUPLAN_TOKEN"
SERVER_ENV = "GPUPLAN_SERVER"
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass
class RetryPolicy:
    """Exponential backoff with full jitter.

    Parameters
    ----------
    max_attempts:
        total attempts per request (1 = no retry).
    base_s, cap_s:
        the delay before attempt ``n + 1`` is drawn uniformly from ``[0, min(cap_s, base_s * 2**n)]``.
    max_retry_after_s:
        longest ``Retry-After`` honoured.
    seed:
        seed of the jitter (None: random); tests pass one.
    """

    max_attempts: int = 8
    base_s: float = 0.5
    cap_s: float = 30.0
    max_retry_after_s: float = 60.0
    seed: int | None = None
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InputError(
                "max_attempts must be at least 1", hint="use --retries 0 for a single try"
            )
        self._rng = random.Random(self.seed)

    def delay_s(self, attempt: int, retry_after_s: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (0-based)."""
        ceiling = min(self.cap_s, self.base_s * (2.0**attempt))
        delay = self._rng.uniform(0.0, ceiling)
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, self.max_retry_after_s))
        return delay


class TransientError(GpuplanError):
    """The server could not be reached or answered 5xx after every retry."""


class AuthError(InputError):
    """The server refused the token (401) or its scope (403): fatal for a whole batch."""


@dataclass
class UploadOutcome:
    """What happened to one local result file.

    ``result``: ``created`` (stored now), ``duplicate`` (the server already had it),
    ``skipped`` (acknowledged in an earlier batch, per the state file), ``conflict`` (the
    server holds another document under this run id), ``rejected`` (invalid document or too
    large), ``failed`` (server unreachable after retries: run the command again).
    """

    path: str
    run_id: str | None
    result: str
    http_status: int | None = None
    id: int | None = None
    server_status: str | None = None
    flags: list[dict[str, Any]] = field(default_factory=list)
    content_sha256: str | None = None
    attempts: int = 0
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.result in ("created", "duplicate", "skipped")

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "run_id": self.run_id,
            "result": self.result,
            "http_status": self.http_status,
            "id": self.id,
            "status": self.server_status,
            "flags": self.flags,
            "content_sha256": self.content_sha256,
            "attempts": self.attempts,
            "message": self.message,
        }


def resolve_token(token: str | None) -> str:
    """``token`` or ``$GPUPLAN_TOKEN``; an :class:`InputError` when neither is set."""
    token = (token or os.environ.get(TOKEN_ENV, "")).strip()
    if not token:
        raise InputError(
            "no token for the results service",
            hint=f"pass --token or set {TOKEN_ENV} (an admin creates one with 'gpuplan serve token create --team T')",
        )
    return token


def resolve_server(server: str | None) -> str:
    server = (server or os.environ.get(SERVER_ENV, "")).strip().rstrip("/")
    if not server:
        raise InputError(
            "no server URL", hint=f"pass --server https://host:port or set {SERVER_ENV}"
        )
    if not server.startswith(("http://", "https://")):
        raise InputError(
            f"server URL {server!r} lacks http:// or https://",
            hint="e.g. --server https://gpuplan.example.org",
        )
    return server


class ServiceClient:
    """HTTP client of one results server.

    Parameters
    ----------
    server:
        base URL, e.g. ``https://gpuplan.example.org``.
    token:
        API token (``None``: ``$GPUPLAN_TOKEN``).
    timeout_s:
        connect/read timeout of one attempt.
    retry:
        the :class:`RetryPolicy`.
    sleep:
        the function that waits (tests replace it to count delays).
    """

    def __init__(
        self,
        server: str,
        token: str | None = None,
        *,
        timeout_s: float = 60.0,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        verify: bool | str = True,
    ) -> None:
        import httpx

        self.server = resolve_server(server)
        self._token = resolve_token(token)
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=self.server,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            headers={"Authorization": f"Bearer {self._token}", "User-Agent": "gpuplan-client"},
            verify=verify,
            follow_redirects=False,
        )
        self._max_upload_bytes: int | None = None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:  # never show the token
        return f"ServiceClient({self.server!r})"

    # transport ---------------------------------------------------------------------------
    def request(self, method: str, path: str, **kwargs: Any):
        """Send with retries; returns the final ``httpx.Response`` (any non-retried status).

        Raises
        ------
        TransientError
            when every attempt failed to connect or got a retryable status.
        """
        import httpx

        last: str = ""
        response = None
        for attempt in range(self.retry.max_attempts):
            retry_after = None
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:  # connect/read/write errors, timeouts, resets
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                if response.status_code not in RETRY_STATUSES:
                    response.attempts = attempt + 1  # type: ignore[attr-defined]
                    return response
                last = f"HTTP {response.status_code}: {_detail(response)}"
                retry_after = _retry_after_s(response)
            if attempt + 1 < self.retry.max_attempts:
                self._sleep(self.retry.delay_s(attempt, retry_after))
        raise TransientError(
            f"{self.server}{path}: no answer after {self.retry.max_attempts} attempts ({last})",
            hint="check the server is up; run the same command again later (nothing is lost)",
        )

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        _raise_for_status(response, self.server)
        return response.json()

    # API ---------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        response = self.request("GET", "/healthz")
        return response.json()

    def whoami(self) -> dict[str, Any]:
        return self._json("GET", "/v1/whoami")

    def verify_token(self, scope: str = "write") -> dict[str, Any]:
        """The token's ``whoami`` if the server accepts it with ``scope``; else :class:`AuthError`.

        A batch asks first, so that a bad token is an error even when every file would be
        skipped as already uploaded (the state file alone cannot tell a revoked token).
        """
        me = self.whoami()
        scopes = set(me.get("scopes") or ())
        if scope not in scopes and "admin" not in scopes:
            raise AuthError(
                f"{self.server}: token {me.get('token_id')} lacks the '{scope}' scope "
                f"(it has {', '.join(sorted(scopes)) or 'none'})",
                hint=f"ask the service admin for a token with --scope read,{scope}",
            )
        return me

    def max_upload_bytes(self) -> int | None:
        if self._max_upload_bytes is None:
            try:
                self._max_upload_bytes = int(self.health().get("max_upload_bytes") or 0) or None
            except (GpuplanError, ValueError):
                return None
        return self._max_upload_bytes

    def upload_document(
        self, doc: dict[str, Any], *, keep_hostname: bool = False, path: str = "-"
    ) -> UploadOutcome:
        """Upload one decoded result document (sanitised here first)."""
        clean, _ = sanitize_document(doc, keep_hostname=keep_hostname)
        body = json.dumps(clean, allow_nan=False).encode()
        run_id = clean.get("run_id") if isinstance(clean, dict) else None
        sha = content_sha256(clean)
        limit = self.max_upload_bytes()
        if limit is not None and len(body) > limit:
            return UploadOutcome(
                path, run_id, "rejected", 413, content_sha256=sha,
                message=f"{len(body)} bytes, over the server's limit of {limit} bytes",
            )  # fmt: skip
        try:
            response = self.request(
                "POST",
                "/v1/results",
                content=body,
                params={"keep_hostname": "true"} if keep_hostname else None,
                headers={"Content-Type": "application/json"},
            )
        except TransientError as exc:
            return UploadOutcome(
                path,
                run_id,
                "failed",
                content_sha256=sha,
                attempts=self.retry.max_attempts,
                message=exc.one_line(),
            )
        attempts = getattr(response, "attempts", 1)
        code = response.status_code
        if code in (200, 201):
            data = response.json()
            return UploadOutcome(
                path, run_id, "created" if code == 201 else "duplicate", code, id=data.get("id"),
                server_status=data.get("status"), flags=data.get("flags") or [],
                content_sha256=data.get("content_sha256"), attempts=attempts,
            )  # fmt: skip
        if code in (401, 403):
            _raise_for_status(response, self.server)
        result = "conflict" if code == 409 else "rejected"
        return UploadOutcome(
            path,
            run_id,
            result,
            code,
            content_sha256=sha,
            attempts=attempts,
            message=_detail(response),
        )

    def list_runs(
        self,
        *,
        device: str | None = None,
        team: str | None = None,
        status: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> dict[str, Any]:
        params = {k: v for k, v in {"device": device, "team": team, "status": status}.items() if v}
        return self._json("GET", "/v1/results", params={**params, "limit": limit, "offset": offset})

    def get_run(self, run_id: str) -> dict[str, Any]:
        return self._json("GET", f"/v1/results/{run_id}")

    def approve(self, run_id: str) -> dict[str, Any]:
        return self._json("POST", f"/v1/results/{run_id}/approve")

    def calibration(self) -> dict[str, Any]:
        """The latest artifact with its provenance (``artifact``, ``run_ids``, ``inputs_sha256`` ...)."""
        return self._json("GET", "/v1/calibration")

    def calibration_inputs(self, *, page_size: int = 20, max_restarts: int = 3) -> dict[str, Any]:
        """Every document the server's calibration is fitted on, page by page (following
        ``next_cursor``); starts over when the set changes meanwhile (``inputs_sha256``)."""
        for _ in range(max_restarts + 1):
            pages: list[dict[str, Any]] = []
            cursor: str | None = None
            while True:
                params: dict[str, Any] = {"limit": page_size}
                if cursor is not None:
                    params["cursor"] = cursor
                page = self._json("GET", "/v1/calibration/inputs", params=params)
                if pages and page["inputs_sha256"] != pages[0]["inputs_sha256"]:
                    break  # new runs arrived while paging: start over
                pages.append(page)
                cursor = page.get("next_cursor")
                if cursor is None:
                    return {
                        "inputs_sha256": pages[0]["inputs_sha256"],
                        "total": pages[0].get("total"),
                        "run_ids": [r for p in pages for r in p["run_ids"]],
                        "documents": [d for p in pages for d in p["documents"]],
                    }
        raise TransientError(
            f"{self.server}: the calibration inputs kept changing while they were downloaded",
            hint="run the command again in a moment",
        )

    def refresh_calibration(self) -> dict[str, Any]:
        return self._json("POST", "/v1/calibration/refresh")


def _detail(response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase
    if isinstance(data, dict):
        if isinstance(data.get("message"), str):
            return data["message"]
        detail = data.get("detail")
        hint = data.get("hint")
        if isinstance(detail, str):
            return f"{detail}; {hint}" if hint else detail
        return json.dumps(detail)[:300]
    return str(data)[:300]


def _retry_after_s(response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _raise_for_status(response, server: str) -> None:
    code = response.status_code
    if code < 400:
        return
    detail = _detail(response)
    if code == 401:
        raise AuthError(
            f"{server} refused the token ({detail})", hint=f"check --token / {TOKEN_ENV}"
        )
    if code == 403:
        raise AuthError(f"{server}: {detail}")
    if code == 404:
        raise NotFoundError(f"{server}: {detail}")
    if code == 422:
        raise SchemaError(f"{server}: {detail}")
    raise InputError(f"{server} answered HTTP {code}: {detail}")


# -------------------------------------------------------------------------------------------
# batch upload with a resumable state file


def default_state_path(server: str) -> Path:
    """``<state dir>/upload-<hash of the server URL>.json`` (:func:`gpuplan.paths.state_dir`)."""
    from gpuplan.paths import state_dir

    key = hashlib.sha256(server.rstrip("/").encode()).hexdigest()[:12]
    return state_dir() / f"upload-{key}.json"


class UploadState:
    """Run ids the server acknowledged, kept across batches (atomic writes)."""

    VERSION = 1

    def __init__(self, path: Path | str, server: str) -> None:
        self.path = Path(path)
        self.server = server
        self.acknowledged: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise InputError(
                    f"upload state file {self.path} is unreadable ({exc})",
                    hint="delete it (uploads are idempotent: the next batch just re-sends) or pass --no-resume",
                ) from None
            if isinstance(data, dict) and data.get("server") == server:
                self.acknowledged = dict(data.get("acknowledged") or {})

    def is_acknowledged(self, run_id: str | None, sha: str | None) -> bool:
        entry = self.acknowledged.get(run_id or "")
        return bool(entry) and entry.get("content_sha256") == sha

    def record(self, outcome: UploadOutcome) -> None:
        from gpuplan.fsio import write_json_atomic

        if outcome.run_id is None:
            return
        self.acknowledged[outcome.run_id] = {
            "content_sha256": outcome.content_sha256,
            "id": outcome.id,
            "status": outcome.server_status,
            "acknowledged_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        data = {"version": self.VERSION, "server": self.server, "acknowledged": self.acknowledged}
        write_json_atomic(self.path, data, overwrite=True)


def collect_files(items: Iterable[str], results_dir: Path | str = "results") -> list[Path]:
    """Result files named by ``items``: files, directories (searched recursively) or run ids
    (full or a unique prefix, looked up under ``results_dir``)."""
    from gpuplan.results.store import iter_result_files

    files: list[Path] = []
    index: list[tuple[str, Path]] | None = None
    for item in items:
        p = Path(item)
        if p.exists():
            files.extend(iter_result_files([p]))
            continue
        if index is None:
            index = []
            root = Path(results_dir)
            for f in iter_result_files([root]) if root.is_dir() else []:
                try:
                    rid = read_upload_file(f).get("run_id")
                except (OSError, ValueError, RecursionError, GpuplanError):
                    continue
                if isinstance(rid, str):
                    index.append((rid, f))
        matches = [f for rid, f in index if rid.startswith(item)]
        if not matches:
            raise NotFoundError(
                f"no result file or run id {item!r}",
                hint=f"give a path, or a run id listed by 'gpuplan results ls' (looked in {results_dir})",
            )
        if len(matches) > 1:
            raise InputError(
                f"run id prefix {item!r} is ambiguous ({len(matches)} runs)",
                hint="give more characters",
            )
        files.append(matches[0])
    return list(dict.fromkeys(files))


def upload_files(
    client: ServiceClient,
    files: list[Path],
    *,
    state: UploadState | None = None,
    keep_hostname: bool = False,
    on_outcome: Callable[[UploadOutcome], None] | None = None,
    unreachable: bool = False,
) -> list[UploadOutcome]:
    """Upload ``files`` one after the other; each acknowledgement is saved in ``state``.

    A file that cannot be read or does not validate locally (not UTF-8 JSON, NaN, too deep,
    schema errors) is reported as ``rejected`` without being sent, and the batch goes on
    with the next file; only a refused token (:class:`AuthError`) stops it. A server that
    stays unreachable makes the rest ``failed`` quickly (one full retry cycle,
    then a single attempt each; ``unreachable=True``: a single attempt from the start) so
    that the batch ends and can be resumed later.
    """
    outcomes: list[UploadOutcome] = []
    for path in files:
        try:
            out, unreachable = _upload_one(client, Path(path), state, keep_hostname, unreachable)
        except AuthError:
            raise  # the token is refused: every other file would be refused too
        except (OSError, ValueError, RecursionError, GpuplanError) as exc:
            # one bad file is reported; the rest of the batch still goes
            message = exc.one_line() if isinstance(exc, GpuplanError) else f"{path}: {exc}"
            out = UploadOutcome(str(path), None, "rejected", message=message[:500])
        outcomes.append(out)
        if on_outcome is not None:
            on_outcome(out)
    return outcomes


def read_upload_file(path: Path) -> dict[str, Any]:
    """A local result file, read and validated as the rest of gpuplan reads one
    (the shared loader's file checks and :mod:`gpuplan.results.safejson` limits, then the
    schema and the physical checks); returns the raw document, which is what is sent."""
    from gpuplan.results.loader import check_physical, read_result_bytes
    from gpuplan.results.safejson import loads_limited
    from gpuplan.results.store import parse_result

    raw = loads_limited(read_result_bytes(path), where=str(path))
    check_physical(parse_result(raw, where=str(path)), where=str(path))
    return raw


def _upload_one(
    client: ServiceClient,
    path: Path,
    state: UploadState | None,
    keep_hostname: bool,
    unreachable: bool,
) -> tuple[UploadOutcome, bool]:
    try:
        raw = read_upload_file(path)
    except (OSError, ValueError, RecursionError, GpuplanError) as exc:
        message = exc.one_line() if isinstance(exc, GpuplanError) else f"{path}: {exc}"
        return UploadOutcome(str(path), None, "rejected", message=message[:500]), unreachable
    clean, _ = sanitize_document(raw, keep_hostname=keep_hostname)
    sha = content_sha256(clean)
    run_id = raw.get("run_id")
    if state is not None and state.is_acknowledged(run_id, sha):
        entry = state.acknowledged[run_id]
        out = UploadOutcome(
            str(path),
            run_id,
            "skipped",
            id=entry.get("id"),
            server_status=entry.get("status"),
            content_sha256=sha,
        )
        return out, unreachable
    saved = client.retry.max_attempts
    if unreachable:
        client.retry.max_attempts = 1
    try:
        out = client.upload_document(raw, keep_hostname=keep_hostname, path=str(path))
    finally:
        client.retry.max_attempts = saved
    if out.result in ("created", "duplicate") and state is not None:
        state.record(out)
    return out, out.result == "failed"


# -------------------------------------------------------------------------------------------
# calibration from the server


def calibrate_from_server(
    server: str,
    token: str | None = None,
    *,
    refit: bool = False,
    timeout_s: float = 120.0,
    retry: RetryPolicy | None = None,
) -> dict[str, Any]:
    """The calibration artifact (DESIGN.md 3.2) of the pooled results on ``server``.

    ``refit=False`` downloads the artifact the server fitted last; ``refit=True`` downloads
    the documents it is fitted on and runs the same fit here
    (``calibrate_documents(docs, include_reference=True)``). Both give the artifact that
    ``gpuplan calibrate`` gives on the same files, except ``created_at``.

    Raises
    ------
    NotFoundError
        when the server has not fitted anything yet (and ``refit`` is false).
    """
    with ServiceClient(server, token, timeout_s=timeout_s, retry=retry) as client:
        if not refit:
            try:
                return client.calibration()["artifact"]
            except NotFoundError:
                raise NotFoundError(
                    f"{client.server} has no calibration artifact yet",
                    hint="retry in a minute, or add --refit to fit the pooled results here",
                ) from None
        inputs = client.calibration_inputs()
    return refit_documents(inputs["documents"])


def refit_documents(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """Fit the calibration on downloaded documents, exactly as the server does."""
    try:
        from gpuplan.calibration.fit import calibrate_documents
    except ImportError as exc:
        raise EnvironmentProblem(
            f"this gpuplan has no calibration fit ({exc})", hint="upgrade gpuplan"
        ) from None
    from gpuplan.results.store import parse_result

    docs = [parse_result(d, where=f"server run {d.get('run_id')}") for d in documents]
    return calibrate_documents(docs, include_reference=True)
