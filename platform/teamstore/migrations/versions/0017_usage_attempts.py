"""The ledger keys a run's rows by the attempt at the run that made their calls (``ts_usage.attempt``).

A run checkpointed per turn whose worker died after the run had ended and been recorded, but before the save
that clears its checkpoint, is continued from its last checkpoint: its last turn runs again. Its ledger rows
were unique by run, agent, model and purpose, so the continuation's record, the repeated turn's calls and
its ``interruptions`` with it, was skipped as one already written. Each row now says which attempt made its
calls (0 the first, ``n`` the run's ``n``-th continuation), and the key holds it: a record sent again still
adds nothing, and the calls an attempt recorded are not counted again by the continuation that carries them.
Rows written before this revision are the first attempt's.

On SQLite the key can only change with the table rebuilt, and the ``session_costs`` view over it is dropped
and created again around the rebuild (0002's SQL). On Postgres the new key's index is built under the
table's lock: a ledger of millions of rows holds its writers for seconds.

Coming down folds each run's attempts into one row per agent, model and purpose again (their counts summed).

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import importlib

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_OLD_KEY = ("run_id", "agent", "model", "purpose")
_NEW_KEY = ("run_id", "attempt", "agent", "model", "purpose")
_SAME = " AND ".join(f"o.{c} = ts_usage.{c}" for c in _OLD_KEY)
# Each run's rows of one agent, model and purpose, summed into the first of them; then the others go.
_FOLD = f"""
UPDATE ts_usage SET
    calls = (SELECT SUM(o.calls) FROM ts_usage o WHERE {_SAME}),
    failed_calls = (SELECT SUM(o.failed_calls) FROM ts_usage o WHERE {_SAME}),
    input_tokens = (SELECT SUM(o.input_tokens) FROM ts_usage o WHERE {_SAME}),
    output_tokens = (SELECT SUM(o.output_tokens) FROM ts_usage o WHERE {_SAME}),
    interruptions = (SELECT MAX(o.interruptions) FROM ts_usage o WHERE {_SAME})
WHERE EXISTS (SELECT 1 FROM ts_usage o WHERE {_SAME} AND o.id <> ts_usage.id)
"""
_DROP_FOLDED = f"DELETE FROM ts_usage WHERE id > (SELECT MIN(o.id) FROM ts_usage o WHERE {_SAME})"


def _view() -> str:
    """0002's ``session_costs`` (SQLite keeps it; 0007 changed it on Postgres only), frozen there."""
    return str(importlib.import_module("teamstore.migrations.versions.0002_audit").SESSION_COSTS_VIEW)


def upgrade() -> None:
    attempt = sa.Column("attempt", sa.Integer, nullable=False, server_default="0")
    if op.get_bind().dialect.name == "postgresql":
        op.add_column("ts_usage", attempt)
        op.drop_constraint("uq_ts_usage_run", "ts_usage", type_="unique")
        op.create_unique_constraint("uq_ts_usage_run_attempt", "ts_usage", list(_NEW_KEY))
        return
    op.execute("DROP VIEW session_costs")
    with op.batch_alter_table("ts_usage", recreate="always") as batch:
        batch.add_column(attempt)
        batch.drop_constraint("uq_ts_usage_run", type_="unique")
        batch.create_unique_constraint("uq_ts_usage_run_attempt", list(_NEW_KEY))
    op.execute(_view())


def downgrade() -> None:
    op.execute(_FOLD)
    op.execute(_DROP_FOLDED)
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("uq_ts_usage_run_attempt", "ts_usage", type_="unique")
        op.create_unique_constraint("uq_ts_usage_run", "ts_usage", list(_OLD_KEY))
        op.drop_column("ts_usage", "attempt")
        return
    op.execute("DROP VIEW session_costs")
    with op.batch_alter_table("ts_usage", recreate="always") as batch:
        batch.drop_constraint("uq_ts_usage_run_attempt", type_="unique")
        batch.create_unique_constraint("uq_ts_usage_run", list(_OLD_KEY))
        batch.drop_column("attempt")
    op.execute(_view())
