"""One read snapshot for every query of a report, so its parts agree while runs are being recorded.

    from teamstore.db.snapshot import read_snapshot, reading

    async with read_snapshot(engine) as conn:      # every statement on conn sees the same committed rows
        groups = (await conn.execute(by_group)).all()
        total = await conn.scalar(overall)

    async with reading(engine_or_conn) as conn:    # a caller's snapshot connection is used as it is

On Postgres the transaction is REPEATABLE READ: its snapshot is taken at its first statement and kept to its
end. On SQLite a read transaction does the same (in WAL mode a reader sees the database as of its first read
and writers go on beside it), but pysqlite opens a transaction only before a write: without an explicit
``BEGIN`` each SELECT would read on its own, each seeing whatever had been committed by then.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine


@asynccontextmanager
async def read_snapshot(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection whose statements all read one snapshot of the database.

    Args:
        engine: The database, owned by the caller.

    Yields:
        The connection, inside its transaction (ended when the block is): for reading only.
    """
    async with engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if not sqlite:
            await conn.execution_options(isolation_level="REPEATABLE READ")
        async with conn.begin():
            if sqlite:
                await conn.exec_driver_sql("BEGIN")  # pysqlite would leave each SELECT to read on its own
            yield conn


@asynccontextmanager
async def reading(source: AsyncEngine | AsyncConnection) -> AsyncIterator[AsyncConnection]:
    """``source`` itself when it is a connection (the caller's snapshot), else a :func:`read_snapshot` of it.

    Args:
        source: An engine, or a connection the caller opened (and closes).
    """
    if isinstance(source, AsyncConnection):
        yield source
        return
    async with read_snapshot(source) as conn:
        yield conn
