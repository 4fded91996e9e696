"""``teamstore cost``: token usage and cost from the ledger, as a table, CSV, JSON or one HTML page.

    teamstore cost --by team,model --since 7d --top 10 --format csv     # exit 3: the filters match nothing
    teamstore cost --by session --user alice --format json
    teamstore cost report --since 30d --every week --output cost.html    # one self-contained HTML page

Cost is derived from the price table (``teamstore prices``); a model it has no price for is counted in
tokens, its cost shown as unknown.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Callable, Sequence
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

import typer

from teamstore.cli._output import JsonOutput, dumps, fail
from teamstore.cli._registry_render import short
from teamstore.cli._runner import with_app
from teamstore.errors import ConfigurationError, NoMatchingUsage, TeamstoreError
from teamstore.terminal import console, inert, plain, print_table

# The database, the cost query and the price table are imported by the commands that use them, not with the
# command line: `teamstore --help` starts without them.
if TYPE_CHECKING:
    from teamstore.analytics.query import CostQuery
    from teamstore.app import App
    from teamstore.audit.cost import CostReport, CostRow
    from teamstore.audit.prices import PriceTable

GROUPINGS = ("session", "user", "team", "version", "model", "agent", "purpose", "day", "week", "month", "year")
"""``teamstore.audit.cost.DIMENSIONS``, named here for ``--help`` (a test keeps the two equal)."""

NO_MATCH = 3
"""``teamstore cost``'s exit status when its filters match nothing (0: matched, even at cost 0; 1: an error)."""

FIGURES = ["runs_completed", "runs_limited", "runs_failed", "runs_interrupted", "calls", "input_tokens",
           "output_tokens", "cost", "limited_cost", "unpriced_tokens", "limited_unpriced_tokens", "unknown_usage_calls"]
_HEADINGS = ("completed", "limited", "failed", "interrupted", "calls", "in", "out", "cost", "of which limited")


class Format(StrEnum):
    """What ``teamstore cost --format`` prints: a choice, so that help lists it and a usage error names it."""

    TABLE = "table"
    CSV = "csv"
    JSON = "json"


def _money(value: str | None, unpriced: int) -> str:
    if value is None:
        return "unknown"
    return value + (" + unknown" if unpriced else "")


TOTAL = "total"
"""What the first group column of the total line reads, in the table and the CSV."""


def _total_group(report: CostReport) -> list[str]:
    return [TOTAL, *[""] * (len(report.fields) - 1)]


def _group_values(report: CostReport, row: CostRow) -> list[str]:
    """A group's columns as the table and the CSV write them: a first column that would read as the total
    line's (a user whose id is ``total``) gets a leading ``'``, as a live user named ``erased`` does. A user
    starting with ``'`` already has one more (:func:`~teamstore.analytics.names.user_label`); any other
    column starting with ``'`` (an agent named ``'=x``) gets one more here, in every column: the CSV writes
    ``=x`` as ``'=x`` (:func:`_cell`), so no two groups read alike. JSON needs none: its values are as given."""
    values = [row.group.get(f, "") for f in report.fields]
    marked = [f"'{v}" if v.startswith("'") and f != "user" else v for f, v in zip(report.fields, values, strict=True)]
    if values and values[0] == TOTAL:  # marked after the others: its own ' is the mark, not a name's
        marked[0] = f"'{TOTAL}"
    return marked


def _table_cells(report: CostReport, row: CostRow, total: bool) -> list[str]:
    group = _total_group(report) if total else [_group_cell(f, v) for f, v in zip(report.fields,
                                                                                  _group_values(report, row),
                                                                                  strict=True)]
    figures = row.figures()
    return [*(plain(v) for v in group), str(row.runs_completed), str(row.runs_limited), str(row.runs_failed),
            str(row.runs_interrupted), str(row.calls), str(row.input_tokens), str(row.output_tokens),
            _money(figures["cost"], row.unpriced_tokens + row.unknown_usage_calls),
            _money(figures["limited_cost"], row.limited_unpriced_tokens)]


def _group_cell(field: str, value: str) -> str:
    """A group as the table shows it: a team version as the registry's tables show one (``team@`` and its first
    12 characters, which ``registry show`` takes), where the whole sha wrapped into a column of fragments. CSV
    and JSON keep it whole."""
    if field != "version":
        return value
    team, at, version = value.rpartition("@")
    return f"{team}{at}{short(version)}" if at and len(version) == 40 else value


