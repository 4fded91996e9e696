"""The key tables (SQLAlchemy Core): users' wrapped data keys and the key-encryption keys that wrap them.

    from teamstore.keys.schema import data_keys, key_encryption_keys

One row per user in ``ts_data_keys``: the user's data key, wrapped (encrypted) by the key-encryption key
``kek_id`` names, never stored in the clear. ``ts_key_encryption_keys`` records every key-encryption key the
database has used: the current one (``retired_at`` NULL), those a rotation replaced (``retired_at``, and
``destroy_after``: when ``teamstore keys retire`` destroys them) and those destroyed. A KEK's id names where it
lives: ``local:<hex>`` in the local key file, ``kms:<key ARN>`` in AWS KMS; its material is never here.
Created by migration ``0015`` (``teamstore db upgrade``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    DateTime,
    Index,
    LargeBinary,
    String,
    Table,
    exists,
    func,
    literal,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from teamstore.db.metadata import metadata
from teamstore.ids import MAX_ID_CHARS

KEK_ID = 300
"""``kms:`` and a key ARN (at most ~100 characters today), or ``local:`` and 32 hex characters."""

key_encryption_keys = Table(
    "ts_key_encryption_keys",
    metadata,
    Column("kek_id", String(KEK_ID), primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("retired_at", DateTime(timezone=True), nullable=True),
    Column("destroy_after", DateTime(timezone=True), nullable=True),
    Column("destroyed_at", DateTime(timezone=True), nullable=True),
)

data_keys = Table(
    "ts_data_keys",
    metadata,
    # Exact string match, as every table keyed by the user id (no case folding, no normalisation).
    Column("user_id", String(MAX_ID_CHARS), primary_key=True),
    Column("key_id", String(32), nullable=False, unique=True),
    Column("kek_id", String(KEK_ID), nullable=False),
    Column("wrapped", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("wrapped_at", DateTime(timezone=True), nullable=False),
    Index("ix_ts_data_keys_kek_id", "kek_id"),
)


def is_current(kek_id: Any) -> ColumnElement[bool]:
    """``EXISTS`` ``kek_id`` as the current key-encryption key (recorded and not retired)."""
    k = key_encryption_keys.c
    return exists().where(k.kek_id == kek_id, k.retired_at.is_(None))


KEK_LOCK = 7_460_617_270_003
"""The advisory lock key (Postgres) that writes of data keys take shared and a rotation takes alone as it retires a
key-encryption key (:func:`hold_current`, :func:`retiring`)."""


async def hold_current(conn: AsyncConnection, kek_id: str) -> bool:
    """Whether ``kek_id`` is current, kept so until ``conn``'s transaction ends; call it first in a transaction that
    writes data keys under ``kek_id``, whose statements also carry :func:`is_current`.

    On Postgres it takes :data:`KEK_LOCK` shared, which a rotation takes alone to retire a KEK (:func:`retiring`):
    the rotation waits for this transaction to commit and then reads what it wrote, and this waits for a
    retirement under way and then sees it. Without the lock a data key written under a KEK just as a rotation
    retired it would commit after the rotation read it, and stay under the retired KEK. An advisory lock needs no
    grant beyond the workers' SELECT and INSERT, as a row lock on the KEK (``FOR SHARE``: UPDATE) would. SQLite
    writes one transaction at a time, so the check in the writing statement is enough there.
    """
    if conn.dialect.name != "postgresql":
        return True
    await conn.execute(select(func.pg_advisory_xact_lock_shared(literal(KEK_LOCK, BigInteger()))))
    return bool(await conn.scalar(select(is_current(kek_id))))  # a statement of its own: it sees a retirement


async def retiring(conn: AsyncConnection) -> None:
    """Wait for every write of data keys under way, and hold new ones back, until ``conn``'s transaction ends
    (Postgres; :func:`hold_current`): call it first in the transaction that retires a key-encryption key."""
    if conn.dialect.name == "postgresql":
        await conn.execute(select(func.pg_advisory_xact_lock(literal(KEK_LOCK, BigInteger()))))
