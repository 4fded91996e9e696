"""Transcripts sealed before they leave the process, in a local folder and in S3 over HTTP, and in the outbox
when the store refuses; read back by ``transcripts show``'s loader; older plain ones still read, and sealed by
``teamstore keys migrate``."""

from __future__ import annotations

import asyncio
import gzip
import os
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit import claims, outbox
from teamstore.audit.observer import TranscriptObserver
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.schema import outbox as outbox_table
from teamstore.audit.schema import rewrites
from teamstore.audit.sealing import seal_queued_transcripts, seal_stored_transcripts
from teamstore.audit.subjects import ensure_subject, record_store, session_key
from teamstore.audit.transcripts.base import TranscriptStore, run_key, subject_prefix
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.record import RunKeys, decode, encode, sealed_context
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.cli.transcripts import load_transcripts
from teamstore.db.fence import user_holds
from teamstore.erasure import RequestStatus, StepStatus
from teamstore.erasure.receipt import Receipt
from teamstore.errors import KeyUnavailable, TranscriptFolderElsewhere, TranscriptUnavailable, UploadInDoubt
from teamstore.keys import KeyService
from teamstore.keys.passed_over import PassedOver
from teamstore.keys.sealed import is_sealed
from teamstore.settings import Settings
from tests.audit.teams import CANARY, context, observe_run, triage_team
from tests.erasure.conftest import coordinator
from tests.keys.damaged import with_damaged_key
from tests.keys.fenced import ErasedOnFirstKey, FencedOnFirstKey, data_key_users
from tests.keys.outage import Outage


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> TranscriptStore:
    """A local folder, or a bucket on moto's S3 over HTTP."""
    if request.param == "local":
        return LocalTranscriptStore(tmp_path / "transcripts")
    request.getfixturevalue("s3_env")
    bucket = f"ts-{uuid.uuid4().hex[:12]}"
    client = make_client()
    client.create_bucket(Bucket=bucket)
    return S3TranscriptStore(client, bucket, "audit")


async def _bodies(store: TranscriptStore) -> dict[str, bytes]:
    return {key: await store.get(key) for key in await store.list_keys("")}


async def test_a_transcript_is_sealed_before_it_leaves_the_process_and_reads_back_whole(
    engine: AsyncEngine, store: TranscriptStore
) -> None:
    keys = KeyService.from_settings(engine, Settings())
    observer = TranscriptObserver(store, engine, Pseudonyms(engine), keys=keys)
    await observe_run([observer], triage_team(), context("alice", "s1"), task=f"{CANARY} my router")
    await observer.drain()
    (body,) = (await _bodies(store)).values()
    assert is_sealed(body) and CANARY.encode() not in body and CANARY.encode() not in _unpacked(body)
    page, _ = await load_transcripts(engine, store, "alice", "s1", None, keys=KeyService.from_settings(engine))
    assert page.total == 1 and CANARY in str(page.runs[0]["items"])
    await store.close()


def _content_type(store: TranscriptStore, key: str) -> str | None:
    """The object's content type on S3 (``None`` for a folder, which keeps none)."""
    if not isinstance(store, S3TranscriptStore):
        return None
    head = store.client.head_object(Bucket=store.bucket, Key=f"{store.prefix}/{key}")
    return str(head["ContentType"])


def _unpacked(body: bytes) -> bytes:
    try:
        return gzip.decompress(body)
    except OSError:
        return b""


