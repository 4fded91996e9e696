"""The Postgres backend: the same store, with its two hot statements sent straight through psycopg 3.

    from teamstore.state.postgres import PostgresStateStore

    store = PostgresStateStore(engine)      # engine: postgresql+psycopg
    ...
    await store.aclose()

Taking the lease (with the load) and saving (with the release) run once per request for every user,
so they skip SQLAlchemy's per-statement overhead (pool checkout through greenlets, result processing),
which on a loopback server costs more than the statements themselves. The SQL is still compiled from
the Core statements in :mod:`teamstore.state.sql`, so the schema has one source of truth; everything
else (quarantine, listing, sweeps) goes through the engine as usual. The psycopg pool opens lazily.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.errors import MissingExtra, StoreUnavailable
from teamstore.state.base import StoredSession
from teamstore.state.schema import sessions
from teamstore.state.sql import SqlStateStore, _session

_COLUMNS = [c.name for c in sessions.c]


class _Compiled:
    """A Core statement compiled once for psycopg: its SQL text and its default parameters."""

    def __init__(self, statement: Any, engine: AsyncEngine) -> None:
        compiled = statement.compile(dialect=engine.dialect)
        self.sql: str = str(compiled)
        self.defaults: dict[str, Any] = dict(compiled.params)

    def params(self, given: dict[str, Any]) -> dict[str, Any]:
        from psycopg.types.json import Json

        merged = {**self.defaults, **given}
        return {k: Json(v) if isinstance(v, dict) else v for k, v in merged.items()}


class PostgresStateStore(SqlStateStore):
    """:class:`SqlStateStore` on Postgres with a psycopg fast path for lease+load and save+release.

    Args:
        engine: A ``postgresql+psycopg`` engine the caller owns; the fast path opens its own small
            psycopg pool to the same database (closed by :meth:`aclose`).
        pool_size: Most connections the fast path holds.
    """

    def __init__(self, engine: AsyncEngine, pool_size: int = 20) -> None:
        super().__init__(engine)
        self._pool_size = pool_size
        self._pool: Any = None
        self._pool_lock = asyncio.Lock()
        self._acquire_sql = _Compiled(self._acquire, engine)
        self._save_sql = {True: _Compiled(self._save_release, engine), False: _Compiled(self._save_keep, engine)}

    async def _connection_pool(self) -> Any:
        if self._pool is not None:
            return self._pool
        async with self._pool_lock:
            if self._pool is None:
                try:
                    from psycopg_pool import AsyncConnectionPool
                except ImportError as exc:
                    raise MissingExtra("The Postgres state store", "postgres", "psycopg-pool") from exc
                url = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
                pool = AsyncConnectionPool(
                    url,
                    min_size=min(4, self._pool_size),
                    max_size=self._pool_size,
                    kwargs={"autocommit": True},
                    open=False,
                )
                await pool.open(wait=False)
                self._pool = pool
        return self._pool

    async def _execute(self, compiled: _Compiled, params: dict[str, Any], action: str) -> tuple[Any, ...] | None:
        import psycopg
        from psycopg_pool import PoolTimeout

        pool = await self._connection_pool()
        try:
            async with pool.connection(timeout=10.0) as conn:
                cursor = await conn.execute(compiled.sql, compiled.params(params))
                row: tuple[Any, ...] | None = await cursor.fetchone()
                return row
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreUnavailable(
                f"could not {action}: the database failed with {type(exc).__name__}",
                hint="check TEAMSTORE_DATABASE_URL and the database server; no state was changed",
            ) from exc

    async def _run_acquire(self, params: dict[str, Any]) -> StoredSession | None:
        row = await self._execute(self._acquire_sql, params, "take the session lease")
        return _session(dict(zip(_COLUMNS, row, strict=True))) if row is not None else None

    async def _run_save(self, release: bool, params: dict[str, Any]) -> int | None:
        row = await self._execute(self._save_sql[release], params, "save the session state")
        return None if row is None else int(row[0])

    async def aclose(self) -> None:
        """Close the fast path's pool (the engine stays the caller's)."""
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
