"""Before a request completes, the erasure lists again every transcript store it judged done, not only its own.

A request whose transcripts went to two stores emptied the first, then ran against the second: a copy restored
into the first meanwhile was never listed again, and the request completed with it there.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.subjects import get_or_create_subject, record_store
from teamstore.audit.transcripts import TranscriptStore, store_endpoint, subject_prefix
from teamstore.audit.transcripts.capabilities import ObjectVersion
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.erasure import RequestStatus, StepStatus
from teamstore.erasure.schema import erasure_requests
from teamstore.erasure.steps import done_stores
from teamstore.erasure.steps.views import PlainObjects, VersionedObjects
from teamstore.errors import StorageError, TranscriptStoreMismatch, TranscriptUnavailable
from tests.erasure.conftest import coordinator, versioned_bucket
from tests.erasure.seed import all_versions

USER = "rosa@example.com"
RESTORED = "sessions/late/runs/r9.jsonl.gz"

Pair = Callable[[pytest.FixtureRequest, Path], Awaitable[tuple[TranscriptStore, TranscriptStore]]]


async def _two_folders(request: pytest.FixtureRequest, tmp: Path) -> tuple[TranscriptStore, TranscriptStore]:
    return LocalTranscriptStore(tmp / "first"), LocalTranscriptStore(tmp / "second")


async def _two_buckets(request: pytest.FixtureRequest, tmp: Path) -> tuple[TranscriptStore, TranscriptStore]:
    request.getfixturevalue("s3_env")
    return S3TranscriptStore(make_client(), versioned_bucket(), "audit"), S3TranscriptStore(
        make_client(), versioned_bucket(), "moved")


async def _folder_then_bucket(request: pytest.FixtureRequest, tmp: Path) -> tuple[TranscriptStore, TranscriptStore]:
    request.getfixturevalue("s3_env")
    return LocalTranscriptStore(tmp / "first"), S3TranscriptStore(make_client(), versioned_bucket(), "audit")


PAIRS: dict[str, Pair] = {"two folders": _two_folders, "two buckets": _two_buckets,
                          "a folder, then a bucket": _folder_then_bucket}


async def _written(engine: AsyncEngine, stores: dict[TranscriptStore, int]) -> str:
    """So many transcripts of the user in each store, each store recorded first (as writers do); the subject."""
    subject = await get_or_create_subject(engine, USER)
    for store, runs in stores.items():
        await record_store(engine, subject, store.url, endpoint=store_endpoint(store))
        for n in range(runs):
            await store.put(f"{subject_prefix(subject)}sessions/s{n}/runs/r{n}.jsonl.gz", b"transcript")
    return subject


async def _emptied_first(engine: AsyncEngine, first: TranscriptStore, second: TranscriptStore, request_id: str
                         ) -> str:
    """The request's pass against ``first`` (named ``second`` to empty next), then a copy restored into ``first``."""
    subject = await _written(engine, {first: 2, second: 1})
    with pytest.raises(TranscriptStoreMismatch) as named:
        await coordinator(engine, first).run(USER, request_id=request_id)
    assert named.value.stores == (second.url,) and await first.list_keys(subject_prefix(subject)) == []
    await first.put(f"{subject_prefix(subject)}{RESTORED}", b"restored transcript")
    return subject


@pytest.mark.parametrize("pair", list(PAIRS))
async def test_a_copy_restored_into_an_emptied_store_is_erased_and_counted_by_the_pass_that_ends_the_request(
    engine: AsyncEngine, request: pytest.FixtureRequest, tmp_path: Path, pair: str
) -> None:
    first, second = await PAIRS[pair](request, tmp_path)
    subject = await _emptied_first(engine, first, second, "req-restored")

    receipt = await coordinator(engine, second).run(USER, request_id="req-restored")

    assert receipt.status is RequestStatus.COMPLETED, receipt
    transcripts = receipt.stores["transcripts"]
    assert transcripts.status is StepStatus.ERASED
    assert transcripts.counts.objects == 4  # two and the restored one in the first store, one in the second
    assert transcripts.counts.bytes == 3 * len(b"transcript") + len(b"restored transcript")
    for store in (first, second):
        assert await store.list_keys(subject_prefix(subject)) == []
        if isinstance(store, S3TranscriptStore):
            assert all_versions(store.client, store.bucket) == []  # no version or delete marker left either
            await store.close()


