"""Bad input and faults: unknown users, look-alike ids, S3 down, legal holds, concurrent erasures, live sessions."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import unicodedata
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from pydantic import SecretStr
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore.audit.schema import subjects
from teamstore.audit.subjects import (
    ensure_subject,
    find_subject,
    get_or_create_subject,
    new_session_secret,
    new_subject_key,
    record_store,
    session_key,
)
from teamstore.audit.transcripts import store_endpoint
from teamstore.audit.transcripts.base import StoredObject, run_key, subject_prefix
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.record import RunKeys
from teamstore.audit.transcripts.s3 import MARKS, S3TranscriptStore, make_client
from teamstore.db.fence import user_holds
from teamstore.db.identity import database_id
from teamstore.erasure import RequestStatus, StepStatus, desk, requests
from teamstore.erasure.schema import erasure_requests
from teamstore.erasure.steps import STEP_ORDER
from teamstore.errors import (
    ErasureConflict,
    ErasureInProgress,
    ErasureRequestNotFound,
    InvalidIdentifier,
    TranscriptUnavailable,
)
from tests.audit.fault_server import HoldingProxy
from tests.conftest import undeletable
from tests.erasure.conftest import KNOBS, coordinator, versioned_bucket
from tests.erasure.seed import all_versions, audited_platform, counts, scan_database, seed_user
from tests.services import free_port


@pytest.fixture
def folder(tmp_path: Path) -> LocalTranscriptStore:
    return LocalTranscriptStore(tmp_path / "transcripts")


async def test_an_unknown_user_gets_no_match_everywhere_and_still_a_stored_receipt(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    receipt = await coordinator(engine, folder).run("nobody", request_id="req-none")
    assert receipt.ok and receipt.subject_hash is None
    assert {s.status for s in receipt.stores.values()} == {StepStatus.NO_MATCH}
    assert await coordinator(engine, folder).status("req-none") == receipt
    with pytest.raises(ErasureRequestNotFound):
        await coordinator(engine, folder).status("req-other")


async def test_bad_ids_are_refused_before_anything_is_written(engine: AsyncEngine, folder: LocalTranscriptStore) -> None:
    for user, request in (("", "r1"), ("u\x00", "r2"), ("u", "x" * 200), ("u", "a\nb"), ("u", "")):  # "" is no fresh id
        with pytest.raises(InvalidIdentifier):
            await coordinator(engine, folder).run(user, request_id=request)
    async with engine.connect() as conn:
        assert (await conn.execute(select(erasure_requests))).all() == []


async def test_an_id_with_a_control_character_that_an_earlier_audit_stored_is_still_erased(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    user = "legacy\tid"
    with pytest.raises(InvalidIdentifier, match="control character U\\+0009"):
        await get_or_create_subject(engine, user)  # the one id rule: no new subject gets such an id
    async with engine.begin() as conn:  # as an earlier release's audit stored it
        await conn.execute(insert(subjects).values(user_id=user, subject_key=new_subject_key(),
                                                   session_secret=new_session_secret(),
                                                   created_at=datetime.now(UTC)))
    receipt = await coordinator(engine, folder).run(user, request_id="req-legacy")
    assert receipt.ok and receipt.stores["subject"].status is StepStatus.ERASED
    assert receipt.stores["resume_state"].status is StepStatus.NO_MATCH
    assert await find_subject(engine, user) is None


async def test_a_reason_no_database_can_store_is_refused_before_anything_is_written(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    # Postgres holds no NUL in text (it said 'could not reach the database'); no driver sends a lone
    # surrogate (a UnicodeEncodeError traceback). Refused alike on every backend, the fence never raised.
    for reason in ("ticket\x00881", "ticket \udcff881"):
        for dry_run in (False, True):
            with pytest.raises(InvalidIdentifier, match="reason"):
                await coordinator(engine, folder).run("rita", request_id="req-881", reason=reason, dry_run=dry_run)
    async with engine.connect() as conn:
        assert (await conn.execute(select(erasure_requests))).all() == []
        assert (await conn.execute(select(user_holds))).all() == []
    assert (await coordinator(engine, folder).run("rita", request_id="req-881", reason="ticket 881")).ok


async def test_ids_differing_only_by_case_or_normalisation_are_other_users(
    engine: AsyncEngine, registry: Registry, folder: LocalTranscriptStore
) -> None:
    nfc = unicodedata.normalize("NFC", "Zoë")
    others = [unicodedata.normalize("NFD", "Zoë"), "zoë", "ZOË"]
    platform = audited_platform(engine, registry, folder)
    seeded = [await seed_user(platform, folder, u, f"CANARY-{i}", 1, 1) for i, u in enumerate([nfc, *others])]
    before = [await counts(engine, s.user_id, s.subject_key) for s in seeded[1:]]

    receipt = await coordinator(engine, folder).run(nfc)

    assert receipt.ok and receipt.stores["resume_state"].counts.rows == 1
    assert await find_subject(engine, nfc) is None
    assert [await counts(engine, s.user_id, s.subject_key) for s in seeded[1:]] == before
    for s in seeded[1:]:
        assert await find_subject(engine, s.user_id) == s.subject_key
        assert len(await folder.list_keys(subject_prefix(s.subject_key))) == 1


@pytest.mark.s3
async def test_s3_down_fails_the_transcript_step_keeps_the_fence_and_a_rerun_finishes(
    engine: AsyncEngine, registry: Registry, s3_store: S3TranscriptStore
) -> None:
    seeded = await seed_user(audited_platform(engine, registry, s3_store), s3_store, "dave", "CANARY-dave", 1, 2)
    dead_client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{free_port()}", config=Config(
        connect_timeout=0.3, read_timeout=0.3, retries={"total_max_attempts": 1}))
    down = S3TranscriptStore(dead_client, s3_store.bucket, "audit")
    with pytest.raises(TranscriptUnavailable) as planned:  # a dry run has no request id to rerun
        await coordinator(engine, down).run("dave", dry_run=True)
    assert planned.value.hint and planned.value.hint.endswith("then run the dry run again")
    assert "request id" not in planned.value.hint and "AWS_ENDPOINT_URL_S3" in planned.value.hint

    failed = await coordinator(engine, down).run("dave", request_id="req-down")

    assert not failed.ok and failed.status is RequestStatus.FAILED
    statuses = {n: s.status for n, s in failed.stores.items()}
    assert statuses == {"keys": StepStatus.ERASED, "resume_state": StepStatus.ERASED, "quarantine": StepStatus.ERASED,
                        "memory": StepStatus.ERASED,
                        "transcripts": StepStatus.FAILED, "outbox": StepStatus.PENDING, "rewrites": StepStatus.PENDING,
                        "ledger": StepStatus.PENDING, "session_ids": StepStatus.PENDING,
                        "exports": StepStatus.PENDING, "subject": StepStatus.PENDING}
    assert "rerun the same request id" in (failed.stores["transcripts"].detail or "")
    assert len(await s3_store.list_keys(subject_prefix(seeded.subject_key))) == 2  # nothing claimed, nothing gone
    assert await find_subject(engine, "dave") == seeded.subject_key
    async with engine.connect() as conn:
        assert await conn.scalar(select(user_holds.c.request_id).where(user_holds.c.user_id == "dave")) == "req-down"

    done = await coordinator(engine, s3_store).run("dave", request_id="req-down")
    assert done.ok and done.stores["transcripts"].counts.versions == 3
    assert done.stores["resume_state"].counts.rows == 1  # counted once, not again on the rerun


async def _with_first_held(
    engine: AsyncEngine, user_id: str, count: int
) -> tuple[S3TranscriptStore, str, list[str], dict[str, str]]:
    """``count`` transcripts of ``user_id`` in an Object Lock bucket, the first under a legal hold;
    returns the store, the subject, the keys and the held object's address."""
    store = S3TranscriptStore(make_client(), versioned_bucket(lock=True), "audit")
    subject = await get_or_create_subject(engine, user_id)
    keys = [f"{subject_prefix(subject)}sessions/s{i}/runs/r{i}.jsonl.gz" for i in range(count)]
    for key in keys:
        await store.put(key, b"transcript")
    held = {"Bucket": store.bucket, "Key": f"audit/{keys[0]}"}
    store.client.put_object_legal_hold(**held, LegalHold={"Status": "ON"})
    return store, subject, keys, held


