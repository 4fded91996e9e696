"""S3 faults: unreachable, bucket missing, access denied, slow; the lifecycle rule; the outbox."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.audit import outbox
from teamstore.audit.observer import TranscriptObserver
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.schema import outbox as outbox_table
from teamstore.audit.subjects import find_subject, recorded_endpoints
from teamstore.audit.transcripts import session_prefix
from teamstore.audit.transcripts.base import run_key
from teamstore.audit.transcripts.record import RunKeys, decode, sealed_context
from teamstore.audit.transcripts.s3 import RULE_ID, S3TranscriptStore, lifecycle_rule, make_client, rule_id
from teamstore.audit.transcripts.s3_client import recorded_endpoint
from teamstore.db.fence import user_holds
from teamstore.errors import ConfigurationError, TranscriptUnavailable, UploadInDoubt
from teamstore.keys import KeyService
from tests.audit.fault_server import FaultServer, HoldingProxy, refusal
from tests.audit.teams import context, observe_run, triage_team
from tests.services import free_port

pytestmark = pytest.mark.s3
ROOT = Path(__file__).resolve().parents[2]
KEYS = RunKeys("a" * 32, "b" * 32)


def _serve(monkeypatch: pytest.MonkeyPatch, mode: str, **options: float) -> Iterator[FaultServer]:
    """A fault server in ``mode`` as the S3 endpoint, for the length of a test."""
    server = FaultServer(mode, **options)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", server.endpoint)
    yield server
    server.stop()


@pytest.fixture
def deny_server(s3_env: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultServer]:
    yield from _serve(monkeypatch, "deny")


@pytest.fixture
def slow_server(s3_env: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultServer]:
    yield from _serve(monkeypatch, "slow", delay=2.0)


def test_the_client_has_short_timeouts_and_few_retries(s3_env: str) -> None:
    config = make_client().meta.config
    assert config.connect_timeout <= 5 and config.read_timeout <= 5
    assert config.retries["total_max_attempts"] <= 3


def test_the_standard_aws_retry_variables_decide_the_attempts(s3_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The client's own Config outranked them: AWS_MAX_ATTEMPTS=5 gave 2 attempts without a word.
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "5")
    monkeypatch.setenv("AWS_RETRY_MODE", "adaptive")
    assert make_client().meta.config.retries == {"total_max_attempts": 5, "mode": "adaptive"}
    for wrong in ("0", "many"):
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", wrong)
        with pytest.raises(ConfigurationError, match="AWS_MAX_ATTEMPTS") as caught:
            make_client()
        assert caught.value.hint and "unset it" in caught.value.hint


async def test_unreachable_s3_fails_fast_with_a_typed_error(
    s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{free_port()}")
    store = S3TranscriptStore.from_url("s3://any/prefix")
    started = time.monotonic()
    with pytest.raises(TranscriptUnavailable, match="unreachable"):
        await store.put(run_key(KEYS, "r1"), b"x")
    assert time.monotonic() - started < 5


async def test_a_missing_bucket_says_so(s3_env: str) -> None:
    store = S3TranscriptStore.from_url("s3://no-such-bucket-here/prefix")
    with pytest.raises(TranscriptUnavailable, match="does not exist") as caught:
        await store.put(run_key(KEYS, "r1"), b"x")
    assert caught.value.hint and "create the bucket" in caught.value.hint


async def test_no_credentials_says_so_rather_than_unreachable(
    s3_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = S3TranscriptStore.from_url("s3://any/prefix")
    with pytest.raises(TranscriptUnavailable, match="no usable AWS credentials") as caught:
        await store.put(run_key(KEYS, "r1"), b"x")
    # It said 'S3 unreachable or too slow (NoCredentialsError)' and to check the endpoint and the network.
    assert caught.value.hint and "AWS_ACCESS_KEY_ID" in caught.value.hint and "network" not in caught.value.hint
    await store.close()


async def test_access_denied_names_the_permission_to_grant(deny_server: FaultServer) -> None:
    store = S3TranscriptStore.from_url("s3://locked/prefix")
    with pytest.raises(TranscriptUnavailable, match="access denied") as caught:
        await store.put(run_key(KEYS, "r1"), b"x")
    assert caught.value.hint and "s3:PutObject" in caught.value.hint
    # `retention apply` needs other permissions than an upload, and says which.
    with pytest.raises(TranscriptUnavailable, match="access denied") as caught:
        await store.apply_retention(30)
    assert caught.value.hint and "s3:PutLifecycleConfiguration" in caught.value.hint
    assert "s3:PutObject" not in caught.value.hint


@pytest.mark.parametrize("code", ["InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"])
async def test_credentials_s3_refuses_say_to_fix_the_credentials_not_to_grant_a_permission(
    s3_env: str, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    # A wrong key id or secret said 'access denied' and to grant the worker's role s3:PutObject.
    server = next(_serve(monkeypatch, "deny", refused=refusal(code, "The credentials are not valid")))
    store = S3TranscriptStore.from_url("s3://audit/prefix")
    with pytest.raises(TranscriptUnavailable, match=f"S3 refused the AWS credentials \\({code}\\)") as writing:
        await store.put(run_key(KEYS, "r1"), b"x")
    with pytest.raises(TranscriptUnavailable, match=code) as listing:  # an erasure's request: its code, no key
        await store.versions("subjects/")
    assert writing.value.hint and "AWS_SECRET_ACCESS_KEY" in writing.value.hint and "outbox" in writing.value.hint
    assert listing.value.hint and "AWS_SECRET_ACCESS_KEY" in listing.value.hint
    assert "grant" not in writing.value.hint + listing.value.hint and "s3:" not in writing.value.hint + listing.value.hint
    await store.close()
    server.stop()


@pytest.mark.parametrize("code", ["AuthorizationHeaderMalformed", "PermanentRedirect"])
async def test_a_bucket_in_another_region_says_to_set_the_region(
    s3_env: str, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    # It said 'S3 said AuthorizationHeaderMalformed: ...' with no fix at all.
    message = "the region 'us-east-1' is wrong; expecting 'eu-west-1'"
    server = next(_serve(monkeypatch, "deny", refused=refusal(code, message)))
    store = S3TranscriptStore.from_url("s3://audit/prefix")
    with pytest.raises(TranscriptUnavailable, match="not in the region the client uses") as writing:
        await store.put(run_key(KEYS, "r1"), b"x")
    with pytest.raises(TranscriptUnavailable) as listing:
        await store.versions("subjects/")
    for caught in (writing, listing):
        assert caught.value.hint and "AWS_DEFAULT_REGION" in caught.value.hint and "s3:" not in caught.value.hint
    await store.close()
    server.stop()


async def test_an_unreachable_s3_names_the_endpoint_and_only_a_refusal_names_permissions(
    s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An erasure's version-level requests said to grant s3:ListBucketVersions... when nothing answered, and a
    # read or `retention apply` that transcripts wait in the outbox, where nothing was queued.
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{free_port()}")
    store = S3TranscriptStore.from_url("s3://any/prefix")
    with pytest.raises(TranscriptUnavailable, match="EndpointConnectionError") as listing:
        await store.versions("subjects/")
    with pytest.raises(TranscriptUnavailable, match="unreachable") as reading:
        await store.list_keys("subjects/")
    with pytest.raises(TranscriptUnavailable, match="unreachable") as writing:
        await store.put(run_key(KEYS, "r1"), b"x")
    for caught in (listing, reading):
        assert caught.value.hint and "AWS_ENDPOINT_URL_S3" in caught.value.hint
        assert "s3:" not in caught.value.hint and "outbox" not in caught.value.hint
    assert writing.value.hint and "AWS_ENDPOINT_URL_S3" in writing.value.hint and "outbox" in writing.value.hint
    await store.close()


async def test_a_version_request_s3_refuses_names_the_permissions(deny_server: FaultServer) -> None:
    store = S3TranscriptStore.from_url("s3://locked/prefix")
    with pytest.raises(TranscriptUnavailable, match="AccessDenied") as denied:
        await store.versions("subjects/")
    assert denied.value.hint and "s3:ListBucketVersions" in denied.value.hint
    await store.close()


async def test_a_version_request_to_a_missing_bucket_says_to_create_it(s3_env: str) -> None:
    store = S3TranscriptStore.from_url("s3://no-such-bucket-here/prefix")
    with pytest.raises(TranscriptUnavailable, match="NoSuchBucket") as missing:
        await store.versions("subjects/")
    assert missing.value.hint and "create the bucket" in missing.value.hint and "s3:" not in missing.value.hint
    await store.close()


async def test_slow_s3_times_out_within_the_configured_read_timeout(slow_server: FaultServer) -> None:
    store = S3TranscriptStore(make_client(read_timeout=0.5, max_attempts=1), "slow-bucket", "p")
    started = time.monotonic()
    with pytest.raises(TranscriptUnavailable, match="too slow"):
        await store.put(run_key(KEYS, "r1"), b"x")
    assert time.monotonic() - started < 2.5


async def test_an_upload_s3_leaves_unanswered_is_never_sent_twice_and_is_said_to_be_in_doubt(
    slow_server: FaultServer,
) -> None:
    # S3 got the PUT but answered too late: it may store it. A second attempt would be a second upload that
    # may land too (two versions; one more to chase after an erasure), so the client does not retry it.
    store = S3TranscriptStore(make_client(read_timeout=0.5, max_attempts=3), "slow-bucket", "p")
    with pytest.raises(UploadInDoubt, match="may land"):
        await store.put(run_key(KEYS, "r1"), b"x")
    assert slow_server.requests == 1
    await store.close()


async def test_an_upload_that_cannot_connect_is_retried_and_is_not_in_doubt(
    s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{free_port()}")
    store = S3TranscriptStore.from_url("s3://any/prefix")
    with pytest.raises(TranscriptUnavailable, match="unreachable") as caught:
        await store.put(run_key(KEYS, "r1"), b"x")
    assert not isinstance(caught.value, UploadInDoubt)  # nothing reached S3: it cannot land
    await store.close()


async def test_retention_apply_puts_the_lifecycle_rule_and_keeps_other_rules(s3_bucket: str) -> None:
    client = boto3.client("s3")
    other = {"ID": "keep-me", "Filter": {"Prefix": "logs/"}, "Status": "Enabled", "Expiration": {"Days": 7}}
    client.put_bucket_lifecycle_configuration(Bucket=s3_bucket, LifecycleConfiguration={"Rules": [other]})
    store = S3TranscriptStore.from_url(f"s3://{s3_bucket}/transcripts")
    rule = await store.apply_retention(days=30)
    await store.apply_retention(days=30)  # idempotent: replaced, not duplicated
    rules = {r["ID"]: r for r in client.get_bucket_lifecycle_configuration(Bucket=s3_bucket)["Rules"]}
    ours = rule["ID"]
    assert set(rules) == {"keep-me", ours}
    assert rules[ours]["Expiration"]["Days"] == 30
    assert rules[ours]["NoncurrentVersionExpiration"]["NoncurrentDays"] == 1
    assert rules[ours]["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] == 1
    assert rule["Filter"] == {"Prefix": "transcripts/subjects/"}


async def test_stores_under_two_prefixes_of_one_bucket_each_keep_their_own_retention_rule(s3_bucket: str) -> None:
    client = boto3.client("s3")
    # A rule put by a version whose every prefix's rule had one ID: replaced on its own prefix only.
    legacy = {**lifecycle_rule("staging/subjects/", 90), "ID": RULE_ID}
    client.put_bucket_lifecycle_configuration(Bucket=s3_bucket, LifecycleConfiguration={"Rules": [legacy]})
    production = S3TranscriptStore.from_url(f"s3://{s3_bucket}/production")
    staging = S3TranscriptStore.from_url(f"s3://{s3_bucket}/staging")
    await production.apply_retention(days=30)
    await staging.apply_retention(days=7)
    await production.apply_retention(days=30)  # again: replaced, not duplicated
    rules = client.get_bucket_lifecycle_configuration(Bucket=s3_bucket)["Rules"]
    assert sorted((r["ID"], r["Filter"]["Prefix"], r["Expiration"]["Days"]) for r in rules) == sorted([
        (rule_id("production/subjects/"), "production/subjects/", 30),
        (rule_id("staging/subjects/"), "staging/subjects/", 7),
    ])
    for store in (production, staging):
        await store.close()


def test_the_shipped_lifecycle_policy_matches_what_retention_apply_puts() -> None:
    shipped = json.loads((ROOT / "infra" / "s3-lifecycle.json").read_text())
    assert shipped["Rules"] == [lifecycle_rule("transcripts/subjects/", 90)]


async def test_retention_apply_at_the_bucket_root_expires_only_transcripts(s3_bucket: str) -> None:
    # TEAMSTORE_TRANSCRIPTS_URL=s3://bucket, no prefix: a rule on "" would expire everything in the bucket.
    store = S3TranscriptStore.from_url(f"s3://{s3_bucket}")
    rule = await store.apply_retention(days=30)
    (put,) = boto3.client("s3").get_bucket_lifecycle_configuration(Bucket=s3_bucket)["Rules"]
    assert rule["Filter"] == put["Filter"] == {"Prefix": "subjects/"}
    await store.close()


async def test_delete_prefix_of_many_listing_pages_removes_every_version_and_marker(s3_bucket: str) -> None:
    # Deleting each page before the next was listed left the rest: the next page starts after the last version
    # of the one before, and an S3-compatible server (moto) finds nothing after a version that is gone.
    client = boto3.client("s3")
    client.put_bucket_versioning(Bucket=s3_bucket, VersioningConfiguration={"Status": "Enabled"})
    store = S3TranscriptStore(make_client(), s3_bucket, "audit", page_size=3)
    keys = [run_key(RunKeys("a" * 32, "1" * 32), f"r{n}") for n in range(4)]
    for key in keys * 2:
        await store.put(key, b"transcript")
    await store.delete(keys[0])
    await store.put(keys[0], b"transcript")
    client.delete_object(Bucket=s3_bucket, Key=f"audit/{keys[1]}")  # a delete marker, not counted as removed

    assert await store.delete_prefix("subjects/") == 7
    assert client.list_object_versions(Bucket=s3_bucket).get("Versions", []) == []
    assert client.list_object_versions(Bucket=s3_bucket).get("DeleteMarkers", []) == []
    await store.close()


async def _outbox_rows(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        return list((await conn.scalars(select(outbox_table.c.run_id))).all())


async def test_a_writer_records_its_store_with_the_endpoint_its_client_talks_to(
    s3_bucket: str, s3_env: str, sqlite_engine: AsyncEngine
) -> None:
    """An erasure reaches a store only at that endpoint: a bucket's name at another one says nothing of it."""
    store = S3TranscriptStore.from_url(f"s3://{s3_bucket}/t")
    await observe_run([TranscriptObserver(store, sqlite_engine, Pseudonyms(sqlite_engine))], triage_team(),
                      context(user_id="carol"))
    subject = await find_subject(sqlite_engine, "carol")
    assert subject is not None and await recorded_endpoints(sqlite_engine, subject) == {store.url: s3_env}
    await store.close()


