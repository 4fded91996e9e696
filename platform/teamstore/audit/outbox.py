"""The transcript outbox: what could not be uploaded waits in the database, once per run id.

    from teamstore.audit.outbox import enqueue, flush

    await enqueue(engine, run_id, key, subject_key, body, error="S3 unreachable")   # run still succeeds
    report = await flush(engine, store)          # `teamstore transcripts flush`, and after later runs
    print(report.delivered, report.remaining)

The run id is the primary key, so a transcript is queued at most once; delivery PUTs to the same key the
run would have used, so delivering twice (two flushers racing) still leaves exactly one object. A delivery
that lands after an erasure fenced its user (the PUT was slow) is deleted again (:func:`confirm_landed`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, delete, exists, func, literal, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.schema import outbox, subjects
from teamstore.audit.subjects import record_store
from teamstore.audit.transcripts.base import TranscriptStore
from teamstore.db.engine import describe_failure
from teamstore.db.statements import insert_new
from teamstore.errors import ErasureInProgress, StoreUnavailable, TeamstoreError
from teamstore.state.schema import user_holds

log = logging.getLogger(__name__)


def _held(subject_key: Any) -> ColumnElement[bool]:
    """True while an erasure fences the subject's user: nothing of theirs is queued or delivered."""
    fence = user_holds.join(subjects, subjects.c.user_id == user_holds.c.user_id)
    return exists(select(literal(1)).select_from(fence).where(subjects.c.subject_key == subject_key))


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
    mapped = select(literal(1)).where(
        subjects.c.subject_key == subject_key, ~exists().where(user_holds.c.user_id == subjects.c.user_id))
    try:
        async with engine.connect() as conn:
            if await conn.scalar(select(exists(mapped))):
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
    """What one flush did."""

    delivered: int
    failed: int
    remaining: int
    last_error: str | None = None


async def enqueue(
    engine: AsyncEngine, run_id: str, object_key: str, subject_key: str, body: bytes, error: str
) -> bool:
    """Queue a transcript for later delivery.

    Args:
        engine: The state database.
        run_id: The run; a second enqueue of the same run id is ignored.
        object_key: Where the transcript belongs in the store.
        subject_key: Its subject (so erasure can remove queued transcripts too).
        body: The gzip JSON-lines object.
        error: Why the upload failed (no content, just the error).

    Returns:
        True if queued now, False if the run was already queued.

    Raises:
        ErasureInProgress: An erasure fences the subject's user; nothing was queued.
        StoreUnavailable: The database is down too; the caller logs it (the transcript is lost).
    """
    row = {
        "run_id": run_id,
        "object_key": object_key,
        "subject_key": subject_key,
        "body": body,
        "created_at": datetime.now(UTC),
        "attempts": 1,
        "last_error": error[:512],
    }
    try:
        async with engine.begin() as conn:
            # One statement: the row goes in only if no erasure fences the user at that instant.
            source = select(*(literal(v, outbox.c[k].type).label(k) for k, v in row.items())).where(
                ~_held(subject_key)
            )
            # A run already queued is skipped, never refused: a refusal is an error the server logs, key and all.
            stmt = insert_new(engine.dialect.name, outbox).from_select(list(row), source).returning(outbox.c.run_id)
            if (await conn.execute(stmt)).first() is not None:
                return True
            if await conn.scalar(select(exists().where(outbox.c.run_id == run_id))):
                return False
        raise ErasureInProgress(
            f"transcript of run {run_id} not queued: an erasure is open for its user",
            hint="nothing to fix: the user is being erased",
        )
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"could not queue transcript of run {run_id} in the outbox: {describe_failure(exc)}",
            hint="check the database; run `teamstore db upgrade` if ts_transcript_outbox is missing",
        ) from exc


async def pending(engine: AsyncEngine) -> int:
    """How many transcripts wait in the outbox."""
    async with engine.connect() as conn:
        return int(await conn.scalar(select(func.count()).select_from(outbox)) or 0)


async def flush(engine: AsyncEngine, store: TranscriptStore, limit: int = 500) -> FlushReport:
    """Deliver queued transcripts, oldest first; stop at the first failure (the store is likely down).

    Args:
        engine: The state database.
        store: Where the transcripts go.
        limit: At most this many per call.

    Returns:
        Counts of delivered, failed and still-queued transcripts.

    Raises:
        StoreUnavailable: The database failed; what was delivered before stays delivered, the rest queued.
    """
    try:
        return await _flush(engine, store, limit)
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"could not flush the transcript outbox: {describe_failure(exc)}",
            hint="check the database, then run `teamstore transcripts flush` again; nothing queued was lost",
        ) from exc


async def _flush(engine: AsyncEngine, store: TranscriptStore, limit: int) -> FlushReport:
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(outbox.c.run_id, outbox.c.object_key, outbox.c.subject_key)
                .where(~_held(outbox.c.subject_key))
                .order_by(outbox.c.created_at)
                .limit(limit)
            )
        ).all()
    delivered, error = 0, None
    for run_id, key, subject_key in rows:
        # Read one body at a time: the transcripts that queue are the large ones, a batch of them gigabytes.
        body = await _queued_body(engine, run_id)
        if body is None:
            continue  # delivered, erased or fenced since the batch was read: never bring it back
        try:
            await record_store(engine, subject_key, store.url)  # erasure must reach every store that holds some
            await store.put(key, body)
        except TeamstoreError as exc:
            error = exc.message
            await _note_failure(engine, run_id, error)
            break
        if not await confirm_landed(engine, store, key, subject_key):
            continue  # an erasure fenced the user while the PUT was on its way: the erasure removes the row
        await forget(engine, run_id)
        delivered += 1
    return FlushReport(delivered, 1 if error else 0, await pending(engine), error)


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
            hint="nothing to fix: the next flush delivers it again, to the same key",
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


async def _queued_body(engine: AsyncEngine, run_id: str) -> bytes | None:
    async with engine.connect() as conn:
        body = await conn.scalar(select(outbox.c.body).where(outbox.c.run_id == run_id, ~_held(outbox.c.subject_key)))
    return bytes(body) if body is not None else None


async def _note_failure(engine: AsyncEngine, run_id: str, error: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            update(outbox)
            .where(outbox.c.run_id == run_id)
            .values(attempts=outbox.c.attempts + 1, last_error=error[:512])
        )
