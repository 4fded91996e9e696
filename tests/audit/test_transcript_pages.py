"""A session's transcripts read a page at a time, on a local folder and on S3 over HTTP (moto's server)."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime, timedelta

import pytest

from teamstore.audit.transcripts import TranscriptStore, run_key, session_prefix
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.pages import newest_runs, one_run
from teamstore.audit.transcripts.record import RunKeys, encode
from teamstore.errors import TranscriptNotFound

KEYS = RunKeys("a" * 32, "1" * 32)
OTHER = RunKeys("a" * 32, "2" * 32)
START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def body(run_id: str, minute: int) -> bytes:
    started = (START + timedelta(minutes=minute)).isoformat()
    return encode({"kind": "run", "run_id": run_id, "started_at": started}, [{"kind": "item", "seq": 0}])


class CountingGets:
    """A transcript store that counts the objects read through it."""

    def __init__(self, store: TranscriptStore) -> None:
        self.store, self.gets = store, 0

    def scan(self, prefix: str):  # type: ignore[no-untyped-def]
        return self.store.scan(prefix)

    async def get(self, key: str) -> bytes:
        self.gets += 1
        return await self.store.get(key)


def ids(page) -> list[str]:  # type: ignore[no-untyped-def]
    return [r["run"]["run_id"] for r in page.runs]


async def test_the_newest_runs_oldest_first_and_how_many_there_are(store: TranscriptStore) -> None:
    for n in range(6):  # one after another, as a session's runs are written
        await store.put(run_key(KEYS, f"run-{n}"), body(f"run-{n}", n))
    await store.put(run_key(OTHER, "elsewhere"), body("elsewhere", 99))
    page = await newest_runs(store, KEYS, 2)
    assert (page.total, ids(page)) == (6, ["run-4", "run-5"])
    page = await newest_runs(store, KEYS, 10)
    assert (page.total, ids(page)) == (6, [f"run-{n}" for n in range(6)])
    with pytest.raises(TranscriptNotFound, match="no transcript for that session"):
        await newest_runs(store, RunKeys("a" * 32, "3" * 32), 2)


async def test_one_run_by_id_or_unique_prefix_with_the_total(store: TranscriptStore) -> None:
    for run_id in ("abc123", "abd456", "abc"):
        await store.put(run_key(KEYS, run_id), body(run_id, 0))
    assert ids(await one_run(store, KEYS, "abd")) == ["abd456"]
    exact = await one_run(store, KEYS, "abc")  # an exact id wins over the longer id it prefixes
    assert (exact.total, ids(exact)) == (3, ["abc"])
    with pytest.raises(TranscriptNotFound, match="3 runs of that session start with the run id given"):
        await one_run(store, KEYS, "ab")
    with pytest.raises(TranscriptNotFound, match="no run of that session has the run id given"):
        await one_run(store, KEYS, "x")


async def test_runs_written_in_the_same_instant_are_told_apart_by_their_start(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # S3 lists write times to the second: runs that end within one second tie. Written here in another
    # order than they started, with one time for all, the newest are still those that started last.
    store = LocalTranscriptStore(tmp_path / "transcripts")
    same = time.time() - 60
    for n in (3, 0, 5, 1, 4, 2):
        await store.put(run_key(KEYS, f"run-{n}"), body(f"run-{n}", n))
        os.utime(tmp_path / "transcripts" / run_key(KEYS, f"run-{n}"), (same, same))
    await store.put(run_key(KEYS, "run-6"), body("run-6", 6))  # written a minute later: newest whatever
    assert ids(await newest_runs(store, KEYS, 3)) == ["run-4", "run-5", "run-6"]
    assert ids(await newest_runs(store, KEYS, 1)) == ["run-6"]


async def test_only_the_runs_shown_are_read(tmp_path) -> None:  # type: ignore[no-untyped-def]
    local = LocalTranscriptStore(tmp_path / "transcripts")
    for n in range(200):
        key = run_key(KEYS, f"run-{n:03}")
        await local.put(key, body(f"run-{n:03}", n))
        written = time.time() - 1000 + n  # a second apart, oldest first
        os.utime(tmp_path / "transcripts" / key, (written, written))
    counting = CountingGets(local)
    page = await newest_runs(counting, KEYS, 3)  # type: ignore[arg-type]
    assert (page.total, ids(page), counting.gets) == (200, ["run-197", "run-198", "run-199"], 3)


@pytest.mark.s3
async def test_on_s3_only_the_runs_shown_are_read_and_a_long_listing_is_paged(s3_bucket: str) -> None:
    import boto3

    from teamstore.audit.transcripts.s3 import S3TranscriptStore

    s3 = S3TranscriptStore.from_url(f"s3://{s3_bucket}/t")
    client = boto3.client("s3")
    for n in range(1001):  # past one ListObjectsV2 page; all older than the runs below
        client.put_object(Bucket=s3_bucket, Key=f"t/{run_key(KEYS, f'old-{n:04}')}", Body=body(f"old-{n:04}", 0))
    for n in range(3):  # S3 keeps write times to the second: these are written seconds apart
        await asyncio.sleep(1.1)
        await s3.put(run_key(KEYS, f"new-{n}"), body(f"new-{n}", 100 + n))
    counting = CountingGets(s3)
    page = await newest_runs(counting, KEYS, 2)  # type: ignore[arg-type]
    assert (page.total, ids(page), counting.gets) == (1004, ["new-1", "new-2"], 2)
    assert (await one_run(s3, KEYS, "old-1000")).total == 1004
    assert len([s async for s in s3.scan(session_prefix(KEYS))]) == 1004
    await s3.close()
