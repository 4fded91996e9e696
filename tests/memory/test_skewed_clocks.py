"""User memory on hosts whose clocks disagree with the database's (Postgres): a memory's expiry is written, judged
at recall and at the next write, and swept on the server's clock, and a run continued after a forget is bounded by
the server's clock as the session it started in opened, not by its start on a worker's clock running ahead. A
skewed host is this process with its clock moved (:func:`tests.clocks.host_clock`); the memory is written before
the move."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy import Interval, func, literal, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.db.engine import create_engine
from teamstore.errors import MemoryNotFound, StaleMemory
from teamstore.memory.facts import MemoryUpdate
from teamstore.memory.schema import facts, memories
from teamstore.memory.store import MemoryStore
from teamstore.offline import _memory_request
from teamstore.runtime.platform import Platform
from tests.clocks import host_clock
from tests.conftest import prepare
from tests.memory.team import CALLS, TEAM, helpdesk, helpdesk_manifest
from tests.memory.test_sessions import FIRST
from tests.memory.test_store_conformance import TYPES
from tests.runtime.checkpoint_teams import counted_calls

pytestmark = pytest.mark.postgres
SKEW = timedelta(minutes=6)
LEFT = timedelta(minutes=3)  # what a memory has left (or how long ago it expired) by the database's clock: < SKEW
RETENTION_DAYS = 180


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    await prepare(postgres_url, "lock")
    found = create_engine(postgres_url)
    yield found
    await found.dispose()


async def put(store: MemoryStore, summary: str, facts_: dict[str, object], *, expected: int = 0) -> int:
    return await store.write("alice", "helpdesk", MemoryUpdate(summary, facts_), types=TYPES,
                             expected_version=expected, run_id=f"run-{expected + 1}", team="helpdesk",
                             team_version="v1", retention_days=RETENTION_DAYS)


async def expiring(engine: AsyncEngine, store: MemoryStore, left: timedelta) -> None:
    """Alice's memory, written on a host whose clock agrees with the database's, expiring ``left`` from now by
    the database's clock (past it, for a negative ``left``)."""
    await put(store, "line fault", {"ticket_id": "55102"})
    async with engine.begin() as conn:
        await conn.execute(update(memories).values(expires_at=func.now() + literal(left, Interval())))


