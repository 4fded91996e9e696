"""Fingerprints of persisted participants: a hash over exactly what their stored state depends on.

    from config_registry.fingerprint import fingerprints

    prints = fingerprints(component, ["researcher"])   # {"researcher": "3f1c..."}

The inputs are the participant's name (agent names key saved team state), its agent provider and
``component_version`` (they decide the state's shape) and the bound of its model context (it decides how
much a state may hold). The system message and the model client are left out on purpose: changing them
does not make a stored state unloadable.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from config_registry.bounds import bound_of
from config_registry.participants import participant_names, participants

FINGERPRINT_CHARS = 32


def fingerprint_inputs(participant: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical inputs of one participant's fingerprint.

    Args:
        participant: The participant's component JSON.

    Returns:
        ``name``, ``provider``, ``component_version`` and ``bound`` (``None`` when unbounded).
    """
    config = participant.get("config")
    config = config if isinstance(config, Mapping) else {}
    context = config.get("model_context")
    return {
        "name": config.get("name"),
        "provider": participant.get("provider"),
        "component_version": participant.get("component_version", participant.get("version")),
        "bound": bound_of(context if isinstance(context, Mapping) else {}),
    }


def fingerprint(participant: Mapping[str, Any]) -> str:
    """The hex sha256 (first 32 characters) of a participant's canonical fingerprint inputs."""
    canonical = json.dumps(fingerprint_inputs(participant), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:FINGERPRINT_CHARS]


def fingerprints(component: Mapping[str, Any], persist: Iterable[str]) -> dict[str, str]:
    """Fingerprints of the persisted participants of a definition.

    Args:
        component: The team or agent JSON.
        persist: The persisted participants' names.

    Returns:
        Participant name -> fingerprint, for the persisted participants only.
    """
    wanted = set(persist)
    by_name = dict(zip(participant_names(component), participants(component), strict=True))
    return {name: fingerprint(p) for name, p in sorted(by_name.items()) if name in wanted}
