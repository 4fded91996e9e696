"""The installed ``teamstore`` command: a typed error is a message, a fix and exit status 1, never a traceback;
its tables keep every figure and label whole, on a narrow terminal and through a pipe."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def _teamstore(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``teamstore ARGS`` in a process of its own, on a home of the test's, with no stores, keys or exporter of
    the environment's (``env`` adds to it)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AWS_", "TEAMSTORE_"))}
    clean.update(TEAMSTORE_HOME=str(tmp_path / "home"), **env)
    return subprocess.run([sys.executable, "-m", "teamstore", *args], cwd=tmp_path, env=clean,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--team", "support_triage", "--user", "", "--session", "s1", "hi"], "error: user_id is empty"),
        (["run", "--team", "support_triage", "--user", "a", "--session", "s1", "--continue", "--abandon", "hi"],
         "error: --continue and --abandon are two answers to one interrupted run"),
        (["run", "--team", "support_triage", "--user", "a", "--session", "s1", "--continue", "hi"],
         "error: --continue takes no message"),
        (["run", "--team", "support_triage", "--user", "a", "--session", "s1"], "error: give the user's message"),
        (["run", "--team", "support_triage", "--user", "a", "--session", "s1", ""], "error: the task is empty"),
        (["sessions", "show", "--user", "alice", "--session", "s1"], "error: the SQLite database"),
        (["transcripts", "show", "--user", "alice", "--session", "s1"], "error: the SQLite database"),
    ],
)
def test_a_typed_error_is_a_message_and_a_status(tmp_path: Path, args: list[str], message: str) -> None:
    proc = _teamstore(tmp_path, *args, OPENAI_API_KEY="")
    assert proc.returncode == 1, proc.stderr
    assert message in proc.stderr and "fix:" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "kind", "code"),
    [
        (["sessions", "show", "--user", "alice", "--session", "s1", "--json"], "SchemaNotReady", 1),
        (["erase", "status", "er-nope", "--json"], "SchemaNotReady", 1),
        (["run", "--team", "support_triage", "--user", "", "--session", "s1", "hi", "--json"], "InvalidIdentifier", 1),
    ],
)
def test_a_typed_error_under_json_is_stdouts_one_document(tmp_path: Path, args: list[str], kind: str,
                                                          code: int) -> None:
    # A script reading stdout gets the error to read, as it would a result; people still read stderr.
    proc = _teamstore(tmp_path, *args, OPENAI_API_KEY="")
    assert proc.returncode == code, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert (error["type"], error["exit_code"]) == (kind, code)
    assert error["message"] and error["fix"] and f"error: {error['message'][:30]}" in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr


def test_a_session_that_is_not_stored_is_named_by_its_own_error_type(tmp_path: Path) -> None:
    assert _teamstore(tmp_path, "db", "upgrade").returncode == 0
    proc = _teamstore(tmp_path, "sessions", "show", "--user", "alice", "--session", "nosuch", "--json")
    assert proc.returncode == 1, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["type"] == "SessionNotFound" and error["message"] == "no stored session for that user and session id"


def test_an_error_without_json_writes_nothing_to_stdout(tmp_path: Path) -> None:
    proc = _teamstore(tmp_path, "sessions", "show", "--user", "a", "--session", "s", OPENAI_API_KEY="")
    assert proc.returncode == 1 and proc.stdout == "" and "error:" in proc.stderr


@pytest.mark.parametrize("args", [["erase", "--usr", "alice"], ["registry", "check", "t", "--form", "a", "--to", "b"]])
def test_a_usage_error_exits_1_not_the_2_that_erase_and_check_give_an_outcome(tmp_path: Path, args: list[str]) -> None:
    proc = _teamstore(tmp_path, *args)
    assert proc.returncode == 1 and "error: No such option" in proc.stderr
    assert f"teamstore {args[0]}" in proc.stderr.splitlines()[-1]  # read like every other failure, not a box
    assert proc.stderr.splitlines()[-1].startswith("fix: see `")


def test_a_usage_error_names_the_command_to_ask_for_help(tmp_path: Path) -> None:
    proc = _teamstore(tmp_path, "sessions", "list", "--limit", "many", COLUMNS="200")
    assert proc.returncode == 1
    usage, error, fix = proc.stderr.splitlines()
    assert usage.startswith("Usage: ") and usage.endswith("teamstore sessions list [OPTIONS]")
    assert error.startswith("error: Invalid value for '--limit': it takes an integer from 1 to 100000 (the value ")
    assert fix.startswith("fix: see `") and fix.endswith("teamstore sessions list --help`")


@pytest.mark.parametrize(
    ("args", "error"),
    [(["sessions", "list", "--limit", "alice-7Q3X"], "Invalid value for '--limit': it takes an integer from 1 to 100000"),
     (["cost", "--format", "alice-7Q3X"], "Invalid value for '--format': it takes one of table, csv, json"),
     (["keys", "status", "--max-keys", "-7737"], "Invalid value for '--max-keys': it takes an integer of at least 1"),
     (["sessions", "list", "--limit", "77370000"], "Invalid value for '--limit': it takes an integer from 1 to 100000"),
     (["sessions", "restore", "alice-7Q3X"], "Invalid value for 'quarantine_id': it takes an integer"),
     (["erase", "alice-7Q3X"], "No such command: an argument names no command of this group")],
    ids=["int", "choice", "range-min", "range-max", "int-argument", "command"],
)
def test_a_value_an_option_does_not_take_is_refused_naming_the_option_and_what_it_takes_never_the_value(
    tmp_path: Path, args: list[str], error: str
) -> None:
    # A user's id or words typed in the wrong place land in an option's value; the error line may be logged.
    proc = _teamstore(tmp_path, *args, COLUMNS="300")
    assert proc.returncode == 1, proc.stderr
    usage, said, fix = proc.stderr.splitlines()
    assert usage.startswith("Usage: ") and said.startswith(f"error: {error}"), proc.stderr
    assert said.endswith("not repeated here: it may be a user's words)"), proc.stderr
    assert fix.startswith("fix: see `") and fix.endswith(" --help`"), proc.stderr
    canary = args[-1]
    assert canary not in proc.stderr and canary not in proc.stdout, proc.stderr
    assert not (tmp_path / "home").exists()  # refused before anything was opened


@pytest.mark.parametrize(
    ("args", "takes", "example"),
    [(["cost", "--by", "alice-7Q3X"], "'--by': it takes one or two of session, user, team,", "--by team,model"),
     (["cost", "--by", "team,alice-7Q3X"], "'--by': it takes one or two of session, user, team,", "--by team,model"),
     (["cost", "--since", "alice-7Q3X"], "'--since': it takes a date as YYYY-MM-DD, an ISO timestamp", "--since 7d"),
     (["cost", "--until", "alice-7Q3X"], "'--until': it takes a date as YYYY-MM-DD, an ISO timestamp",
      "--until 2026-11-01"),
     (["cost", "--top", "-7737"], "'--top': it takes a number of groups of at least 1", "--top 10"),
     (["cost", "report", "--every", "alice-7Q3X", "-o", "c.html"], "'--every': it takes one of day, week, month",
      "--every week"),
     (["cost", "report", "--top", "7737", "-o", "c.html"], "'--top': it takes a number of sessions to chart from 1 "
      "to 50", "--top 10"),
     (["cost", "report", "--since", "alice-7Q3X", "-o", "c.html"], "'--since': it takes a date as YYYY-MM-DD",
      "--since 7d"),
     (["erase", "list", "--status", "alice-7Q3X"], "'--status': it takes one of open, ", "--status open"),
     (["ledger", "export", "--to", "wh", "--since", "alice-7Q3X"], "'--since': it takes a day as YYYY-MM-DD",
      "--since 2026-11-01"),
     (["ledger", "export", "--to", "wh", "--until", "alice-7Q3X"], "'--until': it takes a day as YYYY-MM-DD",
      "--until 2026-11-01"),
     (["db", "lease-mode", "alice-7Q3X"], "'MODE': it takes lock or row", "teamstore db lease-mode row")],
    ids=["by", "by-second", "since", "until", "top", "every", "report-top", "report-since", "status", "day-since",
         "day-until", "lease-mode"],
)
def test_a_value_teamstores_own_checks_refuse_is_named_by_its_option_and_what_it_takes_never_repeated(
    tmp_path: Path, args: list[str], takes: str, example: str
) -> None:
    # The checks click cannot make (a grouping, a date, a request status) refuse a value as click's do.
    proc = _teamstore(tmp_path, *args, COLUMNS="300")
    assert proc.returncode == 1, proc.stderr
    said, fix = proc.stderr.splitlines()
    assert said.startswith(f"error: Invalid value for {takes}"), proc.stderr
    assert said.endswith("(the value is not repeated here: it may be a user's words)"), proc.stderr
    assert fix.startswith("fix: ") and "e.g. " in fix and example in fix, proc.stderr
    canary = "alice-7Q3X" if "alice-7Q3X" in args else "7737"
    assert canary.lower() not in proc.stderr.lower() and canary.lower() not in proc.stdout.lower(), proc.stderr
    assert not (tmp_path / "home").exists()  # refused before a database was looked for


def test_an_option_given_without_its_value_reads_as_every_other_usage_error() -> None:
    # Click's parser raises it with no command to name; typer drew it in a box of its own, without the usage line.
    from typer.testing import CliRunner

    from teamstore.cli import app

    out = CliRunner().invoke(app, ["sessions", "list", "--limit"], env={"COLUMNS": "200"})
    assert out.exit_code == 1
    assert out.stderr.splitlines() == ["Usage: teamstore sessions list [OPTIONS]",
                                       "error: Option '--limit' requires an argument.",
                                       "fix: see `teamstore sessions list --help`"]


@pytest.mark.parametrize("args", [["sessions", "show", "--user", "\udcff", "--session", "s1"],
                                  ["cost", "--team", "caf\udce9"],
                                  ["transcripts", "show", "--user", "alice", "--session", "\udcff"]])
def test_an_argument_that_is_not_utf8_is_refused_by_name(tmp_path: Path, args: list[str]) -> None:
    # A shell passes the bytes as they are; Python decodes b'\xff' to a lone surrogate no database takes.
    proc = _teamstore(tmp_path, *args)
    assert proc.returncode == 1, proc.stderr
    assert "is not valid UTF-8 text (not repeated here" in proc.stderr and "fix:" in proc.stderr
    assert "\\x" not in proc.stderr and "caf" not in proc.stderr  # the bytes given are not shown either
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "option", "next_word"),
    [(["erase", "--user", "--json", "--yes"], "--user", "--json"),
     (["sessions", "list", "--user", "--json"], "--user", "--json"),
     (["sessions", "show", "--user", "alice", "--session", "--json"], "--session", "--json"),
     (["erase", "--request-id", "--user", "alice", "--json", "--yes"], "--request-id", "--user"),
     (["cost", "--user", "--format", "json"], "--user", "--format")],
    ids=["erase", "sessions-list", "session", "request-id", "cost"],
)
def test_an_id_option_whose_value_is_missing_refuses_the_next_option_as_its_value(
    tmp_path: Path, args: list[str], option: str, next_word: str
) -> None:
    # `--user $U --json` with U unset: click took "--json" for the user id, and `erase` erased a user so named.
    assert _teamstore(tmp_path, "db", "upgrade").returncode == 0
    proc = _teamstore(tmp_path, *args)
    assert proc.returncode == 1, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["type"] == "OptionValueMissing" and error["exit_code"] == 1
    assert error["message"] == f"{option} got no value: the next word, {next_word}, is an option"
    assert "unset or empty" in error["fix"] and f"{option}=VALUE" in error["fix"]
    assert f"error: {error['message']}" in proc.stderr
    listed = json.loads(_teamstore(tmp_path, "erase", "list", "--json").stdout)
    assert listed["requests"] == []  # refused before a request was stored


def test_an_id_option_followed_by_a_word_that_starts_with_two_dashes_is_refused_without_repeating_it(
    tmp_path: Path,
) -> None:
    proc = _teamstore(tmp_path, "sessions", "list", "--user", "--alice-7Q3X")
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert "error: --user got no value: the next word starts with '--'" in proc.stderr
    assert "7Q3X" not in proc.stderr and not (tmp_path / "home").exists()


def test_an_id_that_starts_with_two_dashes_is_still_taken_joined_to_its_option(tmp_path: Path) -> None:
    proc = _teamstore(tmp_path, "sessions", "list", "--user=--json", "--json")
    assert "OptionValueMissing" not in proc.stdout and "got no value" not in proc.stderr
    assert json.loads(proc.stdout)["error"]["type"] == "SchemaNotReady"  # the id was taken: the lookup ran


def test_free_text_that_reads_as_an_option_is_refused_saying_how_to_join_it_and_is_taken_joined(
    tmp_path: Path,
) -> None:
    # Click would take `--json` as the reason, and an unset variable (`--reason $WHY --json`) reads the same.
    assert _teamstore(tmp_path, "db", "upgrade").returncode == 0
    proc = _teamstore(tmp_path, "erase", "--user", "alice", "--reason", "--json", "--yes")
    error = json.loads(proc.stdout)["error"]
    assert proc.returncode == 1 and error["type"] == "OptionValueMissing", proc.stderr
    assert error["fix"].startswith("to give --reason the text --json itself, join them: --reason=--json;")
    assert "`--reason \"$TEXT\"`" in error["fix"]
    proc = _teamstore(tmp_path, "erase", "--user", "alice", "--reason=--json", "--yes", "--json",
                      TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS="0")
    assert proc.returncode == 3, proc.stderr  # no store held alice: `no_match`, the request stored as given
    assert json.loads(proc.stdout)["reason"] == "--json"


@pytest.mark.parametrize(
    ("args", "kind", "message"),
    [(["sessions", "list", "--user", "alice", "--limit", "0", "--json"], "UsageError",
      "Invalid value for '--limit': it takes an integer from 1 to 100000"),
     (["cost", "--by", "bogus-7Q3X", "--format", "json"], "ConfigurationError", "Invalid value for '--by'"),
     (["cost", "--since", "yesterday-7Q3X", "--format", "json"], "ConfigurationError", "Invalid value for '--since'"),
     (["cost", "--format", "json", "--top", "many-7Q3X"], "UsageError", "Invalid value for '--top'"),
     (["erase", "list", "--status", "7Q3X", "--json"], "ConfigurationError", "Invalid value for '--status'"),
     (["sessions", "list", "--user", "\udcff", "--json"], "ConfigurationError", "argument 4 (after --user) is not"),
     (["sessions", "list", "--jsno", "--json"], "UsageError", "No such option: --jsno")],
    ids=["click-range", "by", "since", "click-int-format-json", "status", "not-utf8", "unknown-option"],
)
def test_every_failure_under_json_is_stdouts_one_error_document(tmp_path: Path, args: list[str], kind: str,
                                                              message: str) -> None:
    proc = _teamstore(tmp_path, *args, COLUMNS="300")
    assert proc.returncode == 1, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["type"] == kind and error["exit_code"] == 1 and error["message"].startswith(message), error
    assert error["fix"] and f"error: {error['message']}" in proc.stderr
    assert "7Q3X" not in proc.stdout and "7Q3X" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "command", "option"),
    [(["demo", "--json"], "demo", "--json"),
     (["cost", "report", "--output", "page.html", "--json"], "cost report", "--json"),
     (["erase", "--user", "alice", "--format", "json"], "erase", "--format")],
    ids=["demo", "cost-report", "erase-format"],
)
def test_json_asked_of_a_command_that_does_not_take_it_is_the_ordinary_usage_error(
    tmp_path: Path, args: list[str], command: str, option: str
) -> None:
    proc = _teamstore(tmp_path, *args, COLUMNS="300")
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout  # no JSON document: nothing asked for one
    said = f"error: No such option: {option} (`python -m teamstore {command}` does not take it; other commands do)"
    assert said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [(["cost", "report", "--user", "--json"], "error: --user got no value"),
     (["cost", "report", "--output", "x.html", "--team", "--format", "json"], "error: --team got no value"),
     (["demo", "--json", "\udcff"], "error: argument 3 (after --json) is not valid UTF-8 text")],
    ids=["missing-value", "missing-value-format", "not-utf8"],
)
def test_json_asked_of_a_command_that_does_not_take_it_writes_no_json_for_any_error(
    tmp_path: Path, args: list[str], said: str
) -> None:
    # Each of these errors is told before click reads --json or --format: the command's own options decide.
    proc = _teamstore(tmp_path, *args, COLUMNS="300")
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout
    assert said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_short_free_text_option_is_told_to_join_its_long_flag_and_a_date_is_called_a_value(tmp_path: Path) -> None:
    proc = _teamstore(tmp_path, "registry", "recover", "-m", "--json")
    error = json.loads(proc.stdout)["error"]
    assert error["fix"].startswith("to give -m the text --json itself, join them: --message=--json;"), error
    proc = _teamstore(tmp_path, "cost", "--since", "--format", "json")
    error = json.loads(proc.stdout)["error"]
    assert error["fix"].startswith("a value that starts with '--' goes as --since=VALUE;"), error
    assert "TEXT" not in error["fix"] and "the text" not in error["fix"]


def test_the_joined_long_flag_the_fix_names_gives_the_text_as_written() -> None:
    import typer

    from teamstore.cli import app

    recover = typer.main.get_command(app).commands["registry"].commands["recover"]  # type: ignore[attr-defined]
    assert recover.make_context("recover", ["--message=--json"]).params["message"] == "--json"


@pytest.mark.parametrize("top", [[], ["--top", "3"]], ids=["listing", "top"])
def test_a_cost_query_that_matches_nothing_under_format_json_writes_its_report_and_no_second_document(
    tmp_path: Path, top: list[str]
) -> None:
    assert _teamstore(tmp_path, "db", "upgrade").returncode == 0
    proc = _teamstore(tmp_path, "cost", "--format", "json", *top)
    assert proc.returncode == 3, proc.stderr
    assert json.loads(proc.stdout)["rows"] == []  # one document: the error is told on stderr only
    assert "error: the ledger holds no run" in proc.stderr


@pytest.mark.parametrize("formats", [["--format", "json", "--format", "csv"], ["--format=json", "--format=table"]],
                         ids=["csv", "table"])
def test_a_cost_query_whose_last_format_is_not_json_writes_no_json_error(tmp_path: Path, formats: list[str]) -> None:
    assert _teamstore(tmp_path, "db", "upgrade").returncode == 0
    proc = _teamstore(tmp_path, "cost", *formats)  # a wrapper's `--format json "$@"` given another: click keeps it
    assert proc.returncode == 3, proc.stderr
    assert '"error"' not in proc.stdout and "error: the ledger holds no run" in proc.stderr


def test_a_usage_error_without_json_still_writes_nothing_to_stdout(tmp_path: Path) -> None:
    proc = _teamstore(tmp_path, "sessions", "list", "--limit", "0")
    assert proc.returncode == 1 and proc.stdout == "" and "error: Invalid value for '--limit'" in proc.stderr
    proc = _teamstore(tmp_path, "run", "--team", "t", "--user", "u", "--session", "s", "--limit", "--", "--json")
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr  # a message after `--` asks for nothing


def test_a_run_whose_model_endpoint_is_down_is_an_error_line_not_tracebacks(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AWS_", "TEAMSTORE_", "OPENAI_"))}
    env.update(TEAMSTORE_HOME=str(tmp_path / "home"), OPENAI_API_KEY="sk-test",
               OPENAI_BASE_URL="http://127.0.0.1:1/v1")  # nothing listens there
    secrets = [f"--secret=participants.{i}.config.model_client.config.api_key=env:OPENAI_API_KEY" for i in range(3)]
    added = subprocess.run([sys.executable, "-m", "teamstore", "registry", "add", "support_triage_openai",
                            "--factory", "teamstore.examples:support_triage_openai", "--persist", "researcher",
                            "--context-bound", "20", "-m", "v1", *secrets], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120, check=False)
    assert added.returncode == 0, added.stderr
    proc = subprocess.run([sys.executable, "-m", "teamstore", "run", "--team", "support_triage_openai",
                           "--user", "alice", "--session", "s1", "hi", "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 1
    assert "error: the team's run raised RuntimeError (an agent's APIConnectionError, at " in proc.stderr
    assert json.loads(proc.stdout)["error"]["type"] == "TeamRunFailed"  # a script can tell it from a refusal
    assert "fix:" in proc.stderr and "Traceback" not in proc.stderr


def test_only_aiosqlites_late_report_of_a_failed_open_is_dropped(capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio
    import threading

    import aiosqlite.core

    from teamstore.cli import _quiet_late_sqlite_threads

    closed = asyncio.new_event_loop()
    late = closed.create_future()
    closed.close()
    work: aiosqlite.core._TxQueue = aiosqlite.core.SimpleQueue()
    work.put((late, lambda: None))  # its answer comes after the command's loop has closed
    work.put((None, lambda: aiosqlite.core._STOP_RUNNING_SENTINEL))

    def other() -> None:
        raise RuntimeError("Event loop is closed")

    before = threading.excepthook
    threading.excepthook = _quiet_late_sqlite_threads
    try:
        for target, args in ((aiosqlite.core._connection_worker_thread, (work,)), (other, ())):
            thread = threading.Thread(target=target, args=args)
            thread.start()
            thread.join()
    finally:
        threading.excepthook = before
    shown = capsys.readouterr().err
    assert "aiosqlite" not in shown and "in other" in shown  # anything else still reaches the terminal


def test_a_groups_list_of_commands_gives_each_summary_whole_not_broken_where_its_source_wrapped() -> None:
    from typer.testing import CliRunner

    from teamstore.cli import app

    shown = CliRunner().invoke(app, ["retention", "--help"], env={"COLUMNS": "200"}, terminal_width=200).stdout
    (sweep,) = [line for line in shown.splitlines() if "│ sweep" in line]
    assert "queued transcripts, ledger rows and quarantined states past retention" in sweep  # one line at 200
    own = CliRunner().invoke(app, ["retention", "sweep", "--help"], env={"COLUMNS": "200"}).stdout
    assert "ledger rows and quarantined states" in own  # the command's own help as it was


def test_every_commands_help_shows_a_flag_with_no_value_placeholder_and_an_option_with_its_type() -> None:
    import typer.main
    from typer.core import TyperOption
    from typer.testing import CliRunner

    from teamstore.cli import app

    def paths(command: Any, path: tuple[str, ...] = ()) -> Any:
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from paths(sub, (*path, name))

    for path, command in paths(typer.main.get_command(app)):
        shown = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"}, terminal_width=200)
        assert shown.exit_code == 0, shown.output
        assert "<bool>" not in shown.stdout, path
        if any(isinstance(p, TyperOption) and not p.is_flag for p in command.params):
            assert "<" in shown.stdout, path  # a value's type is still shown
    erase = CliRunner().invoke(app, ["erase", "--help"], env={"COLUMNS": "200"}, terminal_width=200).stdout
    (json_line,) = [line for line in erase.splitlines() if "│ --json" in line]
    (user_line,) = [line for line in erase.splitlines() if "│ --user" in line]
    assert "<" not in json_line and "<str>" in user_line


_HEADERS = ("team", "model", "runs", "in tokens", "cost", "of which limited")
_ROWS = [("support_triage", "gpt-4o-mini-2024-07-18", "12", "123456", "0.000775 + unknown", "0.0010225"),
         ("s-" + "x" * 70, "gpt-4o", "3", "1160", "0.5", "0"),
         ("total", "", "15", "124616", "0.500775 + unknown", "0.0010225 + unknown")]


def _printed(width: int, terminal: bool) -> list[str]:
    from rich.console import Console

    from teamstore.terminal import print_table

    out = io.StringIO()
    print_table(_HEADERS, _ROWS, fixed=range(2, 6), right=range(2, 6),
                out=Console(file=out, width=width, force_terminal=terminal, color_system=None))
    return out.getvalue().splitlines()


def _whole(text: str) -> None:
    """Every figure in ``text`` whole, and every text cell's first TEXT_MIN characters on one line."""
    from teamstore.terminal import TEXT_MIN

    for row in _ROWS:
        for cell in row[2:]:
            assert cell in text, cell  # a figure is never folded into pieces
        for cell in row[:2]:
            assert cell[:TEXT_MIN] in text, cell  # text wraps, never narrower than TEXT_MIN


