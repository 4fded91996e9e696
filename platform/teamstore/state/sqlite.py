"""SQLite, the embedded default: row leases (:mod:`teamstore.state.row_lease`), every statement through
the engine.

    from teamstore.db.engine import create_engine
    from teamstore.state.sqlite import sqlite_store

    store = sqlite_store(create_engine("sqlite:///.teamstore/teamstore.db"))   # or store_for(engine)

Each lease and each save is one statement, atomic on its own, run in autocommit: that spares the
``BEGIN`` and ``COMMIT`` round trips. SQLite serves one writer at a time; for many workers, use Postgres.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.state import statements as sql
from teamstore.state.failures import unavailable
from teamstore.state.row_lease import RowLeaseStore


class SqliteStatements:
    """The row-lease statements, sent through ``engine`` (built once: constructing the lease statement
    costs more than running it).

    Args:
        engine: An ``sqlite+aiosqlite`` engine the caller owns.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._single = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._acquire = sql.acquire_row(sql.SQLITE)
        self._save = {release: sql.save_row(sql.SQLITE, release=release) for release in (True, False)}
        self._checkpoint = sql.checkpoint_row(sql.SQLITE)

    async def _one(self, stmt: Any, params: Mapping[str, Any], action: str) -> Sequence[Any] | None:
        try:
            async with self._single.connect() as conn:
                return (await conn.execute(stmt, params)).first()
        except SQLAlchemyError as exc:
            raise unavailable(exc, action) from exc

    async def acquire(self, params: Mapping[str, Any], seconds: float) -> Sequence[Any] | None:
        """Take the lease and read the row (SQLite's own busy timeout does the waiting: ``seconds`` is
        unused)."""
        return await self._one(self._acquire, params, "take the session lease")

    async def save(self, params: Mapping[str, Any], release: bool) -> Sequence[Any] | None:
        """Save (and release): the new row version, or ``None``."""
        return await self._one(self._save[release], params, "save the session state")

    async def checkpoint(self, params: Mapping[str, Any]) -> Sequence[Any] | None:
        """Write a run's checkpoint: the new row version, or ``None``."""
        return await self._one(self._checkpoint, params, "write the run's checkpoint")

    async def aclose(self) -> None:
        """Nothing to close: the engine is the caller's."""


def sqlite_store(engine: AsyncEngine) -> RowLeaseStore:
    """The state store on an SQLite ``engine`` (the caller owns it)."""
    return RowLeaseStore(engine, SqliteStatements(engine))
