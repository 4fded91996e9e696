"""What to install when a component needs a module this environment lacks.

    from config_registry.missing import install_hint

    try:
        dumped = team.dump_component()
    except Exception as exc:
        hint = install_hint(exc)   # '... pip install "autogen-ext[azure]"' for a missing 'azure'; else None

AutoGen's components import their optional packages when they are dumped, loaded or built (an
``AzureOpenAIChatCompletionClient`` imports ``azure`` to dump itself), so a missing package surfaces as a
``ModuleNotFoundError`` far from the caller's own imports. What fixes it is the package, not the definition.
"""

from __future__ import annotations

import functools
import re
from importlib import metadata

# A requirement's distribution name, and the extra it belongs to: "azure-identity; extra == 'azure'".
_REQUIREMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def missing_module(exc: BaseException) -> str | None:
    """The module whose absence raised ``exc``: ``exc`` itself a ``ModuleNotFoundError``, or raised from one
    (``raise ImportError("...") from e``, as autogen-ext's optional parts do); ``None`` otherwise."""
    cause: BaseException | None = exc
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ModuleNotFoundError) and cause.name:
            return cause.name
        seen.add(id(cause))
        cause = cause.__cause__
    return None


def install_hint(exc: BaseException) -> str | None:
    """How to install what ``exc`` found missing, naming the module and the autogen-ext extra that ships it
    (``pip install "autogen-ext[azure]"`` for ``azure``); ``None`` when ``exc`` is not a missing module."""
    module = missing_module(exc)
    if module is None:
        return None
    extra = autogen_ext_extra(module)
    if extra is None:
        return f"install the package that provides the module {module!r}, here and wherever the team is built"
    return (
        f"install autogen-ext's {extra!r} extra, which provides the module {module!r}, here and wherever the team "
        f'is built: pip install "autogen-ext[{extra}]"'
    )


def autogen_ext_extra(module: str) -> str | None:
    """The autogen-ext extra that installs ``module`` (``azure`` and ``azure.identity``: ``azure``;
    ``mcp``: ``mcp``), the one named after it if several do; ``None`` when none does."""
    top, full = _normalise(module.split(".")[0]), _normalise(module)
    extras = [extra for name, extra in _optional_requirements() if name in (top, full) or name.startswith(f"{top}-")]
    return next((extra for extra in extras if extra == top), extras[0] if extras else None)


@functools.cache
def _optional_requirements() -> tuple[tuple[str, str], ...]:
    """(distribution, extra) for each of autogen-ext's optional requirements, names normalised."""
    try:
        requirements = metadata.requires("autogen-ext") or []
    except metadata.PackageNotFoundError:
        return ()
    found = []
    for requirement in requirements:
        name, extra = _REQUIREMENT.match(requirement), _EXTRA.search(requirement)
        if name and extra:
            found.append((_normalise(name.group(0)), extra.group(1)))
    return tuple(found)


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
