"""Cost grouped by one or two dimensions (session, user, team, version, model, agent, purpose, day, week,
month), derived from the ledger at query time, in exact decimals.

    from teamstore.audit.cost import CostFilter, query_costs

    report = await query_costs(engine, load_prices(), by="team,model", where=CostFilter(since=start))
    for row in report.rows:
        print(row.group, row.runs_completed, row.runs_limited, row.runs_interrupted, row.cost, report.price_version)

Tokens are summed in SQL (using the ledger's indexes when a filter names a session, user or team) per group,
model and price period: the days on which one price of the model was in force (a run belongs to the day it
started). Python then prices those sums exactly, so a price change mid-group is honoured and the rows read
are groups x models x prices, however many runs and days there are; weeks and months are rolled up from
days. A model missing from the price table leaves
its tokens counted and its cost unknown (``unpriced_tokens``); every report names the price version it
used. Users and sessions are pseudonymous keys here: :mod:`teamstore.analytics` reads them as the
application's ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, Date, Select, and_, case, false, func, literal, null, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from teamstore.audit.prices import PriceTable
from teamstore.audit.schema import usage
from teamstore.db.snapshot import reading
from teamstore.errors import ConfigurationError, MissingExtra

DIMENSIONS: dict[str, tuple[str, ...]] = {
    "session": ("session_key", "subject_key"),  # a session's user comes with it, for readable reports
    "user": ("subject_key",),
    "team": ("team",),
    "version": ("team", "team_version"),
    "model": ("model",),
    "agent": ("agent",),
    "purpose": ("purpose",),  # agent, speaker_selection, memory_writer: what each kind of call costs
    "day": ("day",),
    "week": ("day",),
    "month": ("day",),
}
"""Each dimension and the ledger columns it groups by."""
TIME = ("day", "week", "month")
SPANS = ("week", "month")
"""The time scales whose groups span several days."""
MAX_DIMENSIONS = 2
ERASED = "erased"
"""How a user reads once erasure has de-linked the ledger rows (each of their sessions reads as ``erased-``
and the start of its key: :func:`teamstore.analytics.names.erased_session`)."""


def parse_by(by: str | Sequence[str]) -> tuple[str, ...]:
    """The dimensions of ``by``: one name, ``"team,model"``, or a sequence of names.

    Raises:
        ConfigurationError: An unknown or repeated dimension, more than two, or two times (day and week).
    """
    names = tuple(n.strip() for n in (by.split(",") if isinstance(by, str) else by))
    unknown = [n for n in names if n not in DIMENSIONS]
    if unknown or not names:
        raise ConfigurationError(f"cannot group costs by {','.join(unknown) or 'nothing'!r}",
                                 hint=f"use one or two of {', '.join(DIMENSIONS)}, e.g. --by team,model")
    if len(names) > MAX_DIMENSIONS or len(set(names)) < len(names):
        raise ConfigurationError(f"cannot group costs by {','.join(names)!r}",
                                 hint="give one dimension or two different ones, e.g. --by team,model")
    if sum(n in TIME for n in names) > 1:
        raise ConfigurationError(f"cannot group costs by {','.join(names)!r}: two time scales",
                                 hint="use one of day, week or month")
    return names


@dataclass(frozen=True)
class CostFilter:
    """Which ledger rows a query covers; ``None`` means any."""

    session_key: str | None = None
    subject_key: str | None = None
    team: str | None = None
    model: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def clauses(self, dates: bool = True) -> list[ColumnElement[bool]]:
        """SQL conditions for the set fields (without the time window unless ``dates``)."""
        pairs = [
            (self.session_key, usage.c.session_key),
            (self.subject_key, usage.c.subject_key),
            (self.team, usage.c.team),
            (self.model, usage.c.model),
        ]
        found: list[ColumnElement[bool]] = [col == value for value, col in pairs if value is not None]
        if dates and self.since is not None:
            found.append(usage.c.started_at >= _as_utc(self.since))
        if dates and self.until is not None:
            found.append(usage.c.started_at < _as_utc(self.until))
        return found


def _as_utc(moment: datetime) -> datetime:
    """The same instant in UTC (a naive time is taken as UTC): SQLite compares the wall-clock text it
    stores, and every stored time is UTC, so an offset like +02:00 must be applied before comparing."""
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass(slots=True)  # a full listing holds one per group: hundreds of thousands
class CostRow:
    """One group of the report (or its total).

    Attributes:
        key: The group's values joined for display (``support_triage / gpt-4o``); ``total`` for the total.
        group: Each column of the group and its value: ``{"team": ..., "model": ...}``; a session reads
            as ``user`` and ``session`` in a readable report, ``session_key`` in a pseudonymous one.
        cost: Exact, in the report's currency; ``None`` when none of the tokens has a price.
        limited_cost: The part of ``cost`` spent in runs ended by a limit (``None`` when ``cost`` is).
        limited_unpriced_tokens: Of ``unpriced_tokens``, those spent in runs ended by a limit: when any, the
            limited cost is ``limited_cost`` plus an unknown part.
        raw: The ledger's values per dimension (keys, not ids), for the readable names.
    """

    key: str
    group: dict[str, str] = field(default_factory=dict)
    runs_completed: int = 0
    runs_limited: int = 0
    runs_failed: int = 0
    runs_interrupted: int = 0
    """Runs continued (or abandoned) after they stopped mid-run; each also counts as it ended."""
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal | None = None
    limited_cost: Decimal | None = None
    unpriced_tokens: int = 0
    unpriced_models: list[str] = field(default_factory=list)
    limited_unpriced_tokens: int = 0
    raw: tuple[tuple[Any, ...], ...] = field(default=(), repr=False, compare=False)

    FIGURES: ClassVar[tuple[str, ...]] = (
        "runs_completed", "runs_limited", "runs_failed", "runs_interrupted", "calls", "input_tokens", "output_tokens", "cost",
        "limited_cost", "unpriced_tokens", "unpriced_models", "limited_unpriced_tokens")

    @property
    def runs(self) -> int:
        """Every run of the group: completed, ended by a limit, or failed."""
        return self.runs_completed + self.runs_limited + self.runs_failed

    @property
    def tokens(self) -> int:
        """Input and output tokens."""
        return self.input_tokens + self.output_tokens

    def figures(self) -> dict[str, Any]:
        """The row's figures, money as exact decimal text (JSON and CSV carry these)."""
        found: dict[str, Any] = {name: getattr(self, name) for name in self.FIGURES}
        found.update(cost=money(self.cost), limited_cost=money(self.limited_cost),
                     unpriced_models=list(self.unpriced_models))
        return found


