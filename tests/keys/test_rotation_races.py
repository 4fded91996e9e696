"""A rotation meeting the writes that run beside it: a user's first key written just as the rotation retires the
key-encryption key it is wrapped under, and another rotation retiring the one a rotation is moving keys to.
Nothing may stay under a retired KEK, where ``retire`` would destroy it with its KEK or keep the KEK alive past
the bound erasure receipts give for backups."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import boto3
import psycopg
import pytest
from sqlalchemy import event, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.keys import KeyService
from teamstore.keys.rotation import RotationReport, rotate
from teamstore.keys.schema import data_keys
from teamstore.keys.status import status
from teamstore.settings import Settings

LOCK_WAITS = ("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
              "AND datname = current_database()")


async def _keks(engine: AsyncEngine) -> dict[str, str]:
    async with engine.connect() as conn:
        return {r.user_id: r.kek_id for r in (await conn.execute(select(data_keys))).all()}


def _rotation_in_a_thread(url: str, reports: list[RotationReport]) -> threading.Thread:
    """A rotation run by another process's worth of code: its own thread, loop and engine."""

    async def rotation() -> None:
        engine = create_engine(url)
        try:
            reports.append(await rotate(KeyService.from_settings(engine, Settings()), retire_days=7))
        finally:
            await engine.dispose()

    thread = threading.Thread(target=asyncio.run, args=(rotation(),))
    thread.start()
    return thread


@pytest.mark.postgres
async def test_a_users_first_key_committed_as_a_rotation_retires_its_kek_is_moved_by_that_rotation(
    postgres_url: str
) -> None:
    engine = create_engine(postgres_url)
    await upgrade(engine)
    try:
        keys = KeyService.from_settings(engine, Settings())
        await keys.seal("alice", b"her words", "memory/facts")
        first = await keys.current_kek()
        reports: list[RotationReport] = []
        rotations: list[threading.Thread] = []
        inserted: list[str] = []

        def note_the_insert(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            if statement.startswith("INSERT INTO ts_data_keys"):
                inserted.append(statement)

        def a_rotation_as_dave_commits(_conn: Any) -> None:
            # Dave's key is inserted under `first`, not yet committed: a rotation runs now, until it is done or
            # waits on a lock (dave's transaction then commits, and it goes on).
            if not inserted or rotations:
                return
            rotations.append(_rotation_in_a_thread(postgres_url, reports))
            with psycopg.connect(postgres_url, autocommit=True) as watcher:
                while rotations[0].is_alive() and not watcher.execute(LOCK_WAITS).fetchone()[0]:  # type: ignore[index]
                    time.sleep(0.01)

        event.listen(engine.sync_engine, "before_cursor_execute", note_the_insert)
        event.listen(engine.sync_engine, "commit", a_rotation_as_dave_commits)
        blob = await keys.seal("dave", b"his first words", "memory/facts")
        event.remove(engine.sync_engine, "commit", a_rotation_as_dave_commits)
        event.remove(engine.sync_engine, "before_cursor_execute", note_the_insert)
        await asyncio.to_thread(rotations[0].join)

        rotated = reports[0]
        assert rotated.created and rotated.kek_id != first
        assert await _keks(engine) == {"alice": rotated.kek_id, "dave": rotated.kek_id}, \
            "dave's key moved with the rotation, not left under the key-encryption key it retired"
        assert await KeyService.from_settings(engine, Settings()).open("dave", blob, "memory/facts") == \
            b"his first words"
        following = await rotate(keys, retire_days=7)
        assert following.created, "the next rotation makes a new key-encryption key; none was left unfinished"
        assert set((await _keks(engine)).values()) == {following.kek_id}
    finally:
        await engine.dispose()


class _Stopped(Exception):
    """Stops a rotation where a test wants it (as a killed process would)."""


@pytest.mark.s3
async def test_a_rotation_whose_new_kek_another_rotation_retires_meanwhile_moves_the_keys_under_that_ones(
    engine: AsyncEngine, s3_env: str
) -> None:
    users = ("alice", "bob", "carol")
    keys = KeyService.from_settings(engine, Settings())
    sealed = {user: await keys.seal(user, f"{user}'s words".encode(), "memory/facts") for user in users}
    target = boto3.client("kms").create_key(Description="rotated to meanwhile")["KeyMetadata"]["Arn"]
    others: list[str] = []

    async def stop(*_args: Any) -> None:
        raise _Stopped

    async def another_rotation_begins() -> None:
        # After this rotation made its key current and read its first key: another one makes a KMS key current in
        # its place, and is stopped before it moves a key.
        if not others:
            others.append("begun")
            with pytest.raises(_Stopped):
                await rotate(KeyService.from_settings(engine, Settings()), to=target, retire_days=7, on_batch=stop)

    report = await rotate(keys, retire_days=7, batch=1, on_batch=another_rotation_begins)
    assert report.kek_id == f"kms:{target}", "the rotation went on under the key the other one made current"
    assert await _keks(engine) == dict.fromkeys(users, f"kms:{target}"), \
        "no key stored under the key-encryption key the other rotation retired"
    states = {k["kek_id"]: k["state"] for k in (await status(keys, Settings()))["keks"]}
    assert sorted(states.values()) == ["current", "retired", "retired"]
    assert all(k["data_keys"] == 0 for k in (await status(keys, Settings()))["keks"] if k["state"] == "retired")
    for user, blob in sealed.items():
        assert await KeyService.from_settings(engine, Settings()).open(user, blob, "memory/facts") == \
            f"{user}'s words".encode()


@pytest.mark.postgres
async def test_a_worker_granted_only_select_and_insert_on_the_key_tables_makes_a_new_users_key_beside_rotations(
    postgres_url: str
) -> None:
    # The grants operations.md gives workers on the key tables (and the fence's table, read): a row lock on the
    # key-encryption key (FOR SHARE) would need UPDATE; the lock a rotation waits on needs none.
    admin = create_engine(postgres_url)
    await upgrade(admin)
    await KeyService.from_settings(admin, Settings()).seal("alice", b"her words", "memory/facts")
    role = f"ts_key_worker_{os.getpid()}"
    async with admin.begin() as conn:
        await conn.execute(text(f"DROP ROLE IF EXISTS {role}"))
        await conn.execute(text(f"CREATE ROLE {role} LOGIN"))
        await conn.execute(text(f"GRANT USAGE ON SCHEMA public TO {role}"))
        await conn.execute(text(f"GRANT SELECT, INSERT ON ts_data_keys, ts_key_encryption_keys TO {role}"))
        await conn.execute(text(f"GRANT SELECT ON ts_user_holds TO {role}"))
    scheme, _, rest = postgres_url.partition("://")
    worker = create_engine(f"{scheme}://{role}@{rest.partition('@')[2]}")
    try:
        keys = KeyService.from_settings(worker, Settings())
        blob = await keys.seal("dave", b"his words", "memory/facts")
        rotated = await rotate(KeyService.from_settings(admin, Settings()), retire_days=7)
        assert await keys.seal("erin", b"hers", "memory/facts")
        assert await _keks(admin) == dict.fromkeys(("alice", "dave", "erin"), rotated.kek_id)
        assert await KeyService.from_settings(admin, Settings()).open("dave", blob, "memory/facts") == b"his words"
    finally:
        await worker.dispose()
        async with admin.begin() as conn:
            await conn.execute(text(f"DROP OWNED BY {role}"))
            await conn.execute(text(f"DROP ROLE {role}"))
        await admin.dispose()
