"""The exporter protocol: one exporter per store, each writing what its store holds about one user.

    from teamstore.export.base import ExportContext, Exporter, Section

    class MemoryExporter:
        name = "memory"

        async def export(self, ctx: ExportContext, archive: Archive) -> Section:
            facts = await read_facts(ctx.engine, ctx.user_id)
            return archive.add_json("memory.json", facts, records=len(facts))

A new store joins the export with one exporter, listed where the composition root builds the export
(``teamstore.app.App.exporter``): the manifest names every store an export covered, so a store left out
shows. An exporter reads everything its store holds for the user (decoded, as JSON a machine can read),
writes it with :meth:`Archive.add_json` or :meth:`Archive.add` (a user's rows that may not fit in memory, with
:func:`add_json_rows`, a row at a time), and raises a ``teamstore.errors`` type when its store cannot be read:
the export then fails as a whole, and leaves no archive.
"""

from __future__ import annotations

import base64
import gzip
import json
import secrets
import zlib
from collections.abc import AsyncIterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, Protocol

from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.prices import PriceTable
from teamstore.audit.transcripts.base import TranscriptStore
from teamstore.errors import KeyDestroyed, PayloadUnreadable
from teamstore.keys.sealed import is_sealed
from teamstore.keys.service import KeyService


@dataclass(frozen=True)
class ExportContext:
    """What every exporter needs: where to look, and whose data to look for.

    Attributes:
        engine: The state database.
        transcripts: The transcript store.
        user_id: The raw user id, matched exactly.
        subject_key: The user's pseudonymous subject key (``None``: the user never ran with audit, or was erased).
        session_secret: The subject's session secret (``None`` with the key), to find the session keys of the
            session ids known; never written to the archive.
        prices: The price table the ledger's costs are worked out with.
        export_id: This export's id (its own record is left out of the user's previous exports).
        keys: Users' data keys: what a store holds sealed is opened before it is written (:meth:`opened`).
    """

    engine: AsyncEngine
    transcripts: TranscriptStore
    user_id: str
    subject_key: str | None
    session_secret: str | None = field(repr=False)
    prices: PriceTable
    export_id: str
    keys: KeyService | None = None

    async def opened(self, body: bytes, context: str) -> tuple[bytes, str | None]:
        """``body`` opened under the user's data key when it is sealed; as stored, with why, when it does not
        open (sealed under a key an erasure destroyed, or damaged). Bytes from before sealing come back as
        they are.

        Raises:
            KeyUnavailable, DataKeyDamaged: The user's key cannot be had now (the export fails as a whole).
        """
        if self.keys is None or not is_sealed(body):
            return body, None
        try:
            return await self.keys.open(self.user_id, body, context), None
        except (KeyDestroyed, PayloadUnreadable) as exc:
            return body, exc.message


class FileEntry(BaseModel):
    """One file of the archive: its size and SHA-256."""

    bytes: int
    sha256: str


class Section(BaseModel):
    """What one store contributed: how many records, in which files, how many bytes."""

    records: int = 0
    bytes: int = 0
    files: list[str] = Field(default_factory=list)

    def plus(self, other: Section) -> Section:
        """Both sections as one (an exporter writing several files)."""
        return Section(records=self.records + other.records, bytes=self.bytes + other.bytes,
                       files=[*self.files, *other.files])


def to_json(data: Any) -> bytes:
    """``data`` as indented UTF-8 JSON, times in ISO 8601 with their UTC offset, keys in a stable order."""
    return (_ENCODER.encode(data) + "\n").encode("utf-8")


_NEXT_ROW = ",\n    "
"""What stands between two rows of :func:`add_json_rows`'s list, as :func:`to_json` writes it."""
_WRITE_BYTES = 1 << 16
"""The rows :func:`add_json_rows` gathers before it writes them (one write each: hashed and compressed at once)."""


