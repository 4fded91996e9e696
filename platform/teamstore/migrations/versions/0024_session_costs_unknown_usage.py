"""The ``session_costs`` view counts each session's calls of unknown usage (``unknown_usage_calls``).

A call that failed, was cancelled waiting for its answer, or was answered without its usage counts in the ledger
as a call with no tokens (``ts_usage.failed_calls`` counts it apart). The view summed ``calls`` and tokens only,
so a session of such calls on a priced model showed a cost of 0 and nothing said why; ``teamstore cost`` says
``X + unknown``. The view now ends with ``unknown_usage_calls``, the sum of ``failed_calls``; its other columns and
their meaning are unchanged (``cost`` still prices the tokens recorded).

Postgres adds the column in place (``CREATE OR REPLACE VIEW`` may add columns at the end), so a view of your own
built on ``session_costs`` keeps working. SQLite cannot change a view: it is dropped and created again.

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

# Frozen here, as in 0002 and 0007: a migration must not change when the code does.
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
    MAX(u.finished_at) AS last_run_at{unknown}
FROM ts_usage u
LEFT JOIN ts_prices p
    ON p.model = u.model
    AND p.effective_from <= u.day
    AND (p.effective_to IS NULL OR u.day < p.effective_to)
    AND p.version = (SELECT MAX(version) FROM ts_prices)
GROUP BY u.session_key, u.subject_key, u.team, u.team_version
"""
_EXACT = ("SUM((u.input_tokens * p.input_per_million::numeric + u.output_tokens * p.output_per_million::numeric)"
          " / 1000000)")  # 0007's, Postgres
_FLOATING = "SUM((u.input_tokens * p.input_per_million + u.output_tokens * p.output_per_million) / 1000000.0)"
_UNKNOWN = ",\n    SUM(u.failed_calls) AS unknown_usage_calls"


def _view(*, postgres: bool, unknown: bool) -> str:
    return _SELECT.format(cost=_EXACT if postgres else _FLOATING, unknown=_UNKNOWN if unknown else "")


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute("CREATE OR REPLACE VIEW session_costs AS" + _view(postgres=True, unknown=True))
        return
    op.execute("DROP VIEW session_costs")
    op.execute("CREATE VIEW session_costs AS" + _view(postgres=False, unknown=True))


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.execute("DROP VIEW session_costs")  # neither database takes a view's column away in place
    op.execute("CREATE VIEW session_costs AS" + _view(postgres=postgres, unknown=False))
