"""Closing a platform while sessions are open, as a service's shutdown does, on SQLite and a real Postgres with
both kinds of lease: new sessions refused, open ones waited for, those still open when the wait is over cut off
with their leases given back and nothing half-written."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from autogen_core import CancellationToken
from sqlalchemy import event, text

from config_registry import Registry
from teamstore import examples
from teamstore.app import App
from teamstore.db.engine import create_engine
from teamstore.errors import ConfigurationError, PlatformClosed, StaleStateVersion, StoreUnavailable
from teamstore.offline import OfflineChatCompletionClient
from teamstore.runtime import session as session_module
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
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


async def test_a_closed_platform_says_it_has_closed_and_that_a_lifespan_builds_its_own(platform: Platform) -> None:
    # It said "is closing" long after the close had ended: a test suite opening a second lifespan on a platform
    # built at import read that as a shutdown still under way.
    await platform.aclose()
    with pytest.raises(PlatformClosed) as info:
        async with platform.session(*KEY.__dict__.values(), team=TEAM_REF):
            pytest.fail("a session opened on a closed platform")
    assert "has closed" in info.value.message and "closing" not in info.value.message
    assert "per lifespan" in (info.value.hint or "")


async def test_a_closed_platform_does_not_open_again_nor_take_a_call_on_its_closed_store(platform: Platform) -> None:
    # Each went on against the disposed engine, which opened a new pool that nothing would close; entering it again
    # succeeded, and the first session then said the platform had closed.
    async with platform.session(*KEY.__dict__.values(), team=TEAM_REF) as s:
        await s.run("My router ZX-81 drops every evening")
    await platform.aclose()
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "it does not open again": platform.__aenter__,
        "it deletes no session": lambda: platform.delete_session(*KEY.__dict__.values()),
        "it shows no memory": lambda: platform.show_memory(KEY.user_id),
        "it forgets no memory": lambda: platform.forget_memory(KEY.user_id),
        "it restores no state": lambda: platform.restore_quarantined(1),
        "it builds no team": lambda: platform.build_team(TEAM_REF),
        "it checks no schema": platform.ensure_schema,
    }
    for what, call in calls.items():
        with pytest.raises(PlatformClosed, match=f"the platform has closed: {what}") as info:
            await call()
        assert "per lifespan" in (info.value.hint or "")


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


class _FirstReply:
    """An observer that notes the run's first agent message."""

    def __init__(self) -> None:
        self.seen = asyncio.Event()

    async def run_started(self, ctx: Any) -> None:
        pass

    async def on_item(self, ctx: Any, item: Any) -> None:
        if getattr(item, "source", "user") != "user":
            self.seen.set()

    async def run_finished(self, ctx: Any, outcome: Any) -> None:
        pass


async def test_closing_stops_a_run_in_flight_and_writes_its_audit_before_the_store_closes(tmp_path: Path) -> None:
    # The team ran on (paying for its model calls), and once it finished its ledger rows and transcript were
    # written after the observers drained and the app's engine was disposed (its pool opened connections again).
    home = tmp_path / "home"
    manifest = examples.example_manifest("support_escalation").model_copy(update={"checkpoints": "off", "name": "long_case"})
    Registry(home / "registry", create=True).add(
        "long_case", examples.support_escalation(delay_seconds=0.5).dump_component(), manifest, "v1",
        label="production")
    platform = App(Settings(home=home, registry_refresh_seconds=0)).platform(audit=True)
    await platform.ensure_schema()
    url, first, connects = str(platform.engine.url), _FirstReply(), []
    platform.observers.append(first)
    async with platform.session("alice", "s1", team="long_case") as s:
        running = asyncio.ensure_future(s.run("My router ZX-81 drops every evening"))
        await asyncio.wait_for(first.seen.wait(), 10)  # one call answered, the next in flight
        await asyncio.wait_for(platform.aclose(wait_seconds=0.1), 20)
        event.listen(platform.engine.sync_engine, "connect", lambda *args: connects.append(args))
        assert running.done()  # not the six calls' 3 s
        with pytest.raises(PlatformClosed, match="closed while this session was open"):
            await running
    await asyncio.sleep(0.5)
    assert connects == []  # nothing written after the close
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            calls = (await conn.execute(text("SELECT sum(calls) FROM ts_usage"))).scalar_one()
    finally:
        await engine.dispose()
    assert calls and calls >= 1  # the answered call, on the ledger as a run that failed


