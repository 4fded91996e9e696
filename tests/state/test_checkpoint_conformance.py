"""A run's checkpoint in the state store, on SQLite and Postgres with both kinds of lease: one statement per
write, under the session's lease and row version, beside the state from before the run, cleared by the save."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import insert, select

from teamstore.db.engine import create_engine
from teamstore.db.fence import user_holds
from teamstore.errors import ErasureInProgress, QuarantineNotFound, StaleStateVersion
from teamstore.state.base import CheckpointRecord, SessionKey, StateStore, StoredSession
from teamstore.state.envelope import SEALED_PREFIX
from teamstore.state.erasure import SESSIONS
from teamstore.state.schema import sessions
from tests.state.test_store_conformance import acquire, record

KEY = SessionKey("alice", "s1")


def checkpoint(text: str | None = '{"turn":1}') -> CheckpointRecord:
    return CheckpointRecord("support_triage", "v1", 1, "0.7.5", {"researcher": "fp-1"}, text,
                            datetime.now(UTC) + timedelta(days=1))


async def test_a_checkpoint_of_a_new_session_is_read_back_with_no_state(store: StateStore) -> None:
    await acquire(store, KEY)
    version = await store.checkpoint(KEY, owner="w1", expected_version=0, record=checkpoint())
    assert version == 1
    await store.release(KEY, owner="w1", discard_empty=False)
    row = await acquire(store, KEY, owner="w2")
    assert row.state is None and row.checkpoint == '{"turn":1}' and row.checkpoint_bytes == 10
    assert row.row_version == 1 and row.expires_at is not None


async def test_each_checkpoint_moves_the_row_version_and_keeps_the_state_from_before_the_run(
    store: StateStore,
) -> None:
    await acquire(store, KEY)
    version = await store.save(KEY, owner="w1", expected_version=0, record=record('{"before":1}'), release=False)
    for turn in (1, 2, 3):
        version = await store.checkpoint(KEY, owner="w1", expected_version=version,
                                         record=checkpoint(f'{{"turn":{turn}}}'))
    row = await store.get(KEY)
    assert row is not None and row.row_version == version == 4
    assert row.state == '{"before":1}' and row.checkpoint == '{"turn":3}'


async def test_a_checkpoint_write_told_the_state_expired_clears_it_with_the_checkpoint_or_without(
    store: StateStore,
) -> None:
    await acquire(store, KEY)
    version = await store.save(KEY, owner="w1", expected_version=0, record=record('{"before":1}'), release=False)
    expired = replace(checkpoint(None), state_expired=True)  # the clearing of an old run's checkpoint, say
    version = await store.checkpoint(KEY, owner="w1", expected_version=version, record=expired)
    row = await store.get(KEY)
    assert row is not None and row.state is None and row.state_bytes == 0 and row.checkpoint is None
    version = await store.save(KEY, owner="w1", expected_version=version, record=record('{"again":1}'),
                               release=False)
    version = await store.checkpoint(KEY, owner="w1", expected_version=version,
                                     record=replace(checkpoint(), state_expired=True))
    row = await store.get(KEY)
    assert row is not None and row.state is None and row.checkpoint == '{"turn":1}' and row.row_version == version


async def test_the_save_after_the_run_clears_the_checkpoint(store: StateStore) -> None:
    await acquire(store, KEY)
    version = await store.checkpoint(KEY, owner="w1", expected_version=0, record=checkpoint())
    await store.save(KEY, owner="w1", expected_version=version, record=record('{"after":1}'), release=True)
    row = await store.get(KEY)
    assert row is not None and row.state == '{"after":1}' and row.checkpoint is None and row.checkpoint_bytes == 0


async def test_a_checkpoint_written_as_none_clears_it_and_keeps_the_lease(store: StateStore) -> None:
    await acquire(store, KEY)
    version = await store.checkpoint(KEY, owner="w1", expected_version=0, record=checkpoint())
    version = await store.checkpoint(KEY, owner="w1", expected_version=version, record=checkpoint(None))
    row = await store.get(KEY)
    assert row is not None and row.checkpoint is None and row.row_version == version == 2
    await store.save(KEY, owner="w1", expected_version=version, record=record(), release=True)


async def test_a_release_removes_a_row_left_holding_neither_a_state_nor_a_checkpoint(store: StateStore) -> None:
    # A new session's only run wrote a checkpoint (the row now has a version and an expiry), then left none.
    await acquire(store, KEY)
    version = await store.checkpoint(KEY, owner="w1", expected_version=0, record=checkpoint())
    await store.checkpoint(KEY, owner="w1", expected_version=version, record=checkpoint(None))
    await store.release(KEY, owner="w1", discard_empty=True)
    assert await store.get(KEY) is None and await store.live_sessions("alice") == 0
    row = await acquire(store, SessionKey("alice", "s2"), max_sessions=1)  # nothing counts against the bound
    assert row.is_new


async def test_a_release_keeps_a_row_holding_a_checkpoint_or_a_state(store: StateStore) -> None:
    await acquire(store, KEY)
    await store.checkpoint(KEY, owner="w1", expected_version=0, record=checkpoint())
    await store.release(KEY, owner="w1", discard_empty=True)  # an interrupted run, to be continued
    row = await acquire(store, KEY, owner="w2")
    assert row.checkpoint == '{"turn":1}'
    await store.save(KEY, owner="w2", expected_version=row.row_version, record=record('{"after":1}'), release=False)
    await store.release(KEY, owner="w2", discard_empty=True)
    stored = await store.get(KEY)
    assert stored is not None and stored.state == '{"after":1}' and stored.checkpoint is None


async def test_a_release_leaves_an_emptied_row_another_worker_took_over(store: StateStore) -> None:
    await acquire(store, KEY, owner="w1", ttl=0.05)
    version = await store.checkpoint(KEY, owner="w1", expected_version=0, record=checkpoint())
    await store.checkpoint(KEY, owner="w1", expected_version=version, record=checkpoint(None))
    await asyncio.sleep(0.2)  # w1's lease runs out (an advisory lock's with its connection, ended by the server)
    row = await acquire(store, KEY, owner="w2", timeout=2)
    await store.release(KEY, owner="w1", discard_empty=True)  # late: the row is w2's now
    await store.save(KEY, owner="w2", expected_version=row.row_version, record=record('{"w":2}'), release=True)
    stored = await store.get(KEY)
    assert stored is not None and stored.state == '{"w":2}'


async def test_a_stale_worker_cannot_write_a_checkpoint_over_a_newer_one(store: StateStore) -> None:
    await acquire(store, KEY, owner="w1", ttl=0.05)
    await store.checkpoint(KEY, owner="w1", expected_version=0, record=checkpoint('{"turn":1}'))
    await asyncio.sleep(0.1)  # w1's lease runs out (an advisory lock does not: w2 waits for w1 to let go)
    if store.lease == "lock":
        await store.release(KEY, owner="w1", discard_empty=False)
    row = await acquire(store, KEY, owner="w2")
    newer = await store.checkpoint(KEY, owner="w2", expected_version=row.row_version, record=checkpoint('{"turn":2}'))
    with pytest.raises(StaleStateVersion):
        await store.checkpoint(KEY, owner="w1", expected_version=1, record=checkpoint('{"turn":"stale"}'))
    stored = await store.get(KEY)
    assert stored is not None and stored.checkpoint == '{"turn":2}' and stored.row_version == newer


async def test_a_checkpoint_for_a_held_user_is_refused_and_the_last_one_stays(store: StateStore) -> None:
    await acquire(store, KEY)
    version = await store.checkpoint(KEY, owner="w1", expected_version=0, record=checkpoint('{"turn":1}'))
    engine = store.engine  # type: ignore[attr-defined]
    async with engine.begin() as conn:
        await conn.execute(insert(user_holds).values(user_id="alice", reason="erasure", request_id="r1",
                                                        created_at=datetime.now(UTC)))
    with pytest.raises(ErasureInProgress):
        await store.checkpoint(KEY, owner="w1", expected_version=version, record=checkpoint('{"turn":2}'))
    stored = await store.get(KEY)
    assert stored is not None and stored.checkpoint == '{"turn":1}'


async def test_a_refused_checkpoint_is_quarantined_alone_and_cannot_be_restored_as_a_state(
    store: StateStore,
) -> None:
    row = await acquire(store, KEY)
    version = await store.save(KEY, owner="w1", expected_version=0, record=record('{"before":1}'), release=False)
    version = await store.checkpoint(KEY, owner="w1", expected_version=version, record=checkpoint())
    await store.release(KEY, owner="w1", discard_empty=False)
    row = await acquire(store, KEY, owner="w2")
    qid = await store.quarantine(row, owner="w2", reason="definition_changed", detail="older version",
                                 checkpoint_only=True)
    await store.release(KEY, owner="w2", discard_empty=False)
    stored = await store.get(KEY)
    assert stored is not None and stored.state == '{"before":1}' and stored.checkpoint is None
    (kept,) = await store.list_quarantined("alice")
    # the copy set aside is the sealed one the row held, longer than the checkpoint's own 10 bytes
    assert kept.id == qid and kept.state_bytes == 0 and kept.checkpoint_bytes > 10
    with pytest.raises(QuarantineNotFound, match="checkpoint"):
        await store.restore_quarantined(qid, ttl=timedelta(days=1))


async def test_erasure_counts_and_deletes_a_checkpoint_with_its_session(store: StateStore, database_url: str) -> None:
    await acquire(store, KEY)
    await store.checkpoint(KEY, owner="w1", expected_version=0, record=checkpoint('{"turn":12345}'))
    await store.release(KEY, owner="w1", discard_empty=False)
    engine = create_engine(database_url)
    async with engine.begin() as conn:
        stored = (await conn.execute(select(sessions.c.checkpoint))).scalar_one()
        assert stored.startswith(SEALED_PREFIX)  # counted as stored: sealed
        assert await SESSIONS.count(conn, "alice") == (1, len(stored))
        await SESSIONS.delete(conn, "alice")
    await engine.dispose()
    assert await store.get(KEY) is None


async def test_a_session_holding_only_a_checkpoint_expires_and_is_swept(store: StateStore) -> None:
    await acquire(store, KEY)
    past = CheckpointRecord("support_triage", "v1", 1, "0.7.5", {}, '{"turn":1}', datetime.now(UTC) - timedelta(days=1))
    await store.checkpoint(KEY, owner="w1", expected_version=0, record=past)
    await store.release(KEY, owner="w1", discard_empty=True)  # the checkpoint keeps the row
    assert await store.get(KEY) is not None
    assert await store.sweep_expired() == 1
    assert await store.get(KEY) is None


async def test_a_delete_or_a_sweep_hands_a_row_holding_a_checkpoint_to_its_ending_before_it_goes(
    store: StateStore,
) -> None:
    past = CheckpointRecord("support_triage", "v1", 1, "0.7.5", {}, '{"turn":1}', datetime.now(UTC) - timedelta(days=1))
    keys = [SessionKey("alice", f"s{n}") for n in range(4)]
    for key in keys:
        await acquire(store, key)
        await store.checkpoint(key, owner="w1", expected_version=0, record=past)
        await store.release(key, owner="w1", discard_empty=True)
    await acquire(store, keys[3], owner="w2")  # a worker holds this one: the sweep leaves it
    ended: list[tuple[str, str | None]] = []

    async def ending(row: StoredSession) -> None:
        assert await store.get(SessionKey(row.user_id, row.session_id)) is not None  # still there meanwhile
        ended.append((row.session_id, row.checkpoint))  # opened, as a run reads it

    assert await store.delete_session(keys[0], ending=ending)
    assert await store.sweep_expired(batch_size=1, ending=ending) == 2
    assert ended == [("s0", '{"turn":1}'), ("s1", '{"turn":1}'), ("s2", '{"turn":1}')]
    assert [await store.get(k) is None for k in keys] == [True, True, True, False]

    async def failing(row: StoredSession) -> None:
        raise RuntimeError("the audit could not be reached")

    await store.release(keys[3], owner="w2", discard_empty=False)
    with pytest.raises(RuntimeError):
        await store.sweep_expired(ending=failing)
    assert await store.get(keys[3]) is not None  # what the ending could not record stays
    assert await store.sweep_expired(ending=ending) == 1 and await store.get(keys[3]) is None
