"""Closing a platform while sessions are open, as a service's shutdown does, on SQLite and a real Postgres with
both kinds of lease: new sessions refused, open ones waited for, those still open when the wait is over cut off
with their leases given back and nothing half-written."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from config_registry import Registry
from teamstore.errors import ConfigurationError, PlatformClosed
from teamstore.runtime.platform import Platform
from teamstore.state.base import SessionKey
from tests.runtime.checkpoint_teams import TEAM, counted_calls, register

TEAM_REF = "support_triage"
KEY = SessionKey("alice", "s1")


@pytest.fixture
async def later(platform: Platform, registry: Registry) -> AsyncIterator[Platform]:
    """The next worker on the same database, to look at what the closed platform left."""
    p = Platform(platform.engine, registry, settings=platform.settings)
    yield p
    await p.aclose()


async def test_closing_refuses_new_sessions_and_waits_for_the_open_ones_to_end(
    platform: Platform, later: Platform
) -> None:
    created_before = platform.session("carol", "s1", team=TEAM_REF)
    async with platform.session(*KEY.__dict__.values(), team=TEAM_REF) as s:
        await s.run("My router ZX-81 drops every evening")
        closing = asyncio.ensure_future(platform.aclose(wait_seconds=60))
        await asyncio.sleep(0.05)
        for refused in (platform.session("bob", "s1", team=TEAM_REF), created_before):
            with pytest.raises(PlatformClosed) as info:
                async with refused:
                    pytest.fail("a session opened on a closing platform")
            assert "closing" in info.value.message and info.value.hint
        await s.run("The technician came; still not working")  # the open session goes on to its end
        assert not closing.done()
    await asyncio.wait_for(closing, 5)  # its block saved, released and ended: the close goes on at once
    async with later.session(*KEY.__dict__.values(), team=TEAM_REF, lease_timeout=0) as s:
        assert s.resume is not None and s.resume.outcome == "resumed" and s.row_version == 1
        assert "technician" in str(await s.team.save_state())


async def test_a_session_open_past_the_wait_writes_nothing_and_its_lease_is_free(
    platform: Platform, later: Platform
) -> None:
    # With the lock lease its later save failed as StaleStateVersion (its connection closed under it); on
    # SQLite the closed store opened connections again to write it.
    async with platform.session(*KEY.__dict__.values(), team=TEAM_REF) as s:
        await s.run("My router ZX-81 drops every evening")
        assert await s.save() == 1
        await s.run("The technician came; still not working")
        await platform.aclose(wait_seconds=0.05)
        with pytest.raises(PlatformClosed) as info:
            await s.save()
        assert "closed while this session was open" in info.value.message and "wait_seconds" in (info.value.hint or "")
        # The lease was given back as the platform closed: the next worker takes the session at once, as saved.
        async with later.session(*KEY.__dict__.values(), team=TEAM_REF, lease_timeout=0) as other:
            assert other.resume is not None and other.resume.outcome == "resumed" and other.row_version == 1
            assert "technician" not in str(await other.team.save_state())
    row = await later.store.get(KEY)
    assert row is not None and row.row_version == 1  # nothing of the refused save landed


async def test_leaving_the_block_after_the_platform_closed_under_it_says_what_was_not_saved(
    platform: Platform, later: Platform
) -> None:
    with pytest.raises(PlatformClosed, match="nothing more of it is written"):
        async with platform.session(*KEY.__dict__.values(), team=TEAM_REF) as s:
            await s.run("My router ZX-81 drops every evening")
            await platform.aclose(wait_seconds=0)
    assert await later.store.get(KEY) is None  # a new session's lease row goes with its lease
    async with later.session(*KEY.__dict__.values(), team=TEAM_REF, lease_timeout=0) as s:
        assert s.resume is not None and s.resume.outcome == "new"


async def test_a_checkpoint_write_after_the_platform_closed_is_refused_and_the_run_stays_interrupted(
    platform: Platform, later: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    with counted_calls(monkeypatch) as calls:
        calls.fail_at = 3
        async with platform.session(*KEY.__dict__.values(), team=TEAM) as s:
            with pytest.raises(RuntimeError):
                await s.run("My line drops every evening since the storm.")
            assert s.interrupted is not None
            await platform.aclose(wait_seconds=0)
            with pytest.raises(PlatformClosed):
                await s.abandon_run()  # its one write, the checkpoint's clearing, is refused
            assert s.interrupted is not None
    async with later.session(*KEY.__dict__.values(), team=TEAM, lease_timeout=0) as s:
        assert s.resume is not None and s.resume.outcome == "interrupted"
        assert s.interrupted is not None and s.interrupted.last_turn == 2


async def test_closing_twice_or_at_once_from_two_tasks_closes_once(
    platform: Platform, registry: Registry
) -> None:
    closed: list[str] = []

    async def on_close() -> None:
        await asyncio.sleep(0.01)
        closed.append("closed")

    p = Platform(platform.engine, registry, settings=platform.settings, on_close=on_close)
    async with p.session(*KEY.__dict__.values(), team=TEAM_REF) as s:
        await s.run("hello")
    async with p:
        pass
    await asyncio.gather(p.aclose(), p.aclose())
    await p.aclose()
    assert closed == ["closed"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize("bad", [-1, float("nan"), True, 3601, "10"])
async def test_a_wait_that_is_no_span_of_seconds_is_refused(platform: Platform, bad: object) -> None:
    with pytest.raises(ConfigurationError, match="wait_seconds"):
        await platform.aclose(wait_seconds=bad)  # type: ignore[arg-type]
    async with platform.session(*KEY.__dict__.values(), team=TEAM_REF):  # still open
        pass


async def test_a_session_that_cannot_be_cut_off_does_not_keep_the_platform_from_closing(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The first failure stopped the close there (teams, observers and store left open), and every later close
    # raised it again.
    closed: list[str] = []

    async def on_close() -> None:
        closed.append("closed")

    async def broken_release(*args: object, **kwargs: object) -> None:
        raise RuntimeError("CANARY-4711 the release broke")

    p = Platform(platform.engine, registry, settings=platform.settings, on_close=on_close)
    with pytest.raises(PlatformClosed):
        async with p.session("dave", "s9", team=TEAM_REF) as s:
            await s.run("My router ZX-81 drops every evening")
            monkeypatch.setattr(p.store, "release", broken_release)
            await p.aclose(wait_seconds=0)
    await p.aclose()
    assert closed == ["closed"]
    assert "RuntimeError" in caplog.text and "CANARY-4711" not in caplog.text


async def test_a_session_waiting_for_its_lease_as_the_platform_closes_stops_waiting_and_takes_nothing(
    platform: Platform, later: Platform
) -> None:
    # Its wait went on after the store was closed: once the holder let go it took the lease on the closed store
    # (the lock lease on a connection nobody tracked) and raised PlatformClosed without giving it back, saying
    # "its lease was given back"; the session stayed held for its TTL.
    async with later.session(*KEY.__dict__.values(), team=TEAM_REF) as holder:
        waiting = asyncio.ensure_future(platform.session(*KEY.__dict__.values(), team=TEAM_REF, lease_timeout=30)
                                        .__aenter__())
        await asyncio.sleep(0.3)  # it polls for the lease the holder keeps
        await asyncio.wait_for(platform.aclose(wait_seconds=0.2), 5)
        await holder.run("My router ZX-81 drops every evening")
    await asyncio.sleep(0.6)  # a poll still going on would take the lease now
    async with later.session(*KEY.__dict__.values(), team=TEAM_REF, lease_timeout=0) as s:
        assert s.resume is not None and s.resume.outcome == "resumed"
    with pytest.raises(PlatformClosed) as info:
        await waiting
    assert "did not open" in info.value.message and "given back" not in info.value.message
