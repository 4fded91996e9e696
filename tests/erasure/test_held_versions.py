"""A done store's held versions, recorded by each pass that leaves some (which, with their sizes), count exactly
what a lifted hold frees and what a lock newly keeps there."""

from __future__ import annotations

import io

import boto3
import pytest
from rich.console import Console
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.transcripts import subject_prefix
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.cli._erase_receipt import render
from teamstore.db.identity import database_id
from teamstore.erasure import RequestStatus, StepStatus
from teamstore.erasure.receipt import Counts, StoreResult
from teamstore.erasure.record import load_parts, part_times, record_part
from teamstore.erasure.schema import erasure_steps
from teamstore.erasure.stores import HELD_VERSIONS, held_record
from teamstore.errors import TranscriptStoreMismatch
from tests.audit.fault_server import HoldingProxy
from tests.erasure.conftest import coordinator, versioned_bucket
from tests.erasure.seed import all_versions
from tests.erasure.test_done_stores import RESTORED, USER, _emptied_first, _held_pass, _written
from tests.erasure.test_stores import USER as HELD_USER
from tests.erasure.test_stores import _held_in

LONGER = b"a much longer restored transcript"


@pytest.mark.s3
async def test_one_of_two_held_versions_of_one_key_lifted_counts_no_object_twice(
    engine: AsyncEngine, s3_env: str
) -> None:
    """The two versions are of one object, counted once by the first pass: the freed one adds no object."""
    bucket = versioned_bucket(lock=True)
    locked, moved = S3TranscriptStore(make_client(), bucket, "audit"), S3TranscriptStore(make_client(), bucket, "moved")
    subject = await _written(engine, {locked: 2, moved: 1})
    name = f"{subject_prefix(subject)}sessions/s0/runs/r0.jsonl.gz"
    await locked.put(name, b"transcript")  # a second version of the first run's transcript
    versions = [v["VersionId"] for v in all_versions(locked.client, bucket) if v["Key"] == f"audit/{name}"]
    for version in versions:
        locked.client.put_object_legal_hold(Bucket=bucket, Key=f"audit/{name}", VersionId=version,
                                            LegalHold={"Status": "ON"})
    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, locked).run(USER, request_id="req-two-held")
    locked.client.put_object_legal_hold(Bucket=bucket, Key=f"audit/{name}", VersionId=versions[0],
                                        LegalHold={"Status": "OFF"})

    receipt = await coordinator(engine, moved).run(USER, request_id="req-two-held")

    counts = receipt.stores["transcripts"].counts
    assert receipt.status is RequestStatus.RETAINED_UNDER_HOLD, receipt
    assert (counts.objects, counts.versions, counts.retained) == (3, 4, 1)
    await locked.close()
    await moved.close()


@pytest.mark.s3
async def test_a_hold_lifted_while_a_restored_copy_is_newly_held_counts_the_bytes_of_each_exactly(
    engine: AsyncEngine, s3_env: str
) -> None:
    """As many versions held as before, but another one: by number the pass saw no change, counted the freed
    version's bytes again and not the held copy's."""
    bucket, locked, moved, subject, hold = await _held_pass(engine, "req-lifted-locked")
    locked.client.put_object_legal_hold(**hold, LegalHold={"Status": "OFF"})
    await locked.put(f"{subject_prefix(subject)}{RESTORED}", LONGER)
    locked.client.put_object_legal_hold(Bucket=bucket, Key=f"audit/{subject_prefix(subject)}{RESTORED}",
                                        LegalHold={"Status": "ON"})

    receipt = await coordinator(engine, moved).run(USER, request_id="req-lifted-locked")

    counts = receipt.stores["transcripts"].counts
    assert receipt.status is RequestStatus.RETAINED_UNDER_HOLD, receipt
    assert (counts.objects, counts.versions, counts.retained) == (5, 5, 1)
    assert counts.bytes == 4 * len(b"transcript") + len(LONGER)
    assert [v["Size"] for v in all_versions(locked.client, bucket)] == [len(LONGER)]
    held = await load_parts(engine, "req-lifted-locked", held_record(locked.url))  # the freed one's replaced
    assert [part.counts.bytes for part in held.values()] == [len(LONGER)]
    await locked.close()
    await moved.close()


@pytest.mark.s3
async def test_a_copy_restored_under_a_lock_into_an_emptied_store_is_counted_with_its_object_and_bytes(
    engine: AsyncEngine, s3_env: str
) -> None:
    bucket = versioned_bucket(lock=True)
    first, second = S3TranscriptStore(make_client(), bucket, "audit"), S3TranscriptStore(make_client(), bucket, "moved")
    subject = await _emptied_first(engine, first, second, "req-emptied-locked")
    first.client.put_object_legal_hold(Bucket=bucket, Key=f"audit/{subject_prefix(subject)}{RESTORED}",
                                       LegalHold={"Status": "ON"})

    receipt = await coordinator(engine, second).run(USER, request_id="req-emptied-locked")

    counts = receipt.stores["transcripts"].counts
    assert receipt.status is RequestStatus.RETAINED_UNDER_HOLD, receipt
    assert (counts.objects, counts.versions, counts.retained) == (4, 4, 1)
    assert counts.bytes == 3 * len(b"transcript") + len(b"restored transcript")
    await first.close()
    await second.close()


