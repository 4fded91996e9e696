"""An erasure reaches every transcript store the user's transcripts were written to, or stays open.

Run with a missing or wrong TEAMSTORE_TRANSCRIPTS_URL, an erasure found nothing in the store it talked to,
filed a completed receipt, and deleted the subject mapping: the transcripts stayed where the service wrote
them, unlinkable. Now it refuses, names the store, and keeps the request open until it is rerun there.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from teamstore import erase_user
from teamstore.audit import claims, outbox
from teamstore.audit.ledger_observer import LedgerObserver
from teamstore.audit.observer import TranscriptObserver
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.schema import SUBJECT_STORES_SINCE, subject_stores, usage
from teamstore.audit.subjects import find_subject, get_or_create_subject, record_store, recorded_stores
from teamstore.audit.transcripts import TranscriptStore, subject_prefix, transcript_store_from_settings
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.db.fence import user_holds
from teamstore.db.migrate import upgrade
from teamstore.erasure import RequestStatus, StepStatus
from teamstore.erasure.schema import erasure_requests, erasure_steps
from teamstore.errors import ErasureInProgress, TranscriptStoreMismatch
from teamstore.events import drain_observers
from teamstore.settings import Settings
from teamstore.state.schema import store_settings
from tests.audit.teams import context, observe_run, triage_team
from tests.clocks import host_clock
from tests.erasure.conftest import coordinator, versioned_bucket
from tests.erasure.seed import all_versions

USER = "erin@example.com"


class Killed(BaseException):
    """Stands in for the process dying: not an Exception, so nothing on the way out handles it."""


Stores = Callable[[pytest.FixtureRequest, Path], Awaitable[tuple[TranscriptStore, TranscriptStore]]]


async def _write_runs(engine: AsyncEngine, store: TranscriptStore, user: str = USER, runs: int = 2) -> str:
    """Runs of ``user`` through the audit observers, their transcripts written to ``store``; the subject key."""
    pseudonyms = Pseudonyms(engine)
    observers = [LedgerObserver(engine, pseudonyms), TranscriptObserver(store, engine, pseudonyms)]
    for n in range(runs):
        await observe_run(observers, triage_team(), context(user_id=user, session_id=f"s{n}"), "my router drops")
    await drain_observers(observers)  # as a platform's close: nothing of the audit's is left running
    subject = await find_subject(engine, user)
    assert subject is not None and len(await store.list_keys(subject_prefix(subject))) == runs
    return subject


async def _s3_service(request: pytest.FixtureRequest) -> S3TranscriptStore:
    request.getfixturevalue("s3_env")
    return S3TranscriptStore(make_client(), versioned_bucket(), "audit")


async def _missing_setting(request: pytest.FixtureRequest, tmp: Path) -> tuple[TranscriptStore, TranscriptStore]:
    return await _s3_service(request), transcript_store_from_settings(Settings())  # TEAMSTORE_TRANSCRIPTS_URL unset


async def _another_bucket(request: pytest.FixtureRequest, tmp: Path) -> tuple[TranscriptStore, TranscriptStore]:
    return await _s3_service(request), S3TranscriptStore(make_client(), versioned_bucket(), "audit")


async def _another_prefix(request: pytest.FixtureRequest, tmp: Path) -> tuple[TranscriptStore, TranscriptStore]:
    service = await _s3_service(request)
    return service, S3TranscriptStore(make_client(), service.bucket, "audit/other")


async def _another_folder(request: pytest.FixtureRequest, tmp: Path) -> tuple[TranscriptStore, TranscriptStore]:
    return LocalTranscriptStore(tmp / "service"), LocalTranscriptStore(tmp / "elsewhere")


WRONG: dict[str, Stores] = {"missing setting": _missing_setting, "another bucket": _another_bucket,
                            "another prefix": _another_prefix, "another local folder": _another_folder}


@pytest.mark.parametrize("wrong", list(WRONG))
async def test_an_erasure_talking_to_another_store_stays_open_and_completes_when_rerun_with_the_right_one(
    engine: AsyncEngine, request: pytest.FixtureRequest, tmp_path: Path, wrong: str
) -> None:
    service, other = await WRONG[wrong](request, tmp_path)
    subject = await _write_runs(engine, service)

    for attempt in ("run", "dry run"):
        with pytest.raises(TranscriptStoreMismatch) as info:
            await coordinator(engine, other).run(USER, request_id="req-1", dry_run=attempt == "dry run")
        assert service.url in info.value.message and info.value.stores == (service.url,)
        assert f"TEAMSTORE_TRANSCRIPTS_URL={service.url}" in (info.value.hint or "")

    left_open = await coordinator(engine, other).status("req-1")
    assert left_open.status is RequestStatus.OPEN and left_open.completed_at is None
    assert {s.status for s in left_open.stores.values()} == {StepStatus.PENDING}  # nothing was erased
    assert await find_subject(engine, USER) == subject  # the mapping is kept
    async with engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(user_holds)) == 1  # still fenced
    assert len(await service.list_keys(subject_prefix(subject))) == 2

    receipt = await coordinator(engine, service).run(USER, request_id="req-1")
    assert receipt.status is RequestStatus.COMPLETED and receipt.stores["transcripts"].status is StepStatus.ERASED
    assert receipt.stores["transcripts"].counts.objects == 2
    assert await service.list_keys(subject_prefix(subject)) == []
    assert await recorded_stores(engine, subject) == {}  # forgotten with the subject
    await service.close()
    await other.close()


async def test_the_refusal_names_the_store_and_the_request_to_rerun(engine: AsyncEngine, tmp_path: Path) -> None:
    service, other = LocalTranscriptStore(tmp_path / "service"), LocalTranscriptStore(tmp_path / "elsewhere")
    await _write_runs(engine, service)
    with pytest.raises(TranscriptStoreMismatch) as info:
        await coordinator(engine, other).run(USER, request_id="REQ-881")
    assert info.value.message.startswith(f"this user's transcripts were written to {service.url}; this erasure "
                                         f"talks to {other.url}, which never received any")
    assert info.value.hint == (f"run erase with TEAMSTORE_TRANSCRIPTS_URL={service.url} and the same "
                               "--request-id REQ-881")


async def test_an_erasure_on_a_machine_without_the_recorded_folder_stays_open_instead_of_finding_nothing(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """The desk's machine names the workers' folder, but that folder is on the workers' disk: listed here it
    gives nothing, and the receipt said transcripts no_match while they stayed there."""
    service = LocalTranscriptStore(tmp_path / "workers" / "transcripts")
    subject = await _write_runs(engine, service)
    (tmp_path / "workers").rename(tmp_path / "away")  # not mounted here
    for attempt in ("run", "dry run"):
        with pytest.raises(TranscriptStoreMismatch, match="a folder this machine does not have") as info:
            await coordinator(engine, service).run(USER, request_id="req-away", dry_run=attempt == "dry run")
        assert service.url in info.value.message and "run erase on the machine whose folder" in (info.value.hint or "")
    left_open = await coordinator(engine, service).status("req-away")
    assert left_open.status is RequestStatus.OPEN and await find_subject(engine, USER) == subject

    (tmp_path / "away").rename(tmp_path / "workers")  # run where the folder is
    receipt = await coordinator(engine, service).run(USER, request_id="req-away")
    assert receipt.status is RequestStatus.COMPLETED and receipt.stores["transcripts"].counts.objects == 2


async def test_a_user_who_never_ran_is_erased_whatever_the_store(engine: AsyncEngine, tmp_path: Path) -> None:
    await get_or_create_subject(engine, USER)  # a subject, no run, no transcript anywhere
    receipt = await coordinator(engine, LocalTranscriptStore(tmp_path / "anywhere")).run(USER, request_id="req-none")
    assert receipt.status is RequestStatus.COMPLETED
    nobody = await coordinator(engine, LocalTranscriptStore(tmp_path / "anywhere")).run("nobody", request_id="req-0")
    assert nobody.status is RequestStatus.NO_MATCH and nobody.ok  # answered, but said to have found nothing


async def test_transcripts_written_to_two_stores_are_erased_from_each_before_the_request_completes(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    first, second, third = (LocalTranscriptStore(tmp_path / name) for name in ("first", "second", "third"))
    subject = await _write_runs(engine, first, runs=2)
    await _write_runs(engine, second, runs=1)  # the service moved its transcripts to another folder

    with pytest.raises(TranscriptStoreMismatch) as info:
        await coordinator(engine, first).run(USER, request_id="req-two")
    assert info.value.stores == (second.url,) and await first.list_keys(subject_prefix(subject)) == []
    assert await find_subject(engine, USER) == subject  # not completed: the mapping stays
    with pytest.raises(TranscriptStoreMismatch, match="which this request emptied already"):
        await coordinator(engine, first).run(USER, request_id="req-two")
    with pytest.raises(TranscriptStoreMismatch, match="never received any"):
        await coordinator(engine, third).run(USER, request_id="req-two")

    receipt = await coordinator(engine, second).run(USER, request_id="req-two")
    assert receipt.status is RequestStatus.COMPLETED
    assert receipt.stores["transcripts"].counts.objects == 3  # both stores' transcripts are counted
    assert await second.list_keys(subject_prefix(subject)) == []


async def test_a_run_killed_in_one_store_and_resumed_in_another_counts_what_each_held(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """Killed once the first store's transcripts were counted and deleted, before the step said so, the request
    was resumed against the second: the larger of the two stores' counts stood for both, one store's lost."""
    first, second = LocalTranscriptStore(tmp_path / "first"), LocalTranscriptStore(tmp_path / "second")
    subject = await _write_runs(engine, first, runs=3)
    await _write_runs(engine, second, runs=1)

    def die(step: str, done: int, total: int | None) -> None:
        if step == "transcripts":
            raise Killed("after the deletes")

    with pytest.raises(Killed):
        await coordinator(engine, first, progress=die).run(USER, request_id="req-killed-two")
    assert await first.list_keys(subject_prefix(subject)) == []
    assert (await coordinator(engine, first).status("req-killed-two")).stores["transcripts"].status is (
        StepStatus.ENUMERATED)
    with pytest.raises(TranscriptStoreMismatch) as info:  # the first store was never said to be emptied
        await coordinator(engine, second).run(USER, request_id="req-killed-two")
    assert info.value.stores == (first.url,)
    receipt = await coordinator(engine, first).run(USER, request_id="req-killed-two")
    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert receipt.stores["transcripts"].counts.objects == 4  # three from the first store, one from the second


async def test_a_transcript_written_to_a_store_after_its_deletes_is_counted_when_the_request_comes_back_to_it(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """Found since its deletes, the first store was named again; but its pass there took the larger of its two
    counts, as if it listed a subset of what the first found, and the transcript that came was never counted."""
    first, second = LocalTranscriptStore(tmp_path / "first"), LocalTranscriptStore(tmp_path / "second")
    subject = await _write_runs(engine, first, runs=3)
    await _write_runs(engine, second, runs=1)
    late = first.root.joinpath(*f"{subject_prefix(subject)}sessions/late/runs/r9.jsonl.gz".split("/"))

    def restored(step: str, done: int, total: int | None) -> None:
        if step == "transcripts":  # once the folder is deleted: a copy put back
            late.parent.mkdir(parents=True)
            late.write_bytes(b"restored transcript")

    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, first, progress=restored).run(USER, request_id="req-late")
    with pytest.raises(TranscriptStoreMismatch) as info:
        await coordinator(engine, second).run(USER, request_id="req-late")
    assert info.value.stores == (first.url,)
    receipt = await coordinator(engine, first).run(USER, request_id="req-late")
    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert await first.list_keys(subject_prefix(subject)) == []
    assert receipt.stores["transcripts"].counts.objects == 5  # three and the late one in the first, one in the second


class DiesDeleting(LocalTranscriptStore):
    """A folder whose first delete the process dies in, before anything goes."""

    died = False

    async def delete_prefix(self, prefix: str) -> int:
        if not self.died:
            self.died = True
            raise Killed("before the deletes")
        return await super().delete_prefix(prefix)


@pytest.mark.parametrize(("stopped", "counted"), [("after the deletes", 3), ("before the deletes", 4)])
async def test_a_request_an_earlier_release_stopped_in_one_store_and_resumed_in_another_counts_no_more_than_it_deleted(
    engine: AsyncEngine, tmp_path: Path, stopped: str, counted: int
) -> None:
    """That release recorded the step's counts alone, not which store they were of: taken for the next store's,
    they were counted again when the first store's pass found its transcripts still there (six for four). They
    count as the store whose pass found the most, so the receipt may say fewer than were deleted (three, though
    the first store's were gone), never more."""
    first, second = DiesDeleting(tmp_path / "first"), LocalTranscriptStore(tmp_path / "second")
    subject = await _write_runs(engine, first, runs=3)
    await _write_runs(engine, second, runs=1)

    def die(step: str, done: int, total: int | None) -> None:
        if step == "transcripts":
            raise Killed("after the deletes")

    if stopped == "after the deletes":
        first.died = True
    with pytest.raises(Killed, match=stopped):
        await coordinator(engine, first, progress=die).run(USER, request_id="req-earlier-killed")
    assert len(await first.list_keys(subject_prefix(subject))) == (3 if stopped == "before the deletes" else 0)
    async with engine.begin() as conn:  # as the earlier release left it: no record of each store's counts
        await conn.execute(delete(erasure_steps).where(erasure_steps.c.store.like("transcripts@%")))
    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, second).run(USER, request_id="req-earlier-killed")
    receipt = await coordinator(engine, first).run(USER, request_id="req-earlier-killed")
    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert receipt.stores["transcripts"].counts.objects == counted