@pytest.mark.s3
async def test_objects_under_a_legal_hold_are_reported_retained_never_erased(
    engine: AsyncEngine, s3_env: str
) -> None:
    store, subject, keys, held = await _with_first_held(engine, "erin", 3)

    receipt = await coordinator(engine, store).run("erin", request_id="req-hold")

    transcripts = receipt.stores["transcripts"]
    assert receipt.status is RequestStatus.RETAINED_UNDER_HOLD and not receipt.ok
    assert transcripts.status is StepStatus.RETAINED_UNDER_HOLD and transcripts.counts.retained == 1
    assert await store.list_keys(subject_prefix(subject)) == [keys[0]]
    assert receipt.stores["subject"].status is StepStatus.ERASED
    async with engine.connect() as conn:
        assert (await conn.execute(select(user_holds))).all() == []  # the user may start over meanwhile

    store.client.put_object_legal_hold(**held, LegalHold={"Status": "OFF"})
    after = await coordinator(engine, store).run("erin", request_id="req-hold")
    assert after.ok and after.stores["transcripts"].status is StepStatus.ERASED
    assert await store.list_keys(subject_prefix(subject)) == []
    await store.close()


@pytest.mark.s3
async def test_an_erasure_asks_about_each_held_version_once_per_attempt_and_a_rerun_asks_again(
    engine: AsyncEngine, s3_env: str
) -> None:
    # Erasing, verifying and the final check each sent a HEAD and read the version's first bytes: three of each.
    store, subject, _keys, held = await _with_first_held(engine, "ivy", 3)
    asked: list[tuple[str, str, str | None]] = []  # (operation, key, version id) of each request sent

    def sending(model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name in {"HeadObject", "GetObject"} and f"/{MARKS}/" not in params["Key"]:  # a version, no mark
            asked.append((model.name, params["Key"], params.get("VersionId")))

    store.client.meta.events.register("provide-client-params.s3", sending)
    (locked,) = store.client.list_object_versions(Bucket=store.bucket, Prefix=held["Key"])["Versions"]
    version = (held["Key"], locked["VersionId"])

    for attempt in (1, 2):  # a rerun while the hold stands: a new attempt reads again, once
        receipt = await coordinator(engine, store).run("ivy", request_id="req-heads")
        assert receipt.status is RequestStatus.RETAINED_UNDER_HOLD, receipt
        assert receipt.stores["transcripts"].counts.retained == 1
        assert sorted(asked) == [("GetObject", *version), ("HeadObject", *version)], (attempt, asked)
        asked.clear()
    store.client.put_object_legal_hold(**held, LegalHold={"Status": "OFF"})
    after = await coordinator(engine, store).run("ivy", request_id="req-heads")
    assert after.ok and await store.list_keys(subject_prefix(subject)) == [], after
    await store.close()


@pytest.mark.s3
async def test_versions_under_a_retention_period_without_a_legal_hold_are_reported_retained(
    engine: AsyncEngine, s3_env: str
) -> None:
    # The usual Object Lock set-up: a retention period and no legal hold. It was reported 'failed' with
    # 'no hold explains it' (real S3 answers GetObjectLegalHold with NoSuchObjectLockConfiguration there).
    store = S3TranscriptStore(make_client(), versioned_bucket(lock=True), "audit")
    subject = await get_or_create_subject(engine, "ula")
    kept, other = (f"{subject_prefix(subject)}sessions/s1/runs/{run}.jsonl.gz" for run in ("r1", "r2"))
    store.client.put_object(Bucket=store.bucket, Key=f"audit/{kept}", Body=b"transcript", ObjectLockMode="GOVERNANCE",
                            ObjectLockRetainUntilDate=datetime.now(UTC) + timedelta(days=1))
    await store.put(other, b"transcript")

    receipt = await coordinator(engine, store).run("ula", request_id="req-882")

    transcripts = receipt.stores["transcripts"]
    assert receipt.status is RequestStatus.RETAINED_UNDER_HOLD, transcripts
    assert transcripts.status is StepStatus.RETAINED_UNDER_HOLD and transcripts.counts.retained == 1
    assert await store.list_keys(subject_prefix(subject)) == [kept]
    await store.close()


@pytest.mark.s3
async def test_a_history_of_many_pages_is_erased_a_page_at_a_time_its_held_versions_counted_and_kept(
    engine: AsyncEngine, s3_env: str
) -> None:
    store = S3TranscriptStore(make_client(), versioned_bucket(lock=True), "audit", page_size=4)
    subject = await get_or_create_subject(engine, "hugo")
    keys = [f"{subject_prefix(subject)}sessions/s{i % 2}/runs/r{i}.jsonl.gz" for i in range(7)]
    for key in keys:
        for write in range(2):
            await store.put(key, b"transcript %d" % write)
    for key in keys[5:]:
        store.client.delete_object(Bucket=store.bucket, Key=f"audit/{key}")  # a delete marker on top
    held = [store.client.list_object_versions(Bucket=store.bucket, Prefix=f"audit/{keys[i]}")["Versions"][-1]
            for i in (0, 3, 6)]  # the first version of three keys, on different pages of the listing
    for version in held:
        store.client.put_object_legal_hold(Bucket=store.bucket, Key=version["Key"], VersionId=version["VersionId"],
                                           LegalHold={"Status": "ON"})
    passes: list[dict[str, int]] = []  # each listing from the prefix's start: versions listed and deleted in it

    def listing(params: dict[str, Any], **_: Any) -> None:
        if "KeyMarker" not in params:
            passes.append({"listed": 0, "deleted": 0, "outstanding": 0})

    def page_listed(parsed: dict[str, Any], **_: Any) -> None:
        now = passes[-1]
        now["listed"] += len(parsed.get("Versions", [])) + len(parsed.get("DeleteMarkers", []))
        now["outstanding"] = max(now["outstanding"], now["listed"] - now["deleted"])

    def deleting(params: dict[str, Any], **_: Any) -> None:
        passes[-1]["deleted"] += len(params["Delete"]["Objects"])

    store.client.meta.events.register("before-parameter-build.s3.ListObjectVersions", listing)
    store.client.meta.events.register("after-call.s3.ListObjectVersions", page_listed)
    store.client.meta.events.register("before-parameter-build.s3.DeleteObjects", deleting)

    receipt = await coordinator(engine, store).run("hugo", request_id="req-pages")

    transcripts = receipt.stores["transcripts"]
    assert transcripts.status is StepStatus.RETAINED_UNDER_HOLD, transcripts
    assert transcripts.counts.model_dump() == {"rows": 0, "objects": 7, "versions": 14, "delete_markers": 2,
                                               "bytes": 14 * len(b"transcript 0"), "retained": 3, "unreadable": 0}
    # The erasure counted every page first (deleting nothing), then listed them again and deleted each page
    # holding two at most: the one being deleted, and the next one listed past it.
    counting, erasing = passes[0], passes[1]
    assert counting == {"listed": 16, "deleted": 0, "outstanding": 16}, passes
    assert erasing["deleted"] == 16 and erasing["outstanding"] <= 2 * 4, passes
    left = all_versions(store.client, store.bucket)
    assert sorted(v["VersionId"] for v in left) == sorted(v["VersionId"] for v in held)
    await store.close()


@pytest.mark.s3
async def test_an_erasure_killed_between_two_pages_deletions_reports_every_version_on_its_rerun(
    engine: AsyncEngine, s3_env: str
) -> None:
    bucket = versioned_bucket(lock=False)
    store = S3TranscriptStore(make_client(), bucket, "audit", page_size=4)
    subject = await get_or_create_subject(engine, "ines")
    for i in range(5):
        for write in range(2):
            await store.put(f"{subject_prefix(subject)}sessions/s0/runs/r{i}.jsonl.gz", b"transcript %d" % write)

    class Killed(BaseException):
        pass

    deletes = [0]

    def die_at_the_second_page(**_: Any) -> None:
        deletes[0] += 1
        if deletes[0] == 2:
            raise Killed("the process died with one page of the user's versions deleted")

    store.client.meta.events.register("before-parameter-build.s3.DeleteObjects", die_at_the_second_page)
    with pytest.raises(Killed):
        await coordinator(engine, store).run("ines", request_id="req-killed-pages")
    left = store.client.list_object_versions(Bucket=bucket, Prefix="audit/subjects/").get("Versions", [])
    assert len(left) == 10 - 4  # the first page went before the kill

    rerun = S3TranscriptStore(make_client(), bucket, "audit", page_size=4)
    receipt = await coordinator(engine, rerun).run("ines", request_id="req-killed-pages")

    transcripts = receipt.stores["transcripts"]
    assert receipt.ok and transcripts.status is StepStatus.ERASED, transcripts
    # What the first attempt counted before deleting anything, not the first page alone nor what was left.
    assert (transcripts.counts.objects, transcripts.counts.versions) == (5, 10)
    assert not rerun.client.list_object_versions(Bucket=bucket, Prefix="audit/subjects/").get("Versions")
    await store.close()
    await rerun.close()


@pytest.mark.s3
async def test_a_version_written_between_the_erasures_count_and_its_deletion_is_deleted_and_counted(
    engine: AsyncEngine, s3_env: str
) -> None:
    bucket = versioned_bucket(lock=False)
    store = S3TranscriptStore(make_client(), bucket, "audit", page_size=4)
    subject = await get_or_create_subject(engine, "jana")
    key = f"{subject_prefix(subject)}sessions/s0/runs/r0.jsonl.gz"
    for write in range(5):
        await store.put(key, b"transcript %d" % write)
    starts = [0]

    def late_write(params: dict[str, Any], **_: Any) -> None:
        if "KeyMarker" not in params:
            starts[0] += 1
            if starts[0] == 2:  # the deleting listing begins: a write the count did not see lands first
                make_client().put_object(Bucket=bucket, Key=f"audit/{key}", Body=b"transcript 5")

    store.client.meta.events.register("before-parameter-build.s3.ListObjectVersions", late_write)
    receipt = await coordinator(engine, store).run("jana", request_id="req-late-version")

    transcripts = receipt.stores["transcripts"]
    assert receipt.ok and transcripts.status is StepStatus.ERASED, transcripts
    assert (transcripts.counts.objects, transcripts.counts.versions) == (1, 6)
    assert not store.client.list_object_versions(Bucket=bucket, Prefix="audit/subjects/").get("Versions")
    await store.close()


async def test_two_erasures_of_one_user_at_once_one_wins_the_other_conflicts(
    engine: AsyncEngine, registry: Registry, folder: LocalTranscriptStore
) -> None:
    await seed_user(audited_platform(engine, registry, folder), folder, "frank", "CANARY-frank", 1, 1)
    runs = [coordinator(engine, folder, fence_grace_seconds=0.3).run("frank", request_id=rid)
            for rid in ("req-a", "req-b", "req-a")]
    outcomes = await asyncio.gather(*runs, return_exceptions=True)
    receipts = [o for o in outcomes if not isinstance(o, BaseException)]
    conflicts = [o for o in outcomes if isinstance(o, ErasureConflict)]
    assert len(receipts) == 1 and len(conflicts) == 2, outcomes
    assert receipts[0].ok and receipts[0].stores["resume_state"].counts.rows == 1
    assert receipts[0].stores["subject"].counts.rows == 1  # acted once


async def test_an_erasure_racing_a_live_session_refuses_its_save_and_leaves_nothing(
    engine: AsyncEngine, registry: Registry, folder: LocalTranscriptStore
) -> None:
    platform = audited_platform(engine, registry, folder)
    async with platform.session("gina", "s1", team="support_triage") as session:
        await session.run("CANARY-gina-1 my router keeps dropping")
        await session.save()
        erasure = asyncio.create_task(coordinator(engine, folder, fence_grace_seconds=0.5).run("gina"))
        await asyncio.sleep(1.5)  # past the grace: the coordinator waits for this session to end
        assert not erasure.done()
        await session.run("CANARY-gina-2 still dropping")  # the run answers; its audit writes are refused
        with pytest.raises(ErasureInProgress):
            await session.save()
        with pytest.raises(ErasureInProgress):
            async with platform.session("gina", "s2", team="support_triage"):
                pass
    receipt = await erasure
    assert receipt.ok and receipt.stores["resume_state"].counts.rows == 1
    assert receipt.stores["transcripts"].counts.versions == 1  # the first run's only
    hits = await scan_database(engine, ["gina", "CANARY-gina-1", "CANARY-gina-2"])
    assert all(v == [] for v in hits.values()), hits
    assert await folder.list_keys("") == []
    assert await find_subject(engine, "gina") is None


async def test_a_session_a_dead_worker_leased_fails_the_erasure_saying_when_its_lease_runs_out(
    engine: AsyncEngine, registry: Registry, folder: LocalTranscriptStore
) -> None:
    # It said "still open ... rerun once they end" of a session no worker would ever end: a killed worker's row
    # lease (SQLite's, or TEAMSTORE_SESSION_LEASE=row) runs out only at its TTL.
    from sqlalchemy import update

    from teamstore.state.lease_mode import set_lease_mode
    from teamstore.state.schema import sessions

    if engine.dialect.name == "postgresql":  # its advisory locks go with a dead worker's connection: row leases
        await set_lease_mode(engine, "row")
    platform = audited_platform(engine, registry, folder, session_lease="row")
    async with platform, platform.session("rex", "s1", team="support_triage") as s:
        await s.run("CANARY-rex-1 hello")
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)
    async with engine.begin() as conn:  # as a worker killed mid-run leaves its lease
        await conn.execute(update(sessions).values(lease_owner="killed-worker", lease_until=until))
    receipt = await coordinator(engine, folder, session_wait_seconds=0).run("rex", request_id="req-4471")
    assert receipt.status is RequestStatus.FAILED
    detail = receipt.stores["resume_state"].detail or ""
    assert "still open" in detail and f"the last at {until:%Y-%m-%dT%H:%M:%SZ}" in detail


