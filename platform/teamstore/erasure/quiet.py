"""Forgetting a quiet user: once retention has removed all of a user's data, their ids go too.

    from teamstore.erasure.quiet import forget_quiet_users

    report = await forget_quiet_users(engine, store, keys, grace_seconds=2.5)   # report.forgotten: how many

``teamstore retention sweep`` runs it after its other sweeps. A user is quiet when nothing of theirs is left in any
store: no stored or quarantined session, no memory or fact, no transcript queued or in doubt in the outbox, no
ledger row, recorded session id or record of a transcript written again, and no transcript in the store this process
talks to (listed under the subject's prefix, as an erasure verifies it), which must be the only store their
transcripts went to. A user an erasure or export request is open for, or was ever asked for by a request that still
names them, is left alone; an export is open while its record's lease holds, and one whose lease passed (killed
outright) is closed first, as the next export would close it. For a quiet user the subject mapping (``ts_subjects``:
the raw id and the subject key), the data key (``ts_data_keys``: the raw id, so any copy left in a backup or under
Object Lock is beyond use) and the record of their transcript stores go, and the records of their exports are
unlinked as an erasure unlinks them. The records of when they forgot memory (``ts_user_memory_forgets``, kept to
stop the writer of a session opened before the forget) go too when the caller says every memory writer seals
(``memory_sealed``: the key's destruction stops them); otherwise such a record keeps its user until its own 30 days
are out. A forget under way as the sweep destroys the key or forgets the user commits first (the sweep takes the
user's memory writes lock alone, on Postgres), so its record goes too.

It reuses the erasure's fence (:mod:`teamstore.db.fence`), with a hold of its own reason and no request: the
holds go up only while nothing remains (checked in the insert's statement), then, after ``grace_seconds`` for
writes that passed their check just before, everything is checked again (a session that took its lease meanwhile
keeps its user: the sweep backs off and lifts that hold). The data keys are deleted, the sweep waits out the
workers' key caches as an erasure does, and the mappings go with the holds, one transaction per user. A session
opening for the user meanwhile waits for the hold to go (:data:`teamstore.db.fence.RETENTION`), then starts the
user afresh (a new subject and data key). Nothing of the users is recorded: the sweep reports how many it forgot.

One sweep forgets at a time (:func:`teamstore.db.exclusive.exclusive`, held for the whole pass): a second one
started meanwhile (a CronJob's overlapping run) skips this step rather than take the first one's live holds for a
stopped sweep's and lift them. So the holds found up by the sweep holding the lock are truly a stopped sweep's.
Each user's mapping goes only while the sweep's own hold still stands and nothing of theirs is stored, checked
again in the transaction that lifts it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, exists, literal, not_, or_, select, union
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from teamstore.audit.schema import outbox, rewrites, subject_sessions, subject_stores, subjects, usage
from teamstore.audit.transcripts.base import TranscriptStore, subject_prefix
from teamstore.audit.transcripts.capabilities import holds_any
from teamstore.db.engine import describe_failure
from teamstore.db.exclusive import exclusive
from teamstore.db.fence import RETENTION, forgetting, user_holds
from teamstore.db.statements import insert_new
from teamstore.erasure.schema import erasure_requests
from teamstore.erasure.steps.base import StepContext
from teamstore.erasure.steps.database import exports_step
from teamstore.errors import StoreUnavailable
from teamstore.export import requests as exports
from teamstore.export.schema import export_requests
from teamstore.keys.schema import data_keys
from teamstore.keys.service import KeyService
from teamstore.memory.schema import facts, forgets, memories
from teamstore.memory.statements import writes_lock
from teamstore.state.schema import quarantine, sessions

NEW_SUBJECT = timedelta(hours=1)
"""A subject or data key younger than this is never forgotten: a first session makes both just before it takes
its lease, so for a moment a brand-new user has nothing else stored."""
BATCH = 200
"""Users fenced, checked and forgotten together (one grace and one key-cache wait per batch)."""
LOCK = "retention-forgetting"
"""The lock one sweep's forgetting holds (:func:`teamstore.db.exclusive.exclusive`)."""
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Quiet:
    """What one pass did: users forgotten, and users found quiet but kept (a session opened meanwhile, a
    transcript found in the store, another transcript store recorded for them)."""

    forgotten: int
    kept: int
    busy: bool = False
    """Another sweep was forgetting quiet users: this one left them to it (nothing was done)."""


@dataclass(frozen=True)
class _Rule:
    """What makes a user quiet in this pass: a subject and key made before ``before``, and nothing stored, a record
    of a forget counted unless ``memory_sealed`` (every memory writer seals under the data key the sweep destroys);
    ``dialect`` is the database's, whose clock an export's lease is read on."""

    before: datetime
    memory_sealed: bool
    dialect: str


