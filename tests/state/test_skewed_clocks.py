"""Workers on hosts whose clocks disagree still exclude each other on Postgres: every lease and expiry is
written and compared on the server's clock. A skewed host is this process with its clock moved
(:func:`tests.clocks.host_clock`); the worker holding the session runs before the move."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db import clock
from teamstore.db.engine import create_engine
from teamstore.errors import SessionBusy
from teamstore.state.base import Claim, SessionKey, StateStore
from teamstore.state.factory import store_for
from teamstore.state.schema import quarantine, sessions
from teamstore.state.sweep import sweep_expired_sessions
from tests.clocks import host_clock
from tests.conftest import prepare
from tests.state.test_store_conformance import record

pytestmark = pytest.mark.postgres
CLAIM = Claim("support_triage", "v1", 1, "0.7.5", {"researcher": "fp-1"})
KEY = SessionKey("alice", "s1")
SKEW = timedelta(minutes=6)
LEASE_TTL = 300.0  # the default lease: shorter than the skew


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    await prepare(postgres_url, "row")
    engine = create_engine(postgres_url)
    yield engine
    await engine.dispose()


@pytest.fixture
async def worker(engine: AsyncEngine) -> AsyncIterator[StateStore]:
    """Worker A, on a host whose clock agrees with the database's."""
    store = store_for(engine, pool_size=2, lease="row")
    yield store
    await store.aclose()


@pytest.fixture
async def other(engine: AsyncEngine) -> AsyncIterator[StateStore]:
    """Worker B, another store on the same database (its host's clock is set by each test)."""
    store = store_for(engine, pool_size=2, lease="row")
    yield store
    await store.aclose()


async def _lease_left(engine: AsyncEngine) -> timedelta:
    """How long the session's lease has to run, by the database's clock."""
    async with engine.connect() as conn:
        left: timedelta = (await conn.execute(select(sessions.c.lease_until - func.now()))).scalar_one()
    return left


async def test_a_sweep_on_a_host_whose_clock_runs_ahead_leaves_a_running_session(
    engine: AsyncEngine, worker: StateStore
) -> None:
    row = await worker.acquire(KEY, CLAIM, owner="a", lease_ttl=LEASE_TTL, wait_seconds=0)
    assert row.is_new
    with host_clock(SKEW):
        assert await sweep_expired_sessions(engine) == 0
    assert await worker.save(KEY, owner="a", expected_version=0, record=record(), release=True) == 1


async def test_a_host_whose_clock_runs_ahead_cannot_take_a_held_lease(
    worker: StateStore, other: StateStore
) -> None:
    await worker.acquire(KEY, CLAIM, owner="a", lease_ttl=LEASE_TTL, wait_seconds=0)
    with host_clock(SKEW), pytest.raises(SessionBusy):
        await other.acquire(KEY, CLAIM, owner="b", lease_ttl=LEASE_TTL, wait_seconds=0)
    assert await worker.save(KEY, owner="a", expected_version=0, record=record(), release=True) == 1


async def test_a_lease_taken_on_a_host_whose_clock_runs_behind_still_excludes_others(
    worker: StateStore, other: StateStore
) -> None:
    with host_clock(-SKEW):
        await other.acquire(KEY, CLAIM, owner="b", lease_ttl=LEASE_TTL, wait_seconds=0)
    with pytest.raises(SessionBusy):
        await worker.acquire(KEY, CLAIM, owner="a", lease_ttl=LEASE_TTL, wait_seconds=0)


@pytest.mark.parametrize("offset", [-SKEW, SKEW], ids=["behind", "ahead"])
async def test_a_renewal_runs_the_lease_on_from_the_database_clock(
    engine: AsyncEngine, worker: StateStore, other: StateStore, offset: timedelta
) -> None:
    await other.acquire(KEY, CLAIM, owner="b", lease_ttl=LEASE_TTL, wait_seconds=0)
    with host_clock(offset):
        assert await other.renew(KEY, owner="b", lease_ttl=LEASE_TTL)
    assert timedelta(seconds=LEASE_TTL - 5) < await _lease_left(engine) <= timedelta(seconds=LEASE_TTL)
    with pytest.raises(SessionBusy):
        await worker.acquire(KEY, CLAIM, owner="a", lease_ttl=LEASE_TTL, wait_seconds=0)


