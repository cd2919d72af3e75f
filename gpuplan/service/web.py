"""Server-rendered HTML pages (Jinja2) to browse and compare runs, and the API docs page.

A browser logs in once with a read token (``/login``); the token then travels in an
``HttpOnly``, ``SameSite=Strict`` cookie (``Secure`` behind HTTPS), never in a URL, so it
cannot end up in an access log or a browser history. The pages only read: approving a
flagged run stays an API call with an admin token.

Cross-site request forgery: the login form carries a random token that must equal the one
in a ``SameSite=Strict`` cookie set with the form (the "double submit cookie" of the OWASP
CSRF Prevention Cheat Sheet), and a POST whose ``Sec-Fetch-Site`` or ``Origin`` names
another site is refused before that (403), so no other site can log a browser in (login
CSRF) or out. Every answer carries :data:`SECURITY_HEADERS`: a Content Security Policy
without any script source (the pages have no JavaScript; the one inline style block is
allowed by its sha256), no framing, no MIME sniffing, no referrer.

``/docs`` (a plain local page listing the operations, no CDN) and ``/openapi.json`` need a
read token: the session cookie or an ``Authorization: Bearer`` header.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from typing import Any

from fastapi import FastAPI, Form, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from sqlalchemy import select

from gpuplan.results.schema import ResultDocument
from gpuplan.service.db import Database, RunRow, iso_utc
from gpuplan.service.plausibility import resolve_device_query
from gpuplan.service.recalibrate import latest_artifact
from gpuplan.service.summary import compare_rows, key_figures
from gpuplan.service.tokens import Principal, verify_token
from gpuplan.units import fmt_si

MAX_COMPARE = 8


_env = Environment(
    loader=PackageLoader("gpuplan.service", "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["si"] = fmt_si  # 2.5e12, "FLOP/s" -> "2.5 TFLOP/s" (1 G = 1e9)


def _style_hashes() -> str:
    """CSP sources of the inline ``<style>`` blocks of the templates (their sha256)."""
    out = []
    for name in sorted(_env.list_templates(extensions=["html"])):
        source = _env.loader.get_source(_env, name)[0]  # type: ignore[union-attr]
        for block in re.findall(r"<style>(.*?)</style>", source, flags=re.DOTALL):
            digest = base64.b64encode(hashlib.sha256(block.encode()).digest()).decode()
            out.append(f"'sha256-{digest}'")
    return " ".join(out) or "'none'"


SECURITY_HEADERS = {
    "Content-Security-Policy": f"default-src 'none'; style-src {_style_hashes()}; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}
CSRF_COOKIE = "gpuplan_csrf"


class SecurityHeaders:
    """ASGI middleware: :data:`SECURITY_HEADERS` on every HTTP answer (API and pages)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                from starlette.datastructures import MutableHeaders

                headers = MutableHeaders(scope=message)
                for key, value in SECURITY_HEADERS.items():
                    headers.setdefault(key, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def cross_site(request: Request) -> str | None:
    """Why a state-changing request comes from another site, or None when it does not.

    ``Sec-Fetch-Site`` (sent by every current browser) must be ``same-origin`` or ``none``
    (typed by the user); without it, an ``Origin`` header must name this server.
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"Sec-Fetch-Site: {site}"
    origin = request.headers.get("origin")
    if origin is not None and site is None:
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if origin.rstrip("/") != own:
            return f"Origin: {origin[:100]}"
    return None


def render(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    html = _env.get_template(name).render(**context)
    return HTMLResponse(html, status_code=status_code, headers={"Cache-Control": "no-store"})


DOCS_HINT = "log in at /login, or send 'Authorization: Bearer <token>'"


def _bearer_reader(request: Request) -> Principal | None:
    auth = request.headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not token:
        return None
    principal = verify_token(request.app.state.db, token.strip())
    return principal if principal is not None and principal.allows("read") else None


def _viewer(request: Request, cookie: str) -> Principal | None:
    token = request.cookies.get(cookie)
    if not token:
        return None
    principal = verify_token(request.app.state.db, token)
    if principal is None or not principal.allows("read"):
        return None
    return principal


def add_routes(app: FastAPI, *, cookie: str) -> None:
    """Register the HTML pages on ``app``."""

    def login_redirect() -> RedirectResponse:
        return RedirectResponse("/login", status_code=303)

    def login_form(request: Request, status_code: int = 200, error: str | None = None) -> Response:
        csrf = secrets.token_urlsafe(32)
        response = render(
            "login.html", status_code=status_code, title="Log in", error=error, csrf=csrf
        )
        response.set_cookie(
            CSRF_COOKIE,
            csrf,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/login",
        )
        return response

    @app.get("/login", include_in_schema=False)
    def login_page(request: Request) -> Response:
        return login_form(request)

    @app.post("/login", include_in_schema=False)
    def login(request: Request, token: str = Form(""), csrf: str = Form("")) -> Response:
        foreign = cross_site(request)
        expected = request.cookies.get(CSRF_COOKIE, "")
        if foreign is not None or not (
            expected and csrf and hmac.compare_digest(expected.encode(), csrf.encode())
        ):
            why = f"cross-site request ({foreign})" if foreign else "missing or stale form token"
            return login_form(
                request, status_code=403, error=f"login refused: {why}; reload this page"
            )
        principal = verify_token(request.app.state.db, token.strip())
        if principal is None or not principal.allows("read"):
            return login_form(request, status_code=401, error="unknown, revoked or read-less token")
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            cookie,
            token.strip(),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            max_age=12 * 3600,
        )
        response.delete_cookie(CSRF_COOKIE, path="/login")
        return response

    @app.post("/logout", include_in_schema=False)
    def logout(request: Request) -> Response:
        foreign = cross_site(request)
        if foreign is not None:
            return render(
                "message.html",
                status_code=403,
                title="Log out",
                message=f"log out refused: cross-site request ({foreign})",
            )
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(cookie)
        return response

    @app.get("/openapi.json", include_in_schema=False)
    def openapi_json(request: Request) -> Response:
        if _viewer(request, cookie) is None and _bearer_reader(request) is None:
            return JSONResponse(
                {"detail": "the API schema needs a read token", "hint": DOCS_HINT},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False)
    def docs_page(request: Request) -> Response:
        viewer = _viewer(request, cookie)
        if viewer is None and _bearer_reader(request) is None:
            return login_redirect()
        operations = []
        for path, item in sorted(app.openapi().get("paths", {}).items()):
            for method, op in item.items():
                operations.append(
                    {
                        "method": method.upper(),
                        "path": path,
                        "summary": op.get("summary", ""),
                        "description": (op.get("description") or "").split("\n\n")[0],
                        "responses": ", ".join(sorted(op.get("responses", {}))),
                    }
                )
        return render("docs.html", title="API", viewer=viewer, operations=operations)

    @app.get("/", include_in_schema=False)
    def index(
        request: Request,
        device: str | None = Query(None, max_length=200),
        team: str | None = Query(None, max_length=100),
    ) -> Response:
        viewer = _viewer(request, cookie)
        if viewer is None:
            return login_redirect()
        db: Database = request.app.state.db
        q = select(RunRow).order_by(RunRow.uploaded_at.desc(), RunRow.id.desc()).limit(500)
        if device:
            q = q.where(RunRow.device_id == resolve_device_query(device))
        if team:
            q = q.where(RunRow.team == team)
        with db.read() as s:
            rows = s.scalars(q).all()
            devices = sorted(set(s.scalars(select(RunRow.device_id).distinct())))
            teams = sorted(set(s.scalars(select(RunRow.team).distinct())))
        art = latest_artifact(db)
        return render(
            "runs.html",
            title="Runs",
            viewer=viewer,
            runs=[_row_view(r) for r in rows],
            devices=devices,
            teams=teams,
            device=device or "",
            team=team or "",
            artifact=None
            if art is None
            else {"id": art.id, "created_at": iso_utc(art.created_at), "num_runs": art.num_runs},
        )

    @app.get("/runs/{run_id}", include_in_schema=False)
    def run_page(request: Request, run_id: str) -> Response:
        viewer = _viewer(request, cookie)
        if viewer is None:
            return login_redirect()
        row = _load(request.app.state.db, [run_id])
        if not row:
            return render(
                "message.html",
                status_code=404,
                title="Not found",
                viewer=viewer,
                message=f"no run {run_id}",
            )
        r = row[0]
        doc = ResultDocument.model_validate(json.loads(r.document))
        return render(
            "run.html",
            title=f"Run {r.run_id}",
            viewer=viewer,
            run=_row_view(r),
            flags=json.loads(r.flags),
            figures=list(key_figures(doc).values()),
            doc=doc,
        )

    @app.get("/compare", include_in_schema=False)
    def compare_page(request: Request, run: list[str] = Query(default_factory=list)) -> Response:
        viewer = _viewer(request, cookie)
        if viewer is None:
            return login_redirect()
        wanted = list(dict.fromkeys(run))[:MAX_COMPARE]
        if len(wanted) < 2:
            return render(
                "message.html",
                status_code=400,
                title="Compare",
                viewer=viewer,
                message="pick at least two runs to compare",
            )
        rows = _load(request.app.state.db, wanted)
        found = {r.run_id for r in rows}
        missing = [w for w in wanted if w not in found]
        if missing:
            return render(
                "message.html",
                status_code=404,
                title="Compare",
                viewer=viewer,
                message=f"no run {', '.join(missing)}",
            )
        by_id = {r.run_id: r for r in rows}
        ordered = [by_id[w] for w in wanted]
        docs = [ResultDocument.model_validate(json.loads(r.document)) for r in ordered]
        return render(
            "compare.html",
            title="Compare runs",
            viewer=viewer,
            runs=[_row_view(r) for r in ordered],
            rows=compare_rows(docs),
        )


def _load(db: Database, run_ids: list[str]) -> list[RunRow]:
    with db.read() as s:
        return list(s.scalars(select(RunRow).where(RunRow.run_id.in_(run_ids))))


def _row_view(r: RunRow) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "short": r.run_id[:8],
        "team": r.team,
        "device_id": r.device_id,
        "device_name": r.device_name,
        "machine_id": r.machine_id,
        "started_at": r.started_at,
        "uploaded_at": iso_utc(r.uploaded_at),
        "status": r.status,
        "num_flags": len(json.loads(r.flags)),
    }
