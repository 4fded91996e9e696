"""The transcript exporter: every run of the user, unpacked into JSON lines, with an index.

    from teamstore.export.transcripts import TranscriptExporter

    section = await TranscriptExporter().export(ctx, archive)
    # transcripts/<session_key>/<run_id>.jsonl (run record first, then every item), transcripts/index.json

It reads the objects under the subject's prefix in the store the export talks to and in every other store
the subject's transcripts were recorded going to (``ts_subject_stores``: a service that moved its bucket),
opened by their URL with the process's credentials; one it cannot read fails the export. It takes each
run's current object (a transcript is written once; an earlier version of its key holds the same run). A
store that declares ``Capability.PARTIAL_WRITES`` (the local folder) also hands over the temporary files a
writer killed mid-write left, which hold whole runs too.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from teamstore.audit.subjects import recorded_stores
from teamstore.audit.transcripts import record, transcript_store_from_url
from teamstore.audit.transcripts.base import Capability, TranscriptStore, run_id_of, subject_prefix
from teamstore.audit.transcripts.capabilities import capability
from teamstore.errors import AuditError, TranscriptNotFound
from teamstore.export.base import Archive, ExportContext, Section
from teamstore.export.database import known_sessions


class TranscriptExporter:
    """Every transcript of the subject, as the run record and items it holds."""

    name = "transcripts"

    async def export(self, ctx: ExportContext, archive: Archive) -> Section:
        """Write each run to ``transcripts/<session_key>/<run_id>.jsonl`` and an index of them.

        Raises:
            TranscriptUnavailable: A store could not be listed or read.
            ConfigurationError: A recorded store's URL is not one this process can open.
        """
        index: list[dict[str, Any]] = []
        section = Section()
        if ctx.subject_key is not None:
            sessions_of = await known_sessions(ctx)
            for url in await _other_stores(ctx, ctx.subject_key):
                other = transcript_store_from_url(url)
                try:
                    section = section.plus(await self._store(ctx, other, archive, index, sessions_of))
                finally:
                    await other.close()
            section = section.plus(await self._store(ctx, ctx.transcripts, archive, index, sessions_of))
        return section.plus(archive.add_json("transcripts/index.json", {"runs": index}))

    async def _store(
        self, ctx: ExportContext, store: TranscriptStore, archive: Archive, index: list[dict[str, Any]],
        sessions_of: dict[str, str],
    ) -> Section:
        """Write the subject's runs held in ``store`` (a run another store held too is written once)."""
        assert ctx.subject_key is not None
        prefix = subject_prefix(ctx.subject_key)
        keys = [(key, False) for key in await store.list_keys(prefix)]
        partial = capability(store, Capability.PARTIAL_WRITES)
        if partial is not None:
            keys += [(key, True) for key in await partial.partial_writes(prefix)]
        section, written = Section(), {entry["file"] for entry in index}
        for key, killed in keys:
            try:
                body = await store.get(key)
            except TranscriptNotFound:
                continue  # removed since the listing (its retention ran out): nothing left to hand over
            entry, data = _run_file(key, body, killed)
            if entry["file"] in written:
                continue
            entry.update(session_id=sessions_of.get(entry["session_key"]), store=store.url)
            section = section.plus(archive.add(entry["file"], data, records=1))
            written.add(entry["file"])
            index.append(entry)
        return section


def _run_file(key: str, body: bytes, killed: bool) -> tuple[dict[str, Any], bytes]:
    """The index entry of one stored object and the file it becomes (decoded JSON lines, or the object as
    stored when it does not decode, e.g. a write cut short)."""
    parts = key.split("/")
    session = parts[3] if len(parts) > 4 and parts[2] == "sessions" else "unknown"
    run = run_id_of(key) if not killed else parts[-1]
    entry: dict[str, Any] = {"session_key": session, "run_id": run, "partial_write": killed}
    try:
        header, items = record.decode(body)
    except AuditError as exc:
        entry.update(file=f"transcripts/{session}/{run}.unreadable.json", unreadable=exc.message)
        data = {"as_stored_base64": base64.b64encode(body).decode("ascii"), "why": exc.message}
        return entry, json.dumps(data, indent=2).encode("utf-8")
    entry.update(file=f"transcripts/{session}/{run}.jsonl", started_at=header.get("started_at"), items=len(items))
    lines = [json.dumps(line, ensure_ascii=False, sort_keys=True) for line in (header, *items)]
    return entry, ("\n".join(lines) + "\n").encode("utf-8")


async def _other_stores(ctx: ExportContext, subject_key: str) -> list[str]:
    """The stores recorded for the subject, other than the one the export talks to, that an erasure has not
    emptied (a service that moved its transcripts wrote some to each)."""
    recorded = await recorded_stores(ctx.engine, subject_key)
    return sorted(store for store, erased in recorded.items() if not erased and store != ctx.transcripts.url)
