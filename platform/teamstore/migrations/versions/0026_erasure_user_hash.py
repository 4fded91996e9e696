"""Keep a keyed hash of an erasure request's user id (``ts_erasure_requests.user_hash``).

A request held under a legal hold (or failed after its hold, its fence lifted) has forgotten its user id: it keeps
only the subject key it must finish. Its rerun was accepted under any user id, and reported ``completed`` for that
id while only the request's own subject was touched. The request now keeps an HMAC-SHA256 of the id
(:func:`teamstore.erasure.receipt.user_hash`) beside the subject key, and a rerun under another id is refused.
The hash is cleared with the subject key when the request finishes.

Requests filed before this revision get none here: those still open keep the raw id, and take the hash on their
next run; a request held already cannot be given one, and is rerun under any id, as before.

Revision ID: 0026
Revises: 0025
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ts_erasure_requests") as table:
        table.add_column(sa.Column("user_hash", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ts_erasure_requests") as table:
        table.drop_column("user_hash")
