"""What a run of an erasure request records: each step's result, who ran each attempt, and the receipt it
finishes with.

    from teamstore.erasure import record

    attempt = await record.start_attempt(engine, "req-1", operator="dpo")       # under the request's lease
    await record.record_step(engine, "req-1", "resume_state", StoreResult(...), owner="host:123")
    if not await record.finish(engine, row, receipt, owner="host:123", attempt=attempt):
        ...                                           # another coordinator took the request over

A step is recorded in the caller's transaction (:func:`write_step`), so a SQL delete and its record commit
together, and only while the coordinator still holds the lease (:mod:`teamstore.erasure.requests`). Finishing
stores the receipt and, unless the request failed, lifts the fence its opening raised. Every function raises
``teamstore.errors`` types only.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from teamstore.audit.schema import subject_stores
from teamstore.db.clock import shared_now, utc
from teamstore.db.fence import user_holds
from teamstore.db.statements import dialect_insert
from teamstore.erasure.receipt import (
    FINISHED,
    Attempt,
    Counts,
    Receipt,
    RequestStatus,
    StepStatus,
    StoreResult,
)
from teamstore.erasure.requests import RequestRow, db, taken_over
from teamstore.erasure.schema import erasure_attempts, erasure_requests, erasure_steps


async def write_step(
    conn: AsyncConnection, request_id: str, store: str, result: StoreResult, owner: str | None = None
) -> None:
    """Record one step inside the caller's transaction (so a SQL delete and its record commit together).

    With ``owner``, only while that coordinator still holds the request's lease: the check locks the
    request row until the transaction ends, so a coordinator that lost its lease mid-step commits nothing.

    Raises:
        ErasureConflict: Another coordinator holds the lease now (the caller's transaction rolls back).
    """
    if owner is not None:
        await _holding(conn, request_id, owner)
    values = {"status": str(result.status), "counts": result.counts.model_dump(), "detail": result.detail,
              "updated_at": shared_now(conn.dialect.name), "verified_at": result.verified_at}
    # An upsert: no insert that could meet a row of the same key and fail with the request id in the log.
    stmt = dialect_insert(conn.dialect.name)(erasure_steps).values(request_id=request_id, store=store, **values)
    await conn.execute(stmt.on_conflict_do_update(index_elements=[erasure_steps.c.request_id, erasure_steps.c.store],
                                                  set_=values))


async def _holding(conn: AsyncConnection, request_id: str, owner: str) -> None:
    """Check, in the caller's transaction, that ``owner`` still holds the request's lease, locking its row until
    the transaction ends.

    Raises:
        ErasureConflict: Another coordinator holds the lease now.
    """
    r = erasure_requests.c
    held = await conn.execute(update(erasure_requests).where(r.request_id == request_id, r.owner == owner)
                              .values(updated_at=shared_now(conn.dialect.name)))
    if not held.rowcount:
        raise taken_over(request_id)


async def start_wait(engine: AsyncEngine, request_id: str, store: str, owner: str | None = None) -> None:
    """Record that the step ``store`` begins its wait now, on the database's clock (:func:`shared_now`: on Postgres
    the server's, which a rerun on another host reads too); with ``owner``, only while it holds the lease. Called
    in a transaction of its own, after what the wait is for has committed: on Postgres ``now()`` is when its
    transaction began. A step with no record yet records nothing (a rerun then waits the whole time).

    Raises:
        ErasureConflict: Another coordinator holds the lease now.
        StoreUnavailable: The database could not be reached.
    """
    s = erasure_steps.c
    async with db(engine, "record the erasure step's wait") as conn:
        if owner is not None:
            await _holding(conn, request_id, owner)
        await conn.execute(update(erasure_steps).where(s.request_id == request_id, s.store == store)
                           .values(wait_started_at=shared_now(conn.dialect.name)))


async def wait_started(engine: AsyncEngine, request_id: str, store: str) -> datetime | None:
    """When the step ``store`` began its wait (:func:`start_wait`), if an earlier attempt recorded it.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    s = erasure_steps.c
    async with db(engine, "read the erasure step's wait") as conn:
        began = await conn.scalar(select(s.wait_started_at).where(s.request_id == request_id, s.store == store))
    return utc(began)


async def record_step(
    engine: AsyncEngine, request_id: str, store: str, result: StoreResult, owner: str | None = None
) -> None:
    """Record one step in its own transaction (with ``owner``, only while it holds the lease).

    Raises:
        ErasureConflict: Another coordinator holds the lease now.
        StoreUnavailable: The database could not be reached.
    """
    async with db(engine, "record the erasure step") as conn:
        await write_step(conn, request_id, store, result, owner)


PART = "@"
"""Between a step's name and its part's digest in the record of one part (:func:`part_name`)."""


def part_name(step: str, part: str) -> str:
    """The record of one part of a step (one transcript store of several): the step's name, ``@`` and a digest of
    ``part`` (the store's URL, kept in the record's ``detail``), short enough for the steps' store column."""
    return f"{step}{PART}{hashlib.sha256(part.encode()).hexdigest()[:16]}"


async def load_steps(engine: AsyncEngine, request_id: str) -> dict[str, StoreResult]:
    """Every recorded step of the request, by store name (not the records of their parts)."""
    s = erasure_steps.c
    async with db(engine, "read the erasure steps") as conn:
        rows = (await conn.execute(select(erasure_steps).where(s.request_id == request_id,
                                                               ~s.store.contains(PART, autoescape=True)))).all()
    return {r.store: _result(r) for r in rows}


async def load_parts(engine: AsyncEngine, request_id: str, step: str) -> dict[str, StoreResult]:
    """Every recorded part of the request's ``step`` (:func:`record_part`), by the part it is (its store's URL).

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    s = erasure_steps.c
    async with db(engine, "read the erasure step's parts") as conn:
        rows = (await conn.execute(select(erasure_steps).where(
            s.request_id == request_id, s.store.startswith(step + PART, autoescape=True)))).all()
    return {str(r.detail): _result(r).model_copy(update={"detail": None}) for r in rows}


async def part_times(engine: AsyncEngine, request_id: str, step: str) -> dict[str, datetime]:
    """When each part of the request's ``step`` was last recorded (:func:`load_parts`), by the part it is: for a
    store a pass left holding versions, when that pass found them.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    s = erasure_steps.c
    async with db(engine, "read when the erasure step's parts were recorded") as conn:
        rows = (await conn.execute(select(s.detail, s.updated_at).where(
            s.request_id == request_id, s.store.startswith(step + PART, autoescape=True)))).all()
    return {str(r.detail): at for r in rows if (at := utc(r.updated_at)) is not None}


async def record_part(
    engine: AsyncEngine, request_id: str, step: str, part: str, result: StoreResult, owner: str | None = None
) -> None:
    """Record what ``step`` found and did in one ``part`` (its store's URL), apart from the step's own record.

    Raises:
        ErasureConflict: Another coordinator holds the lease now.
        StoreUnavailable: The database could not be reached.
    """
    await record_step(engine, request_id, part_name(step, part), result.model_copy(update={"detail": part}), owner)


async def replace_parts(
    engine: AsyncEngine, request_id: str, step: str, parts: dict[str, StoreResult], owner: str | None = None
) -> None:
    """Record ``parts`` (by the part each is) as every part of ``step``, in one transaction: the parts recorded
    before and not among them are forgotten, so a reader never sees some of one set beside some of another.

    Raises:
        ErasureConflict: Another coordinator holds the lease now.
        StoreUnavailable: The database could not be reached.
    """
    s = erasure_steps.c
    async with db(engine, "record the erasure step's parts") as conn:
        if owner is not None:
            await _holding(conn, request_id, owner)
        await conn.execute(delete(erasure_steps).where(s.request_id == request_id,
                                                       s.store.startswith(step + PART, autoescape=True)))
        rows = [{"request_id": request_id, "store": part_name(step, part), "status": str(result.status),
                 "counts": result.counts.model_dump(), "detail": part} for part, result in parts.items()]
        if rows:  # one statement for them all: a store may hold thousands of versions
            await conn.execute(insert(erasure_steps).values(updated_at=shared_now(conn.dialect.name)), rows)


def _result(row: Any) -> StoreResult:
    return StoreResult(status=StepStatus(row.status), counts=Counts(**row.counts), detail=row.detail,
                       verified_at=utc(row.verified_at))


async def _close_parts(conn: AsyncConnection, request_id: str, status: RequestStatus) -> None:
    """A finished request needs its parts' records no more; a held one's rerun, once the hold is lifted, goes back
    to each part a hold kept readable versions in (its counts kept: the rerun lists a subset of them)."""
    s = erasure_steps.c
    parts = and_(s.request_id == request_id, s.store.contains(PART, autoescape=True))
    if status in FINISHED:
        await conn.execute(delete(erasure_steps).where(parts))
    elif status is RequestStatus.RETAINED_UNDER_HOLD:
        await conn.execute(update(erasure_steps).where(parts, s.status == str(StepStatus.RETAINED_UNDER_HOLD))
                           .values(status=str(StepStatus.ENUMERATED)))


async def start_attempt(engine: AsyncEngine, request_id: str, operator: str) -> int:
    """Record that ``operator`` runs the request now (called under its lease); the attempt's number.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    a = erasure_attempts.c
    async with db(engine, "record who runs the erasure") as conn:
        last = await conn.scalar(select(func.max(a.attempt)).where(a.request_id == request_id))
        number = int(last or 0) + 1
        await conn.execute(insert(erasure_attempts).values(request_id=request_id, attempt=number, operator=operator,
                                                           started_at=shared_now(conn.dialect.name)))
    return number


async def _end_attempt(conn: AsyncConnection, request_id: str, attempt: int, status: RequestStatus | None) -> None:
    a = erasure_attempts.c
    await conn.execute(update(erasure_attempts).where(a.request_id == request_id, a.attempt == attempt)
                       .values(ended_at=shared_now(conn.dialect.name), status=status))


async def end_attempt(engine: AsyncEngine, request_id: str, attempt: int) -> None:
    """Mark an attempt that stopped without a verdict (taken over, another store to empty first) as ended.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    async with db(engine, "record the end of the erasure attempt") as conn:
        await _end_attempt(conn, request_id, attempt, None)


async def load_attempts(engine: AsyncEngine, request_id: str) -> list[Attempt]:
    """Every attempt of the request, first first.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    a = erasure_attempts.c
    async with db(engine, "read the erasure attempts") as conn:
        rows = (await conn.execute(select(erasure_attempts).where(a.request_id == request_id)
                                   .order_by(a.attempt))).all()
    return [Attempt(operator=r.operator, started_at=utc(r.started_at) or datetime.now(UTC), ended_at=utc(r.ended_at),
                    status=RequestStatus(r.status) if r.status else None) for r in rows]


async def finish(
    engine: AsyncEngine, row: RequestRow, receipt: Receipt, owner: str, subject_key: str | None = None,
    attempt: int | None = None,
) -> bool:
    """Store the receipt; unless failed, lift the fence and forget the raw user id.

    A ``retained_under_hold`` request keeps the subject key (not the user id) so it can be rerun once
    the legal hold is lifted, the keyed hash of the user id, so that rerun is its user's alone, and the record
    of the subject's transcript stores, so the rerun talks to them (to each one a hold kept readable versions in
    again: :func:`_close_parts`). A ``failed`` request keeps all of it and its fence: rerun it to resume. A
    completed (or ``no_match``) one forgets the subject's stores, its key and the hash.

    Args:
        engine: The state database.
        row: The request.
        receipt: What to store.
        owner: The coordinator's lease: nothing is written unless it still holds it.
        subject_key: The subject the request erased, if it had one.
        attempt: This run's attempt number: it is ended with the receipt's status, in the same transaction.

    Returns:
        False (and nothing written) if another coordinator has taken the request over.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    # Whether it is overdue is judged each time it is read (teamstore.erasure.verdict.stored_receipt), not kept, and
    # how the logs name it is worked out from its id.
    values: dict[str, Any] = {"status": receipt.status,
                              "receipt": receipt.model_dump(mode="json", exclude={"overdue", "logged_as"}),
                              "updated_at": shared_now(engine.dialect.name), "completed_at": receipt.completed_at}
    if receipt.status is not RequestStatus.FAILED:
        values["user_id"] = None
        if receipt.status in FINISHED:  # the hash of the user id goes with the subject key: both only serve a rerun
            values["subject_key"] = values["user_hash"] = None
    r = erasure_requests.c
    async with db(engine, "finish the erasure request") as conn:
        stored = await conn.execute(update(erasure_requests)
                                    .where(r.request_id == row.request_id, r.owner == owner).values(**values))
        if not stored.rowcount:
            return False  # nothing was written: no fence lifted on another coordinator's behalf
        if receipt.status is not RequestStatus.FAILED and row.user_id is not None:
            await conn.execute(delete(user_holds).where(
                user_holds.c.user_id == row.user_id, user_holds.c.request_id == row.request_id))
        if receipt.status in FINISHED and subject_key is not None:
            await conn.execute(delete(subject_stores).where(subject_stores.c.subject_key == subject_key))
        await _close_parts(conn, row.request_id, receipt.status)
        if attempt is not None:
            await _end_attempt(conn, row.request_id, attempt, receipt.status)
    return True
