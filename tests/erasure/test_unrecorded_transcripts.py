"""A transcript the store holds under a user's subject but no record names is found by where it lies.

A writer records the store for the subject (``ts_subject_stores``) before its first transcript goes there,
but a store can still hold a file no record names: a folder or bucket restored from a backup, a file copied
back, a store emptied by an erasure (its record marked so) that a restore filled again. Erasure, export and
retention find a user's transcripts by the key layout (everything under ``subjects/<subject_key>/``, listed
per subject), never by the records: these tests put such a file in place with no record, in a folder and in
a versioned bucket over HTTP (moto's server), beside users whose ids begin the same way.
"""

from __future__ import annotations

import gzip
import json
import os
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.prices import load_prices
from teamstore.audit.retention import apply_transcript_retention, sweep_all
from teamstore.audit.subjects import find_subject, get_or_create_subject, record_store, recorded_stores
from teamstore.audit.transcripts.base import SUBJECTS, TranscriptStore, subject_prefix
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.erasure import RequestStatus, StepStatus
from teamstore.erasure.quiet import forget_quiet_users
from teamstore.errors import TranscriptStoreMismatch
from teamstore.export import ExportCoordinator, store_exporters
from teamstore.keys import KeyService
from teamstore.settings import Settings
from tests.erasure.conftest import coordinator, versioned_bucket

DAVE = "dave"
NEIGHBOURS = ("dave2", "dave/../dave", "dave%2F", "Dave", "dävé")
"""Ids that begin as ``dave`` does, or that a path-like layout would escape or fold onto it."""


def _key(subject: str, run: str = "r1") -> str:
    return f"{subject_prefix(subject)}sessions/{'s' * 32}/runs/{run}.jsonl.gz"


def _body(user: str) -> bytes:
    return gzip.compress(json.dumps({"kind": "run", "text": f"CANARY-{user}"}).encode() + b"\n", mtime=0)


