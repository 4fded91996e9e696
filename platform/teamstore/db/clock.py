"""Time as teamstore stores it: UTC, timezone-aware, on both databases.

    from teamstore.db.clock import now_utc, utc

    row_time = utc(row.updated_at)   # SQLite hands back naive datetimes
"""

from __future__ import annotations

from datetime import UTC, datetime


def utc(value: datetime | None) -> datetime | None:
    """``value`` as an aware UTC datetime: SQLite hands back naive datetimes; every time teamstore stores is
    UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def now_utc() -> datetime:
    """The current time, UTC."""
    return datetime.now(UTC)
