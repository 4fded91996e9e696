"""Sealed resume state: any state store, with every state and every run checkpoint sealed under its user's data
key on the way in and opened on the way out.

    from teamstore.state.factory import store_for

    store = store_for(engine, lease="lock", keys=KeyService.from_settings(engine, settings))   # a SealedStateStore
    row = await store.acquire(key, claim, owner="w-1", lease_ttl=300, wait_seconds=10)   # row.state: plain JSON
    await store.save(key, owner="w-1", expected_version=row.row_version, record=rec, release=True)   # sealed

It wraps the :class:`~teamstore.state.base.StateStore` protocol rather than threading through the backends:
each backend still writes and reads text, and only this layer knows keys. The sealed context is
``state/<session id>`` (``checkpoint/<session id>`` for a run's checkpoint, :meth:`SealedStateStore.checkpoint`):
a state moved to another session, or another user's row, does not open. A refused state or checkpoint is
quarantined exactly as the row held it (sealed, or as an older release or a damaged row left it), and a restore
moves it back as it is.

* Opening a session fetches the user's data key first (made now for a new user): an unreachable KMS or a
  missing key file fails the opening before the team runs, with nothing leased or written.
* A save or checkpoint seals under that key and never makes one: a worker whose session an erasure removed
  meanwhile (it lost its lease, and the erasure destroyed the key) is refused with ``ErasureInProgress`` and
  writes nothing, also once the erasure has finished and lifted its fence.
* A row saved before sealing (codec ``json``) reads as it is; its next save seals it (a checkpoint written
  before sealing, likewise: the run's next checkpoint, or the save after it, replaces it).
* A sealed checkpoint that does not open is named in the row's ``checkpoint_unreadable``: the runtime sets it
  aside as ``corrupt`` and judges the state on its own.
* A sealed state that does not open (damaged bytes, or sealed under a data key an erasure destroyed, as in a
  restored backup) is refused as ``corrupt`` and quarantined, sealed as it was; the session starts fresh.
  A damaged *key row*, or a key-encryption key that cannot be reached, fails the opening instead: the state
  is fine, and an operator can bring the key back.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy import Table, exists, literal, select, tuple_, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.fence import held
from teamstore.errors import ErasureInProgress, KeyDestroyed, PayloadUnreadable, StateRejected
from teamstore.keys.passed_over import PassedOver, key_to_seal
from teamstore.keys.sealed import open_sealed
from teamstore.keys.service import DataKey, KeyService
from teamstore.state.base import (
    CheckpointRecord,
    Claim,
    Ending,
    QuarantinedRow,
    Restored,
    SaveRecord,
    SessionKey,
    SessionPage,
    StateStore,
    StoredSession,
)
from teamstore.state.envelope import SEALED_PREFIX, is_sealed_text, seal_text, sealed_bytes
from teamstore.state.failures import unavailable
from teamstore.state.schema import quarantine, sessions


def context(session_id: str) -> str:
    """The sealed context of a session's state."""
    return f"state/{session_id}"


def checkpoint_context(session_id: str) -> str:
    """The sealed context of a session's run checkpoint (a state's sealed bytes do not open as one)."""
    return f"checkpoint/{session_id}"


_Record = TypeVar("_Record", StoredSession, SaveRecord, CheckpointRecord)

Held = tuple[str | None, str | None]
"""A session's state and checkpoint as its row held them (sealed, or as written before sealing)."""

HELD_MAX = 10_000
"""The most sessions whose stored bytes a store remembers (:class:`SealedStateStore` ``_stored``). A session
opened and then neither saved with its release nor released (a caller that gave up on it) is forgotten at the
latest once this many sessions were opened after it; a quarantine of a forgotten session seals what it is given
instead of setting aside the very bytes the row held."""


