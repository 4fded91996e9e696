"""Which chat-completion contexts really bound what an agent stores.

AutoGen's ``BufferedChatCompletionContext`` bounds what is *sent* to the model, not what ``save_state()``
keeps, so it does not count. A package that ships a bounding context declares it through the
``config_registry.bounding_contexts`` entry point group (:mod:`config_registry.extensions`), loaded
when a persisted participant names its provider, so a process using the registry alone sees the same
bounds as one that imported the package; it may also register it when imported:

    from config_registry.bounds import BoundingContext, register_bounding_context, is_bounding_context

    register_bounding_context("mypackage.context.MyContext", ("max_messages",))
    assert is_bounding_context("mypackage.context.MyContext")

A context may also register a check of its sizes, so that ``registry add`` refuses a persisted participant
whose context would refuse them at load time, with the context's own reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from config_registry import extensions
from config_registry.errors import ExtensionInvalid


class BoundProblem(NamedTuple):
    """Why a bounding context's sizes are refused."""

    field: str
    """The config field to change."""
    message: str
    """What is wrong, as a clause (``"max_messages=4 with keep_first=2 leaves no room ..."``)."""
    hint: str
    """How to fix it."""


BoundCheck = Callable[[Mapping[str, Any]], BoundProblem | None]
"""Takes a context's dumped ``config`` and returns why its sizes are refused, or ``None``."""


class BoundingContext(NamedTuple):
    """What an entry point of the ``config_registry.bounding_contexts`` group points at."""

    bound_fields: tuple[str, ...]
    """The config fields that set the bound (``("max_messages", "keep_first")``)."""
    check: BoundCheck | None = None
    """The context's own rule for which sizes it refuses, if it has one."""


_BOUNDING_CONTEXTS: dict[str, tuple[str, ...]] = {}
_BOUND_CHECKS: dict[str, BoundCheck] = {}


def register_bounding_context(provider: str, bound_fields: tuple[str, ...], check: BoundCheck | None = None) -> None:
    """Declare that contexts of ``provider`` bound their stored state.

    Args:
        provider: The component ``provider`` string as it appears in ``dump_component()`` output.
        bound_fields: The config fields that set the bound; they are part of a participant's fingerprint,
            because changing them changes what a stored state may hold.
        check: The context's own rule for which sizes it refuses, if it has one.
    """
    _BOUNDING_CONTEXTS[provider] = tuple(bound_fields)
    if check is not None:
        _BOUND_CHECKS[provider] = check


def _fields_of(provider: str) -> tuple[str, ...] | None:
    """The bound fields of ``provider``, loading the entry point an installed package declares for it
    first if it is not registered yet: a process that uses the registry without importing that package
    (a CI job running ``check``) would otherwise read every bound as none, and fingerprints would miss a
    bound change that the runtime refuses stored sessions for. A module a stored definition names is never
    imported here: stored JSON may have been edited by hand."""
    if provider not in _BOUNDING_CONTEXTS:
        _load_declared(provider)
    return _BOUNDING_CONTEXTS.get(provider)


def _load_declared(provider: str) -> None:
    """Register the bounding context an installed package declares for ``provider``, if one does.

    Raises:
        ExtensionInvalid: The declaration does not load or is not a :class:`BoundingContext`: reading
            the bound as none would change every fingerprint of that context, so it is not guessed.
    """
    entry = extensions.declared(extensions.BOUNDING_CONTEXTS).get(provider)
    if entry is None:
        return
    package = extensions.declaring_package(entry)
    try:
        declared = entry.load()
    except Exception as exc:  # the declaring package's own import fails: a broken install
        raise ExtensionInvalid(
            f"{package} declares the bounding context {provider!r} at {entry.value!r}, which does not load: "
            f"{type(exc).__name__}: {exc}",
            hint=f"reinstall {package}, or uninstall it if nothing uses it",
        ) from exc
    if not isinstance(declared, BoundingContext):
        raise ExtensionInvalid(
            f"{package} declares the bounding context {provider!r} at {entry.value!r}, which is a "
            f"{type(declared).__name__}, not a config_registry.bounds.BoundingContext",
            hint=f"upgrade {package} to a release built for this registry",
        )
    register_bounding_context(provider, declared.bound_fields, declared.check)


def known_bounding_contexts() -> list[str]:
    """Every bounding context's provider, registered or declared by an installed package, sorted."""
    return sorted(set(_BOUNDING_CONTEXTS) | set(extensions.declared(extensions.BOUNDING_CONTEXTS)))


def is_bounding_context(provider: str) -> bool:
    """True if ``provider`` is a bounding context, registered or declared by an installed package."""
    return _fields_of(provider) is not None


def bound_of(context_component: Mapping[str, Any]) -> dict[str, Any] | None:
    """The bound settings of a dumped context component, or ``None`` if it does not bound storage.

    Args:
        context_component: The ``model_context`` entry of an agent's component config.
    """
    provider = str(context_component.get("provider", ""))
    fields = _fields_of(provider)
    if fields is None:
        return None
    config = context_component.get("config")
    config = config if isinstance(config, Mapping) else {}
    return {"provider": provider, **{name: config.get(name) for name in fields}}


def bound_problem(context_component: Mapping[str, Any]) -> BoundProblem | None:
    """Why a dumped bounding context's sizes are refused by its own registered check, or ``None``.

    Args:
        context_component: The ``model_context`` entry of an agent's component config.
    """
    provider = str(context_component.get("provider", ""))
    if _fields_of(provider) is None:
        return None
    check = _BOUND_CHECKS.get(provider)
    config = context_component.get("config")
    return check(config if isinstance(config, Mapping) else {}) if check is not None else None
