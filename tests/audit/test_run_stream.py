"""Streaming through the managed session, and an interrupted run's audit, on SQLite and a real Postgres with
a real OTLP receiver: every streamed message in the transcript, every model call in the ledger and the spans;
a run continued after it stopped mid-run is one run, told apart as interrupted; ``s.team.run_stream`` goes
through the same path."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import TaskResult
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import SelectorGroupChat
from sqlalchemy import select

from config_registry import Manifest, Registry
from teamstore.app import open_platform
from teamstore.audit.cost import query_costs
from teamstore.audit.observer import TranscriptObserver
from teamstore.audit.prices import load_prices
from teamstore.audit.schema import usage
from teamstore.audit.transcripts.record import decode, sealed_context
from teamstore.context import BoundedChatCompletionContext
from teamstore.errors import RunInterrupted
from teamstore.offline import OfflineChatCompletionClient
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from teamstore.state.base import SessionKey
from tests.conftest import prepare
from tests.otlp_receiver import OtlpReceiver
from tests.runtime.checkpoint_teams import TEAM, TURNS, counted_calls, long_triage, manifest, register, said

TASK = "My line drops every evening since the storm."


@pytest.fixture
async def platform(
    backend: tuple[str, str], tmp_path: Path, otlp_env: OtlpReceiver, registry_path: Path
) -> AsyncIterator[Platform]:
    """A service's platform from settings: transcripts in a folder, the ledger, spans over OTLP; on SQLite and
    Postgres with both kinds of lease."""
    url, lease = backend
    await prepare(url, lease)
    register(Registry(registry_path, create=True))
    built = open_platform(Settings(
        home=tmp_path / "home", registry_path=registry_path, database_url=url, auto_migrate=True,
        registry_refresh_seconds=0, session_lease=lease,
    ))
    async with built:
        yield built


async def _transcript(platform: Platform, run_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Alice's transcript of ``run_id``, opened under her data key as the export opens it."""
    observer = next(o for o in platform.observers if isinstance(o, TranscriptObserver))
    store = observer.store
    async for found in store.scan(""):
        header, items = decode(await observer.keys.open("alice", await store.get(found.key), sealed_context(found.key)))
        if header["run_id"] == run_id:
            return header, items
    raise AssertionError(f"no transcript for run {run_id}")


async def _ledger(platform: Platform, run_id: str) -> list[Any]:
    async with platform.engine.connect() as conn:
        return list((await conn.execute(select(usage).where(usage.c.run_id == run_id))).all())


def _items_said(items: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(i["type"], i["source"], i["message"].get("content")) for i in items]


