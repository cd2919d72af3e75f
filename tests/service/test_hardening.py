"""Hostile and broken uploads, paging, health and the security of the pages (issue 13).

In-process app (``TestClient``) on SQLite and PostgreSQL; each refusal is asserted with its
exact status, the field it names, and that nothing was stored.
"""

from __future__ import annotations

import json
import logging
import re

import pytest

from .service_docs import make_doc


def _raw_upload(api, text: str | bytes):
    body = text.encode() if isinstance(text, str) else text
    return api.client.post("/v1/results", content=body, headers=api.headers("rw"))


def _with_literal(doc: dict, placeholder: float, literal: str) -> str:
    """``doc`` as JSON with the number ``placeholder`` replaced by a raw ``literal``."""
    text = json.dumps(doc)
    assert text.count(repr(placeholder)) == 1
    return text.replace(repr(placeholder), literal)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_numbers_are_422_naming_the_field(api, literal, caplog):
    caplog.set_level(logging.DEBUG)
    doc = make_doc(seed=500)
    doc["probes"][0]["measurements"][1]["flops_per_s"] = 123.25
    r = _raw_upload(api, _with_literal(doc, 123.25, literal))
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["detail"][0]["loc"] == ["body", "probes", 0, "measurements", 1, "flops_per_s"]
    assert "probes.0.measurements.1.flops_per_s" in body["message"]
    assert api.count_runs() == 0
    assert len(caplog.records) < 20  # one request, not a traceback per nesting level


def test_deep_nesting_is_422_without_a_traceback(api, caplog):
    caplog.set_level(logging.DEBUG)
    doc = make_doc(seed=501)
    text = json.dumps(doc)[:-1] + ', "extra": ' + "[" * 400 + "]" * 400 + "}"
    r = _raw_upload(api, text)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body"]
    assert "nesting deeper than 32" in r.json()["message"]
    assert api.count_runs() == 0
    assert len(caplog.records) < 20
    assert "Traceback" not in caplog.text


def test_huge_integer_is_422_naming_the_field(api):
    doc = make_doc(seed=502)
    doc["host"]["memory_bytes"] = 777
    r = _raw_upload(
        api, json.dumps(doc).replace('"memory_bytes": 777', '"memory_bytes": ' + "9" * 5000)
    )
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "host", "memory_bytes"]
    assert "5,000 digits" in r.json()["message"]
    assert api.count_runs() == 0


def test_over_long_machine_id_is_422_and_not_stored_truncated(make_api, sqlite_url):
    with make_api(sqlite_url, max_upload_bytes=16 * 2**20) as api:
        doc = make_doc(seed=503)
        doc["host"]["machine_id"] = "m" * (10 * 2**20)  # 10 MiB
        r = api.upload(doc)
        assert r.status_code == 422, r.text[:300]
        # over the body's string limit first: named with its path
        assert r.json()["detail"][0]["loc"] == ["body", "host", "machine_id"]
        doc["host"]["machine_id"] = "m" * 201  # under the string limit, over the column
        r = api.upload(doc)
        assert r.status_code == 422, r.text[:300]
        assert r.json()["detail"][0]["loc"] == ["body", "host", "machine_id"]
        assert "at most 200 characters" in r.json()["message"]
        doc["host"]["machine_id"] = "m" * 200
        assert api.upload(doc).status_code == 201
        assert api.count_runs() == 1


def test_over_long_accelerator_name_is_422_naming_it(api):
    doc = make_doc(seed=504)
    doc["host"]["accelerators"] = [dict(a) for a in doc["host"]["accelerators"]]
    doc["host"]["accelerators"][3]["name"] = "H" * 300
    r = api.upload(doc)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "host", "accelerators", 3, "name"]
    assert api.count_runs() == 0


def test_not_utf8_is_422(api):
    r = _raw_upload(api, json.dumps(make_doc(seed=505)).encode("utf-16"))
    assert r.status_code == 422, r.text
    assert "UTF-16" in r.json()["message"]
    assert api.count_runs() == 0


# --- paging of the calibration inputs ---------------------------------------------------------


def test_calibration_inputs_are_paged_by_cursor(api):
    docs = [make_doc(seed=510 + i) for i in range(5)]
    for d in docs:
        assert api.upload(d).status_code == 201
    expected = sorted(d["run_id"] for d in docs)
    seen: list[str] = []
    cursor = None
    digests = set()
    pages = 0
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = api.get("/v1/calibration/inputs", **params)
        assert page.status_code == 200, page.text
        body = page.json()
        assert body["total"] == 5 and body["limit"] == 2
        assert len(body["documents"]) == len(body["run_ids"]) <= 2
        assert [d["run_id"] for d in body["documents"]] == body["run_ids"]
        digests.add(body["inputs_sha256"])
        seen += body["run_ids"]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == expected and pages == 3 and len(digests) == 1
    # the default page is bounded, and so is the largest one asked for
    assert len(api.get("/v1/calibration/inputs").json()["documents"]) == 5
    r = api.get("/v1/calibration/inputs", limit=101)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "limit"]
    r = api.get("/v1/calibration/inputs", cursor="../../etc")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "cursor"]


