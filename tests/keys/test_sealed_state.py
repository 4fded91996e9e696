"""Resume state sealed at rest, on SQLite and Postgres with both kinds of lease: what the columns hold, what
reads back, rows from before sealing, quarantined copies, and an unreachable key-encryption key."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.errors import ErasureInProgress, KeyUnavailable, StaleStateVersion
from teamstore.keys import KeyService
from teamstore.keys.passed_over import PassedOver
from teamstore.keys.schema import data_keys
from teamstore.settings import Settings
from teamstore.state import sealed as sealed_module
from teamstore.state.base import SessionKey, StateStore
from teamstore.state.envelope import SEALED_PREFIX
from teamstore.state.factory import store_for
from teamstore.state.schema import quarantine, sessions
from teamstore.state.sealed import seal_saved_states
from tests.conftest import prepare
from tests.keys.damaged import with_damaged_key
from tests.keys.fenced import ErasedOnFirstKey, FencedOnFirstKey, data_key_users
from tests.keys.outage import Outage
from tests.state.test_checkpoint_conformance import checkpoint
from tests.state.test_store_conformance import acquire, record

CANARY = '{"envelope":1,"codec":"json","data":{"said":"CANARY my router ZX-81 drops"}}'
KEY = ("alice", "s1")


@pytest.fixture
async def engine(backend: tuple[str, str]) -> AsyncIterator[AsyncEngine]:
    """The backend's migrated database, its lease mode set."""
    await prepare(*backend)
    eng = create_engine(backend[0])
    yield eng
    await eng.dispose()


@pytest.fixture
async def stores(engine: AsyncEngine, backend: tuple[str, str]) -> AsyncIterator[tuple[StateStore, StateStore]]:
    """(the sealed store, the bare backend under it), as the composition root and an older release build them."""
    sealed = store_for(engine, lease=backend[1], keys=KeyService.from_settings(engine, Settings()))
    plain = store_for(engine, lease=backend[1])
    yield sealed, plain
    await sealed.aclose()
    await plain.aclose()


async def _raw(engine: AsyncEngine, table: Any = sessions, column: str = "state") -> list[str]:
    async with engine.connect() as conn:
        return [r[0] for r in (await conn.execute(select(table.c[column]).where(table.c[column].is_not(None)))).all()]


async def _save(store: StateStore, state: str, session: str = "s1") -> None:
    key = SessionKey("alice", session)
    row = await acquire(store, key)
    await store.save(key, owner="w1", expected_version=row.row_version, record=record(state), release=True)


async def test_a_saved_state_is_sealed_at_rest_and_reads_back_whole(
    stores: tuple[StateStore, StateStore], engine: AsyncEngine
) -> None:
    sealed, _ = stores
    await _save(sealed, CANARY)
    (stored,) = await _raw(engine)
    assert stored.startswith(SEALED_PREFIX) and "CANARY" not in stored and "ZX-81" not in stored
    row = await acquire(sealed, SessionKey(*KEY), owner="w2")
    assert row.state == CANARY and row.state_bytes == len(CANARY) and not row.defects
    assert (await sealed.get(SessionKey(*KEY))).state == CANARY  # type: ignore[union-attr]


async def test_a_state_saved_before_sealing_reads_as_it_was_and_is_sealed_at_its_next_save(
    stores: tuple[StateStore, StateStore], engine: AsyncEngine
) -> None:
    sealed, plain = stores
    await _save(plain, CANARY)  # an older release's save
    assert await _raw(engine) == [CANARY]
    row = await acquire(sealed, SessionKey(*KEY), owner="w2")
    assert row.state == CANARY and not row.defects
    await sealed.save(SessionKey(*KEY), owner="w2", expected_version=row.row_version, record=record(CANARY),
                      release=True)
    assert (await _raw(engine))[0].startswith(SEALED_PREFIX)


async def test_a_refused_state_is_quarantined_as_the_row_held_it_and_restores_whole(
    stores: tuple[StateStore, StateStore], engine: AsyncEngine
) -> None:
    sealed, _ = stores
    await _save(sealed, CANARY)
    (at_rest,) = await _raw(engine)
    row = await acquire(sealed, SessionKey(*KEY), owner="w2")
    qid = await sealed.quarantine(row, owner="w2", reason="definition_changed", detail="renamed")
    await sealed.release(SessionKey(*KEY), owner="w2", discard_empty=False)
    assert await _raw(engine, quarantine) == [at_rest]  # the very sealed bytes, never opened on the way
    assert (await sealed.get_quarantined(qid)).state_bytes == len(at_rest)  # type: ignore[union-attr]
    await sealed.restore_quarantined(qid, ttl=timedelta(days=1))
    row = await acquire(sealed, SessionKey(*KEY), owner="w3")
    assert row.state == CANARY and not row.defects


