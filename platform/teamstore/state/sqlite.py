"""SQLite, the embedded default: row leases (:mod:`teamstore.state.row_lease`), every statement through
the engine.

    from teamstore.db.engine import create_engine
    from teamstore.state.sqlite import sqlite_store

    store = sqlite_store(create_engine("sqlite:///.teamstore/teamstore.db"))   # or store_for(engine)

Each lease, save and checkpoint write is one statement, atomic on its own, run in autocommit: that spares the
``BEGIN`` and ``COMMIT`` round trips, and sent on the store's own connections, on the event loop while the file
is free and on a thread while another connection holds it (:mod:`teamstore.state.direct_sqlite`); everything
else goes through the engine. SQLite serves one writer at a time; for many workers, use Postgres.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.state import statements as sql
from teamstore.state.direct_sqlite import SqlitePool, SqliteStatement, for_sqlite
from teamstore.state.failures import unavailable
from teamstore.state.lease_mode import CHECK_SECONDS
from teamstore.state.row_lease import RowLeaseStore

_ACQUIRE = sql.acquire_row(sql.SQLITE)  # built once: constructing the lease statement costs more than running it
_SAVE = {release: sql.save_row(sql.SQLITE, release=release) for release in (True, False)}
_CHECKPOINT = sql.checkpoint_row(sql.SQLITE)
_DIRECT: dict[Any, SqliteStatement] = {stmt: for_sqlite(stmt) for stmt in (_ACQUIRE, *_SAVE.values(), _CHECKPOINT)}


class SqliteStatements:
    """The row-lease statements, sent on the store's own connections (through ``engine`` for a database
    that is not a file).

    Args:
        engine: An ``sqlite+aiosqlite`` engine the caller owns.
        pool_size: The most connections of the store's own open at once.
    """

    def __init__(self, engine: AsyncEngine, pool_size: int = 4) -> None:
        self._single = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._direct = SqlitePool.for_engine(engine, pool_size)

    async def _execute(self, pool: SqlitePool, stmt: SqliteStatement, params: Mapping[str, Any]) -> Sequence[Any] | None:
        rows = await pool.fetch(stmt, params)
        return rows[0] if rows else None

    async def _one(self, stmt: Any, params: Mapping[str, Any], action: str) -> Sequence[Any] | None:
        try:
            if self._direct is not None:
                return await self._execute(self._direct, _DIRECT[stmt], params)
            async with self._single.connect() as conn:
                return (await conn.execute(stmt, params)).first()
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise unavailable(exc, action) from exc

    async def acquire(self, params: Mapping[str, Any], seconds: float) -> Sequence[Any] | None:
        """Take the lease and read the row (SQLite's own busy timeout does the waiting: ``seconds`` is
        unused)."""
        return await self._one(_ACQUIRE, params, "take the session lease")

    async def save(self, params: Mapping[str, Any], release: bool) -> Sequence[Any] | None:
        """Save (and release): the new row version, or ``None``."""
        return await self._one(_SAVE[release], params, "save the session state")

    async def checkpoint(self, params: Mapping[str, Any]) -> Sequence[Any] | None:
        """Write a run's checkpoint: the new row version, or ``None``."""
        return await self._one(_CHECKPOINT, params, "write the run's checkpoint")

    async def aclose(self) -> None:
        """Close the store's own connections (the engine is the caller's)."""
        if self._direct is not None:
            await self._direct.close()


def sqlite_store(engine: AsyncEngine, check_seconds: float = CHECK_SECONDS) -> RowLeaseStore:
    """The state store on an SQLite ``engine`` (the caller owns it); ``check_seconds`` as :class:`RowLeaseStore`."""
    return RowLeaseStore(engine, SqliteStatements(engine), check_seconds)
