"""Alembic environment: migrates the connection handed over by ``Database.migrate``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from gpuplan.service.db import Base

# An arbitrary constant: the key of the PostgreSQL advisory lock that serialises concurrent
# migrations (several server processes starting at once against one database).
_MIGRATION_LOCK_KEY = 4_215_906_117


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK_KEY})")
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(context.config.get_main_option("sqlalchemy.url"))
    with engine.connect() as conn:
        _run(conn)
        conn.commit()


if context.is_offline_mode():
    raise SystemExit("offline SQL generation is not supported: run 'gpuplan serve' to migrate")
run_migrations_online()
