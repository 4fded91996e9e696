"""The compliance desk's view of erasure requests: list them, and extend one's due date once.

    from teamstore.erasure.desk import extend_request, list_requests

    overdue = await list_requests(engine, overdue=True, limit=100)
    if len(overdue) == 100:  # a full page: the next one starts after its last request
        following = await list_requests(engine, overdue=True, limit=100, after=overdue[-1].request_id)
    row = await extend_request(engine, "REQ-2026-0042", "2m", "complex request: 40 sessions", operator="dpo")

GDPR art. 12(3): a request is answered within one month of receipt, extendable once "by two further months
where necessary", the data subject told of the extension and its reasons within the first month. So an
extension is refused when the request was extended already, when it would end more than two calendar months
after the original due date, once the original due date has passed, for a request that is finished, and
without a reason. A listing never shows a raw user id, not even an open request's: only the first
characters of its subject hash (``--user`` finds an open request by the exact id without printing it, and
when it finds none says whether a near-identical id is stored, in words). A listing pages by keyset: the next
page starts after the last request id of the one before, in the same order.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel
from sqlalchemy import ColumnElement, FromClause, and_, false, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.clock import database_now, shared_now
from teamstore.db.identity import log_name_key
from teamstore.erasure import request_checks, requests
from teamstore.erasure.receipt import FINISHED, Extension, RequestStatus, user_hash
from teamstore.erasure.schema import erasure_attempts, erasure_requests
from teamstore.erasure.settings import ErasureSettings
from teamstore.errors import ExtensionRefused, InvalidIdentifier
from teamstore.export.nearby import TABLES, difference, near_match, variants
from teamstore.ids import control_character, log_name
from teamstore.people import check_not_naming

MAX_MONTHS = 2
"""GDPR art. 12(3): one extension, by two further months at most."""
MAX_REASON_CHARS = request_checks.MAX_REASON_CHARS
UNFINISHED = (RequestStatus.OPEN, RequestStatus.FAILED)
"""Requests that can still be overdue or extended: running, killed, or failed and waiting for a rerun."""
_BY = re.compile(r"^\s*(\d{1,3})\s*([dwm])\s*$")
SUBJECT_CHARS = 12
HELD_TWINS = {RequestStatus.RETAINED_UNDER_HOLD: "a held request", RequestStatus.FAILED: "a held request whose rerun failed"}
"""The requests that have forgotten their user's id and keep a keyed hash of it, as a near twin's is named: held, or
held and then failed on a rerun (a finished request keeps neither)."""


class RequestSummary(BaseModel):
    """One request as the desk lists it: no raw user id, ever."""

    request_id: str
    status: RequestStatus
    received_at: datetime
    due_at: datetime
    extended_due_at: datetime | None
    overdue: bool
    subject: str | None
    """The first characters of the receipt's subject hash (``None`` until the request has read the subject,
    or when the user had none)."""
    requested_by: str | None
    operators: list[str]
    """Who ran each attempt, first first."""
    completed_at: datetime | None
    extension_reason: str | None
    logged_as: str
    """How teamstore's log lines name the request (:func:`teamstore.ids.log_name`): its id if teamstore made it,
    else ``request#`` and a fingerprint of it."""


def effective_due(table: FromClause = erasure_requests) -> ColumnElement[Any]:
    """The due date in force, in SQL: the extended one if there is one."""
    return func.coalesce(table.c.extended_due_at, table.c.due_at)


def is_overdue(status: RequestStatus, due_at: datetime, now: datetime) -> bool:
    """Whether a request is overdue at ``now``: unfinished (open or failed) and past ``due_at``, its due date in
    force (the extended one, if extended). The one definition; :func:`overdue_clause` says the same in SQL."""
    return status in UNFINISHED and due_at < now


def overdue_clause(now: Any) -> ColumnElement[bool]:
    """:func:`is_overdue` in SQL, over ``ts_erasure_requests`` (``erase list --overdue``, the overdue gauge);
    ``now`` a time or the database's clock (:func:`~teamstore.db.clock.shared_now`)."""
    return and_(erasure_requests.c.status.in_([str(s) for s in UNFINISHED]), effective_due() < now)


