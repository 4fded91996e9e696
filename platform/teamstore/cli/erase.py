"""``teamstore erase``: the deletion coordinator's command, and the compliance desk's.

    teamstore erase --user alice@example.com --request-id req-42 --reason "GDPR art. 17" --requested-by "ticket 881"
    teamstore erase --user alice@example.com --dry-run
    teamstore erase status req-42 --json
    teamstore erase list --overdue
    teamstore erase extend req-42 --by 2m --reason "40 sessions across two stores"

On a terminal, an erasure shows what it would remove (the dry run's counts) and asks before it deletes;
``--yes`` is for scripts, and without a terminal it is required (never waiting for an answer that cannot
come). Exit status 0: every store ``erased``, or ``shredded`` (what remains is sealed under the destroyed
key) (the request ``completed``); 3: no store held anything for the id (``no_match``); 2: a ``failed`` or
``retained_under_hold`` request (and, for ``status``, one still ``open``), which rerunning the same
``--request-id`` resumes; 1: an error before the request ran; 130 (143 on SIGTERM, 129 on SIGHUP): stopped,
its lease given back (it says where the request stands and the command that resumes it). Before each wait
(the fence grace, the workers' cached data keys) it says on stderr what it waits for and how long.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from teamstore.cli._output import (
    JsonOption,
    UsageError,
    emit,
    err_console,
    fail,
    interrupted,
    stopped_as_on_ctrl_c,
)
from teamstore.cli._runner import with_app
from teamstore.errors import ConfigurationError, ConfirmationNeeded, ErasureIncomplete
from teamstore.ids import check_erasable_id, refusal
from teamstore.people import check_not_naming, check_person, current_operator
from teamstore.terminal import console, plain, print_table

# The coordinator, the desk and the request table (the database, the stores) are imported when a command
# runs, not with the command line: `teamstore --help` starts without them.
if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.ext.asyncio import AsyncEngine

    from teamstore.erasure import DeletionCoordinator, Receipt, RequestStatus
    from teamstore.erasure.desk import RequestSummary

T = TypeVar("T")
INCOMPLETE = 2
NO_MATCH = 3

app = typer.Typer(
    help="Erase one user from every store and print a verified receipt.", invoke_without_command=True
)


def _with_coordinator(
    fn: Callable[[DeletionCoordinator], Awaitable[T]], progress: Callable[[str, int, int | None], None] | None,
    notice: Callable[[str], None] | None = None,
) -> T:
    # Every request is about what is stored: on a database that does not exist yet (a mistyped
    # TEAMSTORE_HOME, say), an erasure would find nothing and file a receipt saying so.
    return with_app(lambda app: fn(app.erasure(progress, notice)), must_exist=True)


class _Bars:
    """A rich progress bar per step, shown only for large erasures (more than 1,000 items)."""

    def __init__(self, bar: Progress) -> None:
        self.bar = bar
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, step: str, done: int, total: int | None) -> None:
        if step not in self.tasks:
            if not total or total <= 1000:
                return
            self.tasks[step] = self.bar.add_task(step, total=total)
        self.bar.update(self.tasks[step], completed=done, total=total)


def _say(line: str) -> None:
    """What the erasure waits for and how long, on stderr (``--json`` keeps stdout to the receipt)."""
    err_console.print(f"[dim]{plain(line)}[/]")


def _render(receipt: Receipt, out: Console = console) -> None:
    from teamstore.erasure import RequestStatus

    dry = receipt.status is RequestStatus.DRY_RUN  # nothing is stored, so no id to look up later
    # Ids and details are printed as given, never read as rich markup (a ticket id may hold '[/]').
    # "held": versions a hold keeps, readable (retained_under_hold) or sealed under the destroyed key (shredded).
    rows = [[name, str(s.status), *(str(v) for v in (s.counts.rows, s.counts.objects, s.counts.versions,
             s.counts.delete_markers, s.counts.bytes, s.counts.retained + s.counts.unreadable)),
             f"{s.verified_at:%H:%M:%S}" if s.verified_at else "-"] for name, s in receipt.stores.items()]
    print_table(("store", "status", "rows", "objects", "versions", "markers", "bytes", "held", "verified"), rows,
                fixed=range(9), right=range(2, 9), out=out,
                title="erasure dry run (nothing changed or stored)" if dry else
                f"erasure {plain(receipt.request_id)}: {receipt.status}{' OVERDUE' if receipt.overdue else ''}")
    for name, s in receipt.stores.items():
        if s.detail:
            out.print(f"[yellow]{name}[/]: {plain(s.detail)}")
    subject = f"subject hash {receipt.subject_hash or _no_subject(receipt)}"
    if dry and receipt.request_id is None:
        out.print(f"{subject}; no request was opened (no id to look up): one started now would be due "
                  f"{receipt.due_at:%Y-%m-%d}")
    else:
        out.print(f"{subject}; received {receipt.received_at:%Y-%m-%d %H:%M}Z, due {receipt.due_at:%Y-%m-%d}")
    if receipt.overdue:
        extended = " (its extended due date)" if receipt.extension is not None else ""
        out.print(f"[bold red]overdue[/]: due {receipt.effective_due_at:%Y-%m-%d}{extended} and still {receipt.status}")
    _render_desk(receipt, out)
    for remains in receipt.remains_elsewhere:
        out.print(f"{'would remain' if dry else 'remains'} by design: {remains.what} {remains.dates()}: "
                  f"{plain(remains.detail)}")


def _no_subject(receipt: Receipt) -> str:
    """Why a receipt names no subject hash: an open or failed request may not have looked the key up yet (one
    stopped in its first wait), a finished one found none stored."""
    from teamstore.erasure import RequestStatus

    if receipt.status in (RequestStatus.OPEN, RequestStatus.FAILED):
        return "not known yet (looked up as the erasure runs)"
    return "none (no pseudonymous key was stored for this id)"


def _render_desk(receipt: Receipt, out: Console) -> None:
    """Who asked and why, who ran each attempt, the extension, and the verdict when nothing matched."""
    from teamstore.erasure import RequestStatus
    from teamstore.erasure.desk import extension_note

    if receipt.requested_by:
        out.print(f"requested by {plain(receipt.requested_by)}")
    if receipt.reason:
        out.print(f"reason: {plain(receipt.reason)}")
    for number, attempt in enumerate(receipt.attempts, start=1):
        ended = f", ended {attempt.ended_at:%Y-%m-%d %H:%M}Z {attempt.status or 'without a verdict'}" \
            if attempt.ended_at else ""
        out.print(f"attempt {number} run by {plain(attempt.operator)}, started {attempt.started_at:%Y-%m-%d %H:%M}Z"
                  f"{ended}")
    if (note := extension_note(receipt.extension)) is not None:
        out.print(plain(note))
    if not receipt.matched:
        out.print("[bold]no match[/]: no store holds anything for this user id" +
                  (" (the receipt says so)" if receipt.status is RequestStatus.NO_MATCH else ""))
        if receipt.near_match:
            out.print(f"[yellow]note[/]: {plain(receipt.near_match)}")


def _finish(receipt: Receipt, as_json: bool, suggest_for: str | None = None) -> None:
    from teamstore.erasure import RequestStatus

    emit(receipt.model_dump(mode="json"), as_json=as_json, render=lambda _: _render(receipt))
    if receipt.ok and not receipt.matched:
        # Not an error, a verdict: the request is answered ("we hold nothing"), but the id may be mistyped.
        if suggest_for is not None:
            suggest_near_matches(suggest_for)
        raise typer.Exit(NO_MATCH)
    if not receipt.ok:
        rerun = f"`teamstore erase --user ... --request-id {receipt.request_id}`"
        hint = {
            RequestStatus.RETAINED_UNDER_HOLD: f"a legal hold keeps some data (docs/erasure.md); rerun {rerun} once "
            "it is lifted",
            RequestStatus.OPEN: f"it is still running, or its coordinator stopped: rerun {rerun} to resume",
        }.get(receipt.status, f"read the detail lines above, fix the cause, then rerun {rerun} to resume")
        late = f", and overdue (due {receipt.effective_due_at:%Y-%m-%d})" if receipt.overdue else ""
        fail(ErasureIncomplete(f"erasure {receipt.request_id} is {receipt.status}{late}", hint=hint), INCOMPLETE)


@app.callback()
def erase(
    ctx: typer.Context,
    user: str | None = typer.Option(None, "--user", help="The user id, exactly as the service stores it."),
    request_id: str | None = typer.Option(None, "--request-id", help="Idempotency key; rerun it to resume."),
    reason: str | None = typer.Option(None, "--reason", help="Why (stored with the request; no personal data)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be removed; change nothing."),
    requested_by: str | None = typer.Option(
        None, "--requested-by", help="Who asked: the data subject, a representative, a ticket (on the receipt)."),
    operator: str | None = typer.Option(
        None, "--operator", help="Who runs it (on the receipt); default $TEAMSTORE_OPERATOR, else the OS user."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Erase without asking (scripts); required with no terminal."),
    as_json: bool = JsonOption,
) -> None:
    """Erase USER: destroy their data key, then delete resume state, quarantine, transcripts (every version),
    outbox, ledger link, export records and subject. On a terminal it shows what it would remove and asks
    first."""
    from teamstore.erasure.requests import check_reason, check_request_id

    if ctx.invoked_subcommand is not None:
        given = [name for name, value in (("--user", user), ("--request-id", request_id), ("--reason", reason),
                                          ("--dry-run", dry_run), ("--requested-by", requested_by),
                                          ("--operator", operator), ("--yes", yes), ("--json", as_json)) if value]
        if given:  # erasing options before a subcommand would be dropped silently: nobody would be erased
            raise UsageError(  # type: ignore[call-arg]
                f"{', '.join(given)} belong to `teamstore erase` itself, not to `erase {ctx.invoked_subcommand}`: "
                f"give the subcommand's own options after it", ctx=ctx)
        return
    if user is None:
        # Click's UsageError (typed as Exception here) takes the context that prints the usage line.
        raise UsageError(  # type: ignore[call-arg]
            "Missing option '--user': the user id to erase (or `teamstore erase status ID` for a request's receipt)",
            ctx=ctx,
        )
    check_erasable_id(user)  # before the database is looked for: the id is what is wrong
    _note_unusable(user)
    if request_id is not None:  # an empty one (an unset "$TICKET") is an error, not a request for a fresh id
        check_request_id(request_id)
    check_reason(reason)
    check_person("requested_by", requested_by)
    check_person("operator", operator)
    check_not_naming("reason", reason, user)
    check_not_naming("requested_by", requested_by, user)
    if not dry_run:  # who runs it goes on the receipt: a name it cannot hold is said before anything is asked
        current_operator(operator)
    asked = not dry_run and not yes
    # names any near twin itself, and what a rerun keeps, before it asks
    noted = _confirm(user, request_id, reason, requested_by) if asked else False
    if request_id is None and not dry_run:  # made here, not by the run: a stop must be able to name it
        from teamstore.erasure.coordinator import new_request_id

        request_id = new_request_id()
    # SIGTERM (a job cancelled, `kill`) and SIGHUP (the ssh session dropped) too: the request's lease is given
    # back on the way out, so a rerun resumes at once instead of being refused until the lease expires.
    with stopped_as_on_ctrl_c() as stop:
        try:
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=err_console, transient=True, disable=not err_console.is_terminal) as bar:
                receipt = _with_coordinator(lambda c: c.run(user, request_id, reason, dry_run,
                                                            requested_by=requested_by, operator=operator),
                                            _Bars(bar), _say)
        except KeyboardInterrupt:
            if dry_run or request_id is None:
                interrupted("the dry run was stopped; a dry run changes nothing", "run it again", stop.code)
            _interrupted(request_id, yes, stop.code)
    if not (dry_run or noted):
        _note_kept(receipt, reason, requested_by)
    _finish(receipt, as_json, suggest_for=None if asked else user)


def _interrupted(request_id: str, yes: bool, code: int) -> NoReturn:
    """Ctrl-C (or SIGTERM, SIGHUP) stopped the erasure: say where it left request ``request_id`` (as stored: the
    stop may have come before the request was opened, or after it ended) and the command that resumes it; exit
    ``code``."""
    from teamstore.erasure import RequestStatus, requests

    async def stored(coordinator: DeletionCoordinator) -> RequestStatus | None:
        row = await requests.get_request(coordinator.engine, request_id)
        return row.status if row is not None else None

    rerun = f"`teamstore erase --user ... --request-id {request_id}{' --yes' if yes else ''}` (the same user id)"
    try:
        status = _with_coordinator(stored, None)
    except (typer.Exit, KeyboardInterrupt):  # the database did not answer (its error is printed above)
        interrupted(f"erasure request {request_id} was stopped, and where it stands could not be read",
                    f"`teamstore erase status {request_id}` says once the database answers; resume it: {rerun}",
                    code)
    if status is None:
        interrupted(f"the erasure was stopped before request {request_id} was opened: nothing was changed, and the "
                    "user is not fenced", f"run it again: {rerun}", code)
    if status in (RequestStatus.OPEN, RequestStatus.FAILED):
        interrupted(f"erasure request {request_id} was stopped before it finished: it is {status}, and the user "
                    "stays fenced (their new sessions, saves and uploads are refused) until it completes",
                    f"resume it: {rerun}; the steps it finished are not run again", code)
    interrupted(f"erasure request {request_id} had ended {status} when it was stopped",
                f"`teamstore erase status {request_id}` prints its receipt", code)


def _note_kept(receipt: Receipt, reason: str | None, requested_by: str | None) -> None:
    """Say which given ``--reason`` or ``--requested-by`` a rerun did not record: a request keeps the first one
    it was given (and a finished one is only reported), so the receipt shows the stored one, not this. Neither
    value is repeated here: a reason or a requester may name the user, and stderr is often a job's log."""
    for option, given, stored in (("--reason", reason, receipt.reason),
                                  ("--requested-by", requested_by, receipt.requested_by)):
        if given is None or given == stored:
            continue
        kept = (f"keeps the {option[2:]} it was first given (its receipt shows it)" if stored is not None else
                f"is {receipt.status} and has no {option[2:]}: a finished request is only reported")
        err_console.print(f"[yellow]note[/]: request {plain(receipt.request_id)} {plain(kept)}; the {option} "
                          "given now was not recorded")