@pytest.fixture(params=["folder", pytest.param("s3", marks=pytest.mark.s3)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> TranscriptStore:
    """The store the service writes to: a folder, or a versioned bucket over HTTP."""
    if request.param == "folder":
        return LocalTranscriptStore(tmp_path / "transcripts")
    request.getfixturevalue("s3_env")
    return S3TranscriptStore(make_client(), versioned_bucket(), "audit")


def _other(store: TranscriptStore, tmp_path: Path) -> TranscriptStore:
    """A second store of the same kind (the one the service moved to)."""
    if isinstance(store, S3TranscriptStore):
        return S3TranscriptStore(make_client(), store.bucket, "audit/moved")
    return LocalTranscriptStore(tmp_path / "moved")


async def _unrecorded(engine: AsyncEngine, store: TranscriptStore, user: str) -> str:
    """A transcript of ``user`` in ``store`` and no record of the store for them (a writer that died between
    the write and its record, or a file a restore brought back); the subject key."""
    subject = await get_or_create_subject(engine, user)
    await store.put(_key(subject), _body(user))
    assert store.url not in await recorded_stores(engine, subject)
    return subject


async def _neighbours(engine: AsyncEngine, store: TranscriptStore) -> dict[str, str]:
    """Users whose ids begin like ``dave``, each with an unrecorded transcript of their own: id -> subject."""
    return {user: await _unrecorded(engine, store, user) for user in NEIGHBOURS}


async def _untouched(store: TranscriptStore, neighbours: dict[str, str]) -> None:
    for user, subject in neighbours.items():
        assert await store.get(_key(subject)) == _body(user), user


async def test_an_unrecorded_transcript_is_erased_and_verified_gone_and_no_neighbour_is_touched(
    engine: AsyncEngine, store: TranscriptStore
) -> None:
    subject = await _unrecorded(engine, store, DAVE)
    neighbours = await _neighbours(engine, store)

    dry = await coordinator(engine, store).run(DAVE, dry_run=True)
    assert dry.stores["transcripts"].status is StepStatus.WOULD_ERASE and dry.stores["transcripts"].counts.objects == 1
    receipt = await coordinator(engine, store).run(DAVE, request_id="REQ-881")

    assert receipt.status is RequestStatus.COMPLETED
    assert receipt.stores["transcripts"].status is StepStatus.ERASED
    assert receipt.stores["transcripts"].counts.objects == 1 and receipt.stores["transcripts"].verified_at
    assert await store.list_keys(subject_prefix(subject)) == []
    await _untouched(store, neighbours)
    await store.close()


async def test_a_transcript_left_in_a_store_the_user_is_not_recorded_for_is_erased_there_before_the_other(
    engine: AsyncEngine, store: TranscriptStore, tmp_path: Path
) -> None:
    """The service moved its transcripts: the new store is recorded for the user, the old one holds a file no
    record names. The erasure run against the old one empties it (not a refusal that sends the operator to the
    new one, after which the old file would stay for good), then names the new one; rerun there, it completes."""
    moved = _other(store, tmp_path)
    subject = await _unrecorded(engine, store, DAVE)
    neighbours = await _neighbours(engine, store)
    await record_store(engine, subject, moved.url)
    await moved.put(_key(subject, "r2"), _body(DAVE))

    with pytest.raises(TranscriptStoreMismatch) as info:
        await coordinator(engine, store).run(DAVE, request_id="REQ-881")
    assert info.value.stores == (moved.url,)
    assert await store.list_keys(subject_prefix(subject)) == []
    await _untouched(store, neighbours)

    receipt = await coordinator(engine, moved).run(DAVE, request_id="REQ-881")
    assert receipt.status is RequestStatus.COMPLETED
    assert receipt.stores["transcripts"].counts.objects == 2  # both stores' transcripts
    assert await moved.list_keys(subject_prefix(subject)) == []
    await store.close()
    await moved.close()


async def test_a_store_a_request_emptied_that_a_restore_filled_again_is_emptied_again(
    engine: AsyncEngine, store: TranscriptStore, tmp_path: Path
) -> None:
    moved = _other(store, tmp_path)
    subject = await get_or_create_subject(engine, DAVE)
    for target, run in ((store, "r1"), (moved, "r2")):
        await record_store(engine, subject, target.url)
        await target.put(_key(subject, run), _body(DAVE))
    with pytest.raises(TranscriptStoreMismatch):
        await coordinator(engine, store).run(DAVE, request_id="REQ-881")
    assert await recorded_stores(engine, subject) == {store.url: True, moved.url: False}

    await store.put(_key(subject, "r1"), _body(DAVE))  # restored from a backup
    with pytest.raises(TranscriptStoreMismatch) as info:
        await coordinator(engine, store).run(DAVE, request_id="REQ-881")
    assert info.value.stores == (moved.url,)
    assert await store.list_keys(subject_prefix(subject)) == []
    receipt = await coordinator(engine, moved).run(DAVE, request_id="REQ-881")
    assert receipt.status is RequestStatus.COMPLETED
    await store.close()
    await moved.close()


async def test_an_unrecorded_transcript_is_exported_and_no_neighbours_is(
    engine: AsyncEngine, store: TranscriptStore, tmp_path: Path
) -> None:
    await _unrecorded(engine, store, DAVE)
    await _neighbours(engine, store)

    done = await ExportCoordinator(engine, store, store_exporters(), load_prices()).run(
        DAVE, tmp_path / "dave.zip", operator="o")

    assert done.path is not None
    with zipfile.ZipFile(done.path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    (entry,) = json.loads(files["transcripts/index.json"])["runs"]
    assert entry["copy"] == "current" and b"CANARY-dave" in files[entry["file"]]
    assert not any(f"CANARY-{user}".encode() in data for data in files.values() for user in NEIGHBOURS)
    await store.close()


async def test_the_sweep_never_forgets_a_user_whose_transcript_no_record_names_is_still_in_the_store(
    engine: AsyncEngine, store: TranscriptStore
) -> None:
    """Forgotten, the user's subject mapping would go, and nothing could find that transcript by their id."""
    subject = await _unrecorded(engine, store, DAVE)
    keys = KeyService.from_settings(engine, Settings(key_cache_seconds=0))

    quiet = await forget_quiet_users(engine, store, keys, grace_seconds=0, now=datetime.now(UTC) + timedelta(days=1))

    assert (quiet.forgotten, quiet.kept) == (0, 1) and await find_subject(engine, DAVE) == subject
    await store.close()


async def test_retention_ages_an_unrecorded_transcript_in_a_folder(engine: AsyncEngine, tmp_path: Path) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    subject = await _unrecorded(engine, store, DAVE)
    old = (datetime.now(UTC) - timedelta(days=100)).timestamp()
    os.utime(store.root / _key(subject), (old, old))

    report = await sweep_all(Settings(transcript_retention_days=90), engine, store)

    assert report.transcripts == 1 and await store.list_keys(f"{SUBJECTS}/") == []


@pytest.mark.s3
async def test_the_buckets_retention_rule_covers_every_subjects_transcripts_recorded_or_not(
    engine: AsyncEngine, request: pytest.FixtureRequest
) -> None:
    request.getfixturevalue("s3_env")
    store = S3TranscriptStore(make_client(), versioned_bucket(), "audit")
    subject = await _unrecorded(engine, store, DAVE)
    rule = (await apply_transcript_retention(store, days=90))["rule"]
    assert f"audit/{_key(subject)}".startswith(rule["Filter"]["Prefix"])
    await store.close()

