"""``teamstore export``: everything teamstore holds about one user, as one archive (GDPR art. 15 and 20).

    teamstore export --user alice@example.com --output alice.zip --requested-by "data subject, ticket 881"
    teamstore export --user alice@example.com --output alice-export/ --json     # a folder instead of a zip
    teamstore export status ex-0123456789abcdef01234567                         # its record, by the id it printed

Exit status 0: the archive holds the user's data; 3: no store holds anything for the id (never stored, or
erased): no archive is written, and the manifest printed (and recorded) names every store searched; 1: an
error, and no archive was left (unless the error says where it is: the outcome could not be recorded, or the
manifest printed); 130 (143 on SIGTERM, 129 on SIGHUP): stopped, and no archive was left (unless it says where it
is: stopped as its outcome was recorded, its failure not recorded either).
``status`` exits as the export did (0, 3, or 1 for one failed or abandoned: killed outright), or 2 while it runs.
"""

from __future__ import annotations

import os
import sys
from contextlib import suppress
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from teamstore.cli._output import (
    JsonOption,
    JsonOutput,
    Stop,
    UsageError,
    emit,
    err_console,
    interrupted,
    json_error,
    stopped_as_on_ctrl_c,
)
from teamstore.cli._runner import with_app
from teamstore.cli.erase import suggest_near_matches
from teamstore.errors import ExportNotPrinted, ExportOutcomeUnknown, ExportStopped
from teamstore.ids import check_erasable_id
from teamstore.people import check_not_naming, check_person
from teamstore.terminal import console, plain, print_table

if TYPE_CHECKING:
    from teamstore.app import App
    from teamstore.export import Exported
    from teamstore.export.coordinator import ExportCoordinator

NO_MATCH = 3
RUNNING = 2
app = typer.Typer(help="Write everything teamstore holds about one user, from every store, into one machine-readable "
                  "archive (its id printed on stderr as it starts); `status ID` shows an export's record.",
                  invoke_without_command=True)
OutputOption = typer.Option(None, "--output", "-o", help="A new .zip file, or a new folder for any other name "
                            "(default: teamstore-export-<id>.zip here). Never overwritten; created owner-only.")


@app.callback()
def export(
    ctx: typer.Context,
    user: str | None = typer.Option(None, "--user", help="The user id, exactly as the service stores it."),
    output: str | None = OutputOption,
    requested_by: str | None = typer.Option(
        None, "--requested-by", help="Who asked: the data subject, a representative, a ticket (recorded)."),
    operator: str | None = typer.Option(
        None, "--operator", help="Who runs it (recorded); default $TEAMSTORE_OPERATOR, else the OS user."),
    as_json: bool = JsonOption,
) -> None:
    """Write everything teamstore holds about USER, from every store, into one machine-readable archive; its id is
    printed on stderr as it starts."""
    if ctx.invoked_subcommand is not None:
        given = [name for name, value in (("--user", user), ("--output", output), ("--requested-by", requested_by),
                                          ("--operator", operator), ("--json", as_json)) if value is not None
                 and value is not False]
        if given:  # exporting options before a subcommand would be dropped silently: nothing would be exported
            raise UsageError(  # type: ignore[call-arg]
                f"{', '.join(given)} belong to `teamstore export` itself, not to `export {ctx.invoked_subcommand}`: "
                "give the subcommand's own options after it", ctx=ctx)
        return
    if user is None:
        raise UsageError(  # type: ignore[call-arg]
            "Missing option '--user': the user id to export (or `teamstore export status ID` for an export's "
            "record)", ctx=ctx)
    _export(user, output, requested_by, operator, as_json)


def _export(user: str, output: str | None, requested_by: str | None, operator: str | None, as_json: bool) -> None:
    if output == "":  # an unset "$OUT": as a path it would be '.', the working folder, refused as existing
        raise typer.BadParameter("it is empty: give the archive's new path, or leave --output out for "
                                 "teamstore-export-<id>.zip here", param_hint="'--output'")
    check_erasable_id(user)  # said before the database is looked for: the id is what is wrong
    check_not_naming("requested_by", check_person("requested_by", requested_by), user)
    check_person("operator", operator)
    finished: list[Exported] = []  # an export that ends just as the stop comes is whole: it is reported
    kept: list[tuple[str, Path]] = []  # an archive a stop left in place: its record may say `exported`
    coordinators: list[ExportCoordinator] = []

    async def go(app: App) -> Exported:
        coordinator = app.exporter()
        coordinators.append(coordinator)
        coordinator.opened = _say_opened
        coordinator.kept = lambda export_id, path: kept.append((export_id, path))
        coordinator.warned = lambda warning: _say(f"[yellow]warning[/]: {plain(warning)}")
        try:
            finished.append(await coordinator.run(user, Path(output) if output is not None else None,
                                                  requested_by=requested_by, operator=operator))
        except ExportOutcomeUnknown as exc:  # a stop as the app closes after it must still say where the archive is
            if exc.export_id is not None and exc.target is not None:
                kept.append((exc.export_id, exc.target))
            raise
        return finished[0]

    # SIGTERM and SIGHUP too: the archive written so far, the user's data readable under a hidden name beside
    # the target, is removed on the way out instead of being left there (only SIGKILL leaves it).
    with stopped_as_on_ctrl_c() as stop:
        try:
            done = with_app(go, must_exist=True)
        except KeyboardInterrupt:
            if not finished:
                # A stop that comes while another's is still being handled (a third Ctrl-C) leaves the export before
                # it says what it keeps: what it would keep, ended now, is kept all the same.
                kept += [placed for coordinator in coordinators for placed in coordinator.kept_if_ended_now()]
                _stopped(stop, kept[0] if kept else None)
            done = finished[0]
    _print_outcome(done, as_json)
    if not done.matched:
        _say("[bold]no match[/]: no store holds anything for this user id (never stored, or erased: a finished "
             "erasure forgets the id); no archive was written")
        if done.manifest.near_match:
            _say(f"[yellow]note[/]: {plain(done.manifest.near_match)}")
        with suppress(OSError):
            suggest_near_matches(user)
        raise typer.Exit(NO_MATCH)


