"""``teamstore transcripts``, ``teamstore cost``, ``teamstore prices`` and ``teamstore retention``.

teamstore transcripts show --user alice --session s1 [--last N | --run RUN_ID] [--json]
teamstore transcripts flush
teamstore cost --by team,model --since 7d --top 10 --format csv     # exit 3: the filters match nothing
teamstore cost report --since 30d --every week --output cost.html    # one self-contained HTML page
teamstore prices show
teamstore prices sync          # write the price table into ts_prices now (db upgrade and runs do it too)
teamstore retention apply --days 90 --json
teamstore retention sweep
"""

from __future__ import annotations

import csv
import sys
from dataclasses import asdict
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import typer

from teamstore.cli._output import JsonOption, dumps, emit, fail
from teamstore.cli._runner import with_app
from teamstore.errors import (
    AuditError,
    ConfigurationError,
    NoMatchingUsage,
    StorageError,
    TeamstoreError,
    TranscriptNotFound,
    TranscriptUnavailable,
)
from teamstore.ids import check_ids
from teamstore.limits import DEFAULT_RUNS, MAX_DAYS, MAX_RUNS
from teamstore.terminal import console, plain, print_table

# The database, the stores, the cost query and the price table are imported by the commands that use them,
# not with the command line: `teamstore --help` starts without them.
if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from teamstore.analytics.query import CostQuery
    from teamstore.app import App
    from teamstore.audit.cost import CostReport, CostRow
    from teamstore.audit.transcripts import TranscriptStore
    from teamstore.audit.transcripts.pages import RunPage
    from teamstore.keys.service import KeyService

GROUPINGS = ("session", "user", "team", "version", "model", "agent", "purpose", "day", "week", "month")
"""``teamstore.audit.cost.DIMENSIONS``, named here for ``--help`` (a test keeps the two equal)."""

transcripts_app = typer.Typer(
    help="Run transcripts (one object per run, S3 or a local folder).", no_args_is_help=True
)
retention_app = typer.Typer(
    help="Retention of transcripts, the ledger and resume state.", no_args_is_help=True
)
prices_app = typer.Typer(help="The versioned price table cost is derived from.", no_args_is_help=True)


# --- transcripts ---------------------------------------------------------------------------------------------
async def load_transcripts(
    engine: AsyncEngine, store: TranscriptStore, user: str, session: str, run: str | None, last: int = DEFAULT_RUNS,
    keys: KeyService | None = None,
) -> tuple[RunPage, int]:
    """Read one session's ``last`` newest runs (or one run, by its id or a unique prefix of it), oldest
    first, and how many runs it has in all; only the runs shown are held in memory. Each sealed object is
    opened under the user's data key (``keys``; by default the environment's).

    Returns:
        The page, and how many of the session's transcripts wait in the outbox (not in the store yet, so
        neither shown nor counted in the page's total).

    Raises:
        TranscriptNotFound: The user, session or run has no transcript in the store (the message says how many
            wait in the outbox), or a prefix names several runs.
        AuditError: A run's object is not readable (the message names the run).
        StorageError, TranscriptUnavailable: The store failed (the message says how many wait in the outbox).
        KeyDestroyed, KeyUnavailable, PayloadUnreadable: A sealed object does not open.
    """
    from teamstore.audit import outbox
    from teamstore.audit.subjects import find_subject, session_key
    from teamstore.audit.transcripts import session_prefix
    from teamstore.audit.transcripts.pages import newest_runs, one_run
    from teamstore.audit.transcripts.record import RunKeys, sealed_context
    from teamstore.keys.service import KeyService

    if run == "":
        raise TranscriptNotFound("--run is empty", hint="give a run id, or omit --run for the newest runs")
    subject = await find_subject(engine, user)
    if subject is None:
        raise TranscriptNotFound("no audit data for that user", hint="check the user id (matched exactly)")
    service = keys or KeyService.from_settings(engine)
    run_keys = RunKeys(subject, session_key(subject, session))

    async def opener(object_key: str, body: bytes) -> bytes:
        return await service.open(user, body, sealed_context(object_key))

    queued = await outbox.queued_under(engine, subject, session_prefix(run_keys))
    try:
        page = await (one_run(store, run_keys, run, opener=opener) if run is not None
                      else newest_runs(store, run_keys, last, opener=opener))
    except TranscriptNotFound as exc:
        if not queued:
            raise
        raise TranscriptNotFound(f"{exc.message} ({_queued_note(queued)})", hint=_FLUSH_HINT) from exc
    except (TranscriptUnavailable, StorageError) as exc:  # the store's own fix first; what waits goes once it answers
        if not queued:
            raise
        raise type(exc)(f"{exc.message} ({_queued_note(queued)})", hint=exc.hint) from exc
    return page, queued


