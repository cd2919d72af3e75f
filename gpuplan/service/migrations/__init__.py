"""Alembic migrations of the results service database (run by ``Database.migrate``)."""
