"""KMS keys a database marks but does not record (after a restore: the keys rotations made after the backup),
found by ``keys status --find-unrecorded`` and never deleted by it: moto's server over HTTP, SQLite and a real
Postgres, restores from a copy of the SQLite files and ``pg_dump``; refusals by KMS from the proxy of
``tests/keys/outage.py`` (moto enforces no IAM)."""

from __future__ import annotations

import asyncio
import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore.cli import app
from teamstore.cli.keys import NOT_SEARCHED, UNUSABLE
from teamstore.db.engine import create_engine
from teamstore.db.identity import database_id
from teamstore.keys import KeyService
from teamstore.keys.rotation import retire, rotate
from teamstore.keys.unrecorded_kms import find
from teamstore.settings import Settings
from tests.keys.backups import Backups
from tests.keys.outage import Outage
from tests.keys.test_kms_faults import _seal_once

pytestmark = pytest.mark.s3


@pytest.fixture
def kms_alone(s3_env: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """``kms_key`` in a region only this module's tests use: moto's server is the session's, and the keys every
    other test makes would count against ``--max-keys``."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-north-1")
    arn: str = request.getfixturevalue("kms_key")
    return arn


def _state(kek_id: str) -> str:
    return str(boto3.client("kms").describe_key(KeyId=kek_id.removeprefix("kms:"))["KeyMetadata"]["KeyState"])


def _key_id(kek_id: str) -> str:
    return kek_id.rsplit("/", 1)[-1]


async def test_a_database_restored_from_before_rotations_finds_their_kms_keys_and_deletes_none(
    live: tuple[AsyncEngine, Backups], kms_alone: str
) -> None:
    engine, backups = live
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    first = await keys.current_kek()
    before = backups.take()
    second = (await rotate(keys, retire_days=7)).kek_id
    third = (await rotate(keys, retire_days=7)).kek_id
    kms = boto3.client("kms")
    kms.disable_key(KeyId=_key_id(second))
    started = datetime.now(UTC)

    restored = create_engine(backups.restore(before))
    try:
        assert await database_id(restored) == await database_id(engine), "a restore keeps the database's id"
        back = KeyService.from_settings(restored, Settings())
        found = await find(back)
        assert found.problem is None and found.complete and found.uses_kms
        shown = {k.arn: k for k in found.keys}
        assert set(shown) == {second.removeprefix("kms:"), third.removeprefix("kms:")}, "its own key is recorded"
        assert shown[second.removeprefix("kms:")].key_state == "Disabled"
        assert shown[third.removeprefix("kms:")].key_state == "Enabled"
        made = shown[third.removeprefix("kms:")].created_at
        assert made is not None and started - timedelta(minutes=5) < made <= datetime.now(UTC) + timedelta(minutes=1)
        assert "schedule-key-deletion" in shown[third.removeprefix("kms:")].fix()
        assert "staging" in found.as_dict()["never_deleted"]

        kms.schedule_key_deletion(KeyId=_key_id(third), PendingWindowInDays=7)
        pending = next(k for k in (await find(back)).keys if k.arn == third.removeprefix("kms:"))
        assert pending.key_state == "PendingDeletion" and pending.deletion_date is not None
        assert pending.fix().startswith("nothing: KMS deletes it on")

        kms.enable_key(KeyId=_key_id(second))
        await retire(back, retire_days=0, now=datetime.now(UTC) + timedelta(days=30))
        assert _state(second) == "Enabled", "neither status nor retire schedules an unrecorded KMS key's deletion"
        assert await back.current_kek() == first
    finally:
        await restored.dispose()
    assert (await find(keys)).keys == [], "the live database records every key it marked"


async def test_a_database_on_the_key_file_asks_kms_nothing(engine: AsyncEngine) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    found = await find(keys)
    assert not found.uses_kms and found.keys == [] and found.examined == 0


async def test_a_key_rotate_made_and_has_yet_to_record_is_found(engine: AsyncEngine, kms_alone: str) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    # A rotation stopped between making its key and recording it: no restore needed for that key to be unrecorded.
    made = await asyncio.to_thread(keys.ring.kms.create, await database_id(engine))
    boto3.client("kms").create_key(Description="another database's", Tags=[
        {"TagKey": "teamstore-database-" + "0" * 32, "TagValue": "wraps-data-keys"}])
    found = await find(keys)
    assert [f"kms:{k.arn}" for k in found.keys] == [made], "another database's key is not this one's"
    bounded = await find(keys, max_keys=1)
    assert bounded.examined == 1 and not bounded.complete


def _restored_over_a_rotation(runner: CliRunner) -> str:
    """The database (SQLite, in the test's home) copied aside, rotated, and the copy put back: the KEK id of the
    KMS key the rotation made, which the database then does not record."""
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    asyncio.run(_seal_once())
    path = Path(Settings().resolved_database_url.split(":///", 1)[1])
    _copy(path.parent, path.parent / "backup", path.name)
    rotated = runner.invoke(app, ["keys", "rotate", "--json"])
    assert rotated.exit_code == 0, rotated.output
    _copy(path.parent / "backup", path.parent, path.name)
    return str(json.loads(rotated.stdout)["kek_id"])


def _copy(source: Path, to: Path, name: str) -> None:
    """The SQLite database ``name`` and its write-ahead log, as they are in ``source``, into ``to``."""
    to.mkdir(exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        (to / f"{name}{suffix}").unlink(missing_ok=True)
        if (source / f"{name}{suffix}").exists():
            shutil.copy2(source / f"{name}{suffix}", to / f"{name}{suffix}")


def test_keys_status_finds_a_restores_kms_key_only_when_asked_and_says_what_to_do(kms_alone: str) -> None:
    runner = CliRunner()
    made = _restored_over_a_rotation(runner)
    arn = made.removeprefix("kms:")
    plain = runner.invoke(app, ["keys", "status", "--json"])
    assert plain.exit_code == 0 and json.loads(plain.stdout)["unrecorded_kms"] is None, "not part of the health check"
    shown = runner.invoke(app, ["keys", "status", "--find-unrecorded"])
    assert shown.exit_code == 0, shown.output
    said = " ".join(shown.stdout.split())
    assert f"the KMS key {arn} (made " in said and ", Enabled) is marked as this database's" in said
    assert "teamstore never schedules its deletion" in said and "staging" in said
    assert f"aws kms schedule-key-deletion --key-id {arn} --pending-window-in-days 7" in said
    document = json.loads(runner.invoke(app, ["keys", "status", "--find-unrecorded", "--json"]).stdout)
    [key] = document["unrecorded_kms"]["keys"]
    assert key["arn"] == arn and key["kek_id"] == made and key["key_state"] == "Enabled" and key["created_at"]
    assert "schedule-key-deletion" in key["fix"] and document["unrecorded_kms"]["complete"] is True
    assert document["healthy"] is True
    assert _state(made) == "Enabled"
    bounded = runner.invoke(app, ["keys", "status", "--find-unrecorded", "--max-keys", "1"])
    assert "looked at only 1 of the account's KMS keys" in " ".join(bounded.stdout.split())


def _status(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(app, ["keys", "status", "--find-unrecorded", *args])


@pytest.mark.parametrize(("refused", "permission"), [("ListKeys", "kms:ListKeys"),
                                                      ("ListResourceTags", "kms:ListResourceTags")])
def test_keys_status_exits_1_naming_the_permission_kms_refused_to_find_unrecorded_keys_and_prints_the_rest(
    kms_alone: str, kms_outage: Outage, refused: str, permission: str
) -> None:
    runner = CliRunner()
    _restored_over_a_rotation(runner)
    kms_outage.refuse[refused] = "AccessDeniedException"
    shown = _status(runner)
    assert shown.exit_code == NOT_SEARCHED == 1, shown.output
    assert isinstance(shown.exception, SystemExit), shown.exception  # a status, not a crash
    said, err = " ".join(shown.stdout.split()), " ".join(shown.stderr.split())
    assert err.startswith("error: could not look for KMS keys marked as this database's") and permission in err
    assert "fix: grant this process's role" in err
    assert "Nothing was written" not in err, "a search that only reads says nothing of writing"
    assert "current, ok" in said and "next rotation due" in said, "the rest of keys status is there"
    assert "did not finish" in said and "none of the" not in said, "no 'none found' for a search that did not look"
    as_json = _status(runner, "--json")
    assert as_json.exit_code == NOT_SEARCHED
    document = json.loads(as_json.stdout)
    assert document["healthy"] is True and document["unrecorded_kms"]["keys"] == []
    assert document["unrecorded_kms"]["problem"]["error"] == "KeyUnavailable"
    assert document["unrecorded_kms"]["complete"] is False
    assert permission in document["unrecorded_kms"]["problem"]["hint"]
    kms_outage.refuse.clear()
    again = _status(runner, "--json")
    assert again.exit_code == 0 and again.stderr == ""
    assert json.loads(again.stdout)["unrecorded_kms"]["problem"] is None
    assert len(json.loads(again.stdout)["unrecorded_kms"]["keys"]) == 1


def test_keys_status_exits_1_when_kms_does_not_answer_the_search_and_2_when_the_key_in_use_fails_too(
    kms_alone: str, kms_outage: Outage
) -> None:
    runner = CliRunner()
    _restored_over_a_rotation(runner)
    kms_outage.unanswered.add("ListKeys")  # KMS answers the health check's Encrypt and Decrypt, not the search
    shown = _status(runner, "--json")
    assert shown.exit_code == NOT_SEARCHED, shown.output
    document = json.loads(shown.stdout)
    assert document["healthy"] is True and document["unrecorded_kms"]["complete"] is False
    assert "KMS could not list the account's KMS keys" in document["unrecorded_kms"]["problem"]["message"]
    assert "AWS_ENDPOINT_URL_KMS" in " ".join(shown.stderr.split())

    kms_outage.down = True  # nothing answered: the key in use cannot be used either, which says more
    down = _status(runner)
    assert down.exit_code == UNUSABLE, down.output
    err = " ".join(down.stderr.split())
    assert "could not look for KMS keys marked as this database's" in err and "cannot be used now" in err


def test_keys_status_says_a_kms_too_slow_for_the_search_did_not_answer(kms_alone: str, kms_outage: Outage) -> None:
    runner = CliRunner()
    _restored_over_a_rotation(runner)
    kms_outage.slow["ListKeys"] = 6.0  # past the client's 5 seconds to read an answer, each of its two attempts
    shown = _status(runner)
    assert shown.exit_code == NOT_SEARCHED, shown.output
    err = " ".join(shown.stderr.split())
    assert "error: could not look for KMS keys marked as this database's that it does not record: KMS did not " \
           "answer in time to list the account's KMS keys (ReadTimeoutError)" in err, err
    assert "fix: KMS is slow or out of reach" in err and "retry once it answers" in err


@pytest.mark.parametrize(("given", "code", "said"), [("0", 1, "--max-keys"), ("-5", 1, "--max-keys"),
                                                     ("many", 1, "--max-keys"), ("1", 0, "looked at only 1 of")])
def test_keys_status_max_keys_takes_1_or_more(kms_alone: str, given: str, code: int, said: str) -> None:
    runner = CliRunner()
    _restored_over_a_rotation(runner)
    shown = _status(runner, "--max-keys", given)
    assert shown.exit_code == code, shown.output
    assert said in " ".join((shown.stdout if code == 0 else shown.stderr).split())
