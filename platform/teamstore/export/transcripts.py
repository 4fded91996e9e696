"""The transcript exporter: every copy of every run of the user, unpacked into JSON lines, with an index.

    from teamstore.export.transcripts import TranscriptExporter

    section = await TranscriptExporter().export(ctx, archive)
    # transcripts/<session_key>/<run_id>.jsonl (run record first, then every item), transcripts/index.json

It reads the objects under the subject's prefix in the store the export talks to and in every other store
the subject's transcripts were recorded going to (``ts_subject_stores``: a service that moved its bucket),
opened by their URL with the process's credentials; one it cannot read fails the export. What a store
still keeps is handed over, not only what it shows: a store that declares ``Capability.VERSIONS`` (a
versioned bucket) gives every earlier version, those under a delete marker included (a transcript
retention removed stays a version until the bucket's rule expires it), and one that declares
``Capability.PARTIAL_WRITES`` (the local folder) the temporary files a writer killed mid-write left. A copy
whose bytes another copy of the same run already gave is written once; each other copy gets a file of its
own (``<run_id>.2.jsonl``, ...) and says in the index what it is (``current``, ``earlier_version``,
``partial_write``). A partial write is named by the run it was being written for, its file marked
(``<run_id>.partial.jsonl``).

No copy waits in memory for another: earlier versions are listed a page at a time (two pages held,
:meth:`~teamstore.audit.transcripts.capabilities.Versions.version_pages`) and each copy is written as it is read;
the index's entries wait in the archive's spool (an unnamed file, gone when the export ends however it ends) and
are written into ``transcripts/index.json`` last, a few at a time. What still grows with the subject's history
is a few hundred bytes a copy: its key among the current objects listed, its digest (a copy is written once) and
its file's line in the manifest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from teamstore.audit.placement import described, endpoint_setting, unmarked_elsewhere
from teamstore.audit.subjects import recorded_endpoints, recorded_stores
from teamstore.audit.transcripts import record, transcript_store_from_url
from teamstore.audit.transcripts.base import Capability, TranscriptStore, run_id_of, subject_prefix
from teamstore.audit.transcripts.capabilities import Versions, capability, missing_here
from teamstore.audit.transcripts.local import TMP_PREFIX
from teamstore.errors import AuditError, TranscriptNotFound, TranscriptUnavailable
from teamstore.export.base import Archive, ExportContext, Section, Spool, add_json_rows, as_stored
from teamstore.export.database import known_sessions

Copy = Literal["current", "earlier_version", "partial_write"]
INDEX = "transcripts/index.json"
PARTIAL = ".partial"
"""Marks the file of a write a killed writer left unfinished: ``<run_id>.partial.jsonl``."""


@dataclass
class _Runs:
    """What the export has written so far: the index, and which bytes of which run it holds already."""

    sessions_of: dict[str, str]
    index: Spool  # an entry a line, until the index is written: a heavy user's would not fit in memory
    seen: set[tuple[str, str]] = field(default_factory=set)  # (key, sha256): the same bytes are written once
    copies: dict[str, int] = field(default_factory=dict)  # files written per run (its stem), so far


class TranscriptExporter:
    """Every transcript of the subject, as the run record and items it holds."""

    name = "transcripts"

    async def export(self, ctx: ExportContext, archive: Archive) -> Section:
        """Write each copy of each run to ``transcripts/<session_key>/<run_id>.jsonl`` and an index of them.

        Raises:
            TranscriptUnavailable: A store could not be listed or read, or a recorded folder is not on this
                machine.
            ConfigurationError: A recorded store's URL is not one this process can open.
        """
        with archive.spool() as index:
            runs = _Runs(await known_sessions(ctx), index)
            section = Section() if ctx.subject_key is None else await self._stores(ctx, ctx.subject_key, archive, runs)
            written = await add_json_rows(archive, INDEX, {}, "runs", _entries(index.lines()))
        return section.plus(written.model_copy(update={"records": 0}))  # the index's entries are not records

    async def _stores(self, ctx: ExportContext, subject_key: str, archive: Archive, runs: _Runs) -> Section:
        """Every store the subject's transcripts were recorded going to, the export's own last."""
        section = Section()
        recorded = await _recorded_stores(ctx, subject_key)
        for url in (store for store in recorded if store != ctx.transcripts.url):
            other = transcript_store_from_url(url)
            try:
                await _check_here(ctx, subject_key, other)
                section = section.plus(await self._store(ctx, subject_key, other, archive, runs))
            finally:
                await other.close()
        if ctx.transcripts.url in recorded:
            await _check_here(ctx, subject_key, ctx.transcripts)
        return section.plus(await self._store(ctx, subject_key, ctx.transcripts, archive, runs))

    async def _store(self, ctx: ExportContext, subject_key: str, store: TranscriptStore, archive: Archive,
                     runs: _Runs) -> Section:
        """Write the subject's copies held in ``store`` that no earlier copy gave byte for byte, each opened
        under the user's data key."""
        section = Section()
        async for key, copy, version_id, body in _copies(store, subject_prefix(subject_key)):
            digest = hashlib.sha256(body).hexdigest()
            if (key, digest) in runs.seen:
                continue
            runs.seen.add((key, digest))
            plain, why = await ctx.opened(body, record.sealed_context(_sealed_for(key, copy)))
            entry, data = _run_file(key, plain, copy, why)
            entry["file"] = _file_name(runs.copies, entry.pop("stem"), entry.pop("suffix"))
            entry.update(session_id=runs.sessions_of.get(entry["session_key"]), store=store.url,
                         version_id=version_id, sha256_as_stored=digest)
            section = section.plus(archive.add(entry["file"], data, records=1))
            runs.index.write_line(json.dumps(entry, ensure_ascii=False).encode("utf-8"))
        return section


