"""Validation of a team definition before it is stored: nothing is imported until the JSON has passed.

    from config_registry.validate import validate_definition

    stored = validate_definition(team.dump_component().model_dump(mode="json"), manifest)

Order matters: providers and source-code tools are checked on the raw JSON first, because
``load_component()`` imports whatever module a ``provider`` names and executes ``FunctionTool`` source.
"""

from __future__ import annotations

import importlib
import json
import typing
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Literal

from autogen_core import ComponentModel
from autogen_core._component_config import WELL_KNOWN_PROVIDERS
from pydantic import ValidationError

from config_registry.bounds import bound_of, bound_problem, is_bounding_context, known_bounding_contexts
from config_registry.errors import DefinitionInvalid
from config_registry.manifest import Manifest
from config_registry.secrets import apply_references, is_reference, mask_references, walk

SOURCE_CODE_TOOL = "autogen_core.tools.FunctionTool"
# Allowed by the "autogen_ext." prefix, yet as able to run arbitrary code as a source-code tool.
CODE_RUNNING_PROVIDERS = ("autogen_ext.code_executors.", "autogen_ext.tools.code_execution.")
STDIO_SERVER = "StdioServerParams"  # McpWorkbench / StdioMcpToolAdapter: server_params.type


def normalise(component: Any) -> Any:
    """Canonical JSON form: round-tripped through ``json`` with sorted keys."""
    return json.loads(json.dumps(component, sort_keys=True, default=str))


def provider_allowed(provider: str, prefixes: tuple[str, ...]) -> bool:
    """True if ``provider`` (after AutoGen's own aliases) starts with one of ``prefixes`` at a module boundary."""
    provider = WELL_KNOWN_PROVIDERS.get(provider, provider)
    for prefix in prefixes:
        boundary = prefix if prefix.endswith(".") else prefix + "."
        if provider.startswith(boundary):
            return True
    return False


def check_providers(component: Mapping[str, Any], manifest: Manifest) -> None:
    """Refuse any ``provider`` outside the allow-list, before anything is imported.

    Raises:
        DefinitionInvalid: Naming the JSON path of the first disallowed provider.
    """
    prefixes = manifest.provider_prefixes()
    for path, key, value, _parent in walk(component):
        if key == "provider" and is_reference(value):
            raise DefinitionInvalid(
                "a provider may not come from a secret reference: the module it names would be imported "
                "without the allow-list seeing it",
                field=path,
                hint="name the provider in the definition itself",
            )
        if key != "provider" or not isinstance(value, str):
            continue
        if not provider_allowed(value, prefixes):
            prefix = value.rsplit(".", 1)[0] + "."
            raise DefinitionInvalid(
                f"provider {value!r} is not on the allow-list; loading it would import that module",
                field=path,
                hint=f"if you trust it, allow its module in the manifest: --allow-provider {prefix}",
            )


def source_code_tools(component: Mapping[str, Any]) -> list[str]:
    """JSON paths of every tool that carries Python source (loading it executes that source)."""
    return [
        path.removesuffix(".config.source_code")
        for path, key, _value, _parent in walk(component)
        if key == "source_code" and path.endswith(".config.source_code")
    ]


def code_running_components(component: Mapping[str, Any]) -> list[str]:
    """JSON paths of every component that runs code or a command it is given, though it carries no source:
    AutoGen's code executors (local, Jupyter, Docker ...: what a model writes, steered by users' messages,
    runs on or beside the worker) and MCP stdio servers (a command line the definition names, started by
    the worker)."""
    found = []
    for path, key, value, _parent in walk(component):
        provider = WELL_KNOWN_PROVIDERS.get(value, value) if key == "provider" and isinstance(value, str) else ""
        if provider.startswith(CODE_RUNNING_PROVIDERS) or (key == "type" and value == STDIO_SERVER):
            found.append(path.rpartition(".")[0] or "(root)")
    return found


def code_tools(component: Mapping[str, Any]) -> list[str]:
    """JSON paths of everything ``allow_source_code_tools`` must allow: source-code tools, code executors
    and MCP stdio servers."""
    return source_code_tools(component) + code_running_components(component)


