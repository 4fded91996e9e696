"""The session runtime end to end on SQLite and a real Postgres: resume, isolation, fail-closed, limits."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import json
import logging
import time
import types
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent, SocietyOfMindAgent
from autogen_agentchat.base import TaskResult
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import TextMessage
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import CancellationToken
from autogen_core.models import ModelInfo
from autogen_ext.models.replay import ReplayChatCompletionClient
from pydantic import BaseModel
from sqlalchemy import insert, select, text, update

from config_registry import Manifest, Registry
from teamstore import examples
from teamstore.context import BoundedChatCompletionContext
from teamstore.db.engine import create_engine
from teamstore.db.fence import user_holds
from teamstore.errors import (
    ConfigurationError,
    DefinitionInvalid,
    ErasureInProgress,
    InvalidIdentifier,
    InvalidTask,
    RunInProgress,
    SessionBusy,
    SessionNotOpen,
    StaleStateVersion,
    StateNotSerializable,
    StateTooLarge,
    StoreUnavailable,
    TooManySessions,
    UnknownTeam,
)
from teamstore.offline import OfflineChatCompletionClient
from teamstore.runtime.inspect import describe_session
from teamstore.runtime.platform import Platform
from teamstore.runtime.session import Session
from teamstore.settings import Settings
from teamstore.state.base import SessionKey
from teamstore.state.direct import APPLICATION_NAME
from teamstore.state.envelope import decode, encode
from teamstore.state.factory import store_for
from teamstore.state.schema import quarantine, sessions
from teamstore.state.sqlite import SqliteStatements
from tests.conftest import prepare
from tests.runtime.conftest import renamed_manifest, without_memory
from tests.services import free_port


def researcher_reply(result) -> str:  # type: ignore[no-untyped-def]
    return next(m.content for m in result.messages if m.source == "researcher")


async def talk(platform: Platform, user: str, session: str, text: str, team: str = "support_triage"):  # type: ignore[no-untyped-def]
    async with platform.session(user, session, team=team) as s:
        result = await s.run(text)
        outcome = s.resume
    return result, outcome


async def stored_state(platform: Platform, user: str, session: str) -> str:
    row = await platform.store.get(SessionKey(user, session))
    assert row is not None and row.state is not None
    return row.state


async def raw_state(platform: Platform, user: str, session: str) -> str:
    """The state column as stored (sealed under the user's key), read past the store."""
    async with platform.engine.connect() as conn:
        stored = await conn.scalar(select(sessions.c.state).where(sessions.c.user_id == user,
                                                                   sessions.c.session_id == session))
    assert stored is not None
    return str(stored)


async def test_second_request_resumes_the_persisted_participant(platform: Platform) -> None:
    _, first = await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    result, second = await talk(platform, "alice", "s1", "The technician came; still broken")
    assert first.outcome == "new" and second.outcome == "resumed"
    assert second.restored == ("researcher",)
    assert "ZX-81" in researcher_reply(result)  # the researcher's context came back
    critic = next(m.content for m in result.messages if m.source == "critic")
    assert "ZX-81" not in critic  # critic is not persisted: it starts clean each run


async def test_a_closing_session_has_the_next_team_built_while_it_saves_and_it_carries_nothing_over(
    platform: Platform,
) -> None:
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    await talk(platform, "bob", "s1", "My printer jams")  # the definition's second build: the next is built ahead
    await asyncio.gather(*platform.teams._restocks)  # on SQLite the save may not have waited at all
    ahead = platform.teams._entries["support_triage"].spare
    assert ahead is not None
    async with platform.session("carol", "s1", "support_triage") as s:
        assert s.team is ahead.built.team and s.resume.outcome == "new"
        result = await s.run("Hello, my modem is new")
    replies = [str(m.content) for m in result.messages]
    assert not any("ZX-81" in r or "printer" in r for r in replies)  # built fresh: no earlier user's words
    await asyncio.gather(*platform.teams._restocks)
    assert platform.teams._entries["support_triage"].spare is not None  # and the next one is built


async def test_the_team_is_registered_with_its_runtime_while_the_lease_and_row_are_on_their_way(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    seen: list[bool] = []
    acquire = platform.store.acquire

    async def slow_acquire(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.05)  # the database's round trip
        teams = [s._built.team for s in opened]
        seen.extend(bool(getattr(t, "_initialized", False)) for t in teams)
        return await acquire(*args, **kwargs)

    monkeypatch.setattr(platform.store, "acquire", slow_acquire)
    opened: list[Session] = [platform.session("alice", "s1", "support_triage")]
    async with opened[0] as s:
        assert s.resume.outcome == "resumed"
        result = await s.run("The technician came; still broken")
    assert seen == [True]  # registered during the wait, not after it
    assert "ZX-81" in researcher_reply(result)  # and the state loaded into it as before


async def test_a_new_platform_continues_the_conversation(platform: Platform, registry: Registry) -> None:
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    # A second Platform with its own engine is what a restarted process or another machine has.
    other = Platform(create_engine(str(platform.engine.url)), registry, settings=platform.settings)
    result, outcome = await talk(other, "alice", "s1", "still broken")
    await other.aclose()
    await other.engine.dispose()
    assert outcome.outcome == "resumed" and "ZX-81" in researcher_reply(result)


async def test_user_a_history_never_reaches_user_b(platform: Platform) -> None:
    await talk(platform, "alice", "same-id", "alice-secret-canary router")
    result, outcome = await talk(platform, "bob", "same-id", "bob asks about billing")
    assert outcome.outcome == "new"
    assert all("alice-secret-canary" not in m.to_text() for m in result.messages)
    assert "alice-secret-canary" not in await stored_state(platform, "bob", "same-id")
    assert "alice-secret-canary" in await stored_state(platform, "alice", "same-id")


async def test_only_opted_in_participants_are_stored_and_state_is_json(platform: Platform) -> None:
    for i in range(3):
        await talk(platform, "alice", "s1", f"message {i}")
    payload = decode(await stored_state(platform, "alice", "s1"))
    assert payload["kind"] == "team" and list(payload["participants"]) == ["researcher"]
    json.dumps(payload)  # every stored state is plain JSON
    assert "RoundRobinGroupChatManager" not in json.dumps(payload)


async def test_stored_state_stays_bounded_over_many_runs(platform: Platform) -> None:
    sizes = []
    for i in range(30):
        await talk(platform, "alice", "s1", f"message number {i:03d}")
        sizes.append(len(await stored_state(platform, "alice", "s1")))
    state = decode(await stored_state(platform, "alice", "s1"))["participants"]["researcher"]
    assert len(state["agent_state"]["llm_context"]["messages"]) <= 20
    assert state["agent_state"]["llm_context"]["messages"][0]["content"] == "message number 000"  # keep_first
    assert max(sizes[15:]) < sizes[9] * 1.3  # flat, not linear


async def test_single_agent_definition_resumes(platform: Platform) -> None:
    await talk(platform, "alice", "s1", "remember the code word heron", team="single_assistant")
    result, outcome = await talk(platform, "alice", "s1", "what was it?", team="single_assistant")
    assert outcome.outcome == "resumed" and "heron" in result.messages[-1].to_text()


async def test_renamed_persisted_agent_fails_closed_and_keeps_the_old_state(
    platform: Platform, registry: Registry
) -> None:
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    before = await raw_state(platform, "alice", "s1")
    registry.add("support_triage", examples.support_triage_v2_renamed().dump_component(), renamed_manifest(),
                 "rename researcher", label="production", allow_incompatible=True)
    result, outcome = await talk(platform, "alice", "s1", "hello again")
    assert outcome.outcome == "definition_changed" and outcome.quarantined
    assert "researcher" in (outcome.detail or "") and "renamed" in (outcome.detail or "")
    assert all("ZX-81" not in m.to_text() for m in result.messages)  # nothing half-loaded
    kept = await platform.store.list_quarantined("alice")
    assert [q.reason for q in kept] == ["definition_changed"]
    async with platform.engine.connect() as conn:
        assert (await conn.execute(select(quarantine.c.state))).scalar_one() == before


async def test_after_a_rollback_the_quarantined_state_is_restored_and_resumes(
    platform: Platform, registry: Registry
) -> None:
    v1 = registry.resolve("support_triage@production").version
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    registry.add("support_triage", examples.support_triage_v2_renamed().dump_component(), renamed_manifest(),
                 "rename researcher", label="production", allow_incompatible=True)
    _, outcome = await talk(platform, "alice", "s1", "hello again")  # fails closed, goes on fresh, saves
    assert outcome.quarantined
    registry.label("support_triage", v1, "production", reason="roll back the rename")
    (kept,) = await platform.store.list_quarantined("alice")
    with pytest.raises(StaleStateVersion):  # the fresh state saved since is not overwritten unasked
        await platform.restore_quarantined(kept.id)
    restored = await platform.restore_quarantined(kept.id, replace=True)
    assert restored.replaced_by is not None
    result, outcome = await talk(platform, "alice", "s1", "the technician came")
    assert outcome.outcome == "resumed" and "ZX-81" in researcher_reply(result)
    (aside,) = await platform.store.list_quarantined("alice")  # the fresh state, set aside in turn
    assert aside.id == restored.replaced_by and aside.reason == "replaced"


async def test_a_session_whose_state_is_set_aside_and_that_saves_nothing_leaves_no_row_and_restores_later(
    platform: Platform, registry: Registry
) -> None:
    v1 = registry.resolve("support_triage@production").version
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    registry.add("support_triage", examples.support_triage_v2_renamed().dump_component(), renamed_manifest(),
                 "rename researcher", label="production", allow_incompatible=True)
    async with platform.session("alice", "s1", team="support_triage") as s:
        assert s.resume is not None and s.resume.quarantined  # and no run: the session saves nothing
    assert await platform.store.get(SessionKey("alice", "s1")) is None
    assert await platform.store.live_sessions("alice") == 0
    registry.label("support_triage", v1, "production", reason="roll back the rename")
    (kept,) = await platform.store.list_quarantined("alice")
    await platform.restore_quarantined(kept.id)  # nothing saved since: no replace needed
    result, outcome = await talk(platform, "alice", "s1", "the technician came")
    assert outcome.outcome == "resumed" and "ZX-81" in researcher_reply(result)


async def test_compatible_change_keeps_resuming(platform: Platform, registry: Registry) -> None:
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    registry.add("support_triage", examples.support_triage_v2_prompt().dump_component(),
                 examples.example_manifest("support_triage_v2_prompt").model_copy(update={"name": "support_triage"}),
                 "new researcher prompt", label="production")
    result, outcome = await talk(platform, "alice", "s1", "still broken")
    assert outcome.outcome == "resumed" and "ZX-81" in researcher_reply(result)


def _critic_persisted_too() -> tuple[dict[str, Any], Any]:
    """The support team with the critic bounded and persisted beside the researcher."""
    component = examples.support_triage().dump_component().model_dump()
    participants = component["config"]["participants"]
    participants[2]["config"]["model_context"] = participants[1]["config"]["model_context"]
    manifest = without_memory(examples.example_manifest("support_triage")).model_copy(update={"persist": ["researcher", "critic"]})
    return component, manifest


async def test_a_newly_persisted_participant_starts_fresh_and_the_others_resume(
    platform: Platform, registry: Registry
) -> None:
    v1 = registry.resolve("support_triage@production").version
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    component, manifest = _critic_persisted_too()
    v2 = registry.add("support_triage", component, manifest, "persist the critic too", label="production")
    assert registry.check("support_triage", v1, v2).compatible
    result, outcome = await talk(platform, "alice", "s1", "still broken")
    assert outcome.outcome == "resumed" and outcome.restored == ("researcher",) and not outcome.quarantined
    assert "'critic' is newly persisted" in (outcome.detail or "")
    assert "ZX-81" in researcher_reply(result)
    _, outcome = await talk(platform, "alice", "s1", "and again")
    assert outcome.restored == ("critic", "researcher") and outcome.detail is None


async def test_a_participant_no_longer_persisted_starts_clean_and_the_others_resume(
    platform: Platform, registry: Registry
) -> None:
    v1 = registry.resolve("support_triage@production").version
    component, manifest = _critic_persisted_too()
    v2 = registry.add("support_triage", component, manifest, "persist the critic too", label="production")
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    report = registry.check("support_triage", v2, v1)
    assert report.compatible and report.notes == ["'critic' is no longer persisted: its saved state will be dropped"]
    registry.label("support_triage", v1, "production", reason="stop persisting the critic")
    result, outcome = await talk(platform, "alice", "s1", "still broken")
    assert outcome.outcome == "resumed" and outcome.restored == ("researcher",)
    assert "'critic' is no longer persisted" in (outcome.detail or "")
    assert "ZX-81" in researcher_reply(result)


async def test_a_team_turned_into_a_single_agent_fails_closed_as_a_definition_change(
    platform: Platform, registry: Registry
) -> None:
    v1 = registry.resolve("support_triage@production").version
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    researcher = examples.support_triage().dump_component().model_dump()["config"]["participants"][1]
    v2 = registry.add("support_triage", researcher, without_memory(examples.example_manifest("support_triage")),
                      "the researcher alone", label="production", allow_incompatible=True)
    report = registry.check("support_triage", v1, v2)
    assert not report.compatible and "from a team to a single agent" in report.reasons[0]
    _, outcome = await talk(platform, "alice", "s1", "hello")
    assert outcome.outcome == "definition_changed" and outcome.quarantined
    assert "a single agent" in (outcome.detail or "")


async def _corrupt(platform: Platform, state: str | None, **values: object) -> None:
    """Store ``state`` as a writer would have saved it (its byte count with it): what is wrong is inside."""
    size = len(state.encode()) if state is not None else 0
    async with platform.engine.begin() as conn:
        await conn.execute(update(sessions).where(sessions.c.user_id == "alice")
                           .values(state=state, **{"state_bytes": size, **values}))


@pytest.mark.parametrize(
    ("blob", "reason"),
    [
        ('{"garbage": 1}', "corrupt"),
        ('{"envelope": 1, "codec": "json", "data": {"kind": "team", "participants": {"researcher": {"garbage": 1}}}}',
         "corrupt"),
        ('{"envelope": 1, "codec": "json", "data": {"kind": "team", "participants": {"researcher": '
         '{"type": "TeamState", "version": "1.0.0", "agent_states": {}}}}}', "corrupt"),
        ('{"envelope": 1, "codec": "json", "data": {"kind": "team", "participa', "corrupt"),
        ("not json at all \x01", "corrupt"),
        ('{"envelope": 9, "codec": "fernet", "data": "..."}', "schema_mismatch"),
        ("[1, 2, 3]", "corrupt"),
        ('{"envelope": 1, "codec": "json", "data": {"kind": "team", "participants": {"researcher": '
         '{"type": "ChatAgentContainerState", "version": "1.0.0", "agent_state": {}, "message_buffer": [1, null]}}}}',
         "corrupt"),
        ('{"envelope": true, "codec": "json", "data": {"kind": "team", "participants": {}}}', "schema_mismatch"),
        ('{"envelope": 1, "codec": "json", "data": {"kind": "team", "participants": {"researcher": '
         '{"type": "ChatAgentContainerState", "version": "1.0.0", "agent_state": {"type": "AssistantAgentState", '
         '"version": "1.0.0", "llm_context": {"messages": []}}, "message_buffer": [{"type": "ToolCallRequestEvent", '
         '"source": "critic", "content": [{"id": "1", "name": "lookup", "arguments": "{}"}]}]}}}}', "corrupt"),
        ('{"envelope": 1, "codec": "json", "data": {"kind": "team", "participants": {"researcher": '
         '{"type": "ChatAgentContainerState", "version": "1.0.0", "agent_state": {"type": "AssistantAgentState", '
         '"version": "1.0.0", "llm_context": {"messages": [{"type": "UserMessage", "source": "user", '
         '"content": [{"data": "bm90IGFuIGltYWdl"}]}]}}, "message_buffer": []}}}}', "corrupt"),
        ('{"envelope": 1, "codec": "json", "data": {"kind": "team", "participants": {"researcher": '
         '{"type": "ChatAgentContainerState", "version": "1.0.0", "agent_state": {"type": "AssistantAgentState", '
         '"version": "1.0.0", "llm_context": {"messages": []}}, "message_buffer": [{"type": "MultiModalMessage", '
         '"source": "user", "content": ["look", {"data": "bm90IGFuIGltYWdl"}]}]}}}}', "corrupt"),
    ],
    ids=["foreign", "garbage-agent", "team-state-as-agent", "truncated", "binary", "other-envelope", "array",
         "buffer-of-numbers", "envelope-true", "event-in-buffer", "context-image-not-an-image",
         "buffer-image-not-an-image"],
)
async def test_bad_stored_state_starts_fresh_and_is_quarantined(platform: Platform, blob: str, reason: str) -> None:
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    await _corrupt(platform, blob)
    result, outcome = await talk(platform, "alice", "s1", "still broken")
    assert outcome.outcome == reason and outcome.quarantined and not outcome.applied
    assert result.messages[-1].to_text()  # the run went on, fresh
    async with platform.engine.connect() as conn:
        assert (await conn.execute(select(quarantine.c.state))).scalar_one() == blob
    payload = decode(await stored_state(platform, "alice", "s1"))
    assert "ZX-81" not in json.dumps(payload)


@pytest.mark.parametrize("damaged", [[1], "abc", {"researcher": 5}], ids=["list", "string", "number"])
async def test_a_row_with_damaged_fingerprints_fails_closed_and_keeps_no_lease(platform: Platform, damaged: object) -> None:
    await _fingerprints_fail_closed(platform, update(sessions).values(fingerprints=damaged))


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # a Postgres json column holds only JSON
async def test_a_row_whose_fingerprints_are_not_json_fails_closed_and_keeps_no_lease(platform: Platform) -> None:
    await _fingerprints_fail_closed(platform, text("UPDATE ts_sessions SET fingerprints = 'not JSON'"))


async def _fingerprints_fail_closed(platform: Platform, damage: Any) -> None:
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    before = await raw_state(platform, "alice", "s1")
    async with platform.engine.begin() as conn:
        await conn.execute(damage)
    _, outcome = await talk(platform, "alice", "s1", "still broken")
    assert outcome.outcome == "corrupt" and outcome.quarantined and "fingerprints" in (outcome.detail or "")
    async with platform.engine.connect() as conn:
        assert (await conn.execute(select(quarantine.c.state))).scalar_one() == before
    _, outcome = await talk(platform, "alice", "s1", "and again")  # the lease was given back
    assert outcome.outcome == "resumed"


def _society() -> SocietyOfMindAgent:
    inner = RoundRobinGroupChat([AssistantAgent("worker", model_client=OfflineChatCompletionClient())],
                                termination_condition=MaxMessageTermination(2))
    return SocietyOfMindAgent("society", team=inner, model_client=OfflineChatCompletionClient(),
                              model_context=BoundedChatCompletionContext(max_messages=10))


async def test_a_state_autogen_refuses_after_validation_still_starts_fresh(
    platform: Platform, registry: Registry
) -> None:
    manifest = Manifest(name="society", description="A society of mind.", owner="o", persist=["society"],
                        context_bound=20)
    registry.add("society", _society().dump_component(), manifest, "v1", label="production")
    await talk(platform, "alice", "s1", "hello", team="society")
    payload = decode(await stored_state(platform, "alice", "s1"))
    payload["participants"]["society"]["inner_team_state"] = {"type": "TeamState", "agent_states": {}}
    await _corrupt(platform, encode(payload))  # a nested team's state: only AutoGen's load_state looks inside
    result, outcome = await talk(platform, "alice", "s1", "again", team="society")
    assert outcome.outcome == "corrupt" and outcome.quarantined and "ValueError" in (outcome.detail or "")
    assert result.messages[-1].to_text()  # the run went on, on a fresh team
    (kept,) = await platform.store.list_quarantined("alice")
    assert kept.reason == "corrupt"
    _, outcome = await talk(platform, "alice", "s1", "and again", team="society")
    assert outcome.outcome == "resumed"


@pytest.mark.parametrize("messages", [None, 5, "text"])
async def test_a_damaged_row_is_still_described(platform: Platform, messages: object) -> None:
    await talk(platform, "alice", "s1", "hello")
    payload = decode(await stored_state(platform, "alice", "s1"))
    payload["participants"]["researcher"]["agent_state"]["llm_context"]["messages"] = messages
    await _corrupt(platform, encode(payload))
    row = await platform.store.get(SessionKey("alice", "s1"))
    assert row is not None
    buffered = len(payload["participants"]["researcher"]["message_buffer"])
    assert describe_session(row)["agents"]["researcher"]["messages"] == buffered  # what can be read of it


async def test_state_saved_by_another_schema_version_fails_closed(platform: Platform) -> None:
    await talk(platform, "alice", "s1", "hello")
    await _corrupt(platform, await stored_state(platform, "alice", "s1"), schema_version=99)
    _, outcome = await talk(platform, "alice", "s1", "again")
    assert outcome.outcome == "schema_mismatch" and "99" in (outcome.detail or "")


async def test_state_saved_by_another_autogen_minor_fails_closed(platform: Platform) -> None:
    await talk(platform, "alice", "s1", "hello")
    await _corrupt(platform, await stored_state(platform, "alice", "s1"), agentchat_version="0.4.9")
    _, outcome = await talk(platform, "alice", "s1", "again")
    assert outcome.outcome == "library_mismatch"


async def test_expired_session_starts_fresh(platform: Platform) -> None:
    await talk(platform, "alice", "s1", "My router ZX-81")
    await _corrupt(platform, await stored_state(platform, "alice", "s1"),
                   expires_at=datetime.now(UTC) - timedelta(seconds=1))
    result, outcome = await talk(platform, "alice", "s1", "again")
    assert outcome.outcome == "expired" and "ZX-81" not in researcher_reply(result)


async def test_state_over_the_byte_cap_is_refused_and_previous_state_stays(platform: Platform) -> None:
    await talk(platform, "alice", "s1", "short")
    before = await stored_state(platform, "alice", "s1")
    cap = len(before.encode()) + 200  # the stored state fits; the next one will not
    platform.settings = platform.settings.model_copy(update={"state_max_bytes": cap})
    with pytest.raises(StateTooLarge) as info:
        await talk(platform, "alice", "s1", "x" * 2000)
    assert str(cap) in info.value.message
    assert await stored_state(platform, "alice", "s1") == before
    platform.settings = platform.settings.model_copy(update={"state_max_bytes": 1_000_000})
    _, outcome = await talk(platform, "alice", "s1", "after")  # lease was released
    assert outcome.outcome == "resumed"


async def test_a_run_over_the_byte_cap_keeps_the_snapshot_of_the_run_before_it(platform: Platform) -> None:
    async with platform.session("alice", "s1", team="support_triage") as s:
        await s.run("My router ZX-81 drops every evening")
        platform.settings = platform.settings.model_copy(update={"state_max_bytes": 3000})
        with pytest.raises(StateTooLarge):
            await s.run("x" * 4000)
    platform.settings = platform.settings.model_copy(update={"state_max_bytes": 1_000_000})
    state = await stored_state(platform, "alice", "s1")
    assert "ZX-81" in state and "x" * 4000 not in state


class _Colour(enum.StrEnum):
    RED = "red"


@pytest.mark.parametrize(
    ("poison", "what"),
    [(b"\x00", "bytes"), (_Colour.RED, "_Colour, a str subclass"), (2**70, "integer beyond 64 bits"),
     (collections.OrderedDict(a=1), "OrderedDict, a dict subclass"), ({1: "a"}, "{key 1} is a key of type int")],
    ids=["bytes", "str-enum", "huge-int", "ordered-dict", "int-key"],
)
async def test_non_json_state_names_the_agent_and_path(platform: Platform, poison: object, what: str) -> None:
    async with platform.session("alice", "s1", team="support_triage") as s:
        original = s.team.save_state

        async def poisoned():  # type: ignore[no-untyped-def]
            state = await original()
            state["agent_states"]["researcher"]["agent_state"]["llm_context"]["messages"][0]["content"] = poison
            return state

        s.team.save_state = poisoned
        with pytest.raises(StateNotSerializable) as info:
            await s.run("hello")
    assert "researcher" in info.value.message and "llm_context.messages[0].content" in info.value.message
    assert what in info.value.message
    assert await platform.store.get(SessionKey("alice", "s1")) is None


async def test_a_run_that_raises_saves_nothing(platform: Platform, registry: Registry) -> None:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_ext.models.replay import ReplayChatCompletionClient

    from config_registry import Manifest
    from teamstore.context import BoundedChatCompletionContext

    agent = AssistantAgent("assistant", model_client=ReplayChatCompletionClient([]),
                           model_context=BoundedChatCompletionContext(max_messages=10))
    registry.add("broken", agent.dump_component(), Manifest(name="broken", persist=["assistant"], context_bound=10),
                 "a model that always fails")
    with pytest.raises(Exception, match="No more mock responses"):
        await talk(platform, "alice", "s1", "hello", team="broken")
    assert await platform.store.get(SessionKey("alice", "s1")) is None
    async with platform.session("alice", "s1", team="broken") as s:  # lease was released
        assert s.resume is not None and s.resume.outcome == "new"


async def test_concurrent_session_gets_session_busy(platform: Platform) -> None:
    async with platform.session("alice", "s1", team="support_triage") as s:
        await s.run("hello")
        with pytest.raises(SessionBusy):
            async with platform.session("alice", "s1", team="support_triage"):
                pass
        async with platform.session("alice", "s2", team="support_triage") as other:
            assert other.resume is not None and other.resume.outcome == "new"


async def test_deleting_a_session_open_in_this_process_waits_for_it_and_says_so_truly(platform: Platform) -> None:
    # "Delete this conversation" beside a request on it in the same worker was told "another worker" held it.
    async with platform.session("alice", "s1", team="support_triage") as s:
        await s.run("My router ZX-81 drops every evening")
        with pytest.raises(SessionBusy) as info:
            await platform.delete_session("alice", "s1")
        with pytest.raises(SessionBusy) as opened:
            async with platform.session("alice", "s1", team="support_triage"):
                pass
    for error in (info.value, opened.value):
        assert "this process or another worker" in error.message, error.message
        assert "async with platform.session" in (error.hint or "")
    assert await stored_state(platform, "alice", "s1")  # nothing was deleted while it was open
    assert await platform.delete_session("alice", "s1")  # and once its block ended, it is


async def test_explicit_save_then_conflicting_writer_is_detected(platform: Platform) -> None:
    async with platform.session("alice", "s1", team="support_triage") as s:
        await s.run("hello")
        assert await s.save() == 1
        async with platform.engine.begin() as conn:  # another writer bumps the row behind our back
            await conn.execute(update(sessions).values(row_version=sessions.c.row_version + 1))
        await s.run("again")
        with pytest.raises(StaleStateVersion):
            await s.save()


@pytest.mark.parametrize("bad", ["", "x" * 257, "nul\x00byte", "tab\tid", "lone\ud800surrogate", "   ", "pasted ",
                                 "\u200bhidden"])
async def test_bad_ids_are_refused(platform: Platform, bad: str) -> None:
    with pytest.raises(InvalidIdentifier):
        platform.session(bad, "s1", team="support_triage")
    with pytest.raises(InvalidIdentifier):
        platform.session("alice", bad, team="support_triage")


@pytest.mark.parametrize("odd", ["../../etc/passwd", "a/b", "ユーザー", "ALICE"])
async def test_odd_but_valid_ids_are_their_own_sessions(platform: Platform, odd: str) -> None:
    await talk(platform, "alice", "s1", "alice's ZX-81")
    result, outcome = await talk(platform, odd, odd, "hello")
    assert outcome.outcome == "new" and "ZX-81" not in researcher_reply(result)
    assert await platform.store.get(SessionKey(odd, odd)) is not None


async def test_erasure_hold_refuses_the_session(platform: Platform) -> None:
    async with platform.engine.begin() as conn:
        await conn.execute(insert(user_holds).values(user_id="alice", reason="erasure", created_at=datetime.now(UTC)))
    with pytest.raises(ErasureInProgress):
        await talk(platform, "alice", "s1", "hello")


async def test_hold_placed_mid_run_refuses_the_save(platform: Platform) -> None:
    with pytest.raises(ErasureInProgress):
        async with platform.session("alice", "s1", team="support_triage") as s:
            await s.run("hello")
            async with platform.engine.begin() as conn:
                await conn.execute(
                    insert(user_holds).values(user_id="alice", reason="erasure", created_at=datetime.now(UTC))
                )
    row = await platform.store.get(SessionKey("alice", "s1"))
    assert row is None or row.state is None


async def test_database_down_at_load_is_typed(platform: Platform) -> None:
    down = create_engine(f"postgresql://x@127.0.0.1:{free_port()}/x", connect_args={"connect_timeout": 2})
    real, platform.store = platform.store, store_for(down)
    with pytest.raises(StoreUnavailable):
        await talk(platform, "alice", "s1", "hello")
    await platform.store.aclose()
    platform.store = real
    await down.dispose()


def _backend(platform: Platform) -> Any:
    """The platform's state backend (under the store that seals states)."""
    return getattr(platform.store, "inner", platform.store)


async def _lose_the_database(platform: Platform, tmp_path: Path) -> Any:
    """Cut the session's database away under it: a dead file path on SQLite; on Postgres, a database that
    takes no new connections, with the store's connections ended. Returns what the caller restores."""
    if platform.engine.dialect.name == "sqlite":
        # The open session holds the store it was given, so its statements are the thing to cut away.
        gone = create_engine(f"sqlite:///{tmp_path / 'no-such-dir' / 'x.db'}")
        _backend(platform).statements = SqliteStatements(gone)
        return gone
    # The database refuses new connections (a fresh one would find it up again), then the state store's
    # own connections, the session's among them, are ended.
    name = platform.engine.url.database
    await _allow_connections(platform, name, False)
    async with platform.engine.connect() as conn:
        ended = (await conn.execute(text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE :name"
        ), {"name": f"{APPLICATION_NAME} %"})).scalar_one()
    assert ended >= 1
    return name


async def _allow_connections(platform: Platform, database: str, allow: bool) -> None:
    # From the server's own database: a database cannot refuse connections while connected to itself.
    server = create_engine(platform.engine.url.set(database="postgres").render_as_string(hide_password=False))
    async with server.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
        await conn.execute(text(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS {str(allow).lower()}'))
    await server.dispose()


async def test_database_down_at_save_is_typed_and_keeps_previous_state(platform: Platform, tmp_path: Path) -> None:
    await talk(platform, "alice", "s1", "first")
    before = await stored_state(platform, "alice", "s1")
    real_statements = getattr(_backend(platform), "statements", None)
    with pytest.raises(StoreUnavailable):
        async with platform.session("alice", "s1", team="support_triage") as s:
            await s.run("second")
            gone = await _lose_the_database(platform, tmp_path)
    if isinstance(gone, str):  # Postgres: the database comes back
        await _allow_connections(platform, gone, True)
    else:
        _backend(platform).statements = real_statements
        await gone.dispose()
    assert await stored_state(platform, "alice", "s1") == before
    if isinstance(gone, str):  # the lease went with the connection (or is the session's own), so it opens again
        _, outcome = await talk(platform, "alice", "s1", "third")
        assert outcome.applied


async def test_team_ttl_comes_from_the_manifest(platform: Platform, registry: Registry) -> None:
    manifest = without_memory(examples.example_manifest("support_triage")).model_copy(update={"state_ttl_days": 1.0})
    registry.add("support_triage", examples.support_triage().dump_component(), manifest, "1 day TTL",
                 label="production")
    await talk(platform, "alice", "s1", "hello")
    row = await platform.store.get(SessionKey("alice", "s1"))
    assert row is not None and row.expires_at is not None
    # One day, plus the 1% expiry window (the expiry index moves at most once per window).
    assert timedelta(hours=23) < row.expires_at - datetime.now(UTC) <= timedelta(days=1.01)


async def test_a_restored_state_lives_as_long_as_its_team_keeps_state(platform: Platform, registry: Registry) -> None:
    manifest = without_memory(examples.example_manifest("support_triage")).model_copy(update={"state_ttl_days": 1.0})
    registry.add("support_triage", examples.support_triage().dump_component(), manifest, "1 day TTL",
                 label="production")
    await talk(platform, "alice", "s1", "hello")
    await _corrupt(platform, await stored_state(platform, "alice", "s1"), schema_version=99)
    await talk(platform, "alice", "s1", "again")  # refused: set aside, and a fresh state saved
    (kept,) = await platform.store.list_quarantined("alice")
    restored = await platform.restore_quarantined(kept.id, replace=True)
    assert restored.session.expires_at is not None
    assert restored.session.expires_at - datetime.now(UTC) <= timedelta(days=1.01)  # the team's day, not 7


async def test_moved_label_reaches_a_worker_after_the_refresh_interval(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]  # the cache's clock, moved by hand: a slow commit below must not age the cache
    monkeypatch.setattr("teamstore.runtime.teams.time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    platform.settings = platform.settings.model_copy(update={"registry_refresh_seconds": 30})
    first = await platform.build_team("support_triage")
    v2 = registry.add("support_triage", examples.support_triage_v2_prompt().dump_component(),
                      examples.example_manifest("support_triage_v2_prompt").model_copy(update={"name": "support_triage"}),
                      "new prompt", label="production")
    clock[0] += 29.9
    assert (await platform.build_team("support_triage")).version == first.version  # cached
    clock[0] += 0.2
    again = await platform.build_team("support_triage")
    assert again.version == v2 and again.team is not first.team
    pinned = await platform.build_team(f"support_triage@{first.version[:12]}")
    assert pinned.version == first.version


async def test_a_label_that_looks_like_a_version_prefix_still_moves(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr("teamstore.runtime.teams.time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    platform.settings = platform.settings.model_copy(update={"registry_refresh_seconds": 30})
    first = registry.resolve("support_triage")
    label = first.version[:1]  # e.g. "a" for an A/B split: also the start of the version it points at
    registry.label("support_triage", first.version, label, "split")
    assert (await platform.build_team(f"support_triage@{label}")).version == first.version
    v2 = registry.add("support_triage", examples.support_triage_v2_prompt().dump_component(),
                      examples.example_manifest("support_triage_v2_prompt").model_copy(update={"name": "support_triage"}),
                      "new prompt")
    registry.label("support_triage", v2, label, "move the split")
    clock[0] += 30.1
    assert (await platform.build_team(f"support_triage@{label}")).version == v2


@pytest.mark.postgres
async def test_production_database_is_never_migrated_implicitly(postgres_url: str, registry: Registry) -> None:
    from teamstore.db.migrate import upgrade
    from teamstore.errors import SchemaNotReady

    engine = create_engine(postgres_url)
    platform = Platform(engine, registry, settings=Settings(database_url=postgres_url))
    with pytest.raises(SchemaNotReady) as info:
        await talk(platform, "alice", "s1", "hello")
    assert "teamstore db upgrade" in (info.value.hint or "")
    async with engine.connect() as conn:
        tables = await conn.run_sync(lambda c: __import__("sqlalchemy").inspect(c).get_table_names())
    assert "ts_sessions" not in tables
    await upgrade(engine)
    _, outcome = await talk(platform, "alice", "s1", "hello")
    assert outcome.outcome == "new"
    await platform.store.aclose()
    await engine.dispose()


@pytest.mark.postgres
async def test_a_worker_set_to_the_other_kind_of_lease_fails_at_start(postgres_url: str, registry: Registry) -> None:
    from teamstore.db.migrate import upgrade

    engine = create_engine(postgres_url)
    await upgrade(engine)  # records 'lock'
    platform = Platform(engine, registry, settings=Settings(database_url=postgres_url, session_lease="row"))
    with pytest.raises(ConfigurationError) as info:
        await platform.ensure_schema()
    assert "TEAMSTORE_SESSION_LEASE=lock" in (info.value.hint or "")
    await platform.store.aclose()
    await engine.dispose()


async def test_a_platform_refused_at_start_closes_what_it_opened(
    backend: tuple[str, str], registry: Registry, tmp_path: Path
) -> None:
    # The caller of a failed `async with platform:` gets no platform to close: what it opened stayed open.
    from teamstore.errors import SchemaNotReady

    url, lease = backend
    engine = create_engine(url)
    closed: list[str] = []

    async def on_close() -> None:
        closed.append("closed")

    refused = [(Settings(home=tmp_path / "home", auto_migrate=False, session_lease=lease), SchemaNotReady)]
    if engine.dialect.name == "postgresql":  # SQLite has one kind of lease
        other = "row" if lease == "lock" else "lock"
        refused.append((Settings(home=tmp_path / "home", session_lease=other), ConfigurationError))
    for settings, error in refused:
        platform = Platform(engine, registry, settings=settings, on_close=on_close)
        with pytest.raises(error):
            async with platform:
                pytest.fail("the start was not refused")
        assert closed == ["closed"], f"{error.__name__} left the platform open"
        closed.clear()
        await prepare(url, lease)  # the next refusal is the lease's, on a migrated database
    await engine.dispose()


async def test_a_live_session_keeps_its_lease_past_the_ttl(platform: Platform) -> None:
    # A renewal every third of the TTL: 0.5 s of slack for a loop a loaded machine stalls (0.6 s left 0.2 s).
    platform.settings = platform.settings.model_copy(update={"lease_ttl_seconds": 1.5})
    async with platform.session("alice", "s1", team="support_triage") as s:
        await s.run("My router ZX-81 drops every evening")
        await asyncio.sleep(4.5)  # three TTLs: a slow run, or a slow caller
        with pytest.raises(SessionBusy):  # still ours: another request for it waits, then gives up
            async with platform.session("alice", "s1", team="support_triage", lease_timeout=0.2):
                pass
    row = await platform.store.get(SessionKey("alice", "s1"))
    assert row is not None and row.row_version == 1  # the save after the long pause went through


async def test_mid_session_saves_beside_lease_renewals(platform: Platform) -> None:
    platform.settings = platform.settings.model_copy(update={"lease_ttl_seconds": 0.6})
    async with platform.session("alice", "s1", team="support_triage") as s:
        for i in range(3):
            await s.run(f"message {i} about the ZX-81 router")
            assert await s.save() == i + 1
            await asyncio.sleep(0.5)  # renewals (every 0.2 s) land between and around the saves
    row = await platform.store.get(SessionKey("alice", "s1"))
    assert row is not None and row.row_version == 3


async def test_saves_at_once_write_the_snapshot_once(platform: Platform) -> None:
    async with platform.session("alice", "s1", team="support_triage") as s:
        await s.run("message about the ZX-81 router")
        assert await asyncio.gather(s.save(), s.save()) == [1, 1]  # both see the one write
        await s.run("and one more thing")
    async with platform.session("alice", "s1", team="support_triage") as s:
        assert s.resume is not None and s.resume.outcome == "resumed" and s.row_version == 2
        assert "one more thing" in json.dumps(await s.team.save_state())


async def _a_save_left_unanswered(
    platform: Platform, s: Session, monkeypatch: pytest.MonkeyPatch, *, landed: bool
) -> None:
    """A run, then a mid-session save whose answer the database lost (it ``landed``, or not), then another run."""
    real = platform.store.save

    async def answer_lost(*args: Any, **kwargs: Any) -> int:
        if landed:
            await real(*args, **kwargs)
        raise StoreUnavailable("the connection closed before the commit's answer", hint="check the database")

    await s.run("message about the ZX-81 router")
    monkeypatch.setattr(platform.store, "save", answer_lost)
    with pytest.raises(StoreUnavailable):
        await s.save()
    monkeypatch.setattr(platform.store, "save", real)
    await s.run("and one more thing")


@pytest.mark.parametrize("landed", [True, False], ids=["landed-unanswered", "not-written"])
async def test_a_mid_session_save_left_unanswered_is_read_back_before_the_next_write(
    platform: Platform, monkeypatch: pytest.MonkeyPatch, landed: bool
) -> None:
    # The save lands (or not), but the database's answer is lost: the session does not know the row's version.
    # Its next write reads the row back first and goes on from there: on the version it held, a save that landed
    # made the block's exit save find the row changed under it, and the session's last run was lost.
    async with platform.session("alice", "s1", team="support_triage") as s:
        await _a_save_left_unanswered(platform, s, monkeypatch, landed=landed)
    async with platform.session("alice", "s1", team="support_triage") as s:
        assert s.resume is not None and s.resume.outcome == "resumed"
        assert "one more thing" in json.dumps(await s.team.save_state())


async def test_a_read_back_that_fails_before_a_save_keeps_the_snapshot_for_the_next_write(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After a save left unanswered, the next save reads the row back first; when that read fails, nothing was
    # sent, and the run since is still the session's to save (it was dropped, and the block's exit saved nothing).
    real_settle = platform.store.settle

    async def read_back_fails(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("the database is restarting", hint="check the database")

    async with platform.session("alice", "s1", team="support_triage") as s:
        await _a_save_left_unanswered(platform, s, monkeypatch, landed=False)
        monkeypatch.setattr(platform.store, "settle", read_back_fails)
        with pytest.raises(StoreUnavailable):
            await s.save()
        monkeypatch.setattr(platform.store, "settle", real_settle)
    async with platform.session("alice", "s1", team="support_triage") as s:
        assert s.resume is not None and s.resume.outcome == "resumed"
        assert "one more thing" in json.dumps(await s.team.save_state())


async def test_a_save_under_way_as_the_block_exits_lands_before_the_lease_is_given_back(platform: Platform) -> None:
    for steps in range(1, 40):  # the block exits at every step of the event loop of a save the caller left running
        async with platform.session("alice", f"s{steps}", team="support_triage") as s:
            await s.run("message about the ZX-81 router")
            saving = asyncio.ensure_future(s.save())
            for _ in range(steps):
                await asyncio.sleep(0)
        assert saving.result() == 1
        row = await platform.store.get(SessionKey("alice", f"s{steps}"))
        assert row is not None and row.row_version == 1


async def test_a_cancelled_mid_session_save_still_lands_whole_and_the_session_goes_on(platform: Platform) -> None:
    # Cancelled at every step of the event loop in turn: the save is written whole (or not yet begun),
    # the session still holds its lease and saves at exit, and the next request resumes from it.
    for steps in range(200):
        async with platform.session("alice", "s1", team="support_triage") as s:
            await s.run(f"message {steps} about the ZX-81 router")
            saving = asyncio.ensure_future(s.save())
            for _ in range(steps):
                await asyncio.sleep(0)
            done = saving.done()
            saving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await saving
            await s.run("and one more thing")
        async with platform.session("alice", "s1", team="support_triage") as s:
            assert s.resume is not None and s.resume.outcome == "resumed"
        if done:
            return
    pytest.fail("the save never finished")


class _SlowClient(OfflineChatCompletionClient):
    """Answers only after a long wait, which a cancellation token cuts short (as real clients do)."""

    async def create(self, messages: Any, *, cancellation_token: CancellationToken | None = None,
                     **kwargs: Any) -> Any:
        wait = asyncio.ensure_future(asyncio.sleep(30))
        if cancellation_token is not None:
            cancellation_token.link_future(wait)
        await wait
        return await super().create(messages, cancellation_token=cancellation_token, **kwargs)


async def test_a_cancelled_run_stops_the_team_at_once_and_the_next_run_starts_from_before_it(
    platform: Platform,
) -> None:
    async with platform.session("alice", "s1", team="support_triage") as s:
        for agent in s.team._participants:
            agent._model_client = _SlowClient()
        running = asyncio.create_task(s.run("hello"))
        await asyncio.sleep(0.5)  # the first model call is waiting
        running.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert time.monotonic() - started < 5  # not the 30 s the model call would have taken
        # The team, maybe mid-turn, was built again from the state before the cancelled run: no trace of it.
        result = await s.run("again")
        assert "hello" not in str(await s.team.save_state())
    assert result.messages[0].to_text() == "again"
    row = await platform.store.get(SessionKey("alice", "s1"))
    assert row is not None and "hello" not in (row.state or "")


async def test_no_message_content_reaches_the_logs_at_info(
    platform: Platform, registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("autogen_core", "autogen_agentchat"):  # as in a fresh process
        logging.getLogger(name).setLevel(logging.NOTSET)
    fresh = Platform(platform.engine, registry, settings=platform.settings)
    with caplog.at_level(logging.INFO):
        await talk(fresh, "alice", "s1", "CANARY-LOGGED-4711 my card number")
    assert caplog.records  # teamstore itself logs at INFO
    assert not [r.name for r in caplog.records if "CANARY-LOGGED-4711" in r.getMessage()]
    await fresh.aclose()


async def test_a_failure_autogen_logs_names_its_type_never_the_words_its_message_quotes(
    platform: Platform, registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    class Ticket(BaseModel):
        category: str

    fresh = Platform(platform.engine, registry, settings=platform.settings)
    # A structured output the model got wrong: pydantic's error quotes the reply, which retells the user.
    info = ModelInfo(vision=False, function_calling=True, json_output=True, family="unknown", structured_output=True)
    client = ReplayChatCompletionClient(["CANARY-LOGGED-4711 says the router drops"], model_info=info)
    team = RoundRobinGroupChat([AssistantAgent("a", model_client=client, output_content_type=Ticket)],
                               termination_condition=MaxMessageTermination(2))
    with caplog.at_level(logging.ERROR, "autogen_core"), pytest.raises(RuntimeError):
        await team.run(task="my router drops")
    (failure,) = [r for r in caplog.records if r.name == "autogen_core" and r.levelno == logging.ERROR]
    assert "ValidationError" in failure.getMessage()  # still logged as a failure, by its type
    assert "CANARY-LOGGED-4711" not in caplog.text
    await fresh.aclose()


async def test_an_openai_agents_failed_request_autogen_logs_names_its_type_never_the_words_it_quotes(
    platform: Platform, registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    from autogen_ext.agents.openai import OpenAIAgent
    from openai import AsyncOpenAI

    from tests.canary.model_server import ModelServer

    server = ModelServer()
    server.rejecting = True  # a 400 quoting the request, as a provider's content filter answers
    fresh = Platform(platform.engine, registry, settings=platform.settings)
    client = AsyncOpenAI(base_url=server.base_url, api_key="not-a-key", max_retries=0)
    agent = OpenAIAgent("a", description="answers", client=client, model="gpt-4o-mini", instructions="Help.")
    try:
        with caplog.at_level(logging.ERROR):
            await agent.run(task="CANARY-LOGGED-4711 my router drops")
    finally:
        server.stop()
        await client.close()
        await fresh.aclose()
    (failure,) = [r for r in caplog.records if r.name == "autogen_agentchat.events" and r.levelno == logging.ERROR]
    assert "BadRequestError" in failure.getMessage()  # still logged as a failure, by its type
    assert "CANARY-LOGGED-4711" not in caplog.text


async def test_a_failing_database_error_in_a_log_carries_no_bound_values(platform: Platform) -> None:
    from sqlalchemy import text as sql_text
    from sqlalchemy.exc import DBAPIError

    with pytest.raises(DBAPIError) as info:  # what any handler that logs it with its traceback prints
        async with platform.engine.begin() as conn:
            await conn.execute(sql_text("SELECT * FROM no_such_table WHERE user_id = :u"), {"u": "CANARY-USER-4711"})
    assert "CANARY-USER-4711" not in str(info.value) and "hidden" in str(info.value)


class _SlowAudit:
    """An observer whose end-of-run write takes a while, like a slow transcript PUT."""

    async def run_started(self, ctx: Any) -> None:
        pass

    async def on_item(self, ctx: Any, item: Any) -> None:
        pass

    async def run_finished(self, ctx: Any, outcome: Any) -> None:
        await asyncio.sleep(0.5)


@pytest.mark.parametrize("cancels", ["once", "again and again"])
async def test_a_request_cancelled_while_the_session_closes_still_saves_and_gives_the_lease_back(
    platform: Platform, cancels: str
) -> None:
    # anyio's cancel scopes (Starlette's, FastAPI's, httpx's) cancel a task again at every turn of the event loop
    # until it ends, not once: the exit's save and release must outlast every one of them.
    platform.observers.append(_SlowAudit())
    exiting = asyncio.Event()

    async def handler() -> None:
        async with platform.session("alice", "s1", team="support_triage") as s:
            await s.run("My router ZX-81 drops every evening")
            exiting.set()  # the block exits next, and waits there for the slow audit write

    request = asyncio.ensure_future(handler())
    await exiting.wait()
    if cancels == "once":
        request.cancel()  # the request's timeout lands while the block exits
        with pytest.raises(asyncio.CancelledError):
            await request
    else:
        while not request.done():
            request.cancel()
            await asyncio.sleep(0)
        assert request.cancelled()
    platform.observers.pop()
    started = time.monotonic()
    result, outcome = await talk(platform, "alice", "s1", "still broken")  # not SessionBusy for the lease TTL
    assert time.monotonic() - started < 5
    assert outcome.outcome == "resumed" and "ZX-81" in researcher_reply(result)


async def test_two_runs_at_once_on_one_session_one_is_refused(platform: Platform) -> None:
    platform.observers.append(_SlowAudit())  # the first run's audit is still being written: run() awaits it
    async with platform.session("alice", "s1", team="support_triage") as s:
        await s.run("warm up")
        outcomes = await asyncio.gather(s.run("one"), s.run("two"), return_exceptions=True)
    platform.observers.pop()
    assert sum(isinstance(o, RunInProgress) for o in outcomes) == 1
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1


class _Gate:
    """An observer that holds a run at its first streamed item until ``release`` is set."""

    def __init__(self) -> None:
        self.reached, self.release = asyncio.Event(), asyncio.Event()

    async def run_started(self, ctx: Any) -> None:
        pass

    async def on_item(self, ctx: Any, item: Any) -> None:
        self.reached.set()
        await self.release.wait()

    async def run_finished(self, ctx: Any, outcome: Any) -> None:
        pass


async def test_a_second_run_while_the_first_is_in_flight_is_refused_at_once(platform: Platform) -> None:
    gate = _Gate()
    platform.observers.append(gate)
    async with platform.session("alice", "s1", team="support_triage") as s:
        first = asyncio.ensure_future(s.run("My router ZX-81 drops every evening"))
        await gate.reached.wait()  # the first run is mid-run
        second = asyncio.ensure_future(s.run("and now?"))
        second.add_done_callback(lambda _: gate.release.set())  # the first goes on only once the second ended
        with pytest.raises(RunInProgress):
            await asyncio.wait_for(second, 60)  # the bound only keeps a broken build from hanging
        result = await first
    platform.observers.remove(gate)
    assert "ZX-81" in researcher_reply(result)  # the first run was left to finish


async def test_a_session_is_used_inside_its_one_block_only(platform: Platform) -> None:
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    s = platform.session("alice", "s1", team="support_triage")
    with pytest.raises(SessionNotOpen):
        await s.run("before")
    with pytest.raises(SessionNotOpen):
        await s.save()
    with pytest.raises(SessionNotOpen, match="async with"), s:  # not Python's "does not support the protocol"
        pass
    async with s:  # refused before it opened: it opens as ever
        with pytest.raises(SessionNotOpen, match="already open"):
            async with s:
                pass
        result = await s.run("still broken")
        assert "ZX-81" in researcher_reply(result)  # the resumed team, not one built by the failed entry
    with pytest.raises(SessionNotOpen):
        await s.run("after")
    with pytest.raises(SessionNotOpen, match="closed"):
        async with s:
            pass
    result, outcome = await talk(platform, "alice", "s1", "and again")
    assert outcome.outcome == "resumed" and "ZX-81" in researcher_reply(result)


async def test_a_sessions_team_read_before_it_was_built_is_a_typed_error(platform: Platform) -> None:
    # Read before the block (a service logging the version it is about to run), or after an entry that failed
    # before a team was built: SessionNotOpen, not an AttributeError from inside the session.
    never_entered = platform.session("alice", "s1", team="support_triage")
    failed = platform.session("alice", "s1", team="no_such_team")
    with pytest.raises(UnknownTeam):
        async with failed:
            pass
    for s, said in ((never_entered, "not open yet"), (failed, "did not open")):
        for read in ("team", "team_version"):
            with pytest.raises(SessionNotOpen, match=said):
                getattr(s, read)
    async with never_entered as s:
        version = s.team_version
    assert s.team_version == version  # after its block, what it ran stays readable


@pytest.mark.parametrize("task", ["x" * 300, "bad \udcff byte", b"bytes", "", "  \n", "ticket\x0055102",
                                  TextMessage(source="user", content="ticket\x0055102")])  # NUL: no text column holds it
async def test_a_refused_task_runs_nothing_and_the_session_goes_on(platform: Platform, task: object) -> None:
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    before = await stored_state(platform, "alice", "s1")
    platform.settings = platform.settings.model_copy(update={"task_max_bytes": 200})
    async with platform.session("alice", "s1", team="support_triage") as s:
        with pytest.raises(InvalidTask):
            await s.run(task)  # type: ignore[arg-type]
        assert s.last_run_id is None  # no run started: no model call, no transcript
        assert await stored_state(platform, "alice", "s1") == before
        result = await s.run("still broken")  # the same session goes on, from the state it had
    assert "ZX-81" in researcher_reply(result)


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_stream"])
async def test_a_tuple_of_messages_runs_as_the_list_autogen_takes(platform: Platform, streamed: bool) -> None:
    task = (TextMessage(source="user", content="My router ZX-81 drops every evening"),)
    async with platform.session("alice", "s1", team="support_triage") as s:
        if streamed:
            result = [item async for item in s.run_stream(task)][-1]
            assert isinstance(result, TaskResult)
        else:
            result = await s.run(task)
    assert "ZX-81" in researcher_reply(result)
    async with platform.session("alice", "s1", team="support_triage") as s:
        assert s.resume.outcome == "resumed"  # saved as any run is


async def test_an_empty_task_is_refused_however_the_team_is_run(platform: Platform) -> None:
    async with platform.session("alice", "s1", team="support_triage") as s:
        with pytest.raises(InvalidTask, match="the task is empty"):
            await s.team.run(task="")  # reaching around the session checks the same
        with pytest.raises(InvalidTask, match="only whitespace"):
            async for _ in s.run_stream(" "):
                pass
        assert s.last_run_id is None
        await s.run(None)  # no new task, as AutoGen takes it: the team goes on from where it is


@pytest.mark.parametrize("wait", [-1, float("nan"), float("inf"), 10**9, "10", True, False])
async def test_a_lease_timeout_that_is_not_a_span_of_seconds_is_refused(platform: Platform, wait: object) -> None:
    with pytest.raises(ConfigurationError, match="lease_timeout") as info:  # True was taken as one second
        platform.session("alice", "s1", team="support_triage", lease_timeout=wait)  # type: ignore[arg-type]
    assert info.value.hint


@pytest.mark.parametrize("team", [None, 7, "x" * 5000])
async def test_a_team_reference_that_is_no_name_is_a_typed_error_kept_short(platform: Platform, team: object) -> None:
    with pytest.raises(DefinitionInvalid) as info:
        async with platform.session("alice", "s1", team=team):  # type: ignore[arg-type]
            pass
    assert len(info.value.message) < 300
    assert info.value.hint, "it says how to name a team"


@pytest.mark.parametrize("bad", [7, None, b"alice"])
async def test_an_id_that_is_not_a_string_is_refused_with_how_to_pass_it(platform: Platform, bad: object) -> None:
    for user, session in ((bad, "s1"), ("alice", bad)):
        with pytest.raises(InvalidIdentifier, match="must be a string") as info:
            platform.session(user, session, team="support_triage")  # type: ignore[arg-type]
        assert "as a str" in (info.value.hint or "")


async def test_a_state_over_a_lowered_cap_starts_fresh_instead_of_never_saving_again(platform: Platform) -> None:
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    stored, at_rest = await stored_state(platform, "alice", "s1"), await raw_state(platform, "alice", "s1")
    platform.settings = platform.settings.model_copy(update={"state_max_bytes": len(stored) - 1})
    result, outcome = await talk(platform, "alice", "s1", "hello again")  # saves: the fresh state is small
    assert outcome.outcome == "too_large" and outcome.quarantined
    assert f"{len(stored):,} bytes" in (outcome.detail or "")
    assert "ZX-81" not in researcher_reply(result)
    assert await stored_state(platform, "alice", "s1") != stored
    (refused,) = await platform.store.list_quarantined(user_id="alice")
    assert (refused.reason, refused.state_bytes) == ("too_large", len(at_rest))  # set aside as stored, not lost
    platform.settings = platform.settings.model_copy(update={"state_max_bytes": 1_000_000})
    await platform.restore_quarantined(refused.id, replace=True)  # once the cap is raised again, it comes back
    result, outcome = await talk(platform, "alice", "s1", "still broken")
    assert outcome.outcome == "resumed" and "ZX-81" in researcher_reply(result)


@pytest.mark.parametrize("damage", ["created_at = 'garbage'", "expires_at = 'nope'", "row_version = 'z'",
                                    "state_bytes = 'x'", "schema_version = 'q'"])
async def test_a_row_damaged_by_hand_in_a_typed_column_fails_closed_and_is_repaired(
    registry: Registry, tmp_path: Path, damage: str
) -> None:
    # SQLite only: Postgres never keeps a value of another type in a typed column.
    engine = create_engine(f"sqlite:///{tmp_path / 'damaged.db'}")
    platform = Platform(engine, registry, settings=Settings(home=tmp_path / "home", auto_migrate=True,
                                                           lease_timeout_seconds=0.3))
    await platform.ensure_schema()
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    async with platform.store.engine.begin() as conn:
        await conn.execute(text(f"UPDATE ts_sessions SET {damage}"))
    assert [s.session_id for s in await platform.store.list_sessions("alice")] == ["s1"]  # listing still reads
    # It used to raise ValueError from the lease statement with the lease taken: busy for the lease TTL.
    result, outcome = await talk(platform, "alice", "s1", "hello again")
    assert outcome.outcome == "corrupt" and outcome.quarantined and "wrong type" in (outcome.detail or "")
    assert "ZX-81" not in researcher_reply(result)
    (kept,) = await platform.store.list_quarantined("alice")  # the old state set aside, not lost
    assert kept.reason == "corrupt" and kept.state_bytes >= 0
    _, outcome = await talk(platform, "alice", "s1", "and again")  # the row is whole again
    assert outcome.outcome == "resumed"
    await platform.aclose()
    await engine.dispose()


class _Runs:
    """Records every run an observer hears of."""

    def __init__(self) -> None:
        self.started: list[str] = []

    async def run_started(self, ctx: Any) -> None:
        self.started.append(ctx.session_id)

    async def on_item(self, ctx: Any, item: Any) -> None:
        pass

    async def run_finished(self, ctx: Any, outcome: Any) -> None:
        pass


async def test_a_new_session_past_the_per_user_bound_is_refused_before_the_team_runs(platform: Platform) -> None:
    platform.settings = platform.settings.model_copy(update={"max_sessions_per_user": 2})
    runs = _Runs()
    platform.observers.append(runs)
    await talk(platform, "alice", "s1", "My router ZX-81 drops every evening")
    await talk(platform, "alice", "s2", "and the printer")
    entered = False
    with pytest.raises(TooManySessions) as info:
        async with platform.session("alice", "s3", team="support_triage") as s:
            entered = True
            await s.run("a third problem")
    assert not entered and runs.started == ["s1", "s2"]  # the team never ran: no model was called
    assert (info.value.stored, info.value.limit) == (2, 2) and "TEAMSTORE_MAX_SESSIONS_PER_USER" in str(info.value)
    assert await platform.store.get(SessionKey("alice", "s3")) is None

    result, outcome = await talk(platform, "alice", "s1", "still broken")  # a resume is never refused
    assert outcome.outcome == "resumed" and "ZX-81" in researcher_reply(result)
    _, other = await talk(platform, "bob", "s3", "hello")  # another user is not
    assert other.outcome == "new"
    assert await platform.delete_session("alice", "s2")  # deleting one makes room at once
    _, third = await talk(platform, "alice", "s3", "a third problem")
    assert third.outcome == "new" and runs.started[-1] == "s3"
