"""Transcripts written again, on their first write's clock in a store whose retention counts from the upload.

    from teamstore.audit.rewrites import record_rewrite, sweep_rewrites

    await record_rewrite(engine, store, key, subject_key, written_at)   # before the write
    await store.put(key, body, written_at=written_at)                   # keys migrate, a late outbox delivery
    swept = await sweep_rewrites(engine, store, cutoff, now)            # `teamstore retention sweep`

A transcript is written again when ``teamstore keys migrate`` seals a plain one and when the outbox delivers
one after its run. A folder keeps the file on its first write's clock (``Capability.LOCAL_SWEEP``: the file's
modified time, which its sweep reads). S3 cannot set an object's time, and its lifecycle rule counts from the
upload: such an object would live the whole retention again from the rewrite. So each such write to a store
without a sweep of its own is recorded first (``ts_transcript_rewrites``: the store, the object key and the
earliest first write given for it), and the sweep deletes every version and delete marker of each one whose
first write is past retention, wherever its age stands when it is written again. One a hold keeps (Object Lock:
a legal hold, a retention period) stays recorded, counted, until a sweep after the hold can delete it.

A record is written before the object, since a write whose outcome is unknown may land; it is refused while
an erasure fences the subject's user (in one statement, as the outbox refuses a transcript), so none is
written after the erasure's ``rewrites`` step deleted the user's. After its object is deleted a record stays
until its latest write is :data:`SETTLED` old, so a write of it still on its way then is deleted by the next
sweep.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, case, delete, exists, literal, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.schema import rewrites, subjects
from teamstore.audit.transcripts.base import Capability, TranscriptStore
from teamstore.audit.transcripts.capabilities import HoldStatus, capability
from teamstore.db.clock import shared_now_as, utc
from teamstore.db.engine import describe_failure
from teamstore.db.fence import held
from teamstore.db.statements import dialect_insert
from teamstore.errors import ErasureInProgress, StoreUnavailable, TranscriptUnavailable

SETTLED = timedelta(hours=1)
"""How long a record stays after its latest write: far longer than any write of it can take to land."""
PAGE = 500
"""Records read per query by the sweep."""


def needs_record(store: TranscriptStore) -> bool:
    """Whether ``store`` counts retention from the upload, so a transcript written again must be recorded; a
    store with a sweep of its own keeps ``written_at`` as the object's time."""
    return Capability.LOCAL_SWEEP not in store.capabilities


async def record_rewrite(
    engine: AsyncEngine, store: TranscriptStore, key: str, subject_key: str, written_at: datetime
) -> None:
    """Record, before it is written again, that ``key`` in ``store`` was first written at ``written_at``
    (a record already there keeps the earlier time). Nothing is recorded for a store with its own sweep.

    Args:
        engine: The state database.
        store: Where the transcript is written again.
        key: Its object key.
        subject_key: Its subject.
        written_at: When the transcript was first written.

    Raises:
        ErasureInProgress: An erasure fences the subject's user: write nothing (the erasure removes it).
        StoreUnavailable: The database failed: write nothing (the object would outlive its retention).
    """
    if not needs_record(store):
        return
    r = rewrites.c
    row = {
        "store": literal(store.url, r.store.type),
        "object_key": literal(key, r.object_key.type),
        "subject_key": literal(subject_key, r.subject_key.type),
        "written_at": literal(utc(written_at), r.written_at.type),
        # On the clock the sweep's SETTLED counts on: a host running an hour behind must not record a write that
        # may still land as one already settled.
        "recorded_at": shared_now_as(engine.dialect.name, r.recorded_at.type),
    }
    fenced = exists().where(subjects.c.subject_key == subject_key, held(subjects.c.user_id))
    insert = dialect_insert(engine.dialect.name)(rewrites)
    stmt = insert.from_select(list(row), select(*(value.label(name) for name, value in row.items())).where(~fenced))
    stmt = stmt.on_conflict_do_update(index_elements=[r.store, r.object_key], set_={
        "written_at": case((stmt.excluded.written_at < r.written_at, stmt.excluded.written_at), else_=r.written_at),
        "recorded_at": stmt.excluded.recorded_at,
    })
    try:
        async with engine.begin() as conn:
            recorded = (await conn.execute(stmt.returning(r.object_key))).first()
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"could not record a transcript written again: {describe_failure(exc)}",
            hint="check the database (run `teamstore db upgrade` if ts_transcript_rewrites is missing), then try "
            "again: nothing was written",
        ) from exc
    if recorded is None:
        raise ErasureInProgress("a transcript of a user an erasure fences is not written again",
                                hint="nothing to fix: the erasure removes the user's transcripts")