async def test_a_copy_restored_after_the_last_pass_fails_the_final_verification_and_is_erased_by_the_rerun(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    first, second = LocalTranscriptStore(tmp_path / "first"), LocalTranscriptStore(tmp_path / "second")
    subject = await _written(engine, {first: 2, second: 1})
    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, first).run(USER, request_id="req-late-copy")
    restored = first.root.joinpath(*f"{subject_prefix(subject)}{RESTORED}".split("/"))

    def restore_once_verified(step: str) -> None:
        if step == "transcripts" and not restored.exists():  # after the step's own verification: the final one
            restored.parent.mkdir(parents=True)
            restored.write_bytes(b"restored transcript")

    last = coordinator(engine, second)
    last.after_step = restore_once_verified
    failed = await last.run(USER, request_id="req-late-copy")
    assert failed.status is RequestStatus.FAILED, failed
    assert failed.stores["transcripts"].status is StepStatus.FAILED
    assert "verification found 1 item(s)" in (failed.stores["transcripts"].detail or "")

    receipt = await coordinator(engine, second).run(USER, request_id="req-late-copy")
    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert receipt.stores["transcripts"].counts.objects == 4
    assert not restored.exists()


async def test_two_machines_each_with_its_own_folder_complete_the_request_on_the_second_pass(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """Neither machine has the other's folder: each pass naming the other store would keep the request open."""
    first = LocalTranscriptStore(tmp_path / "host1" / "transcripts")
    second = LocalTranscriptStore(tmp_path / "host2" / "transcripts")
    subject = await _written(engine, {first: 2, second: 1})
    (tmp_path / "host2").rename(tmp_path / "host2-away")  # on the first machine
    with pytest.raises(TranscriptStoreMismatch) as named:
        await coordinator(engine, first).run(USER, request_id="req-hosts")
    assert named.value.stores == (second.url,)

    (tmp_path / "host1").rename(tmp_path / "host1-away")  # on the second machine
    (tmp_path / "host2-away").rename(tmp_path / "host2")
    receipt = await coordinator(engine, second).run(USER, request_id="req-hosts")

    assert receipt.status is RequestStatus.COMPLETED, receipt
    transcripts = receipt.stores["transcripts"]
    assert transcripts.counts.objects == 3
    assert "nor can a later request for the user reach one" in (transcripts.detail or "")
    assert f"not listed again by this request, so a copy restored there since its pass there is not erased by it: " \
        f"{first.url} " \
        "(a folder this machine does not have)" in (transcripts.detail or "")
    assert await second.list_keys(subject_prefix(subject)) == []

    (tmp_path / "host1-away").rename(tmp_path / "host1")  # a copy restored on the first machine afterwards
    await first.put(f"{subject_prefix(subject)}{RESTORED}", b"restored transcript")
    later = await coordinator(engine, first).run(USER, request_id="req-hosts-later")
    assert later.stores["transcripts"].status is StepStatus.NO_MATCH  # as the receipt says: no subject, no folder
    assert await first.list_keys(subject_prefix(subject)) == [f"{subject_prefix(subject)}{RESTORED}"]


@pytest.mark.s3
async def test_a_bucket_the_erasure_cannot_reach_is_reported_as_not_listed_again_and_the_request_completes(
    engine: AsyncEngine, s3_env: str, tmp_path: Path
) -> None:
    """A pass against a folder has no S3 client: the bucket it emptied is reported, never judged clean."""
    bucket = S3TranscriptStore(make_client(), versioned_bucket(), "audit")
    folder = LocalTranscriptStore(tmp_path / "moved")
    await _emptied_first(engine, bucket, folder, "req-unreached")

    receipt = await coordinator(engine, folder).run(USER, request_id="req-unreached")

    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert receipt.stores["transcripts"].counts.objects == 3  # the restored copy was never listed
    assert f"{bucket.url} (this erasure, talking to {folder.url}, cannot reach that kind of store)" in (
        receipt.stores["transcripts"].detail or "")
    assert len(all_versions(bucket.client, bucket.bucket)) == 1
    await bucket.close()


@pytest.mark.s3
async def test_an_emptied_bucket_since_deleted_is_reported_as_not_listed_again_and_the_request_completes(
    engine: AsyncEngine, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Reached with the same client, the bucket is gone: it is not taken for empty, nor waited for."""
    first, second = await _two_buckets(request, tmp_path)
    await _emptied_first(engine, first, second, "req-gone")
    assert isinstance(first, S3TranscriptStore) and isinstance(second, S3TranscriptStore)
    for version in all_versions(first.client, first.bucket, marks=True):
        first.client.delete_object(Bucket=first.bucket, Key=version["Key"], VersionId=version["VersionId"])
    first.client.delete_bucket(Bucket=first.bucket)

    receipt = await coordinator(engine, second).run(USER, request_id="req-gone")

    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert f"{first.url} (it no longer exists: " in (receipt.stores["transcripts"].detail or "")
    await first.close()
    await second.close()


@pytest.mark.s3
async def test_a_done_bucket_written_at_another_s3_endpoint_is_reported_as_not_reachable_here_with_that_endpoint(
    engine: AsyncEngine, s3_env: str, fresh_moto: str
) -> None:
    """A MinIO beside AWS: through this erasure's client, a bucket of that name is another one (or none, which is
    no sign that the store is gone): it is not listed there, and the receipt names the endpoint that reaches it."""
    other = boto3.client("s3", endpoint_url=fresh_moto)
    other.create_bucket(Bucket=(name := versioned_bucket()))  # the same name on both servers
    other.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    first = S3TranscriptStore(other, name, "audit")
    second = S3TranscriptStore(make_client(), versioned_bucket(), "audit")
    subject = await _written(engine, {first: 2, second: 1})
    with pytest.raises(TranscriptStoreMismatch) as named:
        await coordinator(engine, first).run(USER, request_id="req-endpoint")  # from a client at that endpoint
    # The fix names the endpoint the next store was written at, which is not the one this pass talked to.
    assert named.value.hint == (f"run erase with AWS_ENDPOINT_URL_S3={s3_env}, TEAMSTORE_TRANSCRIPTS_URL={second.url} "
                                "and the same --request-id req-endpoint")
    await first.put(f"{subject_prefix(subject)}{RESTORED}", b"restored transcript")

    receipt = await coordinator(engine, second).run(USER, request_id="req-endpoint")

    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert f"{first.url} (not reachable here: it was written at the S3 endpoint {fresh_moto} and this erasure talks " \
        f"to the S3 endpoint {s3_env}, where a bucket of its name carries no mark of this database's writers at " \
        f"{fresh_moto}; a pass with AWS_ENDPOINT_URL_S3={fresh_moto} reaches it)" in (receipt.stores["transcripts"].detail or "")
    assert receipt.stores["transcripts"].counts.objects == 3  # the restored copy was never listed
    assert await first.list_keys(subject_prefix(subject)) == [f"{subject_prefix(subject)}{RESTORED}"]
    await first.close()
    await second.close()


@pytest.mark.s3
async def test_a_done_bucket_written_under_another_name_of_the_same_server_is_found_marked_and_listed_again(
    engine: AsyncEngine, s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass that emptied it marked it; through this pass's client it is the same bucket, so what came back
    there is erased rather than left (it was named as not reachable here before stores were marked)."""
    alias = s3_env.replace("127.0.0.1", "localhost")  # the same server under another name: another endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", alias)
    first = S3TranscriptStore(make_client(), versioned_bucket(), "audit")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_env)
    second = S3TranscriptStore(make_client(), versioned_bucket(), "audit")
    subject = await _written(engine, {first: 2, second: 1})
    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, first).run(USER, request_id="req-alias")
    await first.put(f"{subject_prefix(subject)}{RESTORED}", b"restored transcript")

    receipt = await coordinator(engine, second).run(USER, request_id="req-alias")

    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert receipt.stores["transcripts"].detail is None
    assert receipt.stores["transcripts"].counts.objects == 4  # the restored copy with the three written
    assert await first.list_keys(subject_prefix(subject)) == []
    await first.close()
    await second.close()


