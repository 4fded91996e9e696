"""The export coordinator: everything teamstore holds about one user, from every store, as one archive.

    from teamstore.export.coordinator import ExportCoordinator, store_exporters

    coordinator = ExportCoordinator(engine, transcripts, store_exporters(), prices)
    done = await coordinator.run("alice@example.com", Path("alice.zip"), requested_by="ticket 881")
    print(done.manifest.status, done.manifest.stores["transcripts"].records, done.path)

An access request (GDPR art. 15) or a portability request (art. 20). Each exporter writes what its store
holds; then ``README.txt`` says in plain words what each file holds (:mod:`teamstore.export.guide`), and
``manifest.json`` says which stores were covered, how many records and bytes each gave, the
SHA-256 of every file, when, at whose request and by whom. The manifest is also stored as the export's
record (``ts_export_requests``), which names the subject key, never the user id. A store that cannot be
read fails the export as a whole: the archive is removed, never left partial, and the record says where
and the error's type, never its message (raised to the caller only: it may name the archive's path). An
id no store holds anything for (never stored, or erased) gets no archive: its manifest, status
``no_match``, naming every store it searched, is returned and recorded, and says so. An export stopped
midway (Ctrl-C, the CLI's SIGTERM or SIGHUP, its task cancelled) removes the archive too and records
``failed``, saying where it stopped; but one stopped as its outcome is recorded, its archive in place, when the
database does not answer as its failure is recorded either, keeps the archive (its record may say ``exported``)
and says so in the log and to :attr:`ExportCoordinator.kept`. A process killed outright (SIGKILL, out of memory, a
crash, a host lost) stops renewing its record's lease: the next export closes that record as ``failed``, abandoned,
and removes the temporary archive it left beside the same target (named by its export id:
``.<name>.<export id>.partial``). The record is written, and ``opened`` told the export's id, before the temporary
archive is made, so that whatever a killed export leaves can be named.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.prices import PriceTable
from teamstore.audit.subjects import lookup_subject
from teamstore.audit.transcripts.base import TranscriptStore
from teamstore.db.identity import log_name_key
from teamstore.errors import ExportError, ExportFailed, ExportOutcomeUnknown, StoreUnavailable, TeamstoreError
from teamstore.export import requests
from teamstore.export.archive import Writable, check_target, open_archive
from teamstore.export.base import ExportContext, Exporter, FileEntry, Section
from teamstore.export.database import (
    DataKeyRows,
    ExportRows,
    LedgerRows,
    MemoryRows,
    OutboxRows,
    SubjectRows,
    quarantined,
    resume_state,
)
from teamstore.export.guide import GUIDE, guide
from teamstore.export.nearby import check_stored_if_unusable, near_match
from teamstore.export.partials import partial_tags, remove_partial
from teamstore.export.transcripts import TranscriptExporter
from teamstore.ids import check_erasable_id, log_name
from teamstore.keys.service import KeyService
from teamstore.people import check_not_naming, check_person, current_operator

log = logging.getLogger(__name__)
FORMAT = "teamstore-export/1"
MANIFEST = "manifest.json"
# How a stop reaches the export: asyncio.run cancels it on Ctrl-C, and on SIGTERM or SIGHUP, which the CLI hands to
# Ctrl-C's handler (or, with SIGINT ignored, turns into KeyboardInterrupt raised by the event loop); a program that
# raises KeyboardInterrupt from its own handler may have it land in the export's code.
_STOPS = (asyncio.CancelledError, KeyboardInterrupt)
NOT_INCLUDED = (
    "spans in the tracing backend: they carry only the pseudonymous subject key (and no message content unless "
    "content capture was turned on), and teamstore cannot read them back",
    "database backups: copies of the rows above as of when each was taken, kept until they expire",
    "finished erasure requests: a completed request forgets the user id, so nothing links it to this user",
)


def store_exporters() -> list[Exporter]:
    """The exporters of the stores below the export: resume state, quarantine, user memory, transcripts,
    outbox, ledger, earlier exports, the user's data key (that it exists) and the subject mapping (the
    composition root adds the erasure requests')."""
    return [resume_state(), quarantined(), MemoryRows(), TranscriptExporter(), OutboxRows(), LedgerRows(),
            ExportRows(), DataKeyRows(), SubjectRows()]


