"""When a user forgot their memory (``ts_user_memory_forgets``: user, scope, forgotten_at).

A memory writer that first read the user's memory after a forget, from messages said before it, wrote them
back: the memory returned with what the user asked to forget. A forget now records its time per user and scope
(``""``: every scope), and a writer whose session opened before it writes nothing. The row holds the raw user id:
erasure deletes it, the export lists it, and the retention sweep drops it once no writer could still need it.

Revision ID: 0027
Revises: 0026
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ts_user_memory_forgets",
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("scope", sa.String(64), nullable=False),
        sa.Column("forgotten_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "scope", name="pk_ts_user_memory_forgets"),
    )
    op.create_index("ix_ts_user_memory_forgets_forgotten_at", "ts_user_memory_forgets", ["forgotten_at"])


def downgrade() -> None:
    op.drop_index("ix_ts_user_memory_forgets_forgotten_at", table_name="ts_user_memory_forgets")
    op.drop_table("ts_user_memory_forgets")
