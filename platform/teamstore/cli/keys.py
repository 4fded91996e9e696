"""``teamstore keys``: the key-encryption keys that wrap users' data keys.

    teamstore keys status                 # every KEK, how many data keys each wraps, when to rotate next, and
                                          # whether each in use can be used now (a health check: exit 2 if not);
                                          # --find-unrecorded: exit 1 when KMS refused or failed the search
    teamstore keys rotate                 # every key_rotation_days (schedule it); --to KMS_KEY to move to KMS
    teamstore keys retire                 # daily (schedule it): destroys the retired KEKs that are due
    teamstore keys migrate                # seal what was written before sealing (states, checkpoints, memory,
                                          # transcripts); exit 2 if a user's damaged key row left theirs unsealed

See docs/erasure.md for what the rotation bound means for backups.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from teamstore.cli._output import (
    JsonOption,
    deaf_to_ctrl_c,
    emit,
    err_console,
    interrupted,
    stopped_as_on_ctrl_c,
)
from teamstore.cli._runner import with_app
from teamstore.terminal import console, plain, print_table

if TYPE_CHECKING:
    from teamstore.app import App
    from teamstore.keys.rotation import RotationReport

# Each command imports the key machinery when it runs: `teamstore --help` imports no database layer.

PARTLY_DONE = 2
"""``keys rotate``'s exit status when the rotation is done and only the retire it runs afterwards failed;
``keys retire``'s when it kept a key-encryption key due for destruction (data keys still name it)."""

UNUSABLE = 2
"""``keys status``'s exit status when a key-encryption key in use (current, or wrapping live data keys) cannot be
used now: the key file missing, readable by others or without the key; KMS unreachable, refusing, or the key
disabled. What it found is printed all the same, and each cause with its fix on stderr."""

NOT_SEARCHED = 1
"""``keys status --find-unrecorded``'s exit status when KMS refused or failed the search (a missing permission, KMS
unreachable): the status of every command that could not do what was asked. What it could read is printed all the
same (``problem`` in ``--json``), the cause and its fix on stderr; a key in use that cannot be used exits
:data:`UNUSABLE` instead."""

LEFT_UNSEALED = 2
"""``keys migrate``'s exit status when it passed users over (their data key row damaged, or under a key-encryption
key KMS will not use): it sealed everyone else's data, and theirs is left as it was."""

_ROTATE_AGAIN = "run `teamstore keys rotate` again"

app = typer.Typer(help="Key-encryption keys: status, rotation, retirement, sealing older data.",
                  no_args_is_help=True)


@app.command("status")
def keys_status(
    find_unrecorded: bool = typer.Option(
        False, "--find-unrecorded", help="Also look through the account's KMS keys for those marked as this "
        "database's that it does not record (after a restore: the keys rotations made after the backup). One "
        "ListKeys page and a ListResourceTags per key: not for the health check. Never deletes one."),
    max_keys: int = typer.Option(1000, "--max-keys", min=1, help="With --find-unrecorded: how many of the account's "
                                 "KMS keys to look at, at most (a ListResourceTags each)."),  # unrecorded_kms.MAX_KEYS
    as_json: bool = JsonOption,
) -> None:
    """Every key-encryption key: current, retired (destroyed when) or destroyed, the data keys it wraps, and whether
    each one in use can be used now (a health check: exits 2 when one cannot; 1 when KMS refused or failed the
    search --find-unrecorded asked for)."""

    async def go(a: App) -> dict[str, Any]:
        from teamstore.keys.health import with_health
        from teamstore.keys.marks import with_marks
        from teamstore.keys.status import status
        from teamstore.keys.unrecorded_kms import find

        shown = await with_health(a.keys, await status(a.keys, a.settings))
        shown = await with_marks(a.keys.ring, a.engine, shown)  # a key from before the marks is marked here
        return {**shown, "unrecorded_kms": (await find(a.keys, max_keys)).as_dict() if find_unrecorded else None}

    data = with_app(go, must_exist=True)

    def render(d: dict[str, Any]) -> None:
        if not d["keks"]:
            console.print("no key-encryption key yet: the first is made with the first user's data key, on their "
                          "first sealed write (TEAMSTORE_KMS_KEY_ID's KMS key, else one in the local key file)")
            return
        print_table(("key-encryption key", "state", "data keys", "made", "destroy after"),
                    [[plain(k["kek_id"]), k["state"] + _HEALTH[k["health"]], str(k["data_keys"]),
                      f"{k['created_at']:%Y-%m-%d}", f"{k['destroy_after']:%Y-%m-%d}" if k["destroy_after"] else "-"]
                     for k in d["keks"]],
                    fixed=(1, 2, 3, 4), right=(2,))
        if d["rotation_due"] is not None:
            late = " (OVERDUE: run `teamstore keys rotate`)" if d["overdue"] else ""
            bound = d["backups_unreadable_by"]
            console.print(f"next rotation due {d['rotation_due']:%Y-%m-%d}{late}; " + (
                f"a backup taken now is unreadable for a user erased now by {bound:%Y-%m-%d}" if bound else
                "a backup taken now stays readable for a user erased now until it expires: a retired key-encryption "
                "key is kept past its destroy date (below)"))
        if d["rotation_unfinished"] is not None:
            _warn_unfinished(d["rotation_unfinished"])
        for kept in d["kept_past_destroy"]:
            _warn_kept(kept)
        _warn_unrecorded(d)
        _warn_unmarked(d)
        if d["unrecorded_kms"] is not None:
            _say_unrecorded_kms(d["unrecorded_kms"])

    emit(data, as_json=as_json, render=render)
    search = data["unrecorded_kms"]
    if search is not None and search["problem"] is not None:
        _not_searched(search["problem"])
    if not data["healthy"]:
        _unusable(data)
    if search is not None and search["problem"] is not None:
        raise typer.Exit(NOT_SEARCHED)


