"""Never hand out a quarantine id twice on SQLite (``ts_quarantine`` rebuilt with ``AUTOINCREMENT``).

``teamstore sessions restore N`` names a quarantined state by its id. On SQLite the id was the table's rowid,
which takes the highest id in the table plus one: once the newest rows were restored, purged or erased, the next
state set aside took an id handed out before, and a restore run from old notes put another session's state back.
With ``AUTOINCREMENT`` SQLite keeps the highest id ever handed out (``sqlite_sequence``) and counts on from it.

The table is rebuilt with its rows and its index. Ids handed out before this revision are not recorded anywhere,
so the count goes on from the highest id still in the table (the copy sets it). Postgres needs nothing: the id
comes from a sequence, which never hands a value out twice.

Triggers of the operator's own on the table are made again on the table rebuilt; a view of the operator's own
over it stops the upgrade (SQLite checks views as the rebuilt table takes its name): drop it, upgrade, create it
again. Coming down rebuilds the table without ``AUTOINCREMENT`` (its rows kept; SQLite's count of it goes with it).

Revision ID: 0025
Revises: 0024
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def _rebuild(*, autoincrement: bool) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    # An operator's triggers on the table would go with it, unsaid: made again on the table rebuilt.
    triggers = bind.execute(sa.text("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = "
                                    "'ts_quarantine' AND sql IS NOT NULL ORDER BY name")).scalars().all()
    with op.batch_alter_table("ts_quarantine", recreate="always",
                              table_kwargs={"sqlite_autoincrement": autoincrement}):
        pass  # the rebuild itself is the change: the table made again with (or without) AUTOINCREMENT
    for trigger in triggers:
        op.execute(trigger)


def upgrade() -> None:
    _rebuild(autoincrement=True)


def downgrade() -> None:
    _rebuild(autoincrement=False)