async def list_requests(
    engine: AsyncEngine, *, statuses: Collection[RequestStatus] = (), overdue: bool = False,
    user_id: str | None = None, user_hashes: Collection[str] = (), after: str | None = None, limit: int = 100,
    now: datetime | None = None,
) -> list[RequestSummary]:
    """Requests, newest first; with ``overdue``, the longest overdue first (the desk's queue, in the order to
    work it: what ``limit`` leaves out is what falls due last). Requests received (or due) at the same moment
    are in the order of their ids, so a page ends at one place: the next page is the one ``after`` the last
    request id of this one.

    Args:
        engine: The state database.
        statuses: Only these (all when empty).
        overdue: Only unfinished requests (open or failed) whose due date in force has passed.
        user_id: Only the request open or failed for this exact id (finished requests forget the id), and with
            ``user_hashes`` (:func:`teamstore.erasure.requests.user_hashes` of the id) a held one keeping its hash.
        user_hashes: The keyed hashes of ``user_id`` a held request may keep; ignored without ``user_id``.
        after: Only the requests after this one in the listing's order (the last request id of the page
            before); it need not match the filters (it may have finished since its page was read).
        limit: At most this many.
        now: The time to judge ``overdue`` against (tests); by default the database's, on which requests are
            received and fall due.

    Raises:
        InvalidIdentifier: ``after`` is not a request id.
        ErasureRequestNotFound: No request has the id ``after``.
        StoreUnavailable: The database could not be reached.
    """
    if after is not None:
        await _check_after(engine, after)
    now = now or await database_now(engine)
    r = erasure_requests.c
    order = _order(erasure_requests, overdue)
    query = select(erasure_requests).order_by(*(key.desc() if desc else key for key, desc in order)).limit(limit)
    query = query.where(*listed_by(statuses, overdue, now))
    if user_id is not None:
        held = and_(r.user_id.is_(None), r.user_hash.in_(list(user_hashes))) if user_hashes else false()
        query = query.where(or_(r.user_id == user_id, held))
    if after is not None:
        query = query.where(_after(after, overdue))
    async with requests.db(engine, "list the erasure requests") as conn:
        rows = (await conn.execute(query)).all()
        ids = [row.request_id for row in rows]
        ran = (await conn.execute(select(erasure_attempts.c.request_id, erasure_attempts.c.operator)
                                  .where(erasure_attempts.c.request_id.in_(ids))
                                  .order_by(erasure_attempts.c.request_id, erasure_attempts.c.attempt))).all()
    operators: dict[str, list[str]] = {}
    for request_id, operator in ran:
        operators.setdefault(request_id, []).append(operator)
    key = await log_name_key(engine)
    return [_summary(row._mapping, operators.get(row.request_id, []), now, key) for row in rows]


def listed_by(statuses: Collection[RequestStatus], overdue: bool, now: Any) -> list[ColumnElement[bool]]:
    """What ``--status`` and ``--overdue`` keep of ``ts_erasure_requests`` (:func:`list_requests`); ``now`` as
    for :func:`overdue_clause`."""
    return ([erasure_requests.c.status.in_([str(s) for s in statuses])] if statuses else []) + (
        [overdue_clause(now)] if overdue else [])


def near_tables(engine: AsyncEngine, statuses: Collection[RequestStatus] = (), overdue: bool = False,
                ) -> tuple[FromClause, ...]:
    """Where ``erase list --user`` looks for a near twin of an id that found no request: the stores keyed by the
    raw id, and the requests the listing's filters keep (an open or failed one keeps its user's id): a twin's
    request those filters leave out would not be listed under the twin's id either."""
    listed = listed_by(statuses, overdue, shared_now(engine.dialect.name))
    requests_kept = select(erasure_requests.c.user_id).where(*listed).subquery("listed") if listed else erasure_requests
    return (*TABLES, requests_kept)


def _order(table: FromClause, overdue: bool) -> list[tuple[ColumnElement[Any], bool]]:
    """The listing's order over ``table``, as (key, descending) pairs: the request id last, so no two requests
    tie. The same keys order a page and say where the next one starts (:func:`_after`)."""
    c = table.c
    if overdue:
        return [(effective_due(table), False), (c.received_at, False), (c.request_id, False)]
    return [(c.received_at, True), (c.request_id, False)]


