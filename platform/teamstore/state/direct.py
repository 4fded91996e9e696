"""The Postgres stores' hot path: their own connection pool, and statements sent without SQLAlchemy.

    from teamstore.state.direct import DirectPool, for_psycopg

    LOAD = for_psycopg(statements.acquire_lock())         # once, at import
    pool = DirectPool(engine, size=20, holds="sessions")
    conn = await pool.checkout(seconds=5)
    row = await execute(AsyncRawCursor(conn), LOAD, {"u": "alice", "s": "s1", "ttl_ms": "300000", "max": None})
    await pool.checkin(conn)

Loading and saving a session are one statement each; through SQLAlchemy's async adapter, compiling
the parameters and describing the result cost more client time than the database spends on the
statement. So the statements of :mod:`teamstore.state.statements` are compiled once, to text, and sent
through psycopg. Everything off the hot path (quarantine, listing, sweeps) stays on the engine.

The pool is a stack of idle autocommit connections behind a semaphore, rather than psycopg_pool: with
row leases and many sessions at once (two checkouts per cycle) psycopg_pool cost 6-9% of the cycle's
throughput; with advisory locks, nothing measurable (bench/README.md).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import select
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import ClauseElement

from teamstore.db.engine import UTC_SESSION
from teamstore.errors import ConfigurationError, StoreUnavailable

_OPEN_SECONDS = 2.0
APPLICATION_NAME = "teamstore-state"
"""The state store's own connections show in ``pg_stat_activity`` as this, a space and 8 hex digits of their
own (unless the URL names another ``application_name``): a server process reads as the connection it serves,
even when a session-mode pooler has handed it from one client to another."""
_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}
"""A network that fails silently shows within about a minute (TCP alone could take hours on an idle socket),
unless the URL sets its own."""
_MIN_SERVER_VERSION = 140000
_IDLE = TransactionStatus.IDLE


class Statement:
    """A statement written with named parameters (``%(name)s``), sent with positional ones (``$1``..):
    psycopg's raw cursor skips re-parsing the query and re-ordering a dict on every call."""

    def __init__(self, sql: str) -> None:
        self.names: list[str] = []

        def number(match: re.Match[str]) -> str:
            if match.group(1) is None:
                return "%"  # a literal percent sign, doubled in the named style
            if match.group(1) not in self.names:
                self.names.append(match.group(1))
            return f"${self.names.index(match.group(1)) + 1}"

        self.sql = re.sub(r"%\((\w+)\)s|%%", number, sql)

    def args(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(params[name] for name in self.names)


_PSYCOPG = PGDialect_psycopg()  # type: ignore[no-untyped-call]


def for_psycopg(stmt: ClauseElement) -> Statement:
    """``stmt`` (SQLAlchemy Core) compiled once, as SQLAlchemy's psycopg dialect writes it: its constants
    written into the text, its named inputs (:class:`teamstore.state.statements.Param`) left as
    placeholders, each cast to its column's type (so the server never has to guess one)."""
    return Statement(str(stmt.compile(dialect=_PSYCOPG, compile_kwargs={"literal_binds": True})))


async def execute(cursor: Any, stmt: Statement, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """Run one statement on ``cursor`` (a raw cursor) and return its single row, if any."""
    await cursor.execute(stmt.sql, stmt.args(params))
    row: tuple[Any, ...] | None = await cursor.fetchone()
    return row


def _ended(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection is known dead, without a round trip: closed, broken, or with something
    to read. An idle connection has nothing to say unless the server ended it (a restart, a failover,
    ``pg_terminate_backend``, an idle timeout): then its last words wait on the socket. (A setting the
    server reports, changed by a configuration reload, also arrives unasked: that connection is then
    replaced needlessly, once.)"""
    if conn.closed or conn.broken:
        return True
    try:
        poll = select.poll()  # not select.select(): it refuses descriptors past 1024, common in a big service
        poll.register(conn.pgconn.socket, select.POLLIN)
        return bool(poll.poll(0))
    except (OSError, ValueError, psycopg.Error):
        return True


class DirectPool:
    """Autocommit psycopg connections to ``engine``'s database, opened on demand, at most ``size`` out.

    A connection is checked on the way out (one the server ended while it sat idle, or a failed
    statement broke, is replaced: a single non-blocking look at its socket, no round trip) and on the
    way back (one left mid-transaction or mid-statement, as a cancelled call leaves it, is
    closed rather than reused).

    Args:
        engine: A ``postgresql+psycopg`` engine; only its URL is used.
        size: The most connections held at once.
        holds: What one connection is held for, for the error when none comes free
            (``"sessions"`` for the advisory-lock store, ``"statements"`` for the row-lease one).
        needs: Why the store needs PostgreSQL 14 or newer, if it does; an older server is then refused.
    """

    def __init__(self, engine: AsyncEngine, size: int, holds: str, needs: str | None = None) -> None:
        # The URL's query goes to libpq as keywords: rendered back into the URL, a space in a value (``options=-c
        # statement_timeout=5s``) would come out as "+", which libpq does not read as one.
        self._url = engine.url.set(drivername="postgresql", query={}).render_as_string(hide_password=False)
        self.size, self._holds, self._needs = size, holds, needs
        self._kwargs: dict[str, Any] = {"autocommit": True}
        self._kwargs.update((name, value[-1] if isinstance(value, tuple) else value)
                            for name, value in engine.url.query.items())
        self._kwargs.update((name, value) for name, value in _KEEPALIVES.items() if name not in engine.url.query)
        self._named = "application_name" not in engine.url.query
        self._idle: list[psycopg.AsyncConnection[Any]] = []  # a stack: the most recently used goes out first
        self._out: set[psycopg.AsyncConnection[Any]] = set()
        self._slots = asyncio.Semaphore(size)
        self._server_checked = False

    async def checkout(self, seconds: float) -> Any:
        """A connection, waiting up to ``seconds`` for one to come free.

        Raises:
            StoreUnavailable: None came free in time, or the database cannot be reached.
            ConfigurationError: The server is older than the store needs.
        """
        slots = self._slots
        if slots.locked():
            try:
                async with asyncio.timeout(max(seconds, 0.05)):
                    await slots.acquire()
            except TimeoutError:
                raise StoreUnavailable(
                    f"no database connection came free within {seconds:.1f}s: all {self.size} are "
                    f"held by {self._holds} in flight in this process",
                    hint="if the database is fine, raise TEAMSTORE_DB_POOL_SIZE or run fewer sessions per process",
                ) from None
        else:
            await slots.acquire()  # a free slot: returns at once
        try:
            conn = None
            while self._idle:
                candidate = self._idle.pop()
                if _ended(candidate):
                    await candidate.close()
                    continue
                conn = candidate
                break
            if conn is None:
                conn = await self._connect(seconds)
        except BaseException:
            slots.release()
            raise
        self._out.add(conn)
        return conn

    def _name(self) -> dict[str, Any]:
        """A new connection's ``application_name`` (:data:`APPLICATION_NAME`), unless the URL names one."""
        return {"application_name": f"{APPLICATION_NAME} {secrets.token_hex(4)}"} if self._named else {}

    async def _connect(self, budget: float) -> psycopg.AsyncConnection[Any]:
        try:
            async with asyncio.timeout(max(budget, _OPEN_SECONDS)):
                conn = await psycopg.AsyncConnection.connect(self._url, **self._kwargs, **self._name())
                try:
                    await conn.execute(UTC_SESSION)  # as the engine's connections are
                except BaseException:
                    await conn.close()  # not left open on the server until it is collected
                    raise
        except (psycopg.Error, TimeoutError) as exc:
            raise StoreUnavailable(
                "could not connect to the state database",
                hint="check TEAMSTORE_DATABASE_URL and the database server; no state was changed",
            ) from exc
        if not self._server_checked:
            version = conn.info.server_version
            if self._needs and version < _MIN_SERVER_VERSION:
                await conn.close()
                raise ConfigurationError(
                    f"the state database runs PostgreSQL {version // 10000}; {self._needs} needs 14 or newer",
                    hint="upgrade the server, or lease sessions in their rows instead ('teamstore db "
                    "lease-mode row' with every worker stopped, and TEAMSTORE_SESSION_LEASE=row)",
                )
            self._server_checked = True
        return conn

    async def checkin(self, conn: Any, *, discard: bool = False) -> None:
        """Give ``conn`` back; ``discard`` closes it first (ending its server session and its locks).

        A connection not idle (a statement or transaction left open) or broken is closed, not kept.
        """
        mine = conn in self._out
        self._out.discard(conn)
        try:
            if discard or not mine or conn.broken or conn.pgconn.transaction_status != _IDLE:
                await conn.close()
            else:
                self._idle.append(conn)
        finally:
            if mine:
                self._slots.release()

    async def close(self) -> None:
        """Close the idle connections; those still out are closed when they come back (the pool can
        be used again afterwards)."""
        idle, self._idle = self._idle, []
        self._out.clear()
        self._slots = asyncio.Semaphore(self.size)
        for conn in idle:
            await conn.close()
