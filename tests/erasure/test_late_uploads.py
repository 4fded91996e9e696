"""Uploads that land late: an erasure never completes while a transcript upload of its user may still land.

S3 may store a PUT its client stopped waiting for (the run's deadline passed) or gave up on (read timeout):
the :class:`HoldingProxy` holds each upload in front of moto until the test lets it land, after the client
has moved on. Through a session run (the worker), through an outbox flush (``transcripts flush``) and through
``keys migrate`` writing a stored transcript again, on SQLite and Postgres, the erasure waits for it and then
no version with the user's words is left.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.audit import claims, outbox
from teamstore.audit.ledger_observer import LedgerObserver
from teamstore.audit.observer import TranscriptObserver
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.sealing import seal_stored_transcripts
from teamstore.audit.subjects import ensure_subject, find_subject, session_key
from teamstore.audit.transcripts.base import run_key
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.record import RunKeys
from teamstore.audit.transcripts.s3 import S3TranscriptStore
from teamstore.db.fence import user_holds
from teamstore.erasure import RequestStatus, StepStatus
from teamstore.erasure.receipt import Receipt
from teamstore.errors import UploadInDoubt
from teamstore.keys import KeyService
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from tests.audit.fault_server import HoldingProxy
from tests.erasure.conftest import coordinator
from tests.erasure.seed import all_versions

LATE_UPLOAD_S = 2.0
"""How long after its client gave up S3 may still store an upload, in these tests (60 s by default)."""


def _late_store(proxy: HoldingProxy, bucket: str, read_timeout: float) -> S3TranscriptStore:
    """The bucket reached through ``proxy``, by a client that gives up after ``read_timeout`` seconds and
    would try twice if it were let (botocore's standard retries)."""
    client = boto3.client("s3", endpoint_url=proxy.endpoint, config=Config(
        read_timeout=read_timeout, retries={"total_max_attempts": 2, "mode": "standard"}))
    return S3TranscriptStore(client, bucket, "audit")


def _subject_versions(store: S3TranscriptStore, subject: str) -> list[dict[str, object]]:
    return [v for v in all_versions(store.client, store.bucket) if f"/subjects/{subject}/" in str(v["Key"])]


@pytest.fixture
async def proxy(s3_endpoint: str) -> AsyncIterator[HoldingProxy]:
    held = HoldingProxy(s3_endpoint)
    yield held
    held.stop()


async def _erase_while_it_lands(
    engine: AsyncEngine, store: S3TranscriptStore, proxy: HoldingProxy, user: str, subject: str
) -> Receipt:
    """Start the erasure, let the held upload land while it runs (S3 stores it), check that no version of the
    subject is left once both are over, and return the receipt."""
    erasing = asyncio.create_task(coordinator(engine, store).run(user, request_id="req-late"))
    await asyncio.sleep(0.5)  # the erasure is under way
    proxy.release()
    assert await asyncio.to_thread(proxy.landed.wait, 10)
    landed_at = datetime.now(UTC)
    receipt = await erasing
    await asyncio.sleep(0.5)  # anything else still on its way lands too
    assert _subject_versions(store, subject) == [], "the late upload outlived the erasure"
    assert receipt.completed_at is not None and receipt.completed_at > landed_at  # it waited for the upload
    return receipt


async def _run_one(
    engine: AsyncEngine, registry: Registry, late: S3TranscriptStore, user: str
) -> tuple[Platform, TranscriptObserver]:
    """One session run whose transcript upload goes to ``late``; the run waits 0.2 s for it, then moves on.
    The worker keeps running (the caller closes the platform): it follows the upload meanwhile."""
    pseudonyms = Pseudonyms(engine)
    observer = TranscriptObserver(late, engine, pseudonyms, upload_deadline_s=0.2, late_upload_s=LATE_UPLOAD_S)
    platform = Platform(engine, registry, settings=Settings(auto_migrate=True, registry_refresh_seconds=0),
                        observers=[LedgerObserver(engine, pseudonyms), observer])
    async with platform.session(user, "s1", team="support_triage") as session:
        await session.run(f"CANARY-{user} my router keeps dropping")
    return platform, observer


@pytest.mark.s3
async def test_a_run_upload_s3_left_unanswered_and_stores_afterwards_leaves_nothing_after_the_erasure(
    engine: AsyncEngine, registry: Registry, s3_store: S3TranscriptStore, proxy: HoldingProxy
) -> None:
    # The run moves on after 0.2 s (the transcript queued), the client gives up after 1 s (read timeout,
    # nothing retried), and S3 stores the PUT afterwards: the erasure must not complete before it can no
    # longer land, and must then remove it.
    late = _late_store(proxy, s3_store.bucket, read_timeout=1.0)
    platform, observer = await _run_one(engine, registry, late, "uma")
    try:
        assert await asyncio.to_thread(proxy.arrived.wait, 10)
        await observer.drain()  # the client gave up: the upload's outcome is unknown
        subject = await find_subject(engine, "uma")
        assert subject is not None

        receipt = await _erase_while_it_lands(engine, s3_store, proxy, "uma", subject)

        assert receipt.ok and receipt.stores["outbox"].counts.rows == 1
        assert receipt.stores["transcripts"].counts.versions == 1  # the one that landed, and no retry of it
    finally:
        await platform.aclose()
        await late.close()


@pytest.mark.s3
async def test_a_run_upload_still_on_its_way_holds_the_erasure_until_it_lands_and_is_removed(
    engine: AsyncEngine, registry: Registry, s3_store: S3TranscriptStore, proxy: HoldingProxy
) -> None:
    late = _late_store(proxy, s3_store.bucket, read_timeout=30)  # the client waits for S3 all along
    platform, observer = await _run_one(engine, registry, late, "una")
    try:
        assert await asyncio.to_thread(proxy.arrived.wait, 10)
        subject = await find_subject(engine, "una")
        assert subject is not None

        receipt = await _erase_while_it_lands(engine, s3_store, proxy, "una", subject)
        await observer.drain()

        assert receipt.ok
    finally:
        await platform.aclose()
        await late.close()


async def _queue(engine: AsyncEngine, user: str) -> str:
    subject, secret = await ensure_subject(engine, user)
    keys = RunKeys(subject, session_key(secret, "s1"))
    await outbox.enqueue(engine, f"run-{user}", run_key(keys, f"run-{user}"), subject, b"CANARY", "S3 down")
    return subject


@pytest.mark.s3
async def test_a_flush_upload_s3_left_unanswered_and_stores_afterwards_leaves_nothing_after_the_erasure(
    engine: AsyncEngine, s3_store: S3TranscriptStore, proxy: HoldingProxy
) -> None:
    # `transcripts flush` gives up on its PUT (read timeout): the transcript stays queued, and its upload
    # stays on record as one that may land until it no longer can.
    subject = await _queue(engine, "vic")
    late = _late_store(proxy, s3_store.bucket, read_timeout=1.0)
    try:
        report = await outbox.flush(engine, late, late_upload_s=LATE_UPLOAD_S)

        receipt = await _erase_while_it_lands(engine, s3_store, proxy, "vic", subject)

        assert receipt.ok and receipt.stores["transcripts"].counts.versions == 1
        assert await outbox.pending(engine) == 0
        assert (report.delivered, report.failed, report.remaining) == (0, 1, 1)
        assert report.last_error and "may land" in report.last_error
    finally:
        await late.close()


@pytest.mark.s3
async def test_a_flush_upload_still_on_its_way_holds_the_erasure_until_it_lands_and_is_removed(
    engine: AsyncEngine, s3_store: S3TranscriptStore, proxy: HoldingProxy
) -> None:
    subject = await _queue(engine, "val")
    late = _late_store(proxy, s3_store.bucket, read_timeout=30)
    try:
        flushing = asyncio.create_task(outbox.flush(engine, late, late_upload_s=LATE_UPLOAD_S))
        assert await asyncio.to_thread(proxy.arrived.wait, 10)

        receipt = await _erase_while_it_lands(engine, s3_store, proxy, "val", subject)
        report = await flushing

        assert receipt.ok and receipt.stores["outbox"].counts.rows == 1
        assert report.delivered == 0 and await outbox.pending(engine) == 0
    finally:
        await late.close()


@pytest.mark.s3
async def test_a_keys_migrate_write_s3_left_unanswered_keeps_the_erasure_open_until_it_can_no_longer_land(
    engine: AsyncEngine, s3_store: S3TranscriptStore, proxy: HoldingProxy
) -> None:
    # `keys migrate` gives up on its PUT of a transcript sealed again (read timeout), and S3 stores it later,
    # sealed under the key the erasure destroys: no erasure may complete before it can no longer land.
    subject, secret = await ensure_subject(engine, "wes")
    await s3_store.put(run_key(RunKeys(subject, session_key(secret, "s1")), "old"), b"CANARY")  # before sealing
    late = _late_store(proxy, s3_store.bucket, read_timeout=1.0)
    try:
        with pytest.raises(UploadInDoubt):
            await seal_stored_transcripts(engine, late, KeyService.from_settings(engine, Settings()), LATE_UPLOAD_S)

        failed = await coordinator(engine, s3_store, upload_wait_seconds=0.2).run("wes", request_id="req-881")
        proxy.release()
        assert await asyncio.to_thread(proxy.landed.wait, 10)
        done = await coordinator(engine, s3_store).run("wes", request_id="req-881")  # waits out the rest

        assert failed.status is RequestStatus.FAILED and failed.stores["transcripts"].status is StepStatus.FAILED
        assert done.ok and done.stores["transcripts"].counts.versions == 2  # the plain one and the late one
        assert _subject_versions(s3_store, subject) == []
    finally:
        await late.close()


async def test_an_upload_that_may_land_past_the_wait_fails_the_erasure_and_keeps_the_fence(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    subject, secret = await ensure_subject(engine, "wyn")
    keys = RunKeys(subject, session_key(secret, "s1"))
    await outbox.enqueue(engine, "run-wyn", run_key(keys, "run-wyn"), subject, b"CANARY", "S3 left it unanswered",
                         claim=outbox.Claim("worker-1", timedelta(seconds=2)))
    lands_by = await claims.in_doubt_until(engine, subject)
    assert lands_by is not None
    folder = LocalTranscriptStore(tmp_path / "transcripts")

    failed = await coordinator(engine, folder, upload_wait_seconds=0.3).run("wyn", request_id="req-882")

    transcripts = failed.stores["transcripts"]
    assert failed.status is RequestStatus.FAILED and transcripts.status is StepStatus.FAILED
    assert f"{lands_by:%Y-%m-%dT%H:%M:%SZ}" in (transcripts.detail or "") and subject not in (transcripts.detail or "")
    async with engine.connect() as conn:  # the fence stays: nothing new is written for the user meanwhile
        assert (await conn.scalars(select(user_holds.c.user_id))).all() == ["wyn"]
    assert await outbox.pending(engine) == 1

    done = await coordinator(engine, folder).run("wyn", request_id="req-882")  # waits out the rest, then erases
    assert done.ok and done.stores["outbox"].counts.rows == 1
    assert datetime.now(UTC) >= lands_by
