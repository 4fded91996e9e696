"""The Postgres stores' hot path: their own psycopg pool, and statements sent without SQLAlchemy.

    from teamstore.state.direct import DirectPool, Statement

    pool = DirectPool(engine, size=20, holds="sessions")
    conn = await pool.checkout(seconds=5)
    row = await execute(AsyncRawCursor(conn), Statement("SELECT %(u)s::text"), {"u": "alice"})
    await pool.checkin(conn)

Loading and saving a session are one statement each; through SQLAlchemy's async adapter, compiling
the parameters and describing the result cost more client time than the database spends on the
statement. Everything off the hot path (quarantine, listing, sweeps) stays on the engine.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.errors import ConfigurationError, MissingExtra, StoreUnavailable

try:  # the pool ships with the "postgres" extra; without it the Postgres stores refuse to start
    from psycopg_pool import AsyncConnectionPool, PoolTimeout
except ImportError:  # pragma: no cover - depends on the installed extras
    AsyncConnectionPool = PoolTimeout = None  # type: ignore[assignment,misc]

_OPEN_SECONDS = 2.0
APPLICATION_NAME = "teamstore-state"  # the state store's own connections, unless the URL names another
_MIN_SERVER_VERSION = 140000


class Statement:
    """A statement written with named parameters, sent with positional ones (``$1``..): psycopg's raw
    cursor skips re-parsing the query and re-ordering a dict on every call."""

    def __init__(self, sql: str) -> None:
        self.names: list[str] = []

        def number(match: re.Match[str]) -> str:
            if match.group(1) not in self.names:
                self.names.append(match.group(1))
            return f"${self.names.index(match.group(1)) + 1}"

        self.sql = re.sub(r"%\((\w+)\)s", number, sql)

    def args(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(params[name] for name in self.names)


async def execute(cursor: Any, stmt: Statement, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """Run one statement on ``cursor`` (a raw cursor) and return its single row, if any."""
    await cursor.execute(stmt.sql, stmt.args(params))
    row: tuple[Any, ...] | None = await cursor.fetchone()
    return row


class DirectPool:
    """An autocommit psycopg pool to ``engine``'s database, opened in full on first use.

    Args:
        engine: A ``postgresql+psycopg`` engine; only its URL is used.
        size: The most connections held at once.
        holds: What one connection is held for, for the error when none comes free
            (``"sessions"`` for the advisory-lock store, ``"statements"`` for the row-lease one).
        needs: Why the store needs PostgreSQL 14 or newer, if it does; an older server is then refused.
    """

    def __init__(self, engine: AsyncEngine, size: int, holds: str, needs: str | None = None) -> None:
        if AsyncConnectionPool is None:
            raise MissingExtra("The Postgres state store", "postgres", "psycopg-pool")
        self._url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.size, self._holds, self._needs = size, holds, needs
        self._kwargs: dict[str, Any] = {"autocommit": True}
        if "application_name" not in engine.url.query:  # so operators can tell these apart in pg_stat_activity
            self._kwargs["application_name"] = APPLICATION_NAME
        self._pool: Any = None
        self._lock = asyncio.Lock()

    async def _open(self, budget: float) -> Any:
        if self._pool is not None:
            return self._pool
        async with self._lock:
            if self._pool is None:
                pool = AsyncConnectionPool(
                    self._url, min_size=min(4, self.size), max_size=self.size,
                    kwargs=self._kwargs, open=False,
                )
                # Opened fully before use: no connection attempt is left running in the background.
                try:
                    await pool.open(wait=True, timeout=max(budget, _OPEN_SECONDS))
                except PoolTimeout as exc:
                    await pool.close()
                    raise StoreUnavailable(
                        "could not connect to the state database",
                        hint="check TEAMSTORE_DATABASE_URL and the database server; no state was changed",
                    ) from exc
                async with pool.connection() as conn:
                    version = conn.info.server_version
                if self._needs and version < _MIN_SERVER_VERSION:
                    await pool.close()
                    raise ConfigurationError(
                        f"the state database runs PostgreSQL {version // 10000}; {self._needs} needs 14 or newer",
                        hint="upgrade the server, or lease sessions in their rows instead ('teamstore db "
                        "lease-mode row' with every worker stopped, and TEAMSTORE_SESSION_LEASE=row)",
                    )
                self._pool = pool
        return self._pool

    async def checkout(self, seconds: float) -> Any:
        """A connection, waiting up to ``seconds`` for one to come free.

        Raises:
            StoreUnavailable: None came free in time, or the database cannot be reached.
        """
        pool = await self._open(seconds)
        try:
            return await pool.getconn(timeout=max(seconds, 0.05))
        except PoolTimeout as exc:
            raise StoreUnavailable(
                f"no database connection came free within {seconds:.1f}s: all {self.size} are "
                f"held by {self._holds} in flight in this process (or the database does not answer)",
                hint="check TEAMSTORE_DATABASE_URL and the database server; if both are fine, raise "
                "TEAMSTORE_DB_POOL_SIZE or run fewer sessions per process",
            ) from exc

    async def checkin(self, conn: Any, *, discard: bool = False) -> None:
        """Give ``conn`` back; ``discard`` closes it first (ending its server session and its locks)."""
        if discard:
            await conn.close()
        if self._pool is not None:
            await self._pool.putconn(conn)

    async def close(self) -> None:
        """Close the pool (it opens again on next use)."""
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