async def rows(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return len((await conn.execute(select(memories.c.scope))).all())


async def test_a_host_whose_clock_runs_ahead_still_recalls_and_lists_a_memory_that_has_not_expired(
    engine: AsyncEngine, store: MemoryStore
) -> None:
    await expiring(engine, store, LEFT)
    with host_clock(SKEW):
        kept = await store.load("alice", "helpdesk")
        assert kept is not None and kept.facts["ticket_id"].value == "55102"
        assert [m.summary for m in await store.show("alice")] == ["line fault"]
        assert (await store.sweep()).memories == 0
    assert await rows(engine) == 1  # neither its read nor the sweep deleted it


async def test_a_host_whose_clock_runs_behind_neither_recalls_nor_lists_a_memory_past_its_expiry(
    engine: AsyncEngine, store: MemoryStore
) -> None:
    await expiring(engine, store, -LEFT)
    with host_clock(-SKEW):
        assert await store.show("alice") == []
        with pytest.raises(MemoryNotFound) as missing:
            await store.forget("alice", fact="visits")
        assert (missing.value.hint or "").partition("; ")[0] == "nothing is kept about this user"  # not its ticket_id
        assert await store.load("alice", "helpdesk") is None
    assert await rows(engine) == 0  # read as gone, and gone


async def test_a_sweep_on_a_host_whose_clock_runs_behind_deletes_memory_past_its_expiry(
    engine: AsyncEngine, store: MemoryStore
) -> None:
    await expiring(engine, store, -LEFT)
    with host_clock(-SKEW):
        swept = await store.sweep()
    assert (swept.memories, swept.facts) == (1, 1)


async def test_a_write_on_a_host_whose_clock_runs_ahead_renews_a_memory_that_has_not_expired(
    engine: AsyncEngine, store: MemoryStore
) -> None:
    await expiring(engine, store, LEFT)
    with host_clock(SKEW):
        assert await put(store, "line fault, engineer booked", {"visits": 1}, expected=1) == 2
    kept = await store.load("alice", "helpdesk")
    assert kept is not None and set(kept.facts) == {"ticket_id", "visits"}


async def test_a_write_on_a_host_whose_clock_runs_behind_does_not_renew_a_memory_past_its_expiry(
    engine: AsyncEngine, store: MemoryStore
) -> None:
    await expiring(engine, store, -LEFT)
    with host_clock(-SKEW), pytest.raises(StaleMemory):  # read before it expired: start afresh
        await put(store, "still here?", {"visits": 1}, expected=1)
    assert await store.load("alice", "helpdesk") is None


@pytest.mark.parametrize("offset", [-SKEW, SKEW], ids=["behind", "ahead"])
async def test_a_memory_written_on_a_skewed_host_is_stamped_and_expires_on_the_database_clock(
    engine: AsyncEngine, store: MemoryStore, offset: timedelta
) -> None:
    with host_clock(offset):
        await put(store, "line fault", {"ticket_id": "55102"})
        await store.record_failure("alice", "billing", "the writer timed out", team="billing", team_version="v1",
                                   retention_days=RETENTION_DAYS)
    m, f, retention = memories.c, facts.c, timedelta(days=RETENTION_DAYS)
    async with engine.connect() as conn:
        kept = (await conn.execute(select(func.now() - m.updated_at, m.expires_at - func.now()))).all()
        confirmed = (await conn.execute(select(func.now() - f.confirmed_at))).scalars().all()
    assert len(kept) == 2 and len(confirmed) == 1
    for age, left in kept:  # the memory, and the row holding only the billing writer's failure
        assert timedelta(0) <= age < timedelta(seconds=5) and retention - timedelta(seconds=5) < left <= retention
    assert timedelta(0) <= confirmed[0] < timedelta(seconds=5)


async def test_a_run_continued_after_a_forget_writes_nothing_said_before_it_though_its_workers_clock_ran_ahead(
    platform: Platform, registry: Registry, channel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run starts on a worker whose clock runs ahead, so by that clock it started after the forget that came
    next; its continuation, in a later session, is bounded by the server's clock as the first session opened."""
    registry.add(TEAM, helpdesk(channel, messages=5).dump_component(),
                 helpdesk_manifest().model_copy(update={"checkpoints": "every_turn"}), "checkpoints", label="production")
    with host_clock(SKEW), counted_calls(monkeypatch) as calls:
        calls.fail_at = 2  # triage's turn is checkpointed, the researcher's call fails
        async with platform.session("alice", "s1", team=TEAM) as s:
            with pytest.raises(RuntimeError):
                await s.run(FIRST)
            run = s.interrupted
    assert run is not None and run.said_after is not None
    assert run.said_after < run.started_at - SKEW + timedelta(minutes=1)  # the server's clock, not the worker's
    await platform.forget_memory("alice")  # after the run began, before its worker's clock said it did
    async with platform.session("alice", "s1", team=TEAM, continuing=True) as s:
        assert s.interrupted is not None and s.interrupted.said_after == run.said_after  # kept in its checkpoint
        await s.continue_run()
    await platform.drain_memory()
    assert await platform.show_memory("alice") == []  # FIRST was said before the forget
    writers = [c for c in CALLS.get(channel, []) if c and _memory_request(str(c[-1].content)) is not None]
    assert writers == []  # nor was its writer's model asked
    async with platform.session("alice", "s2", team=TEAM) as s:  # a session opened after the forget: kept
        await s.run(FIRST)
    await platform.drain_memory()
    (kept,) = await platform.show_memory("alice")
    assert kept.facts["ticket_id"].value == "55102"
