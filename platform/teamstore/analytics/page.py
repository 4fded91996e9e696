"""``teamstore cost report``: one self-contained HTML page of charts, readable offline with no server.

    from teamstore.analytics.page import report_page

    html = await report_page(engine, load_prices(), every="week", since="30d", team="support_triage")

Four reports of the same filters make the page: cost by time and team, by time and model, the costliest
sessions, and by time alone (tokens per run, and runs completed, ended by a limit or failed). Each is
embedded whole as the JSON ``teamstore cost --format json`` prints for it (``<script type=
"application/json" id="report-data">``), and the charts are inline SVG whose marks carry their figures, each
drawn for a desktop and for a phone (:mod:`teamstore.analytics.svg`). Its colours have a light and a dark scheme.
The page loads nothing: its Content-Security-Policy forbids every fetch and every script.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.analytics import svg
from teamstore.analytics.periods import drawn_scale, periods
from teamstore.analytics.query import CostQuery, cost_report
from teamstore.audit.cost import TIME
from teamstore.audit.cost_report import CostReport, CostRow, money
from teamstore.audit.prices import PriceTable
from teamstore.db.snapshot import read_snapshot
from teamstore.disk import fsync_name
from teamstore.errors import ConfigurationError, ReportNotWritten, refused_value

OUTCOMES = ("completed", "ended by a limit", "failed")
# The colours are custom properties, so a dark scheme (on a screen only: a printed page stays light) is the same
# rules with other values. A mark's colour is its palette place's (class hue0 to hue9), as its legend swatch's;
# the light ones are written first, so the dark scheme's, after them, win.
# A chart is drawn twice: a phone shows the narrow one at its drawn size, as the wide one scaled to its
# screen would have text a few pixels high. A name or figure longer than a phone is wide breaks anywhere
# rather than push the page off the side.
STYLE = (
    "".join(f".hue{i}{{--c:{c}}}" for i, c in enumerate(svg.PALETTE)) + """
