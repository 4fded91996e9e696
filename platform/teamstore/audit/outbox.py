"""The transcript outbox: what could not be uploaded waits in the database, once per run id.

    from teamstore.audit.outbox import enqueue, flush

    await enqueue(engine, run_id, key, subject_key, body, error="S3 unreachable")   # run still succeeds
    report = await flush(engine, store)          # `teamstore transcripts flush`, and after later runs
    print(report.delivered, report.remaining)

The run id is the primary key, so a transcript is queued at most once. A flusher claims one row at a time
(:mod:`teamstore.audit.claims`), so two flushers never deliver the same transcript. An upload whose outcome is
unknown (the run stopped waiting for it, or S3 left it unanswered) keeps its row claimed until it can no
longer land: only then is the transcript sent again, and only then may an erasure of its user go on.
A delivery that lands after an erasure fenced its user is deleted again (:func:`confirm_landed`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, case, delete, exists, func, literal, null, or_, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit import claims
from teamstore.audit.claims import Queued
from teamstore.audit.placement import mark_ours
from teamstore.audit.rewrites import record_rewrite
from teamstore.audit.schema import outbox, subjects
from teamstore.audit.subjects import record_store
from teamstore.audit.transcripts import store_endpoint
from teamstore.audit.transcripts.base import TranscriptStore
from teamstore.db.clock import now_utc, shared_later, shared_now, shared_now_as, utc
from teamstore.db.engine import describe_failure
from teamstore.db.fence import held as user_held
from teamstore.db.statements import insert_new
from teamstore.errors import ErasureInProgress, StoreUnavailable, TeamstoreError, UploadInDoubt

log = logging.getLogger(__name__)
RENEW_SECONDS = 10.0
"""An upload still on its way renews its row's claim this often."""


def in_flight_for(late_upload_s: float) -> timedelta:
    """How long the claim of an upload still on its way lasts: past the next two renewals, plus the time S3 may
    take to store it once its connection is gone (the process sending it may be killed just after renewing)."""
    return timedelta(seconds=2 * RENEW_SECONDS + late_upload_s)


def may_land_for(late_upload_s: float) -> timedelta:
    """How long the claim of an upload that ended unanswered lasts: S3 may store it for ``late_upload_s`` more."""
    return timedelta(seconds=late_upload_s)


def writable(subject_key: Any) -> ColumnElement[bool]:
    """True while the subject is still its user's and no erasure fences the user: false from an erasure's fence
    on, and for good once it deleted the subject (a worker may hold the key from before it)."""
    return exists().where(subjects.c.subject_key == subject_key, ~user_held(subjects.c.user_id))


async def confirm_landed(engine: AsyncEngine, store: TranscriptStore, key: str, subject_key: str) -> bool:
    """Keep a transcript that landed after its fence check had long passed, unless its user has been fenced
    or erased since: then delete it again, since the erasure may have looked at the store before it landed.

    Args:
        engine: The state database.
        store: Where the transcript landed.
        key: Its object key.
        subject_key: Its subject.

    Returns:
        True if it stays, also when the database cannot say (a transcript is never deleted on a guess);
        False if it was removed, or was to be and S3 refused (logged with the key to delete by hand).
    """
    try:
        async with engine.connect() as conn:
            if await conn.scalar(select(writable(subject_key))):
                return True
    except SQLAlchemyError as exc:
        log.error("could not check whether a late transcript's user was erased meanwhile (%s); it stays at %s",
                  describe_failure(exc), key)
        return True
    try:
        await store.delete(key)
    except TeamstoreError as exc:
        log.error("a transcript landed after its user was fenced for erasure and could not be removed (%s); "
                  "delete %s by hand", exc.message, key)
        return False
    log.warning("a transcript landed after its user was fenced for erasure: removed it again")
    return False


@dataclass(frozen=True)
class FlushReport:
    """What one flush did, and what it left: ``remaining`` transcripts still queued, of which ``held`` a claim
    keeps from being sent until ``held_until`` (an upload of each that may still land, or another flusher
    sending it), so a flush before then cannot send them."""

    delivered: int
    failed: int
    remaining: int
    last_error: str | None = None
    held: int = 0
    held_until: datetime | None = None
    in_doubt: bool = False
    """The failure was an upload the store left unanswered: it may land all the same (its transcript is sent
    again only once it no longer can), where any other failure stored nothing."""
    last_hint: str | None = None
    """How to fix ``last_error``, as the store's error says it (an unreachable endpoint, a missing bucket...)."""
    erasing: int = 0
    """Of ``remaining``, those not ``held`` whose user an open erasure fences: no flush sends them, and the
    erasure deletes them."""


