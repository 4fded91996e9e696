"""Sealed resume state: any state store, with every state sealed under its user's data key on the way in
and opened on the way out.

    from teamstore.state.factory import store_for

    store = store_for(engine, lease="lock", keys=KeyService.from_settings(engine, settings))   # a SealedStateStore
    row = await store.acquire(key, claim, owner="w-1", lease_ttl=300, wait_seconds=10)   # row.state: plain JSON
    await store.save(key, owner="w-1", expected_version=row.row_version, record=rec, release=True)   # sealed

It wraps the :class:`~teamstore.state.base.StateStore` protocol rather than threading through the backends:
each backend still writes and reads text, and only this layer knows keys. The sealed context is
``state/<session id>``: a state moved to another session, or another user's row, does not open. A refused state
is quarantined exactly as the row held it (sealed, or as an older release or a damaged row left it), and a
restore moves it back as it is.

* Opening a session fetches the user's data key first (made now for a new user): an unreachable KMS or a
  missing key file fails the opening before the team runs, with nothing leased or written.
* A row saved before sealing (codec ``json``) reads as it is; its next save seals it.
* A sealed state that does not open (damaged bytes, or sealed under a data key an erasure destroyed, as in a
  restored backup) is refused as ``corrupt`` and quarantined, sealed as it was; the session starts fresh.
  A damaged *key row*, or a key-encryption key that cannot be reached, fails the opening instead: the state
  is fine, and an operator can bring the key back.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from sqlalchemy import Table, literal, select, tuple_, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.fence import held
from teamstore.errors import KeyDestroyed, PayloadUnreadable, StateRejected
from teamstore.keys.sealed import open_sealed
from teamstore.keys.service import DataKey, KeyService
from teamstore.state.base import (
    CheckpointRecord,
    Claim,
    QuarantinedRow,
    Restored,
    SaveRecord,
    SessionKey,
    StateStore,
    StoredSession,
)
from teamstore.state.envelope import SEALED_PREFIX, is_sealed_text, seal_text, sealed_bytes
from teamstore.state.failures import unavailable
from teamstore.state.schema import quarantine, sessions


def context(session_id: str) -> str:
    """The sealed context of a session's state."""
    return f"state/{session_id}"


