"""The round trip a stored definition must survive: ``load_component(dump)`` dumps ``dump`` again.

    from config_registry.roundtrip import check_round_trip, load

    check_round_trip(stored)   # DefinitionInvalid naming the first field that comes back different
    team = load(stored)        # the team itself, once the JSON has passed the allow-list checks

Loading runs the components' own code, so only JSON that passed :mod:`config_registry.allowlist` comes
here. A failure is reported at the innermost component that does not load, and a component AutoGen
cannot load from its own dump is told apart from a wrong definition, with the workaround.
"""

from __future__ import annotations

import importlib
import json
import typing
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from autogen_core import ComponentModel
from autogen_core._component_config import WELL_KNOWN_PROVIDERS
from pydantic import ValidationError

from config_registry.allowlist import source_code_tools
from config_registry.errors import DefinitionInvalid
from config_registry.missing import install_hint
from config_registry.placeholders import is_dummy_key
from config_registry.secrets import MASK, mask_references, walk

SOURCE_CODE_TOOL = "autogen_core.tools.FunctionTool"


def normalise(component: Any) -> Any:
    """Canonical JSON form: round-tripped through ``json`` with sorted keys."""
    return json.loads(json.dumps(component, sort_keys=True, default=str))


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
    validated = normalise(ComponentModel.model_validate(expected).model_dump(mode="json"))
    difference = first_difference(_dummy_keys_masked(validated, actual), actual)
    if difference is not None:
        raise DefinitionInvalid(
            "does not survive load_component() -> dump_component(): the rebuilt team dumps a different value",
            field=difference,
            hint="register what team.dump_component() returns, not hand-edited JSON",
        )


def _dummy_keys_masked(expected: Any, actual: Any) -> Any:
    """``expected`` with each dummy key (``api_key="EMPTY"``, stored in place of the mask for a local model
    server: :func:`~config_registry.placeholders.is_dummy_key`) written as the mask AutoGen dumps it as, as a
    reference is compared; the stored definition keeps the key, which the service builds the client with."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return {key: _dummy_keys_masked(value, actual.get(key)) for key, value in expected.items()}
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [_dummy_keys_masked(x, y) for x, y in zip(expected, actual, strict=True)]
    return MASK if isinstance(expected, str) and actual == MASK and is_dummy_key(expected) else expected


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
            hint=install_hint(exc)
            or "check the JSON against the component's config schema; dump it with team.dump_component()",
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
    schema = getattr(component_class(component["provider"]), "component_config_schema", None)
    fields = getattr(schema, "model_fields", {})
    missing = [str(e["loc"][0]) for e in errors if e["type"] == "missing" and len(e["loc"]) == 1]
    if len(missing) != len(errors) or not all(m in fields and _admits_none(fields[m].annotation) for m in missing):
        return []
    return missing


def component_class(provider: str) -> Any:
    """The class ``provider`` names (after AutoGen's own aliases), or ``None``; its module is imported.

    Only call it on a provider that passed :func:`config_registry.allowlist.check_providers`.
    """
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