def _after(request_id: str, overdue: bool) -> ColumnElement[bool]:
    """The requests that come after ``request_id`` in the listing's order. Its keys are read in SQL, compared
    as stored: a time read back and bound again could differ from the stored one in its last digits."""
    cursor = erasure_requests.alias("page_end")
    at = [select(key).where(cursor.c.request_id == request_id).scalar_subquery()
          for key, _ in _order(cursor, overdue)]
    return _beyond([(key, mark, desc) for (key, desc), mark in zip(_order(erasure_requests, overdue), at, strict=True)])


def _beyond(keys: list[tuple[ColumnElement[Any], ColumnElement[Any], bool]]) -> ColumnElement[bool]:
    """Past the marks in the order of ``keys``: past the first, or equal to it and past the rest."""
    (key, mark, desc), *rest = keys
    past = key < mark if desc else key > mark
    return or_(past, and_(key == mark, _beyond(rest))) if rest else past


async def _check_after(engine: AsyncEngine, after: str) -> None:
    """Refuse a cursor that names no request: a page after it would be a guess.

    Raises:
        InvalidIdentifier: It is not a request id.
        ErasureRequestNotFound: No request has that id.
    """
    how = "give --after the last request id a page listed (its footer, or `next` in --json, names it)"
    try:
        request_checks.check_request_id(after)
    except InvalidIdentifier as exc:
        raise InvalidIdentifier(f"--after: {exc.message}", hint=how) from exc
    if await requests.get_request(engine, after) is None:
        raise await requests.not_found(engine, after, given_as="--after", hint=how)


async def near_user_match(
    engine: AsyncEngine, user_id: str, knobs: ErasureSettings | None = None, *,
    statuses: Collection[RequestStatus] = (), overdue: bool = False,
) -> str | None:
    """Whether a stored user id, or an open or failed request's, differs from ``user_id`` only in letter case,
    Unicode form or surrounding spaces (:func:`teamstore.export.nearby.near_match`), and whether a held request
    was filed for such an id (:func:`near_held`), in words that never name it: what the desk is told when
    ``--user`` finds no request. ``knobs``: the hash keys (``ErasureSettings()``, the environment, by default).
    ``statuses`` and ``overdue``: the listing's filters; a request they leave out is no twin (:func:`near_tables`).

    Raises:
        ConfigurationError: The previous hash key is given without the current one
            (:func:`teamstore.erasure.requests.check_hash_keys`).
        StoreUnavailable: The database could not be reached.
    """
    listed = listed_by(statuses, overdue, shared_now(engine.dialect.name))
    said = [await near_match(engine, user_id, near_tables(engine, statuses, overdue)),
            await near_held(engine, user_id, knobs or ErasureSettings(), listed)]
    return "; ".join(filter(None, said)) or None


async def near_held(
    engine: AsyncEngine, user_id: str, knobs: ErasureSettings, listed: Collection[ColumnElement[bool]] = (),
) -> str | None:
    """Whether a held request keeps the hash of an id that differs from ``user_id`` only in letter case, Unicode
    form or surrounding spaces, in words that never name that id (one not asked for), and that say whether the
    request's rerun failed since (:data:`HELD_TWINS`). A hash is matched exactly, so only the spellings
    :func:`teamstore.export.nearby.variants` makes of ``user_id`` (all lower or upper case, capitalised, title
    case, case-folded, each Unicode form, trimmed) are hashed, under every key a request may keep its hash under,
    and looked up: ``dAvE`` held is not found for ``Dave``. ``listed``: only requests these clauses keep
    (:func:`listed_by`).

    Raises:
        ConfigurationError: The previous hash key is given without the current one
            (:func:`teamstore.erasure.requests.check_hash_keys`).
        StoreUnavailable: The database could not be reached.
    """
    r, keys = erasure_requests.c, await requests.hash_keys(engine, knobs)
    spelt = {user_hash(variant, key): variant for variant in variants(user_id) for key in keys}
    async with requests.db(engine, "look for held requests of near-identical user ids") as conn:
        found = (await conn.execute(select(r.user_hash, r.status).where(
            r.user_id.is_(None), r.user_hash.in_(sorted(spelt)), r.status.in_([str(s) for s in HELD_TWINS]),
            *listed))).all()
    twins = {(RequestStatus(status), kind) for hashed, status in found
             if (kind := difference(user_id, spelt[hashed])) is not None}
    if not twins:
        return None
    named = [words for status, words in HELD_TWINS.items() if any(twin == status for twin, _ in twins)]
    kinds = " / ".join(sorted({kind for _, kind in twins}))
    one = len(named) == 1
    return (f"{' and '.join(named)} {'was' if one else 'were'} filed for a user id that differs from this one only "
            f"in {kinds}: give --user exactly as "
            f"{'that request was filed (its ticket says)' if one else 'those requests were filed (their tickets say)'}")


