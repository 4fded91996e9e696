"""What only row leases on Postgres do: no connection held while a session runs, a lease write that
skips its WAL flush while saves keep theirs, and a load that survives a dead pooled connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from teamstore.db.engine import create_engine
from teamstore.state.base import Claim, SessionKey
from teamstore.state.factory import store_for
from teamstore.state.row_lease import RowLeaseStore
from tests.conftest import prepare
from tests.state.test_store_conformance import record

pytestmark = pytest.mark.postgres
CLAIM = Claim("support_triage", "v1", 1, "0.7.5", {"researcher": "fp-1"})


@pytest.fixture
async def row_store(postgres_url: str) -> AsyncIterator[RowLeaseStore]:
    await prepare(postgres_url, "row")
    engine = create_engine(postgres_url)
    store = store_for(engine, pool_size=2, lease="row")
    assert isinstance(store, RowLeaseStore)
    yield store
    await store.aclose()
    await engine.dispose()


async def test_open_sessions_hold_no_connection(row_store: RowLeaseStore) -> None:
    keys = [SessionKey("alice", f"s{i}") for i in range(6)]  # three times the pool
    rows = await asyncio.gather(*(
        row_store.acquire(k, CLAIM, owner=f"w{i}", lease_ttl=60, wait_seconds=1) for i, k in enumerate(keys)
    ))
    assert all(r.is_new for r in rows)
    versions = await asyncio.gather(*(
        row_store.save(k, owner=f"w{i}", expected_version=0, record=record(), release=True)
        for i, k in enumerate(keys)
    ))
    assert versions == [1] * len(keys)


async def test_the_lease_write_skips_its_flush_and_the_save_keeps_it(row_store: RowLeaseStore) -> None:
    async with row_store.engine.begin() as conn:  # record the durability each write to the row ran with
        await conn.execute(text("CREATE TABLE commit_modes (op text, mode text)"))
        await conn.execute(text("""CREATE FUNCTION note_commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO commit_modes VALUES (TG_OP, current_setting('synchronous_commit')); RETURN NEW; END $$"""))
        await conn.execute(text("CREATE TRIGGER note BEFORE INSERT OR UPDATE ON ts_sessions "
                                "FOR EACH ROW EXECUTE FUNCTION note_commit_mode()"))
    key = SessionKey("alice", "s1")
    await row_store.acquire(key, CLAIM, owner="w1", lease_ttl=60, wait_seconds=1)  # INSERT of the new row
    await row_store.save(key, owner="w1", expected_version=0, record=record(), release=True)
    await row_store.acquire(key, CLAIM, owner="w2", lease_ttl=60, wait_seconds=1)  # INSERT, then its UPDATE
    await row_store.save(key, owner="w2", expected_version=1, record=record(), release=True)
    async with row_store.engine.connect() as conn:
        modes = [tuple(r) for r in await conn.execute(text("SELECT op, mode FROM commit_modes"))]
        server_default = (await conn.execute(text("SHOW synchronous_commit"))).scalar_one()
    assert server_default == "on"
    assert modes == [("INSERT", "off"), ("UPDATE", "on"), ("INSERT", "off"), ("UPDATE", "off"), ("UPDATE", "on")]


async def test_a_load_replaces_a_pooled_connection_the_server_ended(row_store: RowLeaseStore) -> None:
    key = SessionKey("alice", "s1")
    await row_store.acquire(key, CLAIM, owner="w1", lease_ttl=60, wait_seconds=1)
    await row_store.save(key, owner="w1", expected_version=0, record=record(), release=True)
    async with row_store.engine.connect() as conn:  # a restart or failover, as the pool sees it
        ended = (await conn.execute(text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ))).scalar_one()
    assert ended >= 1
    row = await row_store.acquire(key, CLAIM, owner="w2", lease_ttl=60, wait_seconds=1)
    assert row.row_version == 1 and row.state == '{"x":1}'


async def test_a_save_after_a_restart_goes_through_on_a_live_connection(row_store: RowLeaseStore) -> None:
    # The lease survived in the row; the pooled connection did not. The save is not retried (it writes),
    # so it must not be sent on a dead connection in the first place.
    key = SessionKey("alice", "s1")
    row = await row_store.acquire(key, CLAIM, owner="w1", lease_ttl=60, wait_seconds=1)
    async with row_store.engine.connect() as conn:
        await conn.execute(text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ))
    await asyncio.sleep(0.2)
    assert await row_store.save(key, owner="w1", expected_version=row.row_version, record=record(), release=True) == 1
