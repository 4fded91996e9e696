"""The export record: opened when an export starts, finished with its manifest or its failure.

    from teamstore.export import requests

    await requests.close_abandoned(engine)                                # exports killed outright: failed
    await requests.open_export(engine, "ex-1f3c...", subject_key, user_id="alice", requested_by="ticket 881",
                               operator="dpo", owner="host:42:9f2e")
    await requests.renew(engine, "ex-1f3c...", "host:42:9f2e", 120.0)     # every third of the lease
    await requests.finish_export(engine, "ex-1f3c...", "exported", manifest, owner="host:42:9f2e")

A record holds the pseudonymous subject key, never the raw user id nor the archive's path (see
:mod:`teamstore.export.schema`). An export stopped midway (Ctrl-C, SIGTERM, SIGHUP) records ``failed`` with
where it stopped. One killed outright (SIGKILL, a crash, a host lost) stops renewing its lease: its record says
``running`` until its lease has passed, then reads as abandoned (:func:`abandoned`), and the next export closes it
as ``failed`` (:func:`close_abandoned`). Leases are written and compared on the database's clock, as the erasure's
are: a live export renews its own long before it passes, and a record closed is never finished afterwards. A record
with no lease (written before migration 0031, or by an earlier release's export still running through an upgrade)
is taken for alive until :data:`NO_LEASE` after it began, as the migration sets the lease of those it finds.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, DateTime, String, and_, case, insert, literal, or_, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from teamstore.audit.schema import subjects
from teamstore.db.clock import shared_later, shared_now, utc
from teamstore.db.engine import describe_failure
from teamstore.db.fence import held
from teamstore.errors import ExportFailed, ExportNotFound, InvalidIdentifier, StoreUnavailable
from teamstore.export.schema import export_requests
from teamstore.settings import EXPORT_LEASE_SECONDS

RUNNING, EXPORTED, NO_MATCH, FAILED = "running", "exported", "no_match", "failed"
LEASE_SECONDS = EXPORT_LEASE_SECONDS
"""How long an export is taken for alive after it last renewed its lease (it renews every third of this), unless
its coordinator is given another (``TEAMSTORE_EXPORT_LEASE_SECONDS``, through the composition root)."""
NO_LEASE = timedelta(days=1)
"""How long after it began a record with no lease is taken for alive."""
ABANDONED = "abandoned"
"""How the ``detail`` of a record closed by :func:`close_abandoned` begins."""


def partial_name(export_id: str) -> str:
    """The pattern of the temporary archive an export writes beside its target (``.<name>.<export id>.partial``:
    :mod:`teamstore.export.archive`), as a record may name it: never the target's name, which often names the
    user."""
    return f".*.{export_id}.partial"


# What records written before details were fixed text hold: where, the error's type, then its message.
_WITH_MESSAGE = re.compile(r"(?P<where>[a-z_][a-z_ ]{0,63}): (?P<kind>[A-Z][A-Za-z0-9]{0,127}): ", re.DOTALL)


def fixed_detail(detail: str | None) -> str | None:
    """A record's ``detail`` as fixed text: one written by an earlier release as ``where: Type: message`` loses
    its message, which may name the archive's path (often after the user) or an object key, wherever the
    record is shown (``export status``, and the user's next archive)."""
    if detail is None or (found := _WITH_MESSAGE.match(detail)) is None:
        return detail
    return f"{found['where']}: {found['kind']}"


def abandoned_detail(export_id: str) -> str:
    """The ``detail`` of a record closed as abandoned: what happened and what to do (no path, no user)."""
    return (f"{ABANDONED}: the export stopped renewing its lease, killed outright (SIGKILL, out of memory, a crash, "
            f"its host lost); its temporary archive, if it left one, is {partial_name(export_id)} beside the "
            "target it was given, holding part of the user's data readable: delete it (the next export to the "
            "same target does, whether or not that target exists by then), and export again")


def abandoned_while_running(export_id: str) -> ExportFailed:
    """The failure of an export whose own record was closed as abandoned while it ran (:func:`close_abandoned`)."""
    return ExportFailed(
        f"the export {export_id} was recorded as abandoned while it ran: it did not renew its lease in time "
        "(the process paused or starved, the database out of reach), and another export closed its record",
        hint="export again; if the machine is this slow, look into why first")


def new_export_id() -> str:
    """A fresh export id (``ex-`` and 24 hex characters)."""
    return f"ex-{uuid.uuid4().hex[:24]}"


def made_export_id(text: str) -> bool:
    """Whether ``text`` has the form of an id :func:`new_export_id` makes."""
    return _MADE_ID.fullmatch(text) is not None


_MADE_ID = re.compile(r"ex-[0-9a-f]{24}")


@asynccontextmanager
async def _db(engine: AsyncEngine, action: str) -> AsyncIterator[AsyncConnection]:
    try:
        async with engine.begin() as conn:
            yield conn
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"could not {action}: {describe_failure(exc)}",
                               hint="check the database (`teamstore db upgrade`), then export again") from exc


