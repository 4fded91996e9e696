"""Audit trail: subjects, usage ledger, transcript outbox, prices and the session_costs view.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

ID = 256
KEY = 64

# The view's SQL is frozen here (a migration must not change when the code does); it matches
# teamstore.audit.schema.SESSION_COSTS_VIEW at the time of writing.
SESSION_COSTS_VIEW = """
CREATE VIEW session_costs AS
SELECT
    u.session_key,
    u.subject_key,
    u.team,
    u.team_version,
    COUNT(DISTINCT u.run_id) AS runs,
    COUNT(DISTINCT CASE WHEN u.ended_by_limit THEN u.run_id END) AS runs_ended_by_limit,
    SUM(u.calls) AS model_calls,
    SUM(u.input_tokens) AS input_tokens,
    SUM(u.output_tokens) AS output_tokens,
    SUM((u.input_tokens * p.input_per_million + u.output_tokens * p.output_per_million) / 1000000.0) AS cost,
    SUM(CASE WHEN p.model IS NULL THEN u.input_tokens + u.output_tokens ELSE 0 END) AS unpriced_tokens,
    MAX(p.version) AS price_version,
    MIN(u.started_at) AS first_run_at,
    MAX(u.finished_at) AS last_run_at
FROM ts_usage u
LEFT JOIN ts_prices p
    ON p.model = u.model
    AND p.effective_from <= u.day
    AND (p.effective_to IS NULL OR u.day < p.effective_to)
    AND p.version = (SELECT MAX(version) FROM ts_prices)
GROUP BY u.session_key, u.subject_key, u.team, u.team_version
"""


def _tz() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "ts_subjects",
        sa.Column("user_id", sa.String(ID), nullable=False),
        sa.Column("subject_key", sa.String(KEY), nullable=False),
        sa.Column("created_at", _tz(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name="pk_ts_subjects"),
        sa.UniqueConstraint("subject_key", name="uq_ts_subjects_subject_key"),
    )
    op.create_table(
        "ts_usage",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("agent", sa.String(128), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("purpose", sa.String(32), nullable=False),
        sa.Column("calls", sa.Integer, nullable=False),
        sa.Column("failed_calls", sa.Integer, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("team", sa.String(128), nullable=False),
        sa.Column("team_version", sa.String(64), nullable=False),
        sa.Column("session_key", sa.String(KEY), nullable=False),
        sa.Column("subject_key", sa.String(KEY), nullable=True),
        sa.Column("stop_reason", sa.String(256), nullable=True),
        sa.Column("ended_by_limit", sa.Boolean, nullable=False),
        sa.Column("run_failed", sa.Boolean, nullable=False),
        sa.Column("started_at", _tz(), nullable=False),
        sa.Column("finished_at", _tz(), nullable=False),
        sa.Column("day", sa.Date, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_ts_usage"),
        sa.UniqueConstraint("run_id", "agent", "model", "purpose", name="uq_ts_usage_run"),
    )
    op.create_index("ix_ts_usage_session", "ts_usage", ["session_key"])
    op.create_index("ix_ts_usage_subject", "ts_usage", ["subject_key"])
    op.create_index("ix_ts_usage_team_day", "ts_usage", ["team", "team_version", "day"])
    op.create_index("ix_ts_usage_day", "ts_usage", ["day"])
    op.create_index("ix_ts_usage_finished_at", "ts_usage", ["finished_at"])
    op.create_table(
        "ts_transcript_outbox",
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("object_key", sa.String(512), nullable=False),
        sa.Column("subject_key", sa.String(KEY), nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column("created_at", _tz(), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("last_error", sa.String(512), nullable=True),
        sa.PrimaryKeyConstraint("run_id", name="pk_ts_transcript_outbox"),
    )
    op.create_index("ix_ts_transcript_outbox_subject", "ts_transcript_outbox", ["subject_key"])
    op.create_table(
        "ts_prices",
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("effective_from", sa.Date, nullable=False),
        sa.Column("effective_to", sa.Date, nullable=True),
        sa.Column("input_per_million", sa.Float, nullable=False),
        sa.Column("output_per_million", sa.Float, nullable=False),
        sa.Column("currency", sa.String(8), nullable=False),
        sa.PrimaryKeyConstraint("version", "model", "effective_from", name="pk_ts_prices"),
    )
    op.execute(SESSION_COSTS_VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS session_costs")
    op.drop_table("ts_prices")
    op.drop_index("ix_ts_transcript_outbox_subject", table_name="ts_transcript_outbox")
    op.drop_table("ts_transcript_outbox")
    for name in ("finished_at", "day", "team_day", "subject", "session"):
        op.drop_index(f"ix_ts_usage_{name}", table_name="ts_usage")
    op.drop_table("ts_usage")
    op.drop_table("ts_subjects")
