"""Per-turn checkpoints through the managed session, on SQLite and Postgres with both kinds of lease: each
completed turn durable before the next starts, an interrupted run reported, continued to the transcript of
an uninterrupted one, or abandoned; a run cancelled after a checkpoint continued from it like one whose worker
died, one cancelled before any over; the tools' idempotency key; no row left by a new session whose only run was
abandoned."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from autogen_core import CancellationToken

from config_registry import Registry
from teamstore.errors import NoInterruptedRun, RunInterrupted
from teamstore.offline import OfflineChatCompletionClient
from teamstore.runtime.inspect import describe_checkpoint
from teamstore.runtime.platform import Platform
from teamstore.runtime.turns import current_turn
from teamstore.state.base import SessionKey
from tests.runtime.checkpoint_teams import TEAM, TURNS, counted_calls, register, said

TASK = "My line drops every evening since the storm."
KEY = SessionKey("alice", "s1")


async def _uninterrupted(platform: Platform, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], int]:
    """What the run says, and how many model calls it makes, with nothing in its way (another user)."""
    with counted_calls(monkeypatch) as calls:
        async with platform.session("bob", "s1", team=TEAM) as s:
            result = await s.run(TASK)
    return said(result.messages), calls.made


async def _stop_after(platform: Platform, monkeypatch: pytest.MonkeyPatch, turn: int) -> int:
    """Run alice's session until its model fails in the turn after ``turn``; returns the calls made."""
    with counted_calls(monkeypatch) as calls:
        calls.fail_at = turn + 1
        async with platform.session(*KEY.__dict__.values(), team=TEAM) as s:
            with pytest.raises(RuntimeError, match="model endpoint went away"):
                await s.run(TASK)
            assert s.interrupted is not None and s.interrupted.last_turn == turn
    return calls.made