async def add_json_rows(archive: Archive, name: str, data: dict[str, Any], key: str,
                        rows: AsyncIterable[dict[str, Any]]) -> Section:
    """Write ``data`` with ``key`` holding the list of ``rows``, the same bytes :meth:`Archive.add_json` writes,
    a row at a time as ``rows`` gives them: a heavy user's states or ledger rows run to gigabytes, and are
    never all in memory at once.

    Returns:
        The file's section, a record per row.

    Raises:
        ExportFailed: The file could not be written.
    """
    # to_json's text split where the list's one item goes; each row stands there as to_json indents an item
    # of that list (a JSON string holds no line break, so indenting every line of the row's text is safe).
    marker = secrets.token_hex(16)
    head, tail = to_json({**data, key: [marker]}).decode("utf-8").split(json.dumps(marker))
    records, gathered, pending = 0, [head], len(head)
    with archive.open(name) as out:
        async for row in rows:
            text = _ENCODER.encode(row).replace("\n", "\n    ")
            gathered += [text] if records == 0 else [_NEXT_ROW, text]
            records, pending = records + 1, pending + len(text)
            if pending >= _WRITE_BYTES:
                out.write("".join(gathered).encode("utf-8"))
                gathered, pending = [], 0
        if records:
            out.write("".join([*gathered, tail]).encode("utf-8"))
        else:
            out.write(to_json({**data, key: []}))
        size = out.size
    return Section(records=records, bytes=size, files=[name])


def _default(value: object) -> object:
    if isinstance(value, datetime):
        # Every stored time is UTC; SQLite hands it back without its zone, which a reader would take for local,
        # and a Postgres session in another zone (teamstore pins its own to UTC) in that zone.
        return (value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)).isoformat()
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "backslashreplace")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


_ENCODER = json.JSONEncoder(default=_default, indent=2, sort_keys=True, ensure_ascii=False)


def as_stored(body: bytes) -> dict[str, str]:
    """Bytes that did not decode as what they should be, in the most readable form they allow: their text
    (ungzipped first if they are gzip), else base64. Handed over, since they may hold the user's words."""
    raw = body
    try:
        raw = gzip.decompress(body)
    except (OSError, EOFError, zlib.error):
        raw = body  # not gzip (or cut short): the bytes as stored
    try:
        return {"as_stored_text": raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {"as_stored_base64": base64.b64encode(body).decode("ascii")}


class FileOut(Protocol):
    """One file of an archive being written (:meth:`Archive.open`)."""

    size: int
    """The bytes written so far."""

    def write(self, data: bytes) -> None:
        """Append ``data`` to the file."""
        ...


class Spool(Protocol):
    """Lines an exporter keeps until its own file can be written (:meth:`Archive.spool`)."""

    def write_line(self, line: bytes) -> None:
        """Append one line (``line`` holds no line break)."""
        ...

    def lines(self) -> Iterator[bytes]:
        """Every line written, in order, without its line break."""
        ...


class Archive(Protocol):
    """Where an export's files go (a zip file or a folder); each file's size and checksum are recorded."""

    def add(self, name: str, data: bytes, records: int = 0) -> Section:
        """Write one file (``name`` relative, ``/``-separated) holding ``records`` records."""
        ...

    def add_json(self, name: str, data: Any, records: int = 0) -> Section:
        """Write ``data`` as JSON (see :func:`to_json`)."""
        ...

    def open(self, name: str) -> AbstractContextManager[FileOut]:
        """Write one file a piece at a time (``with archive.open(name) as out: out.write(...)``)."""
        ...

    def spool(self) -> AbstractContextManager[Spool]:
        """Keep lines out of memory until they can be written (an index of files written meanwhile: only one file
        is written at a time); gone when the block ends."""
        ...


class Exporter(Protocol):
    """One store's part of an export."""

    @property
    def name(self) -> str:
        """The store's name in the manifest."""

    async def export(self, ctx: ExportContext, archive: Archive) -> Section:
        """Write everything the store holds about ``ctx.user_id`` into ``archive``.

        Raises:
            TeamstoreError: The store could not be read (the export fails; no archive is left).
        """


def names(exporters: Sequence[Exporter]) -> list[str]:
    """The stores ``exporters`` cover, in order."""
    return [exporter.name for exporter in exporters]
