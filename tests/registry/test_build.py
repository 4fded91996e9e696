"""Building: a fresh object every call, secrets resolved before the transform, and it runs offline; a
prepared definition is checked and transformed once, and each of its builds loads a fresh copy."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_ext.models.openai import OpenAIChatCompletionClient

from config_registry import BuiltTeam, DefinitionInvalid, Manifest, Registry, SecretUnavailable
from config_registry.build import prepare
from teamstore import examples
from tests.conftest import git
from tests.registry.conftest import dump, triage_json, triage_manifest


@pytest.fixture
def registered(registry: Registry) -> str:
    return registry.add("support_triage", triage_json(), triage_manifest(state_ttl_days=3.5), "v1")


async def test_build_returns_a_new_team_each_call_and_it_runs_offline(
    registry: Registry, registered: str
) -> None:
    first, second = registry.build("support_triage"), registry.build("support_triage")
    assert isinstance(first, BuiltTeam)
    assert isinstance(first.team, RoundRobinGroupChat)
    assert first.team is not second.team
    assert first.participants["researcher"] is not second.participants["researcher"]
    assert first.version == registered
    assert first.persisted == ("researcher",)
    assert first.fingerprints == registry.resolve("support_triage").fingerprints
    assert first.state_ttl_days == 3.5
    assert first.agent_types == dict.fromkeys(
        ("triage", "researcher", "critic"), "autogen_agentchat.agents.AssistantAgent"
    )
    result = await first.team.run(task="hi")
    assert [m.source for m in result.messages] == ["user", "triage", "researcher", "critic"]
    assert "offline-small" in result.messages[-1].to_text()
    assert first.participants["researcher"] in first.team._participants


async def test_single_assistant_builds_as_an_agent(registry: Registry) -> None:
    registry.add_from_factory(
        "teamstore.examples:single_assistant", examples.example_manifest("single_assistant"), "1"
    )
    built = registry.build("single_assistant")
    assert built.kind == "agent"
    assert built.participants == {"assistant": built.team}
    result = await built.team.run(task="hi")
    assert result.messages[-1].source == "assistant"


def test_transform_runs_after_secret_resolution_and_before_load(registry: Registry, registered: str) -> None:
    seen: list[dict[str, Any]] = []

    def transform(component: dict[str, Any]) -> dict[str, Any]:
        seen.append(component)
        changed = dict(component)
        changed["config"] = {**component["config"], "name": "Transformed"}
        return changed

    built = registry.build("support_triage", transform=transform)
    assert built.team.name == "Transformed"
    assert seen and seen[0]["provider"] == "autogen_agentchat.teams.RoundRobinGroupChat"
    assert (
        registry.resolve("support_triage").component["config"]["name"] == "RoundRobinGroupChat"
    )  # stored unchanged


def test_transform_sees_resolved_secrets(registry: Registry) -> None:
    registry.add_from_factory(
        "teamstore.examples:support_triage_openai",
        examples.example_manifest("support_triage_openai"),
        "openai",
    )
    keys: list[str] = []

    def transform(component: dict[str, Any]) -> dict[str, Any]:
        keys.extend(
            p["config"]["model_client"]["config"]["api_key"] for p in component["config"]["participants"]
        )
        return component

    registry.build("support_triage_openai", transform=transform, env={"OPENAI_API_KEY": "sk-resolved"})
    assert keys == ["sk-resolved"] * 3


def test_a_stored_context_too_small_for_a_whole_tool_exchange_is_refused_at_build(
    registry: Registry, registered: str
) -> None:
    path = registry.path / "teams" / "support_triage" / "component.json"
    path.write_text(path.read_text().replace('"max_messages": 20', '"max_messages": 3'))
    git(registry.path, "commit", "-qam", "registered before such sizes were refused")
    with pytest.raises(DefinitionInvalid) as caught:
        registry.build("support_triage")
    assert caught.value.field == "config.participants.1.config.model_context.config.max_messages"
    assert caught.value.hint == "raise max_messages to 4, or lower keep_first to 0"


def test_hand_edited_disallowed_provider_is_refused_at_build(registry: Registry, registered: str) -> None:
    path = registry.path / "teams" / "support_triage" / "component.json"
    path.write_text(
        path.read_text().replace("autogen_agentchat.conditions.MaxMessageTermination", "os.system")
    )
    git(registry.path, "commit", "-qam", "sneaky")
    with pytest.raises(DefinitionInvalid) as caught:
        registry.build("support_triage")
    assert caught.value.field == "config.termination_condition.config.conditions.1.provider"
    assert registry.build(f"support_triage@{registered}").version == registered


async def test_a_prepared_definition_builds_what_was_checked_whatever_happens_to_the_definition_after(
    registry: Registry, registered: str
) -> None:
    definition = registry.resolve("support_triage")
    prepared = prepare(definition)
    conditions = definition.component["config"]["termination_condition"]["config"]["conditions"]
    conditions[1]["provider"] = "os.system"  # the caller's dict changed after the checks
    first, second = prepared.build(), prepared.build()
    assert isinstance(first.team, RoundRobinGroupChat) and first.team is not second.team
    assert first.agent_types == registry.build("support_triage").agent_types
    result = await first.team.run(task="hi")
    assert [m.source for m in result.messages] == ["user", "triage", "researcher", "critic"]
    with pytest.raises(DefinitionInvalid):
        prepare(definition)  # prepared again, it is checked again


def test_a_prepared_definitions_transform_sees_its_secret_references_and_each_build_resolves_them(
    registry: Registry,
) -> None:
    registry.add_from_factory(
        "teamstore.examples:support_triage_openai",
        examples.example_manifest("support_triage_openai"),
        "openai",
    )
    seen: list[Any] = []

    def transform(component: dict[str, Any]) -> dict[str, Any]:
        seen.extend(p["config"]["model_client"]["config"]["api_key"] for p in component["config"]["participants"])
        return component

    prepared = prepare(registry.resolve("support_triage_openai"), transform=transform)
    assert seen == [{"$secret": "env:OPENAI_API_KEY"}] * 3
    assert prepared.build(env={"OPENAI_API_KEY": "sk-first"}).team is not None
    assert seen == [{"$secret": "env:OPENAI_API_KEY"}] * 3  # transformed once, not at every build
    with pytest.raises(SecretUnavailable):
        prepared.build(env={})


def _without_the_model(component: dict[str, Any]) -> dict[str, Any]:
    """A transform that loses the model client's model (or a definition edited by hand, or loaded by another
    AutoGen): pydantic's error quotes the config it was given."""
    changed = copy.deepcopy(component)
    del changed["config"]["participants"][0]["config"]["model_client"]["config"]["model"]
    return changed


@pytest.mark.parametrize("how", ["build", "prepared"])
def test_a_definition_that_does_not_load_is_said_without_the_secrets_resolved_into_it(
    registry: Registry, how: str
) -> None:
    client = OpenAIChatCompletionClient(model="gpt-4o-mini", api_key="k", base_url="https://gateway.example/v1")
    registry.add("desk", dump(RoundRobinGroupChat([AssistantAgent("desk", model_client=client)], max_turns=1)),
                 Manifest(name="desk", secrets={"participants.0.config.model_client.config.api_key": "env:DESK_KEY"}),
                 "v1")
    env = {"DESK_KEY": "sk-S3CRET"}
    with pytest.raises(DefinitionInvalid) as raised:
        if how == "build":
            registry.build("desk", transform=_without_the_model, env=env)
        else:
            prepare(registry.resolve("desk"), transform=_without_the_model).build(env)
    said = str(raised.value)
    assert "Field required" in said and "**********" in said and "S3CRET" not in said
    assert raised.value.__cause__ is None and raised.value.__suppress_context__  # no traceback quotes them
