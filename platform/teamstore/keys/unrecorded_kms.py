"""KMS keys this database marks but does not record: after a restore, the keys rotations made after the backup.
Found on request only (``teamstore keys status --find-unrecorded``), reported, never deleted.

    from teamstore.keys.unrecorded_kms import find

    found = await find(keys, max_keys=1000)   # `teamstore keys status --find-unrecorded`
    found.keys                                  # each with its ARN, CreationDate, KeyState and what to do

A database marks the KMS keys it uses with its id (:mod:`teamstore.keys.marks`), a rotation's key as KMS makes
it. A database restored from a backup has that id too, and no row for the keys rotations made after the backup,
whose backups stay readable while they exist. Finding them takes a look at every key of the account and region:
``kms:ListKeys`` (1,000 a page) and a ``kms:ListResourceTags`` per key, thousands of requests in a busy account,
counted against its KMS request quotas. So it is asked for, bounded by ``max_keys``, and never part of the
health check ``keys status`` is.

None is ever scheduled for deletion here, unlike the key file's (:mod:`teamstore.keys.unrecorded`): a copy of a
database restored beside the live one (staging, an investigation) has the live one's id, so from the copy the
live database's newer keys, its current one included, look exactly like a restore's leftovers. The operator,
who knows which database this is, deletes them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from teamstore.db.identity import database_id
from teamstore.errors import ConfigurationError, EncryptionError, KeyUnavailable
from teamstore.keys.failures import AGAIN, store_failed
from teamstore.keys.kek import KMS
from teamstore.keys.kms import DELETION_WINDOW_DAYS, mark_of
from teamstore.keys.schema import key_encryption_keys
from teamstore.keys.service import KeyService

MAX_KEYS = 1000
"""How many of the account's KMS keys a search looks at by default: one ``ListKeys`` page and at most as many
``ListResourceTags``."""

_NOT_BY_TEAMSTORE = (
    "teamstore never schedules its deletion: a copy of this database restored beside the live one (staging) has "
    "the live one's id, and from there the live database's newer keys, its current one included, look the same")


@dataclass(frozen=True)
class UnrecordedKms:
    """A KMS key this database marks that it does not record."""

    arn: str
    created_at: datetime | None
    """KMS's ``CreationDate`` (``None``: KMS would not describe the key)."""
    key_state: str | None
    """KMS's ``KeyState``: ``Enabled``, ``Disabled``, ``PendingDeletion``... (``None``: not described)."""
    deletion_date: datetime | None
    """When KMS deletes it, if its deletion is scheduled."""

    def fix(self) -> str:
        """What to do with it."""
        if self.key_state == "PendingDeletion":
            when = f" on {self.deletion_date:%Y-%m-%d}" if self.deletion_date else ""
            return (f"nothing: KMS deletes it{when}. If this is a copy of the live database and the key is the live "
                    f"one's, `aws kms cancel-key-deletion --key-id {self.arn}`, then `aws kms enable-key`")
        return (f"if this database is the one in use (not a copy restored beside it) and no other copy of it records "
                f"the key (its `teamstore keys status` does not list it), once the backups taken under it are no "
                f"longer wanted: `aws kms schedule-key-deletion --key-id {self.arn} --pending-window-in-days "
                f"{DELETION_WINDOW_DAYS}`")

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view, with :meth:`fix`."""
        return {"kek_id": f"{KMS}{self.arn}", "arn": self.arn, "created_at": self.created_at,
                "key_state": self.key_state, "deletion_date": self.deletion_date, "fix": self.fix()}


@dataclass
class KmsSearch:
    """What a search of the account's KMS keys found."""

    mark: str
    """The tag it looked for (``teamstore-database-<id>``)."""
    uses_kms: bool = True
    """Whether the database uses KMS at all (records a KMS key, or ``TEAMSTORE_KMS_KEY_ID`` is set): if not,
    KMS was asked nothing."""
    keys: list[UnrecordedKms] = field(default_factory=list)
    examined: int = 0
    """How many of the account's keys it looked at."""
    complete: bool = False
    """Whether it looked through all the account's keys (else ``max_keys`` or a ``problem`` stopped it)."""
    tags_refused: int = 0
    """How many keys would not show their tags (the role is granted ``kms:ListResourceTags`` only on some)."""
    problem: EncryptionError | ConfigurationError | None = None
    """Why it could not look (KMS refused or failed); what it found before is kept."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        problem = self.problem
        return {"mark": self.mark, "uses_kms": self.uses_kms, "keys": [k.as_dict() for k in self.keys], "examined": self.examined,
                "complete": self.complete, "tags_refused": self.tags_refused, "never_deleted": _NOT_BY_TEAMSTORE,
                "problem": None if problem is None else {"error": type(problem).__name__, "message": problem.message,
                                                         "hint": problem.hint}}


async def find(keys: KeyService, max_keys: int = MAX_KEYS) -> KmsSearch:
    """The KMS keys marked as this database's that it does not record, among at most ``max_keys`` of the account's
    (none, asking KMS nothing, when the database uses no KMS key: ``uses_kms``).

    A failure of KMS is said in ``problem``, never raised: the rest of ``keys status`` stands.

    Raises:
        StoreUnavailable: The database failed.
    """
    recorded, ours = await _recorded(keys), await database_id(keys.engine)
    search = KmsSearch(mark_of(ours))
    if keys.ring.kms_key_id is None and not any(k.startswith(KMS) for k in recorded):
        search.uses_kms, search.complete = False, True
        return search
    try:
        arns, search.complete = await asyncio.to_thread(keys.ring.kms.account_keys, max_keys)
        search.examined = len(arns)
        asked = [a for a in arns if f"{KMS}{a}" not in recorded]  # a recorded key's tags are no news
        marked, search.tags_refused = await asyncio.to_thread(keys.ring.kms.marked_keys, ours, asked)
        if asked and search.tags_refused == len(asked):
            search.problem, search.complete = _tags_refused(), False
        recorded = await _recorded(keys)  # again: a key a rotation recorded meanwhile is its current one
        search.keys = [await _described(keys, arn) for arn in marked if f"{KMS}{arn}" not in recorded]
    except KeyUnavailable as exc:
        search.problem, search.complete = exc, False
    return search


async def _recorded(keys: KeyService) -> set[str]:
    k = key_encryption_keys.c
    try:
        async with keys.engine.connect() as conn:
            return {str(r[0]) for r in (await conn.execute(select(k.kek_id))).all()}
    except SQLAlchemyError as exc:
        raise store_failed(exc, "read the key-encryption keys", AGAIN) from exc


async def _described(keys: KeyService, arn: str) -> UnrecordedKms:
    meta = await asyncio.to_thread(keys.ring.kms.metadata, arn) or {}
    return UnrecordedKms(arn, _in_utc(meta.get("CreationDate")), meta.get("KeyState"),
                         _in_utc(meta.get("DeletionDate")))


def _in_utc(value: datetime | None) -> datetime | None:
    """boto3's time (aware, in the zone the answer gave) as UTC, as every time teamstore shows."""
    return value.astimezone(UTC) if value is not None else None


def _tags_refused() -> KeyUnavailable:
    return KeyUnavailable("KMS refused to list the tags of every key it was asked about (AccessDeniedException)",
                          hint="grant this process's role kms:ListResourceTags on the account's keys (at least on "
                          "those tagged teamstore=key-encryption-key, which rotations make, and the keys you named "
                          "in TEAMSTORE_KMS_KEY_ID or `keys rotate --to`)")