_FLUSH_HINT = "`teamstore transcripts flush` delivers them (or says why the store still refuses them)"


def _queued_note(queued: int) -> str:
    return f"{queued} of the session's transcripts wait in the outbox, not yet in the store"


def _content_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " | ".join(_part_text(p) for p in content)
    return dumps(content) if content is not None else ""


def _part_text(part: Any) -> str:
    if isinstance(part, dict) and "name" in part and "arguments" in part:
        return f"call {part['name']}({part['arguments']})"
    if isinstance(part, dict) and "content" in part:
        return f"result {part.get('name', '')}: {part['content']}"
    return part if isinstance(part, str) else dumps(part)


def _render_transcripts(data: dict[str, Any], one: bool) -> None:
    for entry in data["runs"]:
        run = entry["run"]
        totals = run["totals"]
        console.rule()  # the heading on its own lines: in a rule's title a narrow terminal cut it short
        console.print(plain(f"run {run['run_id']}  {run['team']}@{run['team_version']}  {run['started_at']}"),
                      style="bold", highlight=False)
        for item in entry["items"]:
            usage = item["message"].get("models_usage") or {}
            tokens = (
                f" [dim]({usage.get('prompt_tokens', 0)}+{usage.get('completion_tokens', 0)} tokens)[/]"
                if usage
                else ""
            )
            # Users' words and models' replies: shown, never acted on by the terminal (plain()).
            console.print(f"[bold]{plain(item['source'])}[/] [dim]{plain(item['type'])}[/]{tokens}")
            console.print(plain(_content_text(item["message"])), highlight=False)
        limit = " (ended by a limit)" if run["ended_by_limit"] else ""
        ended = f"raised {run['error']}" if run.get("error") else f"stop: {run['stop_reason']}{limit}"
        console.print(
            f"[dim]{plain(ended)}; {totals['model_calls']} model calls, "
            f"{totals['input_tokens']} in / {totals['output_tokens']} out tokens[/]"
        )
    shown, total = len(data["runs"]), data["total"]
    console.rule()
    if one:
        console.print(f"one of the session's {total} run(s)")
    else:
        more = "; --last N shows more, --run RUN one" if shown < total else ""
        console.print(f"the newest {shown} of the session's {total} run(s), oldest first{more}")
    if data.get("queued"):
        console.print(f"and {_queued_note(data['queued'])}: {_FLUSH_HINT}")


@transcripts_app.command("show")
def transcripts_show(
    user: str = typer.Option(..., "--user", help="The user id (exact)."),
    session: str = typer.Option(..., "--session", help="The session id (exact)."),
    last: int | None = typer.Option(
        None, "--last", min=1, max=MAX_RUNS, help=f"How many of the newest runs to show (default {DEFAULT_RUNS})."
    ),
    run: str | None = typer.Option(None, "--run", help="One run id or a unique prefix of it, instead of the newest."),
    as_json: bool = JsonOption,
) -> None:
    """Print a session's newest transcripts, or one run's, readable or as JSON; and how many runs it has."""
    check_ids(user_id=user, session_id=session)
    if run is not None and last is not None:
        raise ConfigurationError("--last and --run each choose the runs to show", hint="give one of them")
    page, queued = with_app(lambda app: load_transcripts(app.engine, app.transcript_store, user, session, run,
                                                         last or DEFAULT_RUNS, app.keys), must_exist=True)
    emit({"runs": page.runs, "total": page.total, "queued": queued}, as_json=as_json,
         render=lambda data: _render_transcripts(data, one=run is not None))


