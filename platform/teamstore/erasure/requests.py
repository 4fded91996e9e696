"""The durable erasure request: open or resume it, read it, lease it (its ids and reason are checked by
:mod:`teamstore.erasure.request_checks`).

    from teamstore.erasure import requests

    row = await requests.open_request(engine, "req-1", "alice", reason="GDPR art. 17", due_days=30)
    if await requests.claim(engine, "req-1", owner="host:123", lease_seconds=120):
        ...                       # run it: teamstore.erasure.record records each step, and finishes it
        await requests.release(engine, "req-1", owner="host:123")

Opening inserts the request row and the user's ``ts_user_holds`` row in one transaction: from that
commit on the runtime refuses new sessions, saves, transcript uploads and ledger rows for the user, until
the request finishes (:func:`teamstore.erasure.record.finish`). Every function raises ``teamstore.errors``
types only.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import SecretStr
from sqlalchemy import or_, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from teamstore.db.clock import shared_later, shared_now, utc
from teamstore.db.engine import describe_failure
from teamstore.db.fence import ERASURE, user_holds
from teamstore.db.identity import database_id
from teamstore.db.statements import insert_new
from teamstore.erasure.receipt import FINISHED, Extension, RequestStatus, user_hash
from teamstore.erasure.request_checks import check_new_request_id, check_request_id, made_by_teamstore
from teamstore.erasure.schema import erasure_requests, folded_id
from teamstore.erasure.settings import ErasureSettings
from teamstore.errors import ConfigurationError, ErasureConflict, ErasureRequestNotFound, StoreUnavailable
from teamstore.export.nearby import check_stored_if_unusable

_NOT_REPEATED = "not repeated here: it may be a user's words"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RequestRow:
    """One request as stored."""

    request_id: str
    user_id: str | None
    subject_key: str | None
    subject_hash: str | None
    reason: str | None
    status: RequestStatus
    received_at: datetime
    due_at: datetime
    completed_at: datetime | None
    receipt: dict[str, Any] | None
    created_now: bool = False
    requested_by: str | None = None
    extension: Extension | None = None
    user_hash: str | None = None

    @property
    def effective_due_at(self) -> datetime:
        """The due date in force: the extended one if the request was extended."""
        return self.extension.due_at if self.extension is not None else self.due_at


@asynccontextmanager
async def db(engine: AsyncEngine, action: str) -> AsyncIterator[AsyncConnection]:
    """A transaction whose database failure is ``StoreUnavailable`` saying it could not ``action``."""
    try:
        async with engine.begin() as conn:
            yield conn
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"could not {action}: {describe_failure(exc)}",
            hint="check the database, run `teamstore db upgrade`, then rerun the same request id",
        ) from exc


def row_of(mapping: Any, created_now: bool = False) -> RequestRow:
    """A request as stored, from its row."""
    return RequestRow(
        request_id=mapping["request_id"], user_id=mapping["user_id"], subject_key=mapping["subject_key"],
        subject_hash=mapping["subject_hash"], reason=mapping["reason"],
        status=RequestStatus(mapping["status"]), received_at=utc(mapping["received_at"]) or datetime.now(UTC),
        due_at=utc(mapping["due_at"]) or datetime.now(UTC), completed_at=utc(mapping["completed_at"]),
        receipt=mapping["receipt"], created_now=created_now, requested_by=mapping["requested_by"],
        extension=extension_of(mapping), user_hash=mapping["user_hash"],
    )


def extension_of(mapping: Any) -> Extension | None:
    """The recorded extension of a request row, or ``None`` if it was never extended."""
    if mapping["extended_due_at"] is None:
        return None
    return Extension(by=mapping["extended_by"], due_at=utc(mapping["extended_due_at"]) or datetime.now(UTC),
                     reason=mapping["extension_reason"], extended_at=utc(mapping["extended_at"]) or datetime.now(UTC),
                     operator=mapping["extension_operator"])


async def get_request(engine: AsyncEngine, request_id: str) -> RequestRow | None:
    """The stored request, or ``None``.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    async with db(engine, "read the erasure request") as conn:
        found = (await conn.execute(select(erasure_requests).where(
            erasure_requests.c.request_id == request_id))).first()
    return row_of(found._mapping) if found is not None else None


