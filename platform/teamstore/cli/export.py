"""``teamstore export``: everything teamstore holds about one user, as one archive (GDPR art. 15 and 20).

    teamstore export --user alice@example.com --output alice.zip --requested-by "data subject, ticket 881"
    teamstore export --user alice@example.com --output alice-export/ --json     # a folder instead of a zip

Exit status 0: the archive holds the user's data; 3: no store holds anything for the id (never stored, or
erased): no archive is written, and the manifest printed (and recorded) names every store searched; 1: an
error, and no archive was left; 130 (143 on SIGTERM, 129 on SIGHUP): stopped, and no archive was left.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from teamstore.cli._output import JsonOption, Stop, emit, err_console, interrupted, stopped_as_on_ctrl_c
from teamstore.cli._runner import with_app
from teamstore.cli.erase import suggest_near_matches
from teamstore.ids import check_erasable_id
from teamstore.people import check_not_naming, check_person
from teamstore.terminal import console, plain, print_table

if TYPE_CHECKING:
    from teamstore.app import App
    from teamstore.export import Exported

NO_MATCH = 3
OutputOption = typer.Option(None, "--output", "-o", help="A new .zip file, or a new folder for any other name "
                            "(default: teamstore-export-<id>.zip here). Never overwritten; created owner-only.")


def export(
    user: str = typer.Option(..., "--user", help="The user id, exactly as the service stores it."),
    output: str | None = OutputOption,
    requested_by: str | None = typer.Option(
        None, "--requested-by", help="Who asked: the data subject, a representative, a ticket (recorded)."),
    operator: str | None = typer.Option(
        None, "--operator", help="Who runs it (recorded); default $TEAMSTORE_OPERATOR, else the OS user."),
    as_json: bool = JsonOption,
) -> None:
    """Write everything teamstore holds about USER, from every store, into one machine-readable archive."""
    if output == "":  # an unset "$OUT": as a path it would be '.', the working folder, refused as existing
        raise typer.BadParameter("it is empty: give the archive's new path, or leave --output out for "
                                 "teamstore-export-<id>.zip here", param_hint="'--output'")
    check_erasable_id(user)  # said before the database is looked for: the id is what is wrong
    check_not_naming("requested_by", check_person("requested_by", requested_by), user)
    check_person("operator", operator)
    finished: list[Exported] = []  # an export that ends just as the stop comes is whole: it is reported

    async def go(app: App) -> Exported:
        finished.append(await app.exporter().run(user, Path(output) if output is not None else None,
                                                 requested_by=requested_by, operator=operator))
        return finished[0]

    # SIGTERM and SIGHUP too: the archive written so far, the user's data readable under a hidden name beside
    # the target, is removed on the way out instead of being left there (only SIGKILL leaves it).
    with stopped_as_on_ctrl_c() as stop:
        try:
            done = with_app(go, must_exist=True)
        except KeyboardInterrupt:
            if not finished:
                _stopped(stop)
            done = finished[0]
    data = {"path": str(done.path) if done.path else None, **done.manifest.model_dump(mode="json")}
    emit(data, as_json=as_json, render=lambda _: _render(done))
    if not done.matched:
        err_console.print("[bold]no match[/]: no store holds anything for this user id (never stored, or erased: "
                          "a finished erasure forgets the id); no archive was written")
        if done.manifest.near_match:
            err_console.print(f"[yellow]note[/]: {plain(done.manifest.near_match)}")
        suggest_near_matches(user)
        raise typer.Exit(NO_MATCH)


def _stopped(stop: Stop) -> NoReturn:
    """Say that the export stopped and left nothing usable; exit 128 + the signal's number (130 on Ctrl-C)."""
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


def register(root: typer.Typer) -> None:
    """Mount ``export`` on the main app."""
    root.command("export")(export)
