"""A worker that lost its lease to an erasure and goes on afterwards (a process paused past its lease, woken
once the erasure has finished and lifted its fence) brings nothing of the user back: no data key, no subject,
no record of a transcript store, no queued transcript, no ledger row, no memory. Its session refuses to run
again or to start its memory writer. On SQLite and a real Postgres (with both kinds of lease for the resume
state)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.audit import outbox
from teamstore.audit.claims import new_owner
from teamstore.audit.ledger_observer import LedgerObserver
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.schema import outbox as outbox_table
from teamstore.audit.schema import subject_stores, usage
from teamstore.audit.subjects import find_subject, get_or_create_subject, record_store
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.engine import create_engine
from teamstore.erasure import RequestStatus
from teamstore.errors import ErasureInProgress, StaleStateVersion
from teamstore.events import LaterCalls, ModelCall, RunContext, RunOutcome, drain_observers
from teamstore.keys import KeyService
from teamstore.keys.schema import data_keys
from teamstore.memory.schema import facts, memories
from teamstore.runtime import session as session_module
from teamstore.runtime.deps import LeaseKeeper
from teamstore.runtime.memory import WRITER, MemoryService
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from teamstore.state.base import SessionKey, StateStore
from teamstore.state.factory import store_for
from teamstore.state.schema import quarantine
from tests.erasure.conftest import coordinator
from tests.erasure.seed import audited_platform
from tests.state.test_checkpoint_conformance import checkpoint
from tests.state.test_store_conformance import acquire, record

KEY = SessionKey("uma", "s1")
STATE = '{"envelope":1,"codec":"json","data":{"said":"my router drops"}}'


@pytest.fixture
def folder(tmp_path: Path) -> LocalTranscriptStore:
    (tmp_path / "transcripts").mkdir()
    return LocalTranscriptStore(tmp_path / "transcripts")


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
    claim = outbox.Claim(new_owner(), outbox.may_land_for(60))
    with pytest.raises(ErasureInProgress):
        await outbox.enqueue(engine, "run-2", f"subjects/{subject}/s/run-2.jsonl.gz", subject, b"sealed", "late",
                             claim)
    async with engine.connect() as conn:
        bodies = (await conn.scalars(select(outbox_table.c.body).where(outbox_table.c.subject_key == subject))).all()
    assert bodies == [None]


# --- a session whose lease was lost ----------------------------------------------------------------------------
TTL = 1.0
"""The sessions' lease (seconds): renewed every third of it while the worker lives; it runs out while it hangs."""


@pytest.fixture
async def platform(state_engine: AsyncEngine, backend: tuple[str, str], registry: Registry,
                   folder: LocalTranscriptStore) -> AsyncIterator[Platform]:
    """A platform whose runs write transcripts to ``folder``, ledger rows and the support team's memory."""
    p = audited_platform(state_engine, registry, folder, session_lease=backend[1], lease_ttl_seconds=TTL)
    yield p
    await p.aclose()


def _hung_while_erased(url: str, folder: LocalTranscriptStore, user: str, *, back: bool = False) -> None:
    """The worker hangs (its event loop blocked, no renewal goes out) while another process waits out the lease
    of its open session and erases the user (``back``: then the user's next session there opens, with a new
    subject), then wakes."""
    async def erase_elsewhere() -> None:
        engine = create_engine(url)
        try:
            await _erased(engine, folder, user)
            if back:
                elsewhere = Pseudonyms(engine)
                await elsewhere.open_session(user, "elsewhere")
                await elsewhere.aclose()
        finally:
            await engine.dispose()

    elsewhere = threading.Thread(target=asyncio.run, args=(erase_elsewhere(),))
    elsewhere.start()
    elsewhere.join()