async def _entries(lines: Iterable[bytes]) -> AsyncIterator[dict[str, Any]]:
    """The index's entries, back from the spool."""
    for line in lines:
        yield json.loads(line)


async def _copies(store: TranscriptStore, prefix: str) -> AsyncIterator[tuple[str, Copy, str | None, bytes]]:
    """Every copy under ``prefix`` the store still holds: current objects first, then earlier versions (a listing
    page at a time, each read as it comes) and partial writes. A copy removed since the listing (its retention ran
    out) is skipped."""
    for key in await store.list_keys(prefix):
        try:
            yield key, "current", None, await store.get(key)
        except TranscriptNotFound:
            continue
    versions = capability(store, Capability.VERSIONS)
    if versions is not None:
        async for earlier in _versions(versions, prefix):
            yield earlier
    partial = capability(store, Capability.PARTIAL_WRITES)
    if partial is not None:
        for key in await partial.partial_writes(prefix):
            try:
                yield key, "partial_write", None, await store.get(key)
            except TranscriptNotFound:
                continue


async def _versions(versions: Versions, prefix: str) -> AsyncIterator[tuple[str, Copy, str | None, bytes]]:
    """Every version under ``prefix`` (the current ones too, which the caller has written already), each read as
    its listing page comes: a versioned bucket may hold a user's history many times over."""
    async for page in versions.version_pages(prefix):
        for version in page:
            if version.delete_marker:
                continue
            try:
                yield version.key, "earlier_version", version.version_id, await versions.read_version(version)
            except TranscriptNotFound:
                continue


def _file_name(copies: dict[str, int], stem: str, suffix: str) -> str:
    """``stem + suffix`` for a run's first copy, ``stem.2 + suffix`` for its second, and so on."""
    copies[stem] = n = copies.get(stem, 0) + 1
    return stem + suffix if n == 1 else f"{stem}.{n}{suffix}"


def _sealed_for(key: str, copy: Copy) -> str:
    """The object key a copy was sealed for: its own, or for a killed writer's temporary file
    (``.tmp-<name>.<random>`` beside it) the key it was being written to."""
    if copy != "partial_write":
        return key
    folder, _, name = key.rpartition("/")
    return f"{folder}/{name.removeprefix(TMP_PREFIX).rsplit('.', 1)[0]}"


def _run_file(key: str, body: bytes, copy: Copy, unopened: str | None = None) -> tuple[dict[str, Any], bytes]:
    """The index entry of one stored copy and the file it becomes (decoded JSON lines, or the bytes as
    stored when they do not open or decode, e.g. a write cut short)."""
    parts = key.split("/")
    session = parts[3] if len(parts) > 4 and parts[2] == "sessions" else "unknown"
    # A killed writer's temporary file is named by the run it was written for, not its own (hidden) name.
    run = run_id_of(_sealed_for(key, copy))
    marked = PARTIAL if copy == "partial_write" else ""
    entry: dict[str, Any] = {"session_key": session, "run_id": run, "copy": copy, "stem": f"transcripts/{session}/{run}"}
    try:
        if unopened is not None:
            raise AuditError(unopened)
        header, items = record.decode(body)
    except AuditError as exc:
        entry.update(suffix=f"{marked}.unreadable.json", unreadable=exc.message)
        data = {**as_stored(body), "why": exc.message}
        return entry, json.dumps(data, indent=2).encode("utf-8")
    entry.update(suffix=f"{marked}.jsonl", started_at=header.get("started_at"), items=len(items))
    lines = [json.dumps(line, ensure_ascii=False, sort_keys=True) for line in (header, *items)]
    return entry, ("\n".join(lines) + "\n").encode("utf-8")


async def _recorded_stores(ctx: ExportContext, subject_key: str) -> list[str]:
    """The stores recorded for the subject that an erasure has not emptied (a service that moved its
    transcripts wrote some to each)."""
    recorded = await recorded_stores(ctx.engine, subject_key)
    return sorted(store for store, erased in recorded.items() if not erased)


async def _check_here(ctx: ExportContext, subject_key: str, store: TranscriptStore) -> None:
    """Refuse a store the subject's transcripts were written to that this export cannot reach: a folder this
    machine does not have (the workers' own disk, seen from another host), or a bucket reached at another S3
    endpoint than its writers' that carries no mark of this database (another server's bucket of the same name).
    Listed, it would give nothing, as if the user had no transcript there. A store that holds none of the
    subject's (swept) gives nothing, rightly.

    Raises:
        TranscriptUnavailable: The folder is not here, or the bucket may be another one.
        StoreUnavailable: The database could not be reached.
    """
    if await missing_here(store):
        raise TranscriptUnavailable(
            f"this user's transcripts were written to {store.url}, a folder this machine does not have",
            hint="run the export on the machine whose folder that is (or where it is mounted at the same path)",
        )
    recorded = (await recorded_endpoints(ctx.engine, subject_key)).get(store.url)
    if (found := await unmarked_elsewhere(store, ctx.engine, recorded)) is not None:
        raise TranscriptUnavailable(
            f"this user's transcripts were written to {store.url} at {described(recorded)}; this export reaches a "
            f"bucket of that name at {described(found.endpoint)}, which {found.why}: it may be another server's "
            "bucket, and the export would miss them",
            hint=f"run the export with {endpoint_setting(recorded)}; if no server answers there any more and this "
            f"bucket is the one its workers wrote to, `teamstore transcripts mark --as-reached-at {recorded}` says so",
        )
