"""The Postgres backend with ``lock`` leases (the default): an advisory lock, held on one connection
from load to save. (``row`` leases: :mod:`teamstore.state.postgres_row`.)

    from teamstore.state.postgres_lock import PostgresStateStore

    store = PostgresStateStore(engine, pool_size=20)      # engine: postgresql+psycopg
    row = await store.acquire(key, claim, owner="w-1", lease_ttl=300, wait_seconds=10)
    ...                                                   # the run; the connection stays checked out
    await store.save(key, owner="w-1", expected_version=row.row_version, record=rec, release=True)
    await store.aclose()

Why a lock rather than the lease row SQLite uses: taking a lease in a row is a write on every load,
while a session-level advisory lock lives in shared memory, and a killed worker's lock goes with its
connection at once. The load is one read-only statement::

    lock (unless an erasure holds the user) + arm the lease timer + read the row
        (+ count the user's live sessions, only for a session with no live row under a per-user bound)

and the save is one statement and one commit::

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

import orjson
import psycopg
from psycopg import AsyncRawCursor
from sqlalchemy import and_, func
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.clock import now_utc
from teamstore.db.fence import user_holds
from teamstore.errors import StaleStateVersion, StoreUnavailable, TooManySessions
from teamstore.state.base import Claim, SaveRecord, SessionKey, StoredSession, checked, read_fingerprints
from teamstore.state.direct import DirectPool, Statement, execute
from teamstore.state.failures import busy, erasure_open, unavailable
from teamstore.state.schema import sessions
from teamstore.state.sql import _POLL_MAX, _POLL_START, SqlStateStore

_S, _H = sessions.name, user_holds.name
_LOCK_KEY = "hashtext(%(u)s::text), hashtext(%(s)s::text)"
_NOT_HELD = f"NOT EXISTS (SELECT 1 FROM {_H} WHERE user_id = %(u)s::text)"


# Row leases: whether the session may be opened under the per-user bound ``max`` (NULL: none), as
# :func:`teamstore.state.sql._room` says it. The count is in the last branch, so a resume never runs it;
# it is a function (ts_live_sessions, migration 0008), which, unlike a subquery, costs nothing unless called.
_ROOM = f"""CASE WHEN %(max)s::bigint IS NULL THEN true
    WHEN EXISTS (SELECT 1 FROM {_S} WHERE user_id = %(u)s::text AND session_id = %(s)s::text
                 AND expires_at > %(now)s::timestamptz) THEN true
    ELSE ts_live_sessions(%(u)s::text, %(now)s::timestamptz) < %(max)s::bigint END"""

# The lock, the lease timer and the read, in one read-only statement. ``locked`` is NULL when an
# erasure holds the user (no lock is taken), false when another worker has the session; the timer is
# armed only with the lock, so a refused attempt's connection goes back to the pool as it came. The row
# is read through ts_locked_session (migration 0004), called after the lock: its snapshot is taken then,
# so it sees the save the previous holder committed before letting go (the statement's own snapshot,
# taken before the lock, might not). Under a per-user bound (``max``), a session without a live row also
# counts its user's live sessions (ts_live_sessions, migration 0008); a resume never calls it.
_ACQUIRE = f"""
SELECT l.locked, s.state, s.row_version, s.team, s.team_version, s.schema_version, s.agentchat_version,
       s.fingerprints, s.state_bytes, s.created_at, s.updated_at, s.expires_at,
       CASE WHEN l.locked AND %(max)s::bigint IS NOT NULL AND (s.expires_at > now()) IS NOT TRUE
            THEN ts_live_sessions(%(u)s::text, now()) END,
       set_config('idle_session_timeout', CASE WHEN l.locked THEN %(ttl_ms)s::text ELSE '0' END, false)
FROM (SELECT CASE WHEN {_NOT_HELD} THEN pg_try_advisory_lock({_LOCK_KEY}) END AS locked OFFSET 0) AS l
LEFT JOIN LATERAL ts_locked_session(l.locked, %(u)s::text, %(s)s::text) AS s ON true
"""

_SET = """team = %(team)s::text, team_version = %(team_version)s::text, schema_version = %(schema)s::int,
    agentchat_version = %(agentchat)s::text, fingerprints = %(fingerprints)s::json, state = %(state)s::text,
    state_bytes = %(state_bytes)s::int, updated_at = now(),
    expires_at = CASE WHEN expires_at BETWEEN %(expires_at)s::timestamptz AND %(expires_latest)s::timestamptz
                      THEN expires_at ELSE %(expires_latest)s::timestamptz END"""

_UPDATE = f"""UPDATE {_S} SET {_SET}, row_version = row_version + 1
    WHERE user_id = %(u)s::text AND session_id = %(s)s::text AND row_version = %(version)s::bigint
      AND {_NOT_HELD}
    RETURNING row_version"""

_INSERT = f"""INSERT INTO {_S} (user_id, session_id, team, team_version, schema_version, agentchat_version,
        fingerprints, state, state_bytes, row_version, created_at, updated_at, expires_at)
    SELECT %(u)s::text, %(s)s::text, %(team)s::text, %(team_version)s::text, %(schema)s::int,
        %(agentchat)s::text, %(fingerprints)s::json, %(state)s::text, %(state_bytes)s::int, 1, now(), now(),
        %(expires_latest)s::timestamptz
    WHERE {_NOT_HELD}
    ON CONFLICT (user_id, session_id) DO NOTHING
    RETURNING row_version"""

# Keep the lock (``s.save()`` mid-session): the statement itself restarts the lease timer.
_SAVE_KEEP = {True: _UPDATE, False: _INSERT}
# Save and release: the transaction takes the lock too, the session lock is dropped, and the commit
# releases the transaction's; the subquery (OFFSET 0 keeps it one) runs before the outer unlock.
_SAVE_RELEASE = {
    existing: f"""WITH saved AS ({stmt})
