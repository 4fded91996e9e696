"""What every state backend does the same way, off the hot path: reads and listings, quarantine and
restore, deleting a session, sweeping expired rows, and saying why a lease or a save was refused.

    from teamstore.state.admin import SessionAdmin

    admin = SessionAdmin(engine, ROW_LEASES, store, store.lease_check)   # each backend holds one
    await admin.list_sessions("alice")

It runs SQLAlchemy Core statements on the engine (both databases); what differs between the kinds of
lease comes in as :class:`teamstore.state.statements.LeaseRules`. Leases and expiries are compared on
the clock they were written on (:func:`teamstore.db.clock.shared_now`: on Postgres, the server's). A
restore or a delete takes the session's lease through the store that holds this admin, as a run takes it,
so neither ever overlaps a run. The backends expose these methods through
:class:`teamstore.state.admin_methods.AdminMethods`.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, timedelta
from typing import Any, NoReturn

from sqlalchemy import Row, RowMapping, case, delete, exists, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.clock import now_utc, shared_now, shared_now_as, utc
from teamstore.db.fence import held
from teamstore.errors import (
    ErasureInProgress,
    QuarantineNotFound,
    SessionBusy,
    StaleStateVersion,
    TooManySessions,
)
from teamstore.ids import check_id
from teamstore.state import statements as sql
from teamstore.state.base import (
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
from teamstore.state.failures import check_key, erased_in_flight, erasure_open, kept_for_restore, unavailable
from teamstore.state.lease_mode import LeaseModeCheck
from teamstore.state.listing import cursor_of, listing, position
from teamstore.state.rows import quarantine_source, quarantined, stored
from teamstore.state.schema import quarantine, sessions

_BRIEF_LEASE_SECONDS = 60.0  # a restore or a delete holds the session for a few statements (held_briefly)


def _valid_quarantine_id(quarantine_id: object) -> bool:
    # An id no row can have (beyond 64 bits, negative, not an int) is simply not found: the drivers would
    # raise their own overflow errors on it.
    return isinstance(quarantine_id, int) and not isinstance(quarantine_id, bool) and 0 < quarantine_id < 2**63


class SessionAdmin:
    """The maintenance half of a state store, shared by every backend.

    Args:
        engine: The state database (the caller's).
        rules: What the statements say for the store's kind of lease.
        store: The store this admin belongs to: restores and deletes take the session's lease through it.
        check: The store's lease-mode check (a sweep asks it first).
    """

    def __init__(self, engine: AsyncEngine, rules: sql.LeaseRules, store: StateStore, check: LeaseModeCheck) -> None:
        self.engine, self.rules, self.store, self.check = engine, rules, store, check

    def _now(self) -> Any:
        """The time to compare leases and expiries at, in a statement: the server's ``now()`` on Postgres."""
        return shared_now(self.engine.dialect.name)

    async def _fetch(self, stmt: Any, action: str = "read sessions") -> list[Row[Any]]:
        try:
            async with self.engine.connect() as conn:
                return list((await conn.execute(stmt)).all())
        except SQLAlchemyError as exc:
            raise unavailable(exc, action) from exc

    async def get(self, key: SessionKey) -> StoredSession | None:
        """Read one row without the lease (see :meth:`teamstore.state.base.StateStore.get`)."""
        check_key(key)
        rows = await self._fetch(select(*sql.read_columns(self._now())).where(*sql.is_key(key.user_id, key.session_id)))
        return stored(key.user_id, key.session_id, rows[0]) if rows else None

    async def lease_ends(self, key: SessionKey) -> str:
        """How the row lease another worker holds on ``key`` ends, for :class:`SessionBusy`: a killed worker's
        lease outlives it, so the error says when it runs out (a live holder renews it)."""
        rows = await self._fetch(select(sessions.c.lease_until).where(
            *sql.is_key(key.user_id, key.session_id), sessions.c.lease_owner.is_not(None)), "read the session's lease")
        until = rows[0][0] if rows else None
        if until is None:
            return "expires on its own"
        if until.tzinfo is None:  # SQLite keeps the UTC time it was given, without its zone
            until = until.replace(tzinfo=UTC)
        return (f"expires on its own, this one's at {until.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC unless its holder "
                "renews it (TEAMSTORE_LEASE_TTL_SECONDS after each renewal)")

    async def list_sessions(self, user_id: str | None = None, limit: int = 100) -> list[StoredSession]:
        """Saved rows, most recently updated first (``user_id`` is checked as :meth:`get` checks it): a state, an
        interrupted run's checkpoint, or neither any more in a row the per-user bound counts (emptied while its
        session is open, or by a worker that died before its release removed it)."""
        return (await self.list_sessions_page(user_id, limit)).sessions

    async def list_sessions_page(
        self, user_id: str | None = None, limit: int = 100, *, after: str | None = None
    ) -> SessionPage:
        """:meth:`list_sessions` a page at a time, after the row whose cursor is ``after``
        (:mod:`teamstore.state.listing`). One row more than the page is read, to tell whether more follow.

        Raises:
            InvalidCursor: ``after`` is not a cursor a listing of this kind of database gave.
            InvalidIdentifier: ``user_id`` is an id no session can have.
            StoreUnavailable: The database failed.
        """
        if user_id is not None:
            check_id("user_id", user_id)
        place = None if after is None else position(after, self.engine.dialect.name)
        rows = await self._fetch(listing(self._now(), user_id=user_id, after=place, limit=limit + 1))
        shown = rows[:limit]
        cursors = [cursor_of(r.listed_at, r.user_id, r.session_id) for r in shown]
        return SessionPage([stored(r.user_id, r.session_id, tuple(r)[2:-1]) for r in shown], cursors,
                           cursors[-1] if len(rows) > limit else None)

    async def live_sessions(self, user_id: str) -> int:
        """How many unexpired stored sessions ``user_id`` keeps: what the per-user bound counts
        (``user_id`` is checked as :meth:`get` checks it)."""
        check_id("user_id", user_id)
        rows = await self._fetch(select(sql.live_count(user_id, self._now())))
        return int(rows[0][0])

    async def list_quarantined(self, user_id: str | None = None, limit: int = 100) -> list[QuarantinedRow]:
        """Quarantined rows, newest first (``user_id`` is checked as :meth:`get` checks it)."""
        stmt = select(quarantine)
        if user_id is not None:
            check_id("user_id", user_id)
            stmt = stmt.where(quarantine.c.user_id == user_id)
        rows = await self._fetch(stmt.order_by(quarantine.c.id.desc()).limit(limit))
        return [quarantined(r._mapping) for r in rows]

    async def get_quarantined(self, quarantine_id: int) -> QuarantinedRow | None:
        """One quarantined row, or ``None`` if no row has this id."""
        if not _valid_quarantine_id(quarantine_id):
            return None
        rows = await self._fetch(select(quarantine).where(quarantine.c.id == quarantine_id))
        return quarantined(rows[0]._mapping) if rows else None

    async def quarantine(
        self, row: StoredSession, *, owner: str, reason: str, detail: str, checkpoint_only: bool = False
    ) -> int:
        """Copy the refused row to ``ts_quarantine`` and clear its state and checkpoint, in one transaction;
        returns its id. With ``checkpoint_only``, the row's checkpoint alone is set aside and cleared.

        The copy is written only while the session's row is still there (with row leases, still ``owner``'s)
        and no erasure holds the user, checked in the insert's own statement: a worker that hung past its lease
        while the user was erased sets nothing of theirs aside when it wakes.

        Raises:
            ErasureInProgress: An erasure holds the user: nothing was set aside.
            StaleStateVersion: The row is gone, or (row leases) another worker took it over: nothing was set
                aside.
            StoreUnavailable: The database failed.
        """
        key = SessionKey(row.user_id, row.session_id)
        state = None if checkpoint_only else row.state
        kept = exists().where(*sql.is_key(key.user_id, key.session_id), *self.rules.owned(owner))
        stmt = insert(quarantine).from_select(*quarantine_source(row, state, checkpoint_only, reason, detail,
                                                                  self._now(), kept)).returning(quarantine.c.id)
        cleared: dict[str, Any] = {"checkpoint": None, "checkpoint_bytes": 0}
        if not checkpoint_only:
            # A damaged column is written back with what it read as, so the row is whole again.
            cleared.update({name: getattr(row, name) for name in row.damaged}, state=None, state_bytes=0)
        clear = update(sessions).where(*sql.is_key(key.user_id, key.session_id), *self.rules.owned(owner)).values(
            cleared)
        try:
            async with self.engine.begin() as conn:
                added = (await conn.execute(stmt)).scalar()
                if added is not None:
                    await conn.execute(clear)
        except SQLAlchemyError as exc:
            raise unavailable(exc, "quarantine a refused state") from exc
        if added is None:
            await self._explain_lost_quarantine(key)
        return int(added)

    async def _explain_lost_quarantine(self, key: SessionKey) -> NoReturn:
        """Raise why a quarantine set nothing aside.

        Raises:
            ErasureInProgress: An erasure request holds the user.
            StaleStateVersion: The row is gone or another worker holds it.
        """
        if (await self._fetch(select(held(key.user_id)), "check the user for an erasure"))[0][0]:
            raise ErasureInProgress(
                "an erasure request is open for this user: the refused state was not set aside",
                hint="nothing to fix: the erasure removes the session with the rest of the user's data",
            )
        raise StaleStateVersion(
            "the session's row is gone or no longer this worker's (its lease was lost: an erasure, a delete or "
            "another worker took the session): the refused state was not set aside",
            hint="open the session again; raise lease_ttl_seconds if workers pause longer than it",
        )

    async def restore_quarantined(
        self, quarantine_id: int, *, ttl: timedelta, replace: bool = False, wait_seconds: float = 0.0,
        retention: timedelta | None = None, ending: Ending | None = None,
    ) -> Restored:
        """Put a quarantined state back as its session's state; the next load validates it again.

        The session's lease is taken as a run would take it, so a restore never overlaps a run, and
        nothing is lost on the way. What the session holds now (a state it saved since, or an interrupted
        run's checkpoint) is kept unless ``replace`` is given; with it, that is quarantined in turn (reason
        ``replaced``), the interrupted run handed to ``ending`` first, as a delete hands it. The state goes back
        alone: a run's checkpoint beside it stays in the quarantine row (that run ended as it was set aside).
        The row is deleted (or its state cleared) only after the save, and before the lease is given back, so
        two restores of one state restore it once.

        Args:
            quarantine_id: The row to restore (``teamstore sessions quarantine`` lists them).
            ttl: How long the restored state lives without a save.
            replace: Set aside what the session holds now; without it, a session holding a state or a
                checkpoint is refused.
            wait_seconds: How long to wait for an open session.
            retention: How long the quarantine keeps a row: one set aside longer ago is due for deletion
                by the next sweep, and is not restored.
            ending: Handed the session's row, under the lease, if ``replace`` sets aside an interrupted run's
                checkpoint (the runtime records the run as ended).

        Raises:
            QuarantineNotFound: No quarantined state has this id, or it is past ``retention``.
            StaleStateVersion: The session holds a state or an interrupted run's checkpoint of its own and
                ``replace`` is off.
            SessionBusy: The session stayed open past ``wait_seconds``.
            ErasureInProgress: An erasure request holds the user.
            StoreUnavailable: The database failed. The session keeps what it held, or, if a later step
                failed, holds the restored state while the quarantined copy stays too.
        """
        q = await self._quarantined_state(quarantine_id)
        key = SessionKey(q["user_id"], q["session_id"])
        saved_as = (q["team"], q["team_version"], q["schema_version"], q["agentchat_version"],
                    dict(q["fingerprints"] or {}))
        async with self.held_briefly(key, Claim(*saved_as), "restore", wait_seconds) as (row, owner):
            await self._still_restorable(quarantine_id, retention)
            replaced_by = await self._set_aside_for_restore(row, owner, quarantine_id, replace, ending)
            # On this host's clock, as every save's: the statement writes it as a length from the database's now.
            expires_at = now_utc() + ttl
            await self.store.save(key, owner=owner, expected_version=row.row_version, release=False,
                                  record=SaveRecord(*saved_as, q["state"], expires_at))
            # Still under the lease, so a second restore waiting on it finds the state gone, not restores it again.
            await self._take_out_of_quarantine(q)
            await self.store.release(key, owner=owner, discard_empty=False)
        restored = await self.get(key)
        assert restored is not None
        return Restored(restored, replaced_by, checkpoint_kept=q["checkpoint"] is not None)

    async def _take_out_of_quarantine(self, q: RowMapping) -> None:
        """Delete the restored state's quarantine row ``q``; one holding a checkpoint (of a run ended as it was
        set aside: recorded then, and not continued) is kept, its state cleared, until the retention removes it.

        Raises:
            StoreUnavailable: The database failed: the state is restored, and its quarantined copy stays too.
        """
        by_id = quarantine.c.id == q["id"]
        stmt = delete(quarantine).where(by_id) if q["checkpoint"] is None else update(quarantine).where(by_id).values(
            state=None, state_bytes=0, detail=f"{q['detail']}; its state was restored, its run's checkpoint kept")
        try:
            async with self.engine.begin() as conn:
                await conn.execute(stmt)
        except SQLAlchemyError as exc:  # restored all the same; the quarantined copy stays behind
            raise unavailable(exc, "remove the restored state from quarantine") from exc

    async def _quarantined_state(self, quarantine_id: int) -> RowMapping:
        """The quarantine row ``quarantine_id``, if it holds a state to restore.

        Raises:
            QuarantineNotFound: No row has this id, or it holds no state (only a checkpoint).
        """
        by_id = quarantine.c.id == quarantine_id
        rows = await self._fetch(select(quarantine).where(by_id)) if _valid_quarantine_id(quarantine_id) else []
        if not rows:
            raise QuarantineNotFound(
                f"no quarantined state has id {quarantine_id}",
                hint="'teamstore sessions quarantine' lists them; a restored or erased one is gone",
            )
        q = rows[0]._mapping
        if q["state"] is None:
            raise QuarantineNotFound(
                f"quarantined row {quarantine_id} holds no state to restore, only an interrupted run's checkpoint "
                "(its state was restored already, or the checkpoint was set aside alone): that run ended when it "
                "was set aside, and its checkpoint is not put back",
                hint="leave it to the quarantine's retention (TEAMSTORE_QUARANTINE_RETENTION_DAYS), which "
                "deletes it; 'teamstore sessions quarantine' lists the states that can be restored",
            )
        return q

    async def _still_restorable(self, quarantine_id: int, retention: timedelta | None) -> None:
        """Check, under the session's lease, that the quarantine row is still there and, on the database's
        clock (on which it was stamped, and the sweep judges it), within ``retention``.

        Raises:
            QuarantineNotFound: It was restored or erased meanwhile, or it is due for deletion.
        """
        now = shared_now_as(self.engine.dialect.name, quarantine.c.quarantined_at.type).label("now")
        # Its state, not only the row: a row that keeps a checkpoint stays once its state was restored.
        rows = await self._fetch(select(quarantine.c.quarantined_at, now).where(
            quarantine.c.id == quarantine_id, quarantine.c.state.is_not(None)), "read the quarantined state")
        if not rows:
            raise QuarantineNotFound(f"quarantined state {quarantine_id} was restored or erased meanwhile")
        found = rows[0]._mapping
        set_aside, at = utc(found["quarantined_at"]), utc(found["now"])
        assert set_aside is not None and at is not None
        if retention is not None and set_aside < at - retention:
            raise QuarantineNotFound(
                f"quarantined state {quarantine_id} was set aside on {set_aside:%Y-%m-%d %H:%M} UTC, longer ago "
                f"than the quarantine keeps a state ({retention.days} days): it is due for deletion by the next "
                "sweep and is not restored",
                hint="raise TEAMSTORE_QUARANTINE_RETENTION_DAYS above its age before the next "
                "'teamstore retention sweep' to keep it, then restore it again",
            )

    async def _set_aside_for_restore(
        self, row: StoredSession, owner: str, quarantine_id: int, replace: bool, ending: Ending | None
    ) -> int | None:
        """Quarantine what the session's row holds (a state, an interrupted run's checkpoint) before a restore
        saves over it, the run handed to ``ending`` first; ``None`` if it holds neither.

        Raises:
            StaleStateVersion: It holds something and ``replace`` is off: nothing was set aside.
        """
        if row.state is None and row.checkpoint is None:
            return None
        if not replace:
            raise kept_for_restore(row)
        if ending is not None and row.checkpoint is not None:  # the restore's save would clear it: the run ends
            await ending(row)
        return await self.store.quarantine(
            row, owner=owner, reason="replaced", detail=f"set aside to restore quarantined state {quarantine_id}"
        )

    async def delete_session(
        self, key: SessionKey, *, wait_seconds: float = 0.0, ending: Ending | None = None
    ) -> bool:
        """Delete one session's stored state and its quarantined copies, under the session's lease.

        What a user's "delete this conversation" needs; transcripts and the usage ledger are audit data
        with their own retention (erasing a user removes those too: ``teamstore erase``).

        Args:
            key: The session.
            wait_seconds: How long to wait for a worker that holds the session.
            ending: Handed the row first, under the lease, if it holds an interrupted run's checkpoint.

        Returns:
            Whether the session had a row.

        Raises:
            SessionBusy: The session stayed open past ``wait_seconds``.
            ErasureInProgress: An erasure request holds the user (it removes the session anyway).
            StoreUnavailable: The database failed; nothing was deleted.
            InvalidIdentifier: An id no session can have.
        """
        check_key(key)
        async with self.held_briefly(key, Claim("", "", 0, ""), "delete", wait_seconds) as (row, owner):
            if ending is not None and row.checkpoint is not None:
                await ending(row)
            await self._delete(key, owner, quarantined=True)
        return row.row_version > 0

    async def _delete(self, key: SessionKey, owner: str, *, quarantined: bool) -> None:
        """Delete the session's row (and, ``quarantined``, its quarantined copies) under ``owner``'s lease,
        and give the lease back."""
        try:
            async with self.engine.begin() as conn:
                if quarantined:
                    await conn.execute(delete(quarantine).where(quarantine.c.user_id == key.user_id,
                                                                quarantine.c.session_id == key.session_id))
                await conn.execute(delete(sessions).where(*sql.is_key(key.user_id, key.session_id),
                                                          *self.rules.owned(owner)))
        except SQLAlchemyError as exc:
            raise unavailable(exc, "delete the session") from exc
        await self.store.release(key, owner=owner, discard_empty=False)

    @asynccontextmanager
    async def held_briefly(
        self, key: SessionKey, claim: Claim, purpose: str, wait_seconds: float
    ) -> AsyncIterator[tuple[StoredSession, str]]:
        """The session's lease for a few statements of maintenance, as a run takes it; given back if they fail
        (on success the body releases it, by its save or explicitly)."""
        owner = f"{purpose}:{uuid.uuid4().hex[:12]}"
        row = await self.store.acquire(key, claim, owner=owner, lease_ttl=_BRIEF_LEASE_SECONDS,
                                       wait_seconds=wait_seconds)
        try:
            yield row, owner
        except BaseException:
            await self.store.release(key, owner=owner, discard_empty=row.is_new)
            raise

    async def sweep_expired(self, *, batch_size: int = 500, ending: Ending | None = None) -> int:
        """Delete expired, unleased rows ``batch_size`` at a time; returns the number deleted. With ``ending``,
        an expired row holding a checkpoint is taken under its lease, handed to ``ending``, then deleted (one a
        worker holds is left to the next sweep)."""
        await self.check()
        total = 0 if ending is None else await self._sweep_checkpoints(ending, batch_size)
        while True:
            stmt = sql.sweep_batch(self.rules, self._now(), batch_size, keep_checkpoints=ending is not None)
            try:
                async with self.engine.begin() as conn:
                    count = int((await conn.execute(stmt)).rowcount or 0)
            except SQLAlchemyError as exc:
                raise unavailable(exc, "sweep expired sessions") from exc
            total += count
            if count < batch_size:
                return total

    async def _sweep_checkpoints(self, ending: Ending, batch_size: int) -> int:
        """Delete the expired rows that hold a checkpoint one by one, each handed to ``ending`` first."""
        deleted, after = 0, None
        while True:
            rows = await self._fetch(sql.expired_checkpoints(self._now(), after, batch_size), "sweep expired sessions")
            keys = [SessionKey(r.user_id, r.session_id) for r in rows]
            for key in keys:
                deleted += await self._sweep_one(key, ending)
            if len(keys) < batch_size:
                return deleted
            after = (keys[-1].user_id, keys[-1].session_id)

    async def _sweep_one(self, key: SessionKey, ending: Ending) -> int:
        try:
            async with self.held_briefly(key, Claim("", "", 0, ""), "sweep", 0.0) as (row, owner):
                if row.checkpoint is None or not await self._expired(key):
                    # Saved, continued or deleted since it was listed: not this sweep's any more.
                    await self.store.release(key, owner=owner, discard_empty=row.is_new)
                    return 0
                await ending(row)
                await self._delete(key, owner, quarantined=False)
        except (SessionBusy, ErasureInProgress):  # a worker opened it meanwhile (the next sweep looks again), or
            return 0                             # an erasure holds the user (it removes the row itself)
        return 1

    async def _expired(self, key: SessionKey) -> bool:
        """Whether the session's row is past its expiry now."""
        query = select(sessions.c.expires_at < self._now()).where(*sql.is_key(key.user_id, key.session_id))
        rows = await self._fetch(query, "sweep expired sessions")
        return bool(rows and rows[0][0])

    async def explain_refused_lease(self, key: SessionKey, max_sessions: int | None) -> None:
        """Raise why a row lease was refused, if not because another worker holds the session.

        Raises:
            ErasureInProgress: An erasure request holds the user.
            TooManySessions: The session has no live row and its user keeps ``max_sessions`` live ones.
        """
        now = self._now()
        query = select(held(key.user_id))
        if max_sessions is not None:  # counted only for a session without a live row, as by the lease statement
            mine = exists().where(*sql.is_key(key.user_id, key.session_id), sql.live(now))
            query = query.add_columns(case((mine, None), else_=sql.live_count(key.user_id, now)))
        answer = tuple((await self._fetch(query, "check why the session lease was refused"))[0])
        if answer[0]:
            raise erasure_open()
        if max_sessions is not None and answer[1] is not None and answer[1] >= max_sessions:
            raise TooManySessions(answer[1], max_sessions)

    async def explain_lost_save(self, key: SessionKey, expected_version: int) -> NoReturn:
        """Raise why a save matched no row.

        Raises:
            ErasureInProgress: An erasure request opened for the user while the run was in flight.
            StaleStateVersion: The row changed or vanished, or the lease was taken over.
        """
        if (await self._fetch(select(held(key.user_id)), "check the user for an erasure"))[0][0]:
            raise erased_in_flight()
        current = await self.get(key)
        found = "gone" if current is None else f"at version {current.row_version}"
        raise StaleStateVersion(
            f"session changed under this worker: loaded version {expected_version}, row is {found} "
            "(another writer saved, or this worker's lease expired and was taken over)",
            hint="reload the session and run again; raise lease_ttl_seconds if runs outlive the lease",
        )

