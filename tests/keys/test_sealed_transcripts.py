"""Transcripts sealed before they leave the process, in a local folder and in S3 over HTTP, and in the outbox
when the store refuses; read back by ``transcripts show``'s loader; older plain ones still read, and sealed by
``teamstore keys migrate``."""

from __future__ import annotations

import gzip
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit import outbox
from teamstore.audit.observer import Pseudonyms, TranscriptObserver
from teamstore.audit.schema import outbox as outbox_table
from teamstore.audit.sealing import seal_queued_transcripts, seal_stored_transcripts
from teamstore.audit.subjects import get_or_create_subject, session_key
from teamstore.audit.transcripts.base import TranscriptStore, run_key, subject_prefix
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.record import RunKeys, decode, encode, sealed_context
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.cli.audit import load_transcripts
from teamstore.erasure import RequestStatus
from teamstore.errors import KeyUnavailable
from teamstore.keys import KeyService
from teamstore.keys.sealed import is_sealed
from teamstore.settings import Settings
from tests.audit.teams import CANARY, context, observe_run, triage_team
from tests.erasure.conftest import coordinator
from tests.keys.fenced import FencedOnFirstKey
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
    async with engine.connect() as conn:
        (queued,) = (await conn.execute(select(outbox_table.c.body))).scalars().all()
    assert is_sealed(queued) and CANARY.encode() not in queued
    store = LocalTranscriptStore(tmp_path / "transcripts")
    assert (await outbox.flush(engine, store)).delivered == 1
    (body,) = (await _bodies(store)).values()
    assert body == queued  # delivered as queued: sealed for its key, which is the same in the store


@pytest.mark.s3
async def test_kms_unreachable_at_a_run_writes_no_transcript_sealed_or_plain(
    engine: AsyncEngine, kms_key: str, s3_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    proxy = Outage(s3_env)
    monkeypatch.setenv("AWS_ENDPOINT_URL_KMS", proxy.endpoint)
    proxy.down = True
    store = LocalTranscriptStore(tmp_path / "transcripts")
    observer = TranscriptObserver(store, engine, Pseudonyms(engine), keys=KeyService.from_settings(engine))
    try:
        with pytest.raises(KeyUnavailable):
            await observe_run([observer], triage_team(), context("alice", "s1"), task=f"{CANARY} my router")
    finally:
        proxy.stop()
    assert await store.list_keys("") == []
    assert await outbox.pending(engine) == 0


async def test_transcripts_written_before_sealing_still_read_and_keys_migrate_seals_them(
    engine: AsyncEngine, store: TranscriptStore
) -> None:
    subject = await get_or_create_subject(engine, "alice")
    run_keys = RunKeys(subject, session_key(subject, "s1"))
    body = encode({"kind": "run", "run_id": "old", "started_at": "2026-01-01T00:00:00+00:00"},
                  [{"kind": "item", "seq": 0, "message": {"content": CANARY}}])
    await store.put(run_key(run_keys, "old"), body)  # an older release's transcript
    await outbox.enqueue(engine, "queued", run_key(run_keys, "queued"), subject, body, "S3 unreachable")
    keys = KeyService.from_settings(engine, Settings())
    page, _ = await load_transcripts(engine, store, "alice", "s1", "old", keys=keys)
    assert CANARY in str(page.runs[0]["items"])
    assert await seal_stored_transcripts(engine, store, keys) == 1
    assert await seal_queued_transcripts(engine, keys) == 1
    stored = await store.get(run_key(run_keys, "old"))
    assert is_sealed(stored)
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
    subject = await get_or_create_subject(engine, "alice")
    key = run_key(RunKeys(subject, session_key(subject, "s1")), "old")
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
    subject = await get_or_create_subject(engine, "alice")
    key = run_key(RunKeys(subject, session_key(subject, "s1")), "late")
    await outbox.enqueue(engine, "late", key, subject, b"sealed body", "S3 unreachable")
    queued = datetime.now(UTC) - timedelta(days=20)
    async with engine.begin() as conn:
        await conn.execute(update(outbox_table).values(created_at=queued))
    store = LocalTranscriptStore(tmp_path / "transcripts")
    assert (await outbox.flush(engine, store)).delivered == 1
    assert (tmp_path / "transcripts" / key).stat().st_mtime == pytest.approx(queued.timestamp(), abs=1)
    assert await store.sweep(datetime.now(UTC) - timedelta(days=10)) == 1  # on the run's clock, not delivery's


class _ErasedDuringPut:
    """A transcript store whose next put lets a whole erasure of ``user`` run first: the erasure deletes the
    object ``keys migrate`` read, and only then does the migrate's write land."""

    def __init__(self, inner: TranscriptStore, engine: AsyncEngine, user: str) -> None:
        self.inner, self.engine, self.user, self.erased = inner, engine, user, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def put(self, key: str, body: bytes, **kwargs: Any) -> None:
        if not self.erased:
            self.erased = True
            receipt = await coordinator(self.engine, self.inner).run(self.user, request_id=f"req-{self.user}")
            assert receipt.status is RequestStatus.COMPLETED
            assert await self.inner.list_keys("") == []
        await self.inner.put(key, body, **kwargs)


async def test_keys_migrate_leaves_nothing_of_a_user_erased_while_it_writes_their_transcript_again(
    engine: AsyncEngine, store: TranscriptStore
) -> None:
    subject = await get_or_create_subject(engine, "alice")
    key = run_key(RunKeys(subject, session_key(subject, "s1")), "old")
    await store.put(key, encode({"kind": "run", "run_id": "old"}, [{"kind": "item", "message": CANARY}]))
    racing = _ErasedDuringPut(store, engine, "alice")
    assert await seal_stored_transcripts(engine, racing, KeyService.from_settings(engine, Settings())) == 0
    assert racing.erased
    assert await store.list_keys("") == []  # the late write was deleted again, not left sealed under a dead key
    await store.close()


async def test_keys_migrate_leaves_a_queued_transcript_of_a_user_fenced_meanwhile_to_the_erasure(
    engine: AsyncEngine,
) -> None:
    body = encode({"kind": "run", "run_id": "q"}, [{"kind": "item", "message": CANARY}])
    for user in ("alice", "bob"):
        subject = await get_or_create_subject(engine, user)
        await outbox.enqueue(engine, f"q-{user}", run_key(RunKeys(subject, session_key(subject, "s1")), "q"),
                             subject, body, "S3 unreachable")
    assert await seal_queued_transcripts(engine, FencedOnFirstKey(engine, "alice")) == 1
    async with engine.connect() as conn:
        bodies = dict((await conn.execute(select(outbox_table.c.run_id, outbox_table.c.body))).all())
    assert is_sealed(bodies["q-bob"]) and bodies["q-alice"] == body
