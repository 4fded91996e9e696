"""Record which transcript stores each subject's transcripts were written to (``ts_subject_stores``).

An erasure talks to one transcript store, the one its settings name. Run with a missing or wrong
``TEAMSTORE_TRANSCRIPTS_URL`` it found nothing there and completed, leaving the transcripts in the store
the service writes to, unlinkable once the subject mapping was gone. From this revision every writer records
the store before its first upload of a subject there, and an erasure refuses to complete while one of
them is not the store it talks to. Transcripts written before this revision were recorded nowhere: the
time it was applied is kept in ``ts_store_settings`` (``subject_stores_since``), so an erasure can tell
the runs the ledger holds from before it.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

SINCE = "subject_stores_since"


def upgrade() -> None:
    op.create_table(
        "ts_subject_stores",
        sa.Column("subject_key", sa.String(64), nullable=False),
        sa.Column("store", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("erased_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("subject_key", "store", name="pk_ts_subject_stores"),
    )
    settings = sa.table("ts_store_settings", sa.column("name", sa.String), sa.column("value", sa.String),
                        sa.column("updated_at", sa.DateTime(timezone=True)))
    now = datetime.now(UTC)
    op.bulk_insert(settings, [{"name": SINCE, "value": now.isoformat(timespec="seconds"), "updated_at": now}])


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM ts_store_settings WHERE name = :name").bindparams(name=SINCE))
    op.drop_table("ts_subject_stores")
