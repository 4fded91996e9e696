"""Keep each session key's session id with its subject (``ts_subject_sessions``), for readable cost reports.

The ledger names a session only by its key, an HMAC of the session id under the subject key, which
nobody can turn back into the id: a cost report by session listed hashes. From this revision the
ledger's writer records the session id beside the key, with the run's ledger rows, and an erasure
deletes the records of the subject before it deletes the subject.

Sessions the ledger already holds are filled in where the session id can still be found: a resume state
or a quarantined state of the user, whose session key is computed here as the writer computes it.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

BATCH = 5000

# The tables as this revision knows them (frozen: a migration must not change when the code does).
_SUBJECTS = sa.table("ts_subjects", sa.column("user_id", sa.String), sa.column("subject_key", sa.String))
_USAGE = sa.table("ts_usage", sa.column("session_key", sa.String))
_MAPPING = sa.table("ts_subject_sessions", sa.column("session_key", sa.String), sa.column("subject_key", sa.String),
                    sa.column("session_id", sa.String), sa.column("created_at", sa.DateTime(timezone=True)))


def _session_key(subject_key: str, session_id: str) -> str:
    # As teamstore.audit.subjects.session_key computes it: HMAC-SHA256 under the subject key, 32 hex digits.
    return hmac.new(subject_key.encode("utf-8"), session_id.encode("utf-8"), hashlib.sha256).hexdigest()[:32]


def _pages(bind: sa.engine.Connection, table: str) -> Iterator[list[tuple[str, str]]]:
    """(subject key, session id) of every row of ``table`` whose user has a subject, a page at a time."""
    rows = sa.table(table, sa.column("user_id", sa.String), sa.column("session_id", sa.String))
    query = (sa.select(rows.c.user_id, rows.c.session_id, _SUBJECTS.c.subject_key)
             .select_from(rows.join(_SUBJECTS, _SUBJECTS.c.user_id == rows.c.user_id))
             .order_by(rows.c.user_id, rows.c.session_id).limit(BATCH))
    after: tuple[str, str] | None = None
    while True:
        page = bind.execute(query if after is None else query.where(
            sa.tuple_(rows.c.user_id, rows.c.session_id) > sa.tuple_(*after))).all()
        if not page:
            return
        after = (page[-1][0], page[-1][1])
        yield [(str(subject), str(session)) for _user, session, subject in page]


def _backfill(bind: sa.engine.Connection) -> None:
    now = datetime.now(UTC)
    for table in ("ts_sessions", "ts_quarantine"):
        for page in _pages(bind, table):
            found = {_session_key(subject, session): (subject, session) for subject, session in page}
            recorded = sa.select(_MAPPING.c.session_key).where(_MAPPING.c.session_key.in_(found))
            in_ledger = bind.execute(sa.select(_USAGE.c.session_key).distinct().where(
                _USAGE.c.session_key.in_(found), _USAGE.c.session_key.not_in(recorded))).scalars().all()
            rows = [{"session_key": k, "subject_key": found[k][0], "session_id": found[k][1], "created_at": now}
                    for k in in_ledger]
            if rows:
                bind.execute(_MAPPING.insert(), rows)


def upgrade() -> None:
    op.create_table(
        "ts_subject_sessions",
        sa.Column("session_key", sa.String(64), primary_key=True),
        sa.Column("subject_key", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_ts_subject_sessions_subject", "ts_subject_sessions", ["subject_key"])
    _backfill(op.get_bind())


def downgrade() -> None:
    op.drop_index("ix_ts_subject_sessions_subject", table_name="ts_subject_sessions")
    op.drop_table("ts_subject_sessions")
