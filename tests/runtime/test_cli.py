"""The session commands end to end on the embedded default: run, the quarantine, and restoring from it."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing, suppress
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, insert, select, update
from typer.testing import CliRunner

from config_registry import Registry
from teamstore import examples
from teamstore.app import App
from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.db.migrate import head_revision
from teamstore.events import drain_observers
from teamstore.runtime.inspect import SEALED, describe_agents, describe_checkpoint
from teamstore.runtime.interruptions import report_set_aside
from teamstore.settings import Settings
from teamstore.state.base import Claim, SessionKey, StoredSession
from teamstore.state.factory import store_for
from teamstore.state.schema import quarantine, sessions
from tests.conftest import fits_with_ids_whole
from tests.runtime.checkpoint_teams import TEAM, TURNS, Calls, counted_calls, register
from tests.runtime.conftest import renamed_manifest, without_memory

runner = CliRunner()


def _run(text: str) -> dict:  # type: ignore[type-arg]
    out = runner.invoke(app, ["run", "--team", "support_triage", "--user", "alice", "--session", "s1", text, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_a_quarantined_state_is_restored_from_the_command_line(registry: Registry) -> None:
    v1 = registry.resolve("support_triage@production").version
    _run("My router ZX-81 drops every evening")
    registry.add("support_triage", examples.support_triage_v2_renamed().dump_component(), renamed_manifest(),
                 "rename researcher", label="production", allow_incompatible=True)
    assert _run("hello again")["resume"]["outcome"] == "definition_changed"
    registry.label("support_triage", v1, "production", reason="roll back the rename")
    (kept,) = json.loads(runner.invoke(app, ["sessions", "quarantine", "--json"]).stdout)

    refused = runner.invoke(app, ["sessions", "restore", str(kept["id"])])
    assert refused.exit_code == 1 and "--replace" in refused.output
    done = runner.invoke(app, ["sessions", "restore", str(kept["id"]), "--replace", "--json"])
    assert done.exit_code == 0, done.output
    restored = json.loads(done.stdout)
    assert (restored["user_id"], restored["session_id"], restored["restored"]) == ("alice", "s1", kept["id"])
    assert restored["replaced_by"] is not None

    resumed = _run("the technician came")
    assert resumed["resume"]["outcome"] == "resumed"
    assert any("ZX-81" in m["content"] for m in resumed["messages"] if m["source"] == "researcher")

    missing = runner.invoke(app, ["sessions", "restore", "999999"])
    assert missing.exit_code == 1 and "no quarantined state has id 999999" in missing.output


def test_the_quarantine_lists_a_state_s_stored_size_and_its_restore_gives_the_same_and_the_opened_one(
    registry: Registry,
) -> None:
    v1 = registry.resolve("support_triage@production").version
    _run("My router ZX-81 drops every evening")
    registry.add("support_triage", examples.support_triage_v2_renamed().dump_component(), renamed_manifest(),
                 "rename researcher", label="production", allow_incompatible=True)
    _run("hello again")  # refused as it opens (definition_changed), and set aside
    registry.label("support_triage", v1, "production", reason="roll back the rename")
    (refused,) = json.loads(runner.invoke(app, ["sessions", "quarantine", "--json"]).stdout)
    first = json.loads(runner.invoke(app, ["sessions", "restore", str(refused["id"]), "--replace", "--json"]).stdout)
    (replaced,) = json.loads(runner.invoke(app, ["sessions", "quarantine", "--json"]).stdout)  # set aside by it

    again = runner.invoke(app, ["sessions", "restore", str(replaced["id"]), "--replace"])
    shown = json.loads(runner.invoke(app, ["sessions", "show", "--user", "alice", "--session", "s1",
                                           "--json"]).stdout)
    # Each state the listing gave is restored at that stored size, as `sessions show` then gives it.
    assert first["state_bytes"] == refused["state_bytes"]
    assert shown["state_bytes"] == replaced["state_bytes"] < shown["opened_state_bytes"]
    assert (f"{shown['state_bytes']} bytes stored, {shown['opened_state_bytes']} opened"
            in " ".join(again.stdout.split()))
    assert first["opened_state_bytes"] > first["state_bytes"]
    runner.invoke(app, ["sessions", "restore", str(refused["id"]), "--replace"])  # to list the one it replaced
    header = runner.invoke(app, ["sessions", "quarantine"]).stdout.split("─")[0]
    assert "stored" in header and "bytes" in header


def test_a_session_is_deleted_from_the_command_line(registry: Registry) -> None:
    _run("My router ZX-81 drops every evening")
    done = runner.invoke(app, ["sessions", "delete", "--user", "alice", "--session", "s1", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {"user_id": "alice", "session_id": "s1", "deleted": True}
    assert json.loads(runner.invoke(app, ["sessions", "list", "--json"]).stdout) == []
    assert _run("hello")["resume"]["outcome"] == "new"
    again = runner.invoke(app, ["sessions", "delete", "--user", "bob", "--session", "s9"])
    assert again.exit_code == 0 and "nothing stored" in again.output
    bad = runner.invoke(app, ["sessions", "delete", "--user", "", "--session", "s1"])
    assert bad.exit_code == 1 and "user_id" in bad.output


def test_a_typed_error_from_a_command_is_reported_by_the_command_line(registry: Registry) -> None:
    out = runner.invoke(app, ["run", "--team", "support_triage", "--user", "", "--session", "s1", "hi"])
    assert out.exit_code == 1
    assert "user_id is empty" in out.output and "fix:" in out.output
    assert isinstance(out.exception, SystemExit)  # handled, not a TeamstoreError escaping the command


def test_ids_are_listed_as_text_that_the_terminal_never_acts_on(registry: Registry) -> None:
    # Session ids come from the service's clients: rich markup or a one-character CSI (U+009B) in one must
    # neither break the operator's listing of every session nor reach the terminal.
    session = "t-[/][red]\x9b2J"
    out = runner.invoke(app, ["run", "--team", "support_triage", "--user", "alice", "--session", session, "hi"])
    assert out.exit_code == 0, out.output
    listed = runner.invoke(app, ["sessions", "list"], env={"COLUMNS": "300"})
    assert listed.exit_code == 0, listed.output
    assert "t-[/][red]\\x9b2J" in listed.stdout and "\x9b" not in listed.stdout


def test_numbers_no_database_column_holds_are_refused_as_usage_errors(registry: Registry) -> None:
    for args in (["sessions", "list", "--limit", "99999999999999999999"],
                 ["retention", "apply", "--days", "99999999999"]):
        result = runner.invoke(app, args)
        assert result.exit_code != 0 and "it takes an integer from 1 to" in " ".join(result.output.split()), (
            args, result.output)
        assert not isinstance(result.exception, OverflowError)  # it used to reach the database driver


def test_db_commands_say_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    database = tmp_path / "made-by-hand.db"
    database.touch()  # a database without tables (as an earlier 'db current' left one)
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", f"sqlite:///{database}")
    fresh = runner.invoke(app, ["db", "current"], env={"COLUMNS": "300"})
    assert fresh.exit_code == 0 and "at empty, this code needs" in fresh.stdout and "db upgrade" in fresh.stdout
    assert "None" not in fresh.stdout
    upgraded = runner.invoke(app, ["db", "upgrade"], env={"COLUMNS": "300"})
    assert upgraded.exit_code == 0 and f"empty -> {head_revision()}, {int(head_revision())} migrations applied" \
        in upgraded.stdout, upgraded.output
    again = runner.invoke(app, ["db", "upgrade"], env={"COLUMNS": "300"})  # it said "0023 -> 0023"
    assert again.exit_code == 0 and f"at {head_revision()} already, no migration applied" in again.stdout
    assert "up to date" in runner.invoke(app, ["db", "current"]).stdout
    for mode in ("lock", "bogus"):  # SQLite has row leases only
        refused = runner.invoke(app, ["db", "lease-mode", mode])
        assert refused.exit_code == 1 and "error: " in refused.output and "fix: " in refused.output, mode


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_lease_mode_on_a_database_without_tables_says_to_migrate(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    # It said the database 'refused the statement' and to check the role's statement_timeout and grants.
    if database == "sqlite":
        (tmp_path / "empty.db").touch()
        url = f"sqlite:///{tmp_path / 'empty.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", url)
    for args in (["db", "lease-mode"], ["db", "lease-mode", "row"]):
        result = runner.invoke(app, args, env={"COLUMNS": "300"})
        assert result.exit_code == 1, result.output
        assert "error: the database has no teamstore tables yet" in result.output, result.output
        assert "fix: run `teamstore db upgrade`" in result.output and "statement_timeout" not in result.output


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_db_current_names_the_migrations_an_upgrade_would_apply(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    # The notes of each one may ask for a step before the upgrade (docs/operations.md, Upgrading, step 1); it
    # said only "at 0021, this code needs 0023".
    from teamstore.db.migrate import revision_before, upgrade

    url = f"sqlite:///{tmp_path / 'old.db'}" if database == "sqlite" else request.getfixturevalue("postgres_url")
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", url)

    async def migrate_to(target: str) -> None:
        engine = create_engine(url)
        await upgrade(engine, target)
        await engine.dispose()

    last = head_revision()
    next_to_last = revision_before(last)
    start = revision_before(next_to_last or "")
    asyncio.run(migrate_to(start or ""))
    shown = runner.invoke(app, ["db", "current"], env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.output
    assert f"at {start}, this code needs {last}; pending: {next_to_last}, {last}." in shown.stdout
    assert "docs/operations.md (Database tables), then run `teamstore db upgrade`" in shown.stdout
    assert json.loads(runner.invoke(app, ["db", "current", "--json"]).stdout)["pending"] == [next_to_last, last]
    asyncio.run(migrate_to("head"))
    assert json.loads(runner.invoke(app, ["db", "current", "--json"]).stdout)["pending"] == []


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_db_current_check_fails_a_deploy_check_on_a_schema_behind_or_ahead_of_the_code(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    # A deploy script could not tell: `db current` exited 0 with migrations pending, and with a database a newer
    # release had migrated. Without --check it stays a report (status 0).
    from sqlalchemy import text

    from teamstore.db.migrate import revision_before, upgrade

    url = f"sqlite:///{tmp_path / 'deploy.db'}" if database == "sqlite" else request.getfixturevalue("postgres_url")
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", url)

    async def migrate_to(target: str, stamp: str | None = None) -> None:
        engine = create_engine(url)
        await upgrade(engine, target)
        if stamp is not None:  # what a newer teamstore's upgrade leaves
            async with engine.begin() as conn:
                await conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": stamp})
        await engine.dispose()

    def check(*flags: str) -> Any:
        return runner.invoke(app, ["db", "current", "--check", *flags], env={"COLUMNS": "300"})

    if database == "sqlite":  # no file there: it could not tell (a typo in the path), and makes none
        missing = check()
        assert missing.exit_code == 1 and "does not exist yet" in missing.stderr, missing.output
        assert not (tmp_path / "deploy.db").exists()
    asyncio.run(migrate_to(revision_before(head_revision()) or ""))
    behind = check()
    assert behind.exit_code == 2 and "then run `teamstore db upgrade`" in behind.stdout, behind.output
    assert json.loads(check("--json").stdout)["state"] == "behind" and check("--json").exit_code == 2
    assert runner.invoke(app, ["db", "current"]).exit_code == 0
    asyncio.run(migrate_to("head"))
    current = check("--json")
    assert current.exit_code == 0 and json.loads(current.stdout)["state"] == "up_to_date", current.output
    asyncio.run(migrate_to("head", stamp="9999"))
    ahead = check()
    assert ahead.exit_code == 3 and "at 9999, newer than this code" in ahead.stdout, ahead.output
    shown = json.loads(check("--json").stdout)
    assert (shown["state"], shown["current"], shown["pending"]) == ("ahead", "9999", [])


def test_a_narrow_terminal_lists_each_session_with_its_ids_whole_on_one_line(registry: Registry) -> None:
    # 80 columns is also what rich assumes when the output goes to a file or a pipe. The ids were folded over
    # lines there ("support_escalati" over "on"), and could not be copied into the next command.
    team, user, session = "support_triage_for_enterprise_customers", "alice@example.com", "ticket-2026-11-30-0001"
    version = registry.add(team, examples.support_triage().dump_component(),
                           without_memory(examples.example_manifest("support_triage")).model_copy(update={"name": team}),
                           "v1", label="production")
    assert runner.invoke(app, ["run", "--team", team, "--user", user, "--session", session, "hi"]).exit_code == 0
    listed = runner.invoke(app, ["sessions", "list"], env={"COLUMNS": "80"})
    assert listed.exit_code == 0, listed.output
    assert "…" not in listed.stdout
    fits_with_ids_whole(listed.stdout, 80, user, session, team, version[:12])


@pytest.mark.parametrize("columns", [80, 200])
def test_the_demos_sessions_are_listed_within_the_terminal_with_every_id_whole(
    registry: Registry, columns: int
) -> None:
    # The demo's two sessions of alice made an 82-column table: on an 80-column terminal (or a pipe) each of its
    # lines wrapped. Too narrow for the table, each session is a block of lines; wide enough, the table stays.
    escalation = registry.add("support_escalation", examples.support_escalation().dump_component(),
                              without_memory(examples.example_manifest("support_escalation")), "v1",
                              label="production")
    triage = registry.resolve("support_triage@production").version
    demo = {"ticket-210206-a": ("support_triage", triage), "case-210206": ("support_escalation", escalation)}
    for session, (team, _) in demo.items():
        ran = runner.invoke(app, ["run", "--team", team, "--user", "alice", "--session", session, "hi"])
        assert ran.exit_code == 0, ran.output
    listed = runner.invoke(app, ["sessions", "list"], env={"COLUMNS": str(columns)})
    assert listed.exit_code == 0, listed.output
    for session, (team, version) in demo.items():
        fits_with_ids_whole(listed.stdout, columns, "alice", session, team, version[:12])
        if columns == 200:  # one line per session, as before
            assert any(session in line and team in line and version[:12] in line for line in listed.stdout.splitlines())
        else:
            assert f"session: {session}" in listed.stdout.splitlines()
    as_json = runner.invoke(app, ["sessions", "list", "--json"], env={"COLUMNS": str(columns)}).stdout
    assert {row["session_id"] for row in json.loads(as_json)} == set(demo)  # one document, whatever the width



def test_a_narrow_terminal_lists_each_quarantined_state_with_its_ids_whole_on_one_line(registry: Registry) -> None:
    user, session = "alice.longname@example.com", "ticket-2026-11-30-a-long-session-id-0001"
    assert _run_as(user, session, "hello").exit_code == 0
    registry.add("support_triage", examples.support_triage_v2_renamed().dump_component(), renamed_manifest(),
                 "rename researcher", label="production", allow_incompatible=True)
    assert _run_as(user, session, "again").exit_code == 0  # refused as it opens, and set aside
    listed = runner.invoke(app, ["sessions", "quarantine"], env={"COLUMNS": "80"})
    assert listed.exit_code == 0, listed.output
    assert "…" not in listed.stdout
    (row,) = [line for line in listed.stdout.splitlines() if user in line]
    assert session in row


def _run_as(user: str, session: str, text: str) -> Any:
    return runner.invoke(app, ["run", "--team", "support_triage", "--user", user, "--session", session, text])


def test_a_database_path_is_printed_as_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # '[/]' in a folder name crashed every db command's output with a MarkupError.
    monkeypatch.setenv("TEAMSTORE_HOME", str(tmp_path / "odd[/]home[red]"))
    for args in (["db", "upgrade"], ["db", "current"], ["db", "lease-mode"]):
        result = runner.invoke(app, args, env={"COLUMNS": "300"})
        assert result.exit_code == 0, (args, result.output)
        assert "odd[/]home[red]" in result.stdout, args


def test_every_option_says_what_it_takes() -> None:
    for command in (["sessions", "show"], ["sessions", "delete"], ["sessions", "quarantine"], ["sessions", "list"]):
        shown = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
        for line in shown.stdout.splitlines():
            if "--user" in line or "--session" in line:
                assert "id" in line.split("--", 1)[1], (command, line)  # e.g. "The user id (exact)."


def test_a_new_session_past_the_per_user_bound_is_an_error_with_the_fix(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMSTORE_MAX_SESSIONS_PER_USER", "1")
    _run("My router ZX-81 drops every evening")
    refused = runner.invoke(app, ["run", "--team", "support_triage", "--user", "alice", "--session", "s2", "hello"])
    assert refused.exit_code == 1
    assert "error: this user keeps 1 unexpired stored sessions, and the bound is 1" in refused.output
    assert "fix:" in refused.output and "TEAMSTORE_MAX_SESSIONS_PER_USER" in refused.output
    assert "Traceback" not in refused.output
    assert _run("still broken")["resume"]["outcome"] == "resumed"  # its existing session still runs

    shown = json.loads(runner.invoke(app, ["sessions", "show", "--user", "alice", "--session", "s1", "--json"]).stdout)
    assert (shown["user_live_sessions"], shown["max_sessions_per_user"]) == (1, 1)
    readable = runner.invoke(app, ["sessions", "list", "--user", "alice"])
    assert readable.exit_code == 0 and "1 unexpired stored session(s) for this user, of the 1" in readable.output
    listed = json.loads(runner.invoke(app, ["sessions", "list", "--user", "alice", "--json"]).stdout)
    assert [r["session_id"] for r in listed] == ["s1"]


def test_a_run_that_stops_mid_run_says_it_can_be_continued_and_is(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(registry)
    ids = ["--team", TEAM, "--user", "alice", "--session", "s1"]
    with counted_calls(monkeypatch) as calls:
        calls.fail_at = 3
        out = runner.invoke(app, ["run", *ids, "My line drops every evening", "--json"])
        assert out.exit_code == 1
        assert json.loads(out.stdout)["error"]["type"] == "RunInterrupted"  # a script's cue to --continue
        said = " ".join(out.output.split())  # the console wraps lines
        assert "stopped after turn 2 and can be continued" in said and "--continue" in said
        assert "raised RuntimeError (an agent's ConnectionError, at checkpoint_teams.py:" in said
        assert "the model endpoint went away" not in said  # a message may quote the user: left out, unless opted in
        assert "transcripts show" not in said  # a run not ended yet has no transcript to show
        calls.fail_at = None
        done = runner.invoke(app, ["run", *ids, "--continue", "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert len(data["messages"]) == TURNS + 1 and data["continued"]["last_turn"] == 2
    # The verdict as the command leaves the session: it read "stopped after turn 2; continue or abandon it".
    assert data["resume"]["interrupted"] is None and "interrupted after turn 2, was continued" in data["resume"]["detail"]


def test_the_quarantine_lists_as_many_as_asked_and_says_when_more_may_follow(registry: Registry) -> None:
    for session in ("s1", "s2"):
        runner.invoke(app, ["run", "--team", "support_triage", "--user", "alice", "--session", session, "hello"])
    registry.add("support_triage", examples.support_triage_v2_renamed().dump_component(), renamed_manifest(),
                 "rename researcher", label="production", allow_incompatible=True)
    for session in ("s1", "s2"):  # each refused as it opens, and set aside
        runner.invoke(app, ["run", "--team", "support_triage", "--user", "alice", "--session", session, "again"])
    listed = runner.invoke(app, ["sessions", "quarantine", "--limit", "1", "--json"])
    assert listed.exit_code == 0, listed.output
    (newest,) = json.loads(listed.stdout)
    assert newest["session_id"] == "s2"
    table = runner.invoke(app, ["sessions", "quarantine", "--limit", "1"])
    assert "the newest 1 shown" in " ".join(table.output.split())
    whole = runner.invoke(app, ["sessions", "quarantine"])
    assert len(json.loads(runner.invoke(app, ["sessions", "quarantine", "--json"]).stdout)) == 2
    assert "newest" not in whole.output


def test_an_empty_quarantine_says_it_holds_nothing_rather_than_printing_an_empty_table(registry: Registry) -> None:
    runner.invoke(app, ["run", "--team", "support_triage", "--user", "alice", "--session", "s1", "hello"])
    listed = runner.invoke(app, ["sessions", "quarantine", "--user", "alice"])
    assert listed.exit_code == 0, listed.output
    assert listed.output.strip() == "no refused state is set aside for this user"
    assert json.loads(runner.invoke(app, ["sessions", "quarantine", "--json"]).stdout) == []


def test_continuing_a_session_with_no_interrupted_run_says_what_to_do_on_the_command_line(registry: Registry) -> None:
    out = runner.invoke(app, ["run", "--team", "support_triage", "--user", "alice", "--session", "s1", "--continue"])
    said = " ".join(out.output.split())
    assert out.exit_code == 1 and "has no interrupted run" in said
    assert "s.interrupted" not in said and "without --continue or --abandon" in said  # not the Python API's hint



@pytest.mark.parametrize("text", ["", " \n\t"])
def test_an_empty_message_is_refused_before_anything_is_opened(registry: Registry, text: str) -> None:
    out = runner.invoke(app, ["run", "--team", "support_triage", "--user", "alice", "--session", "s1", text])
    said = " ".join(out.output.split())
    assert out.exit_code == 1 and "error: the task is" in said and "fix: pass the user's message" in said
    assert not (Settings().home / "teamstore.db").exists()  # no database made, no session leased, no model called


def test_a_message_given_as_dash_is_read_from_stdin_and_kept_off_the_command_line(registry: Registry) -> None:
    args = ["run", "--team", "support_triage", "--user", "alice", "--session", "s1", "-", "--json"]
    out = runner.invoke(app, args, input="My router ZX-81 drops every evening\n")
    assert out.exit_code == 0, out.output
    asked = json.loads(out.stdout)["messages"][0]
    assert (asked["source"], asked["content"]) == ("user", "My router ZX-81 drops every evening")


@pytest.mark.parametrize(("given", "limit"), [
    (b"0123456789\r\n", "10"), (b"0123456789\n", "10"), (b"0123456789", "10"), (b"\xef\xbb\xbf0123456789\r\n", "10"),
    (b"\xef\xbb\xbf0123456789", "1000")], ids=["crlf", "lf", "none", "bom-crlf", "bom-under-the-limit"])
def test_a_message_on_stdin_at_the_limit_is_taken_whole_without_its_final_newline_or_byte_order_mark(
    registry: Registry, monkeypatch: pytest.MonkeyPatch, given: bytes, limit: str
) -> None:
    # A file saved on Windows: its final \r\n was one byte over the limit, and a BOM reached the model.
    monkeypatch.setenv("TEAMSTORE_TASK_MAX_BYTES", limit)
    args = ["run", "--team", "support_triage", "--user", "alice", "--session", "s1", "-", "--json"]
    out = runner.invoke(app, args, input=given)
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["messages"][0]["content"] == "0123456789"


@pytest.mark.parametrize("given", [b"01234567890\r\n", b"\xef\xbb\xbf01234567890", b"0123456789\r\n\n"])
def test_a_message_on_stdin_one_byte_over_the_limit_is_refused_whatever_it_ends_or_starts_with(
    registry: Registry, monkeypatch: pytest.MonkeyPatch, given: bytes
) -> None:
    monkeypatch.setenv("TEAMSTORE_TASK_MAX_BYTES", "10")
    out = runner.invoke(app, ["run", "--team", "support_triage", "--user", "alice", "--session", "s1", "-"],
                        input=given)
    assert out.exit_code == 1 and "over the limit of 10 bytes" in " ".join(out.output.split()), out.output


@pytest.mark.parametrize("text", ["", " \n\t\n", "\ufeff\ufeff\n", "\u200b \ufeff"])
def test_an_empty_message_on_stdin_is_refused_as_an_empty_argument_is(registry: Registry, text: str) -> None:
    out = runner.invoke(app, ["run", "--team", "support_triage", "--user", "alice", "--session", "s1", "-"],
                        input=text)
    said = " ".join(out.output.split())
    assert out.exit_code == 1 and "error: the task is" in said and "fix: pass the user's message" in said
    assert not (Settings().home / "teamstore.db").exists()


def test_an_endless_stdin_is_refused_once_past_the_task_limit(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMSTORE_TASK_MAX_BYTES", "100000")
    proc = subprocess.Popen(
        [sys.executable, "-m", "teamstore", "run", "--team", "support_triage", "--user", "alice", "--session", "s1",
         "-"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stdin, stderr = proc.stdin, proc.stderr
    assert stdin is not None and stderr is not None

    def write_until_refused() -> None:  # a stream with no end: the command must stop reading, not hold it all
        with suppress(BrokenPipeError, ValueError):
            while True:
                stdin.write(b"x" * 65_536)

    writer = threading.Thread(target=write_until_refused, daemon=True)
    writer.start()
    try:
        said = " ".join(stderr.read().decode().split())
        assert proc.wait(timeout=120) == 1
    finally:
        proc.kill()
    assert "error: the task read is over the limit of 100,000 bytes" in said and "TEAMSTORE_TASK_MAX_BYTES" in said
    assert not (Settings().home / "teamstore.db").exists()


def test_a_message_given_as_dash_to_a_command_started_with_no_stdin_is_refused_as_such(registry: Registry) -> None:
    command = ("exec \"$0\" -m teamstore run --team support_triage --user alice --session s1 - <&-")  # stdin closed
    done = subprocess.run(["sh", "-c", command, sys.executable], capture_output=True, text=True, timeout=120)
    said = " ".join(done.stderr.split())
    assert done.returncode == 1, said
    assert "error: the message is read from stdin (-), but the command was started with no stdin" in said
    assert "Traceback" not in said
    assert not (Settings().home / "teamstore.db").exists()


def test_a_message_on_stdin_that_is_not_utf8_is_refused(registry: Registry) -> None:
    out = runner.invoke(app, ["run", "--team", "support_triage", "--user", "alice", "--session", "s1", "-"],
                        input=b"caf\xe9")
    assert out.exit_code == 1 and "error: the task read is not UTF-8" in " ".join(out.output.split())


@pytest.mark.parametrize(("given", "says"), [
    ("My line drops\r\n".encode("utf-16-le"), "the task read looks like UTF-16LE, not UTF-8: every other byte is NUL"),
    ("My line drops\r\n".encode("utf-16"), "the task read is UTF-16 (it starts with a UTF-16 byte order mark), not UTF-8"),
    (b"ticket\x0055102", "the task contains NUL (U+0000) at character 6"),
])
def test_a_message_on_stdin_in_utf16_or_holding_nul_is_refused_before_anything_is_opened(
    registry: Registry, given: bytes, says: str
) -> None:
    out = runner.invoke(app, ["run", "--team", "support_triage", "--user", "alice", "--session", "s1", "-"],
                        input=given)
    said = " ".join(out.output.split())
    assert out.exit_code == 1 and f"error: {says}" in said and "iconv -f UTF-16" in said, said
    assert not (Settings().home / "teamstore.db").exists()


def test_an_empty_message_after_abandon_is_refused_and_the_interrupted_run_can_still_be_continued(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stop_a_run(registry, monkeypatch)
    ids = ["--team", TEAM, "--user", "alice", "--session", "s1"]
    refused = runner.invoke(app, ["run", *ids, "--abandon", ""])
    assert refused.exit_code == 1 and "the task is empty" in " ".join(refused.output.split())
    with counted_calls(monkeypatch) as calls:
        done = runner.invoke(app, ["run", *ids, "--continue", "--json"])  # not given up for the empty message
    assert done.exit_code == 0, done.output
    assert len(json.loads(done.stdout)["messages"]) == TURNS + 1 and calls.made > 0


def _stop_a_run(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop a run of the checkpoint team after its second turn (its third model call fails)."""
    register(registry)
    with counted_calls(monkeypatch) as calls:
        calls.fail_at = 3
        stopped = runner.invoke(app, ["run", "--team", TEAM, "--user", "alice", "--session", "s1", "My line drops"])
    assert stopped.exit_code == 1


