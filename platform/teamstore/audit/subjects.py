"""Pseudonymous keys: a random subject key per user, a keyed hash per session.

    from teamstore.audit.subjects import ensure_subject, lookup_subject, session_key

    subject, secret = await ensure_subject(engine, "alice@example.com")   # both random, stored in ts_subjects
    key = session_key(secret, "session-42")                               # HMAC of the session id
    prefix = subject_prefix(subject)          # every transcript object of the user, without a scan
    await record_store(engine, subject, store.url, endpoint=store_endpoint(store))  # erasure reaches it

User ids are matched exactly: no case folding and no unicode normalisation, so ``"Alice"`` and ``"alice"``
(or NFC and NFD forms of one name) are different users.

The subject key is published: in the ledger and its exports, transcripts' object keys and spans, each beside
session keys. So the session key is an HMAC keyed by a second random value of the subject, its session
secret, which is kept only in ``ts_subjects`` and deleted with the subject by an erasure: without it a
guessed session id cannot be checked against a session key, and after the erasure nobody has it. Subjects
made before migration 0018 got their subject key as their secret, so that their sessions keep the keys they
had: a guessable session id of theirs stays confirmable from what was published, even after an erasure.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import UTC, datetime
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Select, exists, literal, or_, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.schema import SUBJECT_STORES_SINCE, subject_stores, subjects, usage
from teamstore.db.engine import describe_failure
from teamstore.db.fence import held
from teamstore.db.statements import insert_new
from teamstore.errors import ErasureInProgress, StoreUnavailable
from teamstore.ids import check_id
from teamstore.state.schema import store_settings
from teamstore.state.statements import Param

USER, SUBJECT = Param("u", subjects.c.user_id.type), Param("subject", subjects.c.subject_key.type)
"""The inputs of the audit's statements on a run's path: the raw user id and a subject key."""


class Subject(NamedTuple):
    """A user's subject: the key that stands for the user wherever the audit writes, and the secret that keys
    the user's session keys (never written anywhere but ``ts_subjects``)."""

    key: str
    session_secret: str

    def __repr__(self) -> str:  # a subject in a log line or a traceback must not carry its secret
        return f"Subject(key={self.key!r}, session_secret=...)"


def new_subject_key() -> str:
    """A fresh random subject key (128 bits, hex)."""
    return secrets.token_hex(16)


def new_session_secret() -> str:
    """A fresh random session secret (128 bits, hex), drawn independently of the subject key."""
    return secrets.token_hex(16)


def session_key(session_secret: str, session_id: str) -> str:
    """The pseudonymous key of one session of one subject.

    Args:
        session_secret: The subject's :attr:`Subject.session_secret`, from :func:`ensure_subject` or
            :func:`lookup_subject`.
        session_id: The raw session id, matched exactly.

    Returns:
        32 hex characters: HMAC-SHA256 of the session id keyed by the session secret.
    """
    digest = hmac.new(session_secret.encode("utf-8"), session_id.encode("utf-8"), hashlib.sha256)
    return digest.hexdigest()[:32]


def subject_lookup() -> Select[Any]:
    """The subject key and session secret of the user ``u`` (``NULL`` if none) and whether an erasure holds
    ``u``: one row, one round trip, the end-of-run fence of the audit's writes."""
    s = subjects.c
    key = select(s.subject_key).where(s.user_id == USER).scalar_subquery()
    secret = select(s.session_secret).where(s.user_id == USER).scalar_subquery()
    return select(key, secret, held(USER))


def subject_of(key: Any, secret: Any) -> Subject | None:
    """The subject of a row's key and secret columns (``None`` if the row had no subject)."""
    return None if key is None else Subject(str(key), str(secret))


async def lookup_subject(engine: AsyncEngine, user_id: str) -> Subject | None:
    """The subject of ``user_id`` (key and session secret), or ``None`` if the user never ran (or was erased).

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    try:
        async with engine.connect() as conn:
            row = (await conn.execute(_by_user(user_id))).first()
    except SQLAlchemyError as exc:
        raise _unavailable(exc) from exc
    return None if row is None else subject_of(*row)


async def find_subject(engine: AsyncEngine, user_id: str) -> str | None:
    """The subject key of ``user_id``, or ``None`` if the user never ran (or was erased).

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    subject = await lookup_subject(engine, user_id)
    return None if subject is None else subject.key