async def test_each_completed_turn_is_durable_before_the_next_starts(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    seen: list[Any] = []

    async def before_call(n: int) -> None:  # each call opens a turn: what is stored of the run by then?
        row = await platform.store.get(KEY)
        found = describe_checkpoint(row) if row is not None else None
        seen.append(found["last_turn"] if isinstance(found, dict) else None)

    with counted_calls(monkeypatch) as calls:
        calls.on_call = before_call
        async with platform.session("alice", "s1", team=TEAM) as s:
            result = await s.run(TASK)
    assert seen == [None, 1, 2, 3, 4, 5]  # turn k+1's call starts only once turn k is stored
    assert len(result.messages) == TURNS + 1
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is None and row.state is not None  # the save dropped it


async def test_a_team_without_checkpoints_writes_none(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry, checkpoints="off")
    async with platform.session("alice", "s1", team=TEAM) as s:
        await s.run(TASK)
        assert s.row_version == 0  # nothing written while the block is open
    row = await platform.store.get(KEY)
    assert row is not None and row.row_version == 1 and row.checkpoint is None


@pytest.mark.parametrize("turn", [1, 3, 5])
async def test_an_interrupted_run_continues_to_what_an_uninterrupted_run_says(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch, turn: int
) -> None:
    register(registry)
    expected, expected_calls = await _uninterrupted(platform, monkeypatch)
    first = await _stop_after(platform, monkeypatch, turn)
    with counted_calls(monkeypatch) as calls:
        async with platform.session("alice", "s1", team=TEAM) as s:
            assert s.resume is not None and s.resume.outcome == "interrupted"
            assert s.resume.interrupted is not None and s.resume.interrupted.last_turn == turn
            assert s.resume.as_dict()["interrupted"]["last_turn"] == turn
            result = await s.continue_run()
            assert s.interrupted is None
    assert said(result.messages) == expected
    # The completed turns made no call again; the one in flight (it failed) ran again.
    assert calls.made == expected_calls - turn
    assert first + calls.made == expected_calls + 1
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is None


async def test_a_new_run_waits_for_the_interrupted_one_to_be_continued_or_abandoned(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    await _stop_after(platform, monkeypatch, 2)
    async with platform.session("alice", "s1", team=TEAM) as s:
        with pytest.raises(RunInterrupted) as info:
            await s.run("something else")
        assert "continue" in (info.value.hint or "")
        await s.abandon_run()
        assert s.interrupted is None
        with pytest.raises(NoInterruptedRun):
            await s.continue_run()
        result = await s.run("something else")
    assert result.messages[0].to_text() == "something else"


async def test_abandoning_restores_the_state_from_before_the_run(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    async with platform.session("alice", "s1", team=TEAM) as s:
        await s.run("first request")
    before = await platform.store.get(KEY)
    assert before is not None
    await _stop_after(platform, monkeypatch, 3)
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.resume is not None and s.resume.outcome == "interrupted" and s.resume.applied
        await s.abandon_run()
        state = (await s.team.save_state())["agent_states"]["researcher"]
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is None and row.state == before.state
    assert "first request" in str(state) and TASK not in str(state)


async def test_a_continuation_cancelled_as_it_loads_the_checkpoint_then_abandoned_runs_on_the_state_before_it(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cancelled after AutoGen loaded the checkpoint into the team, before the take-up was written: the team holds
    # the interrupted run's turns, and must be built again before the abandonment and the next run.
    import teamstore.runtime.session_runs as session_runs

    register(registry)
    async with platform.session("alice", "s1", team=TEAM) as s:
        await s.run("first request")
    await _stop_after(platform, monkeypatch, 3)
    loaded, real = asyncio.Event(), session_runs.apply_checkpoint

    async def load_then_wait(*args: Any) -> Any:
        so_far = await real(*args)
        loaded.set()
        await asyncio.Event().wait()  # the cancel comes here
        return so_far

    monkeypatch.setattr(session_runs, "apply_checkpoint", load_then_wait)
    async with platform.session("alice", "s1", team=TEAM) as s:
        continuing = asyncio.ensure_future(s.continue_run())
        await loaded.wait()
        assert TASK in str(await s.team.save_state())  # the checkpoint is in the team
        continuing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await continuing
        assert s.interrupted is not None and s.interrupted.last_turn == 3
        await s.abandon_run()
        await s.run("second request")
        state = (await s.team.save_state())["agent_states"]["researcher"]
    assert "first request" in str(state) and "second request" in str(state) and TASK not in str(state)
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is None and TASK not in str(row.state)


@pytest.mark.parametrize("how", ["abandoned", "continued"])
@pytest.mark.parametrize("earlier", [False, True], ids=["first-run", "after-a-saved-run"])
async def test_the_resume_verdict_says_what_became_of_the_interrupted_run(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch, how: str, earlier: bool
) -> None:
    # It read "interrupted: ... continue or abandon it" to the end of the block, after either was done.
    register(registry)
    if earlier:
        async with platform.session("alice", "s1", team=TEAM) as s:
            await s.run("first request")
    await _stop_after(platform, monkeypatch, 2)
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.resume is not None and s.interrupted is not None
        run_id = s.interrupted.run_id
        assert str(s.resume).startswith("interrupted: ") and s.resume.applied == earlier
        await (s.abandon_run() if how == "abandoned" else s.continue_run())
        state = "resumed" if earlier else "new"
        assert str(s.resume) == f"{state}: run {run_id[:12]}, interrupted after turn 2, was {how}"
        assert s.resume.interrupted is None and s.resume.as_dict()["interrupted"] is None
        assert s.resume.applied == earlier and not s.resume.quarantined


@pytest.mark.parametrize("then", ["abandoned", "continued"])
async def test_the_resume_verdict_follows_a_continued_run_that_stops_again(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    # It said the run "was continued" while s.interrupted named it as waiting, and kept saying so once it was
    # abandoned or continued again.
    register(registry)
    await _stop_after(platform, monkeypatch, 2)
    with counted_calls(monkeypatch) as calls:
        calls.fail_at = 2  # the continuation's second turn
        async with platform.session("alice", "s1", team=TEAM) as s:
            assert s.interrupted is not None
            run_id = s.interrupted.run_id[:12]
            with pytest.raises(RuntimeError):
                await s.continue_run()
            assert s.interrupted is not None and s.interrupted.last_turn == 3
            assert str(s.resume) == f"interrupted: run {run_id} stopped after turn 3; continue or abandon it"
            assert s.resume is not None and s.resume.interrupted == s.interrupted
            calls.fail_at = None
            await (s.abandon_run() if then == "abandoned" else s.continue_run())
            assert str(s.resume) == f"new: run {run_id}, interrupted after turn 3, was {then}"
            assert s.resume.interrupted is None


async def test_continuing_in_the_same_block_after_the_run_raised(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    expected, _ = await _uninterrupted(platform, monkeypatch)
    with counted_calls(monkeypatch) as calls:
        calls.fail_at = 3
        async with platform.session("alice", "s1", team=TEAM) as s:
            with pytest.raises(RuntimeError):
                await s.run(TASK)
            calls.fail_at = None
            result = await s.continue_run()
    assert said(result.messages) == expected


async def test_tools_read_the_same_key_for_a_turn_that_repeats(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    keys: list[tuple[int, str | None]] = []

    def note(n: int) -> None:  # the model call runs where the agent's tools run: in its turn
        turn = current_turn()
        keys.append((n, turn.key("refund") if turn else None))

    with counted_calls(monkeypatch) as calls:
        calls.on_call, calls.fail_at = note, 3
        async with platform.session("alice", "s1", team=TEAM) as s:
            with pytest.raises(RuntimeError):
                await s.run(TASK)
            run_id = s.interrupted.run_id if s.interrupted else ""
        assert current_turn() is None  # outside a run
        calls.fail_at = None
        async with platform.session("alice", "s1", team=TEAM) as s:
            await s.continue_run()
    assert [k for _, k in keys] == [f"{run_id}:{t}:refund" for t in (1, 2, 3, 3, 4, 5, 6)]


async def note_turn() -> str:
    """Write down the turn this tool runs in (the test reads the file named by TURN_KEYS)."""
    import os

    from teamstore.runtime.turns import current_turn

    turn = current_turn()
    with open(os.environ["TURN_KEYS"], "a", encoding="utf-8") as out:
        out.write(f"{turn.key('note_turn') if turn else None}\n")
    return "noted"


async def test_an_async_tool_reads_its_turns_key(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_core import FunctionCall
    from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage
    from autogen_core.tools import FunctionTool
    from autogen_ext.models.replay import ReplayChatCompletionClient

    from config_registry import Manifest

    call = CreateResult(finish_reason="function_calls", content=[FunctionCall(id="c1", name="note_turn", arguments="{}")],
                        usage=RequestUsage(prompt_tokens=10, completion_tokens=5), cached=False)
    info = ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN,
                     structured_output=False)
    desk = AssistantAgent("desk", model_client=ReplayChatCompletionClient([call], model_info=info),
                          tools=[FunctionTool(note_turn, description="Note the turn.")])
    helper = AssistantAgent("helper", model_client=ReplayChatCompletionClient(["done"]))
    team = RoundRobinGroupChat([helper, desk], termination_condition=MaxMessageTermination(3))
    registry.add("desk", team.dump_component(), Manifest(name="desk", allow_source_code_tools=True,
                                                          checkpoints="every_turn"), "a tool", label="production")
    keys = tmp_path / "keys.txt"
    monkeypatch.setenv("TURN_KEYS", str(keys))
    async with platform.session("alice", "s1", team="desk") as s:
        await s.run(TASK)
        run_id = s.last_run_id
    assert keys.read_text().splitlines() == [f"{run_id}:2:note_turn"]  # the desk speaks in the second turn


async def test_a_new_session_emptied_by_abandoning_its_first_run_leaves_no_row(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    await _stop_after(platform, monkeypatch, turn=1)  # a new session: its row holds the checkpoint alone
    assert await platform.store.live_sessions("alice") == 1  # kept: the run can be continued
    async with platform.session(*KEY.__dict__.values(), team=TEAM) as s:
        await s.abandon_run()  # and now nothing: the session ends without a row
    assert await platform.store.get(KEY) is None and await platform.store.live_sessions("alice") == 0


def _hold_turn_two(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Have turn 2's model call (turn 1's checkpoint is in the row by then) wait until its CancellationToken stops
    it, as a real client's call does; returns an event set once it waits."""
    original, waiting, made = OfflineChatCompletionClient.create, asyncio.Event(), [0]

    async def create(self: OfflineChatCompletionClient, messages: Any, *,
                     cancellation_token: CancellationToken | None = None, **kwargs: Any) -> Any:
        made[0] += 1
        if made[0] == 2:
            waiting.set()
            wait = asyncio.ensure_future(asyncio.sleep(30))
            if cancellation_token is not None:
                cancellation_token.link_future(wait)
            await wait
        return await original(self, messages, cancellation_token=cancellation_token, **kwargs)

    monkeypatch.setattr(OfflineChatCompletionClient, "create", create)
    return waiting


async def _cancel_after_the_first_checkpoint(platform: Platform, monkeypatch: pytest.MonkeyPatch, how: str) -> str:
    """Run alice's session and cancel the run (its task, as a request's timeout or a client gone does, or its
    CancellationToken) while turn 2 waits for its model, turn 1's checkpoint stored; returns the run's id."""
    waiting = _hold_turn_two(monkeypatch)
    async with platform.session(*KEY.__dict__.values(), team=TEAM) as s:
        token = CancellationToken()
        running = asyncio.ensure_future(s.team.run(task=TASK, cancellation_token=token))
        await waiting.wait()
        row = await platform.store.get(KEY)
        assert row is not None and row.checkpoint is not None
        started = time.monotonic()
        running.cancel() if how == "task" else token.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert time.monotonic() - started < 5  # not the 30 s the model call would have taken
        # The turn it completed was paid for: the run waits to be continued, as if its worker had died.
        assert s.interrupted is not None and s.interrupted.last_turn == 1
        with pytest.raises(RunInterrupted, match="was cancelled after turn 1 and can be continued"):
            await s.run("something else")
        return s.interrupted.run_id


@pytest.mark.parametrize("how", ["task", "token"], ids=["request-cancelled", "token-cancelled"])
async def test_a_first_run_cancelled_after_a_checkpoint_continues_from_it_in_the_next_session(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    register(registry)
    expected, expected_calls = await _uninterrupted(platform, monkeypatch)
    run_id = await _cancel_after_the_first_checkpoint(platform, monkeypatch, how)
    row = await platform.store.get(KEY)
    assert row is not None and row.state is None and row.checkpoint is not None  # kept: the run can be continued
    with counted_calls(monkeypatch) as calls:
        async with platform.session(*KEY.__dict__.values(), team=TEAM) as s:
            assert s.interrupted is not None and s.interrupted.run_id == run_id and s.interrupted.last_turn == 1
            result = await s.continue_run()
    assert said(result.messages) == expected
    assert calls.made == expected_calls - 1  # turn 1 made no call again
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is None and row.state is not None


async def test_a_new_session_whose_cancelled_first_run_is_abandoned_leaves_no_row_the_bound_counts(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    platform.settings = platform.settings.model_copy(update={"max_sessions_per_user": 1})
    await _cancel_after_the_first_checkpoint(platform, monkeypatch, "task")
    assert await platform.store.live_sessions("alice") == 1  # the interrupted run counts until it is decided
    async with platform.session(*KEY.__dict__.values(), team=TEAM) as s:
        await s.abandon_run()
    assert await platform.store.get(KEY) is None and await platform.store.live_sessions("alice") == 0
    async with platform.session("alice", "s2", team=TEAM) as s:  # the bound of one counts nothing against it
        assert s.resume is not None and s.resume.outcome == "new"
        await s.run(TASK)
    assert [row.session_id for row in await platform.store.list_sessions("alice")] == ["s2"]


async def test_a_cancelled_run_keeps_the_state_saved_before_beside_its_checkpoint(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    async with platform.session("alice", "s1", team=TEAM) as s:
        await s.run("first request")
    before = await platform.store.get(KEY)
    await _cancel_after_the_first_checkpoint(platform, monkeypatch, "task")
    row = await platform.store.get(KEY)
    assert before is not None and row is not None and row.state == before.state and row.checkpoint is not None
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.resume is not None and s.resume.outcome == "interrupted" and s.resume.applied
        await s.abandon_run()
    row = await platform.store.get(KEY)
    assert row is not None and row.state == before.state and row.checkpoint is None


@pytest.mark.parametrize("checkpoints", ["every_turn", "off"])
async def test_a_run_cancelled_with_no_checkpoint_of_it_is_over_and_the_session_goes_on(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch, checkpoints: str
) -> None:
    # Cancelled in its first turn (every_turn: no turn was made durable), or in its second on a team without
    # checkpoints: nothing of the run can be continued, so it is over, and the next run runs.
    register(registry, checkpoints=checkpoints)
    with counted_calls(monkeypatch) as calls:
        calls.hold_at = 1 if checkpoints != "off" else 2
        async with platform.session(*KEY.__dict__.values(), team=TEAM) as s:
            running = asyncio.ensure_future(s.run(TASK))
            await calls.holding.wait()
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
            assert s.interrupted is None
            result = await s.run("something else")
    assert result.messages[0].to_text() == "something else"
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is None and TASK not in (row.state or "")


async def test_a_cancel_while_a_checkpoint_is_being_written_waits_for_it_and_continues_from_it(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cancel arrives while turn 2's checkpoint is on its way to the database: the write is not cut short, and
    # the turn it made durable counts (taken as one that did not land, turn 2 would run again, and its calls
    # be paid twice; cut short, the write could land unknown to the session).
    register(registry)
    expected, expected_calls = await _uninterrupted(platform, monkeypatch)
    checkpoint, writing, release, written = platform.store.checkpoint, asyncio.Event(), asyncio.Event(), [0]

    async def slow_checkpoint(*args: Any, **kwargs: Any) -> int:
        written[0] += 1
        if written[0] == 2:  # turn 2's
            writing.set()
            await release.wait()
        return await checkpoint(*args, **kwargs)

    monkeypatch.setattr(platform.store, "checkpoint", slow_checkpoint)
    with counted_calls(monkeypatch) as calls:
        async with platform.session(*KEY.__dict__.values(), team=TEAM) as s:
            running = asyncio.ensure_future(s.run(TASK))
            await writing.wait()
            running.cancel()
            for _ in range(5):
                await asyncio.sleep(0)
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await running
            assert s.interrupted is not None and s.interrupted.last_turn == 2
        first = calls.made
        row = await platform.store.get(KEY)
        assert row is not None and describe_checkpoint(row)["last_turn"] == 2  # type: ignore[index]
        calls.made = 0
        async with platform.session(*KEY.__dict__.values(), team=TEAM) as s:
            result = await s.continue_run()
    assert said(result.messages) == expected
    assert first == 2 and calls.made == expected_calls - 2  # turns 1 and 2; turn 3 never started