async def test_a_request_an_earlier_release_began_keeps_its_count_through_a_failure_before_the_next_store(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """Failed early (an upload of the user's may still land), the request recorded the step as failed with the
    earlier release's count, which the next store's pass then took for its own: the larger of the two stood for
    both."""
    first, second = LocalTranscriptStore(tmp_path / "first"), LocalTranscriptStore(tmp_path / "second")
    subject = await _write_runs(engine, first, runs=2)
    await _write_runs(engine, second, runs=1)
    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, first).run(USER, request_id="req-earlier-failed")
    async with engine.begin() as conn:  # as the earlier release left it: no record of each store's counts
        await conn.execute(delete(erasure_steps).where(erasure_steps.c.store.like("transcripts@%")))
    key = f"{subject_prefix(subject)}sessions/s0/runs/r-late.jsonl.gz"
    with pytest.raises(ErasureInProgress):  # an upload S3 left unanswered: on record all the same, without its body
        await outbox.enqueue(engine, "r-late", key, subject, b"body", "S3 left it unanswered",
                             claim=outbox.Claim("worker-1", timedelta(minutes=5)))

    failed = await coordinator(engine, second, upload_wait_seconds=0).run(USER, request_id="req-earlier-failed")
    assert failed.status is RequestStatus.FAILED and failed.stores["transcripts"].counts.objects == 2, failed
    await claims.settle(engine, "r-late", "worker-1", None)  # S3 answered: it cannot land
    receipt = await coordinator(engine, second).run(USER, request_id="req-earlier-failed")
    assert receipt.status is RequestStatus.COMPLETED, receipt
    assert receipt.stores["transcripts"].counts.objects == 3


