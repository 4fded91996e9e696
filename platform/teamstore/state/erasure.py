"""Resume state as erasure reaches it: a user's rows in each table, what the user stores, what is open.

    from teamstore.state.erasure import SESSIONS, open_sessions

    async with engine.begin() as conn:                      # erasure's own transaction
        rows, nbytes = await SESSIONS.delete(conn, "alice")     # what it deleted
        ...                                                 # erasure records the step, then commits
    await open_sessions(engine, "alice")                    # sessions a worker still holds

Rows are matched by the exact user id (``=`` on Postgres and SQLite compares code points: no case
folding, no unicode normalisation). Erasure fences the user first (:mod:`teamstore.db.fence`), so no
session opens or saves while it counts and deletes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table, delete, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from teamstore.state.failures import unavailable
from teamstore.state.lease_mode import count_open, last_row_lease_end, recorded_mode
from teamstore.state.schema import quarantine, sessions


class UserRows:
    """A user's rows in one resume-state table, counted and deleted on the caller's connection, so that a
    delete commits together with whatever the caller records of it.

    Args:
        table: ``ts_sessions`` or ``ts_quarantine``.
        size: Each row's bytes of the user's words (its state, and an interrupted run's checkpoint).
    """

    def __init__(self, table: Table, size: Any) -> None:
        self.table = table
        self.size = size

    def _mine(self, user_id: str) -> Any:
        return self.table.c.user_id == user_id

    async def count(self, conn: AsyncConnection, user_id: str) -> tuple[int, int]:
        """How many rows ``user_id`` has here, and the bytes of the states and checkpoints they hold."""
        rows, nbytes = (await conn.execute(
            select(func.count(), func.coalesce(func.sum(self.size), 0))
            .select_from(self.table).where(self._mine(user_id))
        )).one()
        return int(rows), int(nbytes or 0)

    async def delete(self, conn: AsyncConnection, user_id: str) -> tuple[int, int]:
        """Delete ``user_id``'s rows here (committed with the caller's transaction); how many it deleted, and
        their bytes, as :meth:`count` gives them."""
        sizes = (await conn.execute(delete(self.table).where(self._mine(user_id)).returning(self.size))).scalars().all()
        return len(sizes), sum(int(size or 0) for size in sizes)


SESSIONS = UserRows(sessions, sessions.c.state_bytes + sessions.c.checkpoint_bytes)
"""Stored sessions: every ``ts_sessions`` row of the user (several copies of their words inside, and, for
a run in flight or interrupted, its checkpoint)."""
QUARANTINED = UserRows(quarantine, quarantine.c.state_bytes + func.coalesce(func.length(quarantine.c.checkpoint), 0))
"""States set aside as refused, kept for an operator to look at."""


async def stored_sessions(engine: AsyncEngine, user_id: str) -> int:
    """How many sessions ``user_id`` has stored, and quarantined states.

    Raises:
        StoreUnavailable: The database failed.
    """
    try:
        async with engine.connect() as conn:
            return sum([(await rows.count(conn, user_id))[0] for rows in (SESSIONS, QUARANTINED)])
    except SQLAlchemyError as exc:
        raise unavailable(exc, "count the user's sessions") from exc


async def open_sessions_end(engine: AsyncEngine, user_id: str) -> datetime | None:
    """When the last of ``user_id``'s open sessions' row leases runs out (a crashed worker's, if nothing renews it);
    ``None`` with none open, or under advisory locks (they go with their worker's connection).

    Raises:
        StoreUnavailable: The database failed.
        ConfigurationError: No lease mode is recorded (run ``teamstore db upgrade``).
    """
    try:
        async with engine.connect() as conn:
            return await last_row_lease_end(conn, await recorded_mode(conn), user_id)
    except SQLAlchemyError as exc:
        raise unavailable(exc, "read when the user's session leases run out") from exc


async def open_sessions(engine: AsyncEngine, user_id: str) -> int:
    """How many of ``user_id``'s sessions are open right now (a worker holds their lease), whichever
    kind of lease the database records. A crashed worker's session counts until its lease runs out.

    Raises:
        StoreUnavailable: The database failed.
        ConfigurationError: No lease mode is recorded (run ``teamstore db upgrade``).
    """
    try:
        async with engine.connect() as conn:
            return await count_open(conn, await recorded_mode(conn), user_id)
    except SQLAlchemyError as exc:
        raise unavailable(exc, "count the user's open sessions") from exc