async def _nothing_of_theirs(engine: AsyncEngine, folder: LocalTranscriptStore, user: str) -> None:
    """Nothing of ``user`` is stored anywhere: no key, subject, ledger row still linked, transcript or memory."""
    assert await _count(engine, usage, usage.c.subject_key.is_not(None)) == 0
    assert await folder.list_keys("") == []
    assert await _count(engine, memories, memories.c.user_id == user) == 0
    assert await _count(engine, facts, facts.c.user_id == user) == 0
    await _nothing_left(engine, folder, user)


async def test_a_session_that_lost_its_lease_to_an_erasure_refuses_to_run_and_makes_nothing_of_the_user(
    state_engine: AsyncEngine, backend: tuple[str, str], platform: Platform, folder: LocalTranscriptStore
) -> None:
    async with platform.session("uma", "s1", team="support_triage") as s:
        _hung_while_erased(backend[0], folder, "uma")
        with pytest.raises(StaleStateVersion, match="lease was lost"):
            await s.run("my router drops every evening")
        with pytest.raises(StaleStateVersion, match="lease was lost"):  # and so on, however often it is asked
            await s.run("still there?")
    await platform.drain_memory()
    await _nothing_of_theirs(state_engine, folder, "uma")


async def test_a_session_saved_before_it_lost_its_lease_to_an_erasure_starts_no_memory_writer(
    state_engine: AsyncEngine, backend: tuple[str, str], platform: Platform, folder: LocalTranscriptStore
) -> None:
    with pytest.raises(StaleStateVersion, match="lease was lost"):  # the block's end: its memory is not written
        async with platform.session("uma", "s1", team="support_triage") as s:
            await s.run("my router drops every evening")
            await s.save()  # the state is saved: leaving the block has only the lease to give back
            await drain_observers(platform.observers)  # the run's audit writes done: none holds SQLite's lock
            _hung_while_erased(backend[0], folder, "uma")
    await platform.drain_memory()
    await _nothing_of_theirs(state_engine, folder, "uma")


def _hangs_after_its_lease_check(monkeypatch: pytest.MonkeyPatch, url: str, folder: LocalTranscriptStore,
                                 user: str, *, back: bool = False) -> None:
    """The worker's next lease check passes, then the worker hangs (as :func:`_hung_while_erased`) before the run
    it checked for starts: its audit looks the user's subject up only once the erasure has finished."""
    checked = LeaseKeeper.check

    async def then_hang(keeper: LeaseKeeper) -> None:
        await checked(keeper)
        monkeypatch.setattr(LeaseKeeper, "check", checked)  # once
        _hung_while_erased(url, folder, user, back=back)

    monkeypatch.setattr(LeaseKeeper, "check", then_hang)


async def test_a_run_whose_worker_hung_past_its_lease_check_while_the_user_was_erased_makes_no_subject(
    state_engine: AsyncEngine, backend: tuple[str, str], platform: Platform, folder: LocalTranscriptStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ErasureInProgress, match="erased while this session was open"):
        async with platform.session("uma", "s1", team="support_triage") as s:
            assert await find_subject(state_engine, "uma") is not None  # made as the session opened
            _hangs_after_its_lease_check(monkeypatch, backend[0], folder, "uma")
            await s.run("my router drops every evening")
    await drain_observers(platform.observers)
    await platform.drain_memory()
    await _nothing_of_theirs(state_engine, folder, "uma")
    assert await _count(state_engine, outbox_table) == 0


async def test_a_run_whose_worker_hung_past_its_lease_check_writes_nothing_under_the_subject_of_the_user_back(
    state_engine: AsyncEngine, backend: tuple[str, str], platform: Platform, folder: LocalTranscriptStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ErasureInProgress, match="erased while this session was open"):
        async with platform.session("uma", "s1", team="support_triage") as s:
            opened_with = await find_subject(state_engine, "uma")
            _hangs_after_its_lease_check(monkeypatch, backend[0], folder, "uma", back=True)
            await s.run("my router drops every evening")
    await drain_observers(platform.observers)
    await platform.drain_memory()
    back = await find_subject(state_engine, "uma")  # made as the user's next session opened, elsewhere
    assert back is not None and back != opened_with
    assert await _count(state_engine, usage) == 0
    assert await folder.list_keys("") == []
    assert await _count(state_engine, outbox_table) == 0
    assert await _count(state_engine, subject_stores) == 0


