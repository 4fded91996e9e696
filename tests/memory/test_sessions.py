"""Memory in sessions, on SQLite and a real Postgres: written after a session's runs are saved, given to the
named participants in a new or expired session (their first model call holds every fact), kept out of what
piles up in stored state, never failing a run, never overwritten with bad output, and left alone by a team
that no longer declares it."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.base import TaskResult
from autogen_core.models import SystemMessage
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.db.engine import create_engine
from teamstore.memory.component import HEADER
from teamstore.memory.facts import cut_to_budget, estimate_tokens
from teamstore.memory.schema import facts, memories
from teamstore.runtime.memory import MemoryRecall
from teamstore.runtime.platform import Platform
from teamstore.state.base import SessionKey
from teamstore.state.envelope import decode, encode
from teamstore.state.schema import sessions
from tests.memory.conftest import make_platform
from tests.memory.team import (
    BREAKS,
    CALLS,
    GATES,
    SECRET_WORDS,
    TEAM,
    WRITER_MODES,
    WriterMode,
    helpdesk,
    helpdesk_manifest,
    memory_messages,
)
from tests.runtime.checkpoint_teams import counted_calls

FIRST = "My router ZX-81 drops the connection every evening (ticket 55102)."


async def talk(platform: Platform, user: str, session: str, text: str) -> tuple[TaskResult, MemoryRecall | None, str]:
    """One request; the run's result, what memory the session gave, and how it resumed."""
    async with platform.session(user, session, team=TEAM) as s:
        result = await s.run(text)
        assert s.resume is not None
        return result, s.memory, s.resume.outcome