async def test_a_session_still_open_fails_the_erasure_and_keeps_the_fence_until_a_rerun(
    engine: AsyncEngine, registry: Registry, folder: LocalTranscriptStore
) -> None:
    platform = audited_platform(engine, registry, folder)
    with pytest.raises(ErasureInProgress):
        async with platform.session("ivy", "s1", team="support_triage") as session:
            await session.run("CANARY-ivy-1 hello")
            receipt = await coordinator(engine, folder, session_wait_seconds=0.3).run("ivy", request_id="req-9")
            assert receipt.status is RequestStatus.FAILED
            assert "still open" in (receipt.stores["resume_state"].detail or "")
            async with engine.connect() as conn:  # the fence stays: the run's writes at its end are refused
                assert (await conn.execute(select(user_holds.c.request_id))).scalars().all() == ["req-9"]
    # Nothing was deleted, the data key neither: the receipt must not say the backups' words are unreadable.
    assert receipt.stores["keys"].status is StepStatus.PENDING
    (backups,) = [r for r in receipt.remains_elsewhere if r.what == "database backups"]
    assert "destroyed the data key" not in backups.detail and "rotated out" not in backups.detail
    (spans,) = [r for r in receipt.remains_elsewhere if r.what == "tracing backend"]
    assert "mapping is deleted" not in spans.detail and "still links" in spans.detail  # the subject is kept
    again = await coordinator(engine, folder, session_wait_seconds=0.3).run("ivy", request_id="req-9")
    assert again.ok
    (backups,) = [r for r in again.remains_elsewhere if r.what == "database backups"]
    assert "destroyed the data key" in backups.detail  # now it is
    (spans,) = [r for r in again.remains_elsewhere if r.what == "tracing backend"]
    assert "now unlinkable (its mapping is deleted)" in spans.detail
    hits = await scan_database(engine, ["ivy", "CANARY-ivy-1"])
    assert all(v == [] for v in hits.values()), hits
    assert await folder.list_keys("") == [] and await find_subject(engine, "ivy") is None