async def near_ids(engine: AsyncEngine, request_id: str) -> list[str]:
    """The stored request ids, other than ``request_id`` itself, that are its twins (at most three): they differ from
    it only in ASCII letter case or spaces around it (:func:`teamstore.erasure.schema.folded_id`), ``REQ-7`` for
    ``req-7``.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    # Twins filed before migration 0022 keep no folded id but the oldest's: they are few, and folded here.
    r, folded = erasure_requests.c, folded_id(request_id)
    async with db(engine, "read the erasure requests") as conn:
        found = (await conn.execute(select(r.request_id).where(
            or_(r.folded_id == folded, r.folded_id.is_(None)), r.request_id != request_id))).scalars().all()
    return sorted(twin for twin in found if folded_id(twin) == folded)[:3]


async def not_found(
    engine: AsyncEngine, request_id: str, *, given_as: str = "",
    hint: str = "check the id (`teamstore erase list` shows every request)",
) -> ErasureRequestNotFound:
    """The refusal for an id no request has, naming the stored ids that differ from it only in letter case or
    surrounding spaces (``req-7`` typed for the ticket's ``REQ-7``): request ids match exactly. ``given_as``
    names the option it was given as (``--after``); ``hint`` is the fix when no stored id is near it.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    if near := await near_ids(engine, request_id):
        hint = f"did you mean {' or '.join(repr(found) for found in near)}? Request ids match exactly"
    # The id given is not repeated (a user's id or words typed in the wrong place land in it); near ids are stored.
    given = f"the id given as {given_as}" if given_as else "the request id given"
    return ErasureRequestNotFound(f"{given} names no erasure request ({_NOT_REPEATED})", hint=hint)


async def check_new_request(engine: AsyncEngine, request_id: str | None, user_id: str) -> None:
    """Refuse what a new request (or a dry run, ``request_id`` ``None`` when it names none) may not take: an id
    :func:`teamstore.erasure.request_checks.check_new_request_id` refuses; an id that differs from a stored request's only in letter case or
    surrounding spaces (``req-7`` beside the ticket's ``REQ-7``: a second request where the officer meant the
    first); and a user id no session can have with nothing stored under it
    (:func:`teamstore.export.nearby.check_stored_if_unusable`).

    Raises:
        InvalidIdentifier: The request id breaks a rule, or the user id is unusable and matches nothing.
        ErasureConflict: A stored request's id differs from this one only in letter case or spaces.
        StoreUnavailable: The database could not be reached.
    """
    if request_id is not None:
        check_new_request_id(request_id, user_id)
    await check_stored_if_unusable(engine, user_id)
    if request_id is not None and (twins := await near_ids(engine, request_id)):
        raise twin_of(request_id, twins)


def twin_of(request_id: str, twins: list[str]) -> ErasureConflict:
    """The refusal of a new request id that differs from the stored ``twins`` only in letter case or spaces."""
    # The stored ids are ones operators gave: named in the fix only, where the one meant is typed again.
    named, stored = " and ".join(repr(twin) for twin in twins), "one" if len(twins) == 1 else str(len(twins))
    return ErasureConflict(
        f"the request id given differs from {stored} stored request id(s) only in letter case or surrounding "
        "spaces: it would open a second request beside it",
        hint=f"to resume or report the stored request ({named}), give its id exactly as stored (`teamstore erase status "
        f"{shlex.quote(twins[0])}`); for another request, choose an id that differs in more than letter case",
    )


async def user_hashes(engine: AsyncEngine, knobs: ErasureSettings, user_id: str) -> tuple[str, ...]:
    """The keyed hashes of ``user_id`` a request may keep (:func:`teamstore.erasure.receipt.user_hash`): first the
    one a request keeps from now on, under ``TEAMSTORE_ERASURE_HASH_KEY`` when it is set, else under the database's
    own id; then the one under ``TEAMSTORE_ERASURE_HASH_KEY_PREVIOUS`` (the key before, while requests held under
    it remain), and, with the key set, the one under the database's id, which a request filed while it was unset
    keeps.

    Raises:
        ConfigurationError: The previous key is given without the current one (:func:`check_hash_keys`).
        StoreUnavailable: The database could not be reached.
    """
    return tuple(user_hash(user_id, key) for key in await hash_keys(engine, knobs))


async def hash_keys(engine: AsyncEngine, knobs: ErasureSettings) -> list[str]:
    """The keys :func:`user_hashes` hashes under, in its order, each once.

    Raises:
        ConfigurationError: The previous key is given without the current one (:func:`check_hash_keys`).
        StoreUnavailable: The database could not be reached.
    """
    check_hash_keys(knobs)
    ours = await database_id(engine)
    return list(dict.fromkeys([*_given_keys(knobs), ours]))


def check_hash_keys(knobs: ErasureSettings) -> None:
    """Refuse ``TEAMSTORE_ERASURE_HASH_KEY_PREVIOUS`` given without ``TEAMSTORE_ERASURE_HASH_KEY`` (an empty key is
    not given), naming neither key's value.

    Raises:
        ConfigurationError: The previous key is given and the current one is not.
    """
    # A rotation half done (the new key not given yet, or the old one left behind): every new request's hash would
    # go on under the key being retired, unwarned. Refused where a hash is made, not when the settings are read:
    # the retention sweep reads them for the fence grace alone, and goes on forgetting quiet users.
    if _given(knobs.hash_key_previous) is not None and _given(knobs.hash_key) is None:
        raise ConfigurationError(
            "TEAMSTORE_ERASURE_HASH_KEY_PREVIOUS is set without TEAMSTORE_ERASURE_HASH_KEY (unset or empty): "
            "the previous key is only kept beside the current one while requests held under it remain, and alone "
            "it would key every new request's hash of the user id under the key being retired",
            hint="set TEAMSTORE_ERASURE_HASH_KEY to the current key; or, to keep the key you have, give it as "
            "TEAMSTORE_ERASURE_HASH_KEY and unset TEAMSTORE_ERASURE_HASH_KEY_PREVIOUS",
        )


def keyed_by_database(knobs: ErasureSettings) -> bool:
    """Whether a request keeps its hash of the user id under the database's own id: the first of
    :func:`hash_keys`, since ``TEAMSTORE_ERASURE_HASH_KEY`` is not given (nor the previous key, refused alone)."""
    return not _given_keys(knobs)


def _given_keys(knobs: ErasureSettings) -> list[str]:
    return [key for key in (_given(knobs.hash_key), _given(knobs.hash_key_previous)) if key is not None]


def _given(secret: SecretStr | None) -> str | None:
    """The key's value, or ``None`` when it is unset or empty."""
    # Whitespace is a key's value as any other: requests held under such a key are matched by it, and the
    # receipt's hash (receipt.subject_hash) is keyed by it too, so the check and the hashes agree.
    value = secret.get_secret_value() if secret is not None else ""
    return value or None


async def open_request(
    engine: AsyncEngine, request_id: str, user_id: str, reason: str | None, due_days: int,
    requested_by: str | None = None, *, hashes: tuple[str, ...] = (),
) -> RequestRow:
    """Create the request and fence the user, or return the request already stored under this id.

    Args:
        engine: The state database.
        request_id: The idempotency key.
        user_id: The raw user id (exact string).
        reason: Free text for the receipt (keep personal data out of it); recorded as ``requested_by`` is.
        due_days: The deadline after receipt.
        requested_by: Who asked (free text); recorded when the request is created, or on a rerun of a
            request that has none yet. Like ``reason``, a request's first one is kept: a rerun giving another
            changes nothing (the receipt shows the stored one, and the command line says it was kept).
        hashes: :func:`user_hashes` of ``user_id``: a new request keeps the first, and so does one still naming
            the user that has none (filed before migration 0026); one that has forgotten its user must keep one
            of them (:func:`same_user`). Without them a request keeps no hash.

    Returns:
        The request; ``created_now`` says whether this call created it.

    Raises:
        InvalidIdentifier: The id cannot be stored, or a new request may not take it (:func:`check_new_request`:
            one naming the user among them), or the user id is one no session can have and nothing is stored
            under it.
        ErasureConflict: The id belongs to another user's request (also one that has forgotten its user id but
            keeps a hash of it), or differs from a stored request's only in letter case or spaces (a new one), or
            another request is open for the user.
        StoreUnavailable: The database could not be reached.
    """
    existing = await get_request(engine, check_request_id(request_id))
    if existing is not None:
        same_user(existing, user_id, hashes)
        if existing.status in FINISHED:
            return existing
        missing = {name: given for name, given in (("requested_by", requested_by), ("reason", reason))
                   if given is not None and getattr(existing, name) is None}
        if hashes and existing.user_id == user_id and existing.user_hash is None:
            missing["user_hash"] = hashes[0]  # filed before migration 0026: it still knows its user, so may take it
        for name, given in missing.items():
            await _fill_in(engine, request_id, name, given)
        if hashes and existing.user_hash not in (None, hashes[0]):
            # Kept under the database's id, filed before TEAMSTORE_ERASURE_HASH_KEY was set (or under the key before
            # it): under the key from now on, so that a copy of the database alone cannot test a guessed id against it.
            await _rekey(engine, request_id, existing.user_hash, hashes[0])
            missing["user_hash"] = hashes[0]
        return RequestRow(**{**existing.__dict__, **missing})
    await check_new_request(engine, request_id, user_id)  # a twin filed meanwhile is refused by the insert
    if not await _insert_request(engine, request_id, (user_id, hashes[0] if hashes else None), reason, due_days,
                                 requested_by):
        raise await _conflict(engine, request_id, user_id)
    created = await get_request(engine, request_id)
    assert created is not None
    return RequestRow(**{**created.__dict__, "created_now": True})


async def _fill_in(engine: AsyncEngine, request_id: str, column: str, value: str) -> None:
    """Record ``column`` (who asked, or why) on a request that has none yet; one that has it keeps it."""
    async with db(engine, f"record the erasure request's {column}") as conn:
        await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id == request_id,
                                                          erasure_requests.c[column].is_(None))
                           .values({column: value}))


