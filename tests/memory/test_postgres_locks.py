"""What only Postgres needs of the memory store: writers and the retention sweep that take the same fact rows
never wait for each other in a circle (Postgres would abort one of them as a deadlock)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from teamstore.db.engine import create_engine
from teamstore.keys import KeyService
from teamstore.memory.schema import facts
from teamstore.memory.store import MemoryStore
from teamstore.settings import Settings
from tests.conftest import upgrade_database
from tests.memory.test_store_conformance import T0, put, stored_facts

pytestmark = pytest.mark.postgres
LEFT = [f"fact_{i:02d}" for i in range(20)]


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    await upgrade_database(postgres_url)
    found = create_engine(postgres_url)
    yield found
    await found.dispose()


async def waiting_for_locks(monitor: AsyncConnection, *tasks: asyncio.Task[object]) -> None:
    """Return once every task still running waits for a row lock (or none runs any more)."""
    query = text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                 "AND wait_event_type = 'Lock'")
    async with asyncio.timeout(10):
        while True:
            waiting = await monitor.scalar(query)
            await monitor.rollback()  # the activity is read once per transaction
            if waiting == sum(not t.done() for t in tasks):
                return
            await asyncio.sleep(0.02)


async def test_the_sweep_and_a_first_write_replacing_the_same_leftover_facts_both_succeed(
    engine: AsyncEngine,
) -> None:
    store = MemoryStore(engine, keys=KeyService.from_settings(engine, Settings()))
    async with engine.begin() as conn:
        # Left over, stored in the reverse of their names' order: the sweep reads them in the order they are
        # stored, a write by its scope's key (by name). Taken in opposite orders, each held rows the other
        # wanted next.
        await conn.execute(insert(facts), [
            {"user_id": "alice", "scope": "helpdesk", "name": name, "type": "int", "value": "1",
             "source_run_id": "run-0", "created_at": T0, "confirmed_at": T0} for name in reversed(LEFT)])
    async with engine.connect() as holder, engine.connect() as monitor:
        # Another transaction holds the fact the sweep meets first, so that the write gets under way meanwhile.
        await holder.execute(select(facts.c.name).where(facts.c.name == LEFT[-1]).with_for_update())
        sweeping = asyncio.create_task(store.sweep(now=T0))
        await waiting_for_locks(monitor, sweeping)
        writing = asyncio.create_task(put(store, "new ticket", {"ticket_id": "60001"}, run="run-2"))
        await waiting_for_locks(monitor, sweeping, writing)
        await holder.rollback()
        swept, version = await asyncio.gather(sweeping, writing, return_exceptions=True)
    assert version == 1, version  # the write was not aborted, nor the sweep
    assert not isinstance(swept, BaseException) and swept.leftover_facts == len(LEFT) - 1, swept
    # The fact the sweep found held went with the write that held it, as a first write replaces leftovers.
    assert await stored_facts(engine) == [("alice", "helpdesk", "ticket_id")]
    (kept,) = await store.show("alice", held=True)
    assert not kept.leftover and {n: f.value for n, f in kept.facts.items()} == {"ticket_id": "60001"}