def money(value: Decimal | None) -> str | None:
    """An exact amount as plain decimal text (``0.000075``, never ``7.5E-5``); ``None`` stays ``None``."""
    if value is None:
        return None
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


@dataclass
class CostReport:
    """A cost report: its rows, its total and the prices it used.

    Attributes:
        by: The dimensions, comma-separated as given (``team,model``).
        fields: The group's columns, in order (a readable session is two: ``user``, ``session``).
        readable: Users and sessions read as the application's ids (else pseudonymous keys).
        groups: How many groups matched (more than ``rows`` when ``top`` cut the list).
        top: The ``--top`` the rows were cut to, if any; the total always counts every group.
        filters: The filters as given, for the reader (ids only in a readable report).
    """

    by: str
    price_version: str
    currency: str
    rows: list[CostRow]
    total: CostRow
    fields: tuple[str, ...] = ()
    readable: bool = False
    groups: int = 0
    top: int | None = None
    filters: dict[str, str] = field(default_factory=dict)

    def to_pandas(self) -> Any:
        """The rows as a pandas DataFrame: the group's columns, then the figures (money as exact
        :class:`~decimal.Decimal`; ``.astype(float)`` to plot). The total is not a row of it.

        Raises:
            MissingExtra: pandas is not installed (``pip install 'teamstore[analytics]'``).
        """
        try:
            import pandas
        except ImportError as exc:
            raise MissingExtra("a DataFrame of a cost report", "analytics", "pandas") from exc
        figures = list(CostRow.FIGURES)
        records = [[*(r.group.get(f) for f in self.fields), *(getattr(r, f) for f in figures)] for r in self.rows]
        return pandas.DataFrame(records, columns=[*self.fields, *figures])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary: each row its group's columns, ``key`` and figures; money as strings."""
        return {
            "by": self.by, "fields": list(self.fields), "readable": self.readable,
            "price_version": self.price_version, "currency": self.currency,
            "groups": self.groups, "top": self.top, "filters": dict(self.filters),
            "rows": [{**r.group, "key": r.key, **r.figures()} for r in self.rows],
            "total": {"key": self.total.key, **self.total.figures()},
        }


