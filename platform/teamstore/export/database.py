"""The exporters of what the database holds about a user: resume state, quarantine, user memory, outbox,
ledger, subject mapping, and the record of earlier exports.

    from teamstore.export.database import LedgerRows, resume_state

    section = await resume_state().export(ctx, archive)     # resume_state.json
    section = await LedgerRows().export(ctx, archive)       # ledger.json

They read the tables the erasure steps delete from, by the same keys (the exact user id, or the subject
key), so an export covers what an erasure would remove. The tables a heavy user has thousands of rows in
(resume state, the quarantine, the outbox, the ledger) are read :data:`ROWS_AT_ONCE` rows at a time and
written as they come (:func:`~teamstore.export.base.add_json_rows`). States, and the checkpoints of interrupted runs,
are opened under the user's data key and decoded from their envelope (one that does not open or decode is
exported as stored, with the reason); transcripts waiting in the outbox are opened and unpacked like those in
the transcript store; ledger rows carry their cost at the price of their day.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, Select, Table, false, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncResult

from teamstore.audit.cost_report import money
from teamstore.audit.schema import outbox, rewrites, subject_sessions, subject_stores, subjects, usage
from teamstore.audit.subjects import session_key
from teamstore.audit.transcripts import record
from teamstore.db.engine import describe_failure
from teamstore.errors import AuditError, StateRejected, StoreUnavailable
from teamstore.export.base import Archive, ExportContext, Section, add_json_rows, as_stored
from teamstore.export.requests import fixed_detail
from teamstore.export.schema import export_requests
from teamstore.keys.schema import data_keys
from teamstore.memory.store import MemoryStore
from teamstore.state import envelope
from teamstore.state.schema import DAMAGED, quarantine, sessions
from teamstore.state.sealed import checkpoint_context
from teamstore.state.sealed import context as state_context

Rows = list[dict[str, Any]]
ROWS_AT_ONCE = 100
"""Rows :func:`streamed` fetches at a time: a hundred states of 50 KB are 5 MB."""


async def read(engine: AsyncEngine, query: Select[Any], store: str) -> Rows:
    """Every row of ``query`` as a dict.

    Raises:
        StoreUnavailable: The database could not be read (the export fails).
    """
    try:
        async with engine.connect() as conn:
            return [dict(row._mapping) for row in (await conn.execute(query)).all()]
    except SQLAlchemyError as exc:
        raise _unreadable(store, exc) from exc


@asynccontextmanager
async def streamed(engine: AsyncEngine, query: Select[Any], store: str) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
    """The rows of ``query`` as dicts, fetched :data:`ROWS_AT_ONCE` at a time (on Postgres through a server-side
    cursor, one sort), for as long as the block lasts.

    Raises:
        StoreUnavailable: The database could not be read (the export fails).
    """
    try:
        async with engine.connect() as conn:
            result = await conn.stream(query.execution_options(yield_per=ROWS_AT_ONCE))
            yield _rows(result)
    except SQLAlchemyError as exc:
        raise _unreadable(store, exc) from exc


async def _rows(result: AsyncResult[Any]) -> AsyncIterator[dict[str, Any]]:
    # A batch at a time from the driver: a row at a time, each would cost a hop into SQLAlchemy's greenlet.
    async for batch in result.mappings().partitions():
        for row in batch:
            yield dict(row)


def _unreadable(store: str, exc: SQLAlchemyError) -> StoreUnavailable:
    return StoreUnavailable(f"could not read {store} for the export: {describe_failure(exc)}",
                            hint="check the database, then export again")


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """A row's values as JSON can hold them (a value the state tables read as damaged says so)."""
    return {name: "(damaged value)" if value is DAMAGED else value for name, value in row.items()}


def decoded_state(state: object, name: str = "state") -> dict[str, Any]:
    """A stored state (or, with ``name="checkpoint"``, an interrupted run's checkpoint), decoded from its
    envelope; as stored, with the reason, when it does not decode."""
    if state is None:
        return {name: None}
    # SQLite keeps whatever is written: a state that is not text is handed over as its bytes can be read.
    text = state if isinstance(state, str) else _bytes(state).decode("utf-8", "backslashreplace")
    try:
        return {name: envelope.decode(text)}
    except StateRejected as exc:
        return {name: None, f"{name}_as_stored": text, f"{name}_unreadable": exc.detail}


