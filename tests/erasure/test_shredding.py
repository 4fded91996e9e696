"""Crypto-shredding: an erasure destroys the user's data key first, so what S3 may not delete stays, unreadable.

A bucket with Object Lock in compliance mode refuses every delete of a version until its retention ends. The
erasure deletes everything else, destroys the key, and reports those versions as remaining but unreadable
(``shredded``); neither teamstore nor anything holding the bucket, the database and the key-encryption key can
open them afterwards. The key-encryption key lives in the local key file or in KMS (moto over HTTP)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.audit.subjects import find_subject
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.record import sealed_context
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.erasure import RequestStatus, StepStatus
from teamstore.errors import KeyDestroyed, PayloadUnreadable, TranscriptStoreMismatch
from teamstore.keys import KeyService
from teamstore.keys.schema import data_keys
from teamstore.keys.sealed import HEADER_BYTES, is_sealed, key_id_of, open_sealed
from teamstore.settings import Settings
from tests.erasure.conftest import coordinator, versioned_bucket
from tests.erasure.seed import audited_platform, seed_user

CANARY = "CANARY-zoe-5e1f"


def _compliance_bucket() -> str:
    """A versioned bucket with Object Lock whose every new version is retained a day in compliance mode."""
    client, name = boto3.client("s3"), f"ts-lock-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    client.put_object_lock_configuration(Bucket=name, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": 1}}})
    return name


def _versions(bucket: str, prefix: str) -> list[dict[str, Any]]:
    pages = boto3.client("s3").get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix)
    return [v for page in pages for v in page.get("Versions", [])]


async def _every_key_left(engine: AsyncEngine, keys: KeyService) -> list[Any]:
    """Every data key the database still holds, unwrapped as anyone holding the key-encryption key could."""
    async with engine.connect() as conn:
        rows = (await conn.execute(select(data_keys.c.user_id))).scalars().all()
    return [(await keys.data_key(user, create=False)).aead for user in rows]


@pytest.mark.s3
@pytest.mark.parametrize("kek", ["local", "kms"])
async def test_versions_under_compliance_mode_remain_after_the_erasure_and_nothing_can_open_them(
    engine: AsyncEngine, registry: Registry, s3_env: str, request: pytest.FixtureRequest, kek: str
) -> None:
    if kek == "kms":
        request.getfixturevalue("kms_key")
    bucket = _compliance_bucket()
    store = S3TranscriptStore(make_client(), bucket, "audit")
    platform = audited_platform(engine, registry, store)
    for user in ("zoe", "bob"):
        async with platform.session(user, "s1", team="support_triage") as s:
            await s.run(f"{CANARY} my router drops every evening" if user == "zoe" else "bob's router")
            await s.run(f"{CANARY} the technician came")
    zoe_prefix = f"audit/subjects/{(await _subject(engine, 'zoe'))}/"

    receipt = await coordinator(engine, store).run("zoe", request_id="req-881")

    transcripts = receipt.stores["transcripts"]
    assert receipt.ok and receipt.status is RequestStatus.COMPLETED, receipt
    assert receipt.stores["keys"].status is StepStatus.ERASED and receipt.stores["keys"].counts.rows == 1
    assert transcripts.status is StepStatus.SHREDDED and transcripts.counts.unreadable == 2
    assert transcripts.counts.retained == 0 and "unreadable" in (transcripts.detail or "")
    locked = _versions(bucket, zoe_prefix)
    assert len(locked) == 2, "compliance mode kept every version S3 had"
    keys = KeyService.from_settings(engine, Settings())
    anyone = await _every_key_left(engine, keys)  # bob's key: the only one left, and it is no use here
    assert len(anyone) == 1
    for version in locked:
        body = boto3.client("s3").get_object(Bucket=bucket, Key=version["Key"],
                                             VersionId=version["VersionId"])["Body"].read()
        assert is_sealed(body) and CANARY.encode() not in body
        context = sealed_context(version["Key"].removeprefix("audit/"))
        with pytest.raises(KeyDestroyed):
            await keys.open("zoe", body, context)
        for aead in anyone:
            with pytest.raises(PayloadUnreadable):
                open_sealed(aead, body, context)
        assert key_id_of(body) is not None and not await keys.key_exists(key_id_of(body) or "")
    await platform.aclose()
    await store.close()


@pytest.mark.s3
async def test_a_held_long_transcript_is_judged_unreadable_from_its_header_alone(
    engine: AsyncEngine, registry: Registry, s3_env: str
) -> None:
    client = make_client()
    asked: list[str | None] = []  # the Range of each GetObject, None for a whole object
    got: list[int] = []

    def getting(params: dict[str, Any], **_: Any) -> None:
        asked.append(params["headers"].get("Range"))

    def answered(parsed: dict[str, Any], **_: Any) -> None:
        got.append(int(parsed["ContentLength"]))

    store = S3TranscriptStore(client, _compliance_bucket(), "audit")
    platform = audited_platform(engine, registry, store)
    async with platform.session("zoe", "s1", team="support_triage") as s:
        await s.run(f"{CANARY} {os.urandom(120_000).hex()}")  # random: compressed, still 120 kB
    await platform.aclose()
    (locked,) = _versions(store.bucket, f"audit/subjects/{await _subject(engine, 'zoe')}/")
    client.meta.events.register("before-call.s3.GetObject", getting)
    client.meta.events.register("after-call.s3.GetObject", answered)

    receipt = await coordinator(engine, store).run("zoe", request_id="req-long")

    transcripts = receipt.stores["transcripts"]
    assert transcripts.status is StepStatus.SHREDDED, transcripts
    assert (transcripts.counts.unreadable, transcripts.counts.retained) == (1, 0)
    # The step judged the held version from its header, read once for its erasing and both checks of what is left.
    assert locked["Size"] > 100_000 and asked == [f"bytes=0-{HEADER_BYTES - 1}"]
    assert set(got) == {HEADER_BYTES}
    await store.close()


@pytest.mark.s3
async def test_versions_under_compliance_mode_in_two_stores_are_shredded_after_one_pass_on_each(
    engine: AsyncEngine, registry: Registry, s3_env: str
) -> None:
    """Neither store could ever be emptied, so each pass named the other and the request never completed."""
    first, second = (S3TranscriptStore(make_client(), _compliance_bucket(), "audit") for _ in range(2))
    for store, runs in ((first, 2), (second, 1)):  # the service moved its transcripts to another bucket
        platform = audited_platform(engine, registry, store)
        async with platform.session("zoe", f"s-{runs}", team="support_triage") as s:
            for n in range(runs):
                await s.run(f"{CANARY} run {n}")
        await platform.aclose()

    with pytest.raises(TranscriptStoreMismatch) as named:
        await coordinator(engine, first).run("zoe", request_id="req-two-locked")
    assert named.value.stores == (second.url,)
    receipt = await coordinator(engine, second).run("zoe", request_id="req-two-locked")

    transcripts = receipt.stores["transcripts"]
    assert receipt.ok and receipt.status is RequestStatus.COMPLETED, receipt
    assert transcripts.status is StepStatus.SHREDDED and transcripts.counts.versions == 3
    assert (transcripts.counts.unreadable, transcripts.counts.retained) == (3, 0)  # each store's, once
    assert f"2 in {first.url}" in (transcripts.detail or "")
    for store in (first, second):
        await store.close()


def _restore(store: S3TranscriptStore, subject: str) -> None:
    """A copy of one of the user's transcripts put back from a backup: readable (written before sealing)."""
    store.client.put_object(Bucket=store.bucket, Key=f"{store.prefix}/subjects/{subject}/sessions/restored/runs/r",
                            Body=b"readable restored transcript")


