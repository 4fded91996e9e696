"""``teamstore keys rotate`` and ``retire`` on SQLite and a real Postgres, with the key file and with KMS: every
live data key re-wrapped, a rotation cut short by KMS resumed by a rerun, a user erased meanwhile left erased,
a damaged row reported and its old key-encryption key kept."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from sqlalchemy import event, select
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.erasure import DeletionCoordinator, ErasureSettings
from teamstore.errors import ConfigurationError, KeyDestroyed, KeyUnavailable
from teamstore.keys import KeyService, rotation
from teamstore.keys.rotation import RotationReport, retire, rotate
from teamstore.keys.schema import data_keys, key_encryption_keys
from teamstore.keys.status import backups_unreadable_by, status
from teamstore.settings import Settings
from tests.conftest import ctrl_c_after_its_first_line
from tests.keys.damaged import damage_wrapped_key
from tests.keys.outage import Outage

USERS = ("alice", "bob", "carol")


async def _sealed_for_all(keys: KeyService) -> dict[str, bytes]:
    return {user: await keys.seal(user, f"{user}'s words".encode(), "memory/facts") for user in USERS}


async def _keks(engine: AsyncEngine) -> dict[str, str]:
    async with engine.connect() as conn:
        return {r.user_id: r.kek_id for r in (await conn.execute(select(data_keys))).all()}


async def test_a_rotation_rewraps_every_live_key_and_retires_the_old_key_encryption_key(
    keys: KeyService, engine: AsyncEngine, kek: str
) -> None:
    sealed = await _sealed_for_all(keys)
    first = await keys.current_kek()
    report = await rotate(keys, retire_days=7)
    assert report.created and report.rewrapped == 3 and report.destroyed == [] and report.kek_id.startswith(f"{kek}:")
    assert set((await _keks(engine)).values()) == {report.kek_id}
    fresh = KeyService.from_settings(engine, Settings())
    for user, blob in sealed.items():
        assert await fresh.open(user, blob, "memory/facts") == f"{user}'s words".encode()
    keks = {k["kek_id"]: k for k in (await status(keys, Settings()))["keks"]}
    assert keks[first]["state"] == "retired" and keks[first]["data_keys"] == 0
    assert keks[first]["destroy_after"] > datetime.now(UTC) + timedelta(days=6)
    assert keks[report.kek_id]["state"] == "current" and keks[report.kek_id]["data_keys"] == 3


@pytest.mark.s3
async def test_a_rotation_kms_cut_short_is_finished_by_running_it_again(
    engine: AsyncEngine, kms_outage: Outage
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    sealed = await _sealed_for_all(keys)
    batches = 0

    async def outage_after_the_first_batch() -> None:
        nonlocal batches
        batches += 1
        kms_outage.down = batches > 1

    with pytest.raises(KeyUnavailable, match="stopped after re-wrapping 1") as info:
        await rotate(keys, retire_days=0, batch=1, on_batch=outage_after_the_first_batch)
    assert "run `teamstore keys rotate` again" in (info.value.hint or "")
    kms_outage.down = False
    resumed = await rotate(keys, retire_days=0, batch=1)
    assert not resumed.created and resumed.rewrapped == 2 and len(resumed.destroyed) == 1
    assert set((await _keks(engine)).values()) == {resumed.kek_id}
    for user, blob in sealed.items():
        assert await KeyService.from_settings(engine, Settings()).open(user, blob, "memory/facts")


@pytest.mark.s3
async def test_a_rotation_kms_cut_short_inside_a_batch_keeps_the_keys_re_wrapped_before_it(
    engine: AsyncEngine, kms_outage: Outage
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    sealed = await _sealed_for_all(keys)
    first = await keys.current_kek()

    async def outage_after_the_first_key() -> None:
        kms_outage.answers = 2  # alice's Decrypt and Encrypt

    with pytest.raises(KeyUnavailable, match="stopped after re-wrapping 1 "):
        await rotate(keys, retire_days=0, on_batch=outage_after_the_first_key)
    (new,) = set((await _keks(engine)).values()) - {first}
    assert await _keks(engine) == {"alice": new, "bob": first, "carol": first}, "alice's key was stored"
    kms_outage.answers, kms_outage.down = None, False
    resumed = await rotate(keys, retire_days=0)
    assert not resumed.created and resumed.rewrapped == 2 and set((await _keks(engine)).values()) == {new}
    for user, blob in sealed.items():
        assert await KeyService.from_settings(engine, Settings()).open(user, blob, "memory/facts")


async def test_a_rotation_with_the_key_file_missing_makes_no_new_file_and_changes_nothing(
    engine: AsyncEngine
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await _sealed_for_all(keys)
    first, path = await keys.current_kek(), Settings().resolved_key_file
    kept = path.read_bytes()
    path.unlink()
    with pytest.raises(KeyUnavailable, match="missing"):
        await rotate(KeyService.from_settings(engine, Settings()), retire_days=7)
    assert not path.exists(), "a new file would be overwritten by the lost one's backup, and its keys lost with it"
    states = {k["kek_id"]: k["state"] for k in (await status(keys, Settings()))["keks"]}
    assert states == {first: "current"} and set((await _keks(engine)).values()) == {first}
    path.write_bytes(kept)  # restored from its backup: the rotation runs
    path.chmod(0o600)
    assert (await rotate(KeyService.from_settings(engine, Settings()), retire_days=7)).rewrapped == 3


_watched: list[str] = []
_opened: list[str] = []
_hooked: list[bool] = []


def _count_opens(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _watched and args and isinstance(args[0], str | Path) and os.fspath(args[0]) in _watched:
        _opened.append(os.fspath(args[0]))


@contextmanager
def _opens_of(path: Path) -> Iterator[list[str]]:
    """Every open of ``path`` meanwhile, from any thread (an audit hook: one can never be removed, so a single
    hook is added, and counts only while a test watches)."""
    if not _hooked:
        sys.addaudithook(_count_opens)
        _hooked.append(True)
    _opened.clear()
    _watched[:] = [os.fspath(path)]
    try:
        yield _opened
    finally:
        _watched.clear()


async def test_a_rotation_reads_the_key_file_a_few_times_not_once_or_twice_per_data_key(
    engine: AsyncEngine
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    for n in range(40):
        await keys.seal(f"user-{n}", b"words", "memory/facts")
    with _opens_of(Settings().resolved_key_file) as opened:
        report = await rotate(KeyService.from_settings(engine, Settings()), retire_days=7, batch=10)
    assert report.rewrapped == 40
    assert len(opened) <= 4, f"the key file was read {len(opened)} times to re-wrap 40 data keys"


@pytest.mark.parametrize("change", ["removed", "restored from a backup older than the rotation", "made readable"])
async def test_a_key_file_changed_mid_rotation_stops_it_and_a_rerun_finishes_it(
    engine: AsyncEngine, change: str
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    sealed = await _sealed_for_all(keys)
    path = Settings().resolved_key_file
    before, kept, batches = path.read_bytes(), list[bytes](), 0

    async def change_after_the_first_batch() -> None:
        nonlocal batches
        batches += 1
        if batches == 2:
            kept.append(path.read_bytes())
            if change == "removed":
                path.unlink()
            elif change == "made readable":
                path.chmod(0o644)
            else:
                path.write_bytes(before)  # the new key-encryption key, current now, is not in it

    with pytest.raises(KeyUnavailable if change != "made readable" else ConfigurationError) as info:
        await rotate(KeyService.from_settings(engine, Settings()), retire_days=7, batch=1,
                     on_batch=change_after_the_first_batch)
    if change != "made readable":
        assert "stopped after re-wrapping 1 " in info.value.message, "no data key moved under a key it lacks"
    path.write_bytes(kept[0])
    path.chmod(0o600)
    resumed = await rotate(KeyService.from_settings(engine, Settings()), retire_days=7)
    assert not resumed.created and resumed.rewrapped == 2
    for user, blob in sealed.items():
        assert await KeyService.from_settings(engine, Settings()).open(user, blob, "memory/facts")


async def test_a_rotation_that_could_not_begin_does_not_say_one_stopped_half_way(engine: AsyncEngine) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await _sealed_for_all(keys)
    Settings().resolved_key_file.unlink()
    with pytest.raises(KeyUnavailable, match="missing") as info:
        await rotate(KeyService.from_settings(engine, Settings()), retire_days=7)
    assert "stopped" not in info.value.message and "finishes this rotation" not in (info.value.hint or "")


async def test_a_rotation_with_another_key_file_than_the_databases_changes_neither(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await _sealed_for_all(keys)
    first = await keys.current_kek()
    monkeypatch.setenv("TEAMSTORE_KEY_FILE", str(tmp_path / "other.json"))
    other = KeyService.from_settings(engine, Settings())
    other.ring.key_file.first()  # a file of its own, another key in it
    before = (tmp_path / "other.json").read_bytes()
    with pytest.raises(KeyUnavailable, match="holds no key-encryption key"):
        await rotate(other, retire_days=7)
    assert (tmp_path / "other.json").read_bytes() == before
    states = {k["kek_id"]: k["state"] for k in (await status(keys, Settings()))["keks"]}
    assert states == {first: "current"} and set((await _keks(engine)).values()) == {first}


async def test_a_retire_with_another_key_file_than_the_databases_destroys_nothing_and_says_so(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await _sealed_for_all(keys)
    first, path = await keys.current_kek(), Settings().resolved_key_file
    await rotate(keys, retire_days=7)
    monkeypatch.setenv("TEAMSTORE_KEY_FILE", str(tmp_path / "other.json"))
    other = KeyService.from_settings(engine, Settings())
    other.ring.key_file.first()  # a file of its own, another key in it
    with pytest.raises(KeyUnavailable, match="holds no key-encryption key"):
        await retire(other, now=datetime.now(UTC) + timedelta(days=8))
    assert first in json.loads(path.read_text())["keys"], "the retired key's material is still in its file"
    states = {k["kek_id"]: k["state"] for k in (await status(keys, Settings()))["keks"]}
    assert states[first] == "retired", "not recorded as destroyed while its material lives on"
    monkeypatch.delenv("TEAMSTORE_KEY_FILE")
    assert (await retire(keys, now=datetime.now(UTC) + timedelta(days=8))).destroyed == [first]
    assert first not in json.loads(path.read_text())["keys"]


async def test_a_key_file_kept_elsewhere_behind_a_symlink_gets_the_new_key_itself(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await _sealed_for_all(keys)
    path, kept = Settings().resolved_key_file, tmp_path / "backed-up" / "kek.json"
    kept.parent.mkdir(mode=0o700)
    path.rename(kept)
    path.symlink_to(kept)
    report = await rotate(KeyService.from_settings(engine, Settings()), retire_days=7)
    assert path.is_symlink(), "the link is kept"
    assert report.kek_id in json.loads(kept.read_text())["keys"], "the file backed up holds the key now current"


async def test_a_user_erased_while_a_rotation_runs_stays_erased(
    keys: KeyService, engine: AsyncEngine, tmp_path: Path
) -> None:
    sealed = await _sealed_for_all(keys)
    coordinator = DeletionCoordinator(engine, LocalTranscriptStore(tmp_path / "t"), Settings(),
                                      knobs=ErasureSettings(fence_grace_seconds=0))

    async def erase_bob_meanwhile() -> None:
        if "bob" in await _keks(engine):
            assert (await coordinator.run("bob", request_id="req-881")).ok

    report = await rotate(keys, retire_days=0, on_batch=erase_bob_meanwhile)
    assert (report.rewrapped, report.gone) == (2, 1) and len(report.destroyed) == 1
    assert set(await _keks(engine)) == {"alice", "carol"}, "no rotation brings an erased key back"
    fresh = KeyService.from_settings(engine, Settings())
    assert await fresh.open("alice", sealed["alice"], "memory/facts") == b"alice's words"
    with pytest.raises(KeyDestroyed):
        await fresh.open("bob", sealed["bob"], "memory/facts")


async def test_a_damaged_key_row_is_reported_and_keeps_its_key_encryption_key_alive(
    keys: KeyService, engine: AsyncEngine
) -> None:
    await _sealed_for_all(keys)
    first = await keys.current_kek()
    damaged = await damage_wrapped_key(engine, "bob")
    report = await rotate(keys, retire_days=0)
    assert report.damaged == [damaged] and report.rewrapped == 2 and report.destroyed == []
    async with engine.connect() as conn:
        kept = (await conn.execute(select(key_encryption_keys).where(key_encryption_keys.c.kek_id == first))).one()
    assert kept.retired_at is not None and kept.destroyed_at is None, "bob's key may still be restored"
    again = await rotate(keys, retire_days=0)
    assert again.created and again.kek_id != report.kek_id, "the damaged row holds back no later rotation"
    assert again.damaged == [damaged] and again.rewrapped == 2
    assert set((await _keks(engine)).values()) == {first, again.kek_id}


async def test_retire_names_a_due_key_encryption_key_a_damaged_row_keeps_alive(
    keys: KeyService, engine: AsyncEngine
) -> None:
    await _sealed_for_all(keys)
    first = await keys.current_kek()
    await damage_wrapped_key(engine, "bob")
    await rotate(keys, retire_days=7)
    retired = await retire(keys, now=datetime.now(UTC) + timedelta(days=8))
    assert retired.destroyed == [] and [(k["kek_id"], k["data_keys"]) for k in retired.kept] == [(first, 1)]
    assert retired.kept[0]["destroy_after"] < datetime.now(UTC) + timedelta(days=8)


async def test_no_date_bounds_backups_while_a_damaged_row_keeps_a_retired_kek_past_its_destroy_date(
    keys: KeyService, engine: AsyncEngine
) -> None:
    # alice's data key in a backup taken before the rotation is wrapped by the first KEK, which bob's damaged row
    # keeps alive: erased after the rotation, her words in that backup stay readable until the backup expires.
    settings = Settings(key_retire_days=0)
    await _sealed_for_all(keys)
    assert await backups_unreadable_by(engine, settings) is not None
    await damage_wrapped_key(engine, "bob")
    await rotate(keys, retire_days=0)
    assert await backups_unreadable_by(engine, settings) is None
    await retire(keys)  # keeps it, as long as bob's row names it
    assert await backups_unreadable_by(engine, settings) is None
    async with engine.begin() as conn:  # bob's row goes (erased, or restored and rotated on)
        await conn.execute(data_keys.delete().where(data_keys.c.user_id == "bob"))
    assert await backups_unreadable_by(engine, settings) is not None


async def test_a_rotation_begun_while_another_makes_its_key_current_joins_that_one(
    keys: KeyService, engine: AsyncEngine
) -> None:
    sealed = await _sealed_for_all(keys)
    first, loop = await keys.current_kek(), asyncio.get_running_loop()
    late = KeyService.from_settings(engine, Settings())
    create, other = late.ring.create, {}

    def another_rotation_first(to: str | None, like: str, made_by: str | None = None) -> str:
        # Both read `first` as current; the other one makes its key current before this one does.
        other["report"] = asyncio.run_coroutine_threadsafe(rotate(keys, retire_days=7), loop).result()
        return create(to, like, made_by)

    late.ring.create = another_rotation_first  # type: ignore[method-assign]
    joined = await rotate(late, retire_days=7)
    assert other["report"].created and not joined.created and joined.kek_id == other["report"].kek_id
    states = {k["kek_id"]: k["state"] for k in (await status(keys, Settings()))["keks"]}
    assert states == {first: "retired", joined.kek_id: "current"}, "one rotation, one new key-encryption key"
    assert set((await _keks(engine)).values()) == {joined.kek_id}
    for user, blob in sealed.items():
        assert await KeyService.from_settings(engine, Settings()).open(user, blob, "memory/facts")


async def test_keys_another_rotation_moved_meanwhile_are_not_reported_as_erased(
    keys: KeyService, engine: AsyncEngine
) -> None:
    await _sealed_for_all(keys)
    other: dict[str, RotationReport] = {}

    async def another_rotation_meanwhile() -> None:
        if not other:
            other["report"] = await rotate(KeyService.from_settings(engine, Settings()), retire_days=7)

    report = await rotate(keys, retire_days=7, batch=1, on_batch=another_rotation_meanwhile)
    assert not other["report"].created and other["report"].rewrapped == 3, "the other one finished this rotation"
    assert report.created and (report.rewrapped, report.gone) == (0, 0), "no user was erased meanwhile"
    assert set((await _keks(engine)).values()) == {report.kek_id}


async def _seal_once() -> None:
    engine = create_engine(Settings().resolved_database_url)
    await KeyService.from_settings(engine, Settings()).seal("alice", b"words", "memory/facts")
    await engine.dispose()


def test_the_keys_commands_show_rotate_and_retire(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    asyncio.run(_seal_once())
    shown = json.loads(runner.invoke(app, ["keys", "status", "--json"]).stdout)
    assert [k["state"] for k in shown["keks"]] == ["current"] and not shown["overdue"]
    monkeypatch.setenv("TEAMSTORE_KEY_RETIRE_DAYS", "0")
    rotated = runner.invoke(app, ["keys", "rotate", "--json"])
    assert rotated.exit_code == 0, rotated.stdout
    assert json.loads(rotated.stdout)["rewrapped"] == 1 and len(json.loads(rotated.stdout)["destroyed"]) == 1
    assert json.loads(runner.invoke(app, ["keys", "retire", "--json"]).stdout) == {
        "destroyed": [], "already_deleted": [], "kept_past_destroy": [], "next_destroy_after": None,
        "unrecorded_destroyed": [], "unrecorded_kept": [], "refused": []}
    states = sorted(k["state"] for k in json.loads(runner.invoke(app, ["keys", "status", "--json"]).stdout)["keks"])
    assert states == ["current", "destroyed"]


@pytest.mark.s3
async def test_kms_key_id_naming_a_retired_and_destroyed_key_still_serves_new_users(
    engine: AsyncEngine, kms_key: str
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    report = await rotate(keys, retire_days=0)
    assert report.created and len(report.destroyed) == 1, "TEAMSTORE_KMS_KEY_ID's key is destroyed"
    fresh = KeyService.from_settings(engine, Settings())  # a worker started since, the variable as deployed
    blob = await fresh.seal("bob", b"his words", "memory/facts")
    assert await fresh.open("bob", blob, "memory/facts") == b"his words"
    assert (await rotate(fresh, retire_days=0)).created
    # Once its window ends KMS deletes the key, and the alias the variable may name with it.
    gone = KeyService.from_settings(engine, Settings(kms_key_id="alias/deleted-with-its-key"))
    assert await gone.open("bob", await gone.seal("bob", b"more", "memory/facts"), "memory/facts") == b"more"


@pytest.mark.s3
async def test_a_rotation_to_the_kms_key_the_deployment_already_names_moves_the_database_to_it(
    engine: AsyncEngine, s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sealed = await _sealed_for_all(KeyService.from_settings(engine, Settings()))  # under the key file
    target = boto3.client("kms").create_key(Description="moved to")["KeyMetadata"]["Arn"]
    other = boto3.client("kms").create_key(Description="never used")["KeyMetadata"]["Arn"]
    monkeypatch.setenv("TEAMSTORE_KMS_KEY_ID", other)
    with pytest.raises(ConfigurationError, match="never used"):
        await rotate(KeyService.from_settings(engine, Settings()), to=target, retire_days=7)
    monkeypatch.setenv("TEAMSTORE_KMS_KEY_ID", target)  # set first, as the refusal of workers says to go on
    report = await rotate(KeyService.from_settings(engine, Settings()), to=target, retire_days=7)
    assert report.created and report.kek_id == f"kms:{target}" and report.rewrapped == 3
    assert set((await _keks(engine)).values()) == {report.kek_id}
    for user, blob in sealed.items():
        assert await KeyService.from_settings(engine, Settings()).open(user, blob, "memory/facts")


@pytest.mark.parametrize("to", ["", "  "])
def test_keys_rotate_to_an_empty_key_name_is_refused_before_anything_is_touched(to: str) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    refused = runner.invoke(app, ["keys", "rotate", "--to", to])
    assert refused.exit_code == 1 and "--to names no KMS key" in refused.stderr, refused.output
    assert not Settings().resolved_key_file.exists(), "no first key-encryption key made on the way"
    assert json.loads(runner.invoke(app, ["keys", "status", "--json"]).stdout)["keks"] == []


def test_keys_status_on_a_database_with_no_keys_yet_says_so() -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    shown = runner.invoke(app, ["keys", "status"])
    assert shown.exit_code == 0 and "no key-encryption key yet" in " ".join(shown.stdout.split()), shown.output
    assert "state" not in shown.stdout, "no empty table"


class _Killed(Exception):
    """The rotation's process killed half-way."""