async def opened_state(ctx: ExportContext, row: dict[str, Any], name: str = "state") -> dict[str, Any]:
    """A stored state (or, with ``name="checkpoint"``, a run's checkpoint) opened under the user's data key,
    then decoded (:func:`decoded_state`); as stored, with the reason, when it does not open."""
    state = row[name]
    try:
        blob = envelope.sealed_bytes(state) if isinstance(state, str) else None
    except StateRejected as exc:
        return {name: None, f"{name}_as_stored": state, f"{name}_unreadable": exc.detail}
    if blob is None:
        return decoded_state(state, name)  # saved before sealing
    where = state_context if name == "state" else checkpoint_context
    plain, why = await ctx.opened(blob, where(row["session_id"]))
    if why is not None:
        return {name: None, f"{name}_as_stored": state, f"{name}_unreadable": why}
    return decoded_state(plain.decode("utf-8", "backslashreplace"), name)


def _bytes(value: object) -> bytes:
    return bytes(value) if isinstance(value, bytes | bytearray | memoryview) else str(value).encode("utf-8")


def _by_user(table: Table) -> Callable[[ExportContext], ColumnElement[bool]]:
    return lambda ctx: table.c.user_id == ctx.user_id


def _by_subject(table: Table) -> Callable[[ExportContext], ColumnElement[bool]]:
    return lambda ctx: table.c.subject_key == ctx.subject_key if ctx.subject_key is not None else false()


@dataclass(frozen=True)
class StateRows:
    """Resume state or quarantined rows of the exact user id, each state decoded."""

    name: str
    table: Table
    file: str

    async def export(self, ctx: ExportContext, archive: Archive) -> Section:
        """Write the user's rows, states and checkpoints of interrupted runs decoded, leases left out (they are
        the workers', not the user's)."""
        hidden = {"lease_owner", "lease_until", "user_id", "state", "checkpoint"}
        columns = [c for c in self.table.c if c.name not in hidden - {"state", "checkpoint"}]
        order = self.table.c.id if "id" in self.table.c else self.table.c.session_id
        query = select(*columns).where(_by_user(self.table)(ctx)).order_by(order)
        async with streamed(ctx.engine, query, self.name) as rows:
            found = ({**{k: v for k, v in _plain(r).items() if k not in hidden}, **await opened_state(ctx, r),
                      **await opened_state(ctx, r, "checkpoint")} async for r in rows)
            return await add_json_rows(archive, self.file, {"user_id": ctx.user_id}, self.name, found)


class MemoryRows:
    """What teams keep about the user between sessions: each scope's summary and facts (value, type, the run
    it came from, when last confirmed), anything damaged (counted among the records: still held about the user), the memory writer's last failure, facts still held
    though the memory they belonged to no longer exists (``leftover``), and when the user last forgot memory, per
    scope (``forgets``; scope ``null``: every scope), while that is kept."""

    name = "memory"

    async def export(self, ctx: ExportContext, archive: Archive) -> Section:
        """Write the user's memory, every scope, and the forgets recorded."""
        store = MemoryStore(ctx.engine, keys=ctx.keys)
        # Opened (plain values); past its expiry and leftover facts too: held until swept, so the user's to see.
        found = [m.to_dict() for m in await store.show(ctx.user_id, held=True)]
        forgot = [f.to_dict() for f in await store.forgets(ctx.user_id)]
        return archive.add_json("memory.json", {"user_id": ctx.user_id, "memory": found, "forgets": forgot},
                                records=sum((0 if m["leftover"] else 1) + len(m["facts"]) + len(m["damaged"])
                                            for m in found) + len(forgot))


class OutboxRows:
    """Transcripts of the user waiting in the outbox (the transcript store refused them), unpacked."""

    name = "outbox"

    async def export(self, ctx: ExportContext, archive: Archive) -> Section:
        """Write each waiting transcript as its run record and items; a row that only records an upload
        that may still land says so."""
        query = select(outbox.c.run_id, outbox.c.object_key, outbox.c.body, outbox.c.created_at,
                       outbox.c.attempts).where(_by_subject(outbox)(ctx)).order_by(outbox.c.created_at, outbox.c.run_id)
        async with streamed(ctx.engine, query, self.name) as rows:  # each holds a whole transcript
            found = (await _unpacked(ctx, row) async for row in rows)
            return await add_json_rows(archive, "outbox.json", {}, "waiting_transcripts", found)


