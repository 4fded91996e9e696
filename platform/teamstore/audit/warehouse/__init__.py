"""Export the usage ledger as Parquet, one file per day, for a warehouse (Athena, Trino, Spark, DuckDB).

    from teamstore.audit.warehouse import destination_from_url, export_ledger

    sink = destination_from_url("s3://warehouse/teamstore/ledger")      # or a folder
    report = await export_ledger(engine, sink, since=date(2026, 11, 1), until=date(2026, 12, 1))

Files go to Hive-style paths, ``day=2026-11-30/part-00000.parquet``: a day's rows are one file whose name
never changes, so exporting a day again replaces it whole (a rename in a folder, one PUT on S3), and a
reader sees the old file or the new one. Days of the window with no rows are left as they are: an export
never deletes, so a warehouse keeps the days the ledger's retention has since swept.

Only what the ledger holds goes out: pseudonymous keys (``subject_key``, ``session_key``), never a raw
user or session id and never the subject mapping; token counts, never costs (join a price table in the
warehouse, as ``teamstore cost`` does at query time). An erased user's rows are exported as the ledger
holds them then: ``subject_key`` null, the session key replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.schema import usage
from teamstore.audit.warehouse.base import PartitionSink
from teamstore.audit.warehouse.parquet import COLUMNS, PartitionWriter
from teamstore.db.engine import describe_failure
from teamstore.errors import ConfigurationError, LedgerExportFailed, StoreUnavailable, refused_value

BATCH_ROWS = 50_000
"""Rows fetched and written at a time: a day of any size is exported in bounded memory."""
PART = "part-00000.parquet"


@dataclass
class Partition:
    """One day written."""

    day: date
    key: str
    rows: int
    bytes: int


@dataclass
class ExportReport:
    """What an export wrote, and where."""

    destination: str
    since: date | None
    until: date | None
    partitions: list[Partition] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        """Rows written over every partition."""
        return sum(p.rows for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {"destination": self.destination, "since": self.since, "until": self.until, "rows": self.rows,
                "bytes": sum(p.bytes for p in self.partitions), "seconds": round(self.seconds, 3),
                "partitions": [vars(p) for p in self.partitions]}


def partition_key(day: date) -> str:
    """The file of ``day``'s rows, relative to the destination."""
    return f"day={day.isoformat()}/{PART}"


_DESTINATIONS = "a folder, a file:/// URL or s3://bucket/prefix"


def destination_from_url(url: str) -> PartitionSink:
    """The destination ``url`` names: ``s3://bucket/prefix``, ``file:///folder`` or a folder's path.

    Raises:
        ConfigurationError: An empty destination, a file URL that names no folder (``file://name``, where the
            name is taken for a host), an S3 URL without a bucket, or another scheme.
        MissingExtra: S3 without boto3.
    """
    if not url.strip():
        raise ConfigurationError("no destination given for the export",
                                 hint="give a folder, a file:/// URL or s3://bucket/prefix")
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ConfigurationError(refused_value("--to", takes=f"{_DESTINATIONS}; this S3 URL names no bucket"),
                                     hint="e.g. --to s3://warehouse/teamstore/ledger")
        from teamstore.audit.warehouse.s3 import S3Partitions

        return S3Partitions.from_url(parsed.netloc, parsed.path)
    if parsed.scheme in ("", "file"):
        from teamstore.audit.warehouse.local import LocalPartitions

        folder = _folder(parsed.netloc, unquote(parsed.path)) if parsed.scheme else url
        return LocalPartitions(Path(folder).expanduser())
    # Not even its scheme is repeated: `--to alice:x` parses as one, and it may be a user's id.
    raise ConfigurationError(refused_value("--to", takes=_DESTINATIONS),
                             hint="e.g. --to ./warehouse/ledger or --to s3://warehouse/teamstore/ledger")


def _folder(host: str, path: str) -> str:
    # file://warehouse reads as the host "warehouse" and no path: the files went to the working directory,
    # and file://host/srv/x to /srv/x on this machine, with the export reported done.
    if host not in ("", "localhost") or not path:
        raise ConfigurationError(
            "the destination names no folder: a file URL has three slashes before an absolute path",
            hint="give file:///srv/warehouse/ledger, or a plain path",
        )
    return path


