"""Database of the results service: tables, engines, transactions, migrations.

SQLAlchemy 2 ORM models; the schema itself is created and changed only by the Alembic
migrations shipped in :mod:`gpuplan.service.migrations` (run on start-up), never by
``metadata.create_all``, so a team's PostgreSQL database and a laptop's SQLite file always
have the schema that the code expects.

Every write happens inside one transaction (:meth:`Database.write`): a server killed in the
middle of a request leaves either the whole row or nothing. On SQLite, write transactions
start with ``BEGIN IMMEDIATE`` so that two concurrent writers queue on the database lock
(``busy_timeout``) instead of deadlocking when a reader upgrades to a writer (SQLite
documentation, "Transaction", section 2.2); readers use a second engine with deferred
transactions and WAL journaling, so reads never wait for writes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Boolean,
    DateTime,
    Engine,
    Float,
    Integer,
    String,
    Text,
    create_engine,
    event,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from gpuplan.errors import EnvironmentProblem, InputError

# Alembic revision the code expects (the newest file under migrations/versions/).
HEAD_REVISION = "0001_initial"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def iso_utc(value: dt.datetime | None) -> str | None:
    """ISO 8601 in UTC with a ``Z`` (SQLite hands back naive datetimes: they are UTC)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")


class Base(DeclarativeBase):
    pass


