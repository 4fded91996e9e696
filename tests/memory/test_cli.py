"""``teamstore memory show|forget``, and memory in ``run``, ``cost`` and ``retention sweep``, through typer's
CliRunner on the embedded default."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from config_registry import Registry
from teamstore import examples
from teamstore.app import App
from teamstore.cli import app
from teamstore.memory.facts import MemoryUpdate
from teamstore.settings import Settings
from teamstore.state.envelope import SEALED_PREFIX

runner = CliRunner()
FIRST = "My router ZX-81 drops the connection every evening (ticket 55102)."


def as_json(*args: str) -> Any:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def ran(registry_path: Path) -> dict[str, Any]:
    """The example support team registered, and one run of alice's (its memory written as the command ends)."""
    Registry(registry_path, create=True).add("support_triage", examples.support_triage().dump_component(),
                                examples.example_manifest("support_triage"), "v1", label="production")
    data: dict[str, Any] = as_json("run", "--team", "support_triage", "--user", "alice", "--session", "s1", FIRST)
    return data


def test_show_prints_the_summary_and_each_fact_with_its_type_run_and_confirmation(ran: dict[str, Any]) -> None:
    shown = as_json("memory", "show", "--user", "alice")
    assert shown["user_id"] == "alice"
    (memory,) = shown["memories"]
    assert memory["scope"] == "support_triage" and memory["summary"] == FIRST and memory["version"] == 1
    assert {f["name"]: (f["type"], f["value"], f["source_run_id"]) for f in memory["facts"]} == {
        "ticket_id": ("str", "55102", ran["run_id"]), "router_model": ("str", "ZX-81", ran["run_id"])}
    table = runner.invoke(app, ["memory", "show", "--user", "alice", "--team", "support_triage"])
    assert table.exit_code == 0 and "ZX-81" in table.stdout and "summary: My router ZX-81" in table.stdout
    assert as_json("memory", "show", "--user", "alice", "--team", "billing")["memories"] == []
    elsewhere = runner.invoke(app, ["memory", "show", "--user", "alice", "--team", "billing"])
    assert elsewhere.exit_code == 0 and "nothing is kept about this user under scope 'billing'" in elsewhere.stdout
    assert "nothing is kept about this user" in runner.invoke(app, ["memory", "show", "--user", "bob"]).stdout


def test_show_prints_each_facts_value_in_the_table_as_its_json_reads(ran: dict[str, Any]) -> None:
    written = {"replaced": True, "escalated": False, "visits": 2, "speed": 0.5, "visited_on": date(2026, 9, 24)}
    types = {"replaced": "bool", "escalated": "bool", "visits": "int", "speed": "float", "visited_on": "date"}

    async def write() -> None:  # facts of every type, as a team declaring them would have its writer store
        kept = App()
        try:
            await kept.memory_store.write("alice", "support_triage", MemoryUpdate(FIRST, written), types=types,
                                          expected_version=1, run_id="run-typed", team="support_triage",
                                          team_version="v1", retention_days=180)
        finally:
            await kept.aclose()

    asyncio.run(write())
    (memory,) = as_json("memory", "show", "--user", "alice")["memories"]
    values = {f["name"]: f["value"] for f in memory["facts"]}
    assert values == {**{n: v for n, v in written.items() if n != "visited_on"}, "visited_on": "2026-09-24",
                      "ticket_id": "55102", "router_model": "ZX-81"}
    table = runner.invoke(app, ["memory", "show", "--user", "alice"])
    assert table.exit_code == 0, table.output
    rows = [line.split() for line in table.stdout.splitlines()]
    cells = {row[0]: row[2] for row in rows if row and row[0] in values}  # fact, type, value, from run, confirmed
    assert cells == {"replaced": "true", "escalated": "false", "visits": "2", "speed": "0.5",
                     "visited_on": '"2026-09-24"', "ticket_id": '"55102"', "router_model": '"ZX-81"'}
    assert "True" not in table.stdout and "False" not in table.stdout