async def _rotation_killed_after_one_key() -> str:
    engine = create_engine(Settings().resolved_database_url)
    keys = KeyService.from_settings(engine, Settings())
    await _sealed_for_all(keys)
    first, batches = await keys.current_kek(), 0

    async def killed_after_the_first_batch() -> None:
        nonlocal batches
        batches += 1
        if batches > 1:
            raise _Killed

    with pytest.raises(_Killed):
        await rotate(keys, retire_days=7, batch=1, on_batch=killed_after_the_first_batch)
    await engine.dispose()
    return first


def test_keys_status_says_a_rotation_is_unfinished_and_that_keys_rotate_finishes_it(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    first = asyncio.run(_rotation_killed_after_one_key())
    shown = json.loads(runner.invoke(app, ["keys", "status", "--json"]).stdout)
    assert shown["rotation_unfinished"] == {"data_keys": 2, "kek_ids": [first], "rerun": "teamstore keys rotate"}
    assert shown["kept_past_destroy"] == []
    said = " ".join(runner.invoke(app, ["keys", "status"]).stdout.split())
    assert "2 data key row(s) are still under retired key-encryption key(s)" in said
    assert "a rotation is unfinished" in said and "Run `teamstore keys rotate`: it finishes it" in said
    finished = runner.invoke(app, ["keys", "rotate", "--json"])
    assert finished.exit_code == 0 and not json.loads(finished.stdout)["created"], finished.output
    assert json.loads(runner.invoke(app, ["keys", "status", "--json"]).stdout)["rotation_unfinished"] is None
    assert "unfinished" not in runner.invoke(app, ["keys", "status"]).stdout


def test_keys_retire_before_the_retirement_period_is_over_says_when_the_next_key_becomes_due(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    asyncio.run(_seal_once())
    assert runner.invoke(app, ["keys", "rotate"]).exit_code == 0  # the first key retired for 7 days
    (retired,) = [k for k in json.loads(runner.invoke(app, ["keys", "status", "--json"]).stdout)["keks"]
                  if k["state"] == "retired"]
    shown = runner.invoke(app, ["keys", "retire", "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["destroyed"] == []
    assert json.loads(shown.stdout)["next_destroy_after"] == retired["destroy_after"]
    said = " ".join(runner.invoke(app, ["keys", "retire"]).stdout.split())
    due = datetime.fromisoformat(retired["destroy_after"]).astimezone(UTC)
    assert f"the next retired key becomes due for destruction on {due:%Y-%m-%d %H:%M} UTC" in said, said


async def _damage_bob() -> None:
    engine = create_engine(Settings().resolved_database_url)
    keys = KeyService.from_settings(engine, Settings())
    for user in ("alice", "bob"):
        await keys.seal(user, b"words", "memory/facts")
    await damage_wrapped_key(engine, "bob")
    await engine.dispose()


def test_keys_status_warns_of_a_kek_past_its_destroy_date_that_a_damaged_row_keeps_alive(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    asyncio.run(_damage_bob())
    monkeypatch.setenv("TEAMSTORE_KEY_RETIRE_DAYS", "0")
    assert runner.invoke(app, ["keys", "rotate"]).exit_code == 0
    shown = json.loads(runner.invoke(app, ["keys", "status", "--json"]).stdout)
    first = next(k["kek_id"] for k in shown["keks"] if k["state"] == "retired")
    assert [(k["kek_id"], k["data_keys"]) for k in shown["kept_past_destroy"]] == [(first, 1)]
    said = " ".join(runner.invoke(app, ["keys", "status"]).stdout.split())
    assert "past its destroy date" in said and "1 data key row(s)" in said
    assert "`teamstore keys retire`" in said and "restore" in said
    # A backup from before the rotation holds every key it wrapped: no date bounds it while the KEK is kept.
    assert shown["backups_unreadable_by"] is None
    assert "stays readable for a user erased now until it expires" in said


@pytest.mark.parametrize("as_json", [False, True])
def test_keys_retire_keeping_a_due_kek_says_so_and_exits_partly_done(
    monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    asyncio.run(_damage_bob())
    monkeypatch.setenv("TEAMSTORE_KEY_RETIRE_DAYS", "0")
    assert runner.invoke(app, ["keys", "rotate"]).exit_code == 0
    retired = runner.invoke(app, ["keys", "retire", *(["--json"] if as_json else [])])
    assert retired.exit_code == 2, retired.output
    if as_json:
        shown = json.loads(retired.stdout)
        assert shown["destroyed"] == [] and [k["data_keys"] for k in shown["kept_past_destroy"]] == [1]
    else:
        said = " ".join(retired.stdout.split())
        assert "destroyed 0 retired key-encryption key(s)" in said
        assert "past its destroy date" in said and "1 data key row(s)" in said and "restore" in said


async def _sealed_for_all_here() -> str:
    """Every user's data key made, under the key-encryption key the environment names; that KEK."""
    engine = create_engine(Settings().resolved_database_url)
    keys = KeyService.from_settings(engine, Settings())
    await _sealed_for_all(keys)
    first = await keys.current_kek()
    await engine.dispose()
    return first


def _kek_states() -> dict[str, str]:
    shown = json.loads(CliRunner().invoke(app, ["keys", "status", "--json"]).stdout)
    return {k["kek_id"]: k["state"] for k in shown["keks"]}


def test_keys_rotate_stopped_by_ctrl_c_says_what_it_re_wrapped_exits_130_and_a_rerun_resumes_it(
    kek: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    first = asyncio.run(_sealed_for_all_here())
    _batches_of(1, monkeypatch)
    real, moved = rotation._rewrap_batch, []

    async def ctrl_c_after_one(*args: Any) -> None:
        if moved:
            raise KeyboardInterrupt
        moved.append(await real(*args))

    monkeypatch.setattr(rotation, "_rewrap_batch", ctrl_c_after_one)
    stopped = runner.invoke(app, ["keys", "rotate", "--json"])
    said = " ".join(stopped.stderr.split())
    assert stopped.exit_code == 130 and stopped.stdout == "", stopped.output
    (new,) = set(_kek_states()) - {first}
    assert f"interrupted: the rotation to {new} is unfinished: 1 data key(s) were re-wrapped" in said, said
    assert "run `teamstore keys rotate` again: it resumes this rotation" in said
    assert json.loads(runner.invoke(app, ["keys", "status", "--json"]).stdout)["rotation_unfinished"]["data_keys"] == 2

    monkeypatch.setattr(rotation, "_rewrap_batch", real)
    resumed = runner.invoke(app, ["keys", "rotate", "--json"])
    assert resumed.exit_code == 0, resumed.output
    done = json.loads(resumed.stdout)
    assert (done["kek_id"], done["created"], done["rewrapped"]) == (new, False, 2)
    assert _kek_states() == {first: "retired", new: "current"}  # resumed: no third key made


def _batches_of(size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``keys rotate`` read (and re-wrap) ``size`` data keys at a time."""
    real = rotation._batch

    async def batch(engine: AsyncEngine, current: str, after: str, _size: int) -> Any:
        return await real(engine, current, after, size)

    monkeypatch.setattr(rotation, "_batch", batch)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_keys_rotate_stopped_by_ctrl_c_sigterm_or_sighup_while_a_batch_commits_counts_that_batch_as_re_wrapped(
    monkeypatch: pytest.MonkeyPatch, signum: signal.Signals
) -> None:
    """SIGTERM (a scheduled job cancelled) and SIGHUP (the ssh session dropped) stop it as Ctrl-C does: the batch
    under way is stored and counted, and the exit status is 128 + the signal."""
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    first = asyncio.run(_sealed_for_all_here())
    _batches_of(2, monkeypatch)
    real, commits = rotation._store, []

    async def ctrl_c_at_the_commit(engine: AsyncEngine, *args: Any) -> tuple[int, int]:
        def ctrl_c(_conn: Any) -> None:
            if not commits:
                commits.append(True)
                signal.raise_signal(signum)  # as a terminal's Ctrl-C: asyncio.run cancels the rotation

        event.listen(engine.sync_engine, "commit", ctrl_c)
        try:
            return await real(engine, *args)
        finally:
            event.remove(engine.sync_engine, "commit", ctrl_c)

    monkeypatch.setattr(rotation, "_store", ctrl_c_at_the_commit)
    # Python's own SIGINT handler, which asyncio.run replaces with one cancelling the rotation: a test run
    # started in the background by a shell inherits SIGINT ignored, and the signal would then do nothing.
    # SIGTERM or SIGHUP left to the test's own handler fails the command, rather than end the test run.
    previous = {s: signal.signal(s, _unhandled) for s in (signal.SIGTERM, signal.SIGHUP)}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        stopped = runner.invoke(app, ["keys", "rotate", "--json"])
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    said = " ".join(stopped.stderr.split())
    assert stopped.exit_code == 128 + signum and commits, stopped.output
    (new,) = set(_kek_states()) - {first}
    assert f"interrupted: the rotation to {new} is unfinished: 2 data key(s) were re-wrapped" in said, said
    assert json.loads(runner.invoke(app, ["keys", "status", "--json"]).stdout)["rotation_unfinished"]["data_keys"] == 1


def test_a_ctrl_c_as_keys_rotate_returns_says_the_rotation_is_done_and_exits_0(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    asyncio.run(_sealed_for_all_here())
    real = rotation.rotate

    async def ctrl_c_as_it_returns(*args: Any, **kwargs: Any) -> RotationReport:
        report = await real(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # as a terminal's: asyncio.run cancels what the command does next
        return report

    monkeypatch.setattr(rotation, "rotate", ctrl_c_as_it_returns)
    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)  # as above: never inherited ignored
    try:
        done = runner.invoke(app, ["keys", "rotate"], env={"COLUMNS": "300"})
    finally:
        signal.signal(signal.SIGINT, ignored)
    assert done.exit_code == 0, done.output
    assert "rotated to local:" in done.stdout and "3 data key(s) re-wrapped" in done.stdout
    assert "interrupted" not in done.stderr


def test_a_ctrl_c_once_keys_rotate_has_said_it_is_done_changes_neither_its_output_nor_its_status() -> None:
    assert CliRunner().invoke(app, ["db", "upgrade"]).exit_code == 0
    asyncio.run(_sealed_for_all_here())
    first, everything, status = ctrl_c_after_its_first_line("keys", "rotate")
    assert first.startswith("rotated to local:") and "3 data key(s) re-wrapped" in everything, everything
    assert status == 0, everything
    assert not any(word in everything for word in ("KeyboardInterrupt", "Traceback", "interrupted")), everything


def _unhandled(signum: int, _frame: object) -> None:
    raise RuntimeError(f"{signal.Signals(signum).name} was not handled by the command")


def test_keys_rotate_stopped_before_its_new_key_is_recorded_names_it_and_a_rerun_rotates_in_full(
    kek: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    first = asyncio.run(_sealed_for_all_here())
    made: list[str] = []

    async def ctrl_c_before_the_record(engine: AsyncEngine, current: str, kek_id: str, retire_days: int) -> bool:
        made.append(kek_id)
        raise KeyboardInterrupt

    real = rotation._make_current
    monkeypatch.setattr(rotation, "_make_current", ctrl_c_before_the_record)
    stopped = runner.invoke(app, ["keys", "rotate"])
    said = " ".join(stopped.stderr.split())
    assert stopped.exit_code == 130, stopped.output
    (unused,) = made
    assert f"stopped while recording its new key-encryption key {unused}: no data key was re-wrapped" in said, said
    assert f"if `teamstore keys status` shows {unused} as current it resumes this rotation, else it begins another" in said
    if kek == "kms":
        arn = unused.removeprefix("kms:")
        assert f"{arn} is then unused: schedule its deletion, `aws kms schedule-key-deletion --key-id {arn}" in said
        assert boto3.client("kms").describe_key(KeyId=arn)["KeyMetadata"]["KeyState"] == "Enabled"  # left for you
    else:
        assert "the key file may keep an unused entry made for this one, which `teamstore keys retire` destroys" in said
    assert _kek_states() == {first: "current"}

    monkeypatch.setattr(rotation, "_make_current", real)
    rotated = runner.invoke(app, ["keys", "rotate", "--json"])
    assert rotated.exit_code == 0, rotated.output
    done = json.loads(rotated.stdout)
    assert done["created"] and done["rewrapped"] == 3 and done["kek_id"] != unused
    assert _kek_states() == {first: "retired", done["kek_id"]: "current"}