async def test_s3_down_the_run_succeeds_the_transcript_waits_in_the_outbox_then_is_delivered_once(
    s3_bucket: str, sqlite_engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    good_endpoint = make_client().meta.endpoint_url
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{free_port()}")
    down = S3TranscriptStore.from_url(f"s3://{s3_bucket}/t")
    observer = TranscriptObserver(down, sqlite_engine, Pseudonyms(sqlite_engine))
    ctx = context(user_id="bob")
    started = time.monotonic()
    outcome = await observe_run([observer], triage_team(), ctx)
    assert outcome.result is not None and time.monotonic() - started < 5
    assert await _outbox_rows(sqlite_engine) == [ctx.run_id]
    body = (await outbox.flush(sqlite_engine, down)).last_error
    assert body and "unreachable" in body  # still down: stays queued, the error is kept
    assert (
        await outbox.enqueue(sqlite_engine, ctx.run_id, "k", "s", b"x", "again") is False
    )  # once per run id

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", good_endpoint)
    up = S3TranscriptStore.from_url(f"s3://{s3_bucket}/t")
    report = await outbox.flush(sqlite_engine, up)
    assert (report.delivered, report.remaining) == (1, 0)
    assert await outbox.flush(sqlite_engine, up) == outbox.FlushReport(0, 0, 0)
    keys = await Pseudonyms(sqlite_engine).writable(ctx)
    stored = await up.list_keys(session_prefix(keys))
    assert stored == [run_key(keys, ctx.run_id)]
    body = await KeyService.from_settings(sqlite_engine).open("bob", await up.get(stored[0]), sealed_context(stored[0]))
    header, items = decode(body)
    assert header["run_id"] == ctx.run_id and len(items) == header["items"] >= 4


async def test_a_slow_store_costs_the_run_at_most_the_upload_deadline(
    slow_server: FaultServer, sqlite_engine: AsyncEngine
) -> None:
    store = S3TranscriptStore.from_url("s3://slow-bucket/t")
    observer = TranscriptObserver(store, sqlite_engine, Pseudonyms(sqlite_engine), upload_deadline_s=0.5)
    ctx = context()
    started = time.monotonic()
    await observe_run([observer], triage_team(), ctx)
    assert time.monotonic() - started < 2.0
    assert await _outbox_rows(sqlite_engine) == [ctx.run_id]


class _Held:
    """A transcript observer whose uploads wait at a :class:`HoldingProxy` in front of moto, with a
    0.2 s upload deadline: each run moves on before its PUT lands, and the test says when it does."""

    def __init__(self, s3_endpoint: str, s3_bucket: str, engine: AsyncEngine) -> None:
        self.proxy = HoldingProxy(s3_endpoint)
        client = boto3.client("s3", endpoint_url=self.proxy.endpoint,
                              config=Config(read_timeout=30, retries={"total_max_attempts": 1}))
        self.store = S3TranscriptStore(client, s3_bucket, "t")
        self.pseudonyms = Pseudonyms(engine)
        self.observer = TranscriptObserver(self.store, engine, self.pseudonyms, upload_deadline_s=0.2)


@pytest.fixture
async def held(s3_endpoint: str, s3_bucket: str, sqlite_engine: AsyncEngine) -> AsyncIterator[_Held]:
    held = _Held(s3_endpoint, s3_bucket, sqlite_engine)
    yield held
    await held.store.close()
    held.proxy.stop()


async def test_an_upload_that_lands_after_the_run_stopped_waiting_is_kept_and_not_queued_twice(
    held: _Held, sqlite_engine: AsyncEngine
) -> None:
    ctx = context(user_id="lou")
    await observe_run([held.observer], triage_team(), ctx)
    assert await _outbox_rows(sqlite_engine) == [ctx.run_id]  # the run moved on: queued meanwhile
    held.proxy.release()
    assert await asyncio.to_thread(held.proxy.landed.wait, 10)
    await held.observer.drain()

    keys = await held.pseudonyms.writable(ctx)
    assert await held.store.list_keys(session_prefix(keys)) == [run_key(keys, ctx.run_id)]
    assert await _outbox_rows(sqlite_engine) == []  # delivered: the queued copy is not sent again


async def test_an_upload_that_lands_once_an_erasure_fenced_its_user_is_deleted_again(
    held: _Held, s3_bucket: str, sqlite_engine: AsyncEngine
) -> None:
    ctx = context(user_id="mae")
    await observe_run([held.observer], triage_team(), ctx)
    async with sqlite_engine.begin() as conn:  # an erasure opens while the PUT is still on its way
        await conn.execute(user_holds.insert().values(user_id="mae", reason="erasure", created_at=datetime.now(UTC)))
    held.proxy.release()
    assert await asyncio.to_thread(held.proxy.landed.wait, 10)
    await held.observer.drain()

    versions = boto3.client("s3").list_object_versions(Bucket=s3_bucket, Prefix="t/subjects/")
    assert versions.get("Versions", []) == [] and versions.get("DeleteMarkers", []) == []
    assert await _outbox_rows(sqlite_engine) == [ctx.run_id]  # the erasure's outbox step removes it


async def test_later_runs_flush_the_outbox_opportunistically(
    s3_bucket: str, sqlite_engine: AsyncEngine
) -> None:
    store = S3TranscriptStore.from_url(f"s3://{s3_bucket}/t")
    pseudonyms = Pseudonyms(sqlite_engine)
    queued = context(user_id="carol")
    await pseudonyms.open_session(queued.user_id, "earlier")  # the session of the run whose transcript waits
    keys = await pseudonyms.writable(queued)
    await outbox.enqueue(
        sqlite_engine, queued.run_id, run_key(keys, queued.run_id), keys.subject_key, b"gz", "down"
    )
    observer = TranscriptObserver(store, sqlite_engine, pseudonyms, flush_every=1)
    await observe_run([observer], triage_team(), context(user_id="carol"))
    await observer.drain()
    assert await _outbox_rows(sqlite_engine) == []
    assert run_key(keys, queued.run_id) in await store.list_keys(session_prefix(keys))


@pytest.fixture
def truncating_server(s3_env: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultServer]:
    yield from _serve(monkeypatch, "truncate")


async def test_a_connection_dropped_mid_download_is_a_typed_error(truncating_server: FaultServer) -> None:
    # S3 answers 200 and starts sending the object, then the connection drops: `transcripts show` must
    # say so with a typed error, never a botocore/urllib3 traceback.
    store = S3TranscriptStore(make_client(max_attempts=1), "any-bucket", "p")
    with pytest.raises(TranscriptUnavailable, match="read"):
        await store.get(run_key(KEYS, "r1"))


@pytest.fixture
def hanging_server(s3_env: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultServer]:
    yield from _serve(monkeypatch, "hang")


async def test_a_hung_s3_never_holds_the_threads_the_rest_of_the_process_shares(
    hanging_server: FaultServer, sqlite_engine: AsyncEngine
) -> None:
    # Every run's upload that S3 leaves hanging keeps its thread busy until the client's timeouts end,
    # long after the run moved on. Those threads must not be the loop's default executor, which registry
    # lookups, DNS resolution of database hosts and file I/O queue behind.
    store = S3TranscriptStore.from_url("s3://hung-bucket/t")
    observer = TranscriptObserver(store, sqlite_engine, Pseudonyms(sqlite_engine), upload_deadline_s=0.2)
    try:
        runs = [context(user_id="dora") for _ in range(12)]
        for ctx in runs:
            await observe_run([observer], triage_team(), ctx)
        assert sorted(await _outbox_rows(sqlite_engine)) == sorted(c.run_id for c in runs)
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "answered"), timeout=4.0) == "answered"
    finally:
        await store.close()