:root{color-scheme:light dark;--bg:#fff;--text:#222;--muted:#555;--label:#444;--panel:#f4f6f8;--chart:#fcfcfc;
--rule:#e3e3e3;--axis:#888;--warn:#8a5a00}
@media screen and (prefers-color-scheme:dark){:root{--bg:#121417;--text:#e4e6ea;--muted:#aeb4bd;--label:#c0c6ce;
--panel:#1f2329;--chart:#1b1e23;--rule:#383e46;--axis:#9aa0a8;--warn:#f0b45a}"""
    + "".join(f".hue{i}{{--c:{c}}}" for i, c in enumerate(svg.DARK_PALETTE)) + """}
@media print{:root{color-scheme:light}}
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;padding:0 12px;max-width:820px;color:var(--text);
background:var(--bg)}
h1{font-size:22px;margin:0 0 4px} h2{font-size:16px;margin:28px 0 6px} .meta{color:var(--muted);margin:0 0 16px}
.summary{display:flex;gap:24px;flex-wrap:wrap} .summary div{background:var(--panel);padding:8px 12px;border-radius:6px}
.summary b{display:block;font-size:18px} svg.chart,svg.small-chart{max-width:100%;height:auto;background:var(--chart)}
svg.small-chart{display:none} @media screen and (max-width:719.98px){svg.chart{display:none} svg.small-chart{display:block}}
svg text{font-size:11px;fill:var(--label)} svg text.empty{font-size:13px;fill:var(--muted)} svg .axis{stroke:var(--axis)}
svg .bar,svg .point{fill:var(--c)} svg .line{stroke:var(--c)} .swatch{background:var(--c)}
.legend{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:12px}
.swatch{display:inline-block;width:10px;height:10px;margin-right:4px} table{border-collapse:collapse}
td,th{padding:3px 10px;border-bottom:1px solid var(--rule);text-align:right} td:nth-child(2),th:nth-child(2){text-align:left}
.note{color:var(--muted);font-size:12px} .warn{color:var(--warn)}
td{font-variant-numeric:tabular-nums} td:nth-child(2),.legend li,.summary b,.meta,.warn{overflow-wrap:anywhere}
@media (max-width:480px){td,th{padding:3px 4px}}
details.figures{margin:6px 0} details.figures summary{cursor:pointer;color:var(--muted)}
.scroll{overflow-x:auto;max-width:100%} .scroll th[scope=row]{text-align:left;white-space:nowrap}
.scroll td{text-align:right} .scroll th[scope=col]{min-width:7em;vertical-align:bottom;overflow-wrap:anywhere}
.scroll caption{text-align:left;color:var(--muted)}
@media print{section{break-inside:avoid} h2{break-after:avoid} svg,tr{break-inside:avoid}
details.figures{display:none}}
""")


MOST_TOP = 50
"""The most sessions the page charts: fifty bars are a page tall, each name legible beside its bar."""
MOST_BARS = min(svg.most_bars(layout) for layout in (svg.WIDE, svg.SMALL))
"""The most periods a time chart draws (104: a phone's chart is the narrowest), each bar at least
:data:`svg.MIN_BAR_WIDTH` wide; a longer span is drawn at a coarser scale (:func:`drawn_scale`)."""


def check_page(*, every: str, top: int, **filters: Any) -> None:
    """Refuse a page that cannot be drawn, before any database is opened: the checks :func:`report_data` makes.

    Raises:
        ConfigurationError: ``every`` is not day, week, month or year, ``top`` is not 1 to :data:`MOST_TOP`, or
            a filter is malformed.
        InvalidIdentifier: A user or session id no run can have.
    """
    if every not in TIME:
        raise ConfigurationError(refused_value("--every", takes="one of day, week, month or year"),
                                 hint="e.g. --every week")
    if not 1 <= top <= MOST_TOP:
        raise ConfigurationError(refused_value("--top", takes=f"a number of sessions to chart from 1 to {MOST_TOP}"),
                                 hint=f"give --top {MOST_TOP} or fewer, e.g. --top 10; `teamstore cost --by session "
                                 "--top N` lists more")
    CostQuery.build(every, **filters)


async def report_data(engine: AsyncEngine, prices: PriceTable, *, every: str = "day", top: int = 10,
                      pseudonymous: bool = False, now: datetime | None = None, **filters: Any) -> dict[str, CostReport]:
    """The four reports the page shows, each as ``teamstore cost`` gives it for the same filters, all read in
    one snapshot of the database: runs recorded meanwhile are in none of them, so their totals agree.

    The time reports are by ``every`` unless their runs span more than :data:`MOST_BARS` periods of it: then by
    the first coarser scale they span at most that many of (:func:`drawn_scale`), which ``by_time``'s ``by``
    names. Every figure is the ledger's either way, summed over longer periods.

    Raises:
        ConfigurationError: ``every`` is not day, week, month or year, ``top`` is not 1 to :data:`MOST_TOP`, or
            a filter is malformed.
        NoMatchingUsage: Nothing matches the filters.
    """
    check_page(every=every, top=top)
    now = now or datetime.now(UTC)  # one instant for the four: '7d' means the same window in each

    def query(by: tuple[str, ...], top: int | None = None) -> CostQuery:
        return CostQuery.build(by, top=top, pseudonymous=pseudonymous, now=now, **filters)

    async with read_snapshot(engine) as conn:
        by_time = await cost_report(conn, prices, query((every,)))
        drawn = drawn_scale([r.group[every] for r in by_time.rows], every, MOST_BARS)
        if drawn != every:  # the same snapshot summed by longer periods: the same runs, the same total
            by_time = await cost_report(conn, prices, query((drawn,)))
        shapes = {"cost_by_team": query((drawn, "team")), "cost_by_model": query((drawn, "model")),
                  "top_sessions": query(("session",), top=top)}
        return {"by_time": by_time} | {name: await cost_report(conn, prices, q) for name, q in shapes.items()}


def _amount(value: Decimal | None) -> float:
    return float(value or 0)


def _shown(row: CostRow) -> str:
    """The row's cost as read: ``unknown`` when no token of it has a price, ``+ unknown`` when some have none or
    some calls' usage is unknown."""
    return _said(row.cost, row.unpriced_tokens > 0 or row.unknown_usage_calls > 0)


def _said(cost: Decimal | None, unpriced: bool) -> str:
    if cost is None:
        return "unknown"
    return f"{money(cost)} + unknown" if unpriced else str(money(cost))


def _cost_bars(report: CostReport, every: str, series: str, ranked: list[str]) -> tuple[list[svg.Bar], list[str]]:
    """The marks of cost by ``every`` and ``series``, and the series they stack. Past ten series, the ninth
    costliest on are one mark per period, their sum (named :func:`svg.other`, drawn in the grey the legend
    gives them): a chart of 300 teams has as many marks as one of ten, not a stack of slivers."""
    kept = ranked if len(ranked) <= len(svg.PALETTE) else ranked[:len(svg.PALETTE) - 1]
    named = set(kept)
    bars = [svg.Bar(r.group[every], r.group[series], _amount(r.cost), _shown(r))
            for r in report.rows if r.group[series] in named]
    rest: dict[str, list[CostRow]] = {}
    for row in report.rows:
        if row.group[series] not in named:
            rest.setdefault(row.group[every], []).append(row)
    if not rest:
        return bars, kept
    folded = svg.other(len(ranked) - len(kept))
    for period, rows in rest.items():
        priced = [r.cost for r in rows if r.cost is not None]
        cost = sum(priced, Decimal(0)) if priced else None
        bars.append(svg.Bar(period, folded, _amount(cost), _said(cost, any(r.unpriced_tokens or r.unknown_usage_calls for r in rows))))
    return bars, [*kept, folded]


def _per_run(row: CostRow) -> Decimal:
    return round(Decimal(row.tokens) / max(1, row.runs), 1)


def _outcome_bars(report: CostReport, every: str) -> list[svg.Bar]:
    return [svg.Bar(r.group[every], name, float(n), str(n)) for r in report.rows
            for name, n in zip(OUTCOMES, (r.runs_completed, r.runs_limited, r.runs_failed), strict=True)]


def _ranked(report: CostReport, series: str) -> list[str]:
    """Series by their whole cost, the largest at the bottom of each stack and first in the legend."""
    totals: dict[str, float] = {}
    for row in report.rows:
        totals[row.group[series]] = totals.get(row.group[series], 0.0) + _amount(row.cost)
    return sorted(totals, key=lambda name: (-totals[name], name))


def _no_cost(total: CostRow) -> str:
    """What a cost chart with nothing above 0 says, and what to do about it."""
    if total.unpriced_tokens:
        return "No cost to draw: these runs' models have no price. Add them to the price table (named below)."
    if total.unknown_usage_calls:
        return ("No cost to draw: these runs' calls were answered without their usage, or failed. Have streaming "
                "clients ask for usage (docs/analysts.md).")
    return "No cost to draw: every run here cost 0 (free models, or no tokens)."


def _drawn(draw: Callable[..., str]) -> str:
    """A chart in both :class:`svg.Layout` s (``draw`` takes ``layout``): the style shows the one that fits."""
    return draw(layout=svg.WIDE) + draw(layout=svg.SMALL)


def _chart(chart_id: str, title: str, chart: str, note: str = "", series: list[str] | None = None,
           figures: str = "") -> str:
    """A chart under its heading, which names it to a screen reader (``aria-labelledby``), then its legend
    and its figures as a table (:func:`svg.table`)."""
    return (f'<section><h2 id="{chart_id}-title">{svg.shown(title)}</h2>{chart}'
            + (svg.legend(series) if series else "")
            + (f'<p class="note">{svg.shown(note)}</p>' if note else "") + figures + "</section>")


def _summary(total: CostRow, currency: str) -> str:
    cells = [("cost", f"{_shown(total)} {currency}", "total-cost"),
             ("runs", str(total.runs), "total-runs"), ("ended by a limit", str(total.runs_limited), "total-limited"),
             ("tokens in / out", f"{total.input_tokens} / {total.output_tokens}", "total-tokens")]
    return '<div class="summary">' + "".join(
        f'<div id="{key}">{svg.shown(label)}<b>{svg.shown(value)}</b></div>' for label, value, key in cells) + "</div>"


def _parts(row: CostRow) -> str:
    """The row's name (user / session), each part its own run of text (``<bdi>``), as :func:`svg.isolated`."""
    return " / ".join(f"<bdi>{svg.shown(part)}</bdi>" for part in row.group.values())


def _sessions_table(report: CostReport) -> str:
    rows = "".join(
        f"<tr><td>{i}</td><td>{_parts(r)}</td><td>{r.runs}</td><td>{r.tokens}</td>"
        f"<td>{svg.shown(_shown(r))}</td></tr>" for i, r in enumerate(report.rows, start=1))
    return ('<table id="top-sessions-table"><tr><th>#</th><th>session</th><th>runs</th><th>tokens</th>'
            f"<th>cost ({svg.shown(report.currency)})</th></tr>{rows}</table>")


def _top_title(shown: int, of: int) -> str:
    """The costliest sessions' heading: "the 1 costliest of 1 sessions" said as English would say it."""
    if shown < of:
        return f"The {shown} costliest of {of} sessions"
    return "The session by cost" if of == 1 else f"The {of} sessions by cost"


def _header(reports: dict[str, CostReport], every: str) -> str:
    first = reports["by_time"]
    # A day given as --since or --until (midnight UTC) is said as that day, not as a timestamp.
    shown = ", ".join(f"{k} {str(v).removesuffix('T00:00:00+00:00')}" for k, v in first.filters.items()) \
        or "the whole ledger"
    periods = sorted({r.group[every] for r in first.rows})  # the filters may be open-ended: say what was found
    if periods:
        shown += f" · runs started {periods[0]}" + (f" to {periods[-1]}" if len(periods) > 1 else "")
    made = datetime.now(UTC).isoformat(timespec="seconds")
    return (f"<h1>Cost report</h1><p class=\"meta\">{svg.shown(shown)} · every {svg.shown(every)} · prices "
            f"{svg.shown(first.price_version)} ({svg.shown(first.currency)}) · made {svg.shown(made)}</p>")


def _footer(reports: dict[str, CostReport]) -> str:
    total = reports["by_time"].total
    unpriced = sorted(set(total.unpriced_models))
    warn = (f'<p class="warn">No price for {svg.shown(", ".join(unpriced))}: their {total.unpriced_tokens} tokens '
            "are counted, their cost is unknown.</p>") if unpriced else ""
    who = ("Users and sessions are named by the application's own ids. Erasure cannot reach a copy of this "
           "page: write it with --pseudonymous when it leaves the analysts' hands."
           if reports["by_time"].readable else "Users and sessions appear as pseudonymous keys only.")
    return f'{warn}<p class="note">{svg.shown(who)}</p>'


MOST_EMBEDDED_ROWS = 5_000
"""The most rows of each report the page embeds: a hundred days by a hundred teams is some 10,000, megabytes
of JSON no chart needs (it draws at most ten series). Past it, the latest rows are kept."""


def _embedded(report: CostReport) -> dict[str, Any]:
    """The report as ``teamstore cost --format json`` prints it, cut to its last :data:`MOST_EMBEDDED_ROWS`
    rows (by period: the latest) with ``rows_left_out`` saying how many were left out."""
    data = report.to_dict()
    left_out = len(data["rows"]) - MOST_EMBEDDED_ROWS
    if left_out > 0:
        data["rows"], data["rows_left_out"] = data["rows"][left_out:], left_out
    return data


def _data_block(reports: dict[str, CostReport]) -> str:
    text = json.dumps({name: _embedded(r) for name, r in reports.items()}, sort_keys=True, ensure_ascii=False)
    # Inside <script>, '</script>' or '<!--' in a name would end or bend the block: '<' is written escaped.
    inert = text.replace("<", "\\u003c")
    return f'<script type="application/json" id="report-data">{inert}</script>'


def _coarser(reports: dict[str, CostReport], asked: str) -> str:
    """Why the time charts are drawn by a longer period than ``asked``, and how to get each one; empty when
    they are not."""
    drawn = reports["by_time"].by
    if drawn == asked:
        return ""
    keys = [r.group[drawn] for r in reports["by_time"].rows]
    return (f"Drawn by {drawn}, not by {asked}: from {min(keys)} to {max(keys)} there are more {asked}s than the "
            f"{MOST_BARS} bars a chart draws legibly. `teamstore cost --by {asked}` with the same filters lists "
            f"each {asked}.")


def render_page(reports: dict[str, CostReport], asked: str) -> str:
    """The HTML page of :func:`report_data`'s reports, their time scale ``asked`` for (they may be by a longer
    one: their ``by`` says)."""
    every = reports["by_time"].by
    coarser = _coarser(reports, asked)
    table = partial(svg.table, caption=coarser)
    teams, models = _ranked(reports["cost_by_team"], "team"), _ranked(reports["cost_by_model"], "model")
    (by_team, team_marks), (by_model, model_marks) = _cost_bars(reports["cost_by_team"], every, "team", teams), \
        _cost_bars(reports["cost_by_model"], every, "model", models)
    currency = reports["by_time"].currency
    sessions = [svg.Bar(r.key, "cost", _amount(r.cost), _shown(r)) for r in reports["top_sessions"].rows]
    per_run = [svg.Bar(r.group[every], "tokens per run", float(_per_run(r)), str(_per_run(r)))
               for r in reports["by_time"].rows]
    outcomes = _outcome_bars(reports["by_time"], every)
    top = reports["top_sessions"]
    axis = periods([r.group[every] for r in reports["by_time"].rows], every)  # idle ones keep their place
    no_cost = _no_cost(reports["by_time"].total)
    charts = [
        _chart("cost-by-team", "Cost over time by team",
               _drawn(partial(svg.stacked_bars, "cost-by-team", by_team, currency, team_marks, axis, no_cost)),
               series=teams, figures=table("cost-by-team", by_team, currency, team_marks, axis)),
        _chart("cost-by-model", "Cost over time by model",
               _drawn(partial(svg.stacked_bars, "cost-by-model", by_model, currency, model_marks, axis, no_cost)),
               series=models, figures=table("cost-by-model", by_model, currency, model_marks, axis)),
        _chart("top-sessions", _top_title(len(top.rows), top.groups),
               _drawn(partial(svg.horizontal_bars, "top-sessions", sessions, currency, no_cost))
               + _sessions_table(top)),
        _chart("tokens-per-run", "Tokens per run",
               _drawn(partial(svg.points, "tokens-per-run", per_run, "tokens", axis,
                              "No tokens to draw: these runs used none.")),
               note="input and output tokens of the runs started in each period, divided by their number",
               figures=table("tokens-per-run", per_run, "tokens", ["tokens per run"], axis)),
        _chart("runs-by-outcome", "Runs ended by a limit",
               _drawn(partial(svg.stacked_bars, "runs-by-outcome", outcomes, "runs", list(OUTCOMES), axis)),
               series=list(OUTCOMES), figures=table("runs-by-outcome", outcomes, "runs", list(OUTCOMES), axis)),
    ]
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>teamstore cost report</title><style>{STYLE}</style></head><body>"
            + _header(reports, every) + (f'<p class="note" id="drawn-by">{svg.shown(coarser)}</p>' if coarser else "")
            + _summary(reports["by_time"].total, currency) + "".join(charts)
            + _footer(reports) + _data_block(reports) + "</body></html>\n")


def report_target(path: str | Path) -> Path:
    """Where a report page goes, checked before its query runs: a file path in an existing folder (a file
    there is replaced; a folder is not).

    Raises:
        ReportNotWritten: An empty path, a folder, or a path whose folder does not exist.
    """
    if not str(path).strip():
        raise ReportNotWritten("no file given for the report", hint="give --output a file path, e.g. cost.html")
    target = Path(path)
    try:
        if target.is_dir():
            raise ReportNotWritten(f"{target} is a folder", hint="give --output a file path, e.g. cost.html")
        if not target.parent.is_dir():
            raise ReportNotWritten(f"the folder {target.parent} does not exist",
                                   hint="create it, or give --output a path in an existing folder")
    except OSError as exc:  # a name too long, a folder this user may not enter
        raise _not_written(target, exc) from exc
    return target


def write_page(target: Path, html: str) -> None:
    """Write ``html`` to ``target`` (from :func:`report_target`), owner-only (``0600``, as an export is): a
    readable page names users and sessions. The page is written beside the target and moved over it, so a
    reader sees the old page or the new one whole, never half of one. A file already there is replaced, as a
    page regenerated on a schedule needs (a symlink there is replaced itself: the page is not written through
    it to wherever it points).

    Its bytes are flushed to the disk before the move and its folder after it, so a page the command said it wrote
    outlives a power loss.

    Raises:
        ReportNotWritten: The file could not be written (nothing else was changed), or it was, but its folder could
            not be flushed (the message says so). Not an outcome in doubt to record: nothing else relies on the
            page, and the same command run again writes it whole again.
    """
    try:
        _replace(target, html)
    except OSError as exc:
        raise _not_written(target, exc) from exc
    try:
        fsync_name(target)
    except OSError as exc:
        raise ReportNotWritten(f"wrote {target}, but its folder could not be flushed to the disk "
                               f"({exc.strerror or type(exc).__name__}): it may not outlive a power loss",
                               hint="check the disk it is on, then run the same command again") from exc


def _replace(target: Path, html: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")  # 0600, whatever the umask
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(html)
            handle.flush()
            os.fsync(handle.fileno())  # before the rename: else a power loss could leave the name on an empty file
        os.replace(tmp, target)
    except BaseException:  # half a page (a full disk, an interrupt) must not stay beside the target
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _not_written(target: Path, exc: OSError) -> ReportNotWritten:
    return ReportNotWritten(f"could not write {target}: {exc.strerror or type(exc).__name__}",
                            hint="check the permissions of its folder and the space left, then run it again")


async def report_page(engine: AsyncEngine, prices: PriceTable, *, every: str = "day", top: int = 10,
                      pseudonymous: bool = False, **filters: Any) -> str:
    """The whole page for the filters (``user``, ``session``, ``team``, ``model``, ``since``, ``until``).

    Raises:
        NoMatchingUsage: Nothing matches the filters.
    """
    reports = await report_data(engine, prices, every=every, top=top, pseudonymous=pseudonymous, **filters)
    return render_page(reports, every)