@dataclass(frozen=True)
class _User:
    user_id: str
    subject_key: str | None


def _nothing_stored(
    user_id: ColumnElement[str], subject_key: ColumnElement[str | None], rule: _Rule, *, fenced: bool = False
) -> ColumnElement[bool]:
    """Nothing of the user left in any table of the database (transcript stores are listed apart), no erasure
    request naming them, no export of theirs under way (one ``running`` whose lease holds:
    :func:`teamstore.export.requests.alive`; one whose lease passed was killed), and no hold on them (``fenced``:
    none but the sweep's)."""
    # The record of a forget (ts_user_memory_forgets) stops the writer of a session opened before it. A writer that
    # seals stops once the sweep destroys its data key, so with ``memory_sealed`` the record goes with the user's
    # ids (_forget); a writer without a key (a store built without a key service) only the record stops: it keeps
    # the user until the record's own 30 days are out.
    kept = (sessions, quarantine, memories, facts) if rule.memory_sealed else (sessions, quarantine, memories, facts,
                                                                               forgets)
    by_user = [exists().where(table.c.user_id == user_id) for table in kept]
    by_subject = [exists().where(table.c.subject_key == subject_key)
                  for table in (outbox, usage, subject_sessions, rewrites)]
    requests = exists().where(or_(erasure_requests.c.user_id == user_id, erasure_requests.c.subject_key == subject_key))
    exporting = exists().where(export_requests.c.subject_key == subject_key, exports.alive(rule.dialect))
    holds = exists().where(user_holds.c.user_id == user_id, *([user_holds.c.reason != RETENTION] if fenced else []))
    return not_(or_(*by_user, *by_subject, requests, exporting, holds))


def _candidates(rule: _Rule, limit: int, after: str | None) -> Any:
    """The first ``limit`` users after ``after`` (in id order) with a subject mapping or a data key and nothing
    stored, whose subject and key are older than ``before`` (a first session makes them just before its lease:
    not yet a quiet user)."""
    subject = select(subjects.c.subject_key).where(subjects.c.user_id == data_keys.c.user_id).scalar_subquery()
    with_subject = select(subjects.c.user_id, subjects.c.subject_key).where(
        subjects.c.created_at < rule.before, _nothing_stored(subjects.c.user_id, subjects.c.subject_key, rule))
    key_only = select(data_keys.c.user_id, literal(None, subjects.c.subject_key.type)).where(
        data_keys.c.created_at < rule.before, subject.is_(None),
        _nothing_stored(data_keys.c.user_id, literal(None, subjects.c.subject_key.type), rule))
    found = union(with_subject, key_only).subquery()
    later = [found.c.user_id > after] if after is not None else []
    return select(found).where(*later).order_by(found.c.user_id).limit(limit)


def _unavailable(exc: SQLAlchemyError, action: str) -> StoreUnavailable:
    return StoreUnavailable(f"the retention sweep could not {action}: {describe_failure(exc)}",
                            hint="check the database and run the sweep again (it resumes with what is left)")


async def forget_quiet_users(
    engine: AsyncEngine, store: TranscriptStore, keys: KeyService, *, grace_seconds: float, now: datetime | None = None,
    memory_sealed: bool = False,
) -> Quiet:
    """Forget every quiet user (see the module): subject mapping, data key, transcript-store record.

    Args:
        engine: The state database.
        store: The transcript store this process talks to (its listing verifies that none of a user's
            transcripts is left there).
        keys: Users' data keys: the sweep forgets those it destroys, and outwaits the workers' caches
            (``cache_seconds``).
        grace_seconds: How long writes that passed the fence's check just before it went up may take to land
            (``TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS``).
        now: The reference time (default: now): only a subject or key made :data:`NEW_SUBJECT` before it is
            considered.
        memory_sealed: Every memory store writing to ``engine`` seals under users' data keys (as the composition
            root builds it): a writer the record of a forget was kept to stop is stopped by its key's destruction,
            so the record goes with the user. Without it (a store built with no key service writes), a user with
            a forget recorded is kept until the record's 30 days are out.

    Returns:
        How many users were forgotten and kept; ``busy`` when another sweep holds the forgetting's lock (this one
        then does nothing: that one forgets them).

    Raises:
        StoreUnavailable: The database failed (a hold of the sweep's may stay up: the next sweep lifts it).
        TranscriptUnavailable: The store could not be listed.
    """
    async with exclusive(engine, LOCK) as mine:
        if not mine:
            log.warning("retention sweep: another sweep is forgetting quiet users; this one leaves them to it")
            return Quiet(0, 0, busy=True)
        await _close_abandoned_exports(engine)
        return await _forget_quiet(engine, store, keys, grace_seconds,
                                   _Rule((now or datetime.now(UTC)) - NEW_SUBJECT, memory_sealed, engine.dialect.name))


