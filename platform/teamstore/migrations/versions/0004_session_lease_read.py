"""Postgres: read a session row with a snapshot taken after its advisory lock.

The load statement takes the session's lock, then reads the row. A read inside that statement would use
the statement's snapshot, taken before the lock: if the previous holder committed its save and released
the lock in between, the read would miss that save. A VOLATILE function takes a fresh snapshot for each
query it runs, so reading through one (called after the lock) sees every save committed before the lock
was granted. PL/pgSQL rather than SQL: it keeps the query's plan for the session instead of planning it
on every call. SQLite takes its lease with a write and needs nothing here.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

FUNCTION = "ts_locked_session"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"""
CREATE FUNCTION {FUNCTION}(p_locked boolean, p_user text, p_session text)
RETURNS TABLE (state text, row_version bigint, team text, team_version text, schema_version integer,
               agentchat_version text, fingerprints text, state_bytes integer, created_at timestamptz,
               updated_at timestamptz, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN QUERY
    SELECT s.state, s.row_version, s.team::text, s.team_version::text, s.schema_version,
           s.agentchat_version::text, s.fingerprints::text, s.state_bytes, s.created_at, s.updated_at,
           s.expires_at
    FROM ts_sessions AS s
    WHERE p_locked AND s.user_id = p_user AND s.session_id = p_session;
END
$$""")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}(boolean, text, text)")
