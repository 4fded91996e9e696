"""A local (or mounted) folder as an export destination: write a temporary file beside the target, then
rename it over the target, so a partition is replaced in one step."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

from teamstore.errors import LedgerExportFailed


class LocalPartitions:
    """Partition files under ``root``.

    Args:
        root: The export's folder (created if missing).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = root.resolve().as_uri()

    def stage(self, key: str) -> Path:
        """A temporary file in the partition's own folder (the rename stays on one filesystem)."""
        target = self.root / key
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LedgerExportFailed(f"cannot make the export folder {str(target.parent)!r}: {exc.strerror}",
                               hint="give a folder this process can write to") from None
        # Not named *.parquet: an export killed before its rename leaves this file behind, and a reader's
        # `**/*.parquet` (DuckDB reads dot-files too) would count its day twice, or fail on half a file.
        return target.parent / f".tmp-{uuid.uuid4().hex}-{target.stem}"

    def commit(self, key: str, staged: Path) -> None:
        """Rename ``staged`` over the partition's file (atomic on POSIX filesystems)."""
        try:
            os.replace(staged, self.root / key)
        except OSError as exc:
            self.discard(staged)
            raise LedgerExportFailed(f"cannot write {key!r} under {str(self.root)!r}: {exc.strerror}",
                               hint="check the folder's permissions and free space, then export again") from None

    def discard(self, staged: Path) -> None:
        """Remove a staged file left by a failed export."""
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()

    def close(self) -> None:
        """Nothing to let go of."""