def test_a_table_piped_at_80_columns_keeps_every_label_and_figure_whole() -> None:
    lines = _printed(80, terminal=False)  # 80 columns: what rich assumes for a file or a pipe
    _whole("\n".join(lines))
    assert "of which" in "\n".join(lines) and "model" in "\n".join(lines)
    assert max(len(line) for line in lines) <= 80  # it fits, its text wrapped


@pytest.mark.parametrize("width", [30, 50])
def test_a_terminal_narrower_than_the_figures_gets_the_table_wider_every_figure_whole(width: int) -> None:
    from teamstore.terminal import TEXT_ROOM

    lines = _printed(width, terminal=True)
    text = "\n".join(lines)
    _whole(text)
    # Its text columns get room too, not only their least: a model name is not folded over four lines.
    assert _ROWS[0][1][:TEXT_ROOM] in text and _ROWS[1][0][:TEXT_ROOM] in text
    assert max(len(line) for line in lines) == 7 + 2 * TEXT_ROOM + 47  # six columns' edges, the two text
    # columns at their room, the figures' widths


def test_a_table_that_fits_a_wide_terminal_wraps_nothing() -> None:
    lines = _printed(200, terminal=True)
    assert max(len(line) for line in lines) <= 200 and any("x" * 70 in line for line in lines)


