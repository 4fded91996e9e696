"""``teamstore keys status`` as a health check, on SQLite and a real Postgres: each key-encryption key in use is
asked to wrap and unwrap a few bytes, as a worker would, in the local key file (moved away, readable by others,
without the key the database names) and in KMS (moto's server over HTTP, behind a proxy that answers as KMS
does for a disabled key, refuses, or goes away); the command says what is wrong and how to fix it, exits 2, and
writes nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from sqlalchemy import select
from typer.testing import CliRunner, Result

from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.keys import KeyService
from teamstore.keys.rotation import rotate
from teamstore.keys.schema import data_keys
from teamstore.settings import Settings
from tests.conftest import fits_with_ids_whole
from tests.keys.outage import Outage

runner = CliRunner()
WIDE = {"COLUMNS": "300"}  # each table row and message on one line


class _Stopped(Exception):
    """The rotation's process killed half-way."""


async def _sealed(*users: str, stop_rotation_after: int | None = None) -> None:
    """Every one of ``users``' data keys made; with ``stop_rotation_after``, a rotation then stopped after moving
    that many of them (the rest still under the retired KEK)."""
    engine = create_engine(Settings().resolved_database_url)
    keys = KeyService.from_settings(engine, Settings())
    for user in users:
        await keys.seal(user, b"words", "memory/facts")
    if stop_rotation_after is not None:
        moved = 0

        async def stop() -> None:
            nonlocal moved
            moved += 1
            if moved > stop_rotation_after:
                raise _Stopped

        with pytest.raises(_Stopped):
            await rotate(keys, retire_days=7, batch=1, on_batch=stop)
    await engine.dispose()


async def _rows() -> list[tuple[Any, ...]]:
    engine = create_engine(Settings().resolved_database_url)
    async with engine.connect() as conn:
        rows = [tuple(r) for r in (await conn.execute(select(data_keys).order_by(data_keys.c.user_id))).all()]
    await engine.dispose()
    return rows


def _home(database_url: str, monkeypatch: pytest.MonkeyPatch, *users: str, stop_rotation_after: int | None = None
          ) -> None:
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    asyncio.run(_sealed(*users, stop_rotation_after=stop_rotation_after))


def _status() -> tuple[Result, dict[str, Any], Result]:
    """``keys status --json``, its JSON, and ``keys status`` as a person reads it."""
    as_json = runner.invoke(app, ["keys", "status", "--json"], env=WIDE)
    return as_json, json.loads(as_json.stdout), runner.invoke(app, ["keys", "status"], env=WIDE)


def _files(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_mode, p.read_bytes()) for p in folder.iterdir()} if folder.exists() else {}


