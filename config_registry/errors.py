"""The registry's errors, under one root that says what happened and how to fix it.

``HintedError`` carries a message and a hint. A package built on the registry may take it as the root
of its own hierarchy, so that one ``except`` catches the registry's errors and its own alike.

    from config_registry.errors import UnknownTeam

    try:
        registry.resolve("nope")
    except UnknownTeam as exc:
        print(exc.message, exc.hint)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class HintedError(Exception):
    """Base of every error the registry raises on purpose: what happened, and how to fix it.

    Args:
        message: What happened, in one sentence.
        hint: How to fix it, when there is something the caller can do.
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(f"{message} (fix: {hint})" if hint else message)


class RegistryError(HintedError):
    """Base of config-registry errors."""


class UnknownTeam(RegistryError):
    """No team of that name is registered."""


class UnknownVersion(RegistryError):
    """The version or label does not name a registered version of that team."""


class DefinitionInvalid(RegistryError):
    """A team definition failed validation; ``field`` names the offending JSON path."""

    def __init__(self, message: str, *, field: str | None = None, hint: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message, hint=hint)
        self.field = field


class ScriptUnreadable(DefinitionInvalid):
    """A script a shell in the definition runs cannot be read, so a secret in it could not be looked for: a
    PowerShell ``-EncodedCommand`` that does not decode, or shells nested deeper than the registry reads."""


class RegistryCorrupt(RegistryError):
    """The registry repository is not a git repository, has uncommitted edits or lock files a killed git
    command left, is on a detached HEAD, or holds malformed files."""


class RegistryNotFound(RegistryError):
    """No registry exists at the path yet (a reader never makes one; the first registration does), or the path
    is a git repository that is not a registry (a project's checkout), where none is ever made."""


class RegistryConflict(RegistryError):
    """Another writer holds the registry lock and did not release it in time."""


class SecretUnavailable(RegistryError):
    """A secret reference could not be resolved when building a team (e.g. an unset environment variable)."""


class FactoryInvalid(RegistryError):
    """A ``module:function`` factory could not be imported, raised, or returned something that is not a team."""


class ExtensionInvalid(RegistryError):
    """An installed package declares something to the registry through an entry point (a bounding context)
    that does not load, or is not what its entry point group expects."""


def folder_failure(exc: OSError) -> str:
    """Why a folder could not be made, as a person would say it (for the registry's and the database's)."""
    if isinstance(exc, FileExistsError | NotADirectoryError):
        return "a file is in the way"
    return exc.strerror or type(exc).__name__


def validation_message(error: Mapping[str, Any]) -> str:
    """One pydantic error for a person: a validator's own ``ValueError`` text, without the "Value error, "
    pydantic puts before it; any other error's message as pydantic words it."""
    cause = error.get("ctx", {}).get("error") if error.get("type") == "value_error" else None
    return str(cause) if cause is not None else str(error["msg"])
