"""The key service: each user's data key, made once, kept wrapped in the database, unwrapped briefly in memory.

    from teamstore.keys import KeyService

    keys = KeyService.from_settings(engine, settings)
    blob = await keys.seal("alice", b"her words", "memory/facts")      # a new user's key is made here
    text = await keys.open("alice", blob, "memory/facts")              # the same context, or it does not open
    key = await keys.data_key("alice")                                  # for many payloads: key.seal(...) / .open()

A data key is 32 random bytes (AES-256-GCM), made as a user's first session opens (before its lease) and
stored only wrapped by the current key-encryption key (``ts_data_keys``). An unwrapped key stays in this process's memory for
``key_cache_seconds``, so a session's cycle costs no KMS request; an erasure keeps its fence up that long after
destroying the key, so no worker seals under a destroyed key once the fence is lifted.

A key is never made for a user an erasure fences (the insert checks the fence in its own statement), never
made over an existing row, damaged or not, and, to seal what was stored before sealing, only while that is still
stored (:meth:`KeyService.key_to_seal`). Payloads written before sealing (no magic bytes) are handed back
as they are by :meth:`KeyService.open`: they read, and are sealed at their next write.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Literal, overload

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import ColumnElement, exists, literal, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.engine import describe_failure
from teamstore.db.fence import held
from teamstore.db.statements import insert_new
from teamstore.errors import (
    ConfigurationError,
    ErasureInProgress,
    KeyDestroyed,
    KeyUnavailable,
    PayloadUnreadable,
    StoreUnavailable,
)
from teamstore.keys import sealed
from teamstore.keys.kek import KMS
from teamstore.keys.marks import mark
from teamstore.keys.ring import KeyRing
from teamstore.keys.schema import data_keys, hold_current, is_current, key_encryption_keys
from teamstore.settings import Settings

_CACHE_SIZE = 10_000
_ATTEMPTS = 3  # a new key's insert meets a rotation or another worker's insert at most this often in a row


class DataKey:
    """One user's unwrapped data key: seals and opens payloads without I/O (its headers made once, since a
    session's every save and load goes through it).

    Args:
        user_id: Whose key it is.
        key_id: Its id (32 hex characters), as ``ts_data_keys`` and every payload's header name it.
        aead: The key.
    """

    __slots__ = ("_heads", "_raw", "aead", "key_id", "user_id")

    def __init__(self, user_id: str, key_id: str, aead: AESGCM) -> None:
        self.user_id, self.key_id, self.aead = user_id, key_id, aead
        self._raw = bytes.fromhex(key_id)
        self._heads = (sealed.header(key_id, 0), sealed.header(key_id, sealed.COMPRESSED))

    def seal(self, plaintext: bytes, context: str, *, compress: bool = False) -> bytes:
        """``plaintext`` sealed for ``context`` (see :mod:`teamstore.keys.sealed`)."""
        return sealed.seal_under(self.aead, self._heads[compress], plaintext, context)

    def sealed_it(self, data: bytes) -> bool:
        """Whether ``data`` names this key in its header."""
        return sealed.key_of(data) == self._raw

    def open(self, data: bytes, context: str) -> bytes:
        """The plaintext of ``data``, sealed under this key for ``context``.

        Raises:
            KeyDestroyed: ``data`` was sealed under another data key of this user's, destroyed since.
            PayloadUnreadable: It was damaged, or sealed for another context.
        """
        if sealed.is_sealed(data) and not self.sealed_it(data):
            raise destroyed_key()
        return sealed.open_sealed(self.aead, data, context)


def destroyed_key() -> KeyDestroyed:
    """The error for a payload sealed under a data key that no longer exists."""
    return KeyDestroyed(
        "this payload is sealed under a data key that no longer exists (its user was erased): it is beyond use",
        hint="nothing to fix: what an erasure could not delete (a backup, an object under a hold) stays unreadable",
    )


class _Gone(Exception):
    """What a new data key was to seal is no longer stored (:meth:`KeyService.key_to_seal`)."""


def _unavailable(exc: SQLAlchemyError, action: str) -> StoreUnavailable:
    return StoreUnavailable(f"could not {action}: {describe_failure(exc)}",
                            hint="check the database, and run `teamstore db upgrade` if ts_data_keys is missing")


class KeyService:
    """Users' data keys on one database, wrapped by the key-encryption keys of ``ring``.

    Args:
        engine: The state database (``ts_data_keys``, ``ts_key_encryption_keys``); the caller owns it.
        ring: Where the key-encryption keys live.
        cache_seconds: How long an unwrapped data key is kept in memory.
    """

    def __init__(self, engine: AsyncEngine, ring: KeyRing, *, cache_seconds: float = 30.0) -> None:
        self.engine, self.ring, self.cache_seconds = engine, ring, cache_seconds
        self._cache: OrderedDict[str, tuple[DataKey, float]] = OrderedDict()

    @classmethod
    def from_settings(cls, engine: AsyncEngine, settings: Settings | None = None) -> KeyService:
        """The service ``settings`` describe (``TEAMSTORE_KMS_KEY_ID``, ``TEAMSTORE_KEY_FILE``, the cache)."""
        settings = settings or Settings()
        return cls(engine, KeyRing.from_settings(settings), cache_seconds=settings.key_cache_seconds)

    # --- the hook every store uses ---------------------------------------------------------------------------
    async def seal(self, user_id: str, plaintext: bytes, context: str, *, compress: bool = False) -> bytes:
        """``plaintext`` sealed under ``user_id``'s data key (made now for a new user) for ``context``.

        Raises:
            ErasureInProgress: The user is fenced and has no key yet (nothing may be written for them).
            KeyUnavailable: The key-encryption key cannot be used now. DataKeyDamaged: the user's key row
                does not open. Nothing is written in any case.
        """
        return (await self.data_key(user_id)).seal(plaintext, context, compress=compress)

    async def open(self, user_id: str, data: bytes, context: str) -> bytes:
        """The plaintext of ``data``; data written before sealing (no magic bytes) comes back as it is.

        Raises:
            KeyDestroyed: It was sealed under a data key that no longer exists (an erased user's).
            PayloadUnreadable: It was damaged, or sealed for another user or context.
            KeyUnavailable, DataKeyDamaged: As for :meth:`seal`.
        """
        if not sealed.is_sealed(data):
            return data
        return (await self.key_for(user_id, data)).open(data, context)

    async def key_for(self, user_id: str, data: bytes) -> DataKey:
        """``user_id``'s data key that ``data`` was sealed under (looked up again if the cached one differs).

        Raises:
            KeyDestroyed: No such key exists any more.
            PayloadUnreadable: It is another user's key.
        """
        wanted = sealed.key_id_of(data)
        key = self._cached(user_id)
        if key is None or key.key_id != wanted:
            self.forget(user_id)
            key = await self.data_key(user_id, create=False)
        if key is not None and key.key_id == wanted:
            return key
        if wanted is not None and await self.key_exists(wanted):
            raise PayloadUnreadable("this payload is sealed under another user's data key: it was read as the "
                                    "wrong user's", hint="read it as the user it belongs to")
        raise destroyed_key()

    # --- data keys -------------------------------------------------------------------------------------------
    @overload
    async def data_key(self, user_id: str) -> DataKey: ...
    @overload
    async def data_key(self, user_id: str, *, create: Literal[True]) -> DataKey: ...
    @overload
    async def data_key(self, user_id: str, *, create: bool) -> DataKey | None: ...
    async def data_key(self, user_id: str, *, create: bool = True) -> DataKey | None:
        """``user_id``'s data key: from memory, else unwrapped from its row, else (``create``) made now.

        Returns:
            The :class:`DataKey`; ``None`` when the user has none and ``create`` is off.

        Raises:
            ErasureInProgress: ``create`` and the user is fenced with no key.
            KeyUnavailable, DataKeyDamaged, KeyDestroyed: The key-encryption key cannot open the row.
            StoreUnavailable: The database failed.
        """
        key = self._cached(user_id)
        if key is not None:
            return key
        if not create:
            return await self._from_row(user_id)
        return await self._read_or_make(user_id, lambda: self._from_row(user_id))

    async def key_to_seal(self, user_id: str, stored: ColumnElement[bool]) -> DataKey | None:
        """``user_id``'s data key to seal what they stored before sealing (``teamstore keys migrate``): made now
        only while ``stored`` holds, checked in the statement that makes it, beside the erasure's fence.

        ``stored`` says that what is being sealed is still there (an ``EXISTS`` over its row, or over the
        user's subject mapping). Read before an erasure of the user began, and sealed after it ended (the fence
        lifted again), it no longer holds: no key is made then, since one would outlive the erasure's receipt,
        the raw user id with it.

        Returns:
            The key; ``None`` when the user has none and ``stored`` no longer holds (nothing left to seal).

        Raises:
            ErasureInProgress: An erasure fences the user, who has no key.
            KeyUnavailable, DataKeyDamaged, KeyDestroyed: The key-encryption key cannot open the row.
            StoreUnavailable: The database failed.
        """
        try:
            return await self._read_or_make(user_id, lambda: self.data_key(user_id, create=False), stored)
        except _Gone:
            return None

    async def _read_or_make(
        self, user_id: str, read: Callable[[], Awaitable[DataKey | None]], stored: ColumnElement[bool] | None = None
    ) -> DataKey:
        """The key ``read`` finds, else one made now (only while ``stored`` holds, when given); read again when
        another writer's key or a rotation came first.

        Raises:
            ErasureInProgress: The user is fenced. _Gone: ``stored`` no longer holds.
            KeyUnavailable, DataKeyDamaged, KeyDestroyed: As ``read`` raises them, or the key-encryption key
                cannot wrap the new key.
            StoreUnavailable: The database failed, or other writers came first at every attempt.
        """
        for _ in range(_ATTEMPTS):
            key = await read()
            if key is not None:
                return key
            asked_at = time.monotonic()
            made = await self._make(user_id, stored)
            if made is not None:
                return self._remember(made, asked_at)
        raise StoreUnavailable("could not make the user's data key: other writers kept changing it",
                               hint="retry; a key rotation may have been running")

    def in_memory(self, user_id: str) -> DataKey | None:
        """``user_id``'s data key if this process holds it unwrapped now (no I/O; a state's load and save ask
        this first)."""
        return self._cached(user_id)

    def forget(self, user_id: str) -> None:
        """Drop ``user_id``'s key from this process's memory (an erasure destroyed it)."""
        self._cache.pop(user_id, None)

    def _cached(self, user_id: str) -> DataKey | None:
        found = self._cache.get(user_id)
        if found is None:
            return None
        if found[1] <= time.monotonic():
            del self._cache[user_id]
            return None
        return found[0]

    def _remember(self, key: DataKey, asked_at: float) -> DataKey:
        """Keep ``key`` in memory for ``cache_seconds`` from ``asked_at``, the moment before its row was read or
        written: an erasure that deleted the row since waits that long after its delete, and an unwrap that took
        its time must not stretch the key's stay past that wait."""
        if self.cache_seconds > 0:
            self._cache[key.user_id] = (key, asked_at + self.cache_seconds)
            self._cache.move_to_end(key.user_id)
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return key

    async def key_id(self, user_id: str) -> str | None:
        """The id of ``user_id``'s data key row, read without opening it (``None``: they have none). It names
        no user: reports name a row by it.

        Raises:
            StoreUnavailable: The database failed.
        """
        row = await self._row(user_id)
        return row[0] if row is not None else None

    async def _from_row(self, user_id: str) -> DataKey | None:
        """``user_id``'s key unwrapped from its row, and kept in memory; ``None`` when they have none."""
        asked_at = time.monotonic()
        row = await self._row(user_id)
        return self._remember(await self._unwrap(user_id, *row), asked_at) if row is not None else None

    async def _row(self, user_id: str) -> tuple[str, str, bytes] | None:
        query = select(data_keys.c.key_id, data_keys.c.kek_id, data_keys.c.wrapped).where(
            data_keys.c.user_id == user_id)
        try:
            async with self.engine.connect() as conn:
                found = (await conn.execute(query)).first()
        except SQLAlchemyError as exc:
            raise _unavailable(exc, "read the user's data key") from exc
        return (str(found[0]), str(found[1]), bytes(found[2])) if found is not None else None

    async def _unwrap(self, user_id: str, key_id: str, kek_id: str, wrapped: bytes) -> DataKey:
        material = await asyncio.to_thread(lambda: self.ring.get(kek_id).unwrap(wrapped, key_id))
        return DataKey(user_id, key_id, AESGCM(material))

    async def _make(self, user_id: str, stored: ColumnElement[bool] | None = None) -> DataKey | None:
        """Make, wrap and insert a new data key (only while ``stored`` holds, when given); ``None`` when another
        writer's key or a rotation came first.

        Raises:
            ErasureInProgress: The user is fenced. _Gone: ``stored`` no longer holds.
        """
        kek_id = await self.current_kek()
        key_id, material = secrets.token_hex(16), os.urandom(32)
        wrapped = await asyncio.to_thread(lambda: self.ring.get(kek_id).wrap(material, key_id))
        now = datetime.now(UTC)
        row = {"user_id": literal(user_id, data_keys.c.user_id.type), "key_id": literal(key_id),
               "kek_id": literal(kek_id, data_keys.c.kek_id.type), "wrapped": literal(wrapped, data_keys.c.wrapped.type),
               "created_at": literal(now, data_keys.c.created_at.type), "wrapped_at": literal(now, data_keys.c.wrapped_at.type)}
        guards = [~held(user_id), is_current(kek_id), *([stored] if stored is not None else [])]
        source = select(*(value.label(name) for name, value in row.items())).where(*guards)
        stmt = insert_new(self.engine.dialect.name, data_keys).from_select(list(row), source)
        try:
            async with self.engine.begin() as conn:
                if not await hold_current(conn, kek_id):
                    return None  # a rotation retired it: read the current one again
                if (await conn.execute(stmt.returning(data_keys.c.key_id))).first() is not None:
                    return DataKey(user_id, key_id, AESGCM(material))
                fenced = await conn.scalar(select(held(user_id)))
                gone = stored is not None and not await conn.scalar(select(stored))
        except SQLAlchemyError as exc:
            raise _unavailable(exc, "store the user's new data key") from exc
        if fenced:
            raise ErasureInProgress("no data key is made for a user an erasure request holds",
                                    hint="nothing to fix: the user is being erased")
        if gone:
            raise _Gone
        return None  # another writer's key, or a rotation made another KEK current: read again

    async def current_kek(self, *, moving_to: str | None = None) -> str:
        """The key-encryption key new data keys are wrapped by; a database with none records its first now.

        Args:
            moving_to: The KEK a rotation is about to make current (``keys rotate --to``): the deployment may
                name it in ``TEAMSTORE_KMS_KEY_ID`` before it is used, and is not refused for that.

        Raises:
            ConfigurationError: ``TEAMSTORE_KMS_KEY_ID`` names a KMS key this database has never used.
            KeyUnavailable: The first KEK could not be made or reached.
            KeyFileInDoubt: The first KEK went into the local key file, but a folder holding it could not be
                flushed: nothing recorded it; a retry flushes the file, then records it.
        """
        current = await self._recorded_current()
        if current is None:
            first = await asyncio.to_thread(self.ring.bootstrap)
            await self._record_first(first)
            current = await self._recorded_current()
            assert current is not None
            await mark(self.ring, self.engine, current)  # refused, it is logged: the session goes on without it
        await self._refuse_unused(current, moving_to)
        return current

    async def check_configured(self) -> None:
        """Refuse now, as a worker starts, a ``TEAMSTORE_KMS_KEY_ID`` this database has never used: otherwise
        only a new user's first data key meets it (:meth:`current_kek`), and the worker looks healthy until
        then. It only reads: a database with no KEK yet has nothing to check (its first will be the variable's
        key), and a KMS that does not answer now is left for the sessions to meet (``KeyUnavailable``).

        Raises:
            ConfigurationError: As :meth:`current_kek` raises it.
            StoreUnavailable: The database failed.
        """
        current = await self._recorded_current()
        if current is None:
            return
        with contextlib.suppress(KeyUnavailable):
            await self._refuse_unused(current)

    async def _refuse_unused(self, current: str, moving_to: str | None = None) -> None:
        configured = await self._configured_usable()
        if configured is not None and configured not in (current, moving_to) and not await self._recorded(configured):
            raise ConfigurationError(
                "TEAMSTORE_KMS_KEY_ID names a KMS key this database has never used: its data keys are wrapped by "
                f"{current}",
                hint="to move them under the KMS key, run `teamstore keys rotate --to <that key>`; or unset the "
                "variable to go on as before",
            )

    async def _configured_usable(self) -> str | None:
        """The KMS key ``TEAMSTORE_KMS_KEY_ID`` names, if it could wrap data keys: only such a key, left unused,
        is worth refusing over. The variable goes on naming the database's first KMS key after rotations have
        retired and destroyed it (KMS then knows it disabled, then not at all: its aliases go with it)."""
        try:
            return await asyncio.to_thread(self.ring.configured_usable)
        except ConfigurationError:
            if await self._destroyed_kms():
                return None  # the variable may well name a key this database destroyed
            raise

    async def _destroyed_kms(self) -> bool:
        k = key_encryption_keys.c
        try:
            async with self.engine.connect() as conn:
                return bool(await conn.scalar(select(exists().where(k.kek_id.startswith(KMS),
                                                                    k.destroyed_at.is_not(None)))))
        except SQLAlchemyError as exc:
            raise _unavailable(exc, "read the key-encryption keys") from exc

    async def _recorded_current(self) -> str | None:
        k = key_encryption_keys.c
        query = select(k.kek_id).where(k.retired_at.is_(None)).order_by(k.created_at.desc()).limit(1)
        try:
            async with self.engine.connect() as conn:
                found = await conn.scalar(query)
        except SQLAlchemyError as exc:
            raise _unavailable(exc, "read the current key-encryption key") from exc
        return str(found) if found is not None else None

    async def _recorded(self, kek_id: str) -> bool:
        try:
            async with self.engine.connect() as conn:
                return bool(await conn.scalar(select(exists().where(key_encryption_keys.c.kek_id == kek_id))))
        except SQLAlchemyError as exc:
            raise _unavailable(exc, "read the key-encryption keys") from exc

    async def _record_first(self, kek_id: str) -> None:
        """Record ``kek_id`` as current unless another process recorded one first."""
        k = key_encryption_keys.c
        source = select(literal(kek_id, k.kek_id.type).label("kek_id"),
                        literal(datetime.now(UTC), k.created_at.type).label("created_at")).where(
            ~exists().where(k.retired_at.is_(None)))
        stmt = insert_new(self.engine.dialect.name, key_encryption_keys).from_select(["kek_id", "created_at"], source)
        try:
            async with self.engine.begin() as conn:
                await conn.execute(stmt)
        except SQLAlchemyError as exc:
            raise _unavailable(exc, "record the first key-encryption key") from exc

    async def key_exists(self, key_id: str) -> bool:
        """Whether a data key with this id (hex) still exists; a payload sealed under one that does not is
        beyond use (what erasure reports of versions it could not delete)."""
        try:
            async with self.engine.connect() as conn:
                return bool(await conn.scalar(select(exists().where(data_keys.c.key_id == key_id))))
        except SQLAlchemyError as exc:
            raise _unavailable(exc, "look up a data key") from exc
