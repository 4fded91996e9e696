"""Building a fresh AutoGen team from a stored definition.

    from config_registry.build import build_team, prepare

    built = build_team(definition, env={"OPENAI_API_KEY": "sk-..."})
    result = await built.team.run(task="hi")

    prepared = prepare(definition, transform=wrap)     # the checks and the transform, once
    built = prepared.build()                           # then each build only resolves secrets and loads

Order: the stored JSON is checked against the allow-list, the declared secret references and the persisted
participants' bounds again first, because the repository may have been edited by hand. :func:`build_team`
then resolves the secret references from ``env``, lets the caller's ``transform`` rewrite the JSON, checks
its providers again and calls ``load_component``, on every call. :func:`prepare` does the checks and the
transform once, on the stored JSON with its references in place, for a caller that builds one definition
many times (a worker building a team per request): its builds only resolve the secrets into a fresh copy
and load it.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autogen_agentchat.base import ChatAgent, Team

from config_registry.allowlist import check_providers, check_source_code
from config_registry.errors import DefinitionInvalid
from config_registry.missing import install_hint
from config_registry.participants import participant_names, participants
from config_registry.roundtrip import load
from config_registry.secrets import MASK, references, resolve_references
from config_registry.types import BuiltTeam, TeamDefinition, TeamOrAgent
from config_registry.validate import check_memory, check_persisted

Transform = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class PreparedDefinition:
    """A definition whose stored JSON passed every check a build makes, with the transform applied once.

    Made by :func:`prepare`. It holds its own copy of the JSON, taken before the checks ran, so what every
    build loads is what was checked, whatever happens to the definition's dict afterwards.

    Attributes:
        definition: The definition it was prepared from.
        component: The checked and transformed JSON, secret references in place; never handed out.
        agent_types: Participant name -> provider string.
    """

    definition: TeamDefinition
    component: Mapping[str, Any]
    agent_types: Mapping[str, str]

    def build(self, env: Mapping[str, str] | None = None) -> BuiltTeam:
        """A new team or agent object: the secrets resolved from ``env`` into a fresh copy, then loaded.

        Args:
            env: Where ``env:VAR`` secret references are looked up; ``os.environ`` by default.

        Raises:
            SecretUnavailable: A referenced environment variable is not set.
            DefinitionInvalid: The JSON does not load.
        """
        runnable = resolve_references(self.component, os.environ if env is None else env)  # a new copy
        masked = functools.partial(_masked, self.component, self.variables) if self.variables else None
        return _built(self.definition, _load(self.definition, runnable, masked), dict(self.agent_types))

    @functools.cached_property
    def variables(self) -> tuple[str, ...]:
        """The environment variables its secret references name, sorted."""
        return tuple(sorted({ref.removeprefix("env:") for ref in references(self.component).values()}))

    def secrets_in(self, env: Mapping[str, str] | None = None) -> tuple[str | None, ...]:
        """The values a build from ``env`` (``os.environ`` by default) would resolve its secrets to, in the order
        of :attr:`variables`: two builds that see the same values load the same JSON."""
        env = os.environ if env is None else env
        return tuple(env.get(name) for name in self.variables)


def prepare(definition: TeamDefinition, transform: Transform | None = None) -> PreparedDefinition:
    """Check ``definition`` as a build does and apply ``transform`` to its stored JSON, once.

    The transform sees the stored JSON with its secret references (``{"$secret": "env:VAR"}``) in place, not
    their values, and its output is checked against the allow-list again.

    Raises:
        DefinitionInvalid: The stored JSON fails the allow-list, holds an undeclared secret reference, or
            leaves a persisted participant's context unbounded.
    """
    component = copy.deepcopy(definition.component)
    _check_stored(definition, component)
    agent_types = _agent_types(component)
    if transform is not None:
        component = transform(component)
        check_providers(component, definition.manifest)  # a transform may not bring in a module either
    return PreparedDefinition(definition, component, agent_types)


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
    _check_stored(definition, definition.component)
    runnable = resolve_references(definition.component, os.environ if env is None else env)
    runnable = transform(runnable) if transform is not None else runnable
    check_providers(runnable, definition.manifest)  # again, as loaded: a reference may not name a module
    variables = tuple(ref.removeprefix("env:") for ref in references(definition.component).values())

    def masked() -> dict[str, Any]:
        component = _masked(definition.component, variables)
        return transform(component) if transform is not None else component

    return _built(definition, _load(definition, runnable, masked if variables else None),
                  _agent_types(definition.component))


def _check_stored(definition: TeamDefinition, component: Mapping[str, Any]) -> None:
    check_providers(component, definition.manifest)
    check_source_code(component, definition.manifest)
    check_persisted(component, definition.manifest)  # a hand edit may have unbounded one
    check_memory(component, definition.manifest)  # or renamed a participant the memory names
    _check_declared_references(definition, component)


def _built(definition: TeamDefinition, team: TeamOrAgent, agent_types: dict[str, str]) -> BuiltTeam:
    return BuiltTeam(
        team=team,
        name=definition.name,
        version=definition.version,
        manifest=definition.manifest,
        fingerprints=dict(definition.fingerprints),
        persisted=tuple(definition.manifest.persist),
        participants=_agents_of(team, definition.kind),
        kind=definition.kind,
        agent_types=agent_types,
        state_ttl_days=definition.manifest.state_ttl_days,
    )


def _agents_of(team: TeamOrAgent, kind: str) -> dict[str, ChatAgent]:
    if kind == "agent":
        assert isinstance(team, ChatAgent)  # _load checked it
        return {team.name: team}
    members: list[ChatAgent] = getattr(team, "_participants", [])  # AutoGen's group chats keep them there
    return {member.name: member for member in members}


def _check_declared_references(definition: TeamDefinition, component: Mapping[str, Any]) -> None:
    """Resolve only the references the manifest declares: one added to the JSON by hand (in a system
    message, say) would hand the worker's environment variable to the model."""
    stored, declared = references(component), dict(definition.manifest.secrets)
    for path in sorted(set(stored) | set(declared)):
        if stored.get(path) != declared.get(path):
            raise DefinitionInvalid(
                f"holds secret reference {stored.get(path)!r} where the manifest declares {declared.get(path)!r}",
                field=f"config.{path}",
                hint="register the definition again with its --secret declarations, or revert the hand edit",
            )