def suggest_near_matches(user: str, tables: Sequence[Table] | None = None) -> None:
    """On a terminal, name the stored ids that differ from ``user`` only in letter case, Unicode form or
    surrounding spaces: the ones the operator may have meant. Only there: a job's output is kept in its
    logs, where another user's id must never go (the receipt says it in words, without the id). ``tables``:
    where to look (:func:`teamstore.export.nearby.near_matches`; by default the stores keyed by the id)."""
    from teamstore.export.nearby import TABLES, near_matches

    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return
    twins = with_app(lambda app: near_matches(app.engine, user, tables or TABLES), must_exist=True)
    for stored, kind in twins.items():
        shown = repr(stored) if stored.isascii() else f"{stored!r} ({stored!a})"  # Unicode forms look alike
        err_console.print(f"[yellow]did you mean[/] {plain(shown)}? It differs only in {kind}.")


def _confirm(user: str, request_id: str | None, reason: str | None, requested_by: str | None) -> bool:
    """Show what the erasure would remove (the dry run) on stderr and ask; refuse without a terminal.

    Returns:
        Whether it said which given ``--reason`` or ``--requested-by`` the request it resumes keeps instead.

    Raises:
        ConfirmationNeeded: No terminal to ask on, or the answer was not yes (nothing changed, no request).
    """
    from teamstore.erasure import RequestStatus

    if not sys.stdin.isatty():
        raise ConfirmationNeeded(
            "erase asks before it deletes, and there is no terminal to ask on: nothing was changed",
            hint="pass --yes to erase without asking (scripts, jobs), or run it on a terminal",
        )

    async def plan(coordinator: DeletionCoordinator) -> tuple[Receipt | None, Receipt]:
        # A rerun of a request shows where it stands as well as what is left for the id.
        earlier = await _earlier(coordinator, request_id, user)
        return earlier, await coordinator.run(user, request_id, dry_run=True, requested_by=requested_by)

    earlier, receipt = _with_coordinator(plan, None)
    if earlier is not None and earlier.status in (RequestStatus.COMPLETED, RequestStatus.NO_MATCH):
        return False  # a finished request is only reported: nothing to confirm
    if earlier is not None:  # the plan of the request it resumes: its dates, extension and attempts so far,
        # and who asked and why as the run leaves them (a request keeps the first it was given)
        receipt = receipt.model_copy(update={
            "request_id": earlier.request_id, "received_at": earlier.received_at, "due_at": earlier.due_at,
            "extension": earlier.extension, "attempts": earlier.attempts, "overdue": earlier.overdue,
            "requested_by": earlier.requested_by if earlier.requested_by is not None else requested_by,
            "reason": earlier.reason if earlier.reason is not None else reason})
    _render(receipt, err_console)
    if earlier is not None:
        err_console.print(f"this resumes request {plain(earlier.request_id)} ({earlier.status})")
        _note_kept(receipt, reason, requested_by)
    if not receipt.matched:
        suggest_near_matches(user)
    question = ("Erase what is listed above? It cannot be undone" if receipt.matched else
                "No store holds anything for this id. File a no_match receipt for it")
    untouched = "the request stays as it was" if earlier is not None else "no request was opened"
    if not _answered_yes(question, untouched):
        raise ConfirmationNeeded(f"not confirmed: nothing was erased and {untouched}",
                                 hint="run it again and answer y (check the user id first), or pass --yes")
    return earlier is not None


