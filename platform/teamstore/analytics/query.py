"""One cost query for the command line and the Python API: filters as people give them, readable names,
``top``, and a clear answer when nothing matches.

    from teamstore.analytics.query import CostQuery, cost_report

    query = CostQuery.build(by="team,model", since="7d", top=10)
    report = await cost_report(engine, load_prices(), query)     # NoMatchingUsage if nothing matches

    async with cost_listing(engine, load_prices(), CostQuery.build(by="session")) as listing:
        async for row in listing.rows():                          # every group, one at a time
            print(row.key, row.cost)
        missing = await listing.missing()                         # NoMatchingUsage, or None

Dates are ``YYYY-MM-DD``, an ISO timestamp (UTC unless it says otherwise), or a time before now: ``24h``,
``7d``, ``2w``. ``top`` keeps the groups that cost most (ties by tokens, then by the ledger's key); the
total still counts every group. Users and sessions read as the application's ids unless the query is
``pseudonymous`` (:mod:`teamstore.analytics.names`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, func, literal, select, true
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from teamstore.analytics.names import ReadableNames, name_rows
from teamstore.audit.cost import (
    CostFilter,
    CostReport,
    CostRow,
    CostStream,
    parse_by,
    query_costs,
)
from teamstore.audit.cost_groups import group_fields
from teamstore.audit.prices import PriceTable
from teamstore.audit.schema import subjects, usage
from teamstore.audit.subjects import session_key, subject_of
from teamstore.db.engine import describe_failure, failure_hint
from teamstore.db.snapshot import reading
from teamstore.errors import ConfigurationError, NoMatchingUsage, StoreUnavailable, refused_value
from teamstore.ids import check_ids

When = str | date | datetime | None
_RELATIVE = re.compile(r"^\s*(\d{1,6})\s*([hdw])\s*$")
_UNITS = {"h": "hours", "d": "days", "w": "weeks"}
_FORMATS = "a date as YYYY-MM-DD, an ISO timestamp (UTC unless it says) or a time back from now (24h, 7d, 2w)"


def parse_when(value: When, option: str, now: datetime | None = None) -> datetime | None:
    """An instant in UTC from ``2026-11-01``, an ISO timestamp, a ``date``/``datetime``, or ``7d``/``24h``/``2w``
    before ``now``.

    Raises:
        ConfigurationError: Not one of those, or out of range once in UTC.
    """
    if value is None or isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day, tzinfo=UTC)
    elif (relative := _RELATIVE.match(value)) is not None:
        try:
            moment = (now or datetime.now(UTC)) - timedelta(**{_UNITS[relative.group(2)]: int(relative.group(1))})
        except OverflowError as exc:
            raise ConfigurationError(refused_value(option, takes=f"{_FORMATS}, no further back than year 1"),
                                     hint=f"give a shorter time back from now, or a date, e.g. {option} 2026-11-01"
                                     ) from exc
    else:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError as exc:
            raise ConfigurationError(refused_value(option, takes=_FORMATS),
                                     hint=f"e.g. {option} 2026-11-01, {option} 2026-11-01T09:30+01:00 or {option} 7d"
                                     ) from exc
    if moment is None:
        return None
    try:  # the instant in UTC now: an offset that moves it past year 9999 or before year 1 has no instant
        return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    except OverflowError as exc:
        raise ConfigurationError(refused_value(option, takes=f"{_FORMATS}, between years 1 and 9999 in UTC"),
                                 hint=f"e.g. {option} 2026-11-01") from exc


@dataclass(frozen=True)
class CostQuery:
    """What a cost report covers and how it is grouped; build it with :meth:`build`."""

    by: tuple[str, ...] = ("session",)
    user: str | None = None
    session: str | None = None
    team: str | None = None
    model: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    top: int | None = None
    pseudonymous: bool = False
    given: dict[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def build(cls, by: str | Sequence[str] = "session", *, user: str | None = None, session: str | None = None,
              team: str | None = None, model: str | None = None, since: When = None, until: When = None,
              top: int | None = None, pseudonymous: bool = False, now: datetime | None = None) -> CostQuery:
        """Check and normalise a query as a person gives it.

        Raises:
            ConfigurationError: An unknown grouping, ``session`` without ``user``, a malformed date,
                ``since`` not before ``until``, or ``top`` under 1.
            InvalidIdentifier: A user or session id no run can have.
        """
        check_ids(user_id=user, session_id=session)
        if session is not None and user is None:
            raise ConfigurationError("--session needs --user", hint="session ids are only unique per user")
        if top is not None and top < 1:
            raise ConfigurationError(refused_value("--top", takes="a number of groups of at least 1"),
                                     hint="give --top 1 or more, e.g. --top 10, or leave it out")
        start, end = parse_when(since, "--since", now), parse_when(until, "--until", now)
        if start is not None and end is not None and start >= end:
            raise ConfigurationError(
                "--since is not before --until: no run can be in that window",
                hint="swap them (--until is the end, exclusive)")
        given = {k: str(v) for k, v in (("team", team), ("model", model)) if v is not None}
        given |= {k: v.isoformat() for k, v in (("since", start), ("until", end)) if v is not None}
        for name, value in (("user", user), ("session", session)):  # ids only where the report may show them
            if value is not None:
                given[name] = "(given)" if pseudonymous else value
        return cls(parse_by(by), user, session, team, model, start, end, top, pseudonymous, given)


async def cost_report(source: AsyncEngine | AsyncConnection, prices: PriceTable, query: CostQuery) -> CostReport:
    """The report ``query`` asks for, every figure and name of it read in one snapshot of the database.

    Args:
        source: The state database, or a connection of :func:`~teamstore.db.snapshot.read_snapshot` that
            the report shares with the caller's others (the HTML page's four agree).
        prices: The price table.
        query: From :meth:`CostQuery.build`.

    Returns:
        Rows sorted by their group (or the ``top`` costliest), and the total of every matching run.

    Raises:
        NoMatchingUsage: Nothing in the ledger matches; the message says which filter, with near names.
        StoreUnavailable: The database could not be read.
    """
    try:
        async with reading(source) as conn:
            return await _report(conn, prices, query)
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"could not read the ledger: {describe_failure(exc)}",
                               hint=failure_hint(exc)) from exc


async def _report(conn: AsyncConnection, prices: PriceTable, query: CostQuery) -> CostReport:
    where = await _filter(conn, query)
    report = await query_costs(conn, prices, query.by, where, top=query.top) if where is not None else None
    if report is None or not report.rows:
        empty = report or await query_costs(conn, prices, query.by, CostFilter(subject_key=""))
        _finish(empty, query)
        raise await _no_match(conn, query, where, empty)
    if not query.pseudonymous:
        await name_rows(conn, report.rows, query.by)
    if query.top is None:
        report.rows.sort(key=lambda r: r.key)
    _finish(report, query)
    return report


@dataclass
class CostListing:
    """A report of every group (no ``top``), its rows read one at a time: however many groups there are, a
    listing holds one of them at a time.

    Attributes:
        report: The report without its rows: what it groups by, its prices, filters and (if counted) groups;
            its ``total`` is complete once :meth:`rows` has been read to its end.
    """

    report: CostReport
    _stream: CostStream
    _conn: AsyncConnection
    _query: CostQuery
    _where: CostFilter | None
    _read: int = 0

    async def rows(self) -> AsyncIterator[CostRow]:
        """The rows sorted by their group's key, as :func:`cost_report` sorts them."""
        async for row in self._stream:
            self._read += 1
            yield row

    async def missing(self) -> NoMatchingUsage | None:
        """After :meth:`rows`: why nothing matched (as :func:`cost_report` raises it), or ``None`` when
        something did."""
        if self._read:
            return None
        return await _no_match(self._conn, self._query, self._where, self.report)