def _render_cost_table(report: CostReport, prices: PriceTable) -> None:
    _table_page(report, report.rows, first=True, last=True)
    _table_notes(report, prices)


def _table_page(report: CostReport, rows: Sequence[CostRow], *, first: bool, last: bool) -> None:
    """A table of ``rows``: the first page under the report's title, the last one ending with its total."""
    cells = [_table_cells(report, row, False) for row in rows]
    if last:
        cells.append(_table_cells(report, report.total, True))
    width = len(report.fields)
    numbers = range(width, width + len(_HEADINGS))
    # Whole: `registry show` takes a version; a day folded into `2026-1` over `1-15` reads as neither.
    whole = [i for i, field in enumerate(report.fields) if field in {"version", "day", "week", "month", "year"}]
    title = plain(f"cost by {report.by} ({report.currency}, prices {report.price_version})") if first else None
    print_table((*report.fields, *_HEADINGS), cells, fixed=[*whole, *numbers], right=numbers, title=title)


def _table_notes(report: CostReport, prices: PriceTable) -> None:
    """The lines under the table: how many groups ``--top`` left out, the models with no price."""
    if report.top is not None and report.groups > len(report.rows):
        console.print(f"the {len(report.rows)} costliest of {report.groups} groups; the total counts all of them")
    unknown = [_unpriced(model, prices) for model in sorted(set(report.total.unpriced_models))]
    if unknown:
        console.print(
            f"[yellow]no price for {plain(', '.join(unknown))}: their tokens are counted, their cost is "
            "unknown[/]"
        )
    if report.total.unknown_usage_calls:
        console.print(
            f"[yellow]{report.total.unknown_usage_calls} of the calls have unknown usage (they failed, or were "
            "answered without their usage): their tokens and cost are not in the figures[/]"
        )


def _unpriced(model: str, prices: PriceTable) -> str:
    """A model the report has no price for, and since when the table prices it, if it does: the day a run
    started predates its first entry (``prices show`` lists the model all the same)."""
    history = prices.history(model)
    return model if not history else f"{model} before {history[0].effective_from.isoformat()}"


_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> object:
    """A CSV cell a spreadsheet reads as meant: a string it would read as a formula (a team, agent or model
    name starting with '=') gets a leading apostrophe; an amount is written in plain decimals."""
    if value is None:
        return ""
    if isinstance(value, float):  # plain decimals: 0.0000674, never 6.74e-05
        return f"{value:.12f}".rstrip("0").rstrip(".") or "0"
    if isinstance(value, Decimal):
        from teamstore.audit.cost_report import money

        return money(value)
    return f"'{value}" if isinstance(value, str) and value.startswith(_FORMULA) else value


class _Output(Protocol):
    """A report's output, written a row at a time."""

    def row(self, row: CostRow) -> None:
        """Write one group's row."""

    def end(self) -> None:
        """Write what follows the rows (the total)."""


class _Csv:
    """One line per group, then the total (its first group column reads ``total``); money as exact text. On a
    terminal, the characters it would act on (C0 and C1 controls, bidirectional overrides) in a name or an id
    are shown escaped, as the table shows them; a file or a pipe gets the CSV as stored."""

    def __init__(self, report: CostReport, prices: PriceTable | None = None) -> None:
        self.report, self.writer = report, csv.writer(sys.stdout, lineterminator="\n")
        self.on_terminal = sys.stdout.isatty()
        self.writer.writerow([*report.fields, *FIGURES, "unpriced_models", "currency", "price_version"])

    def _write(self, cells: list[object]) -> None:
        self.writer.writerow([inert(c) if self.on_terminal and isinstance(c, str) else c for c in cells])

    def row(self, row: CostRow, group: Sequence[str] | None = None) -> None:
        figures = row.figures()
        cells = [_cell(v) for v in group or _group_values(self.report, row)]
        cells += [_cell(figures[c]) for c in FIGURES]
        self._write([*cells, _cell(";".join(row.unpriced_models)), self.report.currency, self.report.price_version])

    def end(self) -> None:
        self.row(self.report.total, _total_group(self.report))