@dataclass(frozen=True)
class Claim:
    """An upload of a queued transcript that may be on its way: who sends it, and for how long from now it may
    land (counted on the database's clock, :mod:`teamstore.audit.claims`)."""

    owner: str
    lasting: timedelta


async def enqueue(
    engine: AsyncEngine, run_id: str, object_key: str, subject_key: str, body: bytes, error: str,
    claim: Claim | None = None,
) -> bool:
    """Queue a transcript for later delivery.

    Args:
        engine: The state database.
        run_id: The run; a second enqueue of the same run id is ignored.
        object_key: Where the transcript belongs in the store.
        subject_key: Its subject (so erasure can remove queued transcripts too).
        body: The gzip JSON-lines object.
        error: Why the upload failed (no content, just the error).
        claim: An upload of it that may still land: the row stays claimed for ``claim.lasting`` (no flusher
            sends it, an erasure waits). It is recorded even while an erasure fences the user, or after one
            deleted the subject, without the body: the erasure must know what may land, and the sender deletes
            it again when it lands.

    Returns:
        True if queued now, False if the run was already queued.

    Raises:
        ErasureInProgress: An erasure fences the subject's user, or deleted the subject (a worker that held its
            key from before the erasure); the body was not queued.
        StoreUnavailable: The database is down too; the caller logs it (the transcript is lost).
    """
    fenced = ~writable(subject_key)
    row = {
        "run_id": literal(run_id, outbox.c.run_id.type),
        "object_key": literal(object_key, outbox.c.object_key.type),
        "subject_key": literal(subject_key, outbox.c.subject_key.type),
        "body": literal(body, outbox.c.body.type) if claim is None else case((fenced, null()), else_=literal(
            body, outbox.c.body.type)),
        # On the database's clock, as the sweep's cutoff is: a host running a day ahead must not queue a
        # transcript the next sweep takes for one past its retention.
        "created_at": shared_now_as(engine.dialect.name, outbox.c.created_at.type),
        "attempts": literal(1, outbox.c.attempts.type),
        "last_error": literal(error[:512], outbox.c.last_error.type),
        "claimed_by": literal(claim.owner if claim else None, outbox.c.claimed_by.type),
        "claimed_until": (shared_later(engine.dialect.name, claim.lasting) if claim
                          else literal(None, outbox.c.claimed_until.type)),
    }
    # One statement: without a claim the row goes in only if the subject is still its user's and no erasure
    # fences them at that instant.
    source = select(*(value.label(name) for name, value in row.items()))
    # A run already queued is skipped, never refused: a refusal is an error the server logs, key and all.
    stmt = insert_new(engine.dialect.name, outbox).from_select(list(row), source if claim else source.where(~fenced))
    try:
        async with engine.begin() as conn:
            # length(), not IS NOT NULL: SQLite (3.40) answers `body IS NOT NULL` with 1 in the RETURNING of
            # this INSERT .. SELECT even when the CASE put NULL there.
            queued = (await conn.execute(stmt.returning(func.length(outbox.c.body)))).first()
            if queued is None and await conn.scalar(select(exists().where(outbox.c.run_id == run_id))):
                return False
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"could not queue transcript of run {run_id} in the outbox: {describe_failure(exc)}",
            hint="check the database; run `teamstore db upgrade` if ts_transcript_outbox is missing",
        ) from exc
    if queued is None or queued[0] is None:
        raise ErasureInProgress(
            f"transcript of run {run_id} not queued: an erasure is open for its user, or erased them",
            hint="nothing to fix: the user is being erased",
        )
    return True


async def pending(engine: AsyncEngine) -> int:
    """How many transcripts wait in the outbox (rows that only record an upload that may land excluded)."""
    async with engine.connect() as conn:
        return int(await conn.scalar(select(func.count()).select_from(outbox).where(outbox.c.body.is_not(None))) or 0)


async def holds(engine: AsyncEngine, run_id: str) -> bool:
    """Whether the outbox has a row of ``run_id``: its transcript waits there, or an upload of it may still land.

    Raises:
        StoreUnavailable: The database failed.
    """
    try:
        async with engine.connect() as conn:
            return bool(await conn.scalar(select(exists().where(outbox.c.run_id == run_id))))
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"could not read the transcript outbox: {describe_failure(exc)}",
            hint="check the database; run `teamstore db upgrade` if ts_transcript_outbox is missing",
        ) from exc


