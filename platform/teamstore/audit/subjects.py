"""Pseudonymous keys: a random subject key per user, a keyed hash per session.

    from teamstore.audit.subjects import get_or_create_subject, find_subject, session_key

    subject = await get_or_create_subject(engine, "alice@example.com")   # random, stored in ts_subjects
    key = session_key(subject, "session-42")                              # HMAC of the session id
    prefix = subject_prefix(subject)          # every transcript object of the user, without a scan
    await record_store(engine, subject, store.url)     # before the first upload there: erasure reaches it

User ids are matched exactly: no case folding and no unicode normalisation, so ``"Alice"`` and ``"alice"``
(or NFC and NFD forms of one name) are different users. The session key is an HMAC keyed by the subject
key, so once erasure deletes the subject row nobody can link a session key back to a session id.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, exists, literal, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.schema import subject_stores, subjects
from teamstore.db.engine import describe_failure
from teamstore.db.fence import held
from teamstore.db.statements import insert_new
from teamstore.errors import ErasureInProgress, StoreUnavailable
from teamstore.ids import check_id
from teamstore.state.statements import Param

USER, SUBJECT = Param("u", subjects.c.user_id.type), Param("subject", subjects.c.subject_key.type)
"""The inputs of the audit's statements on a run's path: the raw user id and a subject key."""


def new_subject_key() -> str:
    """A fresh random subject key (128 bits, hex)."""
    return secrets.token_hex(16)


def session_key(subject_key: str, session_id: str) -> str:
    """The pseudonymous key of one session of one subject.

    Args:
        subject_key: From :func:`get_or_create_subject` or :func:`find_subject`.
        session_id: The raw session id, matched exactly.

    Returns:
        32 hex characters: HMAC-SHA256 of the session id keyed by the subject key.
    """
    digest = hmac.new(subject_key.encode("utf-8"), session_id.encode("utf-8"), hashlib.sha256)
    return digest.hexdigest()[:32]


def subject_lookup() -> Select[Any]:
    """The subject key of the user ``u`` (``NULL`` if none) and whether an erasure holds ``u``: one row, one
    round trip, the end-of-run fence of the audit's writes."""
    found = select(subjects.c.subject_key).where(subjects.c.user_id == USER).scalar_subquery()
    return select(found, held(USER))


async def find_subject(engine: AsyncEngine, user_id: str) -> str | None:
    """The subject key of ``user_id``, or ``None`` if the user never ran (or was erased).

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    try:
        async with engine.connect() as conn:
            found = await conn.scalar(select(subjects.c.subject_key).where(subjects.c.user_id == user_id))
    except SQLAlchemyError as exc:
        raise _unavailable(exc) from exc
    return str(found) if found is not None else None


async def get_or_create_subject(engine: AsyncEngine, user_id: str) -> str:
    """The subject key of ``user_id``, created on first use; safe under concurrent workers.

    Args:
        engine: The state database.
        user_id: The raw user id (exact string).

    Returns:
        The subject key.

    Raises:
        InvalidIdentifier: The id breaks the id rule (:mod:`teamstore.ids`).
        StoreUnavailable: The database could not be reached.
    """
    check_id("user_id", user_id)
    existing = await find_subject(engine, user_id)
    if existing is not None:
        return existing
    # Workers racing on a new user's first runs must not let the insert fail: Postgres would log the
    # violated key, the raw id, where erasure never reaches. The first insert wins; the others read it.
    stmt = insert_new(engine.dialect.name, subjects).values(
        user_id=user_id, subject_key=new_subject_key(), created_at=datetime.now(UTC))
    try:
        async with engine.begin() as conn:
            await conn.execute(stmt)
            # A statement of its own: under READ COMMITTED it sees the row the winner committed.
            found = await conn.scalar(select(subjects.c.subject_key).where(subjects.c.user_id == user_id))
    except SQLAlchemyError as exc:
        raise _unavailable(exc) from exc
    if found is None:  # a random key of 128 bits already taken: never seen, but never a silent None
        raise StoreUnavailable("could not create an audit subject: its random key was taken",
                               hint="run again: the next key is drawn afresh")
    return str(found)


async def record_store(engine: AsyncEngine, subject_key: str, store: str, *, erasing: bool = False) -> None:
    """Record that ``store`` receives transcripts of the subject, before the first of them is written there.

    An erasure reads these records to know every store it must reach (:func:`recorded_stores`). Recording one
    already recorded changes nothing. The record is written only while the subject's mapping exists, in the
    insert's own statement: a worker still holding a subject key an erasure deleted records nothing after the
    erasure's receipt (which forgets the subject's stores).

    Args:
        engine: The state database.
        subject_key: The subject.
        store: The store's ``url`` (``s3://bucket/prefix``, or a folder's resolved ``file://`` URL).
        erasing: The subject's erasure records the store it empties, for its own rerun, also after an earlier
            attempt deleted the mapping.

    Raises:
        ErasureInProgress: The subject's mapping is gone (an erasure deleted it): write no transcript there.
        StoreUnavailable: The database could not be reached: write no transcript there.
    """
    c = subject_stores.c
    row = {"subject_key": literal(subject_key, c.subject_key.type), "store": literal(store, c.store.type),
           "created_at": literal(datetime.now(UTC), c.created_at.type)}
    mapped = exists().where(subjects.c.subject_key == subject_key)
    source = select(*(value.label(name) for name, value in row.items()))
    stmt = insert_new(engine.dialect.name, subject_stores).from_select(
        list(row), source if erasing else source.where(mapped))
    try:
        async with engine.begin() as conn:
            recorded = (await conn.execute(stmt.returning(c.subject_key))).first() is not None
            gone = not recorded and not erasing and not await conn.scalar(select(mapped))
    except SQLAlchemyError as exc:
        raise _unavailable(exc) from exc
    if gone:
        raise ErasureInProgress("no transcript store is recorded for a subject an erasure deleted",
                                hint="nothing to fix: the user was erased; write nothing of theirs")


async def recorded_stores(engine: AsyncEngine, subject_key: str) -> dict[str, bool]:
    """Every store recorded for the subject, each with whether an erasure has emptied it already.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    c = subject_stores.c
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(select(c.store, c.erased_at).where(c.subject_key == subject_key))).all()
    except SQLAlchemyError as exc:
        raise _unavailable(exc) from exc
    return {str(store): erased is not None for store, erased in rows}


async def mark_store_erased(engine: AsyncEngine, subject_key: str, store: str) -> None:
    """Record that an erasure emptied ``store`` of the subject (while another store still holds some).

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    c = subject_stores.c
    try:
        async with engine.begin() as conn:
            await conn.execute(update(subject_stores).where(c.subject_key == subject_key, c.store == store)
                               .values(erased_at=datetime.now(UTC)))
    except SQLAlchemyError as exc:
        raise _unavailable(exc) from exc


def _unavailable(exc: Exception) -> StoreUnavailable:
    return StoreUnavailable(
        f"could not read or write audit subjects: {describe_failure(exc)}",
        hint="check TEAMSTORE_DATABASE_URL and run `teamstore db upgrade`",
    )
