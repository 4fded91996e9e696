"""The memory writer against the store, on SQLite and a real Postgres: a write still asking its model when the
user forgets what it read, or one that first reads the memory after a forget, writes nothing from messages said
before the forget, while one that only lost the race to another session's write asks again and lands. A session
opening while a forget runs reads its writer's bound and its memory once the forget has committed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
from autogen_core.models import CreateResult, LLMMessage
from autogen_ext.models.replay import ReplayChatCompletionClient
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from config_registry.manifest import MemoryDeclaration
from teamstore.errors import MemoryNotFound
from teamstore.memory.facts import MemoryUpdate, UserMemory
from teamstore.memory.schema import forgets
from teamstore.memory.statements import FORGETS_KEPT
from teamstore.memory.store import Forgotten, MemoryStore
from teamstore.memory.writer import FORGOTTEN, OUTLIVED, Said, WriteOutcome, write_memory
from tests.memory.test_postgres_locks import waiting_for_locks

DECLARATION = MemoryDeclaration(participants=["triage"], writer="triage",
                                facts={"home_address": "str", "ticket_id": "str"})
SAID = [Said("user", "my address is 12 Secret Lane, ticket 55102"), Said("triage", "noted")]
REPLY = json.dumps({"summary": "Alice lives at 12 Secret Lane.",
                    "facts": {"home_address": "12 Secret Lane", "ticket_id": "55102"}})
INFO: Any = {"vision": False, "function_calling": False, "json_output": True, "family": "unknown",
             "structured_output": False}


class HeldClient(ReplayChatCompletionClient):
    """Answers :data:`REPLY` every time; its first call waits until ``release`` is set, and ``asked`` is set
    once it has started."""

    def __init__(self, reply: str = REPLY) -> None:
        super().__init__([reply] * 4, model_info=INFO)
        self.asked, self.release, self.calls = asyncio.Event(), asyncio.Event(), 0

    async def create(self, messages: Sequence[LLMMessage], *args: Any, **kwargs: Any) -> CreateResult:
        self.calls += 1
        if self.calls == 1:
            self.asked.set()
            await self.release.wait()
        return await super().create(messages, *args, **kwargs)


class CountedClient(ReplayChatCompletionClient):
    """Answers :data:`REPLY` every time, counting its calls (each a paid call with a real model)."""

    def __init__(self) -> None:
        super().__init__([REPLY] * 4, model_info=INFO)
        self.calls = 0

    async def create(self, messages: Sequence[LLMMessage], *args: Any, **kwargs: Any) -> CreateResult:
        self.calls += 1
        return await super().create(messages, *args, **kwargs)


async def stored(store: MemoryStore, user: str = "alice", **facts: str) -> int:
    key = await store.writer_key(user)
    return await store.write(user, "helpdesk", MemoryUpdate("Alice lives at 12 Secret Lane.", facts),
                             types=DECLARATION.facts, expected_version=0, run_id="run-0", team="helpdesk",
                             team_version="v1", retention_days=30, key=key)


async def held_write(store: MemoryStore, client: HeldClient) -> asyncio.Task[WriteOutcome]:
    """A session's writer, started and held in its model call."""
    key = await store.writer_key("alice")
    task = asyncio.create_task(writer(store, client, await store.clock("alice"), key=key))
    await client.asked.wait()
    return task


async def writer(store: MemoryStore, client: Any, said_after: datetime, **given: Any) -> WriteOutcome:
    """A session's writer of :data:`SAID`, said after ``said_after``."""
    return await write_memory(
        store, client, user_id="alice", team="helpdesk", team_version="v1", declaration=DECLARATION,
        run_id="run-1", messages=SAID, retention_days=30, declared=set(DECLARATION.facts), said_after=said_after,
        **given)


def answering() -> ReplayChatCompletionClient:
    return ReplayChatCompletionClient([REPLY] * 4, model_info=INFO)


def kept_facts(memory: Any) -> dict[str, Any]:
    return {name: fact.value for name, fact in memory.facts.items()}


@pytest.mark.parametrize("kept_before", [True, False], ids=["memory kept", "nothing kept yet"])
async def test_a_writer_that_first_reads_after_the_user_forgot_everything_writes_nothing_said_before(
    store: MemoryStore, kept_before: bool
) -> None:
    if kept_before:
        await stored(store, home_address="12 Secret Lane")
    key = await store.writer_key("alice")  # the session opens: the user's data key (made if none), then its bound
    opened = await store.clock("alice")  # the user says SAID in it
    await store.forget("alice")  # then forgets everything, before its writer has read the memory
    assert await writer(store, answering(), opened, key=key) == WriteOutcome("forgotten", reason=FORGOTTEN)
    assert await store.show("alice") == []


