"""SQLite's hot path: a few aiosqlite connections of the caller's own, each statement one hop to its thread.

    from teamstore.state.direct_sqlite import SqlitePool, for_sqlite

    SAVE = for_sqlite(statements.save_row(statements.SQLITE, release=True))   # once, at import
    pool = SqlitePool.for_engine(engine, size=4)      # None for a database that is not a file
    rows = await pool.fetch(SAVE, params)

aiosqlite runs each SQLite connection in a thread of its own. SQLAlchemy's adapter sends a statement in
four hops to that thread (cursor, execute, fetch, close) and more around it (the isolation level set and
reset, the ``ROLLBACK`` on checkin): on a busy machine each hop waits for the thread to be scheduled,
and the statement's client work cost ten times what SQLite spends on it. Here a statement is compiled once,
as SQLAlchemy's SQLite dialect writes it, its parameters and results converted by the same column types
SQLAlchemy would use, so a value written here reads the same through the engine and back.

It is first tried on the event loop itself, on a connection that never waits for a lock: each statement
is one indexed row in autocommit, tens of microseconds against SQLite's page cache, less than the hop to a
thread costs (the GIL passes to that thread only when the loop next waits). When another connection holds
the write lock, SQLite answers "busy" at once and the statement, which did nothing, goes to a thread that
waits out the lock (``busy_timeout``), so a busy database never stalls the loop. Like any SQLite
connection, the loop's own checkpoints the WAL into the file once it holds ~1,000 pages (every hundred
requests or so; a few milliseconds on a local disk): a checkpoint run on a thread beside the loop's
writes falls behind them and the WAL grows without bound.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import aiosqlite
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from teamstore.db.engine import SQLITE_PRAGMAS

_SQLITE = SQLiteDialect_pysqlite(paramstyle="named")
Processor = Callable[[Any], Any] | None


class SqliteStatement:
    """A statement compiled once for SQLite, with the conversions of its parameters and of its result columns."""

    def __init__(self, stmt: ClauseElement) -> None:
        compiled = cast(SQLCompiler, stmt.compile(dialect=_SQLITE, compile_kwargs={"literal_binds": True}))
        self.sql = str(compiled)
        # Only the statement's named inputs are left as placeholders (its constants are in the text). Each
        # is converted as SQLAlchemy's SQLite dialect converts its type (a datetime to its text ...).
        self._binds: dict[str, Processor] = {
            name: bind.type.dialect_impl(_SQLITE).bind_processor(_SQLITE) for name, bind in compiled.binds.items()
        }
        columns = getattr(stmt, "exported_columns", ())  # a SELECT's columns, or a RETURNING's
        self._results: list[Processor] = [
            c.type.dialect_impl(_SQLITE).result_processor(_SQLITE, None) for c in columns
        ]

    def args(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The parameters as SQLite takes them (a datetime as SQLAlchemy's text, a JSON value as text ...)."""
        return {name: params[name] if process is None else process(params[name])
                for name, process in self._binds.items()}

    def row(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """A result row as SQLAlchemy would read it (text back to datetimes, damaged values marked ...)."""
        return tuple(value if process is None else process(value)
                     for process, value in zip(self._results, values, strict=True))


def for_sqlite(stmt: ClauseElement) -> SqliteStatement:
    """``stmt`` (SQLAlchemy Core) compiled once for :class:`SqlitePool`."""
    return SqliteStatement(stmt)


class SqlitePool:
    """Autocommit aiosqlite connections to one SQLite file, opened on demand, at most ``size`` out.

    A statement runs on the loop (see the module's docstring) unless the database is busy; on a thread
    then. A connection whose statement was cut short there (a cancelled caller) goes back all the same:
    aiosqlite runs its statements in order on its thread, and in autocommit none leaves a transaction open.

    Args:
        engine: The engine on that file (the caller's); it makes the file, private to its owner, first.
        size: The most connections open at once.
    """

    def __init__(self, engine: AsyncEngine, size: int) -> None:
        self.engine = engine
        self._path = str(engine.url.database)
        self._idle: list[aiosqlite.Connection] = []
        self._slots = asyncio.Semaphore(size)
        self._made = False
        self._loop_conn: sqlite3.Connection | None = None

    @classmethod
    def for_engine(cls, engine: AsyncEngine, size: int = 4) -> SqlitePool | None:
        """A pool on ``engine``'s SQLite file, or ``None`` for a database that is not a plain file (an
        in-memory one is another database on every connection)."""
        database = engine.url.database
        if not database or database == ":memory:" or engine.url.query.get("uri"):
            return None
        return cls(engine, size)

    async def fetch(self, stmt: SqliteStatement, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """Run ``stmt`` in its own transaction and return its rows (of a SELECT or a RETURNING).

        Raises:
            sqlite3.Error: SQLite refused it, or the file could not be opened.
        """
        args = stmt.args(params)
        rows = self._on_loop(stmt.sql, args) if self._made else None
        if rows is None:
            rows = await self._on_thread(stmt.sql, args)
        return [stmt.row(r) for r in rows]

    def _on_loop(self, sql: str, args: dict[str, Any]) -> list[Any] | None:
        """The statement's rows, run here; ``None`` if SQLite was busy (it did nothing then)."""
        try:
            conn = self._loop_conn = self._loop_conn or _open_on_loop(self._path)
            rows = conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            if (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                return None
            if self._loop_conn is not None:  # a file gone or damaged: the next statement opens afresh
                self._loop_conn.close()
                self._loop_conn = None
            raise
        return rows

    async def _on_thread(self, sql: str, args: dict[str, Any]) -> list[Any]:
        async with self._slots:
            conn = self._idle.pop() if self._idle else await self._connect()
            try:
                rows = await conn.execute_fetchall(sql, args)
            except sqlite3.Error:
                await conn.close()  # a file gone, damaged or locked: the next statement opens afresh
                raise
            except BaseException:
                self._idle.append(conn)  # cut short: its statement ends on its thread before the next one
                raise
            self._idle.append(conn)
        return list(rows)

    async def _connect(self) -> aiosqlite.Connection:
        if not self._made:
            # The engine's first connection creates the file (owner-only) and sets its WAL journal mode.
            async with self.engine.connect():
                self._made = True
        opening = aiosqlite.connect(self._path, isolation_level=None)
        # Its thread must not hold the process open at exit when a pool is never closed (an application
        # that does not close its platform): as SQLAlchemy's own aiosqlite dialect does for the engine's.
        worker = opening if isinstance(opening, threading.Thread) else getattr(opening, "_thread", None)
        if isinstance(worker, threading.Thread):
            worker.daemon = True
        conn = await opening
        try:
            for pragma in SQLITE_PRAGMAS:
                await conn.execute(f"PRAGMA {pragma}")
        except BaseException:
            await conn.close()
            raise
        return conn

    async def close(self) -> None:
        """Close the idle connections (the pool opens new ones if used again)."""
        if self._loop_conn is not None:
            self._loop_conn.close()
            self._loop_conn = None
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()


def _open_on_loop(path: str) -> sqlite3.Connection:
    """A connection for statements run on the event loop: the engine's pragmas, but one that answers "busy" at
    once instead of waiting."""
    # Opened read-write, never created: a file deleted under the pool is an error, not a new empty database.
    uri = f"{Path(path).resolve().as_uri()}?mode=rw"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    try:
        # "busy" at once from the first pragma on: even the journal mode's is never waited for here.
        others = [p for p in SQLITE_PRAGMAS if not p.startswith("busy_timeout")]
        for pragma in ("busy_timeout=0", *others):
            conn.execute(f"PRAGMA {pragma}")
    except BaseException:
        conn.close()
        raise
    return conn
