"""The rotation bound, proven on real backups: a copy of the SQLite files, and ``pg_dump`` of a real Postgres.

A backup taken before an erasure holds the erased user's rows, their states sealed under the user's data key,
and that key wrapped by the key-encryption key of the day. Restored before a rotation, it opens (what the
rotation is for); once ``keys rotate`` has re-wrapped the live keys under a new KEK and the old one is
retired and destroyed, the same backup's copy of the user's key opens no more, and neither does anything
sealed under it. Restored over a rotation, a database does not record the key that rotation made: ``keys
retire`` destroys it all the same once it is old enough, and the backups taken under it open no more."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore import examples
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.engine import create_engine
from teamstore.erasure import DeletionCoordinator, ErasureSettings
from teamstore.errors import KeyDestroyed
from teamstore.keys import KeyService
from teamstore.keys.rotation import retire, rotate
from teamstore.keys.schema import key_encryption_keys
from teamstore.keys.status import status
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from teamstore.state.envelope import sealed_bytes
from teamstore.state.schema import sessions
from teamstore.state.sealed import context
from tests.keys.backups import Backups
from tests.keys.key_file import made_days_ago

CANARY = "CANARY-zoe-backup-91c2"
Restore = Callable[[], str]


@pytest.fixture
def registry(registry_path: Path) -> Registry:
    """The example support team, labelled production."""
    reg = Registry(registry_path, create=True)
    reg.add("support_triage", examples.support_triage().dump_component(),
            examples.example_manifest("support_triage"), "v1", label="production")
    return reg


async def _users_talk(engine: AsyncEngine, registry: Registry) -> None:
    async with Platform(engine, registry, settings=Settings(auto_migrate=True)) as platform:
        for user in ("zoe", "bob"):
            async with platform.session(user, "s1", team="support_triage") as s:
                await s.run(f"{CANARY} my router drops" if user == "zoe" else "bob's router")


async def _zoes_state(url: str) -> bytes:
    """What a backup holds of zoe's session: the sealed bytes, read past teamstore."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            stored = await conn.scalar(select(sessions.c.state).where(sessions.c.user_id == "zoe"))
    finally:
        await engine.dispose()
    assert stored is not None and CANARY not in stored
    blob = sealed_bytes(stored)
    assert blob is not None
    return blob


async def _open_as_restored(url: str) -> bytes:
    """Open zoe's state from a restored backup, as teamstore (with this deployment's key file or KMS) would."""
    blob = await _zoes_state(url)
    engine = create_engine(url)
    try:
        return await KeyService.from_settings(engine, Settings()).open("zoe", blob, context("s1"))
    finally:
        await engine.dispose()


async def test_a_backup_taken_before_an_erasure_is_unreadable_for_the_erased_user_after_rotation(
    live: tuple[AsyncEngine, Backups], registry: Registry, tmp_path: Path
) -> None:
    engine, backups = live
    await _users_talk(engine, registry)
    backup = backups.take()

    coordinator = DeletionCoordinator(engine, LocalTranscriptStore(tmp_path / "transcripts"), Settings(),
                                      knobs=ErasureSettings(fence_grace_seconds=0))
    receipt = await coordinator.run("zoe", request_id="req-881")
    assert receipt.ok
    bound = next(r for r in receipt.remains_elsewhere if r.what == "database backups")
    assert bound.until <= datetime.now(UTC) + timedelta(days=Settings().key_rotation_days + Settings().key_retire_days + 1)

    # Before a rotation the erasure cannot reach the backup: restored, it still opens (what rotation closes).
    assert CANARY.encode() in await _open_as_restored(backups.restore(backup))

    keys = KeyService.from_settings(engine, Settings())
    report = await rotate(keys, retire_days=0)  # a retirement period of 0: the old KEK is destroyed at once
    assert report.created and report.rewrapped == 1 and len(report.destroyed) == 1

    with pytest.raises(KeyDestroyed):
        await _open_as_restored(backups.restore(backup))
    platform = Platform(engine, registry, settings=Settings())  # the live users go on as before
    async with platform, platform.session("bob", "s1", team="support_triage") as s:
        assert s.resume is not None and s.resume.outcome == "resumed"


