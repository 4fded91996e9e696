"""The resume-state store interface and the records it exchanges.

    from teamstore.state.base import SessionKey, StateStore

    row = await store.acquire(SessionKey("u1", "s1"), claim, owner="w-1", lease_ttl=300, wait_seconds=10)
    ...
    await store.save(SessionKey("u1", "s1"), owner="w-1", expected_version=row.row_version, record=rec)

Every caller types against :class:`StateStore`; :func:`teamstore.state.factory.store_for` picks the backend
the database needs (SQLite; Postgres with advisory-lock leases or with row leases). The conformance suite
in ``tests/state`` runs in full against all three.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

import orjson

ROW_VERSION_MAX = 2**63 - 1
"""The largest row version either database's column holds (a signed 64-bit integer): a row at it could never
be saved again, since every save adds one."""
SETTLE_SECONDS = 10
"""How long :meth:`StateStore.settle` waits for a write still running (on Postgres) before giving up on it."""


@dataclass(frozen=True)
class SessionKey:
    """A session's only address: the exact (user_id, session_id) pair."""

    user_id: str
    session_id: str


@dataclass(frozen=True)
class Claim:
    """What a worker writes into a brand-new session row when it takes the lease."""

    team: str
    team_version: str
    schema_version: int
    agentchat_version: str
    fingerprints: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredSession:
    """A session row as read back."""

    user_id: str
    session_id: str
    team: str
    team_version: str
    schema_version: int
    agentchat_version: str
    fingerprints: Mapping[str, str] | None
    """Persisted participant -> fingerprint; ``None`` when the stored value is not that (a damaged row)."""
    state: str | None = field(repr=False)  # the user's conversation: never in a repr (a log line); see state_bytes
    state_bytes: int
    row_version: int
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    checkpoint: str | None = field(default=None, repr=False)  # as ``state``: checkpoint_bytes says its size
    """The checkpoint of a run that has not completed (a team with per-turn checkpoints), as stored: raw
    text, judged by the runtime before it is used; ``None`` when no run is in flight or interrupted."""
    checkpoint_bytes: int = 0
    """The stored byte count of ``checkpoint`` (-1 when the column holds a value of the wrong type)."""
    damaged: tuple[str, ...] = ()
    """Columns whose stored value no save could build on: of the wrong type (SQLite keeps whatever is
    written), or out of range (see :func:`checked`). Each reads as a stand-in here, which a quarantine
    writes back so the row is whole again."""
    defects: tuple[str, ...] = ()
    """Why the row cannot be trusted, one line per fault; a row with any is refused as ``corrupt`` when
    judged, before anything runs."""
    checkpoint_unreadable: str | None = None
    """Why the stored checkpoint does not open (sealed under a data key that is gone, or damaged), when it
    does not: ``checkpoint`` then holds it as stored, and the runtime sets it aside as ``corrupt`` (the state
    is judged on its own)."""
    stored_bytes: int | None = None
    """The state's size as stored, when the store hands the state on opened (sealed under the user's data key:
    :class:`teamstore.state.sealed.SealedStateStore`): ``state_bytes`` is then the opened state's, which the
    runtime's cap judges. ``None`` when ``state`` is as stored."""
    stored_checkpoint_bytes: int | None = None
    """The checkpoint's size as stored, when the store hands it on opened: ``checkpoint_bytes`` is then the
    opened checkpoint's. ``None`` when ``checkpoint`` is as stored."""
    read_at: datetime | None = None
    """When the row was read, on the clock its expiry was written on: on Postgres the server's (the statement
    that read it returns its ``now()``), on SQLite this machine's. The runtime judges the expiry against it, so
    workers on hosts whose clocks disagree judge a session alike. ``None`` for a row made by hand, not read."""

    @property
    def key(self) -> SessionKey:
        """This row's address."""
        return SessionKey(self.user_id, self.session_id)

    @property
    def is_new(self) -> bool:
        """True for a row that has never held a saved state."""
        return self.state is None


