"""``teamstore keys rotate`` and ``retire`` when KMS fails or has changed under them: moto's server over HTTP,
behind a proxy that answers chosen requests with the errors real KMS gives (moto does not enforce a key's
state or its policies)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.errors import KeyUnavailable
from teamstore.keys import KeyService
from teamstore.keys.rotation import retire, rotate, status
from teamstore.keys.schema import key_encryption_keys
from teamstore.settings import Settings

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
    with pytest.raises(KeyUnavailable, match="neither a retired key-encryption key nor the current one"):
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
