"""Every place teamstore, AutoGen or a host can leave data, as something to search.

A sink is anything with a ``name`` and a ``read()`` that yields ``(location, bytes)`` pairs; the scan
searches each pair (and its gzip or zlib layers) for every canary. A new store or a new kind of export
joins the suite with one class here and one entry where the deployment lists its sinks
(``Deployment.sinks``); what it may legitimately hold goes in ``policy.POLICY``.

    class LogsSink:
        name = "logs"
        def read(self) -> Iterator[tuple[str, bytes]]:
            yield "otlp /v1/logs", receiver.bodies_at("/v1/logs")

Sinks read with their own drivers (``sqlite3``, ``psycopg``, ``boto3``, ``git``), never through the code
under test, so a bug in a teamstore reader cannot hide what a store holds.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.canary.receiver import CanaryReceiver
from tests.services import postgres_server_log

Blob = tuple[str, bytes]

FILES, GIT, DATABASE, SERVER_LOG, S3 = "files", "git", "database", "postgres server log", "s3"
SPANS, HOST_SPANS, METRICS = "spans (teamstore's provider)", "spans (host's global provider)", "metrics"
CLI_STDERR, PY_LOGGING, HOST_LOGS = "cli stderr", "python logging", "logs (host's logger provider)"
EXPORTS = "ledger exports (parquet, decoded)"


class Sink(Protocol):
    """Something to search: ``read()`` yields ``(location, data)`` pairs."""

    name: str

    def read(self) -> Iterator[Blob]:
        """Every piece of data the sink holds now, with where it was found."""
        ...


def _text(value: Any) -> bytes:
    """A database cell as bytes: binary as is, JSON as JSON (UTF-8), anything else as its text."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")
    return str(value).encode("utf-8", "surrogatepass")


class HomeFiles:
    """Every file under a folder (``TEAMSTORE_HOME``), as raw bytes: temporary files, SQLite's ``-wal`` and
    ``-shm`` and free pages, git's objects (zlib, unpacked by the scan), half-written transcripts."""

    name = FILES

    def __init__(self, root: Path) -> None:
        self.root = root

    def read(self) -> Iterator[Blob]:
        for folder, _dirs, files in os.walk(self.root):
            for file in sorted(files):
                path = Path(folder, file)
                if path.is_file() and not path.is_symlink():
                    yield path.relative_to(self.root).as_posix(), path.read_bytes()


class ParquetFiles:
    """Every Parquet file under a folder (a ledger export), decoded to its values: its pages are
    compressed inside the file, where the scan's unpacking of whole gzip and zlib blobs does not reach."""

    name = EXPORTS

    def __init__(self, root: Path) -> None:
        self.root = root

    def read(self) -> Iterator[Blob]:
        import pyarrow.parquet as pq

        for path in sorted(self.root.rglob("*.parquet")):
            rows = pq.read_table(path).to_pylist()
            yield path.relative_to(self.root).as_posix(), json.dumps(rows, default=str, ensure_ascii=False).encode()


class GitHistory:
    """A git repository's whole history: ``git log -p --all``, and every object the repository holds,
    reachable or not (a commit dropped by a recovery is still there until git collects it)."""

    name = GIT

    def __init__(self, repo: Path) -> None:
        self.repo = repo

    def read(self) -> Iterator[Blob]:
        if not (self.repo / ".git").exists():
            return
        for args in (["log", "-p", "--all"], ["cat-file", "--batch-all-objects", "--batch"]):
            done = subprocess.run(["git", "-C", str(self.repo), *args], capture_output=True, check=True, timeout=60)
            yield f"git {' '.join(args)}", done.stdout


class SqliteTables:
    """Every table and view of an SQLite database, from its catalog (a new table is scanned the day it
    lands), cell by cell, opened read-only."""

    name = DATABASE

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> Iterator[Blob]:
        if not self.path.exists():
            return
        conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
            for table in names:
                cursor = conn.execute(f'SELECT * FROM "{table}"')
                yield from _columns(table, [d[0] for d in cursor.description], cursor.fetchall())
        finally:
            conn.close()


class PostgresTables:
    """Every table, view and materialized view of a Postgres database outside the system schemas, from
    ``pg_class`` (a new table is scanned the day it lands), cell by cell."""

    name = DATABASE
    _CATALOG = (
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind IN ('r', 'v', 'm', 'p', 'f') "
        "AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'"
    )

    def __init__(self, url: str) -> None:
        self.url = url

    def read(self) -> Iterator[Blob]:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.url, autocommit=True) as conn:
            for schema, table in conn.execute(self._CATALOG).fetchall():
                cursor = conn.execute(sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(table)))
                columns = [d.name for d in cursor.description or []]
                yield from _columns(f"{schema}.{table}", columns, cursor.fetchall())


