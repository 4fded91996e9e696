"""A definition's participants, read from its JSON: team or single agent, the top-level ones, their names.

    from config_registry.participants import kind_of, participant_names, participants

    component = team.dump_component().model_dump(mode="json")
    kind_of(component)                    # "team" (a single agent is "agent")
    participant_names(component)          # ["researcher", "writer"]: unique, or DefinitionInvalid
    by_name = dict(zip(participant_names(component), participants(component), strict=True))

A single agent is its own only participant. Every malformed shape is a :class:`DefinitionInvalid` naming
the JSON path, so validation, fingerprints, diff and build read a definition the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from config_registry.errors import DefinitionInvalid


def kind_of(component: Mapping[str, Any]) -> Literal["team", "agent"]:
    """Whether the definition is a team or a single agent.

    Raises:
        DefinitionInvalid: It is neither (a model client, say).
    """
    kind = component.get("component_type")
    if kind == "team" and isinstance((component.get("config") or {}).get("participants"), list):
        return "team"
    if kind == "agent":
        return "agent"
    raise DefinitionInvalid(
        f"component_type {kind!r} is not a team or an agent",
        field="component_type",
        hint="register a team (RoundRobinGroupChat, SelectorGroupChat, Swarm, ...) or a single agent",
    )


def participants(component: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The top-level participants' component JSON; a single agent is its own only participant.

    Raises:
        DefinitionInvalid: A participant is not a component object.
    """
    if kind_of(component) == "agent":
        return [dict(component)]
    found = component["config"]["participants"]
    for index, participant in enumerate(found):
        if not isinstance(participant, Mapping):
            raise DefinitionInvalid(
                f"is not a component object but {participant!r:.40}",
                field=f"config.participants.{index}",
                hint="register what team.dump_component() returns, not hand-edited JSON",
            )
    return [dict(p) for p in found]


def json_object(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else an empty one (hand-edited JSON may hold anything; the
    round-trip check reports it)."""
    return value if isinstance(value, Mapping) else {}


def participant_path(component: Mapping[str, Any], index: int) -> str:
    """The JSON path of the config of the participant at ``index`` (a single agent's is its own)."""
    return "config" if kind_of(component) == "agent" else f"config.participants.{index}.config"


def participant_name(participant: Mapping[str, Any], index: int, component: Mapping[str, Any]) -> str:
    """The ``config.name`` of a participant.

    Raises:
        DefinitionInvalid: It has no name.
    """
    name = json_object(participant.get("config")).get("name")
    if not isinstance(name, str) or not name:
        raise DefinitionInvalid(
            "has no name", field=participant_path(component, index) + ".name", hint="give it one"
        )
    return name


def participant_names(component: Mapping[str, Any]) -> list[str]:
    """Every top-level participant's name, checked to be unique.

    Raises:
        DefinitionInvalid: A name is missing or used twice.
    """
    names: list[str] = []
    for index, participant in enumerate(participants(component)):
        name = participant_name(participant, index, component)
        if name in names:
            raise DefinitionInvalid(
                f"participant name {name!r} is used twice; agent names key the saved team state",
                field=participant_path(component, index) + ".name",
                hint="give every participant its own name",
            )
        names.append(name)
    return names
