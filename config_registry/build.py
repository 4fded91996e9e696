"""Building a fresh AutoGen team from a stored definition.

    from config_registry.build import build_team

    built = build_team(definition, env={"OPENAI_API_KEY": "sk-..."})
    result = await built.team.run(task="hi")

Order: secret references are resolved from ``env``, then the caller's ``transform`` rewrites the JSON
(the runtime wraps model clients there), then ``load_component`` builds new objects. The stored JSON
is checked against the allow-list and the persisted participants' bounds again first, because the repository
may have been edited by hand.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from autogen_agentchat.base import ChatAgent, Team

from config_registry.errors import DefinitionInvalid
from config_registry.secrets import references, resolve_references
from config_registry.types import BuiltTeam, TeamDefinition, TeamOrAgent
from config_registry.validate import (
    check_memory,
    check_persisted,
    check_providers,
    check_source_code,
    load,
    participant_names,
    participants,
)

Transform = Callable[[dict[str, Any]], dict[str, Any]]


def _agents_of(team: TeamOrAgent, kind: str) -> dict[str, ChatAgent]:
    if kind == "agent":
        assert isinstance(team, ChatAgent)  # _load checked it
        return {team.name: team}
    members: list[ChatAgent] = getattr(team, "_participants", [])  # AutoGen's group chats keep them there
    return {member.name: member for member in members}


def build_team(
    definition: TeamDefinition, transform: Transform | None = None, env: Mapping[str, str] | None = None
) -> BuiltTeam:
    """Build a new team or agent object from ``definition``.

    Args:
        definition: The resolved definition.
        transform: Rewrites the runnable JSON before it is loaded (after secrets are resolved).
        env: Where ``env:VAR`` secret references are looked up; ``os.environ`` by default.

    Returns:
        A :class:`BuiltTeam` holding a new object on every call.

    Raises:
        SecretUnavailable: A referenced environment variable is not set.
        DefinitionInvalid: The stored JSON fails the allow-list or leaves a persisted participant's
            context unbounded, or does not load.
    """
    check_providers(definition.component, definition.manifest)
    check_source_code(definition.component, definition.manifest)
    check_persisted(definition.component, definition.manifest)  # a hand edit may have unbounded one
    check_memory(definition.component, definition.manifest)  # or renamed a participant the memory names
    _check_declared_references(definition)
    runnable = resolve_references(definition.component, os.environ if env is None else env)
    runnable = transform(runnable) if transform is not None else runnable
    check_providers(runnable, definition.manifest)  # again, as loaded: a reference may not name a module
    team = _load(definition, runnable)
    return BuiltTeam(
        team=team,
        name=definition.name,
        version=definition.version,
        manifest=definition.manifest,
        fingerprints=dict(definition.fingerprints),
        persisted=tuple(definition.manifest.persist),
        participants=_agents_of(team, definition.kind),
        kind=definition.kind,
        agent_types=_agent_types(definition.component),
        state_ttl_days=definition.manifest.state_ttl_days,
    )


def _check_declared_references(definition: TeamDefinition) -> None:
    """Resolve only the references the manifest declares: one added to the JSON by hand (in a system
    message, say) would hand the worker's environment variable to the model."""
    stored, declared = references(definition.component), dict(definition.manifest.secrets)
    for path in sorted(set(stored) | set(declared)):
        if stored.get(path) != declared.get(path):
            raise DefinitionInvalid(
                f"holds secret reference {stored.get(path)!r} where the manifest declares {declared.get(path)!r}",
                field=f"config.{path}",
                hint="register the definition again with its --secret declarations, or revert the hand edit",
            )


def _load(definition: TeamDefinition, runnable: dict[str, Any]) -> TeamOrAgent:
    try:
        team = load(runnable)
    except Exception as exc:  # a loader failure is reported as a definition problem, with its cause
        raise DefinitionInvalid(
            f"version {definition.version[:12]} of {definition.name!r} does not load: {type(exc).__name__}: {exc}",
            field="component",
            hint="check the transform, or register a fixed version and move the label to it",
        ) from exc
    expected = Team if definition.kind == "team" else ChatAgent
    if not isinstance(team, expected):
        raise DefinitionInvalid(
            f"built a {type(team).__name__}, not a {definition.kind}", field="component_type"
        )
    return team


def _agent_types(component: Mapping[str, Any]) -> dict[str, str]:
    names = participant_names(component)
    return {name: str(p.get("provider")) for name, p in zip(names, participants(component), strict=True)}