class SealedStateStore:
    """:class:`~teamstore.state.base.StateStore` sealing states and run checkpoints under users' data keys.

    Args:
        inner: The backend (its rows hold the sealed text).
        keys: The key service.
    """

    def __init__(self, inner: StateStore, keys: KeyService) -> None:
        self.inner, self.keys = inner, keys
        # What each open session's row held before it was opened, so a quarantine sets aside those very bytes.
        self._stored: dict[tuple[str, str, str], Held] = {}

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

    async def _key(self, user_id: str) -> DataKey:
        return self.keys.in_memory(user_id) or await self.keys.data_key(user_id)

    async def _opened_with(self, user_id: str) -> DataKey:
        """The data key the session was opened with (:meth:`acquire` fetched or made it), never made here: a
        worker that lost its lease saves and checkpoints too, after an erasure that lifted its fence again, and
        a key made then would outlive the erasure's receipt.

        Raises:
            ErasureInProgress: The user has no data key any more: an erasure removed them since the session
                opened. Nothing is written.
        """
        data_key = self.keys.in_memory(user_id) or await self.keys.data_key(user_id, create=False)
        if data_key is None:
            raise erased_since_opened()
        return data_key

    async def acquire(
        self, key: SessionKey, claim: Claim, *, owner: str, lease_ttl: float, wait_seconds: float,
        max_sessions: int | None = None,
    ) -> StoredSession:
        """The user's data key first, then the lease and the row, its state and checkpoint opened.

        Raises:
            KeyUnavailable, DataKeyDamaged: The user's data key cannot be had; nothing was leased.
            ErasureInProgress: An erasure holds the user. And whatever the backend's acquire raises.
        """
        data_key = await self._key(key.user_id)
        row = await self.inner.acquire(key, claim, owner=owner, lease_ttl=lease_ttl, wait_seconds=wait_seconds,
                                       max_sessions=max_sessions)
        try:
            opened = await self._opened(row, data_key)
        except BaseException:
            await self.inner.release(key, owner=owner, discard_empty=row.is_new)
            raise
        self._hold((key.user_id, key.session_id, owner), (row.state, row.checkpoint))
        return opened

    def _hold(self, where: tuple[str, str, str], held: Held) -> None:
        """Remember what an open session's row holds, forgetting the longest-held past :data:`HELD_MAX`."""
        stored = self._stored
        stored.pop(where, None)  # re-inserted last: the dict's order is the order sessions were opened
        stored[where] = held
        if len(stored) > HELD_MAX:
            del stored[next(iter(stored))]

    async def _opened(self, row: StoredSession, data_key: DataKey | None) -> StoredSession:
        """``row`` with its state and checkpoint opened. A sealed state that does not open stays sealed, named in
        ``defects`` (the row is refused); a checkpoint, in ``checkpoint_unreadable`` (it alone is set aside)."""
        state, why = await self._open(row.user_id, row.state, context(row.session_id), data_key)
        if why is not None:
            row = _with(row, defects=(*row.defects, f"the stored state does not open: {why}"))
        elif state is not None:
            row = _with(row, state=state[0], state_bytes=state[1], stored_bytes=row.state_bytes)
        if row.checkpoint is None:
            return row
        checkpoint, why = await self._open(row.user_id, row.checkpoint, checkpoint_context(row.session_id), data_key)
        if why is not None:
            return _with(row, checkpoint_unreadable=why)
        if checkpoint is None:
            return row  # written before sealing: read as it is
        # A byte count that was not the stored checkpoint's is handed on as it was, so the runtime refuses it.
        whole = isinstance(row.checkpoint, str) and row.checkpoint_bytes == len(row.checkpoint)
        return _with(row, checkpoint=checkpoint[0], checkpoint_bytes=checkpoint[1] if whole else row.checkpoint_bytes,
                     stored_checkpoint_bytes=row.checkpoint_bytes)

    async def _open(
        self, user_id: str, stored: str | None, where: str, data_key: DataKey | None
    ) -> tuple[tuple[str, int] | None, str | None]:
        """``((text, bytes), None)`` for a sealed ``stored`` that opens, ``(None, why)`` for one that does not,
        and ``(None, None)`` for nothing sealed (none, or written before sealing)."""
        try:
            blob = sealed_bytes(stored) if stored is not None else None
            if blob is None:
                return None, None
            if data_key is None or not data_key.sealed_it(blob):
                data_key = await self.keys.key_for(user_id, blob)
            plain = open_sealed(data_key.aead, blob, where)  # its key checked just above
            return (plain.decode("utf-8"), len(plain)), None
        except (PayloadUnreadable, KeyDestroyed, StateRejected, UnicodeDecodeError) as exc:
            return None, exc.message if isinstance(exc, PayloadUnreadable | KeyDestroyed) else str(exc)

    async def save(
        self, key: SessionKey, *, owner: str, expected_version: int, record: SaveRecord, release: bool
    ) -> int:
        """Seal ``record.state`` and save it (see :meth:`StateStore.save`).

        Raises:
            KeyUnavailable, DataKeyDamaged: The state could not be sealed: nothing was written.
            ErasureInProgress: The user was erased since the session opened: nothing was written.
        """
        data_key = await self._opened_with(key.user_id)
        text = seal_text(data_key.seal(record.state.encode("utf-8"), context(key.session_id), compress=True))
        where = (key.user_id, key.session_id, owner)
        try:
            saved = await self.inner.save(key, owner=owner, expected_version=expected_version,
                                          record=_with(record, state=text), release=release)
        finally:
            if release:  # given back, or to be released after a failed save: nothing more to quarantine
                self._stored.pop(where, None)
        if not release:
            self._hold(where, (text, None))  # a save clears the checkpoint
        return saved

    async def checkpoint(
        self, key: SessionKey, *, owner: str, expected_version: int, record: CheckpointRecord
    ) -> int:
        """Seal ``record.checkpoint`` (a clearing stays one) and write it (see :meth:`StateStore.checkpoint`).

        Raises:
            KeyUnavailable, DataKeyDamaged: The checkpoint could not be sealed: nothing was written.
            ErasureInProgress: The user was erased since the session opened: nothing was written.
        """
        text = record.checkpoint
        if text is not None:
            data_key = await self._opened_with(key.user_id)
            text = seal_text(data_key.seal(text.encode("utf-8"), checkpoint_context(key.session_id), compress=True))
            record = _with(record, checkpoint=text)
        written = await self.inner.checkpoint(key, owner=owner, expected_version=expected_version, record=record)
        held = self._stored.get((key.user_id, key.session_id, owner))
        if held is not None:
            self._stored[key.user_id, key.session_id, owner] = (held[0], text)
        return written

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
        """Set the refused state (and checkpoint) aside exactly as the row held them: sealed, or as written
        before sealing (see :meth:`StateStore.quarantine`). What this store never read from the row is sealed
        first.

        Raises:
            ErasureInProgress: That needed the user's data key, and an erasure destroyed it since the session
                opened: nothing was set aside.
        """
        where = (row.user_id, row.session_id, owner)
        held = self._stored.pop(where, None)
        quarantined = await self.inner.quarantine(await self._as_held(row, held), owner=owner, reason=reason,
                                                  detail=detail, checkpoint_only=checkpoint_only)
        if checkpoint_only and held is not None:
            self._hold(where, (held[0], None))  # the state stays in the row, as it was
        return quarantined

    async def _as_held(self, row: StoredSession, held: Held | None) -> StoredSession:
        """``row`` with its state and checkpoint as the row held them, and ``state_bytes`` the size of the state
        as set aside (as a session row's is: the quarantine lists it, and a restore stores those very bytes); a
        plain one this store never read from the row is sealed."""
        state, checkpoint = held if held is not None else (None, None)
        changes: dict[str, Any] = {}
        if isinstance(state, str) and state != row.state:
            changes["state"] = state
        elif state is None and _plain(row.state):
            changes["state"] = await self._sealed_copy(row.user_id, row.state, context(row.session_id))
        if "state" in changes:
            changes["state_bytes"] = len(changes["state"].encode("utf-8"))
        if isinstance(checkpoint, str) and checkpoint != row.checkpoint:
            changes["checkpoint"] = checkpoint
        elif checkpoint is None and _plain(row.checkpoint):
            changes["checkpoint"] = await self._sealed_copy(row.user_id, row.checkpoint,
                                                            checkpoint_context(row.session_id))
        return _with(row, **changes) if changes else row

    async def _sealed_copy(self, user_id: str, text: str | None, where: str) -> str:
        """``text`` sealed under the key the session was opened with (never one made here: a worker that hung
        past an erasure would make the erased user a key again)."""
        assert text is not None
        data_key = await self._opened_with(user_id)
        return seal_text(data_key.seal(text.encode("utf-8"), where, compress=True))

    async def restore_quarantined(
        self, quarantine_id: int, *, ttl: timedelta, replace: bool = False, wait_seconds: float = 0.0,
        retention: timedelta | None = None, ending: Ending | None = None,
    ) -> Restored:
        """See :meth:`StateStore.restore_quarantined` (the sealed copy goes back as it is; the session it
        returns is opened, as :meth:`get` opens it, and so is the row ``ending`` gets)."""
        restored = await self.inner.restore_quarantined(quarantine_id, ttl=ttl, replace=replace,
                                                        wait_seconds=wait_seconds, retention=retention,
                                                        ending=self._opening(ending))
        row = restored.session
        opened = await self._opened(row, await self.keys.data_key(row.user_id, create=False))
        return Restored(opened, restored.replaced_by, restored.checkpoint_kept)

    async def delete_session(
        self, key: SessionKey, *, wait_seconds: float = 0.0, ending: Ending | None = None
    ) -> bool:
        """See :meth:`StateStore.delete_session` (``ending`` gets the row opened, as :meth:`get` opens it)."""
        return await self.inner.delete_session(key, wait_seconds=wait_seconds, ending=self._opening(ending))

    async def get(self, key: SessionKey) -> StoredSession | None:
        """The row, its state and checkpoint opened when the user's key opens them (no key is made to read)."""
        return await self._opened_row(await self.inner.get(key), key)

    async def settle(self, key: SessionKey, *, owner: str) -> StoredSession | None:
        """See :meth:`StateStore.settle` (the row opened, as :meth:`get` opens it). What the open session's row
        holds is taken from it: a write left unanswered that landed changed it, and a quarantine sets aside
        those very bytes."""
        row = await self.inner.settle(key, owner=owner)
        where = (key.user_id, key.session_id, owner)
        if row is not None and where in self._stored:
            self._stored[where] = (row.state, row.checkpoint)
        return await self._opened_row(row, key)

    async def _opened_row(self, row: StoredSession | None, key: SessionKey) -> StoredSession | None:
        if row is None or (row.state is None and row.checkpoint is None):
            return row
        return await self._opened(row, await self.keys.data_key(key.user_id, create=False))

    async def list_sessions(self, user_id: str | None = None, limit: int = 100) -> list[StoredSession]:
        """Rows as stored (sealed; ``state_bytes`` the stored size): a listing opens nothing."""
        return await self.inner.list_sessions(user_id, limit)

    async def list_sessions_page(
        self, user_id: str | None = None, limit: int = 100, *, after: str | None = None
    ) -> SessionPage:
        """Rows as stored, as :meth:`list_sessions` gives them, a page at a time."""
        return await self.inner.list_sessions_page(user_id, limit, after=after)

    async def live_sessions(self, user_id: str) -> int:
        """See :meth:`StateStore.live_sessions`."""
        return await self.inner.live_sessions(user_id)

    async def list_quarantined(self, user_id: str | None = None, limit: int = 100) -> list[QuarantinedRow]:
        """See :meth:`StateStore.list_quarantined`."""
        return await self.inner.list_quarantined(user_id, limit)

    async def get_quarantined(self, quarantine_id: int) -> QuarantinedRow | None:
        """See :meth:`StateStore.get_quarantined`."""
        return await self.inner.get_quarantined(quarantine_id)

    async def sweep_expired(self, *, batch_size: int = 500, ending: Ending | None = None) -> int:
        """See :meth:`StateStore.sweep_expired` (``ending`` gets each row opened, as :meth:`get` opens it)."""
        return await self.inner.sweep_expired(batch_size=batch_size, ending=self._opening(ending))

    def _opening(self, ending: Ending | None) -> Ending | None:
        """``ending``, handed each row with its checkpoint opened."""
        if ending is None:
            return None
        given = ending

        async def opened(row: StoredSession) -> None:
            await given(await self._opened(row, await self.keys.data_key(row.user_id, create=False)))

        return opened

    async def aclose(self) -> None:
        """Close the backend (the key service holds nothing to close)."""
        await self.inner.aclose()