@asynccontextmanager
async def cost_listing(source: AsyncEngine | AsyncConnection, prices: PriceTable, query: CostQuery, *,
                       count: bool = False) -> AsyncIterator[CostListing]:
    """Every group ``query`` asks for, streamed from one snapshot of the database inside the block.

    Args:
        source: The state database, or a connection of :func:`~teamstore.db.snapshot.read_snapshot`.
        prices: The price table.
        query: From :meth:`CostQuery.build`, without ``top`` (:func:`cost_report` keeps the costliest).
        count: Count the groups first (``report.groups``; one more query), for output that names how many
            before it lists them.

    Yields:
        The listing.

    Raises:
        ConfigurationError: ``query`` has a ``top``.
        StoreUnavailable: The database could not be read.
    """
    if query.top is not None:
        raise ConfigurationError("a listing of every group has no --top", hint="use cost_report for the costliest")
    try:
        async with reading(source) as conn:
            where = await _filter(conn, query)
            stream = CostStream(conn, prices, query.by, CostFilter(subject_key="") if where is None else where,
                                None if query.pseudonymous else ReadableNames(query.by))
            report = CostReport(by=",".join(query.by), price_version=prices.version, currency=prices.currency,
                                rows=[], total=stream.total, groups=await stream.count() if count else 0)
            _finish(report, query)
            yield CostListing(report, stream, conn, query, where)
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"could not read the ledger: {describe_failure(exc)}",
                               hint=failure_hint(exc)) from exc


def _finish(report: CostReport, query: CostQuery) -> None:
    report.fields = group_fields(query.by, readable=not query.pseudonymous)
    report.readable, report.top, report.filters = not query.pseudonymous, query.top, dict(query.given)


