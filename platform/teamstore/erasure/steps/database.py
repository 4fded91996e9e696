"""The database steps: resume state, quarantine, user memory, outbox, records of transcripts written again,
ledger link, session ids, export records' link, subject mapping.

    from teamstore.erasure.steps.database import resume_step

    step = resume_step()
    result = await step.erase(ctx, prior=None)     # delete + step record: one transaction

Each delete commits in the same transaction as the step's record, so a kill leaves either both or
neither; a rerun adds what it finds to the committed counts. Rows are matched by the exact user id
(``=`` on Postgres and SQLite compares code points: no case folding, no unicode normalisation) or by the
subject key. Resume state's rows are reached through :mod:`teamstore.state.erasure`, user memory's through
:mod:`teamstore.memory.erasure`; the audit tables' rows here, by table.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import ColumnElement, Table, bindparam, delete, false, func, or_, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from teamstore.audit.schema import outbox, rewrites, subject_sessions, subjects, usage
from teamstore.db.engine import describe_failure
from teamstore.erasure.receipt import Counts, StepStatus, StoreResult
from teamstore.erasure.record import write_step
from teamstore.erasure.steps.base import StepContext
from teamstore.errors import StoreUnavailable
from teamstore.export.requests import without_pseudonyms
from teamstore.export.schema import export_requests
from teamstore.memory.erasure import USER_MEMORY, UserMemoryRows
from teamstore.state import erasure as state

Where = Callable[[StepContext], ColumnElement[bool]]
UNLINK_BATCH = 1000
"""Sessions whose ledger rows one statement unlinks."""


def _by_user(table: Table) -> Where:
    return lambda ctx: table.c.user_id == ctx.user_id if ctx.user_id is not None else false()


def _by_subject(table: Table) -> Where:
    return lambda ctx: table.c.subject_key == ctx.subject_key if ctx.subject_key is not None else false()


def _unavailable(name: str, exc: SQLAlchemyError) -> StoreUnavailable:
    return StoreUnavailable(
        f"erasure step {name!r} failed: {describe_failure(exc)}",
        hint="fix the database, then rerun the same request id (it resumes where it stopped)",
    )


class Rows(Protocol):
    """A user's rows in one store of the database, counted and deleted on the step's connection."""

    async def count(self, conn: AsyncConnection, ctx: StepContext) -> Counts:
        """How many rows the user has there, and their bytes."""

    async def delete(self, conn: AsyncConnection, ctx: StepContext) -> Counts:
        """Delete (or unlink) the user's rows there, in the step's transaction; how many it did, and their
        bytes (what the statements changed, not a count taken before: a row may land in between)."""


@dataclass(frozen=True)
class TableRows:
    """The matching rows of one audit table.

    Args:
        table: The table.
        where: The user's rows.
        size: An expression giving each row's bytes, if meaningful.
    """

    table: Table
    where: Where
    size: Any = None

    async def count(self, conn: AsyncConnection, ctx: StepContext) -> Counts:
        """Count the matching rows and their bytes."""
        size = func.coalesce(func.sum(self.size), 0) if self.size is not None else func.count() * 0
        rows, nbytes = (await conn.execute(
            select(func.count(), size).select_from(self.table).where(self.where(ctx)))).one()
        return Counts(rows=int(rows), bytes=int(nbytes or 0))

    async def delete(self, conn: AsyncConnection, ctx: StepContext) -> Counts:
        """Delete the matching rows; how many, and their bytes."""
        statement = delete(self.table).where(self.where(ctx))
        if self.size is None:
            return Counts(rows=(await conn.execute(statement)).rowcount)
        sizes = (await conn.execute(statement.returning(self.size))).scalars().all()
        return Counts(rows=len(sizes), bytes=sum(int(size or 0) for size in sizes))


@dataclass(frozen=True)
class StateRows:
    """The user's rows in one of resume state's tables, or in user memory's (a request that no longer knows
    its user has none)."""

    rows: state.UserRows | UserMemoryRows

    async def count(self, conn: AsyncConnection, ctx: StepContext) -> Counts:
        """Count the user's rows and their state bytes."""
        if ctx.user_id is None:
            return Counts(rows=0, bytes=0)
        rows, nbytes = await self.rows.count(conn, ctx.user_id)
        return Counts(rows=rows, bytes=nbytes)

    async def delete(self, conn: AsyncConnection, ctx: StepContext) -> Counts:
        """Delete the user's rows; how many, and their state bytes."""
        if ctx.user_id is None:
            return Counts(rows=0, bytes=0)
        rows, nbytes = await self.rows.delete(conn, ctx.user_id)
        return Counts(rows=rows, bytes=nbytes)


@dataclass(frozen=True)
class SqlDeleteStep:
    """Delete the user's rows of one store in the database.

    Args:
        name: The store's name in the receipt.
        rows: The user's rows there.
    """

    name: str
    rows: Rows

    async def enumerate(self, ctx: StepContext) -> Counts:
        """Count the user's rows."""
        try:
            async with ctx.engine.connect() as conn:
                return await self.rows.count(conn, ctx)
        except SQLAlchemyError as exc:
            raise _unavailable(self.name, exc) from exc

    async def erase(self, ctx: StepContext, prior: StoreResult | None) -> StoreResult:
        """Delete and record, in one transaction, what the delete removed.

        Raises:
            StoreUnavailable: The database failed; nothing of this step was committed.
        """
        try:
            async with ctx.engine.begin() as conn:
                found = await self.rows.delete(conn, ctx)
                result = _deleted(found, prior)
                await write_step(conn, ctx.request_id, self.name, result, ctx.owner)
        except SQLAlchemyError as exc:
            raise _unavailable(self.name, exc) from exc
        ctx.progress(self.name, found.rows, found.rows)
        return result

    async def remaining(self, ctx: StepContext) -> Counts:
        """Re-count on a fresh connection."""
        return await self.enumerate(ctx)