def _summary(mapping: Any, operators: list[str], now: datetime, log_key: str) -> RequestSummary:
    row = requests.row_of(mapping)
    return RequestSummary(
        request_id=row.request_id, status=row.status, received_at=row.received_at, due_at=row.due_at,
        extended_due_at=row.extension.due_at if row.extension else None,
        overdue=is_overdue(row.status, row.effective_due_at, now),
        subject=row.subject_hash[:SUBJECT_CHARS] if row.subject_hash else None, requested_by=row.requested_by,
        operators=operators, completed_at=row.completed_at,
        extension_reason=row.extension.reason if row.extension else None,
        logged_as=log_name(row.request_id, log_key),
    )


def add_months(moment: datetime, months: int) -> datetime:
    """``moment`` plus calendar months, the day kept or, past the month's end, its last day (31 Jan + 1 month
    is 28 or 29 Feb)."""
    index = moment.month - 1 + months
    year, month = moment.year + index // 12, index % 12 + 1
    return moment.replace(year=year, month=month, day=min(moment.day, calendar.monthrange(year, month)[1]))


def extended_due(due_at: datetime, by: str) -> datetime:
    """The due date ``by`` (``30d``, ``6w``, ``2m``) after ``due_at``.

    Raises:
        ExtensionRefused: ``by`` is not a positive number of days, weeks or months.
    """
    found = _BY.match(by)
    if found is None or int(found.group(1)) == 0:
        raise ExtensionRefused(
            "--by is not a length of time: it takes a positive number of days, weeks or months (the value is not "
            "repeated here: it may be a user's words)",
            hint="give days, weeks or months: --by 30d, --by 6w or --by 2m (two months at most)",
        )
    amount, unit = int(found.group(1)), found.group(2)
    if unit == "m":
        return add_months(due_at, amount)
    return due_at + timedelta(days=amount * (7 if unit == "w" else 1))


def _normal(by: str) -> str:
    """A length :func:`extended_due` took, as the receipt records it: ``2d`` for ``" 2   d "``."""
    found = _BY.match(by)
    assert found is not None
    return f"{int(found.group(1))}{found.group(2)}"


def check_extension_reason(reason: str) -> str:
    """The reason, if it can be recorded: not blank, one line of UTF-8 text, bounded.

    Raises:
        ExtensionRefused: Empty or blank (art. 12(3): the subject is told the reasons).
        InvalidIdentifier: Too long, or holding a control character, NUL or bytes that are not text.
    """
    if not reason.strip():
        raise ExtensionRefused(
            "an extension needs a reason: the data subject must be told why (GDPR art. 12(3))",
            hint='give --reason "..." (why the request needs longer: its complexity, the number of requests)',
        )
    request_checks.check_reason(reason)
    if len(reason) > MAX_REASON_CHARS or control_character(reason) is not None:
        raise InvalidIdentifier(
            f"the extension's reason ({len(reason)} characters) cannot be recorded as given",
            hint=f"give --reason as one line of at most {MAX_REASON_CHARS} characters (the ticket holds the rest)",
        )
    return reason