@transcripts_app.command("flush")
def transcripts_flush(as_json: bool = JsonOption) -> None:
    """Deliver transcripts waiting in the outbox (queued while the store was unreachable)."""
    from teamstore.audit import outbox

    async def go(app: App) -> dict[str, Any]:
        store = app.transcript_store
        report = await outbox.flush(app.engine, store, late_upload_s=app.settings.late_upload_seconds)
        return {**asdict(report), "store": store.url}

    data = with_app(go, must_exist=True)  # an outbox is only ever in a database that exists
    emit(
        data,
        as_json=as_json,
        render=lambda d: console.print(
            f"delivered {d['delivered']}, still queued {d['remaining']}"
            + (f" (last error: {plain(d['last_error'])})" if d["last_error"] else "")
            + (f"; {d['held']} of them held until {d['held_until']:%Y-%m-%d %H:%M:%S} UTC by an upload that may "
               "still land or another flusher: a flush after that sends what is left" if d["held"] else "")
        ),
    )
    if data["failed"] and data["in_doubt"]:
        fail(AuditError(
            f"{data['remaining']} transcript(s) still queued: the store left the last upload unanswered, and it "
            "may land all the same",
            hint="nothing is lost: it stays queued, and a flush once it is no longer held (`held_until`) sends it "
            "again if it did not land; if uploads keep going unanswered, check AWS_ENDPOINT_URL_S3, the network "
            "and the store's health",
        ))
    if data["failed"]:
        fail(AuditError(
            f"{data['remaining']} transcript(s) still queued: the last upload failed and stored nothing",
            hint="fix what the last error says (TEAMSTORE_TRANSCRIPTS_URL, credentials, permissions), then run "
            "`teamstore transcripts flush` again",
        ))


# --- cost --------------------------------------------------------------------------------------------------
NO_MATCH = 3
"""``teamstore cost``'s exit status when its filters match nothing (0: matched, even at cost 0; 1: an error)."""

FIGURES = ["runs_completed", "runs_limited", "runs_failed", "runs_interrupted", "calls", "input_tokens",
           "output_tokens", "cost", "limited_cost", "unpriced_tokens", "limited_unpriced_tokens"]
_HEADINGS = ("completed", "limited", "failed", "interrupted", "calls", "in", "out", "cost", "of which limited")


def _money(value: str | None, unpriced: int) -> str:
    if value is None:
        return "unknown"
    return value + (" + unknown" if unpriced else "")


def _table_cells(report: CostReport, row: CostRow, total: bool) -> list[str]:
    group = ["total", *[""] * (len(report.fields) - 1)] if total else [row.group.get(f, "") for f in report.fields]
    figures = row.figures()
    return [*(plain(v) for v in group), str(row.runs_completed), str(row.runs_limited), str(row.runs_failed),
            str(row.runs_interrupted), str(row.calls), str(row.input_tokens), str(row.output_tokens), _money(figures["cost"], row.unpriced_tokens),
            _money(figures["limited_cost"], row.limited_unpriced_tokens)]


def _render_cost_table(report: CostReport) -> None:
    rows = [_table_cells(report, row, False) for row in report.rows] + [_table_cells(report, report.total, True)]
    width = len(report.fields)
    numbers = range(width, width + len(_HEADINGS))
    print_table((*report.fields, *_HEADINGS), rows, fixed=numbers, right=numbers,
                title=plain(f"cost by {report.by} ({report.currency}, prices {report.price_version})"))
    if report.top is not None and report.groups > len(report.rows):
        console.print(f"the {len(report.rows)} costliest of {report.groups} groups; the total counts all of them")
    unknown = sorted(set(report.total.unpriced_models))
    if unknown:
        console.print(
            f"[yellow]no price for {plain(', '.join(unknown))}: their tokens are counted, their cost is "
            "unknown[/]"
        )


_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> object:
    """A CSV cell a spreadsheet reads as meant: a string it would read as a formula (a team, agent or model
    name starting with '=') gets a leading apostrophe; an amount is written in plain decimals."""
    if value is None:
        return ""
    if isinstance(value, float):  # plain decimals: 0.0000674, never 6.74e-05
        return f"{value:.12f}".rstrip("0").rstrip(".") or "0"
    if isinstance(value, Decimal):
        from teamstore.audit.cost import money

        return money(value)
    return f"'{value}" if isinstance(value, str) and value.startswith(_FORMULA) else value


def _write_csv(report: CostReport) -> None:
    """One line per group, then the total (its first group column reads ``total``); money as exact text."""
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow([*report.fields, *FIGURES, "unpriced_models", "currency", "price_version"])
    lines = [([row.group.get(f, "") for f in report.fields], row) for row in report.rows]
    lines.append((["total", *[""] * (len(report.fields) - 1)], report.total))
    for group, row in lines:
        figures = row.figures()
        cells = [_cell(v) for v in group] + [_cell(figures[c]) for c in FIGURES]
        writer.writerow([*cells, _cell(";".join(row.unpriced_models)), report.currency, report.price_version])


def _print_report(report: CostReport, fmt: str) -> None:
    if fmt == "json":
        sys.stdout.write(dumps(report.to_dict()) + "\n")
    elif fmt == "csv":
        _write_csv(report)
    else:
        _render_cost_table(report)