def test_show_says_nothing_was_written_yet_when_the_first_write_failed(ran: dict[str, Any]) -> None:
    async def fail() -> None:  # bob's first write failed: his row holds only the failure
        kept = App()
        try:
            await kept.memory_store.record_failure("bob", "support_triage", "the memory writer's model call failed",
                                                   team="support_triage", team_version="v1", retention_days=180)
        finally:
            await kept.aclose()

    asyncio.run(fail())
    table = runner.invoke(app, ["memory", "show", "--user", "bob"])
    assert table.exit_code == 0, table.output
    said = " ".join(table.stdout.split())
    assert "support_triage: nothing written yet; last tried by support_triage@v1" in said and "written by" not in said
    assert "writer failed 1 time(s)" in said
    assert "support_triage: written by support_triage@" in runner.invoke(app, ["memory", "show", "--user", "alice"]).stdout


def test_show_prints_plain_values_that_the_tables_hold_sealed_under_the_users_key(ran: dict[str, Any]) -> None:
    with sqlite3.connect(Settings().home / "teamstore.db") as conn:
        stored = [*conn.execute("SELECT summary FROM ts_user_memory"), *conn.execute("SELECT value FROM ts_user_memory_facts")]
    assert len(stored) == 3 and all(text.startswith(SEALED_PREFIX) for (text,) in stored)
    assert not [text for (text,) in stored if "ZX-81" in text or "55102" in text or "router" in text]
    (memory,) = as_json("memory", "show", "--user", "alice")["memories"]
    assert memory["summary"] == FIRST and {f["value"] for f in memory["facts"]} == {"55102", "ZX-81"}


def test_a_new_session_run_says_what_memory_it_was_given(ran: dict[str, Any]) -> None:
    assert ran["memory"] == {"scope": "support_triage", "given_to": [], "summary": False,
                             "summary_cut": False, "facts": [], "left_out": []}
    data = as_json("run", "--team", "support_triage", "--user", "alice", "--session", "s2", "Hello again")
    assert data["memory"]["given_to"] == ["triage", "researcher"]
    assert data["memory"]["facts"] == ["router_model", "ticket_id"]
    assert "ticket_id=55102" in data["reply"] or any("ticket_id=55102" in m["content"] for m in data["messages"])
    given = [m["content"] for m in data["messages"] if m["type"] == "MemoryQueryEvent"]
    # what each was given, a line an item, as the model reads it (not AutoGen's repr of MemoryContent)
    assert given == [f'{FIRST}\nrouter_model: "ZX-81"\nticket_id: "55102"'] * 2


def test_forget_one_fact_then_everything(ran: dict[str, Any]) -> None:
    assert as_json("memory", "forget", "--user", "alice", "--fact", "ticket_id") == {
        "memories": 0, "facts": 1, "unrecorded": None}
    (memory,) = as_json("memory", "show", "--user", "alice")["memories"]
    assert [f["name"] for f in memory["facts"]] == ["router_model"] and memory["summary"] == FIRST
    assert as_json("memory", "forget", "--user", "alice", "--all") == {"memories": 1, "facts": 1, "unrecorded": None}
    assert as_json("memory", "show", "--user", "alice")["memories"] == []


def test_a_forget_of_a_user_with_no_data_key_says_nothing_was_recorded(ran: dict[str, Any]) -> None:
    said = as_json("memory", "forget", "--user", "carol", "--all")["unrecorded"]
    assert said.startswith("nothing was recorded of the forget: the user is erased")
    table = runner.invoke(app, ["memory", "forget", "--user", "carol", "--all"])
    assert table.exit_code == 0 and "nothing was recorded" in " ".join(table.stdout.split())


@pytest.mark.parametrize(("args", "says"), [
    (("--user", "alice"), "say what to forget: --fact NAME or --all"),
    (("--user", "alice", "--fact", "ticket_id", "--all"), "say what to forget"),
    (("--user", "alice", "--fact", "mood"), "no fact of the name given is kept about this user (not repeated"),
    (("--user", "a\tb", "--all"), "user_id"),
    (("--user", "alice", "--team", "", "--all"), "scope is no memory scope (it is empty)"),
    (("--user", "alice", "--team", "Support Triage", "--all"), "scope is no memory scope (it starts with U+0053 ('S'))"),
    (("--user", "alice", "--fact", ""), "fact is no fact name a team can declare (it is empty)"),
    (("--user", "alice", "--fact", "Mood Diary"), "fact is no fact name a team can declare (it starts with U+004D"),
])
def test_forget_says_what_is_wrong_and_exits_one(ran: dict[str, Any], args: tuple[str, ...], says: str) -> None:
    result = runner.invoke(app, ["memory", "forget", *args])
    assert result.exit_code == 1 and says in " ".join(result.stderr.split()) and "fix:" in result.stderr
    assert "Triage" not in result.output and "Diary" not in result.output  # a refused name is not repeated
    assert "Traceback" not in result.output