async def test_a_request_an_earlier_release_began_in_one_store_counts_it_to_the_end(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """An earlier release recorded the step's counts alone, not each store's: they are kept as a part of their
    own, so the passes after the next one still add them up."""
    first, second, third = (LocalTranscriptStore(tmp_path / name) for name in ("first", "second", "third"))
    await _write_runs(engine, first, runs=2)
    for store in (second, third):
        await _write_runs(engine, store, runs=1)
    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, first).run(USER, request_id="req-earlier")
    async with engine.begin() as conn:  # as the earlier release left it: no record of each store's counts
        await conn.execute(delete(erasure_steps).where(erasure_steps.c.store.like("transcripts@%")))
    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, second).run(USER, request_id="req-earlier")
    receipt = await coordinator(engine, third).run(USER, request_id="req-earlier")
    assert receipt.status is RequestStatus.COMPLETED and receipt.stores["transcripts"].counts.objects == 4, receipt


async def _held_in(engine: AsyncEngine, stores: dict[TranscriptStore, int]) -> dict[S3TranscriptStore, dict[str, str]]:
    """The user's transcripts written to each store (so many in each), the first under a legal hold in each S3
    one; those held, as ``put_object_legal_hold`` names them."""
    subject = await get_or_create_subject(engine, USER)
    held = {}
    for store, runs in stores.items():
        await record_store(engine, subject, store.url)
        for n in range(runs):
            await store.put(f"{subject_prefix(subject)}sessions/s{n}/runs/r{n}.jsonl.gz", b"transcript")
        if isinstance(store, S3TranscriptStore):
            key = f"{store.prefix}/{subject_prefix(subject)}sessions/s0/runs/r0.jsonl.gz"
            held[store] = {"Bucket": store.bucket, "Key": key}
            store.client.put_object_legal_hold(**held[store], LegalHold={"Status": "ON"})
    return held


