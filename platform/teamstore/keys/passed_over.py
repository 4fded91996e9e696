"""The users ``teamstore keys migrate`` passes over: their data key row does not open under its key-encryption
key (damaged), or is under one KMS will not use (disabled, scheduled for deletion, destroyed). Their data is left
as it was, and the sealing goes on with everyone else's.

    from teamstore.keys.passed_over import PassedOver

    passed = PassedOver()
    done = await seal_saved_states(engine, keys, passed=passed)    # a damaged row's user is passed over
    passed.as_dict()          # {"damaged": [key ids], "unusable": [key ids]}: the rows, never the users

They are named as ``keys rotate`` names such rows: by the key id of their ``ts_data_keys`` row (random; it names
no user, and is the row to restore). A key-encryption key that cannot be reached at all (``KeyUnavailable``)
is not passed over: nothing could be sealed, and the caller stops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import ColumnElement

from teamstore.errors import DataKeyDamaged, KeyDestroyed
from teamstore.keys.service import DataKey, KeyService


@dataclass
class PassedOver:
    """The users whose data key could not be had to seal what they stored, by their key rows' ids."""

    damaged: list[str] = field(default_factory=list)
    """Key ids of rows their KEK did not open (``DataKeyDamaged``): restore them from a database backup."""
    unusable: list[str] = field(default_factory=list)
    """Key ids of rows under a KEK that is disabled, scheduled for deletion or destroyed (``KeyDestroyed``)."""
    _users: set[str] = field(default_factory=set, repr=False)

    def __contains__(self, user_id: object) -> bool:
        return user_id in self._users

    def add(self, user_id: str, key_id: str | None, exc: DataKeyDamaged | KeyDestroyed) -> None:
        """Pass ``user_id`` over for ``exc``; their row ``key_id`` is reported (``None``: gone meanwhile, an
        erasure destroyed it and their data with it, and there is nothing to restore)."""
        self._users.add(user_id)
        if key_id is not None:
            (self.damaged if isinstance(exc, DataKeyDamaged) else self.unusable).append(key_id)

    def as_dict(self) -> dict[str, list[str]]:
        """A JSON-ready view: the key ids, never the user ids."""
        return {"damaged": list(self.damaged), "unusable": list(self.unusable)}


async def key_to_seal(
    keys: KeyService, user_id: str, stored: ColumnElement[bool], passed: PassedOver | None
) -> DataKey | None:
    """:meth:`KeyService.key_to_seal`, passing over (into ``passed``) a user whose key row cannot be opened.

    Args:
        keys: The key service.
        user_id: Whose data is to be sealed.
        stored: That it is still stored (see :meth:`KeyService.key_to_seal`).
        passed: Where users passed over are kept; ``None`` raises for them instead.

    Returns:
        The key; ``None`` when nothing is left to seal, or the user is passed over (now, or at an earlier row).

    Raises:
        DataKeyDamaged, KeyDestroyed: Only without ``passed``.
        KeyUnavailable, ErasureInProgress, StoreUnavailable: As :meth:`KeyService.key_to_seal` raises them.
    """
    if passed is None:
        return await keys.key_to_seal(user_id, stored)
    if user_id in passed:
        return None  # one try per user: a KMS that refuses a key once refuses it for every row of theirs
    try:
        return await keys.key_to_seal(user_id, stored)
    except (DataKeyDamaged, KeyDestroyed) as exc:
        passed.add(user_id, await keys.key_id(user_id), exc)
    return None
