"""Per-user data keys and the key-encryption keys that wrap them (``ts_data_keys``, ``ts_key_encryption_keys``).

From this revision every payload that can hold a user's words is sealed under that user's data key
(:mod:`teamstore.keys`). Rows and objects written before stay as they are and still read; each is sealed when
it is next written (a session's next save), or at once by ``teamstore keys migrate``.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ts_key_encryption_keys",
        sa.Column("kek_id", sa.String(300), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("destroy_after", sa.DateTime(timezone=True), nullable=True),
        sa.Column("destroyed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("kek_id", name="pk_ts_key_encryption_keys"),
    )
    op.create_table(
        "ts_data_keys",
        sa.Column("user_id", sa.String(256), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("kek_id", sa.String(300), nullable=False),
        sa.Column("wrapped", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("wrapped_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name="pk_ts_data_keys"),
        sa.UniqueConstraint("key_id", name="uq_ts_data_keys_key_id"),
    )
    op.create_index("ix_ts_data_keys_kek_id", "ts_data_keys", ["kek_id"])


def downgrade() -> None:
    op.drop_index("ix_ts_data_keys_kek_id", table_name="ts_data_keys")
    op.drop_table("ts_data_keys")
    op.drop_table("ts_key_encryption_keys")
