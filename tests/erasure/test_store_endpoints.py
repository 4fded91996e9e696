"""Each transcript store is recorded with the S3 endpoint its writer reached it at (migration 0029): a done store
recorded at a known other endpoint is not listed through this erasure's client, and one recorded before endpoints
were (unknown) is, as every store was then. A store still to empty reached at another endpoint is erased only if
it carries this database's mark (its workers', or an earlier pass's at the recorded endpoint): a proxy reaches the
workers' bucket, another server's bucket of the same name is refused.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.audit.schema import subject_stores
from teamstore.audit.subjects import find_subject, get_or_create_subject, record_store, recorded_endpoints
from teamstore.audit.transcripts import subject_prefix
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.db.identity import database_id
from teamstore.erasure import RequestStatus
from teamstore.errors import ExportFailed, TranscriptStoreMismatch
from tests.audit.fault_server import HoldingProxy
from tests.erasure.conftest import coordinator, versioned_bucket
from tests.erasure.seed import audited_platform, counts, seed_user
from tests.erasure.test_done_stores import USER, _emptied_first, _written
from tests.erasure.test_export import exporter
from tests.services import free_port


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


def _bucket_at(endpoint: str, name: str) -> S3TranscriptStore:
    """A versioned bucket called ``name`` on the S3 server at ``endpoint`` (made there if it has none)."""
    client = boto3.client("s3", endpoint_url=endpoint)
    if name not in {bucket["Name"] for bucket in client.list_buckets().get("Buckets", [])}:
        client.create_bucket(Bucket=name)
        client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return S3TranscriptStore(client, name, "audit")


@pytest.mark.s3
async def test_an_erasure_reaching_another_server_s_bucket_of_the_same_name_is_refused_and_the_right_one_finishes(
    engine: AsyncEngine, registry: Registry, s3_env: str, fresh_moto: str
) -> None:
    """Listed there, the empty namesake would be taken for emptied: the request completed, the mapping dropped,
    and the transcripts left where the workers wrote them."""
    written = _bucket_at(s3_env, versioned_bucket())
    platform = audited_platform(engine, registry, written)
    seeded = await seed_user(platform, written, USER, "CANARY-namesake", 1, 2)
    await platform.aclose()
    elsewhere = _bucket_at(fresh_moto, written.bucket)  # another server, a bucket of the same name, empty
    before = await counts(engine, USER, seeded.subject_key)

    with pytest.raises(TranscriptStoreMismatch) as planned:
        await coordinator(engine, elsewhere).run(USER, dry_run=True)
    with pytest.raises(TranscriptStoreMismatch) as refused:
        await coordinator(engine, elsewhere).run(USER, request_id="req-namesake")

    assert await counts(engine, USER, seeded.subject_key) == before  # refused before any step deleted anything
    assert "This dry run counted nothing" in planned.value.message

    assert f"the S3 endpoint {fresh_moto}" in refused.value.message and s3_env in refused.value.message
    assert refused.value.hint is not None and refused.value.hint.startswith(
        f"run erase with AWS_ENDPOINT_URL_S3={s3_env} and the same --request-id req-namesake")
    assert f"carries no mark of this database's writers at {s3_env}" in refused.value.message
    assert planned.value.hint is not None and "and the same user" in planned.value.hint  # no request to rerun
    assert await find_subject(engine, USER) == seeded.subject_key  # the request open, the mapping kept
    assert len(await written.list_keys(subject_prefix(seeded.subject_key))) == 2
    ours = await database_id(engine)
    assert not any([await elsewhere.marked(ours, at) for at in (s3_env, fresh_moto)])  # the refusal marked nothing
    done = await coordinator(engine, written).run(USER, request_id="req-namesake")
    assert done.status is RequestStatus.COMPLETED, done
    assert await written.list_keys(subject_prefix(seeded.subject_key)) == []
    await written.close()
    await elsewhere.close()


@pytest.mark.s3
async def test_an_erasure_reaching_the_workers_bucket_through_a_proxy_finds_it_marked_and_empties_it(
    engine: AsyncEngine, registry: Registry, s3_env: str
) -> None:
    written = _bucket_at(s3_env, versioned_bucket())
    platform = audited_platform(engine, registry, written)
    seeded = await seed_user(platform, written, USER, "CANARY-proxied", 1, 2)
    await platform.aclose()
    assert await written.marked(await database_id(engine), s3_env)  # the worker's first run marked it
    proxy = HoldingProxy(s3_env)
    try:
        receipt = await coordinator(engine, _bucket_at(proxy.endpoint, written.bucket)).run(USER, request_id="req-px")
    finally:
        proxy.stop()

    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert await written.list_keys(subject_prefix(seeded.subject_key)) == []
    await written.close()


@pytest.mark.s3
async def test_a_bucket_unmarked_by_writers_is_marked_by_the_erasure_at_their_endpoint_and_then_reached_by_proxy(
    engine: AsyncEngine, s3_env: str
) -> None:
    """A store written before marks were: refused through another endpoint until a pass at the recorded one (which
    is the bucket the record names) marks it."""
    written = _bucket_at(s3_env, versioned_bucket())
    await _written(engine, {written: 2})  # recorded at the test endpoint, never marked
    proxy = HoldingProxy(s3_env)
    try:
        proxied = _bucket_at(proxy.endpoint, written.bucket)
        with pytest.raises(TranscriptStoreMismatch):
            await coordinator(engine, proxied).run(USER, request_id="req-old")
        assert (await coordinator(engine, written).run(USER, request_id="req-old")).status is RequestStatus.COMPLETED
        assert await written.marked(await database_id(engine), s3_env)
        await _written(engine, {written: 1})  # written again at the same endpoint
        receipt = await coordinator(engine, proxied).run(USER, request_id="req-again")
    finally:
        proxy.stop()

    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert receipt.stores["transcripts"].counts.objects == 1
    await written.close()


@pytest.mark.s3
async def test_an_export_reaching_another_server_s_bucket_of_the_same_name_fails_rather_than_miss_the_transcripts(
    engine: AsyncEngine, registry: Registry, s3_env: str, fresh_moto: str, tmp_path: Path
) -> None:
    """An export of the namesake would give the user none of their transcripts and say it was complete."""
    written = _bucket_at(s3_env, versioned_bucket())
    platform = audited_platform(engine, registry, written)
    await seed_user(platform, written, USER, "CANARY-exported", 1, 2)
    await platform.aclose()
    elsewhere = _bucket_at(fresh_moto, written.bucket)

    with pytest.raises(ExportFailed) as failed:
        await exporter(engine, elsewhere).run(USER, tmp_path / "elsewhere.zip", operator="dpo")

    assert f"the S3 endpoint {fresh_moto}" in failed.value.message and s3_env in failed.value.message
    assert failed.value.hint is not None and f"AWS_ENDPOINT_URL_S3={s3_env}" in failed.value.hint
    assert not (tmp_path / "elsewhere.zip").exists()
    proxy = HoldingProxy(s3_env)
    try:
        done = await exporter(engine, _bucket_at(proxy.endpoint, written.bucket)).run(
            USER, tmp_path / "proxied.zip", operator="dpo")  # the workers' bucket, found marked
    finally:
        proxy.stop()
    assert done.manifest.stores["transcripts"].records == 3  # two runs, and the earlier version of one written again
    await written.close()
    await elsewhere.close()


class DenyingHeads(HoldingProxy):
    """Forwards to moto, but answers 403 to every HEAD in the bucket ``name``: on AWS, a bucket of that name that is
    another account's, or a role without s3:ListBucket."""

    def __init__(self, upstream: str, name: str) -> None:
        self.denied = f"/{name}/"
        super().__init__(upstream)

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, list[Any], bytes]:
        if method == "HEAD" and path.startswith(self.denied):
            return 403, [("Content-Type", "application/xml")], b""
        return super()._forward(method, path, headers, body)


