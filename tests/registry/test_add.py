"""Registering definitions: supported team types, storage layout, versions, factories."""

from __future__ import annotations

import gc
import json
import sys
import warnings
from importlib.abc import MetaPathFinder
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import HandoffTermination, MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat, SelectorGroupChat, Swarm
from autogen_ext.models.openai import OpenAIChatCompletionClient
from pydantic import ValidationError

from config_registry import FactoryInvalid, Manifest, Registry, UnknownTeam
from config_registry.errors import DefinitionInvalid
from teamstore.context import BoundedChatCompletionContext
from teamstore.offline import OfflineChatCompletionClient
from tests.conftest import git
from tests.registry.conftest import calling_client, dump, left_unchanged, triage_json, triage_manifest


def _agent(name: str, bounded: bool = False, **kwargs: Any) -> AssistantAgent:
    context = BoundedChatCompletionContext(max_messages=10) if bounded else None
    return AssistantAgent(
        name,
        model_client=OfflineChatCompletionClient(),
        model_context=context,
        system_message=f"You are {name}.",
        **kwargs,
    )


def _swarm_agent(name: str, handoff: str, bounded: bool = False) -> AssistantAgent:
    client = calling_client()  # handoffs need a model that declares function calling
    context = BoundedChatCompletionContext(max_messages=10) if bounded else None
    return AssistantAgent(name, model_client=client, handoffs=[handoff], model_context=context)


def _teams() -> dict[str, Any]:
    stop = MaxMessageTermination(3)
    return {
        "round_robin": RoundRobinGroupChat([_agent("a", True), _agent("b")], termination_condition=stop),
        "selector": SelectorGroupChat(
            [_agent("a", True), _agent("b")],
            model_client=OfflineChatCompletionClient(),
            termination_condition=stop,
        ),
        "swarm": Swarm(
            [_swarm_agent("a", "b", bounded=True), _swarm_agent("b", "a")],
            termination_condition=stop | HandoffTermination(target="user"),
        ),
        "single": _agent("a", True),
    }


@pytest.mark.parametrize("kind", ["round_robin", "selector", "swarm", "single"])
async def test_supported_team_types_register_build_and_run(registry: Registry, kind: str) -> None:
    component = dump(_teams()[kind])
    version = registry.add(
        kind.replace("_", "-"),
        component,
        Manifest(name=kind.replace("_", "-"), persist=["a"], context_bound=10),
        "first",
    )
    built = registry.build(kind.replace("_", "-"))
    assert built.version == version
    assert built.kind == ("agent" if kind == "single" else "team")
    assert set(built.participants) == ({"a"} if kind == "single" else {"a", "b"})
    assert built.participants["a"].name == "a"
    assert built.persisted == ("a",)
    assert list(built.fingerprints) == ["a"]
    assert dump(built.team) == registry.resolve(kind.replace("_", "-")).component
    result = await built.team.run(task="hi")
    assert result.messages[0].content == "hi"
    assert len(result.messages) >= 2


def test_storage_layout_is_plain_sorted_json_one_folder_per_team(registry: Registry) -> None:
    version = registry.add("support_triage", triage_json(), triage_manifest(), "first version")
    folder = registry.path / "teams" / "support_triage"
    component_text = (folder / "component.json").read_text()
    assert component_text.endswith("}\n")
    assert component_text == json.dumps(json.loads(component_text), sort_keys=True, indent=2) + "\n"
    assert json.loads((folder / "manifest.json").read_text())["persist"] == ["researcher"]
    assert git(registry.path, "rev-parse", "HEAD").strip() == version
    assert git(registry.path, "log", "-1", "--format=%s").strip() == "first version"
    assert git(registry.path, "status", "--porcelain") == ""


def test_version_is_the_commit_and_unchanged_add_returns_it(registry: Registry) -> None:
    first = registry.add("support_triage", triage_json(), triage_manifest(), "first")
    again = registry.add("support_triage", triage_json(), triage_manifest(), "same again")
    assert again == first
    assert len(registry.history("support_triage")) == 1


def test_author_is_recorded(registry: Registry) -> None:
    registry.add("support_triage", triage_json(), triage_manifest(), "first", author="Ada <ada@example.org>")
    assert git(registry.path, "log", "-1", "--format=%an <%ae>").strip() == "Ada <ada@example.org>"
    assert registry.resolve("support_triage").author == "Ada <ada@example.org>"