async def test_the_first_upload_after_an_outage_drains_what_the_outage_queued(
    s3_env: str, sqlite_engine: AsyncEngine
) -> None:
    # The bucket is missing (a deploy ran before Terraform): runs queue their transcripts. Once it exists,
    # the next run that uploads proves the store answers again and must deliver the queue, however few
    # runs this worker sees afterwards (flush_every is the default 50).
    bucket = f"ts-late-{uuid.uuid4().hex[:8]}"
    store = S3TranscriptStore.from_url(f"s3://{bucket}/t")
    pseudonyms = Pseudonyms(sqlite_engine)
    observer = TranscriptObserver(store, sqlite_engine, pseudonyms)
    try:
        first = context(user_id="erin")
        await observe_run([observer], triage_team(), first)  # a check soon after start: nothing queued yet
        await observer.drain()
        outage = [context(user_id="erin") for _ in range(2)]
        for ctx in outage:
            await observe_run([observer], triage_team(), ctx)
        assert sorted(await _outbox_rows(sqlite_engine)) == sorted(c.run_id for c in [first, *outage])

        boto3.client("s3").create_bucket(Bucket=bucket)
        await observe_run([observer], triage_team(), context(user_id="erin"))
        await observer.drain()
        assert await _outbox_rows(sqlite_engine) == []
        keys = await pseudonyms.writable(first)
        stored = await store.list_keys(session_prefix(keys))
        assert {run_key(keys, c.run_id) for c in [first, *outage]} <= set(stored)
    finally:
        await store.close()