async def _unpacked(ctx: ExportContext, row: dict[str, Any]) -> dict[str, Any]:
    body, object_key = row.pop("body"), row.pop("object_key")
    entry = dict(row)
    if body is None:
        return {**entry, "body": None, "note": "delivered, or only the record of an upload that may still land"}
    plain, why = await ctx.opened(bytes(body), record.sealed_context(object_key))
    if why is not None:
        return {**entry, **as_stored(plain), "body_unreadable": why}
    try:
        header, items = record.decode(plain)
    except AuditError as exc:
        return {**entry, **as_stored(plain), "body_unreadable": exc.message}
    return {**entry, "run": header, "items": items}


class LedgerRows:
    """The user's usage ledger rows, each with its cost at the price of its day."""

    name = "ledger"

    async def export(self, ctx: ExportContext, archive: Archive) -> Section:
        """Write the rows with their cost (``None`` for a model the price table does not know)."""
        columns = [c for c in usage.c if c.name not in ("id", "subject_key")]
        query = select(*columns).where(_by_subject(usage)(ctx)).order_by(usage.c.started_at, usage.c.run_id, usage.c.agent)
        sessions_of = await known_sessions(ctx)

        def priced(row: dict[str, Any]) -> dict[str, Any]:
            price = ctx.prices.lookup(row["model"], row["day"])
            # exact decimal text, as every cost report prints it
            row["cost"] = money(price.cost(row["input_tokens"], row["output_tokens"])) if price is not None else None
            row["session_id"] = sessions_of.get(row["session_key"])
            return row

        totals = await self._totals(ctx, sessions_of)
        async with streamed(ctx.engine, query, self.name) as rows:
            data = {"currency": ctx.prices.currency, "price_version": ctx.prices.version, "totals": totals}
            return await add_json_rows(archive, "ledger.json", data, "usage", (priced(row) async for row in rows))

    async def _totals(self, ctx: ExportContext, sessions_of: dict[str, str]) -> dict[str, Any]:
        """What the rows below add up to, in all and per session: the user asks what they cost, not for a sum
        to work out by hand. Summed by model and day in the database (a few rows however long the history),
        each priced as its rows are; ``unpriced_calls`` are calls of a model the price table does not know."""
        u = usage.c
        query = (select(u.session_key, u.model, u.day, func.sum(u.calls).label("calls"),
                        func.sum(u.input_tokens).label("input_tokens"), func.sum(u.output_tokens).label("output_tokens"))
                 .where(_by_subject(usage)(ctx)).group_by(u.session_key, u.model, u.day))
        per_session: dict[str, dict[str, Any]] = {}
        for row in await read(ctx.engine, query, self.name):
            entry = per_session.setdefault(row["session_key"], {
                "session_id": sessions_of.get(row["session_key"]), "session_key": row["session_key"], "calls": 0,
                "input_tokens": 0, "output_tokens": 0, "cost": Decimal(0), "unpriced_calls": 0})
            calls, tokens_in, tokens_out = int(row["calls"]), int(row["input_tokens"]), int(row["output_tokens"])
            entry.update(calls=entry["calls"] + calls, input_tokens=entry["input_tokens"] + tokens_in,
                         output_tokens=entry["output_tokens"] + tokens_out)
            price = ctx.prices.lookup(row["model"], row["day"])
            if price is None:
                entry["unpriced_calls"] += calls
            else:
                entry["cost"] += price.cost(tokens_in, tokens_out)
        sessions = sorted(per_session.values(), key=lambda e: (e["session_id"] or "", e["session_key"]))
        overall = {name: sum((e[name] for e in sessions), Decimal(0) if name == "cost" else 0)
                   for name in ("calls", "input_tokens", "output_tokens", "cost", "unpriced_calls")}
        for entry in [overall, *sessions]:
            entry["cost"] = money(entry["cost"])
        return {**overall, "by_session": sessions}


