"""Key each subject's session keys with a secret of its own (``ts_subjects.session_secret``).

A session key was an HMAC of the session id under the subject key, and the subject key is published beside
it: in the ledger and its exports, the transcripts' object keys and the spans. Anyone holding those could
check a guessed session id, and still can after an erasure, which reaches neither spans nor locked objects.
From this revision a new subject also gets a random session secret, kept only in ``ts_subjects`` and
deleted with it, and its session keys are keyed by that.

Subjects already here get their own subject key as their secret, so their sessions keep the keys they had
(transcripts, ledger rows and recorded session ids stay continuous); their guessable session ids stay as
confirmable as before. A downgrade drops the secrets: the sessions of subjects made since then get new keys.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

# The table as this revision knows it (frozen: a migration must not change when the code does).
_SUBJECTS = sa.table("ts_subjects", sa.column("subject_key", sa.String), sa.column("session_secret", sa.String))


def upgrade() -> None:
    with op.batch_alter_table("ts_subjects") as table:
        table.add_column(sa.Column("session_secret", sa.String(64), nullable=True))
    op.execute(_SUBJECTS.update().values(session_secret=_SUBJECTS.c.subject_key))
    with op.batch_alter_table("ts_subjects") as table:
        table.alter_column("session_secret", existing_type=sa.String(64), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("ts_subjects") as table:
        table.drop_column("session_secret")
