"""Whether the key-encryption keys in use can be used now: what ``teamstore keys status`` checks.

    from teamstore.keys.health import with_health
    from teamstore.keys.status import status

    shown = await with_health(keys, await status(keys, settings))
    shown["healthy"]                          # False: a KEK in use cannot be used; each KEK says why in "problem"

A KEK is in use when it is current (new users' data keys are wrapped by it) or when live data keys are still
wrapped by it (a rotation unfinished, rows it could not move). Each is asked to wrap a few random bytes and
unwrap them again, as a worker does a data key: the local key file is read with every check a worker's read
makes (there, owner-only, holding the key the database names), KMS is asked ``Encrypt`` and ``Decrypt`` (what a
worker is granted). No data key is read and nothing is written: no key file is made, and KMS's encryption
context (CloudTrail logs it) names :data:`PROBE_KEY_ID`, never a data key.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from teamstore.errors import ConfigurationError, EncryptionError
from teamstore.keys.ring import KeyRing
from teamstore.keys.service import KeyService

PROBE_KEY_ID = "keys-status-probe"
"""The data key id a probe wraps its bytes for: no data key has it (theirs are hex)."""


def in_use(keks: list[dict[str, Any]]) -> list[str]:
    """The ids of the KEKs of ``keks`` (``status``'s) that live data keys need: the current one, and every one not
    destroyed that data keys are still wrapped by. A destroyed one is beyond use by design (its state says so)."""
    return [k["kek_id"] for k in keks
            if k["state"] == "current" or (k["state"] == "retired" and k["data_keys"])]


def probe(ring: KeyRing, kek_id: str) -> None:
    """Wrap a few random bytes under ``kek_id`` and unwrap them again (blocking: the key file, or two KMS requests).

    Raises:
        KeyUnavailable, KeyDestroyed, ConfigurationError: As a worker meets them (:meth:`KeyRing.get`).
    """
    kek = ring.get(kek_id)
    kek.unwrap(kek.wrap(os.urandom(32), PROBE_KEY_ID), PROBE_KEY_ID)


def probe_first(ring: KeyRing) -> None:
    """Probe the KMS key a database with no KEK yet starts with (``TEAMSTORE_KMS_KEY_ID``'s), if one is named:
    otherwise its first user's session is the first to meet a key KMS does not have, refuses or cannot reach.
    The key file is left alone: probing it would make it (its first key is made with the first data key).

    Raises:
        KeyUnavailable, ConfigurationError: As that first session would meet them.
    """
    kek_id = ring.configured()
    if kek_id is not None:
        probe(ring, kek_id)


async def check(keys: KeyService, kek_ids: list[str]) -> dict[str, EncryptionError | ConfigurationError]:
    """Probe each KEK of ``kek_ids``, whatever the others answer: each says what is wrong with it.

    Args:
        keys: The key service (its ring).
        kek_ids: The KEKs to probe (:func:`in_use`).

    Returns:
        Why each one that cannot be used now cannot be; the ones missing from it can.
    """
    unusable: dict[str, EncryptionError | ConfigurationError] = {}
    for kek_id in kek_ids:
        try:
            await asyncio.to_thread(probe, keys.ring, kek_id)
        except (EncryptionError, ConfigurationError) as exc:  # said as the KEK's health, never dropped
            unusable[kek_id] = exc
    return unusable


async def with_health(keys: KeyService, shown: dict[str, Any]) -> dict[str, Any]:
    """``shown`` (:func:`teamstore.keys.status.status`'s) with each KEK's ``health`` (``ok``, ``unusable``, or
    ``unchecked``: not in use) and ``problem`` (``None``, or the ``error``, ``message`` and ``hint`` of why it
    cannot be used); ``configured``, the same for the KEK the settings name (``TEAMSTORE_KMS_KEY_ID``: one this
    database never used is refused by every worker; with no KEK recorded yet, one that cannot wrap the first data
    key); and ``healthy``: whether all of them can be used."""
    checked = in_use(shown["keks"])
    unusable = await check(keys, checked)
    keks = [{**k, "health": _health(k["kek_id"], checked, unusable), "problem": _problem(unusable.get(k["kek_id"]))}
            for k in shown["keks"]]
    configured: EncryptionError | ConfigurationError | None = None
    try:  # a TEAMSTORE_KMS_KEY_ID this database never used: every worker refuses to start on it
        await keys.check_configured()
        if not shown["keks"]:
            await asyncio.to_thread(probe_first, keys.ring)
    except (EncryptionError, ConfigurationError) as exc:
        configured = exc
    return {**shown, "keks": keks, "configured": _problem(configured), "healthy": not unusable and configured is None}


def _health(kek_id: str, checked: list[str], unusable: dict[str, Any]) -> str:
    if kek_id in unusable:
        return "unusable"
    return "ok" if kek_id in checked else "unchecked"


def _problem(exc: EncryptionError | ConfigurationError | None) -> dict[str, Any] | None:
    if exc is None:
        return None
    return {"error": type(exc).__name__, "message": exc.message, "hint": exc.hint}
