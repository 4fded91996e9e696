"""A local (or mounted) folder as an export destination: write a temporary file beside the target, then
rename it over the target, so a partition is replaced in one step.

    sink = LocalPartitions(Path("warehouse/ledger"))
    staged = sink.stage("day=2026-11-30/part-00000.parquet")
    ...                                                         # write the partition into staged
    sink.commit("day=2026-11-30/part-00000.parquet", staged)

A partition's bytes are flushed to the disk before its rename, and after it its folder and each one up to the
export's own; the first commit of each sink goes on up to the filesystem's root (the export's folder, or those above
it, may have been made by an export that failed), so a day the export reported written outlives a power loss.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

from teamstore.disk import fsync_file, fsync_name, fsync_up
from teamstore.errors import LedgerExportFailed


class LocalPartitions:
    """Partition files under ``root``.

    Args:
        root: The export's folder (created if missing).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = root.resolve().as_uri()
        self._up_flushed = False  # the folders above the export's own: flushed by the first commit, once

    def stage(self, key: str) -> Path:
        """A temporary file in the partition's own folder (the rename stays on one filesystem)."""
        target = self.root / key
        try:
            if not self.root.is_dir():  # made again (removed since the last commit): their names are new again
                self._up_flushed = False
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LedgerExportFailed(f"cannot make the export folder {str(target.parent)!r}: {exc.strerror}",
                               hint="give a folder this process can write to") from None
        # Not named *.parquet: an export killed before its rename leaves this file behind, and a reader's
        # `**/*.parquet` (DuckDB reads dot-files too) would count its day twice, or fail on half a file.
        return target.parent / f".tmp-{uuid.uuid4().hex}-{target.stem}"

    def commit(self, key: str, staged: Path) -> None:
        """Rename ``staged`` over the partition's file (atomic on POSIX filesystems), flushed before and after.

        Raises:
            LedgerExportFailed: It could not be flushed or renamed (the old file stands), or its folder could not
                be flushed after (the message says so). Not an outcome in doubt to record: an export records
                nothing, and the same export run again replaces the day whole.
        """
        target = self.root / key
        try:
            fsync_file(staged)
            os.replace(staged, target)
        except OSError as exc:
            self.discard(staged)
            raise LedgerExportFailed(f"cannot write {key!r} under {str(self.root)!r}: {exc.strerror}",
                               hint="check the folder's permissions and free space, then export again") from None
        try:
            self._flush_name(target)
        except OSError as exc:
            raise LedgerExportFailed(f"wrote {key!r} under {str(self.root)!r}, but a folder holding it could not be "
                                     f"flushed to the disk ({exc.strerror}): it may not outlive a power loss",
                                     hint="check the disk, then run the same export again") from None

    def _flush_name(self, target: Path) -> None:
        """Flush ``target``'s folder and those up to the export's own every time (cheap, and how the rerun of an
        export whose flush failed flushes what the failed one made); then, once per sink, each folder above the
        export's own up to the filesystem's root: a rerun cannot know which of them a failed export made.

        Raises:
            OSError: A folder could not be flushed.
        """
        fsync_name(target, [folder for folder in target.parents[1:] if folder.is_relative_to(self.root)])
        if not self._up_flushed:
            fsync_up(self.root.parent)
            self._up_flushed = True

    def discard(self, staged: Path) -> None:
        """Remove a staged file left by a failed export."""
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()

    def close(self) -> None:
        """Nothing to let go of."""