_HEALTH = {"ok": ", ok", "unusable": ", UNUSABLE", "unchecked": ""}
"""A KEK's ``health`` as the table shows it, after its state (``unchecked``: not in use, neither current nor
wrapping data keys). In a column of its own it would push a local KEK's id onto two lines at 80 columns."""


def _not_searched(problem: dict[str, Any]) -> None:
    """Why ``--find-unrecorded`` could not look through the account's KMS keys (or all of them), and its fix."""
    err_console.print("[bold red]error[/]: " + plain(
        f"could not look for KMS keys marked as this database's that it does not record: {problem['message']}"))
    err_console.print("[yellow]fix[/]: " + plain(f"{problem['hint'] or 'retry'}, then run it again"))


def _unusable(shown: dict[str, Any]) -> NoReturn:
    """Say why the configured KEK, and each KEK in use, cannot be used and how to fix it, once for the KEKs that
    share a cause (a key file that is missing fails each of its keys alike); exit :data:`UNUSABLE`."""
    if shown["configured"] is not None:
        err_console.print("[bold red]error[/]: " + plain(shown["configured"]["message"]))
        if shown["configured"]["hint"]:
            err_console.print("[yellow]fix[/]: " + plain(shown["configured"]["hint"]))
    causes: dict[tuple[str, str | None], list[str]] = {}
    for k in shown["keks"]:
        if k["problem"] is not None:
            causes.setdefault((k["problem"]["message"], k["problem"]["hint"]), []).append(k["kek_id"])
    for (message, hint), kek_ids in causes.items():
        which = f"key-encryption keys {', '.join(kek_ids)}" if len(kek_ids) > 1 else f"key-encryption key {kek_ids[0]}"
        err_console.print("[bold red]error[/]: " + plain(f"the {which} cannot be used now: {message}"))
        if hint:
            err_console.print("[yellow]fix[/]: " + plain(hint))
    raise typer.Exit(UNUSABLE)


def _warn_unfinished(unfinished: dict[str, Any]) -> None:
    """Data keys still under a retired KEK not yet due: a rotation stopped (KMS unreachable, a killed process)."""
    console.print("[bold yellow]warning[/]: " + plain(
        f"{unfinished['data_keys']} data key row(s) are still under retired key-encryption key(s) "
        f"({', '.join(unfinished['kek_ids'])}): a rotation is unfinished. Run `teamstore keys rotate`: it finishes "
        "it (so does the daily `teamstore keys retire`, once the retired key is due). Rows a rotation reported as "
        "damaged or under an unusable key stay there until restored, as its output said"))


def _warn_kept(kept: dict[str, Any], *, by_retire: bool = False) -> None:
    """A retired KEK past its destroy date that data keys still name: the backup bound does not hold for it.
    ``by_retire``: said by ``keys retire``, which has just re-wrapped what it could."""
    left = ("those rows are damaged" if by_retire else
            "run `teamstore keys retire` (it re-wraps what it can, then destroys the key); rows it leaves are damaged")
    console.print("[bold yellow]warning[/]: " + plain(
        f"{kept['kek_id']} is past its destroy date ({kept['destroy_after']:%Y-%m-%d}) but {kept['data_keys']} data "
        f"key row(s) still name it, so it is kept and backups under it stay readable past the rotation bound: {left}: "
        "restore them from a database backup (or, if KMS has the key disabled, `aws kms enable-key`), then run "
        "`teamstore keys retire` again"))