def test_works_without_any_git_identity(registry_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(registry_path.parent / "nohome"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    registry = Registry(registry_path, create=True)
    version = registry.add("support_triage", triage_json(), triage_manifest(), "first")
    assert registry.resolve("support_triage").version == version


def test_a_version_is_authored_by_who_registers_it_as_its_label_move_is(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GIT_AUTHOR_NAME")
    monkeypatch.delenv("GIT_AUTHOR_EMAIL")
    for variable in ("LOGNAME", "USER", "LNAME", "USERNAME"):  # where getpass looks for the login name first
        monkeypatch.setenv(variable, "ada")
    registry.add("support_triage", triage_json(), triage_manifest(), "first", label="staging")
    version, move = sorted(registry.history("support_triage"), key=lambda entry: entry.kind, reverse=True)
    assert (version.kind, version.author) == ("version", "ada <ada@teamstore.invalid>")
    assert (move.kind, move.author) == ("label", "ada")


def test_add_from_factory(registry: Registry) -> None:
    version = registry.add_from_factory("teamstore.examples:support_triage", triage_manifest(), "from code")
    assert registry.resolve("support_triage").version == version
    assert registry.resolve("support_triage").component == triage_json()


@pytest.mark.parametrize(
    ("factory", "fragment"),
    [
        ("tests.registry.factories:raises", "raised RuntimeError"),
        ("tests.registry.factories:exits", "raised SystemExit"),
        ("tests.registry.factories:not_a_team", "returned a dict"),
        ("tests.registry.factories:built_later", "is an async function: calling it returned a coroutine"),
        ("tests.registry.factories:the_class_itself", "returned the class RoundRobinGroupChat itself"),
        ("tests.registry.factories:missing", "cannot import"),
        ("no_such_module_xyz:build", "cannot import"),
        ("tests.registry.factory_fails_on_import:build", "raised RuntimeError"),
        ("teamstore.examples", "not 'module:function'"),
    ],
)
def test_bad_factories_are_refused(registry: Registry, factory: str, fragment: str) -> None:
    with left_unchanged(registry.path), pytest.raises(FactoryInvalid) as caught:
        registry.add_from_factory(factory, triage_manifest(), "bad")
    assert fragment in caught.value.message
    assert caught.value.hint


def test_an_async_factory_is_refused_without_a_warning_about_its_coroutine(registry: Registry) -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(FactoryInvalid):
            registry.add_from_factory("tests.registry.factories:built_later", triage_manifest(), "bad")
        gc.collect()  # a coroutine left unclosed warns when it is collected
    assert [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)] == []


class _NoAzure(MetaPathFinder):
    """Finds no ``azure`` package, as Python's own finders do where it is not installed."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name.partition(".")[0] == "azure":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


@pytest.fixture
def without_azure(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as one without autogen-ext's ``azure`` extra, whether or not it is installed here."""
    for name in [n for n in sys.modules if n.partition(".")[0] == "azure" or n.startswith("autogen_ext.auth.azure")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_NoAzure(), *sys.meta_path])


AZURE_CLIENT = {
    "provider": "autogen_ext.models.openai.AzureOpenAIChatCompletionClient", "component_type": "model",
    "version": 1, "component_version": 1,
    "config": {"model": "gpt-4o", "azure_deployment": "gpt-4o", "api_version": "2024-06-01",
               "azure_endpoint": "https://example.openai.azure.com", "api_key": "**********"},
}


@pytest.mark.usefixtures("without_azure")
def test_a_team_that_needs_a_missing_package_is_told_to_install_it(registry: Registry) -> None:
    install = 'pip install "autogen-ext[azure]"'
    with left_unchanged(registry.path), pytest.raises(FactoryInvalid) as caught:
        registry.add_from_factory("tests.registry.factories:azure_agent", triage_manifest(), "azure")
    assert "cannot be dumped: ModuleNotFoundError" in caught.value.message
    assert "'azure'" in (caught.value.hint or "") and install in (caught.value.hint or "")
    assert "AutoGen component" not in (caught.value.hint or "")
    # Registered as JSON, it is refused at the round trip with the same fix.
    agent = dump(AssistantAgent("researcher", model_client=OfflineChatCompletionClient()))
    agent["config"]["model_client"] = AZURE_CLIENT
    manifest = Manifest(name="researcher", secrets={"model_client.config.api_key": "env:AZURE_OPENAI_API_KEY"})
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as refused:
        registry.add("researcher", agent, manifest, "azure")
    assert refused.value.field == "config.model_client"
    assert "'azure'" in (refused.value.hint or "") and install in (refused.value.hint or "")


@pytest.mark.usefixtures("without_azure")
def test_a_stored_team_that_needs_a_missing_package_is_told_to_install_it_at_build(registry: Registry) -> None:
    manifest = Manifest(name="researcher", secrets={"model_client.config.api_key": "env:AZURE_OPENAI_API_KEY"})
    agent = AssistantAgent("researcher", model_client=OpenAIChatCompletionClient(model="gpt-4o", api_key="sk-1"))
    registry.add("researcher", dump(agent), manifest, "openai")
    path = registry.path / "teams" / "researcher" / "component.json"
    stored = json.loads(path.read_text())
    stored["config"]["model_client"] = {**AZURE_CLIENT, "config": {
        **AZURE_CLIENT["config"], "api_key": {"$secret": "env:AZURE_OPENAI_API_KEY"}}}
    path.write_text(json.dumps(stored))
    git(registry.path, "commit", "-qam", "moved to Azure on a machine with the azure extra")
    with pytest.raises(DefinitionInvalid) as caught:
        registry.build("researcher", env={"AZURE_OPENAI_API_KEY": "sk-env"})
    assert "ModuleNotFoundError" in caught.value.message
    assert 'pip install "autogen-ext[azure]"' in (caught.value.hint or "")


def test_manifest_name_must_match(registry: Registry) -> None:
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("other", triage_json(), triage_manifest(), "first")
    assert caught.value.field == "manifest.name"


@pytest.mark.parametrize("name", ["../evil", "a/b", "Upper", "", "x" * 65, "..", "t2\n"])
def test_team_names_are_validated(registry: Registry, name: str) -> None:
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid):
        registry.add(name, triage_json(), triage_manifest(), "first")
    with pytest.raises(DefinitionInvalid):
        registry.resolve(f"{name}@production")
    with pytest.raises(ValidationError):
        Manifest(name=name)