@pytest.mark.s3
async def test_versions_held_in_one_of_two_stores_end_the_request_in_the_pass_against_the_other(
    engine: AsyncEngine, s3_env: str, tmp_path: Path
) -> None:
    # The pass against the folder cannot reach S3 with its settings to list the locked store again: it ends the
    # request all the same, the held version counted once, and says the locked store was not listed again.
    locked = S3TranscriptStore(make_client(), versioned_bucket(lock=True), "audit")
    folder = LocalTranscriptStore(tmp_path / "moved")
    held = await _held_in(engine, {locked: 3, folder: 1})

    with pytest.raises(TranscriptStoreMismatch) as first:
        await coordinator(engine, locked).run(USER, request_id="req-held-two")
    assert first.value.stores == (folder.url,)
    receipt = await coordinator(engine, folder).run(USER, request_id="req-held-two")

    transcripts = receipt.stores["transcripts"]
    assert receipt.status is RequestStatus.RETAINED_UNDER_HOLD, receipt
    assert (transcripts.counts.objects, transcripts.counts.versions, transcripts.counts.retained) == (4, 4, 1)
    assert transcripts.counts.bytes == 4 * len(b"transcript")
    assert f"not listed again by this request, so a copy restored there since its pass there is not erased by it: " \
        f"{locked.url}" in (
        transcripts.detail or "")
    assert (await coordinator(engine, folder).status("req-held-two")).stores["transcripts"] == transcripts
    locked.client.put_object_legal_hold(**held[locked], LegalHold={"Status": "OFF"})
    after = await coordinator(engine, locked).run(USER, request_id="req-held-two")  # the folder is not asked for
    assert after.ok and after.stores["transcripts"].counts.versions == 4, after
    await locked.close()