def test_a_fixed_cell_of_several_lines_is_as_wide_as_its_longest_line() -> None:
    # Its width was that of all its lines end to end: two labels made `registry list` wider than the terminal.
    from rich.console import Console

    from teamstore.terminal import print_table

    out = io.StringIO()
    labels = "production=2572cbf3ded2\nstaging=8c4517c18010"
    print_table(("name", "labels", "owner"), [("support_triage", labels, "support-platform")], fixed=(0, 1),
                out=Console(file=out, width=80, color_system=None))
    lines = out.getvalue().splitlines()
    for label in labels.split():
        assert any(label in line for line in lines), label
    widest = len("production=2572cbf3ded2")
    assert max(len(line) for line in lines) == 4 + len("support_triage") + widest + len("support-platform")


@pytest.mark.parametrize("command", [[sys.executable, "-m", "teamstore"], [str(Path(sys.executable).with_name("teamstore"))]],
                         ids=["python -m teamstore", "installed script"])
@pytest.mark.parametrize(
    ("args", "error", "fix"),
    [(["-my landlord Jane Doe"], "error: No such option: -m", "goes after `--`"),
     (["--my landlord Jane Doe"], "error: No such option: an argument starts with '-' and is no option of this command",
      "goes after `--`"),
     (["my", "landlord Jane Doe"], "error: more arguments than the command takes", "one quoted argument")],
    ids=["short", "long", "extra"],
)
def test_a_message_read_as_an_option_or_as_extra_arguments_is_refused_without_quoting_it(
    tmp_path: Path, command: list[str], args: list[str], error: str, fix: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AWS_", "TEAMSTORE_"))}
    env.update(TEAMSTORE_HOME=str(tmp_path / "home"), COLUMNS="300")
    proc = subprocess.run([*command, "run", "--team", "t", "--user", "u", "--session", "s", *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr
    usage, said, advice = proc.stderr.splitlines()
    assert usage.startswith("Usage: ") and said.startswith(error), proc.stderr
    assert fix in advice and "or on stdin (`-`)" in advice, proc.stderr
    assert not [word for word in ("landlord", "Jane", "Doe") if word in proc.stderr], proc.stderr
    assert not (tmp_path / "home").exists()  # refused before anything was opened


def test_a_mistyped_option_is_still_named_with_the_one_it_may_be() -> None:
    from typer.testing import CliRunner

    from teamstore.cli import app

    out = CliRunner().invoke(app, ["run", "--team", "t", "--user", "u", "--session", "s", "--jsn", "hi"])
    assert out.exit_code == 1 and "error: No such option: --jsn (Possible options: --json)" in out.output
    out = CliRunner().invoke(app, ["run", "--team", "t", "--user", "u", "--session", "s", "--", "--my words", "--x"])
    assert "more arguments than the command takes" in out.output and "my words" not in out.output
