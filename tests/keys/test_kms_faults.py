"""``teamstore keys rotate`` and ``retire`` when KMS fails or has changed under them: moto's server over HTTP,
behind a proxy that answers chosen requests with the errors real KMS gives (moto does not enforce a key's
state or its policies)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.errors import ConfigurationError, KeyDestroyed, KeyUnavailable, StoreUnavailable
from teamstore.keys import KeyService
from teamstore.keys.rotation import retire, rotate
from teamstore.keys.schema import key_encryption_keys
from teamstore.keys.status import status
from teamstore.settings import Settings
from tests.keys.outage import Outage

pytestmark = pytest.mark.s3


def _deleted_out_of_band() -> str:
    """The KEK id of a KMS key KMS no longer has (deleted by hand once its window ended)."""
    return f"kms:arn:aws:kms:us-east-1:123456789012:key/{uuid.uuid4()}"


async def _record_retired(engine: AsyncEngine, kek_id: str, due: datetime) -> None:
    async with engine.begin() as conn:
        await conn.execute(insert(key_encryption_keys).values(
            kek_id=kek_id, created_at=due - timedelta(days=30), retired_at=due - timedelta(days=7), destroy_after=due))


async def test_a_retired_kms_key_kms_no_longer_has_is_recorded_destroyed_and_the_keys_after_it_still_go(
    engine: AsyncEngine, kms_key: str
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    first = await keys.current_kek()
    second = (await rotate(keys, retire_days=7)).kek_id
    await rotate(keys, retire_days=7)
    gone = _deleted_out_of_band()
    await _record_retired(engine, gone, datetime.now(UTC) - timedelta(days=30))  # the first due
    retired = await retire(keys, now=datetime.now(UTC) + timedelta(days=8))
    assert sorted(retired.destroyed) == sorted([gone, first, second]) and retired.already_deleted == [gone]
    for kek_id in (first, second):
        assert boto3.client("kms").describe_key(KeyId=kek_id.removeprefix("kms:"))["KeyMetadata"]["KeyState"] == (
            "PendingDeletion")
    states = {k["kek_id"]: k["state"] for k in (await status(keys, Settings()))["keks"]}
    assert [states[k] for k in (gone, first, second)] == ["destroyed"] * 3
    assert (await retire(keys, now=datetime.now(UTC) + timedelta(days=9))).destroyed == []


async def test_retire_pointed_at_another_region_records_no_key_as_destroyed(
    engine: AsyncEngine, kms_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    first = await keys.current_kek()
    await rotate(keys, retire_days=7)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")  # a KMS that has none of the database's keys
    monkeypatch.delenv("TEAMSTORE_KMS_KEY_ID")  # the database names its keys
    with pytest.raises(KeyUnavailable, match="KMS does not show the current one either"):
        await retire(KeyService.from_settings(engine, Settings()), now=datetime.now(UTC) + timedelta(days=8))
    states = {k["kek_id"]: k["state"] for k in (await status(keys, Settings()))["keks"]}
    assert states[first] == "retired", "it lives on in its own region"


async def _gone_and_due() -> None:
    engine = create_engine(Settings().resolved_database_url)
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    await _record_retired(engine, _deleted_out_of_band(), datetime.now(UTC) - timedelta(days=1))
    await engine.dispose()


def test_keys_retire_says_which_keys_kms_had_deleted_already(kms_key: str) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    asyncio.run(_gone_and_due())
    shown = runner.invoke(app, ["keys", "retire"])
    assert shown.exit_code == 0, shown.output
    assert "destroyed 1 retired key-encryption key(s)" in shown.stdout
    assert "1 of them KMS had deleted already" in shown.stdout


async def test_kms_refusing_to_make_a_rotations_key_names_the_permission_it_takes(
    engine: AsyncEngine, kms_outage: Outage
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    kms_outage.refuse["CreateKey"] = "AccessDeniedException"
    with pytest.raises(KeyUnavailable, match="refused to create") as info:
        await rotate(keys, retire_days=7)
    assert "kms:CreateKey" in (info.value.hint or "") and "kms:Encrypt" not in (info.value.hint or "")
    assert "stopped" not in info.value.message, "no rotation began: nothing is half-way"


async def test_kms_refusing_to_schedule_a_deletion_names_the_permission_it_takes(
    engine: AsyncEngine, kms_outage: Outage
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    await rotate(keys, retire_days=7)
    kms_outage.refuse["ScheduleKeyDeletion"] = "AccessDeniedException"
    with pytest.raises(KeyUnavailable, match="refused to schedule") as info:
        await retire(keys, now=datetime.now(UTC) + timedelta(days=8))
    assert "kms:ScheduleKeyDeletion" in (info.value.hint or "") and "kms:Encrypt" not in (info.value.hint or "")


@pytest.mark.parametrize(("code", "said", "fix", "wrong"), [
    ("DisabledException", "disabled", "aws kms enable-key", "cancel-key-deletion"),
    ("KMSInvalidStateException", "scheduled for deletion", "aws kms cancel-key-deletion", "nothing brings it back"),
    ("NotFoundException", "deleted", "nothing brings it back", "enable-key"),
])
async def test_a_kek_kms_will_not_use_is_said_as_it_is_with_its_own_way_back(
    engine: AsyncEngine, kms_outage: Outage, code: str, said: str, fix: str, wrong: str
) -> None:
    blob = await KeyService.from_settings(engine, Settings()).seal("alice", b"words", "memory/facts")
    kms_outage.refuse["Decrypt"] = code
    with pytest.raises(KeyDestroyed, match=said) as info:
        await KeyService.from_settings(engine, Settings()).open("alice", blob, "memory/facts")
    assert fix in (info.value.hint or "") and wrong not in (info.value.hint or "")


async def test_a_rotation_to_a_key_kms_does_not_have_says_to_name_another_with_to(
    engine: AsyncEngine, kms_outage: Outage
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    with pytest.raises(ConfigurationError, match="alias/no-such-key") as info:
        await rotate(keys, to="alias/no-such-key", retire_days=7)
    assert "--to" in (info.value.hint or "") and "TEAMSTORE_KMS_KEY_ID" not in (info.value.hint or "")


@pytest.mark.parametrize("destroyed", [False, True])
async def test_a_rotation_back_to_a_key_the_database_retired_is_refused_and_changes_nothing(
    engine: AsyncEngine, kms_key: str, destroyed: bool
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    first = await keys.current_kek()
    second = (await rotate(keys, retire_days=0 if destroyed else 7)).kek_id
    if destroyed:  # its deletion cancelled by hand, the key enabled again: KMS would use it
        key_id = first.rsplit("/", 1)[-1]
        boto3.client("kms").cancel_key_deletion(KeyId=key_id)
        boto3.client("kms").enable_key(KeyId=key_id)
    before = (await status(keys, Settings()))["keks"]
    with pytest.raises(ConfigurationError, match="destroyed" if destroyed else "retired") as info:
        await rotate(keys, to=first.removeprefix("kms:"), retire_days=7)
    assert "erasure" in info.value.message and "--to" in (info.value.hint or "")
    assert (await status(keys, Settings()))["keks"] == before, "the backups' bound stands as receipts gave it"
    assert await keys.current_kek() == second


async def test_a_rotation_kms_may_not_describe_the_key_of_names_kms_describe_key(
    engine: AsyncEngine, kms_outage: Outage
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    await keys.current_kek()  # TEAMSTORE_KMS_KEY_ID's key, described once per process
    target = boto3.client("kms").create_key(Description="moved to")["KeyMetadata"]["Arn"]
    kms_outage.refuse["DescribeKey"] = "AccessDeniedException"
    with pytest.raises(ConfigurationError) as info:
        await rotate(keys, to=target, retire_days=7)
    assert "kms:DescribeKey" in (info.value.hint or "") and "TEAMSTORE_KMS_KEY_ID" not in (info.value.hint or "")


async def test_a_rotation_whose_old_kek_kms_has_disabled_says_to_enable_it_not_to_restore_rows(
    engine: AsyncEngine, kms_outage: Outage
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    blob = await keys.seal("alice", b"words", "memory/facts")
    kms_outage.refuse["Decrypt"] = "DisabledException"
    report = await rotate(keys, retire_days=0)
    assert report.damaged == [] and len(report.unusable) == 1, "the row is not damaged: its KEK is disabled"
    kms_outage.refuse.clear()  # enabled again: the next rotation finishes this one
    again = await rotate(keys, retire_days=0)
    assert not again.created and again.rewrapped == 1 and len(again.destroyed) == 1
    assert await KeyService.from_settings(engine, Settings()).open("alice", blob, "memory/facts") == b"words"


def test_keys_rotate_says_to_enable_an_old_kek_kms_has_disabled(kms_outage: Outage) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    asyncio.run(_seal_once())
    kms_outage.refuse["Decrypt"] = "DisabledException"
    shown = runner.invoke(app, ["keys", "rotate"])
    assert shown.exit_code == 0, shown.output
    assert "aws kms enable-key" in shown.stdout and "restore" not in shown.stdout


async def _seal_once() -> None:
    engine = create_engine(Settings().resolved_database_url)
    await KeyService.from_settings(engine, Settings()).seal("alice", b"words", "memory/facts")
    await engine.dispose()


@pytest.mark.parametrize("as_json", [False, True])
def test_keys_rotate_whose_retire_fails_says_the_rotation_is_done_and_only_retire_is_to_rerun(
    kms_outage: Outage, monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    asyncio.run(_seal_once())
    monkeypatch.setenv("TEAMSTORE_KEY_RETIRE_DAYS", "0")
    kms_outage.refuse["ScheduleKeyDeletion"] = "AccessDeniedException"
    rotated = runner.invoke(app, ["keys", "rotate", *(["--json"] if as_json else [])])
    assert rotated.exit_code == 2, rotated.output
    if as_json:
        shown = json.loads(rotated.stdout)
        assert shown["created"] and shown["rewrapped"] == 1 and shown["destroyed"] == []
        assert "ScheduleKeyDeletion" in shown["retire_error"]["hint"]
        assert shown["retire_error"]["rerun"] == "teamstore keys retire"
    else:
        out, err = " ".join(rotated.stdout.split()), " ".join(rotated.stderr.split())
        assert "rotated to kms:" in out and "1 data key(s) re-wrapped" in out and "retire after it failed" in out
        assert "the rotation is done" in err and "kms:ScheduleKeyDeletion" in err
        assert "`teamstore keys retire`" in err and "keys rotate` again" not in err
    kms_outage.refuse.clear()
    retired = runner.invoke(app, ["keys", "retire", "--json"])
    assert retired.exit_code == 0 and len(json.loads(retired.stdout)["destroyed"]) == 1
    states = sorted(k["state"] for k in json.loads(runner.invoke(app, ["keys", "status", "--json"]).stdout)["keks"])
    assert states == ["current", "destroyed"]


async def _refuse_new_keks(engine: AsyncEngine) -> None:
    """Make the database refuse every new row of ts_key_encryption_keys (as a full disk or a lost connection would
    refuse the rotation's)."""
    statements = {
        "sqlite": ["CREATE TRIGGER refuse_kek BEFORE INSERT ON ts_key_encryption_keys "
                   "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"],
        "postgresql": ["CREATE FUNCTION refuse_kek() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'refused by the "
                       "test'; END $$ LANGUAGE plpgsql",
                       "CREATE TRIGGER refuse_kek BEFORE INSERT ON ts_key_encryption_keys FOR EACH ROW "
                       "EXECUTE FUNCTION refuse_kek()"],
    }[engine.dialect.name]
    async with engine.begin() as conn:
        for statement in statements:
            await conn.execute(text(statement))


def _watch_created(keys: KeyService) -> list[str]:
    """The KEK ids ``keys.ring.create`` makes from now on (it still makes them)."""
    made: list[str] = []
    create = keys.ring.create

    def recorded(to: str | None, like: str, made_by: str | None = None) -> str:
        made.append(create(to, like, made_by))
        return made[-1]

    keys.ring.create = recorded  # type: ignore[method-assign]
    return made


async def test_a_kms_key_made_for_a_rotation_the_database_then_refused_is_scheduled_for_deletion(
    engine: AsyncEngine, kms_key: str
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    first, made = await keys.current_kek(), _watch_created(keys)
    await _refuse_new_keks(engine)
    with pytest.raises(StoreUnavailable, match="made for the rotation was destroyed again"):
        await rotate(keys, retire_days=7)
    (new,) = made
    assert boto3.client("kms").describe_key(KeyId=new.removeprefix("kms:"))["KeyMetadata"]["KeyState"] == (
        "PendingDeletion"), "no unused key left to cost money"
    assert {k["kek_id"]: k["state"] for k in (await status(keys, Settings()))["keks"]} == {first: "current"}


async def test_a_kms_key_made_for_a_rotation_that_could_not_be_deleted_again_is_named_in_the_error(
    engine: AsyncEngine, kms_outage: Outage
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    made = _watch_created(keys)
    await _refuse_new_keks(engine)
    kms_outage.refuse["ScheduleKeyDeletion"] = "AccessDeniedException"
    with pytest.raises(StoreUnavailable, match="could not be destroyed") as info:
        await rotate(keys, retire_days=7)
    (new,) = made
    assert f"aws kms schedule-key-deletion --key-id {new.removeprefix('kms:')}" in (info.value.hint or "")
