"""Keys of the local key file that the database does not record (after a restore: a backup restored over a
rotation is in ``test_backups``), on SQLite and a real Postgres: ``keys status`` warns of each, ``keys retire``
destroys each once it is ``TEAMSTORE_KEY_RETIRE_DAYS`` old, never a newer one nor one it cannot date."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.db.identity import database_id
from teamstore.db.migrate import upgrade
from teamstore.errors import KeyFileInDoubt, StoreUnavailable
from teamstore.keys import KeyService, rotation
from teamstore.keys.kek import LocalKeyFile
from teamstore.keys.rotation import retire, rotate
from teamstore.keys.status import status
from teamstore.settings import Settings
from tests.disk_calls import DiskCalls, record_disk_calls
from tests.keys.key_file import made_days_ago


def _key_file() -> LocalKeyFile:
    return LocalKeyFile(Settings().resolved_key_file)


def _edit(change: dict[str, object]) -> None:
    """Change the key file's document at the top level (mode kept: the file is written in place)."""
    path = Settings().resolved_key_file
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))


async def test_a_key_a_rotation_has_made_but_not_yet_recorded_is_kept_whatever_the_retirement_period(
    engine: AsyncEngine
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    made = _key_file().create(await database_id(engine))  # a rotation's new key, a moment before it records it
    shown = (await status(keys, Settings()))["unrecorded"]
    assert [u["kek_id"] for u in shown] == [made] and shown[0]["made_at"] > datetime.now(UTC) - timedelta(minutes=1)
    done = await retire(keys, retire_days=0)
    assert done.unrecorded_destroyed == [] and [u.kek_id for u in done.unrecorded_kept] == [made]
    assert made in _key_file().made(), "its material is still there"


async def test_an_undated_key_from_before_the_file_kept_dates_is_dated_by_retire_and_kept(
    engine: AsyncEngine
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    blob = await keys.seal("alice", b"words", "memory/facts")
    made = _key_file().create(await database_id(engine))
    _edit({"made": {}})  # the file as a version before dates wrote it
    shown = (await status(keys, Settings()))["unrecorded"]
    assert shown == [{"kek_id": made, "made_at": None, "destroy_after": None, "made_here": True}]
    done = await retire(keys, retire_days=0)
    assert done.unrecorded_destroyed == [] and [u.kek_id for u in done.unrecorded_kept] == [made]
    dated = _key_file().made()
    assert all(made.at is not None and made.at > datetime.now(UTC) - timedelta(minutes=1) for made in dated.values())
    assert (await retire(keys, retire_days=0)).unrecorded_destroyed == [], "it waits from when it was dated"
    assert await KeyService.from_settings(engine, Settings()).open("alice", blob, "memory/facts") == b"words"


async def test_a_database_that_records_no_key_yet_leaves_the_key_file_alone(engine: AsyncEngine) -> None:
    keys = KeyService.from_settings(engine, Settings())
    only = _key_file().first()  # restored from before its first user: its first key is the file's only one
    made_days_ago(only, 30)
    assert (await status(keys, Settings()))["unrecorded"] == []
    assert (await retire(keys, retire_days=0)).unrecorded_destroyed == []
    assert await keys.current_kek() == only


async def _sealed_and_an_unrecorded_key() -> str:
    engine = create_engine(Settings().resolved_database_url)
    await KeyService.from_settings(engine, Settings()).seal("alice", b"words", "memory/facts")
    made = _key_file().create(await database_id(engine))
    await engine.dispose()
    return made


def test_keys_status_warns_of_an_unrecorded_key_and_keys_retire_destroys_it_once_due(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    made = asyncio.run(_sealed_and_an_unrecorded_key())
    shown = runner.invoke(app, ["keys", "status"])
    said = " ".join(shown.stdout.split())
    assert shown.exit_code == 0, shown.output
    assert f"the key file holds {made}" in said and "which this database does not record" in said
    assert "The daily `teamstore keys retire` destroys it from" in said and "If another database uses" in said
    assert json.loads(runner.invoke(app, ["keys", "retire", "--json"]).stdout)["unrecorded_destroyed"] == []

    made_days_ago(made, 8)
    retired = runner.invoke(app, ["keys", "retire"])
    assert retired.exit_code == 0 and made in retired.stdout, retired.output
    assert "does not record" in " ".join(retired.stdout.split())
    assert made not in _key_file().made()
    assert json.loads(runner.invoke(app, ["keys", "status", "--json"]).stdout)["unrecorded"] == []
    assert "does not record" not in runner.invoke(app, ["keys", "status"]).stdout


async def test_a_key_another_database_sharing_the_file_made_is_never_destroyed_and_status_says_whose_it_is(
    engine: AsyncEngine
) -> None:
    # A second home pointed at this key file rotated: its keys are unrecorded here, and this database's retire
    # destroyed them a week later, the other database's current key with them.
    keys = KeyService.from_settings(engine, Settings())
    blob = await keys.seal("alice", b"words", "memory/facts")
    theirs = _key_file().create("0" * 32)  # another database's rotation
    unmarked = _key_file().create()  # a key no rotation marked (made before the file kept makers)
    for kek_id in (theirs, unmarked):
        made_days_ago(kek_id, 400)
    shown = {u["kek_id"]: u for u in (await status(keys, Settings()))["unrecorded"]}
    assert {k: (u["made_here"], u["destroy_after"]) for k, u in shown.items()} == {
        theirs: (False, None), unmarked: (False, None)}
    done = await retire(keys, retire_days=0)
    assert done.unrecorded_destroyed == [] and {u.kek_id for u in done.unrecorded_kept} == {theirs, unmarked}
    assert {theirs, unmarked} <= set(_key_file().made())
    assert await KeyService.from_settings(engine, Settings()).open("alice", blob, "memory/facts") == b"words"


def test_keys_status_says_a_key_another_database_made_is_never_destroyed_and_what_to_do(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    asyncio.run(_sealed_and_an_unrecorded_key())
    theirs = _key_file().create("f" * 32)
    said = " ".join(runner.invoke(app, ["keys", "status"]).stdout.split())
    assert f"the key file holds {theirs}" in said and "which this database neither records nor made" in said
    assert "`teamstore keys retire` never destroys it" in said and "Give each database a key file of its own" in said
    made_days_ago(theirs, 30)
    retired = " ".join(runner.invoke(app, ["keys", "retire"]).stdout.split())
    assert f"the key file's {theirs}, which this database neither records nor made, is kept" in retired
    assert theirs in _key_file().made()


async def test_a_database_keeps_its_id_and_another_database_has_its_own(engine: AsyncEngine, tmp_path: Path) -> None:
    ours = await database_id(engine)
    assert ours == await database_id(engine) and len(ours) == 32
    other = create_engine(f"sqlite:///{(tmp_path / 'other.db').as_posix()}")
    await upgrade(other)
    try:
        assert await database_id(other) not in {ours, ""}
        async with other.begin() as conn:  # a database whose id went (deleted by hand) is given a new one, once
            await conn.execute(text("DELETE FROM ts_store_settings WHERE name = 'database_id'"))
        again = await database_id(other)
        assert len(again) == 32 and again == await database_id(other)
    finally:
        await other.dispose()


def _failing_from_now(calls: DiskCalls) -> Path:
    """Make every later flush of the key file's folder fail (EIO), as a failing disk does; the folder."""
    folder = Settings().resolved_key_file.resolve().parent
    calls.fail_flush_of(folder)
    return folder


async def test_a_retire_whose_destroy_of_an_unrecorded_key_went_unflushed_flushes_the_key_file_when_run_again(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The key is gone from the file, so no rerun finds it to destroy again; a power loss could still bring it back.
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    made = _key_file().create(await database_id(engine))
    made_days_ago(made, 30)
    calls = record_disk_calls(monkeypatch)
    key_file, destroy = keys.ring.key_file, keys.ring.key_file.destroy

    def destroy_on_a_failing_disk(kek_id: str) -> None:
        _failing_from_now(calls)
        destroy(kek_id)

    monkeypatch.setattr(key_file, "destroy", destroy_on_a_failing_disk)
    with pytest.raises(KeyFileInDoubt):
        await retire(keys, retire_days=0)
    assert made not in _key_file().made()
    calls.failing.clear()
    calls.calls.clear()
    assert (await retire(keys, retire_days=0)).unrecorded_destroyed == []
    assert Settings().resolved_key_file.resolve().parent in calls.flushed()


async def test_a_rotations_key_removed_again_but_not_flushed_is_said_so_not_as_an_entry_kept(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    current = await keys.current_kek()
    calls = record_disk_calls(monkeypatch)

    async def refused(*_args: Any) -> bool:  # the database refuses the new key; the disk fails from then on
        _failing_from_now(calls)
        raise StoreUnavailable("the database refused to record the new key-encryption key", hint="check it")

    monkeypatch.setattr(rotation, "_make_current", refused)
    with pytest.raises(StoreUnavailable) as caught:
        await rotate(keys, retire_days=7)
    said = caught.value.message
    assert "was removed from the key file again, but its folder could not be flushed" in said
    assert "keeps an unused entry" not in said  # it does not: a power loss may bring one back
    assert list(_key_file().made()) == [current]
    calls.failing.clear()
    calls.calls.clear()
    await retire(keys, retire_days=7)
    assert Settings().resolved_key_file.resolve().parent in calls.flushed()
