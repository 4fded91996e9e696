"""Semantic diff and the compatibility check that guards stored sessions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination, SourceMatchTermination
from autogen_agentchat.teams import Swarm

from config_registry import Manifest, Registry
from config_registry.errors import UnknownVersion
from teamstore import examples
from teamstore.offline import OfflineChatCompletionClient
from tests.registry.conftest import calling_client, dump, triage_json, triage_manifest
from tests.registry.factories import ResearchAgent


def _add(registry: Registry, component: dict[str, Any], message: str, **manifest: Any) -> str:
    return registry.add("support_triage", component, triage_manifest(**manifest), message)


def _researcher(component: dict[str, Any]) -> dict[str, Any]:
    participant: dict[str, Any] = component["config"]["participants"][1]
    return participant


def test_changed_system_message_is_compatible(registry: Registry) -> None:
    v1 = _add(registry, triage_json(), "v1")
    v2 = _add(registry, dump(examples.support_triage_v2_prompt()), "prompt")
    report = registry.check("support_triage", v1, v2)
    assert report.compatible
    assert report.reasons == []
    assert report.fingerprints["a"] == report.fingerprints["b"]
    assert registry.diff("support_triage", v1, v2).lines() == ["researcher: system message changed"]


def test_changed_model_is_compatible(registry: Registry) -> None:
    v1 = _add(registry, triage_json(), "v1")
    component = triage_json()
    _researcher(component)["config"]["model_client"]["config"]["model"] = "offline-large"
    v2 = _add(registry, component, "bigger model")
    assert registry.check("support_triage", v1, v2).compatible
    diff = registry.diff("support_triage", v1, v2)
    assert diff.models == {
        "researcher": [
            "OfflineChatCompletionClient:offline-small",
            "OfflineChatCompletionClient:offline-large",
        ]
    }


def test_renamed_persisted_participant_is_incompatible(registry: Registry) -> None:
    v1 = _add(registry, triage_json(), "v1")
    v2 = _add(registry, dump(examples.support_triage_v2_renamed()), "rename", persist=["investigator"])
    report = registry.check("support_triage", v1, v2)
    assert not report.compatible
    assert report.reasons == ["persisted participant 'researcher' was renamed or removed"]
    diff = registry.diff("support_triage", v1, v2)
    assert diff.participants_renamed == {"researcher": "investigator"}
    assert diff.persistence == {"persist": [["researcher"], ["investigator"]]}


def test_removed_persisted_participant_is_incompatible(registry: Registry) -> None:
    v1 = _add(registry, triage_json(), "v1")
    component = triage_json()
    del component["config"]["participants"][1]
    v2 = _add(registry, component, "no researcher", persist=[])
    report = registry.check("support_triage", v1, v2)
    assert not report.compatible
    assert "'researcher' was renamed or removed" in report.reasons[0]
    assert registry.diff("support_triage", v1, v2).participants_removed == ["researcher"]


def test_changed_context_bound_is_incompatible_and_explained(registry: Registry) -> None:
    v1 = _add(registry, triage_json(), "v1")
    component = triage_json()
    _researcher(component)["config"]["model_context"]["config"]["max_messages"] = 10
    v2 = _add(registry, component, "smaller context")
    report = registry.check("support_triage", v1, v2)
    assert not report.compatible
    assert report.reasons == ["researcher: context bound changed max_messages 20 -> 10"]
    assert report.fingerprints["a"]["researcher"] != report.fingerprints["b"]["researcher"]


_STANDALONE_CHECK = """
import json, sys
from config_registry import Registry
report = Registry(sys.argv[1]).check("support_triage", sys.argv[2], sys.argv[3])
print(json.dumps(report.to_dict()))
"""


def test_check_without_teamstore_imported_sees_a_changed_context_bound(registry: Registry) -> None:
    # A CI job may use config_registry alone; teamstore's bounding context registers itself on import.
    v1 = _add(registry, triage_json(), "v1")
    component = triage_json()
    _researcher(component)["config"]["model_context"]["config"]["max_messages"] = 10
    v2 = _add(registry, component, "smaller context")
    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-c", _STANDALONE_CHECK, str(registry.path), v1, v2],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout
    report = json.loads(out)
    assert report["compatible"] is False
    assert report["reasons"] == ["researcher: context bound changed max_messages 20 -> 10"]
    assert report["fingerprints"] == registry.check("support_triage", v1, v2).fingerprints


def test_retyped_persisted_participant_is_incompatible(registry: Registry) -> None:
    v1 = _add(registry, triage_json(), "v1")
    component = triage_json()
    retyped = dump(ResearchAgent("researcher", model_client=OfflineChatCompletionClient()))
    for key in ("provider", "description", "label"):
        _researcher(component)[key] = retyped[key]
    v2 = _add(registry, component, "retype", allowed_providers=["tests.registry.factories."])
    report = registry.check("support_triage", v1, v2)
    assert not report.compatible
    assert report.reasons == [
        "researcher: agent type changed autogen_agentchat.agents.AssistantAgent -> tests.registry.factories.ResearchAgent"
    ]
    built = registry.build(f"support_triage@{v2}")
    assert type(built.participants["researcher"]).__name__ == "ResearchAgent"
    assert built.agent_types["researcher"] == "tests.registry.factories.ResearchAgent"
    assert registry.diff("support_triage", v1, v2).agent_types["researcher"][1].endswith("ResearchAgent")


def test_diff_covers_tools_termination_and_allowances(registry: Registry) -> None:
    v1 = _add(registry, triage_json(), "v1")
    component = triage_json()
    component["config"]["termination_condition"]["config"]["conditions"][1]["config"]["max_messages"] = 6
    v2 = _add(registry, component, "longer", notes="x", allowed_providers=["mycompany.agents."])
    diff = registry.diff("support_triage", v1, v2)
    assert diff.termination is not None
    before, after = diff.termination
    assert "max_messages=8" in before and "max_messages=6" in after and "TERMINATE" in after
    assert diff.allowances == {"allowed_providers": [[], ["mycompany.agents."]]}
    assert "allowance: allowed_providers [] -> ['mycompany.agents.']" in diff.to_dict()["changes"]
    assert registry.diff("support_triage", v1, v1).changed is False


def test_diff_tells_termination_conditions_joined_by_and_from_those_joined_by_or(registry: Registry) -> None:
    v1 = _add(registry, triage_json(), "either")
    component = triage_json()
    component["config"]["termination_condition"]["provider"] = "autogen_agentchat.base.AndTerminationCondition"
    component["config"]["termination_condition"]["label"] = "AndTerminationCondition"
    v2 = _add(registry, component, "both")
    diff = registry.diff("support_triage", v1, v2)
    assert diff.termination is not None
    before, after = diff.termination
    assert ") or MaxMessageTermination(" in before and ") and MaxMessageTermination(" in after


def test_diff_shows_which_sources_a_termination_condition_listens_to(registry: Registry) -> None:
    def ended_by(source: str) -> dict[str, Any]:
        component = triage_json()
        component["config"]["termination_condition"]["config"]["conditions"][0] = dump(SourceMatchTermination([source]))
        return component

    v1, v2 = _add(registry, ended_by("critic"), "critic ends"), _add(registry, ended_by("triage"), "triage ends")
    diff = registry.diff("support_triage", v1, v2)
    assert diff.termination is not None
    before, after = diff.termination
    assert "sources=['critic']" in before and "sources=['triage']" in after


def test_diff_names_the_handoffs_added_and_removed_by_their_target(registry: Registry) -> None:
    def desk(planner_hands_to: list[str]) -> dict[str, Any]:
        planner = AssistantAgent("planner", model_client=calling_client(), handoffs=planner_hands_to)
        accountant = AssistantAgent("accountant", model_client=calling_client(), handoffs=["planner"])
        return dump(Swarm([planner, accountant], termination_condition=MaxMessageTermination(4)))

    v1 = registry.add("desk", desk(["accountant"]), Manifest(name="desk"), "v1")
    v2 = registry.add("desk", desk(["accountant", "user"]), Manifest(name="desk"), "v2")
    assert registry.diff("desk", v1, v2).lines() == ["planner: handoff to 'user' added"]
    assert registry.diff("desk", v2, v1).lines() == ["planner: handoff to 'user' removed"]


def test_newly_persisted_participant_is_compatible_with_a_note(registry: Registry) -> None:
    v1 = _add(registry, triage_json(), "v1", persist=[])
    v2 = _add(registry, triage_json(), "persist researcher")
    report = registry.check("support_triage", v1, v2)
    assert report.compatible
    assert report.notes == ["'researcher' is newly persisted: it starts with fresh state"]


def test_diff_shows_tools_and_the_source_code_allowance(registry: Registry) -> None:
    from tests.registry.test_validation import _with_tool

    plain = _with_tool()
    plain["config"]["participants"][0]["config"]["workbench"][0]["config"]["tools"] = []
    manifest = {"name": "tooled", "persist": ["researcher"], "context_bound": 20}
    v1 = registry.add("tooled", plain, triage_manifest(**manifest), "no tools")
    v2 = registry.add(
        "tooled", _with_tool(), triage_manifest(**manifest, allow_source_code_tools=True), "tool"
    )
    diff = registry.diff("tooled", v1, v2)
    assert diff.tools == {"researcher": [["add_two"], []]}
    assert diff.allowances["allow_source_code_tools"] == [False, True]
    assert "researcher: tool 'add_two' added" in diff.lines()
    assert registry.check("tooled", v1, v2).compatible
    assert Registry.from_path(registry.path).resolve("tooled").version == v2


def test_diff_shows_every_other_change_by_path(registry: Registry) -> None:
    v1 = _add(registry, triage_json(), "v1")
    component = triage_json()
    participants = component["config"]["participants"]
    participants[0]["config"]["description"] = "Routes requests."
    participants[0], participants[2] = participants[2], participants[0]  # who speaks first
    component["config"]["max_turns"] = 5
    v2 = _add(registry, component, "reordered")
    lines = registry.diff("support_triage", v1, v2).lines()
    assert "participant order triage, researcher, critic -> critic, researcher, triage" in lines
    assert 'triage: config.description "The triage of the support team." -> "Routes requests."' in lines
    assert "team: config.max_turns absent -> 5" in lines


def test_diff_shows_a_tool_whose_source_code_changed(registry: Registry) -> None:
    from tests.registry.test_validation import _with_tool

    manifest = {"name": "tooled", "persist": ["researcher"], "context_bound": 20, "allow_source_code_tools": True}
    v1 = registry.add("tooled", _with_tool(), triage_manifest(**manifest), "tool")
    changed = _with_tool()
    tool = changed["config"]["participants"][0]["config"]["workbench"][0]["config"]["tools"][0]
    tool["config"]["source_code"] = tool["config"]["source_code"].replace("return a + b", "return a - b")
    assert "a - b" in tool["config"]["source_code"]
    v2 = registry.add("tooled", changed, triage_manifest(**manifest), "tool body changed")
    (line,) = registry.diff("tooled", v1, v2).lines()
    assert line.startswith("researcher: config.workbench[0].config.tools[0].config.source_code ")
    # Long values are shown around their first difference: two identical-looking prefixes would tell a
    # reviewer nothing.
    before, after = line.split(" -> ")
    assert "a + b" in before and "a - b" in after


@pytest.mark.parametrize("given", [None, 1234567, b"abc1234"])
def test_a_version_given_to_diff_or_check_that_is_not_text_is_refused_with_a_typed_error(
    registry: Registry, given: Any
) -> None:
    # None compared the default label's version with itself and called it compatible; a number raised TypeError.
    registry.add("support_triage", triage_json(), triage_manifest(), "v1", label="production")
    for compare in (registry.diff, registry.check):
        with pytest.raises(UnknownVersion, match="is text; got"):
            compare("support_triage", given, "production")