async def test_a_sealed_state_moved_to_another_session_does_not_open_and_is_refused(
    stores: tuple[StateStore, StateStore], engine: AsyncEngine
) -> None:
    sealed, _ = stores
    await _save(sealed, CANARY, "s1")
    await _save(sealed, CANARY.replace("CANARY", "OTHER"), "s2")
    async with engine.begin() as conn:  # s1's sealed bytes copied onto s2's row, by hand
        moved = await conn.scalar(select(sessions.c.state).where(sessions.c.session_id == "s1"))
        await conn.execute(update(sessions).where(sessions.c.session_id == "s2").values(state=moved,
                                                                                         state_bytes=len(moved)))
    row = await acquire(sealed, SessionKey("alice", "s2"), owner="w2")
    assert any("does not open" in d for d in row.defects)  # judged corrupt, quarantined as it is, never loaded


@pytest.mark.s3
async def test_kms_unreachable_at_a_session_open_takes_no_lease_and_writes_nothing(
    engine: AsyncEngine, backend: tuple[str, str], kms_outage: Outage
) -> None:
    kms_outage.down = True
    store = store_for(engine, lease=backend[1], keys=KeyService.from_settings(engine, Settings()))
    try:
        with pytest.raises(KeyUnavailable):
            await acquire(store, SessionKey(*KEY))
        assert await _raw(engine) == []
        kms_outage.down = False  # nothing was left leased: the session opens at once once KMS answers
        row = await acquire(store, SessionKey(*KEY), timeout=0)
        assert row.is_new
    finally:
        await store.aclose()


async def test_keys_migrate_seals_the_states_checkpoints_and_quarantined_copies_saved_before_sealing(
    stores: tuple[StateStore, StateStore], engine: AsyncEngine
) -> None:
    sealed, plain = stores
    await _save(plain, CANARY, "s1")
    await _save(plain, CANARY, "s2")
    row = await acquire(plain, SessionKey("alice", "s2"), owner="w2")
    await plain.quarantine(row, owner="w2", reason="corrupt", detail="by hand")
    await plain.release(SessionKey("alice", "s2"), owner="w2", discard_empty=False)
    await acquire(plain, SessionKey("alice", "s3"))  # a run in flight when the worker was upgraded
    await plain.checkpoint(SessionKey("alice", "s3"), owner="w1", expected_version=0, record=checkpoint(CANARY))
    await plain.release(SessionKey("alice", "s3"), owner="w1", discard_empty=False)
    keys = KeyService.from_settings(engine, Settings())
    assert await seal_saved_states(engine, keys) == {"sessions": 1, "quarantine": 1, "checkpoints": 1}
    assert all(s.startswith(SEALED_PREFIX) for s in await _raw(engine) + await _raw(engine, quarantine)
               + await _raw(engine, sessions, "checkpoint"))
    assert await seal_saved_states(engine, keys) == {"sessions": 0, "quarantine": 0, "checkpoints": 0}
    assert (await acquire(sealed, SessionKey("alice", "s1"), owner="w3")).state == CANARY
    kept = await sealed.get(SessionKey("alice", "s3"))
    assert kept is not None and kept.checkpoint == CANARY and kept.checkpoint_bytes == len(CANARY)


async def test_a_session_whose_releasing_save_fails_is_not_remembered(stores: tuple[StateStore, StateStore]) -> None:
    sealed, _ = stores
    await _save(sealed, CANARY)
    row = await acquire(sealed, SessionKey(*KEY), owner="w2")
    with pytest.raises(StaleStateVersion):
        await sealed.save(SessionKey(*KEY), owner="w2", expected_version=row.row_version + 5, record=record(CANARY),
                          release=True)
    assert not sealed._stored  # type: ignore[attr-defined]  # what it held went with the failed save
    await sealed.release(SessionKey(*KEY), owner="w2", discard_empty=False)


