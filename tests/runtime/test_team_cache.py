"""The definition cache: a definition is checked once and each build loads it afresh; a changed definition is
never built from the checks of another; one registry lookup serves every request that needs it, made ahead
of time for a label; a client on a host said to take stream_options is built asking for stream usage."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core.models import UserMessage
from autogen_ext.models.openai import OpenAIChatCompletionClient

from config_registry import DefinitionInvalid, Manifest, Registry, SecretUnavailable, TeamDefinition
from config_registry import build as registry_build
from teamstore import examples
from teamstore.metering import MeteredChatCompletionClient
from teamstore.runtime.teams import TeamBuilder
from tests.conftest import git
from tests.openai_endpoint import OpenAIEndpoint

TRIAGE = "support_triage"


def _checks_counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every time a build checks a definition's stored JSON, the version checked."""
    checked: list[str] = []
    original = registry_build._check_stored

    def counted(definition: TeamDefinition, component: Any) -> None:
        checked.append(definition.version)
        original(definition, component)

    monkeypatch.setattr(registry_build, "_check_stored", counted)
    return checked


def _lookups_counted(registry: Registry, monkeypatch: pytest.MonkeyPatch, gate: threading.Event | None = None) -> list[str]:
    """What the registry is asked: where a reference points (``version_of``, the first half of every
    lookup) and a definition's files (``read``); with ``gate``, each question waits (in its thread) until
    the gate opens."""
    made: list[str] = []
    for method, told in (("version_of", "version_of"), ("_read", "read")):
        original = getattr(registry, method)

        def counted(*args: Any, told: str = told, original: Any = original) -> Any:
            made.append(told)
            if gate is not None:
                gate.wait(30)
            return original(*args)

        monkeypatch.setattr(registry, method, counted)
    return made


def _researcher_prompt(team: Any) -> str:
    researcher = next(p for p in team._participants if p.name == "researcher")
    assert isinstance(researcher, AssistantAgent)
    return str(researcher._system_messages[0].content)


