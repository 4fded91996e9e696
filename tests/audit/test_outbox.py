"""The transcript outbox when the database, not the store, is what fails, when its transcripts are huge, when
two flushers run at once, and when an upload of a queued transcript may still land."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from sqlalchemy import event, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit import claims, outbox
from teamstore.audit.schema import outbox as outbox_table
from teamstore.audit.subjects import ensure_subject, get_or_create_subject, session_key
from teamstore.audit.transcripts.base import run_key
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.record import RunKeys
from teamstore.db.engine import create_engine
from teamstore.db.fence import user_holds
from teamstore.errors import ErasureInProgress, StoreUnavailable
from tests.conftest import refusing, upgrade_database


@pytest.mark.postgres
async def test_a_flush_the_database_refuses_is_a_typed_error(postgres_url: str, tmp_path: Path) -> None:
    # `teamstore transcripts flush` (and the background drain) meeting a database that refuses: a typed
    # error that says so, never a driver traceback whose server message can quote stored values.
    await upgrade_database(postgres_url)
    async with refusing(postgres_url, "ts_transcript_outbox") as blocked:
        with pytest.raises(StoreUnavailable, match="outbox") as caught:
            await outbox.flush(blocked, LocalTranscriptStore(tmp_path))
    assert "LockNotAvailable" in caught.value.message


async def test_a_flush_holds_one_queued_transcript_in_memory_at_a_time(engine: AsyncEngine, tmp_path: Path) -> None:
    # Huge transcripts are the ones that miss the upload deadline and queue: a flush that read its whole
    # batch (500 bodies) at once needed gigabytes when the outbox held a few hundred of them.
    size, count = 4 << 20, 12
    subject, secret = await ensure_subject(engine, "big")
    keys = RunKeys(subject, session_key(secret, "s1"))
    for n in range(count):
        run = f"run-{n}"
        await outbox.enqueue(engine, run, run_key(keys, run), subject, os.urandom(size), "upload took over 2s")
    store = LocalTranscriptStore(tmp_path / "t")
    tracemalloc.start()
    try:
        report = await outbox.flush(engine, store)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (report.delivered, report.remaining) == (count, 0)
    assert peak < 5 * size, f"peak {peak >> 20} MiB for {count} transcripts of {size >> 20} MiB"


@pytest.mark.postgres
async def test_a_flusher_claims_the_oldest_of_a_deep_outbox_through_its_index_not_by_sorting_it(
    postgres_url: str,
) -> None:
    # After an S3 outage the outbox holds hundreds of thousands of transcripts; a claim that read and sorted all
    # of them to find the oldest took a quarter of a second each, and draining the outbox took days.
    await upgrade_database(postgres_url)
    engine = create_engine(postgres_url)
    try:
        subject, _ = await ensure_subject(engine, "deep")
        async with engine.begin() as conn:
            await conn.execute(text(
                "INSERT INTO ts_transcript_outbox (run_id, object_key, subject_key, body, created_at, attempts) "
                "SELECT 'run-' || n, 'subjects/' || :subject || '/sessions/s/' || n || '.jsonl.gz', :subject, "
                "'\\x1f8b'::bytea, now() - n * interval '1 second', 1 FROM generate_series(1, 20000) AS n"),
                {"subject": subject})
            await conn.execute(text("ANALYZE ts_transcript_outbox"))
        sent: list[tuple[str, Any]] = []

        def note(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
            if statement.lstrip().upper().startswith("UPDATE"):
                sent.append((statement, parameters))

        event.listen(engine.sync_engine, "before_cursor_execute", note)
        claimed = await claims.claim_next(engine, "flusher", timedelta(seconds=60))
        event.remove(engine.sync_engine, "before_cursor_execute", note)
        assert claimed is not None and claimed.run_id == "run-20000"  # the oldest
        ((statement, parameters),) = sent
        async with engine.connect() as conn:
            plan = "\n".join((await conn.exec_driver_sql("EXPLAIN " + statement, parameters)).scalars())
    finally:
        await engine.dispose()
    assert "ix_ts_transcript_outbox_created_at" in plan and "Sort" not in plan, plan


async def _queue_many(engine: AsyncEngine, count: int) -> list[str]:
    subject, secret = await ensure_subject(engine, "many")
    keys = RunKeys(subject, session_key(secret, "s1"))
    runs = [f"run-{n:04d}" for n in range(count)]
    for run in runs:
        await outbox.enqueue(engine, run, run_key(keys, run), subject, os.urandom(256), "S3 unreachable")
    return [run_key(keys, run) for run in runs]


def _flush_process(database_url: str, bucket: str) -> subprocess.Popen[str]:
    env = {**os.environ, "TEAMSTORE_DATABASE_URL": database_url, "TEAMSTORE_TRANSCRIPTS_URL": f"s3://{bucket}/t"}
    return subprocess.Popen([sys.executable, "-m", "teamstore", "transcripts", "flush", "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.s3
async def test_two_flush_processes_at_once_deliver_each_queued_transcript_once(
    engine: AsyncEngine, database_url: str, s3_bucket: str
) -> None:
    # Two `teamstore transcripts flush` runs at once (two cron jobs, an operator beside one) each read the
    # same queued rows and PUT every one: 448 deliveries for 247 queued, 201 objects with two versions.
    client = boto3.client("s3")
    client.put_bucket_versioning(Bucket=s3_bucket, VersioningConfiguration={"Status": "Enabled"})
    keys = await _queue_many(engine, 150)

    flushers = [_flush_process(database_url, s3_bucket) for _ in range(2)]
    reports = []
    for proc in flushers:
        out, err = await asyncio.to_thread(proc.communicate, timeout=120)
        assert proc.returncode == 0, err
        reports.append(json.loads(out))

    assert sum(report["delivered"] for report in reports) == len(keys)
    assert all(report["delivered"] for report in reports)  # both took part: the two ran at once
    versions = [v["Key"] for page in client.get_paginator("list_object_versions").paginate(
        Bucket=s3_bucket, Prefix="t/subjects/") for v in page.get("Versions", [])]  # the store's mark beside them
    assert sorted(versions) == sorted(f"t/{key}" for key in keys)  # one version each
    assert await outbox.pending(engine) == 0


async def test_a_transcript_whose_upload_may_still_land_is_not_sent_again_before_it_no_longer_can(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    subject, secret = await ensure_subject(engine, "ula")
    keys = RunKeys(subject, session_key(secret, "s1"))
    lands_by = datetime.now(UTC) + timedelta(seconds=1)
    await outbox.enqueue(engine, "run-ula", run_key(keys, "run-ula"), subject, b"gz", "S3 left it unanswered",
                         claim=outbox.Claim("worker-1", timedelta(seconds=1)))
    store = LocalTranscriptStore(tmp_path / "t")

    left = await outbox.flush(engine, store)  # it may still land: left alone, and the report says until when
    assert (left.delivered, left.remaining, left.held) == (0, 1, 1)
    assert left.held_until is not None and abs((left.held_until - lands_by).total_seconds()) < 0.1
    await asyncio.sleep((lands_by - datetime.now(UTC)).total_seconds() + 0.05)
    assert await outbox.flush(engine, store) == outbox.FlushReport(1, 0, 0)
    assert await store.list_keys("") == [run_key(keys, "run-ula")]


async def test_an_upload_that_may_land_is_recorded_without_its_transcript_while_an_erasure_fences_the_user(
    engine: AsyncEngine,
) -> None:
    # The run stopped waiting for its upload after the erasure fenced the user: nothing of the user is
    # queued, but the erasure must know that an upload may still land under the subject.
    subject = await get_or_create_subject(engine, "fen")
    async with engine.begin() as conn:
        await conn.execute(user_holds.insert().values(user_id="fen", reason="erasure", created_at=datetime.now(UTC)))
    lands_by = datetime.now(UTC) + timedelta(seconds=60)
    with pytest.raises(ErasureInProgress):
        await outbox.enqueue(engine, "run-fen", "subjects/x/k", subject, b"CANARY-fen", "still on its way",
                             claim=outbox.Claim("worker-1", timedelta(seconds=60)))

    async with engine.connect() as conn:
        (body,) = (await conn.scalars(select(outbox_table.c.body))).all()
    assert body is None
    found = await claims.in_doubt_until(engine, subject)
    assert found is not None and abs((found - lands_by).total_seconds()) < 1
    assert await outbox.pending(engine) == 0


async def test_a_flush_says_which_queued_transcripts_wait_for_their_users_erasure(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # It reported remaining 1 and held 0, and the doc said to run it again while remaining is above held: a
    # loop that spun until the erasure ended.
    subject, secret = await ensure_subject(engine, "era")
    key = run_key(RunKeys(subject, session_key(secret, "s1")), "run-era")
    await outbox.enqueue(engine, "run-era", key, subject, b"CANARY-era", "S3 unreachable")
    async with engine.begin() as conn:
        await conn.execute(user_holds.insert().values(user_id="era", reason="erasure", created_at=datetime.now(UTC)))
    store = LocalTranscriptStore(tmp_path / "t")
    report = await outbox.flush(engine, store)
    assert (report.delivered, report.remaining, report.held, report.erasing) == (0, 1, 0, 1)
    assert await store.list_keys("") == []
