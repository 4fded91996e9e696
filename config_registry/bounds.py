"""Which chat-completion contexts really bound what an agent stores.

AutoGen's ``BufferedChatCompletionContext`` bounds what is *sent* to the model, not what ``save_state()``
keeps, so it does not count. The runtime package registers its own bounding contexts at import time, and a
context provider from AutoGen's or teamstore's packages that is not registered yet has its module imported
on first look (so a process using the registry alone sees the same bounds as the runtime):

    from config_registry.bounds import register_bounding_context, is_bounding_context

    register_bounding_context("teamstore.context.BoundedChatCompletionContext", ("max_messages", "keep_first"))
    assert is_bounding_context("teamstore.context.BoundedChatCompletionContext")

A context may also register a check of its sizes, so that ``registry add`` refuses a persisted participant
whose context would refuse them at load time, with the context's own reason.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from config_registry.manifest import BUILTIN_PROVIDER_PREFIXES


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
    """The bound fields of ``provider``, importing its module first if it is one of AutoGen's or
    teamstore's and not yet registered: a process that uses the registry without importing teamstore
    (a CI job running ``check``) would otherwise read every bound as none, and fingerprints would miss
    a bound change that the runtime refuses stored sessions for. Other modules are never imported here:
    stored JSON may have been edited by hand."""
    if provider not in _BOUNDING_CONTEXTS and provider.startswith(BUILTIN_PROVIDER_PREFIXES):
        # Not installed here: then it is not a bounding context here either.
        with contextlib.suppress(ImportError):
            importlib.import_module(provider.rpartition(".")[0])
    return _BOUNDING_CONTEXTS.get(provider)


def is_bounding_context(provider: str) -> bool:
    """True if ``provider`` is registered as a bounding context (by its own module, imported if needed)."""
    return _fields_of(provider) is not None


def bounding_contexts() -> Mapping[str, tuple[str, ...]]:
    """A read-only view of the registered providers and their bound fields."""
    return dict(_BOUNDING_CONTEXTS)


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
