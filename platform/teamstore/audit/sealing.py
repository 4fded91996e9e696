"""Sealing the audit trail written before sealing: queued transcripts and stored ones (``teamstore keys migrate``).

    from teamstore.audit.sealing import seal_queued_transcripts, seal_stored_transcripts

    queued = await seal_queued_transcripts(engine, keys)          # outbox bodies, in place
    stored = await seal_stored_transcripts(engine, store, keys)   # each plain object written again, sealed

Every transcript written since sealing began is sealed before it leaves the process; these seal the older
ones. An object is found by its key (``subjects/<subject>/...``) and sealed under the data key of the user its
subject maps to; one whose subject no longer maps to a user (erased), or whose user an erasure fences, is left
to the erasure. Each write is an upload that may land until its outcome is known: it is put on record in the
outbox before it starts (:func:`teamstore.audit.claims.hold`, a row with no body), and an erasure of its user
waits for it, as for a queued transcript's upload. Landed, it is checked against the fence and deleted again
if its user is fenced or erased by then (as a late outbox delivery is), and the record goes; failed with an
answer, the record is released; left unanswered by S3, it stays until the write can no longer land
(``late_upload_seconds``), also if ``keys migrate`` is killed meanwhile. An object keeps its first write's
retention (:mod:`teamstore.audit.rewrites`): one already past it is deleted by the next retention sweep. On
a versioned bucket the plain version stays as a noncurrent version until the lifecycle rule expires it (a
day), or, under Object Lock, until its retention ends: ``teamstore keys migrate`` says how many it wrote again.
"""

from __future__ import annotations

import asyncio
import uuid

from sqlalchemy import exists, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit import claims
from teamstore.audit.claims import Queued
from teamstore.audit.outbox import follow, in_flight_for
from teamstore.audit.placement import check_here
from teamstore.audit.rewrites import record_rewrite
from teamstore.audit.schema import outbox, subjects
from teamstore.audit.subjects import store_ever_written
from teamstore.audit.transcripts.base import SUBJECTS, StoredObject, TranscriptStore
from teamstore.audit.transcripts.record import sealed_context
from teamstore.db.engine import describe_failure
from teamstore.db.fence import held
from teamstore.errors import (
    ErasureInProgress,
    StoreUnavailable,
    TranscriptNotFound,
    TranscriptUnavailable,
    UploadInDoubt,
)
from teamstore.keys.passed_over import PassedOver, key_to_seal
from teamstore.keys.sealed import is_sealed
from teamstore.keys.service import KeyService


def _failed(exc: SQLAlchemyError, action: str) -> StoreUnavailable:
    return StoreUnavailable(f"could not {action}: {describe_failure(exc)}",
                            hint="check the database, then run `teamstore keys migrate` again (it goes on)")


async def seal_queued_transcripts(engine: AsyncEngine, keys: KeyService, *, passed: PassedOver | None = None) -> int:
    """Seal the outbox bodies queued before sealing, each only while no flusher has it claimed; how many.

    ``passed`` keeps a user whose key row does not open (damaged, or under a KEK KMS will not use), their bodies
    left as they are; without it, that raises.

    Raises:
        KeyUnavailable: The key-encryption key could not be used. DataKeyDamaged, KeyDestroyed: a user's key
        row does not open, and no ``passed`` was given. StoreUnavailable: the database failed.
    """
    o = outbox.c
    done, after = 0, ""
    while (row := await _next_queued(engine, after)) is not None:
        run_id, object_key, body, user_id = row
        after = run_id
        if is_sealed(body):
            continue
        try:
            data_key = await key_to_seal(keys, user_id, exists().where(o.run_id == run_id), passed)
        except ErasureInProgress:
            continue  # fenced since the read: the erasure deletes the row
        if data_key is None:
            continue  # the row went since the read (delivered, or its user erased), or its user is passed over
        sealed = data_key.seal(body, sealed_context(object_key))
        stmt = update(outbox).where(o.run_id == run_id, o.body == body, o.claimed_by.is_(None)).values(body=sealed)
        try:
            async with engine.begin() as conn:
                done += int((await conn.execute(stmt)).rowcount or 0)
        except SQLAlchemyError as exc:
            raise _failed(exc, "seal a queued transcript") from exc
    return done


async def _next_queued(engine: AsyncEngine, after: str) -> tuple[str, str, bytes, str] | None:
    """The next outbox row after run id ``after`` holding a transcript that no flusher has claimed and no erasure
    fences, with its body and user. One at a time: the transcripts that queue are the large ones, and an
    outbox an outage filled holds gigabytes of them."""
    o, s = outbox.c, subjects.c
    query = (select(o.run_id, o.object_key, o.body, s.user_id).join_from(outbox, subjects, s.subject_key == o.subject_key)
             .where(o.run_id > after, o.body.is_not(None), o.claimed_by.is_(None), ~held(s.user_id))
             .order_by(o.run_id).limit(1))
    try:
        async with engine.connect() as conn:
            row = (await conn.execute(query)).first()
    except SQLAlchemyError as exc:
        raise _failed(exc, "read the outbox") from exc
    return None if row is None else (str(row[0]), str(row[1]), bytes(row[2]), str(row[3]))