@pytest.mark.parametrize("scope", ["", "Support Triage", "s" * 65])
def test_show_refuses_a_scope_no_team_can_declare(ran: dict[str, Any], scope: str) -> None:
    result = runner.invoke(app, ["memory", "show", "--user", "alice", "--team", scope])
    assert result.exit_code == 1 and "is no memory scope" in result.stderr and "fix:" in result.stderr
    assert "nothing is kept" not in result.output and "Traceback" not in result.output


def test_an_unknown_facts_error_names_the_facts_that_are_kept(ran: dict[str, Any]) -> None:
    result = runner.invoke(app, ["memory", "forget", "--user", "alice", "--fact", "mood"])
    said = " ".join(result.stderr.split())  # as one line: the terminal wraps it
    assert "the facts kept are: router_model, ticket_id" in said
    # A mistyped name is recorded all the same, and stops the user's open sessions writing: the fix says so.
    assert "the forget was recorded all the same" in said and "write no memory in any scope (name one" in said
    scoped = runner.invoke(app, ["memory", "forget", "--user", "alice", "--fact", "mood", "--team", "support_triage"])
    assert "write no memory in the scope given" in " ".join(scoped.stderr.split())


def test_an_unknown_facts_error_says_only_a_summary_is_kept_when_no_fact_is(ran: dict[str, Any]) -> None:
    for fact in ("ticket_id", "router_model"):
        assert runner.invoke(app, ["memory", "forget", "--user", "alice", "--fact", fact]).exit_code == 0
    result = runner.invoke(app, ["memory", "forget", "--user", "alice", "--fact", "ticket_id"])
    said = " ".join(result.stderr.split())  # as one line: the terminal wraps it
    assert result.exit_code == 1 and "error: no fact of the name given is kept about this user" in said
    assert "fix: no fact is kept about this user, only a summary: forgetting everything (--all) drops it" in said
    everything = runner.invoke(app, ["memory", "forget", "--user", "alice", "--all"])
    assert "forgot 0 fact(s) and 1 summary row(s)" in everything.stdout  # the summary the fix named


def test_cost_by_purpose_shows_the_memory_writer_and_the_sweep_counts_memory(ran: dict[str, Any]) -> None:
    report = json.loads(runner.invoke(app, ["cost", "--by", "purpose", "--format", "json"]).stdout)
    writer = next(r for r in report["rows"] if r["key"] == "memory_writer")
    assert writer["calls"] == 1 and writer["input_tokens"] > 0
    swept = as_json("retention", "sweep")
    assert (swept["memories"], swept["memory_facts"]) == (0, 0)  # 180 days from now: nothing expired
    assert "expired user memories (0 facts)" in runner.invoke(app, ["retention", "sweep"]).stdout


def test_facts_left_without_their_memory_row_are_not_shown_and_the_sweep_removes_and_counts_them(
    ran: dict[str, Any],
) -> None:
    with sqlite3.connect(Settings().home / "teamstore.db") as conn:
        conn.execute("DELETE FROM ts_user_memory")  # by hand: the two facts are left
    assert as_json("memory", "show", "--user", "alice")["memories"] == []  # no memory of alice's exists
    assert "nothing is kept about this user" in runner.invoke(app, ["memory", "show", "--user", "alice"]).stdout
    unknown = runner.invoke(app, ["memory", "forget", "--user", "alice", "--fact", "mood"])
    assert unknown.exit_code == 1 and "fix: nothing is kept about this user" in unknown.stderr  # none of the two
    swept = as_json("retention", "sweep")
    assert (swept["memories"], swept["memory_facts"], swept["memory_leftover_facts"]) == (0, 0, 2)
    with sqlite3.connect(Settings().home / "teamstore.db") as conn:
        assert conn.execute("SELECT count(*) FROM ts_user_memory_facts").fetchone() == (0,)
    said = " ".join(runner.invoke(app, ["retention", "sweep"]).stdout.split())  # as wrapped to the terminal
    assert "0 expired user memories (0 facts), 0 leftover memory facts" in said