async def test_dry_run_counts_and_changes_nothing(
    engine: AsyncEngine, registry: Registry, folder: LocalTranscriptStore
) -> None:
    seeded = await seed_user(audited_platform(engine, registry, folder), folder, "hank", "CANARY-hank", 2, 1)
    plan = await coordinator(engine, folder).run("hank", dry_run=True)
    assert plan.status is RequestStatus.DRY_RUN and list(plan.stores) == list(STEP_ORDER)
    assert plan.request_id is None  # nothing is stored under any id
    assert plan.stores["resume_state"].status is StepStatus.WOULD_ERASE
    assert plan.stores["resume_state"].counts.rows == 2 and plan.stores["transcripts"].counts.objects == 2
    assert await find_subject(engine, "hank") == seeded.subject_key
    remains = {r.what: r.detail for r in plan.remains_elsewhere}  # what an erasure would leave, said as a plan
    assert "would destroy the data key" in remains["database backups"] and "destroyed the data" not in remains[
        "database backups"]
    assert "now unlinkable" not in remains["tracing backend"] and "once the erasure deletes" in remains["tracing backend"]
    async with engine.connect() as conn:
        assert (await conn.execute(select(erasure_requests))).all() == []
        assert (await conn.execute(select(user_holds))).all() == []


@pytest.mark.postgres
async def test_the_first_run_after_the_database_ended_its_connections_keeps_its_audit(
    postgres_url: str, registry: Registry, folder: LocalTranscriptStore
) -> None:
    from sqlalchemy import text

    from teamstore.db.engine import create_engine
    from teamstore.db.migrate import upgrade

    engine = create_engine(postgres_url)
    await upgrade(engine)
    platform = audited_platform(engine, registry, folder)
    async with platform.session("kim", "s1", team="support_triage") as s:
        await s.run("first")
    ended = create_engine(postgres_url)  # a restart or a failover ends every connection the pool holds
    async with ended.connect() as conn:
        await conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE datname = current_database() AND pid <> pg_backend_pid()"))
    await ended.dispose()
    async with platform.session("kim", "s1", team="support_triage") as s:
        await s.run("second")
    subject = await find_subject(engine, "kim")
    assert subject is not None and len(await folder.list_keys(subject_prefix(subject))) == 2
    await platform.aclose()
    await engine.dispose()