async def expire(engine: AsyncEngine, user: str, session: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(update(sessions).where(sessions.c.user_id == user, sessions.c.session_id == session)
                           .values(expires_at=datetime.now(UTC) - timedelta(minutes=1)))


async def stored_state(platform: Platform, user: str, session: str) -> tuple[int, list[str]]:
    """The session's state bytes (opened: as saved, before it was sealed) and the memory messages its persisted
    participants' contexts hold."""
    row = await platform.store.get(SessionKey(user, session))
    assert row is not None and row.state is not None
    participants = json.loads(row.state)["data"]["participants"]
    held = [m for state in participants.values() for m in memory_messages(
        state["agent_state"]["llm_context"]["messages"])]
    return row.state_bytes, held


def register(registry: Registry, channel: str, writer: WriterMode = "offline", **memory: Any) -> str:
    return registry.add(TEAM, helpdesk(channel, writer).dump_component(), helpdesk_manifest(**memory),
                        f"writer {writer}", label="production")


async def test_a_new_session_is_given_in_its_first_model_call_every_fact_the_last_one_left(
    platform: Platform, channel: str
) -> None:
    _, given, _ = await talk(platform, "alice", "s1", FIRST)
    assert given == MemoryRecall("helpdesk")  # nothing kept yet: nothing given
    await platform.drain_memory()
    since = len(CALLS[channel])
    result, given, outcome = await talk(platform, "alice", "s2", "Hello, any news?")
    assert outcome == "new" and given is not None
    assert (given.given_to, given.summary, given.facts) == (["triage", "researcher"], True, ["router_model", "ticket_id"])
    first_call = CALLS[channel][since]
    (memory,) = [str(m.content) for m in first_call if isinstance(m, SystemMessage) and str(m.content).startswith(HEADER)]
    assert '- ticket_id: "55102"' in memory and '- router_model: "ZX-81"' in memory and FIRST in memory
    triage = next(m for m in result.messages if m.source == "triage" and type(m).__name__ == "TextMessage")
    assert "ticket_id=55102" in triage.to_text()  # the offline model says what it was given


async def test_an_expired_session_is_given_the_memory_and_a_resumed_one_keeps_the_one_copy_it_has(
    platform: Platform, engine: AsyncEngine, channel: str
) -> None:
    await talk(platform, "alice", "s1", FIRST)
    await platform.drain_memory()
    await expire(engine, "alice", "s1")
    _, given, outcome = await talk(platform, "alice", "s1", "Hello again")
    assert outcome == "expired" and given is not None and given.given_to == ["triage", "researcher"]
    assert len((await stored_state(platform, "alice", "s1"))[1]) == 1
    await platform.drain_memory()
    _, given, outcome = await talk(platform, "alice", "s1", "Still there?")
    # resumed: the researcher's stored context holds the memory already; triage's is new every run
    assert outcome == "resumed" and given is not None and given.given_to == ["triage"]
    assert len((await stored_state(platform, "alice", "s1"))[1]) == 1


async def test_a_run_after_one_that_failed_in_the_same_block_is_given_the_memory_again(
    platform: Platform, channel: str
) -> None:
    await talk(platform, "alice", "s1", FIRST)
    await platform.drain_memory()
    async with platform.session("alice", "s2", team=TEAM) as s:
        with pytest.raises(RuntimeError):
            await s.run(BREAKS)
        since = len(CALLS[channel])
        await s.run("Hello again")  # on the team built again after the failure
    # triage's context is new every run and the researcher's started empty: both are given it again
    calls = CALLS[channel][since:]
    held = [memory_messages(call) for call in calls]
    assert len(calls) == 2 and all(len(h) == 1 and '- ticket_id: "55102"' in h[0] for h in held), held


async def test_what_memory_adds_never_piles_up_in_stored_state(platform: Platform, engine: AsyncEngine) -> None:
    # Sessions of three runs, each expiring: every one is given the memory (which every run rewrites) and
    # stores one copy at most; the k-th run of each stores what the k-th run of the one before stored.
    sizes: list[list[int]] = []
    for cycle in range(5):
        sizes.append([])
        for n in range(3):
            await talk(platform, "alice", "s1", f"Visit {cycle}.{n}: my router ZX-81 drops (ticket 55102).")
            await platform.drain_memory()
            size, held = await stored_state(platform, "alice", "s1")
            assert len(held) <= 1, f"visit {cycle}.{n}: {len(held)} memory messages stored"
            sizes[-1].append(size)
        await expire(engine, "alice", "s1")
    for k in range(3):  # what differs is the summary's growth, up to its budget (60 tokens, ~240 characters)
        assert max(c[k] for c in sizes[1:]) - min(c[k] for c in sizes[1:]) <= 60 * 4 + 40, sizes
    kept = await platform.show_memory("alice")
    assert len(kept[0].summary) <= 60 * 4  # the summary keeps to its budget however many runs fed it


async def test_a_long_resumed_session_stores_one_memory_message_and_flat_bytes(
    platform: Platform, engine: AsyncEngine, registry: Registry, channel: str
) -> None:
    # Each agent speaks twice a run: the researcher is asked to update its context twice in its first run.
    registry.add(TEAM, helpdesk(channel, messages=5).dump_component(), helpdesk_manifest(), "two turns",
                 label="production")
    await talk(platform, "alice", "s0", FIRST)
    await platform.drain_memory()
    sizes, copies = [], []
    for n in range(24):
        await talk(platform, "alice", "s1", f"Visit {n}: my router ZX-81 drops (ticket 55102).")
        await platform.drain_memory()  # every run rewrites the memory: the text differs each time
        size, held = await stored_state(platform, "alice", "s1")
        sizes.append(size)
        copies.append(len(held))
    assert copies[0] == 1 and max(copies) == 1  # given as the session began; never a second copy
    # Once the bounded window is full what it stores is flat (the memory message, not pinned, leaves it too).
    assert max(sizes[14:]) - min(sizes[14:]) <= 40 and max(sizes[14:]) <= max(sizes[:14]), sizes


async def test_a_resumed_session_stops_giving_what_the_user_forgot_and_keeps_one_memory_message(
    platform: Platform, channel: str
) -> None:
    def researchers_memory(since: int) -> list[str]:
        calls = [call for call in CALLS[channel][since:] if "You are researcher" in str(call[0].content)]
        return memory_messages(calls[0])

    await talk(platform, "alice", "s1", FIRST)
    await platform.drain_memory()
    await talk(platform, "alice", "s2", "Hello, any news?")  # the researcher's stored context holds the memory
    await platform.drain_memory()
    await platform.forget_memory("alice", fact="ticket_id")
    async with platform.session("alice", "s2", team=TEAM) as s:
        with pytest.raises(RuntimeError):
            await s.run(BREAKS)  # the team is built again, with the state the session opened with
        since = len(CALLS[channel])
        await s.run("Still there?")
    (held,) = researchers_memory(since)
    assert "ticket_id" not in held and '- router_model: "ZX-81"' in held
    assert [m for m in (await stored_state(platform, "alice", "s2"))[1] if "ticket_id" in m] == []
    await platform.drain_memory()
    await platform.forget_memory("alice")
    since = len(CALLS[channel])
    await talk(platform, "alice", "s2", "Anyone?")
    assert researchers_memory(since) == []
    assert (await stored_state(platform, "alice", "s2"))[1] == []


async def test_a_forget_while_a_session_is_open_leaves_its_writer_nothing_said_before_to_write(
    platform: Platform,
) -> None:
    await talk(platform, "alice", "s1", FIRST)
    await platform.drain_memory()
    async with platform.session("alice", "s2", team=TEAM) as s:
        await s.run(FIRST)  # said again, in a session whose writer has not read the memory yet
        await platform.forget_memory("alice")
    await platform.drain_memory()  # its writer reads the memory only now, after the forget
    assert await platform.show_memory("alice") == []
    await talk(platform, "alice", "s3", FIRST)  # a session opened after the forget: its words are kept
    await platform.drain_memory()
    (kept,) = await platform.show_memory("alice")
    assert kept.facts["ticket_id"].value == "55102"


async def test_a_resumed_session_stops_giving_a_forgotten_value_once_the_fact_is_learnt_again(
    platform: Platform, channel: str
) -> None:
    await talk(platform, "alice", "s1", FIRST)
    await platform.drain_memory()
    await talk(platform, "alice", "s2", "Hello, any news?")  # the researcher's stored context holds ticket 55102
    await platform.drain_memory()
    assert any('- ticket_id: "55102"' in m for m in (await stored_state(platform, "alice", "s2"))[1])
    await platform.forget_memory("alice", fact="ticket_id")
    await talk(platform, "alice", "s3", "A new fault today (ticket 77001).")  # learnt again, another value
    await platform.drain_memory()
    since = len(CALLS[channel])
    await talk(platform, "alice", "s2", "Still there?")
    calls = [call for call in CALLS[channel][since:] if "You are researcher" in str(call[0].content)]
    (held,) = memory_messages(calls[0])
    # (a forget of one fact keeps the summary, and the offline writer's summary quotes what was said)
    assert '- ticket_id: "55102"' not in held and '- ticket_id: "77001"' in held
    assert [m for m in (await stored_state(platform, "alice", "s2"))[1] if '- ticket_id: "55102"' in m] == []

async def _interrupted_after_triages_turn(
    platform: Platform, registry: Registry, channel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """alice's memory written from a first session, then her run in ``s2`` interrupted: triage's turn completes
    and is checkpointed with the memory it was given, the researcher's call fails."""
    registry.add(TEAM, helpdesk(channel, messages=5).dump_component(),
                 helpdesk_manifest().model_copy(update={"checkpoints": "every_turn"}), "checkpoints",
                 label="production")
    await talk(platform, "alice", "s1", FIRST)
    await platform.drain_memory()
    with counted_calls(monkeypatch) as calls:
        calls.fail_at = 2
        async with platform.session("alice", "s2", team=TEAM) as s:
            with pytest.raises(RuntimeError):
                await s.run("Hello, any news?")
            assert s.interrupted is not None


async def test_a_run_continued_after_the_user_forgot_a_fact_is_not_given_it_by_its_checkpoint(
    platform: Platform, registry: Registry, channel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _interrupted_after_triages_turn(platform, registry, channel, monkeypatch)
    await platform.forget_memory("alice", fact="ticket_id")
    since = len(CALLS[channel])
    async with platform.session("alice", "s2", team=TEAM, continuing=True) as s:
        await s.continue_run()
    held = [memory_messages(call) for call in CALLS[channel][since:]]
    assert len(held) == 3 and all(len(h) == 1 for h in held), held  # one memory message in each call
    assert not [h for h in held if "ticket_id" in h[0]], held


async def test_a_continued_run_gives_the_memory_as_it_is_now_in_place_of_the_copy_its_checkpoint_holds(
    platform: Platform, registry: Registry, channel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _interrupted_after_triages_turn(platform, registry, channel, monkeypatch)
    await talk(platform, "alice", "s3", "A new ticket: 77777.")  # another session moves the memory on
    await platform.drain_memory()
    since = len(CALLS[channel])
    async with platform.session("alice", "s2", team=TEAM, continuing=True) as s:
        await s.continue_run()
    held = [memory_messages(call) for call in CALLS[channel][since:]]
    assert len(held) == 3 and all(len(h) == 1 and "77777" in h[0] for h in held), held


async def test_a_run_whose_checkpoint_predates_the_kept_bound_continues_and_its_writer_is_bounded_by_its_start(
    platform: Platform, registry: Registry, channel: str, monkeypatch: pytest.MonkeyPatch, engine: AsyncEngine
) -> None:
    registry.add(TEAM, helpdesk(channel, messages=5).dump_component(),
                 helpdesk_manifest().model_copy(update={"checkpoints": "every_turn"}), "checkpoints", label="production")
    with counted_calls(monkeypatch) as calls:
        calls.fail_at = 2
        async with platform.session("alice", "s1", team=TEAM) as s:
            with pytest.raises(RuntimeError):
                await s.run(FIRST)
    row = await platform.store.get(SessionKey("alice", "s1"))
    assert row is not None and row.checkpoint is not None
    payload = decode(row.checkpoint)
    assert payload["schema"] == 2 and payload["said_after"] is not None
    payload["schema"] = 1  # as a release that kept no bound wrote it (unsealed, as before sealing)
    del payload["said_after"]
    old = encode(payload)
    async with engine.begin() as conn:
        await conn.execute(update(sessions).where(sessions.c.user_id == "alice")
                           .values(checkpoint=old, checkpoint_bytes=len(old.encode())))
    await platform.forget_memory("alice")
    async with platform.session("alice", "s1", team=TEAM, continuing=True) as s:
        assert s.interrupted is not None and s.interrupted.said_after is None
        result = await s.continue_run()
    assert len(result.messages) == 5  # it read, and continued to its end
    await platform.drain_memory()
    assert await platform.show_memory("alice") == []  # bounded by the run's start, before the forget


@pytest.mark.parametrize("mode", WRITER_MODES)
async def test_a_failing_writer_never_fails_the_run_and_leaves_the_previous_memory(
    platform: Platform, registry: Registry, channel: str, mode: WriterMode, caplog: pytest.LogCaptureFixture
) -> None:
    await talk(platform, "alice", "s1", FIRST)
    await platform.drain_memory()
    (good,) = await platform.show_memory("alice")
    register(registry, channel, writer=mode)
    with caplog.at_level(logging.INFO):
        result, _, _ = await talk(platform, "alice", "s2", f"Visits: 3. {SECRET_WORDS}")
        await platform.drain_memory()
    assert result.stop_reason is not None  # the user's run finished as ever
    (kept,) = await platform.show_memory("alice")
    assert (kept.summary, kept.version, kept.facts) == (good.summary, good.version, good.facts)
    assert kept.failure is not None and kept.failure.count == 1 and "previous memory is kept" in kept.failure.reason
    assert SECRET_WORDS not in kept.failure.reason
    assert any("memory of team helpdesk not updated" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if SECRET_WORDS in r.getMessage()]


async def test_a_team_that_no_longer_declares_memory_gives_none_and_leaves_what_is_kept(
    platform: Platform, registry: Registry, channel: str
) -> None:
    await talk(platform, "alice", "s1", FIRST)
    await platform.drain_memory()
    (before,) = await platform.show_memory("alice")
    register(registry, channel, memory=None)
    since = len(CALLS[channel])
    _, given, _ = await talk(platform, "alice", "s2", "Hello")
    await platform.drain_memory()
    assert given is None
    assert not any(str(m.content).startswith(HEADER) for call in CALLS[channel][since:] for m in call)
    assert await platform.show_memory("alice") == [before]  # neither read nor written, nor dropped
    assert (await platform.forget_memory("alice")).memories == 1


async def test_a_fact_no_team_declares_any_more_is_deleted_by_the_next_write(
    platform: Platform, registry: Registry, channel: str
) -> None:
    await talk(platform, "alice", "s1", FIRST)
    await platform.drain_memory()
    register(registry, channel, facts={"ticket_id": "str"})
    _, given, _ = await talk(platform, "alice", "s2", "Hello")
    assert given is not None and given.left_out == ["router_model"]  # not given; until the write, still kept
    await platform.drain_memory()
    (kept,) = await platform.show_memory("alice")
    assert list(kept.facts) == ["ticket_id"] and kept.version == 2


@pytest.mark.parametrize("enabled", [True, False], ids=["kept-by-another-team", "kept-by-a-team-switched-off"])
async def test_a_fact_another_team_sharing_the_scope_declares_is_kept_by_a_write_that_no_longer_does(
    platform: Platform, registry: Registry, channel: str, enabled: bool
) -> None:
    register(registry, channel, scope="support")
    other = helpdesk_manifest(scope="support", enabled=enabled).model_copy(update={"name": "helpdesk_two"})
    registry.add("helpdesk_two", helpdesk(channel).dump_component(), other, "two", label="production")
    await talk(platform, "alice", "s1", FIRST)
    await platform.drain_memory()
    register(registry, channel, scope="support", facts={"ticket_id": "str"})
    await talk(platform, "alice", "s2", "Hello")
    await platform.drain_memory()
    (kept,) = await platform.show_memory("alice")
    assert sorted(kept.facts) == ["router_model", "ticket_id"] and kept.version == 2


async def test_two_sessions_of_one_user_finishing_at_once_lose_no_fact_update(
    engine: AsyncEngine, registry: Registry, channel: str, tmp_path: Path
) -> None:
    register(registry, channel, writer="gated")
    GATES[channel] = asyncio.Barrier(2)  # both writers have read the memory before either writes
    async with make_platform(engine, registry, tmp_path) as platform:
        await asyncio.gather(talk(platform, "alice", "s1", "Ticket 55102 was opened for me."),
                             talk(platform, "alice", "s2", "The router RX-900 blinks red."))
        await platform.drain_memory()
        (kept,) = await platform.show_memory("alice")
    assert {n: f.value for n, f in kept.facts.items()} == {"ticket_id": "55102", "router_model": "RX-900"}
    assert kept.version == 2 and kept.failure is None
    assert "Ticket 55102" in kept.summary and "RX-900" in kept.summary  # the second wrote from the first's


async def test_memory_shared_under_a_declared_scope_reaches_the_other_team(
    platform: Platform, registry: Registry, channel: str
) -> None:
    register(registry, channel, scope="support")
    registry.add("helpdesk_two", helpdesk(channel).dump_component(),
                 helpdesk_manifest(scope="support").model_copy(update={"name": "helpdesk_two"}), "two",
                 label="production")
    await talk(platform, "alice", "s1", FIRST)
    await platform.drain_memory()
    async with platform.session("alice", "s9", team="helpdesk_two") as s:
        await s.run("hi")
        assert s.memory is not None and s.memory.scope == "support" and s.memory.facts == ["router_model", "ticket_id"]
    assert [m.scope for m in await platform.show_memory("alice")] == ["support"]


async def test_a_team_sharing_the_scope_under_a_smaller_budget_is_given_the_summary_cut_to_it(
    platform: Platform, registry: Registry, channel: str
) -> None:
    register(registry, channel, scope="support")
    registry.add("helpdesk_two", helpdesk(channel).dump_component(),
                 helpdesk_manifest(scope="support", summary_tokens=6).model_copy(update={"name": "helpdesk_two"}),
                 "two", label="production")
    await talk(platform, "alice", "s1", FIRST)
    await platform.drain_memory()
    (kept,) = await platform.show_memory("alice")
    assert estimate_tokens(kept.summary) > 6  # written under the first team's budget
    since = len(CALLS[channel])
    async with platform.session("alice", "s9", team="helpdesk_two") as s:
        await s.run("hi")
        assert s.memory is not None and (s.memory.summary, s.memory.summary_cut) == (True, True)
        assert s.memory.left_out == []
    (memory,) = [str(m.content) for m in CALLS[channel][since]
                 if isinstance(m, SystemMessage) and str(m.content).startswith(HEADER)]
    given = memory.split("Summary: ", 1)[1].split("\n", 1)[0]
    assert given == cut_to_budget(kept.summary, 6) and given.endswith("\u2026") and estimate_tokens(given) <= 6
    assert kept.summary.startswith(given[:-1])


async def test_a_writer_that_does_not_answer_in_time_is_recorded_and_changes_nothing(
    engine: AsyncEngine, registry: Registry, channel: str, tmp_path: Path
) -> None:
    register(registry, channel, writer="gated")
    GATES[channel] = asyncio.Barrier(2)  # no second writer ever comes: the first waits until its timeout
    async with make_platform(engine, registry, tmp_path, memory_writer_timeout_seconds=0.2) as platform:
        result, _, _ = await talk(platform, "alice", "s1", FIRST)
        await platform.drain_memory()
        (kept,) = await platform.show_memory("alice")
    assert result.stop_reason is not None and not kept.written and kept.facts == {}
    assert kept.failure is not None and "did not answer within 0.2s" in kept.failure.reason


async def test_a_memory_row_damaged_by_hand_gives_only_what_is_sound_and_is_never_written_over(
    platform: Platform, engine: AsyncEngine, channel: str
) -> None:
    await talk(platform, "alice", "s1", FIRST)
    await platform.drain_memory()
    async with engine.begin() as conn:
        await conn.execute(update(facts).where(facts.c.name == "router_model").values(value="{ZX-81"))
        await conn.execute(update(memories).values(version=-3))
    since = len(CALLS[channel])
    _, given, _ = await talk(platform, "alice", "s2", "Hello again")
    await platform.drain_memory()
    assert given is not None and given.facts == ["ticket_id"] and "router_model" in given.left_out
    first_call = "\n".join(str(m.content) for m in CALLS[channel][since])
    assert '- ticket_id: "55102"' in first_call and "ZX-81" not in first_call.split("Facts:")[1]
    (kept,) = await platform.show_memory("alice")
    assert {d.name for d in kept.damaged} == {"router_model", "version"}
    assert kept.failure is not None and "damaged" in kept.failure.reason  # the writer refused to write over it
    assert kept.facts["ticket_id"].value == "55102"


async def test_facts_left_without_their_memory_row_are_given_to_no_session_and_the_next_write_starts_clean(
    platform: Platform, engine: AsyncEngine, channel: str
) -> None:
    await talk(platform, "alice", "s1", FIRST)
    await platform.drain_memory()
    async with engine.begin() as conn:  # the memory row deleted by hand: its facts are left
        await conn.execute(memories.delete())
    since = len(CALLS[channel])
    _, given, _ = await talk(platform, "alice", "s2", "Hello again")
    await platform.drain_memory()
    assert given == MemoryRecall("helpdesk")  # a new session, given nothing of what is left
    assert not any(str(m.content).startswith(HEADER) for call in CALLS[channel][since:] for m in call)
    (kept,) = await platform.show_memory("alice")
    assert kept.written and kept.version == 1 and kept.failure is None  # written, not refused
    assert kept.facts == {} and not kept.leftover and "ZX-81" not in kept.summary  # nothing of the old memory


async def test_a_write_cut_off_by_the_end_of_an_event_loop_whose_platform_never_closed_says_to_close_it(
    engine: AsyncEngine, database_url: str, registry: Registry, channel: str, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    register(registry, channel, writer="gated")
    GATES[channel] = asyncio.Barrier(2)  # no second writer comes: the write is in flight when the loop ends

    async def forgetful() -> None:  # a script that runs a session and never closes its platform
        own = create_engine(database_url)
        await talk(make_platform(own, registry, tmp_path), "alice", "s1", FIRST)
        await own.dispose()

    with caplog.at_level(logging.WARNING, logger="teamstore.memory"):
        await asyncio.to_thread(asyncio.run, forgetful())  # asyncio.run cancels the write still in flight
    said = [r.getMessage() for r in caplog.records if r.name == "teamstore.memory"]
    assert said and "memory write was cancelled" in said[0] and "await platform.aclose()" in said[0]
    assert await make_platform(engine, registry, tmp_path).memory.store.load("alice", TEAM) is None