class SealedStateStore:
    """:class:`~teamstore.state.base.StateStore` sealing states under users' data keys.

    Args:
        inner: The backend (its rows hold the sealed text).
        keys: The key service.
    """

    def __init__(self, inner: StateStore, keys: KeyService) -> None:
        self.inner, self.keys = inner, keys
        # What each open session's row held before it was opened, so a quarantine sets aside those very bytes.
        self._stored: dict[tuple[str, str, str], str | None] = {}

    @property
    def engine(self) -> AsyncEngine:
        """The database the backend writes to (the caller's engine)."""
        engine: AsyncEngine = self.inner.engine  # type: ignore[attr-defined]  # every backend has one
        return engine

    @property
    def lease(self) -> str:
        """The backend's kind of lease."""
        return self.inner.lease

    async def check_lease_mode(self) -> None:
        """See :meth:`StateStore.check_lease_mode`."""
        await self.inner.check_lease_mode()

    async def acquire(
        self, key: SessionKey, claim: Claim, *, owner: str, lease_ttl: float, wait_seconds: float,
        max_sessions: int | None = None,
    ) -> StoredSession:
        """The user's data key first, then the lease and the row, its state opened.

        Raises:
            KeyUnavailable, DataKeyDamaged: The user's data key cannot be had; nothing was leased.
            ErasureInProgress: An erasure holds the user. And whatever the backend's acquire raises.
        """
        data_key = self.keys.in_memory(key.user_id) or await self.keys.data_key(key.user_id)
        row = await self.inner.acquire(key, claim, owner=owner, lease_ttl=lease_ttl, wait_seconds=wait_seconds,
                                       max_sessions=max_sessions)
        try:
            opened = await self._opened(row, data_key)
        except BaseException:
            await self.inner.release(key, owner=owner, discard_empty=row.row_version == 0)
            raise
        self._stored[key.user_id, key.session_id, owner] = row.state
        return opened

    async def _opened(self, row: StoredSession, data_key: DataKey | None) -> StoredSession:
        """``row`` with its state opened; a sealed state that does not open stays sealed, named in ``defects``."""
        try:
            blob = sealed_bytes(row.state) if row.state is not None else None
            if blob is None:
                return row  # no state, or one saved before sealing
            if data_key is None or not data_key.sealed_it(blob):
                data_key = await self.keys.key_for(row.user_id, blob)
            plain = open_sealed(data_key.aead, blob, context(row.session_id))  # its key checked just above
            text = plain.decode("utf-8")
        except (PayloadUnreadable, KeyDestroyed, StateRejected, UnicodeDecodeError) as exc:
            why = exc.message if isinstance(exc, PayloadUnreadable | KeyDestroyed) else str(exc)
            return replace(row, defects=(*row.defects, f"the stored state does not open: {why}"))
        return _with_state(row, text, len(plain))

    async def save(
        self, key: SessionKey, *, owner: str, expected_version: int, record: SaveRecord, release: bool
    ) -> int:
        """Seal ``record.state`` and save it (see :meth:`StateStore.save`).

        Raises:
            KeyUnavailable, DataKeyDamaged: The state could not be sealed: nothing was written.
        """
        data_key = self.keys.in_memory(key.user_id) or await self.keys.data_key(key.user_id)
        text = seal_text(data_key.seal(record.state.encode("utf-8"), context(key.session_id), compress=True))
        sealed_record = SaveRecord(record.team, record.team_version, record.schema_version, record.agentchat_version,
                                   record.fingerprints, text, record.expires_at, record.expiry_slack)
        saved = await self.inner.save(key, owner=owner, expected_version=expected_version, record=sealed_record,
                                      release=release)
        if release:
            self._stored.pop((key.user_id, key.session_id, owner), None)
        else:
            self._stored[key.user_id, key.session_id, owner] = text
        return saved

    async def checkpoint(
        self, key: SessionKey, *, owner: str, expected_version: int, record: CheckpointRecord
    ) -> int:
        """See :meth:`StateStore.checkpoint`."""
        return await self.inner.checkpoint(key, owner=owner, expected_version=expected_version, record=record)

    async def renew(self, key: SessionKey, *, owner: str, lease_ttl: float) -> bool:
        """See :meth:`StateStore.renew`."""
        return await self.inner.renew(key, owner=owner, lease_ttl=lease_ttl)

    async def release(self, key: SessionKey, *, owner: str, discard_empty: bool) -> None:
        """See :meth:`StateStore.release`."""
        self._stored.pop((key.user_id, key.session_id, owner), None)
        await self.inner.release(key, owner=owner, discard_empty=discard_empty)

    async def quarantine(
        self, row: StoredSession, *, owner: str, reason: str, detail: str, checkpoint_only: bool = False
    ) -> int:
        """Set the refused state aside exactly as the row held it: sealed, or as written before sealing (see
        :meth:`StateStore.quarantine`). A state this store never read from the row is sealed first."""
        if (row.user_id, row.session_id, owner) in self._stored:
            stored = self._stored.pop((row.user_id, row.session_id, owner))
            if isinstance(stored, str) and stored != row.state:  # the state's own size stays, as listings show it
                row = replace(row, state=stored)
        elif isinstance(row.state, str) and not is_sealed_text(row.state):
            row = await self._sealed_copy(row)
        return await self.inner.quarantine(row, owner=owner, reason=reason, detail=detail,
                                           checkpoint_only=checkpoint_only)

    async def _sealed_copy(self, row: StoredSession) -> StoredSession:
        """``row`` with its (plain) state sealed, for a row handed to :meth:`quarantine` without being read."""
        data_key = await self.keys.data_key(row.user_id)
        assert row.state is not None
        text = seal_text(data_key.seal(row.state.encode("utf-8"), context(row.session_id), compress=True))
        return replace(row, state=text)

    async def restore_quarantined(
        self, quarantine_id: int, *, ttl: timedelta, replace: bool = False, wait_seconds: float = 0.0
    ) -> Restored:
        """See :meth:`StateStore.restore_quarantined` (the sealed copy goes back as it is; the session it
        returns is opened, as :meth:`get` opens it)."""
        restored = await self.inner.restore_quarantined(quarantine_id, ttl=ttl, replace=replace,
                                                        wait_seconds=wait_seconds)
        row = restored.session
        opened = await self._opened(row, await self.keys.data_key(row.user_id, create=False))
        return Restored(opened, restored.replaced_by)

    async def delete_session(self, key: SessionKey, *, wait_seconds: float = 0.0) -> bool:
        """See :meth:`StateStore.delete_session`."""
        return await self.inner.delete_session(key, wait_seconds=wait_seconds)

    async def get(self, key: SessionKey) -> StoredSession | None:
        """The row, its state opened when the user's key opens it (no key is made to read)."""
        row = await self.inner.get(key)
        if row is None or row.state is None:
            return row
        return await self._opened(row, await self.keys.data_key(key.user_id, create=False))

    async def list_sessions(self, user_id: str | None = None, limit: int = 100) -> list[StoredSession]:
        """Rows as stored (sealed; ``state_bytes`` the stored size): a listing opens nothing."""
        return await self.inner.list_sessions(user_id, limit)

    async def live_sessions(self, user_id: str) -> int:
        """See :meth:`StateStore.live_sessions`."""
        return await self.inner.live_sessions(user_id)

    async def list_quarantined(self, user_id: str | None = None, limit: int = 100) -> list[QuarantinedRow]:
        """See :meth:`StateStore.list_quarantined`."""
        return await self.inner.list_quarantined(user_id, limit)

    async def get_quarantined(self, quarantine_id: int) -> QuarantinedRow | None:
        """See :meth:`StateStore.get_quarantined`."""
        return await self.inner.get_quarantined(quarantine_id)

    async def sweep_expired(self, *, batch_size: int = 500) -> int:
        """See :meth:`StateStore.sweep_expired`."""
        return await self.inner.sweep_expired(batch_size=batch_size)

    async def aclose(self) -> None:
        """Close the backend (the key service holds nothing to close)."""
        await self.inner.aclose()



