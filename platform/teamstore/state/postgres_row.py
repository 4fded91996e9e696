"""Row leases on Postgres (``TEAMSTORE_SESSION_LEASE=row``): the lease lives in the session row.

    from teamstore.state.postgres_row import PostgresRowStateStore

    store = PostgresRowStateStore(engine, pool_size=20)   # engine: postgresql+psycopg
    row = await store.acquire(key, claim, owner="w-1", lease_ttl=300, wait_seconds=10)
    ...                                                   # the run; no connection is held
    await store.save(key, owner="w-1", expected_version=row.row_version, record=rec, release=True)

The same statements as :class:`teamstore.state.sql.SqlStateStore` on SQLite, sent through the store's
own connection pool (:mod:`teamstore.state.direct`). Taking the lease is one write that also reads the row::

    INSERT the placeholder row (a new session) .. ON CONFLICT DO UPDATE the lease
        WHERE it is free, expired, or already this owner's .. RETURNING the row

and the save is one versioned ``UPDATE`` that also releases. A connection is held only for the length of
a statement, so a process runs as many sessions at once as it likes: the point of row leases.

The lease write commits asynchronously (``synchronous_commit`` off for its transaction alone): it does
not wait for its WAL flush. A server crash can lose the last such writes, and with them leases, as a
restart loses advisory locks; a worker whose lease was lost has its save refused (the row's
``lease_owner`` is no longer its own), so nothing is overwritten. Saves keep the server's durability,
and their flush carries every earlier lease write with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import orjson
import psycopg
from psycopg import AsyncRawCursor
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.clock import now_utc
from teamstore.state.base import Claim, SaveRecord, SessionKey, StoredSession, checked, read_fingerprints
from teamstore.state.direct import DirectPool, Statement, execute
from teamstore.state.failures import unavailable
from teamstore.state.postgres_lock import _NOT_HELD, _ROOM, _S, _SET, save_params
from teamstore.state.sql import SqlStateStore

_CONNECTION_WAIT = 10.0  # a save waits this long for a pooled connection (each is held for one statement)
_COLUMNS = ("state", "row_version", "team", "team_version", "schema_version", "agentchat_version", "fingerprints",
            "state_bytes", "created_at", "updated_at", "expires_at")

# ``lease_owner = excluded.lease_owner``: an owner names one opening of a session, so taking its own lease
# again is safe, and a retry after a lost connection does not wait out its own lease. The per-user bound
# (``max``, NULL for none) is checked as in :func:`teamstore.state.sql._room`: a session whose own row is
# live is a resume and never counts the user's sessions.
_ACQUIRE = Statement(f"""
INSERT INTO {_S} AS s (user_id, session_id, team, team_version, schema_version, agentchat_version,
        fingerprints, state, state_bytes, row_version, created_at, updated_at, expires_at, lease_owner, lease_until)
    SELECT %(u)s::text, %(s)s::text, %(team)s::text, %(team_version)s::text, %(schema)s::int, %(agentchat)s::text,
        %(fingerprints)s::json, NULL, 0, 0, %(now)s::timestamptz, %(now)s::timestamptz, NULL, %(owner)s::text,
        %(until)s::timestamptz
    WHERE {_NOT_HELD} AND set_config('synchronous_commit', 'off', true) IS NOT NULL AND {_ROOM}
ON CONFLICT (user_id, session_id) DO UPDATE SET lease_owner = excluded.lease_owner, lease_until = excluded.lease_until
    WHERE s.lease_owner IS NULL OR s.lease_until < %(now)s::timestamptz OR s.lease_owner = excluded.lease_owner
RETURNING {", ".join(f"s.{c}::text" if c == "fingerprints" else f"s.{c}" for c in _COLUMNS)}""")

_SAVE = {
    release: Statement(f"""UPDATE {_S} SET {_SET}, row_version = row_version + 1{
        ", lease_owner = NULL, lease_until = NULL" if release else ""}
    WHERE user_id = %(u)s::text AND session_id = %(s)s::text AND row_version = %(version)s::bigint
      AND lease_owner = %(owner)s::text AND {_NOT_HELD}
    RETURNING row_version""")
    for release in (True, False)
}


class PostgresRowStateStore(SqlStateStore):
    """:class:`SqlStateStore` on Postgres with the lease in the row, loading and saving through psycopg.

    Args:
        engine: A ``postgresql+psycopg`` engine the caller owns; used for everything off the hot path.
        pool_size: Most connections the store's own pool opens (each is held for one statement).
    """

    def __init__(self, engine: AsyncEngine, pool_size: int = 20) -> None:
        super().__init__(engine)
        self._direct = DirectPool(engine, pool_size, holds="statements")

    async def _execute(self, cursor: Any, stmt: Statement, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        return await execute(cursor, stmt, params)

    async def _one(self, stmt: Statement, params: Mapping[str, Any], seconds: float, *, retry: bool) -> Any:
        """Run ``stmt`` on a pooled connection and return its row. With ``retry``, a pooled connection the
        server has ended (a restart, a failover) is replaced and the statement sent again."""
        stale = 0
        while True:
            conn = await self._direct.checkout(seconds)
            try:
                row = await self._execute(AsyncRawCursor(conn), stmt, params)
            except BaseException:
                await self._direct.checkin(conn, discard=conn.broken)
                if retry and conn.broken and stale < self._direct.size:
                    stale += 1
                    continue
                raise
            await self._direct.checkin(conn)
            return row

    async def _try_acquire(
        self, key: SessionKey, claim: Claim, owner: str, ttl: float, seconds: float, max_sessions: int | None
    ) -> StoredSession | None:
        now = now_utc()
        params = {
            "u": key.user_id, "s": key.session_id, "team": claim.team, "team_version": claim.team_version,
            "schema": claim.schema_version, "agentchat": claim.agentchat_version,
            "fingerprints": orjson.dumps(dict(claim.fingerprints)).decode(), "owner": owner,
            "now": now, "until": now + timedelta(seconds=ttl), "max": max_sessions,
        }
        try:
            row = await self._one(_ACQUIRE, params, seconds, retry=True)
        except psycopg.Error as exc:
            raise unavailable(exc, "take the session lease") from exc
        return _stored(key, row) if row is not None else None

    async def save(
        self, key: SessionKey, *, owner: str, expected_version: int, record: SaveRecord, release: bool
    ) -> int:
        """Write ``record`` in one statement if nothing moved since the load (and release).

        Raises:
            StaleStateVersion: The row changed, vanished, or its lease was taken over.
            ErasureInProgress: An erasure request holds this user.
            StoreUnavailable: The database failed; the previous state is intact.
        """
        params = save_params(key, expected_version, record, owner=owner)
        try:
            row = await self._one(_SAVE[release], params, _CONNECTION_WAIT, retry=False)
        except psycopg.Error as exc:
            raise unavailable(exc, "save the session state") from exc
        if row is None:
            await self._explain_lost_save(key, expected_version)
        return int(row[0])

    async def aclose(self) -> None:
        """Close the store's pool (the engine stays the caller's)."""
        await self._direct.close()


def _stored(key: SessionKey, row: tuple[Any, ...]) -> StoredSession:
    state, version, team, team_version, schema, agentchat, fingerprints, size, created, updated, expires = row
    return checked(StoredSession(key.user_id, key.session_id, team, team_version, schema, agentchat,
                                 read_fingerprints(fingerprints), state, size, version, created, updated, expires))