async def test_a_session_still_opening_as_the_platform_closes_does_not_open(
    platform: Platform, later: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It finished opening after the close and ran a whole request on the closed platform.
    judged = asyncio.Event()
    open_row = session_module.open_row

    async def slow_open_row(*args: Any, **kwargs: Any) -> Any:
        judged.set()
        await asyncio.sleep(0.5)
        return await open_row(*args, **kwargs)

    monkeypatch.setattr(session_module, "open_row", slow_open_row)
    opening = asyncio.ensure_future(platform.session(*KEY.__dict__.values(), team=TEAM_REF).__aenter__())
    await asyncio.wait_for(judged.wait(), 10)
    await platform.aclose(wait_seconds=0.05)
    with pytest.raises(PlatformClosed, match="did not open"):
        await opening
    async with later.session(*KEY.__dict__.values(), team=TEAM_REF, lease_timeout=0) as s:  # the lease is free
        assert s.resume is not None and s.resume.outcome == "new"


async def test_a_caller_cancelled_while_the_close_waits_leaves_the_close_going_on(
    platform: Platform, registry: Registry
) -> None:
    closed: list[str] = []

    async def on_close() -> None:
        closed.append("closed")

    p = Platform(platform.engine, registry, settings=platform.settings, on_close=on_close)
    async with p.session(*KEY.__dict__.values(), team=TEAM_REF) as s:
        await s.run("My router ZX-81 drops every evening")
        closing = asyncio.ensure_future(p.aclose(wait_seconds=60))
        await asyncio.sleep(0.05)
        closing.cancel()  # a shutdown handler's own timeout
        with pytest.raises(asyncio.CancelledError):
            await closing
        with pytest.raises(PlatformClosed, match="closing"):
            async with p.session("bob", "s1", team=TEAM_REF):
                pytest.fail("a session opened on a closing platform")
    # The close still waited for the session, and goes on to its end once the block has saved.
    await asyncio.wait_for(p.aclose(), 5)
    assert closed == ["closed"]
    row = await platform.store.get(KEY)
    assert row is not None and row.row_version == 1


async def test_a_save_under_way_as_the_session_is_cut_off_lands_before_its_lease_is_given_back(
    platform: Platform, later: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    saving_started = asyncio.Event()
    save = platform.store.save

    async def slow_save(*args: Any, **kwargs: Any) -> int:
        saving_started.set()
        await asyncio.sleep(0.3)  # the close's cut-off comes meanwhile
        return await save(*args, **kwargs)

    monkeypatch.setattr(platform.store, "save", slow_save)
    async with platform.session(*KEY.__dict__.values(), team=TEAM_REF) as s:
        await s.run("My router ZX-81 drops every evening")
        saving = asyncio.ensure_future(s.save())
        await saving_started.wait()
        await platform.aclose(wait_seconds=0)
        assert await saving == 1
    async with later.session(*KEY.__dict__.values(), team=TEAM_REF, lease_timeout=0) as other:
        assert other.resume is not None and other.resume.outcome == "resumed" and other.row_version == 1
        assert "ZX-81" in str(await other.team.save_state())


@pytest.mark.parametrize("cut", [StoreUnavailable, StaleStateVersion])
async def test_a_write_the_close_cuts_short_mid_statement_is_reported_as_the_close(
    platform: Platform, monkeypatch: pytest.MonkeyPatch, cut: type[Exception]
) -> None:
    # What the store raises when the close takes its connection away mid-statement: nothing of it landed.
    writing = asyncio.Event()

    async def cut_short(*args: Any, **kwargs: Any) -> int:
        writing.set()
        await asyncio.sleep(0.3)
        raise cut("the connection closed under the statement", hint="nothing")

    async with platform.session(*KEY.__dict__.values(), team=TEAM_REF) as s:
        await s.run("My router ZX-81 drops every evening")
        monkeypatch.setattr(platform.store, "save", cut_short)
        saving = asyncio.ensure_future(s.save())
        await writing.wait()
        await platform.aclose(wait_seconds=0)
        with pytest.raises(PlatformClosed, match="closed while this session was open") as info:
            await saving
        assert isinstance(info.value.__cause__, cut)


async def test_a_run_with_checkpoints_cut_off_mid_run_stays_interrupted_for_the_next_worker(
    platform: Platform, later: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    original, made, waiting = OfflineChatCompletionClient.create, [0], asyncio.Event()

    async def create(self: OfflineChatCompletionClient, messages: Any, *,
                     cancellation_token: CancellationToken | None = None, **kwargs: Any) -> Any:
        made[0] += 1
        if made[0] == 3:  # the third turn's call takes long, as a remote model's can
            wait = asyncio.ensure_future(asyncio.sleep(30))
            if cancellation_token is not None:
                cancellation_token.link_future(wait)
            waiting.set()
            await wait
        return await original(self, messages, cancellation_token=cancellation_token, **kwargs)

    monkeypatch.setattr(OfflineChatCompletionClient, "create", create)
    async with platform.session(*KEY.__dict__.values(), team=TEAM) as s:
        running = asyncio.ensure_future(s.run("My line drops every evening since the storm."))
        await asyncio.wait_for(waiting.wait(), 10)
        await asyncio.wait_for(platform.aclose(wait_seconds=0.05), 10)
        with pytest.raises(PlatformClosed):
            await asyncio.wait_for(running, 5)  # stopped at once, not after the 30 s call
        assert s.interrupted is not None and s.interrupted.last_turn == 2  # not recorded as a cancelled run
    async with later.session(*KEY.__dict__.values(), team=TEAM, lease_timeout=0) as s:
        assert s.resume is not None and s.resume.outcome == "interrupted"
        assert s.interrupted is not None and s.interrupted.last_turn == 2
