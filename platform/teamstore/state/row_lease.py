"""Row leases: the lease lives in the session row (SQLite always; Postgres with ``TEAMSTORE_SESSION_LEASE=row``).

    from teamstore.state.factory import store_for

    store = store_for(engine, lease="row")        # a RowLeaseStore on SQLite or Postgres
    row = await store.acquire(key, claim, owner="w-1", lease_ttl=300, wait_seconds=10)
    ...                                           # the run; no connection is held
    await store.save(key, owner="w-1", expected_version=row.row_version, record=rec, release=True)

Taking the lease is one write that also reads the row; a run's checkpoint is one versioned ``UPDATE``
that keeps the lease; saving is one versioned ``UPDATE`` that also releases (:func:`teamstore.state.statements.acquire_row`, :func:`~teamstore.state.statements.save_row`).
A save whose row moved on (another writer, an expired lease taken over, an erasure) matches nothing
and raises; no update is ever lost silently. A row lease costs a commit on every load but holds no
connection while the team runs, so a process runs as many sessions at once as it likes.

The per-user bound (``max_sessions``) is checked by the same lease statement: a session without a live
row is not inserted while its user keeps that many live (unexpired, saved) sessions. The count sits
behind a check of the session's own row, so a resume never pays for it. Opens of different new
sessions racing each other each see the others' rows missing (they have none until their first save),
so the bound is soft: it can be passed by the number of new sessions opened at once.

How the two statements reach the database is the backend's (:class:`RowStatements`): SQLite sends them
through the engine (:mod:`teamstore.state.sqlite`), Postgres through psycopg on the store's own pool
(:mod:`teamstore.state.postgres_row`). Everything else goes through the engine on both.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.clock import now_utc
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
from teamstore.state.cancellation import to_the_end
from teamstore.state.failures import landing_unknown, unavailable
from teamstore.state.lease_mode import CHECK_SECONDS, LeaseModeCheck
from teamstore.state.rows import checkpoint_params, lease_params, row_lease_params, save_params, stored
from teamstore.state.waiting import Waiting


class RowStatements(Protocol):
    """How a backend sends the two row-lease statements of the hot path to its database."""

    async def acquire(self, params: Mapping[str, Any], seconds: float) -> Sequence[Any] | None:
        """Run :func:`teamstore.state.statements.acquire_row` (``seconds``: the most to wait for a
        connection); the row's :data:`~teamstore.state.statements.SESSION_COLUMNS`, or ``None`` if refused.

        Raises:
            StoreUnavailable: The database failed.
        """
        ...

    async def save(self, params: Mapping[str, Any], release: bool) -> Sequence[Any] | None:
        """Run :func:`teamstore.state.statements.save_row`; the new row version, or ``None`` if it
        matched no row.

        Raises:
            StoreUnavailable: The database failed.
        """
        ...

    async def checkpoint(self, params: Mapping[str, Any]) -> Sequence[Any] | None:
        """Run :func:`teamstore.state.statements.checkpoint_row`; the new row version, or ``None`` if it
        matched no row.

        Raises:
            StoreUnavailable: The database failed.
        """
        ...

    async def aclose(self) -> None:
        """Close what the backend opened itself."""
        ...


_RENEW = {dialect: sql.renew_row(dialect) for dialect in (sql.SQLITE, sql.POSTGRES)}
_SETTLE = {dialect: sql.settle_row(dialect) for dialect in (sql.SQLITE, sql.POSTGRES)}
_RELEASE, _DISCARD = sql.release_row(), sql.discard_row()
_OUT_OF_TIME = {"55P03", "57014"}  # the SQLSTATEs of a Postgres statement cut short by lock_timeout, statement_timeout


class RowLeaseStore(AdminMethods):
    """:class:`teamstore.state.base.StateStore` with the lease in the row.

    Args:
        engine: The state database (the caller's); used for everything off the hot path.
        statements: How the backend sends the lease and save statements.
        check_seconds: How often the database's lease mode and migration are read again
            (:class:`teamstore.state.lease_mode.LeaseModeCheck`).
    """

    lease = "row"

    def __init__(self, engine: AsyncEngine, statements: RowStatements, check_seconds: float = CHECK_SECONDS) -> None:
        self.engine, self.statements = engine, statements
        self.lease_check = LeaseModeCheck(engine, self.lease, check_seconds)
        self.admin = SessionAdmin(engine, sql.ROW_LEASES, self, self.lease_check)

    async def acquire(
        self, key: SessionKey, claim: Claim, *, owner: str, lease_ttl: float, wait_seconds: float,
        max_sessions: int | None = None,
    ) -> StoredSession:
        """Take the lease and read the row in one statement, waiting up to ``wait_seconds`` for a busy one.

        Args:
            key: The session.
            claim: What a new session's row is made with.
            owner: Names this opening of the session.
            lease_ttl: Seconds the lease lasts without a renewal.
            wait_seconds: How long to wait while another worker holds the session.
            max_sessions: The per-user bound: a session without a live row (new, or expired) is refused
                while its user keeps this many live ones. ``None``: no bound (maintenance).

        Raises:
            SessionBusy: Another worker kept the lease past ``wait_seconds``.
            ErasureInProgress: An erasure request holds this user.
            TooManySessions: The per-user bound refused a new session; no lease or row is left.
            StoreUnavailable: The database failed.
        """
        await self.check_lease_mode()
        waiting = Waiting(wait_seconds)
        while True:
            row = await self._attempt(key, claim, owner, lease_ttl, waiting.left, max_sessions)
            if row is not None:
                return row
            await self.admin.explain_refused_lease(key, max_sessions)
            crashed = await self.admin.lease_ends(key) if not waiting.left else "expires on its own"
            await waiting.pause_or_give_up(crashed=crashed)

    async def _attempt(
        self, key: SessionKey, claim: Claim, owner: str, ttl: float, seconds: float, max_sessions: int | None
    ) -> StoredSession | None:
        """One attempt at the lease, carried through a cancellation of the caller: the lease statement may
        already have taken the lease (which would then keep the session from everyone for its TTL), and
        a driver call cut short can leave SQLite's connection unreturned, holding the write lock. So the
        attempt finishes, a lease it took is given back, and then the cancellation goes on."""
        params = row_lease_params(key, claim, owner, ttl, max_sessions)
        attempt = asyncio.ensure_future(self.statements.acquire(params, seconds))
        try:
            row = await asyncio.shield(attempt)
        except asyncio.CancelledError:
            await to_the_end(self._give_back(key, owner, attempt))
            raise
        return stored(key.user_id, key.session_id, row) if row is not None else None

    async def _give_back(self, key: SessionKey, owner: str, attempt: asyncio.Future[Any]) -> None:
        """Once a cancelled attempt at the lease has ended, release the lease it took, if it took one."""
        with contextlib.suppress(Exception):
            taken = await attempt
            if taken is not None:
                await self.release(key, owner=owner, discard_empty=stored(key.user_id, key.session_id, taken).is_new)

    async def save(
        self, key: SessionKey, *, owner: str, expected_version: int, record: SaveRecord, release: bool
    ) -> int:
        """Write ``record`` in one statement if nothing moved since the load (and release).

        Returns:
            The new row version.

        Raises:
            StaleStateVersion: The row changed, vanished, or its lease was taken over.
            ErasureInProgress: An erasure request holds this user.
            StoreUnavailable: The database failed; the previous state is intact.
        """
        row = await self.statements.save(save_params(key, expected_version, record, owner=owner), release)
        if row is None:
            await self.admin.explain_lost_save(key, expected_version)
        return int(row[0])

    async def checkpoint(
        self, key: SessionKey, *, owner: str, expected_version: int, record: CheckpointRecord
    ) -> int:
        """Write (or clear) a run's checkpoint in one statement if nothing moved since the last write; the
        lease stays held.

        Returns:
            The new row version.

        Raises:
            StaleStateVersion: The row changed, vanished, or its lease was taken over.
            ErasureInProgress: An erasure request holds this user.
            StoreUnavailable: The database failed, or its answer was lost (:meth:`settle` learns whether the
                write landed).
        """
        row = await self.statements.checkpoint(checkpoint_params(key, expected_version, record, owner=owner))
        if row is None:
            await self.admin.explain_lost_save(key, expected_version)
        return int(row[0])

    async def settle(self, key: SessionKey, *, owner: str) -> StoredSession | None:
        """The row once no write ``owner`` sent can still land: its version moved on under ``owner``'s lease
        (:func:`teamstore.state.statements.settle_row`), after any such write the server is still running;
        read as it stands when the lease is not ``owner``'s any more (no write of ``owner``'s matches it).

        Raises:
            StoreUnavailable: The database failed, or a write still running held the row past
                :data:`SETTLE_SECONDS`: whether it landed is not known.
        """
        dialect = self.engine.dialect.name
        params = {"u": key.user_id, "s": key.session_id, "owner": owner, "now": now_utc()}
        try:
            async with self.engine.begin() as conn:
                if dialect == sql.POSTGRES:  # the wait for each lock, and for all of them (a queue of writers)
                    for setting in ("lock_timeout", "statement_timeout"):
                        await conn.execute(select(func.set_config(setting, f"{SETTLE_SECONDS}s", True)))
                row = (await conn.execute(_SETTLE[dialect], params)).first()
        except SQLAlchemyError as exc:
            if getattr(getattr(exc, "orig", None), "sqlstate", None) in _OUT_OF_TIME:  # ours, not the role's
                raise landing_unknown(f"a write still running held the session's row past {SETTLE_SECONDS}s") from exc
            raise unavailable(exc, "read the session's row back") from exc
        if row is None:
            return await self.get(key)
        return stored(key.user_id, key.session_id, row)

    async def renew(self, key: SessionKey, *, owner: str, lease_ttl: float) -> bool:
        """Move the lease's end to ``lease_ttl`` from now (on Postgres, the server's now), if ``owner`` still
        holds it."""
        try:
            async with self.engine.begin() as conn:
                renew = _RENEW[self.engine.dialect.name]
                return bool((await conn.execute(renew, lease_params(key, owner, lease_ttl))).rowcount)
        except SQLAlchemyError as exc:
            raise unavailable(exc, "renew the session lease") from exc

    async def release(self, key: SessionKey, *, owner: str, discard_empty: bool) -> None:
        """Give the lease back in one statement; with ``discard_empty``, a row still ``owner``'s that holds neither
        a state nor a checkpoint is removed instead (that statement first: the release follows it only if it
        removed nothing)."""
        params = {"u": key.user_id, "s": key.session_id, "owner": owner}
        try:
            async with self.engine.begin() as conn:
                if not discard_empty or not (await conn.execute(_DISCARD, params)).rowcount:
                    await conn.execute(_RELEASE, params)
        except SQLAlchemyError as exc:
            raise unavailable(exc, "release the session lease") from exc

    async def aclose(self) -> None:
        """Close what the backend opened itself (the engine stays the caller's)."""
        await self.statements.aclose()