async def _rekey(engine: AsyncEngine, request_id: str, was: str | None, user_hash: str) -> None:
    """Keep ``user_hash`` in place of ``was`` on the request (left as it is if another run changed it)."""
    async with db(engine, "record the erasure request's user hash") as conn:
        await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id == request_id,
                                                          erasure_requests.c.user_hash == was)
                           .values(user_hash=user_hash))


async def _insert_request(
    engine: AsyncEngine, request_id: str, user: tuple[str, str | None], reason: str | None, due_days: int,
    requested_by: str | None = None,
) -> bool:
    """Insert the request and the user's hold in one transaction; False (and nothing written) if either key
    is taken: the request id or its folded id (a twin's, filed since :func:`check_new_request` looked), or the
    user's open request or hold.

    Neither insert may fail on the key: Postgres would log the key, the raw user id, where erasure never
    reaches it. So each skips a taken key, and a skipped one rolls the transaction back.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    # On the database's clock (on Postgres the server's): the fence's grace counts from received_at, on whichever
    # host resumes the request (:meth:`teamstore.erasure.waits.Waits.fence_grace`).
    dialect, (user_id, hashed) = engine.dialect.name, user
    now = shared_now(dialect)
    values = {"request_id": request_id, "user_id": user_id, "user_hash": hashed, "reason": reason,
              "status": RequestStatus.OPEN,
              "received_at": now, "due_at": shared_later(dialect, timedelta(days=due_days)), "updated_at": now,
              "requested_by": requested_by, "folded_id": folded_id(request_id)}
    hold = {"user_id": user_id, "reason": ERASURE, "request_id": request_id, "created_at": now}
    async with engine.connect() as conn:
        try:
            async with conn.begin() as transaction:
                opened = await conn.execute(insert_new(dialect, erasure_requests).values(**values)
                                            .returning(erasure_requests.c.request_id))
                held = opened.first() is not None and (await conn.execute(
                    insert_new(dialect, user_holds).values(**hold).returning(user_holds.c.user_id))).first()
                if not held:
                    await transaction.rollback()
                    return False
        except SQLAlchemyError as exc:
            raise StoreUnavailable(
                f"could not open the erasure request: {describe_failure(exc)}",
                hint="check the database, run `teamstore db upgrade`, then rerun the same request id",
            ) from exc
    return True


def same_user(row: RequestRow, user_id: str, hashes: tuple[str, ...] = ()) -> RequestRow:
    """``row`` if it may be run for ``user_id``: it names that user, or has forgotten its user and keeps a hash
    of the id among ``hashes`` (:func:`user_hashes` of ``user_id``), or keeps none (finished, or held since
    before migration 0026).

    Raises:
        ErasureConflict: The request is open, failed or held for another user (named by neither id).
    """
    if row.user_id is not None and row.user_id != user_id:
        raise ErasureConflict(
            "the request given erases another user",
            hint="use a new request id for this user (omit --request-id to get one)",
        )
    if row.user_id is None and row.user_hash is not None and row.user_hash not in hashes:
        # Run under another id, it would finish its own subject and report `completed` for this one.
        raise ErasureConflict(
            "the request given was filed for another user id; it has forgotten the id, and keeps only "
            "a keyed hash of it, which this one does not match",
            hint="to finish that request, give the user id it was filed for, exactly (the ticket says), with "
            "TEAMSTORE_ERASURE_HASH_KEY as it was then (or that key as TEAMSTORE_ERASURE_HASH_KEY_PREVIOUS); to "
            "erase this user, use a new request id (omit --request-id to get one)",
        )
    return row


async def _conflict(engine: AsyncEngine, request_id: str, user_id: str) -> ErasureConflict:
    """Why the insert of a new request was skipped: its id, a twin's, or the user's open request."""
    raced = await get_request(engine, request_id)
    if raced is not None and raced.user_id == user_id:
        return ErasureConflict(
            "the request given was opened by another process at the same moment",
            hint="let that process finish; `teamstore erase status` shows it",
        )
    if twins := await near_ids(engine, request_id):
        return twin_of(request_id, twins)
    return already_open(await open_request_of(engine, user_id))


async def open_request_of(engine: AsyncEngine, user_id: str) -> str | None:
    """The id of the request that fences ``user_id`` now (open, failed, or stopped by its coordinator), if any.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    async with db(engine, "read the user's hold") as conn:
        found: str | None = await conn.scalar(select(user_holds.c.request_id).where(user_holds.c.user_id == user_id))
    return found