def _filtered(query: Select[Any], where: CostFilter) -> Select[Any]:
    clauses = where.clauses()
    return query.where(and_(*clauses)) if clauses else query


def _columns(dims: Sequence[str], *extra: str) -> list[str]:
    return list(dict.fromkeys([c for d in dims for c in DIMENSIONS[d]] + list(extra)))


async def _run_groups(conn: AsyncConnection, names: list[str], where: CostFilter,
                      among: ColumnElement[bool] | None = None) -> list[Any]:
    """Distinct runs per group of ``names`` (of the groups ``among`` picks, if given), then how many of them
    were interrupted (continued or abandoned from a checkpoint)."""
    cols = [usage.c[n] for n in names]
    interrupted = func.count(func.distinct(case((usage.c.interruptions > 0, usage.c.run_id))))
    query = _filtered(select(*cols, func.count(func.distinct(usage.c.run_id)), interrupted), where).group_by(*cols)
    return list((await conn.execute(query if among is None else query.where(among))).all())


def as_date(day: Any) -> date:
    """A ledger ``day`` as a date (SQLite hands back its text)."""
    return day if isinstance(day, date) else date.fromisoformat(str(day))


def bucket(day: Any, scale: str) -> str:
    """The label of the ``day``, ``week`` (ISO, ``2026-W48``) or ``month`` (``2026-11``) holding ``day``."""
    found = as_date(day)
    if scale == "week":
        year, week, _ = found.isocalendar()
        return f"{year}-W{week:02d}"
    return f"{found.year}-{found.month:02d}" if scale == "month" else found.isoformat()


def days_of(label: str, scale: str) -> tuple[date, date]:
    """The first day of the ``week`` or ``month`` whose :func:`bucket` label is ``label``, and the day after
    its last."""
    if scale == "week":
        year, week = label.split("-W")
        first = date.fromisocalendar(int(year), int(week), 1)
        return first, first + timedelta(days=7)
    first = date.fromisoformat(f"{label}-01")
    return first, (first + timedelta(days=31)).replace(day=1)


def _dim_value(dim: str, values: dict[str, Any]) -> tuple[Any, ...]:
    if dim in TIME:
        return (bucket(values["day"], dim),)
    return tuple([values[c] for c in DIMENSIONS[dim]])  # a list first: a generator costs more, once per row


def group_fields(dims: Sequence[str], readable: bool = False) -> tuple[str, ...]:
    """The columns a group of ``dims`` is shown in: a session as ``user`` and ``session`` when readable,
    else ``session_key``; a user as ``user`` or ``subject_key``; any other dimension under its name."""
    names: list[str] = []
    for dim in dims:
        if dim == "session":
            names += ["user", "session"] if readable else ["session_key"]
        elif dim == "user":
            names.append("user" if readable else "subject_key")
        else:
            names.append(dim)
    return tuple(dict.fromkeys(names))


