"""Restoring a quarantined state, on every backend and kind of lease: under the session's lease, never
overwriting a newer state unless asked, and losing nothing either way."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, insert, update

from teamstore.db.fence import user_holds
from teamstore.errors import ErasureInProgress, QuarantineNotFound, SessionBusy, StaleStateVersion
from teamstore.state.base import SessionKey, StateStore, StoredSession
from teamstore.state.schema import quarantine, sessions
from teamstore.state.sweep import sweep_quarantine
from tests.state.test_checkpoint_conformance import checkpoint
from tests.state.test_store_conformance import acquire, record

KEY = SessionKey("alice", "s1")
TTL = timedelta(days=3)


async def _quarantined(store: StateStore, state: str = '{"old":1}') -> int:
    """A session that saved ``state``, then had it refused and set aside, as a failed resume does."""
    row = await acquire(store, KEY, owner="w1")
    await store.save(KEY, owner="w1", expected_version=row.row_version, record=record(state), release=True)
    row = await acquire(store, KEY, owner="w2")
    qid = await store.quarantine(row, owner="w2", reason="definition_changed", detail="researcher: removed")
    await store.release(KEY, owner="w2", discard_empty=False)
    return qid


async def _interrupted(store: StateStore, turn: int = 7) -> None:
    """The session ran on and its worker died mid-run: the row holds that run's checkpoint."""
    row = await acquire(store, KEY, owner="w3")
    await store.checkpoint(KEY, owner="w3", expected_version=row.row_version, record=checkpoint(f'{{"turn":{turn}}}'))
    await store.release(KEY, owner="w3", discard_empty=False)


class Endings:
    """An ``ending`` that keeps what it was handed."""

    def __init__(self) -> None:
        self.rows: list[StoredSession] = []

    async def __call__(self, row: StoredSession) -> None:
        self.rows.append(row)


async def test_a_restored_state_is_back_and_leaves_quarantine(store: StateStore) -> None:
    qid = await _quarantined(store)
    assert (await store.get(KEY)).state is None  # type: ignore[union-attr]
    restored = await store.restore_quarantined(qid, ttl=TTL)
    assert restored.replaced_by is None
    assert restored.session.state == '{"old":1}' and restored.session.row_version == 2
    assert restored.session.expires_at is not None
    assert timedelta(days=2.9) < restored.session.expires_at - datetime.now(UTC) <= TTL
    assert await store.list_quarantined() == []
    row = await acquire(store, KEY, owner="w3")  # the next run loads it (and validates it again)
    assert row.state == '{"old":1}' and row.row_version == 2


async def test_a_newer_state_is_kept_unless_replaced_and_then_set_aside(store: StateStore) -> None:
    qid = await _quarantined(store)
    row = await acquire(store, KEY, owner="w3")  # the session went on fresh and saved again
    await store.save(KEY, owner="w3", expected_version=row.row_version, record=record('{"new":1}'), release=True)
    with pytest.raises(StaleStateVersion, match="replace"):
        await store.restore_quarantined(qid, ttl=TTL)
    assert (await store.get(KEY)).state == '{"new":1}'  # type: ignore[union-attr]
    assert [q.id for q in await store.list_quarantined()] == [qid]
    await acquire(store, KEY, owner="w4", timeout=0)  # the refused restore let go of the session
    await store.release(KEY, owner="w4", discard_empty=False)

    restored = await store.restore_quarantined(qid, ttl=TTL, replace=True)
    assert restored.session.state == '{"old":1}'
    (aside,) = await store.list_quarantined()
    assert aside.id == restored.replaced_by and aside.reason == "replaced" and str(qid) in aside.detail
    assert aside.state_bytes >= len('{"new":1}')  # the size stored: set aside as the row held it, sealed
    # Restoring the one set aside brings the newer state back: nothing was lost either way.
    again = await store.restore_quarantined(aside.id, ttl=TTL, replace=True)
    assert again.session.state == '{"new":1}'


async def test_an_open_session_is_not_restored_into(store: StateStore) -> None:
    qid = await _quarantined(store)
    await acquire(store, KEY, owner="running")
    with pytest.raises(SessionBusy):
        await store.restore_quarantined(qid, ttl=TTL, wait_seconds=0.2)
    assert [q.id for q in await store.list_quarantined()] == [qid]
    await store.release(KEY, owner="running", discard_empty=False)
    assert (await store.restore_quarantined(qid, ttl=TTL)).session.state == '{"old":1}'


async def test_a_restore_into_a_session_with_no_row_creates_it(store: StateStore) -> None:
    qid = await _quarantined(store)
    async with store.engine.begin() as conn:  # the session row itself is gone (swept, say)
        await conn.execute(delete(sessions))
    restored = await store.restore_quarantined(qid, ttl=TTL)
    assert restored.session.state == '{"old":1}' and restored.session.row_version == 1


