"""The transcript outbox records who delivers a queued transcript and until when an upload of it may land.

Two flushers (two `teamstore transcripts flush` runs, or a worker's background flush beside one) read the
same queued rows and each delivered every one of them: a transcript PUT twice, two versions of it in a
versioned bucket. A flusher now claims one row at a time (``claimed_by``, ``claimed_until``) and the others
skip it. The claim also covers an upload whose outcome is unknown (S3 left the request unanswered, or a
run stopped waiting for it): the row keeps it until the upload can no longer land, and an erasure waits for
it. Such a row may have no ``body`` left (delivered, or never queued because an erasure fenced the user):
it only says that an upload of ``object_key`` may still land until ``claimed_until``.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Batch mode: SQLite changes a column's nullability only by copying the table.
    with op.batch_alter_table("ts_transcript_outbox") as table:
        table.add_column(sa.Column("claimed_by", sa.String(64), nullable=True))
        table.add_column(sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True))
        table.alter_column("body", existing_type=sa.LargeBinary, nullable=True)


def downgrade() -> None:
    # A row without a body records only an upload that may still land: there is nothing to deliver.
    op.execute("DELETE FROM ts_transcript_outbox WHERE body IS NULL")
    with op.batch_alter_table("ts_transcript_outbox") as table:
        table.alter_column("body", existing_type=sa.LargeBinary, nullable=False)
        table.drop_column("claimed_until")
        table.drop_column("claimed_by")
