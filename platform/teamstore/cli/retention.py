"""``teamstore retention``: the transcripts' lifecycle rule put on S3, and the sweep of what is past retention.

    teamstore retention apply --json     # the S3 rule for TEAMSTORE_TRANSCRIPT_RETENTION_DAYS, as put
    teamstore retention sweep            # schedule it: removes what is past retention from every store
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import typer

from teamstore.cli._output import JsonOption, emit
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


@retention_app.command("sweep")
def retention_sweep(as_json: bool = JsonOption) -> None:
    """Remove transcripts past retention (local ones, and on S3 those written again), queued transcripts, ledger
    rows and quarantined states past retention, expired sessions, expired user memory and memory facts left
    with no memory written; then forget the users nothing is left of (their ids and data key)."""
    from teamstore.audit.retention import sweep_all
    from teamstore.events import drain_observers
    from teamstore.runtime.interruptions import ending

    async def go(app: App) -> dict[str, Any]:
        observers = app.audit_observers()  # an expired session's interrupted run is recorded as it goes
        try:
            return asdict(await sweep_all(app.settings, app.engine, app.transcript_store, keys=app.keys,
                                          ending=ending(observers, "expired"),
                                          forget=app.forget_quiet_users))
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
            + _forgetting(d)
        ),
    )


def _forgetting(d: dict[str, Any]) -> str:
    """The forgetting's part of the sweep's sentence: what it did, or why it did not run."""
    if (why := d["skipped_steps"].get("forget_quiet_users")) is not None:
        return f"; forgot no one: {why}"
    return (f"; forgot {d['forgotten_users']} users nothing was left of"
            + (f" ({d['quiet_users_kept']} kept: a session opened meanwhile, a transcript still stored, or another "
               "transcript store recorded for them)" if d["quiet_users_kept"] else ""))


def register(app: typer.Typer) -> None:
    """Mount this module's commands on the main app."""
    app.add_typer(retention_app, name="retention")