async def ensure_subject(engine: AsyncEngine, user_id: str) -> Subject:
    """The subject of ``user_id``, created on first use with a random key and session secret; safe under
    concurrent workers. Never created for a user an erasure holds (the insert checks the fence in its own
    statement). A session makes it as it opens (:meth:`teamstore.audit.pseudonyms.Pseudonyms.open_session`);
    its runs never do.

    Args:
        engine: The state database.
        user_id: The raw user id (exact string).

    Returns:
        The subject's key and session secret.

    Raises:
        InvalidIdentifier: The id breaks the id rule (:mod:`teamstore.ids`).
        ErasureInProgress: The user has no subject and an erasure holds them: none is made.
        StoreUnavailable: The database could not be reached.
    """
    check_id("user_id", user_id)
    existing = await lookup_subject(engine, user_id)
    if existing is not None:
        return existing
    # Workers racing on a new user's first sessions must not let the insert fail: Postgres would log the
    # violated key, the raw id, where erasure never reaches. The first insert wins; the others read it.
    s = subjects.c
    row = {"user_id": literal(user_id, s.user_id.type),
           "subject_key": literal(new_subject_key(), s.subject_key.type),
           "session_secret": literal(new_session_secret(), s.session_secret.type),
           "created_at": literal(datetime.now(UTC), s.created_at.type)}
    source = select(*(value.label(name) for name, value in row.items())).where(~held(user_id))
    stmt = insert_new(engine.dialect.name, subjects).from_select(list(row), source)
    try:
        async with engine.begin() as conn:
            await conn.execute(stmt)
            # A statement of its own: under READ COMMITTED it sees the row the winner committed.
            key, secret, fenced = (await conn.execute(subject_lookup(), {USER.key: user_id})).one()
    except SQLAlchemyError as exc:
        raise _unavailable(exc) from exc
    if key is not None:
        return Subject(str(key), str(secret))
    if fenced:
        raise ErasureInProgress("no audit subject is made for a user an erasure request holds",
                                hint="nothing to fix: the user is being erased; they may start over after it")
    # A random key of 128 bits already taken: never seen, but never a silent None.
    raise StoreUnavailable("could not create an audit subject: its random key was taken",
                           hint="run again: the next key is drawn afresh")


async def get_or_create_subject(engine: AsyncEngine, user_id: str) -> str:
    """The subject key of ``user_id``, created on first use (:func:`ensure_subject`).

    Raises:
        InvalidIdentifier: The id breaks the id rule (:mod:`teamstore.ids`).
        StoreUnavailable: The database could not be reached.
    """
    return (await ensure_subject(engine, user_id)).key


