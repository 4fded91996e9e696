"""Which chat-completion contexts really bound what an agent stores.

AutoGen's ``BufferedChatCompletionContext`` bounds what is *sent* to the model, not what ``save_state()``
keeps, so it does not count. The runtime package registers its own bounding contexts at import time:

    from config_registry.bounds import register_bounding_context, is_bounding_context

    register_bounding_context("teamstore.context.BoundedChatCompletionContext", ("max_messages", "keep_first"))
    assert is_bounding_context("teamstore.context.BoundedChatCompletionContext")
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_BOUNDING_CONTEXTS: dict[str, tuple[str, ...]] = {}


def register_bounding_context(provider: str, bound_fields: tuple[str, ...]) -> None:
    """Declare that contexts of ``provider`` bound their stored state.

    Args:
        provider: The component ``provider`` string as it appears in ``dump_component()`` output.
        bound_fields: The config fields that set the bound; they are part of a participant's fingerprint,
            because changing them changes what a stored state may hold.
    """
    _BOUNDING_CONTEXTS[provider] = tuple(bound_fields)


def is_bounding_context(provider: str) -> bool:
    """True if ``provider`` has been registered as a bounding context."""
    return provider in _BOUNDING_CONTEXTS


def bounding_contexts() -> Mapping[str, tuple[str, ...]]:
    """A read-only view of the registered providers and their bound fields."""
    return dict(_BOUNDING_CONTEXTS)


def bound_of(context_component: Mapping[str, Any]) -> dict[str, Any] | None:
    """The bound settings of a dumped context component, or ``None`` if it does not bound storage.

    Args:
        context_component: The ``model_context`` entry of an agent's component config.
    """
    provider = str(context_component.get("provider", ""))
    fields = _BOUNDING_CONTEXTS.get(provider)
    if fields is None:
        return None
    config = context_component.get("config", {}) or {}
    return {"provider": provider, **{name: config.get(name) for name in fields}}