def _print_outcome(done: Exported, as_json: bool) -> None:
    """Print the manifest on stdout (as JSON when asked); a stdout that cannot be written (a full disk, a closed
    pipe) fails the command saying where the archive is, since its runner would not learn it otherwise."""
    data = {"path": str(done.path) if done.path else None, **done.manifest.model_dump(mode="json")}
    try:
        emit(data, as_json=as_json, render=lambda _: _render(done))
        sys.stdout.flush()  # a file or a pipe buffers: a failure shows here, not as the process exits
    except OSError as exc:
        JsonOutput.written = True  # stdout is what failed: the error goes to stderr only
        _discard_stdout()
        where = f"its archive is at {done.path}" if done.path else "no store held anything: no archive was written"
        raise ExportNotPrinted(
            f"the export {done.manifest.export_id} is done and recorded `{done.manifest.status}` ({where}), but its "
            f"manifest could not be printed on stdout: {exc.strerror or exc}",
            hint=f"`teamstore export status {done.manifest.export_id} --json` shows its record; give the export a "
                 "stdout that can be written next time") from exc


def _discard_stdout() -> None:
    """Drop what stdout still buffers (it cannot be written), so that the process does not fail again as it
    exits, flushing it."""
    with suppress(OSError, ValueError):
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  # stdout for the rest of the process


def _say_opened(export_id: str) -> None:
    """Name the export on stderr as it starts (``--json`` keeps stdout to the manifest): one killed outright
    (SIGKILL, out of memory) prints nothing after this, and its record and temporary archive go by this id."""
    _say(f"[dim]export {export_id}: started[/]")


def _say(text: str) -> None:
    """Print ``text`` on stderr if it can be: a full disk or a closed pipe there must not fail the export, which
    ran without these lines before they were printed (its outcome is on stdout and in its record)."""
    with suppress(OSError):
        err_console.print(text)


def _stopped(stop: Stop, kept: tuple[str, Path] | None) -> NoReturn:
    """Say that the export stopped and left nothing usable, or, when its archive was ``kept`` (its id and path:
    stopped as its outcome was recorded, its failure not recorded either), where it is and how to tell whether
    it is whole; exit 128 + the signal's number (130 on Ctrl-C)."""
    if kept is not None:
        from teamstore.export.coordinator import kept_archive_hint  # loaded by the export already

        export_id, path = kept
        said = (f"the export {export_id} was stopped ({stop.name}) after placing its archive and before its failure "
                f"could be recorded: its record may say `exported`, so its archive is kept at {path}")
        fix = kept_archive_hint(export_id)
        json_error(ExportStopped.__name__, said, fix, stop.code)  # under --json, where a script looks for the archive
        interrupted(said, fix, stop.code)
    interrupted(f"the export was stopped ({stop.name}) before it finished: nothing usable was written (the part "
                "of the archive written so far was removed)", "export again (`teamstore export --user ...`, "
                "with the same options)", stop.code)


def _render(done: Exported) -> None:
    manifest = done.manifest
    # Counts, not names: a user with many runs has a file per run (manifest.json lists each).
    rows: list[list[Any]] = [[name, str(s.records), str(s.bytes), str(len(s.files))]
                             for name, s in manifest.stores.items()]
    print_table(("store", "records", "bytes", "files"), rows, fixed=(1, 2), right=(1, 2),
                title=f"export {manifest.export_id}: {manifest.status}")
    where = (f"archive {plain(done.path)} (owner-only), with README.txt (what each file holds, in plain words, "
             "for the user) and manifest.json (a SHA-256 per file)" if done.path else
             "no archive: nothing to hand over from the stores above")
    console.print(f"{where}; run by {plain(manifest.operator)}" +
                  (f", requested by {plain(manifest.requested_by)}" if manifest.requested_by else ""))


@app.command("status")
def status(
    export_id: str = typer.Argument(..., help="The export id `teamstore export` printed as it started."),
    as_json: bool = JsonOption,
) -> None:
    """Show an export's record: running, exported, no_match, failed (where, and the error's type), or abandoned:
    killed outright (SIGKILL, out of memory, a crash), since when, and what to do."""
    from teamstore.export import requests

    async def go(app: App) -> dict[str, Any]:
        return await requests.export_status(app.engine, export_id)

    record = with_app(go, must_exist=True)
    emit(record, as_json=as_json, render=_render_status)
    exits = {requests.EXPORTED: 0, requests.NO_MATCH: NO_MATCH, requests.RUNNING: RUNNING}
    raise typer.Exit(exits.get(str(record["status"]), 1))


def _render_status(record: dict[str, Any]) -> None:
    def shown(value: Any) -> str:
        return f"{value:%Y-%m-%dT%H:%M:%SZ}" if isinstance(value, datetime) else plain(value)

    rows = [[name, shown(value)] for name, value in record.items()
            if value is not None and name not in ("export_id", "status")]
    since = f" since {shown(record['finished_at'])}" if record["status"] == "abandoned" else ""
    print_table(("", ""), rows, title=f"export {record['export_id']}: {record['status']}{since}")


def register(root: typer.Typer) -> None:
    """Mount ``export`` (a group whose callback exports, with ``status`` beneath it)."""
    root.add_typer(app, name="export")