SELECT (SELECT row_version FROM saved), pg_advisory_unlock({_LOCK_KEY}),
       set_config('idle_session_timeout', '0', false)
FROM (SELECT pg_advisory_xact_lock({_LOCK_KEY}) OFFSET 0) AS handover"""
    for existing, stmt in ((True, _UPDATE), (False, _INSERT))
}
_RELEASE = f"SELECT pg_advisory_unlock({_LOCK_KEY}), set_config('idle_session_timeout', '0', false)"


_ACQUIRE_STMT, _RELEASE_STMT, _RENEW_STMT = Statement(_ACQUIRE), Statement(_RELEASE), Statement("SELECT 1")
_SAVE_STMTS = {
    release: {existing: Statement(sql) for existing, sql in table.items()}
    for release, table in ((True, _SAVE_RELEASE), (False, _SAVE_KEEP))
}


@dataclass
class _Lease:
    conn: Any
    cursor: Any
    taken: float
    ttl: float

    @property
    def overdue(self) -> bool:
        return time.monotonic() - self.taken > self.ttl


class PostgresStateStore(SqlStateStore):
    """:class:`SqlStateStore` on Postgres, with the lease as an advisory lock on a held connection.

    Args:
        engine: A ``postgresql+psycopg`` engine the caller owns; used for everything off the hot path
            (quarantine, listing, sweeps). The leases use the store's own connection pool to the same
            database, closed by :meth:`aclose`.
        pool_size: Most connections the store holds, so the most sessions this process runs at once.
    """

    lease = "lock"

    def __init__(self, engine: AsyncEngine, pool_size: int = 20) -> None:
        super().__init__(engine)
        self._direct = DirectPool(
            engine, pool_size, holds="sessions",
            needs="an advisory-lock lease (the server's idle_session_timeout ends a stalled worker's)",
        )
        self._leases: dict[tuple[SessionKey, str], _Lease] = {}

    async def _execute(self, cursor: Any, stmt: Statement, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        return await execute(cursor, stmt, params)

    async def acquire(
        self, key: SessionKey, claim: Claim, *, owner: str, lease_ttl: float, wait_seconds: float,
        max_sessions: int | None = None,
    ) -> StoredSession:
        """Take the session's advisory lock and read its row in one statement; see the module doc and
        :meth:`SqlStateStore.acquire`."""
        await self.check_lease_mode()
        deadline, pause = time.monotonic() + wait_seconds, _POLL_START
        params = {"u": key.user_id, "s": key.session_id, "ttl_ms": str(max(1, round(lease_ttl * 1000))),
                  "max": max_sessions}
        stale_connections = 0
        while True:
            conn = await self._direct.checkout(deadline - time.monotonic())
            cursor = AsyncRawCursor(conn)  # kept with the lease: one cursor serves the whole session
            try:
                row = await self._execute(cursor, _ACQUIRE_STMT, params)
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
            locked, stored = row[0], row[12]
            if locked and max_sessions is not None and stored is not None and stored >= max_sessions:
                await self._unlock(conn, cursor, params)
                raise TooManySessions(stored, max_sessions)
            if locked:
                self._leases[(key, owner)] = _Lease(conn, cursor, time.monotonic(), lease_ttl)
                return _stored(key, claim, row)
            await self._direct.checkin(conn)
            if locked is None:
                raise erasure_open()
            if time.monotonic() >= deadline:
                raise busy(wait_seconds, "ends with its connection")
            await asyncio.sleep(pause)
            pause = min(pause * 2, _POLL_MAX)

    async def _unlock(self, conn: Any, cursor: Any, params: Mapping[str, Any]) -> None:
        """Give back the lock of a load refused after taking it; a connection that cannot is closed,
        which frees the lock as well."""
        try:
            await self._execute(cursor, _RELEASE_STMT, params)
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
            StoreUnavailable: The database failed; the previous state is intact.
        """
        lease = self._lease(key, owner)
        params = save_params(key, expected_version, record)
        try:
            row = await self._execute(lease.cursor, _SAVE_STMTS[release][expected_version > 0], params)
        except BaseException as exc:
            self._leases.pop((key, owner), None)
            await self._direct.checkin(lease.conn, discard=True)
            if isinstance(exc, psycopg.Error):
                raise self._lost(exc, lease) from exc
            raise
        if release:
            self._leases.pop((key, owner), None)
            await self._direct.checkin(lease.conn)
        if row is None or row[0] is None:
            await self._explain_lost_save(key, expected_version)
        return int(row[0])

    def _lease(self, key: SessionKey, owner: str) -> _Lease:
        lease = self._leases.get((key, owner))
        if lease is None:
            raise StaleStateVersion(
                "this worker holds no lease on the session (it was released, or lost with its connection)",
                hint="open the session again and rerun",
            )
        return lease

    def _lost(self, exc: Exception, lease: _Lease) -> StaleStateVersion | StoreUnavailable:
        if lease.overdue:
            return StaleStateVersion(
                f"the lease ended: the session was held longer than its {lease.ttl:g}s lease and the "
                "database closed the connection; another worker may have it now. The state was not saved",
                hint="raise lease_ttl_seconds if runs outlive it",
            )
        return unavailable(exc, "save the session state")

    async def renew(self, key: SessionKey, *, owner: str, lease_ttl: float) -> bool:
        """Any statement on the held connection restarts the server's lease timer: send a trivial one."""
        lease = self._leases.get((key, owner))
        if lease is None:
            return False
        try:
            # Its own cursor: a renewal may overlap a mid-session save (the connection serialises them).
            await self._execute(AsyncRawCursor(lease.conn), _RENEW_STMT, {})
        except psycopg.Error:
            return False  # the connection (and with it the lock) is gone; the save will say so
        lease.taken = time.monotonic()
        return True

    async def release(self, key: SessionKey, *, owner: str, discard_empty: bool) -> None:
        """Give the lock back (no row is ever written for a session that never saved)."""
        lease = self._leases.pop((key, owner), None)
        if lease is None:
            return
        try:
            await self._execute(lease.cursor, _RELEASE_STMT, {"u": key.user_id, "s": key.session_id})
        except BaseException as exc:
            await self._direct.checkin(lease.conn, discard=True)
            if isinstance(exc, psycopg.Error) and not lease.overdue:
                raise unavailable(exc, "release the session lease") from exc
            if not isinstance(exc, psycopg.Error):
                raise
            return
        await self._direct.checkin(lease.conn)

    def _owned(self, owner: str) -> list[Any]:
        # The advisory lock is the ownership; the lease columns stay empty on Postgres.
        return []

    def _sweepable(self, now: datetime) -> Any:
        # A row whose session is open is skipped: the transaction-level lock fails while a worker holds
        # the session's lock, and while the sweep holds it a worker waits, then finds no row.
        return and_(sessions.c.expires_at < now, func.pg_try_advisory_xact_lock(
            func.hashtext(sessions.c.user_id), func.hashtext(sessions.c.session_id)))

    def _sweep_recheck(self, now: datetime) -> Any:
        # A save committed between the sweep's snapshot and its lock moved the expiry on: keep that row.
        # (The lock itself is not repeated here: it could be taken on rows that are not swept.)
        return sessions.c.expires_at < now

    async def aclose(self) -> None:
        """Release every lease still held and close the store's pool (the engine stays the caller's)."""
        for lease in self._leases.values():
            await lease.conn.close()
        self._leases.clear()
        await self._direct.close()


