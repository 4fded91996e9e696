"""What loading a definition would import or run, checked on its raw JSON before anything is imported.

    from config_registry.allowlist import check_providers, check_source_code

    component = team.dump_component().model_dump(mode="json")
    check_providers(component, manifest)     # every provider on the allow-list, else DefinitionInvalid
    check_source_code(component, manifest)   # source-code tools, code executors, MCP stdio servers: allowed?

``load_component()`` imports whatever module a ``provider`` names and executes ``FunctionTool`` source, so
these run first: a provider must be on the manifest's allow-list, and code the definition carries or
starts runs only where ``allow_source_code_tools`` says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autogen_core._component_config import WELL_KNOWN_PROVIDERS

from config_registry.errors import DefinitionInvalid
from config_registry.manifest import Manifest
from config_registry.secrets import is_reference, walk

# Allowed by the "autogen_ext." prefix, yet as able to run arbitrary code as a source-code tool.
CODE_RUNNING_PROVIDERS = ("autogen_ext.code_executors.", "autogen_ext.tools.code_execution.")
STDIO_SERVER = "StdioServerParams"  # McpWorkbench / StdioMcpToolAdapter: server_params.type


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