class SubjectRows:
    """The subject mapping (the user id and its pseudonymous key), the session ids recorded beside the
    session keys for readable reports, where the user's transcripts went, and which were written again when
    they were first written (their retention's clock)."""

    name = "subject"

    async def export(self, ctx: ExportContext, archive: Archive) -> Section:
        """Write the mapping, the session ids, the transcript stores and the transcripts written again
        recorded for the subject."""
        m = subjects.c  # never the session secret: it stays in the database, and goes with the subject
        mapping = await read(ctx.engine, select(m.user_id, m.subject_key, m.created_at)
                             .where(m.user_id == ctx.user_id), self.name)
        s = subject_sessions.c
        session_ids = await read(ctx.engine, select(s.session_key, s.session_id, s.created_at).where(
            _by_subject(subject_sessions)(ctx)).order_by(s.created_at, s.session_key), self.name)
        stores = await read(ctx.engine, select(subject_stores.c.store, subject_stores.c.created_at,
                                               subject_stores.c.erased_at).where(_by_subject(subject_stores)(ctx))
                            .order_by(subject_stores.c.store), self.name)
        r = rewrites.c
        query = select(r.store, r.object_key, r.written_at).where(_by_subject(rewrites)(ctx)).order_by(
            r.store, r.object_key)
        data = {"subject": mapping[0] if mapping else None, "session_ids": session_ids, "transcript_stores": stores}
        async with streamed(ctx.engine, query, self.name) as rewritten:  # a row per run, once `keys migrate` sealed them
            written = await add_json_rows(archive, "subject.json", data, "transcripts_written_again", rewritten)
        return written.model_copy(update={"records": written.records + len(mapping) + len(session_ids) + len(stores)})


class DataKeyRows:
    """That teamstore holds a data key for the user (its id and dates), or that it holds none: never the key,
    wrapped or not."""

    name = "keys"

    async def export(self, ctx: ExportContext, archive: Archive) -> Section:
        """Write the user's data key's id and when it was made and last wrapped."""
        d = data_keys.c
        rows = await read(ctx.engine, select(d.key_id, d.created_at, d.wrapped_at).where(d.user_id == ctx.user_id),
                          self.name)
        note = ("every state, run checkpoint, memory value and transcript above is stored sealed (AES-256-GCM) under "
                "this key, and was opened for this export; the key itself is never handed out") if rows else (
                "teamstore holds no data key for this user (none was made, or an erasure destroyed it): nothing "
                "above was opened under one; what was written before sealing is handed over as stored, and what is "
                "sealed under a destroyed key is handed over as stored, saying beside it that it is beyond use")
        return archive.add_json("keys.json", {"user_id": ctx.user_id, "data_keys": rows, "note": note},
                                records=len(rows))


class ExportRows:
    """The record of earlier exports of the user (when, at whose request, by whom, how each ended and why)."""

    name = "exports"

    async def export(self, ctx: ExportContext, archive: Archive) -> Section:
        """Write the earlier exports' records (this one's is in its manifest), each with its ``detail`` as
        ``teamstore export status`` shows it: fixed text (where a failed one failed and the error's type, where a
        stopped one stopped, what to do with an abandoned one's temporary archive), never an error's message."""
        e = export_requests.c
        query = select(e.export_id, e.requested_by, e.operator, e.status, e.started_at, e.finished_at,
                       e.detail).where(
            _by_subject(export_requests)(ctx), e.export_id != ctx.export_id).order_by(e.started_at)
        rows = [row | {"detail": fixed_detail(row["detail"])} for row in await read(ctx.engine, query, self.name)]
        return archive.add_json("exports.json", {"earlier_exports": rows}, records=len(rows))


async def known_sessions(ctx: ExportContext) -> dict[str, str]:
    """Session key -> session id, for every session of the user whose id is known: recorded beside its key
    with its runs' ledger rows (``ts_subject_sessions``), or held by a state or a quarantined row (runs from
    before that record existed). A deleted or expired session's transcripts and ledger rows are named too."""
    secret = ctx.session_secret
    if ctx.subject_key is None or secret is None:
        return {}
    ids: set[str] = set()
    for table in (sessions, quarantine):
        query = select(table.c.session_id).where(table.c.user_id == ctx.user_id).distinct()
        ids |= {row["session_id"] for row in await read(ctx.engine, query, "resume state")}
    known = {session_key(secret, session_id): session_id for session_id in ids}
    s = subject_sessions.c
    recorded = await read(ctx.engine, select(s.session_key, s.session_id).where(s.subject_key == ctx.subject_key),
                          "the session ids")
    return {**known, **{row["session_key"]: row["session_id"] for row in recorded}}


def resume_state() -> StateRows:
    """Every ``ts_sessions`` row of the exact user id, its state decoded."""
    return StateRows("resume_state", sessions, "resume_state.json")


def quarantined() -> StateRows:
    """Every ``ts_quarantine`` row of the exact user id, its state decoded."""
    return StateRows("quarantine", quarantine, "quarantine.json")