async def _two_stores(engine: AsyncEngine, registry: Registry, lock: bool) -> tuple[S3TranscriptStore, ...]:
    """Zoe's transcripts in two buckets, two runs in the first and one in the second, each bucket under
    compliance mode (``lock``) or not."""
    stores = tuple(S3TranscriptStore(make_client(), _compliance_bucket() if lock else versioned_bucket(), "audit")
                   for _ in range(2))
    for store, runs in zip(stores, (2, 1), strict=True):
        platform = audited_platform(engine, registry, store)
        async with platform.session("zoe", f"s-{runs}", team="support_triage") as s:
            for n in range(runs):
                await s.run(f"{CANARY} run {n}")
        await platform.aclose()
    return stores


@pytest.mark.s3
async def test_a_transcript_restored_into_a_held_store_during_its_pass_brings_the_request_back_to_it(
    engine: AsyncEngine, registry: Registry, s3_env: str
) -> None:
    """Left holding its held versions and a restored copy, the first store was taken as holding only what the hold
    kept: done for the request, which completed with the readable copy there, never listed."""
    first, second = await _two_stores(engine, registry, lock=True)
    subject = await _subject(engine, "zoe")

    def restored(step: str, done: int, total: int | None) -> None:
        if step == "transcripts":  # after the pass's deletes in the first store
            _restore(first, subject)

    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, first, progress=restored).run("zoe", request_id="req-restored")
    with pytest.raises(TranscriptStoreMismatch) as named:
        await coordinator(engine, second).run("zoe", request_id="req-restored")
    assert named.value.stores == (first.url,)
    receipt = await coordinator(engine, first).run("zoe", request_id="req-restored")

    transcripts = receipt.stores["transcripts"]
    assert receipt.status is RequestStatus.RETAINED_UNDER_HOLD, receipt  # the copy is readable, and held too
    assert (transcripts.counts.objects, transcripts.counts.versions) == (4, 4)
    assert (transcripts.counts.retained, transcripts.counts.unreadable) == (1, 3)
    assert f"1 in {second.url}" in (transcripts.detail or "")
    for store in (first, second):
        await store.close()


