"""A team's user memory is declared in its manifest: checked when registered and built, shown, diffed, and a
fact whose type changes is a breaking change ``registry check`` reports."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import UserProxyAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from pydantic import ValidationError
from typer.testing import CliRunner

from config_registry import Manifest, MemoryDeclaration, Registry
from config_registry.build import build_team
from config_registry.errors import DefinitionInvalid
from teamstore import examples
from teamstore.cli import app
from tests.registry.conftest import dump, left_unchanged, triage_json

MEMORY = {"participants": ["triage", "researcher"], "writer": "triage", "facts": {"ticket_id": "str"}}
runner = CliRunner()


def manifest(**memory: Any) -> Manifest:
    declared = {**MEMORY, **memory}
    return examples.example_manifest("support_triage").model_copy(
        update={"memory": MemoryDeclaration(**declared)})


def test_the_example_team_registers_with_its_memory_and_shows_it(registry: Registry) -> None:
    registry.add("support_triage", triage_json(), examples.example_manifest("support_triage"), "v1")
    shown = registry.resolve("support_triage").to_dict()["manifest"]["memory"]
    assert shown == {"enabled": True, "participants": ["triage", "researcher"], "writer": "triage",
                     "summary_tokens": 150, "facts": {"ticket_id": "str", "router_model": "str"},
                     "scope": None, "retention_days": None}


@pytest.mark.parametrize(("memory", "field", "says"), [
    ({"participants": ["triage", "analyst"]}, "memory.participants", "'analyst', which is not a participant"),
    ({"writer": "analyst"}, "memory.writer", "'analyst', which is not a participant"),
])
def test_a_memory_naming_a_participant_the_team_lacks_is_refused(
    registry: Registry, registry_path: Path, memory: dict[str, Any], field: str, says: str
) -> None:
    with left_unchanged(registry_path), pytest.raises(DefinitionInvalid) as raised:
        registry.add("support_triage", triage_json(), manifest(**memory), "v1")
    assert raised.value.field == field and says in raised.value.message


def test_a_participant_that_takes_no_memory_or_a_writer_without_a_model_client_is_refused(
    registry: Registry, registry_path: Path
) -> None:
    team = RoundRobinGroupChat([UserProxyAgent("customer"), examples.single_assistant()],
                               termination_condition=MaxMessageTermination(2))
    base = Manifest(name="desk", persist=["assistant"], context_bound=20)
    for memory, field, says in (
        (MemoryDeclaration(participants=["customer"], writer="assistant"), "memory.participants", "takes no memory"),
        (MemoryDeclaration(participants=["assistant"], writer="customer"), "memory.writer", "has no model client"),
    ):
        with left_unchanged(registry_path), pytest.raises(DefinitionInvalid) as raised:
            registry.add("desk", dump(team), base.model_copy(update={"memory": memory}), "v1")
        assert raised.value.field == field and says in raised.value.message


@pytest.mark.parametrize("memory", [
    {"participants": []}, {"participants": ["triage", "triage"]}, {"summary_tokens": 0},
    {"summary_tokens": 100_000}, {"summary_tokens": True}, {"summary_tokens": "150"}, {"retention_days": True},
    {"facts": {"Ticket ID": "str"}}, {"facts": {"ticket_id": "list"}},
    {"facts": {f"f{i}": "str" for i in range(40)}}, {"scope": "../other"}, {"retention_days": 0},
    {"bogus": True},
])
def test_a_memory_declaration_out_of_shape_is_refused_by_the_manifest(memory: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        MemoryDeclaration(**{**MEMORY, **memory})


def test_a_stored_manifest_naming_a_missing_participant_is_refused_at_build(registry: Registry) -> None:
    # As a hand edit of the repository (committed, so the registry reads it) would leave it.
    version = registry.add("support_triage", triage_json(), manifest(), "v1")
    definition = registry.resolve(f"support_triage@{version}")
    edited = replace(definition, manifest=manifest(participants=["ghost"]))
    with pytest.raises(DefinitionInvalid, match="'ghost', which is not a participant"):
        build_team(edited)


def test_diff_names_every_memory_change_and_check_breaks_on_a_facts_type(registry: Registry) -> None:
    v1 = registry.add("support_triage", triage_json(), manifest(facts={"ticket_id": "str", "visits": "int"}), "v1")
    v2 = registry.add("support_triage", triage_json(), manifest(
        facts={"ticket_id": "int", "router_model": "str"}, summary_tokens=90, scope="support"), "v2")
    diff = registry.diff("support_triage", v1, v2)
    assert diff.memory == {"summary_tokens": [150, 90], "scope": ["support_triage", "support"],
                           "fact router_model": [None, "str"], "fact ticket_id": ["str", "int"],
                           "fact visits": ["int", None]}
    assert "memory: fact ticket_id str -> int" in diff.lines()
    assert "memory: fact visits int -> absent" in diff.lines()
    report = registry.check("support_triage", v1, v2)
    assert not report.compatible
    assert report.reasons == ["memory fact 'ticket_id' changed type str -> int: the values users' memory holds "
                              "for it would no longer pass their type"]
    assert any("'visits' is no longer declared" in n for n in report.notes)
    assert any("memory scope changed 'support_triage' -> 'support'" in n for n in report.notes)


def test_adding_facts_or_switching_memory_off_is_compatible_with_a_note(registry: Registry) -> None:
    v1 = registry.add("support_triage", triage_json(), manifest(), "v1")
    v2 = registry.add("support_triage", triage_json(), manifest(facts={"ticket_id": "str", "visits": "int"}), "v2")
    v3 = registry.add("support_triage", triage_json(), manifest(enabled=False), "v3")
    assert registry.check("support_triage", v1, v2).compatible
    off = registry.check("support_triage", v2, v3)
    assert off.compatible and any("no longer read or written" in n for n in off.notes)
    assert registry.diff("support_triage", v2, v3).memory["enabled"] == [True, False]


def desk(**memory: Any) -> Manifest:
    """The example team's definition registered again as "support_desk", with its own memory declaration."""
    return manifest(**memory).model_copy(update={"name": "support_desk"})


