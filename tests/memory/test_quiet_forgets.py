"""The records of forgets and the retention sweep's forgetting of quiet users (teamstore.erasure.quiet): a writer of a
session opened before a forget never writes back what it removed, and no raw user id is left behind the sweep."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

import teamstore.erasure.quiet as quiet
import teamstore.memory.store as store_module
from teamstore.audit.schema import subjects
from teamstore.audit.subjects import ensure_subject
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.clock import database_now
from teamstore.db.fence import RETENTION, user_holds
from teamstore.erasure.steps.base import StepContext
from teamstore.errors import MemoryForgotten
from teamstore.keys import KeyService
from teamstore.keys.schema import data_keys
from teamstore.memory.facts import MemoryUpdate
from teamstore.memory.schema import forgets
from teamstore.memory.store import MemoryStore
from teamstore.settings import Settings


async def _ids(engine: AsyncEngine, column: Any) -> list[str]:
    async with engine.connect() as conn:
        return sorted((await conn.execute(select(column))).scalars().all())


def _keys(engine: AsyncEngine) -> KeyService:
    return KeyService.from_settings(engine, Settings(key_cache_seconds=0))


async def _opened(engine: AsyncEngine, keys: KeyService) -> None:
    """Alice's session opens, as the platform opens it: her data key and audit subject."""
    await keys.data_key("alice", create=True)
    await ensure_subject(engine, "alice")


async def _sweep(engine: AsyncEngine, tmp_path: Path, keys: KeyService, **options: Any) -> quiet.Quiet:
    later = await database_now(engine) + timedelta(days=1)  # past the hour a new user's key is spared
    return await quiet.forget_quiet_users(engine, LocalTranscriptStore(tmp_path / "t"), keys, grace_seconds=0,
                                          now=later, **options)


async def _write(store: MemoryStore, said_after: datetime) -> int:
    return await store.write("alice", "helpdesk", MemoryUpdate("Alice lives at 12 Secret Lane.",
                             {"home_address": "12 Secret Lane"}), types={"home_address": "str"}, expected_version=0,
                             run_id="r", team="helpdesk", team_version="v1", retention_days=30, said_after=said_after)


async def test_a_writer_without_a_key_of_a_session_opened_before_a_forget_writes_nothing_after_the_quiet_sweep(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """A store built without a key service has no data key for the sweep to destroy: only the forget's record stops
    its writer, so the record keeps the user (unless the caller says every writer seals)."""
    keys, store = _keys(engine), MemoryStore(engine)
    await _opened(engine, keys)
    said_after = await store.clock("alice")  # the session's bound, before the user says anything
    assert (await store.forget("alice")).unrecorded is None
    assert await _sweep(engine, tmp_path, keys) == quiet.Quiet(0, 0)  # not quiet: never held
    assert await _ids(engine, forgets.c.user_id) == ["alice"]
    with pytest.raises(MemoryForgotten):
        await _write(store, said_after)
    assert await store.show("alice", held=True) == []
    assert await _sweep(engine, tmp_path, keys, memory_sealed=True) == quiet.Quiet(1, 0)
    assert await _ids(engine, forgets.c.user_id) == [] and await _ids(engine, subjects.c.user_id) == []


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "unsealed"])
async def test_a_forget_racing_the_sweeps_last_transaction_leaves_no_raw_id_behind(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sealed: bool
) -> None:
    """The forget comes while the sweep forgets the user (its record of forgets deleted, the mapping not yet): on
    Postgres it waits for the sweep's commit (SQLite: for the file's write lock), then finds the ids gone."""
    keys = _keys(engine)
    store = MemoryStore(engine, keys=keys if sealed else None)
    await _opened(engine, keys)
    inside, go = asyncio.Event(), asyncio.Event()
    unlink = quiet.exports_step().rows.delete

    class Rows:
        async def delete(self, conn: AsyncConnection, ctx: StepContext) -> Any:
            inside.set()
            await go.wait()
            return await unlink(conn, ctx)

    class Step:
        rows = Rows()

    monkeypatch.setattr(quiet, "exports_step", Step)
    sweep = asyncio.create_task(_sweep(engine, tmp_path, keys, memory_sealed=sealed))
    await asyncio.wait_for(inside.wait(), 30)
    forget = asyncio.create_task(store.forget("alice", scope="helpdesk"))
    await asyncio.wait({forget}, timeout=1)  # unfixed, the forget commits in here
    go.set()
    assert await asyncio.wait_for(sweep, 30) == quiet.Quiet(1, 0)
    assert (await asyncio.wait_for(forget, 30)).unrecorded is not None
    assert await _ids(engine, forgets.c.user_id) == [] and await _ids(engine, subjects.c.user_id) == []


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_a_forget_recorded_as_the_sweep_destroys_the_key_commits_first_and_its_record_goes_with_the_user(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forget records itself while the key stands and commits late, after the key's destruction: the sweep waits
    for it (SQLite runs one writer at a time, so only Postgres can interleave them)."""
    keys = _keys(engine)
    store = MemoryStore(engine, keys=keys)
    await _opened(engine, keys)
    fenced, recorded, commit = asyncio.Event(), asyncio.Event(), asyncio.Event()
    destroy, record = quiet._destroy_keys, store_module.record_forget

    async def destroy_late(*args: Any) -> int:
        fenced.set()
        await recorded.wait()
        return await destroy(*args)

    async def record_then_wait(*args: Any, **kwargs: Any) -> str | None:
        out = await record(*args, **kwargs)
        recorded.set()
        await commit.wait()
        return out

    monkeypatch.setattr(quiet, "_destroy_keys", destroy_late)
    monkeypatch.setattr(store_module, "record_forget", record_then_wait)
    sweep = asyncio.create_task(_sweep(engine, tmp_path, keys, memory_sealed=True))
    await asyncio.wait_for(fenced.wait(), 30)
    forget = asyncio.create_task(store.forget("alice", scope="helpdesk"))
    await asyncio.wait_for(recorded.wait(), 30)
    await asyncio.wait({sweep}, timeout=1)  # unfixed, the sweep ends in here, before the forget commits
    commit.set()
    assert (await asyncio.wait_for(forget, 30)).unrecorded is None
    assert await asyncio.wait_for(sweep, 30) == quiet.Quiet(1, 0)
    assert await _ids(engine, forgets.c.user_id) == [] and await _ids(engine, data_keys.c.user_id) == []


async def test_a_forget_once_the_sweep_destroyed_the_key_records_nothing_and_says_the_sweep_forgets_the_user(
    engine: AsyncEngine,
) -> None:
    """Not "erased": the sweep holds the user, and their key is gone (its cache wait follows)."""
    keys = _keys(engine)
    store = MemoryStore(engine, keys=keys)
    await keys.data_key("alice", create=True)
    async with engine.begin() as conn:
        await conn.execute(insert(user_holds).values(user_id="alice", reason=RETENTION, created_at=datetime.now(UTC)))
        await conn.execute(delete(data_keys).where(data_keys.c.user_id == "alice"))
    gone = await store.forget("alice")
    assert gone.unrecorded is not None and "erased" not in gone.unrecorded
    assert gone.unrecorded.startswith("nothing was recorded of the forget: the retention sweep is forgetting the user")
    assert await _ids(engine, forgets.c.user_id) == []
