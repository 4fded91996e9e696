"""What installed packages add to the registry, declared through entry points.

A package that ships AutoGen components declares them in its own ``pyproject.toml``; the registry names
no such package in its code, and a process that uses the registry alone (a CI job running ``check``)
still sees what every installed package declares:

    [project.entry-points."config_registry.providers"]
    mypackage = "mypackage"                 # providers under "mypackage." are allowed, as AutoGen's are

    [project.entry-points."config_registry.bounding_contexts"]
    "mypackage.context.MyContext" = "mypackage.context:BOUNDING"   # a config_registry.bounds.BoundingContext

A package may also declare its providers when it is imported (:func:`register_provider_prefix`), as it
may register a bounding context (:mod:`config_registry.bounds`): a process that runs it from a source tree,
without its installed metadata, then allows them too. Reading the declarations imports nothing: a provider prefix is the module its entry point names, and a
bounding context's module is imported only when a persisted participant names that context's provider.
An installed package is trusted as AutoGen is (it runs code when imported anyway); a stored definition
never makes the registry import a module an installed package has not declared.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importlib.metadata (email, zipfile...) is imported when entry points are first read
    from importlib.metadata import EntryPoint

PROVIDERS = "config_registry.providers"
"""Entry point group: each entry names a module under which every provider is allowed."""
BOUNDING_CONTEXTS = "config_registry.bounding_contexts"
"""Entry point group: each entry is named after a context's provider and points at its ``BoundingContext``."""


_REGISTERED_PREFIXES: set[str] = set()


def register_provider_prefix(prefix: str) -> None:
    """Allow every provider under ``prefix`` (``"mypackage."``) in every definition, as an entry point of
    the :data:`PROVIDERS` group does.

    Args:
        prefix: A module prefix, ending in ``"."``.
    """
    _REGISTERED_PREFIXES.add(prefix)


@functools.cache
def declared(group: str) -> dict[str, EntryPoint]:
    """The entry points installed packages declare in ``group``, by name (read once per process).

    Args:
        group: :data:`PROVIDERS` or :data:`BOUNDING_CONTEXTS`.

    Returns:
        Entry point name -> entry point, nothing loaded.
    """
    from importlib.metadata import entry_points

    return {entry.name: entry for entry in entry_points(group=group)}


def provider_prefixes() -> tuple[str, ...]:
    """The provider prefixes installed packages declare (``"mypackage."``) or registered, sorted."""
    return tuple(sorted({f"{entry.module}." for entry in declared(PROVIDERS).values()} | _REGISTERED_PREFIXES))


def declaring_package(entry: EntryPoint) -> str:
    """The distribution that declares ``entry``, for a message (``"the package declaring it"`` if unknown)."""
    return entry.dist.name if entry.dist is not None else "the package declaring it"