async def _report_or_empty(app: App, query: CostQuery) -> tuple[CostReport, NoMatchingUsage | None]:
    from teamstore.analytics.query import cost_report
    from teamstore.audit.cost import CostReport
    from teamstore.audit.prices import load_prices

    try:
        return await cost_report(app.engine, load_prices(app.settings.prices_path), query), None
    except NoMatchingUsage as exc:
        if not isinstance(exc.report, CostReport):
            raise
        return exc.report, exc


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
    fmt: str = typer.Option("table", "--format", help="table | csv | json."),
) -> None:
    """Token usage and cost from the ledger; runs ended by a limit are counted apart from completed ones."""
    if ctx.invoked_subcommand is not None:
        if ctx.params != {p.name: p.get_default(ctx) for p in ctx.command.params}:
            raise ConfigurationError(f"options given before `{ctx.invoked_subcommand}` are not its options",
                                     hint=f"put them after it: teamstore cost {ctx.invoked_subcommand} --since 7d ...")
        return
    if fmt not in {"table", "csv", "json"}:
        raise ConfigurationError(f"unknown format {fmt!r}", hint="use table, csv or json")
    from teamstore.analytics.query import CostQuery

    query = CostQuery.build(by, user=user, session=session, team=team, model=model, since=since, until=until,
                            top=top, pseudonymous=pseudonymous)
    report, missing = with_app(lambda app: _report_or_empty(app, query), must_exist=True)
    _print_report(report, fmt)
    if missing is not None:  # printed all the same, so a pipe gets its header; the status says it is empty
        fail(missing, code=NO_MATCH)