async def seal_saved_states(engine: AsyncEngine, keys: KeyService, batch: int = 200) -> dict[str, int]:
    """Seal the states saved before sealing, in ``ts_sessions`` and ``ts_quarantine`` (``teamstore keys migrate``).

    Each row is rewritten only if it is still as read (a session that saved meanwhile sealed its own state),
    without a new row version; a user an erasure fences is left to the erasure.

    Returns:
        How many rows of each table were sealed.

    Raises:
        KeyUnavailable, DataKeyDamaged: A user's key could not be had (rerun: what was sealed stays sealed).
        StoreUnavailable: The database failed.
    """
    sealed = {"sessions": 0, "quarantine": 0}
    for table, name, where in ((sessions, "sessions", sessions.c.session_id), (quarantine, "quarantine", quarantine.c.id)):
        after: Any = None
        while rows := await _plain_rows(engine, table, where, after, batch):
            for user_id, ident, session_id, state in rows:
                data_key = await keys.data_key(user_id)
                text = seal_text(data_key.seal(state.encode("utf-8"), context(session_id), compress=True))
                sealed[name] += await _reseal(engine, table, where, user_id, ident, state, text)
            after = (rows[-1][0], rows[-1][1])
    return sealed


async def _plain_rows(engine: AsyncEngine, table: Table, ident: Any, after: Any, batch: int) -> list[Any]:
    c = table.c
    query = select(c.user_id, ident, c.session_id, c.state).where(
        c.state.is_not(None), ~c.state.startswith(SEALED_PREFIX), ~held(c.user_id))
    if after is not None:
        query = query.where(tuple_(c.user_id, ident) > tuple_(literal(after[0]), literal(after[1])))
    try:
        async with engine.connect() as conn:
            return [tuple(r) for r in (await conn.execute(query.order_by(c.user_id, ident).limit(batch))).all()]
    except SQLAlchemyError as exc:
        raise unavailable(exc, "read the states saved before sealing") from exc


async def _reseal(engine: AsyncEngine, table: Table, ident: Any, user_id: str, key: Any, old: str, new: str) -> int:
    c = table.c
    stmt = update(table).where(c.user_id == user_id, ident == key, c.state == old, ~held(c.user_id)).values(
        state=new, state_bytes=len(new))
    try:
        async with engine.begin() as conn:
            return int((await conn.execute(stmt)).rowcount or 0)
    except SQLAlchemyError as exc:
        raise unavailable(exc, "seal a state saved before sealing") from exc


def _with_state(row: StoredSession, state: str, size: int) -> StoredSession:
    """``row`` holding ``state`` (``dataclasses.replace`` walks every field: this is on every load)."""
    return StoredSession(row.user_id, row.session_id, row.team, row.team_version, row.schema_version,
                         row.agentchat_version, row.fingerprints, state, size, row.row_version, row.created_at,
                         row.updated_at, row.expires_at, row.checkpoint, row.checkpoint_bytes, row.damaged,
                         row.defects)