@pytest.mark.parametrize("lease", ["row", "lock"])
async def test_a_sweep_on_a_host_whose_clock_runs_ahead_keeps_a_session_until_it_expires(
    postgres_url: str, lease: str
) -> None:
    await prepare(postgres_url, lease)
    engine = create_engine(postgres_url)
    store = store_for(engine, pool_size=2, lease=lease)
    try:
        await store.acquire(KEY, CLAIM, owner="a", lease_ttl=LEASE_TTL, wait_seconds=0)
        await store.save(KEY, owner="a", expected_version=0, record=record(days=3 / 1440), release=True)
        with host_clock(SKEW):  # three minutes left, by the database's clock
            assert await sweep_expired_sessions(engine) == 0
        assert await store.get(KEY) is not None
    finally:
        await store.aclose()
        await engine.dispose()


@pytest.mark.parametrize("lease", ["row", "lock"])
@pytest.mark.parametrize("offset", [-SKEW, SKEW], ids=["behind", "ahead"])
async def test_an_expiry_saved_on_a_skewed_host_counts_from_the_database_clock(
    postgres_url: str, lease: str, offset: timedelta
) -> None:
    await prepare(postgres_url, lease)
    engine = create_engine(postgres_url)
    store = store_for(engine, pool_size=2, lease=lease)
    ttl = timedelta(minutes=10)
    try:
        with host_clock(offset):
            await store.acquire(KEY, CLAIM, owner="a", lease_ttl=LEASE_TTL, wait_seconds=0)
            saved = replace(record(), expires_at=clock.now_utc() + ttl)  # as the runtime makes it, on this host
            await store.save(KEY, owner="a", expected_version=0, record=saved, release=True)
        async with engine.connect() as conn:
            left = (await conn.execute(select(sessions.c.expires_at - func.now()))).scalar_one()
        assert ttl - timedelta(seconds=5) < left <= ttl
    finally:
        await store.aclose()
        await engine.dispose()


async def test_a_state_quarantined_on_a_host_whose_clock_runs_behind_is_stamped_on_the_database_clock(
    engine: AsyncEngine, worker: StateStore
) -> None:
    row = await worker.acquire(KEY, CLAIM, owner="a", lease_ttl=LEASE_TTL, wait_seconds=0)
    with host_clock(-SKEW):  # its retention counts from the stamp: a sweep on another host reads it
        await worker.quarantine(row, owner="a", reason="corrupt", detail="test")
    async with engine.connect() as conn:
        age = (await conn.execute(select(func.now() - quarantine.c.quarantined_at))).scalar_one()
    assert timedelta(0) <= age < timedelta(seconds=5)


@pytest.mark.parametrize("offset", [-SKEW, SKEW], ids=["behind", "ahead"])
async def test_a_state_restored_on_a_skewed_host_expires_and_ages_on_the_database_clock(
    engine: AsyncEngine, worker: StateStore, offset: timedelta
) -> None:
    row = await worker.acquire(KEY, CLAIM, owner="a", lease_ttl=LEASE_TTL, wait_seconds=0)
    await worker.save(KEY, owner="a", expected_version=0, record=record(), release=False)
    qid = await worker.quarantine(await worker.get(KEY) or row, owner="a", reason="corrupt", detail="test")
    await worker.release(KEY, owner="a", discard_empty=False)
    retention = timedelta(minutes=3)  # the state was set aside just now, by the database's clock
    with host_clock(offset):
        await worker.restore_quarantined(qid, ttl=timedelta(minutes=10), retention=retention)
    async with engine.connect() as conn:
        left = (await conn.execute(select(sessions.c.expires_at - func.now()))).scalar_one()
    assert timedelta(minutes=10) - timedelta(seconds=5) < left <= timedelta(minutes=10)
