"""What only Postgres needs of the memory store: writers and the retention sweep that take the same fact rows
never wait for each other in a circle (Postgres would abort one of them as a deadlock), each batch of the
sweep reads only the facts it looks at, and their memory rows, whatever Postgres plans, and an erasure or a
forget waits for a first write already in its transaction (whose new rows its delete would neither see nor wait
for)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import event, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

import teamstore.memory.store as memory_store
from teamstore.db.engine import create_engine
from teamstore.erasure.requests import open_request
from teamstore.erasure.steps import StepContext
from teamstore.erasure.steps.database import memory_step
from teamstore.erasure.steps.keys import KeyStep
from teamstore.keys import KeyService
from teamstore.memory.facts import MemoryUpdate
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


def _paused_after_its_memory_row(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[asyncio.Event, asyncio.Event, Callable[[], None]]:
    """A write's transaction paused right after the statement that inserted its new memory row: set ``inside``
    once there, it goes on once ``release`` is; the third puts the connection's ``execute`` back for others."""
    inside, release = asyncio.Event(), asyncio.Event()
    real_execute = AsyncConnection.execute

    async def paused(conn: AsyncConnection, statement: Any, *args: Any, **kwargs: Any) -> Any:
        result = await real_execute(conn, statement, *args, **kwargs)
        if getattr(statement, "table", None) is memory_store.memories and not inside.is_set():
            inside.set()
            await release.wait()
        return result

    monkeypatch.setattr(AsyncConnection, "execute", paused)
    return inside, release, lambda: monkeypatch.setattr(AsyncConnection, "execute", real_execute)


@pytest.mark.parametrize("failure", [False, True])
async def test_an_erasure_waits_for_a_first_write_already_in_its_transaction_and_leaves_nothing_of_it(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch, failure: bool
) -> None:
    store = MemoryStore(engine, keys=KeyService.from_settings(engine, Settings()))
    key = await store.writer_key("alice")
    inside, release, unpause = _paused_after_its_memory_row(monkeypatch)
    if failure:  # a writer's first failure makes a row too
        writing = asyncio.create_task(store.record_failure(
            "alice", "helpdesk", "the model call failed", team="helpdesk", team_version="v1", retention_days=30,
            key=key))
    else:
        writing = asyncio.create_task(store.write(
            "alice", "helpdesk", MemoryUpdate("alice's summary", {"ticket_id": "55102"}), types={"ticket_id": "str"},
            expected_version=0, run_id="run-1", team="helpdesk", team_version="v1", retention_days=30, key=key))
    await inside.wait()
    unpause()
    ctx = StepContext(engine, None, "er-1", "alice", None)  # type: ignore[arg-type]
    await open_request(engine, "er-1", "alice", "test", 30)  # the fence: up after the write's check

    async def erase() -> tuple[int, int]:  # the coordinator's order: the key, then (after others) the memory
        keys = await KeyStep().erase(ctx, prior=None)
        memory = await memory_step().erase(ctx, prior=None)
        return keys.counts.rows, memory.counts.rows

    async with engine.connect() as monitor:
        erasing = asyncio.create_task(erase())
        await waiting_for_locks(monitor, erasing)
        assert not erasing.done()  # the key's delete waits for the write
        release.set()
        assert await writing in (1, True)  # it landed: it began before the fence went up
        assert await erasing == (1, 1 if failure else 2)  # and the erasure deleted what it wrote
    assert (await memory_step().remaining(ctx)).rows == 0 and await store.show("alice", held=True) == []


async def test_a_forget_waits_for_a_first_write_already_in_its_transaction_and_leaves_nothing_of_it(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore(engine, keys=KeyService.from_settings(engine, Settings()))
    key, opened = await store.writer_key("alice"), await store.clock("alice")
    inside, release, unpause = _paused_after_its_memory_row(monkeypatch)
    writing = asyncio.create_task(store.write(
        "alice", "helpdesk", MemoryUpdate("alice's summary", {"ticket_id": "55102"}), types={"ticket_id": "str"},
        expected_version=0, run_id="run-1", team="helpdesk", team_version="v1", retention_days=30, key=key,
        said_after=opened))
    await inside.wait()
    unpause()
    async with engine.connect() as monitor:
        forgetting = asyncio.create_task(store.forget("alice"))
        await waiting_for_locks(monitor, forgetting)
        assert not forgetting.done()  # the forget waits for the write under way
        release.set()
        assert await writing == 1  # it landed: it was past its checks before the forget began
        gone = await forgetting
    assert (gone.memories, gone.facts) == (1, 1) and await store.show("alice", held=True) == []


def _scans(node: dict[str, Any]) -> Iterator[tuple[str, int]]:
    """Each table a plan node read, with how many rows it read there (kept, or removed by its filter)."""
    if "Relation Name" in node:
        kept = node["Actual Rows"] * node["Actual Loops"]
        yield node["Relation Name"], kept + node.get("Rows Removed by Filter", 0) * node["Actual Loops"]
    for child in node.get("Plans", []):
        yield from _scans(child)


async def test_each_batch_of_the_leftover_sweep_reads_its_own_facts_and_their_memory_rows_only(
    engine: AsyncEngine,
) -> None:
    store = MemoryStore(engine, keys=KeyService.from_settings(engine, Settings()))
    async with engine.begin() as conn:  # 2,000 users of 10 facts each; every tenth user's are left over
        await conn.execute(text(
            "INSERT INTO ts_user_memory_facts (user_id, scope, name, type, value, source_run_id, created_at, "
            "confirmed_at) SELECT 'u' || lpad((n / 10)::text, 5, '0'), 'helpdesk', 'f' || n % 10, 'int', '1', "
            "'run-0', now(), now() FROM generate_series(0, 19999) AS n"))
        await conn.execute(text(
            "INSERT INTO ts_user_memory (user_id, scope, summary, version, team, team_version, created_at, "
            "updated_at, expires_at, failures) SELECT 'u' || lpad(u::text, 5, '0'), 'helpdesk', '', 1, 'helpdesk', "
            "'v1', now(), now(), now() + interval '180 days', 0 FROM generate_series(0, 1999) AS u WHERE u % 10 > 0"))
        await conn.execute(text("ANALYZE ts_user_memory_facts"))
        await conn.execute(text("ANALYZE ts_user_memory"))
    sent: list[tuple[str, Any]] = []

    def note(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE FROM TS_USER_MEMORY_FACTS"):
            sent.append((statement, parameters))

    event.listen(engine.sync_engine, "before_cursor_execute", note)
    try:
        swept = await store.sweep(now=T0, batch_size=500)
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", note)
    assert (swept.leftover_facts, len(sent)) == (2000, 40)
    statement, parameters = sent[len(sent) // 2]  # a batch far into the table: those before it are not read
    async with engine.connect() as conn:
        plan = (await conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters)).scalar()
        await conn.rollback()  # the batch's facts are gone already: it deletes nothing, but reads as it did
    read = list(_scans((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]))
    assert read and all(rows <= 500 for _, rows in read), read
