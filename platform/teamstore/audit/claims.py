"""Claims on the transcript outbox: who is uploading a queued transcript, and until when an upload of it may land.

    from teamstore.audit import claims

    owner = claims.new_owner()
    row = await claims.claim_next(engine, owner, lasting)       # the oldest queued transcript nobody else holds
    await claims.renew(engine, row.run_id, owner, lasting)      # while its PUT is still on its way
    await claims.settle(engine, row.run_id, owner, None)        # the PUT failed and stored nothing
    await claims.in_doubt_until(engine, subject_key)            # an erasure: when its last upload may land
    await claims.hold(engine, record_id, key, subject_key, owner, lasting)  # an upload from outside the outbox

A claim does two jobs. It lets one flusher deliver a row while the others skip it (two ``teamstore
transcripts flush`` runs, or a worker's background flush beside one, each delivered every row). And it keeps
an upload whose outcome is unknown on record: until ``claimed_until`` passes, the row is not delivered again
and an erasure of its subject does not go on, because the upload may still land under the subject's prefix.
A row whose upload is settled but may still land (delivered, or never queued because an erasure fenced its
user) keeps no body, only the claim; :func:`purge_settled` drops it once the claim has passed. So does a row
that never held one: :func:`hold` puts on record an upload that does not come from the outbox (``teamstore
keys migrate`` writing a stored transcript again) before it starts.

Claiming is one statement on both databases: an ``UPDATE`` of the oldest claimable row, whose choice skips
rows other flushers have locked on Postgres (``FOR UPDATE SKIP LOCKED``); SQLite runs the whole statement
under its one write lock. A claim is given as a length (``lasting``): its end is written, and every claim
checked, on the database's clock (:func:`teamstore.db.clock.shared_now`: on Postgres the server's), so
flushers, workers and erasures on hosts whose clocks disagree still agree on which claims stand.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, and_, delete, exists, func, insert, or_, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.schema import outbox, subjects
from teamstore.db import fence
from teamstore.db.clock import shared_later, shared_now, utc
from teamstore.db.engine import describe_failure
from teamstore.errors import StoreUnavailable

T = TypeVar("T")


@dataclass(frozen=True)
class Queued:
    """A claimed row: where its transcript goes and for whom (``body`` is dropped once it is sent)."""

    run_id: str
    object_key: str
    subject_key: str
    body: bytes | None = None
    queued_at: datetime | None = None


def new_owner() -> str:
    """A name for one flusher or worker: host, process and a random part (under 64 characters)."""
    return f"{socket.gethostname()[:24]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def held(subject_key: Any) -> ColumnElement[bool]:
    """True while an erasure fences the subject's user: nothing of theirs is queued or delivered."""
    return exists().where(subjects.c.subject_key == subject_key, fence.held(subjects.c.user_id))


async def _run(what: str, fn: Callable[[], Awaitable[T]]) -> T:
    try:
        return await fn()
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"could not {what} in the transcript outbox: {describe_failure(exc)}",
            hint="check the database and run `teamstore db upgrade`; a claim left behind passes by itself",
        ) from exc


async def claim_next(engine: AsyncEngine, owner: str, lasting: timedelta) -> Queued | None:
    """Claim the oldest queued transcript that nobody holds and no erasure fences, with its body.

    Args:
        engine: The state database.
        owner: From :func:`new_owner`.
        lasting: How long from now the claim lasts if it is never renewed or settled.

    Returns:
        The row, or ``None`` when none is left to claim.

    Raises:
        StoreUnavailable: The database failed.
    """
    dialect = engine.dialect.name
    now = shared_now(dialect)
    queued = outbox.alias("queued")
    oldest = select(queued.c.run_id).where(_claimable(queued, now)).order_by(queued.c.created_at).limit(1)
    if dialect == "postgresql":
        oldest = oldest.with_for_update(skip_locked=True)
    stmt = (
        update(outbox)
        .where(outbox.c.run_id.in_(oldest), _claimable(outbox, now))
        .values(claimed_by=owner, claimed_until=shared_later(dialect, lasting))
        .returning(outbox.c.run_id, outbox.c.object_key, outbox.c.subject_key, outbox.c.body, outbox.c.created_at)
    )

    async def go() -> Queued | None:
        async with engine.begin() as conn:
            row = (await conn.execute(stmt)).first()
        return None if row is None else Queued(row.run_id, row.object_key, row.subject_key, bytes(row.body),
                                               utc(row.created_at))

    return await _run("claim a queued transcript", go)