@pytest.mark.s3
async def test_a_done_bucket_that_fails_to_list_for_a_while_fails_the_step_and_the_rerun_erases_what_came_back(
    engine: AsyncEngine, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A timeout (or refused credentials, the wrong region) may pass: only a store beyond reach for good may be
    left unlisted, or a copy restored there stays once the request completes."""
    first, second = await PAIRS["two buckets"](request, tmp_path)
    subject = await _emptied_first(engine, first, second, "req-slow")
    holds_any = done_stores.holds_any

    async def timing_out(store: TranscriptStore, prefix: str) -> bool:
        if store.url == first.url:  # what the S3 store raises for a read timeout (no moto endpoint stalls)
            raise TranscriptUnavailable("could not list object versions in bucket: S3 unreachable or too slow "
                                        "(ReadTimeoutError)", hint="check AWS_ENDPOINT_URL_S3 and the network")
        return await holds_any(store, prefix)
    monkeypatch.setattr(done_stores, "holds_any", timing_out)
    failed = await coordinator(engine, second).run(USER, request_id="req-slow")
    assert failed.status is RequestStatus.FAILED, failed
    said = failed.stores["transcripts"].detail or ""
    assert f"could not list {first.url}, a transcript store done for this request, again" in said
    assert "ReadTimeoutError" in said and "check AWS_ENDPOINT_URL_S3 and the network" in said
    assert await first.list_keys(subject_prefix(subject)) == [f"{subject_prefix(subject)}{RESTORED}"]
    monkeypatch.setattr(done_stores, "holds_any", holds_any)

    receipt = await coordinator(engine, second).run(USER, request_id="req-slow")

    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert receipt.stores["transcripts"].counts.objects == 4
    assert await first.list_keys(subject_prefix(subject)) == []
    await first.close()
    await second.close()


async def test_a_dry_run_names_the_done_stores_a_real_run_would_list_again_and_those_beyond_its_reach(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    first, away = LocalTranscriptStore(tmp_path / "first"), LocalTranscriptStore(tmp_path / "host" / "away")
    second = LocalTranscriptStore(tmp_path / "second")
    subject = await _written(engine, {first: 2, away: 1, second: 1})
    for store in (first, away):
        with pytest.raises(TranscriptStoreMismatch):
            await coordinator(engine, store).run(USER, request_id="req-planned")
    await first.put(f"{subject_prefix(subject)}{RESTORED}", b"restored transcript")
    (tmp_path / "host").rename(tmp_path / "host-away")  # not mounted on this machine

    plan = await coordinator(engine, second).run(USER, dry_run=True)

    transcripts = plan.stores["transcripts"]
    assert transcripts.status is StepStatus.WOULD_ERASE
    assert transcripts.counts.objects == 2  # the one here, and the copy restored into the first store
    assert transcripts.detail == (
        f"a real run would list again, and erase what no hold keeps there: {first.url}; a real run would not list "
        f"again, beyond its reach: {away.url} (a folder this machine does not have)")
    assert await first.list_keys(subject_prefix(subject)) == [f"{subject_prefix(subject)}{RESTORED}"]
    assert len(await second.list_keys(subject_prefix(subject))) == 1


@pytest.mark.s3
async def test_a_dry_run_that_cannot_list_a_done_bucket_for_a_while_says_to_run_the_dry_run_again(
    engine: AsyncEngine, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dry run has no request id to rerun: its fix says what to run instead."""
    first, second = await PAIRS["two buckets"](request, tmp_path)
    await _emptied_first(engine, first, second, "req-planned-slow")

    async def timing_out(store: TranscriptStore, prefix: str) -> bool:
        raise TranscriptUnavailable("could not list object versions in bucket: S3 unreachable or too slow "
                                    "(ReadTimeoutError)", hint="check AWS_ENDPOINT_URL_S3 and the network")
    monkeypatch.setattr(done_stores, "holds_any", timing_out)
    with pytest.raises(TranscriptUnavailable) as failed:
        await coordinator(engine, second).run(USER, dry_run=True)
    assert f"could not list {first.url}, a transcript store done for this request, again" in failed.value.message
    assert failed.value.hint == "check AWS_ENDPOINT_URL_S3 and the network, then run the dry run again"
    await first.close()
    await second.close()


async def test_a_dry_run_against_a_store_before_others_to_empty_names_no_done_store(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """A real pass there stops once its own store is emptied, naming the next: it lists no done store, and the
    dry run names the next, which this machine reaches, as one to empty in a pass of its own."""
    first, second = LocalTranscriptStore(tmp_path / "first"), LocalTranscriptStore(tmp_path / "second")
    await _written(engine, {first: 2, second: 1})

    plan = await coordinator(engine, first).run(USER, dry_run=True)

    assert plan.stores["transcripts"].counts.objects == 2
    assert plan.stores["transcripts"].detail == (
        f"a real run would empty {first.url} and stop, as other stores are still to empty, each by a pass of its own "
        f"(TEAMSTORE_TRANSCRIPTS_URL set to it): {second.url}")


@pytest.mark.s3
async def test_a_dry_run_takes_a_store_the_open_request_left_holding_for_held_by_it_not_for_one_to_empty(
    engine: AsyncEngine, s3_env: str
) -> None:
    """A dry run has no request of its own: it took the stores the user's open request left holding only versions a
    hold keeps for stores still to empty, so the plan of the pass that ends the request listed none again."""
    _, locked, moved, subject, _ = await _held_pass(engine, "req-held-plan")
    await locked.put(f"{subject_prefix(subject)}{RESTORED}", b"restored transcript")

    plan = await coordinator(engine, moved).run(USER, dry_run=True)

    transcripts = plan.stores["transcripts"]
    assert transcripts.counts.objects == 2, transcripts  # the one here, and the copy restored beside the held one
    assert re.fullmatch(re.escape(  # with when that pass found them, as the receipt names it
        f"a real run would list again, and erase what no hold keeps there: {locked.url}; held in other stores, "
        f"counted as the pass of request req-held-plan there found them: 1 in {locked.url}"
    ) + r" \(at \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\)", transcripts.detail or ""), transcripts
    receipt = await coordinator(engine, moved).run(USER, request_id="req-held-plan")
    assert f"held in other stores, counted as this request's pass there found them: 1 in {locked.url}" in (
        receipt.stores["transcripts"].detail or ""), receipt
    await locked.close()
    await moved.close()


async def test_a_kill_after_a_done_folder_is_swept_keeps_what_the_sweep_found_for_the_rerun(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = LocalTranscriptStore(tmp_path / "first"), LocalTranscriptStore(tmp_path / "second")
    subject = await _emptied_first(engine, first, second, "req-kill")
    delete_folder = PlainObjects.delete_folder

    async def killed_after(view: PlainObjects, prefix: str) -> None:
        await delete_folder(view, prefix)
        if view.store.url == first.url:
            raise KeyboardInterrupt  # the process killed before the sweep records what it deleted
    monkeypatch.setattr(PlainObjects, "delete_folder", killed_after)
    with pytest.raises(KeyboardInterrupt):
        await coordinator(engine, second).run(USER, request_id="req-kill")
    assert await first.list_keys(subject_prefix(subject)) == []
    monkeypatch.setattr(PlainObjects, "delete_folder", delete_folder)
    async with engine.begin() as conn:  # the killed process's lease, run out
        await conn.execute(update(erasure_requests).values(owner=None))

    receipt = await coordinator(engine, second).run(USER, request_id="req-kill")

    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert receipt.stores["transcripts"].counts.objects == 4  # two and the restored one in the first, one here


async def test_a_done_folder_whose_sweep_did_not_finish_stops_the_request_while_this_machine_lacks_it(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy the sweep counted and failed to delete is still there: the receipt must not call it erased."""
    first = LocalTranscriptStore(tmp_path / "host" / "first")
    second = LocalTranscriptStore(tmp_path / "second")
    subject = await _emptied_first(engine, first, second, "req-unswept")
    delete_folder = PlainObjects.delete_folder

    async def read_only(view: PlainObjects, prefix: str) -> None:
        if view.store.url == first.url:  # a real read-only mount needs privileges tests do not have
            raise StorageError("could not remove transcripts: Read-only file system", hint="remount it writable")
        await delete_folder(view, prefix)
    monkeypatch.setattr(PlainObjects, "delete_folder", read_only)
    failed = await coordinator(engine, second).run(USER, request_id="req-unswept")
    assert failed.status is RequestStatus.FAILED, failed
    monkeypatch.setattr(PlainObjects, "delete_folder", delete_folder)
    (tmp_path / "host").rename(tmp_path / "host-away")  # not mounted on this machine any more

    with pytest.raises(TranscriptStoreMismatch) as named:
        await coordinator(engine, second).run(USER, request_id="req-unswept")
    assert named.value.stores == (first.url,)
    assert "did not finish deleting them" in str(named.value) and "a folder this machine does not have" in str(
        named.value)

    (tmp_path / "host-away").rename(tmp_path / "host")
    receipt = await coordinator(engine, second).run(USER, request_id="req-unswept")
    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert receipt.stores["transcripts"].counts.objects == 4
    assert await first.list_keys(subject_prefix(subject)) == []


@pytest.mark.s3
async def test_a_delete_a_done_bucket_refuses_fails_the_step_saying_so_and_the_rerun_keeps_what_was_deleted(
    engine: AsyncEngine, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = await _two_buckets(request, tmp_path)
    subject = await _emptied_first(engine, first, second, "req-refused")
    await first.put(f"{subject_prefix(subject)}sessions/late/runs/r8.jsonl.gz", b"restored transcript")
    delete = _refuse_deleting_r9(monkeypatch)
    failed = await coordinator(engine, second).run(USER, request_id="req-refused")
    assert failed.status is RequestStatus.FAILED, failed
    said = failed.stores["transcripts"].detail or ""
    assert f"S3 refused to delete 1 object version(s) of the subject in {first.url} (AccessDenied)" in said
    assert f"grant s3:DeleteObjectVersion on {first.url}" in said  # not the prefix this erasure talks to
    monkeypatch.setattr(VersionedObjects, "delete", delete)

    receipt = await coordinator(engine, second).run(USER, request_id="req-refused")

    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert receipt.stores["transcripts"].counts.objects == 5  # two, r8 (deleted before the refusal), r9, one here
    assert await first.list_keys(subject_prefix(subject)) == []
    await first.close()
    await second.close()


@pytest.mark.s3
async def test_a_hold_lifted_after_its_store_s_pass_is_not_counted_twice_nor_claimed_held(
    engine: AsyncEngine, s3_env: str
) -> None:
    bucket, locked, moved, _, hold = await _held_pass(engine, "req-lifted")
    locked.client.put_object_legal_hold(**hold, LegalHold={"Status": "OFF"})  # the hold ends meanwhile

    receipt = await coordinator(engine, moved).run(USER, request_id="req-lifted")

    transcripts = receipt.stores["transcripts"]
    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert (transcripts.counts.objects, transcripts.counts.versions, transcripts.counts.retained) == (4, 4, 0)
    assert not (transcripts.detail or "").startswith("held in other stores")
    assert all_versions(locked.client, bucket) == []
    rerun = await coordinator(engine, locked).run(USER, request_id="req-lifted")
    assert rerun.stores["transcripts"].counts == transcripts.counts
    await locked.close()
    await moved.close()


@pytest.mark.s3
async def test_a_hold_lifted_beside_a_restored_copy_counts_the_bytes_of_each_exactly(
    engine: AsyncEngine, s3_env: str
) -> None:
    """The freed version was counted by the first pass, the restored copy was not: their sizes differ, so taking
    a share of what the sweep found for the freed one would miscount the receipt's bytes."""
    bucket, locked, moved, subject, hold = await _held_pass(engine, "req-lifted-bytes")
    locked.client.put_object_legal_hold(**hold, LegalHold={"Status": "OFF"})
    await locked.put(f"{subject_prefix(subject)}{RESTORED}", b"a much longer restored transcript")

    receipt = await coordinator(engine, moved).run(USER, request_id="req-lifted-bytes")

    transcripts = receipt.stores["transcripts"]
    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert (transcripts.counts.objects, transcripts.counts.versions) == (5, 5)
    assert transcripts.counts.bytes == 4 * len(b"transcript") + len(b"a much longer restored transcript")
    assert all_versions(locked.client, bucket) == []
    await locked.close()
    await moved.close()


@pytest.mark.s3
async def test_a_copy_restored_beside_versions_a_hold_keeps_is_erased_and_the_held_version_counted_once(
    engine: AsyncEngine, s3_env: str
) -> None:
    _, locked, moved, subject, _ = await _held_pass(engine, "req-held-copy")
    await locked.put(f"{subject_prefix(subject)}{RESTORED}", b"restored transcript")

    receipt = await coordinator(engine, moved).run(USER, request_id="req-held-copy")

    transcripts = receipt.stores["transcripts"]
    assert receipt.status is RequestStatus.RETAINED_UNDER_HOLD, receipt
    assert (transcripts.counts.objects, transcripts.counts.versions, transcripts.counts.retained) == (5, 5, 1)
    assert await locked.list_keys(subject_prefix(subject)) == [f"{subject_prefix(subject)}sessions/s0/runs/r0.jsonl.gz"]
    await locked.close()


@pytest.mark.s3
async def test_a_delete_refused_in_a_store_a_hold_kept_versions_in_says_to_rerun_against_that_store(
    engine: AsyncEngine, s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recorded as counted (enumerated), the held store is one to empty again: a rerun with the same settings stops
    there, so the fix names it."""
    _, locked, moved, subject, _ = await _held_pass(engine, "req-held-refused")
    await locked.put(f"{subject_prefix(subject)}{RESTORED}", b"restored transcript")
    delete = _refuse_deleting_r9(monkeypatch)
    failed = await coordinator(engine, moved).run(USER, request_id="req-held-refused")
    assert failed.status is RequestStatus.FAILED, failed
    assert f"TEAMSTORE_TRANSCRIPTS_URL={locked.url} and the same --request-id req-held-refused" in (
        failed.stores["transcripts"].detail or "")
    monkeypatch.setattr(VersionedObjects, "delete", delete)

    receipt = await coordinator(engine, locked).run(USER, request_id="req-held-refused")

    transcripts = receipt.stores["transcripts"]
    assert receipt.status is RequestStatus.RETAINED_UNDER_HOLD, receipt
    assert (transcripts.counts.objects, transcripts.counts.retained) == (5, 1)
    assert await locked.list_keys(subject_prefix(subject)) == [f"{subject_prefix(subject)}sessions/s0/runs/r0.jsonl.gz"]
    await locked.close()
    await moved.close()


async def test_a_refused_delete_in_a_held_store_logs_no_given_request_id_though_its_fix_names_it(
    engine: AsyncEngine, s3_env: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The fix names the rerun's --request-id; the receipt keeps it, but a log line (shipped off the host, kept past
    the erasure) carries the error's message without its fix."""
    given = "gdpr-canary-held-5e1d@example.com"  # an id an operator gave, holding (as one may) an email
    _, locked, moved, subject, _ = await _held_pass(engine, given)
    await locked.put(f"{subject_prefix(subject)}{RESTORED}", b"restored transcript")
    _refuse_deleting_r9(monkeypatch)
    caplog.set_level(logging.DEBUG)  # every logger

    failed = await coordinator(engine, moved).run(USER, request_id=given)

    assert f"the same --request-id {given}" in (failed.stores["transcripts"].detail or ""), failed
    said = [f"{r.getMessage()} {r.msg!r} {r.args!r}" for r in caplog.records]
    assert any("step transcripts failed" in line for line in said), said
    assert not [line for line in said if "canary-held" in line]
    await locked.close()
    await moved.close()


async def _held_pass(engine: AsyncEngine, request_id: str) -> tuple[str, S3TranscriptStore, S3TranscriptStore, str,
                                                                     dict[str, str]]:
    """Three transcripts in a locked bucket's ``audit`` (one under a legal hold), one in its ``moved``; the request's
    pass against ``audit`` leaves the held version and sends the operator to ``moved``."""
    bucket = versioned_bucket(lock=True)
    locked, moved = S3TranscriptStore(make_client(), bucket, "audit"), S3TranscriptStore(make_client(), bucket, "moved")
    subject = await _written(engine, {locked: 3, moved: 1})
    hold = {"Bucket": bucket, "Key": f"audit/{subject_prefix(subject)}sessions/s0/runs/r0.jsonl.gz"}
    locked.client.put_object_legal_hold(**hold, LegalHold={"Status": "ON"})
    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, locked).run(USER, request_id=request_id)
    return bucket, locked, moved, subject, hold


def _refuse_deleting_r9(monkeypatch: pytest.MonkeyPatch) -> Any:
    """S3 refuses (AccessDenied) to delete any version of run r9's transcript, deleting the others; returns the
    delete it stands in for, to put back."""
    delete = VersionedObjects.delete

    async def refusing_r9(view: VersionedObjects, batch: list[ObjectVersion]) -> dict[ObjectVersion, str]:
        refused = [version for version in batch if version.key.endswith("r9.jsonl.gz")]
        return {**await delete(view, [v for v in batch if v not in refused]), **dict.fromkeys(refused, "AccessDenied")}
    monkeypatch.setattr(VersionedObjects, "delete", refusing_r9)
    return delete