@cost_app.command("report")
def cost_report_page(
    output: str = typer.Option(..., "--output", "-o",
                               help="The HTML file to write, owner-only (0600); one already there is replaced."),
    every: str = typer.Option("day", "--every", help="Time scale of the charts: day | week | month."),
    top: int = typer.Option(10, "--top", min=1, help="How many of the costliest sessions to chart."),
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
    from teamstore.analytics.page import report_page, report_target, write_page
    from teamstore.audit.prices import load_prices

    filters = {"user": user, "session": session, "team": team, "model": model, "since": since, "until": until}
    try:
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


# --- prices ------------------------------------------------------------------------------------------------
@prices_app.command("show")
def prices_show(as_json: bool = JsonOption) -> None:
    """Print the price table in effect (shipped, or TEAMSTORE_PRICES_PATH)."""
    from teamstore.audit.cost import money
    from teamstore.audit.prices import is_pattern, load_prices
    from teamstore.settings import Settings

    table = load_prices(Settings().prices_path)
    data = {
        "version": table.version,
        "currency": table.currency,
        "prices": [{**asdict(p), "effective_from": p.effective_from.isoformat(), "pattern": is_pattern(p.model),
                    "input_per_million": money(p.input_per_million),
                    "output_per_million": money(p.output_per_million)} for p in table.rows()],
    }

    def render(d: dict[str, Any]) -> None:  # names and versions come from a file: shown, never read as markup
        rows = [[plain(p["model"]), p["effective_from"], plain(p["input_per_million"]), plain(p["output_per_million"])]
                for p in d["prices"]]
        print_table(("model", "from", "input", "output"), rows, fixed=(1, 2, 3), right=(2, 3),
                    title=plain(f"prices {d['version']} ({d['currency']} per million tokens)"))

    emit(data, as_json=as_json, render=render)


@prices_app.command("sync")
def prices_sync(as_json: bool = JsonOption) -> None:
    """Write the price table into the database (ts_prices) for the session_costs SQL view now. Not needed to
    keep it current: `db upgrade` and the first run a process records do it."""
    from teamstore.audit.price_sync import sync_prices
    from teamstore.audit.prices import load_prices

    async def go(app: App) -> dict[str, Any]:
        table = load_prices(app.settings.prices_path)
        return {"version": table.version, "rows": await sync_prices(app.engine, table)}

    emit(
        with_app(go, must_exist=False),  # the price table is written: the embedded database is made if need be
        as_json=as_json,
        render=lambda d: console.print(plain(f"synced {d['rows']} prices, version {d['version']}")),
    )


# --- retention ---------------------------------------------------------------------------------------------
@retention_app.command("apply")
def retention_apply(
    days: int | None = typer.Option(
        None, "--days", min=1, max=MAX_DAYS,
        help="Transcript retention; only TEAMSTORE_TRANSCRIPT_RETENTION_DAYS (default 90), which it defaults to.",
    ),
    as_json: bool = JsonOption,
) -> None:
    """Put the lifecycle rule for TEAMSTORE_TRANSCRIPT_RETENTION_DAYS on the transcript prefix (S3) and print it;
    a local folder's retention is enforced by `retention sweep`."""
    from teamstore.audit.retention import apply_transcript_retention
    from teamstore.audit.transcripts.base import Capability

    async def go(app: App) -> dict[str, Any]:  # the transcript store alone: no database is opened
        setting = app.settings.transcript_retention_days
        if days not in (None, setting):
            lifecycle = Capability.LIFECYCLE_RULES in app.transcript_store.capabilities
            raise _days_not_the_setting(days, setting, lifecycle=lifecycle)
        return await apply_transcript_retention(app.transcript_store, setting)

    emit(with_app(go, must_exist=True, migrate=False), as_json=as_json, render=_print_retention)


def _print_retention(applied: dict[str, Any]) -> None:
    """What ``retention apply`` did, in a sentence (``--json`` gives the rule as put)."""
    days, url = applied["days"], plain(applied["url"])
    if applied["backend"] == "s3":
        rule = applied["rule"]
        console.print(f"lifecycle rule {plain(rule['ID'])} put on {url}: transcripts under "
                      f"{plain(rule['Filter']['Prefix'])} expire {days} days after they are written (older versions "
                      "a day after they are replaced); the bucket's other rules were kept", soft_wrap=True)
        return
    console.print(f"transcripts in {url} are kept {days} days by `teamstore retention sweep`: a local folder has no "
                  "lifecycle service, so schedule the sweep", soft_wrap=True)


def _days_not_the_setting(days: int, setting: int, *, lifecycle: bool) -> ConfigurationError:
    """``--days`` other than the setting, which the sweep keeps: on a folder it printed ``"days": N`` and exited
    0 while the sweep went on; on S3 it put a rule that disagreed with the sweep of transcripts written again
    (and with the erasure's check of the store, which takes older runs to have left no transcript)."""
    if not lifecycle:
        return ConfigurationError(
            f"--days {days} cannot apply to a local transcript folder: `teamstore retention sweep` removes its "
            f"transcripts after TEAMSTORE_TRANSCRIPT_RETENTION_DAYS ({setting})",
            hint=f"set TEAMSTORE_TRANSCRIPT_RETENTION_DAYS={days} wherever `teamstore retention sweep` runs",
        )
    return ConfigurationError(
        f"--days {days} differs from TEAMSTORE_TRANSCRIPT_RETENTION_DAYS ({setting}): the S3 rule would expire "
        f"transcripts after {days} days while `teamstore retention sweep` removes those written again after "
        f"{setting}, and an erasure takes runs older than {setting} days to have left none. Nothing was changed",
        hint=f"set TEAMSTORE_TRANSCRIPT_RETENTION_DAYS={days} for the service and wherever `teamstore retention "
        "sweep` and `teamstore erase` run, then run `teamstore retention apply` there (it puts the rule for it)",
    )


@retention_app.command("sweep")
def retention_sweep(as_json: bool = JsonOption) -> None:
    """Remove transcripts past retention (local ones, and on S3 those written again), queued transcripts, ledger
    rows and quarantined states past retention, expired sessions, expired user memory and memory facts left
    with no memory written."""
    from teamstore.audit.retention import sweep_all
    from teamstore.events import drain_observers
    from teamstore.runtime.interruptions import ending

    async def go(app: App) -> dict[str, Any]:
        observers = app.audit_observers()  # an expired session's interrupted run is recorded as it goes
        try:
            return asdict(await sweep_all(app.settings, app.engine, app.transcript_store, keys=app.keys,
                                          ending=ending(observers, "expired")))
        finally:
            await drain_observers(observers)

    emit(
        with_app(go, must_exist=True),  # from a cron job, 'removed 0' would hide a mistyped TEAMSTORE_HOME
        as_json=as_json,
        render=lambda d: console.print(
            f"removed {d['transcripts']} transcripts, {d['outbox']} queued transcripts, {d['ledger_rows']} ledger "
            f"rows, {d['session_ids']} session ids, {d['sessions']} expired sessions, {d['quarantined']} "
            f"quarantined states, {d['memories']} expired user memories ({d['memory_facts']} facts), "
            f"{d['memory_leftover_facts']} leftover memory facts"
            + (f"; {d['held_transcripts']} transcripts past retention kept by a hold" if d["held_transcripts"] else "")
        ),
    )


def register(app: typer.Typer) -> None:
    """Mount this module's commands on the main app."""
    app.add_typer(transcripts_app, name="transcripts")
    app.add_typer(retention_app, name="retention")
    app.add_typer(prices_app, name="prices")
    app.add_typer(cost_app, name="cost")