def _claimable(table: Any, now: Any) -> ColumnElement[bool]:
    unclaimed = or_(table.c.claimed_until.is_(None), table.c.claimed_until < now)
    return and_(table.c.body.is_not(None), unclaimed, ~held(table.c.subject_key))


async def renew(engine: AsyncEngine, run_id: str, owner: str, lasting: timedelta) -> bool:
    """Move ``owner``'s claim on the row on to ``lasting`` from now, if it still holds it and it has not passed.

    Returns:
        False if the claim had passed or the row is gone (an erasure that waited it out may have gone on).

    Raises:
        StoreUnavailable: The database failed.
    """
    dialect = engine.dialect.name
    stmt = (
        update(outbox)
        .where(outbox.c.run_id == run_id, outbox.c.claimed_by == owner, outbox.c.claimed_until > shared_now(dialect))
        .values(claimed_until=shared_later(dialect, lasting))
    )

    async def go() -> bool:
        async with engine.begin() as conn:
            return bool((await conn.execute(stmt)).rowcount)

    return await _run("renew the claim on a queued transcript", go)


async def settle(
    engine: AsyncEngine, run_id: str, owner: str, lasting: timedelta | None, error: str | None = None
) -> None:
    """Settle ``owner``'s claim once its upload has ended: keep it for ``lasting`` from now if the upload may
    still land, or release it (``None``) if it cannot. ``error`` counts a failed attempt and says why.

    Raises:
        StoreUnavailable: The database failed (the claim then passes by itself).
    """
    values: dict[str, Any] = {"claimed_until": None, "claimed_by": None}
    if lasting is not None:
        values.update(claimed_until=shared_later(engine.dialect.name, lasting), claimed_by=owner)
    if error is not None:
        values.update(attempts=outbox.c.attempts + 1, last_error=error[:512])
    stmt = update(outbox).where(outbox.c.run_id == run_id, outbox.c.claimed_by == owner).values(**values)

    async def go() -> None:
        async with engine.begin() as conn:
            await conn.execute(stmt)

    await _run("settle the claim on a queued transcript", go)


async def hold(
    engine: AsyncEngine, record_id: str, object_key: str, subject_key: str, owner: str, lasting: timedelta
) -> None:
    """Put on record, before it starts, an upload of ``object_key`` that is not a queued transcript's: a row
    with no body (nothing of the transcript), claimed by ``owner`` for ``lasting``. An erasure of the subject
    waits for it as for any claim; :func:`renew` and :func:`settle` move it on or end it, and
    :func:`purge_settled` drops it once it has passed, also when its sender was killed.

    Args:
        engine: The state database.
        record_id: The row's key, a name no run has (the outbox is keyed by run id).
        object_key: Where the upload goes.
        subject_key: Its subject.
        owner: From :func:`new_owner`.
        lasting: How long from now the claim lasts if it is never renewed or settled.

    Raises:
        StoreUnavailable: The database failed: nothing is on record, and the upload must not start.
    """
    stmt = insert(outbox).values(
        run_id=record_id, object_key=object_key, subject_key=subject_key, body=None,
        created_at=shared_now(engine.dialect.name), attempts=0, claimed_by=owner, claimed_until=shared_later(engine.dialect.name, lasting),
    )

    async def go() -> None:
        async with engine.begin() as conn:
            await conn.execute(stmt)

    await _run("record an upload that may land", go)


async def in_doubt_until(engine: AsyncEngine, subject_key: str) -> datetime | None:
    """The latest time an upload of the subject's transcripts may still land, if any may (on the database's
    clock: on Postgres the server's).

    Raises:
        StoreUnavailable: The database failed.
    """
    stmt = select(func.max(outbox.c.claimed_until)).where(
        outbox.c.subject_key == subject_key, outbox.c.claimed_until > shared_now(engine.dialect.name)
    )

    async def go() -> datetime | None:
        async with engine.connect() as conn:
            return utc(await conn.scalar(stmt))

    return await _run("read the uploads that may still land", go)


async def purge_settled(engine: AsyncEngine) -> int:
    """Drop rows that only recorded an upload that may land, once it no longer can.

    Raises:
        StoreUnavailable: The database failed.
    """
    stmt = delete(outbox).where(
        outbox.c.body.is_(None),
        or_(outbox.c.claimed_until.is_(None), outbox.c.claimed_until < shared_now(engine.dialect.name)),
    )

    async def go() -> int:
        async with engine.begin() as conn:
            return (await conn.execute(stmt)).rowcount or 0

    return await _run("drop settled uploads", go)