class TokenRow(Base):
    """An API token. Only a salted hash of its secret is stored (see tokens.py)."""

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    token_id: Mapped[str] = mapped_column(String(32), unique=True, nullable=False)
    team: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    scopes: Mapped[str] = mapped_column(String(100), nullable=False)
    salt: Mapped[str] = mapped_column(String(64), nullable=False)
    secret_sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    description: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class RunRow(Base):
    """One uploaded probe run (the sanitised, upgraded result document and its metadata)."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    content_sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    team: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    token_id: Mapped[str] = mapped_column(String(32), nullable=False)
    uploaded_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    started_at: Mapped[str | None] = mapped_column(String(64), nullable=True)
    machine_id: Mapped[str | None] = mapped_column(String(200), nullable=True, index=True)
    device_id: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    device_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    num_accelerators: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    uploaded_schema_version: Mapped[int] = mapped_column(Integer, nullable=False)
    size_bytes: Mapped[int] = mapped_column(Integer, nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False, index=True)
    flags: Mapped[str] = mapped_column(Text, nullable=False, default="[]")
    hostname_kept: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    approved_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
    approved_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    document: Mapped[str] = mapped_column(Text, nullable=False)


class ArtifactRow(Base):
    """A calibration artifact computed by the server from the accepted runs."""

    __tablename__ = "artifacts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    inputs_sha256: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    run_ids: Mapped[str] = mapped_column(Text, nullable=False)
    num_runs: Mapped[int] = mapped_column(Integer, nullable=False)
    gpuplan_version: Mapped[str] = mapped_column(String(40), nullable=False)
    duration_s: Mapped[float] = mapped_column(Float, nullable=False)
    artifact: Mapped[str] = mapped_column(Text, nullable=False)


def normalize_url(url: str) -> str:
    """Accept ``postgresql://`` (the usual spelling) and route it to psycopg 3.

    SQLAlchemy's default PostgreSQL driver is psycopg2, which gpuplan does not depend on.
    """
    url = url.strip()
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise InputError(
            f"not a database URL: {url!r}",
            hint="use sqlite:///path/to/file.db or postgresql://user@host:5432/dbname",
        ) from None
    backend = parsed.get_backend_name()
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif backend not in ("sqlite", "postgresql"):
        raise InputError(
            f"unsupported database {backend!r}",
            hint="use sqlite:///path/to/file.db or postgresql://user@host:5432/dbname",
        )
    return parsed.render_as_string(hide_password=False)


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (for logs and messages)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<invalid url>"


class Database:
    """Engines and transaction helpers for one database URL.

    Parameters
    ----------
    url:
        ``sqlite:///path`` or ``postgresql://...`` (normalised by :func:`normalize_url`).
    sqlite_busy_timeout_s:
        how long an SQLite writer waits for the lock before the request fails with 503.
    pool_timeout_s:
        how long a request waits for a pooled connection before failing with 503.
    """

    def __init__(
        self, url: str, *, sqlite_busy_timeout_s: float = 15.0, pool_timeout_s: float = 10.0
    ) -> None:
        self.url = normalize_url(url)
        self.is_sqlite = make_url(self.url).get_backend_name() == "sqlite"
        self._busy_timeout_ms = int(sqlite_busy_timeout_s * 1000)
        if self.is_sqlite:
            database = make_url(self.url).database
            if not database or database == ":memory:":
                raise InputError(
                    "an in-memory SQLite database cannot be shared between requests",
                    hint="use sqlite:///path/to/file.db",
                )
            Path(database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
            self.write_engine = self._sqlite_engine(sqlite_busy_timeout_s, immediate=True)
            self.read_engine = self._sqlite_engine(sqlite_busy_timeout_s, immediate=False)
        else:
            self.write_engine = create_engine(
                self.url,
                pool_pre_ping=True,
                pool_size=10,
                max_overflow=20,
                pool_timeout=pool_timeout_s,
                connect_args={"connect_timeout": 5},
            )
            self.read_engine = self.write_engine
        self._write_sessions = sessionmaker(self.write_engine, expire_on_commit=False)
        self._read_sessions = sessionmaker(self.read_engine, expire_on_commit=False)

    def _sqlite_engine(self, busy_timeout_s: float, *, immediate: bool) -> Engine:
        engine = create_engine(
            self.url,
            connect_args={"check_same_thread": False, "timeout": busy_timeout_s},
            pool_size=20 if immediate else 10,
            max_overflow=20,
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Take transaction control away from the sqlite3 module: we issue BEGIN ourselves.
            dbapi_connection.isolation_level = None
            cur = dbapi_connection.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")  # a committed upload survives a crash
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One write transaction: committed when the block ends, rolled back on any error."""
        with self._write_sessions() as session, session.begin():
            yield session

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reads; closing it ends (rolls back) its transaction, and the objects
        it loaded stay usable, detached."""
        with self._read_sessions() as session:
            yield session

    def migrate(self) -> str:
        """Bring the schema to the newest migration; returns the revision now in place.

        Raises
        ------
        EnvironmentProblem
            when the database cannot be reached.
        """
        from alembic import command
        from alembic.config import Config
        from sqlalchemy.exc import DBAPIError

        cfg = Config()
        cfg.set_main_option(
            "script_location", str(resources.files("gpuplan.service") / "migrations")
        )
        cfg.set_main_option("sqlalchemy.url", self.url.replace("%", "%%"))
        try:
            with self.write_engine.connect() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
                conn.commit()
        except DBAPIError as exc:
            raise EnvironmentProblem(
                f"cannot open the database {redact_url(self.url)}: {_first_line(exc.orig or exc)}",
                hint="check --database-url, that the server runs and that the user may connect",
            ) from None
        return self.current_revision()

    def current_revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext

        with self.read_engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    def ping(self) -> None:
        """Raise if the database cannot answer a trivial query."""
        from sqlalchemy import text

        with self.read_engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def check_writable(self, timeout_s: float = 2.0) -> None:
        """Raise an :class:`sqlalchemy.exc.OperationalError` unless the database accepts a
        write: an ``UPDATE`` of the schema version row in a transaction that is rolled back,
        waiting at most ``timeout_s`` for locks (``/healthz``: reachable is not enough when
        the file is read-only, the disk is a read-only mount or another process holds the
        write lock)."""
        from sqlalchemy import text
        from sqlalchemy.exc import OperationalError

        ms = max(1, int(timeout_s * 1000))
        update = "UPDATE alembic_version SET version_num = version_num"
        if not self.is_sqlite:
            with self.write_engine.connect() as conn:
                conn.execute(text(f"SET LOCAL lock_timeout = {ms}"))
                conn.execute(text(f"SET LOCAL statement_timeout = {ms}"))
                conn.execute(text(update))
                conn.rollback()
            return
        import sqlite3

        # the raw connection: the engine's "begin" hook would take the lock with the long
        # busy timeout before a PRAGMA could shorten it
        raw = self.write_engine.raw_connection()
        try:
            cur = raw.cursor()
            try:
                cur.execute(f"PRAGMA busy_timeout={ms}")
                cur.execute("BEGIN IMMEDIATE")
                try:
                    cur.execute(update)
                finally:
                    cur.execute("ROLLBACK")
            except sqlite3.Error as exc:
                raise OperationalError(update, None, exc) from None
            finally:
                cur.execute(f"PRAGMA busy_timeout={self._busy_timeout_ms}")
                cur.close()
        finally:
            raw.close()

    def dispose(self) -> None:
        self.write_engine.dispose()
        if self.read_engine is not self.write_engine:
            self.read_engine.dispose()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