async def test_a_retired_key_encryption_key_stays_until_its_retirement_ends_then_retire_destroys_it(
    live: tuple[AsyncEngine, Backups], registry: Registry
) -> None:
    engine, backups = live
    await _users_talk(engine, registry)
    backup = backups.take()
    keys = KeyService.from_settings(engine, Settings())
    first = await keys.current_kek()
    report = await rotate(keys, retire_days=7)
    assert report.destroyed == [] and report.rewrapped == 2
    assert CANARY.encode() in await _open_as_restored(backups.restore(backup))  # a recent backup still restores
    async with engine.begin() as conn:  # seven days pass
        await conn.execute(update(key_encryption_keys).where(key_encryption_keys.c.kek_id == first)
                           .values(destroy_after=datetime.now(UTC) - timedelta(seconds=1)))
    from teamstore.keys.rotation import retire

    assert (await retire(keys)).destroyed == [first]
    with pytest.raises(KeyDestroyed):
        await _open_as_restored(backups.restore(backup))
    states = {k["kek_id"]: k["state"] for k in (await status(keys, Settings()))["keks"]}
    assert states == {first: "destroyed", report.kek_id: "current"}


@pytest.mark.s3
async def test_a_retired_kms_key_is_scheduled_for_deletion_with_the_shortest_window_kms_allows(
    engine: AsyncEngine, registry: Registry, kms_key: str
) -> None:
    await _users_talk(engine, registry)
    keys = KeyService.from_settings(engine, Settings())
    report = await rotate(keys, retire_days=0)
    assert report.created and report.kek_id.startswith("kms:") and report.kek_id != f"kms:{kms_key}"
    meta = boto3.client("kms").describe_key(KeyId=kms_key)["KeyMetadata"]
    # KMS refuses every Decrypt under a key pending deletion (moto records the state without enforcing it).
    assert meta["KeyState"] == "PendingDeletion"
    assert meta["DeletionDate"] <= datetime.now(UTC) + timedelta(days=7, minutes=1)
    platform = Platform(engine, registry, settings=Settings())
    async with platform, platform.session("zoe", "s1", team="support_triage") as s:
        assert s.resume is not None and s.resume.outcome == "resumed"


async def test_a_database_restored_from_before_a_rotation_destroys_the_key_it_made_once_it_is_old_enough(
    live: tuple[AsyncEngine, Backups], registry: Registry
) -> None:
    engine, backups = live
    await _users_talk(engine, registry)
    before = backups.take()
    first = await KeyService.from_settings(engine, Settings()).current_kek()
    made = (await rotate(KeyService.from_settings(engine, Settings()), retire_days=7)).kek_id
    under_the_new_key = backups.take()

    url = backups.restore(before)  # the operator goes back to the backup from before the rotation
    restored = create_engine(url)
    try:
        keys = KeyService.from_settings(restored, Settings())
        shown = await status(keys, Settings())
        assert [u["kek_id"] for u in shown["unrecorded"]] == [made], "the restored database has no row for it"
        kept = await retire(keys, retire_days=7)
        assert kept.unrecorded_destroyed == [] and [u.kek_id for u in kept.unrecorded_kept] == [made]
        assert CANARY.encode() in await _open_as_restored(backups.restore(under_the_new_key)), "new: kept"

        made_days_ago(made, 8)  # the retirement period passes
        done = await retire(keys, retire_days=7)
        assert done.unrecorded_destroyed == [made] and done.unrecorded_kept == [] and done.destroyed == []
        with pytest.raises(KeyDestroyed):
            await _open_as_restored(backups.restore(under_the_new_key))
        assert (await status(keys, Settings()))["unrecorded"] == []
        assert await keys.current_kek() == first, "the restored database's own key is untouched"
        assert CANARY.encode() in await _open_as_restored(url)
    finally:
        await restored.dispose()

