"""Each transcript store is recorded with the S3 endpoint its writer reached it at (migration 0029): a done store
recorded at a known other endpoint is not listed through this erasure's client, and one recorded before endpoints
were (unknown) is, as every store was then.
"""

from __future__ import annotations

import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.schema import subject_stores
from teamstore.audit.subjects import get_or_create_subject, record_store, recorded_endpoints
from teamstore.audit.transcripts import subject_prefix
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.erasure import RequestStatus
from teamstore.errors import TranscriptStoreMismatch
from tests.erasure.conftest import coordinator, versioned_bucket
from tests.erasure.test_done_stores import USER, _emptied_first, _written


@pytest.mark.s3
async def test_a_done_bucket_recorded_before_endpoints_were_is_reached_through_this_pass_s_client_and_erased(
    engine: AsyncEngine, s3_env: str
) -> None:
    """A request open across the upgrade: its first pass recorded no endpoint, which says nothing of where the
    store is, so it is not taken for AWS's own (named not reachable from a MinIO pass, its restored copy left)."""
    first = S3TranscriptStore(make_client(), versioned_bucket(), "audit")
    second = S3TranscriptStore(make_client(), versioned_bucket(), "moved")
    subject = await _emptied_first(engine, first, second, "req-upgrade")
    async with engine.begin() as conn:  # as the release before 0029 left the records
        await conn.execute(update(subject_stores).values(endpoint=None))

    receipt = await coordinator(engine, second).run(USER, request_id="req-upgrade")

    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert receipt.stores["transcripts"].counts.objects == 4  # the restored copy with the three written
    assert receipt.stores["transcripts"].detail is None
    assert await first.list_keys(subject_prefix(subject)) == []
    await first.close()
    await second.close()


@pytest.mark.s3
async def test_the_fix_for_a_store_written_at_aws_s_own_endpoint_from_another_says_to_unset_the_endpoint(
    engine: AsyncEngine, s3_env: str
) -> None:
    first = S3TranscriptStore(make_client(), versioned_bucket(), "audit")
    second = S3TranscriptStore(make_client(), versioned_bucket(), "moved")
    await _written(engine, {first: 2, second: 1})
    async with engine.begin() as conn:  # the second written on AWS's own S3
        await conn.execute(update(subject_stores).where(subject_stores.c.store == second.url).values(endpoint="aws"))

    with pytest.raises(TranscriptStoreMismatch) as named:
        await coordinator(engine, first).run(USER, request_id="req-aws")

    assert named.value.hint == (f"run erase with AWS_ENDPOINT_URL_S3 unset, TEAMSTORE_TRANSCRIPTS_URL={second.url} "
                                "and the same --request-id req-aws")
    await first.close()
    await second.close()


async def test_an_erasing_pass_never_overwrites_the_endpoint_a_writer_recorded_for_aws_s_own_s3(
    engine: AsyncEngine
) -> None:
    subject = await get_or_create_subject(engine, USER)
    await record_store(engine, subject, "s3://audit/t", endpoint="aws")
    await record_store(engine, subject, "s3://audit/t", endpoint="http://minio:9000", erasing=True)
    assert await recorded_endpoints(engine, subject) == {"s3://audit/t": "aws"}
