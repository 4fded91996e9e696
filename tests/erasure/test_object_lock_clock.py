"""Object Lock retention judged by S3's clock, not this host's (moto's S3 over HTTP): a host whose clock runs ahead
still sees a locked version held, and one whose clock runs behind sees a lapsed one free. A skewed host is this
process with its clock moved (:func:`tests.clocks.host_clock`); the S3 server keeps the real time."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.subjects import get_or_create_subject
from teamstore.audit.transcripts.base import subject_prefix
from teamstore.audit.transcripts.capabilities import HoldStatus
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.erasure import RequestStatus, StepStatus
from tests.clocks import host_clock
from tests.erasure.conftest import coordinator, versioned_bucket

pytestmark = pytest.mark.s3
SKEW = timedelta(hours=1)
KEY = "subjects/abc/sessions/s1/runs/r1.jsonl.gz"


def _locked_store() -> S3TranscriptStore:
    return S3TranscriptStore(make_client(), versioned_bucket(lock=True), "audit")


def _put_retained(store: S3TranscriptStore, key: str, until: datetime) -> None:
    store.client.put_object(Bucket=store.bucket, Key=f"audit/{key}", Body=b"transcript", ObjectLockMode="GOVERNANCE",
                            ObjectLockRetainUntilDate=until)


async def test_a_host_whose_clock_runs_ahead_still_sees_a_version_s3_retains_as_held(s3_env: str) -> None:
    store = _locked_store()
    _put_retained(store, KEY, datetime.now(UTC) + SKEW / 6)  # ten minutes more on S3's clock
    (version,) = await store.versions(KEY)
    with host_clock(SKEW):
        assert await store.hold(version) is HoldStatus.HELD
    await store.close()


async def test_a_host_whose_clock_runs_behind_sees_a_version_whose_retention_lapsed_on_s3_as_free(
    s3_env: str,
) -> None:
    store = _locked_store()
    _put_retained(store, KEY, datetime.now(UTC) + timedelta(seconds=2))
    (version,) = await store.versions(KEY)
    await asyncio.sleep(3.5)  # past it on S3's clock (its Date header counts whole seconds)
    with host_clock(-SKEW):
        assert await store.hold(version) is HoldStatus.FREE
    await store.close()


async def test_an_erasure_on_a_host_whose_clock_runs_ahead_reports_a_version_s3_retains_as_retained(
    engine: AsyncEngine, s3_env: str
) -> None:
    # It was a failed step ("no hold explains it"): this host took the retention for over, S3 refused the delete.
    store = _locked_store()
    subject = await get_or_create_subject(engine, "ula")
    kept = f"{subject_prefix(subject)}sessions/s1/runs/r1.jsonl.gz"
    _put_retained(store, kept, datetime.now(UTC) + SKEW / 6)
    with host_clock(SKEW):
        receipt = await coordinator(engine, store).run("ula", request_id="req-ahead")
    transcripts = receipt.stores["transcripts"]
    assert receipt.status is RequestStatus.RETAINED_UNDER_HOLD, transcripts
    assert transcripts.status is StepStatus.RETAINED_UNDER_HOLD and transcripts.counts.retained == 1
    assert await store.list_keys(subject_prefix(subject)) == [kept]
    await store.close()
