"""User memory: a bounded summary and typed facts per user and scope (``ts_user_memory``,
``ts_user_memory_facts``).

A returning user was a stranger once their session expired: nothing but the bounded resume state survived
a session, and it went with the session. A team that declares memory now keeps, per user and scope, a
summary within its token budget and the facts it declares, each with its value, the run it came from and
when it was last confirmed. Each memory row carries its version (every write checks it), its expiry (its
own retention, set by the team) and the writer's last failure.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ts_user_memory",
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("scope", sa.String(64), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("team", sa.String(128), nullable=False),
        sa.Column("team_version", sa.String(64), nullable=False),
        sa.Column("source_run_id", sa.String(128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("failure", sa.String(512), nullable=True),
        sa.Column("failed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "scope", name="pk_ts_user_memory"),
    )
    op.create_index("ix_ts_user_memory_expires_at", "ts_user_memory", ["expires_at"])
    op.create_table(
        "ts_user_memory_facts",
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("scope", sa.String(64), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("source_run_id", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("confirmed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "scope", "name", name="pk_ts_user_memory_facts"),
    )


def downgrade() -> None:
    op.drop_table("ts_user_memory_facts")
    op.drop_index("ix_ts_user_memory_expires_at", table_name="ts_user_memory")
    op.drop_table("ts_user_memory")