def erased_since_opened() -> ErasureInProgress:
    """The error for a save or checkpoint of a session whose user an erasure removed since it opened (their data
    key is gone with the rest)."""
    return ErasureInProgress(
        "the user was erased while this session was open (their data key no longer exists): nothing was saved",
        hint="nothing to fix: the erasure removed the session with the rest of the user's data",
    )


def _plain(text: object) -> bool:
    return isinstance(text, str) and not is_sealed_text(text)


_SAVED = ((sessions, "sessions", "state", context), (quarantine, "quarantine", "state", context),
          (sessions, "checkpoints", "checkpoint", checkpoint_context),
          (quarantine, "checkpoints", "checkpoint", checkpoint_context))
"""Where a state or a checkpoint is stored: the table, what :func:`seal_saved_states` counts it as, the column,
and its sealed context."""


async def seal_saved_states(
    engine: AsyncEngine, keys: KeyService, batch: int = 200, *, passed: PassedOver | None = None
) -> dict[str, int]:
    """Seal the states and run checkpoints saved before sealing, in ``ts_sessions`` and ``ts_quarantine``
    (``teamstore keys migrate``).

    Each row is rewritten only if it is still as read (a session that saved meanwhile sealed its own state),
    without a new row version; a user an erasure fences is left to the erasure.

    Args:
        engine: The state database.
        keys: The users' data keys.
        batch: Rows read at a time.
        passed: Where a user whose key row does not open (damaged, or under a KEK KMS will not use) is kept,
            their rows left as they are; without it, that raises.

    Returns:
        How many states of each table, and how many checkpoints, were sealed.

    Raises:
        KeyUnavailable: The key-encryption key could not be used (rerun: what was sealed stays sealed).
        DataKeyDamaged, KeyDestroyed: A user's key row does not open, and no ``passed`` was given.
        StoreUnavailable: The database failed.
    """
    sealed = {"sessions": 0, "quarantine": 0, "checkpoints": 0}
    for table, name, column, where in _SAVED:
        ident = table.c.session_id if table is sessions else table.c.id
        after: Any = None
        while rows := await _plain_rows(engine, table, ident, column, after, batch):
            for user_id, key, session_id, plain in rows:
                try:
                    data_key = await key_to_seal(keys, user_id, exists().where(table.c.user_id == user_id,
                                                                                ident == key), passed)
                except ErasureInProgress:
                    continue  # fenced since the read (and no key yet): left to the erasure
                if data_key is None:
                    continue  # the row went since the read (an erasure ended meanwhile), or its user is passed over
                text = seal_text(data_key.seal(plain.encode("utf-8"), where(session_id), compress=True))
                sealed[name] += await _reseal(engine, table, ident, column, (user_id, key), plain, text)
            after = (rows[-1][0], rows[-1][1])
    return sealed


