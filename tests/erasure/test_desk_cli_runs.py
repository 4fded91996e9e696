"""``teamstore erase`` while it runs, on SQLite and a real Postgres: what it says before each wait, what a Ctrl-C
(or SIGTERM, SIGHUP) leaves and says, and the extension of a request that failed (a session of the user held open)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta

import pytest
import typer
from click.testing import Result

from config_registry import Registry
from teamstore import open_platform
from teamstore.cli.erase import _interrupted
from teamstore.errors import ErasureInProgress
from tests.erasure.test_desk_cli import WIDE, _open, _populate, _requests, cli


@pytest.fixture(autouse=True, params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def _desk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded default's SQLite, or a fresh Postgres database, for every command the test runs."""
    if request.param == "postgres":
        monkeypatch.setenv("TEAMSTORE_DATABASE_URL", request.getfixturevalue("postgres_url"))
    monkeypatch.setenv("TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS", "0")
    monkeypatch.setenv("TEAMSTORE_OPERATOR", "privacy desk")


async def _while_a_session_is_open(user: str, *args: str) -> Result:
    """``teamstore *args`` while a session of ``user`` is open (a run that began before the fence): its save at
    the end is refused."""
    async with open_platform() as platform:
        with pytest.raises(ErasureInProgress):
            async with platform.session(user, "s-held", team="support_triage@production") as session:
                await session.run("my router keeps dropping")
                done = await asyncio.to_thread(cli, *args)
    return done