@pytest.mark.s3
async def test_a_held_request_finishes_on_its_rerun_after_the_user_started_over(
    engine: AsyncEngine, s3_env: str
) -> None:
    store, subject, _, held = await _with_first_held(engine, "erin", 2)
    assert (await coordinator(engine, store).run("erin", request_id="req-held")).status is RequestStatus.RETAINED_UNDER_HOLD
    again = await get_or_create_subject(engine, "erin")  # the fence is lifted: erin comes back, a new subject
    await store.put(f"{subject_prefix(again)}sessions/s9/runs/r9.jsonl.gz", b"new transcript")

    store.client.put_object_legal_hold(**held, LegalHold={"Status": "OFF"})
    after = await coordinator(engine, store).run("erin", request_id="req-held")  # as docs/erasure.md says

    assert after.ok and after.stores["transcripts"].status is StepStatus.ERASED
    assert after.stores["transcripts"].counts.versions == 2
    assert await store.list_keys(subject_prefix(subject)) == []
    assert len(await store.list_keys(subject_prefix(again))) == 1  # her data since is another request's
    assert await find_subject(engine, "erin") == again
    await store.close()


async def _stored_request(engine: AsyncEngine, request_id: str) -> requests.RequestRow:
    row = await requests.get_request(engine, request_id)
    assert row is not None
    return row


@pytest.mark.s3
@pytest.mark.parametrize("other_has_data", [True, False])
async def test_a_held_request_rerun_under_another_user_id_is_refused_and_touches_nothing(
    engine: AsyncEngine, s3_env: str, other_has_data: bool
) -> None:
    # It had forgotten erin's id, so it ran for any id given: finished its own subject and said `completed` for
    # bob, whose data stayed.
    store, subject, keys, held = await _with_first_held(engine, "erin", 2)
    assert (await coordinator(engine, store).run("erin", request_id="req-held")).status is RequestStatus.RETAINED_UNDER_HOLD
    row = await _stored_request(engine, "req-held")
    assert row.user_id is None and row.user_hash is not None and "erin" not in row.user_hash
    if other_has_data:
        bobs = await get_or_create_subject(engine, "bob")
        await store.put(f"{subject_prefix(bobs)}sessions/b1/runs/r1.jsonl.gz", b"bob's transcript")
    store.client.put_object_legal_hold(**held, LegalHold={"Status": "OFF"})

    with pytest.raises(ErasureConflict) as info:
        await coordinator(engine, store).run("bob", request_id="req-held")

    assert "the request given was filed for another user id" in info.value.message
    assert "req-held" not in str(info.value)  # an id given may be a user's words: never repeated
    assert "bob" not in str(info.value) and "erin" not in str(info.value)
    with pytest.raises(ErasureConflict, match="filed for another user id"):  # a dry run printed a plan for bob
        await coordinator(engine, store).run("bob", request_id="req-held", dry_run=True)
    assert (await _stored_request(engine, "req-held")).status is RequestStatus.RETAINED_UNDER_HOLD
    assert await store.list_keys(subject_prefix(subject)) == [keys[0]]  # nothing of its own subject touched
    if other_has_data:
        assert await find_subject(engine, "bob") == bobs and len(await store.list_keys(subject_prefix(bobs))) == 1
    after = await coordinator(engine, store).run("erin", request_id="req-held")  # its own user's rerun finishes
    assert after.ok and await store.list_keys(subject_prefix(subject)) == []
    done = await _stored_request(engine, "req-held")
    assert (done.user_id, done.subject_key, done.user_hash) == (None, None, None)  # forgotten with the subject
    await store.close()


