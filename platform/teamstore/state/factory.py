"""The state store for a database: the one entry point that picks a backend.

    from teamstore.db.engine import create_engine
    from teamstore.state.factory import store_for

    store = store_for(create_engine("sqlite:///.teamstore/teamstore.db"))
    row = await store.acquire(key, claim, owner="worker-1", lease_ttl=300, wait_seconds=10)
    ...
    await store.aclose()
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.state.base import StateStore
from teamstore.state.lease_mode import known


def store_for(engine: AsyncEngine, *, pool_size: int = 20, lease: str = "lock") -> StateStore:
    """The store for ``engine``: on Postgres, advisory-lock leases (``lock``) or row leases (``row``);
    on SQLite always row leases.

    Args:
        engine: The state database (the caller owns it).
        pool_size: Postgres: the size of the store's own connection pool; with ``lock`` leases, the most
            sessions this process holds open at once (a connection each).
        lease: Postgres only; it must match what the database records (see
            :func:`teamstore.state.lease_mode.lease_mode`).

    Raises:
        ConfigurationError: ``lease`` is neither ``lock`` nor ``row``.
    """
    known(lease)
    if engine.dialect.name != "postgresql":
        from teamstore.state.sqlite import sqlite_store

        return sqlite_store(engine)
    if lease == "lock":  # each Postgres backend is imported when chosen: psycopg is the `postgres` extra
        from teamstore.state.postgres_lock import LockLeaseStore

        return LockLeaseStore(engine, pool_size=pool_size)
    from teamstore.state.postgres_row import postgres_row_store

    return postgres_row_store(engine, pool_size=pool_size)
