"""A session opened after its TTL starts afresh, and its expired state stays gone, on SQLite and Postgres with both
kinds of lease: the checkpoint writes of the block (the clearing of an old interrupted run's checkpoint as the
session opens, a new run's checkpoints) move the row's expiry on, so they clear the expired state with them, and
nothing in a later opening, or in a run abandoned there, brings its words back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from autogen_agentchat.messages import TextMessage
from sqlalchemy import update

from config_registry import Registry
from teamstore.errors import StoreUnavailable
from teamstore.runtime.platform import Platform
from teamstore.state.base import SessionKey
from teamstore.state.schema import sessions
from tests.runtime.checkpoint_teams import TEAM, TURNS, counted_calls, register

TASK = "My line drops every evening since the storm."
KEY = SessionKey("alice", "s1")
SECRET = "4242"
FIRST = f"first request: my ticket is {SECRET}"


async def _expire(platform: Platform) -> None:
    """Move the session's expiry a day into the past, as if its TTL had run out."""
    async with platform.engine.begin() as conn:
        await conn.execute(update(sessions).values(expires_at=datetime.now(UTC) - timedelta(days=1)))


async def _saved_then_expired(platform: Platform, registry: Registry) -> None:
    """The team registered, the first request's state saved, and its TTL run out."""
    register(registry)
    async with platform.session("alice", "s1", team=TEAM) as s:
        await s.run(FIRST)
    await _expire(platform)


async def _knows_the_secret(platform: Platform) -> tuple[str, bool]:
    """Open the session again: its resume outcome, and whether its team holds the expired words."""
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.resume is not None
        return s.resume.outcome, SECRET in str(await s.team.save_state())


async def test_an_expired_session_whose_old_run_is_ended_as_it_opens_does_not_resume_the_expired_state(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    async with platform.session("alice", "s1", team=TEAM) as s:
        await s.run(FIRST)
    with counted_calls(monkeypatch) as calls:
        calls.fail_at = 3
        async with platform.session("alice", "s1", team=TEAM) as s:
            with pytest.raises(RuntimeError):
                await s.run(TASK)
            assert s.interrupted is not None
    await _expire(platform)
    async with platform.session("alice", "s1", team=TEAM) as s:  # only opened: its old run's checkpoint is cleared
        assert s.resume is not None and s.resume.outcome == "expired"
    assert await platform.store.get(KEY) is None  # nothing of the session was left to keep
    assert await _knows_the_secret(platform) == ("new", False)


async def test_a_run_abandoned_in_an_expired_session_goes_on_from_nothing(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _saved_then_expired(platform, registry)
    assert await _knows_the_secret(platform) == ("expired", False)  # only opened: nothing written, still expired
    with counted_calls(monkeypatch) as calls:
        calls.fail_at = 3
        async with platform.session("alice", "s1", team=TEAM) as s:
            with pytest.raises(RuntimeError):
                await s.run(TASK)  # its first checkpoint moves the expiry on
            assert s.interrupted is not None
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is not None and row.state is None and row.state_bytes == 0
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.resume is not None and s.resume.outcome == "interrupted" and s.resume.restored == ()
        await s.abandon_run()
        assert SECRET not in str(await s.team.save_state())
    assert await platform.store.get(KEY) is None
    assert await _knows_the_secret(platform) == ("new", False)


async def test_a_run_abandoned_in_the_block_that_found_the_session_expired_goes_on_from_nothing(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _saved_then_expired(platform, registry)
    with counted_calls(monkeypatch) as calls:
        calls.fail_at = 3
        async with platform.session("alice", "s1", team=TEAM) as s:
            assert s.resume is not None and s.resume.outcome == "expired"
            with pytest.raises(RuntimeError):
                await s.run(TASK)
            await s.abandon_run()
            assert SECRET not in str(await s.team.save_state())
    assert await _knows_the_secret(platform) == ("new", False)


def _one_turn(text: str) -> list[TextMessage]:
    """A task of ``text`` and the earlier messages it quotes: the team's run stops after its first turn (at its
    seventh message), so the run writes no checkpoint."""
    quoted = [TextMessage(content=f"earlier note {i}", source="user") for i in range(1, TURNS)]
    return [*quoted, TextMessage(content=text, source="user")]


@pytest.mark.parametrize("landed", [True, False], ids=["landed-unanswered", "not-written"])
async def test_a_save_left_unanswered_in_an_expired_session_keeps_what_it_saved_and_never_the_expired_state(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch, landed: bool
) -> None:
    # The session opens expired, and its first write is a save whose answer the database lost (it landed, or
    # not). The next checkpoint write reads the row back first: a save that landed replaced the expired state,
    # and that write keeps it; one that did not left the expired state, and that write clears it still.
    await _saved_then_expired(platform, registry)
    real = platform.store.save

    async def answer_lost(*args: Any, **kwargs: Any) -> int:
        if landed:
            await real(*args, **kwargs)
        raise StoreUnavailable("the connection closed before the commit's answer", hint="check the database")

    with counted_calls(monkeypatch) as calls:
        async with platform.session("alice", "s1", team=TEAM) as s:
            assert s.resume is not None and s.resume.outcome == "expired"
            await s.run(_one_turn("second request: my ticket is 7373"))
            monkeypatch.setattr(platform.store, "save", answer_lost)
            with pytest.raises(StoreUnavailable):
                await s.save()
            monkeypatch.setattr(platform.store, "save", real)
            calls.fail_at = calls.made + 3
            with pytest.raises(RuntimeError):
                await s.run(TASK)  # two turns made durable, one checkpoint write each, then the model fails
            assert s.interrupted is not None
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.resume is not None and s.resume.outcome == "interrupted"
        assert s.resume.restored == (("researcher",) if landed else ())
        await s.abandon_run()
        kept = str(await s.team.save_state())
        assert ("7373" in kept) is landed and SECRET not in kept
