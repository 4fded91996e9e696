"""A lock over a database that one run holds at a time, for as long as it lasts, and that goes with its holder
however it ends (a killed process's lock is free at once: nothing to expire, no one to guess from a timestamp).

    from teamstore.db.exclusive import exclusive

    async with exclusive(engine, "retention-forgetting") as mine:
        if mine:
            ...   # no other process holds it until the block ends

On Postgres it is a session-level advisory lock on a connection of its own, in autocommit (so never idle in a
transaction for the run's hours), closed at the end; the server frees the lock when that connection ends. An SQLite database is one
machine's: the lock is an ``flock`` on a file beside it (``<database>.<name>.lock``, owner-only, left in place
since removing a lock file races with the next holder), freed by the kernel when the process ends. An in-memory
SQLite database is this process's alone: the lock is this process's record.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from sqlalchemy import BigInteger, func, literal, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.engine import describe_failure
from teamstore.errors import StoreUnavailable

_in_process: set[tuple[int, str]] = set()
"""The locks this process holds on its in-memory SQLite databases (engine, name)."""


def _advisory_key(name: str) -> int:
    """A signed 64-bit key for ``name``, in the single-key space of Postgres' advisory locks (apart from the
    two-key space the sessions' leases use)."""
    return int.from_bytes(hashlib.sha256(f"teamstore:{name}".encode()).digest()[:8], "big", signed=True)


@contextlib.asynccontextmanager
async def exclusive(engine: AsyncEngine, name: str) -> AsyncIterator[bool]:
    """Take the lock ``name`` on ``engine``'s database if no one holds it, for the block's life.

    Args:
        engine: The database the lock is about.
        name: The lock's name (letters, digits and dashes: on SQLite it names a file).

    Yields:
        Whether this block holds the lock (``False``: another run does; nothing was waited for).

    Raises:
        StoreUnavailable: The database, or the folder of an SQLite file, refused the lock.
    """
    if engine.dialect.name == "postgresql":
        async with _advisory(engine, name) as mine:
            yield mine
        return
    database = engine.url.database
    if not database or database == ":memory:" or engine.url.query.get("uri"):
        key = (id(engine.sync_engine), name)
        mine = key not in _in_process
        _in_process.add(key)
        try:
            yield mine
        finally:
            if mine:
                _in_process.discard(key)
        return
    with _file_lock(Path(f"{database}.{name}.lock")) as mine:
        yield mine


@contextlib.asynccontextmanager
async def _advisory(engine: AsyncEngine, name: str) -> AsyncIterator[bool]:
    """A session-level advisory lock, on a connection held (autocommit) for the block's life. Its connection is
    closed for good at the end rather than pooled: the lock goes with it whatever ended the block (an unlock
    skipped by a cancellation would leave a pooled connection holding it)."""
    key = literal(_advisory_key(name), BigInteger)
    try:
        conn = await engine.connect()
    except SQLAlchemyError as exc:
        raise _refused(exc) from exc
    mine = False
    try:
        try:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            mine = bool(await conn.scalar(select(func.pg_try_advisory_lock(key))))
        except SQLAlchemyError as exc:
            raise _refused(exc) from exc
        yield mine
    finally:
        if mine:
            await conn.invalidate()  # closes the server session: the lock is released with it
        await conn.close()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[bool]:
    """An ``flock`` on ``path`` if no one holds it (the kernel frees it when the process ends)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StoreUnavailable(f"could not open the lock file {path} ({exc.strerror or exc})",
                               hint="check that the database's folder is writable by this user") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _refused(exc: SQLAlchemyError) -> StoreUnavailable:
    return StoreUnavailable(f"could not take a lock on the database: {describe_failure(exc)}",
                            hint="check the database and run the command again")
