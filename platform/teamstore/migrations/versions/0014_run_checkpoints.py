"""Per-turn checkpoints of a run in flight, kept in the session row; interrupted runs told apart in the ledger.

A team whose manifest turns checkpoints on makes each completed agent turn durable before the next one
starts: the run's checkpoint (every participant's state, the manager's thread for this run, the run id, the
task, the turn reached and the model calls paid so far) is written into the session's own row, in one
statement under its lease and row version, and cleared by the save that follows the run. In the row,
not a table of its own, so the load that takes the lease reads it too, erasure and the TTL sweep reach it
with the row, and a stale worker's write cannot pass the row version. ``ts_quarantine`` keeps a refused
checkpoint beside the state. ``ts_usage.interruptions`` counts how many times a run was continued after
its worker died, so cost reports can tell such runs apart.

On Postgres the load reads the row through ``ts_locked_session`` (migration 0004): it is made again with
the two new columns, and the checkpoint is compressed with lz4 like the state (migration 0006).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

FUNCTION = "ts_locked_session"
HAS_LZ4 = "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
_COLUMNS = """state text, row_version bigint, team text, team_version text, schema_version integer,
               agentchat_version text, fingerprints text, state_bytes integer, created_at timestamptz,
               updated_at timestamptz, expires_at timestamptz"""
_SELECTED = """s.state, s.row_version, s.team::text, s.team_version::text, s.schema_version,
           s.agentchat_version::text, s.fingerprints::text, s.state_bytes, s.created_at, s.updated_at,
           s.expires_at"""


def _locked_session(columns: str, selected: str) -> str:
    return f"""
CREATE FUNCTION {FUNCTION}(p_locked boolean, p_user text, p_session text)
RETURNS TABLE ({columns})
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN QUERY
    SELECT {selected}
    FROM ts_sessions AS s
    WHERE p_locked AND s.user_id = p_user AND s.session_id = p_session;
END
$$"""


def upgrade() -> None:
    # Plain ADD COLUMN on both databases (SQLite takes one with a constant default): no table is rebuilt,
    # so the session_costs view over ts_usage stays as it is.
    op.add_column("ts_sessions", sa.Column("checkpoint", sa.Text, nullable=True))
    op.add_column("ts_sessions", sa.Column("checkpoint_bytes", sa.Integer, nullable=False, server_default="0"))
    op.add_column("ts_quarantine", sa.Column("checkpoint", sa.Text, nullable=True))
    op.add_column("ts_usage", sa.Column("interruptions", sa.Integer, nullable=False, server_default="0"))
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}(boolean, text, text)")
    op.execute(_locked_session(_COLUMNS + ", checkpoint text, checkpoint_bytes integer",
                               _SELECTED + ", s.checkpoint, s.checkpoint_bytes"))
    if bind.execute(sa.text(HAS_LZ4)).scalar():
        op.execute("ALTER TABLE ts_sessions ALTER COLUMN checkpoint SET COMPRESSION lz4")


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}(boolean, text, text)")
        op.execute(_locked_session(_COLUMNS, _SELECTED))
    # ALTER TABLE .. DROP COLUMN (SQLite 3.35+), again without rebuilding a table under the view.
    op.drop_column("ts_usage", "interruptions")
    op.drop_column("ts_quarantine", "checkpoint")
    op.drop_column("ts_sessions", "checkpoint_bytes")
    op.drop_column("ts_sessions", "checkpoint")