@pytest.mark.parametrize(
    "given", [{"context_bound": True}, {"context_bound": "20"}, {"state_ttl_days": True}, {"state_ttl_days": "7"}]
)
def test_a_manifest_number_given_as_a_boolean_or_text_is_refused(given: dict[str, Any]) -> None:
    # A manifest read from JSON (a file kept beside the team, or one `registry recover` reads): `true` is not a day.
    with pytest.raises(ValidationError):
        Manifest.model_validate({"name": "support_triage", **given})
    assert Manifest(name="support_triage", context_bound=20, state_ttl_days=7).state_ttl_days == 7


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize(
    "path", ["config.max_turns", "config.participants.0.config.model_client.config.temperature"]
)
def test_a_number_json_cannot_hold_is_refused_naming_its_path_not_stored_as_null(
    registry: Registry, number: float, path: str
) -> None:
    # AutoGen's component model writes NaN and Infinity out as null: max_turns NaN became "no turn limit".
    component = triage_json()
    *parents, last = path.split(".")
    node: Any = component
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[last] = number
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("support_triage", component, triage_manifest(), "first")
    assert caught.value.field == path
    assert "a number must be finite" in caught.value.message
    assert caught.value.hint


@pytest.mark.parametrize("number", [float("nan"), float("inf")])
@pytest.mark.parametrize("field", ["state_ttl_days", "memory.retention_days"])
def test_a_manifest_number_that_is_nan_or_infinite_is_refused_as_not_finite(number: float, field: str) -> None:
    # Was "Input should be less than or equal to 3650" for NaN, which is no number at all.
    given: dict[str, Any] = {"state_ttl_days": number} if field == "state_ttl_days" else {
        "memory": {"participants": ["triage"], "writer": "triage", "retention_days": number}}
    with pytest.raises(ValidationError) as caught:
        Manifest.model_validate({"name": "support_triage", **given})
    error = caught.value.errors()[0]
    assert ".".join(map(str, error["loc"])) == field
    assert error["msg"] == "Input should be a finite number"


def test_not_a_team_component_is_refused(registry: Registry) -> None:
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add(
            "support_triage", dump(OfflineChatCompletionClient()), triage_manifest(persist=[]), "model"
        )
    assert caught.value.field == "component_type"


def test_unknown_team(registry: Registry) -> None:
    with pytest.raises(UnknownTeam) as caught:
        registry.resolve("nobody")
    assert "no team of the name given is registered" in caught.value.message
    assert "nobody" not in str(caught.value)  # a name given may be a user's words: never repeated


def test_a_definition_over_the_size_limit_is_refused_naming_the_limit_and_its_size(registry: Registry) -> None:
    from config_registry.registration import MAX_DEFINITION_BYTES

    prompt = "word " * (MAX_DEFINITION_BYTES // 5 + 1)
    team = RoundRobinGroupChat([AssistantAgent("triage", OfflineChatCompletionClient(), system_message=prompt)],
                               termination_condition=MaxMessageTermination(3))
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid) as caught:
        registry.add("big", team, Manifest(name="big"), "a prompt of a megabyte")
    assert caught.value.field == "component"
    size = len(json.dumps(dump(team), sort_keys=True, indent=2, ensure_ascii=False).encode()) + 1  # its newline
    assert f"is {size:,} bytes of JSON as stored, over the 1,048,576-byte (1 MiB) limit" in caught.value.message
    assert "word word" not in str(caught.value)
    assert "memory or a tool" in (caught.value.hint or "")
    # As JSON, as a dump, and a hundred kilobytes of prompt is no problem.
    with left_unchanged(registry.path), pytest.raises(DefinitionInvalid, match="1 MiB"):
        registry.add("big", dump(team), Manifest(name="big"), "a prompt of a megabyte")
    fits = RoundRobinGroupChat([AssistantAgent("triage", OfflineChatCompletionClient(), system_message="word " * 20_000)],
                               termination_condition=MaxMessageTermination(3))
    registry.add("big", fits, Manifest(name="big"), "a long prompt")
    assert len(registry.resolve("big").component["config"]["participants"][0]["config"]["system_message"]) == 100_000
