"""The SQL resume-state store: the tables, the queries, and the leases kept in the session row.

    from teamstore.db.engine import create_engine
    from teamstore.state.sql import store_for

    store = store_for(create_engine("sqlite:///.teamstore/teamstore.db"))
    row = await store.acquire(key, claim, owner="worker-1", lease_ttl=300, wait_seconds=10)

On Postgres, ``store_for`` gives :class:`teamstore.state.postgres.PostgresStateStore` (lease ``lock``, an
advisory lock on a held connection) or :class:`teamstore.state.postgres_row.PostgresRowStateStore`
(lease ``row``: these statements, sent through psycopg directly). Here the lease lives in the session
row: taking it is a single ``INSERT .. ON CONFLICT DO UPDATE .. WHERE lease free .. RETURNING`` that also
reads the row; saving is a single ``UPDATE .. WHERE row_version = :v AND lease_owner = :me``
that also releases. A save whose row moved on (another writer, an expired lease taken over, an erasure)
matches nothing and raises; no update is ever lost silently. A row lease costs a commit on every load
but holds no connection while the team runs.

The per-user bound (``max_sessions``) is checked by the same lease statement: a session without a live
row is not inserted while its user keeps that many live (unexpired, saved) sessions. The count sits
behind a check of the session's own row, so a resume never pays for it. Opens of different new
sessions racing each other each see the others' rows missing (they have none until their first save),
so the bound is soft: it can be passed by the number of new sessions opened at once.

The two kinds of lease do not see each other, so the database records which one it serves
(``ts_store_settings``, migration 0005) and a store of the other kind refuses to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, NoReturn

from sqlalchemy import (
    Integer,
    Row,
    RowMapping,
    and_,
    bindparam,
    case,
    delete,
    exists,
    insert,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.clock import now_utc, utc
from teamstore.db.fence import held
from teamstore.errors import QuarantineNotFound, StaleStateVersion, TooManySessions
from teamstore.ids import check_id
from teamstore.state import statements
from teamstore.state.base import (
    Claim,
    QuarantinedRow,
    Restored,
    SaveRecord,
    SessionKey,
    StoredSession,
    checked,
    read_fingerprints,
)
from teamstore.state.failures import busy, check_key, erased_in_flight, erasure_open, unavailable
from teamstore.state.lease_mode import LeaseModeCheck
from teamstore.state.schema import DAMAGED, quarantine, sessions
from teamstore.state.statements import live, live_count, never_saved

_POLL_START, _POLL_MAX = 0.02, 0.25
_RESTORE_LEASE_SECONDS = 60.0  # a restore or a delete holds the session for a few statements (_held_briefly)


_STAND_INS: dict[str, Any] = {"schema_version": 0, "state_bytes": 0, "row_version": 0, "created_at": None,
                              "updated_at": None, "expires_at": None}
"""What a damaged column reads as (see :data:`teamstore.state.schema.DAMAGED`); a quarantine writes them
back, so the row is whole again."""


def _session(m: Mapping[str, Any] | RowMapping) -> StoredSession:
    """Map a ``ts_sessions`` row to a :class:`StoredSession`."""
    damaged = tuple(name for name in _STAND_INS if m[name] is DAMAGED)
    value = {name: _STAND_INS[name] if name in damaged else m[name] for name in _STAND_INS}
    return checked(StoredSession(
        user_id=m["user_id"],
        session_id=m["session_id"],
        team=m["team"],
        team_version=m["team_version"],
        schema_version=value["schema_version"],
        agentchat_version=m["agentchat_version"],
        fingerprints=read_fingerprints(m["fingerprints"]),
        state=m["state"],
        state_bytes=value["state_bytes"],
        row_version=value["row_version"],
        created_at=utc(value["created_at"]) or now_utc(),
        updated_at=utc(value["updated_at"]) or now_utc(),
        expires_at=utc(value["expires_at"]),
        damaged=damaged,
        defects=(f"the row's {', '.join(damaged)} hold values of the wrong type",) if damaged else (),
    ))


class SqlStateStore:
    """Resume state in any SQLAlchemy async engine on Postgres or SQLite.

    Args:
        engine: An engine the caller owns (and disposes of).
    """

    lease = "row"

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.lease_check = LeaseModeCheck(engine, self.lease)
        # Each lease/load and save/release is ONE statement, atomic on its own: running it in autocommit
        # spares the BEGIN and COMMIT round trips.
        self._single = engine.execution_options(isolation_level="AUTOCOMMIT")
        dialect = engine.dialect.name
        self._insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        self._acquire = self._build_acquire()
        self._save_keep = self._build_save(release=False)
        self._save_release = self._build_save(release=True)

    async def check_lease_mode(self) -> None:
        """Refuse to lease sessions on a database that serves the other kind of lease (see
        :class:`teamstore.state.lease_mode.LeaseModeCheck`).

        Raises:
            ConfigurationError: The database records the other kind of lease.
        """
        await self.lease_check()

    def _build_acquire(self) -> Any:
        # Built once with bind parameters: constructing this statement costs more than running it.
        user: Any = bindparam("p_user_id", type_=sessions.c.user_id.type)
        now: Any = bindparam("p_now", type_=sessions.c.lease_until.type)
        room = statements.room(user, bindparam("p_session_id", type_=sessions.c.session_id.type), now,
                     bindparam("p_max", type_=Integer))
        source = select(
            *[bindparam(f"p_{c.name}", type_=c.type).label(c.name) for c in sessions.c]
        ).where(~held(user), room)
        stmt = self._insert(sessions).from_select([c.name for c in sessions.c], source)
        return stmt.on_conflict_do_update(
            index_elements=[sessions.c.user_id, sessions.c.session_id],
            set_={"lease_owner": stmt.excluded.lease_owner, "lease_until": stmt.excluded.lease_until},
            where=or_(sessions.c.lease_owner.is_(None), sessions.c.lease_until < now),
        ).returning(*sessions.c)

    def _build_save(self, release: bool) -> Any:
        values: dict[str, Any] = {
            name: bindparam(f"v_{name}", type_=sessions.c[name].type)
            for name in ("team", "team_version", "schema_version", "agentchat_version", "fingerprints", "state",
                         "state_bytes", "updated_at")
        }
        values["row_version"] = sessions.c.row_version + 1
        kept = sessions.c.expires_at.between(bindparam("v_expires_at", type_=sessions.c.expires_at.type),
                                             bindparam("v_expires_latest", type_=sessions.c.expires_at.type))
        values["expires_at"] = case((kept, sessions.c.expires_at), else_=bindparam("v_expires_latest"))
        if release:
            values.update(lease_owner=None, lease_until=None)
        return (
            update(sessions)
            .where(sessions.c.user_id == bindparam("k_user"), sessions.c.session_id == bindparam("k_session"))
            .where(sessions.c.row_version == bindparam("k_version"), sessions.c.lease_owner == bindparam("k_owner"))
            .where(~held(bindparam("k_user")))
            .values(values)
            .returning(sessions.c.row_version)
        )

    async def _try_acquire(
        self, key: SessionKey, claim: Claim, owner: str, ttl: float, seconds: float, max_sessions: int | None
    ) -> StoredSession | None:
        """One attempt at the lease (``seconds`` left to wait): the row, or None when refused (another
        worker holds it, an erasure holds the user, or the per-user bound ``max_sessions``)."""
        now = now_utc()
        params: dict[str, Any] = {
            "p_user_id": key.user_id,
            "p_session_id": key.session_id,
            "p_team": claim.team,
            "p_team_version": claim.team_version,
            "p_schema_version": claim.schema_version,
            "p_agentchat_version": claim.agentchat_version,
            "p_fingerprints": dict(claim.fingerprints),
            "p_state": None,
            "p_state_bytes": 0,
            "p_row_version": 0,
            "p_created_at": now,
            "p_updated_at": now,
            "p_expires_at": None,
            "p_lease_owner": owner,
            "p_lease_until": now + timedelta(seconds=ttl),
            "p_now": now,
            "p_max": max_sessions,
        }
        try:
            async with self._single.connect() as conn:
                row = (await conn.execute(self._acquire, params)).first()
        except SQLAlchemyError as exc:
            raise unavailable(exc, "take the session lease") from exc
        return _session(row._mapping) if row is not None else None

    async def _explain_refused_lease(self, key: SessionKey, max_sessions: int | None) -> None:
        """Raise why a lease attempt was refused, if not because another worker holds the session.

        Raises:
            ErasureInProgress: An erasure request holds the user.
            TooManySessions: The session has no live row and its user keeps ``max_sessions`` live ones.
        """
        now = now_utc()
        query = select(held(key.user_id))
        if max_sessions is not None:  # counted only for a session without a live row, as by the lease statement
            mine = exists().where(*self._where(key), live(now))
            query = query.add_columns(case((mine, None), else_=live_count(key.user_id, now)))
        try:
            async with self.engine.connect() as conn:
                answer: Any = (await conn.execute(query)).one()
        except SQLAlchemyError as exc:
            raise unavailable(exc, "check why the session lease was refused") from exc
        fenced, stored = answer[0], answer[1:]
        if fenced:
            raise erasure_open()
        if max_sessions is not None and stored[0] is not None and stored[0] >= max_sessions:
            raise TooManySessions(stored[0], max_sessions)

    async def _is_held(self, user_id: str) -> bool:
        try:
            async with self.engine.connect() as conn:
                return (await conn.execute(select(held(user_id)))).scalar_one() is True
        except SQLAlchemyError as exc:
            raise unavailable(exc, "check the user for an erasure") from exc

    async def _attempt(
        self, key: SessionKey, claim: Claim, owner: str, ttl: float, seconds: float, max_sessions: int | None
    ) -> StoredSession | None:
        """:meth:`_try_acquire`, carried through a cancellation of the caller: the lease statement may
        already have taken the lease (which would then keep the session from everyone for its TTL), and
        a driver call cut short can leave SQLite's connection unreturned, holding the write lock. So the
        attempt finishes, a lease it took is given back, and then the cancellation goes on."""
        attempt = asyncio.ensure_future(self._try_acquire(key, claim, owner, ttl, seconds, max_sessions))
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                taken = await attempt
                if taken is not None:
                    await self.release(key, owner=owner, discard_empty=taken.row_version == 0)
            raise

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
        deadline, pause = time.monotonic() + wait_seconds, _POLL_START
        while True:
            row = await self._attempt(key, claim, owner, lease_ttl, max(deadline - time.monotonic(), 0.0), max_sessions)
            if row is not None:
                return row
            await self._explain_refused_lease(key, max_sessions)
            if time.monotonic() >= deadline:
                raise busy(wait_seconds, "expires on its own")
            await asyncio.sleep(pause)
            pause = min(pause * 2, _POLL_MAX)

    async def save(
        self, key: SessionKey, *, owner: str, expected_version: int, record: SaveRecord, release: bool
    ) -> int:
        """Write ``record`` in one transaction if nothing moved since the load.

        Returns:
            The new row version.

        Raises:
            StaleStateVersion: The row changed, vanished, or its lease was taken over.
            ErasureInProgress: An erasure request holds this user.
            StoreUnavailable: The database failed; the previous state is intact.
        """
        params = {
            "k_user": key.user_id,
            "k_session": key.session_id,
            "k_version": expected_version,
            "k_owner": owner,
            "v_team": record.team,
            "v_team_version": record.team_version,
            "v_schema_version": record.schema_version,
            "v_agentchat_version": record.agentchat_version,
            "v_fingerprints": dict(record.fingerprints),
            "v_state": record.state,
            "v_state_bytes": len(record.state.encode()),
            "v_updated_at": now_utc(),
            "v_expires_at": record.expires_at,
            "v_expires_latest": record.expires_latest,
        }
        stmt = self._save_release if release else self._save_keep
        try:
            async with self._single.connect() as conn:
                new_version = (await conn.execute(stmt, params)).scalar_one_or_none()
        except SQLAlchemyError as exc:
            raise unavailable(exc, "save the session state") from exc
        if new_version is None:
            await self._explain_lost_save(key, expected_version)
        return int(new_version)

    async def _explain_lost_save(self, key: SessionKey, expected_version: int) -> NoReturn:
        if await self._is_held(key.user_id):
            raise erased_in_flight()
        current = await self.get(key)
        found = "gone" if current is None else f"at version {current.row_version}"
        raise StaleStateVersion(
            f"session changed under this worker: loaded version {expected_version}, row is {found} "
            "(another writer saved, or this worker's lease expired and was taken over)",
            hint="reload the session and run again; raise lease_ttl_seconds if runs outlive the lease",
        )

    def _where(self, key: SessionKey) -> tuple[Any, Any]:
        return sessions.c.user_id == key.user_id, sessions.c.session_id == key.session_id

    async def renew(self, key: SessionKey, *, owner: str, lease_ttl: float) -> bool:
        """Move ``lease_until`` to ``lease_ttl`` from now, if ``owner`` still holds the lease."""
        stmt = (
            update(sessions)
            .where(*self._where(key), sessions.c.lease_owner == owner)
            .values(lease_until=now_utc() + timedelta(seconds=lease_ttl))
        )
        try:
            async with self.engine.begin() as conn:
                return bool((await conn.execute(stmt)).rowcount)
        except SQLAlchemyError as exc:
            raise unavailable(exc, "renew the session lease") from exc

    async def release(self, key: SessionKey, *, owner: str, discard_empty: bool) -> None:
        """Give the lease back in one statement; a never-saved row is removed instead."""
        mine = (*self._where(key), sessions.c.lease_owner == owner)
        if discard_empty:
            stmt: Any = delete(sessions).where(*mine, never_saved())
        else:
            stmt = update(sessions).where(*mine).values(lease_owner=None, lease_until=None)
        try:
            async with self.engine.begin() as conn:
                result = await conn.execute(stmt)
                if discard_empty and result.rowcount == 0:
                    await conn.execute(update(sessions).where(*mine).values(lease_owner=None, lease_until=None))
        except SQLAlchemyError as exc:
            raise unavailable(exc, "release the session lease") from exc

    async def quarantine(self, row: StoredSession, *, owner: str, reason: str, detail: str) -> int:
        """Copy the refused row to ``ts_quarantine`` and clear its state, in one transaction; returns its id."""
        record = {
            "user_id": row.user_id,
            "session_id": row.session_id,
            "reason": reason[:64],
            "detail": detail,
            "team": row.team,
            "team_version": row.team_version,
            "schema_version": row.schema_version,
            "agentchat_version": row.agentchat_version,
            "fingerprints": dict(row.fingerprints or {}),
            "state": row.state,
            "state_bytes": row.state_bytes,
            "row_version": row.row_version,
            "quarantined_at": now_utc(),
        }
        # Cleared, and a damaged column written back with what it read as, so the row is whole again.
        repair = {name: getattr(row, name) for name in row.damaged}
        clear = update(sessions).where(*self._where(row.key), *self._owned(owner)).values(
            {**repair, "state": None, "state_bytes": 0})
        try:
            async with self.engine.begin() as conn:
                added = await conn.execute(insert(quarantine).values(record))
                await conn.execute(clear)
        except SQLAlchemyError as exc:
            raise unavailable(exc, "quarantine a refused state") from exc
        assert added.inserted_primary_key is not None
        return int(added.inserted_primary_key[0])

    async def restore_quarantined(
        self, quarantine_id: int, *, ttl: timedelta, replace: bool = False, wait_seconds: float = 0.0
    ) -> Restored:
        """Put a quarantined state back as its session's state; the next load validates it again.

        The session's lease is taken as a run would take it, so a restore never overlaps a run, and
        nothing is lost on the way: with ``replace``, the state the session holds now is quarantined in
        turn (reason ``replaced``) before the old one goes back; the quarantine row is deleted only after
        the save, and before the lease is given back, so two restores of one state restore it once.

        Args:
            quarantine_id: The row to restore (``teamstore sessions quarantine`` lists them).
            ttl: How long the restored state lives without a save.
            replace: Set aside a state the session saved since; without it, such a session is refused.
            wait_seconds: How long to wait for an open session.

        Raises:
            QuarantineNotFound: No quarantined state has this id.
            StaleStateVersion: The session holds a state of its own and ``replace`` is off.
            SessionBusy: The session stayed open past ``wait_seconds``.
            ErasureInProgress: An erasure request holds the user.
            StoreUnavailable: The database failed. The session keeps what it held, or, if only the last
                step failed, holds the restored state while the quarantined copy stays too.
        """
        # An id no row can have (beyond 64 bits, negative, not an int) is simply not found: the drivers
        # would raise their own overflow errors on it.
        valid = isinstance(quarantine_id, int) and not isinstance(quarantine_id, bool) and 0 < quarantine_id < 2**63
        rows = await self._fetch(select(quarantine).where(quarantine.c.id == quarantine_id)) if valid else []
        if not rows:
            raise QuarantineNotFound(
                f"no quarantined state has id {quarantine_id}",
                hint="'teamstore sessions quarantine' lists them; a restored or erased one is gone",
            )
        q = rows[0]._mapping
        key = SessionKey(q["user_id"], q["session_id"])
        fingerprints = dict(q["fingerprints"] or {})
        claim = Claim(q["team"], q["team_version"], q["schema_version"], q["agentchat_version"], fingerprints)
        async with self._held_briefly(key, claim, "restore", wait_seconds) as (row, owner):
            if not await self._fetch(select(quarantine.c.id).where(quarantine.c.id == quarantine_id)):
                raise QuarantineNotFound(f"quarantined state {quarantine_id} was restored or erased meanwhile")
            replaced_by = None
            if row.state is not None:
                if not replace:
                    raise StaleStateVersion(
                        f"session holds a state saved at version {row.row_version}, after this one was set aside",
                        hint="pass --replace (replace=True) to quarantine that state and restore this one",
                    )
                replaced_by = await self.quarantine(
                    row, owner=owner, reason="replaced", detail=f"set aside to restore quarantined state {quarantine_id}"
                )
            now = now_utc()
            record = SaveRecord(q["team"], q["team_version"], q["schema_version"], q["agentchat_version"],
                                fingerprints, q["state"], now + ttl)
            await self.save(key, owner=owner, expected_version=row.row_version, record=record, release=False)
            # Still under the lease, so a second restore waiting on it finds the row gone, not restores it again.
            try:
                async with self.engine.begin() as conn:
                    await conn.execute(delete(quarantine).where(quarantine.c.id == quarantine_id))
            except SQLAlchemyError as exc:  # restored all the same; the quarantined copy stays behind
                raise unavailable(exc, "remove the restored row from quarantine") from exc
            await self.release(key, owner=owner, discard_empty=False)
        restored = await self.get(key)
        assert restored is not None
        return Restored(restored, replaced_by)

    async def delete_session(self, key: SessionKey, *, wait_seconds: float = 0.0) -> bool:
        """Delete one session's stored state and its quarantined copies, under the session's lease.

        What a user's "delete this conversation" needs; transcripts and the usage ledger are audit data
        with their own retention (erasing a user removes those too: ``teamstore erase``).

        Returns:
            Whether the session had a row.

        Raises:
            SessionBusy: The session stayed open past ``wait_seconds``.
            ErasureInProgress: An erasure request holds the user (it removes the session anyway).
            StoreUnavailable: The database failed; nothing was deleted.
            InvalidIdentifier: An id no session can have.
        """
        check_key(key)
        async with self._held_briefly(key, Claim("", "", 0, ""), "delete", wait_seconds) as (row, owner):
            try:
                async with self.engine.begin() as conn:
                    await conn.execute(delete(quarantine).where(quarantine.c.user_id == key.user_id,
                                                                quarantine.c.session_id == key.session_id))
                    await conn.execute(delete(sessions).where(*self._where(key), *self._owned(owner)))
            except SQLAlchemyError as exc:
                raise unavailable(exc, "delete the session") from exc
            await self.release(key, owner=owner, discard_empty=False)
        return row.row_version > 0

    @asynccontextmanager
    async def _held_briefly(
        self, key: SessionKey, claim: Claim, purpose: str, wait_seconds: float
    ) -> AsyncIterator[tuple[StoredSession, str]]:
        """The session's lease for a few statements of maintenance, as a run takes it; given back if they fail
        (on success the body releases it, by its save or explicitly)."""
        owner = f"{purpose}:{uuid.uuid4().hex[:12]}"
        row = await self.acquire(key, claim, owner=owner, lease_ttl=_RESTORE_LEASE_SECONDS, wait_seconds=wait_seconds)
        try:
            yield row, owner
        except BaseException:
            await self.release(key, owner=owner, discard_empty=row.row_version == 0)
            raise

    def _owned(self, owner: str) -> list[Any]:
        """Conditions that make a statement touch the row only while ``owner`` holds its lease."""
        return [sessions.c.lease_owner == owner]

    def _sweepable(self, now: datetime) -> Any:
        """Which rows a sweep may delete: expired, or made for a new session by a worker that never saved
        it (it crashed), and in both cases not leased to a live worker."""
        return and_(or_(sessions.c.expires_at < now, never_saved()),
                    or_(sessions.c.lease_owner.is_(None), sessions.c.lease_until < now))

    def _sweep_recheck(self, now: datetime) -> Any:
        """What a sweep checks again on each row it deletes: here, the whole condition (a lease lives in
        the row, so a row leased after the sweep read it must be kept)."""
        return self._sweepable(now)

    async def aclose(self) -> None:
        """Release what the store opened itself (nothing here; the engine is the caller's)."""

    async def _fetch(self, stmt: Any) -> list[Row[Any]]:
        try:
            async with self.engine.connect() as conn:
                return list((await conn.execute(stmt)).all())
        except SQLAlchemyError as exc:
            raise unavailable(exc, "read sessions") from exc

    async def get(self, key: SessionKey) -> StoredSession | None:
        """Read one row without the lease.

        Raises:
            InvalidIdentifier: An id no session can have (empty, too long, a control character, a lone
                surrogate, which no driver can send).
        """
        check_key(key)
        rows = await self._fetch(select(sessions).where(*self._where(key)))
        return _session(rows[0]._mapping) if rows else None

    async def list_sessions(self, user_id: str | None = None, limit: int = 100) -> list[StoredSession]:
        """Saved rows, most recently updated first (``user_id`` is checked as :meth:`get` checks it)."""
        stmt = select(sessions).where(sessions.c.state.is_not(None))
        if user_id is not None:
            check_id("user_id", user_id)
            stmt = stmt.where(sessions.c.user_id == user_id)
        rows = await self._fetch(stmt.order_by(sessions.c.updated_at.desc()).limit(limit))
        return [_session(r._mapping) for r in rows]

    async def live_sessions(self, user_id: str) -> int:
        """How many unexpired stored sessions ``user_id`` keeps: what the per-user bound counts
        (``user_id`` is checked as :meth:`get` checks it)."""
        check_id("user_id", user_id)
        rows = await self._fetch(select(live_count(user_id, now_utc())))
        return int(rows[0][0])

    async def list_quarantined(self, user_id: str | None = None, limit: int = 100) -> list[QuarantinedRow]:
        """Quarantined rows, newest first (``user_id`` is checked as :meth:`get` checks it)."""
        stmt = select(quarantine)
        if user_id is not None:
            check_id("user_id", user_id)
            stmt = stmt.where(quarantine.c.user_id == user_id)
        rows = await self._fetch(stmt.order_by(quarantine.c.id.desc()).limit(limit))
        return [_quarantined(r._mapping) for r in rows]

    async def get_quarantined(self, quarantine_id: int) -> QuarantinedRow | None:
        """One quarantined row, or ``None`` if no row has this id."""
        if not (isinstance(quarantine_id, int) and not isinstance(quarantine_id, bool) and 0 < quarantine_id < 2**63):
            return None  # no row can have it; the drivers would raise their own overflow errors on it
        rows = await self._fetch(select(quarantine).where(quarantine.c.id == quarantine_id))
        return _quarantined(rows[0]._mapping) if rows else None

    async def sweep_expired(self, *, batch_size: int = 500) -> int:
        """Delete expired, unleased rows ``batch_size`` at a time; returns the number deleted."""
        await self.check_lease_mode()
        total = 0
        while True:
            count = await self._sweep_batch(batch_size)
            total += count
            if count < batch_size:
                return total

    async def _sweep_batch(self, batch_size: int) -> int:
        now = now_utc()
        victims = select(sessions.c.user_id, sessions.c.session_id).where(self._sweepable(now)).limit(batch_size)
        # Checked again on the row itself: under READ COMMITTED, Postgres re-evaluates only the DELETE's own
        # conditions on a row a worker leased or saved since the subquery read it, never the subquery's.
        stmt = delete(sessions).where(tuple_(sessions.c.user_id, sessions.c.session_id).in_(victims),
                                      self._sweep_recheck(now))
        try:
            async with self.engine.begin() as conn:
                return int((await conn.execute(stmt)).rowcount or 0)
        except SQLAlchemyError as exc:
            raise unavailable(exc, "sweep expired sessions") from exc


def _quarantined(m: Mapping[str, Any] | RowMapping) -> QuarantinedRow:
    return QuarantinedRow(
        id=m["id"],
        user_id=m["user_id"],
        session_id=m["session_id"],
        reason=m["reason"],
        detail=m["detail"],
        team=m["team"],
        team_version=m["team_version"],
        state_bytes=m["state_bytes"],
        quarantined_at=utc(m["quarantined_at"]) or now_utc(),
    )