async def seal_stored_transcripts(
    engine: AsyncEngine, store: TranscriptStore, keys: KeyService, late_upload_s: float = 60.0, *,
    passed: PassedOver | None = None,
) -> int:
    """Write each plain transcript object again, sealed under its user's data key; how many.

    Args:
        engine: The state database.
        store: Where the transcripts are.
        keys: The users' data keys.
        late_upload_s: How long S3 may still store a write it left unanswered (``late_upload_seconds``).
        passed: Where a user whose key row does not open (damaged, or under a KEK KMS will not use) is kept,
            their objects left as they are; without it, that raises.

    Raises:
        KeyUnavailable: The key-encryption key could not be used. DataKeyDamaged, KeyDestroyed: a user's key
        row does not open, and no ``passed`` was given. UploadInDoubt: S3 left a write
        unanswered (on record until it can no longer land). TranscriptUnavailable: the store failed.
        TranscriptFolderElsewhere: The transcripts are in a folder this machine does not have (or another
        database's).
        StoreUnavailable: The database failed.
    """
    if await store_ever_written(engine, store.url):  # listed here, a folder elsewhere would give a clean 0
        await check_here(store, engine, doing="seal the stored transcripts in")
    owner = claims.new_owner()
    owners: dict[str, str | None] = {}
    done = 0
    async for stored in store.scan(f"{SUBJECTS}/"):
        subject = stored.key.split("/")[1]
        if subject not in owners:
            owners[subject] = await _owner(engine, subject)
        user_id = owners[subject]
        if user_id is None:
            continue
        try:
            body = await store.get(stored.key)
        except TranscriptNotFound:
            continue  # removed since the listing (a sweep, an erasure)
        if is_sealed(body):
            continue
        try:
            data_key = await key_to_seal(keys, user_id, exists().where(
                subjects.c.subject_key == subject, subjects.c.user_id == user_id), passed)
            if data_key is not None:
                # Its first write time kept: written again, its retention must not start over.
                await record_rewrite(engine, store, stored.key, subject, stored.modified)
        except ErasureInProgress:
            data_key = None
        if data_key is None:
            owners[subject] = None  # fenced or erased since the lookup (left to the erasure), or passed over
            continue
        sealed = data_key.seal(body, sealed_context(stored.key))
        if await _write_again(engine, store, stored, sealed, owner, late_upload_s):
            done += 1
        else:
            owners[subject] = None  # fenced or erased meanwhile: left to the erasure, and so are the rest
    return done


async def _write_again(
    engine: AsyncEngine, store: TranscriptStore, stored: StoredObject, sealed: bytes, owner: str, late_upload_s: float
) -> bool:
    """Write ``sealed`` over ``stored``, on record as an upload that may land from before it starts until its
    outcome is known; whether it stays (not if its user was fenced or erased meanwhile: then it was never
    written, or was deleted again once it landed)."""
    row = Queued(f"rewrite-{uuid.uuid4().hex}", stored.key, stored.key.split("/")[1])
    await claims.hold(engine, row.run_id, row.object_key, row.subject_key, owner, in_flight_for(late_upload_s))
    # Looked up again once on record: an erasure that fenced the user before then may have found no upload
    # of theirs to wait for, and gone on.
    if await _owner(engine, row.subject_key) is None:
        await claims.settle(engine, row.run_id, owner, None)
        return False
    try:
        # Its first write time kept: written again, its retention must not start over.
        await record_rewrite(engine, store, stored.key, row.subject_key, stored.modified)
    except ErasureInProgress:
        await claims.settle(engine, row.run_id, owner, None)
        return False
    upload = asyncio.ensure_future(store.put(stored.key, sealed, written_at=stored.modified))
    outcome = await follow(engine, store, row, owner, upload, late_upload_s)
    try:
        upload.result()
    except UploadInDoubt as exc:  # the store's own hints speak of the outbox
        raise UploadInDoubt(exc.message, hint=(
            "check AWS_ENDPOINT_URL_S3 / network, then run `teamstore keys migrate` again (it goes on); an erasure "
            "of the transcript's user waits until the write can no longer land (TEAMSTORE_LATE_UPLOAD_SECONDS)"
        )) from exc
    except TranscriptUnavailable as exc:
        raise TranscriptUnavailable(exc.message, hint=(
            "nothing was written: check the transcript store, then run `teamstore keys migrate` again (it goes on)"
        )) from exc
    return outcome.delivered


async def _owner(engine: AsyncEngine, subject_key: str) -> str | None:
    """The user a subject maps to, unless an erasure fences them (or none does)."""
    query = select(subjects.c.user_id).where(subjects.c.subject_key == subject_key, ~held(subjects.c.user_id))
    try:
        async with engine.connect() as conn:
            found = await conn.scalar(query)
    except SQLAlchemyError as exc:
        raise _failed(exc, "read the subject mapping") from exc
    return str(found) if found is not None else None
