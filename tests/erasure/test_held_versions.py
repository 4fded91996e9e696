"""A done store's held versions, recorded by each pass that leaves some, count exactly what a lifted hold frees."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.transcripts import subject_prefix
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.erasure import RequestStatus
from teamstore.errors import TranscriptStoreMismatch
from tests.erasure.conftest import coordinator, versioned_bucket
from tests.erasure.seed import all_versions
from tests.erasure.test_done_stores import USER, _written


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
