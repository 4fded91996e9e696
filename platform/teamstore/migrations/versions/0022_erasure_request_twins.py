"""Make erasure request ids unique as twins compare them (``ts_erasure_requests.folded_id``, unique).

A request id is the idempotency key of an erasure, and ``REQ-7``, ``req-7`` and ``"REQ-7 "`` are one ticket's:
a new request whose id differs from a stored one's only in ASCII letter case or spaces around it is refused.
That was a check in code alone. Each request now stores its id so folded (spaces around it dropped, ASCII letters
in lower case, every other character kept: the same on SQLite and Postgres, whatever its locale), under a unique
index, so no two filings, from any process, open twin requests.

A database may already hold twins, filed before ids were compared this way. The oldest of them (by when it was
received) takes the folded id; the others keep none, and still resume and report under their exact ids. A new
request id that is their twin is refused naming them too.

The upgrade reads every request id and writes each folded id by its own UPDATE (erasure requests are few: one a
ticket), under the table's lock: an erasure being opened or finished waits meanwhile.

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

import string

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

# The table and the fold as this revision knows them (frozen: a migration must not change when the code does).
_REQUESTS = sa.table("ts_erasure_requests", sa.column("request_id", sa.String), sa.column("received_at", sa.DateTime),
                     sa.column("folded_id", sa.String))
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _folded(request_id: str) -> str:
    return request_id.strip(" ").translate(_ASCII_LOWER)


def upgrade() -> None:
    with op.batch_alter_table("ts_erasure_requests") as table:
        table.add_column(sa.Column("folded_id", sa.String(128), nullable=True))
    bind = op.get_bind()
    oldest: dict[str, str] = {}  # folded id -> the oldest request id folding to it
    for request_id in bind.execute(sa.select(_REQUESTS.c.request_id).order_by(
            _REQUESTS.c.received_at, _REQUESTS.c.request_id)).scalars():
        oldest.setdefault(_folded(request_id), request_id)
    if oldest:
        bind.execute(_REQUESTS.update().where(_REQUESTS.c.request_id == sa.bindparam("b_request_id"))
                     .values(folded_id=sa.bindparam("b_folded_id")),
                     [{"b_request_id": request_id, "b_folded_id": folded} for folded, request_id in oldest.items()])
    op.create_index("uq_ts_erasure_requests_folded_id", "ts_erasure_requests", ["folded_id"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_ts_erasure_requests_folded_id", table_name="ts_erasure_requests")
    with op.batch_alter_table("ts_erasure_requests") as table:
        table.drop_column("folded_id")
