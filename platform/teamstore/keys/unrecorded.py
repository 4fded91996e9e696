"""Key-encryption keys in the local key file that the database does not record: made by rotations after the
backup it was restored from (the restored database has no row for them), or by a rotation stopped between making
its key and recording it. Backups taken under them stay readable while they exist, so they are destroyed too.

    from teamstore.keys.unrecorded import retire_unrecorded, unrecorded

    waiting = await unrecorded(keys, retire_days=7)       # `teamstore keys status` warns of each
    gone, kept = await retire_unrecorded(keys, retire_days=7)   # `teamstore keys retire` destroys those due

One is destroyed only if this database's rotation made it: the key file marks each key a rotation makes with its
database's id (:mod:`teamstore.db.identity`), which a restore keeps and no other database has. So the keys of
another database that shares the file (a second home pointed at the same ``TEAMSTORE_KEY_FILE``) are only warned
of, never destroyed, and neither is a key no rotation marked (made before the file kept makers). One of this
database's is due once it is ``retire_days`` old (and at least :data:`FLOOR`), by the date the key file gives it
(this host's clock, which wrote it). So a backup taken under it becomes unreadable no later than under a key the
database had retired: it was made at most ``retire_days`` before. Never a newer one: a rotation makes its key
before it records it, and the key file is read before the database, so a key made meanwhile is new. One without
a date (made before the file kept dates) is dated by the first ``retire`` that sees it, and waits from then.

Only the key file. A copy of a database restored beside the live one (staging, an investigation) has the live
one's id: it gets a copy of the key file, never the file itself, or it would take the live one's newer keys for its
own (docs/operations.md, *Keys*). It shares KMS with the live one all the same, so KMS keys are only found
(:mod:`teamstore.keys.unrecorded_kms`), never deleted.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from teamstore.db.identity import database_id
from teamstore.keys.failures import AGAIN, store_failed
from teamstore.keys.kek import LOCAL
from teamstore.keys.schema import key_encryption_keys
from teamstore.keys.service import KeyService

FLOOR = timedelta(days=1)
"""The least age at which an unrecorded key is destroyed, whatever ``retire_days`` (0 in tests) says: a rotation
records its new key within seconds of making it, and one stopped in between keeps its key that long."""


@dataclass(frozen=True)
class Unrecorded:
    """A key in the key file the database does not record."""

    kek_id: str
    made_at: datetime | None
    """When it was made (``None``: undated, made before the key file kept dates)."""
    destroy_after: datetime | None
    """When ``keys retire`` destroys it (``None`` until it is dated, and for a key this database did not make)."""
    ours: bool
    """Whether this database's rotation made it (else another database's, or one no rotation marked)."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {"kek_id": self.kek_id, "made_at": self.made_at, "destroy_after": self.destroy_after,
                "made_here": self.ours}


async def unrecorded(keys: KeyService, retire_days: int) -> list[Unrecorded]:
    """The keys in the local key file that the database does not record, oldest first; none when the database
    records no local key (it has never used the file) or no current one (a new database starts with the file's).

    Args:
        keys: The key service (its engine and key file).
        retire_days: ``TEAMSTORE_KEY_RETIRE_DAYS``: how old an unrecorded key is when it is destroyed.

    Raises:
        KeyUnavailable, ConfigurationError: The key file cannot be read (as :meth:`LocalKeyFile.get` says).
        StoreUnavailable: The database failed.
    """
    key_file = keys.ring.key_file
    if not await asyncio.to_thread(key_file.exists):
        return []
    held = await asyncio.to_thread(key_file.made)  # before the database: a key recorded meanwhile is seen so
    k = key_encryption_keys.c
    try:
        async with keys.engine.connect() as conn:
            rows = (await conn.execute(select(k.kek_id, k.retired_at))).all()
    except SQLAlchemyError as exc:
        raise store_failed(exc, "read the key-encryption keys", AGAIN) from exc
    recorded = {str(r[0]) for r in rows}
    if not any(r[1] is None for r in rows) or not any(kek_id.startswith(LOCAL) for kek_id in recorded):
        return []
    wait, ours = max(timedelta(days=retire_days), FLOOR), await database_id(keys.engine)
    found = [Unrecorded(kek_id, made.at, made.at + wait if made.at is not None and made.by == ours else None,
                        made.by == ours)
             for kek_id, made in held.items() if kek_id not in recorded]
    return sorted(found, key=lambda u: (u.made_at is not None, u.made_at or datetime.min.replace(tzinfo=UTC)))


async def retire_unrecorded(keys: KeyService, retire_days: int) -> tuple[list[str], list[Unrecorded]]:
    """Destroy the unrecorded keys this database made that are due (:func:`unrecorded`); date the undated ones
    first.

    Returns:
        The ids of the keys destroyed, and the unrecorded keys kept (not yet due), each with its destroy date.

    Raises:
        KeyUnavailable, ConfigurationError: The key file cannot be read or written.
        KeyFileInDoubt: A key's material went from the key file, but its folder could not be flushed: run it again.
        StoreUnavailable: The database failed.
    """
    key_file = keys.ring.key_file
    if await asyncio.to_thread(key_file.exists):
        # A destroy here whose flush failed left the key gone from the file, so out of what is found below, and a
        # power loss could still bring it back: flushed first (one fsync), as a rerun is told it does.
        await asyncio.to_thread(key_file.flush)
    found = await unrecorded(keys, retire_days)
    if any(u.made_at is None for u in found):
        await asyncio.to_thread(key_file.date_undated)  # they wait from now on: never taken for old
        found = await unrecorded(keys, retire_days)
    now = datetime.now(UTC)  # the key file's dates are this host's
    due = [u for u in found if u.destroy_after is not None and u.destroy_after <= now]
    for u in due:
        await asyncio.to_thread(key_file.destroy, u.kek_id)
    return [u.kek_id for u in due], [u for u in found if u not in due]