async def queued_under(engine: AsyncEngine, subject_key: str, prefix: str) -> int:
    """How many of the subject's transcripts under ``prefix`` (a session's, say) wait in the outbox, not yet in
    the store.

    Raises:
        StoreUnavailable: The database failed.
    """
    stmt = select(func.count()).select_from(outbox).where(
        outbox.c.subject_key == subject_key, outbox.c.object_key.startswith(prefix, autoescape=True),
        outbox.c.body.is_not(None),
    )
    try:
        async with engine.connect() as conn:
            return int(await conn.scalar(stmt) or 0)
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"could not read the transcript outbox: {describe_failure(exc)}",
            hint="check the database; run `teamstore db upgrade` if ts_transcript_outbox is missing",
        ) from exc


async def flush(engine: AsyncEngine, store: TranscriptStore, limit: int = 500, late_upload_s: float = 60.0) -> FlushReport:
    """Deliver queued transcripts, oldest first, each claimed first so no other flusher sends it too; stop at
    the first failure (the store is likely down).

    Args:
        engine: The state database.
        store: Where the transcripts go.
        limit: At most this many per call.
        late_upload_s: How long S3 may still store an upload it left unanswered (``late_upload_seconds``).

    Returns:
        Counts of delivered, failed and still-queued transcripts.

    Raises:
        StoreUnavailable: The database failed; what was delivered before stays delivered, the rest queued.
    """
    try:
        return await _flush(engine, store, limit, late_upload_s)
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"could not flush the transcript outbox: {describe_failure(exc)}",
            hint="check the database, then run `teamstore transcripts flush` again; nothing queued was lost",
        ) from exc


async def _flush(engine: AsyncEngine, store: TranscriptStore, limit: int, late_upload_s: float) -> FlushReport:
    owner = claims.new_owner()
    await claims.purge_settled(engine)
    delivered, error, hint, in_doubt = 0, None, None, False
    for index in range(limit):
        row = await claims.claim_next(engine, owner, in_flight_for(late_upload_s))
        if row is None:
            break
        if index == 0:
            await mark_store(engine, store)
        # One body at a time: the transcripts that queue are the large ones, a batch of them gigabytes.
        assert row.body is not None  # a claimable row has one
        # Written as of when it was queued (its run's end): its retention runs from the run, not from here.
        written_at = row.queued_at or now_utc()
        try:
            # Erasure must reach every store that holds some, at its endpoint.
            await record_store(engine, row.subject_key, store.url, endpoint=store_endpoint(store))
            await record_rewrite(engine, store, row.object_key, row.subject_key, written_at)
        except ErasureInProgress:
            await claims.settle(engine, row.run_id, owner, None)  # fenced since the claim: the erasure takes the row
            continue
        except TeamstoreError as exc:
            error, hint = exc.message, exc.hint
            await claims.settle(engine, row.run_id, owner, None, error)
            break
        upload = asyncio.ensure_future(store.put(row.object_key, row.body, written_at=written_at))
        row = Queued(row.run_id, row.object_key, row.subject_key)
        outcome = await follow(engine, store, row, owner, upload, late_upload_s)
        delivered += outcome.delivered
        if outcome.error is not None:
            error, hint, in_doubt = outcome.error, outcome.hint, outcome.in_doubt
            break
    remaining, held_now, held_until, erasing = await _left(engine)
    return FlushReport(delivered, 1 if error else 0, remaining, error, held_now, held_until, in_doubt, hint, erasing)


async def mark_store(engine: AsyncEngine, store: TranscriptStore) -> None:
    """Mark an S3 store as this database's (:func:`teamstore.audit.placement.mark_ours`): before the first transcript
    a flush delivers (the worker that queued it may never have: S3 was down), and when an operator runs `teamstore
    transcripts flush`, so an erasure reaching it at another endpoint knows it. A failure is logged and the flush
    goes on: an unmarked bucket is erased at its writers' endpoint alone."""
    try:
        await mark_ours(store, engine)
    except TeamstoreError as exc:
        log.warning("could not mark the transcript store: %s", exc.message)