async def extend_request(
    engine: AsyncEngine, request_id: str, by: str, reason: str, *, operator: str, now: datetime | None = None,
) -> requests.RequestRow:
    """Extend the request's due date once, by at most two months, recording why, when and by whom.

    Args:
        engine: The state database.
        request_id: The request.
        by: How long: ``30d``, ``6w``, ``2m``.
        reason: Why (recorded, shown on the receipt: it is what the data subject is told).
        operator: Who extends it.
        now: The time the rules are judged at (tests); by default the database's, on which the request's due
            date was set.

    Returns:
        The request as stored after the extension.

    Raises:
        ExtensionRefused: Extended already; more than two months; the original due date has passed; the
            request is finished (or retained under a hold); the reason is blank; a coordinator runs it now.
        ErasureRequestNotFound: No request has that id.
        InvalidIdentifier: The request id or the reason cannot be stored, or the reason names the request's user.
        StoreUnavailable: The database could not be reached.
    """
    now = now or await database_now(engine)
    check_extension_reason(reason)
    row = await _unfinished(engine, request_id)
    if row.user_id is not None:  # a request retained under a hold has forgotten it
        check_not_naming("reason", reason, row.user_id)
    new_due = _allowed(row, by, now)
    r = erasure_requests.c
    values = {"extended_due_at": new_due, "extended_by": _normal(by), "extension_reason": reason, "extended_at": now,
              "extension_operator": operator, "updated_at": now}
    # A coordinator's lease is written on the database's clock (requests.claim): judged on it, not on this host's.
    lease_passed = or_(r.owner.is_(None), r.lease_until < shared_now(engine.dialect.name))
    async with requests.db(engine, "extend the erasure request") as conn:
        done = await conn.execute(update(erasure_requests).where(
            r.request_id == request_id, r.extended_due_at.is_(None), r.status.in_([str(s) for s in UNFINISHED]),
            r.due_at >= now, lease_passed).values(**values))
    if not done.rowcount:  # changed since it was read: say what changed
        raise _refusal(await _unfinished(engine, request_id), now, busy=True)
    extended = await requests.get_request(engine, request_id)
    assert extended is not None  # requests are never deleted
    return extended


async def _unfinished(engine: AsyncEngine, request_id: str) -> requests.RequestRow:
    row = await requests.get_request(engine, request_checks.check_request_id(request_id))
    if row is None:
        raise await requests.not_found(engine, request_id)
    if row.status in FINISHED or row.status is RequestStatus.RETAINED_UNDER_HOLD:
        raise ExtensionRefused(
            f"the request is {row.status}: only an open or failed request can be extended",
            hint="nothing is left to do by a due date; `teamstore erase status` with the same id prints its receipt",
        )
    return row


def _allowed(row: requests.RequestRow, by: str, now: datetime) -> datetime:
    """The extended due date, if the rules allow it."""
    if row.extension is not None or now > row.due_at:
        raise _refusal(row, now)
    new_due = extended_due(row.due_at, by)
    latest = add_months(row.due_at, MAX_MONTHS)
    if new_due > latest:
        raise ExtensionRefused(
            f"--by {by.strip()} would move the due date to {new_due:%Y-%m-%d}, more than two months after the "
            f"original {row.due_at:%Y-%m-%d}",
            hint=f"GDPR art. 12(3) allows two further months at most: --by {MAX_MONTHS}m (until {latest:%Y-%m-%d}) "
            "or fewer days",
        )
    return new_due


def _refusal(row: requests.RequestRow, now: datetime, busy: bool = False) -> ExtensionRefused:
    if row.extension is not None:
        ext = row.extension
        # Who extended it is said in the fix only: a service logs an error's message, and a staff member's
        # name need not go to its logs (the receipt keeps it).
        return ExtensionRefused(
            f"the request was extended already, on {ext.extended_at:%Y-%m-%d} to {ext.due_at:%Y-%m-%d}: a "
            "request is extended once",
            hint=f"it was extended by {ext.operator}; GDPR art. 12(3) allows one extension: answer the request by "
            "its extended due date",
        )
    if now > row.due_at:
        return ExtensionRefused(
            f"the request was due on {row.due_at:%Y-%m-%d}: too late to extend it",
            hint="an extension is decided, and told to the data subject, within the first month; finish the "
            "request now (`teamstore erase --user ... --request-id ...` with its user and id)",
        )
    if busy:
        return ExtensionRefused(
            "the request is being run by a coordinator right now",
            hint="extend it once the run ends (`teamstore erase status` with the same id tells)",
        )
    return ExtensionRefused("the request could not be extended", hint="run the command again")


def extension_note(extension: Extension | None) -> str | None:
    """One line on the receipt about the extension, if any."""
    if extension is None:
        return None
    return (f"extended by {_in_words(extension.by)} to {extension.due_at:%Y-%m-%d} on "
            f"{extension.extended_at:%Y-%m-%d} by {extension.operator}: {extension.reason}")


def _in_words(by: str) -> str:
    """A recorded length as the desk reads it: ``2 months`` for ``2m`` (which also reads as two minutes)."""
    found = _BY.match(by)
    if found is None:  # recorded by a release that wrote it otherwise: shown as stored
        return by
    amount, unit = int(found.group(1)), {"d": "day", "w": "week", "m": "month"}[found.group(2)]
    return f"{amount} {unit}{'' if amount == 1 else 's'}"