async def _filter(conn: AsyncConnection, query: CostQuery) -> CostFilter | None:
    """The ledger filter; ``None`` when the user given has no subject (never ran, or erased)."""
    subject = None
    if query.user is not None:  # read in the report's snapshot, like the ledger rows it selects
        row = (await conn.execute(select(subjects.c.subject_key, subjects.c.session_secret)
                                  .where(subjects.c.user_id == query.user))).first()
        subject = None if row is None else subject_of(*row)
        if subject is None:
            return None
    session = None if subject is None or query.session is None else session_key(subject.session_secret, query.session)
    return CostFilter(session_key=session, subject_key=subject.key if subject else None, team=query.team,
                      model=query.model, since=query.since, until=query.until)


async def _any(conn: AsyncConnection, clauses: list[ColumnElement[bool]]) -> bool:
    found = await conn.scalar(select(literal(1)).select_from(usage).where(true_if_empty(clauses)).limit(1))
    return found is not None


def true_if_empty(clauses: list[ColumnElement[bool]]) -> ColumnElement[bool]:
    """The conjunction of ``clauses``, or a condition every row meets."""
    return and_(*clauses) if clauses else true()


async def _no_match(conn: AsyncConnection, query: CostQuery, where: CostFilter | None,
                    report: CostReport) -> NoMatchingUsage:
    if not await _any(conn, []):
        return NoMatchingUsage("the ledger holds no runs yet", report=report, hint=(
            "runs are recorded when a team runs with the audit trail on (`teamstore run`, a Platform's "
            "sessions); check TEAMSTORE_DATABASE_URL names the service's database"))
    if where is None or (where.subject_key is not None
                         and not await _any(conn, [usage.c.subject_key == where.subject_key])):
        # Never the id itself, nor anyone else's: this line may reach a log.
        return NoMatchingUsage("the ledger holds no run of the user given with --user", report=report,
                               hint="user ids are matched exactly (case, accents and spaces count)")
    if where.session_key is not None and not await _any(conn, [usage.c.session_key == where.session_key]):
        return NoMatchingUsage("the ledger holds no run of that session of the user", report=report,
                               hint="session ids are matched exactly, and are only unique per user")
    for name, value in (("team", query.team), ("model", query.model)):
        if value is not None and not await _any(conn, [usage.c[name] == value]):
            return await _unknown_name(conn, name, value, report)
    return await _empty_window(conn, query, where, report)


async def _unknown_name(conn: AsyncConnection, name: str, value: str, report: CostReport) -> NoMatchingUsage:
    known = sorted(str(v) for v in (await conn.execute(select(usage.c[name]).distinct())).scalars())
    near = tuple(difflib.get_close_matches(value, known, n=3, cutoff=0.6))
    if near:
        hint = "did you mean " + " or ".join(repr(n) for n in near) + "?"
    else:
        shown = ", ".join(repr(n) for n in known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
        hint = f"the ledger's {name}s: {shown}"
    # The name given is not repeated (a user's words typed in the wrong place land in it); the near names are
    # the ledger's own.
    return NoMatchingUsage(f"the ledger holds no run of the {name} given with --{name}", hint=hint,
                           suggestions=near, report=report)


async def _empty_window(conn: AsyncConnection, query: CostQuery, where: CostFilter,
                        report: CostReport) -> NoMatchingUsage:
    first, last = (await conn.execute(select(func.min(usage.c.started_at), func.max(usage.c.started_at))
                                      .where(true_if_empty(where.clauses(dates=False))))).one()
    if first is None:
        return NoMatchingUsage("no run matches these filters together (each matches runs on its own)",
                               hint="drop one of --user, --team and --model", report=report)
    window = f"[{_day(query.since)}, {_day(query.until)})"
    if query.since is not None and query.since > datetime.now(UTC):  # said as such: "widen" alone misled
        return NoMatchingUsage(
            f"--since {query.since.isoformat()} is in the future: no run has started since", report=report,
            hint=f"give a time before now (these filters' runs started between {_moment(first)} and "
            f"{_moment(last)}), or a time back from now: --since 7d")
    return NoMatchingUsage(
        f"no run matching these filters started in {window}", report=report,
        hint=f"their runs started between {_moment(first)} and {_moment(last)}: widen --since/--until")


def _day(moment: datetime | None) -> str:
    return "..." if moment is None else moment.isoformat()


def _moment(value: Any) -> str:
    """A stored time in UTC, as the window beside it is: Postgres hands it back in the connection's TimeZone
    (a BI-minded PGTZ), SQLite as the UTC it stored."""
    if not isinstance(value, datetime):
        return str(value)[:19]
    return (value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)).isoformat(timespec="seconds")
