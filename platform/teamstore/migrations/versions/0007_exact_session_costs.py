"""Postgres: the session_costs view's ``cost`` in exact decimals (``numeric``) instead of floating point.

The prices are stored as floating-point numbers, so the view multiplied and summed in floating point: a
BI tool summing costs got ``0.30000000000000004`` where it expected ``0.3``. Each price is now cast to
``numeric`` first (PostgreSQL casts ``0.15`` stored as a double to exactly ``0.15``), so every product
and sum is exact. ``CREATE OR REPLACE VIEW`` cannot change a column's type, so the view is dropped and
created again: without CASCADE, so a view of your own built on it stops the upgrade (drop it, upgrade,
create it again) instead of vanishing. SQLite keeps its REAL arithmetic: it has no exact type.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# The view's SQL is frozen here, as in 0002: a migration must not change when the code does.
_SELECT = """
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
    {cost} AS cost,
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
EXACT = _SELECT.format(
    cost="SUM((u.input_tokens * p.input_per_million::numeric + u.output_tokens * p.output_per_million::numeric)"
    " / 1000000)"
)
FLOATING = _SELECT.format(  # 0002's
    cost="SUM((u.input_tokens * p.input_per_million + u.output_tokens * p.output_per_million) / 1000000.0)"
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP VIEW session_costs")
    op.execute("CREATE VIEW session_costs AS" + EXACT)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP VIEW session_costs")
    op.execute("CREATE VIEW session_costs AS" + FLOATING)
