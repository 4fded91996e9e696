"""How a database's sessions are leased (``lock`` or ``row``), recorded in the database itself.

    from teamstore.state.lease_mode import lease_mode, set_lease_mode

    await lease_mode(engine)                 # "lock"
    await set_lease_mode(engine, "row")      # refused while a session is open; returns "lock"

The two kinds of lease do not see each other, so the database records which one it serves
(``ts_store_settings``, migration 0005): every store checks it (:class:`LeaseModeCheck`) and refuses to
lease sessions on a database that serves the other kind. The same statement reads the database's migration,
so a process left running while a newer release migrates the database refuses too.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, cast, delete, func, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.clock import now_utc, shared_now
from teamstore.db.engine import refused_statement
from teamstore.db.migrate import VERSION_TABLE, require_current, require_revision
from teamstore.errors import ConfigurationError, SessionBusy
from teamstore.state.failures import unavailable
from teamstore.state.schema import sessions, store_settings
from teamstore.state.statements import PG_LOCKS, as_lock_id, held_advisory_locks, never_saved

LEASE_MODES = ("lock", "row")
_LEASE_SETTING = "session_lease"
CHECK_SECONDS = 30.0
"""How often a running process reads the database's lease mode and migration again, by default
(``TEAMSTORE_DB_CHECK_SECONDS``)."""


def known(mode: str) -> str:
    """``mode``, if it is a kind of lease.

    Raises:
        ConfigurationError: It is neither ``lock`` nor ``row``.
    """
    if mode not in LEASE_MODES:
        raise ConfigurationError(f"session lease {mode!r} is not one of {', '.join(LEASE_MODES)}",
                                 hint="use 'lock' (an advisory lock, Postgres) or 'row' (a lease in the row)")
    return mode


async def recorded_mode(conn: Any) -> str:
    """The lease mode the database records, read on ``conn`` (inside the caller's transaction).

    Raises:
        ConfigurationError: Nothing is recorded (run ``teamstore db upgrade``).
    """
    value = (await conn.execute(
        select(store_settings.c.value).where(store_settings.c.name == _LEASE_SETTING)
    )).scalar_one_or_none()
    return _known_mode(value)


def _known_mode(value: Any) -> str:
    if value is None:
        raise ConfigurationError("the database records no session lease mode", hint="run 'teamstore db upgrade'")
    return str(value)


async def lease_mode(engine: AsyncEngine) -> str:
    """How the database's sessions are leased, as recorded by migration 0005 or :func:`set_lease_mode`.

    Raises:
        StoreUnavailable: The database failed.
        ConfigurationError: Nothing is recorded (the schema is not at head: run ``teamstore db upgrade``).
    """
    try:
        async with engine.connect() as conn:
            return await recorded_mode(conn)
    except SQLAlchemyError as exc:
        raise unavailable(exc, "read the session lease mode") from exc


class LeaseModeCheck:
    """A store's check that the database serves its kind of lease and is at this code's migration, asked at
    most once every ``recheck_seconds``: a worker left running across ``teamstore db lease-mode``, or across a
    newer release's ``teamstore db upgrade`` (or a restore from an older backup), starts refusing within that
    time. Both are read in one statement; between two reads a check costs a clock reading. A check that
    refused is not remembered: each one after it reads again, so the worker takes sessions again once the
    database is back at its migration.

    Args:
        engine: The state database.
        lease: The store's kind of lease.
        recheck_seconds: How long a passed check holds (``TEAMSTORE_DB_CHECK_SECONDS``); 0 reads every time.
    """

    def __init__(self, engine: AsyncEngine, lease: str, recheck_seconds: float = CHECK_SECONDS) -> None:
        self.engine, self.lease, self.recheck_seconds = engine, lease, recheck_seconds
        self._checked_at: float | None = None

    async def __call__(self) -> None:
        """Refuse to lease sessions on a database that serves the other kind of lease, or that is at another
        migration than this code's newest.

        Raises:
            SchemaNotReady: The database is at another migration (a newer release migrated it, or it was
                restored from an older backup).
            ConfigurationError: The database records the other kind of lease.
            StoreUnavailable: The database failed.
        """
        now = time.monotonic()
        if self._checked_at is not None and now - self._checked_at < self.recheck_seconds:
            return
        revisions, recorded = await self._read()
        require_revision(revisions)  # first: a migrated database may record the lease mode otherwise
        if _known_mode(recorded) != self.lease:
            raise ConfigurationError(
                f"this database's sessions are leased by {recorded!r}, and this process is set to "
                f"{self.lease!r}: the two kinds of worker would not see each other's leases",
                hint=f"set TEAMSTORE_SESSION_LEASE={recorded}, or stop every worker and run "
                f"'teamstore db lease-mode {self.lease}'",
            )
        self._checked_at = now

    async def _read(self) -> tuple[list[str], str | None]:
        """The database's migration (the rows of Alembic's table) and its lease mode, in one statement."""
        query = select(VERSION_TABLE.c.version_num, store_settings.c.value).select_from(
            VERSION_TABLE.outerjoin(store_settings, store_settings.c.name == _LEASE_SETTING))
        try:
            async with self.engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        except SQLAlchemyError as exc:
            if refused_statement(exc):  # a table this code reads is gone or not there yet: say which migration
                await require_current(self.engine)
            raise unavailable(exc, "check the database's migration and session lease mode") from exc
        return [str(row[0]) for row in rows], (rows[0][1] if rows else None)


def _open_locks(user_id: str | None) -> Any:
    """Sessions open under advisory-lock leases in this database, as the server's lock table shows them.
    A session's lock is keyed (hashtext(user), hashtext(session)): ``classid`` is the user's hash, so a
    user whose hash collides counts too (a rare, safe overcount)."""
    query = select(func.count()).select_from(PG_LOCKS).where(held_advisory_locks())
    if user_id is not None:
        query = query.where(cast(PG_LOCKS.c.classid, BigInteger) == as_lock_id(func.hashtext(user_id)))
    return query


async def count_open(conn: Any, mode: str, user_id: str | None = None) -> int:
    """Sessions open under ``mode`` leases (of ``user_id`` only, if given), on ``conn``."""
    if mode == "lock":
        return int((await conn.execute(_open_locks(user_id))).scalar_one())
    query = select(func.count()).select_from(sessions).where(
        sessions.c.lease_owner.is_not(None), sessions.c.lease_until > shared_now(conn.dialect.name))
    if user_id is not None:
        query = query.where(sessions.c.user_id == user_id)
    return int((await conn.execute(query)).scalar_one())


async def last_row_lease_end(conn: Any, mode: str, user_id: str | None = None) -> datetime | None:
    """For row leases, when the last open one (of ``user_id`` only, if given) runs out; ``None`` with none open
    or under advisory locks. A killed worker's row leases outlive it (an advisory lock goes with its connection)."""
    if mode != "row":
        return None
    query = select(func.max(sessions.c.lease_until)).where(
        sessions.c.lease_owner.is_not(None), sessions.c.lease_until > shared_now(conn.dialect.name))
    if user_id is not None:
        query = query.where(sessions.c.user_id == user_id)
    last = (await conn.execute(query)).scalar()
    if last is None:
        return None
    if last.tzinfo is None:  # SQLite keeps the UTC time it was given, without its zone
        last = last.replace(tzinfo=UTC)
    return last.astimezone(UTC)  # type: ignore[no-any-return]


