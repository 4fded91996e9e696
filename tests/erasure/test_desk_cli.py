"""The compliance desk on the command line (embedded default): the no-match verdict, the confirmation on a
terminal and --yes, `erase list`, `erase extend` and `teamstore export`, with the bad input around them."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import re
import select
import shlex
import signal
import stat
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from teamstore.audit.observer import TranscriptObserver, build_audit_observers
from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.export import archive
from teamstore.settings import Settings
from tests.audit.fault_server import FaultServer
from tests.audit.teams import context, observe_run, triage_team
from tests.erasure.seed import Queued, desk_queue, longest_overdue_first, newest_first

WIDE = {"COLUMNS": "300"}


def cli(*args: str) -> Result:
    """``teamstore *args`` in this process, on a terminal wide enough that no message wraps."""
    return CliRunner().invoke(app, list(args), env=WIDE)


@pytest.fixture(autouse=True)
def _desk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS", "0")
    monkeypatch.setenv("TEAMSTORE_OPERATOR", "privacy desk")


def _populate(*users: str) -> None:
    """A run of each user through the audit observers: a transcript, ledger rows, a subject."""
    async def go() -> None:
        settings = Settings()
        engine = create_engine(settings.resolved_database_url)
        await upgrade(engine)
        observers = build_audit_observers(settings, engine)
        for user in users:
            await observe_run(observers, triage_team(), context(user_id=user, session_id="s1"), f"router of {user}")
        for observer in observers:
            if isinstance(observer, TranscriptObserver):
                await observer.drain()
        await engine.dispose()

    asyncio.run(go())


def _requests() -> list[dict[str, object]]:
    listed = cli("erase", "list", "--json")
    assert listed.exit_code == 0, listed.output
    found: list[dict[str, object]] = json.loads(listed.stdout)["requests"]
    return found


def test_an_id_no_store_holds_ends_no_match_with_exit_3_and_the_near_twin_named_on_stderr_only() -> None:
    _populate("dave")

    done = cli("erase", "--user", "Dave", "--request-id", "req-881", "--yes", "--json")

    assert done.exit_code == 3, done.output
    receipt = json.loads(done.stdout)
    assert receipt["status"] == "no_match" and "letter case" in receipt["near_match"]
    # No terminal (a job, whose output is kept in logs): the twin is said to exist, never named.
    assert "'dave'" not in done.output and "did you mean" not in done.output
    human = cli("erase", "status", "req-881")
    assert human.exit_code == 3 and "no match: no store holds anything for this user id" in human.stdout
    assert "subject hash none (no pseudonymous key was stored for this id)" in human.stdout
    assert "'dave'" not in human.output  # a stored receipt never names an id
    real = cli("erase", "--user", "dave", "--request-id", "req-real", "--yes", "--json")
    assert real.exit_code == 0 and json.loads(real.stdout)["status"] == "completed"  # dave was untouched before


def test_without_a_terminal_an_erasure_needs_yes_and_changes_nothing() -> None:
    _populate("erin")
    refused = cli("erase", "--user", "erin", "--request-id", "req-x")
    assert refused.exit_code == 1
    assert "no terminal to ask on: nothing was changed" in refused.stderr and "--yes" in refused.stderr
    assert _requests() == []
    plan = cli("erase", "--user", "erin", "--dry-run", "--json")  # a dry run never asks
    assert plan.exit_code == 0 and json.loads(plan.stdout)["status"] == "dry_run"
    assert plan.stderr == ""  # no progress bar, nor the blank line one left, in a job's log
    done = cli("erase", "--user", "erin", "--request-id", "req-y", "--yes")
    assert done.exit_code == 0 and done.stderr.strip() and "" not in done.stderr.splitlines()  # its notes only


def _on_a_terminal(answer: str, *args: str) -> tuple[int, str, str]:
    """``teamstore *args`` with a pseudo-terminal for stdin and stderr, answering ``answer`` to its question;
    its exit status, stdout, and what the terminal showed."""
    primary, secondary = os.openpty()
    shown = bytearray()

    def read() -> None:
        with contextlib.suppress(OSError):  # EIO once the process and this side have closed the terminal
            while chunk := os.read(primary, 4096):
                shown.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        os.write(primary, f"{answer}\n".encode())
        done = subprocess.run([sys.executable, "-m", "teamstore", *args], stdin=secondary, stderr=secondary,
                              stdout=subprocess.PIPE, text=True, timeout=120, env={**os.environ, **WIDE}, check=False)
    finally:
        os.close(secondary)
        reader.join(timeout=10)
        os.close(primary)
    styled = shown.decode("utf-8", "replace").replace("\r\n", "\n")
    return done.returncode, done.stdout, re.sub(r"\x1b\[[0-9;]*m", "", styled)  # rich colours a terminal


def test_on_a_terminal_an_erasure_shows_what_it_would_remove_and_erases_only_on_yes() -> None:
    _populate("fay", "gil")

    status, out, shown = _on_a_terminal("n", "erase", "--user", "fay", "--requested-by", "ticket 4711")
    assert status == 1, shown
    assert "erasure dry run" in shown and "would_erase" in shown and "cannot be undone" in shown
    assert "not confirmed: nothing was erased and no request was opened" in shown
    assert out.strip() == ""  # (click's prompt leaves its trailing space on stdout)
    assert _requests() == []

    status, out, shown = _on_a_terminal("y", "erase", "--user", "fay", "--request-id", "req-882",
                                        "--requested-by", "ticket 4711")
    assert status == 0, shown
    assert "erasure req-882: completed" in out and "requested by ticket 4711" in out
    assert "attempt 1 run by privacy desk" in out

    status, out, shown = _on_a_terminal("n", "erase", "--user", "GIL")
    assert status == 1 and "No store holds anything for this id" in shown
    assert "did you mean 'gil'? It differs only in letter case." in shown  # named on a terminal only
    assert [r["request_id"] for r in _requests()] == ["req-882"]

    asyncio.run(_open("req-883", "gil"))  # a request a coordinator stopped in: its plan shows its own dates
    (row,) = [r for r in _requests() if r["request_id"] == "req-883"]
    status, out, shown = _on_a_terminal("n", "erase", "--user", "gil", "--request-id", "req-883")
    assert status == 1 and "this resumes request req-883 (open)" in shown
    due = datetime.fromisoformat(str(row["due_at"]))
    assert f"due {due:%Y-%m-%d}" in shown and "one started now would be due" not in shown

    # Another user's open request: refused before anything is shown or asked, not offered as resumed.
    status, out, shown = _on_a_terminal("y", "erase", "--user", "fay", "--request-id", "req-883")
    assert status == 1 and "the request given erases another user" in shown and "req-883" not in shown
    assert "this resumes" not in shown and "cannot be undone" not in shown and "erasure dry run" not in shown


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_while_the_terminal_asks_exits_as_a_stop_and_opens_nothing(signum: signal.Signals) -> None:
    """Ctrl-C at the question (or the job cancelled, the ssh session closed) ends the command as a stop of the
    erasure does: the signal's exit status and a line saying nothing was erased."""
    _populate("hal")
    primary, secondary = os.openpty()
    shown = bytearray()
    # SIGINT set, not inherited from how pytest was started (a shell starts a background job with it ignored).
    proc = subprocess.Popen([sys.executable, "-m", "teamstore", "erase", "--user", "hal", "--request-id", "req-q"],
                            stdin=secondary, stderr=secondary, stdout=subprocess.DEVNULL, env={**os.environ, **WIDE},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(secondary)  # the process holds the terminal now: reading ends (EIO) once it exits
    try:
        while b"[y/N]" not in shown:
            shown.extend(os.read(primary, 4096))
        proc.send_signal(signum)
        with contextlib.suppress(OSError):
            while True:
                if not select.select([primary], [], [], 5)[0]:
                    if b"stopped" not in shown:
                        # It came between the prompt and input()'s read, which then waits for a line regardless
                        # (CPython checks for signals only around the read): pressed again, as a person would.
                        proc.send_signal(signum)
                    continue
                if not (chunk := os.read(primary, 4096)):
                    break
                shown.extend(chunk)
        proc.wait(timeout=30)
    finally:
        proc.kill()
        os.close(primary)
    said = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", shown.decode("utf-8", "replace")).split())
    assert proc.returncode == 128 + signum, said
    assert "stopped at its question: nothing was erased and no request was opened" in said
    assert _requests() == []


def test_the_desk_lists_requests_by_status_and_overdue_and_extends_one_once(tmp_path: Path) -> None:
    _populate("hal", "ivy")
    assert cli("erase", "--user", "hal", "--request-id", "req-884", "--yes",
                               "--requested-by", "ticket 9").exit_code == 0
    assert cli("erase", "--user", "nobody", "--request-id", "req-none", "--yes").exit_code == 3

    listed = cli("erase", "list")
    assert listed.exit_code == 0 and "2 erasure request(s)" in listed.stdout
    assert "req-884" in listed.stdout and "ticket 9" in listed.stdout and "privacy desk" in listed.stdout
    assert "hal" not in listed.stdout.replace("req-884", "")  # never a user id
    only = cli("erase", "list", "--status", "no_match", "--json")
    assert [r["request_id"] for r in json.loads(only.stdout)["requests"]] == ["req-none"]
    assert json.loads(cli("erase", "list", "--overdue", "--json").stdout)["requests"] == []
    empty = cli("erase", "list", "--overdue")
    assert empty.exit_code == 0 and empty.stdout.strip() == "no request matches"  # no empty table above it
    assert cli("erase", "--user", "ivy", "--yes").exit_code == 0  # its request id made by teamstore
    made = json.loads(cli("erase", "list", "--json").stdout)["requests"][0]["request_id"]
    assert made.startswith("er-") and made in cli("erase", "list").stdout  # on one line, to be copied whole
    for status in ("done", "dry_run", "OPEN"):  # a dry run stores no request: none ever has that status
        bad = cli("erase", "list", "--status", status)
        said = " ".join(bad.stderr.split())
        assert bad.exit_code == 1 and "Invalid value for '--status': it takes one of open," in said
        assert "completed" in said and status not in said

    finished = cli("erase", "extend", "req-884", "--by", "2m", "--reason", "complex")
    assert finished.exit_code == 1 and "only an open or failed request can be extended" in finished.stderr
    unknown = cli("erase", "extend", "req-404", "--by", "2m", "--reason", "complex")
    assert unknown.exit_code == 1 and "the request id given names no erasure request" in unknown.stderr
    assert "req-404" not in unknown.stderr
    assert "did you mean" not in unknown.stderr
    for command in (("status", "REQ-884"), ("extend", " Req-884", "--by", "2m", "--reason", "complex")):
        typed = cli("erase", *command)  # the ticket's id typed in another letter case, or pasted with a space
        assert typed.exit_code == 1 and "did you mean 'req-884'? Request ids match exactly" in typed.stderr
    no_reason = cli("erase", "extend", "req-884", "--by", "2m")
    assert no_reason.exit_code == 1 and "--reason" in no_reason.stderr


def test_an_open_request_is_extended_once_from_the_command_line_and_the_receipt_shows_it() -> None:
    _populate("jo")
    asyncio.run(_open("req-jo", "jo"))

    too_far = cli("erase", "extend", "req-jo", "--by", "9w", "--reason", "complex")
    assert too_far.exit_code == 1 and "more than two months after the original" in too_far.stderr
    odd = cli("erase", "extend", "req-jo", "--by", "soon", "--reason", "complex")
    assert odd.exit_code == 1 and "error: --by is not a length of time: it takes a positive number" in odd.stderr
    assert "soon" not in odd.output  # what is wrong is said; the value given is not repeated
    done = cli("erase", "extend", "req-jo", "--by", " 6        w ", "--reason", "40 sessions", "--json")
    assert done.exit_code == 0, done.output
    receipt = json.loads(done.stdout)
    assert receipt["extension"]["reason"] == "40 sessions" and receipt["extension"]["operator"] == "privacy desk"
    assert receipt["extension"]["by"] == "6w"  # recorded as it reads, whatever the spaces given
    assert "tell the data subject of the extension and its reason by the original due date" in done.stderr
    again = cli("erase", "extend", "req-jo", "--by", "1d", "--reason", "more")
    assert again.exit_code == 1 and "extended already" in again.stderr and "privacy desk" in again.stderr
    (row,) = _requests()
    assert row["extended_due_at"] is not None and row["extension_reason"] == "40 sessions"
    shown = cli("erase", "status", "req-jo")
    assert shown.exit_code == 2 and "extended by 6 weeks to" in shown.stdout and "40 sessions" in shown.stdout


async def _open(request_id: str, user: str, reason: str | None = None) -> None:
    """An open request, as one whose coordinator stopped leaves it."""
    from teamstore.erasure import requests

    engine = create_engine(Settings().resolved_database_url)
    try:
        await requests.open_request(engine, request_id, user, reason, 30)
    finally:
        await engine.dispose()


async def _held(request_id: str, user: str) -> None:
    """A request a legal hold stopped: the user id forgotten, the subject key and the hash of the id kept."""
    from sqlalchemy import delete, update

    from teamstore.db.fence import user_holds
    from teamstore.erasure import ErasureSettings, RequestStatus, requests
    from teamstore.erasure.schema import erasure_requests

    engine = create_engine(Settings().resolved_database_url)
    try:
        await upgrade(engine)
        hashes = await requests.user_hashes(engine, ErasureSettings(), user)
        await requests.open_request(engine, request_id, user, None, 30, hashes=hashes)
        async with engine.begin() as conn:
            await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id == request_id).values(
                status=RequestStatus.RETAINED_UNDER_HOLD, user_id=None, subject_key="5" * 32))
            await conn.execute(delete(user_holds).where(user_holds.c.request_id == request_id))
    finally:
        await engine.dispose()


