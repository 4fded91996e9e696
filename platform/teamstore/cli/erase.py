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
its lease given back (it says where the request stands and the command that resumes it). Given no
``--request-id``, it names the id it made on stderr once the request is opened, before the first step, with
that command: a run killed outright says nothing on its way out. Before each wait (the fence grace, the workers' cached data keys) it
says on stderr what it waits for and how long.

This module holds the erasure and ``status``; the desk's ``list`` and ``extend`` are
:mod:`teamstore.cli._erase_desk`, and the receipt as they all print it :mod:`teamstore.cli._erase_receipt`.
"""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING, NoReturn

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from teamstore.cli import _erase_desk
from teamstore.cli._erase_receipt import finish, render, suggest_near_matches, with_coordinator
from teamstore.cli._output import JsonOption, UsageError, err_console, interrupted, stopped_as_on_ctrl_c
from teamstore.errors import ConfirmationNeeded
from teamstore.ids import check_erasable_id, refusal
from teamstore.people import check_not_naming, check_person, current_operator
from teamstore.terminal import plain

# The coordinator and the request table (the database, the stores) are imported when a command runs, not with
# the command line: `teamstore --help` starts without them.
if TYPE_CHECKING:
    from teamstore.erasure import DeletionCoordinator, Receipt

# suggest_near_matches: `teamstore export` names the near twins of an id too, by this name
__all__ = ["app", "erase", "register", "status", "suggest_near_matches"]

app = typer.Typer(
    help="Erase one user from every store and print a verified receipt.", invoke_without_command=True
)


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
    from teamstore.erasure.request_checks import check_reason, check_request_id

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
    made = request_id is None and not dry_run
    if made:  # made here, not by the run: a stop must be able to name it
        from teamstore.erasure.request_checks import new_request_id

        request_id = new_request_id()
    # SIGTERM (a job cancelled, `kill`) and SIGHUP (the ssh session dropped) too: the request's lease is given
    # back on the way out, so a rerun resumes at once instead of being refused until the lease expires.
    with stopped_as_on_ctrl_c() as stop:
        try:
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=err_console, transient=True, disable=not err_console.is_terminal) as bar:
                receipt = with_coordinator(lambda c: c.run(user, request_id, reason, dry_run,
                                                            requested_by=requested_by, operator=operator),
                                            _Bars(bar), _say, (lambda rid: _say_made(rid, yes)) if made else None)
        except KeyboardInterrupt:
            if dry_run or request_id is None:
                interrupted("the dry run was stopped; a dry run changes nothing", "run it again", stop.code)
            _interrupted(request_id, yes, stop.code)
    if not (dry_run or noted):
        _note_kept(receipt, reason, requested_by)
    finish(receipt, as_json, suggest_for=None if asked else user)


def _interrupted(request_id: str, yes: bool, code: int) -> NoReturn:
    """Ctrl-C (or SIGTERM, SIGHUP) stopped the erasure: say where it left request ``request_id`` (as stored: the
    stop may have come before the request was opened, or after it ended) and the command that resumes it; exit
    ``code``."""
    from teamstore.erasure import RequestStatus, request_checks, requests

    async def stored(coordinator: DeletionCoordinator) -> RequestStatus | None:
        row = await requests.get_request(coordinator.engine, request_id)
        return row.status if row is not None else None

    rerun = _rerun(request_id, yes)
    # An id the operator gave is named in the fix only, where it is typed again; one teamstore made, in both.
    made = request_checks.made_by_teamstore(request_id)
    named = f"erasure request {made}" if made else "the erasure request"
    try:
        status = with_coordinator(stored, None)
    except (typer.Exit, KeyboardInterrupt):  # the database did not answer (its error is printed above)
        interrupted(f"{named} was stopped, and where it stands could not be read",
                    f"`teamstore erase status {shlex.quote(request_id)}` says once the database answers; resume it: "
                    f"{rerun}",
                    code)
    if status is None:
        interrupted(f"the erasure was stopped before {f'request {made}' if made else 'its request'} was opened: "
                    "nothing was changed, and the user is not fenced", f"run it again: {rerun}", code)
    if status in (RequestStatus.OPEN, RequestStatus.FAILED):
        interrupted(f"{named} was stopped before it finished: it is {status}, and the user stays fenced (their "
                    "new sessions, saves and uploads are refused) until it completes",
                    f"resume it: {rerun}; the steps it finished are not run again", code)
    interrupted(f"{named} had ended {status} when it was stopped",
                f"`teamstore erase status {shlex.quote(request_id)}` prints its receipt", code)


def _rerun(request_id: str, yes: bool) -> str:
    """The command that resumes request ``request_id``, its id quoted for the shell; the user's id is left out
    (stderr is often a job's log)."""
    return (f"`teamstore erase --user ... --request-id {shlex.quote(request_id)}{' --yes' if yes else ''}` "
            "(the same user id)")


def _say_made(request_id: str, yes: bool) -> None:
    """Name the request id teamstore made, on stderr once the request is opened and before its first step: a run
    killed outright (a lost terminal, SIGKILL) can say nothing on its way out, and the operator needs the id to
    resume it. Not before: a request refused (another one open for the user) never exists."""
    err_console.print(f"erasure request {plain(request_id)} (no --request-id was given); if this run stops before it "
                      f"finishes, resume it: {plain(_rerun(request_id, yes))}; after a kill, once its lease has run "
                      "out (TEAMSTORE_ERASURE_LEASE_SECONDS)", soft_wrap=True)


def _note_kept(receipt: Receipt, reason: str | None, requested_by: str | None) -> None:
    """Say which given ``--reason`` or ``--requested-by`` a rerun did not record: a request keeps the first one
    it was given (and a finished one is only reported), so the receipt shows the stored one, not this. Neither
    value is repeated here, nor a request id the operator gave: a reason, a requester or a given id may name the
    user, and stderr is often a job's log (one teamstore made is named)."""
    from teamstore.erasure.request_checks import made_by_teamstore

    made = made_by_teamstore(receipt.request_id) if receipt.request_id else None
    named = f"request {made}" if made else "the request"
    for option, given, stored in (("--reason", reason, receipt.reason),
                                  ("--requested-by", requested_by, receipt.requested_by)):
        if given is None or given == stored:
            continue
        kept = (f"keeps the {option[2:]} it was first given (its receipt shows it)" if stored is not None else
                f"is {receipt.status} and has no {option[2:]}: a finished request is only reported")
        err_console.print(f"[yellow]note[/]: {plain(named)} {plain(kept)}; the {option} "
                          "given now was not recorded")


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

    earlier, receipt = with_coordinator(plan, None)
    if earlier is not None and earlier.status in (RequestStatus.COMPLETED, RequestStatus.NO_MATCH):
        return False  # a finished request is only reported: nothing to confirm
    if earlier is not None:  # the plan of the request it resumes: its dates, extension and attempts so far,
        # and who asked and why as the run leaves them (a request keeps the first it was given)
        receipt = receipt.model_copy(update={
            "request_id": earlier.request_id, "received_at": earlier.received_at, "due_at": earlier.due_at,
            "extension": earlier.extension, "attempts": earlier.attempts, "overdue": earlier.overdue,
            "logged_as": earlier.logged_as,
            "requested_by": earlier.requested_by if earlier.requested_by is not None else requested_by,
            "reason": earlier.reason if earlier.reason is not None else reason})
    render(receipt, err_console)
    if earlier is not None:
        err_console.print(f"this resumes request {plain(earlier.request_id)} ({earlier.status})")
        _note_kept(receipt, reason, requested_by)
    if not receipt.matched:
        suggest_near_matches(user)
    question = ("Erase what is listed above? It cannot be undone" if receipt.matched else
                "No store holds anything for this id. File a no_match receipt for it" if earlier is None else
                f"Nothing more is found for this id. Resume request {plain(earlier.request_id)} to finish it?")
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
    requests.same_user(row, user, await requests.user_hashes(coordinator.engine, coordinator.knobs, user))
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
    receipt = with_coordinator(lambda c: c.status(request_id), None)
    finish(receipt, as_json)  # an open request is not erased yet: never exit 0 for it


_erase_desk.register(app)  # `list` and `extend`, after `status`


def register(root: typer.Typer) -> None:
    """Mount ``erase`` (a group whose callback erases, with ``status``, ``list`` and ``extend`` beneath it)."""
    root.add_typer(app, name="erase")