class Manifest(BaseModel):
    """The archive's ``manifest.json``, also stored as the export's record: no user id, no user content."""

    format: str = FORMAT
    export_id: str
    status: Literal["exported", "no_match"]
    started_at: datetime
    finished_at: datetime
    operator: str
    requested_by: str | None
    stores: dict[str, Section]
    files: dict[str, FileEntry]
    near_match: str | None = None
    not_included: list[str] = Field(default_factory=lambda: list(NOT_INCLUDED))


class Exported(BaseModel):
    """What ``run`` hands back: the manifest, where the archive is, and what its runner should know."""

    manifest: Manifest
    path: Path | None
    """The archive; ``None`` when no store held anything (no archive is written)."""
    warnings: list[str] = Field(default_factory=list)
    """What was found beside the target and left there (another export's temporary archive, still running)."""

    @property
    def matched(self) -> bool:
        """False when no store held anything for the id: no archive was written."""
        return self.manifest.status == "exported"


class ExportCoordinator:
    """Exports users from the stores its exporters read.

    Args:
        engine: The state database (the caller owns it).
        transcripts: The transcript store (the caller owns it).
        exporters: One per store, in the order their files are written; the manifest names each.
        prices: The price table for the ledger's costs.
        keys: Users' data keys, which sealed states and transcripts are opened with; by default the service the
            environment's settings describe.
        keep_out: Folders no archive is written into: those the stores live in (the composition root names them).
        lease_seconds: How long an export is taken for alive after it last renewed its record's lease.
    """

    def __init__(self, engine: AsyncEngine, transcripts: TranscriptStore, exporters: Sequence[Exporter],
                 prices: PriceTable, *, keys: KeyService | None = None, keep_out: Sequence[Path] = (),
                 lease_seconds: float = requests.LEASE_SECONDS) -> None:
        self.engine, self.transcripts, self.exporters, self.prices = engine, transcripts, list(exporters), prices
        self.keys = keys or KeyService.from_settings(engine)
        self.keep_out = list(keep_out)
        self.lease_seconds = lease_seconds
        self.opened: Callable[[str], None] | None = None
        """Told each export's id once its record is written (the CLI prints it: a killed export can be named)."""
        self.warned: Callable[[str], None] | None = None
        """Told at once of each thing found beside the target and left there (another export's temporary archive,
        still running), whatever the export's outcome; an error it raises fails the export before anything is
        recorded or read."""
        self.kept: Callable[[str, Path], None] | None = None
        """Told an export's id and its archive's path when a stop (Ctrl-C, a cancelled task) comes once the archive
        is in place, as its outcome is recorded, and its failure cannot be recorded either: its record may say
        ``exported``, so the archive is kept, and the stop raised as it is (an error this raises is logged, by its
        type, not raised in the stop's place)."""
        # Which process holds its exports' leases (and alone may record how they ended).
        self._owner = f"{socket.gethostname()[:24]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._log_key = ""  # read as a run begins: it keys how log lines name an export
        # The exports whose archive is in place and whose failure is not recorded (yet): their record may say
        # `exported`, so :meth:`run` keeps the archive whatever ends them (a stop, a second one mid-recording).
        self._placed: dict[str, Path] = {}

    async def run(self, user_id: str, output: Path | None = None, *, requested_by: str | None = None,
                  operator: str | None = None) -> Exported:
        """Export ``user_id`` into a new archive at ``output``.

        Args:
            user_id: The raw user id, matched exactly (as an erasure matches it); one no session can have now
                (blank, spaces around it, a control character) only while something is stored under it.
            output: A new ``.zip`` file, or a new folder for any other name; by default
                ``teamstore-export-<export id>.zip`` in the working folder.
            requested_by: Who asked (the data subject, a representative, a ticket): free text, recorded.
            operator: Who runs the export; ``TEAMSTORE_OPERATOR``, else the OS user, when omitted.

        Returns:
            The manifest, the archive's path (``None``, and ``matched`` False, when no store held anything), and
            what was left beside the target (another export's temporary archive, still running).

        Raises:
            InvalidIdentifier: The user id, requested_by or operator cannot be used, or requested_by names the
                user (the record is kept after the user's erasure), or the user id is one no session can have
                and nothing is stored under it.
            ExportTargetExists: ``output`` exists (nothing is overwritten).
            ExportTargetInStore: ``output`` is inside a folder of ``keep_out``.
            ExportFailed: A store could not be read, or the archive written: no archive is left.
            ExportOutcomeUnknown: Recording the outcome failed (the database stopped answering, or a fault),
                and the failure could not be recorded either: the archive is kept, and the record says whether it
                stands.
            StoreUnavailable: The database could not be reached before anything was read.
        """
        check_erasable_id(user_id)
        check_not_naming("requested_by", check_person("requested_by", requested_by), user_id)
        ran_by = current_operator(operator)
        await check_stored_if_unusable(self.engine, user_id)  # before a record or an archive is begun
        self._log_key = self._log_key or await log_name_key(self.engine)  # read while the database answers
        export_id = requests.new_export_id()
        target = output or Path(f"teamstore-export-{export_id}.zip")
        warnings = await self._clear_beside(target, export_id)
        found = await lookup_subject(self.engine, user_id)
        subject = found.key if found is not None else None
        started = await self._open_record(export_id, subject, user_id, (ran_by, requested_by))
        # Made once the record is written, which names it: a kill from here on leaves both, found by the same id.
        async with self._failure_recorded(export_id, "the archive", "as it began"):
            archive = open_archive(target, self.keep_out, export_id)
        kept = False
        try:
            ctx = ExportContext(self.engine, self.transcripts, user_id, subject,
                                found.session_secret if found is not None else None, self.prices, export_id, self.keys)
            async with self._keeping_lease(export_id) as lost:
                manifest = await self._write(ctx, archive, started, (ran_by, requested_by), lost)
            kept = True
        except ExportOutcomeUnknown:  # its record may say `exported`: the archive it names stays
            kept = True
            raise
        finally:
            # In place, its failure not recorded: ended by a stop, perhaps as that failure was being recorded (a
            # database that hangs draws a second Ctrl-C), its record may say `exported`, so the archive stays.
            if export_id in self._placed and not kept:
                kept = True
                self._keep_placed(export_id, archive.target)
            self._placed.pop(export_id, None)
            if not kept:
                _remove(archive)
        return Exported(manifest=manifest, path=archive.target if manifest.status == "exported" else None,
                        warnings=warnings)

    async def _clear_beside(self, target: Path, export_id: str) -> list[str]:
        """Close the abandoned records, remove what exports over left beside ``target``, then refuse a target that
        cannot be used; what the export's runner should know of what was left there (told to :attr:`warned` at
        once). The clean-up comes first: the target an export killed outright was given may be taken since (by
        the export run again at once). A target with no name (``.``, ``/``) has nothing beside it of its own."""
        await requests.close_abandoned(self.engine)
        warnings = await self._remove_left_partials(target, export_id) if target.name else []
        for warning in warnings:
            if self.warned is not None:
                self.warned(warning)
        check_target(target, self.keep_out)
        return warnings

    async def _open_record(self, export_id: str, subject: str | None, user_id: str,
                           people: tuple[str, str | None]) -> datetime:
        """Record that the export starts, under its lease, and tell :attr:`opened` its id; when it started.
        ``people`` is who runs it and who asked for it. A failure from then on is recorded."""
        try:
            started = await requests.open_export(self.engine, export_id, subject, user_id=user_id,
                                                 requested_by=people[1], operator=people[0], owner=self._owner,
                                                 lease_seconds=self.lease_seconds)
        except _STOPS:  # the record may have been written just before the stop
            await self._stopped(export_id, "as it began")
            raise
        except Exception as exc:  # written, perhaps, and its answer lost (the connection dropped after the commit)
            # Not recorded (the database gone, or no record yet: an insert still on its way finds none to fail):
            # the id is named, as nothing else has said it.
            if await self._record_failure(export_id, f"as it began: {type(exc).__name__}") is not True and isinstance(
                    exc, StoreUnavailable):
                raise _open_unknown(export_id, exc) from exc
            raise
        if self.opened is not None:
            async with self._failure_recorded(export_id, "as it began", "as it began"):
                self.opened(export_id)
        return started

    @asynccontextmanager
    async def _failure_recorded(self, export_id: str, where: str, stopped: str) -> AsyncIterator[None]:
        """Record a failure in the block as the export's, ``where`` it came, and a stop as ``stopped`` there (the
        error raised as it is), so that its record does not say ``running`` until its lease passes, as if killed."""
        try:
            yield
        except _STOPS:
            await self._stopped(export_id, stopped)
            raise
        except Exception as exc:
            await self._record_failure(export_id, f"{where}: {type(exc).__name__}")
            raise

    async def _write(self, ctx: ExportContext, archive: Writable, started: datetime, people: tuple[str, str | None],
                     lost: asyncio.Event) -> Manifest:
        """Every store, then the manifest, then the archive moved into place, then the record; a failure is
        recorded, and once it is, the caller (:meth:`run`) removes an archive placed; while it is not, the archive
        stays. ``people`` is who runs the export and who asked for it; ``lost`` is set once its lease is (its record
        closed as abandoned: it stops at the next store)."""
        store, recording = "the archive", False
        try:
            stores: dict[str, Section] = {}
            for exporter in self.exporters:
                store = exporter.name
                if lost.is_set():
                    raise requests.abandoned_while_running(ctx.export_id)
                stores[store] = await exporter.export(ctx, archive)
            store = "the archive"
            manifest = await self._manifest(ctx, stores, archive, started, people)
            if manifest.status == "exported":
                # On disk and in place before the record says so: a process killed before the record is written
                # leaves it `running`, where the documented clean-up looks (an abort after this removes it).
                archive.commit()
                self._placed[ctx.export_id] = archive.target  # kept, until its failure is recorded (:meth:`run`)
            else:
                archive.abort()
            recording = True
            await requests.finish_export(ctx.engine, ctx.export_id, manifest.status, manifest.model_dump(mode="json"),
                                         owner=self._owner)
        except _STOPS:
            # As for a failure below: in place, the outcome perhaps committed before the stop, and the failure not
            # recorded over it, the record may say `exported`, so the archive it names stays (:meth:`run`).
            where = "as its outcome was recorded" if recording else f"while reading {store}"
            if await self._stopped(ctx.export_id, where, placed=archive.placed) is not None:
                self._placed.pop(ctx.export_id, None)
            raise
        except TeamstoreError as exc:
            recorded = await self._failed(ctx.export_id, store, exc)
            if recorded is not None:  # recorded (or closed as abandoned): the archive goes
                self._placed.pop(ctx.export_id, None)
            if recorded is None and archive.placed:  # the outcome sent, perhaps committed: the record may stand
                raise _outcome_unknown(ctx.export_id, archive.target, exc) from exc
            if recorded is False:  # closed meanwhile: what failed came of that
                raise requests.abandoned_while_running(ctx.export_id) from exc
            if isinstance(exc, ExportError):
                raise
            raise ExportFailed(
                f"the export could not read {store} ({type(exc).__name__}: {exc.message}); no archive was written",
                hint=exc.hint or "fix the store, then export again",
            ) from exc
        except Exception as exc:  # a fault no store turned into a typed error: recorded all the same, raised as it is
            if (recorded := await self._record_failure(ctx.export_id, f"{store}: {type(exc).__name__}")) is not None:
                self._placed.pop(ctx.export_id, None)
            if recorded is None and archive.placed:  # as for a typed error: the record may stand, and is named
                raise _outcome_unknown(ctx.export_id, archive.target, exc) from exc
            raise
        return manifest

    @asynccontextmanager
    async def _keeping_lease(self, export_id: str) -> AsyncIterator[asyncio.Event]:
        """Renew the record's lease every third of its length while the body runs, as the erasure's coordinator
        does: a record whose lease has passed is taken for an export killed outright, and closed. The event
        yielded is set once a renewal finds the record closed so."""
        lost = asyncio.Event()
        keeper = asyncio.create_task(self._keep_lease(export_id, lost))
        try:
            yield lost
        finally:
            keeper.cancel()
            with suppress(asyncio.CancelledError):
                await keeper

    async def _keep_lease(self, export_id: str, lost: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                if not await requests.renew(self.engine, export_id, self._owner, self.lease_seconds):
                    log.error("export %s: its record was closed as abandoned", log_name(export_id, self._log_key))
                    lost.set()  # the export stops at its next store, and its archive is removed
                    return
            except StoreUnavailable as exc:  # the exporters meet the same database and fail with their own error
                log.warning("export %s: could not renew its lease; retrying: %s", log_name(export_id, self._log_key),
                            exc.message)

    async def _remove_left_partials(self, target: Path, like: str) -> list[str]:
        """Remove the temporary archives that exports now over left beside ``target``: only those named
        ``.<name>.<export id>.partial`` whose record is no longer ``running`` (teamstore made them; it never
        removes a file it did not): killed outright, its record closed as abandoned, or killed as it removed its
        own after recording its failure. One whose export is still running (its lease holds) is left, and said
        (``like`` is an export id: the temporary names of all are cut alike)."""
        tags = [tag for tag in partial_tags(target, like) if requests.made_export_id(tag)]
        over, running = await requests.over_or_running(self.engine, tags)
        for export_id in over:
            if remove_partial(target, export_id):
                log.warning("export %s: removed the temporary archive it left (killed outright)",
                            log_name(export_id, self._log_key))
        return [f"{requests.partial_name(export_id)} beside the target is the temporary archive of export "
                f"{export_id}, still running (its lease holds): it is left there; if that export was killed, the "
                f"next export to this target removes it once its lease passes (`teamstore export status "
                f"{export_id}` says when)" for export_id in sorted(running)]

    @staticmethod
    async def _manifest(ctx: ExportContext, stores: dict[str, Section], archive: Writable, started: datetime,
                        people: tuple[str, str | None]) -> Manifest:
        """The manifest (written into the archive when a store held anything); ``people`` is who ran the export
        and who asked for it."""
        matched = any(section.records for section in stores.values())
        if not matched:  # nothing to hand over: the stores searched are the answer, and no archive is left
            stores = {name: Section() for name in stores}
        else:  # written before the manifest, which gives its SHA-256 as every other file's
            archive.add(GUIDE, guide(archive.files))
        manifest = Manifest(
            export_id=ctx.export_id, status="exported" if matched else "no_match", started_at=started,
            finished_at=datetime.now(UTC), operator=people[0], requested_by=people[1], stores=stores,
            files=dict(archive.files) if matched else {},
            near_match=None if matched else await near_match(ctx.engine, ctx.user_id))
        if matched:
            archive.add_json(MANIFEST, manifest.model_dump(mode="json"))
        return manifest

    async def _failed(self, export_id: str, store: str, exc: TeamstoreError) -> bool | None:
        """Record where the export failed and the error's type, never its message: that names the archive's
        path (which often names the user) or an object key (which names the subject), and the record outlives
        the user's erasure. The message reaches whoever ran the export, with the error raised. As
        :meth:`_record_failure` says whether it was recorded."""
        return await self._record_failure(export_id, f"{store}: {type(exc).__name__}")

    def kept_if_ended_now(self) -> list[tuple[str, Path]]:
        """The exports (their id and archive's path) whose archive is in place and whose failure is not recorded:
        kept if they end now, whatever ends them (a caller stopped before :meth:`run` returns, by a third Ctrl-C
        as the second one's stop is still being handled, says so from this). A snapshot: it holds while the export's
        task never runs again (its loop closed, as ``asyncio.run``'s is), since a failure recorded later removes it."""
        return sorted(self._placed.items())

    async def _stopped(self, export_id: str, where: str, *, placed: bool = False) -> bool | None:
        """Record that the export was stopped ``where`` (``while reading transcripts``), so its record does not
        say ``running`` for ever; as :meth:`_record_failure`, whether it was recorded. Once recorded (or the record
        closed as abandoned) the archive is removed on the way out, as for any failure; unrecorded, an archive in
        place (``placed``) is kept (:meth:`run`), and since the record may have been written with its answer lost,
        its detail says so."""
        left = ("its archive was removed, unless the database did not confirm this record, in which case the export "
                "said where it kept the archive: delete that archive, then") if placed else "no archive was left;"
        return await self._record_failure(export_id, f"stopped {where} (Ctrl-C, SIGTERM or SIGHUP, or its task "
                                                     f"was cancelled): {left} export again")

    def _keep_placed(self, export_id: str, target: Path) -> None:
        """Keep the archive in place at ``target`` of an export ended (stopped) as its outcome was recorded, its
        failure unrecorded: said in the log and to :attr:`kept`. The log names the export as every line does, and not
        the path, which whoever ran the export gave (often the user's name): logs are shipped off the host and
        outlive the user's erasure; :attr:`kept` is told it. What ended the export is raised after this whatever it
        meets: cancellation must go on."""
        named = log_name(export_id, self._log_key)  # an id teamstore made: as it is, for `export status`
        log.warning("export %s: stopped as its outcome was recorded, and its failure could not be recorded: its "
                    "record may say `exported`, so its archive is kept at the target it was given; once the database "
                    "answers, `teamstore export status %s` says whether it is whole (`exported`), else delete it",
                    named, named)
        if self.kept is None:
            return
        try:
            self.kept(export_id, target)
        except Exception as exc:  # the stop goes on, not this: its type logged (its message may name the user)
            log.error("export %s: could not say where its kept archive is: %s", named, type(exc).__name__)

    async def _record_failure(self, export_id: str, detail: str) -> bool | None:
        """Record the export's failure, over an outcome this process recorded (its acknowledgement lost, and its
        archive about to be removed once this is recorded): True once recorded, False when its record was closed as
        abandoned instead, None when the database did not answer (only logged)."""
        try:
            return await requests.fail_export(self.engine, export_id, detail, owner=self._owner)
        except StoreUnavailable as recording:
            log.warning("export %s: could not record its failure: %s", log_name(export_id, self._log_key),
                        recording.message)
            return None


def _open_unknown(export_id: str, exc: StoreUnavailable) -> StoreUnavailable:
    """The failure of an export whose record may have been written before the database stopped answering, when
    its failure could not be recorded either: the id is named, since nothing else has said it yet."""
    return StoreUnavailable(
        f"{exc.message}; the record of the export {export_id} may have been written all the same (nothing was read "
        "and no archive begun)",
        hint=f"check the database, then export again; `teamstore export status {export_id}` says whether a record "
             "was left: one `running` reads as abandoned once its lease passes, and the next export closes it")


def kept_archive_hint(export_id: str) -> str:
    """What to do with an archive kept while its record may say ``exported``."""
    return (f"once the database answers, run `teamstore export status {export_id}`: `exported` means the archive is "
            "whole (its manifest.json lists every file, with its SHA-256); anything else, delete it and export again")


def _remove(archive: Writable) -> None:
    """Remove the archive to its end: a Ctrl-C that comes meanwhile (a second one, as a large folder goes) is raised
    once it is gone, not in the middle, which would leave part of the user's data at the target, told removed."""
    stopped: KeyboardInterrupt | None = None
    while True:
        try:
            archive.abort()  # each step again from where it stopped: what is gone already is passed over
        except KeyboardInterrupt as stop:
            stopped = stop
            continue
        break
    if stopped is not None:
        raise stopped


def _outcome_unknown(export_id: str, target: Path, exc: Exception) -> ExportOutcomeUnknown:
    """The failure of an export whose archive is in place when neither its outcome's acknowledgement nor its
    failure could be recorded: its record may say ``exported``, and so the archive is kept. An untyped fault is
    named by its type alone (its message may quote a value)."""
    if isinstance(exc, TeamstoreError):
        how = (f"the database stopped answering as its outcome was recorded ({type(exc).__name__}: {exc.message}) "
               "and as its failure was")
    else:
        how = (f"recording its outcome failed ({type(exc).__name__}), and the database did not answer as its failure "
               "was recorded")
    unknown = ExportOutcomeUnknown(
        f"the export {export_id} placed its archive at {target}, then {how}: its record may say `exported` or still "
        "`running`, and the archive is kept where it is",
        hint=kept_archive_hint(export_id))
    unknown.export_id, unknown.target = export_id, target
    return unknown