async def _listed_rows() -> list[StoredSession]:
    engine = create_engine(Settings().resolved_database_url)
    try:
        return await store_for(engine).list_sessions()
    finally:
        await engine.dispose()


def _saved_then_interrupted(calls: Calls, ids: list[str]) -> None:
    """A state saved, then a run that stops after its first turns: its checkpoint beside the state."""
    assert runner.invoke(app, ["run", *ids, "My line drops"]).exit_code == 0
    calls.fail_at = calls.made + 3
    assert runner.invoke(app, ["run", *ids, "again"]).exit_code == 1


def test_a_listing_says_a_sealed_state_was_not_opened_and_show_opens_it(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A listing opens no user's key: every state and checkpoint it held read 'unreadable (schema_mismatch)'.
    register(registry)
    ids = ["--team", TEAM, "--user", "alice", "--session", "s1"]
    with counted_calls(monkeypatch) as calls:
        _saved_then_interrupted(calls, ids)
    (listed,) = json.loads(runner.invoke(app, ["sessions", "list", "--json"]).stdout)
    assert listed["agents"] == SEALED and listed["checkpoint"] == SEALED
    shown = runner.invoke(app, ["sessions", "show", "--user", "alice", "--session", "s1", "--json"])
    assert shown.exit_code == 0, shown.output
    opened = json.loads(shown.stdout)
    assert isinstance(opened["agents"], dict) and opened["checkpoint"]["last_turn"] == 2
    (row,) = asyncio.run(_listed_rows())
    refused = replace(row, defects=("the stored state does not open: its data key was destroyed",),
                      checkpoint_unreadable="its data key was destroyed")
    assert describe_agents(refused) == "unreadable (the stored state does not open: its data key was destroyed)"
    assert describe_checkpoint(refused) == "unreadable (its data key was destroyed)"


def test_list_and_show_report_the_stored_size_as_state_bytes_and_show_the_opened_size_apart(
    registry: Registry, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # show's state_bytes was the opened state's size, list's the stored (sealed, compressed) one.
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    _run("My router ZX-81 drops every evening")
    (row,) = asyncio.run(_listed_rows())
    stored = len((row.state or "").encode())
    assert row.state_bytes == stored > 0
    (listed,) = json.loads(runner.invoke(app, ["sessions", "list", "--json"]).stdout)
    ids = ["--user", "alice", "--session", "s1"]
    shown = json.loads(runner.invoke(app, ["sessions", "show", *ids, "--json"]).stdout)
    assert listed["state_bytes"] == shown["state_bytes"] == stored
    assert listed["opened_state_bytes"] is None, "a listing opens nothing"
    assert shown["opened_state_bytes"] > stored, "the opened state is not compressed"
    text = runner.invoke(app, ["sessions", "show", *ids], env={"COLUMNS": "200"}).stdout
    assert f"state_bytes: {stored}\n" in text and f"opened_state_bytes: {shown['opened_state_bytes']}\n" in text


def test_show_reports_a_checkpoints_stored_size_as_bytes_and_its_opened_size_apart_as_the_states(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # show's checkpoint bytes were the opened checkpoint's size, beside the state's stored state_bytes.
    _stop_a_run(registry, monkeypatch)
    (row,) = asyncio.run(_listed_rows())
    stored = len((row.checkpoint or "").encode())
    assert row.checkpoint_bytes == stored > 0
    ids = ["--user", "alice", "--session", "s1"]
    checkpoint = json.loads(runner.invoke(app, ["sessions", "show", *ids, "--json"]).stdout)["checkpoint"]
    assert checkpoint["bytes"] == stored
    assert checkpoint["opened_bytes"] > 0 and checkpoint["opened_bytes"] != stored, "the checkpoint was sealed"
    text = " ".join(runner.invoke(app, ["sessions", "show", *ids], env={"COLUMNS": "200"}).stdout.split())
    assert f"after turn 2, {stored} bytes stored, {checkpoint['opened_bytes']} opened" in text


def _only_run() -> dict:  # type: ignore[type-arg]
    """The session's one transcript, as ``transcripts show`` lists it."""
    shown = runner.invoke(app, ["transcripts", "show", "--user", "alice", "--session", "s1", "--json"])
    assert shown.exit_code == 0, shown.output
    (run,) = json.loads(shown.stdout)["runs"]
    return run  # type: ignore[no-any-return]


def test_a_session_deleted_with_an_interrupted_run_keeps_that_run_on_record(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stop_a_run(registry, monkeypatch)
    done = runner.invoke(app, ["sessions", "delete", "--user", "alice", "--session", "s1"])
    assert done.exit_code == 0, done.output
    run = _only_run()
    assert run["run"]["error"] == "RunInterrupted" and run["run"]["stop_reason"] == "deleted after turn 2"
    assert len(run["items"]) == 3 and run["items"][0]["message"]["content"] == "My line drops"  # task, 2 turns
    assert run["run"]["totals"]["model_calls"] == 3  # the two turns' calls, and the one that failed


def test_an_expired_session_swept_with_an_interrupted_run_keeps_that_run_on_record(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def expire() -> None:
        engine = create_engine(Settings().resolved_database_url)
        async with engine.begin() as conn:
            await conn.execute(update(sessions).values(expires_at=datetime.now(UTC) - timedelta(days=1)))
        await engine.dispose()

    _stop_a_run(registry, monkeypatch)
    asyncio.run(expire())
    swept = runner.invoke(app, ["retention", "sweep", "--json"])
    assert swept.exit_code == 0, swept.output
    assert json.loads(swept.stdout)["sessions"] == 1
    run = _only_run()
    assert run["run"]["error"] == "RunInterrupted" and run["run"]["stop_reason"] == "expired after turn 2"
    assert len(run["items"]) == 3 and run["run"]["totals"]["model_calls"] == 3


def _lease_owner(user: str, session: str) -> str | None:
    """Who holds the session's lease in the embedded database, read as another process would (read-only: none
    is made before the run makes it)."""
    database = Settings().resolved_database_url.partition(":///")[2]
    try:
        with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as conn:
            row = conn.execute("SELECT lease_owner FROM ts_sessions WHERE user_id = ? AND session_id = ?",
                               (user, session)).fetchone()
    except sqlite3.OperationalError:  # not made yet, or not migrated yet
        return None
    return row[0] if row else None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_run_stopped_by_ctrl_c_sigterm_or_sighup_gives_the_sessions_lease_back_and_says_so(
    registry: Registry, signum: signal.Signals
) -> None:
    """A container stopping sends SIGTERM, `timeout` too: the run used to end where it stood (exit 143) with the
    session's lease held, and the session's next request was refused as busy until the lease's TTL ran out."""
    slow = examples.support_escalation(delay_seconds=3.0)  # each model call takes 3 s: the signal lands mid-run
    manifest = examples.example_manifest("support_escalation").model_copy(update={"checkpoints": "off"})
    registry.add("support_escalation", slow.dump_component(), manifest, "slow", label="production")
    ids = ["--team", "support_escalation", "--user", "alice", "--session", "s1"]
    proc = subprocess.Popen([sys.executable, "-m", "teamstore", "run", *ids, "My line drops"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while _lease_owner("alice", "s1") is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _lease_owner("alice", "s1") is not None, proc.stderr.read() if proc.poll() is not None else ""
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    said = " ".join(err.split())

    assert proc.returncode == 128 + signum, said
    assert (f"interrupted: stopped ({signum.name}) before it finished: the session's lease was given back" in said)
    assert _lease_owner("alice", "s1") is None
    fast = examples.support_escalation()
    registry.add("support_escalation", fast.dump_component(), manifest, "fast", label="production")
    again = runner.invoke(app, ["run", *ids, "My line drops", "--json"], env={"TEAMSTORE_LEASE_TIMEOUT_SECONDS": "0"})
    assert again.exit_code == 0, again.output  # at once: not SessionBusy


@pytest.mark.parametrize("message", [None, "A new question"], ids=["abandon", "abandon-then-run"])
def test_abandoning_a_run_the_moved_label_cannot_continue_gives_it_up_as_the_refusal_says(
    registry: Registry, monkeypatch: pytest.MonkeyPatch, message: str | None
) -> None:
    # The refusal to continue says "or abandon it"; --abandon then said "this session has no interrupted run" and
    # exited 1, the message unrun: the session's opening with the new version had set the checkpoint aside.
    _stop_a_run(registry, monkeypatch)
    register(registry, checkpoints="off", message="checkpoints off")  # production moves between crash and continue
    ids = ["--team", TEAM, "--user", "alice", "--session", "s1"]
    refused = runner.invoke(app, ["run", *ids, "--continue"])
    assert refused.exit_code == 1 and "or abandon it" in " ".join(refused.output.split())
    gave_up = runner.invoke(app, ["run", *ids, "--abandon", *([message] if message else []), "--json"])
    assert gave_up.exit_code == 0, gave_up.output
    data = json.loads(gave_up.stdout)
    assert data["resume"]["checkpoint_refused"] == "definition_changed"
    assert (data["messages"][0]["content"] == message) if message else (data["abandoned"] is None)
    again = runner.invoke(app, ["run", *ids, "--abandon"])  # given up once: nothing is left to abandon
    assert again.exit_code == 1 and "no interrupted run" in again.output


async def _drop_session_rows() -> None:
    engine = create_engine(Settings().resolved_database_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(delete(sessions))
    finally:
        await engine.dispose()


def test_a_restore_over_an_interrupted_run_records_the_run_and_keeps_its_checkpoint(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The demo's sequence: a state refused after a rename, the session going on fresh with a run that stopped
    # mid-way, then the rollback's restore. The restore saved over that run's checkpoint, which went unrecorded.
    v1 = registry.resolve("support_triage@production").version
    _run("My router ZX-81 drops every evening")
    registry.add("support_triage", examples.support_triage_v2_renamed().dump_component(), renamed_manifest(),
                 "rename researcher", label="production", allow_incompatible=True)
    assert _run("hello again")["resume"]["outcome"] == "definition_changed"
    registry.label("support_triage", v1, "production", reason="roll back the rename")
    (kept,) = json.loads(runner.invoke(app, ["sessions", "quarantine", "--json"]).stdout)
    asyncio.run(_drop_session_rows())  # the fresh session saved nothing before its run stopped
    _stop_a_run(registry, monkeypatch)

    refused = runner.invoke(app, ["sessions", "restore", str(kept["id"])])
    assert refused.exit_code == 1 and "interrupted run" in refused.output and "--replace" in refused.output
    assert runner.invoke(app, ["sessions", "show", "--user", "alice", "--session", "s1", "--json"]).exit_code == 0
    done = runner.invoke(app, ["sessions", "restore", str(kept["id"]), "--replace", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["checkpoint_kept"] is False
    shown = runner.invoke(app, ["transcripts", "show", "--user", "alice", "--session", "s1", "--json"])
    (run,) = [r for r in json.loads(shown.stdout)["runs"] if r["run"]["team"] == TEAM]
    assert run["run"]["error"] == "RunInterrupted" and run["run"]["stop_reason"] == "replaced after turn 2"
    assert len(run["items"]) == 3 and run["run"]["totals"]["model_calls"] == 3
    (aside,) = json.loads(runner.invoke(app, ["sessions", "quarantine", "--json"]).stdout)
    assert aside["reason"] == "replaced" and aside["checkpoint_bytes"] > 0


async def _set_aside_whole_row() -> None:
    """Quarantine alice's session row, its state and its interrupted run's checkpoint, and record that run as
    ended, as a refusal at opening does."""
    app = App()
    observers = app.audit_observers()
    store = app.state_store
    try:
        (row,) = await store.list_sessions()
        claim = Claim(row.team, row.team_version, row.schema_version, row.agentchat_version, row.fingerprints)
        held = await store.acquire(SessionKey("alice", "s1"), claim, owner="w9", lease_ttl=60, wait_seconds=0)
        await store.quarantine(held, owner="w9", reason="definition_changed", detail="test")
        await report_set_aside(observers, held, "definition_changed", "w9")
        await store.release(SessionKey("alice", "s1"), owner="w9", discard_empty=True)
    finally:
        await drain_observers(observers)
        await app.aclose()


def _ended_run() -> dict[str, Any]:
    """The transcript of alice's one run that did not complete (set aside, or replaced)."""
    shown = runner.invoke(app, ["transcripts", "show", "--user", "alice", "--session", "s1", "--json"])
    (ended,) = [r for r in json.loads(shown.stdout)["runs"] if r["run"]["error"] is not None]
    return ended  # type: ignore[no-any-return]


def test_a_state_restored_from_beside_an_interrupted_run_comes_back_alone_and_its_checkpoint_stays_aside(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The restore put the run's checkpoint back beside its state, to be continued: a run recorded as ended when it
    # was set aside, whose continuation no transcript would then take.
    register(registry)
    ids = ["--team", TEAM, "--user", "alice", "--session", "s1"]
    with counted_calls(monkeypatch) as calls:
        _saved_then_interrupted(calls, ids)
        asyncio.run(_set_aside_whole_row())
        (kept,) = json.loads(runner.invoke(app, ["sessions", "quarantine", "--json"]).stdout)
        done = runner.invoke(app, ["sessions", "restore", str(kept["id"])], env={"COLUMNS": "200"})
        assert done.exit_code == 0, done.output
        assert (f"the checkpoint of the run it had interrupted (recorded as ended) stays in quarantine as "
                f"{kept['id']}") in done.output and "--continue" not in done.output
        (still,) = json.loads(runner.invoke(app, ["sessions", "quarantine", "--json"]).stdout)
        assert still["id"] == kept["id"] and still["state_bytes"] == 0
        assert still["checkpoint_bytes"] == kept["checkpoint_bytes"] > 0
        again = runner.invoke(app, ["sessions", "restore", str(kept["id"])])
        assert again.exit_code == 1 and "its state was restored already" in " ".join(again.output.split())
        calls.fail_at = None
        refused = runner.invoke(app, ["run", *ids, "--continue"])
        assert refused.exit_code == 1 and "no interrupted run" in refused.output
        resumed = runner.invoke(app, ["run", *ids, "and now?", "--json"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["resume"]["outcome"] == "resumed"
    assert _ended_run()["run"]["stop_reason"] == "set aside after turn 2"  # as recorded when set aside


async def _copy_state_to_quarantine() -> int:
    """Set a copy of alice's saved state aside (as if refused), leaving her session as it is."""
    engine = create_engine(Settings().resolved_database_url)
    try:
        async with engine.begin() as conn:
            (row,) = (await conn.execute(select(sessions))).mappings().all()
            copied = {name: row[name] for name in ("user_id", "session_id", "team", "team_version", "schema_version",
                                                   "agentchat_version", "fingerprints", "state", "state_bytes",
                                                   "row_version")}
            added = await conn.execute(insert(quarantine).values(
                **copied, reason="corrupt", detail="a copy", quarantined_at=datetime.now(UTC)))
            return int(added.inserted_primary_key[0])
    finally:
        await engine.dispose()


def test_a_run_ended_by_a_restore_is_not_continued_once_the_state_it_replaced_is_restored(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Restoring the replaced row put the run back, and `run --continue` completed it, while its transcript stayed
    # the one the replace wrote ("replaced after turn 2"): the later turns and the result were in no transcript.
    register(registry)
    ids = ["--team", TEAM, "--user", "alice", "--session", "s1"]
    with counted_calls(monkeypatch) as calls:
        assert runner.invoke(app, ["run", *ids, "My line drops"]).exit_code == 0
        copy = asyncio.run(_copy_state_to_quarantine())
        calls.fail_at = calls.made + 3
        assert runner.invoke(app, ["run", *ids, "again"]).exit_code == 1  # stopped after its second turn
        first = runner.invoke(app, ["sessions", "restore", str(copy), "--replace", "--json"])
        assert first.exit_code == 0, first.output
        replaced = json.loads(first.stdout)["replaced_by"]
        back = runner.invoke(app, ["sessions", "restore", str(replaced), "--replace", "--json"])
        assert back.exit_code == 0, back.output
        assert json.loads(back.stdout)["checkpoint_kept"] is True
        calls.fail_at = None
        refused = runner.invoke(app, ["run", *ids, "--continue"])
    assert refused.exit_code == 1 and "no interrupted run" in refused.output
    shown = runner.invoke(app, ["transcripts", "show", "--user", "alice", "--session", "s1", "--json"])
    runs = [r["run"] for r in json.loads(shown.stdout)["runs"] if r["run"]["team"] == TEAM]
    assert sorted((r["error"], r["stop_reason"]) for r in runs if r["error"] is not None) == [
        ("RunInterrupted", "replaced after turn 2")]
    assert len(runs) == 2  # the first run, complete, and the replaced one, ended: no continuation of it
    assert len(_ended_run()["items"]) == 3