def _answered_yes(question: str, untouched: str) -> bool:
    """Ask ``question``; a stop while it waits (Ctrl-C, SIGTERM, SIGHUP) ends the command as a stop of the
    erasure does, its exit status the signal's, and input that ends (Ctrl-D) is no answer."""
    with stopped_as_on_ctrl_c() as stop:
        try:
            return typer.confirm(question, default=False, err=True)
        except typer.Abort as exc:  # click turns both into Abort: the cause tells a stop from input that ended
            if not isinstance(exc.__context__, KeyboardInterrupt):
                return False
    interrupted(f"the erasure was stopped at its question: nothing was erased and {untouched}",
                "run it again and answer y, or pass --yes", stop.code)


async def _earlier(coordinator: DeletionCoordinator, request_id: str | None, user: str) -> Receipt | None:
    """The request ``request_id`` names, if it exists.

    Raises:
        ErasureConflict: It is another user's unfinished request, or it is new and the user has an open one
            (the run would refuse either: nothing to ask).
    """
    from teamstore.erasure import requests

    row = await requests.get_request(coordinator.engine, request_id) if request_id is not None else None
    if row is None:  # a new request: refused while another one of the user's is open, so say it now
        if (other := await requests.open_request_of(coordinator.engine, user)) is not None:
            raise requests.already_open(other)
        return None
    requests.same_user(row, user)
    return await coordinator.status(row.request_id)