def _columns(table: str, columns: list[str], rows: list[Any]) -> Iterator[Blob]:
    for index, column in enumerate(columns):
        cells = [_text(row[index]) for row in rows if row[index] is not None]
        for number, cell in enumerate(cells):
            yield f"table {table}, column {column}, row {number}", cell


class PostgresServerLog:
    """The server's own log: error lines with their ``DETAIL`` and ``STATEMENT``, which no erasure reaches."""

    name = SERVER_LOG

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url

    def read(self) -> Iterator[Blob]:
        yield "server log", postgres_server_log(self.server_url).encode("utf-8", "surrogateescape")


class S3Buckets:
    """Buckets of an S3 endpoint: every object version's body, every key and delete marker, and the keys
    of unfinished multipart uploads. Only the deployment's buckets: moto's server is shared by the run."""

    name = S3

    def __init__(self, client: Any, buckets: list[str]) -> None:
        self.client = client
        self.buckets = buckets

    def read(self) -> Iterator[Blob]:
        for bucket in self.buckets:
            keys: list[str] = []
            for page in self.client.get_paginator("list_object_versions").paginate(Bucket=bucket):
                for marker in page.get("DeleteMarkers", []):
                    keys.append(f"{marker['Key']} (delete marker {marker['VersionId']})")
                for version in page.get("Versions", []):
                    keys.append(version["Key"])
                    body = self.client.get_object(Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"])
                    yield f"s3://{bucket}/{version['Key']} version {version['VersionId']}", body["Body"].read()
            for upload in self.client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
                keys.append(f"{upload['Key']} (unfinished upload)")
            yield f"s3://{bucket} keys", "\n".join(keys).encode("utf-8")


class OtlpWire:
    """What a real OTLP/HTTP receiver was sent, decoded from protobuf only as far as bytes go: traces,
    metrics and logs alike (strings travel as UTF-8 in protobuf), or only the ``paths`` given, less those
    in ``exclude``. ``flush`` is called first: an in-process provider's batch may still be waiting to be
    sent."""

    def __init__(self, name: str, receiver: CanaryReceiver, flush: Callable[[], object] | None = None,
                 paths: tuple[str, ...] | None = None, exclude: tuple[str, ...] = ()) -> None:
        self.name = name
        self.receiver = receiver
        self.flush = flush
        self.paths = paths
        self.exclude = exclude

    def read(self) -> Iterator[Blob]:
        if self.flush is not None:
            self.flush()
        for path, body in self.receiver.all_bodies():
            if (self.paths is None or path in self.paths) and path not in self.exclude:
                yield f"otlp {path}", body


class MemorySpans:
    """Spans an in-memory exporter holds: name, attributes, events, links' attributes, status, resource."""

    def __init__(self, name: str, exporter: InMemorySpanExporter) -> None:
        self.name = name
        self.exporter = exporter

    def read(self) -> Iterator[Blob]:
        for span in self.exporter.get_finished_spans():
            scope = span.instrumentation_scope.name if span.instrumentation_scope else "?"
            yield f"span {span.name!r} ({scope})", span.to_json().encode("utf-8")


class MemoryMetrics:
    """Metrics an in-memory reader of a host's own meter provider collects (teamstore's never go there)."""

    name = METRICS

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self.reader = reader

    def read(self) -> Iterator[Blob]:
        data = self.reader.get_metrics_data()
        if data is not None:
            yield "in-memory metric reader", data.to_json().encode("utf-8")


class CapturedText:
    """Text captured along the way: the stderr of each CLI process, a handler's log records."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.entries: list[Blob] = []
        self.paused = False  # set while the suite itself scans: its own reads are not the product's logs
        self._lock = threading.Lock()

    def add(self, location: str, text: str | bytes) -> None:
        """Keep ``text``, found at ``location``."""
        data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")
        with self._lock:
            if not self.paused:
                self.entries.append((location, data))

    def read(self) -> Iterator[Blob]:
        with self._lock:
            yield from list(self.entries)


class RecordingHandler(logging.Handler):
    """A logging handler that keeps every record it is given as text, traceback included."""

    def __init__(self, into: CapturedText) -> None:
        super().__init__(logging.DEBUG)
        self.into = into
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.into.add(f"logger {record.name} ({record.levelname})", self.format(record))
        except Exception:
            self.handleError(record)