def pseudonymous_group(dims: Sequence[str], raw: tuple[tuple[Any, ...], ...]) -> dict[str, str]:
    """The group's columns with users and sessions as keys (``erased`` once de-linked)."""
    group: dict[str, str] = {}
    for dim, values in zip(dims, raw, strict=True):
        if dim == "session":
            group["session_key"] = str(values[0])
        elif dim == "user":
            group["subject_key"] = ERASED if values[0] is None else str(values[0])
        elif dim == "version":
            group["version"] = f"{values[0]}@{values[1]}"
        else:
            group[dim] = str(values[0])
    return group


class _Rows:
    """The report's groups being summed: each group by its raw values, and the total."""

    def __init__(self, dims: Sequence[str], prices: PriceTable) -> None:
        self.dims, self.prices = tuple(dims), prices
        self.groups: dict[tuple[tuple[Any, ...], ...], CostRow] = {}
        self.total = CostRow(key="total")

    def raw(self, values: dict[str, Any]) -> tuple[tuple[Any, ...], ...]:
        """The group of a ledger record's ``values``."""
        return tuple([_dim_value(d, values) for d in self.dims])

    def keep(self, top: int) -> None:
        """Forget all but the ``top`` costliest groups."""
        self.groups = dict(sorted(self.groups.items(), key=lambda item: costliest(item[1]))[:top])

    def matches(self, raw: tuple[tuple[Any, ...], ...]) -> ColumnElement[bool]:
        """The ledger rows of the group ``raw`` (a week or a month as the range of its days)."""
        clauses = []
        for dim, values in zip(self.dims, raw, strict=True):
            if dim in SPANS:
                first, after = days_of(values[0], dim)
                clauses += [usage.c.day >= first, usage.c.day < after]
                continue
            for name, value in zip(DIMENSIONS[dim], values, strict=True):
                column = usage.c[name]
                value = as_date(value) if dim == "day" else value
                clauses.append(column.is_(None) if value is None else column == value)
        return and_(*clauses)

    def row(self, values: dict[str, Any]) -> CostRow:
        raw = self.raw(values)
        if raw not in self.groups:
            group = pseudonymous_group(self.dims, raw)
            self.groups[raw] = CostRow(key=" / ".join(group.values()), group=group, raw=raw)
        return self.groups[raw]

    def add_tokens(self, values: dict[str, Any], sums: tuple[Any, Any, Any]) -> None:
        calls, tokens_in, tokens_out = (int(v or 0) for v in sums)
        price = self.prices.lookup(values["model"], as_date(values["day"]))
        amount = None if price is None else price.cost(tokens_in, tokens_out)
        for row in (self.row(values), self.total):
            row.calls += calls
            row.input_tokens += tokens_in
            row.output_tokens += tokens_out
            if amount is None:
                row.unpriced_tokens += tokens_in + tokens_out
                if values["ended_by_limit"]:
                    row.limited_unpriced_tokens += tokens_in + tokens_out
                if values["model"] not in row.unpriced_models:
                    row.unpriced_models.append(values["model"])
                continue
            row.cost = (row.cost or Decimal(0)) + amount
            if values["ended_by_limit"]:
                row.limited_cost = (row.limited_cost or Decimal(0)) + amount


def _add_runs(row: CostRow, limited: bool, failed: bool, runs: int, interrupted: int) -> None:
    row.runs_interrupted += interrupted
    if limited:
        row.runs_limited += runs
    elif failed:
        row.runs_failed += runs
    else:
        row.runs_completed += runs


async def _sum(conn: AsyncConnection, rows: _Rows, where: CostFilter) -> None:
    """Add the ledger's tokens and runs to ``rows`` and their total (on one connection: one snapshot)."""
    query, token_cols = await _token_query(conn, rows, where)
    result = await conn.stream(query)
    async for batch in result.partitions(STREAM_ROWS):
        for record in batch:
            rows.add_tokens(_values(token_cols, record), (record[-3], record[-2], record[-1]))
    await _sum_runs(conn, rows, where)


