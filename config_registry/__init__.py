"""config_registry: AutoGen team definitions versioned in git, validated, diffed and built fresh.

    from config_registry import Manifest, Registry

    registry = Registry("./registry", create=True)   # created only when asked
    registry.add("support_triage", team.dump_component(),
                 Manifest(name="support_triage", persist=["researcher"], context_bound=20),
                 "first version", label="production")
    built = registry.build("support_triage")          # label production, else the latest version
    result = await built.team.run(task="hi")

The registry knows no package built on it: what such a package adds (providers allowed as AutoGen's
own are, bounding contexts) it declares through entry points (:mod:`config_registry.extensions`) or
registers with :mod:`config_registry.bounds`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from config_registry.diff import CompatibilityReport, SemanticDiff
    from config_registry.errors import (
        DefinitionInvalid,
        ExtensionInvalid,
        FactoryInvalid,
        HintedError,
        RegistryConflict,
        RegistryCorrupt,
        RegistryError,
        RegistryNotFound,
        ScriptUnreadable,
        SecretUnavailable,
        UnknownTeam,
        UnknownVersion,
    )
    from config_registry.manifest import Manifest, MemoryDeclaration
    from config_registry.registry import Registry
    from config_registry.types import BuiltTeam, HistoryEntry, TeamDefinition, TeamSummary

# Where each public name lives. They are imported when first asked for, not with the package: a process
# that needs only the errors or the extension points (teamstore's command line, say) does not pay for
# AutoGen, pydantic models and git just by importing one module of the registry.
_HOMES = {
    "CompatibilityReport": "diff",
    "SemanticDiff": "diff",
    "Manifest": "manifest",
    "MemoryDeclaration": "manifest",
    "Registry": "registry",
    "BuiltTeam": "types",
    "HistoryEntry": "types",
    "TeamDefinition": "types",
    "TeamSummary": "types",
    **dict.fromkeys(
        ("DefinitionInvalid", "ExtensionInvalid", "FactoryInvalid", "HintedError", "RegistryConflict",
         "RegistryCorrupt", "RegistryError", "RegistryNotFound", "ScriptUnreadable", "SecretUnavailable",
         "UnknownTeam", "UnknownVersion"),
        "errors",
    ),
}

__all__ = [
    "BuiltTeam",
    "CompatibilityReport",
    "DefinitionInvalid",
    "ExtensionInvalid",
    "FactoryInvalid",
    "HintedError",
    "HistoryEntry",
    "Manifest",
    "MemoryDeclaration",
    "Registry",
    "RegistryConflict",
    "RegistryCorrupt",
    "RegistryError",
    "RegistryNotFound",
    "ScriptUnreadable",
    "SecretUnavailable",
    "SemanticDiff",
    "TeamDefinition",
    "TeamSummary",
    "UnknownTeam",
    "UnknownVersion",
]


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'config_registry' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"config_registry.{home}"), name)
    globals()[name] = value  # once: later lookups are plain module attributes
    return value
