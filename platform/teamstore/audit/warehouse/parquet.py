"""The ledger's rows as Parquet: the schema the export writes, and a writer fed in batches.

Pure of I/O but for the file it writes; pyarrow is imported here only (the ``export`` extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from teamstore.errors import MissingExtra

# (column, pyarrow type name): the ledger's columns as the export writes them. `day` is not among them: it
# is the partition, in the path (day=YYYY-MM-DD), as Hive, Athena, Trino, Spark and DuckDB read it.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "string"),
    ("team", "string"),
    ("team_version", "string"),
    ("agent", "string"),
    ("model", "string"),
    ("purpose", "string"),
    ("session_key", "string"),
    ("subject_key", "string"),  # null once its user is erased
    ("calls", "int32"),
    ("failed_calls", "int32"),
    ("input_tokens", "int64"),
    ("output_tokens", "int64"),
    ("stop_reason", "string"),
    ("ended_by_limit", "bool"),
    ("run_failed", "bool"),
    ("interruptions", "int32"),  # how many times the run was continued from its checkpoint (docs/checkpoints.md)
    ("attempt", "int32"),  # which attempt at the run made the row's calls: 0 the first, n its n-th continuation
    ("started_at", "timestamp"),
    ("finished_at", "timestamp"),
)
NULLABLE = frozenset({"subject_key", "stop_reason"})


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        raise MissingExtra("The ledger export", "export", "pyarrow") from exc
    return pyarrow


def schema() -> Any:
    """The export's Arrow schema: times as UTC microsecond timestamps, counts as integers."""
    pa = _pyarrow()
    types = {"string": pa.string(), "int32": pa.int32(), "int64": pa.int64(), "bool": pa.bool_(),
             "timestamp": pa.timestamp("us", tz="UTC")}
    return pa.schema([pa.field(name, types[kind], nullable=name in NULLABLE) for name, kind in COLUMNS])


class PartitionWriter:
    """Writes one partition's rows to ``path`` in batches (zstd-compressed, one row group per batch).

    Args:
        path: The file to write.
    """

    def __init__(self, path: Path) -> None:
        self._pa = _pyarrow()
        self._schema = schema()
        self._writer = self._pa.parquet.ParquetWriter(str(path), self._schema, compression="zstd")
        self.rows = 0

    def write(self, rows: Sequence[Sequence[Any]]) -> None:
        """Append rows whose values are in :data:`COLUMNS` order (naive times are taken as UTC)."""
        columns = [self._pa.array([row[i] for row in rows], type=field.type)
                   for i, field in enumerate(self._schema)]
        self._writer.write_batch(self._pa.RecordBatch.from_arrays(columns, schema=self._schema))
        self.rows += len(rows)

    def close(self) -> None:
        """Finish the file (its footer)."""
        self._writer.close()