def test_client_reads_every_page(api, tmp_path):
    """The client follows next_cursor (against a live server: see test_client; here the
    same loop over the in-process app through its HTTP interface)."""
    from gpuplan.service.client import ServiceClient

    docs = [make_doc(seed=520 + i) for i in range(5)]
    for d in docs:
        assert api.upload(d).status_code == 201
    client = ServiceClient("http://testserver", api.tokens["ro"])
    client._http = api.client  # the in-process transport (same httpx API)
    client._http.headers["Authorization"] = f"Bearer {api.tokens['ro']}"
    got = client.calibration_inputs(page_size=2)
    assert got["run_ids"] == sorted(d["run_id"] for d in docs)
    assert [d["run_id"] for d in got["documents"]] == got["run_ids"]


# --- health -------------------------------------------------------------------------------------


def test_healthz_reports_a_database_that_cannot_be_written(db_url, make_api, request, tmp_path):
    import sqlite3

    from sqlalchemy.engine import make_url

    with make_api(db_url, sqlite_busy_timeout_s=0.5) as api:
        ok = api.client.get("/healthz")
        assert ok.status_code == 200 and ok.json()["database"] == "ok", ok.text
        if db_url.startswith("sqlite"):
            holder = sqlite3.connect(make_url(db_url).database, isolation_level=None)
            holder.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
            try:
                r = api.client.get("/healthz")
            finally:
                holder.execute("ROLLBACK")
                holder.close()
        else:
            import psycopg

            name = make_url(db_url).database
            pg = request.getfixturevalue("postgres_server")
            admin = make_url(pg.admin_url).set(drivername="postgresql")
            dsn = admin.render_as_string(hide_password=False)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
            api.client.app.state.db.dispose()  # new connections see the setting
            r = api.client.get("/healthz")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
            api.client.app.state.db.dispose()
        assert r.status_code == 503, r.text
        body = r.json()
        assert body["status"] == "degraded" and body["database"] == "unwritable"
        assert body["database_error"]
        again = api.client.get("/healthz")
        assert again.status_code == 200 and again.json()["database"] == "ok"


# --- security of the pages ------------------------------------------------------------------------

SECURITY = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


def _assert_security_headers(response) -> None:
    for key, value in SECURITY.items():
        assert response.headers.get(key) == value, (response.url, key)
    csp = response.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert "script-src" not in csp and "unsafe-inline" not in csp


def test_every_answer_carries_the_security_headers(api):
    answers = [
        api.client.get("/healthz"),
        api.client.get("/login"),
        api.client.get("/", follow_redirects=False),
        api.client.get("/v1/results"),  # 401
        api.get("/v1/results/nope"),  # 404
        api.get("/v1/results"),
        _raw_upload(api, "{"),  # 422
        api.client.delete("/v1/results"),  # 405
    ]
    assert [a.status_code for a in answers] == [200, 200, 303, 401, 404, 200, 422, 405]
    for a in answers:
        _assert_security_headers(a)


def _csrf(api) -> str:
    page = api.client.get("/login")
    assert page.status_code == 200
    field = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
    assert api.client.cookies.get("gpuplan_csrf") == field
    return field


def test_login_needs_the_form_token_and_refuses_cross_site_posts(api):
    token = api.tokens["ro"]
    # a cross-site form that knows a token: no form token, no cookie
    api.client.cookies.clear()
    r = api.client.post("/login", data={"token": token}, follow_redirects=False)
    assert r.status_code == 403 and "gpuplan_session" not in r.cookies
    assert "form token" in r.text
    # the right form token, but the browser says the post comes from another site
    for headers in ({"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}):
        csrf = _csrf(api)
        r = api.client.post(
            "/login", data={"token": token, "csrf": csrf}, headers=headers, follow_redirects=False
        )
        assert r.status_code == 403, headers
        assert "cross-site request" in r.text and "gpuplan_session" not in r.cookies
    # a wrong form token
    _csrf(api)
    r = api.client.post("/login", data={"token": token, "csrf": "x" * 43}, follow_redirects=False)
    assert r.status_code == 403
    # the real form, same origin: logged in
    csrf = _csrf(api)
    r = api.client.post(
        "/login",
        data={"token": token, "csrf": csrf},
        headers={"Sec-Fetch-Site": "same-origin", "Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == "/"
    assert api.client.get("/", follow_redirects=False).status_code == 200
    # logging out from another site is refused too
    r = api.client.post("/logout", headers={"Sec-Fetch-Site": "cross-site"}, follow_redirects=False)
    assert r.status_code == 403
    assert api.client.get("/", follow_redirects=False).status_code == 200


def test_api_docs_need_a_token_and_load_nothing_from_elsewhere(api):
    assert api.client.get("/redoc").status_code == 404
    r = api.client.get("/openapi.json")
    assert r.status_code == 401 and "read token" in r.json()["detail"]
    r = api.client.get("/docs", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login"
    schema = api.get("/openapi.json")
    assert schema.status_code == 200 and "/v1/results" in schema.json()["paths"]
    docs = api.get("/docs")
    assert docs.status_code == 200
    _assert_security_headers(docs)
    assert "<script" not in docs.text.lower()
    assert not re.search(r'(src|href)="(https?:)?//', docs.text)  # nothing off this server
    assert 'href="/openapi.json"' in docs.text and "/v1/calibration/inputs" in docs.text


def test_unexpected_body_types_are_422(api):
    for text in ("[]", "null", '"x"', "12"):
        r = _raw_upload(api, text)
        assert r.status_code == 422, (text, r.text)
    assert api.count_runs() == 0