@pytest.mark.s3
async def test_the_held_versions_of_a_request_an_earlier_release_began_are_still_read_by_number_and_size(
    engine: AsyncEngine, s3_env: str
) -> None:
    """Its record gives how many versions were held, with their bytes: the freed one's are taken out of what the
    sweep found, not a share of it (which would add 21 bytes for the restored copy's 33)."""
    bucket, locked, moved, subject, hold = await _held_pass(engine, "req-earlier-held")
    async with engine.begin() as conn:  # as the earlier release left it: how many, not which
        await conn.execute(delete(erasure_steps).where(erasure_steps.c.store.startswith(held_record(locked.url))))
    await record_part(engine, "req-earlier-held", HELD_VERSIONS, locked.url, StoreResult(
        status=StepStatus.RETAINED_UNDER_HOLD, counts=Counts(versions=1, objects=1, bytes=len(b"transcript"))))
    locked.client.put_object_legal_hold(**hold, LegalHold={"Status": "OFF"})
    await locked.put(f"{subject_prefix(subject)}{RESTORED}", LONGER)

    receipt = await coordinator(engine, moved).run(USER, request_id="req-earlier-held")

    counts = receipt.stores["transcripts"].counts
    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert (counts.objects, counts.versions, counts.bytes) == (5, 5, 4 * len(b"transcript") + len(LONGER))
    assert all_versions(locked.client, bucket) == []
    await locked.close()
    await moved.close()


@pytest.mark.s3
async def test_the_record_of_held_versions_names_neither_subject_nor_session_and_is_a_row_each(
    engine: AsyncEngine, s3_env: str
) -> None:
    """A key holds the subject and session keys, and can be as long as S3 allows: each version is named by a
    digest of fixed length instead."""
    _, locked, moved, subject, _ = await _held_pass(engine, "req-held-record")

    async with engine.connect() as conn:
        rows = (await conn.execute(select(erasure_steps.c.store, erasure_steps.c.detail).where(
            erasure_steps.c.store.startswith(held_record(locked.url))))).all()
    assert len(rows) == 1 and len(rows[0].detail) == 32
    assert not [row for row in rows if subject in row.detail or "sessions" in row.detail]
    await locked.close()
    await moved.close()



@pytest.mark.s3
async def test_a_held_request_s_failed_rerun_says_another_store_s_held_count_is_its_last_pass_s_and_when(
    engine: AsyncEngine, s3_env: str
) -> None:
    """The rerun's pass in the first store left a version held there; that hold was lifted since, and the pass in the
    second failed: its receipt counted the version held as if it were now, saying nothing of when it was found."""
    first, second = (S3TranscriptStore(make_client(), versioned_bucket(lock=True), "audit") for _ in range(2))
    held = await _held_in(engine, {first: 2, second: 2})
    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, first).run(HELD_USER, request_id="req-stale")
    ended = await coordinator(engine, second).run(HELD_USER, request_id="req-stale")
    assert ended.status is RequestStatus.RETAINED_UNDER_HOLD, ended
    with pytest.raises(TranscriptStoreMismatch):  # the rerun goes back to each store: the first still holds it
        await coordinator(engine, first).run(HELD_USER, request_id="req-stale")
    first.client.put_object_legal_hold(**held[first], LegalHold={"Status": "OFF"})
    restored = {**held[second], "Key": held[second]["Key"].replace("/s0/runs/r0", "/s9/runs/r9")}
    second.client.put_object(**restored, Body=b"restored")  # no hold keeps it: its delete is refused, the pass fails
    await second.mark(await database_id(engine))  # as its workers do: a proxy reaches the same bucket
    proxy = HoldingProxy(s3_env, refuse_deletes="InternalError")  # S3 failing on its side, in the second store
    try:
        through = S3TranscriptStore(boto3.client("s3", endpoint_url=proxy.endpoint), second.bucket, "audit")
        failed = await coordinator(engine, through).run(HELD_USER, request_id="req-stale")
    finally:
        proxy.stop()

    transcripts = failed.stores["transcripts"]
    assert failed.status is RequestStatus.FAILED and transcripts.status is StepStatus.FAILED, failed
    assert transcripts.counts.retained == 1  # the first store's version, as the pass there found it
    counted = (await part_times(engine, "req-stale", "transcripts"))[first.url]
    assert (f"its held count is not current: held in other stores, counted as this request's pass there found them: "
            f"1 in {first.url} (at {counted:%Y-%m-%d %H:%M:%S}Z), not listed since, so a hold lifted there since is "
            "not seen") in (transcripts.detail or ""), transcripts.detail
    assert "(InternalError) and no hold explains it" in (transcripts.detail or "").split("; its held count")[0]
    shown = Console(file=io.StringIO(), width=2000)
    render(failed, out=shown)  # the terminal prints the words beside the counts
    assert "its held count is not current" in shown.file.getvalue()
    for store in (first, second, through):
        await store.close()