_TEXT = ("team", "team_version", "agentchat_version")


def checked(row: StoredSession) -> StoredSession:
    """``row`` with each value no save could build on named in ``defects`` and read as a stand-in.

    Every backend's load passes its row through here, so the runtime refuses such a row when it opens the
    session, before any model call, instead of failing every save after the run (forever):

    * a row version at the column's maximum (a save adds one), negative, or 0 beside a saved state (a save
      under advisory-lock leases would take the row for a new one): read as 1;
    * a state byte count that is not the state's (the size cap and erasure's counts read it): read as the
      state's own;
    * a text column holding something else (SQLite keeps a blob in any column): read as its decoded text;
      a state that is not text is refused as it is (its quarantined copy keeps it as it was).

    Columns ``damaged`` already names (read as stand-ins for a value of the wrong type) are not judged again.
    """
    defects: list[str] = []
    fixes: dict[str, Any] = {}
    version = row.row_version
    if "row_version" not in row.damaged and not (0 <= version < ROW_VERSION_MAX and (version or row.is_new)):
        why = ("at the column's maximum" if version >= ROW_VERSION_MAX
               else "negative" if version < 0 else "0 beside a state")
        defects.append(f"row_version {version} is {why}: no save could follow it")
        fixes["row_version"] = 1
    for name in _TEXT:
        value = getattr(row, name)
        if not isinstance(value, str):
            defects.append(f"{name} holds a {type(value).__name__}, not text")
            fixes[name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    if row.state is not None and not isinstance(row.state, str):
        defects.append(f"state holds a {type(row.state).__name__}, not text")
    elif (row.state is not None and "state_bytes" not in row.damaged
          and row.state_bytes != (size := _utf8_size(row.state))):
        defects.append(f"state_bytes {row.state_bytes} is not the state's {size} bytes")
        fixes["state_bytes"] = size
    if not defects:
        return row
    return replace(row, **fixes, damaged=(*row.damaged, *fixes), defects=(*row.defects, *defects))


def _utf8_size(text: str) -> int:
    # Every load asks: an ASCII string (most states) knows its size without being encoded.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def read_fingerprints(value: object) -> dict[str, str] | None:
    """A row's fingerprints as stored (a JSON object, or its text), or ``None`` if they are not a
    name -> fingerprint object: a damaged row is then refused when judged, not a crash while it is read."""
    if isinstance(value, str | bytes):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
    if isinstance(value, dict) and all(type(k) is str and type(v) is str for k, v in value.items()):
        return dict(value)
    return None


@dataclass(frozen=True)
class SaveRecord:
    """A state to save: the encoded envelope and what it was saved under.

    The row expires no sooner than ``expires_at`` and no later than ``expires_at + expiry_slack``: a
    stored expiry already in that window is kept, so most saves leave the expiry index alone.
    """

    team: str
    team_version: str
    schema_version: int
    agentchat_version: str
    fingerprints: Mapping[str, str]
    state: str = field(repr=False)  # the user's conversation: never in a repr (a log line)
    expires_at: datetime
    expiry_slack: timedelta = timedelta(0)

    @property
    def expires_latest(self) -> datetime:
        """The far end of the expiry window, written when the stored expiry is outside it."""
        return self.expires_at + self.expiry_slack


@dataclass(frozen=True)
class CheckpointRecord:
    """A run's checkpoint to write (``checkpoint=None`` clears it), and what it is written under.

    The team and version fields are those of the state the row holds (a session's first write, under
    advisory-lock leases, makes the row with them); the checkpoint's own version lives inside it.
    ``state_expired``: the state the row holds had expired as the session opened (it started afresh); the write
    clears it, so the expiry it moves on never gives the expired state a new TTL.
    """

    team: str
    team_version: str
    schema_version: int
    agentchat_version: str
    fingerprints: Mapping[str, str]
    checkpoint: str | None = field(repr=False)  # the run's messages so far: never in a repr (a log line)
    expires_at: datetime
    expiry_slack: timedelta = timedelta(0)
    state_expired: bool = False

    @property
    def expires_latest(self) -> datetime:
        """The far end of the expiry window, written when the stored expiry is outside it."""
        return self.expires_at + self.expiry_slack


@dataclass(frozen=True)
class QuarantinedRow:
    """A refused state, set aside with the reason."""

    id: int
    user_id: str
    session_id: str
    reason: str
    detail: str
    team: str
    team_version: str
    state_bytes: int
    quarantined_at: datetime
    checkpoint_bytes: int = 0
    """The bytes of an interrupted run's checkpoint set aside with the row (or alone: then no state)."""


@dataclass(frozen=True)
class Restored:
    """What :meth:`StateStore.restore_quarantined` did."""

    session: StoredSession
    replaced_by: int | None  # the quarantine id now holding the state the restore set aside, if any
    checkpoint_kept: bool = False
    """Whether the restored row stays in the quarantine, its state cleared, with the checkpoint of the run its
    state had interrupted: that run was recorded as ended when it was set aside, and is not put back."""


Ending = Callable[[StoredSession], Awaitable[None]]
"""What the caller does with a row holding an interrupted run's checkpoint before a delete or a sweep removes
it (the runtime records the run as ended): awaited with the row (checkpoint opened) under the session's lease.
What it raises stops the removal, and the row stays."""


@dataclass(frozen=True)
class SessionPage:
    """One page of :meth:`StateStore.list_sessions_page`, newest first."""

    sessions: list[StoredSession]
    cursors: list[str]
    """One per session, in the same order: given as ``after``, the listing goes on with the rows after that one
    (:mod:`teamstore.state.listing`; it holds the session's ids)."""
    next: str | None
    """The last session's cursor when more rows follow it; ``None`` on the last page."""


class StateStore(Protocol):
    """Where resume state lives. Every method is one statement or one transaction."""

    @property
    def lease(self) -> str:
        """How this store leases sessions: ``lock`` (an advisory lock, Postgres) or ``row`` (in the row)."""
        ...

    async def check_lease_mode(self) -> None:
        """Refuse to lease sessions on a database that records the other kind of lease, or that is at another
        migration than this code's newest (read again at most every ``TEAMSTORE_DB_CHECK_SECONDS``;
        :class:`teamstore.state.lease_mode.LeaseModeCheck`).

        Raises:
            SchemaNotReady: A newer release migrated the database, or it was restored from an older backup.
            ConfigurationError: The database records the other kind of lease.
            StoreUnavailable: The database failed.
        """
        ...

    async def acquire(
        self, key: SessionKey, claim: Claim, *, owner: str, lease_ttl: float, wait_seconds: float,
        max_sessions: int | None = None,
    ) -> StoredSession:
        """Take the session's lease and read its row in one statement (creating an empty row if new).

        With ``max_sessions``, a session without a live row is refused (``TooManySessions``) while its
        user keeps that many live ones; the same statement counts them, only for such a session.
        """
        ...

    async def save(
        self, key: SessionKey, *, owner: str, expected_version: int, record: SaveRecord, release: bool
    ) -> int:
        """Write the state if the row is still at ``expected_version`` and leased to ``owner``."""
        ...

    async def checkpoint(
        self, key: SessionKey, *, owner: str, expected_version: int, record: CheckpointRecord
    ) -> int:
        """Write the checkpoint of a run in flight (or clear it) in one statement, if the row is still at
        ``expected_version`` and leased to ``owner``, keeping the lease; returns the new row version. The
        state from before the run stays as it is; the next save clears the checkpoint.

        Raises:
            StaleStateVersion: The row moved on (another worker took the session over, or saved).
            ErasureInProgress: An erasure request holds this user.
            StoreUnavailable: The database failed, or its answer was lost: whether the write landed is not
                known until :meth:`settle` reads the row back.
        """
        ...

    async def settle(self, key: SessionKey, *, owner: str) -> StoredSession | None:
        """Read the row once no write ``owner`` sent can still land: after a write whose answer was lost
        (``StoreUnavailable``), whether it landed. A read alone does not say: on Postgres a statement whose
        connection was given up on can still be running, and commit after the read. Row leases move the row's
        version on under ``owner``'s lease (a write sent before then names the old one); advisory-lock leases
        end the server process of the connection given up on, if it still holds the session's lock. Either
        waits up to :data:`SETTLE_SECONDS` for a write the server is still running. A row read back after a
        write that landed carries the version that write gave it, or the one after.

        Raises:
            StoreUnavailable: The database failed, or a write still running did not end in time: whether it
                landed is not known.
        """
        ...

    async def renew(self, key: SessionKey, *, owner: str, lease_ttl: float) -> bool:
        """Extend ``owner``'s lease by ``lease_ttl`` from now; False when it no longer holds it."""
        ...

    async def release(self, key: SessionKey, *, owner: str, discard_empty: bool) -> None:
        """Give the lease back; ``discard_empty`` removes the row instead if it holds neither a state nor a
        checkpoint (pass it whenever the row may hold nothing: the statement itself checks the row, so a row
        that holds something, or that another worker took over, stays)."""
        ...

    async def quarantine(
        self, row: StoredSession, *, owner: str, reason: str, detail: str, checkpoint_only: bool = False
    ) -> int:
        """Copy a refused row to quarantine and clear its state and checkpoint, in one transaction; returns
        its id. With ``checkpoint_only``, only the row's checkpoint is set aside and cleared (an interrupted
        run that cannot continue), and its state stays."""
        ...

    async def restore_quarantined(
        self, quarantine_id: int, *, ttl: timedelta, replace: bool = False, wait_seconds: float = 0.0,
        retention: timedelta | None = None, ending: Ending | None = None,
    ) -> Restored:
        """Put a quarantined state back as its session's state, under the session's lease, without the
        checkpoint of a run it had interrupted (that stays in the quarantine row: the run was recorded as
        ended). What the session holds now is refused unless ``replace``, then quarantined in turn, an
        interrupted run's row handed to ``ending`` first. A row set aside longer than ``retention`` ago is
        refused: the next sweep deletes it."""
        ...

    async def delete_session(
        self, key: SessionKey, *, wait_seconds: float = 0.0, ending: Ending | None = None
    ) -> bool:
        """Delete one session's stored state and its quarantined copies, under the session's lease;
        whether it had a row. A row holding a checkpoint is first handed to ``ending``."""
        ...

    async def get(self, key: SessionKey) -> StoredSession | None:
        """Read a row without taking the lease."""
        ...

    async def list_sessions(self, user_id: str | None = None, limit: int = 100) -> list[StoredSession]:
        """Rows, newest first, optionally for one user."""
        ...

    async def list_sessions_page(
        self, user_id: str | None = None, limit: int = 100, *, after: str | None = None
    ) -> SessionPage:
        """Up to ``limit`` rows, newest first, optionally for one user, after the row whose cursor is ``after``.

        Raises:
            InvalidCursor: ``after`` is not a cursor a listing of this kind of database gave.
        """
        ...

    async def live_sessions(self, user_id: str) -> int:
        """How many unexpired stored sessions ``user_id`` keeps: what ``max_sessions`` counts."""
        ...

    async def list_quarantined(self, user_id: str | None = None, limit: int = 100) -> list[QuarantinedRow]:
        """Quarantined rows, newest first."""
        ...

    async def get_quarantined(self, quarantine_id: int) -> QuarantinedRow | None:
        """One quarantined row, or ``None``."""
        ...

    async def sweep_expired(self, *, batch_size: int = 500, ending: Ending | None = None) -> int:
        """Delete expired rows not under lease, in batches; returns how many went. With ``ending``, an expired
        row holding a checkpoint is taken under its lease and handed to it first."""
        ...

    async def aclose(self) -> None:
        """Release what the store opened itself (its pool, leases still held); the engine stays the
        caller's."""
        ...
