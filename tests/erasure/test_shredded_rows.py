"""User memory and a run's checkpoint are sealed under the user's data key, so the erasure's key step puts them
beyond use before their deletes run: on SQLite and a real Postgres, a raw scan of the tables finds no word of
the user's, and when a delete is made to fail after the key step, the rows it left open under no key the
database still holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Table, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.erasure import RequestStatus, StepStatus
from teamstore.errors import PayloadUnreadable
from teamstore.keys import KeyService
from teamstore.keys.schema import data_keys
from teamstore.keys.sealed import open_sealed
from teamstore.memory.erasure import UserMemoryRows
from teamstore.memory.facts import MemoryUpdate
from teamstore.memory.schema import facts, memories
from teamstore.memory.store import MemoryStore
from teamstore.settings import Settings
from teamstore.state.base import CheckpointRecord, SessionKey, StateStore
from teamstore.state.envelope import sealed_bytes
from teamstore.state.erasure import UserRows
from teamstore.state.factory import store_for
from teamstore.state.schema import sessions
from tests.erasure.conftest import coordinator
from tests.state.test_store_conformance import acquire

CANARY = "CANARY-zoe-8d41"
KEY = SessionKey("zoe", "s1")


@pytest.fixture
def folder(tmp_path: Path) -> LocalTranscriptStore:
    return LocalTranscriptStore(tmp_path / "transcripts")


@pytest.fixture
def keys(engine: AsyncEngine) -> KeyService:
    return KeyService.from_settings(engine, Settings())


async def _remember(keys: KeyService, engine: AsyncEngine, user: str) -> MemoryStore:
    store = MemoryStore(engine, keys=keys)
    update = MemoryUpdate(f"{CANARY}: {user}'s router drops every evening", {"router_model": f"{CANARY}-ZX81"})
    await store.write(user, "support_triage", update, types={"router_model": "str"}, expected_version=0,
                      run_id="run-1", team="support_triage", team_version="v1", retention_days=30)
    return store


async def _interrupted_run(store: StateStore, user: str) -> None:
    """A session of ``user`` holding a run's checkpoint (its worker died after turn 1)."""
    key = SessionKey(user, "s1")
    await acquire(store, key)
    record = CheckpointRecord("support_triage", "v1", 1, "0.7.5", {}, f'{{"said":"{CANARY} my router"}}',
                              datetime.now(UTC) + timedelta(days=1))
    await store.checkpoint(key, owner="w1", expected_version=0, record=record)
    await store.release(key, owner="w1", discard_empty=False)


def _state_store(engine: AsyncEngine, keys: KeyService) -> StateStore:
    return store_for(engine, lease="row" if engine.dialect.name == "sqlite" else "lock", keys=keys)


async def _raw(engine: AsyncEngine, *tables: Table) -> list[str]:
    """Every text cell of ``tables``, as the database holds it."""
    async with engine.connect() as conn:
        return [str(v) for t in tables for row in (await conn.execute(select(t))).all() for v in row]


async def _keys_left(engine: AsyncEngine, keys: KeyService) -> list[Any]:
    async with engine.connect() as conn:
        users = (await conn.execute(select(data_keys.c.user_id))).scalars().all()
    return [(await keys.data_key(user, create=False)).aead for user in users]


def _fail_delete(monkeypatch: pytest.MonkeyPatch, rows: type) -> None:
    async def refused(self: Any, conn: AsyncConnection, user_id: str) -> None:
        raise OperationalError("DELETE", {}, Exception("the disk failed"))

    monkeypatch.setattr(rows, "delete", refused)


async def test_memory_is_sealed_at_rest_and_beyond_use_once_the_key_step_ran_though_its_delete_failed(
    engine: AsyncEngine, keys: KeyService, folder: LocalTranscriptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await _remember(keys, engine, "zoe")
    await _remember(keys, engine, "bob")
    assert not [cell for cell in await _raw(engine, memories, facts) if CANARY in cell]
    (kept,) = await store.show("zoe")
    assert CANARY in kept.summary and kept.facts["router_model"].value == f"{CANARY}-ZX81"  # opened when read

    _fail_delete(monkeypatch, UserMemoryRows)
    receipt = await coordinator(engine, folder).run("zoe", request_id="req-881")

    assert receipt.status is RequestStatus.FAILED
    assert receipt.stores["keys"].status is StepStatus.ERASED and receipt.stores["memory"].status is StepStatus.FAILED
    async with engine.connect() as conn:
        summary = (await conn.execute(select(memories.c.summary).where(memories.c.user_id == "zoe"))).scalar_one()
        value = (await conn.execute(select(facts.c.value).where(facts.c.user_id == "zoe"))).scalar_one()
    for stored, context in ((summary, "memory/support_triage/summary"),
                            (value, "memory/support_triage/fact/router_model")):
        blob = sealed_bytes(stored)
        assert blob is not None, "the row the delete left is sealed"
        for aead in await _keys_left(engine, KeyService.from_settings(engine, Settings())):
            with pytest.raises(PayloadUnreadable):
                open_sealed(aead, blob, context)
    (left,) = await MemoryStore(engine, keys=KeyService.from_settings(engine, Settings())).show("zoe")
    assert left.summary == "" and not left.facts  # nothing of it reads, nor is given to a model
    assert {d.name for d in left.damaged} == {"summary", "router_model"}
    assert all("does not open" in d.reason for d in left.damaged)
    (bobs,) = await store.show("bob")
    assert CANARY in bobs.summary  # another user's memory still opens


async def test_a_checkpoint_is_sealed_at_rest_and_beyond_use_once_the_key_step_ran_though_its_delete_failed(
    engine: AsyncEngine, keys: KeyService, folder: LocalTranscriptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, fresh = _state_store(engine, keys), _state_store(engine, KeyService.from_settings(engine, Settings()))
    try:
        for user in ("zoe", "bob"):
            await _interrupted_run(store, user)
        assert not [cell for cell in await _raw(engine, sessions) if CANARY in cell]
        row = await store.get(KEY)
        assert row is not None and row.checkpoint is not None and CANARY in row.checkpoint  # opened when read

        _fail_delete(monkeypatch, UserRows)  # the resume state's and quarantine's deletes
        receipt = await coordinator(engine, folder).run("zoe", request_id="req-881")

        assert receipt.status is RequestStatus.FAILED
        assert receipt.stores["keys"].status is StepStatus.ERASED
        assert receipt.stores["resume_state"].status is StepStatus.FAILED
        async with engine.connect() as conn:
            stored = (await conn.execute(select(sessions.c.checkpoint).where(sessions.c.user_id == "zoe"))).scalar_one()
        blob = sealed_bytes(stored)
        assert blob is not None, "the checkpoint the delete left is sealed"
        for aead in await _keys_left(engine, KeyService.from_settings(engine, Settings())):
            with pytest.raises(PayloadUnreadable):
                open_sealed(aead, blob, "checkpoint/s1")
        left = await fresh.get(KEY)  # a worker that never held the key
        assert left is not None and left.checkpoint == stored  # handed on sealed, never opened
        assert left.checkpoint_unreadable is not None and "no longer exists" in left.checkpoint_unreadable
        bobs = await fresh.get(SessionKey("bob", "s1"))
        assert bobs is not None and bobs.checkpoint is not None and CANARY in bobs.checkpoint
    finally:
        await store.aclose()
        await fresh.aclose()
