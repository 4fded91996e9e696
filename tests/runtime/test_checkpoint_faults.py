"""Bad input and faults around a run's checkpoint, on SQLite and Postgres with both kinds of lease: a
checkpoint damaged by hand, one from an older definition version, a second worker at a run the first still
holds, a stale worker's checkpoint after its session was taken over, a database down at a checkpoint."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from config_registry import Registry
from teamstore.errors import (
    ErasureInProgress,
    NoInterruptedRun,
    RunCannotContinue,
    SessionBusy,
    StaleStateVersion,
    StateRejected,
    StoreUnavailable,
)
from teamstore.runtime.platform import Platform
from teamstore.state.base import SessionKey
from teamstore.state.envelope import decode, encode
from teamstore.state.schema import sessions
from tests.runtime.checkpoint_teams import TEAM, counted_calls, long_triage, manifest, register, said
from tests.runtime.test_sessions import _allow_connections, _lose_the_database

TASK = "My line drops every evening since the storm."
KEY = SessionKey("alice", "s1")


async def _interrupt(platform: Platform, monkeypatch: pytest.MonkeyPatch, turn: int) -> str:
    """Run alice's session until its model fails in the turn after ``turn``; returns the run's id."""
    with counted_calls(monkeypatch) as calls:
        calls.fail_at = turn + 1
        async with platform.session("alice", "s1", team=TEAM) as s:
            with pytest.raises(RuntimeError):
                await s.run(TASK)
            assert s.interrupted is not None
            return s.interrupted.run_id


async def _damage(platform: Platform, **values: Any) -> None:
    async with platform.engine.begin() as conn:
        await conn.execute(update(sessions).where(sessions.c.user_id == "alice").values(**values))


_BARE = '{"envelope":1,"codec":"json","data":{"kind":"checkpoint"}}'


@pytest.mark.parametrize(("damage", "why"), [
    ({"checkpoint": "{not json", "checkpoint_bytes": 9}, "not valid JSON"),
    ({"checkpoint": _BARE, "checkpoint_bytes": len(_BARE)}, "written under no layout"),
    ({"checkpoint_bytes": 3}, "checkpoint_bytes 3"),
], ids=["not-json", "no-fields", "wrong-size"])
async def test_a_checkpoint_damaged_by_hand_is_set_aside_and_the_state_before_the_run_resumes(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch, damage: dict[str, Any], why: str
) -> None:
    register(registry)
    async with platform.session("alice", "s1", team=TEAM) as s:
        await s.run("first request")
    await _interrupt(platform, monkeypatch, 2)
    await _damage(platform, **damage)
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.resume is not None and s.resume.outcome == "resumed" and s.resume.applied
        assert s.resume.checkpoint_refused in ("corrupt", "schema_mismatch") and s.resume.quarantined
        assert s.interrupted is None and why in (s.resume.detail or "")
        result = await s.run("a new request")  # nothing waits: the session goes on
    assert result.messages[0].to_text() == "a new request"
    (kept,) = await platform.store.list_quarantined("alice")
    assert kept.reason.startswith("checkpoint ") and kept.state_bytes == 0 and kept.checkpoint_bytes > 0


@pytest.mark.parametrize(("changes", "why"), [
    ({"said_after": "soon"}, "said_after is not a time"),
    ({"said_after": "2026-12-06T16:00:00"}, "said_after has no time zone"),
    ({"schema": 3}, "layout 3, this code reads 1, 2"),
], ids=["not-a-time", "no-time-zone", "unknown-layout"])
async def test_a_checkpoint_whose_layout_or_memory_bound_does_not_read_is_set_aside(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch, changes: dict[str, Any], why: str
) -> None:
    register(registry)
    await _interrupt(platform, monkeypatch, 2)
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is not None
    payload = decode(row.checkpoint)
    assert payload["schema"] == 2 and payload["said_after"] is None  # its team keeps no memory: no bound read
    text = encode({**payload, **changes})
    await _damage(platform, checkpoint=text, checkpoint_bytes=len(text.encode()))
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.interrupted is None and s.resume is not None and s.resume.quarantined
        assert s.resume.checkpoint_refused in ("corrupt", "schema_mismatch") and why in (s.resume.detail or "")


@pytest.mark.parametrize(("changes", "why"), [
    ({"team": "Jane Doe 7Q3X"}, "written by another team or another version of it"),
    ({"schema": "Jane Doe 7Q3X"}, "written under a layout that is no number, this code reads 1, 2"),
], ids=["team", "layout"])
async def test_what_a_damaged_checkpoint_holds_is_not_quoted_in_the_reason_it_is_set_aside(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch, changes: dict[str, Any], why: str
) -> None:
    await _checkpoint_changed(platform, registry, monkeypatch, changes)
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.resume is not None and s.resume.quarantined and why in (s.resume.detail or "")
        assert "7Q3X" not in (s.resume.detail or "")


async def test_a_new_sessions_checkpoint_set_aside_as_corrupt_leaves_no_row_the_bound_counts(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    platform.settings = platform.settings.model_copy(update={"max_sessions_per_user": 1})
    await _interrupt(platform, monkeypatch, 2)  # a new session: its row holds the checkpoint alone
    await _damage(platform, checkpoint="{not json", checkpoint_bytes=9)
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.resume is not None and s.resume.outcome == "new" and s.resume.checkpoint_refused == "corrupt"
    assert await platform.store.get(KEY) is None
    (kept,) = await platform.store.list_quarantined("alice")
    assert kept.reason == "checkpoint corrupt" and kept.checkpoint_bytes == 9  # set aside as the row held it
    async with platform.session("alice", "s2", team=TEAM) as s:  # nothing counts against the bound of one
        assert s.resume is not None and s.resume.outcome == "new"


async def test_a_checkpoint_from_an_older_definition_version_does_not_continue(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    run_id = await _interrupt(platform, monkeypatch, 3)
    team = long_triage()
    team._participants[2]._description = "The critic, reworded."  # type: ignore[attr-defined]
    newer = registry.add(TEAM, team.dump_component(), manifest(), "reword the critic", label="production")
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.resume is not None and s.resume.outcome == "new"
        assert s.resume.checkpoint_refused == "definition_changed" and run_id[:12] not in str(s.interrupted)
        assert "continues only on the version that ran it" in (s.resume.detail or "")
    assert s.team_version == newer
    assert await platform.store.get(KEY) is None  # a new session's: with its checkpoint set aside it held nothing
    (kept,) = await platform.store.list_quarantined("alice")
    assert kept.reason == "checkpoint definition_changed" and kept.checkpoint_bytes > 0


async def test_abandoning_a_run_set_aside_as_the_session_opened_gives_it_up_once(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # RunCannotContinue says "or abandon it"; abandon_run() on the moved label then raised NoInterruptedRun.
    register(registry)
    await _interrupt(platform, monkeypatch, 3)
    register(registry, checkpoints="off", message="checkpoints off")  # the label moves between crash and continue
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.interrupted is None and s.resume is not None and s.resume.checkpoint_refused == "definition_changed"
        await s.abandon_run()  # already given up as the session opened: nothing to write
        with pytest.raises(NoInterruptedRun):
            await s.abandon_run()
        result = await s.run("A new question")
    assert result.messages[0].to_text() == "A new question"


async def test_opened_to_continue_with_a_team_its_run_did_not_use_it_is_refused_and_the_checkpoint_stays(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    run_id = await _interrupt(platform, monkeypatch, 3)
    before = await platform.store.get(KEY)
    assert before is not None and before.checkpoint is not None
    team = long_triage()
    team._participants[2]._description = "The critic, reworded."  # type: ignore[attr-defined]
    registry.add(TEAM, team.dump_component(), manifest(), "reword the critic", label="production")  # moved since
    with pytest.raises(RunCannotContinue, match="nothing was set aside") as refused:
        async with platform.session("alice", "s1", team=TEAM, continuing=True):
            pass
    assert "continues only on the version that ran it" in refused.value.message
    assert f"(--team {TEAM}@{before.team_version[:12]})" in (refused.value.hint or "")  # the reference to give
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint == before.checkpoint and row.row_version == before.row_version
    assert await platform.store.list_quarantined("alice") == []
    async with platform.session("alice", "s1", team=f"{TEAM}@{before.team_version}", continuing=True,
                                lease_timeout=0) as s:  # the lease was given back: the run's own version goes on
        assert s.interrupted is not None and s.interrupted.run_id == run_id
        await s.continue_run()


@pytest.mark.parametrize(("changes", "ref"), [
    ({"team": "Jane Doe 7Q3X"}, "NAME@"),
    ({"team_version": "Jane Doe 7Q3X"}, f"{TEAM}@VERSION"),
], ids=["team", "version"])
async def test_continuing_a_run_whose_checkpoint_holds_no_team_name_does_not_quote_it_in_the_fix(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch, changes: dict[str, Any], ref: str
) -> None:
    await _checkpoint_changed(platform, registry, monkeypatch, changes)
    with pytest.raises(RunCannotContinue) as refused:
        async with platform.session("alice", "s1", team=TEAM, continuing=True):
            pass
    assert f"(--team {ref}" in (refused.value.hint or "")
    assert "7Q3X" not in refused.value.message + (refused.value.hint or "")


async def test_a_second_worker_cannot_continue_a_run_the_first_still_holds(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    await _interrupt(platform, monkeypatch, 2)
    async with platform.session("alice", "s1", team=TEAM) as first:
        assert first.interrupted is not None
        with pytest.raises(SessionBusy):
            async with platform.session("alice", "s1", team=TEAM, lease_timeout=0.2):
                pass
        await first.continue_run()


async def test_a_stale_worker_cannot_write_its_checkpoint_over_the_worker_that_took_the_run_over(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    platform.limits.lease_ttl_seconds = 1.0
    expected = said((await _whole_run(platform, monkeypatch)).messages)
    gate = asyncio.Event()
    stalled: list[str] = []
    real_renew = platform.store.renew

    async def renew(key: SessionKey, *, owner: str, lease_ttl: float) -> bool:  # the stalled worker renews nothing
        return True if owner in stalled else await real_renew(key, owner=owner, lease_ttl=lease_ttl)

    monkeypatch.setattr(platform.store, "renew", renew)
    with counted_calls(monkeypatch) as calls:
        calls.on_call = lambda n: gate.wait() if n == 3 else None  # worker A hangs in its third turn

        async def worker_a() -> None:
            async with platform.session("alice", "s1", team=TEAM) as a:
                stalled.append(a._owner)
                await a.run(TASK)

        a = asyncio.create_task(worker_a())
        while calls.made < 3:
            await asyncio.sleep(0.05)
        async with platform.session("alice", "s1", team=TEAM, lease_timeout=10) as b:  # A's lease runs out
            assert b.resume is not None and b.resume.outcome == "interrupted"
            result = await b.continue_run()
        gate.set()  # A's turn completes now; its checkpoint meets a row that moved on
        with pytest.raises(StaleStateVersion) as info:
            await a
    hint = info.value.hint or ""  # B continued the run already: A is not to promise it stays to be continued
    assert "if it is still interrupted" in hint and "run again" not in hint and "rerun" not in hint, hint
    assert said(result.messages) == expected
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is None and row.state is not None and TASK in row.state


async def _whole_run(platform: Platform, monkeypatch: pytest.MonkeyPatch) -> Any:
    with counted_calls(monkeypatch):
        async with platform.session("bob", "s1", team=TEAM) as s:
            return await s.run(TASK)


async def test_an_erasure_opened_mid_run_stops_it_without_promising_a_checkpoint_it_deletes(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    from teamstore.erasure.requests import open_request

    register(registry)

    async def erase(n: int) -> None:  # the request opens in the third turn, before its checkpoint
        if n == 3:
            await open_request(platform.engine, "er-mid-run", "alice", "test", 30)

    with counted_calls(monkeypatch) as calls:
        calls.on_call = erase
        with pytest.raises(ErasureInProgress) as info:
            async with platform.session("alice", "s1", team=TEAM) as s:
                await s.run(TASK)
    assert "nothing of it is kept" in info.value.message and "checkpoint stays" not in info.value.message
    assert "continue the run" not in (info.value.hint or "")


async def _move_the_row_at_the_first_call(n: int, platform: Platform) -> None:
    if n == 1:  # another writer moved the row on: the next checkpoint write is refused
        await _damage(platform, row_version=sessions.c.row_version + 1)


async def test_a_run_stopped_at_its_first_checkpoint_is_not_offered_to_be_continued(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    async with platform.session("alice", "s1", team=TEAM) as s:
        await s.run("a first request")
    with counted_calls(monkeypatch) as calls:
        calls.on_call = lambda n: _move_the_row_at_the_first_call(n, platform)
        with pytest.raises(StaleStateVersion) as info:
            async with platform.session("alice", "s1", team=TEAM) as s:
                await s.run(TASK)
    assert "no checkpoint of this run was written" in info.value.message
    assert "continue the run" not in (info.value.hint or "")  # there is nothing to continue
    assert "run its task again" in (info.value.hint or "")
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.interrupted is None


async def test_a_continued_run_stopped_at_a_checkpoint_says_the_one_it_continued_from_stays(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    await _interrupt(platform, monkeypatch, 2)
    with counted_calls(monkeypatch) as calls:
        calls.on_call = lambda n: _move_the_row_at_the_first_call(n, platform)
        with pytest.raises(StaleStateVersion) as info:
            async with platform.session("alice", "s1", team=TEAM) as s:
                await s.continue_run()
    assert "turn 2's checkpoint stays" in info.value.message
    hint = info.value.hint or ""
    assert "continue the run" in hint
    assert "run again" not in hint and "rerun" not in hint, hint  # one thing to do: the save's hint said rerun
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.interrupted is not None and s.interrupted.last_turn == 2


@pytest.mark.parametrize("landed", [False, True], ids=["not-written", "landed-unanswered"])
async def test_a_take_up_whose_checkpoint_cannot_be_written_back_runs_nothing_and_the_run_still_waits(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch, landed: bool
) -> None:
    # The take-up's write fails, or lands with the database's answer lost. Either way nothing ran, and the same
    # block takes the run up again from the row as it is read back (the take-up counted in it if it landed), on
    # the version it was read back at: on the version it held before, a take-up that had landed made the second
    # one find the row changed under it (StaleStateVersion).
    register(registry)
    await _interrupt(platform, monkeypatch, 2)
    real = platform.store.checkpoint

    async def down(*args: Any, **kwargs: Any) -> int:
        if landed:
            await real(*args, **kwargs)
        raise StoreUnavailable("the connection closed before the commit's answer", hint="check the database")

    with counted_calls(monkeypatch) as calls:
        async with platform.session("alice", "s1", team=TEAM) as s:
            monkeypatch.setattr(platform.store, "checkpoint", down)
            with pytest.raises(StoreUnavailable):
                await s.continue_run()
            assert calls.made == 0 and s.interrupted is not None and s.interrupted.last_turn == 2
            monkeypatch.setattr(platform.store, "checkpoint", real)
            result = await s.continue_run()  # the database is back: the same block takes the run up
    assert len(result.messages) == 7 and calls.made == 4  # turn 3 again, then turns 4 to 6
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is None and row.state is not None


async def test_a_database_down_at_a_checkpoint_stops_the_run_with_a_typed_error_and_keeps_the_last_one(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    register(registry)
    real_statements = getattr(platform.store, "statements", None)
    gone: list[Any] = []

    async def lose(n: int) -> None:  # the database goes in the third turn, before its checkpoint
        if n == 3:
            gone.append(await _lose_the_database(platform, tmp_path))

    with counted_calls(monkeypatch) as calls:
        calls.on_call = lose
        with pytest.raises(StoreUnavailable) as info:
            async with platform.session("alice", "s1", team=TEAM) as s:
                await s.run(TASK)
    raised = f"{info.value} {info.value.__context__}"
    assert "checkpoint" in raised and "turn 2's checkpoint stays" in raised
    if isinstance(gone[0], str):  # Postgres: the database comes back
        await _allow_connections(platform, gone[0], True)
    else:
        platform.store.statements = real_statements  # type: ignore[attr-defined]
        await gone[0].dispose()
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is not None and '"turn":2' in row.checkpoint


async def test_a_checkpoint_that_autogen_refuses_is_set_aside_when_continued(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    await _interrupt(platform, monkeypatch, 2)
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is not None
    # The manager's thread holds a message AutoGen cannot make (teamstore's checks pass it: it is AutoGen's own).
    manager_at = row.checkpoint.index('"RoundRobinGroupChatManager"')
    broken = row.checkpoint[:manager_at] + row.checkpoint[manager_at:].replace(
        '"type":"TextMessage"', '"type":"NoSuchMessage"', 1)
    await _damage(platform, checkpoint=broken, checkpoint_bytes=len(broken.encode()))
    async with platform.session("alice", "s1", team=TEAM) as s:
        assert s.resume is not None and s.resume.outcome == "interrupted", s.resume.detail
        with pytest.raises(StateRejected, match="set aside"):
            await s.continue_run()
        assert s.interrupted is None
        assert s.resume.outcome != "interrupted" and s.resume.checkpoint_refused == "corrupt", str(s.resume)
        assert "interrupted after turn 2, was set aside" in str(s.resume)
        result = await s.run("a new request")
    assert result.messages[0].to_text() == "a new request"
    (kept,) = await platform.store.list_quarantined("alice")
    assert kept.reason == "checkpoint corrupt"


async def _checkpoint_changed(platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch,
                              changes: dict[str, Any]) -> None:
    """Interrupt alice's run after its second turn, then rewrite its checkpoint's fields with ``changes``."""
    register(registry)
    await _interrupt(platform, monkeypatch, 2)
    row = await platform.store.get(KEY)
    assert row is not None and row.checkpoint is not None
    text = encode({**decode(row.checkpoint), **changes})
    await _damage(platform, checkpoint=text, checkpoint_bytes=len(text.encode()))