def _note_unusable(user: str) -> None:
    """Say why an id no session can have now (a control character, blank, spaces around it) is still erased:
    earlier releases could store data under it (with none stored, the run refuses it)."""
    refused = refusal("the user id", user)
    if refused is not None:
        err_console.print(f"[yellow]note[/]: {plain(refused.message)}: no session can have such an id now, but an "
                          "earlier release may have stored data under it: erase finds that, and refuses an id "
                          "nothing is stored under")


@app.command("status")
def status(
    request_id: str = typer.Argument(..., help="The request id printed by `teamstore erase`."),
    as_json: bool = JsonOption,
) -> None:
    """Show a request's receipt, or its progress if it is still open (exit status 2 until it completes), and
    whether it is overdue (open or failed past its due date)."""
    receipt = _with_coordinator(lambda c: c.status(request_id), None)
    _finish(receipt, as_json)  # an open request is not erased yet: never exit 0 for it


StatusOption = typer.Option([], "--status", metavar="STATUS", help="Only requests in this status (repeatable): open, failed, completed, "
                            "no_match, retained_under_hold.")
# Lists, so that one given twice is refused (_one) rather than the last winning unseen.
UserOption = typer.Option([], "--user", metavar="USER_ID", help="Only the open or failed request of this exact user id (never printed; "
                          "finished requests have forgotten it).")