async def test_a_session_whose_worker_hung_between_its_lease_and_its_memory_makes_no_data_key(
    state_engine: AsyncEngine, backend: tuple[str, str], platform: Platform, folder: LocalTranscriptStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recall = MemoryService.recall

    async def then_hang(service: MemoryService, *args: Any, **kwargs: Any) -> Any:
        recalled = await recall(service, *args, **kwargs)
        _hung_while_erased(backend[0], folder, "uma")  # the lease is held: the session takes its memory's key next
        return recalled

    monkeypatch.setattr(MemoryService, "recall", then_hang)
    with pytest.raises(ErasureInProgress, match="erased while this session was open"):
        async with platform.session("uma", "s1", team="support_triage") as s:
            await s.run("my router drops every evening")
    await drain_observers(platform.observers)
    await platform.drain_memory()
    await _nothing_of_theirs(state_engine, folder, "uma")


async def test_a_user_back_after_the_erasure_opens_a_new_session_and_runs_afresh(
    state_engine: AsyncEngine, backend: tuple[str, str], platform: Platform, folder: LocalTranscriptStore
) -> None:
    async with platform.session("uma", "s1", team="support_triage") as s:
        _hung_while_erased(backend[0], folder, "uma")
        with pytest.raises(StaleStateVersion):
            await s.run("my router drops every evening")
    async with platform.session("uma", "s2", team="support_triage") as back:
        await back.run("hello again")
    await platform.drain_memory()
    assert await find_subject(state_engine, "uma") is not None
    assert len(await _keys_of(state_engine, "uma")) == 1
    assert await _count(state_engine, memories, memories.c.user_id == "uma") == 1


async def test_the_memory_writers_late_ledger_rows_never_make_an_erased_users_subject_again(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    now = datetime.now(UTC)
    ctx = RunContext(run_id="run-1", user_id="uma", session_id="s1", team="support_triage", team_version="v1",
                     started_at=now)
    await get_or_create_subject(engine, "uma")  # the run's, whose keys this process no longer holds
    await _erased(engine, folder, "uma")
    call = ModelCall(agent=WRITER, model="gpt-4o", input_tokens=10, output_tokens=5, started_at=now, duration_s=0.1,
                     purpose=WRITER)
    later = LaterCalls(RunOutcome(finished_at=now), [call], WRITER, now, now)
    with pytest.raises(ErasureInProgress):
        await LedgerObserver(engine, Pseudonyms(engine)).later_calls(ctx, later)
    assert await _count(engine, usage) == 0
    await _nothing_left(engine, folder, "uma")


async def test_a_session_whose_worker_hung_between_its_lease_and_a_refusal_sets_nothing_of_the_user_aside(
    state_engine: AsyncEngine, backend: tuple[str, str], platform: Platform, folder: LocalTranscriptStore,
    worker: StateStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _stale_session(worker)  # a stored state that is no team's: the session sets it aside as it opens
    judged = session_module.open_row

    async def hang_then_judge(*args: Any, **kwargs: Any) -> Any:
        _hung_while_erased(backend[0], folder, "uma")  # the lease is held and the row read: the refusal comes next
        return await judged(*args, **kwargs)

    monkeypatch.setattr(session_module, "open_row", hang_then_judge)
    with pytest.raises(StaleStateVersion, match="not set aside"):  # the session does not open
        async with platform.session("uma", "s1", team="support_triage"):
            pass
    await drain_observers(platform.observers)
    await platform.drain_memory()
    assert await _count(state_engine, quarantine, quarantine.c.user_id == "uma") == 0
    await _nothing_of_theirs(state_engine, folder, "uma")
