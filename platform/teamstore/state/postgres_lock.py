"""The Postgres backend with ``lock`` leases (the default): an advisory lock, held on one connection
from load to save. (``row`` leases: :mod:`teamstore.state.postgres_row`.)

    from teamstore.state.postgres_lock import LockLeaseStore

    store = LockLeaseStore(engine, pool_size=20)          # engine: postgresql+psycopg; or store_for(engine)
    row = await store.acquire(key, claim, owner="w-1", lease_ttl=300, wait_seconds=10)
    ...                                                   # the run; the connection stays checked out
    await store.save(key, owner="w-1", expected_version=row.row_version, record=rec, release=True)
    await store.aclose()

Why a lock rather than the lease row SQLite uses: taking a lease in a row is a write on every load,
while a session-level advisory lock lives in shared memory, and a killed worker's lock goes with its
connection at once. The load is one read-only statement (:func:`teamstore.state.statements.acquire_lock`)::

    lock (unless an erasure holds the user) + arm the lease timer + read the row
        (+ count the user's live sessions, only for a session with no live row under a per-user bound)

and the save is one statement and one commit (:func:`teamstore.state.statements.save_locked`)::

    versioned UPDATE (or INSERT for a new session, unless held) + hand the lock over to the
    transaction (pg_advisory_xact_lock, then pg_advisory_unlock) + disarm the lease timer

Handing the lock over to the transaction means it is released by the commit itself: no other worker
can take the session between the unlock and the moment the new state is visible.

The lease's time limit is the server's ``idle_session_timeout``, set on the held connection to
``lease_ttl`` (and only when the lock was taken): any statement on the connection restarts it, which is
how :meth:`renew` keeps a long run's session. A worker that stops renewing has its connection ended by
the server, which frees the lock, and its late save fails (:class:`StaleStateVersion`). A crashed
worker's lock goes with its connection at once. The row version is still checked on every save, so no
update is lost even if the lock were. A load that meets a pooled connection the server has ended (a
restart, a failover) retries on a fresh one.

Costs and requirements: one pooled connection per session in flight (``pool_size`` bounds the sessions
one process runs at once); PostgreSQL 14 or newer (``idle_session_timeout``); connections must be
direct or through a session-mode pooler (a transaction-mode pooler cannot keep a session lock).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncRawCursor
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.errors import StaleStateVersion, StoreUnavailable, TooManySessions
from teamstore.state import statements as sql
from teamstore.state.admin import SessionAdmin
from teamstore.state.admin_methods import AdminMethods
from teamstore.state.base import (
    SETTLE_SECONDS,
    CheckpointRecord,
    Claim,
    SaveRecord,
    SessionKey,
    StoredSession,
)
from teamstore.state.direct import DirectPool, Statement, execute, for_psycopg
from teamstore.state.failures import erasure_open, landing_unknown, unavailable
from teamstore.state.lease_mode import CHECK_SECONDS, LeaseModeCheck
from teamstore.state.rows import checkpoint_params, lock_params, new_session, save_params, stored
from teamstore.state.waiting import Waiting

_ACQUIRE, _RENEW = for_psycopg(sql.acquire_lock()), for_psycopg(sql.touch())
_RELEASE = {discard: for_psycopg(sql.release_lock(discard_empty=discard)) for discard in (True, False)}
_SAVE = {(release, existing): for_psycopg(sql.save_locked(existing=existing, release=release))
         for release in (True, False) for existing in (True, False)}
_CHECKPOINT = {existing: for_psycopg(sql.checkpoint_locked(existing=existing)) for existing in (True, False)}
_END_LOST_HOLDER, _LOST_HOLDER_STAYS = sql.end_lost_holder(), sql.lost_holder_stays()
_NOT_ALLOWED = "42501"  # the SQLSTATE of a function the role may not call (insufficient_privilege)
_HOLDER_POLL = 0.1  # how often a lost connection the database would not end is looked for again
_READ = slice(1, 2 + len(sql.SESSION_COLUMNS))  # where the row's columns and read_at sit in the load's result
_COUNT = _READ.stop  # then the user's live sessions, if counted
_PID = _COUNT + 2  # and, after the lease timer, the server process holding the lock
_NAME = _PID + 1  # and the connection's application_name there


@dataclass
class _Lease:
    conn: Any
    cursor: Any
    taken: float
    ttl: float
    pid: int  # the server process holding the lock (read with it: a broken connection cannot be asked)
    read_at: datetime  # the server's time as it took the lock: that process had started by then
    name: str  # the connection's application_name as the server had it: a pooler's next client has its own

    @property
    def overdue(self) -> bool:
        return time.monotonic() - self.taken > self.ttl


class LockLeaseStore(AdminMethods):
    """:class:`teamstore.state.base.StateStore` on Postgres, with the lease as an advisory lock on a held
    connection.

    Args:
        engine: A ``postgresql+psycopg`` engine the caller owns; used for everything off the hot path
            (quarantine, listing, sweeps). The leases use the store's own connection pool to the same
            database, closed by :meth:`aclose`.
        pool_size: Most connections the store holds, so the most sessions this process runs at once.
        check_seconds: How often the database's lease mode and migration are read again
            (:class:`teamstore.state.lease_mode.LeaseModeCheck`).
    """

    lease = "lock"

    def __init__(self, engine: AsyncEngine, pool_size: int = 20, check_seconds: float = CHECK_SECONDS) -> None:
        self.engine = engine
        self.lease_check = LeaseModeCheck(engine, self.lease, check_seconds)
        self.admin = SessionAdmin(engine, sql.LOCK_LEASES, self, self.lease_check)
        self._direct = DirectPool(
            engine, pool_size, holds="sessions",
            needs="an advisory-lock lease (the server's idle_session_timeout ends a stalled worker's)",
        )
        self._leases: dict[tuple[SessionKey, str], _Lease] = {}
        # the server process of a checkpoint write cut off, and when its lease was taken
        self._given_up: dict[tuple[SessionKey, str], tuple[int, datetime, str]] = {}

    async def _execute(self, cursor: Any, stmt: Statement, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        return await execute(cursor, stmt, params)

    async def acquire(
        self, key: SessionKey, claim: Claim, *, owner: str, lease_ttl: float, wait_seconds: float,
        max_sessions: int | None = None,
    ) -> StoredSession:
        """Take the session's advisory lock and read its row in one statement; see the module doc and
        :meth:`teamstore.state.base.StateStore.acquire`."""
        await self.check_lease_mode()
        waiting, params = Waiting(wait_seconds), lock_params(key, lease_ttl, max_sessions)
        while True:
            conn, cursor, row = await self._load(params, waiting.left)
            locked, counted = row[0], row[_COUNT]
            if locked and max_sessions is not None and counted is not None and counted >= max_sessions:
                await self._unlock(conn, cursor, params)
                raise TooManySessions(counted, max_sessions)
            if locked:
                values = row[_READ]
                self._leases[(key, owner)] = _Lease(conn, cursor, time.monotonic(), lease_ttl, row[_PID], values[-1],
                                                     row[_NAME])
                return new_session(key, claim) if values[1] is None else stored(key.user_id, key.session_id, values)
            await self._direct.checkin(conn)
            if locked is None:
                raise erasure_open()
            await waiting.pause_or_give_up(crashed="ends with its connection")

    async def _load(self, params: Mapping[str, Any], seconds: float) -> tuple[Any, Any, tuple[Any, ...]]:
        """One attempt at the lock, on a pooled connection: the connection, its cursor (kept with the
        lease: one cursor serves the whole session) and the load's row."""
        stale_connections = 0
        while True:
            conn = await self._direct.checkout(seconds)
            cursor = AsyncRawCursor(conn)
            try:
                row = await self._execute(cursor, _ACQUIRE, params)
            except BaseException as exc:
                # Whatever happened (database error, cancellation), the lock may be held: end the session.
                await self._direct.checkin(conn, discard=True)
                if isinstance(exc, psycopg.OperationalError) and conn.broken and stale_connections < self._direct.size:
                    # A pooled connection the server ended (a restart, a failover): the load is read-only,
                    # so try a fresh one.
                    stale_connections += 1
                    continue
                if isinstance(exc, psycopg.Error):
                    raise unavailable(exc, "take the session lease") from exc
                raise
            assert row is not None
            return conn, cursor, row

    async def _unlock(self, conn: Any, cursor: Any, params: Mapping[str, Any]) -> None:
        """Give back the lock of a load refused after taking it; a connection that cannot is closed,
        which frees the lock as well."""
        try:
            await self._execute(cursor, _RELEASE[False], params)
        except BaseException as exc:
            await self._direct.checkin(conn, discard=True)
            if not isinstance(exc, psycopg.Error):
                raise
            return
        await self._direct.checkin(conn)

    async def save(
        self, key: SessionKey, *, owner: str, expected_version: int, record: SaveRecord, release: bool
    ) -> int:
        """Write ``record`` in one statement if the row is still at ``expected_version`` (and release).

        Raises:
            StaleStateVersion: The row changed or vanished, or this worker's lease ended (it held the
                session longer than ``lease_ttl``).
            ErasureInProgress: An erasure request holds this user.
            StoreUnavailable: The database failed, or its answer was lost (:meth:`settle` learns whether the
                write landed).
        """
        lease = self._lease(key, owner)
        params = save_params(key, expected_version, record)
        late = lease.overdue  # judged as it is sent: an answer lost later says nothing of the lease
        try:
            row = await self._execute(lease.cursor, _SAVE[release, expected_version > 0], params)
        except BaseException as exc:
            self._give_up(key, owner, lease, late)
            await self._direct.checkin(lease.conn, discard=True)
            if isinstance(exc, psycopg.Error):
                raise self._lost(exc, lease, late) from exc
            raise
        if release:
            self._leases.pop((key, owner), None)
            await self._direct.checkin(lease.conn)
        if row is None or row[0] is None:
            await self.admin.explain_lost_save(key, expected_version)
        return int(row[0])

    async def checkpoint(
        self, key: SessionKey, *, owner: str, expected_version: int, record: CheckpointRecord
    ) -> int:
        """Write (or clear) a run's checkpoint in one statement on the held connection, if the row is still at
        ``expected_version`` (a session with no row yet gets its first row here); the lock stays held.

        Raises:
            StaleStateVersion: The row changed or vanished, or this worker's lease ended.
            ErasureInProgress: An erasure request holds this user.
            StoreUnavailable: The database failed, or its answer was lost (:meth:`settle` learns whether the
                write landed). The connection, and with it the lock, is given up: the run stops, and its session must be opened again.
        """
        lease = self._lease(key, owner)
        params = checkpoint_params(key, expected_version, record)
        late = lease.overdue
        try:
            row = await self._execute(lease.cursor, _CHECKPOINT[expected_version > 0], params)
        except BaseException as exc:
            self._give_up(key, owner, lease, late)
            await self._direct.checkin(lease.conn, discard=True)
            if isinstance(exc, psycopg.Error):
                raise self._lost(exc, lease, late, "write the run's checkpoint") from exc
            raise
        if row is None or row[0] is None:
            await self.admin.explain_lost_save(key, expected_version)
        return int(row[0])

    def _lease(self, key: SessionKey, owner: str) -> _Lease:
        lease = self._leases.get((key, owner))
        if lease is None:
            raise StaleStateVersion(
                "this worker holds no lease on the session (it was released, or lost with its connection)",
                hint="open the session again and rerun",
            )
        return lease

    def _give_up(self, key: SessionKey, owner: str, lease: _Lease, late: bool) -> None:
        """Drop the lease of a write that failed; unless it was sent past the lease (the server had closed the
        connection, and the write could not run), remember its server process: :meth:`settle` ends it if it
        still runs, so that nothing sent on it can land after the read-back."""
        self._leases.pop((key, owner), None)
        if not late:
            self._given_up[(key, owner)] = (lease.pid, lease.read_at, lease.name)

    @staticmethod
    def _lost(exc: Exception, lease: _Lease, late: bool,
              action: str = "save the session state") -> StaleStateVersion | StoreUnavailable:
        """The error of a write that failed: the lease's end if it was sent past the lease, else the database's
        failure (whether the write landed is not known: :meth:`settle` learns it)."""
        if late:
            return StaleStateVersion(
                f"the lease ended: the session was held longer than its {lease.ttl:g}s lease and the "
                "database closed the connection; another worker may have it now. Nothing was written",
                hint="raise lease_ttl_seconds if runs outlive it",
            )
        return unavailable(exc, action)

    async def settle(self, key: SessionKey, *, owner: str) -> StoredSession | None:
        """The row once no write ``owner`` sent can still land: the server process of the connection a write (a
        checkpoint or a save) was cut off on (its lease went with it) is ended first, if it still holds the session's lock
        (:func:`teamstore.state.statements.end_lost_holder`); one gone already holds nothing that can land. A
        database that will not let the role end it (``pg_terminate_backend`` refused) is waited on instead, for
        that process to end on its own.

        Raises:
            StoreUnavailable: The database failed, or that process still held the lock :data:`SETTLE_SECONDS`
                later: whether its write landed is not known.
        """
        given_up = self._given_up.get((key, owner))
        if given_up is not None:
            pid, taken_at, name = given_up
            await self._end_lost_holder({"u": key.user_id, "s": key.session_id, "pid": pid, "taken_at": taken_at,
                                         "name": name, "wait_ms": SETTLE_SECONDS * 1000})
            self._given_up.pop((key, owner), None)
        return await self.get(key)

    async def _end_lost_holder(self, params: Mapping[str, Any]) -> None:
        """End (or else outwait) the server process ``params["pid"]`` while it holds the session's lock."""
        refused = False
        try:
            async with self.engine.connect() as conn:  # a role's shorter statement_timeout would cut the wait short
                await conn.execute(select(func.set_config("statement_timeout", f"{2 * SETTLE_SECONDS}s", True)))
                ended = (await conn.execute(_END_LOST_HOLDER, params)).scalar()
        except SQLAlchemyError as exc:
            if getattr(getattr(exc, "orig", None), "sqlstate", None) != _NOT_ALLOWED:
                raise unavailable(exc, "end the connection the write was cut off on") from exc
            refused, ended = True, False  # a managed database's role, say, kept from pg_terminate_backend
        if ended is not False or not await self._lost_holder_stays(params, SETTLE_SECONDS if refused else 0):
            return  # ended, or gone by itself (just before the signal, or while outwaited)
        if refused:
            raise landing_unknown(
                f"the connection the write was cut off on still held the session {SETTLE_SECONDS}s "
                "later, and the database does not let this role end it (pg_terminate_backend)",
                hint="grant the role EXECUTE on pg_terminate_backend(integer, bigint), or lease sessions in their "
                     "rows (TEAMSTORE_SESSION_LEASE=row), whose read-back needs no such right")
        raise landing_unknown(f"the database had not ended the connection the write was cut off on "
                              f"within {SETTLE_SECONDS}s")

    async def _lost_holder_stays(self, params: Mapping[str, Any], seconds: float) -> bool:
        """Whether the server process ``params["pid"]`` still holds the session's lock ``seconds`` from now (it is
        asked again every :data:`_HOLDER_POLL` seconds until then; 0: once)."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                async with self.engine.connect() as conn:
                    stays = bool((await conn.execute(_LOST_HOLDER_STAYS, params)).scalar())
            except SQLAlchemyError as exc:
                raise unavailable(exc, "learn whether the connection the write was cut off on ended") from exc
            if not stays or time.monotonic() >= deadline:
                return stays
            await asyncio.sleep(_HOLDER_POLL)

    async def renew(self, key: SessionKey, *, owner: str, lease_ttl: float) -> bool:
        """Any statement on the held connection restarts the server's lease timer: send a trivial one."""
        lease = self._leases.get((key, owner))
        if lease is None:
            return False
        try:
            # Its own cursor: a renewal may overlap a mid-session save (the connection serialises them).
            await self._execute(AsyncRawCursor(lease.conn), _RENEW, {})
        except psycopg.Error:
            return False  # the connection (and with it the lock) is gone; the save will say so
        lease.taken = time.monotonic()
        return True

    async def release(self, key: SessionKey, *, owner: str, discard_empty: bool) -> None:
        """Give the lock back in one statement; with ``discard_empty``, the same statement removes the row if it
        holds neither a state nor a checkpoint (a new session's only run wrote checkpoints and left none)."""
        self._given_up.pop((key, owner), None)
        lease = self._leases.pop((key, owner), None)
        if lease is None:
            return
        try:
            await self._execute(lease.cursor, _RELEASE[discard_empty], {"u": key.user_id, "s": key.session_id})
        except BaseException as exc:
            await self._direct.checkin(lease.conn, discard=True)
            if isinstance(exc, psycopg.Error) and not lease.overdue:
                raise unavailable(exc, "release the session lease") from exc
            if not isinstance(exc, psycopg.Error):
                raise
            return
        await self._direct.checkin(lease.conn)

    async def aclose(self) -> None:
        """Release every lease still held and close the store's pool (the engine stays the caller's)."""
        for lease in self._leases.values():
            await lease.conn.close()
        self._leases.clear()
        self._given_up.clear()
        await self._direct.close()