@pytest.mark.s3
@pytest.mark.parametrize("layout", ["two buckets", "two prefixes"])
async def test_versions_held_in_two_stores_end_the_request_after_one_pass_on_each(
    engine: AsyncEngine, s3_env: str, layout: str
) -> None:
    """Each store kept a held version, so neither was ever emptied: each pass named the other, forever."""
    bucket = versioned_bucket(lock=True)
    first = S3TranscriptStore(make_client(), bucket, "audit")
    second = S3TranscriptStore(make_client(), versioned_bucket(lock=True) if layout == "two buckets" else bucket,
                               "moved")
    held = await _held_in(engine, {first: 3, second: 2})

    with pytest.raises(TranscriptStoreMismatch) as named:
        await coordinator(engine, first).run(USER, request_id="req-held-both")
    assert named.value.stores == (second.url,)
    receipt = await coordinator(engine, second).run(USER, request_id="req-held-both")

    transcripts = receipt.stores["transcripts"]
    assert receipt.status is RequestStatus.RETAINED_UNDER_HOLD, receipt
    # Each store's held version counted once: the first's as its pass found it, the second's as verified now.
    assert (transcripts.counts.objects, transcripts.counts.versions, transcripts.counts.retained) == (5, 5, 2)
    assert transcripts.counts.bytes == 5 * len(b"transcript")
    assert f"1 in {first.url}" in (transcripts.detail or "") and second.url not in (transcripts.detail or "")
    assert await find_subject(engine, USER) is None  # as for any held request: the mapping goes, the fence lifts

    for store in (first, second):
        store.client.put_object_legal_hold(**held[store], LegalHold={"Status": "OFF"})
    with pytest.raises(TranscriptStoreMismatch) as again:  # the rerun goes to each store a hold kept some in
        await coordinator(engine, first).run(USER, request_id="req-held-both")
    assert again.value.stores == (second.url,)
    after = await coordinator(engine, second).run(USER, request_id="req-held-both")
    assert after.status is RequestStatus.COMPLETED, after
    counts = after.stores["transcripts"].counts
    assert (counts.objects, counts.versions, counts.retained, counts.unreadable) == (5, 5, 0, 0)
    for store in (first, second):
        assert all_versions(store.client, store.bucket) == []
        await store.close()