async def open_export(
    engine: AsyncEngine, export_id: str, subject_key: str | None, *, user_id: str, requested_by: str | None,
    operator: str, owner: str, lease_seconds: float = LEASE_SECONDS,
) -> datetime:
    """Record that an export of ``user_id`` starts now, run by ``owner`` (a process), alive for ``lease_seconds``
    unless :func:`renew` extends it; when it started.

    The record links the subject key only while no erasure fences the user and the key's mapping stands,
    checked in the statement that writes it: an erasure unlinks the user's export records (its ``exports``
    step) and then deletes the mapping, so a record written meanwhile must not link the key again (the
    export itself goes on: a user's access stands until the erasure is done).

    Raises:
        StoreUnavailable: The database could not be reached (nothing is exported then).
    """
    now = datetime.now(UTC)
    e = export_requests.c
    recorded: Any = literal(None, String)
    if subject_key is not None:  # the key if its mapping stands and no erasure fences the user, else NULL
        mapped = select(subjects.c.subject_key).where(subjects.c.subject_key == subject_key).scalar_subquery()
        recorded = case((held(user_id), literal(None, String)), else_=mapped)
    row = select(literal(export_id, String), recorded, literal(requested_by, String), literal(operator, String),
                 literal(RUNNING, String), literal(now, DateTime(timezone=True)), literal(owner, String),
                 shared_later(engine.dialect.name, timedelta(seconds=lease_seconds)))
    stmt = insert(export_requests).from_select(
        [e.export_id, e.subject_key, e.requested_by, e.operator, e.status, e.started_at, e.owner, e.lease_until], row)
    async with _db(engine, "record the export") as conn:
        await conn.execute(stmt)
    return now


async def finish_export(engine: AsyncEngine, export_id: str, status: str, manifest: dict[str, Any], *,
                        owner: str) -> None:
    """Record the export's outcome (``exported`` or ``no_match``) and its manifest: as it is while the record
    links the user's subject key, else :func:`without_pseudonyms` (an erasure fenced the user when the export
    began, or unlinked the record since: nothing may tie it to the subject's session keys and run ids). Only
    while the record is ``running`` under ``owner``'s lease: one closed as abandoned stays closed.

    Raises:
        ExportFailed: The record was closed as abandoned meanwhile (this process stalled past its lease).
        StoreUnavailable: The database could not be reached.
    """
    e, now = export_requests.c, datetime.now(UTC)
    finished = 0
    async with _db(engine, "record the export's manifest") as conn:
        for linked, written in ((e.subject_key.is_not(None), manifest),
                                (e.subject_key.is_(None), without_pseudonyms(manifest))):
            finished += (await conn.execute(update(export_requests).where(
                e.export_id == export_id, e.status == RUNNING, e.owner == owner, linked).values(
                status=status, manifest=written, finished_at=now))).rowcount
    if not finished:
        raise abandoned_while_running(export_id)


