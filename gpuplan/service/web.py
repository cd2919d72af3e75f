"""Server-rendered HTML pages (Jinja2) to browse and compare runs.

A browser logs in once with a read token (``/login``); the token then travels in an
``HttpOnly``, ``SameSite=Strict`` cookie (``Secure`` behind HTTPS), never in a URL, so it
cannot end up in an access log or a browser history. The pages only read: approving a
flagged run stays an API call with an admin token, which keeps cross-site request forgery
out of reach.
"""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import FastAPI, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from sqlalchemy import select

from gpuplan.results.schema import ResultDocument
from gpuplan.service.db import Database, RunRow, iso_utc
from gpuplan.service.plausibility import resolve_device_query
from gpuplan.service.recalibrate import latest_artifact
from gpuplan.service.summary import compare_rows, key_figures
from gpuplan.service.tokens import Principal, verify_token

MAX_COMPARE = 8


def si(value: Any, unit: str = "") -> str:
    """``2.5e12, 'FLOP/s'`` -> ``'2.5 TFLOP/s'`` (1 G = 1e9, like nccl-tests)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".strip()


_env = Environment(
    loader=PackageLoader("gpuplan.service", "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["si"] = si


def render(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    html = _env.get_template(name).render(**context)
    return HTMLResponse(html, status_code=status_code, headers={"Cache-Control": "no-store"})


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

    @app.get("/login", include_in_schema=False)
    def login_page() -> HTMLResponse:
        return render("login.html", title="Log in")

    @app.post("/login", include_in_schema=False)
    def login(request: Request, token: str = Form("")) -> Response:
        principal = verify_token(request.app.state.db, token.strip())
        if principal is None or not principal.allows("read"):
            return render(
                "login.html",
                status_code=401,
                title="Log in",
                error="unknown, revoked or read-less token",
            )
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            cookie,
            token.strip(),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            max_age=12 * 3600,
        )
        return response

    @app.post("/logout", include_in_schema=False)
    def logout() -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(cookie)
        return response

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
