"""Postgres: count a user's live sessions in a function, for the per-user session bound.

The load statement checks ``TEAMSTORE_MAX_SESSIONS_PER_USER`` for a session without a live row only:
the count sits in a branch of a CASE a resume never reaches. Written as a subquery, it cost every resume
all the same: the executor sets up a subquery's plan each time the statement runs, reached or not,
~20 us of a ~140 us load (median of 3,800 interleaved loads). A function call costs nothing until it is
made. PL/pgSQL rather than SQL, which the planner would inline back into a subquery; STABLE, so it reads
with the calling statement's snapshot. SQLite prepares its statement once and skips what it does not
reach: it needs nothing here.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

FUNCTION = "ts_live_sessions"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"""
CREATE FUNCTION {FUNCTION}(p_user text, p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT count(*) FROM ts_sessions WHERE user_id = p_user AND expires_at > p_now);
END
$$""")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}(text, timestamptz)")
