"""A worker that lost its lease to an erasure and goes on afterwards (a process paused past its lease, woken
once the erasure has finished and lifted its fence) brings nothing of the user back: no data key, no record of
a transcript store, no queued transcript. On SQLite and a real Postgres (with both kinds of lease for the
resume state)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit import outbox
from teamstore.audit.claims import new_owner
from teamstore.audit.schema import outbox as outbox_table
from teamstore.audit.schema import subject_stores
from teamstore.audit.subjects import find_subject, get_or_create_subject, record_store
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.engine import create_engine
from teamstore.erasure import RequestStatus
from teamstore.errors import ErasureInProgress, StaleStateVersion
from teamstore.keys import KeyService
from teamstore.keys.schema import data_keys
from teamstore.settings import Settings
from teamstore.state.base import SessionKey, StateStore
from teamstore.state.factory import store_for
from tests.conftest import prepare
from tests.erasure.conftest import coordinator
from tests.state.test_checkpoint_conformance import checkpoint
from tests.state.test_store_conformance import acquire, record

KEY = SessionKey("uma", "s1")
STATE = '{"envelope":1,"codec":"json","data":{"said":"my router drops"}}'


@pytest.fixture
def folder(tmp_path: Path) -> LocalTranscriptStore:
    (tmp_path / "transcripts").mkdir()
    return LocalTranscriptStore(tmp_path / "transcripts")


@pytest.fixture
async def state_engine(backend: tuple[str, str]) -> AsyncIterator[AsyncEngine]:
    """The backend's migrated database, its lease mode set."""
    await prepare(*backend)
    eng = create_engine(backend[0])
    yield eng
    await eng.dispose()


@pytest.fixture
async def worker(state_engine: AsyncEngine, backend: tuple[str, str]) -> AsyncIterator[StateStore]:
    """A worker's sealed state store, with a key service of its own (caching keys as the tests' settings say)."""
    store = store_for(state_engine, lease=backend[1], keys=KeyService.from_settings(state_engine, Settings()))
    yield store
    await store.aclose()


async def _count(engine: AsyncEngine, table: Any, *where: Any) -> int:
    async with engine.connect() as conn:
        return int(await conn.scalar(select(func.count()).select_from(table).where(*where)) or 0)


async def _erased(engine: AsyncEngine, folder: LocalTranscriptStore, user: str) -> None:
    receipt = await coordinator(engine, folder).run(user, request_id="REQ-2026-0042")
    assert receipt.status is RequestStatus.COMPLETED, receipt


async def _nothing_left(engine: AsyncEngine, folder: LocalTranscriptStore, user: str) -> None:
    assert await _count(engine, data_keys, data_keys.c.user_id == user) == 0
    assert await find_subject(engine, user) is None
    plan = await coordinator(engine, folder).run(user, dry_run=True)
    assert not plan.matched, plan


async def _stale_session(worker: StateStore) -> int:
    """A session opened before the erasure, whose lease then passed (given back here, as its expiry would):
    the row version the worker goes on with."""
    row = await acquire(worker, KEY)
    saved = await worker.save(KEY, owner="w1", expected_version=row.row_version, record=record(STATE), release=False)
    await worker.release(KEY, owner="w1", discard_empty=False)
    return saved


async def test_a_save_of_a_worker_that_lost_its_lease_to_a_finished_erasure_makes_no_data_key(
    state_engine: AsyncEngine, worker: StateStore, folder: LocalTranscriptStore
) -> None:
    version = await _stale_session(worker)
    await _erased(state_engine, folder, KEY.user_id)
    with pytest.raises(ErasureInProgress, match="erased while this session was open"):
        await worker.save(KEY, owner="w1", expected_version=version, record=record(STATE), release=True)
    await _nothing_left(state_engine, folder, KEY.user_id)


async def test_a_checkpoint_of_a_worker_that_lost_its_lease_to_a_finished_erasure_makes_no_data_key(
    state_engine: AsyncEngine, worker: StateStore, folder: LocalTranscriptStore
) -> None:
    version = await _stale_session(worker)
    await _erased(state_engine, folder, KEY.user_id)
    with pytest.raises(ErasureInProgress, match="erased while this session was open"):
        await worker.checkpoint(KEY, owner="w1", expected_version=version, record=checkpoint())
    await _nothing_left(state_engine, folder, KEY.user_id)


async def test_a_user_back_after_the_erasure_starts_afresh_and_the_stale_worker_still_writes_nothing(
    state_engine: AsyncEngine, worker: StateStore, folder: LocalTranscriptStore
) -> None:
    version = await _stale_session(worker)
    await _erased(state_engine, folder, KEY.user_id)
    back = await acquire(worker, SessionKey(KEY.user_id, "s2"), owner="w2")  # a new session: a new key
    await worker.save(SessionKey(KEY.user_id, "s2"), owner="w2", expected_version=back.row_version,
                      record=record(STATE), release=True)
    (made,) = await _keys_of(state_engine, KEY.user_id)
    with pytest.raises(StaleStateVersion):  # sealed under the new key, refused by the row it no longer leases
        await worker.save(KEY, owner="w1", expected_version=version, record=record(STATE), release=True)
    assert await _keys_of(state_engine, KEY.user_id) == [made]
    assert await worker.get(KEY) is None


async def _keys_of(engine: AsyncEngine, user: str) -> list[str]:
    async with engine.connect() as conn:
        return [str(k) for k in (await conn.scalars(select(data_keys.c.key_id).where(data_keys.c.user_id == user)))]


async def test_a_transcript_store_is_never_recorded_for_a_subject_an_erasure_deleted(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    subject = await get_or_create_subject(engine, "uma")  # looked up as the worker's run started
    await record_store(engine, subject, folder.url)
    await _erased(engine, folder, "uma")
    with pytest.raises(ErasureInProgress):
        await record_store(engine, subject, folder.url)  # the run's end, after the receipt
    with pytest.raises(ErasureInProgress):
        await record_store(engine, subject, "s3://another-bucket/audit")
    assert await _count(engine, subject_stores, subject_stores.c.subject_key == subject) == 0
    await _nothing_left(engine, folder, "uma")


async def test_a_transcript_is_never_queued_for_a_subject_an_erasure_deleted(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    subject = await get_or_create_subject(engine, "uma")
    await _erased(engine, folder, "uma")
    with pytest.raises(ErasureInProgress):
        await outbox.enqueue(engine, "run-1", f"subjects/{subject}/s/run-1.jsonl.gz", subject, b"sealed", "down")
    assert await _count(engine, outbox_table, outbox_table.c.subject_key == subject) == 0
    # An upload that may still land is recorded (its sender deletes it when it lands), without the transcript.
    claim = outbox.Claim(new_owner(), outbox.may_land_until(60))
    with pytest.raises(ErasureInProgress):
        await outbox.enqueue(engine, "run-2", f"subjects/{subject}/s/run-2.jsonl.gz", subject, b"sealed", "late",
                             claim)
    async with engine.connect() as conn:
        bodies = (await conn.scalars(select(outbox_table.c.body).where(outbox_table.c.subject_key == subject))).all()
    assert bodies == [None]
