"""Time as teamstore stores it: UTC, timezone-aware, on both databases.

    from teamstore.db.clock import database_now, now_utc, shared_later, shared_now, utc

    row_time = utc(row.updated_at)   # SQLite hands back naive datetimes
    stmt = select(sessions).where(sessions.c.lease_until < shared_now(engine.dialect.name))
    stmt = update(outbox).values(claimed_until=shared_later(engine.dialect.name, timedelta(seconds=80)))
    row = select(shared_now_as(engine.dialect.name, outbox.c.created_at.type).label("created_at"), ...)
    cutoff = await database_now(engine) - timedelta(days=30)
    opened = await committed_now(engine, lock)   # after the writers holding ``lock`` committed
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import DateTime, Float, func, literal, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.engine import describe_failure
from teamstore.errors import StoreUnavailable


def utc(value: datetime | None) -> datetime | None:
    """``value`` as an aware UTC datetime: SQLite hands back naive datetimes, which hold UTC (every time
    teamstore stores is UTC); an aware one is converted, as a Postgres session in another time zone would
    hand it back (teamstore's sessions are pinned to UTC: :data:`teamstore.db.engine.UTC_SESSION`)."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


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


def shared_now_as(dialect: str, type_: Any) -> Any:
    """:func:`shared_now` as a column of ``type_`` that a ``SELECT`` can carry (an ``INSERT .. SELECT``'s): on
    Postgres the server's ``now()``; on SQLite :func:`now_utc` bound as ``type_``, as SQLite's own clock would be
    text of another form than the stored times."""
    return func.now() if dialect == "postgresql" else literal(now_utc(), type_)


def shared_later(dialect: str, length: timedelta) -> Any:
    """``length`` after :func:`shared_now`, as an expression to write or compare in a statement (a lease's or a
    claim's end, a retirement's date; a negative ``length`` is that long before, a window's start): on Postgres
    the server's ``now()`` plus it."""
    if dialect == "postgresql":
        # In seconds, not days: Postgres adds an interval's days by the session zone's calendar (a day across a
        # daylight-saving change is 23 or 25 hours), SQLite's 30 days are 720 hours.
        return func.now() + func.make_interval(0, 0, 0, 0, 0, 0, literal(length.total_seconds(), Float()))
    return literal(now_utc() + length, DateTime(timezone=True))


async def database_now(engine: AsyncEngine) -> datetime:
    """The current time on the clock :func:`shared_now` reads, for a time worked out outside a statement (a
    sweep's cutoffs, which it reports): on Postgres the server's, one round trip; on SQLite :func:`now_utc`.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    if engine.dialect.name != "postgresql":
        return now_utc()
    try:
        async with engine.connect() as conn:
            now: datetime = (await conn.execute(select(func.now()))).scalar_one()
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"could not read the database's clock: {describe_failure(exc)}",
                               hint="check the database, then run the command again") from exc
    return now


async def committed_now(engine: AsyncEngine, lock: Any) -> datetime:
    """The current time on the clock :func:`shared_now` reads, once the writers ``lock`` waits for have committed:
    a time that must come after theirs, which they took before committing. On Postgres ``lock`` (a statement
    taking a lock they hold until they commit) runs first, and the server's clock is read after it in the same
    transaction (``clock_timestamp()``: its ``now()`` is the transaction's start, before the wait); on SQLite, one
    machine's file, :func:`now_utc` inside ``BEGIN IMMEDIATE``, which waits for the file's writer.

    Raises:
        StoreUnavailable: The database could not be reached, or the wait outlasted its timeout.
    """
    try:
        async with engine.connect() as conn:  # its transaction is rolled back as the block ends
            if engine.dialect.name != "postgresql":
                await conn.exec_driver_sql("BEGIN IMMEDIATE")  # pysqlite would open no transaction for a SELECT
                return now_utc()
            await conn.execute(lock)
            now: datetime = (await conn.execute(select(func.clock_timestamp()))).scalar_one()
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"could not read the database's clock: {describe_failure(exc)}",
                               hint="check the database, then run the command again") from exc
    return now
