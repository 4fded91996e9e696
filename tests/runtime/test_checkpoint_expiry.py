"""A session opened after its TTL starts afresh, and its expired state stays gone, on SQLite and Postgres with both
kinds of lease: the checkpoint writes of the block (the clearing of an old interrupted run's checkpoint as the
session opens, a new run's checkpoints) move the row's expiry on, so they clear the expired state with them, and
nothing in a later opening, or in a run abandoned there, brings its words back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from config_registry import Registry
from teamstore.runtime.platform import Platform
from teamstore.state.base import SessionKey
from teamstore.state.schema import sessions
from tests.runtime.checkpoint_teams import TEAM, counted_calls, register

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