AfterOption = typer.Option([], "--after", metavar="REQUEST_ID", help="The next page: the requests after this request id, the last one a "
                           "page listed (the footer and `next` in --json name it).")
DEFAULT_LIMIT = 100


@app.command("list")
def list_(
    status_: list[str] = StatusOption,
    overdue: bool = typer.Option(False, "--overdue", help="Only open or failed requests past their due date "
                                 "(the extended one, if extended), the longest overdue first."),
    user: list[str] = UserOption,
    after: list[str] = AfterOption,
    limit: int = typer.Option(DEFAULT_LIMIT, "--limit", min=1, max=10_000,
                              help="At most this many on a page: the newest (with --overdue, the longest overdue)."),
    as_json: bool = JsonOption,
) -> None:
    """List erasure requests: received, due (and extended due), status, who asked and who ran them."""
    from teamstore.erasure.desk import list_requests, near_user_match

    statuses = _statuses(status_, overdue=overdue, user=bool(user))
    one_user, cursor = _one("--user", user), _one("--after", after)
    if one_user is not None:
        check_erasable_id(one_user)

    async def listing(engine: AsyncEngine) -> tuple[list[RequestSummary], str | None]:
        # One more than shown, to know whether the limit cut the list (newest first, it cuts the oldest requests;
        # with --overdue, longest overdue first, the ones that fell due last).
        found = await list_requests(engine, statuses=statuses, overdue=overdue, user_id=one_user, after=cursor,
                                    limit=limit + 1)
        near = await near_user_match(engine, one_user) if one_user is not None and not found else None
        return found, near

    found, near = with_app(lambda app: listing(app.engine), must_exist=True)
    more, found = len(found) > limit, found[:limit]
    following = found[-1].request_id if more else None
    command = _next_page(statuses, overdue, limit, following) if following is not None else None
    emit({"requests": [r.model_dump(mode="json") for r in found], "more": more, "next": following,
          "near_match": near}, as_json=as_json, render=lambda _: _render_list(found, overdue, command, near))
    if one_user is not None and not found:
        from teamstore.erasure.desk import NEAR_TABLES

        suggest_near_matches(one_user, NEAR_TABLES)


