"""Alembic revision files, one per schema change; never edit one that was released."""