async def test_a_writer_that_first_reads_after_the_user_forgot_a_fact_writes_nothing_said_before(
    store: MemoryStore,
) -> None:
    await stored(store, home_address="12 Secret Lane", ticket_id="55102")
    opened = await store.clock("alice")
    await store.forget("alice", fact="home_address")
    assert (await writer(store, answering(), opened)).status == "forgotten"
    (kept,) = await store.show("alice")
    assert kept_facts(kept) == {"ticket_id": "55102"} and kept.version == 2


async def test_a_writer_whose_messages_were_said_after_the_forget_or_under_another_scope_writes(
    store: MemoryStore,
) -> None:
    await stored(store, home_address="12 Secret Lane")
    await store.forget("alice")
    assert (await writer(store, answering(), await store.clock("alice"))).status == "written"  # opened after it
    opened = await store.clock("alice")
    await store.forget("alice", scope="billing")  # another scope's memory: this writer's is not touched
    assert await writer(store, answering(), opened) == WriteOutcome("written", version=2)
    (kept,) = await store.show("alice")
    assert kept_facts(kept) == {"home_address": "12 Secret Lane", "ticket_id": "55102"}


async def test_a_forget_is_recorded_per_scope_until_no_writer_can_need_it_and_a_writer_older_than_that_writes_nothing(
    store: MemoryStore,
) -> None:
    await store.writer_key("alice")  # a session of hers made her data key
    await store.forget("alice", scope="helpdesk")
    await store.forget("alice")
    recorded = await store.forgets("alice")
    assert [f.scope for f in recorded] == [None, "helpdesk"]  # None: every scope
    assert all(f.forgotten_at is not None for f in recorded)
    now = await store.clock("alice")
    assert (await store.sweep(now=now)).forgets == 0  # kept while a writer it stops may still run
    assert (await store.sweep(now=now + FORGETS_KEPT + timedelta(minutes=1))).forgets == 2
    assert await store.forgets("alice") == []
    # A session open longer than forgets are kept may have seen one that is no longer known: it writes nothing.
    assert (await writer(store, answering(), now - FORGETS_KEPT - timedelta(minutes=1))).status == "forgotten"
    assert await store.show("alice") == []


@pytest.mark.parametrize("forget", ["everything", "a fact", "kept no longer"])
async def test_a_writer_whose_user_forgot_since_its_session_opened_asks_no_model_and_writes_nothing(
    store: MemoryStore, forget: str
) -> None:
    await stored(store, home_address="12 Secret Lane", ticket_id="55102")
    key = await store.writer_key("alice")
    opened = await store.clock("alice")
    if forget == "everything":
        await store.forget("alice")
    elif forget == "a fact":
        await store.forget("alice", fact="home_address")
    else:  # a session open longer than forgets are kept: one after it may be dropped already
        opened -= FORGETS_KEPT + timedelta(minutes=1)
    client = CountedClient()
    reason = OUTLIVED if forget == "kept no longer" else FORGOTTEN  # no forget to speak of: the session's age
    assert await writer(store, client, opened, key=key) == WriteOutcome("forgotten", reason=reason)
    assert client.calls == 0  # the write would be refused: its model call is not paid for
    kept = {m.scope: kept_facts(m) for m in await store.show("alice")}
    assert kept == {"everything": {}, "a fact": {"helpdesk": {"ticket_id": "55102"}},
                    "kept no longer": {"helpdesk": {"home_address": "12 Secret Lane", "ticket_id": "55102"}}}[forget]
    opened = await store.clock("alice")  # a session opened after the forget asks, and writes
    assert (await writer(store, client, opened, key=key)).status == "written" and client.calls == 1


async def test_forgetting_everything_while_a_writer_asks_its_model_is_not_undone_by_that_writer(
    store: MemoryStore,
) -> None:
    await stored(store, home_address="12 Secret Lane")
    client = HeldClient()
    writing = await held_write(store, client)
    assert await store.forget("alice") == Forgotten(memories=1, facts=1)
    client.release.set()
    assert await writing == WriteOutcome("forgotten", reason=FORGOTTEN)
    assert await store.show("alice") == [] and client.calls == 1  # not asked again from what was forgotten


async def test_forgetting_everything_is_not_undone_once_another_session_wrote_the_memory_afresh(
    store: MemoryStore,
) -> None:
    await stored(store, home_address="12 Secret Lane")
    client = HeldClient()
    writing = await held_write(store, client)
    await store.forget("alice")
    await stored(store, ticket_id="55103")  # a session that began after the forget: a new memory
    client.release.set()
    assert (await writing).status == "forgotten"
    (kept,) = await store.show("alice")
    assert {name: fact.value for name, fact in kept.facts.items()} == {"ticket_id": "55103"}


async def test_forgetting_a_fact_while_a_writer_asks_its_model_is_not_undone_by_that_writer(
    store: MemoryStore,
) -> None:
    await stored(store, home_address="12 Secret Lane", ticket_id="55102")
    client = HeldClient()
    writing = await held_write(store, client)
    assert await store.forget("alice", fact="home_address") == Forgotten(memories=0, facts=1)
    client.release.set()
    assert (await writing).status == "forgotten"
    (kept,) = await store.show("alice")
    assert set(kept.facts) == {"ticket_id"} and kept.version == 2 and client.calls == 1


