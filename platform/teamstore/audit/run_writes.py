"""The statements every run's audit makes: the subject lookup (as the run starts), the ledger insert with the
end-of-run fence, and once per session the session's id beside its key.

    from teamstore.audit.run_writes import SqliteRunWrites

    writes = SqliteRunWrites(engine)          # or PostgresRunWrites(engine, pool_size=20)
    subject, fenced = await writes.subject("alice")                       # one round trip
    subject, fenced, added = await writes.end_of_run(rows, user_id="alice", subject_key=subject.key)
    await writes.name_session(user_id="alice", subject_key=subject.key, session_key=key, session_id="s-1")
    await writes.aclose()

Each is written once (:func:`teamstore.audit.subjects.subject_lookup`,
:func:`teamstore.audit.ledger.usage_insert`, :func:`teamstore.audit.ledger.session_name_insert`); this
module only sends them. On Postgres they are compiled
once for psycopg and sent in autocommit on a pool of the audit's own (:class:`teamstore.state.direct.DirectPool`):
one round trip each, the end of a run's one statement (:mod:`teamstore.audit.run_writes_postgres`, which
imports this module, never the other way: :class:`teamstore.audit.pseudonyms.Pseudonyms` picks the backend),
where the engine's checkout ping, ``BEGIN``, the statement and the ``ROLLBACK`` or ``COMMIT`` took four or
five, and SQLAlchemy's client work cost more than the statements. On SQLite, on connections of the audit's
own, on the event loop (:mod:`teamstore.state.direct_sqlite`), where SQLAlchemy's adapter made five or six
hops to SQLite's thread.
"""

from __future__ import annotations

import functools
import sqlite3
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.dml import Insert

from teamstore.audit.ledger import session_name_insert, usage_insert, usage_params
from teamstore.audit.schema import usage
from teamstore.audit.subjects import Subject, subject_lookup, subject_of
from teamstore.db.engine import describe_failure, failure_hint
from teamstore.errors import StoreUnavailable
from teamstore.state.direct_sqlite import SqlitePool, SqliteStatement, for_sqlite

_LOOKUP = subject_lookup()
_SQLITE_LOOKUP = for_sqlite(_LOOKUP)
_NAME = session_name_insert("sqlite")
_SQLITE_NAME = for_sqlite(_NAME)


@functools.lru_cache(maxsize=64)
def _insert(count: int) -> Insert:
    """The fenced ledger insert of ``count`` rows, built once per count (a run writes a row per agent, model
    and purpose: a handful)."""
    return usage_insert("sqlite", count)


@functools.lru_cache(maxsize=64)
def _sqlite_insert(count: int) -> SqliteStatement:
    # The rows it wrote, counted from its RETURNING: a statement sent in one hop tells nothing else.
    return for_sqlite(_insert(count).returning(usage.c.id))


class RunWrites(Protocol):
    """How the audit sends its per-run statements to the database."""

    async def subject(self, user_id: str) -> tuple[Subject | None, bool]:
        """The user's subject (``None`` if none yet) and whether an erasure holds the user.

        Raises:
            StoreUnavailable: The database could not be reached.
        """
        ...

    async def insert_usage(self, rows: list[dict[str, Any]], *, user_id: str, subject_key: str) -> int:
        """Insert a run's ledger rows keyed by ``subject_key``; how many were written: none while an
        erasure holds the user, once the user's subject is no longer ``subject_key``, or for a run
        already recorded.

        Raises:
            StoreUnavailable: The database could not be written.
        """
        ...

    async def end_of_run(self, rows: list[dict[str, Any]], *, user_id: str, subject_key: str) -> tuple[Subject | None, bool, int]:
        """The end-of-run fence and the run's ledger rows at once: the user's subject and whether an
        erasure holds the user (as :meth:`subject`), and how many of ``rows`` were written (as
        :meth:`insert_usage`; none unless the subject is still ``subject_key`` and no erasure holds the user).

        Raises:
            StoreUnavailable: The database could not be reached.
        """
        ...

    async def name_session(self, *, user_id: str, subject_key: str, session_key: str, session_id: str) -> None:
        """Record ``session_id`` beside ``session_key`` (fenced as the ledger insert; one already there stays).

        Raises:
            StoreUnavailable: The database could not be written.
        """
        ...

    async def aclose(self) -> None:
        """Close the connections opened for these statements (they open again when next needed)."""
        ...


def session_name_params(*, user_id: str, subject_key: str, session_key: str, session_id: str) -> dict[str, Any]:
    """The parameters of :func:`teamstore.audit.ledger.session_name_insert`."""
    return {"u": user_id, "subject": subject_key, "session_key": session_key, "session_id": session_id,
            "created_at": datetime.now(UTC)}


def unavailable(exc: BaseException, action: str) -> StoreUnavailable:
    return StoreUnavailable(f"could not {action}: {describe_failure(exc)}",
                            hint=f"{failure_hint(exc)}; run `teamstore db upgrade` if an audit table is missing")


class SqliteRunWrites:
    """The statements on SQLite: on connections of the audit's own, one hop each to SQLite's thread
    (:mod:`teamstore.state.direct_sqlite`); through the engine for a database that is not a file."""

    def __init__(self, engine: AsyncEngine, pool_size: int = 2) -> None:
        self.engine = engine
        self._direct = SqlitePool.for_engine(engine, pool_size)

    async def subject(self, user_id: str) -> tuple[Subject | None, bool]:
        """See :meth:`RunWrites.subject`."""
        try:
            if self._direct is not None:
                (key, secret, fenced), = await self._direct.fetch(_SQLITE_LOOKUP, {"u": user_id})
            else:
                async with self.engine.connect() as conn:
                    key, secret, fenced = (await conn.execute(_LOOKUP, {"u": user_id})).one()
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise unavailable(exc, "resolve the audit subject") from exc
        return subject_of(key, secret), bool(fenced)

    async def insert_usage(self, rows: list[dict[str, Any]], *, user_id: str, subject_key: str) -> int:
        """See :meth:`RunWrites.insert_usage`."""
        params = usage_params(rows, user_id, subject_key)
        try:
            if self._direct is not None:
                return len(await self._direct.fetch(_sqlite_insert(len(rows)), params))
            async with self.engine.begin() as conn:
                result = await conn.execute(_insert(len(rows)), params)
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise unavailable(exc, f"write the usage ledger for run {rows[0]['run_id']}") from exc
        return int(result.rowcount or 0)

    async def end_of_run(self, rows: list[dict[str, Any]], *, user_id: str, subject_key: str) -> tuple[Subject | None, bool, int]:
        """See :meth:`RunWrites.end_of_run`: the lookup, then the insert (each on the loop, microseconds;
        SQLite has no INSERT inside a query)."""
        subject, fenced = await self.subject(user_id)
        if fenced or subject is None or subject.key != subject_key:
            return subject, fenced, 0
        return subject, fenced, await self.insert_usage(rows, user_id=user_id, subject_key=subject_key)

    async def name_session(self, *, user_id: str, subject_key: str, session_key: str, session_id: str) -> None:
        """See :meth:`RunWrites.name_session`."""
        params = session_name_params(user_id=user_id, subject_key=subject_key, session_key=session_key,
                                     session_id=session_id)
        try:
            if self._direct is not None:
                await self._direct.fetch(_SQLITE_NAME, params)
                return
            async with self.engine.begin() as conn:
                await conn.execute(_NAME, params)
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise unavailable(exc, "record the session's id beside its key") from exc

    async def aclose(self) -> None:
        """Close the audit's own connections (the engine is the caller's)."""
        if self._direct is not None:
            await self._direct.close()
