"""SQLite's hot path: a few aiosqlite connections of the caller's own, each statement one hop to its thread.

    from teamstore.state.direct_sqlite import SqlitePool, for_sqlite

    SAVE = for_sqlite(statements.save_row(statements.SQLITE, release=True))   # once, at import
    pool = SqlitePool.for_engine(engine, size=4)      # None for a database that is not a file
    rows = await pool.fetch(SAVE, params)

aiosqlite runs each SQLite connection in a thread of its own. SQLAlchemy's adapter sends a statement in
four hops to that thread (cursor, execute, fetch, close) and more around it (the isolation level set and
reset, the ``ROLLBACK`` on checkin): on a busy machine each hop waits for the thread to be scheduled,
and the statement's client work cost ten times what SQLite spends on it. Here a statement is compiled once,
as SQLAlchemy's SQLite dialect writes it, and sent in autocommit in one hop (``execute_fetchall``), its
parameters and results converted by the same column types SQLAlchemy would use, so a value written here
reads the same through the engine and back.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
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

    A connection whose statement was cut short (a cancelled caller) goes back all the same: aiosqlite runs
    its statements in order on its thread, and in autocommit none leaves a transaction open.

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
        async with self._slots:
            conn = self._idle.pop() if self._idle else await self._connect()
            try:
                rows = await conn.execute_fetchall(stmt.sql, stmt.args(params))
            except sqlite3.Error:
                await conn.close()  # a file gone, damaged or locked: the next statement opens afresh
                raise
            except BaseException:
                self._idle.append(conn)  # cut short: its statement ends on its thread before the next one
                raise
            self._idle.append(conn)
        return [stmt.row(r) for r in rows]

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
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()