async def test_an_unknown_id_and_a_held_user_are_typed_refusals(store: StateStore) -> None:
    for unknown in (424242, 10**20, -1, 0):  # beyond 64 bits: not found, not the driver's OverflowError
        with pytest.raises(QuarantineNotFound):
            await store.restore_quarantined(unknown, ttl=TTL)
    qid = await _quarantined(store)
    async with store.engine.begin() as conn:
        await conn.execute(insert(user_holds).values(user_id="alice", reason="erasure", created_at=datetime.now(UTC)))
    with pytest.raises(ErasureInProgress):
        await store.restore_quarantined(qid, ttl=TTL)
    assert [q.id for q in await store.list_quarantined()] == [qid]


async def test_two_restores_of_one_state_restore_it_once(store: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    qid = await _quarantined(store)
    save = store.save

    async def slow_save(*args: Any, **kwargs: Any) -> int:  # widen the gap between the save and what follows it
        version = await save(*args, **kwargs)
        await asyncio.sleep(0.3)
        return version

    monkeypatch.setattr(store, "save", slow_save)
    first, second = await asyncio.gather(
        store.restore_quarantined(qid, ttl=TTL, replace=True, wait_seconds=5),
        store.restore_quarantined(qid, ttl=TTL, replace=True, wait_seconds=5),
        return_exceptions=True,
    )
    outcomes = sorted(type(r).__name__ for r in (first, second))
    assert outcomes == ["QuarantineNotFound", "Restored"]
    assert (await store.get(KEY)).state == '{"old":1}'  # type: ignore[union-attr]
    assert await store.list_quarantined() == []  # no copy of the restored state set aside by the loser


async def test_a_restored_state_keeps_the_users_words_out_of_its_repr(store: StateStore) -> None:
    # A service logging what restore_quarantined returned wrote the user's decrypted conversation to its logs.
    qid = await _quarantined(store, state='{"said":"CANARY-5150 my router"}')
    restored = await store.restore_quarantined(qid, ttl=TTL)
    assert "CANARY-5150" in restored.session.state  # type: ignore[operator]  # opened, as the session needs it
    assert "CANARY-5150" not in repr(restored) and "CANARY-5150" not in str(restored)
    assert f"state_bytes={restored.session.state_bytes}" in repr(restored)  # its size says what was restored
    row = await acquire(store, KEY, owner="w3")  # opened by the sealed store (a copy made through __dict__)
    assert "CANARY-5150" in row.state and "CANARY-5150" not in repr(row)


async def test_a_session_holding_an_interrupted_run_is_not_restored_into_unless_replaced(store: StateStore) -> None:
    # The session went on fresh after its state was refused, and its worker died mid-run: the restore saved over
    # the row without --replace, and that save cleared the run's checkpoint, recorded nowhere.
    qid = await _quarantined(store)
    await _interrupted(store)
    ended = Endings()
    with pytest.raises(StaleStateVersion, match="interrupted run") as refused:
        await store.restore_quarantined(qid, ttl=TTL, ending=ended)
    assert "--replace" in (refused.value.hint or "")
    kept = await store.get(KEY)
    assert kept is not None and kept.checkpoint == '{"turn":7}' and kept.state is None
    assert [q.id for q in await store.list_quarantined()] == [qid] and ended.rows == []

    restored = await store.restore_quarantined(qid, ttl=TTL, replace=True, ending=ended)
    (gone,) = ended.rows  # the run is recorded before the save clears its checkpoint, opened as a delete's is
    assert gone.checkpoint == '{"turn":7}'
    assert restored.session.state == '{"old":1}' and restored.session.checkpoint is None
    (aside,) = await store.list_quarantined()
    assert aside.id == restored.replaced_by and aside.reason == "replaced"
    assert aside.checkpoint_bytes > 0 and aside.state_bytes == 0  # the run's checkpoint, kept


async def _replaced_with_its_run(store: StateStore) -> tuple[int, Endings]:
    """A state refused, the session going on fresh with a state and a run that stopped mid-way, then the first
    state restored over them (``--replace``): returns the quarantine id now holding the fresh state and run."""
    qid = await _quarantined(store)
    row = await acquire(store, KEY, owner="w3")  # fresh: it saved a state, then a run of it stopped mid-way
    await store.save(KEY, owner="w3", expected_version=row.row_version, record=record('{"new":1}'), release=False)
    await store.checkpoint(KEY, owner="w3", expected_version=row.row_version + 1, record=checkpoint('{"turn":4}'))
    await store.release(KEY, owner="w3", discard_empty=False)
    with pytest.raises(StaleStateVersion, match=r"a state saved after .*, and an interrupted run"):
        await store.restore_quarantined(qid, ttl=TTL)
    ended = Endings()
    first = await store.restore_quarantined(qid, ttl=TTL, replace=True, ending=ended)
    assert [r.checkpoint for r in ended.rows] == ['{"turn":4}'] and not first.checkpoint_kept
    assert first.replaced_by is not None
    return first.replaced_by, ended


async def test_a_replaced_state_comes_back_alone_and_its_ended_runs_checkpoint_stays_in_quarantine(
    store: StateStore,
) -> None:
    # The restore put the checkpoint back beside the state: the run, recorded as ended when it was replaced, was
    # then continued, and that continuation's turns and result went into no transcript.
    replaced_by, ended = await _replaced_with_its_run(store)
    again = await store.restore_quarantined(replaced_by, ttl=TTL, replace=True, ending=ended)
    assert again.session.state == '{"new":1}' and again.session.checkpoint is None and again.checkpoint_kept
    assert len(ended.rows) == 1  # the state it replaced held no run
    kept = await store.get_quarantined(replaced_by)  # the run's checkpoint, kept until the retention removes it
    assert kept is not None and kept.state_bytes == 0 and kept.checkpoint_bytes > 0
    assert kept.reason == "replaced" and "its state was restored" in kept.detail
    assert {q.id for q in await store.list_quarantined()} == {replaced_by, again.replaced_by}
    resumed = await acquire(store, KEY, owner="w4")  # the next worker resumes the state, with no run to continue
    assert resumed.state == '{"new":1}' and resumed.checkpoint is None
    assert resumed.expires_at is not None and resumed.expires_at > datetime.now(UTC) + timedelta(days=2.9)
    await store.release(KEY, owner="w4", discard_empty=False)
    with pytest.raises(QuarantineNotFound, match="its state was restored already"):
        await store.restore_quarantined(replaced_by, ttl=TTL, replace=True, ending=ended)
    assert (await store.get(KEY)).state == '{"new":1}'  # type: ignore[union-attr]


async def test_two_restores_of_a_state_beside_a_checkpoint_restore_it_once(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its quarantine row stays for the checkpoint: the restore waiting on the lease must find its state gone.
    replaced_by, ended = await _replaced_with_its_run(store)
    save = store.save

    async def slow_save(*args: Any, **kwargs: Any) -> int:
        version = await save(*args, **kwargs)
        await asyncio.sleep(0.3)
        return version

    monkeypatch.setattr(store, "save", slow_save)
    first, second = await asyncio.gather(
        store.restore_quarantined(replaced_by, ttl=TTL, replace=True, wait_seconds=5, ending=ended),
        store.restore_quarantined(replaced_by, ttl=TTL, replace=True, wait_seconds=5, ending=ended),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in (first, second)) == ["QuarantineNotFound", "Restored"]
    assert (await store.get(KEY)).state == '{"new":1}'  # type: ignore[union-attr]
    assert len(await store.list_quarantined()) == 2  # the first state, set aside once; the run's checkpoint


async def test_a_state_past_the_quarantines_retention_is_not_restored(store: StateStore) -> None:
    qid = await _quarantined(store)
    async with store.engine.begin() as conn:  # set aside 31 days ago; the sweep has not run since
        await conn.execute(update(quarantine).values(quarantined_at=datetime.now(UTC) - timedelta(days=31)))
    with pytest.raises(QuarantineNotFound, match="due for deletion"):
        await store.restore_quarantined(qid, ttl=TTL, retention=timedelta(days=30))
    assert [q.id for q in await store.list_quarantined()] == [qid]
    left = await store.get(KEY)
    assert left is None or left.state is None
    restored = await store.restore_quarantined(qid, ttl=TTL, retention=timedelta(days=32))
    assert restored.session.state == '{"old":1}'


async def test_an_id_is_never_given_again_once_its_state_is_restored_or_swept(store: StateStore) -> None:
    first = await _quarantined(store, '{"first":1}')
    await store.restore_quarantined(first, ttl=TTL)  # the quarantine is empty again
    second = await _quarantined(store, '{"second":1}')
    assert second > first
    assert await sweep_quarantine(store.engine, datetime.now(UTC) + timedelta(seconds=1)) == 1  # empty again
    third = await _quarantined(store, '{"third":1}')
    assert third > second
    for gone in (first, second):  # a restore run from old notes finds nothing, never the newest state
        with pytest.raises(QuarantineNotFound):
            await store.restore_quarantined(gone, ttl=TTL, replace=True)
    assert [q.id for q in await store.list_quarantined()] == [third]
