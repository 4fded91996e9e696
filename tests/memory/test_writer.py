"""The memory writer against the store, on SQLite and a real Postgres: a write still asking its model when the
user forgets what it read writes nothing from messages said before the forget, while one that only lost the
race to another session's write asks again and lands."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest
from autogen_core.models import CreateResult, LLMMessage
from autogen_ext.models.replay import ReplayChatCompletionClient

from config_registry.manifest import MemoryDeclaration
from teamstore.memory.facts import MemoryUpdate
from teamstore.memory.store import Forgotten, MemoryStore
from teamstore.memory.writer import FORGOTTEN, Said, WriteOutcome, write_memory

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

    def __init__(self) -> None:
        super().__init__([REPLY] * 4, model_info=INFO)
        self.asked, self.release, self.calls = asyncio.Event(), asyncio.Event(), 0

    async def create(self, messages: Sequence[LLMMessage], *args: Any, **kwargs: Any) -> CreateResult:
        self.calls += 1
        if self.calls == 1:
            self.asked.set()
            await self.release.wait()
        return await super().create(messages, *args, **kwargs)


async def stored(store: MemoryStore, user: str = "alice", **facts: str) -> int:
    key = await store.writer_key(user)
    return await store.write(user, "helpdesk", MemoryUpdate("Alice lives at 12 Secret Lane.", facts),
                             types=DECLARATION.facts, expected_version=0, run_id="run-0", team="helpdesk",
                             team_version="v1", retention_days=30, key=key)


async def held_write(store: MemoryStore, client: HeldClient) -> asyncio.Task[WriteOutcome]:
    """A session's writer, started and held in its model call."""
    key = await store.writer_key("alice")
    task = asyncio.create_task(write_memory(
        store, client, user_id="alice", team="helpdesk", team_version="v1", declaration=DECLARATION,
        run_id="run-1", messages=SAID, retention_days=30, key=key, declared=set(DECLARATION.facts)))
    await client.asked.wait()
    return task


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

