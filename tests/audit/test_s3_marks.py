"""An S3 store's marks: which state databases' writers put transcripts in it, read by an erasure that reaches the
bucket at another endpoint than they did (:func:`teamstore.erasure.stores.check_same_store`)."""

from __future__ import annotations

import asyncio
import json

import boto3
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore.audit.subjects import get_or_create_subject, record_store
from teamstore.audit.transcripts.base import run_key
from teamstore.audit.transcripts.record import RunKeys
from teamstore.audit.transcripts.s3 import MARKS, S3TranscriptStore, make_client
from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.db.identity import database_id
from teamstore.errors import ConfigurationError
from teamstore.settings import Settings

pytestmark = pytest.mark.s3
OURS, THEIRS = "a" * 32, "b" * 32
KEYS = RunKeys("c" * 32, "d" * 32)


@pytest.fixture
async def store(s3_bucket: str) -> S3TranscriptStore:
    boto3.client("s3").put_bucket_versioning(Bucket=s3_bucket, VersioningConfiguration={"Status": "Enabled"})
    return S3TranscriptStore(make_client(), s3_bucket, "audit")


async def test_a_mark_is_kept_once_beside_the_transcripts_out_of_their_listings_and_their_lifecycle_rule(
    store: S3TranscriptStore
) -> None:
    await store.put(run_key(KEYS, "r1"), b"transcript")
    assert not await store.marked(OURS, store.endpoint)

    await store.mark(OURS)
    await store.mark(OURS)  # a second worker: found, not put again

    assert await store.marked(OURS, store.endpoint) and not await store.marked(THEIRS, store.endpoint)
    # the mark of the endpoint the writers reached it at, wherever it is asked from
    assert not await store.marked(OURS, "aws") and not await store.marked(OURS, "http://minio:9000")
    assert await store.list_keys("") == [run_key(KEYS, "r1")]
    assert [found.key async for found in store.scan("")] == [run_key(KEYS, "r1")]
    (version,) = store.client.list_object_versions(Bucket=store.bucket, Prefix=f"audit/{MARKS}/")["Versions"]
    assert version["Key"].startswith(f"audit/{MARKS}/{OURS}/") and version["IsLatest"]
    assert store.endpoint not in version["Key"]  # by a digest: a key of fixed length
    body = store.client.get_object(Bucket=store.bucket, Key=version["Key"])["Body"].read()
    assert json.loads(body) == {"database_id": OURS, "endpoint": store.endpoint}
    rule = await store.apply_retention(30)
    assert not version["Key"].startswith(rule["Filter"]["Prefix"])  # no lifecycle rule expires a mark
    await store.close()


async def test_a_mark_names_a_database_id_and_nothing_else(store: S3TranscriptStore) -> None:
    for bad in ("", "../subjects/x", "A" * 32, "a" * 31, f"{'a' * 32}/x"):
        with pytest.raises(ConfigurationError):
            await store.mark(bad)
        with pytest.raises(ConfigurationError):
            await store.marked(bad, store.endpoint)
    await store.close()


def test_a_flush_marks_an_s3_store_as_this_database_s_with_nothing_queued(
    s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a refusal of an erasure through another endpoint says to run, where the workers reach the bucket."""
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", f"s3://{s3_bucket}/teamstore")
    assert CliRunner().invoke(app, ["db", "upgrade"]).exit_code == 0
    assert not asyncio.run(_marked(s3_bucket))

    flushed = CliRunner().invoke(app, ["transcripts", "flush", "--json"])

    assert flushed.exit_code == 0, flushed.output
    assert json.loads(flushed.stdout)["delivered"] == 0 and asyncio.run(_marked(s3_bucket))


async def _marked(bucket: str, at: str | None = None) -> bool:
    """Whether the default database's writers marked ``s3://bucket/teamstore`` (at ``at``, by default the test's
    endpoint)."""
    engine = create_engine(Settings().resolved_database_url)
    store = S3TranscriptStore(make_client(), bucket, "teamstore")
    try:
        return bool(await store.marked(await database_id(engine), at or store.endpoint))
    finally:
        await store.close()
        await engine.dispose()


def test_an_operator_marks_the_bucket_reached_here_for_the_endpoint_the_records_name(
    s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no server answers at the recorded endpoint any more, the erasure's refusal says to run this."""
    runner = CliRunner()
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    folder = runner.invoke(app, ["transcripts", "mark", "--as-reached-at", "http://old-minio:9000"])
    assert folder.exit_code == 1 and "is a folder" in folder.output  # the embedded default
    url = f"s3://{s3_bucket}/teamstore"
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", url)
    asyncio.run(_recorded(url, "http://old-minio:9000", "http://legacy:80"))  # the second as an old release wrote it
    for bad in ("old-minio:9000", "ftp://old-minio", "http://", "http://[::1", "http://[zz]:9000", "http://old:99999",
                "http://other-minio:9000"):
        refused = runner.invoke(app, ["transcripts", "mark", "--as-reached-at", bad, "--json"],
                                env={"COLUMNS": "300"})
        assert refused.exit_code == 1, (bad, refused.output)
        assert json.loads(refused.stdout)["error"]["type"] == "ConfigurationError"
        assert "http://legacy:80, http://old-minio:9000" in refused.output  # the endpoints the records hold

    for given, recorded in (("HTTP://Old-MinIO:9000/", "http://old-minio:9000"), ("http://legacy:80", "http://legacy:80")):
        marked = runner.invoke(app, ["transcripts", "mark", "--as-reached-at", given, "--json"])
        assert marked.exit_code == 0, marked.output
        assert json.loads(marked.stdout)["marked_for"] == recorded
        assert asyncio.run(_marked(s3_bucket, recorded))


async def _recorded(store: str, *endpoints: str) -> None:
    """``store`` recorded at each of ``endpoints``, for a user each, in the default database."""
    engine = create_engine(Settings().resolved_database_url)
    try:
        for n, endpoint in enumerate(endpoints):
            await record_store(engine, await get_or_create_subject(engine, f"user-{n}"), store, endpoint=endpoint)
    finally:
        await engine.dispose()


async def test_a_store_recorded_as_aws_before_s3_s_hosts_were_told_apart_is_reached_by_the_aws_host_that_marked_it(
    sqlite_engine: AsyncEngine
) -> None:
    """A MinIO behind an AWS load balancer was recorded as "aws" then: its workers, which reach it there, marked it
    so, and it is theirs; another MinIO behind another AWS host, unmarked, is not taken for AWS's own S3."""
    import boto3

    from teamstore.audit.placement import unmarked_elsewhere

    behind = boto3.client("s3", endpoint_url="http://minio-1.us-east-1.elb.amazonaws.com:9000")
    store = S3TranscriptStore(behind, "audit", "teamstore")
    marked_at: set[str] = set()

    async def marked(database_id: str, endpoint: str) -> bool:  # the bucket, without the network
        return endpoint in marked_at

    store.marked = marked  # type: ignore[method-assign]
    try:
        found = await unmarked_elsewhere(store, sqlite_engine, "aws")
        assert found is not None and found.why == "carries no mark of this database's writers at AWS's own S3"
        marked_at.add(store.endpoint)  # this release's workers there, at their first run
        assert await unmarked_elsewhere(store, sqlite_engine, "aws") is None
    finally:
        await store.close()
