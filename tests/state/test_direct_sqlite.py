"""SQLite's hot path: statements on the event loop while the file is free, on a thread while another
connection holds it, and the WAL checkpointed off the loop."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, func, insert, select, text

from teamstore.db.engine import create_engine
from teamstore.state.direct_sqlite import SqlitePool, for_sqlite

_ROWS = Table("rows", MetaData(), Column("id", Integer, primary_key=True), Column("body", String))
_INSERT = for_sqlite(insert(_ROWS).values(body=text(":body")).returning(_ROWS.c.id))
_COUNT = for_sqlite(select(func.count()).select_from(_ROWS))


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[tuple[Path, SqlitePool]]:
    path = tmp_path / "direct.db"
    engine = create_engine(f"sqlite:///{path.as_posix()}")
    async with engine.begin() as conn:
        await conn.run_sync(_ROWS.metadata.create_all)
    pool = SqlitePool.for_engine(engine, size=2)
    assert pool is not None
    yield path, pool
    await pool.close()
    await engine.dispose()


async def test_statements_run_on_the_loop_while_the_file_is_free(database: tuple[Path, SqlitePool]) -> None:
    _, pool = database
    await pool.fetch(_INSERT, {"body": "first"})  # the first opens the file through the engine, on a thread
    await pool.fetch(_COUNT, {})
    threads: set[int] = set()
    # A function SQLite calls while it runs the statement tells which thread ran it.
    assert pool._loop_conn is not None
    pool._loop_conn.create_function("here", 0, lambda: threads.add(threading.get_ident()) or 1)
    here = for_sqlite(select(func.here()))
    assert await pool.fetch(here, {}) == [(1,)]
    assert threads == {threading.get_ident()}


async def test_a_write_while_another_connection_holds_the_file_waits_on_a_thread_and_lands(
    database: tuple[Path, SqlitePool],
) -> None:
    path, pool = database
    await pool.fetch(_INSERT, {"body": "first"})
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's writer, say
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    write = asyncio.create_task(pool.fetch(_INSERT, {"body": "second"}))
    await asyncio.sleep(0.3)
    assert not write.done()  # waiting for the lock ...
    assert ticks >= 10  # ... without stalling the loop
    holder.execute("COMMIT")
    holder.close()
    (row,) = await asyncio.wait_for(write, 10)
    ticker.cancel()
    assert row[0] == 2
    assert await pool.fetch(_COUNT, {}) == [(2,)]


async def test_the_wal_stays_bounded_under_writes_made_on_the_loop(database: tuple[Path, SqlitePool]) -> None:
    path, pool = database
    body = "x" * 3000  # about a page per write
    for _ in range(1500):
        await pool.fetch(_INSERT, {"body": body})
    assert await pool.fetch(_COUNT, {}) == [(1500,)]
    wal = path.with_name(path.name + "-wal")
    frame = 4096 + 24  # a page and its header
    # SQLite checkpoints once the WAL holds 1,000 pages, and the next write starts it again from the top.
    assert wal.stat().st_size < 1200 * frame


async def test_a_statement_sqlite_refuses_raises_and_the_next_opens_afresh(database: tuple[Path, SqlitePool]) -> None:
    _, pool = database
    await pool.fetch(_INSERT, {"body": "first"})
    missing = for_sqlite(select(func.count()).select_from(text("no_such_table")))
    with pytest.raises(sqlite3.OperationalError):
        await pool.fetch(missing, {})
    assert await pool.fetch(_COUNT, {}) == [(1,)]