def _group_order(dims: Sequence[str]) -> list[str]:
    """The ledger columns that bring each group's records together when read in their order. A week's or
    a month's days follow one another, so reading by day within the other dimension's values does it."""
    if not set(SPANS) & set(dims):
        return _columns(dims)
    return _columns([d for d in dims if d not in TIME], "day")


STREAM_ROWS = 5_000
"""Ledger groups read at a time: a few megabytes, however many groups there are."""
BEFORE_ANY_PRICE = date.min
"""The price day of tokens no entry prices: :meth:`PriceTable.lookup` has no price on it."""


def price_period(prices: PriceTable, models: Sequence[str]) -> ColumnElement[Any]:
    """The first day of the price in force for a ledger row's model on the row's day (``NULL`` before the
    model's first entry, or for a model the table does not price). Tokens summed by it are priced as the
    rows' days would price them, one sum per price instead of one per day."""
    whens: list[tuple[ColumnElement[bool], ColumnElement[Any]]] = []
    for model in models:
        # Latest first: the first entry in force on the day is the one lookup() picks.
        for price in reversed(prices.history(model) or ()):
            day = literal(price.effective_from, Date)
            whens.append((and_(usage.c.model == model, usage.c.day >= day), day))
    return case(*whens, else_=null()) if whens else null()


async def _token_query(conn: AsyncConnection, rows: _Rows, where: CostFilter,
                       ordered: bool = False) -> tuple[Select[Any], list[str]]:
    """The ledger's tokens summed per group, model, price day and whether a limit ended the run (in the
    groups' order if ``ordered``): a report's time dimension sums them per day, any other per price period (a few rows per
    group and model, however many days its runs span). Returns the query and its group's columns."""
    token_cols = _columns(rows.dims, "model", "day", "ended_by_limit")
    day: ColumnElement[Any] = usage.c.day
    if not set(TIME) & set(rows.dims):
        models = (await conn.execute(_filtered(select(usage.c.model).distinct(), where))).scalars().all()
        day = price_period(rows.prices, models)
    # A subquery, so that GROUP BY names the period's column (Postgres does not match a CASE's parameters
    # in GROUP BY to those of the same CASE in the select list).
    picked = [usage.c[n] for n in token_cols if n != "day"]
    ledger = _filtered(select(*picked, day.label("day"), usage.c.calls, usage.c.input_tokens,
                              usage.c.output_tokens), where).subquery()
    cols = [ledger.c[n] for n in token_cols]
    sums = [func.sum(ledger.c.calls), func.sum(ledger.c.input_tokens), func.sum(ledger.c.output_tokens)]
    query = select(*cols, *sums).group_by(*cols)
    return (query.order_by(*(ledger.c[n] for n in _group_order(rows.dims))) if ordered else query), token_cols


def _values(token_cols: list[str], record: Any) -> dict[str, Any]:
    values = dict(zip(token_cols, record, strict=False))
    if values["day"] is None:
        values["day"] = BEFORE_ANY_PRICE
    return values


async def _sum_top(conn: AsyncConnection, rows: _Rows, where: CostFilter, top: int) -> int:
    """As :func:`_sum`, keeping only the ``top`` costliest groups: the ledger's tokens are read in the groups'
    order, each group priced whole before the next begins, so ``rows`` holds at most twice ``top`` of them
    however many there are. Returns how many groups there were."""
    query, token_cols = await _token_query(conn, rows, where, ordered=True)
    groups, current = 0, None
    result = await conn.stream(query)
    async for batch in result.partitions(STREAM_ROWS):  # a row at a time cost a trip to the driver's thread each
        for record in batch:
            values = _values(token_cols, record)
            raw = rows.raw(values)
            if raw != current:  # every group in rows is whole: the costliest may be kept
                groups, current = groups + 1, raw
                if len(rows.groups) >= 2 * top:
                    rows.keep(top)
            rows.add_tokens(values, (record[-3], record[-2], record[-1]))
    rows.keep(top)
    await _sum_runs(conn, rows, where, among=or_(false(), *(rows.matches(raw) for raw in rows.groups)))
    return groups


