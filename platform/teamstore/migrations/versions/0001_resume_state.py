"""Resume state: sessions, quarantine and user holds.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

ID = 256


def upgrade() -> None:
    op.create_table(
        "ts_sessions",
        sa.Column("user_id", sa.String(ID), nullable=False),
        sa.Column("session_id", sa.String(ID), nullable=False),
        sa.Column("team", sa.String(128), nullable=False),
        sa.Column("team_version", sa.String(64), nullable=False),
        sa.Column("schema_version", sa.Integer, nullable=False),
        sa.Column("agentchat_version", sa.String(32), nullable=False),
        sa.Column("fingerprints", sa.JSON, nullable=False),
        sa.Column("state", sa.Text, nullable=True),
        sa.Column("state_bytes", sa.Integer, nullable=False),
        sa.Column("row_version", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("user_id", "session_id", name="pk_ts_sessions"),
    )
    op.create_index("ix_ts_sessions_expires_at", "ts_sessions", ["expires_at"])
    op.create_table(
        "ts_quarantine",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.String(ID), nullable=False),
        sa.Column("session_id", sa.String(ID), nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("team", sa.String(128), nullable=False),
        sa.Column("team_version", sa.String(64), nullable=False),
        sa.Column("schema_version", sa.Integer, nullable=False),
        sa.Column("agentchat_version", sa.String(32), nullable=False),
        sa.Column("fingerprints", sa.JSON, nullable=False),
        sa.Column("state", sa.Text, nullable=True),
        sa.Column("state_bytes", sa.Integer, nullable=False),
        sa.Column("row_version", sa.BigInteger, nullable=False),
        sa.Column("quarantined_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_ts_quarantine_user", "ts_quarantine", ["user_id", "session_id"])
    op.create_table(
        "ts_user_holds",
        sa.Column("user_id", sa.String(ID), primary_key=True),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ts_user_holds")
    op.drop_index("ix_ts_quarantine_user", table_name="ts_quarantine")
    op.drop_table("ts_quarantine")
    op.drop_index("ix_ts_sessions_expires_at", table_name="ts_sessions")
    op.drop_table("ts_sessions")