async def test_a_transcript_the_store_refuses_waits_in_the_outbox_sealed_and_is_delivered_sealed(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the folder should be")  # every write fails: the transcript is queued
    keys = KeyService.from_settings(engine, Settings())
    observer = TranscriptObserver(LocalTranscriptStore(blocked), engine, Pseudonyms(engine), keys=keys)
    await observe_run([observer], triage_team(), context("alice", "s1"), task=f"{CANARY} my router")
    await observer.drain()  # as a platform's close: its flush of the outbox is over
    async with engine.connect() as conn:
        (queued,) = (await conn.execute(select(outbox_table.c.body))).scalars().all()
    assert is_sealed(queued) and CANARY.encode() not in queued
    store = LocalTranscriptStore(tmp_path / "transcripts")
    assert (await outbox.flush(engine, store)).delivered == 1
    (body,) = (await _bodies(store)).values()
    assert body == queued  # delivered as queued: sealed for its key, which is the same in the store


@pytest.mark.s3
async def test_kms_unreachable_at_a_run_writes_no_transcript_sealed_or_plain(
    engine: AsyncEngine, kms_outage: Outage, tmp_path: Path
) -> None:
    kms_outage.down = True
    store = LocalTranscriptStore(tmp_path / "transcripts")
    observer = TranscriptObserver(store, engine, Pseudonyms(engine), keys=KeyService.from_settings(engine))
    with pytest.raises(KeyUnavailable):
        await observe_run([observer], triage_team(), context("alice", "s1"), task=f"{CANARY} my router")
    await observer.drain()
    assert await store.list_keys("") == []
    assert await outbox.pending(engine) == 0


async def test_transcripts_written_before_sealing_still_read_and_keys_migrate_seals_them(
    engine: AsyncEngine, store: TranscriptStore
) -> None:
    subject, secret = await ensure_subject(engine, "alice")
    run_keys = RunKeys(subject, session_key(secret, "s1"))
    body = encode({"kind": "run", "run_id": "old", "started_at": "2026-01-01T00:00:00+00:00"},
                  [{"kind": "item", "seq": 0, "message": {"content": CANARY}}])
    await store.put(run_key(run_keys, "old"), body)  # an older release's transcript
    assert _content_type(store, run_key(run_keys, "old")) in ("application/gzip", None)
    await outbox.enqueue(engine, "queued", run_key(run_keys, "queued"), subject, body, "S3 unreachable")
    keys = KeyService.from_settings(engine, Settings())
    page, _ = await load_transcripts(engine, store, "alice", "s1", "old", keys=keys)
    assert CANARY in str(page.runs[0]["items"])
    assert await seal_stored_transcripts(engine, store, keys) == 1
    assert [row["run_id"] for row in await _outbox_rows(engine)] == ["queued"]  # the write's record went once it landed
    assert await seal_queued_transcripts(engine, keys) == 1
    stored = await store.get(run_key(run_keys, "old"))
    assert is_sealed(stored)
    # Sealed, it is no longer gzip, and S3 says so (a `zcat` of it would read nothing).
    assert _content_type(store, run_key(run_keys, "old")) in ("application/octet-stream", None)
    assert decode(await keys.open("alice", stored, sealed_context(run_key(run_keys, "old"))))[0]["run_id"] == "old"
    async with engine.connect() as conn:
        assert is_sealed((await conn.execute(select(outbox_table.c.body))).scalar_one())
    assert await seal_stored_transcripts(engine, store, keys) == 0  # nothing left to seal
    assert await store.list_keys(subject_prefix(subject))
    await store.close()


async def test_keys_migrate_keeps_a_transcripts_write_time_so_its_retention_is_not_restarted(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    subject, secret = await ensure_subject(engine, "alice")
    key = run_key(RunKeys(subject, session_key(secret, "s1")), "old")
    await store.put(key, encode({"kind": "run", "run_id": "old"}, []))  # an older release's transcript
    written = datetime.now(UTC) - timedelta(days=80)
    path = tmp_path / "transcripts" / key
    os.utime(path, (written.timestamp(), written.timestamp()))
    assert await seal_stored_transcripts(engine, store, KeyService.from_settings(engine, Settings())) == 1
    assert is_sealed(path.read_bytes()) and path.stat().st_mtime == pytest.approx(written.timestamp(), abs=1)
    assert await store.sweep(datetime.now(UTC) - timedelta(days=30)) == 1  # gone on its first retention's day


async def test_a_transcript_delivered_late_from_the_outbox_keeps_the_time_it_was_queued(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    subject, secret = await ensure_subject(engine, "alice")
    key = run_key(RunKeys(subject, session_key(secret, "s1")), "late")
    await outbox.enqueue(engine, "late", key, subject, b"sealed body", "S3 unreachable")
    queued = datetime.now(UTC) - timedelta(days=20)
    async with engine.begin() as conn:
        await conn.execute(update(outbox_table).values(created_at=queued))
    store = LocalTranscriptStore(tmp_path / "transcripts")
    assert (await outbox.flush(engine, store)).delivered == 1
    assert (tmp_path / "transcripts" / key).stat().st_mtime == pytest.approx(queued.timestamp(), abs=1)
    assert await store.sweep(datetime.now(UTC) - timedelta(days=10)) == 1  # on the run's clock, not delivery's


class _ErasedDuringPut:
    """A transcript store whose next put starts an erasure of ``user`` first and lets it fence the user: the
    erasure runs while ``keys migrate``'s write of the object it read is on its way."""

    def __init__(self, inner: TranscriptStore, engine: AsyncEngine, user: str) -> None:
        self.inner, self.engine, self.user = inner, engine, user
        self.erasing: asyncio.Task[Receipt] | None = None
        self.landed_at: datetime | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def put(self, key: str, body: bytes, **kwargs: Any) -> None:
        if self.erasing is None:
            self.erasing = asyncio.create_task(coordinator(self.engine, self.inner).run(
                self.user, request_id="req-sealing"))
            while not await _fenced(self.engine, self.user):
                await asyncio.sleep(0.01)
        await self.inner.put(key, body, **kwargs)
        self.landed_at = datetime.now(UTC)


async def _fenced(engine: AsyncEngine, user: str) -> bool:
    async with engine.connect() as conn:
        return user in (await conn.scalars(select(user_holds.c.user_id))).all()


async def _outbox_rows(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        return [dict(row._mapping) for row in (await conn.execute(select(outbox_table))).all()]


async def test_keys_migrate_leaves_nothing_of_a_user_erased_while_it_writes_their_transcript_again(
    engine: AsyncEngine, store: TranscriptStore
) -> None:
    subject, secret = await ensure_subject(engine, "alice")
    key = run_key(RunKeys(subject, session_key(secret, "s1")), "old")
    await store.put(key, encode({"kind": "run", "run_id": "old"}, [{"kind": "item", "message": CANARY}]))
    racing = _ErasedDuringPut(store, engine, "alice")
    assert await seal_stored_transcripts(engine, racing, KeyService.from_settings(engine, Settings())) == 0
    assert racing.erasing is not None and racing.landed_at is not None
    receipt = await racing.erasing
    assert receipt.status is RequestStatus.COMPLETED
    assert receipt.completed_at is not None and receipt.completed_at > racing.landed_at  # it waited for the write
    assert await store.list_keys("") == []  # the late write was deleted again, not left sealed under a dead key
    assert await _outbox_rows(engine) == []
    async with engine.connect() as conn:  # its record as a transcript written again went with the erasure
        assert (await conn.execute(select(rewrites))).all() == []
    await store.close()


class _Faulty:
    """A folder whose puts end as ``fault`` says. ``unanswered``: as an upload S3 left unanswered, answered
    ``UploadInDoubt``, and held back until :meth:`land` stores it, late. ``refused``: answered with an error,
    nothing stored. ``hangs``: never ends (the process sending it is killed meanwhile)."""

    def __init__(self, inner: LocalTranscriptStore, fault: str) -> None:
        self.inner, self.fault = inner, fault
        self.held: list[tuple[str, bytes, dict[str, Any]]] = []
        self.started = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def put(self, key: str, body: bytes, **kwargs: Any) -> None:
        self.started.set()
        if self.fault == "refused":
            raise TranscriptUnavailable("could not write transcripts: S3 answered 503 SlowDown")
        if self.fault == "hangs":
            await asyncio.Event().wait()
        self.held.append((key, body, kwargs))
        raise UploadInDoubt("S3 too slow or cut off while answering a transcript upload: it may land all the same")

    async def land(self) -> None:
        for key, body, kwargs in self.held:
            await self.inner.put(key, body, **kwargs)


async def _plain_transcript(engine: AsyncEngine, folder: LocalTranscriptStore, user: str) -> str:
    """A transcript of ``user`` written before sealing; its subject."""
    subject, secret = await ensure_subject(engine, user)
    key = run_key(RunKeys(subject, session_key(secret, "s1")), "old")
    await folder.put(key, encode({"kind": "run", "run_id": "old"}, [{"kind": "item", "message": CANARY}]))
    return subject


async def test_a_keys_migrate_write_left_unanswered_holds_an_erasure_of_its_user_until_it_can_no_longer_land(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    folder = LocalTranscriptStore(tmp_path / "transcripts")
    subject = await _plain_transcript(engine, folder, "alice")
    late = _Faulty(folder, "unanswered")
    with pytest.raises(UploadInDoubt, match="may land") as raised:
        await seal_stored_transcripts(engine, late, KeyService.from_settings(engine, Settings()), late_upload_s=3.0)
    (record,) = await _outbox_rows(engine)  # on record, with nothing of the transcript
    assert record["body"] is None and record["subject_key"] == subject and CANARY not in str(record)
    assert "keys migrate" in (raised.value.hint or "")
    lands_by = await claims.in_doubt_until(engine, subject)
    assert lands_by is not None and lands_by <= datetime.now(UTC) + timedelta(seconds=3)

    failed = await coordinator(engine, folder, upload_wait_seconds=0.2).run("alice", request_id="req-881")

    transcripts = failed.stores["transcripts"]
    assert failed.status is RequestStatus.FAILED and transcripts.status is StepStatus.FAILED
    assert f"{lands_by:%Y-%m-%dT%H:%M:%SZ}" in (transcripts.detail or "")
    await late.land()  # the write lands after all, sealed, while the fence stands
    done = await coordinator(engine, folder).run("alice", request_id="req-881")  # waits out the rest, then erases
    assert done.ok and done.stores["outbox"].counts.rows == 1 and datetime.now(UTC) >= lands_by
    assert await folder.list_keys("") == [] and await _outbox_rows(engine) == []


async def test_keys_migrate_starts_no_write_for_a_user_fenced_before_it_was_on_record(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # The erasure may have looked for uploads of the user before the record was made: a write started then,
    # and left unanswered, would land after the erasure with nothing to wait for it.
    folder = LocalTranscriptStore(tmp_path / "transcripts")
    await _plain_transcript(engine, folder, "alice")
    await KeyService.from_settings(engine, Settings()).data_key("alice")
    late = _Faulty(folder, "unanswered")
    assert await seal_stored_transcripts(engine, late, FencedOnFirstKey(engine, "alice")) == 0
    assert late.held == []  # left plain, to the erasure
    assert await claims.purge_settled(engine) == 1 and await _outbox_rows(engine) == []


async def test_a_keys_migrate_write_refused_with_an_answer_keeps_no_erasure_waiting(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    folder = LocalTranscriptStore(tmp_path / "transcripts")
    subject = await _plain_transcript(engine, folder, "alice")
    with pytest.raises(TranscriptUnavailable) as raised:
        await seal_stored_transcripts(engine, _Faulty(folder, "refused"), KeyService.from_settings(engine, Settings()))
    assert not isinstance(raised.value, UploadInDoubt) and "keys migrate" in (raised.value.hint or "")
    assert await claims.in_doubt_until(engine, subject) is None  # nothing may land
    assert await claims.purge_settled(engine) == 1 and await _outbox_rows(engine) == []


async def test_a_keys_migrate_killed_mid_write_leaves_the_write_on_record_until_it_can_no_longer_land(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    folder = LocalTranscriptStore(tmp_path / "transcripts")
    subject = await _plain_transcript(engine, folder, "alice")
    hung = _Faulty(folder, "hangs")
    migrating = asyncio.create_task(
        seal_stored_transcripts(engine, hung, KeyService.from_settings(engine, Settings()), late_upload_s=60))
    await hung.started.wait()
    migrating.cancel()
    with pytest.raises(asyncio.CancelledError):
        await migrating
    lands_by = await claims.in_doubt_until(engine, subject)
    # The write may be stored for as long as S3 takes once the connection is gone, after a last renewal.
    assert lands_by is not None and lands_by >= datetime.now(UTC) + timedelta(seconds=60)
    assert await claims.purge_settled(engine) == 0  # retention keeps the record while the write may land
    async with engine.begin() as conn:  # that time passes
        await conn.execute(update(outbox_table).values(claimed_until=datetime.now(UTC) - timedelta(seconds=1)))
    assert await claims.in_doubt_until(engine, subject) is None
    assert await claims.purge_settled(engine) == 1 and await _outbox_rows(engine) == []


async def test_keys_migrate_holds_one_queued_transcript_in_memory_at_a_time(engine: AsyncEngine) -> None:
    # The transcripts that queue are the large ones, and an outage fills the outbox with them: read all at once
    # to be sealed, they were gigabytes.
    size, count = 2 << 20, 24
    subject, secret = await ensure_subject(engine, "big")
    run_keys = RunKeys(subject, session_key(secret, "s1"))
    for n in range(count):
        await outbox.enqueue(engine, f"q-{n:02d}", run_key(run_keys, f"q-{n:02d}"), subject, os.urandom(size),
                             "S3 unreachable")
    keys = KeyService.from_settings(engine, Settings())
    await keys.data_key("big")
    tracemalloc.start()
    try:
        sealed = await seal_queued_transcripts(engine, keys)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sealed == count and all(is_sealed(row["body"]) for row in await _outbox_rows(engine))
    assert peak < 10 * size, f"peak {peak >> 20} MiB for {count} transcripts of {size >> 20} MiB"


async def test_keys_migrate_passes_over_a_user_whose_key_row_is_damaged_and_seals_everyone_elses_transcripts(
    engine: AsyncEngine, store: TranscriptStore
) -> None:
    body = encode({"kind": "run", "run_id": "q"}, [{"kind": "item", "message": CANARY}])
    objects = {}
    for user in ("alice", "bob"):  # alice's queued one read first
        subject, secret = await ensure_subject(engine, user)
        keys_of = RunKeys(subject, session_key(secret, "s1"))
        await outbox.enqueue(engine, f"q-{user}", run_key(keys_of, "q"), subject, body, "S3 unreachable")
        objects[user] = [run_key(keys_of, "old-1"), run_key(keys_of, "old-2")]
        for key in objects[user]:
            await store.put(key, body)  # an older release's transcripts
    damaged = await with_damaged_key(engine, "alice")
    passed = PassedOver()
    keys = KeyService.from_settings(engine, Settings())
    assert await seal_queued_transcripts(engine, keys, passed=passed) == 1
    assert await seal_stored_transcripts(engine, store, keys, passed=passed) == 2
    assert passed.as_dict() == {"damaged": [damaged], "unusable": []}, "her row, once, by its key id"
    async with engine.connect() as conn:
        bodies = dict((await conn.execute(select(outbox_table.c.run_id, outbox_table.c.body))).all())
    assert bodies["q-alice"] == body and is_sealed(bodies["q-bob"])
    assert [await store.get(key) for key in objects["alice"]] == [body, body], "left as they were"
    assert all(is_sealed(stored) for stored in [await store.get(key) for key in objects["bob"]])
    await store.close()


async def test_keys_migrate_leaves_a_queued_transcript_of_a_user_fenced_meanwhile_to_the_erasure(
    engine: AsyncEngine,
) -> None:
    body = encode({"kind": "run", "run_id": "q"}, [{"kind": "item", "message": CANARY}])
    for user in ("alice", "bob"):
        subject, secret = await ensure_subject(engine, user)
        await outbox.enqueue(engine, f"q-{user}", run_key(RunKeys(subject, session_key(secret, "s1")), "q"),
                             subject, body, "S3 unreachable")
    assert await seal_queued_transcripts(engine, FencedOnFirstKey(engine, "alice")) == 1
    async with engine.connect() as conn:
        bodies = dict((await conn.execute(select(outbox_table.c.run_id, outbox_table.c.body))).all())
    assert is_sealed(bodies["q-bob"]) and bodies["q-alice"] == body


async def test_keys_migrate_makes_no_data_key_for_a_user_whose_erasure_ended_after_it_read_their_queued_transcript(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    body = encode({"kind": "run", "run_id": "q"}, [{"kind": "item", "message": CANARY}])
    for user in ("alice", "bob"):
        subject, secret = await ensure_subject(engine, user)
        await outbox.enqueue(engine, f"q-{user}", run_key(RunKeys(subject, session_key(secret, "s1")), "q"),
                             subject, body, "S3 unreachable")
    keys = ErasedOnFirstKey(engine, LocalTranscriptStore(tmp_path / "transcripts"), "alice")
    assert await seal_queued_transcripts(engine, keys) == 1
    assert keys.receipt is not None
    assert await data_key_users(engine) == ["bob"]
    assert [row["run_id"] for row in await _outbox_rows(engine)] == ["q-bob"]


async def test_keys_migrate_makes_no_data_key_for_a_user_whose_erasure_ended_after_it_read_their_transcript(
    engine: AsyncEngine, store: TranscriptStore
) -> None:
    subject, secret = await ensure_subject(engine, "alice")
    key = run_key(RunKeys(subject, session_key(secret, "s1")), "old")
    await store.put(key, encode({"kind": "run", "run_id": "old"}, [{"kind": "item", "message": CANARY}]))
    keys = ErasedOnFirstKey(engine, store, "alice")
    assert await seal_stored_transcripts(engine, store, keys) == 0
    assert keys.receipt is not None
    assert await data_key_users(engine) == []
    assert await store.list_keys("") == [] and await _outbox_rows(engine) == []
    await store.close()


async def test_keys_migrate_on_a_machine_without_the_transcript_folder_says_so_not_sealed_0(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # It reported 0 stored transcripts sealed, while the plain ones stayed so on the workers' disk.
    folder = LocalTranscriptStore(tmp_path / "workers-disk")
    subject = await _plain_transcript(engine, folder, "alice")
    await record_store(engine, subject, folder.url)
    (tmp_path / "workers-disk").rename(tmp_path / "unmounted")
    keys = KeyService.from_settings(engine, Settings())
    with pytest.raises(TranscriptFolderElsewhere, match="a folder this machine does not have"):
        await seal_stored_transcripts(engine, folder, keys)
    (tmp_path / "unmounted").rename(tmp_path / "workers-disk")
    assert await seal_stored_transcripts(engine, folder, keys) == 1