def _deleted(found: Counts, prior: StoreResult | None) -> StoreResult:
    counts = found.plus(prior.counts) if prior is not None else found
    return StoreResult(status=StepStatus.DELETED, counts=counts)


@dataclass(frozen=True)
class LedgerRows(TableRows):
    """Unlink the user's ledger rows: subject key cleared, each session key replaced by a fresh random one.

    Token counts stay for finance; a row still groups with the other runs of its session (the new key
    is shared per old session key) but nothing maps the new key to a user, a subject or a session id.
    """

    async def delete(self, conn: AsyncConnection, ctx: StepContext) -> Counts:
        """Unlink the matching rows, :data:`UNLINK_BATCH` sessions to a statement; how many."""
        old_keys = (await conn.execute(
            select(usage.c.session_key).where(self.where(ctx)).distinct())).scalars().all()
        # One statement run with each session's key and its new one (sent as one pipeline on Postgres): a
        # statement of its own per session was a round trip each, tens of thousands for a heavy user.
        stmt = (update(usage).where(self.where(ctx), usage.c.session_key == bindparam("old"))
                .values(subject_key=None, session_key=bindparam("new")))
        unlinked = 0
        for start in range(0, len(old_keys), UNLINK_BATCH):
            renamed = [{"old": old, "new": secrets.token_hex(16)} for old in old_keys[start : start + UNLINK_BATCH]]
            unlinked += (await conn.execute(stmt, renamed)).rowcount
        return Counts(rows=unlinked)


@dataclass(frozen=True)
class ExportRecordRows(TableRows):
    """Unlink the records of the user's exports: subject key cleared, and the session keys and run ids their
    manifests name files by replaced (:func:`teamstore.export.requests.without_pseudonyms`)."""

    async def delete(self, conn: AsyncConnection, ctx: StepContext) -> Counts:
        """Unlink the matching records; how many. A record an export finishes between the read and the update
        (its status changed) is read again, so its new manifest is the one rewritten."""
        e = export_requests.c
        unlinked = 0
        while found := (await conn.execute(select(e.export_id, e.status, e.manifest).where(self.where(ctx)))).all():
            for export_id, status, manifest in found:
                unlinked += (await conn.execute(
                    update(export_requests).where(e.export_id == export_id, e.status == status, self.where(ctx))
                    .values(subject_key=None, manifest=without_pseudonyms(manifest)))).rowcount
        return Counts(rows=unlinked)


def resume_step() -> SqlDeleteStep:
    """Resume state: every stored session of the exact user id (several copies of the words inside)."""
    return SqlDeleteStep("resume_state", StateRows(state.SESSIONS))


def memory_step() -> SqlDeleteStep:
    """User memory: every summary and fact kept about the exact user id (their words, in another form)."""
    return SqlDeleteStep("memory", StateRows(USER_MEMORY))


def quarantine_step() -> SqlDeleteStep:
    """Quarantined states of the exact user id."""
    return SqlDeleteStep("quarantine", StateRows(state.QUARANTINED))


def outbox_step() -> SqlDeleteStep:
    """Transcripts waiting in the outbox under the user's subject."""
    return SqlDeleteStep("outbox", TableRows(outbox, _by_subject(outbox), func.length(outbox.c.body)))


def rewrites_step() -> SqlDeleteStep:
    """The records of the user's transcripts written again (each object's key and first write time), which
    the retention sweep reads; after the transcripts, whose keys they name."""
    return SqlDeleteStep("rewrites", TableRows(rewrites, _by_subject(rewrites)))


def ledger_step() -> SqlDeleteStep:
    """The ledger's link to the user (rows stay, de-identified)."""
    return SqlDeleteStep("ledger", LedgerRows(usage, _by_subject(usage)))


def session_ids_step() -> SqlDeleteStep:
    """The user's session ids recorded beside their session keys, for readable reports (before the subject)."""
    return SqlDeleteStep("session_ids", TableRows(subject_sessions, _by_subject(subject_sessions)))


def exports_step() -> SqlDeleteStep:
    """The export records' link to the user (``ts_export_requests``: who exported the user's data, when, at
    whose request; the rows stay, de-identified, with their manifests, which hold no user data and, from
    then on, none of the user's session keys or run ids)."""
    return SqlDeleteStep("exports", ExportRecordRows(export_requests, _by_subject(export_requests)))


def subject_step() -> SqlDeleteStep:
    """The subject mapping, last: by user id and by subject key (a mapping created in a race included)."""

    def where(ctx: StepContext) -> ColumnElement[bool]:
        return or_(_by_user(subjects)(ctx), _by_subject(subjects)(ctx))

    return SqlDeleteStep("subject", TableRows(subjects, where))