def test_a_failed_request_extended_afterwards_shows_the_extension_on_its_receipt_until_it_completes(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    _populate("uma")
    monkeypatch.setenv("TEAMSTORE_ERASURE_SESSION_WAIT_SECONDS", "0.5")
    failed = asyncio.run(_while_a_session_is_open("uma", "erase", "--user", "uma", "--request-id", "req-held",
                                                  "--yes", "--json"))
    assert failed.exit_code == 2 and json.loads(failed.stdout)["status"] == "failed", failed.output
    assert ("waiting up to 0.5 s for 1 open session(s) of the user to end (TEAMSTORE_ERASURE_SESSION_WAIT_SECONDS)"
            in failed.stderr)

    extended = cli("erase", "extend", "req-held", "--by", "30d", "--reason", "a session of the user was held")

    assert extended.exit_code == 0, extended.output
    receipt = json.loads(cli("erase", "status", "req-held", "--json").stdout)
    due = datetime.fromisoformat(receipt["due_at"]) + timedelta(days=30)
    assert receipt["status"] == "failed" and receipt["extension"]["due_at"] == due.isoformat().replace("+00:00", "Z")
    assert receipt["extension"]["reason"] == "a session of the user was held"
    line = f"extended by 30 days to {due:%Y-%m-%d} on "
    assert line in extended.stdout and line in cli("erase", "status", "req-held").stdout
    done = cli("erase", "--user", "uma", "--request-id", "req-held", "--yes", "--json")
    assert done.exit_code == 0 and json.loads(done.stdout)["extension"] == receipt["extension"], done.output
    assert line in cli("erase", "status", "req-held").stdout
    refused = cli("erase", "extend", "req-held", "--by", "1d", "--reason", "more")
    assert refused.exit_code == 1 and "is completed: only an open or failed request can be extended" in refused.stderr


def test_an_erasure_says_on_stderr_what_it_waits_for_and_how_long_and_json_stays_one_document(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _populate("wes")
    monkeypatch.setenv("TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS", "1")

    done = cli("erase", "--user", "wes", "--yes", "--json")

    assert done.exit_code == 0 and json.loads(done.stdout)["status"] == "completed", done.output
    assert re.search(r"fence up; waiting (0\.\d|1) s for writes that passed the fence check just before it "
                     r"\(TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS\)", done.stderr), done.stderr
    assert ("data key destroyed; waiting 0.2 s for workers' cached data keys to expire (TEAMSTORE_KEY_CACHE_SECONDS)"
            in done.stderr)  # tests' TEAMSTORE_KEY_CACHE_SECONDS


@pytest.mark.parametrize(("signum", "background"), [
    (signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGHUP, False),
    (signal.SIGTERM, True),  # started with SIGINT ignored, as a shell starts a job in the background
])
def test_an_erasure_stopped_by_ctrl_c_sigterm_or_sighup_names_the_request_and_its_rerun_resumes_at_once(
    signum: signal.Signals, background: bool
) -> None:
    """Ctrl-C, a cancelled CI job's SIGTERM and a dropped ssh session's SIGHUP stop an erasure alike: it says where
    the request stands, exits 128 + the signal, and gives the request's lease back, so the rerun it names resumes
    right away rather than being refused as "being run by another coordinator" until the lease (120 s) expires."""
    _populate("vic")
    env = {**os.environ, **WIDE, "TEAMSTORE_KEY_CACHE_SECONDS": "60"}  # the signal lands while it waits
    ctrl_c = signal.SIG_IGN if background else signal.SIG_DFL  # set, not inherited from how pytest was started
    proc = subprocess.Popen([sys.executable, "-m", "teamstore", "erase", "--user", "vic", "--yes"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, ctrl_c))
    try:
        assert proc.stderr is not None
        seen = []
        while (line := proc.stderr.readline()) and "cached data keys" not in line:
            seen.append(line)
        assert line, seen
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    said = " ".join(err.split())

    assert proc.returncode == 128 + signum, said
    found = re.search(r"interrupted: erasure request (er-[0-9a-f]{24}) was stopped before it finished: it is open, "
                      r"and the user stays fenced", said)
    assert found is not None, said
    request_id = found.group(1)
    assert f"fix: resume it: `teamstore erase --user ... --request-id {request_id} --yes`" in said
    assert [(r["request_id"], r["status"]) for r in _requests()] == [(request_id, "open")]
    done = cli("erase", "--user", "vic", "--request-id", request_id, "--yes", "--json")
    assert done.exit_code == 0, done.output
    receipt = json.loads(done.stdout)
    assert receipt["status"] == "completed" and receipt["stores"]["keys"]["counts"]["rows"] == 1
    first, second = receipt["attempts"]
    assert first["ended_at"] is not None and first["status"] is None  # stopped: ended without a verdict
    assert second["status"] == "completed"


@pytest.mark.parametrize("opened", [False, True])
def test_an_erasure_stopped_names_a_request_id_the_operator_gave_in_its_fix_only(
    opened: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    # stderr is often a job's log, kept past the user's erasure: the id may hold their email.
    given = "gdpr-canary-7f3a@example.com"
    _populate("vic")
    if opened:
        asyncio.run(_open(given, "vic"))  # stopped before it finished
    capsys.readouterr()

    with pytest.raises(typer.Exit):
        _interrupted(given, True, 130)

    said, fix = " ".join(capsys.readouterr().err.split()).split("fix:")
    assert ("the user stays fenced" if opened else "nothing was changed") in said
    assert "canary" not in said and f"--request-id {given} --yes" in fix


def test_an_erasure_stopped_quotes_a_given_request_id_for_the_shell_in_its_fix(
    capsys: pytest.CaptureFixture[str]
) -> None:
    given = "ticket 42; rm -rf $HOME"  # spaces and shell words are allowed in a ticket id
    _populate("wes")
    asyncio.run(_open(given, "wes"))
    capsys.readouterr()

    with pytest.raises(typer.Exit):
        _interrupted(given, True, 130)

    fix = " ".join(capsys.readouterr().err.split()).split("fix:")[1]
    command = re.search(r"`(teamstore erase --user \.\.\. --request-id .*? --yes)`", fix)
    assert command is not None, fix
    assert shlex.split(command.group(1))[5] == given


def test_a_receipt_says_when_the_words_in_backups_become_unreadable_and_apart_when_their_ids_expire(
    registry: Registry,
) -> None:
    _populate("vic")
    done = cli("erase", "--user", "vic", "--request-id", "req-bk", "--reason", "art. 17", "--yes", "--json")
    assert done.exit_code == 0, done.output
    backups = next(r for r in json.loads(done.stdout)["remains_elsewhere"] if r["what"] == "database backups")
    words, ids = (datetime.fromisoformat(backups[k]) for k in ("unreadable_by", "expires_at"))
    assert words < ids  # the rotation bound (29 days by default) comes before the backups' expiry (35)
    assert datetime.fromisoformat(backups["until"]) == words  # as receipts have always given it

    shown = " ".join(cli("erase", "status", "req-bk").stdout.split())
    assert (f"database backups (the user's words in them unreadable by {words:%Y-%m-%d}; ids readable until "
            f"{ids:%Y-%m-%d}, when they expire):") in shown
    spans = next(r for r in json.loads(done.stdout)["remains_elsewhere"] if r["what"] == "tracing backend")
    assert spans["unreadable_by"] is None and spans["expires_at"] == spans["until"]


def test_an_erasure_given_no_request_id_names_the_one_it_made_before_its_first_step_and_that_command_resumes_it_after_a_kill(
) -> None:
    """A run killed outright (a lost terminal, SIGKILL) says nothing on its way out: the line it printed as it began
    is all the operator has to resume the request with, and stdout (--json) holds nothing but the receipt."""
    _populate("kim")
    env = {**os.environ, **WIDE, "TEAMSTORE_KEY_CACHE_SECONDS": "60", "TEAMSTORE_ERASURE_LEASE_SECONDS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "teamstore", "erase", "--user", "kim", "--yes", "--json"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        seen = []
        while (line := proc.stderr.readline()) and "cached data keys" not in line:  # in the first step, keys
            seen.append(line)
        assert line, seen
        proc.kill()  # no handler runs, nothing more is said, the lease is not given back
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()

    assert out == "", out
    first = " ".join(seen[0].split())  # before anything else, the fence's wait included
    found = re.fullmatch(r"erasure request (er-[0-9a-f]{24}) \(no --request-id was given\); if this run stops before "
                         r"it finishes, resume it: `(teamstore erase --user \.\.\. --request-id (\S+) --yes)` \(the "
                         r"same user id\); after a kill, once its lease has run out \(TEAMSTORE_ERASURE_LEASE_SECONDS\)",
                         first)
    assert found is not None and found.group(1) == found.group(3), seen
    assert [(r["request_id"], r["status"]) for r in _requests()] == [(found.group(1), "open")]
    time.sleep(1.5)  # the killed run's lease (1 s, renewed until the kill) runs out
    command = shlex.split(found.group(2).replace("...", "kim"))
    done = cli(*command[1:], "--json")
    assert done.exit_code == 0, done.output
    receipt = json.loads(done.stdout)
    assert receipt["request_id"] == found.group(1) and receipt["status"] == "completed"
    assert receipt["stores"]["keys"]["counts"]["rows"] == 1  # the killed run's key step, finished by the rerun
    assert "no --request-id was given" not in done.stderr  # the operator gave this one


def test_an_erasure_refused_for_another_request_open_for_the_user_names_no_id_it_made_for_a_request_never_opened(
    registry: Registry, monkeypatch: pytest.MonkeyPatch,
) -> None:
    _populate("lee")
    monkeypatch.setenv("TEAMSTORE_ERASURE_SESSION_WAIT_SECONDS", "0.5")
    failed = asyncio.run(_while_a_session_is_open("lee", "erase", "--user", "lee", "--request-id", "req-first",
                                                  "--yes", "--json"))
    assert failed.exit_code == 2, failed.output

    refused = cli("erase", "--user", "lee", "--yes", "--json")

    assert refused.exit_code == 1 and "another erasure request is open" in refused.stderr, refused.output
    assert "--request-id req-first" in refused.stderr  # in the fix, where it is typed again
    assert "no --request-id was given" not in refused.stderr and "er-" not in refused.stderr, refused.stderr
    assert [r["request_id"] for r in _requests()] == ["req-first"]


def test_an_erasure_given_a_request_id_is_named_in_the_logs_status_and_list_by_the_same_fingerprint(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _populate("lee")
    caplog.set_level(logging.DEBUG)
    given = "gdpr-canary-7f3a@example.com"

    done = cli("erase", "--user", "lee", "--request-id", given, "--yes", "--json")

    assert done.exit_code == 0, done.output
    named = json.loads(done.stdout)["logged_as"]
    assert re.fullmatch(r"request#[0-9a-f]{10}", named), named
    assert not [r for r in caplog.records if "canary" in f"{r.getMessage()} {r.args!r}"]
    assert any(r.getMessage() == f"erasure {named} finished: completed" for r in caplog.records)
    assert json.loads(cli("erase", "status", given, "--json").stdout)["logged_as"] == named
    assert f"teamstore's log lines name this request {named}" in cli("erase", "status", given).stdout
    assert [(r["request_id"], r["logged_as"]) for r in _requests()] == [(given, named)]
    listed = cli("erase", "list").stdout
    assert any(given in line and named in line for line in listed.splitlines()), listed