def already_open(other: str | None) -> ErasureConflict:
    """The refusal of a second request for a user whose request ``other`` is still open (``None``: the hold is the
    retention sweep's, forgetting a user nothing is left of, :mod:`teamstore.erasure.quiet`)."""
    if other is None:
        return ErasureConflict(
            "the retention sweep is forgetting this user right now (nothing of theirs was left)",
            hint="rerun this command in a minute: it then finds nothing held (no_match)",
        )
    # An id the operator gave (a ticket, perhaps the user's email) goes in the fix only, where it is typed again:
    # the message is what a service logs.
    made = made_by_teamstore(other)
    return ErasureConflict(
        f"another erasure request{f' ({made})' if made else ''} is open for this user",
        hint=f"rerun that request to resume it: `teamstore erase --user ... --request-id {shlex.quote(other)}`",
    )


async def claim(engine: AsyncEngine, request_id: str, owner: str, lease_seconds: float) -> bool:
    """Take (or renew) the request's lease; False if another live coordinator holds it. The lease is written and
    checked on the database's clock (on Postgres the server's): coordinators on hosts whose clocks disagree
    still exclude each other.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    dialect, r = engine.dialect.name, erasure_requests.c
    now = shared_now(dialect)
    async with db(engine, "lease the erasure request") as conn:
        result = await conn.execute(
            update(erasure_requests)
            .where(r.request_id == request_id)
            .where(or_(r.owner.is_(None), r.owner == owner, r.lease_until < now))
            .values(owner=owner, lease_until=shared_later(dialect, timedelta(seconds=lease_seconds)), updated_at=now)
        )
    return bool(result.rowcount)


async def release(engine: AsyncEngine, request_id: str, owner: str) -> None:
    """Give the lease back (a killed coordinator's lease expires instead)."""
    async with db(engine, "release the erasure request") as conn:
        await conn.execute(
            update(erasure_requests)
            .where(erasure_requests.c.request_id == request_id, erasure_requests.c.owner == owner)
            .values(owner=None, lease_until=None)
        )


async def set_subject(engine: AsyncEngine, request_id: str, subject_key: str | None, hashed: str | None) -> None:
    """Remember the subject key (needed to resume after the mapping is gone) and its receipt hash."""
    async with db(engine, "record the erasure subject") as conn:
        await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id == request_id)
                           .values(subject_key=subject_key, subject_hash=hashed))


def taken_over(request_id: str) -> ErasureConflict:
    """The error for a coordinator that finds another one holds its request's lease now: a request id teamstore
    made is named (:func:`teamstore.erasure.request_checks.made_by_teamstore`), since the operator may never have seen it."""
    made = made_by_teamstore(request_id)
    return ErasureConflict(
        f"the erasure request{f' {made}' if made else ''} was taken over by another coordinator (this one could "
        "not renew its lease in time); this one stopped without writing a receipt",
        hint=f"`teamstore erase status {made}` shows the other run; rerun it (--request-id {made}) if it is no "
        "longer running" if made else "`teamstore erase status` with the same request id shows the other run; "
        "rerun that request id if it is no longer running",
    )