def _warn_unmarked(d: dict[str, Any]) -> None:
    """KMS keys in use that KMS would not mark as this database's: another database's `keys retire` cannot see that
    this one uses them."""
    for k in d["keks"]:
        if k["marked"] is False:
            problem = k["mark_problem"]
            console.print("[bold yellow]warning[/]: " + plain(
                f"the KMS key {k['kek_id']} is not marked as this database's ({problem['message']}): another database "
                "given the same key cannot see that this one uses it, and its `teamstore keys retire` could schedule "
                f"the key's deletion. Fix: {problem['hint'] or 'retry'}; the next `teamstore keys status` marks it"))


def _warn_unrecorded(d: dict[str, Any]) -> None:
    """Keys in the key file the database does not record: made after the backup it was restored from (or by a
    rotation stopped before recording its key). Backups taken under them stay readable while they exist."""
    if d["unrecorded_problem"] is not None:
        console.print("[bold yellow]warning[/]: " + plain(
            f"could not look for key-encryption keys the database does not record: {d['unrecorded_problem']['message']}"
            f" ({d['unrecorded_problem']['hint'] or 'fix the key file'})"))
    for u in d["unrecorded"] or []:
        made = f"made {u['made_at']:%Y-%m-%d}" if u["made_at"] else "undated (made before the key file kept dates)"
        if not u["made_here"]:
            console.print("[bold yellow]warning[/]: " + plain(
                f"the key file holds {u['kek_id']} ({made}), which this database neither records nor made: another "
                "database that shares this key file made it, or a rotation from before the file marked its keys. "
                "`teamstore keys retire` never destroys it. Give each database a key file of its own (copy the file, "
                "and point the other's TEAMSTORE_KEY_FILE at the copy); if the key is this database's from before a "
                "restore, delete its id from the file's `keys` once the backups taken under it are no longer wanted"))
            continue
        when = (f"from {u['destroy_after']:%Y-%m-%d %H:%M} UTC on" if u["destroy_after"] else
                "once it is TEAMSTORE_KEY_RETIRE_DAYS old, counted from the first run, which dates it")
        console.print("[bold yellow]warning[/]: " + plain(
            f"the key file holds {u['kek_id']} ({made}), which this database does not record: a rotation made it after "
            "the backup this database was restored from (or stopped before recording it), and backups taken under it "
            f"stay readable while it exists. The daily `teamstore keys retire` destroys it {when}. If another database "
            "uses this key file, copy the file for that one and point its TEAMSTORE_KEY_FILE at the copy before then, "
            "or it loses its key"))


def _say_unrecorded_kms(found: dict[str, Any]) -> None:
    """What ``--find-unrecorded`` found among the account's KMS keys: each one marked as this database's that it
    does not record, with what to do, and how far it looked (why it could not, if KMS refused or failed, is said on
    stderr: :func:`_not_searched`)."""
    if not found["uses_kms"]:
        console.print("no KMS key to look for: this database uses none (TEAMSTORE_KMS_KEY_ID is unset and it records "
                      "no KMS key)")
        return
    for k in found["keys"]:
        made = f"made {k['created_at']:%Y-%m-%d}" if k["created_at"] else "its date unknown: KMS would not describe it"
        console.print("[bold yellow]warning[/]: " + plain(
            f"the KMS key {k['arn']} ({made}, {k['key_state'] or 'state unknown'}) is marked as this database's "
            f"({found['mark']}) but the database does not record it: a rotation made it after the backup this "
            "database was restored from (or stopped before recording it), and backups taken under it stay readable "
            f"while it exists. {found['never_deleted']}. What to do: "
            f"{k['fix']}"))
    if found["problem"] is not None:
        console.print("the search of the account's KMS keys did not finish (the error below says why): a key of "
                      "this database among those it did not look at is not found")
    elif not found["keys"]:
        console.print(f"none of the {found['examined']} KMS key(s) looked at (the account's, in this region) is "
                      "marked as this database's and unrecorded")
    if not found["complete"] and found["problem"] is None:
        console.print("[bold yellow]warning[/]: " + plain(
            f"looked at only {found['examined']} of the account's KMS keys (--max-keys): the others were not searched;"
            " rerun with a higher --max-keys to look through them all"))
    if found["tags_refused"] and found["problem"] is None:
        console.print("[bold yellow]warning[/]: " + plain(
            f"{found['tags_refused']} KMS key(s) would not show their tags (kms:ListResourceTags refused on them): a "
            "key of this database among them is not found. Grant kms:ListResourceTags on them to look there too"))


