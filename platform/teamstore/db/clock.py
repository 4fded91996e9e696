"""Time as teamstore stores it: UTC, timezone-aware, on both databases.

    from teamstore.db.clock import now_utc, shared_now, utc

    row_time = utc(row.updated_at)   # SQLite hands back naive datetimes
    stmt = select(sessions).where(sessions.c.lease_until < shared_now(engine.dialect.name))
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func


def utc(value: datetime | None) -> datetime | None:
    """``value`` as an aware UTC datetime: SQLite hands back naive datetimes; every time teamstore stores is
    UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def now_utc() -> datetime:
    """The current time, UTC."""
    return datetime.now(UTC)


def shared_now(dialect: str) -> Any:
    """The current time as every worker of one database reads it, to write or compare in a statement.

    On Postgres the server's ``now()``: workers on different hosts take and check each other's leases and
    expiries there, and their hosts' clocks need not agree. SQLite is one machine's file, whose workers
    share that machine's clock: :func:`now_utc`.

    Args:
        dialect: ``engine.dialect.name`` (``postgresql`` or ``sqlite``).
    """
    return func.now() if dialect == "postgresql" else now_utc()