async def test_a_pinned_definition_is_checked_once_however_many_teams_are_built_from_it(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = _checks_counted(monkeypatch)
    version = registry.resolve(TRIAGE).version
    teams = TeamBuilder(registry, refresh_seconds=0)
    built = [await teams.build(f"{TRIAGE}@{version}") for _ in range(5)]
    assert checked == [version]
    assert len({id(b.team) for b in built}) == 5  # a new team every time
    assert len({id(b.participants["researcher"]) for b in built}) == 5
    assert all(isinstance(b.participants["researcher"]._model_client, MeteredChatCompletionClient) for b in built)


async def test_a_label_moved_to_a_changed_definition_builds_the_new_one_once_its_interval_has_passed(
    registry: Registry,
) -> None:
    teams = TeamBuilder(registry, refresh_seconds=0.3)
    first = await teams.build(f"{TRIAGE}@production")
    second_version = registry.add(TRIAGE, examples.support_triage_v2_prompt().dump_component(),
                                  examples.example_manifest(TRIAGE), "a new prompt")
    registry.label(TRIAGE, second_version, "production", "roll out the new prompt")
    await asyncio.sleep(0.35)
    second = await teams.build(f"{TRIAGE}@production")
    assert first.version != second_version and second.version == second_version
    assert _researcher_prompt(second.team) == _researcher_prompt(examples.support_triage_v2_prompt())
    assert _researcher_prompt(second.team) != _researcher_prompt(first.team)
    rolled_back = await teams.build(f"{TRIAGE}@{first.version}")  # the old version still builds as it was
    assert _researcher_prompt(rolled_back.team) == _researcher_prompt(first.team)


async def test_a_definition_that_fails_its_checks_is_refused_at_every_build_and_never_kept_as_checked(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    teams = TeamBuilder(registry, refresh_seconds=0)
    path = registry.path / "teams" / TRIAGE / "component.json"
    path.write_text(path.read_text().replace("autogen_agentchat.conditions.MaxMessageTermination", "os.system"))
    git(registry.path, "commit", "-qam", "a hand edit")
    bad = git(registry.path, "rev-parse", "HEAD").strip()
    registry.label(TRIAGE, bad, "canary", "try the hand edit")
    checked = _checks_counted(monkeypatch)
    for ref in (f"{TRIAGE}@{bad}", f"{TRIAGE}@{bad}", f"{TRIAGE}@canary", f"{TRIAGE}@canary"):
        with pytest.raises(DefinitionInvalid) as caught:
            await teams.build(ref)
        assert caught.value.field == "config.termination_condition.config.conditions.1.provider"
    assert checked == [bad] * 4


async def test_requests_that_find_a_lookup_due_share_one(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    made = _lookups_counted(registry, monkeypatch)
    teams = TeamBuilder(registry, refresh_seconds=60)
    built = await asyncio.gather(*(teams.build(f"{TRIAGE}@production") for _ in range(16)))
    assert made == ["version_of", "read"]
    assert len({id(b.team) for b in built}) == 16


async def test_a_labels_lookup_is_made_ahead_of_time_while_requests_go_on_with_the_cached_definition(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    teams = TeamBuilder(registry, refresh_seconds=10)
    ref = f"{TRIAGE}@production"
    first = await teams.build(ref)
    made = _lookups_counted(registry, monkeypatch, gate)
    teams._entries[ref].fetched -= 6  # past half its interval, not yet at its end
    second = await asyncio.wait_for(teams.build(ref), 10)  # built while the lookup waits at the gate
    assert second.version == first.version and second.team is not first.team
    await asyncio.sleep(0.2)
    assert made == ["version_of"] and not teams._lookups[ref].done()
    moved = registry.add(TRIAGE, examples.support_triage_v2_prompt().dump_component(),
                         examples.example_manifest(TRIAGE), "a new prompt", label="production")
    gate.set()
    await teams._lookups[ref]
    assert (await teams.build(ref)).version == moved
    assert made == ["version_of", "version_of", "read"]  # the label moved: read, ahead of the next request
    teams._entries[ref].fetched -= 11  # past its interval: the request waits for a lookup of its own
    gate.clear()
    waiting = asyncio.ensure_future(teams.build(ref))
    await asyncio.sleep(0.2)
    assert not waiting.done() and made[3:] == ["version_of"]
    gate.set()
    assert (await waiting).version == moved


async def test_a_label_looked_up_again_at_the_same_version_keeps_its_checked_definition(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = _checks_counted(monkeypatch)
    read = _lookups_counted(registry, monkeypatch)
    teams = TeamBuilder(registry, refresh_seconds=0)
    first, second = await teams.build(f"{TRIAGE}@production"), await teams.build(f"{TRIAGE}@production")
    assert read == ["version_of", "read", "version_of"]  # looked up twice, read and checked once
    assert checked == [first.version]
    assert second.version == first.version and second.team is not first.team


async def test_closing_stops_a_lookup_made_ahead_of_time(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()
    teams = TeamBuilder(registry, refresh_seconds=10)
    ref = f"{TRIAGE}@production"
    await teams.build(ref)
    _lookups_counted(registry, monkeypatch, gate)
    teams._entries[ref].fetched -= 6
    await teams.build(ref)
    ahead = teams._lookups[ref]
    await asyncio.wait_for(teams.aclose(), 5)  # not held by the lookup waiting at the gate
    gate.set()
    assert ahead.cancelled() and teams._lookups == {}


async def _built_ahead(teams: TeamBuilder, ref: str) -> None:
    """Ask for a team built ahead of ``ref`` and wait until the loop has built it (or given up)."""
    teams.build_ahead(ref)
    await asyncio.gather(*teams._restocks)


def _builds_counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every team a prepared definition builds: ``request`` if the calling test's task built it, ``ahead`` if
    a task of the builder's did."""
    made: list[str] = []
    original, caller = registry_build.PreparedDefinition.build, asyncio.current_task()

    def counted(self: registry_build.PreparedDefinition, env: Any = None) -> Any:
        made.append("request" if asyncio.current_task() is caller else "ahead")
        return original(self, env)

    monkeypatch.setattr(registry_build.PreparedDefinition, "build", counted)
    return made


async def test_the_team_built_ahead_is_the_next_builds_once_and_a_team_built_once_has_none(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _builds_counted(monkeypatch)
    teams = TeamBuilder(registry, refresh_seconds=60)
    ref = f"{TRIAGE}@production"
    first = await teams.build(ref)
    await _built_ahead(teams, ref)
    assert made == ["request"]  # a definition built once is not built ahead: it may never be built again
    second = await teams.build(ref)
    await _built_ahead(teams, ref)
    await _built_ahead(teams, ref)  # one at a time: asked again, nothing more is built
    assert made == ["request", "request", "ahead"]
    third, fourth = await teams.build(ref), await teams.build(ref)
    assert made == ["request", "request", "ahead", "request"]  # the third took it; the fourth built its own
    teams_seen = {id(b.team) for b in (first, second, third, fourth)}
    assert len(teams_seen) == 4 and third.version == first.version
    result = await third.team.run(task="hi")  # the team built ahead runs as any other
    assert [m.source for m in result.messages] == ["user", "triage", "researcher", "critic"]
    await teams.aclose()


async def test_a_team_built_ahead_with_secrets_that_changed_since_is_not_used(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry.add_from_factory("teamstore.examples:support_triage_openai",
                              examples.example_manifest("support_triage_openai"), "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-first")
    teams = TeamBuilder(registry, refresh_seconds=60)
    ref = "support_triage_openai"
    for _ in range(2):
        await teams.build(ref)
    await _built_ahead(teams, ref)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-rotated")
    built = await teams.build(ref)
    assert built.participants["researcher"]._model_client._inner._client.api_key == "sk-rotated"  # type: ignore[attr-defined]
    await _built_ahead(teams, ref)
    assert (await teams.build(ref)).participants["researcher"]._model_client._inner._client.api_key == "sk-rotated"  # type: ignore[attr-defined]
    monkeypatch.delenv("OPENAI_API_KEY")
    await _built_ahead(teams, ref)  # fails: dropped, and the build that needs the secret says so
    assert teams._entries[ref].spare is None
    with pytest.raises(SecretUnavailable, match="OPENAI_API_KEY"):
        await teams.build(ref)
    await teams.aclose()


async def test_closing_drops_the_team_built_ahead_and_stops_one_being_built(registry: Registry) -> None:
    teams = TeamBuilder(registry, refresh_seconds=60)
    ref = f"{TRIAGE}@production"
    for _ in range(2):
        await teams.build(ref)
    await _built_ahead(teams, ref)
    assert teams._entries[ref].spare is not None
    teams._entries[ref].spare = None
    teams.build_ahead(ref)  # scheduled, not yet run
    (pending,) = teams._restocks
    await teams.aclose()
    assert pending.cancelled() and teams._entries[ref].spare is None and not teams._restocks


async def test_only_the_definitions_built_most_recently_keep_a_team_built_ahead(registry: Registry) -> None:
    teams = TeamBuilder(registry, refresh_seconds=60, spares=2)
    refs = [f"{TRIAGE}@production", TRIAGE, f"{TRIAGE}@{registry.resolve(TRIAGE).version}"]  # three entries
    for ref in refs:
        for _ in range(2):
            await teams.build(ref)
        await _built_ahead(teams, ref)
    assert [teams._entries[ref].spare is not None for ref in refs] == [False, True, True]
    await teams.build(refs[1])  # taken: the slot is free for the next
    await _built_ahead(teams, refs[0])
    assert [teams._entries[ref].spare is not None for ref in refs] == [True, False, True]
    await teams.aclose()


async def test_a_team_built_ahead_that_fails_is_logged_by_its_failures_type(
    registry: Registry, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A build's error may quote what it was given, a secret among them: at DEBUG the failure is named by its type.
    teams = TeamBuilder(registry, refresh_seconds=60)
    ref = f"{TRIAGE}@production"
    for _ in range(2):
        await teams.build(ref)

    def failing(self: registry_build.PreparedDefinition, env: Any = None) -> Any:
        raise ValueError("api_key='sk-live-CANARY' was refused")

    monkeypatch.setattr(registry_build.PreparedDefinition, "build", failing)
    with caplog.at_level(logging.DEBUG, "teamstore.runtime.teams"):
        await _built_ahead(teams, ref)
    assert "ahead failed: ValueError" in caplog.text and "CANARY" not in caplog.text
    await teams.aclose()


async def test_a_team_built_for_a_host_said_to_take_stream_options_has_its_client_there_asking_for_stream_usage(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The base URLs are secret references: only the built client knows where it sends.
    monkeypatch.setenv("DESK_KEY", "not-a-key")
    monkeypatch.setenv("VLLM_URL", "http://vllm.internal:8000/v1")
    monkeypatch.setenv("OTHER_URL", "http://other.internal/v1")
    agents = [AssistantAgent(name, model_client=OpenAIChatCompletionClient(model="gpt-4o", api_key="k", base_url="x"))
              for name in ("vllm", "other")]
    secrets = {f"participants.{n}.config.model_client.config.{field}": ref for n, url in enumerate(("VLLM", "OTHER"))
               for field, ref in (("api_key", "env:DESK_KEY"), ("base_url", f"env:{url}_URL"))}
    registry.add("desk", RoundRobinGroupChat(agents, max_turns=1).dump_component().model_dump(),
                 Manifest(name="desk", secrets=secrets), "v1")
    built = await TeamBuilder(registry, refresh_seconds=0, stream_usage_hosts={"vllm.internal:8000"}).build("desk")
    asked = {}
    for name, agent in built.participants.items():
        client, endpoint = agent._model_client, OpenAIEndpoint()  # type: ignore[attr-defined]
        assert isinstance(client, MeteredChatCompletionClient)
        endpoint.serve(client.inner)  # type: ignore[arg-type]
        _ = [chunk async for chunk in client.create_stream([UserMessage(content="hi", source="user")])]
        asked[name] = endpoint.requests[-1].get("stream_options")
    assert asked == {"vllm": {"include_usage": True}, "other": None}
