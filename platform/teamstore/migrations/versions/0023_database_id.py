"""Give the database an id of its own (``ts_store_settings``, ``database_id``: random, 32 hex characters).

A backup restored keeps it, and no other database has it. The local key file marks each key a rotation makes with
it, so ``teamstore keys retire`` destroys a key the database does not record (made after the backup it was
restored from) only if this database made it, never the keys of another database sharing the file
(:mod:`teamstore.keys.unrecorded`). Made here, so that every backup taken from this revision on holds it.

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

NAME = "database_id"


def upgrade() -> None:
    settings = sa.table("ts_store_settings", sa.column("name", sa.String), sa.column("value", sa.String),
                        sa.column("updated_at", sa.DateTime(timezone=True)))
    found = op.get_bind().execute(sa.select(settings.c.value).where(settings.c.name == NAME)).first()
    if found is None:  # a database given one already keeps it
        op.bulk_insert(settings, [{"name": NAME, "value": secrets.token_hex(16), "updated_at": datetime.now(UTC)}])


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM ts_store_settings WHERE name = :name").bindparams(name=NAME))
