"""The compliance desk's records: who asked for an erasure and who ran each attempt, the one extension of
its due date, and a record of every export of a user (``ts_export_requests``).

``ts_erasure_requests`` gains ``requested_by`` and the extension's columns (its new due date, by how much,
why, when, by whom); ``ts_erasure_attempts`` holds one row per run of a request (a rerun is a second
attempt) with its operator; ``ts_export_requests`` one row per ``teamstore export``, holding the
pseudonymous subject key (cleared by the user's erasure), never the raw user id.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

PERSON = 200
EXTENSION = (
    ("requested_by", sa.String(PERSON)),
    ("extended_due_at", sa.DateTime(timezone=True)),
    ("extended_by", sa.String(16)),
    ("extension_reason", sa.Text()),
    ("extended_at", sa.DateTime(timezone=True)),
    ("extension_operator", sa.String(PERSON)),
)


def _tz() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("ts_erasure_requests") as batch:
        for name, kind in EXTENSION:
            batch.add_column(sa.Column(name, kind, nullable=True))
    op.create_table(
        "ts_erasure_attempts",
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("operator", sa.String(PERSON), nullable=False),
        sa.Column("started_at", _tz(), nullable=False),
        sa.Column("ended_at", _tz(), nullable=True),
        sa.Column("status", sa.String(32), nullable=True),
        sa.PrimaryKeyConstraint("request_id", "attempt", name="pk_ts_erasure_attempts"),
    )
    op.create_table(
        "ts_export_requests",
        sa.Column("export_id", sa.String(64), nullable=False),
        sa.Column("subject_key", sa.String(64), nullable=True),
        sa.Column("requested_by", sa.String(PERSON), nullable=True),
        sa.Column("operator", sa.String(PERSON), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("started_at", _tz(), nullable=False),
        sa.Column("finished_at", _tz(), nullable=True),
        sa.Column("manifest", sa.JSON(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("export_id", name="pk_ts_export_requests"),
    )
    op.create_index("ix_ts_export_requests_subject", "ts_export_requests", ["subject_key"])


def downgrade() -> None:
    op.drop_index("ix_ts_export_requests_subject", table_name="ts_export_requests")
    op.drop_table("ts_export_requests")
    op.drop_table("ts_erasure_attempts")
    with op.batch_alter_table("ts_erasure_requests") as batch:
        for name, _kind in reversed(EXTENSION):
            batch.drop_column(name)
