"""Record how the database's sessions are leased, so two kinds of worker never share it.

On Postgres a session is leased either with an advisory lock on a held connection (``lock``, the
default) or in its row (``row``, for fleets that keep more sessions open than the server has
connections for). Neither kind of worker sees the other's leases, so the database records which kind
it serves and a store of the other kind refuses to start. Existing Postgres databases were all
``lock``; SQLite is always ``row``. ``teamstore db lease-mode`` switches it while no session is open.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "ts_store_settings",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("value", sa.String(64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_ts_store_settings"),
    )
    mode = "lock" if op.get_bind().dialect.name == "postgresql" else "row"
    op.bulk_insert(table, [{"name": "session_lease", "value": mode, "updated_at": datetime.now(UTC)}])


def downgrade() -> None:
    op.drop_table("ts_store_settings")
