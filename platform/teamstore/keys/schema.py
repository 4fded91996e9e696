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

from sqlalchemy import Column, DateTime, Index, LargeBinary, String, Table

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