async def record_store(engine: AsyncEngine, subject_key: str, store: str, *, endpoint: str | None = None,
                       erasing: bool = False) -> None:
    """Record that ``store`` receives transcripts of the subject, before the first of them is written there.

    An erasure reads these records to know every store it must reach (:func:`recorded_stores`). Recording one
    already recorded changes nothing. The record is written only while the subject's mapping exists, in the
    insert's own statement: a worker still holding a subject key an erasure deleted records nothing after the
    erasure's receipt (which forgets the subject's stores).

    Args:
        engine: The state database.
        subject_key: The subject.
        store: The store's ``url`` (``s3://bucket/prefix``, or a folder's resolved ``file://`` URL).
        endpoint: The endpoint the store is reached at (:func:`teamstore.audit.transcripts.store_endpoint`):
            ``"aws"`` for AWS's own S3, ``None`` for a folder.
        erasing: The subject's erasure records the store it empties, for its own rerun, also after an earlier
            attempt deleted the mapping; and the endpoint it reached it at, where a record from before endpoints
            were recorded (migration 0029) has none. A known endpoint is never overwritten, by a pass nor by a
            writer (a writer's store recorded already keeps its record).

    Raises:
        ErasureInProgress: The subject's mapping is gone (an erasure deleted it): write no transcript there.
        StoreUnavailable: The database could not be reached: write no transcript there.
    """
    c = subject_stores.c
    row = {"subject_key": literal(subject_key, c.subject_key.type), "store": literal(store, c.store.type),
           "created_at": literal(datetime.now(UTC), c.created_at.type), "endpoint": literal(endpoint, c.endpoint.type)}
    mapped = exists().where(subjects.c.subject_key == subject_key)
    source = select(*(value.label(name) for name, value in row.items()))
    stmt = insert_new(engine.dialect.name, subject_stores).from_select(
        list(row), source if erasing else source.where(mapped))
    try:
        async with engine.begin() as conn:
            recorded = (await conn.execute(stmt.returning(c.subject_key))).first() is not None
            gone = not recorded and not erasing and not await conn.scalar(select(mapped))
            if erasing and endpoint is not None:
                await conn.execute(update(subject_stores).where(c.subject_key == subject_key, c.store == store,
                                                                c.endpoint.is_(None)).values(endpoint=endpoint))
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
    rows = await _stores_with(engine, subject_key, subject_stores.c.erased_at)
    return {store: erased is not None for store, erased in rows}


async def recorded_endpoints(engine: AsyncEngine, subject_key: str) -> dict[str, str | None]:
    """The endpoint every store recorded for the subject was reached at (``"aws"`` for AWS's own S3): ``None`` for
    a folder, or a record from before endpoints were recorded (migration 0029), unknown.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    rows = await _stores_with(engine, subject_key, subject_stores.c.endpoint)
    return {store: None if endpoint is None else str(endpoint) for store, endpoint in rows}


async def endpoints_of(engine: AsyncEngine, store: str) -> set[str]:
    """Every endpoint ``store`` is recorded at, for any subject (``"aws"`` for AWS's own S3).

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    c = subject_stores.c
    query = select(c.endpoint).where(c.store == store, c.endpoint.is_not(None)).distinct()
    try:
        async with engine.connect() as conn:
            return {str(endpoint) for endpoint in (await conn.scalars(query)).all()}
    except SQLAlchemyError as exc:
        raise _unavailable(exc) from exc


async def _stores_with(engine: AsyncEngine, subject_key: str, column: ColumnElement[Any]) -> list[tuple[str, Any]]:
    """Each store recorded for the subject, with ``column`` of its record."""
    c = subject_stores.c
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(select(c.store, column).where(c.subject_key == subject_key))).all()
    except SQLAlchemyError as exc:
        raise _unavailable(exc) from exc
    return [(str(store), value) for store, value in rows]


async def store_ever_written(engine: AsyncEngine, store: str) -> bool:
    """Whether transcripts of this database may ever have been written to ``store``: it is recorded for a subject
    (one an erasure has emptied it of too), or the ledger holds runs from before stores were recorded (migration
    0010), whose transcripts went to a store no record names. A database that never wrote a transcript anywhere
    has neither.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    since = select(store_settings.c.updated_at).where(store_settings.c.name == SUBJECT_STORES_SINCE).scalar_subquery()
    recorded = exists().where(subject_stores.c.store == store)
    unrecorded = exists().where(usage.c.finished_at < since)
    try:
        async with engine.connect() as conn:
            return bool(await conn.scalar(select(or_(recorded, unrecorded))))
    except SQLAlchemyError as exc:
        raise _unavailable(exc) from exc


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


def _by_user(user_id: str) -> Select[Any]:
    return select(subjects.c.subject_key, subjects.c.session_secret).where(subjects.c.user_id == user_id)


def _unavailable(exc: Exception) -> StoreUnavailable:
    return StoreUnavailable(
        f"could not read or write audit subjects: {describe_failure(exc)}",
        hint="check TEAMSTORE_DATABASE_URL and run `teamstore db upgrade`",
    )