class _Json:
    """The document ``json.dumps`` of :meth:`CostReport.to_dict` gives, written a row at a time: the keys
    before ``rows`` (sorted: ``groups`` among them, counted first), each row, then ``top`` and the total."""

    _ROWS = '\n  "rows": []'

    def __init__(self, report: CostReport, prices: PriceTable) -> None:
        self.report, self.rows = report, 0
        sys.stdout.write(self._around()[0] + '\n  "rows": [')
        JsonOutput.written = True  # the document a later failure (nothing matched: exit 3) must not follow

    def row(self, row: CostRow) -> None:
        item = dumps({**row.group, "key": row.key, **row.figures()}).replace("\n", "\n    ")
        sys.stdout.write(("," if self.rows else "") + "\n    " + item)
        self.rows += 1

    def end(self) -> None:
        sys.stdout.write(("\n  ]" if self.rows else "]") + self._around()[1] + "\n")

    def _around(self) -> list[str]:
        """The document before its rows and after them."""
        return dumps({**self.report.to_dict(), "rows": []}).split(self._ROWS)


class _Table:
    """The table, in pages of :data:`TABLE_PAGE` rows (each as wide as its own rows need): only the first
    under the title, only the last with the total."""

    def __init__(self, report: CostReport, prices: PriceTable) -> None:
        self.report, self.prices, self.first = report, prices, True
        self.rows: list[CostRow] = []

    def row(self, row: CostRow) -> None:
        if len(self.rows) == TABLE_PAGE:
            _table_page(self.report, self.rows, first=self.first, last=False)
            self.rows, self.first = [], False
        self.rows.append(row)

    def end(self) -> None:
        _table_page(self.report, self.rows, first=self.first, last=True)
        _table_notes(self.report, self.prices)


TABLE_PAGE = 1_000
"""Rows of a listing's table printed at once: a table is as wide as its widest row, known only once read."""
_OUTPUTS: dict[str, Callable[[CostReport, PriceTable], _Output]] = {"table": _Table, "csv": _Csv, "json": _Json}


def _write_csv(report: CostReport) -> None:
    """The report as CSV (:class:`_Csv`)."""
    out = _Csv(report)
    for row in report.rows:
        out.row(row)
    out.end()


def _print_report(report: CostReport, prices: PriceTable, fmt: str) -> None:
    if fmt == "table":  # the --top report's rows are all there: one table, and its note on the groups left out
        _render_cost_table(report, prices)
        return
    out = _OUTPUTS[fmt](report, prices)
    for row in report.rows:
        out.row(row)
    out.end()


async def _print_listing(app: App, query: CostQuery, fmt: str) -> NoMatchingUsage | None:
    """Print every group as it is read from the ledger; why nothing matched, if nothing did."""
    from teamstore.analytics.query import cost_listing
    from teamstore.audit.prices import load_prices

    prices = load_prices(app.settings.prices_path)
    async with cost_listing(app.engine, prices, query, count=fmt == "json") as listing:
        out = _OUTPUTS[fmt](listing.report, prices)
        async for row in listing.rows():
            out.row(row)
        out.end()
        return await listing.missing()


async def _report_or_empty(app: App, query: CostQuery) -> tuple[CostReport, PriceTable, NoMatchingUsage | None]:
    from teamstore.analytics.query import cost_report
    from teamstore.audit.cost import CostReport
    from teamstore.audit.prices import load_prices

    prices = load_prices(app.settings.prices_path)
    try:
        return await cost_report(app.engine, prices, query), prices, None
    except NoMatchingUsage as exc:
        if not isinstance(exc.report, CostReport):
            raise
        return exc.report, prices, exc


_BY = f"Group by one or two of {'|'.join(GROUPINGS)}, e.g. team,model."
_WHEN = "YYYY-MM-DD, an ISO timestamp (UTC unless it says), or back from now: 24h, 7d, 2w."
_PSEUDONYMOUS = "Users and sessions as pseudonymous keys, not the application's ids (for reports that leave your hands)."
cost_app = typer.Typer(help="Token usage and cost from the ledger, and an HTML report of it. Exit status: 0 "
                       "when the filters match (even at cost 0), 3 when they match nothing, 1 on an error.")


