"""``teamstore erase``: the deletion coordinator's command.

    teamstore erase --user alice@example.com --request-id req-42 --reason "GDPR art. 17"
    teamstore erase --user alice@example.com --dry-run
    teamstore erase status req-42 --json

Exit status is 0 only when every store is ``erased`` or ``no_match``; a ``failed`` or
``retained_under_hold`` request (and, for ``status``, one still ``open``) exits 2, and rerunning the
same ``--request-id`` resumes it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import typer

from teamstore.cli._output import JsonOption, UsageError, console, emit, err_console, fail, plain, print_table
from teamstore.cli._runner import with_app
from teamstore.errors import ErasureIncomplete
from teamstore.ids import check_erasable_id, control_character

# The coordinator (the database, the stores) and rich's progress bars are imported when an erasure runs,
# not with the command line.
if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from teamstore.erasure import DeletionCoordinator, Receipt

T = TypeVar("T")
INCOMPLETE = 2

app = typer.Typer(
    help="Erase one user from every store and print a verified receipt.", invoke_without_command=True
)


def _with_coordinator(
    fn: Callable[[DeletionCoordinator], Awaitable[T]], progress: Callable[[str, int, int | None], None] | None
) -> T:
    # Every request is about what is stored: on a database that does not exist yet (a mistyped
    # TEAMSTORE_HOME, say), an erasure would find nothing and file a receipt saying so.
    return with_app(lambda app: fn(app.erasure(progress)), must_exist=True)


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


def _render(receipt: Receipt) -> None:
    from teamstore.erasure import RequestStatus

    dry = receipt.status is RequestStatus.DRY_RUN  # nothing is stored, so no id to look up later
    # Ids and details are printed as given, never read as rich markup (a ticket id may hold '[/]').
    rows = [[name, str(s.status), *(str(v) for v in (s.counts.rows, s.counts.objects, s.counts.versions,
             s.counts.delete_markers, s.counts.bytes, s.counts.retained)),
             f"{s.verified_at:%H:%M:%S}" if s.verified_at else "-"] for name, s in receipt.stores.items()]
    print_table(("store", "status", "rows", "objects", "versions", "markers", "bytes", "held", "verified"), rows,
                fixed=range(9), right=range(2, 9),
                title="erasure dry run (nothing changed or stored)" if dry else
                f"erasure {plain(receipt.request_id)}: {receipt.status}")
    for name, s in receipt.stores.items():
        if s.detail:
            console.print(f"[yellow]{name}[/]: {plain(s.detail)}")
    subject = f"subject hash {receipt.subject_hash or '(user had no subject)'}"
    if dry:
        console.print(f"{subject}; no request was opened (no id to look up): one started now would be due "
                      f"{receipt.due_at:%Y-%m-%d}")
    else:
        console.print(f"{subject}; received {receipt.received_at:%Y-%m-%d %H:%M}Z, due {receipt.due_at:%Y-%m-%d}")
    for remains in receipt.remains_elsewhere:
        console.print(f"{'would remain' if dry else 'remains'} by design: {remains.what} until "
                      f"{remains.until:%Y-%m-%d}: {plain(remains.detail)}")


def _finish(receipt: Receipt, as_json: bool) -> None:
    from teamstore.erasure import RequestStatus

    emit(receipt.model_dump(mode="json"), as_json=as_json, render=lambda _: _render(receipt))
    if not receipt.ok:
        rerun = f"`teamstore erase --user ... --request-id {receipt.request_id}`"
        hint = {
            RequestStatus.RETAINED_UNDER_HOLD: f"a legal hold keeps some data (docs/erasure.md); rerun {rerun} once "
            "it is lifted",
            RequestStatus.OPEN: f"it is still running, or its coordinator stopped: rerun {rerun} to resume",
        }.get(receipt.status, f"read the detail lines above, fix the cause, then rerun {rerun} to resume")
        fail(ErasureIncomplete(f"erasure {receipt.request_id} is {receipt.status}", hint=hint), INCOMPLETE)


@app.callback()
def erase(
    ctx: typer.Context,
    user: str | None = typer.Option(None, "--user", help="The user id, exactly as the service stores it."),
    request_id: str | None = typer.Option(None, "--request-id", help="Idempotency key; rerun it to resume."),
    reason: str | None = typer.Option(None, "--reason", help="Why (stored with the request; no personal data)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be removed; change nothing."),
    as_json: bool = JsonOption,
) -> None:
    """Erase USER from resume state, quarantine, transcripts (every version), outbox, ledger and subjects."""
    if ctx.invoked_subcommand is not None:
        return
    if user is None:
        # Click's UsageError (typed as Exception here) takes the context that prints the usage line.
        raise UsageError(  # type: ignore[call-arg]
            "Missing option '--user': the user id to erase (or `teamstore erase status ID` for a request's receipt)",
            ctx=ctx,
        )
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from teamstore.erasure.requests import check_request_id

    check_erasable_id(user)  # before the database is looked for: the id is what is wrong
    _note_control_character(user)
    if request_id is not None:  # an empty one (an unset "$TICKET") is an error, not a request for a fresh id
        check_request_id(request_id)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True) as bar:
        receipt = _with_coordinator(lambda c: c.run(user, request_id, reason, dry_run), _Bars(bar))
    _finish(receipt, as_json)


def _note_control_character(user: str) -> None:
    """Say why an id no session can have is still erased: earlier releases' audit could store it."""
    bad = control_character(user)
    if bad is not None:
        err_console.print(
            f"[yellow]note[/]: the user id holds the control character U+{ord(bad):04X}: no session can have "
            "such an id, but audit records an earlier release made may; erasing those"
        )


@app.command("status")
def status(
    request_id: str = typer.Argument(..., help="The request id printed by `teamstore erase`."),
    as_json: bool = JsonOption,
) -> None:
    """Show a request's receipt, or its progress if it is still open (exit status 2 until it completes)."""
    receipt = _with_coordinator(lambda c: c.status(request_id), None)
    _finish(receipt, as_json)  # an open request is not erased yet: never exit 0 for it


def register(root: typer.Typer) -> None:
    """Mount ``erase`` (a group whose callback erases, with ``status`` beneath it) on the main app."""
    root.add_typer(app, name="erase")