def test_a_held_request_is_refused_under_another_user_id_before_anything_is_shown_or_run() -> None:
    _populate("hal")
    asyncio.run(_held("req-884", "ida"))

    status, _out, shown = _on_a_terminal("y", "erase", "--user", "hal", "--request-id", "req-884")
    assert status == 1 and "the request given was filed for another user id" in shown, shown
    assert "this resumes" not in shown and "cannot be undone" not in shown and "erasure dry run" not in shown
    scripted = cli("erase", "--user", "hal", "--request-id", "req-884", "--yes")
    assert scripted.exit_code == 1 and "was filed for another user id" in scripted.stderr, scripted.output
    assert not re.search(r"\b(hal|ida)\b", scripted.stderr)  # named by neither id
    (row,) = _requests()
    assert row["status"] == "retained_under_hold" and row["operators"] == []  # never run for hal


@pytest.mark.parametrize("held", [True, False])
def test_a_rerun_that_finds_nothing_more_is_asked_to_resume_its_request_not_to_file_a_no_match(held: bool) -> None:
    # A held request forgot the user's id, and a stopped one may have erased everything already: the rerun
    # finishes that request, so the question is about it, not about a new no_match receipt.
    assert cli("db", "upgrade").exit_code == 0
    asyncio.run(_held("req-890", "kim") if held else _open("req-890", "kim"))

    status, _out, shown = _on_a_terminal("n", "erase", "--user", "kim", "--request-id", "req-890")
    said = " ".join(shown.split())
    assert status == 1 and "this resumes request req-890" in said, shown
    assert "File a no_match receipt" not in said and "Resume request req-890 to finish it?" in said
    assert "not confirmed: nothing was erased and the request stays as it was" in said
    (row,) = _requests()
    assert row["status"] == ("retained_under_hold" if held else "open")