def save_params(key: SessionKey, expected_version: int, record: SaveRecord, *, owner: str = "") -> dict[str, Any]:
    """The parameters of a save statement (``_SET`` and the row's address; ``owner`` for row leases)."""
    return {
        "u": key.user_id, "s": key.session_id, "version": expected_version, "owner": owner,
        "team": record.team, "team_version": record.team_version, "schema": record.schema_version,
        "agentchat": record.agentchat_version, "fingerprints": orjson.dumps(dict(record.fingerprints)).decode(),
        "state": record.state, "state_bytes": len(record.state.encode()), "expires_at": record.expires_at,
        "expires_latest": record.expires_latest,
    }


def _stored(key: SessionKey, claim: Claim, row: tuple[Any, ...]) -> StoredSession:
    (_, state, version, team, team_version, schema, agentchat, fingerprints, size, created, updated, expires, *_) = row
    if version is None:  # no row yet: a new session, written by its first save
        now = now_utc()
        return StoredSession(key.user_id, key.session_id, claim.team, claim.team_version, claim.schema_version,
                             claim.agentchat_version, dict(claim.fingerprints), None, 0, 0, now, now, None)
    return checked(StoredSession(key.user_id, key.session_id, team, team_version, schema, agentchat,
                                 read_fingerprints(fingerprints), state, size, version, created, updated, expires))