def check_source_code(component: Mapping[str, Any], manifest: Manifest) -> None:
    """Refuse tools with source code, code executors and MCP stdio servers unless the manifest allows them.

    Raises:
        DefinitionInvalid: Naming the first such tool's JSON path.
    """
    paths = source_code_tools(component)
    if paths and not manifest.allow_source_code_tools:
        raise DefinitionInvalid(
            "is a tool with Python source code, which load_component() executes",
            field=paths[0],
            hint="review the code, then allow it explicitly: --allow-source-code-tools",
        )
    paths = code_running_components(component)
    if paths and not manifest.allow_source_code_tools:
        raise DefinitionInvalid(
            "runs code or a command it is given (a code executor or an MCP stdio server) on or beside "
            "the worker",
            field=paths[0],
            hint="review what it may run, then allow it explicitly: --allow-source-code-tools",
        )


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


def _mapping(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else an empty one (hand-edited JSON may hold anything; the
    round-trip check reports it)."""
    return value if isinstance(value, Mapping) else {}


def _participant_path(component: Mapping[str, Any], index: int) -> str:
    return "config" if kind_of(component) == "agent" else f"config.participants.{index}.config"


def participant_name(participant: Mapping[str, Any], index: int, component: Mapping[str, Any]) -> str:
    """The ``config.name`` of a participant.

    Raises:
        DefinitionInvalid: It has no name.
    """
    name = _mapping(participant.get("config")).get("name")
    if not isinstance(name, str) or not name:
        raise DefinitionInvalid(
            "has no name", field=_participant_path(component, index) + ".name", hint="give it one"
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
                field=_participant_path(component, index) + ".name",
                hint="give every participant its own name",
            )
        names.append(name)
    return names


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
        _check_bound(name, by_name[name], _participant_path(component, names.index(name)), manifest)


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
    if not isinstance(_mapping(_mapping(by_name[memory.writer].get("config")).get("model_client")).get("provider"), str):
        raise DefinitionInvalid(
            f"names {memory.writer!r}, which has no model client to write the memory with",
            field="memory.writer",
            hint="name a participant with a model_client (the memory is written with that client)",
        )


def _takes_memory(participant: Mapping[str, Any]) -> bool:
    provider = participant.get("provider")
    try:
        found = _component_class(provider) if isinstance(provider, str) else None
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
    context = _mapping(_mapping(participant.get("config")).get("model_context"))
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


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The dotted path of the first difference between two JSON values, or ``None`` if equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            found = first_difference(a.get(key), b.get(key), f"{path}.{key}" if path else key)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}.{index}" if path else str(index))
            if found is not None:
                return found
        return None
    return None if a == b else (path or "(root)")


def load(component: Mapping[str, Any]) -> Any:
    """``ComponentLoader.load_component`` of JSON, with FunctionTool's load-time warning silenced.

    Only call it on JSON that passed :func:`check_providers` and :func:`check_source_code`.
    """
    from autogen_core import ComponentLoader

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"(?s).*FunctionTool", category=UserWarning)
        return ComponentLoader.load_component(ComponentModel.model_validate(dict(component)))


def _without_source_tools(component: Any) -> Any:
    if isinstance(component, dict):
        if component.get("provider") == SOURCE_CODE_TOOL:
            return None
        return {k: _without_source_tools(v) for k, v in component.items()}
    if isinstance(component, list):
        return [x for x in (_without_source_tools(v) for v in component) if x is not None]
    return component


def check_round_trip(component: Mapping[str, Any]) -> None:
    """``load_component(dump)`` must rebuild a team whose ``dump_component()`` equals ``dump``.

    A ``FunctionTool`` loaded from source cannot be dumped again (its function has no source file), so
    such tools are loaded on their own and the rest of the team is compared without them.

    Raises:
        DefinitionInvalid: Loading fails, or the rebuilt team dumps differently (naming the first field).
    """
    masked = mask_references(component)
    for path in source_code_tools(masked):
        _load_or_explain(_at(masked, path), path)
    expected = normalise(_without_source_tools(masked))
    rebuilt = _load_or_explain(expected, "")
    actual = normalise(rebuilt.dump_component().model_dump(mode="json"))
    difference = first_difference(
        normalise(ComponentModel.model_validate(expected).model_dump(mode="json")), actual
    )
    if difference is not None:
        raise DefinitionInvalid(
            "does not survive load_component() -> dump_component(): the rebuilt team dumps a different value",
            field=difference,
            hint="register what team.dump_component() returns, not hand-edited JSON",
        )


def _at(component: Any, path: str) -> Any:
    node = component
    for key in path.split("."):
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node


def _load_or_explain(component: Any, path: str) -> Any:
    try:
        return load(component)
    except Exception as exc:  # any loader failure is a definition error, reported with its cause
        path, component, exc = _innermost_failure(component, path) or (path, component, exc)
        dropped = _dropped_by_dump(component, exc)
        if dropped:
            raise _dump_load_mismatch(component, path, dropped) from exc
        raise DefinitionInvalid(
            f"load_component() fails: {type(exc).__name__}: {exc}",
            field=path or "provider",
            hint="check the JSON against the component's config schema; dump it with team.dump_component()",
        ) from exc


def _innermost_failure(node: Any, path: str) -> tuple[str, Any, Exception] | None:
    """The innermost component in ``node`` that does not load on its own (path, JSON, error), so that a
    failure is told where it is rather than at the top of the team."""
    for child_path, child in _components_under(node, path):
        found = _innermost_failure(child, child_path)
        if found is not None:
            return found
    try:
        load(node)
    except Exception as exc:  # as above: the loader runs the component's own code
        return path, node, exc
    return None


def _components_under(node: Any, path: str) -> list[tuple[str, Any]]:
    """The outermost components nested in ``node``'s config, with their dotted paths."""
    found: list[tuple[str, Any]] = []
    config = node.get("config") if isinstance(node, dict) else None
    for child_path, _key, value, _parent in walk(config, f"{path}.config" if path else "config"):
        if _is_component(value) and not any(child_path.startswith(f"{p}.") for p, _v in found):
            found.append((child_path, value))
    return found


def _is_component(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("provider"), str) and isinstance(value.get("config"), dict)


def _dropped_by_dump(component: Any, exc: Exception) -> list[str]:
    """The config fields ``component`` lacks that its config model requires although it allows ``None``:
    ``dump_component()`` leaves out every ``None`` value, so such a component cannot load its own dump."""
    if not isinstance(exc, ValidationError) or not _is_component(component):
        return []
    errors = exc.errors()
    schema = getattr(_component_class(component["provider"]), "component_config_schema", None)
    fields = getattr(schema, "model_fields", {})
    missing = [str(e["loc"][0]) for e in errors if e["type"] == "missing" and len(e["loc"]) == 1]
    if len(missing) != len(errors) or not all(m in fields and _admits_none(fields[m].annotation) for m in missing):
        return []
    return missing


def _component_class(provider: str) -> Any:
    module, _, name = WELL_KNOWN_PROVIDERS.get(provider, provider).rpartition(".")
    return getattr(importlib.import_module(module), name, None)  # loaded a moment ago, by load()


def _admits_none(annotation: Any) -> bool:
    return annotation is None or type(None) in typing.get_args(annotation)


def _token_usage_workaround(config: Mapping[str, Any], dropped: list[str]) -> str:
    total = config.get("max_total_token")
    # Prompt and completion tokens are each part of the total: a limit of the total on either never ends
    # a run before the total limit does.
    value = f"{total}, the max_total_token" if total is not None else "a number no run reaches"
    return f"give TokenUsageTermination every limit, setting {', '.join(dropped)} to {value}; or "


# What to do instead, for the components known to dump what AutoGen itself cannot load back.
_WORKAROUNDS: dict[str, Callable[[Mapping[str, Any], list[str]], str]] = {
    "autogen_agentchat.conditions.TokenUsageTermination": _token_usage_workaround,
}


def _dump_load_mismatch(component: dict[str, Any], path: str, dropped: list[str]) -> DefinitionInvalid:
    provider = WELL_KNOWN_PROVIDERS.get(component["provider"], component["provider"])
    workaround = _WORKAROUNDS.get(provider)
    return DefinitionInvalid(
        f"{provider} cannot be loaded back from its own dump: AutoGen's dump_component() leaves out "
        f"{', '.join(dropped)} when unset (None), and its load_component() requires them. This is AutoGen's "
        "own dump/load mismatch, not an error in this definition",
        field=path or "provider",
        hint=(workaround(component["config"], dropped) if workaround else "")
        + f"register the JSON with {', '.join(f'{f!r}: null' for f in dropped)} added to its config "
        "(registry add --file), which AutoGen loads; see docs/registry.md",
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