@pytest.mark.s3
def test_a_rerun_after_a_hold_is_lifted_shows_the_version_it_kept_and_asks_to_erase_it(
    s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The held request forgot the user and the mapping: its dry run found nothing for the id, every store no_match,
    # and the terminal asked to resume a request with "nothing more" found, while the rerun deleted a version.
    from teamstore.audit.subjects import get_or_create_subject, record_store
    from teamstore.audit.transcripts import subject_prefix
    from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
    from tests.erasure.conftest import versioned_bucket

    bucket = versioned_bucket(lock=True)
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", f"s3://{bucket}/audit")
    store = S3TranscriptStore(make_client(), bucket, "audit")

    async def seed() -> dict[str, str]:
        engine = create_engine(Settings().resolved_database_url)
        await upgrade(engine)
        subject = await get_or_create_subject(engine, "rosa")
        await record_store(engine, subject, store.url)
        for n in range(3):
            await store.put(f"{subject_prefix(subject)}sessions/s{n}/runs/r{n}.jsonl.gz", b"transcript")
        await engine.dispose()
        return {"Bucket": bucket, "Key": f"audit/{subject_prefix(subject)}sessions/s0/runs/r0.jsonl.gz"}

    hold = asyncio.run(seed())
    store.client.put_object_legal_hold(**hold, LegalHold={"Status": "ON"})
    assert cli("erase", "--user", "rosa", "--request-id", "req-t1", "--yes").exit_code == 2  # held
    store.client.put_object_legal_hold(**hold, LegalHold={"Status": "OFF"})
    prefix = hold["Key"].split("sessions/")[0]  # the subject's (the bucket also holds the database's mark)

    status, _out, shown = _on_a_terminal("n", "erase", "--user", "rosa", "--request-id", "req-t1")
    said = " ".join(shown.split())
    assert status == 1 and "transcripts would_erase 0 1 1 0 10" in said, shown
    assert "Nothing more is found" not in said and "Erase what is listed above?" in said
    assert len(store.client.list_object_versions(Bucket=bucket, Prefix=prefix).get("Versions", [])) == 1
    assert cli("erase", "--user", "rosa", "--request-id", "req-t1", "--yes").exit_code == 0
    assert store.client.list_object_versions(Bucket=bucket, Prefix=prefix).get("Versions", []) == []


def test_list_by_user_finds_a_held_request_by_the_hash_it_keeps_and_no_other_users() -> None:
    # A held request has forgotten its user's id: the desk asked for the user's requests found none of it.
    _populate("ivy")
    asyncio.run(_held("req-885", "ivy"))
    asyncio.run(_held("req-886", "jon"))

    for args in ((), ("--status", "retained_under_hold")):
        listed = json.loads(cli("erase", "list", "--user", "ivy", *args, "--json").stdout)
        assert [(r["request_id"], r["status"]) for r in listed["requests"]] == [("req-885", "retained_under_hold")]
    assert json.loads(cli("erase", "list", "--user", "ivy", "--status", "open", "--json").stdout)["requests"] == []
    assert [r["request_id"] for r in json.loads(cli("erase", "list", "--user", "kay", "--json").stdout)["requests"]
            ] == []


def test_list_by_user_says_in_words_that_a_held_request_was_filed_for_a_near_twin_and_never_names_it() -> None:
    # It found the held request by the exact id alone, and said nothing of one held for the id in another letter case.
    _populate("lea")
    asyncio.run(_held("req-887", "Lea"))

    listed = cli("erase", "list", "--user", "lea")
    assert listed.exit_code == 0 and listed.stdout.startswith("no request matches\n"), listed.output
    assert "note: a held request was filed for a user id that differs from this one only in letter case" in \
        " ".join(listed.stdout.split())
    as_json = json.loads(cli("erase", "list", "--user", "lea", "--json").stdout)
    assert as_json["requests"] == [] and "a held request was filed" in as_json["near_match"]
    status, out, shown = _on_a_terminal("", "erase", "list", "--user", "lea")
    assert status == 0 and "a held request was filed" in out, out
    assert "Lea" not in listed.output + str(as_json) + out + shown  # a spelling not asked for, on no output
    # Only a request the filters keep is a twin: `--status open` would not list the held one under its own id either.
    for args, near in ((("--status", "open"), None), (("--overdue",), None),
                       (("--status", "retained_under_hold"), as_json["near_match"])):
        assert json.loads(cli("erase", "list", "--user", "lea", *args, "--json").stdout)["near_match"] == near, args


async def _stored_by_an_earlier_release(request_id: str, user: str) -> None:
    """An open request under an id no new request may take now."""
    from teamstore.erasure.schema import erasure_requests

    engine = create_engine(Settings().resolved_database_url)
    now = datetime.now(UTC)
    try:
        async with engine.begin() as conn:
            await conn.execute(erasure_requests.insert().values(
                request_id=request_id, user_id=user, status="open", received_at=now, due_at=now + timedelta(days=30),
                updated_at=now))
    finally:
        await engine.dispose()


def test_export_writes_one_archive_refuses_an_existing_path_and_says_when_there_is_nothing(tmp_path: Path) -> None:
    _populate("kim")
    target = tmp_path / "kim.zip"

    done = cli("export", "--user", "kim", "--output", str(target), "--requested-by", "data subject, by mail",
                               "--json")

    assert done.exit_code == 0, done.output
    manifest = json.loads(done.stdout)
    assert manifest["status"] == "exported" and manifest["path"] == str(target)
    assert manifest["stores"]["transcripts"]["records"] == 1 and manifest["stores"]["ledger"]["records"] >= 1
    with zipfile.ZipFile(target) as archive:
        assert "router of kim" in archive.read(manifest["stores"]["transcripts"]["files"][0]).decode()
    again = cli("export", "--user", "kim", "--output", str(target))
    assert again.exit_code == 1 and "exists: an export never overwrites" in again.stderr

    assert cli("erase", "--user", "kim", "--yes").exit_code == 0
    gone = cli("export", "--user", "kim", "--output", str(tmp_path / "after.zip"))
    assert gone.exit_code == 3 and "no store holds anything for this user id" in gone.stderr
    assert "no archive was written" in gone.stderr and not (tmp_path / "after.zip").exists()
    twin = cli("export", "--user", "KIM")
    assert twin.exit_code == 3 and "kim" not in twin.output.lower()
    pasted = cli("export", "--user", "KIM ")  # no session can have it, and nothing is stored under it
    assert pasted.exit_code == 1 and "kim" not in pasted.output.lower() and "at its end" in pasted.stderr
    blank = cli("export", "--user", "")
    assert blank.exit_code == 1 and "user_id is empty" in blank.stderr
    nowhere = cli("export", "--user", "kim", "--output", "")  # an unset "$OUT": not '.', the working folder
    assert nowhere.exit_code == 1 and "Invalid value for '--output': it is empty" in nowhere.stderr


def test_an_exports_title_names_its_id_and_status_on_one_line_on_an_80_column_terminal(tmp_path: Path) -> None:
    _populate("lea")

    done = CliRunner().invoke(app, ["export", "--user", "lea", "--output", str(tmp_path / "lea.zip")],
                              env={"COLUMNS": "80"})

    assert done.exit_code == 0, done.output
    assert re.search(r"export ex-[0-9a-f]+: exported", done.stdout), done.stdout


def _without_hard_links(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on FAT, exFAT and some network shares (no such filesystem can be mounted here)."""
    def refused(*_: object, **__: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", refused)


@pytest.mark.parametrize(("name", "appears", "hard_links"), [
    ("kim.zip", lambda path: path.write_bytes(b"someone's archive"), True),
    ("kim.zip", lambda path: path.write_bytes(b"someone's archive"), False),
    ("kim", lambda path: path.mkdir(), True),  # an empty folder: a rename would replace it
])
def test_export_never_replaces_what_appears_at_its_path_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, appears: Callable[[Path], object], hard_links: bool
) -> None:
    """The path was free when the export checked it; something is there by the time the archive is done. It
    stays as it is, the export fails saying so, and the finished archive (the user's data) goes with it."""
    _populate("kim")
    if not hard_links:
        _without_hard_links(monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    target = out / name

    def free_then_taken(path: Path) -> bool:
        if not path.exists():
            appears(path)
        return False  # what the check saw a moment before

    monkeypatch.setattr(archive, "_is_taken", free_then_taken)
    refused = cli("export", "--user", "kim", "--output", str(target))

    assert refused.exit_code == 1 and f"{target} exists: an export never overwrites" in refused.stderr
    assert [p.name for p in out.iterdir()] == [name]  # no archive, no temporary one
    if target.is_file():
        assert target.read_bytes() == b"someone's archive"
    else:
        assert list(target.iterdir()) == []
    (record,) = _export_records()  # kept after kim's erasure: it names neither the path nor kim
    assert (record["status"], record["detail"]) == ("failed", "the archive: ExportTargetExists")


def test_export_refuses_a_path_inside_the_folders_teamstore_keeps_its_stores_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archive holds the user's data opened: in the home, the registry or the transcript folder it would be
    backed up with the sealed stores, and the user's erasure would never find it."""
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", str(tmp_path / "transcripts"))
    _populate("kim")
    home = Path(os.environ["TEAMSTORE_HOME"])
    (tmp_path / "to-home").symlink_to(home)
    for target in (home / "kim.zip", home / "registry" / "kim", tmp_path / "transcripts" / "kim.zip",
                   tmp_path / "to-home" / "kim.zip"):
        refused = cli("export", "--user", "kim", "--output", str(target))
        assert refused.exit_code == 1, refused.output
        assert "where teamstore keeps its stores" in refused.stderr and "give --output a path outside" in refused.stderr
        assert not target.exists()
    assert not [p for p in (home, tmp_path / "transcripts") for p in p.rglob("*kim*")]
    assert _export_records() == []  # refused before anything was read
    assert cli("export", "--user", "kim", "--output", str(tmp_path / "kim.zip")).exit_code == 0


def test_export_places_its_archive_owner_only_on_a_filesystem_without_hard_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _populate("kim")
    _without_hard_links(monkeypatch)
    target = tmp_path / "kim.zip"

    done = cli("export", "--user", "kim", "--output", str(target))

    assert done.exit_code == 0, done.output
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(("kim", ".kim"))] == ["kim.zip"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    with zipfile.ZipFile(target) as written:
        assert written.testzip() is None and "manifest.json" in written.namelist()


def test_erasing_options_before_a_subcommand_are_refused_not_dropped() -> None:
    _populate("hank")
    dropped = cli("erase", "--user", "hank", "--yes", "list")
    assert dropped.exit_code == 1 and "--user, --yes belong to `teamstore erase` itself" in dropped.output
    listed = cli("erase", "list", "--json")
    assert listed.exit_code == 0 and json.loads(listed.stdout)["requests"] == []  # none opened, none run


def test_an_operator_name_the_receipt_cannot_hold_is_refused_before_the_terminal_asks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _populate("kit")
    monkeypatch.setenv("TEAMSTORE_OPERATOR", "x" * 201)

    status, _, shown = _on_a_terminal("y", "erase", "--user", "kit", "--request-id", "req-885")

    assert status == 1 and "operator is 201 characters long" in shown
    assert "cannot be undone" not in shown and "erasure dry run" not in shown  # nothing asked in vain
    assert _requests() == []
    assert cli("erase", "--user", "kit", "--dry-run").exit_code == 0  # a dry run records no operator


def _waiting_on(hanging: FaultServer) -> dict[str, str]:
    """The environment of an export whose transcript store is ``hanging``: it waits there, its archive begun."""
    return {**os.environ, "TEAMSTORE_TRANSCRIPTS_URL": "s3://bucket/audit", "AWS_ENDPOINT_URL": hanging.endpoint,
            "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_an_export_stopped_by_a_signal_leaves_no_temporary_archive_and_records_that_it_stopped(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """A job's timeout sends SIGTERM, a closed terminal SIGHUP: the archive written so far (the user's data,
    readable) must go with the export, as on Ctrl-C, not stay beside the target under a hidden name; its record
    must say it stopped, not `running` as if it still were; and the command says so, exiting 128 + the signal."""
    _populate("lia")
    out = tmp_path / "out"
    out.mkdir()
    hanging = FaultServer("hang")  # the transcript store answers nothing: the export waits there
    env = _waiting_on(hanging)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "teamstore", "export", "--user", "lia", "-o",
                                 str(out / "lia.zip")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not (hanging.requests and list(out.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.05)
        (temporary,) = out.iterdir()
        assert temporary.name.startswith(".lia.zip.") and temporary.name.endswith(".partial")  # states in it
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        hanging.stop()
    assert proc.returncode != 0, err
    assert list(out.iterdir()) == []
    (record,) = _export_records()
    assert record["status"] == "failed", err
    # Stopped while it waited for the store; on a slow machine the store's own timeout may come first, and
    # the record then names that instead. Either way it is not left `running`.
    detail = str(record["detail"])
    assert detail.startswith(("stopped while reading transcripts", "transcripts: TranscriptUnavailable")), record
    if detail.startswith("stopped"):
        said = " ".join(err.decode().split())
        assert proc.returncode == 128 + signum, said
        assert (f"interrupted: the export was stopped ({signal.Signals(signum).name}) before it finished: nothing "
                "usable was written") in said and "fix: export again" in said


def _started_line(proc: subprocess.Popen[bytes], deadline: float) -> str:
    """What the export printed on stderr up to the line naming its id (read as it runs: it is killed after)."""
    assert proc.stderr is not None
    said = b""
    while b": started" not in said and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.1)
        if ready:
            said += os.read(proc.stderr.fileno(), 4096)
    return said.decode()


def _lease_passed(export_id: str) -> None:
    """As if the export's lease had run out since (it ended when the export began)."""
    async def go() -> None:
        from sqlalchemy import update

        from teamstore.export.schema import export_requests

        engine = create_engine(Settings().resolved_database_url)
        async with engine.begin() as conn:
            await conn.execute(update(export_requests).where(export_requests.c.export_id == export_id)
                               .values(lease_until=export_requests.c.started_at))
        await engine.dispose()

    asyncio.run(go())


def test_an_export_killed_outright_is_named_as_it_starts_shown_abandoned_and_cleaned_up_by_the_next(
    tmp_path: Path,
) -> None:
    """SIGKILL (out of memory, a crash) runs no clean-up: the operator has the export's id from its first line, its
    status says it was abandoned and what to do once its lease has passed, and the next export to the same
    target closes its record and removes the temporary archive it left (the user's data, readable)."""
    _populate("lia")
    out = tmp_path / "out"
    out.mkdir()
    hanging = FaultServer("hang")  # the transcript store answers nothing: the export waits there
    env = _waiting_on(hanging)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "teamstore", "export", "--user", "lia", "-o",
                                 str(out / "lia.zip"), "--json"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        said = _started_line(proc, time.monotonic() + 30)
        deadline = time.monotonic() + 30
        while not hanging.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        hanging.stop()
    assert proc.returncode == -signal.SIGKILL
    found = re.search(r"export (ex-[0-9a-f]{24}): started", said)
    assert found is not None, said
    killed = found[1]
    assert [p.name for p in out.iterdir()] == [f".lia.zip.{killed}.partial"]

    running = cli("export", "status", killed, "--json")
    assert running.exit_code == 2 and json.loads(running.stdout)["status"] == "running", running.output
    _lease_passed(killed)
    shown = cli("export", "status", killed)
    assert shown.exit_code == 1 and "abandoned" in shown.stdout and f".*.{killed}.partial" in shown.stdout
    abandoned = json.loads(cli("export", "status", killed, "--json").stdout)
    assert abandoned["status"] == "abandoned" and abandoned["finished_at"] == abandoned["lease_until"]

    again = cli("export", "--user", "lia", "--output", str(out / "lia.zip"))
    assert again.exit_code == 0, again.output
    assert [p.name for p in out.iterdir()] == ["lia.zip"]
    closed = cli("export", "status", killed, "--json")
    assert closed.exit_code == 1 and json.loads(closed.stdout)["status"] == "failed"
    assert json.loads(closed.stdout)["detail"] == abandoned["detail"]


def test_an_export_whose_stderr_cannot_be_written_still_exports_and_records_it(tmp_path: Path) -> None:
    """Its start line is only a note: a full disk or a closed pipe behind stderr fails nothing."""
    _populate("lia")
    out = tmp_path / "out"
    out.mkdir()
    with open("/dev/full", "wb") as full:
        done = subprocess.run([sys.executable, "-m", "teamstore", "export", "--user", "lia", "-o",
                               str(out / "lia.zip"), "--json"], stdout=subprocess.PIPE, stderr=full,
                              env=dict(os.environ), timeout=120, check=False)
    assert done.returncode == 0 and json.loads(done.stdout)["status"] == "exported"
    assert [p.name for p in out.iterdir()] == ["lia.zip"]
    assert [record["status"] for record in _export_records()] == ["exported"]


def test_export_status_refuses_an_id_teamstore_never_makes_and_names_an_unknown_one() -> None:
    _populate("lia")
    made = cli("export", "status", "lia@example.com")
    assert made.exit_code == 1 and "not one `teamstore export` makes" in made.stderr and "lia@" not in made.output
    unknown = cli("export", "status", "ex-0123456789abcdef01234567")
    assert unknown.exit_code == 1 and "no export is recorded under ex-0123456789abcdef01234567" in unknown.stderr
    mixed = cli("export", "--user", "lia", "status", "ex-0123456789abcdef01234567")
    assert mixed.exit_code == 1 and "--user belong to `teamstore export` itself" in mixed.stderr
    missing = cli("export")
    assert missing.exit_code == 1 and "Missing option '--user'" in missing.stderr


def test_an_export_holds_the_lease_its_setting_names_and_a_bad_one_is_refused_before_anything_is_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _populate("lim")
    monkeypatch.setenv("TEAMSTORE_EXPORT_LEASE_SECONDS", "0")
    refused = cli("export", "--user", "lim", "--output", str(tmp_path / "lim.zip"))
    assert refused.exit_code == 1 and "TEAMSTORE_EXPORT_LEASE_SECONDS='0': takes a number of seconds from 1 to 86400" \
        in refused.stderr
    monkeypatch.setenv("TEAMSTORE_EXPORT_LEASE_SECONDS", "7200")

    assert cli("export", "--user", "lim", "--output", str(tmp_path / "lim.zip")).exit_code == 0

    (record,) = _export_records()  # none of the refused one
    lease = _aware(record["lease_until"]) - _aware(record["started_at"])
    assert timedelta(hours=1) < lease < timedelta(hours=3)  # its last renewal's (the default lasts two minutes)


def _aware(value: object) -> datetime:
    assert isinstance(value, datetime)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _export_records() -> list[dict[str, object]]:
    async def go() -> list[dict[str, object]]:
        from sqlalchemy import select

        from teamstore.export.schema import export_requests

        engine = create_engine(Settings().resolved_database_url)
        async with engine.connect() as conn:
            rows = (await conn.execute(select(export_requests))).all()
        await engine.dispose()
        return [dict(row._mapping) for row in rows]

    return asyncio.run(go())


def test_a_reason_the_receipt_cannot_hold_is_refused_before_anything_is_asked_or_written() -> None:
    _populate("lou")
    for reason in ("", "   ", "x" * 1001):  # an unset "$REASON", a pasted ticket body
        refused = cli("erase", "--user", "lou", "--request-id", "req-886", "--reason", reason, "--yes")
        assert refused.exit_code == 1 and "error: the reason" in refused.stderr and "fix:" in refused.stderr
    status, _, shown = _on_a_terminal("y", "erase", "--user", "lou", "--reason", "x" * 1001)
    assert status == 1 and "error: the reason" in shown and "cannot be undone" not in shown
    assert _requests() == []
    done = cli("erase", "--user", "lou", "--request-id", "req-886", "--reason", "GDPR art. 17", "--yes", "--json")
    assert done.exit_code == 0 and json.loads(done.stdout)["reason"] == "GDPR art. 17"


def test_a_request_id_that_names_the_user_is_refused_as_the_reason_is_and_a_stored_one_still_resumes() -> None:
    _populate("lou.ng", "max.ng")
    for given in (["--reason", "erase lou.ng"], ["--request-id", "LOU.NG-881"]):
        refused = cli("erase", "--user", "lou.ng", "--yes", *given)
        said = " ".join(refused.stderr.split())
        assert refused.exit_code == 1 and f"error: {given[0]} holds the id of the user it is about" in said, said
        assert "fix:" in said and "lou.ng" not in said.lower()
    status, _, shown = _on_a_terminal("y", "erase", "--user", "lou.ng", "--request-id", "lou.ng")
    assert status == 1 and "--request-id holds the id" in shown and "cannot be undone" not in shown
    assert _requests() == []

    asyncio.run(_stored_by_an_earlier_release("req-max.ng", "max.ng"))  # it did not look; its coordinator stopped
    resumed = cli("erase", "--user", "max.ng", "--request-id", "req-max.ng", "--yes", "--json")
    assert resumed.exit_code == 0 and json.loads(resumed.stdout)["status"] == "completed", resumed.output


def test_on_a_terminal_a_user_with_an_open_request_is_told_which_before_anything_is_asked() -> None:
    _populate("mo")
    asyncio.run(_open("req-mo", "mo"))  # a coordinator stopped in it

    status, _, shown = _on_a_terminal("y", "erase", "--user", "mo")  # a new request for the same user

    assert status == 1 and "another erasure request is open for this user" in shown  # its id only where typed
    assert "--request-id req-mo" in shown and "cannot be undone" not in shown and "erasure dry run" not in shown
    assert [r["request_id"] for r in _requests()] == ["req-mo"]


def test_a_listing_cut_by_its_limit_says_more_requests_match() -> None:
    _populate("nia")
    for n in range(3):
        assert cli("erase", "--user", f"nobody-{n}", "--request-id", f"req-{n}", "--yes").exit_code == 3

    cut = cli("erase", "list", "--limit", "2")
    assert cut.exit_code == 0 and "req-2" in cut.stdout and "req-0" not in cut.stdout
    assert "more requests match" in cut.stdout and "--limit" in cut.stdout  # the oldest are the ones left out
    cut_json = json.loads(cli("erase", "list", "--limit", "2", "--json").stdout)
    assert len(cut_json["requests"]) == 2 and cut_json["more"] is True
    whole = cli("erase", "list", "--limit", "3")
    assert "more requests match" not in whole.stdout
    assert json.loads(cli("erase", "list", "--limit", "3", "--json").stdout)["more"] is False


async def _queue(database_url: str) -> list[Queued]:
    engine = create_engine(database_url)
    try:
        await upgrade(engine)
        return await desk_queue(engine)
    finally:
        await engine.dispose()


def _walk_json(*args: str) -> list[str]:
    """Every request of ``erase list *args --json``, page after page, each asked for with the page's ``next``."""
    seen: list[str] = []
    after: list[str] = []
    while True:
        page = json.loads(cli("erase", "list", *args, "--json", *after).stdout)
        seen += [r["request_id"] for r in page["requests"]]
        assert page["more"] is (page["next"] is not None) and page["near_match"] is None
        if page["next"] is None:
            return seen
        assert page["next"] == seen[-1]
        after = ["--after", page["next"]]


def _walk_screen(*args: str) -> list[str]:
    """Every request of ``erase list *args`` on screen, page after page, each asked for by the command the
    footer of the page before prints (on a line of its own, to be copied whole)."""
    seen: list[str] = []
    command = ["erase", "list", *args]
    while True:
        shown = cli(*command)
        assert shown.exit_code == 0, shown.output
        seen += re.findall(r"^ (req-\d\d) ", shown.stdout, re.MULTILINE)
        lines = shown.stdout.splitlines()
        if "the next page:" not in shown.stdout:
            return seen
        footer = lines.index(next(line for line in lines if line.endswith("the next page:")))
        printed = shlex.split(lines[footer + 1])
        assert printed[:3] == ["teamstore", "erase", "list"] and printed[-1] == f"--after={seen[-1]}"
        command = printed[1:]


def test_the_desk_reads_every_page_of_a_listing_by_the_command_each_page_names(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    queued = asyncio.run(_queue(database_url))
    failed = ("req-02", "req-07", "req-12")
    for args, order in (
        ((), newest_first(queued)),
        (("--overdue",), longest_overdue_first(queued)),
        (("--status", "failed"), [i for i in newest_first(queued) if i in failed]),
        (("--overdue", "--status", "open"), [i for i in longest_overdue_first(queued) if i not in failed]),
    ):
        assert _walk_json(*args, "--limit", "5") == order, args  # each request once, in the listing's order
        assert _walk_screen(*args, "--limit", "2") == order, args

    first = cli("erase", "list", "--overdue", "--limit", "4")
    assert "4 shown, the ones that fall due later follow" in first.stdout
    assert "teamstore erase list --overdue --limit=4 --after=req-06\n" in first.stdout
    assert "older ones follow" in cli("erase", "list", "--limit", "4").stdout
    oldest = newest_first(queued)[-1]
    last = json.loads(cli("erase", "list", "--limit", "4", "--after", oldest, "--json").stdout)
    assert last == {"requests": [], "more": False, "next": None, "near_match": None}  # the oldest: nothing after it
    for cursor, said in (("req-99", "the id given as --after names no erasure request (not repeated"), ("REQ-01", "did you mean 'req-01'?"),
                         ("", "--after: request id is empty")):
        refused = cli("erase", "list", "--after", cursor)
        assert refused.exit_code == 1 and said in " ".join(refused.stderr.split()), refused.output


def test_a_user_id_with_no_request_is_told_whether_a_near_twin_exists_never_naming_it_off_a_terminal() -> None:
    _populate("dave")
    asyncio.run(_open("req-q", "Quinn"))  # nothing stored under it but its request
    for user, twin in (("Dave", "dave"), ("quinn", "Quinn")):
        listed = cli("erase", "list", "--user", user)
        assert listed.exit_code == 0 and listed.stdout.startswith("no request matches\n"), listed.output
        assert "note: a stored user id differs from this one only in letter case" in listed.stdout
        assert twin not in listed.output and "did you mean" not in listed.output
        as_json = json.loads(cli("erase", "list", "--user", user, "--json").stdout)
        assert as_json["requests"] == [] and "only in letter case" in as_json["near_match"]
        assert twin not in str(as_json)
    assert cli("erase", "list", "--user", "erin").stdout == "no request matches\n"
    assert json.loads(cli("erase", "list", "--user", "Quinn", "--json").stdout)["near_match"] is None

    status, out, shown = _on_a_terminal("", "erase", "list", "--user", "quinn")
    assert status == 0 and "did you mean 'Quinn'? It differs only in letter case." in shown
    assert "'Quinn'" not in out  # stdout may be a file or a pipe: the id only on the terminal's stderr
    # Quinn's request is open: a listing of held ones would not list it under Quinn either, so it is no twin there.
    status, out, shown = _on_a_terminal("", "erase", "list", "--user", "quinn", "--status", "retained_under_hold")
    assert status == 0 and "did you mean" not in shown and out == "no request matches\n", (out, shown)


def test_list_filters_that_can_never_match_or_are_given_twice_are_refused_saying_why() -> None:
    _populate("ann")
    assert cli("erase", "--user", "ann", "--request-id", "req-a1", "--yes").exit_code == 0
    for args, said in (
        (("--overdue", "--status", "completed"), "--status completed with --overdue can list nothing: only an open "
         "or failed request can be overdue"),
        (("--user", "ann", "--status", "open", "--status", "no_match"), "--status no_match with --user can list "
         "nothing: only an open, failed or held request keeps its user's id, or its hash"),
        (("--user", "ann", "--user", "bob"), "--user is given 2 times"),
        (("--after", "req-a1", "--after", "req-x"), "--after is given 2 times"),
        (("--status", "open,failed"), "give --status once per status: --status open --status failed"),
        (("--status", ""), "Invalid value for '--status': it takes one of "),
    ):
        refused = cli("erase", "list", *args)
        assert refused.exit_code == 1 and said in " ".join(refused.stderr.split()), (args, refused.output)
        assert refused.stdout == ""
    twice = json.loads(cli("erase", "list", "--status", "completed", "--status", "completed", "--json").stdout)
    assert [r["request_id"] for r in twice["requests"]] == ["req-a1"]


def test_a_rerun_given_another_reason_or_requester_keeps_the_first_and_says_so() -> None:
    _populate("pat", "quinn")
    first = cli("erase", "--user", "pat", "--request-id", "req-887", "--reason", "GDPR art. 17",
                "--requested-by", "ticket 1", "--yes")
    assert first.exit_code == 0, first.output

    again = cli("erase", "--user", "pat", "--request-id", "req-887", "--reason", "other", "--requested-by",
                "ticket 2", "--yes", "--json")

    assert again.exit_code == 0 and json.loads(again.stdout)["reason"] == "GDPR art. 17"
    assert ("the request keeps the reason it was first given (its receipt shows it); the --reason given now"
            " was not recorded") in again.stderr
    assert "req-887" not in again.stderr  # a given id may name the user, and stderr is often a job's log
    assert "keeps the requested-by it was first given (its receipt shows it); the --requested-by given" in again.stderr
    assert "GDPR" not in again.stderr and "other" not in again.stderr and "ticket" not in again.stderr
    same = cli("erase", "--user", "pat", "--request-id", "req-887", "--reason", "GDPR art. 17", "--yes")
    assert same.exit_code == 0 and "note" not in same.stderr

    # An open request on a terminal: said with its plan, before it asks.
    asyncio.run(_open("req-888", "quinn", reason="GDPR art. 17"))
    status, _, shown = _on_a_terminal("n", "erase", "--user", "quinn", "--request-id", "req-888", "--reason", "other")
    assert status == 1, shown
    said = "the request keeps the reason it was first given (its receipt shows it)"
    assert said in shown and shown.index(said) < shown.index("cannot be undone")
    assert shown.count(said) == 1


async def _attempted(request_id: str, user: str, operators: list[str], reason: str | None = None) -> None:
    """An open request whose coordinators, run by ``operators`` in turn, each stopped in it."""
    from teamstore.erasure import record

    await _open(request_id, user, reason)
    engine = create_engine(Settings().resolved_database_url)
    try:
        for operator in operators:
            await record.start_attempt(engine, request_id, operator)
    finally:
        await engine.dispose()


def test_the_listing_names_each_operator_once_in_the_order_they_first_ran_the_request() -> None:
    _populate("ola")
    asyncio.run(_attempted("req-ops", "ola", ["root", "dpo", "root", "root"]))

    listed = cli("erase", "list")

    assert listed.exit_code == 0, listed.output
    (line,) = [line for line in listed.stdout.splitlines() if "req-ops" in line]
    assert line.rstrip().endswith("root, dpo") and "root, root" not in line
    (row,) = _requests()
    assert row["operators"] == ["root", "dpo", "root", "root"]  # --json keeps every attempt's


def test_the_receipt_on_screen_shows_the_requests_reason_as_json_does() -> None:
    _populate("rae")
    done = cli("erase", "--user", "rae", "--request-id", "req-889", "--reason", "GDPR art. 17 [ticket 12]", "--yes")
    assert done.exit_code == 0, done.output
    assert "reason: GDPR art. 17 [ticket 12]" in done.stdout  # as given, never read as markup
    shown = cli("erase", "status", "req-889")
    assert shown.exit_code == 0 and "reason: GDPR art. 17 [ticket 12]" in shown.stdout
    plan = cli("erase", "--user", "rae", "--dry-run", "--reason", "GDPR art. 17")
    assert "reason: GDPR art. 17" in plan.stdout
    unexplained = cli("erase", "--user", "nobody", "--request-id", "req-why-not", "--yes")
    assert unexplained.exit_code == 3 and "reason:" not in unexplained.stdout


async def _past_due(request_id: str) -> None:
    from sqlalchemy import update

    from teamstore.erasure.schema import erasure_requests

    engine = create_engine(Settings().resolved_database_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(update(erasure_requests).where(erasure_requests.c.request_id == request_id)
                               .values(due_at=datetime.now(UTC) - timedelta(days=2)))
    finally:
        await engine.dispose()


def test_status_says_a_request_past_its_due_date_is_overdue_with_the_date_as_the_listing_does() -> None:
    _populate("ola")
    asyncio.run(_open("req-late", "ola"))  # a coordinator stopped in it
    on_time = cli("erase", "status", "req-late", "--json")
    assert on_time.exit_code == 2 and json.loads(on_time.stdout)["overdue"] is False
    asyncio.run(_past_due("req-late"))

    shown = cli("erase", "status", "req-late")
    as_json = json.loads(cli("erase", "status", "req-late", "--json").stdout)

    due = datetime.fromisoformat(as_json["due_at"])
    assert shown.exit_code == 2 and "erasure req-late: open OVERDUE" in shown.stdout
    assert f"overdue: due {due:%Y-%m-%d} and still open" in shown.stdout
    assert f"the erasure is open, and overdue (due {due:%Y-%m-%d})" in " ".join(shown.stderr.split())
    assert as_json["overdue"] is True and as_json["status"] == "open"
    (listed,) = json.loads(cli("erase", "list", "--overdue", "--json").stdout)["requests"]
    assert listed["request_id"] == "req-late" and listed["overdue"] is True
    done = cli("erase", "--user", "ola", "--request-id", "req-late", "--yes", "--json")
    assert done.exit_code == 0 and json.loads(done.stdout)["overdue"] is False  # answered, late, but not overdue
    assert "OVERDUE" not in cli("erase", "status", "req-late").stdout


def test_a_new_request_id_differing_from_a_stored_one_only_in_letter_case_is_refused_naming_the_stored_one() -> None:
    _populate("pia", "quinn")
    assert cli("erase", "--user", "pia", "--request-id", "REQ-2026-0042", "--yes").exit_code == 0
    for extra in ([], ["--dry-run"]):
        refused = cli("erase", "--user", "quinn", "--request-id", "req-2026-0042", "--yes", *extra)
        said = " ".join(refused.stderr.split())
        assert refused.exit_code == 1, refused.output
        message, fix = said.split("fix:")  # the stored id only in the fix, where it is typed again
        assert "the request id given differs from one stored request id(s) only in letter case" in message
        assert "2026-0042" not in message and "req-2026-0042" not in said
        assert "teamstore erase status REQ-2026-0042" in fix
    status, _, shown = _on_a_terminal("y", "erase", "--user", "quinn", "--request-id", "Req-2026-0042")
    assert status == 1 and "only in letter case" in shown and "'REQ-2026-0042')" in shown
    assert "cannot be undone" not in shown
    assert [r["request_id"] for r in _requests()] == ["REQ-2026-0042"]


def test_a_blank_user_id_or_one_with_spaces_around_it_is_refused_wherever_a_user_id_is_given(tmp_path: Path) -> None:
    _populate("rae")
    for user in ("   ", " rae", "rae\u200b"):
        for command in (["erase", "--user", user, "--yes"], ["erase", "--user", user, "--dry-run"],
                        ["export", "--user", user, "--output", str(tmp_path / "x.zip")],
                        ["memory", "show", "--user", user], ["memory", "forget", "--user", user, "--all"],
                        ["sessions", "list", "--user", user]):
            refused = cli(*command)
            said = " ".join(refused.stderr.split())
            assert refused.exit_code == 1 and "error: user_id " in said and "fix:" in said, (command, refused.output)
            assert "is blank" in said or "a space or an invisible character" in said
    assert _requests() == [] and not (tmp_path / "x.zip").exists()
    assert cli("erase", "--user", "rae", "--yes").exit_code == 0  # the exact id
