"""Give the database the key of how log lines name a request (``ts_store_settings``, ``log_name_key``: random,
32 hex characters; :func:`teamstore.db.identity.log_name_key`).

Log lines name an erasure request whose id the operator gave by a fingerprint of it keyed by this. Not by the
database's id: that is no secret (a transcript folder's marker and every KMS key's tag hold it), and a guessed id
could be tested against a log line. This key is never printed or written elsewhere; made here, so that every
backup taken from this revision on holds it and a status check writes nothing.

Revision ID: 0030
Revises: 0029
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

NAME = "log_name_key"


def upgrade() -> None:
    settings = sa.table("ts_store_settings", sa.column("name", sa.String), sa.column("value", sa.String),
                        sa.column("updated_at", sa.DateTime(timezone=True)))
    found = op.get_bind().execute(sa.select(settings.c.value).where(settings.c.name == NAME)).first()
    if found is None:  # a database given one already (asked for before the upgrade) keeps it
        op.bulk_insert(settings, [{"name": NAME, "value": secrets.token_hex(16), "updated_at": datetime.now(UTC)}])


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM ts_store_settings WHERE name = :name").bindparams(name=NAME))