async def _close_abandoned_exports(engine: AsyncEngine) -> None:
    """Close the records of exports killed outright (their lease passed) as the next export would
    (:func:`teamstore.export.requests.close_abandoned`): such a record keeps no user, and says so before the
    user's forgetting unlinks it."""
    try:
        await exports.close_abandoned(engine)
    except StoreUnavailable as exc:
        raise StoreUnavailable(f"the retention sweep {exc.message}",
                               hint="check the database and run the sweep again (it resumes with what is left)") from exc


async def _forget_quiet(
    engine: AsyncEngine, store: TranscriptStore, keys: KeyService, grace_seconds: float, rule: _Rule,
) -> Quiet:
    """:func:`forget_quiet_users`, under the forgetting's lock."""
    forgotten = kept = 0
    await _lift_stale_holds(engine, keys.cache_seconds)
    after: str | None = None  # a user kept is not fenced again by this pass: it goes on past them, in id order
    while True:
        batch, after = await _fence(engine, rule, after)
        if batch:
            if grace_seconds > 0:
                await asyncio.sleep(grace_seconds)
            quiet = [user for user in batch if await _still_quiet(engine, store, user, rule)]
            await _lift(engine, [user.user_id for user in batch if user not in quiet])
            gone = await _forget_all(engine, store, keys, quiet, rule)
            forgotten, kept = forgotten + gone, kept + len(batch) - gone
        if after is None:
            break
    if forgotten or kept:
        log.info("retention sweep: forgot %d quiet user(s); kept %d", forgotten, kept)
    return Quiet(forgotten, kept)


async def _forget_all(
    engine: AsyncEngine, store: TranscriptStore, keys: KeyService, quiet: list[_User], rule: _Rule,
) -> int:
    """Destroy the data keys of ``quiet`` (fenced, checked again), outwait the workers' key caches, then forget
    each user still quiet under the sweep's hold; how many were forgotten."""
    destroyed = await _destroy_keys(engine, quiet)
    for user in quiet:
        keys.forget(user.user_id)
    if destroyed and keys.cache_seconds > 0:
        await asyncio.sleep(keys.cache_seconds)  # the fleet's caches: one setting, the same everywhere
    return sum([await _forget(engine, store, user, rule) for user in quiet])


async def _lift_stale_holds(engine: AsyncEngine, cache_seconds: float) -> None:
    """Lift the holds an earlier sweep left up when it stopped mid-way (killed, the database gone): the users it
    had not forgotten yet are considered afresh. No other sweep is forgetting (this one holds the lock), so every
    hold of the reason is a stopped sweep's. That sweep may have stopped as it outwaited the workers' caches
    of the keys it had destroyed: a user opening a session meanwhile would be served a destroyed key from memory,
    and their new state sealed under it. So the wait is made again before the holds are lifted."""
    stale = select(exists().where(user_holds.c.reason == RETENTION))
    try:
        async with engine.connect() as conn:
            left_up = bool(await conn.scalar(stale))
        if left_up and cache_seconds > 0:
            await asyncio.sleep(cache_seconds)
        async with engine.begin() as conn:
            await conn.execute(delete(user_holds).where(user_holds.c.reason == RETENTION))
    except SQLAlchemyError as exc:
        raise _unavailable(exc, "lift the holds of an earlier sweep") from exc


async def _fence(engine: AsyncEngine, rule: _Rule, after: str | None) -> tuple[list[_User], str | None]:
    """Put the sweep's hold on the quiet users among the next :data:`BATCH` after ``after``, each only while
    nothing of theirs is stored (checked in the insert's own statement); the users fenced, and the last id looked
    at (``None``: there are no more)."""
    try:
        async with engine.begin() as conn:
            found = (await conn.execute(_candidates(rule, BATCH, after))).all()
            fenced: list[_User] = []
            for user_id, subject_key in found:
                row = {"user_id": literal(user_id, user_holds.c.user_id.type),
                       "reason": literal(RETENTION, user_holds.c.reason.type),
                       "created_at": literal(datetime.now(UTC), user_holds.c.created_at.type)}
                source = select(*(value.label(name) for name, value in row.items())).where(
                    _nothing_stored(literal(user_id, user_holds.c.user_id.type),
                                    literal(subject_key, subjects.c.subject_key.type), rule))
                stmt = insert_new(engine.dialect.name, user_holds).from_select(list(row), source)
                if (await conn.execute(stmt.returning(user_holds.c.user_id))).first() is not None:
                    fenced.append(_User(str(user_id), None if subject_key is None else str(subject_key)))
    except SQLAlchemyError as exc:
        raise _unavailable(exc, "fence the quiet users") from exc
    return fenced, str(found[-1][0]) if len(found) == BATCH else None