@pytest.mark.s3
async def test_the_dry_run_of_a_held_requests_rerun_lists_the_version_its_hold_kept(
    engine: AsyncEngine, s3_env: str
) -> None:
    """A request that ends held forgets its user and the mapping: the dry run of its rerun looked the user up, found
    nothing, and said no store holds anything, and a terminal asked to resume a request with nothing left, while the
    rerun then deleted the version the hold had kept."""
    locked = S3TranscriptStore(make_client(), versioned_bucket(lock=True), "audit")
    held = await _held_in(engine, {locked: 3})
    first = await coordinator(engine, locked).run(USER, request_id="req-plan")
    assert first.status is RequestStatus.RETAINED_UNDER_HOLD, first
    locked.client.put_object_legal_hold(**held[locked], LegalHold={"Status": "OFF"})
    await get_or_create_subject(engine, USER)  # the user came back since: not the held request's to erase

    plan = await coordinator(engine, locked).run(USER, request_id="req-plan", dry_run=True)
    transcripts = plan.stores["transcripts"]
    assert plan.matched and transcripts.status is StepStatus.WOULD_ERASE, plan
    assert (transcripts.counts.objects, transcripts.counts.versions, transcripts.counts.bytes) == (1, 1, 10)
    assert plan.stores["subject"].status is StepStatus.NO_MATCH  # the mapping since is the user's, not the request's
    assert plan.subject_hash == first.subject_hash
    rerun = await coordinator(engine, locked).run(USER, request_id="req-plan")
    assert rerun.status is RequestStatus.COMPLETED and all_versions(locked.client, locked.bucket) == [], rerun
    assert await find_subject(engine, USER) is not None
    await locked.close()


def _unkeyed_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "TEAMSTORE_ERASURE_HASH_KEY is unset" in r.getMessage()]


@pytest.mark.s3
@pytest.mark.parametrize(("keys", "warns"), [({}, True), ({"hash_key": SecretStr("k" * 32)}, False),
                                              ({"hash_key": SecretStr("")}, True)],
                         ids=["no key", "the key", "an empty key"])
async def test_a_request_held_without_a_hash_key_warns_that_its_hash_of_the_user_id_is_keyed_by_the_database(
    engine: AsyncEngine, s3_env: str, caplog: pytest.LogCaptureFixture, keys: dict[str, SecretStr], warns: bool
) -> None:
    """A held request keeps a hash of the id it forgot; keyed by the database's own id, a copy of the database alone
    tests guessed ids against it. A deployment's erasure (Postgres, or an S3 store) says so, naming no id; an empty key
    is no key. (The previous key alone is refused: tests/erasure/test_hash_keys.py.)"""
    locked = S3TranscriptStore(make_client(), versioned_bucket(lock=True), "audit")
    await _held_in(engine, {locked: 2})
    receipt = await coordinator(engine, locked, **keys).run(USER, request_id="req-held")
    assert receipt.status is RequestStatus.RETAINED_UNDER_HOLD, receipt
    warned = _unkeyed_warnings(caplog)
    assert len(warned) == (1 if warns else 0), warned
    assert not [line for line in warned if USER in line or "req-held" in line]
    await locked.close()


