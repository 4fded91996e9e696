"""``teamstore registry`` through typer's CliRunner, in tables and ``--json``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from config_registry import Registry
from teamstore import examples
from teamstore.cli import app
from tests.conftest import ctrl_c_after_its_first_line, fits_with_ids_whole, git
from tests.registry.conftest import triage_json

runner = CliRunner()
ADD = ["registry", "add", "support_triage", "--persist", "researcher", "--context-bound", "20"]
KEY_PATH = "participants.0.config.model_client.config.api_key"
KEY = "sk-proj-hunter2SECRET0123456789abcd"


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args))


def as_json(*args: str) -> Any:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_add_show_list_history_in_json(registry_path: Path) -> None:
    added = as_json(
        *ADD, "--factory", "teamstore.examples:support_triage", "--label", "production", "-m", "first"
    )
    assert added["labels"] == ["production"]
    assert git(registry_path, "rev-parse", "HEAD").strip() != added["version"]  # the label move came after
    shown = as_json("registry", "show", "support_triage@production")
    assert shown["version"] == added["version"]
    assert shown["manifest"]["persist"] == ["researcher"]
    assert shown["fingerprints"] == added["fingerprints"]
    assert [p["name"] for p in shown["participants"]] == ["triage", "researcher", "critic"]
    assert shown["allowances"]["allow_source_code_tools"] is False
    listed = as_json("registry", "list")
    assert [(row["name"], row["labels"]) for row in listed] == [
        ("support_triage", {"production": added["version"]})
    ]
    history = as_json("registry", "history", "support_triage")
    assert [row["kind"] for row in history] == ["label", "version"]


@pytest.mark.parametrize(
    ("team", "said"),
    [("support triage-7Q3X", "team name is not allowed: it holds U+0020 (' ')"),
     ("Support-7Q3X", "team name is not allowed: it starts with U+0053 ('S')"),
     ("x" * 65 + "7Q3X", "team name is not allowed: it is 69 characters long; the limit is 64"),
     ("support_triage@zz-7Q3X", "what follows '@' is not a label or a unique version (7+ hex digits) of team "
      "'support_triage'")],
    ids=["space", "uppercase", "long", "selector"],
)
def test_a_team_reference_that_names_no_team_says_what_is_wrong_without_repeating_it(
    registry_path: Path, team: str, said: str
) -> None:
    # A user's words given as --team (`--team "$INPUT"`) would otherwise reach the error line, and a log.
    as_json(*ADD, "--factory", "teamstore.examples:support_triage", "--label", "production", "-m", "first")
    for args in (["run", "--team", team, "--user", "u", "--session", "s", "hi"], ["registry", "show", team]):
        result = invoke(*args)
        assert result.exit_code == 1 and said in " ".join(result.stderr.split()), result.output
        assert "7Q3X" not in result.output


def test_a_version_given_on_its_own_that_names_none_is_named_as_typed_with_how_to_list_versions(
    registry_path: Path,
) -> None:
    # `registry label` said "what follows '@' is not a label ...": there was no '@' in what was typed.
    as_json(*ADD, "--factory", "teamstore.examples:support_triage", "--label", "production", "-m", "first")
    for args in (["label", "support_triage", "3f1c2ab", "production", "--reason", "rollback"],
                 ["diff", "support_triage", "3f1c2ab", "production"],
                 ["check", "support_triage", "--from", "production", "--to", "3f1c2ab"]):
        result = invoke("registry", *args)
        said = " ".join(result.stderr.split())
        assert result.exit_code == 1, result.output
        assert "error: '3f1c2ab' is not a label or version of team 'support_triage'" in said, said
        assert "fix: `teamstore registry history support_triage` lists its versions" in said and "'@'" not in said
    assert as_json("registry", "show", "support_triage@production")["labels"] == ["production"]


def test_adding_the_latest_definition_again_says_no_version_was_made(registry_path: Path) -> None:
    first = as_json(*ADD, "--factory", "teamstore.examples:support_triage", "-m", "first")
    assert first["new"] is True
    again = invoke(*ADD, "--factory", "teamstore.examples:support_triage", "-m", "second", "--label", "production")
    assert again.exit_code == 0, again.output
    said = " ".join(again.stdout.split())
    assert f"support_triage unchanged: already version {first['version'][:12]} (labels: production)" in said
    assert "no new version was made" in said and "registered" not in said
    assert as_json(*ADD, "--factory", "teamstore.examples:support_triage")["new"] is False
    assert as_json(*ADD, "--factory", "teamstore.examples:support_triage_v2_prompt")["new"] is True


def test_a_label_that_points_at_the_version_already_says_nothing_was_moved(registry_path: Path) -> None:
    version = as_json(*ADD, "--factory", "teamstore.examples:support_triage", "--label", "production")["version"]
    moved = as_json("registry", "label", "support_triage", version, "staging", "--reason", "stage it")
    assert moved["moved"] is True
    again = invoke("registry", "label", "support_triage", "production", "staging", "--reason", "stage it again")
    assert again.exit_code == 0, again.output
    said = " ".join(again.stdout.split())
    assert f"staging already points at {version[:12]}; nothing was moved or recorded" in said
    assert "stage it again" not in git(registry_path, "log", "-p")
    assert as_json("registry", "label", "support_triage", version, "staging", "--reason", "x")["moved"] is False


def test_tables_show_names_and_versions_whole_at_80_columns(registry_path: Path) -> None:
    name = "customer_support_triage_for_enterprise"
    added = as_json("registry", "add", name, "--factory", "teamstore.examples:support_triage", "--label", "production",
                    "--persist", "researcher", "--description", "Triage, research and critique support requests")
    for command in (("registry", "list"), ("registry", "history", name), ("registry", "show", name)):
        shown = runner.invoke(app, list(command), env={"COLUMNS": "80"})
        assert shown.exit_code == 0, shown.output
        assert "\u2026" not in shown.stdout  # nothing cut short with an ellipsis
        assert added["version"][:12] in shown.stdout
    listed = runner.invoke(app, ["registry", "list"], env={"COLUMNS": "80"}).stdout
    fits_with_ids_whole(listed, 80, name, added["version"][:12], f"production={added['version'][:12]}")
    history = runner.invoke(app, ["registry", "history", name], env={"COLUMNS": "80"}).stdout
    lines = history.splitlines()
    (moved,) = [n for n, line in enumerate(lines) if f"- -> {added['version'][:12]}" in line]  # a label move whole
    assert "production" in lines[moved - 1]  # under its label


@pytest.mark.parametrize("columns", [80, 200])
def test_the_demos_teams_are_listed_within_the_terminal_with_every_version_whole(
    registry_path: Path, columns: int
) -> None:
    # The demo's registry made a 113-column table: on an 80-column terminal (or a pipe) each line wrapped.
    # Too narrow for the table, each team is a block of lines; wide enough, the table stays.
    registry = Registry(registry_path, create=True)
    v1 = registry.add("support_triage", examples.support_triage().dump_component(),
                      examples.example_manifest("support_triage"), "v1", label="production")
    v2 = registry.add("support_triage", examples.support_triage_v2_renamed().dump_component(),
                      examples.example_manifest("support_triage_v2_renamed").model_copy(update={"name": "support_triage"}),
                      "rename researcher to investigator")
    registry.label("support_triage", v1, "production", reason="roll back the rename")
    escalation = registry.add("support_escalation", examples.support_escalation().dump_component(),
                              examples.example_manifest("support_escalation"), "v1", label="production")
    listed = runner.invoke(app, ["registry", "list"], env={"COLUMNS": str(columns)})
    assert listed.exit_code == 0, listed.output
    teams = {"support_triage": (v2, v1), "support_escalation": (escalation, escalation)}
    for name, (latest, production) in teams.items():
        fits_with_ids_whole(listed.stdout, columns, name, latest[:12], f"production={production[:12]}")
        row = [line for line in listed.stdout.splitlines() if name in line]
        if columns == 200:  # one line per team, as before
            assert any(latest[:12] in line and f"production={production[:12]}" in line for line in row)
        else:
            assert row == [f"name:        {name}"]
    assert {row["name"] for row in as_json("registry", "list")} == set(teams)



@pytest.mark.parametrize("refused", [
    ("--factory", "teamstore.examples:nope"),
    ("--factory", "teamstore.examples:support_triage", "--persist", "nobody"),
    ("--factory", "teamstore.examples:support_triage", "--label", "Production"),
    ("--factory", "teamstore.examples:support_triage", "-m", " "),
])
def test_a_first_registration_that_fails_leaves_no_registry_behind(registry_path: Path, refused: tuple[str, ...]) -> None:
    result = invoke("registry", "add", "support_triage", *refused)
    assert result.exit_code == 1, result.output
    assert not registry_path.exists()
    assert "no registry at" in " ".join(invoke("registry", "list").output.split())  # not an empty one
    assert invoke(*ADD, "--factory", "teamstore.examples:support_triage").exit_code == 0
    assert (registry_path / ".git").is_dir()


def test_a_registry_path_at_another_projects_repository_lists_nothing_and_registers_nothing(registry_path: Path) -> None:
    registry_path.mkdir()
    git(registry_path, "init", "-q")
    (registry_path / "main.py").write_text("print('hello')\n")
    git(registry_path, "add", "main.py")
    git(registry_path, "commit", "-qm", "first")
    head = git(registry_path, "rev-parse", "HEAD")
    for command in (("registry", "list"), (*ADD, "--factory", "teamstore.examples:support_triage")):
        result = invoke(*command)
        assert result.exit_code == 1, result.output
        assert "not a teamstore registry" in " ".join(result.output.split())
    assert git(registry_path, "rev-parse", "HEAD") == head
    assert not (registry_path / "teams").exists()


def test_add_from_file_and_table_output(registry_path: Path, tmp_path: Path) -> None:
    team_file = tmp_path / "team.json"
    team_file.write_text(json.dumps(triage_json()))
    result = invoke(*ADD, "--file", str(team_file), "--description", "Support", "--owner", "ops",
                    "--state-ttl-days", "2")
    assert result.exit_code == 0, result.output
    assert "registered support_triage" in result.stdout
    shown = invoke("registry", "show", "support_triage")
    assert "researcher" in shown.stdout
    assert "owner: ops" in shown.stdout
    assert "state_ttl_days: 2" in shown.stdout


def test_a_file_with_a_byte_order_mark_is_read_and_one_in_utf16_is_refused_naming_the_encoding(
    registry_path: Path, tmp_path: Path
) -> None:
    team_file = tmp_path / "team.json"
    team_file.write_text(json.dumps(triage_json()), encoding="utf-16")  # what PowerShell's '>' writes
    refused = invoke(*ADD, "--file", str(team_file))
    assert refused.exit_code == 1 and "save it as UTF-8" in " ".join(refused.output.split())
    team_file.write_text(json.dumps(triage_json()), encoding="utf-8-sig")  # UTF-8 behind a byte order mark
    assert as_json(*ADD, "--file", str(team_file))["new"] is True


def test_a_definitions_texts_are_shown_as_text_that_the_terminal_never_acts_on(registry_path: Path) -> None:
    # A hostile (or careless) definition: markup and escape sequences in its message, owner and description
    # must neither break 'show', 'list' and 'history' nor hide or rewrite what a reviewer reads there.
    result = invoke(*ADD, "--factory", "teamstore.examples:support_triage", "-m", "fix [/] \x1b[8mhidden",
                    "--owner", "[red]ops", "--description", "\x1b]0;title\x07desc")
    assert result.exit_code == 0, result.output
    for command in (("registry", "show", "support_triage"), ("registry", "list"),
                    ("registry", "history", "support_triage")):
        shown = runner.invoke(app, list(command), env={"COLUMNS": "300"})
        assert shown.exit_code == 0, shown.output
        assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    shown = runner.invoke(app, ["registry", "show", "support_triage"], env={"COLUMNS": "300"}).stdout
    assert "message: fix [/] \\x1b[8mhidden" in shown and "owner: [red]ops" in shown
    assert "description: \\x1b]0;title\\x07desc" in shown


def test_colons_in_errors_and_texts_are_shown_as_written_never_as_emoji(registry_path: Path) -> None:
    refused = invoke(*ADD, "--factory", "billing_teams:x")
    assert refused.exit_code == 1
    assert "cannot import factory billing_teams:x: No module named" in " ".join(refused.output.split())
    assert invoke(*ADD, "--factory", "teamstore.examples:support_triage", "--owner", "ops:smile:").exit_code == 0
    shown = runner.invoke(app, ["registry", "show", "support_triage"], env={"COLUMNS": "300"}).stdout
    assert "owner: ops:smile:" in shown


def test_rename_diff_check_and_rollback(registry_path: Path) -> None:
    v1 = as_json(*ADD, "--factory", "teamstore.examples:support_triage", "--label", "production")["version"]
    v2 = as_json(
        "registry",
        "add",
        "support_triage",
        "--factory",
        "teamstore.examples:support_triage_v2_renamed",
        "--persist",
        "investigator",
        "--context-bound",
        "20",
        "-m",
        "rename",
    )["version"]
    check = invoke("registry", "check", "support_triage", "--from", "production", "--to", v2, "--json")
    assert check.exit_code == 2
    assert json.loads(check.stdout)["reasons"] == [
        "persisted participant 'researcher' was renamed or removed"
    ]
    table = invoke("registry", "check", "support_triage", "--from", "production", "--to", v2)
    assert "INCOMPATIBLE" in table.stdout
    diff = as_json("registry", "diff", "support_triage", v1, v2)
    assert "participant 'researcher' renamed to 'investigator'" in diff["changes"]
    assert (
        as_json("registry", "label", "support_triage", v2, "production", "--reason", "ship")["version"] == v2
    )
    assert (
        as_json("registry", "label", "support_triage", v1, "production", "--reason", "rollback")["version"]
        == v1
    )
    assert as_json("registry", "show", "support_triage")["version"] == v1
    ok = invoke("registry", "check", "support_triage", "--from", v1, "--to", "production")
    assert ok.exit_code == 0
    assert "compatible" in ok.stdout


def test_an_explicit_empty_message_or_a_label_move_without_a_reason_is_refused(registry: Registry) -> None:
    # '-m ""' was replaced by "register NAME", and a label move without --reason was logged as
    # "set from the command line": the history no longer said why.
    refused = invoke(*ADD, "--factory", "teamstore.examples:support_triage", "-m", "")
    assert refused.exit_code == 1 and "message: the commit message is empty" in refused.output
    version = as_json(*ADD, "--factory", "teamstore.examples:support_triage")["version"]  # omitted: a default
    assert registry.resolve(f"support_triage@{version}").message == "register support_triage"
    unexplained = invoke("registry", "label", "support_triage", version, "production")
    assert unexplained.exit_code == 1 and "Missing option '--reason'" in unexplained.output
    assert registry.history("support_triage")[0].kind == "version"  # no label move was made


def test_secret_option_stores_a_reference(registry_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-stored")
    args = [
        "registry",
        "add",
        "support_triage_openai",
        "--factory",
        "teamstore.examples:support_triage_openai",
    ]
    refused = invoke(*args)
    assert refused.exit_code == 1
    assert "--secret participants.0.config.model_client.config.api_key=env:OPENAI_API_KEY" in " ".join(
        refused.output.split()
    )
    secrets = [
        f"--secret=participants.{i}.config.model_client.config.api_key=env:OPENAI_API_KEY" for i in range(3)
    ]
    assert invoke(*args, *secrets).exit_code == 0
    shown = as_json("registry", "show", "support_triage_openai")
    assert set(shown["allowances"]["secrets"].values()) == {"env:OPENAI_API_KEY"}
    assert "sk-never-stored" not in git(registry_path, "log", "-p")


@pytest.mark.parametrize("given", [f"{KEY_PATH}={KEY}", KEY, f"{KEY_PATH}=env:OPENAI_API_KEY {KEY}"])
def test_a_secret_option_given_the_key_itself_is_refused_without_printing_it(registry: Registry, given: str) -> None:
    result = invoke("registry", "add", "support_triage_openai", "--factory", "teamstore.examples:support_triage_openai",
                    "--secret", given)
    assert result.exit_code == 1
    assert "env:VAR" in " ".join(result.output.split())
    assert "hunter2" not in result.output  # a CI log keeps what a command prints


def test_a_secret_path_given_twice_with_two_references_is_refused(registry: Registry) -> None:
    args = ["registry", "add", "support_triage_openai", "--factory", "teamstore.examples:support_triage_openai",
            *(f"--secret=participants.{i}.config.model_client.config.api_key=env:OPENAI_API_KEY" for i in range(3))]
    result = invoke(*args, "--secret", f"{KEY_PATH}=env:OTHER_KEY")
    assert result.exit_code == 1
    assert f"--secret {KEY_PATH} is given twice" in " ".join(result.output.split())
    assert invoke("registry", "list", "--json").stdout.strip() == "[]"
    assert invoke(*args, "--secret", f"{KEY_PATH}=env:OPENAI_API_KEY").exit_code == 0  # the same one again is no conflict


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("registry", "show", "nobody"), "no team of the name given is registered"),
        (("registry", "add", "x"), "exactly one of --factory or --file"),
        (("registry", "add", "x", "--factory", "teamstore.examples:nope"), "cannot import factory"),
        (
            (
                "registry",
                "add",
                "x",
                "--factory",
                "teamstore.examples:single_assistant",
                "--secret",
                "nonsense",
            ),
            "is not PATH=env:VAR",
        ),
        (("registry", "add", "Bad/Name", "--factory", "teamstore.examples:single_assistant"),
         "name: use 1-64 lowercase letters"),  # the validator's own words, no "Value error, " before them
        (("registry", "history", "nobody"), "no team of the name given is registered"),
    ],
)
def test_typed_errors_exit_one_with_a_fix(registry: Registry, args: tuple[str, ...], fragment: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 1
    assert fragment in " ".join(result.output.split())
    assert "fix" in result.output


@pytest.mark.usefixtures("registry")
def test_a_team_name_no_team_has_is_not_repeated_and_the_fix_names_the_registrys_own() -> None:
    assert invoke(*ADD, "--factory", "teamstore.examples:support_triage").exit_code == 0
    for command in ("show", "history"):
        result = invoke("registry", command, "alice-7q3x")  # a user's id given in the wrong place
        said = " ".join(result.output.split())
        assert result.exit_code == 1 and "no team of the name given is registered (not repeated" in said, said
        assert "7q3x" not in said and "registered: support_triage" in said
    near = " ".join(invoke("registry", "show", "support_triag").output.split())
    assert "did you mean support_triage?" in near


@pytest.mark.parametrize("days", ["0", "-1", "3651", "inf", "nan"])
def test_a_state_ttl_that_no_date_can_hold_is_refused_at_registration(registry: Registry, days: str) -> None:
    result = invoke(*ADD, "--factory", "teamstore.examples:support_triage", "--state-ttl-days", days)
    assert result.exit_code == 1
    assert "state_ttl_days" in result.output and "Traceback" not in result.output
    assert invoke("registry", "list", "--json").stdout.strip() == "[]"


@pytest.mark.parametrize(("content", "what"), [(b"\xff\xfe{}", "utf-8"), (b"[" * 100_000 + b"]" * 100_000, "nested")])
def test_a_file_that_is_not_utf8_json_or_too_deep_is_an_error_not_a_traceback(
    registry_path: Path, tmp_path: Path, content: bytes, what: str
) -> None:
    team_file = tmp_path / "team.json"
    team_file.write_bytes(content)
    result = invoke(*ADD, "--file", str(team_file))
    assert result.exit_code == 1, result.output
    assert "cannot read" in result.output
    assert what in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("header", "value"),
    [("x-functions-key", "q1W2e3R4t5Y6u7I8o9P0aSdFgHjKlZxCvBnM1234567890abcdEFGH=="),
     ("X-Auth-Key", "c2547eb745079dac9320b638f5e225cf483cc")],
)
def test_a_key_in_a_header_is_refused_by_the_command_line_which_names_the_secret_option_to_use(
    registry_path: Path, tmp_path: Path, header: str, value: str
) -> None:
    from tests.registry.test_secrets import _headers_agent

    definition = tmp_path / "agent.json"
    definition.write_text(json.dumps(_headers_agent({header: value})))
    args = ["registry", "add", "support_triage", "--file", str(definition), "--persist", "researcher",
            "--context-bound", "20", "--secret", "model_client.config.api_key=env:OPENAI_API_KEY"]
    refused = invoke(*args)
    assert refused.exit_code == 1
    said = " ".join(refused.output.split())
    assert f"config.model_client.config.default_headers.{header}" in said
    assert f"--secret model_client.config.default_headers.{header}=env:" in said
    assert invoke(*args, "--secret", f"model_client.config.default_headers.{header}=env:GATEWAY_KEY").exit_code == 0
    assert value not in git(registry_path, "log", "-p", "--all")


def test_a_file_that_gives_a_key_twice_is_refused_naming_its_path(registry_path: Path, tmp_path: Path) -> None:
    # json.loads keeps the last of the two without a word: a reviewer reading the file sees the first.
    text = json.dumps(triage_json())
    first = text.index('"system_message": ')
    team_file = tmp_path / "team.json"
    team_file.write_text(text[:first] + '"system_message": "Answer every request.", ' + text[first:])
    result = invoke(*ADD, "--file", str(team_file))
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert "config.participants.0.config.system_message: is given twice" in said
    assert "Answer every request" not in said and "Traceback" not in said
    assert not registry_path.exists()


def test_a_memory_declaration_that_gives_a_fact_twice_is_refused(registry_path: Path) -> None:
    memory = '{"participants": ["triage"], "writer": "triage", "facts": {"ticket_id": "str", "ticket_id": "int"}}'
    result = invoke(*ADD, "--factory", "teamstore.examples:support_triage", "--memory", memory)
    assert result.exit_code == 1, result.output
    assert "memory.facts.ticket_id: is given twice" in " ".join(result.output.split())
    assert not registry_path.exists()


def test_a_file_with_nan_in_it_is_refused_naming_its_path(registry_path: Path, tmp_path: Path) -> None:
    component = triage_json()
    component["config"]["max_turns"] = float("nan")
    team_file = tmp_path / "team.json"
    team_file.write_text(json.dumps(component))  # Python writes NaN, which JSON has no word for
    result = invoke(*ADD, "--file", str(team_file))
    assert result.exit_code == 1, result.output
    assert "config.max_turns: is NaN, which JSON cannot hold" in " ".join(result.output.split())
    assert not registry_path.exists()


def test_another_teams_registration_under_a_name_in_use_is_refused_naming_its_owner(registry_path: Path) -> None:
    """Two teams picking one name: the second used to become the first's production version, serving its users
    another team (and quarantining every session)."""
    first = as_json(*ADD, "--factory", "teamstore.examples:support_triage", "--owner", "support-platform",
                    "--label", "production")
    clash = invoke(*ADD, "--factory", "teamstore.examples:support_triage_v2_prompt", "--owner", "billing-platform",
                   "--label", "production")
    said = " ".join(clash.output.split())
    assert clash.exit_code == 1, said
    assert ("owner: team 'support_triage' is registered already, owned by 'support-platform'; this registration "
            "gives owner 'billing-platform'") in said
    assert "fix: register your team under another name; or, to change 'support_triage' itself, pass --owner " \
           "'support-platform'" in said
    unnamed = invoke(*ADD, "--factory", "teamstore.examples:support_triage_v2_prompt", "--label", "production")
    assert unnamed.exit_code == 1 and "gives no owner" in unnamed.output
    assert as_json("registry", "show", "support_triage@production")["version"] == first["version"]
    assert len(as_json("registry", "history", "support_triage")) == 2  # the first version and its label
    own = as_json(*ADD, "--factory", "teamstore.examples:support_triage_v2_prompt", "--owner", "support-platform",
                  "--label", "production")
    assert own["new"] is True and own["labels"] == ["production"]


def test_a_label_moved_by_add_across_an_incompatible_change_is_refused_unless_allowed(registry_path: Path) -> None:
    v1 = as_json(*ADD, "--factory", "teamstore.examples:support_triage", "--label", "production")["version"]
    renamed = ["registry", "add", "support_triage", "--factory", "teamstore.examples:support_triage_v2_renamed",
               "--persist", "investigator", "--context-bound", "20", "--label", "production"]
    refused = invoke(*renamed)
    said = " ".join(refused.output.split())
    assert refused.exit_code == 1, said
    assert (f"label: label 'production' points at version {v1[:12]}, and the sessions saved under it would not "
            "resume under this definition: persisted participant 'researcher' was renamed or removed") in said
    assert "pass --allow-incompatible" in said and "teamstore registry check support_triage --from production" in said
    assert [row["kind"] for row in as_json("registry", "history", "support_triage")] == ["label", "version"]
    staged = as_json(*renamed[:-1], "staging")  # under another label: nothing was serving it
    moved = as_json(*renamed, "--allow-incompatible")
    assert moved["version"] == staged["version"] and moved["labels"] == ["production", "staging"]


def test_persist_given_again_adds_participants_and_a_second_label_is_refused(
    registry_path: Path, tmp_path: Path
) -> None:
    team = triage_json()
    bounded = team["config"]["participants"][1]["config"]["model_context"]
    for participant in team["config"]["participants"]:
        participant["config"]["model_context"] = bounded
    (tmp_path / "team.json").write_text(json.dumps(team))
    added = as_json("registry", "add", "support_triage", "--file", str(tmp_path / "team.json"), "--context-bound",
                    "20", "--persist", "researcher", "--persist", "critic,triage")
    assert as_json("registry", "show", "support_triage")["manifest"]["persist"] == ["researcher", "critic", "triage"]
    twice = invoke(*ADD, "--factory", "teamstore.examples:support_triage", "--label", "staging", "--label",
                   "production")
    said = " ".join(twice.output.split())
    assert twice.exit_code == 1, said
    assert "label: --label is given 2 times ('staging', 'production')" in said
    assert "teamstore registry label NAME <version> production --reason WHY" in said
    assert as_json("registry", "list")[0]["labels"] == {}
    assert as_json("registry", "list")[0]["version"] == added["version"]


def test_a_factory_in_the_current_folder_is_imported_by_the_teamstore_script(
    registry_path: Path, tmp_path: Path
) -> None:
    """The console script puts its own folder first on sys.path, where `python -m` puts the current one."""
    folder = tmp_path / "desk"
    folder.mkdir()
    (folder / "billing_desk_team.py").write_text(
        "from teamstore.examples import support_triage\n\n\ndef billing_desk():\n    return support_triage()\n")
    script = Path(sys.executable).with_name("teamstore")
    env = {**os.environ, "TEAMSTORE_REGISTRY_PATH": str(registry_path), "COLUMNS": "300"}
    done = subprocess.run([str(script), "registry", "add", "billing_desk", "--factory",
                           "billing_desk_team:billing_desk", "--json"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["name"] == "billing_desk"
    missing = subprocess.run([str(script), "registry", "add", "billing_desk", "--factory", "billing_desk_team:build"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    said = " ".join(missing.stderr.split())
    assert missing.returncode == 1, said
    assert "No module named 'billing_desk_team'" in said
    assert (f"fix: module 'billing_desk_team' must be importable from the current folder ({tmp_path}) or "
            "PYTHONPATH") in said


@pytest.mark.parametrize("command", ["add", "label"])
def test_a_ctrl_c_once_registry_add_or_label_has_committed_changes_neither_its_output_nor_its_status(
    registry_path: Path, command: str
) -> None:
    # It said "registered" and exited 130, was killed by SIGINT, or printed a traceback from the interpreter's exit.
    args = [*ADD, "--factory", "teamstore.examples:support_triage"]
    said = "registered support_triage version"
    if command == "label":
        version = as_json(*args)["version"]
        args, said = ["registry", "label", "support_triage", version, "staging", "--reason", "try"], "support_triage:"
    first, everything, status = ctrl_c_after_its_first_line(*args)
    assert first.startswith(said) and status == 0, everything
    assert not any(word in everything for word in ("KeyboardInterrupt", "Traceback", "interrupted")), everything
    assert as_json("registry", "list")[0]["name"] == "support_triage"


def test_a_factorys_team_that_would_run_otherwise_once_registered_is_refused_by_the_command_line(
    registry_path: Path,
) -> None:
    closure = invoke("registry", "add", "desk", "--factory", "tests.registry.factories:tool_with_a_closure",
                     "--allow-source-code-tools")
    said = " ".join(closure.output.split())
    assert closure.exit_code == 1, said
    assert "is a FunctionTool whose function uses rate from the code around it" in said
    assert "fix: make the tool self-contained" in said
    assert not registry_path.exists()  # a first registration refused leaves no registry behind


@pytest.mark.parametrize("command", ["history", "diff", "label", "check"])
def test_every_argument_of_the_registry_commands_says_what_it_takes(command: str) -> None:
    shown = runner.invoke(app, ["registry", command, "--help"], env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.output
    arguments = shown.stdout.split("Arguments")[1].split("╰")[0]
    assert "[required]" in arguments
    assert re.search(r"<str>\s+\[required\]", arguments) is None, arguments  # an argument with no help


def test_a_file_over_the_reading_bound_is_refused_before_it_is_parsed(registry_path: Path, tmp_path: Path) -> None:
    from teamstore.cli._registry_options import MAX_FILE_BYTES

    component = triage_json()
    component["config"]["participants"][0]["config"]["system_message"] = "word " * (MAX_FILE_BYTES // 5)
    team_file = tmp_path / "team.json"
    team_file.write_text(json.dumps(component))
    result = invoke(*ADD, "--file", str(team_file))
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert f"is {team_file.stat().st_size:,} bytes, over the 8,388,608-byte (8 MiB) limit on a definition file" in said
    assert "the definition itself may take 1,048,576 bytes (1 MiB) as the registry stores it" in said
    assert "word word" not in said and "Traceback" not in said
    assert not registry_path.exists()


def test_a_file_is_held_to_the_size_limit_by_its_definition_as_stored_as_registry_add_is(
    registry_path: Path, tmp_path: Path
) -> None:
    from config_registry.registration import MAX_DEFINITION_BYTES

    team_file = tmp_path / "team.json"
    # Under 1 MiB as written, one line; over it as stored, each item on a line of its own.
    component = triage_json()
    component["config"]["participants"][0]["config"]["metadata"] = {"ids": [0] * (MAX_DEFINITION_BYTES // 8)}
    team_file.write_text(json.dumps(component, separators=(",", ":")))
    assert team_file.stat().st_size < MAX_DEFINITION_BYTES
    result = invoke(*ADD, "--file", str(team_file))
    assert result.exit_code == 1, result.output
    assert "bytes of JSON as stored, over the 1,048,576-byte (1 MiB) limit" in " ".join(result.output.split())
    assert not registry_path.exists()
    # Over 1 MiB as written, an editor's wide indentation; a few KB as stored.
    team_file.write_text(json.dumps(triage_json(), indent=" " * 4000))
    assert team_file.stat().st_size > MAX_DEFINITION_BYTES
    result = invoke(*ADD, "--file", str(team_file))
    assert result.exit_code == 0, result.output
    assert "registered support_triage" in result.stdout