@pytest.mark.s3
async def test_a_request_held_before_the_hash_key_was_set_is_still_rerun_by_its_own_user_alone(
    engine: AsyncEngine, s3_env: str
) -> None:
    store, subject, _, held = await _with_first_held(engine, "erin", 2)
    assert (await coordinator(engine, store).run("erin", request_id="req-held")).status is RequestStatus.RETAINED_UNDER_HOLD
    keyed = {"hash_key": SecretStr("the deployment's erasure hash key")}  # TEAMSTORE_ERASURE_HASH_KEY set since
    unkeyed = await _stored_request(engine, "req-held")
    assert unkeyed.user_hash is not None
    assert unkeyed.user_hash not in await requests.user_hashes(engine, KNOBS.model_copy(update=keyed), "bob")
    assert (await requests.user_hashes(engine, KNOBS.model_copy(update=keyed), "erin"))[0] != unkeyed.user_hash

    with pytest.raises(ErasureConflict, match="filed for another user id"):
        await coordinator(engine, store, **keyed).run("bob", request_id="req-held")
    # Its own user's rerun under the key keeps the hash under it from then on, not the database's id's.
    still = await coordinator(engine, store, **keyed).run("erin", request_id="req-held")
    assert still.status is RequestStatus.RETAINED_UNDER_HOLD
    rekeyed = (await requests.user_hashes(engine, KNOBS.model_copy(update=keyed), "erin"))[0]
    assert (await _stored_request(engine, "req-held")).user_hash == rekeyed
    store.client.put_object_legal_hold(**held, LegalHold={"Status": "OFF"})
    after = await coordinator(engine, store, **keyed).run("erin", request_id="req-held")
    assert after.ok and await store.list_keys(subject_prefix(subject)) == []
    await store.close()


@pytest.mark.s3
async def test_a_request_held_under_the_hash_key_before_the_current_one_is_found_and_rekeyed_by_its_own_user(
    engine: AsyncEngine, s3_env: str
) -> None:
    old, new = SecretStr("the erasure hash key of last year"), SecretStr("this year's erasure hash key")
    store, subject, _, held = await _with_first_held(engine, "erin", 2)
    assert (await coordinator(engine, store, hash_key=old).run("erin", request_id="req-held")).status \
        is RequestStatus.RETAINED_UNDER_HOLD
    rotated = KNOBS.model_copy(update={"hash_key": new})
    listed = await desk.list_requests(engine, user_id="erin",
                                      user_hashes=await requests.user_hashes(engine, rotated, "erin"))
    assert listed == []  # the key changed, the old one not given: neither listed nor rerun
    with pytest.raises(ErasureConflict, match="TEAMSTORE_ERASURE_HASH_KEY_PREVIOUS"):
        await coordinator(engine, store, hash_key=new).run("erin", request_id="req-held")

    both = KNOBS.model_copy(update={"hash_key": new, "hash_key_previous": old})
    listed = await desk.list_requests(engine, user_id="erin",
                                      user_hashes=await requests.user_hashes(engine, both, "erin"))
    assert [r.request_id for r in listed] == ["req-held"]
    with pytest.raises(ErasureConflict, match="filed for another user id"):
        await coordinator(engine, store, hash_key=new, hash_key_previous=old).run("bob", request_id="req-held")
    still = await coordinator(engine, store, hash_key=new, hash_key_previous=old).run("erin", request_id="req-held")
    assert still.status is RequestStatus.RETAINED_UNDER_HOLD
    assert (await _stored_request(engine, "req-held")).user_hash == (
        await requests.user_hashes(engine, rotated, "erin"))[0]  # under the current key: the old one may go
    store.client.put_object_legal_hold(**held, LegalHold={"Status": "OFF"})
    after = await coordinator(engine, store, hash_key=new).run("erin", request_id="req-held")
    assert after.ok and await store.list_keys(subject_prefix(subject)) == []
    await store.close()


@pytest.mark.s3
async def test_a_request_filed_before_the_user_hash_takes_it_on_its_run_and_one_held_without_it_runs_as_before(
    engine: AsyncEngine, s3_env: str
) -> None:
    store, subject, _keys, held = await _with_first_held(engine, "erin", 2)
    await requests.open_request(engine, "req-old", "erin", None, 30)  # as filed before migration 0026: no hash
    assert (await _stored_request(engine, "req-old")).user_hash is None
    assert (await coordinator(engine, store).run("erin", request_id="req-old")).status is RequestStatus.RETAINED_UNDER_HOLD
    with pytest.raises(ErasureConflict, match="filed for another user id"):  # its run, still knowing erin, kept it
        await coordinator(engine, store).run("bob", request_id="req-old")

    async with engine.begin() as conn:  # held before migration 0026: nothing says whose it was
        await conn.execute(erasure_requests.update().where(erasure_requests.c.request_id == "req-old")
                           .values(user_hash=None))
    store.client.put_object_legal_hold(**held, LegalHold={"Status": "OFF"})
    after = await coordinator(engine, store).run("bob", request_id="req-old")  # accepted, as docs/erasure.md says
    assert after.ok and await store.list_keys(subject_prefix(subject)) == []
    await store.close()


@pytest.mark.s3
async def test_a_held_request_whose_rerun_failed_still_finishes_once_the_user_started_over(
    engine: AsyncEngine, s3_env: str
) -> None:
    store, subject, _, held = await _with_first_held(engine, "erin", 2)
    assert (await coordinator(engine, store).run("erin", request_id="req-held")).status is RequestStatus.RETAINED_UNDER_HOLD
    await get_or_create_subject(engine, "erin")  # erin comes back
    store.client.put_object_legal_hold(**held, LegalHold={"Status": "OFF"})
    unreachable = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{free_port()}", config=Config(
        connect_timeout=0.3, read_timeout=0.3, retries={"total_max_attempts": 1}))
    failed = await coordinator(engine, S3TranscriptStore(unreachable, store.bucket, "audit")).run(
        "erin", request_id="req-held")  # S3 out for the rerun
    assert failed.status is RequestStatus.FAILED

    after = await coordinator(engine, store).run("erin", request_id="req-held")  # was refused as "finished"

    assert after.ok and after.stores["transcripts"].status is StepStatus.ERASED
    assert await store.list_keys(subject_prefix(subject)) == []
    await store.close()