@app.command("rotate")
def keys_rotate(
    to: str | None = typer.Option(None, "--to", help="A KMS key (id, ARN or alias) to rotate to; by default a new "
                                  "key like the current one (key file entry, or a KMS key made now)."),
    as_json: bool = JsonOption,
) -> None:
    """Make a new key-encryption key current and re-wrap every live data key under it; the old one is destroyed
    TEAMSTORE_KEY_RETIRE_DAYS later (by `keys retire`). Rerun to resume one that stopped."""
    seen: list[RotationReport] = []  # the rotation's report as it goes: what a stop says was done

    async def go(a: App) -> dict[str, Any]:
        from teamstore.keys.rotation import rotate

        report = await rotate(a.keys, to=to, retire_days=a.settings.key_retire_days, watch=seen.append)
        deaf_to_ctrl_c()
        return report.as_dict()

    # SIGTERM (a scheduled job cancelled, `kill`) and SIGHUP (the ssh session dropped) too: a batch being stored
    # is waited for, so what is said to be re-wrapped is what was.
    with stopped_as_on_ctrl_c() as stop:
        try:
            data = with_app(go, must_exist=True)
        except KeyboardInterrupt:
            report = seen[-1] if seen else None
            if report is None or report.step != "done":
                _interrupted(report, named=to is not None, code=stop.code)
            # It met the rotation as it returned, before it could be ignored: the rotation is over, and is said so.
            deaf_to_ctrl_c()
            data = report.as_dict()

    def render(d: dict[str, Any]) -> None:
        verb = "rotated to" if d["created"] else "finished the rotation to"
        retired = ("the retire after it failed (below)" if d["retire_error"] else
                   f"destroyed {len(d['destroyed'])} retired key(s){_already_deleted(d)}")
        console.print(plain(f"{verb} {d['kek_id']}: {d['rewrapped']} data key(s) re-wrapped, {d['gone']} erased "
                            f"meanwhile; {retired}"))
        if d["damaged"]:
            console.print(plain(f"{len(d['damaged'])} data key row(s) do not open under their key-encryption key "
                                "and were left as they are (their KEK is kept): restore those ts_data_keys rows"))
        if d["unusable"]:
            console.print(plain(
                f"{len(d['unusable'])} data key row(s) are under a key-encryption key that is disabled, scheduled for "
                "deletion or destroyed, and were left as they are (`teamstore keys status` shows it holding them): if "
                "it was disabled or retired by mistake, `aws kms cancel-key-deletion` (if its deletion is scheduled) "
                "and `aws kms enable-key`, then run `teamstore keys rotate` again; if it is gone, what it wrapped is "
                "beyond use"))

    emit(data, as_json=as_json, render=render)
    if data["retire_error"] is not None:
        _retire_failed(data["retire_error"])


def _interrupted(report: RotationReport | None, *, named: bool, code: int) -> NoReturn:
    """Ctrl-C (or SIGTERM, SIGHUP) stopped the rotation: say what it had done and what to run to go on, and exit
    ``code``. ``named``: the new KEK was ``--to``'s, so none was made that could be left unused."""
    interrupted(*_interruption(report, named), code)