@dataclass(frozen=True)
class Swept:
    """What one sweep of the transcripts written again did."""

    removed: int
    """Objects deleted (one already gone, expired by the store's rule, is not counted)."""
    held: int
    """Objects past retention a hold (Object Lock) keeps: recorded still, for the next sweep."""


async def sweep_rewrites(engine: AsyncEngine, store: TranscriptStore, older_than: datetime, now: datetime) -> Swept:
    """Delete every version of each transcript recorded as written again to ``store`` whose first write is
    before ``older_than``; drop its record once its latest write is :data:`SETTLED` before ``now``.

    Raises:
        TranscriptUnavailable: The store failed, or refused a version no hold explains (the records stay).
        StoreUnavailable: The database failed.
    """
    if not needs_record(store):
        return Swept(0, 0)
    removed, held, after = 0, 0, ""
    while keys := await _due(engine, store.url, older_than, after):
        gone = []
        for key in keys:
            outcome = await _remove(store, key)
            removed += outcome is True
            held += outcome is None
            gone += [key] if outcome is not None else []
        await _drop(engine, store.url, gone, older_than, now - SETTLED)
        after = keys[-1]
    return Swept(removed, held)


async def _remove(store: TranscriptStore, key: str) -> bool | None:
    """Delete every version and delete marker of ``key``: whether there was any, or None if a hold keeps some.

    Raises:
        TranscriptUnavailable: The store failed, or refused a version no hold explains.
    """
    listing, deleter = capability(store, Capability.VERSIONS), capability(store, Capability.BATCH_DELETE)
    if listing is None or deleter is None:
        return await store.delete(key) > 0
    versions = [version for version in await listing.versions(key) if version.key == key]
    refused = await deleter.delete_versions(versions)
    holds = capability(store, Capability.HOLDS)
    states = [HoldStatus.FREE if holds is None else await holds.hold(r.version) for r in refused]
    if unexplained := sorted({r.code for r, state in zip(refused, states, strict=True) if state is HoldStatus.FREE}):
        # Named by the store's error codes, never by key: a key holds the subject and session keys.
        raise TranscriptUnavailable(
            f"the store refused to delete a transcript past its retention ({', '.join(unexplained)}) and no hold "
            "explains it",
            hint="grant s3:ListBucketVersions, s3:DeleteObject and s3:DeleteObjectVersion on the transcript prefix, "
            "then run `teamstore retention sweep` again",
        )
    if HoldStatus.HELD in states:
        return None
    return bool(versions)


async def _due(engine: AsyncEngine, store_url: str, older_than: datetime, after: str) -> list[str]:
    """The next page of ``store_url``'s recorded keys, after ``after``, first written before ``older_than``."""
    r = rewrites.c
    query = (select(r.object_key).where(r.store == store_url, r.written_at < older_than, r.object_key > after)
             .order_by(r.object_key).limit(PAGE))
    try:
        async with engine.connect() as conn:
            return [str(key) for key in (await conn.scalars(query)).all()]
    except SQLAlchemyError as exc:
        raise _sweep_failed(exc) from exc


async def _drop(engine: AsyncEngine, store_url: str, keys: list[str], older_than: datetime, settled: datetime) -> None:
    r = rewrites.c
    # Each condition again: a record written since it was read (a later write of the object) is not dropped.
    stmt = delete(rewrites).where(and_(r.store == store_url, r.object_key.in_(keys), r.written_at < older_than,
                                       r.recorded_at < settled))
    try:
        async with engine.begin() as conn:
            await conn.execute(stmt)
    except SQLAlchemyError as exc:
        raise _sweep_failed(exc) from exc


def _sweep_failed(exc: SQLAlchemyError) -> StoreUnavailable:
    return StoreUnavailable(f"could not sweep the transcripts written again: {describe_failure(exc)}",
                            hint="check the database and run `teamstore retention sweep` again")