async def _sum_runs(conn: AsyncConnection, rows: _Rows, where: CostFilter,
                    among: ColumnElement[bool] | None = None) -> None:
    """Add the runs of ``rows``' groups (``among`` picks them, if given) and of the total."""
    run_cols = _columns(rows.dims, "ended_by_limit", "run_failed")
    for record in await _run_groups(conn, run_cols, where, among):
        values = dict(zip(run_cols, record, strict=False))
        _add_runs(rows.row(values), bool(values["ended_by_limit"]), bool(values["run_failed"]), int(record[-2]),
                  int(record[-1]))
    # Counted again without grouping: a run that used two models must count once in the total.
    for limited, failed, runs, interrupted in await _run_groups(conn, ["ended_by_limit", "run_failed"], where):
        _add_runs(rows.total, bool(limited), bool(failed), int(runs), int(interrupted))


def costliest(row: CostRow) -> tuple[Decimal, int, str]:
    """Sorts rows costliest first, ties by tokens, then by the ledger's key (an unknown cost as 0)."""
    return -(row.cost or Decimal(0)), -row.tokens, row.key


def _settle(row: CostRow) -> None:
    row.unpriced_models.sort()  # in the order the database gave, else
    if row.cost is None and row.unpriced_tokens == 0:
        row.cost = Decimal(0)  # no tokens at all (an empty report's total): nothing was spent, which is known
    # Unknown when the cost is (no priced tokens at all), like the cost; else 0 when no limit spent any.
    row.limited_cost = None if row.cost is None else (row.limited_cost or Decimal(0))


async def query_costs(
    source: AsyncEngine | AsyncConnection, prices: PriceTable, by: str | Sequence[str] = "session",
    where: CostFilter | None = None, top: int | None = None,
) -> CostReport:
    """Token usage and cost grouped by one or two dimensions, users and sessions as pseudonymous keys.

    Its queries read one snapshot of the ledger, so the rows and the total agree while runs are recorded.

    Args:
        source: The state database, or a connection of :func:`~teamstore.db.snapshot.read_snapshot` whose
            snapshot the report shares with the caller's other queries.
        prices: The price table to apply.
        by: One or two of session, user, team, version, model, agent, purpose, day, week, month
            (``"team,model"``).
        where: Filters; ``None`` for the whole ledger.
        top: Keep only the ``top`` costliest groups (ties by tokens, then by key), priced one group at a time
            so that a report of millions of sessions holds a few of them at once; ``None`` keeps every group.

    Returns:
        Rows sorted by key (the costliest first with ``top``), plus a total row that counts each run once; runs ended by a limit are counted
        apart from completed ones.

    Raises:
        ConfigurationError: ``by`` is not one or two known dimensions.
    """
    dims = parse_by(by)
    where = where or CostFilter()
    rows = _Rows(dims, prices)
    async with reading(source) as conn:
        if top is not None:
            groups = await _sum_top(conn, rows, where, top)
        else:
            await _sum(conn, rows, where)
            groups = len(rows.groups)
    ordered = sorted(rows.groups.values(), key=lambda r: r.key)
    if top is not None:
        ordered = sorted(ordered, key=costliest)[:top]
    for row in (*ordered, rows.total):
        _settle(row)
    return CostReport(by=",".join(dims), price_version=prices.version, currency=prices.currency, rows=ordered,
                      total=rows.total, fields=group_fields(dims), groups=groups)
