"""Fixtures of the results service tests.

``db_url`` is parametrised over SQLite (a file in tmp) and a real PostgreSQL server: a
private cluster started once per session from the installed server binaries (``initdb`` +
``pg_ctl``; scripts/setup.sh --test installs Debian's ``postgresql``), or the server named
by ``GPUPLAN_TEST_POSTGRES_URL``. Each test gets a fresh database. A missing PostgreSQL is
a test failure, not a skip: CI must exercise both backends.
"""

from __future__ import annotations

import pytest

from gpuplan.service.testing import TempPostgres


@pytest.fixture(scope="session")
def postgres_server():
    try:
        with TempPostgres() as pg:
            yield pg
    except Exception as exc:  # EnvironmentProblem or a failing initdb
        pytest.fail(f"PostgreSQL for the service tests: {exc}")


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'service.db'}"
        return
    pg = request.getfixturevalue("postgres_server")
    url = pg.new_database()
    yield url
    pg.drop_database(url)


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'service.db'}"


class Api:
    """An in-process app (``TestClient``) with tokens of each kind."""

    def __init__(self, client, db, tokens: dict[str, str]) -> None:
        self.client = client
        self.db = db
        self.tokens = tokens

    def headers(self, which: str = "rw") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[which]}"}

    def upload(self, doc, which: str = "rw", **params):
        import json

        return self.client.post(
            "/v1/results",
            content=json.dumps(doc),
            headers=self.headers(which),
            params=params or None,
        )

    def get(self, path: str, which: str = "ro", **params):
        return self.client.get(path, headers=self.headers(which), params=params or None)

    def count_runs(self) -> int:
        from sqlalchemy import func, select

        from gpuplan.service.db import RunRow

        with self.db.read() as s:
            return s.scalar(select(func.count()).select_from(RunRow))


MAX_UPLOAD_BYTES = 256 * 1024


def _make_api(url: str, **settings):
    from fastapi.testclient import TestClient

    from gpuplan.service.app import ServiceSettings, create_app
    from gpuplan.service.db import Database
    from gpuplan.service.tokens import create_token

    db = Database(url)
    db.migrate()
    tokens = {
        "rw": create_token(db, team="vision", scopes=("read", "write"))[0],
        "ro": create_token(db, team="vision", scopes=("read",))[0],
        "admin": create_token(db, team="platform", scopes=("admin",))[0],
        "nlp": create_token(db, team="nlp", scopes=("read", "write"))[0],
    }
    options = {"recalibrate": "off", "max_upload_bytes": MAX_UPLOAD_BYTES, **settings}
    app = create_app(ServiceSettings(database_url=url, **options))
    return app, db, tokens, TestClient


@pytest.fixture
def api(db_url):
    app, db, tokens, test_client = _make_api(db_url)
    with test_client(app) as client:
        yield Api(client, db, tokens)
    db.dispose()


@pytest.fixture
def make_api():
    """Build an :class:`Api` with custom settings: ``with make_api(url, **settings) as api``."""
    from contextlib import contextmanager

    @contextmanager
    def factory(url: str, **settings):
        app, db, tokens, test_client = _make_api(url, **settings)
        with test_client(app) as client:
            yield Api(client, db, tokens)
        db.dispose()

    return factory
