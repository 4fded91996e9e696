"""Erasure requests and their per-store steps (the deletion coordinator's durable record).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _tz() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "ts_erasure_requests",
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(256), nullable=True),
        sa.Column("subject_key", sa.String(64), nullable=True),
        sa.Column("subject_hash", sa.String(64), nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("received_at", _tz(), nullable=False),
        sa.Column("due_at", _tz(), nullable=False),
        sa.Column("completed_at", _tz(), nullable=True),
        sa.Column("updated_at", _tz(), nullable=False),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("lease_until", _tz(), nullable=True),
        sa.Column("receipt", sa.JSON, nullable=True),
        sa.PrimaryKeyConstraint("request_id", name="pk_ts_erasure_requests"),
        sa.UniqueConstraint("user_id", name="uq_ts_erasure_requests_user_id"),
    )
    op.create_table(
        "ts_erasure_steps",
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("store", sa.String(32), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("counts", sa.JSON, nullable=False),
        sa.Column("detail", sa.Text, nullable=True),
        sa.Column("updated_at", _tz(), nullable=False),
        sa.Column("verified_at", _tz(), nullable=True),
        sa.PrimaryKeyConstraint("request_id", "store", name="pk_ts_erasure_steps"),
    )


def downgrade() -> None:
    op.drop_table("ts_erasure_steps")
    op.drop_table("ts_erasure_requests")
