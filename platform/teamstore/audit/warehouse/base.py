"""Where an export's partition files go: the interface each destination implements.

    sink = destination_from_url("s3://warehouse/teamstore/ledger")
    staged = sink.stage("day=2026-11-30/part-00000.parquet")   # a file to write the partition into
    ...
    sink.commit("day=2026-11-30/part-00000.parquet", staged)   # now readers see it, whole, in one step
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class PartitionSink(Protocol):
    """A folder or an S3 prefix that takes whole files, each replacing the one of the same key at once:
    a reader sees the old file or the new, never part of one."""

    url: str
    """Where the files go (``file:///...`` or ``s3://bucket/prefix``), for reports."""

    def stage(self, key: str) -> Path:
        """A new local file to write ``key``'s content into before :meth:`commit`."""
        ...

    def commit(self, key: str, staged: Path) -> None:
        """Make ``staged`` the file at ``key``, replacing any; ``staged`` is gone afterwards.

        Raises:
            LedgerExportFailed: The destination refused it (what was at ``key`` is unchanged), or took it but could
                not make it outlive a power loss (a folder not flushed: the message says so). Either way the same
                export run again writes it whole.
        """
        ...

    def discard(self, staged: Path) -> None:
        """Remove a staged file that will not be committed (the export failed before it)."""
        ...

    def close(self) -> None:
        """Let go of what the destination holds (a client, a spool folder)."""
        ...