async def _still_quiet(engine: AsyncEngine, store: TranscriptStore, user: _User, rule: _Rule) -> bool:
    """Whether nothing of the user is stored now that the hold is up (a lease taken just before it is seen
    here): in the database, in the recorded transcript stores, and under the subject's prefix of ``store``."""
    u = literal(user.user_id, user_holds.c.user_id.type)
    s = literal(user.subject_key, subjects.c.subject_key.type)
    others = exists().where(subject_stores.c.subject_key == s, subject_stores.c.store != store.url,
                            subject_stores.c.erased_at.is_(None))
    try:
        async with engine.connect() as conn:
            if not await conn.scalar(select(and_(_nothing_stored(u, s, rule, fenced=True), ~others))):
                return False
    except SQLAlchemyError as exc:
        raise _unavailable(exc, "check the quiet users again") from exc
    return user.subject_key is None or not await holds_any(store, subject_prefix(user.subject_key))


async def _lift(engine: AsyncEngine, user_ids: list[str]) -> None:
    """Lift the sweep's holds on ``user_ids`` (kept: the sweep backs off)."""
    if not user_ids:
        return
    try:
        async with engine.begin() as conn:
            await conn.execute(delete(user_holds).where(user_holds.c.user_id.in_(user_ids),
                                                        user_holds.c.reason == RETENTION))
    except SQLAlchemyError as exc:
        raise _unavailable(exc, "lift its holds") from exc


async def _destroy_keys(engine: AsyncEngine, users: list[_User]) -> int:
    """Delete the users' data keys while the sweep's hold stands; how many it deleted. On Postgres each after the
    user's memory writes and forgets under way (their lock, taken alone): a forget that recorded itself while the
    key stood commits first, and its record is there for :func:`_forget` to delete."""
    destroyed = 0
    try:
        async with engine.begin() as conn:
            for user in users:  # in id order, as the batch is: two sweeps' locks never cross (one sweep at a time)
                await _hold_writes(conn, user.user_id)
                result = await conn.execute(delete(data_keys).where(data_keys.c.user_id == user.user_id,
                                                                    forgetting(user.user_id)))
                destroyed += int(result.rowcount or 0)
    except SQLAlchemyError as exc:
        raise _unavailable(exc, "destroy the quiet users' data keys") from exc
    return destroyed


async def _hold_writes(conn: AsyncConnection, user_id: str) -> None:
    """Take the user's memory writes lock alone until ``conn``'s transaction ends (Postgres; SQLite runs one writer
    at a time), as an erasure's key step does: a forget holds it alone from before its record to its commit."""
    if conn.dialect.name == "postgresql":
        await conn.execute(writes_lock(user_id, shared=False))


async def _forget(engine: AsyncEngine, store: TranscriptStore, user: _User, rule: _Rule) -> bool:
    """Lift the sweep's hold on the user and, in the same transaction, delete their subject mapping, transcript-store
    record and records of forgotten memory and unlink their export records: only while that hold still stands and nothing of
    theirs is stored (a write refused by the hold until the commit cannot land in between). Whether the user was
    forgotten; one kept has their hold lifted all the same, so a session waiting on it opens."""
    u = literal(user.user_id, user_holds.c.user_id.type)
    s = literal(user.subject_key, subjects.c.subject_key.type)
    try:
        async with engine.begin() as conn:
            # A forget under way commits first, and its record is deleted below; one after finds the ids gone and
            # records nothing (statements.forget_record): either way no raw id is left behind.
            await _hold_writes(conn, user.user_id)
            lifted = await conn.execute(delete(user_holds).where(user_holds.c.user_id == user.user_id,
                                                                 user_holds.c.reason == RETENTION))
            if not lifted.rowcount or not await conn.scalar(select(_nothing_stored(u, s, rule, fenced=True))):
                return False  # the hold was lifted by another, or the user came back: their ids stay
            await conn.execute(delete(forgets).where(forgets.c.user_id == user.user_id))
            if user.subject_key is not None:
                ctx = StepContext(engine, store, "", user.user_id, user.subject_key)
                await exports_step().rows.delete(conn, ctx)
                await conn.execute(delete(subject_stores).where(subject_stores.c.subject_key == user.subject_key))
                await conn.execute(delete(subjects).where(subjects.c.subject_key == user.subject_key))
    except SQLAlchemyError as exc:
        raise _unavailable(exc, "forget a quiet user") from exc
    return True