async def fail_export(engine: AsyncEngine, export_id: str, detail: str, *, owner: str | None = None) -> bool:
    """Record that the export failed or was stopped, and why: ``detail`` is fixed text (where, and the error's
    type), never an error's message, which may name the archive's path or an object key; the record outlives
    the user's erasure. Whether it was recorded: a record closed as abandoned keeps what it says. One its
    ``owner`` finished (``exported``, ``no_match``) is failed all the same: the outcome was committed but its
    acknowledgement lost (the connection dropped after the commit, the task cancelled then), and the archive is
    removed on the way out.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    e = export_requests.c
    ours = e.status == RUNNING
    if owner is not None:
        ours = or_(ours, and_(e.owner == owner, e.status.in_((EXPORTED, NO_MATCH))))
    async with _db(engine, "record the export's failure") as conn:
        failed = await conn.execute(update(export_requests).where(e.export_id == export_id, ours).values(
            status=FAILED, detail=detail[:2000], finished_at=datetime.now(UTC)))
    return bool(failed.rowcount)


async def renew(engine: AsyncEngine, export_id: str, owner: str, lease_seconds: float = LEASE_SECONDS) -> bool:
    """Extend the running export's lease by ``lease_seconds`` from now; False if its record is no longer
    ``running`` under ``owner`` (closed as abandoned: the export must not finish).

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    e = export_requests.c
    async with _db(engine, "renew the export's lease") as conn:
        renewed = await conn.execute(update(export_requests).where(
            e.export_id == export_id, e.status == RUNNING, e.owner == owner).values(
            lease_until=shared_later(engine.dialect.name, timedelta(seconds=lease_seconds))))
    return bool(renewed.rowcount)


def abandoned(dialect: str) -> ColumnElement[bool]:
    """A record ``running`` whose lease has passed (on the database's clock): its export was killed outright. One
    with no lease passes :data:`NO_LEASE` after it began."""
    e = export_requests.c
    return and_(e.status == RUNNING, or_(e.lease_until < shared_now(dialect), and_(
        e.lease_until.is_(None), e.started_at < shared_later(dialect, -NO_LEASE))))


def alive(dialect: str) -> ColumnElement[bool]:
    """A record ``running`` whose lease holds (on the database's clock): its export may still be writing. The
    complement of :func:`abandoned` among ``running`` records, written out so that no NULL makes it unknown."""
    e = export_requests.c
    return and_(e.status == RUNNING, or_(e.lease_until >= shared_now(dialect), and_(
        e.lease_until.is_(None), e.started_at >= shared_later(dialect, -NO_LEASE))))


def _lease_end(lease_until: datetime | None, started_at: datetime) -> datetime:
    """When a record's lease ends (a record with no lease: :data:`NO_LEASE` after it began)."""
    return utc(lease_until) or (utc(started_at) or started_at) + NO_LEASE


async def close_abandoned(engine: AsyncEngine) -> int:
    """Close every abandoned record (:func:`abandoned`) as ``failed``, saying so (:func:`abandoned_detail`), as of
    when its lease passed; how many. Idempotent, and race-safe: the check and the write are one statement, and a
    live export's renewal keeps its lease from passing.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    e = export_requests.c
    query = select(e.export_id, e.lease_until, e.started_at).where(abandoned(engine.dialect.name))
    async with _db(engine, "close the exports killed outright") as conn:
        closed = 0
        for export_id, lease_until, started_at in (await conn.execute(query)).all():  # the detail names each id
            closed += (await conn.execute(update(export_requests).where(
                e.export_id == export_id, abandoned(engine.dialect.name)).values(
                status=FAILED, detail=abandoned_detail(export_id),
                finished_at=_lease_end(lease_until, started_at)))).rowcount
    return closed


async def over_or_running(engine: AsyncEngine, export_ids: Sequence[str]) -> tuple[set[str], set[str]]:
    """Of ``export_ids``, those whose export is over (its record ``exported``, ``no_match`` or ``failed``: stopped,
    failed, or closed by :func:`close_abandoned`), and those still ``running``; an id with no record is in
    neither.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    if not export_ids:
        return set(), set()
    e = export_requests.c
    async with _db(engine, "read the exports whose temporary archives are left") as conn:
        found = (await conn.execute(select(e.export_id, e.status).where(e.export_id.in_(export_ids)))).all()
    return {i for i, status in found if status != RUNNING}, {i for i, status in found if status == RUNNING}