async def test_a_writer_failing_after_the_user_forgot_everything_leaves_no_row_behind(store: MemoryStore) -> None:
    await stored(store, home_address="12 Secret Lane")
    client = HeldClient("Sure! Alice lives at 12 Secret Lane.")  # prose: the write is refused, a failure
    writing = await held_write(store, client)
    await store.forget("alice")
    client.release.set()
    assert await writing == WriteOutcome("forgotten", reason=FORGOTTEN)
    assert await store.show("alice") == []  # no failure row for a user who forgot everything


@pytest.mark.parametrize("kept_before", [True, False], ids=["a summary kept", "nothing kept yet"])
async def test_forgetting_a_fact_not_kept_yet_stops_a_writer_that_would_write_it(
    store: MemoryStore, kept_before: bool
) -> None:
    if kept_before:
        await stored(store, ticket_id="55101")
    client = HeldClient()
    writing = await held_write(store, client)  # it will learn the home address from its session's messages
    with pytest.raises(MemoryNotFound, match="no fact of the name given is kept") as refused:
        await store.forget("alice", fact="home_address")
    assert ("ticket_id" in refused.value.hint) is kept_before  # what is kept, as before
    client.release.set()
    assert (await writing).status == "forgotten"
    assert all("home_address" not in kept.facts for kept in await store.show("alice"))
    assert [record.scope for record in await store.forgets("alice")] == [None]


@pytest.mark.parametrize("writes", [1, 2])
async def test_a_writer_that_lost_the_race_to_another_sessions_write_asks_again_and_lands(
    store: MemoryStore, writes: int
) -> None:
    version = await stored(store, home_address="12 Secret Lane")
    client = HeldClient()
    writing = await held_write(store, client)
    for _ in range(writes):  # other sessions of the user, each confirming the fact
        version = await store.write("alice", "helpdesk", MemoryUpdate("still there", {"home_address": "12 Secret Lane"}),
                                    types=DECLARATION.facts, expected_version=version, run_id="run-2",
                                    team="helpdesk", team_version="v1", retention_days=30)
    client.release.set()
    assert await writing == WriteOutcome("written", version=writes + 2)
    assert client.calls == 2
    (kept,) = await store.show("alice")
    assert {name: fact.value for name, fact in kept.facts.items()} == {"home_address": "12 Secret Lane",
                                                                        "ticket_id": "55102"}



async def paused_forget(store: MemoryStore, monkeypatch: pytest.MonkeyPatch,
                        release: asyncio.Event) -> asyncio.Task[Forgotten]:
    """A forget of everything of alice's, paused once it has deleted and recorded its time, before it commits,
    until ``release`` is set."""
    recorded = asyncio.Event()

    async def paused(conn: AsyncConnection, statement: Any, *args: Any, **kwargs: Any) -> Any:
        result = await real_execute(conn, statement, *args, **kwargs)
        if getattr(statement, "table", None) is forgets and not recorded.is_set():
            recorded.set()
            await release.wait()
        return result

    real_execute = AsyncConnection.execute
    monkeypatch.setattr(AsyncConnection, "execute", paused)
    forgetting = asyncio.create_task(store.forget("alice"))
    await recorded.wait()
    monkeypatch.setattr(AsyncConnection, "execute", real_execute)
    return forgetting


async def settled(engine: AsyncEngine, task: asyncio.Task[Any]) -> None:
    """Return once ``task`` is done or waits for a lock (on SQLite, whose busy wait nothing shows, once it had a
    moment to finish)."""
    if engine.dialect.name != "postgresql":
        await asyncio.wait({task}, timeout=1)
        return
    async with engine.connect() as monitor:
        await waiting_for_locks(monitor, task)


async def test_a_session_opening_while_a_forget_runs_is_given_nothing_it_forgets_and_counts_as_opened_after_it(
    store: MemoryStore, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forget is dated before it commits, and its deletes are seen only then: a session that read its bound
    and its memory in between was given what was being forgotten and judged as opened after the forget, so its
    writer wrote it back. It reads them once the forget has committed."""
    await stored(store, home_address="12 Secret Lane")
    release = asyncio.Event()
    forgetting = await paused_forget(store, monkeypatch, release)

    async def opens() -> tuple[datetime, UserMemory | None]:  # as a session's recall: its bound, then its memory
        said_after = await store.clock("alice")
        return said_after, await store.load("alice", "helpdesk")

    opening = asyncio.create_task(opens())
    await settled(engine, opening)
    assert not opening.done()  # it waits for the forget to commit
    release.set()
    assert await forgetting == Forgotten(memories=1, facts=1)
    said_after, recalled = await opening
    assert recalled is None
    (record,) = await store.forgets("alice")
    assert record.forgotten_at is not None and said_after > record.forgotten_at
