"""What only the Postgres store does: advisory-lock leases on held connections."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.errors import SessionBusy, StaleStateVersion, StoreUnavailable
from teamstore.state.base import Claim, SessionKey
from teamstore.state.postgres_lock import LockLeaseStore
from tests.state.test_store_conformance import record

pytestmark = pytest.mark.postgres
CLAIM = Claim("support_triage", "v1", 1, "0.7.5", {"researcher": "fp-1"})


@pytest.fixture
async def pg_store(postgres_url: str) -> AsyncIterator[LockLeaseStore]:
    engine = create_engine(postgres_url)
    await upgrade(engine)
    store = LockLeaseStore(engine, pool_size=2)
    yield store
    await store.aclose()
    await engine.dispose()


async def _locks(store: LockLeaseStore) -> int:
    """Advisory locks held in the test's own database (another database on the server may hold its own)."""
    query = text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                 "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
    async with store.engine.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


async def test_load_writes_nothing_and_save_releases_at_commit(pg_store: LockLeaseStore) -> None:
    key = SessionKey("alice", "s1")
    row = await pg_store.acquire(key, CLAIM, owner="w1", lease_ttl=60, wait_seconds=1)
    assert row.is_new and await pg_store.get(key) is None  # a new session has no row until its first save
    assert await _locks(pg_store) == 1
    await pg_store.save(key, owner="w1", expected_version=0, record=record(), release=True)
    assert await _locks(pg_store) == 0
    stored = await pg_store.get(key)
    assert stored is not None and stored.row_version == 1 and stored.state == '{"x":1}'


async def test_release_without_a_save_frees_the_lock(pg_store: LockLeaseStore) -> None:
    key = SessionKey("alice", "s1")
    await pg_store.acquire(key, CLAIM, owner="w1", lease_ttl=60, wait_seconds=1)
    await pg_store.release(key, owner="w1", discard_empty=True)
    assert await _locks(pg_store) == 0 and await pg_store.get(key) is None


async def test_every_connection_held_is_a_typed_error_naming_the_pool(pg_store: LockLeaseStore) -> None:
    for i in range(2):
        await pg_store.acquire(SessionKey("alice", f"s{i}"), CLAIM, owner="w1", lease_ttl=60, wait_seconds=1)
    with pytest.raises(StoreUnavailable) as info:
        await pg_store.acquire(SessionKey("alice", "s3"), CLAIM, owner="w1", lease_ttl=60, wait_seconds=0.3)
    assert "TEAMSTORE_DB_POOL_SIZE" in (info.value.hint or "")
    await pg_store.release(SessionKey("alice", "s0"), owner="w1", discard_empty=True)
    await pg_store.acquire(SessionKey("alice", "s3"), CLAIM, owner="w1", lease_ttl=60, wait_seconds=1)


async def test_a_save_by_a_worker_without_the_lease_is_refused(pg_store: LockLeaseStore) -> None:
    key = SessionKey("alice", "s1")
    with pytest.raises(StaleStateVersion):
        await pg_store.save(key, owner="nobody", expected_version=0, record=record(), release=True)
    assert await pg_store.get(key) is None


async def test_connections_back_in_the_pool_carry_no_lease_timer(pg_store: LockLeaseStore) -> None:
    # A refused attempt (busy, or held by an erasure) must not hand its connection back with the lease
    # timer armed, or the server would end that idle pooled connection after the TTL.
    key = SessionKey("alice", "s1")
    await pg_store.acquire(key, CLAIM, owner="w1", lease_ttl=0.3, wait_seconds=1)
    with pytest.raises(SessionBusy):
        await pg_store.acquire(key, CLAIM, owner="w2", lease_ttl=0.3, wait_seconds=0.1)
    await pg_store.release(key, owner="w1", discard_empty=True)
    await asyncio.sleep(0.8)
    for i in range(2):  # every connection of the pool, each idle for longer than the TTL
        await pg_store.acquire(SessionKey("bob", f"s{i}"), CLAIM, owner="w3", lease_ttl=60, wait_seconds=1)


async def test_a_dead_pooled_connection_is_replaced_not_reported(pg_store: LockLeaseStore) -> None:
    # After a database restart every pooled connection is dead: the next load takes a fresh one.
    key = SessionKey("alice", "s1")
    await pg_store.acquire(key, CLAIM, owner="w1", lease_ttl=60, wait_seconds=1)
    await pg_store.release(key, owner="w1", discard_empty=True)
    async with pg_store.engine.connect() as conn:
        await conn.execute(text(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ))
    await asyncio.sleep(0.2)
    row = await pg_store.acquire(key, CLAIM, owner="w2", lease_ttl=60, wait_seconds=5)
    assert row.is_new
