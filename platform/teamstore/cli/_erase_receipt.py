"""A request's receipt as the ``teamstore erase`` commands get it and print it: from the deletion coordinator,
drawn for people (``--json`` prints it as it is), and the exit status it gives.

    from teamstore.cli._erase_receipt import finish, with_coordinator

    receipt = with_coordinator(lambda c: c.status("req-42"), None)
    finish(receipt, as_json=False)   # its table and lines; exit 2 unless it is finished, 3 when nothing matched

Ids and details are printed as given, never read as rich markup.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import typer
from rich.console import Console

from teamstore.cli._output import emit, err_console, fail
from teamstore.cli._runner import with_app
from teamstore.errors import ErasureIncomplete
from teamstore.terminal import console, plain, print_table

# The coordinator and the receipt's models (the database, the stores) are imported when a command runs, not
# with the command line: `teamstore --help` starts without them.
if TYPE_CHECKING:
    from sqlalchemy import FromClause
    from sqlalchemy.ext.asyncio import AsyncEngine

    from teamstore.erasure import DeletionCoordinator, Receipt

T = TypeVar("T")
INCOMPLETE = 2
NO_MATCH = 3


def with_coordinator(
    fn: Callable[[DeletionCoordinator], Awaitable[T]], progress: Callable[[str, int, int | None], None] | None,
    notice: Callable[[str], None] | None = None, opened: Callable[[str], None] | None = None,
) -> T:
    """Run ``fn`` with the deletion coordinator (``progress``: each step's, ``notice``: what it waits for,
    ``opened``: the id of the request it opens)."""
    # Every request is about what is stored: on a database that does not exist yet (a mistyped
    # TEAMSTORE_HOME, say), an erasure would find nothing and file a receipt saying so.
    return with_app(lambda app: fn(app.erasure(progress, notice, opened)), must_exist=True)


def render(receipt: Receipt, out: Console = console) -> None:
    """Print ``receipt`` for people: a row per store, then its dates, who asked and ran it, what remains."""
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
    if receipt.logged_as not in (None, receipt.request_id):  # an id the operator gave: the logs never hold it
        out.print(f"teamstore's log lines name this request {receipt.logged_as}")
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


def finish(receipt: Receipt, as_json: bool, suggest_for: str | None = None) -> None:
    """Print ``receipt`` and end as it stands: exit 0 once it completed; 3 (:data:`NO_MATCH`) when no store held
    anything for the id, naming its near twins first (``suggest_for``: that id); 2 (:data:`INCOMPLETE`) while it
    is open, failed or kept under a hold, with what resumes it."""
    from teamstore.erasure import RequestStatus

    emit(receipt.model_dump(mode="json"), as_json=as_json, render=lambda _: render(receipt))
    if receipt.ok and not receipt.matched:
        # Not an error, a verdict: the request is answered ("we hold nothing"), but the id may be mistyped.
        if suggest_for is not None:
            suggest_near_matches(suggest_for)
        raise typer.Exit(NO_MATCH)
    if not receipt.ok:
        # The receipt just written names the request: the error does not repeat its id (one given may be a
        # user's id typed in the wrong place).
        rerun = "`teamstore erase --user ... --request-id ...` with the request id the receipt names"
        hint = {
            RequestStatus.RETAINED_UNDER_HOLD: f"a legal hold keeps some data (docs/erasure.md); rerun {rerun} once "
            "it is lifted",
            RequestStatus.OPEN: f"it is still running, or its coordinator stopped: rerun {rerun} to resume",
        }.get(receipt.status, f"read the detail lines above, fix the cause, then rerun {rerun} to resume")
        late = f", and overdue (due {receipt.effective_due_at:%Y-%m-%d})" if receipt.overdue else ""
        fail(ErasureIncomplete(f"the erasure is {receipt.status}{late}", hint=hint), INCOMPLETE)


def suggest_near_matches(user: str, tables: Callable[[AsyncEngine], Sequence[FromClause]] | None = None) -> None:
    """On a terminal, name the stored ids that differ from ``user`` only in letter case, Unicode form or
    surrounding spaces: the ones the operator may have meant. Only there: a job's output is kept in its
    logs, where another user's id must never go (the receipt says it in words, without the id). ``tables``:
    where to look, given the database (:func:`teamstore.export.nearby.near_matches`; by default the stores keyed
    by the id)."""
    from teamstore.export.nearby import TABLES, near_matches

    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return
    twins = with_app(lambda app: near_matches(app.engine, user, tables(app.engine) if tables else TABLES),
                     must_exist=True)
    for stored, kind in twins.items():
        shown = repr(stored) if stored.isascii() else f"{stored!r} ({stored!a})"  # Unicode forms look alike
        err_console.print(f"[yellow]did you mean[/] {plain(shown)}? It differs only in {kind}.")