async def _left(engine: AsyncEngine) -> tuple[int, int, datetime | None, int]:
    """How many transcripts are still queued, how many of them a claim holds, until when, and how many of the
    others an erasure fences."""
    now = shared_now(engine.dialect.name)
    claimed = outbox.c.claimed_until > now
    fenced = and_(or_(outbox.c.claimed_until.is_(None), outbox.c.claimed_until <= now),
                  claims.held(outbox.c.subject_key))
    stmt = select(func.count(), func.count().filter(claimed), func.max(outbox.c.claimed_until).filter(claimed),
                  func.count().filter(fenced)).where(outbox.c.body.is_not(None))
    async with engine.connect() as conn:
        remaining, held_now, held_until, erasing = (await conn.execute(stmt)).one()
    return int(remaining), int(held_now), utc(held_until), int(erasing)


@dataclass(frozen=True)
class Outcome:
    """How an upload of a queued transcript ended: delivered (landed and kept), or why not."""

    delivered: bool
    error: str | None = None
    in_doubt: bool = False
    """The upload was left unanswered: it may land all the same."""
    hint: str | None = None
    """How to fix ``error``."""


async def follow(
    engine: AsyncEngine, store: TranscriptStore, row: Queued, owner: str, upload: asyncio.Future[None],
    late_upload_s: float,
) -> Outcome:
    """Keep ``row`` claimed while ``upload`` is on its way, then settle it by how the upload ended.

    Landed: the row is dropped (delivered), unless the user was fenced or erased meanwhile: then the object
    is deleted again and the row left to the erasure. Failed and unanswered: the claim stays until the upload
    can no longer land. Failed, nothing stored: the claim is released, for the next flush.

    Raises:
        StoreUnavailable: The database failed (a claim left behind passes by itself).
    """
    try:
        await _keep_claimed(engine, row.run_id, owner, upload, late_upload_s)
    except asyncio.CancelledError:
        upload.cancel()  # its request goes on in its thread; the claim left on the row passes by itself
        raise
    try:
        upload.result()
    except UploadInDoubt as exc:
        await claims.settle(engine, row.run_id, owner, may_land_for(late_upload_s), exc.message)
        return Outcome(False, exc.message, in_doubt=True, hint=exc.hint)
    except TeamstoreError as exc:
        await claims.settle(engine, row.run_id, owner, None, exc.message)
        return Outcome(False, exc.message, hint=exc.hint)
    if not await confirm_landed(engine, store, row.object_key, row.subject_key):
        await claims.settle(engine, row.run_id, owner, None)  # removed again: the erasure takes the row
        return Outcome(False)
    await forget(engine, row.run_id)
    return Outcome(True)


async def _keep_claimed(
    engine: AsyncEngine, run_id: str, owner: str, upload: asyncio.Future[None], late_upload_s: float
) -> None:
    """Wait for ``upload``, renewing the row's claim every ``RENEW_SECONDS`` meanwhile."""
    while not (await asyncio.wait({upload}, timeout=RENEW_SECONDS))[0]:
        try:
            renewed = await claims.renew(engine, run_id, owner, in_flight_for(late_upload_s))
        except StoreUnavailable as exc:
            log.warning("could not renew the claim on the transcript of run %s; retrying: %s", run_id, exc.message)
            continue
        if not renewed:
            log.error("the claim on the transcript of run %s passed while its upload was still on its way: if it "
                      "lands after an erasure of its user, it is deleted only when it lands", run_id)
            await asyncio.wait({upload})
            return


async def forget(engine: AsyncEngine, run_id: str) -> None:
    """Drop a run's queued transcript once a late upload delivered it after all (no second PUT).

    Raises:
        StoreUnavailable: The database failed; the transcript stays queued (delivering it twice is harmless).
    """
    try:
        async with engine.begin() as conn:
            await conn.execute(delete(outbox).where(outbox.c.run_id == run_id))
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"could not drop the delivered transcript of run {run_id} from the outbox: {describe_failure(exc)}",
            hint="nothing to fix: the next flush delivers a queued transcript again, to the same key, and a row "
                 "that only records an upload (`keys migrate`'s) passes on its own",
        ) from exc


async def sweep_outbox(engine: AsyncEngine, older_than: datetime) -> int:
    """Drop transcripts queued before ``older_than`` (the transcript retention's cutoff): delivered, they
    would have expired by now, and undelivered they would keep users' messages past retention.

    Returns:
        How many were dropped.

    Raises:
        StoreUnavailable: The database failed.
    """
    try:
        async with engine.begin() as conn:
            result = await conn.execute(delete(outbox).where(outbox.c.created_at < older_than))
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"could not sweep the transcript outbox: {describe_failure(exc)}",
            hint="check the database and run `teamstore retention sweep` again",
        ) from exc
    return result.rowcount or 0