def _interruption(report: RotationReport | None, named: bool) -> tuple[str, str]:
    """What a rotation stopped at ``report.step`` had done, and what to run next."""
    step = report.step if report is not None else "finishing"
    if report is None or (step == "finishing" and not (report.rewrapped or report.gone)):
        return "the rotation was stopped before it changed anything", _ROTATE_AGAIN
    if step in ("finishing", "rewrapping"):
        gone = f" ({report.gone} erased meanwhile)" if report.gone else ""
        return (f"the rotation to {report.kek_id} is unfinished: {report.rewrapped} data key(s) were re-wrapped "
                f"under it{gone}; the rest are still under the old key-encryption key, which opens them until it "
                "is destroyed", f"{_ROTATE_AGAIN}: it resumes this rotation (`teamstore "
                "keys status` says how many data keys are left to move)")
    if step == "retiring":
        return (f"the rotation to {report.kek_id} is done ({report.rewrapped} data key(s) re-wrapped); it was "
                "stopped while destroying the retired key-encryption keys that are due",
                "run `teamstore keys retire` (the daily one does it too), not the rotation again: it would begin another")
    if step == "making":
        return ("the rotation was stopped while making its new key-encryption key: no data key was re-wrapped, "
                "and the current key is unchanged", _ROTATE_AGAIN + ("" if named else _unused(None, report.kek_id)))
    made = "" if not report.created else _unused(report.kek_id, report.kek_id)
    return (f"the rotation was stopped while recording its new key-encryption key {report.kek_id}: no data key was "
            "re-wrapped", f"{_ROTATE_AGAIN}: if `teamstore keys status` shows {report.kek_id} as current it resumes this "
            f"rotation, else it begins another{made}")


def _unused(new: str | None, like: str) -> str:
    """What a rotation stopped before recording the KEK it made leaves: ``new`` (unknown: ``None``), made like
    ``like``."""
    from teamstore.keys.kek import KMS
    from teamstore.keys.kms import DELETION_WINDOW_DAYS

    if not like.startswith(KMS):
        return ("; the key file may keep an unused entry made for this one, which `teamstore keys retire` destroys "
                "once it is TEAMSTORE_KEY_RETIRE_DAYS old")
    arn = new.removeprefix(KMS) if new is not None else "ARN"
    which = (f"{arn} is then unused" if new is not None else "KMS may hold a key made for this one that nothing "
             "uses (described 'teamstore key-encryption key', tagged teamstore=key-encryption-key, and not listed "
             "by `teamstore keys status`)")
    return (f"; {which}: schedule its deletion, `aws kms schedule-key-deletion --key-id {arn} "
            f"--pending-window-in-days {DELETION_WINDOW_DAYS}`")


def _retire_failed(error: dict[str, Any]) -> NoReturn:
    """The rotation is done, the retire after it failed: say so, and that only the retire is to be run again."""
    err_console.print("[bold red]error[/]: " + plain(f"the rotation is done, but retiring the key-encryption keys "
                                                     f"due failed: {error['message']}"))
    err_console.print("[yellow]fix[/]: " + plain(f"{error['hint'] or 'fix the cause'}; then run `teamstore keys "
                                                 "retire` (the rotation is not to be run again)"))
    raise typer.Exit(PARTLY_DONE)


@app.command("retire")
def keys_retire(as_json: bool = JsonOption) -> None:
    """Destroy every retired key-encryption key whose retirement period has passed (run it daily), and every key
    of the key file the database does not record (after a restore) once it is TEAMSTORE_KEY_RETIRE_DAYS old."""
    data = with_app(lambda a: _retired(a), must_exist=True)

    def render(d: dict[str, Any]) -> None:
        console.print(plain(f"destroyed {len(d['destroyed'])} retired key-encryption key(s){_already_deleted(d)}; "
                            + _next_due(d["next_destroy_after"])))
        if d["unrecorded_destroyed"]:
            console.print(plain(
                f"destroyed {len(d['unrecorded_destroyed'])} key-encryption key(s) of the key file that this database "
                f"does not record, made TEAMSTORE_KEY_RETIRE_DAYS ago or more (after the backup it was restored "
                f"from): {', '.join(d['unrecorded_destroyed'])}"))
        for u in d["unrecorded_kept"]:
            if not u["made_here"]:
                console.print(plain(f"the key file's {u['kek_id']}, which this database neither records nor made, is "
                                    "kept (see `teamstore keys status`)"))
            else:
                console.print(plain(f"the key file's {u['kek_id']}, which this database does not record, is destroyed "
                                    f"by the first `teamstore keys retire` from {u['destroy_after']:%Y-%m-%d %H:%M} "
                                    "UTC on"))
        for kept in d["kept_past_destroy"]:
            _warn_kept(kept, by_retire=True)

    emit(data, as_json=as_json, render=render)
    for refused in data["refused"]:
        err_console.print("[bold red]error[/]: " + plain(refused["message"]))
        err_console.print("[yellow]fix[/]: " + plain(refused["hint"]))
    if data["kept_past_destroy"] or data["refused"]:
        raise typer.Exit(PARTLY_DONE)  # the bound does not hold for them: a scheduled run must not pass as fine


