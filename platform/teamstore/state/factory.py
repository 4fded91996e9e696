"""The state store for a database: the one entry point that picks a backend.

    from teamstore.db.engine import create_engine
    from teamstore.state.factory import store_for

    store = store_for(engine, keys=KeyService.from_settings(engine))   # states sealed under users' keys
    row = await store.acquire(key, claim, owner="worker-1", lease_ttl=300, wait_seconds=10)
    ...
    await store.aclose()

Without ``keys`` the backend itself comes back, writing states as given: what the backends' own suites and
benchmarks measure. Everything that stores users' states (the composition root, a Platform's own store)
passes one.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.keys.service import KeyService
from teamstore.state.base import StateStore
from teamstore.state.lease_mode import CHECK_SECONDS, known


def store_for(
    engine: AsyncEngine, *, pool_size: int = 20, lease: str = "lock", keys: KeyService | None = None,
    check_seconds: float = CHECK_SECONDS,
) -> StateStore:
    """The store for ``engine``: on Postgres, advisory-lock leases (``lock``) or row leases (``row``);
    on SQLite always row leases.

    Args:
        engine: The state database (the caller owns it).
        pool_size: Postgres: the size of the store's own connection pool; with ``lock`` leases, the most
            sessions this process holds open at once (a connection each).
        lease: Postgres only; it must match what the database records (see
            :func:`teamstore.state.lease_mode.lease_mode`).
        keys: Seal every state under its user's data key (:class:`teamstore.state.sealed.SealedStateStore`).
        check_seconds: How often the store reads the database's lease mode and migration again, at a session's
            opening (``TEAMSTORE_DB_CHECK_SECONDS``; :class:`teamstore.state.lease_mode.LeaseModeCheck`).

    Raises:
        ConfigurationError: ``lease`` is neither ``lock`` nor ``row``.
    """
    known(lease)
    backend = _backend(engine, pool_size, lease, check_seconds)
    if keys is None:
        return backend
    from teamstore.state.sealed import SealedStateStore

    return SealedStateStore(backend, keys)


def _backend(engine: AsyncEngine, pool_size: int, lease: str, check_seconds: float) -> StateStore:
    if engine.dialect.name != "postgresql":
        from teamstore.state.sqlite import sqlite_store

        return sqlite_store(engine, check_seconds)
    if lease == "lock":  # each Postgres backend is imported when chosen: psycopg is the `postgres` extra
        from teamstore.state.postgres_lock import LockLeaseStore

        return LockLeaseStore(engine, pool_size=pool_size, check_seconds=check_seconds)
    from teamstore.state.postgres_row import postgres_row_store

    return postgres_row_store(engine, pool_size=pool_size, check_seconds=check_seconds)
