"""Index the session rows in the order ``sessions list`` gives them (``ix_ts_sessions_updated_at``: ``updated_at``,
``user_id``, ``session_id``).

Without ``--user``, the listing (most recently updated first) read and sorted every row of ``ts_sessions`` for a
page of 100: over a second at a million sessions on Postgres. It now reads the index backwards from its newest
end and stops after the page; the ids make the order total, so a page given ``--after`` starts exactly after the
row the previous one ended on (``EXPLAIN``: an index scan, no sort; 0.7 ms at a million sessions). A listing
for one user still finds that user's rows through the primary key and sorts them.

The cost is on the write path: a save and a checkpoint write move ``updated_at``, so neither is a Postgres HOT
update any more (each writes a new entry into every index of the row; before, only a save that also moved the
expiry did).

The index is built under the table's lock, as every migration's here is (the migrations of one upgrade run in one
transaction, which ``CREATE INDEX CONCURRENTLY`` cannot join): about 1.7 s per million sessions on Postgres,
during which saves and new sessions wait.

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_ts_sessions_updated_at", "ts_sessions", ["updated_at", "user_id", "session_id"])


def downgrade() -> None:
    op.drop_index("ix_ts_sessions_updated_at", table_name="ts_sessions")