def _load(
    definition: TeamDefinition, runnable: dict[str, Any], masked: Callable[[], dict[str, Any]] | None
) -> TeamOrAgent:
    """Load ``runnable``; ``masked`` makes the same JSON with every secret as :data:`MASK`, for the error."""
    try:
        team = load(runnable)
    except Exception as exc:  # a loader failure is reported as a definition problem, with its cause
        error = DefinitionInvalid(
            f"version {definition.version[:12]} of {definition.name!r} does not load: {_failure(exc, masked)}",
            field="component",
            hint=install_hint(exc) or "check the transform, or register a fixed version and move the label to it",
        )
        if masked is None:
            raise error from exc
        raise error from None  # its message, and its traceback's, may quote the secrets
    expected = Team if definition.kind == "team" else ChatAgent
    if not isinstance(team, expected):
        raise DefinitionInvalid(
            f"built a {type(team).__name__}, not a {definition.kind}", field="component_type"
        )
    return team


def _masked(component: Mapping[str, Any], variables: tuple[str, ...]) -> dict[str, Any]:
    return resolve_references(component, dict.fromkeys(variables, MASK))


def _failure(exc: Exception, masked: Callable[[], dict[str, Any]] | None) -> str:
    """What the loader said, without the secrets it was given: pydantic quotes the input it refused
    (``input_value={'api_key': 'sk-live-...', ...}`` for a missing field), so a definition with secrets is
    said as it fails with each secret masked, or by the exception's type alone when it fails only with them."""
    if masked is None:
        return f"{type(exc).__name__}: {exc}"
    try:
        load(masked())
    except Exception as again:
        if type(again) is type(exc):  # the same failure, which the secrets did not cause: its message quotes none
            return f"{type(exc).__name__}: {again}"
    return f"{type(exc).__name__} (its message is left out: it may quote the team's secrets)"


def _agent_types(component: Mapping[str, Any]) -> dict[str, str]:
    names = participant_names(component)
    return {name: str(p.get("provider")) for name, p in zip(names, participants(component), strict=True)}