def _one(option: str, given: list[str]) -> str | None:
    """The one value of ``option`` given, if any: given twice, the last would win unseen."""
    if len(given) > 1:
        raise ConfigurationError(f"{option} is given {len(given)} times: erase list takes one",
                                 hint=f"give {option} once (run the list once per value)")
    return given[0] if given else None


def _statuses(given: list[str], *, overdue: bool, user: bool) -> list[RequestStatus]:
    """The ``--status`` values, refused when one could never be listed with ``--overdue`` or ``--user`` (only an
    open or failed request is overdue, or keeps its user's id): the empty list would read as "none exist"."""
    from teamstore.erasure.desk import UNFINISHED

    statuses = list(dict.fromkeys(_status(value) for value in given))
    never = [str(s) for s in statuses if s not in UNFINISHED]
    for given_with, flag, why in ((overdue, "--overdue", "only an open or failed request can be overdue"),
                                  (user, "--user", "only an open or failed request keeps its user's id")):
        if never and given_with:
            raise ConfigurationError(
                f"--status {', '.join(never)} with {flag} can list nothing: {why}",
                hint=f"drop --status {never[0]} (or {flag}): `teamstore erase list --status {never[0]}` lists "
                "those requests, by id and subject hash",
            )
    return statuses


def _status(value: str) -> RequestStatus:
    from teamstore.erasure import RequestStatus

    stored = [s for s in RequestStatus if s is not RequestStatus.DRY_RUN]  # a dry run stores no request
    if value not in stored:
        several = "; give --status once per status: --status open --status failed" if "," in value else ""
        raise ConfigurationError(f"--status {value!r} is not a request status",
                                 hint=f"use one of {', '.join(s.value for s in stored)}{several}")
    return RequestStatus(value)


