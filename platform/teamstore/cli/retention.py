"""``teamstore retention``: the transcripts' lifecycle rule put on S3, and the sweep of what is past retention.

    teamstore retention apply --json     # the S3 rule for TEAMSTORE_TRANSCRIPT_RETENTION_DAYS, as put
    teamstore retention sweep            # schedule it: removes what is past retention from every store
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import typer

from teamstore.cli._output import JsonOption, emit, fail
from teamstore.cli._runner import with_app
from teamstore.errors import ConfigurationError
from teamstore.limits import MAX_DAYS
from teamstore.terminal import console, plain

# The stores and the sweep are imported by the commands that use them: `teamstore --help` starts without them.
if TYPE_CHECKING:
    from teamstore.app import App

retention_app = typer.Typer(
    help="Retention of transcripts, the ledger and resume state.", no_args_is_help=True
)


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


INCOMPLETE = 2
"""``retention sweep``'s exit status when a step failed and the others ran (:class:`RetentionIncomplete`)."""
_COUNTS = (("transcripts", "transcripts"), ("outbox", "queued transcripts"), ("ledger_rows", "ledger rows"),
           ("session_ids", "session ids"), ("sessions", "expired sessions"), ("quarantined", "quarantined states"),
           ("memories", "expired user memories"), ("memory_leftover_facts", "leftover memory facts"),
           ("memory_forgets", "old records of forgotten memory"))


@retention_app.command("sweep")
def retention_sweep(as_json: bool = JsonOption) -> None:
    """Remove transcripts past retention (local ones, and on S3 those written again), queued transcripts, ledger
    rows and quarantined states past retention, expired sessions, expired user memory and memory facts left
    with no memory written; then forget the users nothing is left of (their ids and data key). A step that fails
    leaves the others to run; the command then exits 2 naming it."""
    from teamstore.audit.retention import SweepReport, sweep_all
    from teamstore.errors import RetentionIncomplete

    async def go(app: App) -> tuple[dict[str, Any], RetentionIncomplete | None]:
        from teamstore.events import drain_observers
        from teamstore.runtime.interruptions import ending

        observers = app.audit_observers()  # an expired session's interrupted run is recorded as it goes
        try:
            return asdict(await sweep_all(app.settings, app.engine, app.transcript_store, keys=app.keys,
                                          ending=ending(observers, "expired"),
                                          forget=app.forget_quiet_users)), None
        except RetentionIncomplete as exc:  # the others ran: what they did is printed, then the failure
            assert isinstance(exc.report, SweepReport)
            return asdict(exc.report), exc
        finally:
            await drain_observers(observers)

    # from a cron job, 'removed 0' would hide a mistyped TEAMSTORE_HOME: must_exist
    swept, incomplete = with_app(go, must_exist=True)
    emit(swept, as_json=as_json, render=lambda d: console.print(_swept(d)))
    if incomplete is not None:
        fail(incomplete, INCOMPLETE)


def _swept(d: dict[str, Any]) -> str:
    """The sweep's sentence: the counts of the steps that ran, the steps that failed or did not run."""
    counts = [f"{d[key]} {label}" + (f" ({d['memory_facts']} facts)" if key == "memories" else "")
              for key, label in _COUNTS if d[key] is not None]
    said = "removed " + ", ".join(counts) if counts else "removed nothing"
    if d["held_transcripts"]:
        said += f"; {d['held_transcripts']} transcripts past retention kept by a hold"
    if d["failed_steps"]:
        said += f"; failed: {', '.join(d['failed_steps'])} (what they sweep was left as it was)"
    return said + _forgetting(d)


def _forgetting(d: dict[str, Any]) -> str:
    """The forgetting's part of the sweep's sentence: what it did, or why it did not run."""
    if (why := d["skipped_steps"].get("forget_quiet_users")) is not None:
        return f"; forgot no one: {why}"
    if d["forgotten_users"] is None:
        return ""  # it failed: named above
    return (f"; forgot {d['forgotten_users']} users nothing was left of"
            + (f" ({d['quiet_users_kept']} kept: a session opened meanwhile, a transcript still stored, or another "
               "transcript store recorded for them)" if d["quiet_users_kept"] else ""))


def register(app: typer.Typer) -> None:
    """Mount this module's commands on the main app."""
    app.add_typer(retention_app, name="retention")
