"""A run the team completed stays completed, on SQLite and Postgres with both kinds of lease: a cancel landing
between its end and the session's snapshot (a request's timeout, a client gone) still has its state saved, and a
caller that leaves the stream at the ``TaskResult`` goes straight on with the session."""

from __future__ import annotations

import asyncio

import pytest
from autogen_agentchat.base import TaskResult

from config_registry import Registry
from teamstore.events import RunContext, RunOutcome
from teamstore.runtime.platform import Platform
from teamstore.runtime.turns import StreamItem
from teamstore.state.base import SessionKey
from tests.runtime.checkpoint_teams import TEAM, TURNS, counted_calls, register

TASK = "My line drops every evening since the storm."
KEY = SessionKey("alice", "s1")


class _CancelAsItIsRecorded:
    """An audit observer that cancels the request running the session (``victim``) as its completed run is put on
    record: before the session has taken the run's snapshot."""

    def __init__(self) -> None:
        self.victim: asyncio.Future[TaskResult] | None = None
        self.finished: list[RunOutcome] = []

    async def run_started(self, ctx: RunContext) -> None:
        """Nothing to do."""

    async def on_item(self, ctx: RunContext, item: StreamItem) -> None:
        """Nothing to do."""

    async def run_finished(self, ctx: RunContext, outcome: RunOutcome) -> None:
        self.finished.append(outcome)
        if self.victim is not None:
            self.victim.cancel()


async def _remembers(platform: Platform, text: str) -> tuple[str, bool]:
    """Open the session again: its resume outcome, and whether its team holds ``text``."""
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.resume is not None
        return s.resume.outcome, text in str(await s.team.save_state())


@pytest.mark.parametrize("checkpoints", ["every_turn", "off"])
async def test_a_run_cancelled_after_the_team_finished_is_saved_as_completed(
    platform: Platform, registry: Registry, checkpoints: str
) -> None:
    register(registry, checkpoints=checkpoints)
    async with platform.session("alice", "s1", team=TEAM) as s:
        await s.run("first request")
    before = await platform.store.get(KEY)
    assert before is not None
    observer = _CancelAsItIsRecorded()
    platform.observers.append(observer)
    try:
        async with platform.session("alice", "s1", team=TEAM) as s:
            observer.victim = request = asyncio.ensure_future(s.run(TASK))
            with pytest.raises(asyncio.CancelledError):
                await request
            assert s.interrupted is None
    finally:
        platform.observers.remove(observer)
    assert [outcome.error for outcome in observer.finished] == [None]  # on record as completed
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is None and row.row_version > before.row_version
    assert row.state != before.state
    assert await _remembers(platform, TASK) == ("resumed", True)


async def test_leaving_the_stream_at_its_result_lets_the_next_run_start_at_once(
    platform: Platform, registry: Registry
) -> None:
    register(registry)
    async with platform.session("alice", "s1", team=TEAM) as s:
        async for item in s.run_stream(TASK):
            if isinstance(item, TaskResult):
                assert len(item.messages) == TURNS + 1
                break
        result = await s.run("next request")
        assert result.messages[0].to_text() == "next request" and s.interrupted is None
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is None
    assert await _remembers(platform, TASK) == ("resumed", True)
    assert await _remembers(platform, "next request") == ("resumed", True)


@pytest.mark.parametrize("then", ["continue_run", "abandon_run"])
async def test_leaving_the_stream_at_its_result_leaves_nothing_to_continue_or_abandon(
    platform: Platform, registry: Registry, then: str
) -> None:
    from teamstore.errors import NoInterruptedRun

    register(registry)
    async with platform.session("alice", "s1", team=TEAM) as s:
        async for item in s.run_stream(TASK):
            if isinstance(item, TaskResult):
                break
        with pytest.raises(NoInterruptedRun):
            await getattr(s, then)()
    assert await _remembers(platform, TASK) == ("resumed", True)


async def test_a_stream_left_at_its_result_and_closed_later_leaves_the_next_runs_checkpoint_alone(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    with counted_calls(monkeypatch) as calls:
        async with platform.session("alice", "s1", team=TEAM) as s:
            first = s.run_stream(TASK)
            async for item in first:
                if isinstance(item, TaskResult):
                    break  # the stream is still referenced: closed only below, after the next run
            calls.fail_at = calls.made + 3
            with pytest.raises(RuntimeError):
                await s.run("next request")
            interrupted = s.interrupted
            assert interrupted is not None
            await first.aclose()
            assert s.interrupted is interrupted
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is not None
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.interrupted is not None and s.interrupted.run_id == interrupted.run_id
