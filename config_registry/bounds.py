"""Which chat-completion contexts really bound what an agent stores.

AutoGen's ``BufferedChatCompletionContext`` bounds what is *sent* to the model, not what ``save_state()``
keeps, so it does not count. The runtime package registers its own bounding contexts at import time, and a
context provider from AutoGen's or teamstore's packages that is not registered yet has its module imported
on first look (so a process using the registry alone sees the same bounds as the runtime):

    from config_registry.bounds import register_bounding_context, is_bounding_context

    register_bounding_context("teamstore.context.BoundedChatCompletionContext", ("max_messages", "keep_first"))
    assert is_bounding_context("teamstore.context.BoundedChatCompletionContext")
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Mapping
from typing import Any

from config_registry.manifest import BUILTIN_PROVIDER_PREFIXES

_BOUNDING_CONTEXTS: dict[str, tuple[str, ...]] = {}


def register_bounding_context(provider: str, bound_fields: tuple[str, ...]) -> None:
    """Declare that contexts of ``provider`` bound their stored state.

    Args:
        provider: The component ``provider`` string as it appears in ``dump_component()`` output.
        bound_fields: The config fields that set the bound; they are part of a participant's fingerprint,
            because changing them changes what a stored state may hold.
    """
    _BOUNDING_CONTEXTS[provider] = tuple(bound_fields)


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