async def get_export(engine: AsyncEngine, export_id: str) -> dict[str, Any] | None:
    """The stored record of an export, or ``None``.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    async with _db(engine, "read the export's record") as conn:
        found = (await conn.execute(select(export_requests).where(export_requests.c.export_id == export_id))).first()
    return dict(found._mapping) if found is not None else None


_SHOWN = ("export_id", "status", "started_at", "finished_at", "operator", "requested_by", "detail", "lease_until")


async def export_status(engine: AsyncEngine, export_id: str) -> dict[str, Any]:
    """An export's record as ``teamstore export status`` shows it: its status, when, by whom, at whose request,
    why it failed, and its lease; a record still ``running`` whose lease has passed (on the database's clock)
    shows as ``abandoned``, since its lease passed, with what to do. Writes nothing: the next export closes it.

    Raises:
        InvalidIdentifier: ``export_id`` is not an id ``teamstore export`` makes.
        ExportNotFound: No export is recorded under it.
        StoreUnavailable: The database could not be reached.
    """
    if not made_export_id(export_id):  # not repeated: a user's id typed in the wrong place lands here
        raise InvalidIdentifier("the export id given is not one `teamstore export` makes (`ex-` and 24 hex "
                                "characters)", hint="give the id `teamstore export` printed as it started")
    e = export_requests.c
    query = select(*(e[name] for name in _SHOWN), abandoned(engine.dialect.name).label("abandoned")).where(
        e.export_id == export_id)
    async with _db(engine, "read the export's record") as conn:
        found = (await conn.execute(query)).mappings().first()
    if found is None:
        raise ExportNotFound(f"no export is recorded under {export_id}",
                             hint="check the id; a record is written as the export starts, once its id is printed")
    shown = {name: found[name] for name in _SHOWN} | {"lease_until": utc(found["lease_until"]),
                                                       "detail": fixed_detail(found["detail"])}
    if found["abandoned"]:
        shown |= {"status": ABANDONED, "finished_at": _lease_end(found["lease_until"], found["started_at"]),
                  "detail": abandoned_detail(export_id)}
    return shown | {"started_at": utc(found["started_at"]), "finished_at": utc(shown["finished_at"])}


def without_pseudonyms(manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    """``manifest`` with the session keys and run ids in its transcripts' file names replaced by their order
    (``transcripts/<session_key>/<run_id>.jsonl`` -> ``transcripts/run-1.jsonl``), for a record that an erasure
    unlinks: spans in the tracing backend and objects a legal hold keeps carry the same keys and ids, and the
    record says at whose request the export was made. Sizes and checksums stay."""
    if manifest is None:
        return None
    named = {name for name in manifest.get("files", {}) if _names_a_run(name)} | {
        name for store in manifest.get("stores", {}).values() for name in store.get("files", []) if _names_a_run(name)}
    # Numbered by run, so that the copies of one run (<run_id>.2.jsonl, ...) still read as one run's.
    split = {name: _run_and_ending(name) for name in named}
    order = {run: n for n, run in enumerate(sorted({run for run, _ in split.values()}), start=1)}
    renamed = {name: f"transcripts/run-{order[run]}{ending}" for name, (run, ending) in split.items()}
    stores = {store_name: {**store, "files": [renamed.get(name, name) for name in store.get("files", [])]}
              for store_name, store in manifest.get("stores", {}).items()}
    files = {renamed.get(name, name): entry for name, entry in manifest.get("files", {}).items()}
    return {**manifest, "stores": stores, "files": files}


def _names_a_run(name: str) -> bool:
    return name.startswith("transcripts/") and name.count("/") == 2


# The endings the transcript exporter gives a run's files (teamstore.export.transcripts): which copy
# (.2, .3, ...), a partial write, and the format. Only these are kept: whatever else a name holds goes with it.
_ENDING = re.compile(r"(?:\.[0-9]+)?(?:\.partial)?(?:\.jsonl|\.unreadable\.json)\Z")


def _run_and_ending(name: str) -> tuple[str, str]:
    """``transcripts/<session_key>/<run_id>.2.jsonl`` -> (everything before the ending, ``.2.jsonl``); a name
    whose ending is none of those the exporter gives is all run (an older record's ``.tmp-<run_id>...`` too)."""
    found = _ENDING.search(name, name.rindex("/") + 2)  # the file's name is never only its ending
    return (name[:found.start()], found[0]) if found is not None else (name, "")

