"""Initial schema: tokens, runs, artifacts.

Revision ID: 0001_initial
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_initial"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("token_id", sa.String(32), nullable=False, unique=True),
        sa.Column("team", sa.String(100), nullable=False),
        sa.Column("scopes", sa.String(100), nullable=False),
        sa.Column("salt", sa.String(64), nullable=False),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("description", sa.String(200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_tokens_team", "tokens", ["team"])
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), nullable=False, unique=True),
        sa.Column("content_sha256", sa.String(64), nullable=False),
        sa.Column("team", sa.String(100), nullable=False),
        sa.Column("token_id", sa.String(32), nullable=False),
        sa.Column("uploaded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.String(64), nullable=True),
        sa.Column("machine_id", sa.String(200), nullable=True),
        sa.Column("device_id", sa.String(100), nullable=False),
        sa.Column("device_name", sa.String(200), nullable=True),
        sa.Column("num_accelerators", sa.Integer, nullable=False),
        sa.Column("uploaded_schema_version", sa.Integer, nullable=False),
        sa.Column("size_bytes", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("flags", sa.Text, nullable=False),
        sa.Column("hostname_kept", sa.Boolean, nullable=False),
        sa.Column("approved_by", sa.String(32), nullable=True),
        sa.Column("approved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("document", sa.Text, nullable=False),
    )
    op.create_index("ix_runs_team", "runs", ["team"])
    op.create_index("ix_runs_machine_id", "runs", ["machine_id"])
    op.create_index("ix_runs_device_id", "runs", ["device_id"])
    op.create_index("ix_runs_status", "runs", ["status"])
    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("inputs_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("run_ids", sa.Text, nullable=False),
        sa.Column("num_runs", sa.Integer, nullable=False),
        sa.Column("gpuplan_version", sa.String(40), nullable=False),
        sa.Column("duration_s", sa.Float, nullable=False),
        sa.Column("artifact", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("artifacts")
    op.drop_table("runs")
    op.drop_table("tokens")