async def _when_row_leases_end(conn: Any, mode: str) -> str:
    """For row leases, when the last open one runs out: with every worker stopped the switch waits for it."""
    last = await last_row_lease_end(conn, mode)
    if last is None:
        return ""
    return (f". A worker killed without closing keeps its sessions' leases until they run out "
            f"(TEAMSTORE_LEASE_TTL_SECONDS after its last renewal): the last runs out at "
            f"{last:%Y-%m-%d %H:%M:%S} UTC, then switch")


async def set_lease_mode(engine: AsyncEngine, mode: str) -> str:
    """Switch how the database's sessions are leased; returns the mode it had.

    Refused while any session is open under the current mode. Stop every worker first and start them
    again with ``TEAMSTORE_SESSION_LEASE`` set to ``mode``: a worker still running keeps leasing the old
    way until its next check of the mode (``TEAMSTORE_DB_CHECK_SECONDS``, then it refuses).
    Meanwhile its saves still check the row version, so no update is lost, but two workers could run one
    session at once.

    Raises:
        ConfigurationError: ``mode`` is unknown, or ``lock`` on SQLite (which has no advisory locks).
        SessionBusy: Sessions are open under the current mode.
        StoreUnavailable: The database failed.
    """
    postgres = engine.dialect.name == "postgresql"
    if known(mode) == "lock" and not postgres:
        raise ConfigurationError("SQLite leases sessions in the row; advisory locks need Postgres",
                                 hint="keep 'row' on SQLite, or point TEAMSTORE_DATABASE_URL at PostgreSQL")
    try:
        async with engine.begin() as conn:
            if postgres:  # one switch at a time: the mode read next stays true until the commit
                await conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(_LEASE_SETTING))))
            previous = await recorded_mode(conn)
            if previous == mode:
                return previous
            open_now = await count_open(conn, previous)
            if open_now:
                raise SessionBusy(
                    f"{open_now} session(s) are open under {previous!r} leases; the mode was not changed",
                    hint="stop every worker, then switch; start them again with TEAMSTORE_SESSION_LEASE="
                    f"{mode}" + await _when_row_leases_end(conn, previous),
                )
            if mode == "lock":
                # Rows a row-lease worker made for a new session and never saved (it crashed): with locks,
                # a session's first save inserts its row, and would find one of these in its way.
                await conn.execute(delete(sessions).where(never_saved()))
            await conn.execute(update(store_settings).where(store_settings.c.name == _LEASE_SETTING)
                               .values(value=mode, updated_at=now_utc()))
    except SQLAlchemyError as exc:
        raise unavailable(exc, "switch the session lease mode") from exc
    return previous