async def test_shutdown_does_not_wait_for_a_slow_store_to_take_the_whole_outbox(
    s3_env: str, sqlite_engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # S3 answers, but slowly: a background drain of a long outbox would hold Platform.aclose() (and a
    # pod's shutdown) for minutes. Shutdown gives it a bounded time; what is left stays queued.
    server = FaultServer("slow", delay=1.0)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", server.endpoint)
    store = S3TranscriptStore.from_url("s3://slow-bucket/t")
    pseudonyms = Pseudonyms(sqlite_engine)
    try:
        queued = [context(user_id="hal") for _ in range(40)]
        await pseudonyms.open_session("hal", "earlier")  # the session of the runs whose transcripts wait
        for ctx in queued:
            keys = await pseudonyms.writable(ctx)
            await outbox.enqueue(sqlite_engine, ctx.run_id, run_key(keys, ctx.run_id), keys.subject_key, b"gz", "down")
        observer = TranscriptObserver(store, sqlite_engine, pseudonyms, upload_deadline_s=10.0, flush_every=1)
        await observe_run([observer], triage_team(), context(user_id="hal"))  # uploads, then starts draining
        await asyncio.wait_for(observer.drain(), timeout=20.0)
        left = await _outbox_rows(sqlite_engine)
        assert left and set(left) <= {c.run_id for c in queued}  # undelivered ones are still queued
    finally:
        await store.close()
        server.stop()



async def test_a_request_cancelled_while_the_last_runs_audit_is_written_loses_no_transcript(
    hanging_server: FaultServer, sqlite_engine: AsyncEngine, registry_path: Path
) -> None:
    # A second run() (or save()) first waits for the previous run's audit writes. A request timeout that
    # cancels it there must not cancel those writes half-way: the transcript is uploaded or queued, never
    # silently dropped.
    from teamstore import examples
    from teamstore.runtime.platform import Platform
    from teamstore.settings import Settings

    registry = Registry(registry_path, create=True)
    registry.add("support_triage", examples.support_triage().dump_component(),
                 examples.example_manifest("support_triage"), "v1", label="production")
    store = S3TranscriptStore.from_url("s3://hung-bucket/t")
    observer = TranscriptObserver(store, sqlite_engine, Pseudonyms(sqlite_engine), upload_deadline_s=1.0)
    platform = Platform(sqlite_engine, registry, settings=Settings(auto_migrate=True), observers=[observer])
    try:
        async with platform.session("ivy", "s1", team="support_triage") as session:
            await session.run("My router keeps dropping")  # its upload hangs in the background
            first = session.last_run_id
            second = asyncio.ensure_future(session.run("Still dropping"))
            await asyncio.sleep(0)  # the second run now waits for the first run's audit
            second.cancel()
            with pytest.raises(asyncio.CancelledError):
                await second
        assert await _outbox_rows(sqlite_engine) == [first]
    finally:
        await platform.store.aclose()
        await store.close()


@pytest.mark.parametrize(("endpoint", "recorded"), [
    ("https://s3.us-east-1.amazonaws.com", "aws"),  # not none: that is a record from before 0029, unknown
    ("https://bucket.vpce-0a1b.s3.eu-west-1.vpce.amazonaws.com/", "aws"),
    ("https://s3-accesspoint.us-west-2.amazonaws.com", "aws"),
    ("https://s3.cn-north-1.amazonaws.com.cn", "aws"),
    # another AWS host in front of a MinIO is that MinIO: a load balancer's, an instance's
    ("http://x-123.us-east-1.elb.amazonaws.com:9000", "http://x-123.us-east-1.elb.amazonaws.com:9000"),
    ("http://ec2-54-1-2-3.compute-1.amazonaws.com:9000/", "http://ec2-54-1-2-3.compute-1.amazonaws.com:9000"),
    ("http://s3-minio-1.us-east-1.elb.amazonaws.com:9000", "http://s3-minio-1.us-east-1.elb.amazonaws.com:9000"),
    ("https://b--usw2-az1--x-s3.s3express-usw2-az1.us-west-2.amazonaws.com", "aws"),  # S3 Express One Zone
    ("https://s3express-control.us-west-2.amazonaws.com", "aws"),
    ("https://s3.dualstack.us-east-1.amazonaws.com", "aws"),
    ("https://s3-fips.us-gov-west-1.amazonaws.com", "aws"),
    ("http://key:secret@minio:9000/", "http://minio:9000"),
    ("HTTP://MinIO:9000", "http://minio:9000"),
    ("http://[::1]:9000", "http://[::1]:9000"),
    ("https://minio:443", "https://minio"),  # a scheme's default port is the same endpoint
    ("http://minio:80/", "http://minio"),
    ("http://minio:443", "http://minio:443"),
    ("http://key:secret@minio:99999", "http://minio:99999"),  # a client made by hand: kept as written, no raise
    ("http://minio:9000;x", "http://minio:9000;x"),
])
def test_a_store_s_endpoint_is_recorded_without_credentials_and_as_aws_for_aws_own(
    endpoint: str, recorded: str
) -> None:
    assert recorded_endpoint(endpoint) == recorded