def _next_page(statuses: list[RequestStatus], overdue: bool, limit: int, after: str) -> str:
    """The command that lists the next page: the same filters, after the page's last request."""
    return shlex.join(["teamstore", "erase", "list", *(f"--status={s}" for s in statuses),
                       *(["--overdue"] if overdue else []), *([f"--limit={limit}"] if limit != DEFAULT_LIMIT else []),
                       f"--after={after}"])


def _render_list(found: list[RequestSummary], overdue: bool, command: str | None, near: str | None) -> None:
    rows = [[r.request_id, str(r.status) + (" OVERDUE" if r.overdue else ""), f"{r.received_at:%Y-%m-%d}",
             f"{r.due_at:%Y-%m-%d}", f"{r.extended_due_at:%Y-%m-%d}" if r.extended_due_at else "-",
             r.subject or "-", plain(r.requested_by or "-"), plain(", ".join(dict.fromkeys(r.operators)) or "-")]
            for r in found]  # each operator once, in the order they first ran it (--json has every attempt's)
    if not found:
        console.print("no request matches")
        if near:  # in words, never the id (a job's log): a terminal is also told which id (suggest_near_matches)
            console.print(f"[yellow]note[/]: {plain(near)}")
        return
    # A request id and a status keep their width: a request id folded over lines could not be copied.
    print_table(("request", "status", "received", "due", "extended to", "subject", "requested by", "run by"),
                [[plain(r[0]), *r[1:]] for r in rows], fixed=(0, 1, 2, 3, 4, 5), title=f"{len(found)} erasure request(s)")
    if command is None:
        return
    left = "the ones that fall due later follow" if overdue else "older ones follow"
    console.print(f"[yellow]more requests match[/]: {len(found)} shown, {left}; the next page:")
    console.print(plain(command), soft_wrap=True)  # on a line of its own, never folded: it is copied whole


@app.command("extend")
def extend(
    request_id: str = typer.Argument(..., help="The request to extend."),
    by: str = typer.Option(..., "--by", help="How much longer: 30d, 6w or 2m (two months at most, once)."),
    reason: str = typer.Option(..., "--reason", help="Why (recorded; what the data subject is told)."),
    operator: str | None = typer.Option(
        None, "--operator", help="Who extends it (recorded); default $TEAMSTORE_OPERATOR, else the OS user."),
    as_json: bool = JsonOption,
) -> None:
    """Extend a request's due date once, by at most two months, with a recorded reason (GDPR art. 12(3))."""
    from teamstore.erasure.desk import check_extension_reason, extend_request
    from teamstore.erasure.requests import check_request_id

    check_request_id(request_id)
    check_extension_reason(reason)
    ran_by = current_operator(operator)

    async def go(coordinator: DeletionCoordinator) -> Receipt:
        await extend_request(coordinator.engine, request_id, by, reason, operator=ran_by)
        return await coordinator.status(request_id)

    receipt = _with_coordinator(go, None)
    emit(receipt.model_dump(mode="json"), as_json=as_json, render=lambda _: _render(receipt))
    err_console.print(f"[yellow]note[/]: tell the data subject of the extension and its reason by the original due "
                      f"date, {receipt.due_at:%Y-%m-%d} (GDPR art. 12(3): within one month of receipt)")


def register(root: typer.Typer) -> None:
    """Mount ``erase`` (a group whose callback erases, with ``status``, ``list`` and ``extend`` beneath it)."""
    root.add_typer(app, name="erase")