@pytest.mark.s3
async def test_erasing_another_user_at_a_namesake_leaves_it_unmarked_for_the_user_whose_store_it_is_not(
    engine: AsyncEngine, registry: Registry, s3_env: str, fresh_moto: str
) -> None:
    """A pass marks only a bucket it reaches where the record says its writers did: a user with no store recorded
    (a subject, no run written), or one recorded before endpoints were, erased at the namesake, marks nothing."""
    written = _bucket_at(s3_env, versioned_bucket())
    platform = audited_platform(engine, registry, written)
    seeded = await seed_user(platform, written, USER, "CANARY-poisoned", 1, 2)
    await platform.aclose()
    elsewhere = _bucket_at(fresh_moto, written.bucket)
    await get_or_create_subject(engine, "ned@example.com")  # no store recorded
    old = await get_or_create_subject(engine, "old@example.com")
    await record_store(engine, old, written.url, endpoint=None)  # as before migration 0029
    async with engine.begin() as conn:
        await conn.execute(update(subject_stores).where(subject_stores.c.subject_key == old).values(endpoint=None))

    for n, user in enumerate(("ned@example.com", "old@example.com")):
        await coordinator(engine, elsewhere).run(user, request_id=f"req-other-{n}")

    assert not await elsewhere.marked(await database_id(engine), fresh_moto)  # nor at its own endpoint
    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, elsewhere).run(USER, request_id="req-poisoned")
    assert len(await written.list_keys(subject_prefix(seeded.subject_key))) == 2
    assert await find_subject(engine, USER) == seeded.subject_key
    await written.close()
    await elsewhere.close()