def test_keys_status_checks_each_kek_in_use_exits_0_when_all_can_be_used_and_changes_nothing(
    kek: str, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _home(database_url, monkeypatch, "alice", "bob")
    monkeypatch.setenv("TEAMSTORE_KEY_RETIRE_DAYS", "0")
    assert runner.invoke(app, ["keys", "rotate"]).exit_code == 0  # the first KEK destroyed at once
    monkeypatch.delenv("TEAMSTORE_KEY_RETIRE_DAYS")
    assert runner.invoke(app, ["keys", "rotate"]).exit_code == 0  # the second retired, wrapping nothing now
    home, rows = Settings().resolved_key_file.parent, asyncio.run(_rows())
    before = _files(home)
    as_json, shown, said = _status()
    assert as_json.exit_code == 0 and said.exit_code == 0, as_json.output + said.output
    assert shown["healthy"] is True
    assert [(k["state"], k["health"], k["problem"]) for k in shown["keks"]] == [
        ("destroyed", "unchecked", None), ("retired", "unchecked", None), ("current", "ok", None)]
    ids = [k["kek_id"] for k in shown["keks"]]
    assert any(line.split()[:3] == [ids[2], "current,", "ok"] for line in said.stdout.splitlines()), said.stdout
    assert said.stderr == "" and "next rotation due" in said.stdout
    if kek == "local":
        fits_with_ids_whole(runner.invoke(app, ["keys", "status"], env={"COLUMNS": "80"}).stdout, 80, *ids)
    assert asyncio.run(_rows()) == rows, "no data key was read into a write, nor re-wrapped"
    assert _files(home) == before, "the key file and its folder are as they were"
    if kek == "kms":
        assert not Settings().resolved_key_file.exists(), "a KMS home has no key file, and gets none"


def _move_away(path: Path) -> None:
    path.rename(path.with_name(path.name + ".moved"))


def _readable_by_others(path: Path) -> None:
    path.chmod(0o644)


def _another_file(path: Path) -> None:
    """The file replaced by one holding another key (another home's), owner-only as it should be."""
    doc = json.loads(path.read_text())
    doc["keys"] = {"local:" + "ab" * 16: next(iter(doc["keys"].values()))}
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize(("damage", "said", "fix"), [
    (_move_away, "is missing", "restore the key file from its own backup, or point TEAMSTORE_KEY_FILE at it"),
    (_readable_by_others, "may be read by other users (mode 644)", "chmod 600"),
    (_another_file, "holds no key-encryption key", "point TEAMSTORE_KEY_FILE at the key file this database was used"),
], ids=["moved away", "mode 644", "without the database's key"])
def test_keys_status_says_why_the_key_file_cannot_be_used_how_to_fix_it_and_exits_2(
    database_url: str, monkeypatch: pytest.MonkeyPatch, damage: Any, said: str, fix: str
) -> None:
    _home(database_url, monkeypatch, "alice")
    path = Settings().resolved_key_file
    damage(path)
    before = _files(path.parent)
    as_json, shown, text = _status()
    assert as_json.exit_code == 2 and text.exit_code == 2, as_json.output + text.output
    (current,) = shown["keks"]
    assert not shown["healthy"] and current["state"] == "current" and current["health"] == "unusable"
    assert said in current["problem"]["message"] and fix in current["problem"]["hint"]
    for run in (as_json, text):
        err = " ".join(run.stderr.split())
        assert f"error: the key-encryption key {current['kek_id']} cannot be used now: " in err and said in err, err
        assert f"fix: {fix}" in err
    assert any(line.split()[:3] == [current["kek_id"], "current,", "UNUSABLE"] for line in text.stdout.splitlines())
    assert _files(path.parent) == before, "nothing made in the key file's place, nothing changed beside it"


def test_keys_status_checks_a_retired_kek_that_data_keys_are_still_under(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _home(database_url, monkeypatch, "alice", "bob", "carol", stop_rotation_after=1)
    path = Settings().resolved_key_file
    healthy, shown, _ = _status()
    assert healthy.exit_code == 0, healthy.output
    old, new = (k["kek_id"] for k in shown["keks"])
    doc = json.loads(path.read_text())
    del doc["keys"][old]  # a key file restored from before the database's first key, say
    path.write_text(json.dumps(doc))
    as_json, shown, text = _status()
    assert as_json.exit_code == 2, as_json.output
    assert [(k["state"], k["data_keys"], k["health"]) for k in shown["keks"]] == [
        ("retired", 2, "unusable"), ("current", 1, "ok")]
    err = " ".join(text.stderr.split())
    assert f"error: the key-encryption key {old} cannot be used now: the key file {path} holds no" in err, err
    assert new not in err

    _move_away(path)  # one cause for both: said once, naming each
    err = " ".join(runner.invoke(app, ["keys", "status"], env=WIDE).stderr.split())
    assert f"error: the key-encryption keys {old}, {new} cannot be used now: the key file {path} is missing" in err
    assert err.count("error:") == 1 and err.count("fix:") == 1, err


@pytest.mark.s3
@pytest.mark.parametrize(("fault", "said", "fix"), [
    ("disabled", "disabled", "aws kms enable-key"),
    ("refused", "KMS refused to wrap a data key (AccessDeniedException)", "kms:Encrypt"),
    ("unreachable", "KMS could not wrap a data key", "AWS_ENDPOINT_URL_KMS"),
])
def test_keys_status_says_why_a_kms_key_cannot_be_used_how_to_fix_it_and_exits_2(
    database_url: str, kms_outage: Outage, kms_key: str, monkeypatch: pytest.MonkeyPatch, fault: str, said: str,
    fix: str
) -> None:
    _home(database_url, monkeypatch, "alice")
    assert runner.invoke(app, ["keys", "status"]).exit_code == 0
    if fault == "disabled":
        boto3.client("kms").disable_key(KeyId=kms_key.rsplit("/", 1)[-1])  # moto takes the id here, not the ARN
        kms_outage.refuse["Encrypt"] = "DisabledException"  # what KMS answers for it (moto does not enforce it)
    elif fault == "refused":
        kms_outage.refuse["Encrypt"] = "AccessDeniedException"
    else:
        kms_outage.down = True
    as_json, shown, text = _status()
    assert as_json.exit_code == 2 and text.exit_code == 2, as_json.output + text.output
    (current,) = shown["keks"]
    assert current["kek_id"] == f"kms:{kms_key}" and current["health"] == "unusable" and not shown["healthy"]
    assert said in current["problem"]["message"] and fix in current["problem"]["hint"]
    err = " ".join(text.stderr.split())
    assert f"error: the key-encryption key kms:{kms_key} cannot be used now: {current['problem']['message']}" in err, err
    assert f"fix: {current['problem']['hint']}" in err
    assert not Settings().resolved_key_file.exists()


@pytest.mark.s3
def test_keys_status_refuses_a_kms_key_the_database_never_used_as_every_worker_would(
    database_url: str, kms_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The data keys are under the local key file; the variable then names a KMS key: each run is refused with a
    # ConfigurationError, and the health check said all was well.
    monkeypatch.delenv("TEAMSTORE_KMS_KEY_ID")
    _home(database_url, monkeypatch, "alice")
    monkeypatch.setenv("TEAMSTORE_KMS_KEY_ID", kms_key)
    as_json, shown, text = _status()
    assert as_json.exit_code == 2 and text.exit_code == 2, as_json.output + text.output
    assert not shown["healthy"] and shown["configured"]["error"] == "ConfigurationError"
    assert [k["health"] for k in shown["keks"]] == ["ok"]  # the key file itself is fine
    err = " ".join(text.stderr.split())
    assert "error: TEAMSTORE_KMS_KEY_ID names a KMS key this database has never used" in err, err
    assert "fix: to move them under the KMS key, run `teamstore keys rotate --to <that key>`" in err
    monkeypatch.delenv("TEAMSTORE_KMS_KEY_ID")
    as_json, shown, _ = _status()
    assert as_json.exit_code == 0 and shown["healthy"] and shown["configured"] is None


@pytest.mark.s3
def test_keys_status_before_the_first_user_checks_the_kms_key_their_data_key_will_be_wrapped_by(
    database_url: str, kms_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A deploy's health check, run before anyone used the service: no KEK is recorded yet, and the first user's
    # session would meet a TEAMSTORE_KMS_KEY_ID KMS does not have (a typo in an alias).
    _home(database_url, monkeypatch)
    as_json, shown, text = _status()
    assert as_json.exit_code == 0 and shown["healthy"] and shown["keks"] == [], as_json.output
    monkeypatch.setenv("TEAMSTORE_KMS_KEY_ID", "alias/teamstore-typo")
    as_json, shown, text = _status()
    assert as_json.exit_code == 2 and text.exit_code == 2, as_json.output + text.output
    assert not shown["healthy"] and shown["keks"] == [] and shown["configured"]["error"] == "ConfigurationError"
    err = " ".join(text.stderr.split())
    assert "error: KMS has no key 'alias/teamstore-typo'" in err and "fix: name a symmetric KMS key" in err, err
    assert "no key-encryption key yet" in text.stdout
    assert not asyncio.run(_rows()) and not Settings().resolved_key_file.exists()
