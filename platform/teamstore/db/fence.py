"""The erasure fence: while a user has a row in ``ts_user_holds`` (an open erasure request, or the retention
sweep forgetting them), nothing of theirs is written, queued or delivered.

    from teamstore.db.fence import held, user_holds

    stmt = update(sessions).where(sessions.c.user_id == user, ~held(user))   # a save, fenced
    fenced = (await conn.execute(select(held("alice")))).scalar_one()       # is alice fenced?

Every statement that writes for a user carries :func:`held` (negated) in its own ``WHERE``, so the check
and the write are one statement and no write slips in between an erasure's fence and its deletes: the
state stores' leases, saves and quarantine copies (on SQLite and Postgres, whichever way they reach the
database), the audit pseudonym lookup, outbox claims and the re-check of a late transcript. Statements sent as raw text
(``teamstore.state.direct``) are compiled from these same expressions, so the fence is written here
only. Erasure opens a hold in ``teamstore.erasure.requests`` and lifts it in ``teamstore.erasure.record``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, ColumnElement, DateTime, String, Table, exists

from teamstore.db.metadata import metadata
from teamstore.ids import MAX_ID_CHARS

user_holds = Table(
    "ts_user_holds",
    metadata,
    Column("user_id", String(MAX_ID_CHARS), primary_key=True),
    Column("reason", String(64), nullable=False),
    Column("request_id", String(128), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
)


ERASURE = "erasure"
"""The reason of an erasure request's hold."""
RETENTION = "retention"
"""The reason of the retention sweep's hold while it forgets a user nothing is left of
(:mod:`teamstore.erasure.quiet`): a session opening for the user waits for it to end, then starts them afresh."""


def forgetting(user_id: Any) -> ColumnElement[bool]:
    """``EXISTS`` the retention sweep's hold on ``user_id`` (see :data:`RETENTION`)."""
    return exists().where(user_holds.c.user_id == user_id, user_holds.c.reason == RETENTION)


def erasing(user_id: Any) -> ColumnElement[bool]:
    """``EXISTS`` a hold on ``user_id`` other than the retention sweep's: an erasure request's."""
    return exists().where(user_holds.c.user_id == user_id, user_holds.c.reason != RETENTION)


def held(user_id: Any) -> ColumnElement[bool]:
    """``EXISTS`` a hold on ``user_id``: true while an erasure request fences the user.

    Args:
        user_id: A value, a bind parameter, or a column of the enclosing statement (the check is then
            correlated to each of its rows, e.g. ``held(subjects.c.user_id)``).
    """
    return exists().where(user_holds.c.user_id == user_id)