async def test_every_streamed_message_is_in_the_transcript_and_every_call_in_the_ledger_and_spans(
    platform: Platform, otlp_env: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    streamed: list[Any] = []
    with counted_calls(monkeypatch) as calls:
        async with platform.session("alice", "s1", team=TEAM) as s:
            async for item in s.run_stream(TASK):
                streamed.append(item)
            run_id = s.last_run_id
    assert run_id is not None and isinstance(streamed[-1], TaskResult)
    messages = streamed[:-1]
    assert said(messages) == said(streamed[-1].messages) and len(messages) == TURNS + 1
    header, items = await _transcript(platform, run_id)
    assert _items_said(items) == [(t, src, text) for t, src, text in said(messages)]
    rows = await _ledger(platform, run_id)
    assert sum(r.calls for r in rows) == calls.made == TURNS
    assert {r.interruptions for r in rows} == {0} and header["interruptions"] == 0
    spans = otlp_env.wait_for(lambda s: len([x for x in s if x["name"].startswith("chat ")]) >= TURNS)
    (run,) = [x for x in spans if x["name"] == f"invoke_agent {TEAM}"]
    chats = [x for x in spans if x["name"].startswith("chat ") and x["parent_span_id"] == run["span_id"]]
    assert len(chats) == calls.made


async def test_the_team_reached_around_the_session_streams_through_it(platform: Platform) -> None:
    async with platform.session("alice", "s1", team=TEAM) as s:
        streamed = [item async for item in s.team.run_stream(task=TASK)]
        result = await s.team.run(task="and once more")
        assert s.last_run_id is not None
        second = s.last_run_id
    assert isinstance(streamed[-1], TaskResult) and result.messages[0].to_text() == "and once more"
    _, items = await _transcript(platform, second)
    assert _items_said(items)[0][2] == "and once more"
    assert await _ledger(platform, second)


async def test_a_consumer_that_stops_mid_stream_of_a_team_without_checkpoints_leaves_the_session_going_on(
    platform: Platform, registry_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    register(Registry(registry_path), checkpoints="off")
    async with platform.session("alice", "s1", team=TEAM) as s:
        await s.run("first request")
    before = await platform.store.get(s.key)
    async with platform.session("alice", "s1", team=TEAM) as s:
        async for item in s.run_stream(TASK):
            if getattr(item, "source", "") == "researcher":
                break  # the user pressed stop
        stopped = s.last_run_id
        assert s.interrupted is None  # no turn of it was kept: nothing to continue
        result = await s.run("a new request")  # the session goes on, from the state before the stopped run
        state = str(await s.team.save_state())
    assert result.messages[0].to_text() == "a new request" and TASK not in state and "first request" in state
    row = await platform.store.get(SessionKey("alice", "s1"))
    assert row is not None and row.checkpoint is None and before is not None and TASK not in (row.state or "")
    assert stopped is not None
    header, _ = await _transcript(platform, stopped)  # the stopped run is on record as it went
    assert header["error"] in ("GeneratorExit", "CancelledError")
    # The team stopped as asked: no handler's cancellation is logged as an error.
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_cancelled_streaming_consumer_task_leaves_a_team_without_checkpoints_usable(
    platform: Platform, registry_path: Path
) -> None:
    import asyncio

    register(Registry(registry_path), checkpoints="off")
    async with platform.session("alice", "s1", team=TEAM) as s:
        started = asyncio.Event()

        async def consume() -> None:
            async for _ in s.run_stream(TASK):
                started.set()
                await asyncio.sleep(30)  # a slow client

        consumer = asyncio.create_task(consume())
        await started.wait()
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        result = await s.run("again")
    assert result.messages[0].to_text() == "again"
    row = await platform.store.get(SessionKey("alice", "s1"))
    assert row is not None and row.checkpoint is None and TASK not in (row.state or "")


async def test_a_run_whose_consumer_stops_after_a_checkpoint_is_continued_and_on_record_once(
    platform: Platform, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with counted_calls(monkeypatch) as calls:
        calls.hold_at = 3  # turn 3's answer waits: turns 1 and 2 are in the row, and in the stream
        async with platform.session("alice", "s1", team=TEAM) as s:
            async for item in s.run_stream(TASK):
                if getattr(item, "source", "") == "researcher":
                    break  # the user pressed stop; the stream, left unread, is closed as the block exits
            run_id = s.last_run_id
        assert run_id is not None and await _ledger(platform, run_id) == []  # the attempt that ends it records it
        calls.hold_at = None
        async with platform.session("alice", "s1", team=TEAM) as s:
            assert s.interrupted is not None and s.interrupted.run_id == run_id and s.interrupted.last_turn == 2
            result = await s.continue_run()
    header, items = await _transcript(platform, run_id)
    assert _items_said(items) == [(t, src, text) for t, src, text in said(result.messages)]
    assert header["error"] is None and header["interruptions"] == 1 and len(items) == TURNS + 1
    rows = await _ledger(platform, run_id)
    # Every call once: turn 3's, if it had begun when the stream was closed, stopped waiting for its answer (on
    # record as a failed call), and made again by the continuation.
    assert sum(r.calls for r in rows) == calls.made and sum(r.failed_calls for r in rows) == calls.made - TURNS
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_streaming_consumer_cancelled_again_and_again_leaves_its_run_continuable_and_on_record_once(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    # anyio's cancel scopes (a client gone from a Starlette stream) cancel the consumer again at every turn of the
    # event loop until it ends: the run it stopped stays continuable all the same, every model call it paid kept
    # in its checkpoint and on record once, when the run ends.
    import asyncio

    with counted_calls(monkeypatch) as calls:
        calls.on_call = lambda n: asyncio.sleep(0.05)  # a model that takes its time: the consumer waits on it
        async with platform.session("alice", "s1", team=TEAM) as s:
            started = asyncio.Event()

            async def consume() -> None:
                async for item in s.run_stream(TASK):
                    if getattr(item, "source", "") == "triage":
                        started.set()

            consumer = asyncio.create_task(consume())
            await started.wait()
            while not consumer.done():
                consumer.cancel()
                await asyncio.sleep(0)
            assert consumer.cancelled()
            assert s.interrupted is not None
            stopped = s.interrupted.run_id
        assert await _ledger(platform, stopped) == []
        async with platform.session("alice", "s1", team=TEAM) as s:
            await s.continue_run()
    header, items = await _transcript(platform, stopped)
    assert header["error"] is None and header["interruptions"] == 1 and len(items) == TURNS + 1
    assert sum(r.calls for r in await _ledger(platform, stopped)) == calls.made >= TURNS


@pytest.mark.parametrize("how", ["aclose", "task"], ids=["stream-closed", "task-cancelled"])
async def test_a_continuation_cancelled_mid_stream_stays_continuable_and_the_run_is_on_record_once(
    platform: Platform, monkeypatch: pytest.MonkeyPatch, otlp_env: OtlpReceiver, how: str
) -> None:
    # A service streams the continuation of an interrupted run to a phone, whose connection drops: the server
    # closes the stream (or cancels its task). The turns the run completed before, and those the continuation
    # completed, stay; the next continuation runs none of them again.
    import asyncio

    run_id = await _interrupted(platform, monkeypatch)  # after turn 2: 3 calls, the third failed
    with counted_calls(monkeypatch) as calls:
        calls.hold_at = 3  # the continuation's third call (turn 5) waits: turns 3 and 4 are in the row
        async with platform.session("alice", "s1", team=TEAM) as s:
            stream = s.continue_run_stream()
            if how == "aclose":
                got = [await anext(stream) for _ in range(5)]  # the task, turns 1 and 2 again, turns 3 and 4
                await calls.holding.wait()
                await stream.aclose()
            else:
                got = []

                async def consume() -> None:
                    async for item in stream:
                        got.append(item)

                consumer = asyncio.ensure_future(consume())
                await calls.holding.wait()
                consumer.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await consumer
            assert len(got) == 5
            assert s.interrupted is not None and s.interrupted.run_id == run_id and s.interrupted.last_turn == 4
            assert s.resume is not None and s.resume.outcome == "interrupted"
            with pytest.raises(RunInterrupted, match="was cancelled after turn 4"):
                await s.run("something else")
        assert calls.made == 3
        assert await _ledger(platform, run_id) == []  # not on record yet, nor its transcript
        observer = next(o for o in platform.observers if isinstance(o, TranscriptObserver))
        assert run_id not in observer._items and run_id not in observer._data_keys  # nor held in memory meanwhile
        with pytest.raises(AssertionError, match="no transcript"):
            await _transcript(platform, run_id)
        calls.hold_at, calls.made = None, 0
        async with platform.session("alice", "s1", team=TEAM) as s:
            assert s.interrupted is not None and s.interrupted.last_turn == 4
            result = await s.continue_run()
    assert calls.made == 2  # turn 5 again, and turn 6: turns 1 to 4 made no call again
    header, items = await _transcript(platform, run_id)
    assert _items_said(items) == [(t, src, text) for t, src, text in said(result.messages)]
    assert header["interruptions"] == 2 and len(items) == TURNS + 1
    rows = await _ledger(platform, run_id)
    # 3 of the first attempt (its third failed), 3 of the cancelled one (turn 5's, stopped, failed), 2 of the last.
    assert sum(r.calls for r in rows) == 8 and sum(r.failed_calls for r in rows) == 2
    assert {r.attempt: sum(x.calls for x in rows if x.attempt == r.attempt) for r in rows} == {0: 3, 1: 3, 2: 2}
    spans = otlp_env.wait_for(lambda s: len([x for x in s if x["name"].startswith("chat ")]) >= 8)
    (run,) = [x for x in spans if x["attributes"].get("teamstore.run_id") == run_id]
    chats = [x["attributes"] for x in spans if x["parent_span_id"] == run["span_id"]]
    assert sorted(a["teamstore.attempt"] for a in chats) == [0, 0, 0, 1, 1, 1, 2, 2]



def _first_checkpoint_answer_lost(platform: Platform, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """The run's first checkpoint write waits until released, then lands, and the database's answer is lost
    (``StoreUnavailable``: its outcome unknown to the session); returns (writing, release) events."""
    import asyncio

    from teamstore.errors import StoreUnavailable

    checkpoint, writing, release, written = platform.store.checkpoint, asyncio.Event(), asyncio.Event(), [0]

    async def answer_lost(*args: Any, **kwargs: Any) -> int:
        written[0] += 1
        if written[0] > 1:
            return await checkpoint(*args, **kwargs)
        writing.set()
        await release.wait()
        await checkpoint(*args, **kwargs)
        raise StoreUnavailable("the connection closed before the commit's answer", hint="check the database")

    monkeypatch.setattr(platform.store, "checkpoint", answer_lost)
    return writing, release


@pytest.mark.parametrize("at_once", [False, True], ids=["continued-later", "continued-in-the-block"])
@pytest.mark.parametrize("cancelled", [True, False], ids=["cancelled", "database-failed"])
async def test_a_run_whose_first_checkpoint_lands_unanswered_is_continued_and_on_record_once(
    platform: Platform, monkeypatch: pytest.MonkeyPatch, otlp_env: OtlpReceiver, cancelled: bool, at_once: bool
) -> None:
    # The request is cancelled (or not) while turn 1's checkpoint is written; the write lands, but its answer is
    # lost. Taken as a write that did not land, the run was recorded at the stop (its run span exported) and
    # again by its continuation. Continued in the same block, the session goes on from the row the write left:
    # on the version it held before, the continuation found the row changed under it (StaleStateVersion).
    import asyncio

    from teamstore.errors import StoreUnavailable

    writing, release = _first_checkpoint_answer_lost(platform, monkeypatch)
    with counted_calls(monkeypatch) as calls:
        async with platform.session("alice", "s1", team=TEAM) as s:
            running = asyncio.ensure_future(s.run(TASK))
            await writing.wait()
            if cancelled:
                running.cancel()
                for _ in range(5):
                    await asyncio.sleep(0)
            release.set()
            with pytest.raises(asyncio.CancelledError if cancelled else StoreUnavailable) as info:
                await running
            if not cancelled:
                assert "but it landed; turn 1's checkpoint stays" in str(info.value)
                assert "continue the run" in (info.value.hint or "")  # type: ignore[attr-defined]
            assert s.interrupted is not None and s.interrupted.last_turn == 1
            run_id = s.interrupted.run_id
            assert await _ledger(platform, run_id) == []  # not recorded at the stop
            if at_once:
                result = await s.continue_run()
        if not at_once:
            async with platform.session("alice", "s1", team=TEAM) as s:
                assert s.interrupted is not None and s.interrupted.run_id == run_id and s.interrupted.last_turn == 1
                result = await s.continue_run()
    assert calls.made == TURNS  # turn 1 made no call again
    header, items = await _transcript(platform, run_id)
    assert _items_said(items) == [(t, src, text) for t, src, text in said(result.messages)]
    assert header["error"] is None and header["interruptions"] == 1 and len(items) == TURNS + 1
    rows = await _ledger(platform, run_id)
    assert sum(r.calls for r in rows) == TURNS and {r.attempt for r in rows} == {0, 1}
    spans = otlp_env.wait_for(lambda found: any(
        x["attributes"].get("teamstore.run_id") == run_id and x["attributes"].get("teamstore.interruptions") == 1
        for x in found))
    (run,) = [x for x in spans if x["attributes"].get("teamstore.run_id") == run_id]  # exported once
    chats = [x["attributes"] for x in spans if x["parent_span_id"] == run["span_id"]]
    assert sorted(a["teamstore.attempt"] for a in chats) == [0] + [1] * (TURNS - 1)


async def test_a_run_whose_unanswered_checkpoint_cannot_be_read_back_says_so_and_is_on_record_at_its_stop(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The database answers neither the write nor the read-back: whether turn 1's checkpoint landed is not known.
    # The run is recorded at its stop (were the write lost, nothing would ever record its paid call), and the
    # error says what is known, not that no checkpoint was written.
    import asyncio

    from teamstore.errors import StoreUnavailable

    writing, release = _first_checkpoint_answer_lost(platform, monkeypatch)

    async def unreadable(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("the database is unreachable", hint="check the database")

    monkeypatch.setattr(platform.store, "settle", unreadable)
    with counted_calls(monkeypatch) as calls:
        async with platform.session("alice", "s1", team=TEAM) as s:
            running = asyncio.ensure_future(s.run(TASK))
            await writing.wait()
            release.set()
            with pytest.raises(StoreUnavailable) as info:
                await running
            run_id = s.last_run_id
    message, hint = str(info.value), info.value.hint or ""  # type: ignore[attr-defined]
    assert "the row could not be read back to learn whether it landed" in message
    assert "no checkpoint of this run was written, unless this one landed" in message
    assert "could not be written" not in message and "`s.interrupted` says whether" in hint
    assert run_id is not None and sum(r.calls for r in await _ledger(platform, run_id)) == calls.made == 1
    async with platform.session("alice", "s1", team=TEAM) as s:  # it did land: the row says so
        assert s.interrupted is not None and s.interrupted.run_id == run_id and s.interrupted.last_turn == 1


async def test_a_stream_left_in_an_aclosing_block_says_at_once_that_its_run_waits_to_be_continued(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Leaving `async for` does not close a stream: contextlib.aclosing does, as the block ends, and the run has
    # stopped by then (docs/checkpoints.md, "A run the application cancels").
    import contextlib

    with counted_calls(monkeypatch) as calls:
        calls.hold_at = 3  # turn 3's answer waits: turns 1 and 2 are in the row
        async with platform.session("alice", "s1", team=TEAM) as s:
            async with contextlib.aclosing(s.run_stream(TASK)) as stream:
                async for item in stream:
                    if getattr(item, "source", "") == "researcher":
                        await calls.holding.wait()
                        break  # the user pressed stop
            assert s.interrupted is not None and s.interrupted.last_turn == 2
            run_id = s.interrupted.run_id
            assert await _ledger(platform, run_id) == []
            with pytest.raises(RunInterrupted, match="was cancelled after turn 2"):
                await s.run("something else")
            calls.hold_at = None
            result = await s.continue_run()  # in the same block
    header, items = await _transcript(platform, run_id)
    assert _items_said(items) == [(t, src, text) for t, src, text in said(result.messages)]
    assert header["error"] is None and header["interruptions"] == 1 and len(items) == TURNS + 1
    assert sum(r.calls for r in await _ledger(platform, run_id)) == calls.made

async def test_an_interrupted_run_is_one_run_with_every_turn_and_call_and_counts_apart_in_cost(
    platform: Platform, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, otlp_env: OtlpReceiver
) -> None:
    with counted_calls(monkeypatch) as calls, caplog.at_level(logging.ERROR, "autogen_core"):
        calls.fail_at = 4
        async with platform.session("alice", "s1", team=TEAM) as s:
            with pytest.raises(RuntimeError):
                await s.run(TASK)
        # A failure is still logged as one (the cancellation filter passes everything else).
        assert [r for r in caplog.records if r.name == "autogen_core" and r.levelno == logging.ERROR]
        calls.fail_at = None
        async with platform.session("alice", "s1", team=TEAM) as s:
            result = await s.continue_run()
            run_id = s.last_run_id
    assert run_id is not None
    header, items = await _transcript(platform, run_id)
    assert _items_said(items) == [(t, src, text) for t, src, text in said(result.messages)]
    assert header["interruptions"] == 1 and len(items) == TURNS + 1
    rows = await _ledger(platform, run_id)
    # The three completed turns' calls came with the checkpoint, and the call that failed with them.
    assert sum(r.calls for r in rows) == TURNS + 1 and sum(r.failed_calls for r in rows) == 1
    assert {r.interruptions for r in rows} == {1}
    report = await query_costs(platform.engine, load_prices(), by="session")
    assert report.total.runs_interrupted == 1 and report.total.runs_limited == 1  # it ends at its message cap
    # One span per call, those the checkpoint carried told apart by the attempt that made them.
    spans = otlp_env.wait_for(lambda s: len([x for x in s if x["name"].startswith("chat ")]) >= TURNS + 1)
    (run,) = [x for x in spans if x["attributes"].get("teamstore.run_id") == run_id]
    chats = [x["attributes"] for x in spans if x["parent_span_id"] == run["span_id"]]
    assert sorted((a["teamstore.attempt"], a["teamstore.carried"]) for a in chats) == [(0, True)] * 4 + [(1, False)] * 3


async def _interrupted(platform: Platform, monkeypatch: pytest.MonkeyPatch, session: str = "s1") -> str:
    """Run the task in ``session`` with its third model call failing: the run stops after two turns, its
    checkpoint kept; its id."""
    with counted_calls(monkeypatch) as calls:
        calls.fail_at = 3
        async with platform.session("alice", session, team=TEAM) as s:
            with pytest.raises(RuntimeError):
                await s.run(TASK)
            assert s.interrupted is not None
            return s.interrupted.run_id


def _reword_critic(registry_path: Path) -> None:
    """Register a new version of the team as production, one an interrupted run of the old cannot continue on."""
    team = long_triage()
    team._participants[2]._description = "The critic, reworded."  # type: ignore[attr-defined]
    Registry(registry_path).add(TEAM, team.dump_component(), manifest(), "reword the critic", label="production")


async def test_an_abandoned_run_keeps_its_turns_and_calls_on_record(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await _interrupted(platform, monkeypatch)
    async with platform.session("alice", "s1", team=TEAM) as s:
        await s.abandon_run()
    header, items = await _transcript(platform, run_id)
    assert header["error"] == "RunInterrupted" and len(items) == 3  # the task and the two completed turns
    rows = await _ledger(platform, run_id)
    assert sum(r.calls for r in rows) == 3 and sum(r.failed_calls for r in rows) == 1  # and the call that failed
    assert all(r.run_failed for r in rows)
    report = await query_costs(platform.engine, load_prices(), by="session")
    assert report.total.runs_interrupted == 1 and report.total.runs_failed == 1


async def test_a_run_whose_checkpoint_autogen_refuses_at_continue_keeps_its_paid_calls_on_record(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    from teamstore.errors import StateRejected
    from teamstore.runtime import session_runs

    run_id = await _interrupted(platform, monkeypatch)

    async def refused(*args: Any) -> None:
        raise ValueError("AutoGen's load_state refuses it")

    monkeypatch.setattr(session_runs, "apply_checkpoint", refused)
    async with platform.session("alice", "s1", team=TEAM) as s:
        with pytest.raises(StateRejected, match="its checkpoint was set aside"):
            await s.continue_run()
    rows = await _ledger(platform, run_id)
    assert sum(r.calls for r in rows) == 3 and all(r.run_failed for r in rows)  # two turns' calls, the failed one
    header, items = await _transcript(platform, run_id)
    assert header["error"] == "RunInterrupted" and items == []


async def test_a_run_whose_checkpoint_is_set_aside_at_open_keeps_its_paid_calls_on_record(
    platform: Platform, registry_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await _interrupted(platform, monkeypatch)
    _reword_critic(registry_path)
    async with platform.session("alice", "s1", team=TEAM) as s:  # the run cannot continue on this version
        assert s.resume is not None and s.resume.checkpoint_refused == "definition_changed"
    header, items = await _transcript(platform, run_id)
    assert header["error"] == "RunInterrupted" and items == []  # its turns are read only by the version that ran them
    rows = await _ledger(platform, run_id)
    assert sum(r.calls for r in rows) == 3 and all(r.run_failed for r in rows)  # two turns' calls, the failed one
    report = await query_costs(platform.engine, load_prices(), by="session")
    assert report.total.runs_interrupted == 1 and report.total.runs_failed == 1


def _selector_team() -> SelectorGroupChat:
    """Three offline agents whose speakers a model picks: each turn is two calls, the selection and the answer."""
    agents = [
        AssistantAgent(name, model_client=OfflineChatCompletionClient(),
                       model_context=BoundedChatCompletionContext(max_messages=20, keep_first=1)
                       if name == "researcher" else None)
        for name in ("triage", "researcher", "critic")
    ]
    return SelectorGroupChat(agents, model_client=OfflineChatCompletionClient(),
                             termination_condition=MaxMessageTermination(TURNS + 1), allow_repeated_speaker=True)


async def test_a_run_stopped_mid_turn_keeps_the_turns_paid_calls_on_record_when_continued_or_abandoned(
    platform: Platform, registry_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Registry(registry_path).add("selector", _selector_team().dump_component(), Manifest(
        name="selector", persist=["researcher"], context_bound=20, checkpoints="every_turn"), "v1", label="production")
    run_ids = []
    with counted_calls(monkeypatch) as calls:
        for user in ("alice", "bob"):
            calls.made, calls.fail_at = 0, 6  # turn 3's speaker is picked (a paid call), then its answer fails
            async with platform.session(user, "s1", team="selector") as s:
                with pytest.raises(RuntimeError):
                    await s.run(TASK)
                assert s.interrupted is not None and s.interrupted.last_turn == 2
                run_ids.append(s.interrupted.run_id)
            calls.fail_at = None
            async with platform.session(user, "s1", team="selector") as s:
                if user == "alice":
                    await s.continue_run()
                else:
                    await s.abandon_run()
            made = calls.made
            rows = await _ledger(platform, run_ids[-1])
            assert sum(r.calls for r in rows) == made and sum(r.failed_calls for r in rows) == 1
    assert made == 6  # bob's: two turns of two calls, then turn 3's selection and its failed answer


@pytest.mark.parametrize("how", ["answered", "answer lost", "as its block exits", "slower than the cut-off's wait"])
async def test_a_run_with_checkpoints_the_close_cuts_off_keeps_every_paid_call_on_record_once_when_continued(
    platform: Platform, registry_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # The close refused the last checkpoint that carries the calls paid since the one before (turn 3's speaker
    # selection): the continuation recorded every call but that one. A last checkpoint that lands with its answer
    # lost is read by the next worker, and its calls are recorded once all the same. The close also waits for it
    # when the session's block is exiting (its exit waits for the run), and when it takes longer than the cut-off
    # gives the run to stop: the lease is given back, and the store closed, only after it. The call the close
    # stopped while it waited for its answer is on record too, once, as a failed call (its usage unknown).
    import asyncio

    from autogen_core import CancellationToken

    from teamstore.errors import PlatformClosed, StoreUnavailable
    from teamstore.runtime import session as session_module

    Registry(registry_path).add("selector", _selector_team().dump_component(), Manifest(
        name="selector", persist=["researcher"], context_bound=20, checkpoints="every_turn"), "v1", label="production")
    original, made, answered, waiting = OfflineChatCompletionClient.create, [0], [0], asyncio.Event()

    async def create(self: OfflineChatCompletionClient, messages: Any, *,
                     cancellation_token: CancellationToken | None = None, **kwargs: Any) -> Any:
        made[0] += 1
        if made[0] == 6:  # turn 3's speaker is picked (a paid call); its answer takes long, as a remote model's can
            wait = asyncio.ensure_future(asyncio.sleep(30))
            if cancellation_token is not None:
                cancellation_token.link_future(wait)
            waiting.set()
            await wait
        result = await original(self, messages, cancellation_token=cancellation_token, **kwargs)
        answered[0] += 1
        return result

    monkeypatch.setattr(OfflineChatCompletionClient, "create", create)
    checkpoint = platform.store.checkpoint

    async def last_written(*args: Any, **kwargs: Any) -> int:  # the last one, written as the session is cut off
        if waiting.is_set() and how == "slower than the cut-off's wait":
            await asyncio.sleep(0.5)
        version = await checkpoint(*args, **kwargs)
        if waiting.is_set() and how == "answer lost":
            raise StoreUnavailable("the connection closed before the commit's answer", hint="nothing")
        return version

    monkeypatch.setattr(platform.store, "checkpoint", last_written)
    if how == "slower than the cut-off's wait":
        monkeypatch.setattr(session_module, "CUT_OFF_AUDIT_WAIT", 0.05)
    closing: asyncio.Future[None] | None = None
    async with platform.session("alice", "s1", team="selector") as s:
        running = asyncio.ensure_future(s.run(TASK))
        await asyncio.wait_for(waiting.wait(), 10)
        closing = asyncio.ensure_future(platform.aclose(wait_seconds=0.05))
        if how != "as its block exits":
            await asyncio.wait_for(closing, 10)
    await asyncio.wait_for(closing, 10)
    with pytest.raises(PlatformClosed):
        await asyncio.wait_for(running, 5)
    assert s.interrupted is not None and s.interrupted.last_turn == 2
    run_id = s.interrupted.run_id
    assert answered[0] == 5  # two turns of two calls, and turn 3's selection
    async with open_platform(platform.settings) as later:  # the next worker
        assert await _ledger(later, run_id) == []  # on record once, by the attempt that ends the run
        async with later.session("alice", "s1", team="selector") as s:
            assert s.interrupted is not None and s.interrupted.last_turn == 2
            await s.continue_run()
        rows = await _ledger(later, run_id)
    assert answered[0] == 5 + 8  # the continuation: turn 3 again, then turns 4 to 6, two calls each
    # And the call the close stopped while it waited for its answer: made, its usage unknown, on record once.
    assert sum(r.calls for r in rows) == answered[0] + 1 and sum(r.failed_calls for r in rows) == 1
    assert sum(r.calls for r in rows if r.purpose == "speaker_selection") == 3 + 4
    assert {r.interruptions for r in rows} == {1}


async def test_an_abandonment_cancelled_part_way_keeps_the_run_on_record_or_its_checkpoint_in_place(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    import contextlib

    for steps in range(1, 20):  # the request is cancelled at each step of the event loop in turn
        session = f"s{steps}"
        run_id = await _interrupted(platform, monkeypatch, session)
        async with platform.session("alice", session, team=TEAM) as s:
            abandoning = asyncio.ensure_future(s.abandon_run())
            for _ in range(steps):
                await asyncio.sleep(0)
            abandoning.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await abandoning
        row = await platform.store.get(s.key)
        if row is None:  # given up (the row of a session that never saved a state goes): on record, every call
            assert sum(r.calls for r in await _ledger(platform, run_id)) == 3
        else:  # or not yet: the checkpoint stays, to be continued or abandoned again
            assert row.checkpoint is not None and await _ledger(platform, run_id) == []


async def test_a_session_cancelled_as_it_sets_a_checkpoint_aside_keeps_the_run_on_record(
    platform: Platform, registry_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    run_id = await _interrupted(platform, monkeypatch)
    _reword_critic(registry_path)

    class SlowAudit:  # the audit's first writes are slow (an S3 upload, say): the request times out meanwhile
        recording = asyncio.Event()

        async def run_started(self, ctx: Any) -> None:
            self.recording.set()
            await asyncio.sleep(0.2)

        async def on_item(self, ctx: Any, item: Any) -> None: ...

        async def run_finished(self, ctx: Any, outcome: Any) -> None: ...

    slow = SlowAudit()
    platform.observers.insert(0, slow)

    async def open_it() -> None:
        async with platform.session("alice", "s1", team=TEAM):  # the checkpoint does not fit: set aside
            pass

    opening = asyncio.ensure_future(open_it())
    await slow.recording.wait()  # the checkpoint is in the quarantine; its run is being recorded
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert await platform.store.get(SessionKey("alice", "s1")) is None  # set aside, and nothing saved: no row
    assert sum(r.calls for r in await _ledger(platform, run_id)) == 3  # on record all the same


async def test_a_deleted_session_keeps_its_interrupted_runs_turns_and_calls_on_record(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await _interrupted(platform, monkeypatch)
    assert await platform.delete_session("alice", "s1")
    header, items = await _transcript(platform, run_id)
    assert header["error"] == "RunInterrupted" and header["stop_reason"] == "deleted after turn 2"
    assert _items_said(items)[0][2] == TASK and len(items) == 3  # the task and the two completed turns
    rows = await _ledger(platform, run_id)
    assert sum(r.calls for r in rows) == 3 and sum(r.failed_calls for r in rows) == 1 and all(r.run_failed for r in rows)
    assert not await platform.delete_session("alice", "s1")  # nothing left: and nothing recorded twice
    assert len(await _ledger(platform, run_id)) == len(rows)


async def test_a_session_reopened_once_expired_keeps_its_interrupted_run_on_record_once(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import update

    from teamstore.state.schema import sessions

    run_id = await _interrupted(platform, monkeypatch)
    async with platform.engine.begin() as conn:
        await conn.execute(update(sessions).values(expires_at=datetime.now(UTC) - timedelta(days=1)))
    async with platform.session("alice", "s1", team=TEAM) as s:  # a fresh start: the run cannot continue
        assert s.resume is not None and s.resume.outcome == "expired" and s.interrupted is None
    header, items = await _transcript(platform, run_id)
    assert header["error"] == "RunInterrupted" and header["stop_reason"] == "expired after turn 2"
    assert _items_said(items)[0][2] == TASK and len(items) == 3  # the task and the two completed turns
    rows = await _ledger(platform, run_id)
    assert sum(r.calls for r in rows) == 3 and all(r.run_failed for r in rows)
    # Cleared as it was recorded, and the fresh start saved nothing: no row is left to record it again.
    assert await platform.store.get(SessionKey("alice", "s1")) is None
    async with platform.engine.begin() as conn:
        await conn.execute(update(sessions).values(expires_at=datetime.now(UTC) - timedelta(days=1)))
    await platform.store.sweep_expired()
    assert len(await _ledger(platform, run_id)) == len(rows)


class _Killed(BaseException):
    """The worker dies here (SIGKILL): nothing of it runs past this point."""


@pytest.mark.parametrize("transcripts", ["folder", pytest.param("s3", marks=pytest.mark.s3)])
async def test_a_run_whose_worker_died_after_recording_it_before_its_save_is_continued_and_on_record_once(
    backend: tuple[str, str], tmp_path: Path, registry_path: Path, monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest, transcripts: str,
) -> None:
    # The run ended and its ledger rows and transcript landed; the worker died before the save that clears the
    # checkpoint, which still said turn 5. Continued, turn 6 ran again: the continuation's ledger rows were
    # skipped as the run's rows already written (its calls and its interruptions lost), and S3 held the run's
    # transcript twice.
    url, lease = backend
    await prepare(url, lease)
    register(Registry(registry_path, create=True))
    versions = _Versions() if transcripts == "s3" and request.getfixturevalue("s3_env") else None
    settings = Settings(
        home=tmp_path / "home", registry_path=registry_path, database_url=url, auto_migrate=True,
        registry_refresh_seconds=0, session_lease=lease,
        transcripts_url=versions.url if versions is not None else None,
    )
    with counted_calls(monkeypatch) as calls:
        async with open_platform(settings) as first:
            save = first.store.save

            async def killed(*args: Any, **kwargs: Any) -> int:
                raise _Killed

            monkeypatch.setattr(first.store, "save", killed)
            with pytest.raises(_Killed):
                async with first.session("alice", "s1", team=TEAM) as s:
                    await s.run(TASK)
                    run_id = s.last_run_id
            monkeypatch.setattr(first.store, "save", save)
        assert calls.made == TURNS and run_id is not None
        async with open_platform(settings) as later:  # the next worker
            async with later.session("alice", "s1", team=TEAM, continuing=True) as s:
                assert s.interrupted is not None and s.interrupted.last_turn == TURNS - 1
                result = await s.continue_run()
            assert len(result.messages) == TURNS + 1
            assert calls.made == TURNS + 1  # the last turn, again
            rows = await _ledger(later, run_id)
            report = await query_costs(later.engine, load_prices(), by="session")
            async with later.session("alice", "s1", team=TEAM) as s:  # nothing left to continue
                assert s.interrupted is None
            stored = (versions.of(run_id) if versions is not None
                      else [p for p in (tmp_path / "home").rglob(f"{run_id}*") if p.is_file()])
            header, _ = await _transcript(later, run_id)
    assert sum(r.calls for r in rows) == calls.made  # the repeated turn's call included
    assert {(r.attempt, r.interruptions, r.calls) for r in rows if r.attempt} == {(1, 1, 1)}
    total = report.total
    assert total.calls == calls.made and total.runs_interrupted == 1
    assert (total.runs_limited, total.runs_completed, total.runs_failed) == (1, 0, 0)  # one run, once
    assert len(stored) == 1  # written once: by the attempt that ended the run first
    assert header["interruptions"] == 0


class _Records:
    """An audit observer that keeps each run's end as the observers were handed it (to send a record again)."""

    def __init__(self) -> None:
        self.ended: list[tuple[Any, Any]] = []

    async def run_started(self, ctx: Any) -> None: ...

    async def on_item(self, ctx: Any, item: Any) -> None: ...

    async def run_finished(self, ctx: Any, outcome: Any) -> None:
        self.ended.append((ctx, outcome))


async def _dies_before_its_save(platform: Platform, monkeypatch: pytest.MonkeyPatch, *, continuing: bool) -> str:
    """Run the task (or continue the interrupted run) to its end in ``platform``, its record written; the worker
    dies in the save after it, which would have cleared the checkpoint. Returns the run's id."""
    save = platform.store.save

    async def killed(*args: Any, **kwargs: Any) -> int:
        raise _Killed

    monkeypatch.setattr(platform.store, "save", killed)
    with pytest.raises(_Killed):
        async with platform.session("alice", "s1", team=TEAM, continuing=continuing) as s:
            await (s.continue_run() if continuing else s.run(TASK))
            run_id = s.last_run_id
    monkeypatch.setattr(platform.store, "save", save)
    assert run_id is not None
    return run_id


async def test_every_take_up_of_a_run_whose_continuation_died_before_its_save_is_on_record_once(
    backend: tuple[str, str], tmp_path: Path, registry_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The first worker and then the first continuation both ended the run, recorded it, and died before the save
    # that clears the checkpoint (still turn 5's). The second continuation took it up from that checkpoint as the
    # same attempt as the first: its ledger rows met the first continuation's key and its turn 6 went unrecorded.
    from teamstore.audit.ledger_observer import LedgerObserver

    url, lease = backend
    await prepare(url, lease)
    register(Registry(registry_path, create=True))
    settings = Settings(home=tmp_path / "home", registry_path=registry_path, database_url=url, auto_migrate=True,
                        registry_refresh_seconds=0, session_lease=lease)
    records = _Records()
    with counted_calls(monkeypatch) as calls:
        async with open_platform(settings) as first:
            run_id = await _dies_before_its_save(first, monkeypatch, continuing=False)
        for _ in range(2):  # a continuation dies the same way, twice over
            async with open_platform(settings) as next_worker:
                next_worker.observers.append(records)
                assert await _dies_before_its_save(next_worker, monkeypatch, continuing=True) == run_id
        async with open_platform(settings) as last:
            async with last.session("alice", "s1", team=TEAM, continuing=True) as s:
                assert s.interrupted is not None and s.interrupted.last_turn == TURNS - 1
                await s.continue_run()
            rows = await _ledger(last, run_id)
            ledger = next(o for o in last.observers if isinstance(o, LedgerObserver))
            for ctx, outcome in records.ended:  # each continuation's record, sent again
                await ledger.run_finished(ctx, outcome)
            again = await _ledger(last, run_id)
            report = await query_costs(last.engine, load_prices(), by="session")
            header, _ = await _transcript(last, run_id)
    assert calls.made == TURNS + 3  # the last turn, once by each of the three take-ups
    assert sum(r.calls for r in rows) == calls.made
    assert sorted((r.attempt, r.interruptions, r.calls) for r in rows if r.attempt) == [(1, 1, 1), (2, 2, 1), (3, 3, 1)]
    assert sorted(tuple(r) for r in again) == sorted(tuple(r) for r in rows)  # a record sent again adds nothing
    assert report.total.calls == calls.made and report.total.runs_interrupted == 1
    assert header["interruptions"] == 0  # the transcript is the first attempt's, written once
    assert len([p for p in (tmp_path / "home").rglob(f"{run_id}*") if p.is_file()]) == 1


class _Versions:
    """A versioned bucket on the S3 endpoint, and the versions of a run's transcript it holds."""

    def __init__(self) -> None:
        import uuid

        import boto3

        self.client, self.bucket = boto3.client("s3"), f"ts-{uuid.uuid4().hex[:12]}"
        self.client.create_bucket(Bucket=self.bucket)
        self.client.put_bucket_versioning(Bucket=self.bucket, VersioningConfiguration={"Status": "Enabled"})
        self.url = f"s3://{self.bucket}/teamstore"

    def of(self, run_id: str) -> list[str]:
        pages = self.client.get_paginator("list_object_versions").paginate(Bucket=self.bucket, Prefix="teamstore/")
        return [v["VersionId"] for page in pages for v in page.get("Versions", []) if run_id in v["Key"]]

