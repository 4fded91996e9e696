"""Index the transcript outbox and the recorded session ids by age (``ix_ts_transcript_outbox_created_at``,
``ix_ts_subject_sessions_created_at``).

A flusher claims the oldest transcript waiting (``ORDER BY created_at LIMIT 1``). Without an index on the
column, each claim read and sorted the whole outbox: with the 500,000 transcripts an hour-long S3 outage
leaves behind at a few hundred runs a second, a claim took a quarter of a second, and draining the outbox
took days. With it, a claim reads the index from its oldest end and stops at the first transcript it may
take; ``retention sweep``'s cutoff reads the index too.

``retention sweep`` deletes the session ids recorded for reports once no ledger row names their session: it read
the whole of ``ts_subject_sessions`` (a row per session ever run) each day, and deleted all it found in one
statement. It now takes them in batches, in the order they were recorded, through the second index.

Each index is built under its table's lock: instant on the usual near-empty outbox, seconds on an outbox of
millions of rows (workers' transcripts wait to be queued meanwhile) and on tens of millions of session ids
(workers' first run of a session waits to record its id).

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_ts_transcript_outbox_created_at", "ts_transcript_outbox", ["created_at"])
    op.create_index("ix_ts_subject_sessions_created_at", "ts_subject_sessions", ["created_at", "session_key"])


def downgrade() -> None:
    op.drop_index("ix_ts_subject_sessions_created_at", table_name="ts_subject_sessions")
    op.drop_index("ix_ts_transcript_outbox_created_at", table_name="ts_transcript_outbox")