def _next_due(when: datetime | None) -> str:
    if when is None:
        return "no retired key is waiting for its destroy date"
    return (f"the next retired key becomes due for destruction on {when:%Y-%m-%d %H:%M} UTC (the first `teamstore keys "
            "retire` after that destroys it)")


def _already_deleted(d: dict[str, Any]) -> str:
    if not d["already_deleted"]:
        return ""
    return (f"; {len(d['already_deleted'])} of them KMS had deleted already (recorded as destroyed: what they "
            "wrapped was beyond use)")


async def _retired(a: App) -> dict[str, Any]:
    from teamstore.keys.rotation import retire

    done = await retire(a.keys, retire_days=a.settings.key_retire_days)
    return {"destroyed": done.destroyed, "already_deleted": done.already_deleted, "kept_past_destroy": done.kept,
            "next_destroy_after": done.next_destroy_after, "unrecorded_destroyed": done.unrecorded_destroyed,
            "unrecorded_kept": [u.as_dict() for u in done.unrecorded_kept],
            "refused": [{"kek_id": r.kek_id, "other_databases": r.other_databases, "error": type(r).__name__,
                         "message": r.message, "hint": r.hint} for r in done.refused]}


@app.command("migrate")
def keys_migrate(
    transcripts: bool = typer.Option(True, "--transcripts/--no-transcripts",
                                     help="Also write each plain transcript object again, sealed."),
    as_json: bool = JsonOption,
) -> None:
    """Seal what was written before sealing: stored and quarantined states and run checkpoints, users' memory,
    queued and stored transcripts. A user whose data key row does not open is passed over and reported (exit 2)."""

    async def go(a: App) -> dict[str, Any]:
        from teamstore.audit.sealing import seal_queued_transcripts, seal_stored_transcripts
        from teamstore.db.engine import empty_sqlite_log
        from teamstore.keys.passed_over import PassedOver
        from teamstore.memory.sealing import seal_saved_memory
        from teamstore.state.sealed import seal_saved_states

        passed = PassedOver()
        done: dict[str, Any] = {**await seal_saved_states(a.engine, a.keys, passed=passed),
                                **await seal_saved_memory(a.engine, a.keys, passed=passed)}
        done["outbox"] = await seal_queued_transcripts(a.engine, a.keys, passed=passed)
        if transcripts:
            late = a.settings.late_upload_seconds
            done["transcripts"] = await seal_stored_transcripts(a.engine, a.transcript_store, a.keys, late,
                                                                passed=passed)
        else:
            done["transcripts"] = 0
        await empty_sqlite_log(a.engine, "sealing")  # its older frames hold the rows as they were, unsealed
        return {**done, **passed.as_dict()}

    data = with_app(go, must_exist=True)

    def render(d: dict[str, Any]) -> None:
        console.print(plain(
            f"sealed {d['sessions']} session state(s), {d['quarantine']} quarantined state(s), {d['checkpoints']} "
            f"run checkpoint(s), {d['memories']} memory summar(ies) and {d['facts']} fact value(s), {d['outbox']} "
            f"queued and {d['transcripts']} stored transcript(s)"))
        _warn_passed_over(d)

    emit(data, as_json=as_json, render=render)
    if data["damaged"] or data["unusable"]:
        raise typer.Exit(LEFT_UNSEALED)  # a scheduled run must not pass as done


def _warn_passed_over(d: dict[str, Any]) -> None:
    """The users ``keys migrate`` passed over, by count (``--json`` names their key rows, never the users)."""
    if d["damaged"]:
        console.print("[bold yellow]warning[/]: " + plain(
            f"{len(d['damaged'])} user(s) were passed over, their data left unsealed: their data key row does not "
            "open under its key-encryption key. Restore those ts_data_keys rows from a database backup (`--json` "
            "gives their key ids in `damaged`), then run `teamstore keys migrate` again"))
    if d["unusable"]:
        console.print("[bold yellow]warning[/]: " + plain(
            f"{len(d['unusable'])} user(s) were passed over, their data left unsealed: their data key row is under "
            "a key-encryption key that is disabled, scheduled for deletion or destroyed (`--json` gives their key "
            "ids in `unusable`). If it was disabled or retired by mistake, `aws kms cancel-key-deletion` (if its "
            "deletion is scheduled) and `aws kms enable-key`, then run `teamstore keys migrate` again; if it is "
            "gone, their data key is beyond use and erasing those users removes what they stored"))


def register(root: typer.Typer) -> None:
    """Mount ``keys`` on the main app."""
    root.add_typer(app, name="keys")
