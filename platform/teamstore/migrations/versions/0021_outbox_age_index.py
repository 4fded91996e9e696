"""Index the transcript outbox by age (``ix_ts_transcript_outbox_created_at``).

A flusher claims the oldest transcript waiting (``ORDER BY created_at LIMIT 1``). Without an index on the
column, each claim read and sorted the whole outbox: with the 500,000 transcripts an hour-long S3 outage
leaves behind at a few hundred runs a second, a claim took a quarter of a second, and draining the outbox
took days. With it, a claim reads the index from its oldest end and stops at the first transcript it may
take; ``retention sweep``'s cutoff reads the index too.

The index is built under the table's lock: instant on the usual near-empty outbox, seconds on one of
millions of rows, during which workers' transcripts wait to be queued.

Revision ID: 0021
Revises: 0018
"""

from __future__ import annotations

from alembic import op

revision = "0021"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_ts_transcript_outbox_created_at", "ts_transcript_outbox", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_ts_transcript_outbox_created_at", table_name="ts_transcript_outbox")
