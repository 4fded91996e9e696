"""Deleting one session, on every backend and kind of lease: its state and quarantined copies go, under
its lease; other sessions and users stay."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import insert

from teamstore.db.fence import user_holds
from teamstore.errors import ErasureInProgress, SessionBusy
from teamstore.state.base import SessionKey, StateStore
from tests.state.test_store_conformance import acquire, record

KEY, OTHER_SESSION, OTHER_USER = SessionKey("alice", "s1"), SessionKey("alice", "s2"), SessionKey("bob", "s1")


async def _saved(store: StateStore, key: SessionKey, state: str = '{"x":1}') -> None:
    row = await acquire(store, key, owner="w1")
    await store.save(key, owner="w1", expected_version=row.row_version, record=record(state), release=True)


async def test_a_session_and_its_quarantined_copies_go_and_nothing_else(store: StateStore) -> None:
    for key in (KEY, OTHER_SESSION, OTHER_USER):
        await _saved(store, key)
    row = await acquire(store, KEY, owner="w2")
    await store.quarantine(row, owner="w2", reason="corrupt", detail="test")
    await store.release(KEY, owner="w2", discard_empty=False)
    await _saved(store, KEY, '{"fresh":1}')

    assert await store.delete_session(KEY) is True
    assert await store.get(KEY) is None
    assert await store.list_quarantined("alice") == []
    assert {(r.user_id, r.session_id) for r in await store.list_sessions()} == {("alice", "s2"), ("bob", "s1")}
    assert (await acquire(store, KEY, owner="w3")).is_new  # the conversation starts over
    assert await store.delete_session(SessionKey("carol", "never")) is False


async def test_an_open_session_is_not_deleted_under_its_run(store: StateStore) -> None:
    await _saved(store, KEY)
    row = await acquire(store, KEY, owner="running")
    with pytest.raises(SessionBusy):
        await store.delete_session(KEY, wait_seconds=0.2)
    await store.save(KEY, owner="running", expected_version=row.row_version, record=record('{"y":2}'), release=True)
    assert (await store.get(KEY)).state == '{"y":2}'  # type: ignore[union-attr]
    assert await store.delete_session(KEY) is True


async def test_a_held_user_is_refused(store: StateStore) -> None:
    await _saved(store, KEY)
    async with store.engine.begin() as conn:
        await conn.execute(insert(user_holds).values(user_id="alice", reason="erasure", created_at=datetime.now(UTC)))
    with pytest.raises(ErasureInProgress):
        await store.delete_session(KEY)
    assert await store.get(KEY) is not None  # the erasure removes it, with a receipt