# The filters `cost` and `cost report` share.
SessionOption = typer.Option(None, "--session", help="One session (needs --user).")
UserOption = typer.Option(None, "--user", help="One user (exact id).")
TeamOption = typer.Option(None, "--team", help="One team.")
ModelOption = typer.Option(None, "--model", help="One model (as the ledger names it).")
SinceOption = typer.Option(None, "--since", help=f"Runs started at or after: {_WHEN}")
UntilOption = typer.Option(None, "--until", help=f"Runs started before: {_WHEN}")
FormatOption = typer.Option(Format.TABLE, "--format", help="A table for people; CSV or JSON for tools.")


@cost_app.callback(invoke_without_command=True)
def cost(
    ctx: typer.Context,
    by: str = typer.Option("session", "--by", help=_BY),
    session: str | None = SessionOption,
    user: str | None = UserOption,
    team: str | None = TeamOption,
    model: str | None = ModelOption,
    since: str | None = SinceOption,
    until: str | None = UntilOption,
    top: int | None = typer.Option(None, "--top", help="Only the N costliest groups (ties by tokens)."),
    pseudonymous: bool = typer.Option(False, "--pseudonymous", help=_PSEUDONYMOUS),
    fmt: Format = FormatOption,
) -> None:
    """Token usage and cost from the ledger; runs ended by a limit are counted apart from completed ones."""
    if ctx.invoked_subcommand is not None:
        if ctx.params != {p.name: p.get_default(ctx) for p in ctx.command.params}:
            raise ConfigurationError(f"options given before `{ctx.invoked_subcommand}` are not its options",
                                     hint=f"put them after it: teamstore cost {ctx.invoked_subcommand} --since 7d ...")
        return
    from teamstore.analytics.query import CostQuery

    query = CostQuery.build(by, user=user, session=session, team=team, model=model, since=since, until=until,
                            top=top, pseudonymous=pseudonymous)
    if top is None:  # every group: printed as read, however many there are
        missing = with_app(lambda app: _print_listing(app, query, fmt), must_exist=True)
    else:
        report, prices, missing = with_app(lambda app: _report_or_empty(app, query), must_exist=True)
        _print_report(report, prices, fmt)
    if missing is not None:  # printed all the same, so a pipe gets its header; the status says it is empty
        fail(missing, code=NO_MATCH)


@cost_app.command("report")
def cost_report_page(
    output: str = typer.Option(..., "--output", "-o",
                               help="The HTML file to write, owner-only (0600); one already there is replaced."),
    every: str = typer.Option("day", "--every", help=(
        "Time scale of the charts: day | week | month | year (a longer one when the runs span more than 104).")),
    top: int = typer.Option(10, "--top", min=1, help="How many of the costliest sessions to chart (1 to 50)."),
    session: str | None = SessionOption,
    user: str | None = UserOption,
    team: str | None = TeamOption,
    model: str | None = ModelOption,
    since: str | None = SinceOption,
    until: str | None = UntilOption,
    pseudonymous: bool = typer.Option(False, "--pseudonymous", help=_PSEUDONYMOUS),
) -> None:
    """Write one self-contained HTML page (no server, nothing fetched): cost over time by team and by model,
    the costliest sessions, tokens per run, and runs ended by a limit."""
    from teamstore.analytics.page import check_page, report_page, report_target, write_page
    from teamstore.audit.prices import load_prices

    filters = {"user": user, "session": session, "team": team, "model": model, "since": since, "until": until}
    try:
        check_page(every=every, top=top, **filters)  # before the database is looked for: the options are wrong
        target = report_target(output)
    except TeamstoreError as exc:
        fail(exc)

    async def go(app: App) -> str | NoMatchingUsage:
        try:
            return await report_page(app.engine, load_prices(app.settings.prices_path), every=every, top=top,
                                     pseudonymous=pseudonymous, **filters)
        except NoMatchingUsage as exc:
            return exc

    page = with_app(go, must_exist=True)
    if isinstance(page, NoMatchingUsage):
        fail(page, code=NO_MATCH)  # no page for nothing: an old one at --output is left as it was
    try:
        write_page(target, page)
    except TeamstoreError as exc:
        fail(exc)
    console.print(plain(f"wrote {output} ({len(page.encode('utf-8'))} bytes)"))



def register(app: typer.Typer) -> None:
    """Mount this module's commands on the main app."""
    app.add_typer(cost_app, name="cost")
