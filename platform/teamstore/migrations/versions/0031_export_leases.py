"""Give each export record a lease (``ts_export_requests.owner``, ``lease_until``), so that an export killed outright
(SIGKILL, a crash, a host lost) is told from one under way.

A running export renews its lease on the database's clock; a record still ``running`` whose lease has passed was
abandoned, and the next export closes it as ``failed`` (:func:`teamstore.export.requests.close_abandoned`). A record
left ``running`` before this revision has no owner: its lease is set to end a day after it began, the bound the
retention sweep then gave such a record.

Revision ID: 0031
Revises: 0030
"""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

# The table as this revision knows it (frozen: a migration must not change when the code does).
_EXPORTS = sa.table("ts_export_requests", sa.column("export_id", sa.String), sa.column("status", sa.String),
                    sa.column("started_at", sa.DateTime(timezone=True)),
                    sa.column("lease_until", sa.DateTime(timezone=True)))
_RUNS = timedelta(days=1)


def upgrade() -> None:
    with op.batch_alter_table("ts_export_requests") as table:
        table.add_column(sa.Column("owner", sa.String(128), nullable=True))
        table.add_column(sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))
    bind = op.get_bind()
    running = bind.execute(sa.select(_EXPORTS.c.export_id, _EXPORTS.c.started_at)
                           .where(_EXPORTS.c.status == "running")).all()
    if running:  # few: one an export killed outright
        bind.execute(_EXPORTS.update().where(_EXPORTS.c.export_id == sa.bindparam("b_export_id"))
                     .values(lease_until=sa.bindparam("b_lease_until")),
                     [{"b_export_id": export_id, "b_lease_until": started + _RUNS} for export_id, started in running])


def downgrade() -> None:
    with op.batch_alter_table("ts_export_requests") as table:
        table.drop_column("lease_until")
        table.drop_column("owner")
