"""Two databases given the same KMS key (production and staging, one ``TEAMSTORE_KMS_KEY_ID``): each marks the key
with a tag of its own, and one database's ``keys retire`` never schedules the deletion of a key the other still
marks. moto's server over HTTP, SQLite and a real Postgres; refusals by KMS come from the proxy of
``tests/keys/outage.py`` (moto enforces no IAM)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.db.identity import database_id
from teamstore.db.migrate import upgrade
from teamstore.errors import KeyDeletionRefused
from teamstore.keys import KeyService
from teamstore.keys.marks import with_marks
from teamstore.keys.rotation import retire, rotate
from teamstore.keys.status import status
from teamstore.settings import Settings
from tests.conftest import _create_database, _drop_database
from tests.keys.outage import Outage
from tests.keys.test_kms_faults import _seal_once

pytestmark = pytest.mark.s3


@pytest.fixture
async def other(database_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[AsyncEngine]:
    """A second migrated database of the same kind as ``engine`` (staging beside production): an id of its own."""
    if database_url.startswith("sqlite"):
        url = f"sqlite:///{(tmp_path / 'other.db').as_posix()}"
    else:
        server: str = request.getfixturevalue("postgres_server")
        url = _create_database(server)
    eng = create_engine(url)
    await upgrade(eng)
    yield eng
    await eng.dispose()
    if not database_url.startswith("sqlite"):
        _drop_database(server, url)


def _state(kek_id: str) -> str:
    return str(boto3.client("kms").describe_key(KeyId=kek_id.removeprefix("kms:"))["KeyMetadata"]["KeyState"])


def _marks(kek_id: str) -> set[str]:
    tags = boto3.client("kms").list_resource_tags(KeyId=kek_id.removeprefix("kms:").rsplit("/", 1)[-1])["Tags"]
    return {t["TagKey"] for t in tags if t["TagKey"].startswith("teamstore-database-")}


def _unmark(kek_id: str, database: str) -> None:
    boto3.client("kms").untag_resource(KeyId=kek_id.removeprefix("kms:").rsplit("/", 1)[-1],
                                       TagKeys=[f"teamstore-database-{database}"])


def _later(days: int) -> datetime:
    return datetime.now(UTC) + timedelta(days=days)


async def test_a_shared_kms_key_is_not_deleted_by_one_database_while_the_other_still_marks_it(
    engine: AsyncEngine, other: AsyncEngine, kms_key: str
) -> None:
    a, b = KeyService.from_settings(engine, Settings()), KeyService.from_settings(other, Settings())
    await a.seal("alice", b"production words", "memory/facts")
    blob = await b.seal("bob", b"staging words", "memory/facts")
    shared = await a.current_kek()
    assert shared == await b.current_kek()
    assert _marks(shared) == {f"teamstore-database-{await database_id(engine)}",
                              f"teamstore-database-{await database_id(other)}"}, "each database marks the key it uses"
    made = (await rotate(a, retire_days=7)).kek_id
    assert _marks(made) == {f"teamstore-database-{await database_id(engine)}"}, "a rotation's key is made marked"
    await rotate(a, retire_days=7)

    done = await retire(a, now=_later(8))
    assert done.destroyed == [made], "the key only this database used is deleted: the others of the retire go on"
    assert [r.kek_id for r in done.refused] == [shared] and done.refused[0].other_databases == 1
    assert isinstance(done.refused[0], KeyDeletionRefused)
    assert "aws kms untag-resource" in (done.refused[0].hint or "") and "1 other database" in done.refused[0].message
    assert _state(shared) == "Enabled" and _state(made) == "PendingDeletion"
    assert await KeyService.from_settings(other, Settings()).open("bob", blob, "memory/facts") == b"staging words"
    states = {k["kek_id"]: k["state"] for k in (await status(a, Settings()))["keks"]}
    assert states[shared] == "retired", "kept, to be tried again by the next retire"

    await rotate(b, retire_days=7)  # staging moves to a key of its own, and its mark is removed
    _unmark(shared, await database_id(other))
    done = await retire(a, now=_later(9))
    assert done.destroyed == [shared] and done.refused == []
    assert _state(shared) == "PendingDeletion"
    done = await retire(b, now=_later(9))
    assert done.destroyed == [shared] and done.refused == [], "scheduled already: nothing left to refuse"


async def test_a_shared_kms_key_the_other_database_no_longer_marks_is_deleted(
    engine: AsyncEngine, other: AsyncEngine, kms_key: str
) -> None:
    a, b = KeyService.from_settings(engine, Settings()), KeyService.from_settings(other, Settings())
    await a.seal("alice", b"production words", "memory/facts")
    await b.seal("bob", b"staging words", "memory/facts")
    shared = await a.current_kek()
    await rotate(b, retire_days=7)
    _unmark(shared, await database_id(other))  # done with it
    await rotate(a, retire_days=7)
    done = await retire(a, now=_later(8))
    assert done.destroyed == [shared] and done.refused == [] and _state(shared) == "PendingDeletion"


async def test_a_kms_key_from_before_the_marks_is_marked_by_keys_status(engine: AsyncEngine, kms_key: str) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    current = await keys.current_kek()
    _unmark(current, await database_id(engine))  # as the database recorded it before marks
    assert _marks(current) == set()
    shown = await with_marks(keys.ring, engine, await status(keys, Settings()))
    assert _marks(current) == {f"teamstore-database-{await database_id(engine)}"}
    assert shown["unmarked"] == [] and [k["marked"] for k in shown["keks"]] == [True]


async def test_a_rotation_to_a_named_kms_key_marks_it(engine: AsyncEngine, kms_key: str) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    named = "kms:" + boto3.client("kms").create_key(Description="staging's own")["KeyMetadata"]["Arn"]
    await rotate(keys, to=named.removeprefix("kms:"), retire_days=7)
    assert _marks(named) == {f"teamstore-database-{await database_id(engine)}"}


async def test_a_mark_kms_refuses_fails_no_session_is_logged_once_and_keys_status_says_what_to_grant(
    engine: AsyncEngine, kms_outage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    kms_outage.refuse["TagResource"] = "AccessDeniedException"
    keys = KeyService.from_settings(engine, Settings())
    with caplog.at_level(logging.WARNING, logger="teamstore.keys"):
        blob = await keys.seal("alice", b"words", "memory/facts")
        await KeyService.from_settings(engine, Settings()).seal("bob", b"more", "memory/facts")
    assert await keys.open("alice", blob, "memory/facts") == b"words"
    refused = [r for r in caplog.records if "not marked" in r.getMessage()]
    assert len(refused) == 1 and "kms:TagResource" in refused[0].getMessage()
    current = await keys.current_kek()
    assert _marks(current) == set()

    shown = await with_marks(keys.ring, engine, await status(keys, Settings()))
    assert shown["unmarked"] == [current] and shown["keks"][0]["marked"] is False
    assert "kms:TagResource" in shown["keks"][0]["mark_problem"]["hint"]
    del kms_outage.refuse["TagResource"]
    assert (await with_marks(keys.ring, engine, await status(keys, Settings())))["unmarked"] == []
    assert _marks(current) == {f"teamstore-database-{await database_id(engine)}"}


async def test_retire_refuses_to_delete_a_kms_key_whose_marks_kms_will_not_list(
    engine: AsyncEngine, kms_outage: Outage
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "memory/facts")
    old = await keys.current_kek()
    await rotate(keys, retire_days=7)
    kms_outage.refuse["ListResourceTags"] = "AccessDeniedException"
    done = await retire(keys, now=_later(8))
    assert done.destroyed == [] and [r.kek_id for r in done.refused] == [old]
    assert done.refused[0].other_databases is None and "kms:ListResourceTags" in (done.refused[0].hint or "")
    assert _state(old) == "Enabled"
    del kms_outage.refuse["ListResourceTags"]
    assert (await retire(keys, now=_later(8))).destroyed == [old] and _state(old) == "PendingDeletion"


def test_keys_status_says_a_kms_key_it_could_not_mark_is_not_marked_and_what_to_grant(kms_outage: Outage) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    kms_outage.refuse["TagResource"] = "AccessDeniedException"
    asyncio.run(_seal_once())
    shown = runner.invoke(app, ["keys", "status"])
    assert shown.exit_code == 0, shown.output  # the key is usable: only its mark is missing
    out = " ".join(shown.stdout.split())
    assert "is not marked as this database's" in out and "kms:TagResource" in out
    assert json.loads(runner.invoke(app, ["keys", "status", "--json"]).stdout)["unmarked"] != []
    kms_outage.refuse.clear()
    assert json.loads(runner.invoke(app, ["keys", "status", "--json"]).stdout)["unmarked"] == []


@pytest.mark.parametrize("as_json", [False, True])
def test_keys_retire_refusing_a_deletion_says_why_and_exits_2(
    kms_outage: Outage, monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    asyncio.run(_seal_once())
    monkeypatch.setenv("TEAMSTORE_KEY_RETIRE_DAYS", "0")
    kms_outage.refuse["ListResourceTags"] = "AccessDeniedException"
    rotated = runner.invoke(app, ["keys", "rotate"])
    assert rotated.exit_code == 2 and "kms:ListResourceTags" in " ".join(rotated.stderr.split())
    retired = runner.invoke(app, ["keys", "retire", *(["--json"] if as_json else [])])
    assert retired.exit_code == 2, retired.output
    if as_json:
        refused = json.loads(retired.stdout)["refused"]
        assert len(refused) == 1 and refused[0]["error"] == "KeyDeletionRefused"
        assert refused[0]["other_databases"] is None
    err = " ".join(retired.stderr.split())
    assert "was not scheduled" in err and "kms:ListResourceTags" in err
    kms_outage.refuse.clear()
    assert runner.invoke(app, ["keys", "retire"]).exit_code == 0
