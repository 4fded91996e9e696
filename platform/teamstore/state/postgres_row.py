"""Row leases on Postgres (``TEAMSTORE_SESSION_LEASE=row``): the row-lease statements of
:mod:`teamstore.state.row_lease`, sent through psycopg on the store's own pool.

    from teamstore.state.postgres_row import postgres_row_store

    store = postgres_row_store(engine, pool_size=20)      # engine: postgresql+psycopg; or store_for(engine, lease="row")
    row = await store.acquire(key, claim, owner="w-1", lease_ttl=300, wait_seconds=10)
    ...                                                   # the run; no connection is held
    await store.save(key, owner="w-1", expected_version=row.row_version, record=rec, release=True)

A connection is held only for the length of a statement (:mod:`teamstore.state.direct`), so a process
runs as many sessions at once as it likes: the point of row leases.

The lease write commits asynchronously (``synchronous_commit`` off for its transaction alone): it does
not wait for its WAL flush. A server crash can lose the last such writes, and with them leases, as a
restart loses advisory locks; a worker whose lease was lost has its save refused (the row's
``lease_owner`` is no longer its own), so nothing is overwritten. Saves keep the server's durability,
and their flush carries every earlier lease write with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import AsyncRawCursor
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.state import statements as sql
from teamstore.state.direct import DirectPool, Statement, execute, for_psycopg
from teamstore.state.failures import unavailable
from teamstore.state.lease_mode import CHECK_SECONDS
from teamstore.state.row_lease import RowLeaseStore

_CONNECTION_WAIT = 10.0  # a save waits this long for a pooled connection (each is held for one statement)
_ACQUIRE = for_psycopg(sql.acquire_row(sql.POSTGRES))
_SAVE = {release: for_psycopg(sql.save_row(sql.POSTGRES, release=release)) for release in (True, False)}
_CHECKPOINT = for_psycopg(sql.checkpoint_row(sql.POSTGRES))


class PostgresRowStatements:
    """The row-lease statements, sent through psycopg on the store's own pool.

    Args:
        engine: A ``postgresql+psycopg`` engine the caller owns; only its URL is used here.
        pool_size: Most connections the pool opens (each is held for one statement).
    """

    def __init__(self, engine: AsyncEngine, pool_size: int = 20) -> None:
        self._direct = DirectPool(engine, pool_size, holds="statements")

    async def _execute(self, cursor: Any, stmt: Statement, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        return await execute(cursor, stmt, params)

    async def _one(self, stmt: Statement, params: Mapping[str, Any], seconds: float, *, retry: bool) -> Any:
        """Run ``stmt`` on a pooled connection and return its row. With ``retry``, a pooled connection the
        server has ended (a restart, a failover) is replaced and the statement sent again."""
        stale = 0
        while True:
            conn = await self._direct.checkout(seconds)
            try:
                row = await self._execute(AsyncRawCursor(conn), stmt, params)
            except BaseException:
                await self._direct.checkin(conn, discard=conn.broken)
                if retry and conn.broken and stale < self._direct.size:
                    stale += 1
                    continue
                raise
            await self._direct.checkin(conn)
            return row

    async def acquire(self, params: Mapping[str, Any], seconds: float) -> Sequence[Any] | None:
        """Take the lease and read the row; the load is retried on a fresh connection if a pooled one
        was dead (taking its own lease again is safe)."""
        try:
            row: Sequence[Any] | None = await self._one(_ACQUIRE, params, seconds, retry=True)
        except psycopg.Error as exc:
            raise unavailable(exc, "take the session lease") from exc
        return row

    async def save(self, params: Mapping[str, Any], release: bool) -> Sequence[Any] | None:
        """Save (and release): the new row version, or ``None``."""
        try:
            row: Sequence[Any] | None = await self._one(_SAVE[release], params, _CONNECTION_WAIT, retry=False)
        except psycopg.Error as exc:
            raise unavailable(exc, "save the session state") from exc
        return row

    async def checkpoint(self, params: Mapping[str, Any]) -> Sequence[Any] | None:
        """Write a run's checkpoint: the new row version, or ``None``."""
        try:
            row: Sequence[Any] | None = await self._one(_CHECKPOINT, params, _CONNECTION_WAIT, retry=False)
        except psycopg.Error as exc:
            raise unavailable(exc, "write the run's checkpoint") from exc
        return row

    async def aclose(self) -> None:
        """Close the pool (the engine stays the caller's)."""
        await self._direct.close()


def postgres_row_store(engine: AsyncEngine, pool_size: int = 20, check_seconds: float = CHECK_SECONDS) -> RowLeaseStore:
    """The state store with row leases on a Postgres ``engine`` (the caller owns it); ``check_seconds`` as
    :class:`RowLeaseStore`."""
    return RowLeaseStore(engine, PostgresRowStatements(engine, pool_size), check_seconds)