async def _plain_rows(engine: AsyncEngine, table: Table, ident: Any, column: str, after: Any, batch: int) -> list[Any]:
    c = table.c
    query = select(c.user_id, ident, c.session_id, c[column]).where(
        c[column].is_not(None), ~c[column].startswith(SEALED_PREFIX), ~held(c.user_id))
    if after is not None:
        query = query.where(tuple_(c.user_id, ident) > tuple_(literal(after[0]), literal(after[1])))
    try:
        async with engine.connect() as conn:
            return [tuple(r) for r in (await conn.execute(query.order_by(c.user_id, ident).limit(batch))).all()]
    except SQLAlchemyError as exc:
        raise unavailable(exc, "read the states saved before sealing") from exc


async def _reseal(
    engine: AsyncEngine, table: Table, ident: Any, column: str, row: tuple[str, Any], old: str, new: str
) -> int:
    c, (user_id, key) = table.c, row
    sizes = {f"{column}_bytes": len(new)} if f"{column}_bytes" in c else {}  # a quarantined checkpoint has none
    stmt = update(table).where(c.user_id == user_id, ident == key, c[column] == old, ~held(c.user_id)).values(
        {column: new, **sizes})
    try:
        async with engine.begin() as conn:
            return int((await conn.execute(stmt)).rowcount or 0)
    except SQLAlchemyError as exc:
        raise unavailable(exc, "seal a state saved before sealing") from exc


def _with(record: _Record, **changes: Any) -> _Record:
    """``record`` (a frozen dataclass of :mod:`teamstore.state.base`, which checks nothing in ``__init__``) with
    ``changes``. ``dataclasses.replace`` runs ``__init__``, one frozen ``__setattr__`` per field: on every load
    and every save of a sealed state, that was a third of what sealing cost beyond the cipher itself."""
    copy: _Record = object.__new__(type(record))
    copy.__dict__.update(record.__dict__, **changes)
    return copy
