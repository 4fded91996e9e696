"""Validation of a team definition before it is stored: nothing is imported until the JSON has passed.

    from config_registry.validate import validate_definition

    stored = validate_definition(team.dump_component().model_dump(mode="json"), manifest)

Order matters: providers and source-code tools are checked on the raw JSON first
(:mod:`config_registry.allowlist`), because ``load_component()`` imports whatever module a ``provider``
names and executes ``FunctionTool`` source; the round trip (:mod:`config_registry.roundtrip`) comes last.
Between them, the checks here: what the manifest declares (persisted participants and their bounds,
memory, checkpoints) holds for the definition, and every team in it stops.

One check needs the team object itself, since the JSON has lost what it looks for:
:func:`check_nothing_dropped` refuses a team whose dump leaves out what decides how it behaves (a
``selector_func``, a tool's closure). Registering a team object or a factory's team runs it first.
"""

from __future__ import annotations

import builtins
import dis
from collections.abc import Mapping
from types import CodeType
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
from config_registry.secrets import apply_references, walk


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


# AutoGen's teams that run until their termination condition or max_turns ends them: with neither, a run
# never returns. (A GraphFlow ends when its graph has no next node; a cycle in one needs a conditional exit.)
_NEVER_STOP_BY_THEMSELVES = ("RoundRobinGroupChat", "SelectorGroupChat", "Swarm", "MagenticOneGroupChat")


def check_stops(component: Mapping[str, Any]) -> None:
    """Every AutoGen team in the definition (a nested one too) has a termination condition or a ``max_turns``.

    Raises:
        DefinitionInvalid: A RoundRobinGroupChat, SelectorGroupChat, Swarm or MagenticOneGroupChat has
            neither, naming its config's path.
    """
    teams = [("", component)] + [(f"{path}.", value) for path, _key, value, _parent in walk(component)
                                  if isinstance(value, Mapping) and value.get("component_type") == "team"]
    for path, team in teams:
        provider = str(team.get("provider", ""))
        kind = provider.rsplit(".", 1)[-1]
        if kind not in _NEVER_STOP_BY_THEMSELVES or not provider.startswith("autogen_agentchat."):
            continue
        config = json_object(team.get("config"))
        if config.get("termination_condition") is None and config.get("max_turns") is None:
            raise DefinitionInvalid(
                f"{kind} {config.get('name') or ''!r} has neither a termination condition nor max_turns: "
                "its run would never return",
                field=f"{path}config",
                hint="give it termination_condition= (e.g. TextMentionTermination('TERMINATE') | "
                "MaxMessageTermination(20)) or max_turns=N, or both",
            )


def check_nothing_dropped(team: Any, path: str = "", owner: str = "") -> None:
    """Refuse a team object whose ``dump_component()`` leaves out what decides how it behaves, so that what is
    registered would run otherwise than the object it was dumped from: a ``SelectorGroupChat``'s
    ``selector_func`` or ``candidate_func`` (AutoGen's dump drops them, and the registered team picks its
    speakers by the model instead), a ``TextMentionTermination``'s ``sources`` (the registered team stops
    when anyone mentions the text), an ``AssistantAgent``'s ``tool_call_summary_formatter``, a ``GraphFlow``
    edge's condition function (the registered edge is
    always taken), or a ``FunctionTool`` whose function reads a variable of the code around it or of its
    module that its ``global_imports`` do not bind (its stored source code holds the function alone: the
    registered tool fails with ``NameError``).

    Args:
        team: The team or agent, as built (a factory's, or the one given to ``Registry.add``).
        path: Where ``team`` sits in the definition's JSON (nested teams, agents and tools).
        owner: The agent a tool belongs to, to name it.

    Raises:
        DefinitionInvalid: Naming the team or participant, what its dump leaves out, and the fix.
    """
    here = f"{path}." if path else ""
    who = f"{type(team).__name__} {getattr(team, 'name', '')!r}"
    for dropped, does in (("selector_func", "picks the next speaker"), ("candidate_func", "narrows the candidates")):
        if getattr(team, f"_{dropped}", None) is not None:
            raise DefinitionInvalid(
                f"{who} has a {dropped}, which {does} in this process only: AutoGen's dump_component() leaves "
                "it out, so the registered team would choose its speakers by the model and the selector prompt",
                field=f"{here}config.{dropped}",
                hint=f"drop {dropped} and express the selection in the selector_prompt, or in a component "
                "that is registered with the team",
            )
    if getattr(team, "_tool_call_summary_formatter", None) is not None:
        raise DefinitionInvalid(
            f"{who} has a tool_call_summary_formatter, which writes its tool results in this process only: "
            "AutoGen's dump_component() leaves it out, so the registered agent would write them as "
            "tool_call_summary_format says",
            field=f"{here}config.tool_call_summary_formatter",
            hint="drop tool_call_summary_formatter and give a tool_call_summary_format string "
            "(with {tool_name}, {arguments}, {result}, {is_error})",
        )
    _check_termination(getattr(team, "_termination_condition", None), f"{here}config.termination_condition", who)
    _check_edges(getattr(team, "_graph", None), f"{here}config.graph", who)
    _check_self_contained(team, owner, path)
    for index, participant in enumerate(getattr(team, "_participants", None) or []):
        check_nothing_dropped(participant, f"{here}config.participants.{index}")
    for attribute in ("team", "agent"):  # a SocietyOfMindAgent's team, a TeamTool's or an AgentTool's
        inner = getattr(team, f"_{attribute}", None)
        if inner is not None and hasattr(inner, "dump_component"):
            check_nothing_dropped(inner, f"{here}config.{attribute}")
    for index, workbench in enumerate(getattr(team, "_workbench", None) or []):
        for number, tool in enumerate(getattr(workbench, "_tools", None) or []):
            check_nothing_dropped(tool, f"{here}config.workbench.{index}.config.tools.{number}", owner=who)