@pytest.mark.s3
async def test_a_request_held_since_before_it_kept_a_hash_of_the_user_id_is_not_warned_of(
    engine: AsyncEngine, s3_env: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Held before migration 0026, a request keeps no hash at all: its rerun, held again, has none to warn of."""
    locked = S3TranscriptStore(make_client(), versioned_bucket(lock=True), "audit")
    await _held_in(engine, {locked: 2})
    await coordinator(engine, locked).run(USER, request_id="req-old")
    async with engine.begin() as conn:
        await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id == "req-old")
                           .values(user_hash=None))
    caplog.clear()
    again = await coordinator(engine, locked).run(USER, request_id="req-old")
    assert again.status is RequestStatus.RETAINED_UNDER_HOLD, again
    assert _unkeyed_warnings(caplog) == []
    await locked.close()


@pytest.mark.s3
async def test_a_request_held_by_the_embedded_default_is_not_warned_of(
    engine: AsyncEngine, s3_env: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """On SQLite with a local folder, the database's file and its id sit side by side on one machine anyway: the
    request that ends held in the pass against the folder says nothing. On Postgres it warns."""
    locked = S3TranscriptStore(make_client(), versioned_bucket(lock=True), "audit")
    folder = LocalTranscriptStore(tmp_path / "moved")
    await _held_in(engine, {locked: 2, folder: 1})
    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, locked).run(USER, request_id="req-embedded")
    receipt = await coordinator(engine, folder).run(USER, request_id="req-embedded")
    assert receipt.status is RequestStatus.RETAINED_UNDER_HOLD, receipt
    assert len(_unkeyed_warnings(caplog)) == (0 if engine.dialect.name == "sqlite" else 1)
    await locked.close()


async def test_a_transcript_delivered_from_the_outbox_records_the_store_it_went_to(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    subject = await get_or_create_subject(engine, USER)
    key = f"{subject_prefix(subject)}sessions/{'a' * 32}/runs/r1.jsonl.gz"
    assert await outbox.enqueue(engine, "r1", key, subject, b"body", "S3 unreachable")
    flusher = LocalTranscriptStore(tmp_path / "flusher")
    assert (await outbox.flush(engine, flusher)).delivered == 1
    assert await recorded_stores(engine, subject) == {flusher.url: False}
    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, LocalTranscriptStore(tmp_path / "elsewhere")).run(USER, request_id="req-ob")


async def _before_stores_were_recorded(engine: AsyncEngine, subject: str, finished_days_ago: float = 0) -> None:
    """Make the subject's runs look as if they ran before migration 0010: no store recorded for them."""
    async with engine.begin() as conn:
        await conn.execute(delete(subject_stores))
        await conn.execute(update(store_settings).where(store_settings.c.name == SUBJECT_STORES_SINCE)
                           .values(updated_at=datetime.now(UTC) + timedelta(days=1)))
        if finished_days_ago:
            finished = datetime.now(UTC) - timedelta(days=finished_days_ago)
            await conn.execute(update(usage).where(usage.c.subject_key == subject).values(finished_at=finished))


async def test_runs_from_before_stores_were_recorded_need_a_store_that_holds_their_transcripts(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    service, other = LocalTranscriptStore(tmp_path / "service"), LocalTranscriptStore(tmp_path / "elsewhere")
    subject = await _write_runs(engine, service)
    await _before_stores_were_recorded(engine, subject)
    with pytest.raises(TranscriptStoreMismatch, match=r"the ledger holds 2 run\(s\) of this user from before"):
        await coordinator(engine, other).run(USER, request_id="req-old")
    receipt = await coordinator(engine, service).run(USER, request_id="req-old")
    assert receipt.status is RequestStatus.COMPLETED and receipt.stores["transcripts"].counts.objects == 2


async def test_a_request_for_runs_from_before_stores_were_recorded_resumes_with_the_store_it_began_with(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    service, other = LocalTranscriptStore(tmp_path / "service"), LocalTranscriptStore(tmp_path / "elsewhere")
    subject = await _write_runs(engine, service)
    await _before_stores_were_recorded(engine, subject)

    def die(step: str) -> None:
        if step == "transcripts":
            raise Killed(step)

    first = coordinator(engine, service)
    first.after_step = die
    with pytest.raises(Killed):  # the transcripts are gone, the ledger still links the runs
        await first.run(USER, request_id="req-resume")
    with pytest.raises(TranscriptStoreMismatch, match="never received any"):
        await coordinator(engine, other).run(USER, request_id="req-resume")
    receipt = await coordinator(engine, service).run(USER, request_id="req-resume")
    assert receipt.status is RequestStatus.COMPLETED and receipt.stores["transcripts"].counts.objects == 2


async def test_runs_from_before_stores_were_recorded_and_past_retention_left_no_transcript_to_look_for(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    subject = await _write_runs(engine, LocalTranscriptStore(tmp_path / "service"))
    await _before_stores_were_recorded(engine, subject, finished_days_ago=91)  # retention: 90 days
    receipt = await coordinator(engine, LocalTranscriptStore(tmp_path / "elsewhere")).run(USER, request_id="req-aged")
    assert receipt.status is RequestStatus.COMPLETED


@pytest.mark.parametrize("skew", [timedelta(days=2), timedelta(days=-2)], ids=["host-ahead", "host-behind"])
async def test_runs_from_before_stores_were_recorded_count_within_the_retention_on_the_databases_clock(
    engine: AsyncEngine, tmp_path: Path, skew: timedelta
) -> None:
    """The retention sweep counts its 90 days on the database's clock (on Postgres the server's), so the erasure
    does: a host two days ahead took runs 89 days old for swept, and one two days behind runs 91 days old for
    kept (SQLite shares its host's clock, and the window moves with it)."""
    subject = await _write_runs(engine, LocalTranscriptStore(tmp_path / "service"))
    days = 89 if skew > timedelta(0) else 91
    await _before_stores_were_recorded(engine, subject, finished_days_ago=days)
    other = LocalTranscriptStore(tmp_path / "elsewhere")
    with host_clock(skew if engine.dialect.name == "postgresql" else timedelta(0)):
        if days == 89:
            with pytest.raises(TranscriptStoreMismatch, match=r"the ledger holds 2 run\(s\)"):
                await coordinator(engine, other).run(USER, request_id="req-edge")
        else:
            assert (await coordinator(engine, other).run(USER, request_id="req-edge")).status is RequestStatus.COMPLETED


def test_erase_without_the_services_transcripts_setting_is_refused_by_the_command_line_and_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS", "0")
    service = (tmp_path / "service-transcripts").resolve()
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", service.as_uri())

    async def populate() -> str:
        engine = create_engine(Settings().resolved_database_url)
        await upgrade(engine)
        subject = await _write_runs(engine, LocalTranscriptStore(service))
        await engine.dispose()
        return subject

    subject = asyncio.run(populate())
    monkeypatch.delenv("TEAMSTORE_TRANSCRIPTS_URL")  # the operator's shell lacks the service's setting
    runner = CliRunner()
    refused = runner.invoke(app, ["erase", "--user", USER, "--request-id", "cli-1", "--yes"], env={"COLUMNS": "300"})
    assert refused.exit_code == 1, refused.output
    assert f"TEAMSTORE_TRANSCRIPTS_URL={service.as_uri()}" in refused.output and "completed" not in refused.output
    with pytest.raises(TranscriptStoreMismatch):
        asyncio.run(erase_user(USER, request_id="cli-1"))
    shown = runner.invoke(app, ["erase", "status", "cli-1", "--json"])
    assert shown.exit_code == 2 and json.loads(shown.stdout)["status"] == "open"

    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", service.as_uri())
    done = runner.invoke(app, ["erase", "--user", USER, "--request-id", "cli-1", "--json", "--yes"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["stores"]["transcripts"]["counts"]["objects"] == 2
    assert not list(service.rglob("*.jsonl.gz")) and subject not in str(list(service.rglob("*")))