@pytest.mark.s3
@pytest.mark.parametrize("lock", [True, False], ids=["held", "emptied"])
async def test_a_transcript_restored_into_a_store_after_its_pass_is_counted_by_the_pass_that_ends_the_request(
    engine: AsyncEngine, registry: Registry, s3_env: str, lock: bool
) -> None:
    """The pass against the second store did not list the first again, done for the request whether emptied or
    left holding what a hold keeps, and the request completed with the restored copy there, uncounted. Now that
    pass erases it, or, where the bucket's lock keeps it too, counts it as held (readable: retained)."""
    first, second = await _two_stores(engine, registry, lock)
    subject = await _subject(engine, "zoe")
    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, first).run("zoe", request_id="req-restored-after")
    _restore(first, subject)

    receipt = await coordinator(engine, second).run("zoe", request_id="req-restored-after")

    transcripts = receipt.stores["transcripts"]
    assert receipt.status is (RequestStatus.RETAINED_UNDER_HOLD if lock else RequestStatus.COMPLETED), receipt
    assert transcripts.counts.versions == 4  # as the passes found the stores, and the restored copy
    assert (transcripts.counts.retained, transcripts.counts.unreadable) == ((1, 3) if lock else (0, 0))
    left = _versions(first.bucket, f"audit/subjects/{subject}/")
    assert len(left) == (3 if lock else 0)  # the restored copy beside what the hold keeps, or nothing
    for store in (first, second):
        await store.close()


@pytest.mark.s3
@pytest.mark.parametrize("rerun", ["same store", "another store"])
async def test_a_copy_restored_into_the_last_store_during_its_pass_is_found_counted_and_keeps_the_request_open(
    engine: AsyncEngine, registry: Registry, s3_env: str, tmp_path: Path, rerun: str
) -> None:
    """The last store, left holding held versions and a restored copy, was taken as done: its verification found
    the copy and failed the request, whose rerun against another (empty) store then completed with the copy there,
    or whose rerun against it took the larger of two counts and left the copy out."""
    store = S3TranscriptStore(make_client(), versioned_bucket(lock=True), "audit")
    platform = audited_platform(engine, registry, store)
    async with platform.session("zoe", "s-1", team="support_triage") as s:
        for n in range(3):
            await s.run(f"{CANARY} run {n}")
    await platform.aclose()
    subject = await _subject(engine, "zoe")
    (held, *_) = _versions(store.bucket, f"audit/subjects/{subject}/")
    store.client.put_object_legal_hold(Bucket=store.bucket, Key=held["Key"], VersionId=held["VersionId"],
                                       LegalHold={"Status": "ON"})
    restored: list[bool] = []

    def restoring(step: str, done: int, total: int | None) -> None:
        if step == "transcripts" and not restored:  # after the pass's deletes
            restored.append(True)
            _restore(store, subject)

    first = await coordinator(engine, store, progress=restoring).run("zoe", request_id="req-restored")
    assert first.status is RequestStatus.FAILED  # the verification found the copy
    if rerun == "another store":
        with pytest.raises(TranscriptStoreMismatch) as named:  # the held store still has the copy to delete
            await coordinator(engine, LocalTranscriptStore(tmp_path / "other")).run("zoe", request_id="req-restored")
        assert named.value.stores == (store.url,)
    store.client.put_object_legal_hold(Bucket=store.bucket, Key=held["Key"], VersionId=held["VersionId"],
                                       LegalHold={"Status": "OFF"})
    receipt = await coordinator(engine, store).run("zoe", request_id="req-restored")
    assert receipt.status is RequestStatus.COMPLETED
    assert receipt.stores["transcripts"].counts.versions == 4  # three runs and the copy, each counted once
    assert _versions(store.bucket, f"audit/subjects/{subject}/") == []
    await store.close()


async def _subject(engine: AsyncEngine, user: str) -> str:
    subject = await find_subject(engine, user)
    assert subject is not None
    return subject


@pytest.mark.s3
async def test_an_erasure_needs_no_kms_and_completes_while_it_is_unreachable(
    engine: AsyncEngine, registry: Registry, kms_key: str, s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = S3TranscriptStore(make_client(), versioned_bucket(), "audit")
    platform = audited_platform(engine, registry, store)
    await seed_user(platform, store, "zoe", CANARY, sessions_n=1, runs=1)
    await platform.aclose()
    monkeypatch.setenv("AWS_ENDPOINT_URL_KMS", "http://127.0.0.1:9")  # nothing answers there
    receipt = await coordinator(engine, store).run("zoe", request_id="req-down")
    assert receipt.ok and receipt.stores["keys"].counts.rows == 1, receipt
    backups = next(r for r in receipt.remains_elsewhere if r.what == "database backups")
    assert "rotated out and destroyed by" in backups.detail
    await store.close()