async def test_the_sessions_a_store_remembers_are_bounded_and_a_forgotten_one_is_still_quarantined_sealed(
    stores: tuple[StateStore, StateStore], engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sealed, _ = stores
    monkeypatch.setattr(sealed_module, "HELD_MAX", 2)
    names = ("s1", "s2", "s3")
    for name in names:
        await _save(sealed, CANARY, name)
    rows = [await acquire(sealed, SessionKey("alice", name), owner="w2") for name in names]
    assert [where[1] for where in sealed._stored] == ["s2", "s3"]  # type: ignore[attr-defined]  # s1 forgotten
    await sealed.quarantine(rows[0], owner="w2", reason="corrupt", detail="by hand")
    (kept,) = await _raw(engine, quarantine)
    assert kept.startswith(SEALED_PREFIX) and "CANARY" not in kept
    for name in names:
        await sealed.release(SessionKey("alice", name), owner="w2", discard_empty=False)
    assert not sealed._stored  # type: ignore[attr-defined]


async def test_a_forgotten_session_whose_user_lost_their_key_since_it_opened_is_not_set_aside_under_a_new_key(
    stores: tuple[StateStore, StateStore], engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker that hung past an erasure (which destroyed alice's key) quarantines a row it no longer remembers:
    # sealing the copy needs her key, and none may be made for her again.
    sealed, _ = stores
    monkeypatch.setattr(sealed_module, "HELD_MAX", 0)
    await _save(sealed, CANARY)
    row = await acquire(sealed, SessionKey(*KEY), owner="w2")
    assert not sealed._stored  # type: ignore[attr-defined]  # forgotten at once
    async with engine.begin() as conn:
        await conn.execute(delete(data_keys).where(data_keys.c.user_id == "alice"))
    sealed.keys.forget("alice")  # type: ignore[attr-defined]  # as the erasure's key step has every worker do
    with pytest.raises(ErasureInProgress):
        await sealed.quarantine(row, owner="w2", reason="corrupt", detail="by hand")
    async with engine.connect() as conn:
        assert (await conn.execute(select(data_keys.c.user_id))).all() == []
    assert await _raw(engine, quarantine) == []
    await sealed.release(SessionKey(*KEY), owner="w2", discard_empty=False)


async def test_keys_migrate_leaves_a_user_fenced_meanwhile_to_the_erasure_and_seals_the_others(
    stores: tuple[StateStore, StateStore], engine: AsyncEngine
) -> None:
    _, plain = stores
    await _save(plain, CANARY, "s1")
    key = SessionKey("bob", "s1")
    row = await acquire(plain, key)
    await plain.save(key, owner="w1", expected_version=row.row_version, record=record(CANARY), release=True)
    # alice has no data key yet, and none is made for a fenced user: her row is the erasure's to delete.
    assert await seal_saved_states(engine, FencedOnFirstKey(engine, "alice")) == {
        "sessions": 1, "quarantine": 0, "checkpoints": 0}
    async with engine.connect() as conn:
        held = dict((await conn.execute(select(sessions.c.user_id, sessions.c.state))).all())
    assert held["bob"].startswith(SEALED_PREFIX) and held["alice"] == CANARY


async def test_keys_migrate_makes_no_data_key_for_a_user_whose_erasure_ended_after_it_read_their_state(
    stores: tuple[StateStore, StateStore], engine: AsyncEngine, tmp_path: Path
) -> None:
    _, plain = stores
    await _save(plain, CANARY, "s1")
    key = SessionKey("bob", "s1")
    row = await acquire(plain, key)
    await plain.save(key, owner="w1", expected_version=row.row_version, record=record(CANARY), release=True)
    # alice's erasure runs from start to end between the read of her state and the making of her data key: a key
    # made then, her raw id with it, would outlive the receipt.
    keys = ErasedOnFirstKey(engine, LocalTranscriptStore(tmp_path / "transcripts"), "alice")
    assert await seal_saved_states(engine, keys) == {"sessions": 1, "quarantine": 0, "checkpoints": 0}
    assert keys.receipt is not None
    assert await data_key_users(engine) == ["bob"]


async def _saved_by_alice_and_bob(store: StateStore) -> None:
    """Two states of alice's and one of bob's, saved before sealing (alice's are read first)."""
    await _save(store, CANARY, "s1")
    await _save(store, CANARY, "s2")
    key = SessionKey("bob", "s1")
    row = await acquire(store, key)
    await store.save(key, owner="w1", expected_version=row.row_version, record=record(CANARY), release=True)


async def _states(engine: AsyncEngine) -> dict[tuple[str, str], str]:
    async with engine.connect() as conn:
        return {(r[0], r[1]): r[2] for r in (await conn.execute(
            select(sessions.c.user_id, sessions.c.session_id, sessions.c.state))).all()}


async def test_keys_migrate_passes_over_a_user_whose_key_row_is_damaged_and_seals_everyone_elses_state(
    stores: tuple[StateStore, StateStore], engine: AsyncEngine
) -> None:
    _, plain = stores
    await _saved_by_alice_and_bob(plain)
    damaged = await with_damaged_key(engine, "alice")
    passed = PassedOver()
    keys = KeyService.from_settings(engine, Settings())
    assert await seal_saved_states(engine, keys, passed=passed) == {"sessions": 1, "quarantine": 0, "checkpoints": 0}
    assert passed.as_dict() == {"damaged": [damaged], "unusable": []}, "her row, once, by its key id"
    held = await _states(engine)
    assert held["alice", "s1"] == held["alice", "s2"] == CANARY, "left as it was, for a rerun once restored"
    assert held["bob", "s1"].startswith(SEALED_PREFIX)


@pytest.mark.s3
async def test_keys_migrate_stops_when_kms_cannot_be_reached_instead_of_passing_users_over(
    engine: AsyncEngine, stores: tuple[StateStore, StateStore], kms_outage: Outage
) -> None:
    _, plain = stores
    await _saved_by_alice_and_bob(plain)
    await KeyService.from_settings(engine, Settings()).data_key("alice")  # under the KMS key
    kms_outage.down = True
    passed = PassedOver()
    with pytest.raises(KeyUnavailable):
        await seal_saved_states(engine, KeyService.from_settings(engine, Settings()), passed=passed)
    assert not passed.as_dict()["damaged"] and not passed.as_dict()["unusable"]
    assert set((await _states(engine)).values()) == {CANARY}


async def _saved_unsealed(url: str) -> None:
    """alice's state as an older release saved it, before sealing."""
    engine = create_engine(url)
    plain = store_for(engine, lease="row")
    await _save(plain, CANARY)
    await plain.aclose()
    await engine.dispose()


def test_keys_migrate_leaves_no_unsealed_page_in_sqlites_files_while_a_worker_keeps_the_database_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pages a write changes go to the write-ahead log, and reach the database file only at a checkpoint: while
    # a worker keeps the database open, the log's older frames (and the file) still held the state as it was.
    db, wal = tmp_path / "teamstore.db", tmp_path / "teamstore.db-wal"
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", f"sqlite:///{db}")
    assert CliRunner().invoke(app, ["db", "upgrade"]).exit_code == 0
    worker = sqlite3.connect(db)
    try:
        worker.execute("SELECT count(*) FROM ts_sessions").fetchall()
        asyncio.run(_saved_unsealed(f"sqlite:///{db}"))
        assert b"ZX-81" in db.read_bytes() + wal.read_bytes()
        result = CliRunner().invoke(app, ["keys", "migrate", "--no-transcripts", "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["sessions"] == 1
        assert b"ZX-81" not in db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    finally:
        worker.close()


async def _damaged_alice_and_bob(url: str, lease: str) -> str:
    """alice's and bob's states saved before sealing, alice's key row damaged; its key id."""
    engine = create_engine(url)
    plain = store_for(engine, lease=lease)
    try:
        await _saved_by_alice_and_bob(plain)
        return await with_damaged_key(engine, "alice")
    finally:
        await plain.aclose()
        await engine.dispose()


@pytest.mark.parametrize("as_json", [False, True])
def test_keys_migrate_reports_the_users_it_passed_over_without_naming_them_and_exits_2(
    backend: tuple[str, str], monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", backend[0])
    asyncio.run(prepare(*backend))
    damaged = asyncio.run(_damaged_alice_and_bob(*backend))
    result = CliRunner().invoke(app, ["keys", "migrate", "--no-transcripts", *(["--json"] if as_json else [])])
    assert result.exit_code == 2, result.output
    assert "alice" not in result.output and "bob" not in result.output
    if as_json:
        shown = json.loads(result.stdout)
        assert shown["sessions"] == 1 and shown["damaged"] == [damaged] and shown["unusable"] == []
    else:
        said = " ".join(result.stdout.split())
        assert "sealed 1 session state(s)" in said
        assert "1 user(s) were passed over" in said and "Restore those ts_data_keys rows" in said
        assert "teamstore keys migrate` again" in said