async def export_ledger(
    engine: AsyncEngine, sink: PartitionSink, since: date | None = None, until: date | None = None
) -> ExportReport:
    """Write each day of ``[since, until)`` that has ledger rows as one Parquet file, replacing any.

    Args:
        engine: The state database.
        sink: Where the files go (:func:`destination_from_url`).
        since: The first day (``None``: the ledger's first).
        until: The day after the last (``None``: up to and including the ledger's last, today's rows
            so far included; export it again tomorrow and its file is replaced whole).

    Returns:
        The partitions written, in day order, with rows, bytes and the time taken.

    Raises:
        StoreUnavailable: The ledger could not be read. LedgerExportFailed: a partition could not be written
            (those before it are written; run the same export again).
    """
    started = time.perf_counter()
    report = ExportReport(sink.url, since, until)
    for day in await _days(engine, since, until):
        report.partitions.append(await _export_day(engine, sink, day))
    report.seconds = time.perf_counter() - started
    return report


def _window(query: Any, since: date | None, until: date | None) -> Any:
    if since is not None:
        query = query.where(usage.c.day >= since)
    if until is not None:
        query = query.where(usage.c.day < until)
    return query


async def _days(engine: AsyncEngine, since: date | None, until: date | None) -> list[date]:
    query = _window(select(usage.c.day).distinct(), since, until).order_by(usage.c.day)
    try:
        async with engine.connect() as conn:
            found = (await conn.execute(query)).scalars().all()
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"could not read the usage ledger: {describe_failure(exc)}",
                               hint="check the database; run `teamstore db upgrade` if ts_usage is missing") from exc
    return [d if isinstance(d, date) else date.fromisoformat(str(d)) for d in found]


async def _export_day(engine: AsyncEngine, sink: PartitionSink, day: date) -> Partition:
    key = partition_key(day)
    staged = await asyncio.to_thread(sink.stage, key)
    columns = [usage.c[name] for name, _ in COLUMNS]
    order = (usage.c.started_at, usage.c.run_id, usage.c.attempt, usage.c.agent, usage.c.model, usage.c.purpose)
    query = select(*columns).where(usage.c.day == day).order_by(*order).execution_options(yield_per=BATCH_ROWS)
    try:
        writer = await asyncio.to_thread(PartitionWriter, staged)
    except OSError as exc:
        await asyncio.to_thread(sink.discard, staged)
        raise _unwritable(day, exc) from exc
    try:
        async with engine.connect() as conn:
            result = await conn.stream(query)
            async for rows in result.partitions(BATCH_ROWS):
                await asyncio.to_thread(writer.write, rows)
        await asyncio.to_thread(writer.close)
    except SQLAlchemyError as exc:
        await asyncio.to_thread(_abandon, writer, sink, staged)
        raise StoreUnavailable(f"could not read the ledger's rows of {day}: {describe_failure(exc)}",
                               hint="check the database, then export again (written days are replaced)") from exc
    except OSError as exc:  # the disk full, the folder's permissions changed
        await asyncio.to_thread(_abandon, writer, sink, staged)
        raise _unwritable(day, exc) from exc
    except BaseException:
        await asyncio.to_thread(_abandon, writer, sink, staged)
        raise
    size = staged.stat().st_size
    await asyncio.to_thread(sink.commit, key, staged)
    return Partition(day, key, writer.rows, size)


def _abandon(writer: PartitionWriter, sink: PartitionSink, staged: Path) -> None:
    with contextlib.suppress(OSError):  # closing flushes: on a full disk that fails too
        writer.close()
    sink.discard(staged)


def _unwritable(day: date, exc: OSError) -> LedgerExportFailed:
    return LedgerExportFailed(f"could not write the partition of {day}: {exc.strerror or exc}",
                              hint="check the destination's permissions and free space, then export again "
                              "(days written before it stand; a rerun replaces them)")


__all__ = ["ExportReport", "Partition", "PartitionSink", "destination_from_url", "export_ledger", "partition_key"]
