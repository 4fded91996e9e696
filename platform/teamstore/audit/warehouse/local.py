"""A local (or mounted) folder as an export destination: write a temporary file beside the target, then
rename it over the target, so a partition is replaced in one step.

    sink = LocalPartitions(Path("warehouse/ledger"))
    staged = sink.stage("day=2026-11-30/part-00000.parquet")
    ...                                                         # write the partition into staged
    sink.commit("day=2026-11-30/part-00000.parquet", staged)

A partition's bytes are flushed to the disk before its rename and its folder after it (with each folder the export
made for it, in the folder above), so a day the export reported written outlives a power loss.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

from teamstore.disk import folders_changed_by_making, fsync_file, fsync_name
from teamstore.errors import LedgerExportFailed


class LocalPartitions:
    """Partition files under ``root``.

    Args:
        root: The export's folder (created if missing).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = root.resolve().as_uri()
        self._made: set[Path] = set()  # folders whose entries a stage changed, flushed by the commit after it

    def stage(self, key: str) -> Path:
        """A temporary file in the partition's own folder (the rename stays on one filesystem)."""
        target = self.root / key
        try:
            self._made.update(folders_changed_by_making(target.parent))
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
            raise LedgerExportFailed(f"wrote {key!r} under {str(self.root)!r}, but its folder could not be flushed "
                                     f"to the disk ({exc.strerror}): it may not outlive a power loss",
                                     hint="check the disk, then run the same export again") from None
        self._made.clear()

    def _flush_name(self, target: Path) -> None:
        """Flush ``target``'s folder and those up to the export's own every time: the rerun of an export whose
        flush failed (in a new process, which made none of them) flushes what the failed one made. Then the folders
        above the export's own that a stage made, once.

        Raises:
            OSError: A folder could not be flushed.
        """
        within = [folder for folder in target.parents[1:] if folder.is_relative_to(self.root)]
        above = [folder for folder in self._made if not folder.is_relative_to(self.root)]
        fsync_name(target, [*within, *sorted(above, key=lambda folder: len(folder.parts), reverse=True)])

    def discard(self, staged: Path) -> None:
        """Remove a staged file left by a failed export."""
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()

    def close(self) -> None:
        """Nothing to let go of."""