def _check_termination(condition: Any, path: str, who: str) -> None:
    """Refuse a ``TextMentionTermination`` given ``sources``: AutoGen 0.7's dump keeps its text alone."""
    from autogen_agentchat.conditions import TextMentionTermination

    for index, inner in enumerate(getattr(condition, "_conditions", None) or []):  # `a | b`, `a & b`
        _check_termination(inner, f"{path}.config.conditions.{index}", who)
    sources = getattr(condition, "_sources", None)
    if isinstance(condition, TextMentionTermination) and sources is not None:
        text = condition._termination_text
        raise DefinitionInvalid(
            f"{who} ends on {text!r} mentioned by {', '.join(map(repr, sources))} only: AutoGen's dump_component() "
            f"leaves a TextMentionTermination's sources out, so the registered team would stop when any "
            f"participant mentions {text!r}",
            field=f"{path}.config.sources",
            hint=f"drop sources= and ask only the agents that should end the run to say {text!r} (in their "
            "system message)",
        )


def _check_edges(graph: Any, path: str, who: str) -> None:
    """Refuse a GraphFlow edge whose condition is a function: AutoGen's dump writes the edge unconditional."""
    for name, node in (getattr(graph, "nodes", None) or {}).items():
        for index, edge in enumerate(node.edges):
            if getattr(edge, "condition_function", None) is not None:
                raise DefinitionInvalid(
                    f"the edge {name} -> {edge.target} of {who} has a function as its condition: AutoGen's "
                    "dump_component() leaves it out, so the registered graph would always take that edge",
                    field=f"{path}.nodes.{name}.edges.{index}.condition",
                    hint="give the condition as a string the source agent's message must contain "
                    "(add_edge(a, b, condition='APPROVE'))",
                )


def _check_self_contained(tool: Any, owner: str, path: str) -> None:
    from autogen_core.tools import FunctionTool

    func = getattr(tool, "_func", None)
    code = getattr(func, "__code__", None)
    if not isinstance(tool, FunctionTool) or func is None or code is None:
        return
    field = f"{path}.config.source_code" if path else "config.source_code"
    if code.co_freevars:
        names = ", ".join(code.co_freevars)
        raise DefinitionInvalid(
            f"tool {tool.name!r} of {owner or 'the agent'} is a FunctionTool whose function uses {names} from the "
            "code around it (a closure): its stored source code holds the function alone, so the registered tool "
            "would fail with NameError when called",
            field=field,
            hint=f"make the tool self-contained: define {names} inside the function or pass it as an argument "
            "(modules it needs go in global_imports)",
        )
    # Loading runs the source with the tool's global_imports alone: a module or constant the function reads from
    # its module is not there.
    unbound = _globals_read(code) & set(func.__globals__)
    unbound -= set(dir(builtins)) | _imported(tool._global_imports) | {func.__name__}
    if unbound:
        names = ", ".join(sorted(unbound))
        raise DefinitionInvalid(
            f"tool {tool.name!r} of {owner or 'the agent'} is a FunctionTool whose function reads {names} from its "
            "module: its stored source code holds the function and its global_imports alone, so the registered "
            "tool would fail with NameError when called",
            field=field,
            hint=f"name the modules in global_imports (FunctionTool(..., global_imports=['json'])) and define "
            f"the constants inside the function: {names}",
        )


def _globals_read(code: CodeType) -> set[str]:
    """The global names a function's code (and the code nested in it: comprehensions, inner functions) reads."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= _globals_read(const)
    return names


def _imported(imports: Any) -> set[str]:
    """The names a FunctionTool's ``global_imports`` bind (``"json"``, ``ImportFromModule``, ``Alias``)."""
    names: set[str] = set()
    for item in imports or ():
        if isinstance(item, str):
            names.add(item.split(".")[0])
        elif hasattr(item, "imports"):
            names |= {x if isinstance(x, str) else x.alias for x in item.imports}
        elif hasattr(item, "alias"):
            names.add(item.alias)
    return names


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
    check_stops(stored)
    check_round_trip(stored)
    return stored