@pytest.mark.postgres
async def test_a_rerun_that_meets_an_open_session_keeps_the_counts_of_what_was_erased_before(
    postgres_url: str, registry: Registry, folder: LocalTranscriptStore
) -> None:
    from sqlalchemy import text

    from teamstore.db.engine import create_engine
    from tests.conftest import prepare

    await prepare(postgres_url, "lock")
    engine = create_engine(postgres_url)
    await seed_user(audited_platform(engine, registry, folder), folder, "lena", "CANARY-lena", 2, 1)

    class Killed(BaseException):
        pass

    def die(step: str) -> None:
        if step == "resume_state":
            raise Killed(step)

    first = coordinator(engine, folder)
    first.after_step = die
    with pytest.raises(Killed):
        await first.run("lena", request_id="req-883")  # killed once resume_state is erased (2 rows)
    async with engine.connect() as lock:  # a session lease of the user's hash (a hung worker, a hash twin)
        await lock.execute(text("SELECT pg_advisory_lock(hashtext('lena'), hashtext('other'))"))
        blocked = await coordinator(engine, folder, session_wait_seconds=0).run("lena", request_id="req-883")
        await lock.execute(text("SELECT pg_advisory_unlock(hashtext('lena'), hashtext('other'))"))
    assert blocked.status is RequestStatus.FAILED
    assert blocked.stores["resume_state"].counts.rows == 2

    done = await coordinator(engine, folder).run("lena", request_id="req-883")
    assert done.ok and done.stores["resume_state"].status is StepStatus.ERASED
    assert done.stores["resume_state"].counts.rows == 2  # not 'no_match': the first attempt erased two
    await engine.dispose()


async def test_ids_that_cannot_be_encoded_are_refused_as_invalid(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    # A shell passes undecodable bytes through as lone surrogates: no database can store them exactly.
    for user, request in (("\udcffbob", "r1"), ("bob", "r-\udcff")):
        with pytest.raises(InvalidIdentifier):
            await coordinator(engine, folder).run(user, request_id=request)
        with pytest.raises(InvalidIdentifier):
            await coordinator(engine, folder).run(user, request_id=request, dry_run=True)
    with pytest.raises(InvalidIdentifier):
        await coordinator(engine, folder).status("r-\udcff")
    async with engine.connect() as conn:
        assert (await conn.execute(select(erasure_requests))).all() == []


@pytest.mark.s3
async def test_a_failed_receipt_names_no_subject_or_session_key(engine: AsyncEngine, s3_store: S3TranscriptStore) -> None:
    subject = await get_or_create_subject(engine, "nina")
    await s3_store.put(f"{subject_prefix(subject)}sessions/s1/runs/r1.jsonl.gz", b"x")
    dead_client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{free_port()}", config=Config(
        connect_timeout=0.3, read_timeout=0.3, retries={"total_max_attempts": 1}))

    failed = await coordinator(engine, S3TranscriptStore(dead_client, s3_store.bucket, "audit")).run(
        "nina", request_id="req-884")

    detail = failed.stores["transcripts"].detail or ""
    assert failed.stores["transcripts"].status is StepStatus.FAILED and "EndpointConnectionError" in detail
    assert "rerun the same request id" in detail
    stored = (await coordinator(engine, s3_store).status("req-884")).model_dump_json()
    assert subject not in failed.model_dump_json() and subject not in stored


class SweptMeanwhile(LocalTranscriptStore):
    """A folder where a retention sweep removes an object right after the erasure listed it."""

    swept = False

    async def scan(self, prefix: str) -> AsyncIterator[StoredObject]:
        listed = [stored async for stored in super().scan(prefix)]
        if listed and not self.swept:
            self.swept = True
            await self.delete_prefix(listed[0].key.rsplit("/", 1)[0] + "/")
        for stored in listed:
            yield stored


