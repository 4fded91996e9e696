"""The key service on SQLite and a real Postgres, its key-encryption key in the local key file or in KMS (moto
over HTTP): one data key per user, stored only wrapped, served from memory, never made for a fenced user, and
every fault a typed error with nothing written."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from sqlalchemy import event, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.db.fence import user_holds
from teamstore.errors import (
    ConfigurationError,
    DataKeyDamaged,
    ErasureInProgress,
    KeyDestroyed,
    KeyUnavailable,
    PayloadUnreadable,
)
from teamstore.keys import KeyService, kms
from teamstore.keys.schema import data_keys, key_encryption_keys
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from tests.keys.outage import Outage


async def _rows(engine: AsyncEngine, table: Any = data_keys) -> list[Any]:
    async with engine.connect() as conn:
        return list((await conn.execute(select(table))).all())


async def test_a_users_data_key_is_made_once_and_stored_only_wrapped(
    keys: KeyService, engine: AsyncEngine, kek: str
) -> None:
    blob = await keys.seal("alice", b"my router drops every evening", "state/s1")
    again = await keys.seal("alice", b"still dropping", "state/s1")
    (row,) = await _rows(engine)
    assert row.user_id == "alice" and row.kek_id.startswith(f"{kek}:")
    material = keys.ring.get(row.kek_id).unwrap(bytes(row.wrapped), row.key_id)
    assert len(material) == 32 and material not in bytes(row.wrapped)  # stored wrapped, never in the clear
    assert b"router" not in blob + again
    fresh = KeyService.from_settings(engine, Settings())  # another worker: nothing in memory
    assert await fresh.open("alice", blob, "state/s1") == b"my router drops every evening"
    (recorded,) = await _rows(engine, key_encryption_keys)
    assert recorded.kek_id == row.kek_id and recorded.retired_at is None


async def test_a_key_is_unwrapped_once_then_served_from_memory(engine: AsyncEngine, kek: str) -> None:
    keys = KeyService.from_settings(engine, Settings(key_cache_seconds=60))  # the tests' 0.2 s, counted from
    await keys.seal("alice", b"first", "memory/facts")  # before KMS made the key, may be spent by the loop's end
    seen: list[str] = []
    event.listen(engine.sync_engine, "before_cursor_execute", lambda *args: seen.append(args[2]))
    for n in range(50):
        blob = await keys.seal("alice", f"words {n}".encode(), "memory/facts")
        assert await keys.open("alice", blob, "memory/facts") == f"words {n}".encode()
    assert seen == []


async def test_no_key_is_made_for_a_user_an_erasure_holds(keys: KeyService, engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(insert(user_holds).values(user_id="bob", reason="erasure", request_id="r",
                                                     created_at=datetime.now(UTC)))
    with pytest.raises(ErasureInProgress):
        await keys.seal("bob", b"words", "state/s1")
    assert await _rows(engine) == []


async def test_what_was_sealed_under_a_destroyed_key_stays_beyond_use_when_the_user_comes_back(
    keys: KeyService, engine: AsyncEngine
) -> None:
    old = await keys.seal("alice", b"before the erasure", "state/s1")
    async with engine.begin() as conn:
        await conn.execute(data_keys.delete())
    keys.forget("alice")
    new = await keys.seal("alice", b"after", "state/s1")  # the user returns: a new key
    assert await keys.open("alice", new, "state/s1") == b"after"
    with pytest.raises(KeyDestroyed):
        await keys.open("alice", old, "state/s1")
    other = KeyService.from_settings(engine, Settings())
    with pytest.raises(KeyDestroyed):
        await other.open("alice", old, "state/s1")


async def test_a_payload_read_as_another_user_or_for_another_place_does_not_open(keys: KeyService) -> None:
    blob = await keys.seal("alice", b"hers", "state/s1")
    await keys.seal("bob", b"his", "state/s1")
    with pytest.raises(PayloadUnreadable, match="another user"):
        await keys.open("bob", blob, "state/s1")
    with pytest.raises(PayloadUnreadable):
        await keys.open("alice", blob, "state/s2")


async def test_what_was_written_before_sealing_reads_as_it_is(keys: KeyService) -> None:
    assert await keys.open("alice", b'{"envelope":1,"codec":"json"}', "state/s1") == b'{"envelope":1,"codec":"json"}'


async def test_a_key_row_damaged_by_hand_is_a_typed_error_and_no_new_key_is_made_over_it(
    keys: KeyService, engine: AsyncEngine
) -> None:
    blob = await keys.seal("alice", b"words", "state/s1")
    async with engine.begin() as conn:
        await conn.execute(update(data_keys).values(wrapped=b"\x01" * 60))
    (before,) = await _rows(engine)
    fresh = KeyService.from_settings(engine, Settings())
    for call in (fresh.seal("alice", b"more", "state/s1"), fresh.open("alice", blob, "state/s1")):
        with pytest.raises(DataKeyDamaged) as info:
            await call
        assert "restore" in (info.value.hint or "")
    assert await _rows(engine) == [before]


async def test_a_missing_key_file_is_a_clear_error_and_nothing_is_written(engine: AsyncEngine) -> None:
    keys = KeyService.from_settings(engine, Settings())
    await keys.seal("alice", b"words", "state/s1")
    Settings().resolved_key_file.unlink()
    fresh = KeyService.from_settings(engine, Settings())
    for user in ("alice", "bob"):  # an existing user's key cannot be unwrapped, a new user's cannot be wrapped
        with pytest.raises(KeyUnavailable, match="missing") as info:
            await fresh.seal(user, b"more", "state/s1")
        assert "restore the key file" in (info.value.hint or "")
    assert not Settings().resolved_key_file.exists(), "no new key file is made over a lost one"
    assert [r.user_id for r in await _rows(engine)] == ["alice"]


@pytest.mark.parametrize("damage", ["cut", "not base64", "a number", "destroyed not a list"])
async def test_a_key_file_damaged_by_hand_is_a_typed_error_and_no_new_key_is_made(
    engine: AsyncEngine, damage: str
) -> None:
    await KeyService.from_settings(engine, Settings()).seal("alice", b"words", "state/s1")
    path = Settings().resolved_key_file
    doc = json.loads(path.read_text())
    (kek_id, material), = doc["keys"].items()
    doc["keys"][kek_id] = {"cut": material[:20], "not base64": "~" * 44, "a number": 5}.get(damage, material)
    if damage == "destroyed not a list":
        doc["destroyed"] = None
    path.write_text(json.dumps(doc))
    damaged = path.read_bytes()
    fresh = KeyService.from_settings(engine, Settings())
    for user in ("alice", "bob"):  # an existing user's key cannot be unwrapped, a new user's cannot be wrapped
        with pytest.raises(KeyUnavailable) as info:
            await fresh.seal(user, b"more", "state/s1")
        assert "restore" in (info.value.hint or "")
    assert path.read_bytes() == damaged, "the file is left for its backup to replace"
    assert [r.user_id for r in await _rows(engine)] == ["alice"]


async def test_another_key_file_than_the_databases_is_refused(engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Any) -> None:
    await KeyService.from_settings(engine, Settings()).seal("alice", b"words", "state/s1")
    monkeypatch.setenv("TEAMSTORE_KEY_FILE", str(tmp_path / "other.json"))
    KeyService.from_settings(engine, Settings()).ring.key_file.first()  # a file of its own, another key in it
    with pytest.raises(KeyUnavailable, match="holds no key-encryption key"):
        await KeyService.from_settings(engine, Settings()).seal("bob", b"words", "state/s1")


async def test_the_key_file_is_its_owners_alone_and_one_others_may_read_is_refused(engine: AsyncEngine) -> None:
    await KeyService.from_settings(engine, Settings()).seal("alice", b"words", "state/s1")
    path = Settings().resolved_key_file
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    os.chmod(path, 0o644)  # as a Kubernetes secret volume mounts it, unless told otherwise
    with pytest.raises(ConfigurationError, match="may be read by other users") as info:
        await KeyService.from_settings(engine, Settings()).seal("bob", b"words", "state/s1")
    hint = " ".join((info.value.hint or "").split())
    assert hint.startswith(f"chmod 600 {path};"), hint
    assert "Kubernetes secret volume" in hint and "`defaultMode: 0400`" in hint, "where chmod cannot be run"
    assert "running as root" in hint and "`fsGroup`" in hint, "what defaultMode alone does not fix"


@pytest.mark.parametrize("mode", [0o755, 0o700])
async def test_a_key_file_setting_naming_a_folder_says_so_and_never_to_chmod_it(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, mode: int
) -> None:
    folder = tmp_path / "secrets"
    folder.mkdir()
    folder.chmod(mode)
    monkeypatch.setenv("TEAMSTORE_KEY_FILE", str(folder))
    with pytest.raises(ConfigurationError, match="is a folder") as info:
        await KeyService.from_settings(engine, Settings()).seal("alice", b"words", "state/s1")
    assert "chmod" not in (info.value.hint or "") and "TEAMSTORE_KEY_FILE" in (info.value.hint or "")
    assert stat.S_IMODE(folder.stat().st_mode) == mode and list(folder.iterdir()) == []
    assert await _rows(engine, key_encryption_keys) == [], "no first key-encryption key recorded"


@pytest.mark.s3
async def test_a_kms_key_the_database_never_used_is_refused_with_the_way_to_move_to_it(
    engine: AsyncEngine, kms_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await KeyService.from_settings(engine, Settings()).seal("alice", b"words", "state/s1")
    other = boto3.client("kms").create_key()["KeyMetadata"]["Arn"]
    monkeypatch.setenv("TEAMSTORE_KMS_KEY_ID", other)
    with pytest.raises(ConfigurationError, match="never used") as info:
        await KeyService.from_settings(engine, Settings()).seal("bob", b"words", "state/s1")
    assert "keys rotate --to" in (info.value.hint or "")
    monkeypatch.setenv("TEAMSTORE_KMS_KEY_ID", "alias/no-such-key")
    with pytest.raises(ConfigurationError, match="no key"):
        await KeyService.from_settings(engine, Settings()).seal("bob", b"words", "state/s1")


@pytest.mark.s3
async def test_a_worker_naming_a_kms_key_the_database_never_used_fails_at_start(
    engine: AsyncEngine, kms_outage: Outage, registry_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It started, and only a new user's first session failed: a misconfigured worker looked healthy till then.
    registry = Registry(registry_path, create=True)
    async with Platform(engine, registry, settings=Settings()):
        pass
    assert await _rows(engine, key_encryption_keys) == [], "the start only reads: no first key-encryption key"
    await KeyService.from_settings(engine, Settings()).seal("alice", b"words", "state/s1")
    async with Platform(engine, registry, settings=Settings()):
        pass
    monkeypatch.setenv("TEAMSTORE_KMS_KEY_ID", boto3.client("kms").create_key()["KeyMetadata"]["Arn"])
    with pytest.raises(ConfigurationError, match="never used") as info:
        async with Platform(engine, registry, settings=Settings()):  # refused, and closed as it is
            pass
    assert "keys rotate --to" in (info.value.hint or "")
    kms_outage.down = True  # a KMS that does not answer at start is no reason not to start
    asked = kms_outage.requests
    async with Platform(engine, registry, settings=Settings()):
        assert kms_outage.requests > asked, "KMS was asked"
    kms_outage.down = False
    with pytest.raises(ConfigurationError, match="never used"):  # a new user's first key, once it answers
        await KeyService.from_settings(engine, Settings()).seal("bob", b"words", "state/s1")
    assert [r.user_id for r in await _rows(engine)] == ["alice"]


@pytest.mark.parametrize("endpoint", ["htps://key:s3cret@kms.internal", "ftp://kms.internal", "http://[key:s3cret@kms"])
def test_a_kms_endpoint_no_request_can_go_to_is_a_configuration_error(
    endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # botocore made a client of the first two and failed every request: every session's opening failed as if
    # KMS were down.
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_KMS", endpoint)
    with pytest.raises(ConfigurationError, match="AWS_ENDPOINT_URL_KMS") as info:
        kms.make_client()
    assert "s3cret" not in info.value.message and info.value.hint


def test_the_standard_aws_retry_variables_decide_the_kms_clients_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    # The client's own Config outranked them: AWS_MAX_ATTEMPTS=5 gave 2 attempts without a word, as S3's did.
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    assert kms.make_client().meta.config.retries == {"total_max_attempts": 2, "mode": "standard"}
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "5")
    monkeypatch.setenv("AWS_RETRY_MODE", "adaptive")
    assert kms.make_client().meta.config.retries == {"total_max_attempts": 5, "mode": "adaptive"}
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "0")
    with pytest.raises(ConfigurationError, match="AWS_MAX_ATTEMPTS") as caught:
        kms.make_client()
    assert caught.value.hint and "unset it" in caught.value.hint
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")
    monkeypatch.setenv("AWS_RETRY_MODE", "eager")
    with pytest.raises(ConfigurationError, match="could not set up the KMS client") as caught:
        kms.make_client()
    assert caught.value.hint and "AWS_RETRY_MODE" in caught.value.hint


def test_a_key_id_without_its_secret_says_to_set_both_not_the_region(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # It said to set AWS_DEFAULT_REGION: an operator who left the secret empty looked at the region.
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "")  # as an unset shell variable leaves it
    with pytest.raises(ConfigurationError, match="AWS_SECRET_ACCESS_KEY") as info:
        kms.make_client()
    assert "AKIDEXAMPLE" not in info.value.message
    assert info.value.hint and "AWS_SECRET_ACCESS_KEY" in info.value.hint and "REGION" not in info.value.hint


@pytest.mark.s3
async def test_kms_unreachable_fails_with_a_typed_error_and_writes_nothing(
    engine: AsyncEngine, kms_outage: Outage
) -> None:
    keys = KeyService.from_settings(engine, Settings(key_cache_seconds=60))
    blob = await keys.seal("alice", b"words", "state/s1")
    kms_outage.down = True
    assert await keys.open("alice", blob, "state/s1") == b"words"  # the key is in memory: no KMS request
    fresh = KeyService.from_settings(engine, Settings())
    for user in ("alice", "bob"):
        with pytest.raises(KeyUnavailable, match="KMS could not") as info:
            await fresh.seal(user, b"more", "state/s1")
        assert "retry" in (info.value.hint or "")
    assert [r.user_id for r in await _rows(engine)] == ["alice"]
    kms_outage.down = False
    assert await fresh.open("alice", blob, "state/s1") == b"words"


async def test_a_key_read_as_its_erasure_deletes_it_leaves_memory_by_the_end_of_the_erasures_wait(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker reads alice's row just before the erasure deletes it, and its unwrap takes its time (KMS allows
    # seconds). The erasure then waits the cache's time after its delete before its fence lifts: by then the
    # worker must have let the key go, or a returning alice's new session is sealed under the destroyed key.
    import asyncio
    import threading

    from teamstore.keys import service

    clock = [1000.0]
    monkeypatch.setattr(service, "time", SimpleNamespace(monotonic=lambda: clock[0]))  # the key service's clock
    await KeyService.from_settings(engine, Settings()).data_key("alice")
    worker = KeyService.from_settings(engine, Settings(key_cache_seconds=3))
    unwrapping, go_on, real_get = threading.Event(), threading.Event(), worker.ring.get

    class SlowKek:
        def __init__(self, kek: Any) -> None:
            self.kek = kek

        def unwrap(self, wrapped: bytes, key_id: str) -> bytes:
            unwrapping.set()
            go_on.wait(10)
            return self.kek.unwrap(wrapped, key_id)  # type: ignore[no-any-return]

    monkeypatch.setattr(worker.ring, "get", lambda kek_id: SlowKek(real_get(kek_id)))
    reading = asyncio.ensure_future(worker.data_key("alice", create=False))
    assert await asyncio.to_thread(unwrapping.wait, 10)  # the row is read; the unwrap is under way
    async with engine.begin() as conn:  # the erasure's key step
        await conn.execute(data_keys.delete().where(data_keys.c.user_id == "alice"))
    deleted_at = clock[0]
    clock[0] += 2  # the unwrap takes two seconds
    go_on.set()
    assert await reading is not None
    clock[0] = deleted_at + 3.001  # the erasure's wait is over: its fence lifts
    assert worker.in_memory("alice") is None


async def test_two_workers_making_the_same_users_first_key_at_once_end_with_one(engine: AsyncEngine) -> None:
    import asyncio

    workers = [KeyService.from_settings(engine, Settings()) for _ in range(4)]
    made = await asyncio.gather(*(w.data_key("alice") for w in workers))
    assert len({key.key_id for key in made}) == 1
    async with engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(data_keys)) == 1