def test_two_teams_sharing_a_memory_scope_cannot_give_a_fact_two_types(registry: Registry) -> None:
    # One team's stored ticket_id ("T-1") would fail the other's type, for every user they share.
    registry.add("support_triage", triage_json(), manifest(scope="customer"), "v1")
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_desk", triage_json(), desk(scope="customer", facts={"ticket_id": "int"}), "v1")
    assert caught.value.field == "memory.facts.ticket_id"
    said = caught.value.message
    assert "'support_desk'" in said and "'support_triage'" in said and "'customer'" in said
    assert "int" in said and "str" in said
    assert caught.value.hint
    # The same type, or a scope of its own, is fine.
    registry.add("support_desk", triage_json(), desk(scope="customer"), "same type")
    registry.add("support_desk", triage_json(), desk(scope="desk", facts={"ticket_id": "int"}), "own scope")


def test_a_team_sharing_another_teams_default_scope_or_its_labelled_version_is_checked(registry: Registry) -> None:
    v1 = registry.add("support_triage", triage_json(), manifest(), "v1", label="production")  # scope: its name
    v2 = registry.add("support_triage", triage_json(), manifest(facts={"router_model": "str"}), "v2")
    declared = desk(scope="support_triage", facts={"ticket_id": "int"})
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:  # production still runs v1
        registry.add("support_desk", triage_json(), declared, "v1")
    assert "label production" in caught.value.message and v1[:12] in caught.value.message
    registry.label("support_triage", v2, "production", reason="v2 ships")
    registry.add("support_desk", triage_json(), declared, "v1")  # no version in use declares ticket_id now
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:  # nor may one again
        registry.label("support_triage", v1, "production", reason="roll back")
    assert caught.value.field == "memory.facts.ticket_id" and "'support_desk'" in caught.value.message
    assert registry.resolve("support_triage@production").version == v2


def test_the_command_line_declares_memory_and_refuses_json_that_is_not_an_object(registry_path: Path) -> None:
    add = ["registry", "add", "support_triage", "--factory", "teamstore.examples:support_triage", "--persist",
           "researcher", "--context-bound", "20"]
    result = runner.invoke(app, [*add, "--memory", json.dumps(MEMORY), "--json"])
    assert result.exit_code == 0, result.output
    shown = runner.invoke(app, ["registry", "show", "support_triage"])
    said = " ".join(shown.stdout.split())
    assert "memory: on, scope support_triage, given to triage, researcher, written by triage's model" in said
    assert said.endswith("retention the runtime default") or "retention the runtime default " in said
    assert "default days" not in said and "None" not in said
    for bad, says in (("[1]", "--memory is not a JSON object"), ('{"writer": "triage"}', "participants"),
                      ('{"participants": ["triage"], "writer": "triage",}', "--memory is not JSON: Expecting "
                       "property name"),
                      ('{"participants": ' * 2000, "--memory is nested too deeply"),
                      (json.dumps({**MEMORY, "participants": ["ghost"]}), "'ghost', which is not a participant")):
        result = runner.invoke(app, [*add, "--memory", bad])
        assert result.exit_code == 1 and says in result.stderr.replace("\n", " "), result.stderr
