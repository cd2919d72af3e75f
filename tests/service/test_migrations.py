"""The Alembic migrations: shipped with the package, idempotent, and equal to the models."""

from __future__ import annotations

from importlib import resources

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from gpuplan.errors import EnvironmentProblem, InputError
from gpuplan.service.db import HEAD_REVISION, Base, Database, normalize_url, redact_url


def test_migrations_ship_as_package_data_and_head_is_known():
    root = resources.files("gpuplan.service") / "migrations"
    assert (root / "env.py").is_file() and (root / "script.py.mako").is_file()
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(root))
    script = ScriptDirectory.from_config(cfg)
    assert script.get_heads() == [HEAD_REVISION]


def test_migrate_is_idempotent_and_the_schema_equals_the_models(db_url):
    db = Database(db_url)
    assert db.migrate() == HEAD_REVISION
    assert db.migrate() == HEAD_REVISION  # a second start changes nothing
    with db.write_engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) >= {
            "tokens",
            "runs",
            "artifacts",
            "alembic_version",
        }
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []  # models and migrations describe the same tables, columns and indexes
    db.dispose()


def test_database_urls():
    assert normalize_url("postgresql://u:pw@h:5432/d").startswith(
        "postgresql+psycopg://u:pw@h:5432/d"
    )
    assert redact_url("postgresql+psycopg://u:pw@h/d") == "postgresql+psycopg://u:***@h/d"
    with pytest.raises(InputError, match="unsupported database 'mysql'"):
        normalize_url("mysql://u@h/d")
    with pytest.raises(InputError, match="in-memory SQLite"):
        Database("sqlite://")


def test_unreachable_database_is_one_clear_error():
    from gpuplan.service.testing import free_port

    db = Database(f"postgresql://nobody:secret@127.0.0.1:{free_port()}/x")
    with pytest.raises(
        EnvironmentProblem, match=r"cannot open the database .*nobody:\*\*\*@"
    ) as err:
        db.migrate()
    assert "secret" not in err.value.one_line()