@pytest.mark.s3
async def test_a_bucket_that_will_not_say_whether_it_is_marked_is_refused_naming_the_writers_endpoint(
    engine: AsyncEngine, s3_env: str, fresh_moto: str, tmp_path: Path
) -> None:
    """A store still to empty: the fix is the recorded endpoint, not a rerun where the answer stays 403; a done
    one does not hold the request open (named not reachable here, as an unmarked one is)."""
    first = _bucket_at(fresh_moto, versioned_bucket())  # where the workers wrote (a MinIO beside AWS)
    proxy = DenyingHeads(s3_env, first.bucket)  # AWS, where a bucket of that name is another account's
    try:
        subject = await _written(engine, {first: 2})
        reached = _bucket_at(proxy.endpoint, first.bucket)
        with pytest.raises(TranscriptStoreMismatch) as refused:
            await coordinator(engine, reached).run(USER, request_id="req-403")
        assert refused.value.hint is not None and refused.value.hint.startswith(
            f"run erase with AWS_ENDPOINT_URL_S3={fresh_moto} and the same --request-id req-403")
        assert "would not say whether it carries this database's mark (access denied)" in refused.value.message
        with pytest.raises(ExportFailed) as failed:
            await exporter(engine, reached).run(USER, tmp_path / "x.zip", operator="dpo")
        assert (failed.value.hint or "").startswith(f"run the export with AWS_ENDPOINT_URL_S3={fresh_moto}; ")
        second = _bucket_at(proxy.endpoint, versioned_bucket())
        await _written(engine, {second: 1})
        with pytest.raises(TranscriptStoreMismatch):
            await coordinator(engine, first).run(USER, request_id="req-403")  # empties the first, names the second
        receipt = await coordinator(engine, second).run(USER, request_id="req-403")
    finally:
        proxy.stop()

    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert f"{first.url} (not reachable here: " in (receipt.stores["transcripts"].detail or "")
    assert await second.list_keys(subject_prefix(subject)) == []
    await first.close()


@pytest.mark.s3
async def test_a_store_recorded_at_an_endpoint_no_server_answers_is_erased_once_an_operator_marks_it(
    engine: AsyncEngine, s3_env: str
) -> None:
    """Workers that ran with a wrong endpoint recorded it; a flush delivered with the right one."""
    written = _bucket_at(s3_env, versioned_bucket())
    dead = f"http://127.0.0.1:{free_port()}"
    subject = await get_or_create_subject(engine, USER)
    await record_store(engine, subject, written.url, endpoint=dead)
    await written.put(f"{subject_prefix(subject)}sessions/s0/runs/r0.jsonl.gz", b"transcript")
    with pytest.raises(TranscriptStoreMismatch) as refused:
        await coordinator(engine, written).run(USER, request_id="req-dead")
    assert f"`teamstore transcripts mark --as-reached-at {dead}`" in (refused.value.hint or "")

    await written.mark(await database_id(engine), dead)  # what that command does
    receipt = await coordinator(engine, written).run(USER, request_id="req-dead")

    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert await written.list_keys(subject_prefix(subject)) == []
    await written.close()



def _locked_at(endpoint: str) -> S3TranscriptStore:
    """A new versioned bucket with Object Lock on the S3 server at ``endpoint``."""
    client, name = boto3.client("s3", endpoint_url=endpoint), f"ts-er-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return S3TranscriptStore(client, name, "audit")


async def _held_at(engine: AsyncEngine, stores: dict[S3TranscriptStore, str]) -> None:
    """Two transcripts of the user written to each store, recorded at its endpoint, the first under a legal hold."""
    subject = await get_or_create_subject(engine, USER)
    for store, endpoint in stores.items():
        await record_store(engine, subject, store.url, endpoint=endpoint)
        for n in range(2):
            await store.put(f"{subject_prefix(subject)}sessions/s{n}/runs/r{n}.jsonl.gz", b"transcript")
        key = f"{store.prefix}/{subject_prefix(subject)}sessions/s0/runs/r0.jsonl.gz"
        store.client.put_object_legal_hold(Bucket=store.bucket, Key=key, LegalHold={"Status": "ON"})


@pytest.mark.s3
async def test_the_dry_run_of_a_request_held_in_stores_at_two_endpoints_names_both_and_the_one_beyond_its_reach(
    engine: AsyncEngine, s3_env: str, fresh_moto: str
) -> None:
    """The rerun of a request held in two stores goes back to each, a pass per store; its dry run counted the store it
    talks to and said nothing of the other, written at another S3 endpoint this process's client does not reach."""
    here, there = _locked_at(s3_env), _locked_at(fresh_moto)
    await _held_at(engine, {here: s3_env, there: fresh_moto})
    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, here).run(USER, request_id="req-two-held")
    held = await coordinator(engine, there).run(USER, request_id="req-two-held")
    assert held.status is RequestStatus.RETAINED_UNDER_HOLD, held

    for store, other, at in ((here, there, fresh_moto), (there, here, s3_env)):
        plan = await coordinator(engine, store).run(USER, request_id="req-two-held", dry_run=True)
        detail = plan.stores["transcripts"].detail or ""
        assert f"a real run would empty {store.url} and stop" in detail, detail
        assert f"still to empty, each by a pass of its own (TEAMSTORE_TRANSCRIPTS_URL set to it): {other.url};" in detail
        assert f"beyond this process's reach, so their pass must run where they are reached: {other.url} (" in detail
        assert f"a pass with AWS_ENDPOINT_URL_S3={at} reaches it" in detail
    with pytest.raises(TranscriptStoreMismatch) as rerun:  # as the dry run said: this store, then the other's pass
        await coordinator(engine, here).run(USER, request_id="req-two-held")
    assert rerun.value.stores == (there.url,)
    await here.close()
    await there.close()
