"""Validation of a team definition before it is stored: nothing is imported until the JSON has passed.

    from config_registry.validate import validate_definition

    stored = validate_definition(team.dump_component().model_dump(mode="json"), manifest)

Order matters: providers and source-code tools are checked on the raw JSON first
(:mod:`config_registry.allowlist`), because ``load_component()`` imports whatever module a ``provider``
names and executes ``FunctionTool`` source; the round trip (:mod:`config_registry.roundtrip`) comes last.
Between them, the checks here: what the manifest declares (persisted participants and their bounds,
memory, checkpoints) holds for the definition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from config_registry.allowlist import check_providers, check_source_code
from config_registry.bounds import bound_of, bound_problem, is_bounding_context, known_bounding_contexts
from config_registry.errors import DefinitionInvalid
from config_registry.manifest import Manifest
from config_registry.participants import (
    json_object,
    kind_of,
    participant_names,
    participant_path,
    participants,
)
from config_registry.roundtrip import check_round_trip, component_class, normalise
from config_registry.secrets import apply_references


def _bound_error(name: str, field: str, message: str, hint: str) -> DefinitionInvalid:
    return DefinitionInvalid(f"persisted participant {name!r} {message}", field=field, hint=hint)


def check_persisted(component: Mapping[str, Any], manifest: Manifest) -> None:
    """Persisted participants exist and keep their stored state bounded.

    Raises:
        DefinitionInvalid: A persisted name is not a participant, uses a context that does not bound what
            it stores, with sizes that context refuses, or a bound above ``manifest.context_bound``.
    """
    names = participant_names(component)
    by_name = dict(zip(names, participants(component), strict=True))
    for name in manifest.persist:
        if name not in by_name:
            raise DefinitionInvalid(
                f"names {name!r}, which is not a participant (participants: {', '.join(names)})",
                field="persist",
                hint="persist only participants of this team, by their agent name",
            )
        _check_bound(name, by_name[name], participant_path(component, names.index(name)), manifest)


def check_memory(component: Mapping[str, Any], manifest: Manifest) -> None:
    """The memory's receiving participants exist and can receive it; its writer exists and has a model client.

    Only call it on JSON that passed :func:`check_providers` (a participant's class is imported).

    Raises:
        DefinitionInvalid: A named participant is not one of the team's, cannot take an AutoGen ``Memory``
            (its config has no ``memory`` list), or (the writer) has no model client.
    """
    memory = manifest.memory
    if memory is None:
        return
    names = participant_names(component)
    by_name = dict(zip(names, participants(component), strict=True))
    for field, name in [*(("memory.participants", n) for n in memory.participants), ("memory.writer", memory.writer)]:
        if name not in by_name:
            raise DefinitionInvalid(
                f"names {name!r}, which is not a participant (participants: {', '.join(names)})",
                field=field,
                hint="name participants of this team, by their agent name",
            )
    for name in memory.participants:
        if not _takes_memory(by_name[name]):
            raise DefinitionInvalid(
                f"names {name!r}, a {by_name[name].get('provider')} that takes no memory (its config has no "
                "'memory' list)",
                field="memory.participants",
                hint="give memory to agents that take it (AssistantAgent does)",
            )
    client = json_object(json_object(by_name[memory.writer].get("config")).get("model_client"))
    if not isinstance(client.get("provider"), str):
        raise DefinitionInvalid(
            f"names {memory.writer!r}, which has no model client to write the memory with",
            field="memory.writer",
            hint="name a participant with a model_client (the memory is written with that client)",
        )


def _takes_memory(participant: Mapping[str, Any]) -> bool:
    provider = participant.get("provider")
    try:
        found = component_class(provider) if isinstance(provider, str) else None
    except ImportError:
        return True  # the round-trip check loads it next and reports why it does not import
    schema = getattr(found, "component_config_schema", None)
    return "memory" in getattr(schema, "model_fields", {})


def _bounding_hint() -> str:
    known = known_bounding_contexts()
    if not known:
        return "install a package that declares a bounding context (config_registry.bounds), or do not persist it"
    return f"give it a bounding context with max_messages=N: {', '.join(known)}"


def _check_bound(name: str, participant: Mapping[str, Any], path: str, manifest: Manifest) -> None:
    context = json_object(json_object(participant.get("config")).get("model_context"))
    field = f"{path}.model_context"
    bound = bound_of(context)
    if bound is None or not is_bounding_context(str(context.get("provider", ""))):
        raise _bound_error(
            name,
            field,
            f"uses {context.get('provider', 'no model_context')!r}, which does not bound what save_state() keeps",
            _bounding_hint(),
        )
    problem = bound_problem(context)
    if problem is not None:
        raise _bound_error(
            name,
            f"{field}.config.{problem.field}",
            f"has a model context that would lose its newest tool exchange: {problem.message}",
            problem.hint,
        )
    _check_bound_sizes(name, bound, field, manifest.context_bound)
    limit = bound.get("max_messages")
    if manifest.context_bound is not None and isinstance(limit, int) and limit > manifest.context_bound:
        raise _bound_error(
            name,
            f"{field}.config.max_messages",
            f"keeps up to {limit} messages, above context_bound {manifest.context_bound}",
            f"lower max_messages to {manifest.context_bound} or raise --context-bound",
        )


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # a bool is an int to Python, never a size


def _check_bound_sizes(name: str, bound: Mapping[str, Any], field: str, context_bound: int | None) -> None:
    """Refuse a bound field given as a bool, and a ``max_messages`` that is not a whole number when it is
    given or ``context_bound`` caps it: a context with no check of its own would load ``true`` as 1, and
    the round trip reads ``true`` back equal to 1."""
    for key, value in bound.items():
        if key == "provider":
            continue
        counted = key == "max_messages" and (value is not None or context_bound is not None)
        if isinstance(value, bool) or (counted and not _is_whole(value)):
            most = f" up to context_bound {context_bound}" if key == "max_messages" and context_bound else ""
            raise _bound_error(
                name,
                f"{field}.config.{key}",
                f"has a model context whose {key}={value!r} is not a whole number",
                f"set {key} to a whole number{most} (not true, false or a string)",
            )


# Teams whose manager runs its own loop instead of AutoGen's turn-by-turn one: no point between two turns
# exists at which a run's progress could be made durable (MagenticOne's orchestrator plans, re-plans and
# keeps a ledger of its own).
_NO_TURN_CHECKPOINTS = ("autogen_agentchat.teams.MagenticOneGroupChat",)


def check_checkpoints(component: Mapping[str, Any], manifest: Manifest) -> None:
    """Per-turn checkpoints are declared only where a run has turns to checkpoint.

    Raises:
        DefinitionInvalid: ``checkpoints`` is on for a single agent (its run is one turn) or for a team
            whose manager has no turn-by-turn loop (MagenticOne).
    """
    if manifest.checkpoints == "off":
        return
    if kind_of(component) == "agent":
        raise DefinitionInvalid(
            "checkpoints are taken between the turns of a team's run; a single agent's run is one turn",
            field="checkpoints",
            hint="register it with checkpoints 'off' (a run that fails is run again from its task)",
        )
    provider = str(component.get("provider", ""))
    if provider in _NO_TURN_CHECKPOINTS or provider.endswith(".MagenticOneGroupChat"):
        raise DefinitionInvalid(
            f"{provider.rsplit('.', 1)[-1]} orchestrates its own loop: there is no point between two turns "
            "at which its run could be checkpointed",
            field="checkpoints",
            hint="use checkpoints 'off' for this team, or a RoundRobinGroupChat, SelectorGroupChat, Swarm or GraphFlow",
        )


def validate_definition(component: Mapping[str, Any], manifest: Manifest) -> dict[str, Any]:
    """Run every check and return the JSON to store (secrets as references).

    Args:
        component: The dumped team or agent (``dump_component().model_dump(mode="json")``).
        manifest: The manifest it is registered with.

    Returns:
        Normalised component JSON with secret fields replaced by references.

    Raises:
        DefinitionInvalid: The first check that fails, naming the field and the fix.
    """
    check_providers(component, manifest)
    check_source_code(component, manifest)
    stored: dict[str, Any] = normalise(apply_references(component, manifest.secrets))
    participant_names(stored)
    check_persisted(stored, manifest)
    check_memory(stored, manifest)
    check_checkpoints(stored, manifest)
    check_round_trip(stored)
    return stored
