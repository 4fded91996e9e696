"""Record the transcripts written again to S3 with when each was first written (``ts_transcript_rewrites``).

``teamstore keys migrate`` writes each plain transcript again, sealed, and the outbox delivers a transcript
after its run. A folder keeps such a file on its first write's clock (its modified time); S3 cannot set an
object's time, and its lifecycle rule counts from the upload, so such an object outlived its retention by up
to the whole retention again. From this revision each such write to a store without a sweep of its own is
recorded first, and ``teamstore retention sweep`` deletes the object once its first write is past retention.
Objects written again before this revision were recorded nowhere: the lifecycle rule expires them, as before.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ts_transcript_rewrites",
        sa.Column("store", sa.Text(), nullable=False),
        sa.Column("object_key", sa.String(512), nullable=False),
        sa.Column("subject_key", sa.String(64), nullable=False),
        sa.Column("written_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("store", "object_key", name="pk_ts_transcript_rewrites"),
    )
    op.create_index("ix_ts_transcript_rewrites_subject", "ts_transcript_rewrites", ["subject_key"])


def downgrade() -> None:
    op.drop_index("ix_ts_transcript_rewrites_subject", table_name="ts_transcript_rewrites")
    op.drop_table("ts_transcript_rewrites")