async def test_a_transcript_swept_by_retention_during_the_erasure_is_not_a_failure(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    store = SweptMeanwhile(tmp_path / "t")
    subject = await get_or_create_subject(engine, "olaf")
    for i in range(2):
        await store.put(f"{subject_prefix(subject)}sessions/s{i}/runs/r{i}.jsonl.gz", b"old transcript")

    receipt = await coordinator(engine, store).run("olaf", request_id="req-885")

    assert receipt.ok and receipt.stores["transcripts"].status is StepStatus.ERASED, receipt.stores["transcripts"]
    assert receipt.stores["transcripts"].counts.versions == 2  # as listed: one was gone before it was deleted
    assert await store.list_keys("") == []


async def test_a_transcript_folder_that_cannot_be_deleted_fails_the_step_and_a_rerun_finishes(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    store = LocalTranscriptStore(tmp_path / "t")
    subject = await get_or_create_subject(engine, "petra")
    for i in range(2):
        await store.put(f"{subject_prefix(subject)}sessions/s{i}/runs/r{i}.jsonl.gz", b"transcript")

    with undeletable(store.root.joinpath(*f"{subject_prefix(subject)}sessions/s1/runs".split("/"))):
        failed = await coordinator(engine, store).run("petra", request_id="req-886")

    transcripts = failed.stores["transcripts"]
    detail = transcripts.detail or ""
    assert failed.status is RequestStatus.FAILED and transcripts.status is StepStatus.FAILED
    assert detail.startswith(f"could not delete all of the subject's transcripts in {store.url}: ")
    assert "rerun the same request id" in detail and subject not in failed.model_dump_json()
    assert await find_subject(engine, "petra") == subject  # kept until the transcripts are gone
    assert len(await store.list_keys(subject_prefix(subject))) == 1  # what could be deleted was

    done = await coordinator(engine, store).run("petra", request_id="req-886")
    assert done.ok and done.stores["transcripts"].status is StepStatus.ERASED
    assert done.stores["transcripts"].counts.versions == 2  # both, the one deleted by the first attempt too
    assert await store.list_keys("") == []


async def test_a_rerun_straight_after_a_killed_first_attempt_still_waits_out_the_fence_grace(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    # The first coordinator opened the request (the fence went up) and died before it leased it. Writes
    # that passed their fence check just before may still land within the grace: the rerun must not
    # enumerate before it has passed, measured from when the fence went up.
    opened = await requests.open_request(engine, "req-killed", "hank", None, due_days=30)
    enumerated: list[datetime] = []
    rerun = coordinator(engine, folder, fence_grace_seconds=0.6)
    rerun.after_step = lambda _name: enumerated.append(datetime.now(UTC))
    assert (await rerun.run("hank", request_id="req-killed")).ok
    assert enumerated and enumerated[0] >= opened.received_at + timedelta(seconds=0.6)


def _late_store(proxy: HoldingProxy, bucket: str) -> S3TranscriptStore:
    """The bucket reached through ``proxy``, by a client that waits for an answer as long as S3 may take."""
    client = boto3.client("s3", endpoint_url=proxy.endpoint, config=Config(
        read_timeout=30, retries={"total_max_attempts": 1}))
    return S3TranscriptStore(client, bucket, "audit")


def _subject_versions(store: S3TranscriptStore, subject: str) -> list[dict[str, object]]:
    return [v for v in all_versions(store.client, store.bucket) if f"/subjects/{subject}/" in str(v["Key"])]


@pytest.mark.s3
async def test_versions_s3_refuses_to_delete_are_named_by_error_code_and_a_rerun_finishes(
    engine: AsyncEngine, s3_store: S3TranscriptStore, s3_endpoint: str
) -> None:
    subject = await get_or_create_subject(engine, "wes")
    await record_store(engine, subject, s3_store.url, endpoint=store_endpoint(s3_store))  # as a worker does
    await s3_store.mark(await database_id(engine))  # ... at its first run: a proxy reaches the same bucket
    for run in ("r1", "r2"):
        await s3_store.put(f"{subject_prefix(subject)}sessions/s1/runs/{run}.jsonl.gz", b"transcript")
    proxy = HoldingProxy(s3_endpoint, refuse_deletes="InternalError")  # S3 failing on its side, per key
    try:
        failed = await coordinator(engine, _late_store(proxy, s3_store.bucket)).run("wes", request_id="req-886")
    finally:
        proxy.stop()

    transcripts = failed.stores["transcripts"]
    assert failed.status is RequestStatus.FAILED and transcripts.status is StepStatus.FAILED
    assert "2 object version(s)" in (transcripts.detail or "") and "InternalError" in (transcripts.detail or "")
    assert "rerun the same request id" in (transcripts.detail or "") and subject not in (transcripts.detail or "")
    done = await coordinator(engine, s3_store).run("wes", request_id="req-886")
    assert done.ok and done.stores["transcripts"].counts.versions == 2
    assert _subject_versions(s3_store, subject) == []


async def test_on_sqlite_no_byte_of_an_erased_user_stays_in_the_database_files(
    registry: Registry, folder: LocalTranscriptStore, tmp_path: Path
) -> None:
    # The deleted rows' old pages sat in the write-ahead log (and, on a SQLite built without
    # SECURE_DELETE, in the database file's free pages) for as long as the service kept running.
    from teamstore.db.engine import create_engine
    from teamstore.db.migrate import upgrade

    database = tmp_path / "embedded.db"
    engine = create_engine(f"sqlite:///{database.as_posix()}")
    await upgrade(engine)
    platform = audited_platform(engine, registry, folder)
    await seed_user(platform, folder, "zed@example.com", "CANARY-zed-91c3", 2, 2)

    assert (await coordinator(engine, folder).run("zed@example.com")).ok

    files = sorted(tmp_path.glob("embedded.db*"))
    assert files and not [f.name for f in files if b"CANARY-zed-91c3" in f.read_bytes() or b"zed@example" in f.read_bytes()]
    await platform.aclose()
    await engine.dispose()


# A writer of the local folder killed between writing the transcript's temporary file and renaming it.
_KILLED_WRITER = textwrap.dedent("""
    import asyncio, os, sys, time
    from pathlib import Path
    from teamstore.audit.transcripts.local import LocalTranscriptStore

    def stop_before_the_rename(src, dst):
        print("written", flush=True)
        time.sleep(60)   # killed here

    os.replace = stop_before_the_rename
    asyncio.run(LocalTranscriptStore(Path(sys.argv[1])).put(sys.argv[2], sys.argv[3].encode()))
""")


async def test_a_transcript_a_killed_writer_left_as_a_temporary_file_is_erased_and_counted(
    engine: AsyncEngine, folder: LocalTranscriptStore
) -> None:
    subject, secret = await ensure_subject(engine, "kit")
    key = run_key(RunKeys(subject, session_key(secret, "s1")), "r1")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writer = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(folder.root), key, "CANARY-kit words"],
                              env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "written"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=10)
    (leftover,) = [p for p in folder.root.rglob("*") if p.is_file()]
    assert leftover.name.startswith(".tmp-") and leftover.read_bytes() == b"CANARY-kit words"

    dry = await coordinator(engine, folder).run("kit", dry_run=True)
    assert dry.stores["transcripts"].status is StepStatus.WOULD_ERASE
    receipt = await coordinator(engine, folder).run("kit", request_id="req-887")

    transcripts = receipt.stores["transcripts"]
    assert receipt.ok and transcripts.status is StepStatus.ERASED
    assert (transcripts.counts.objects, transcripts.counts.bytes) == (1, len(b"CANARY-kit words"))
    assert not leftover.exists() and [p for p in folder.root.rglob("*") if p.is_file()] == []
