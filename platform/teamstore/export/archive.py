"""The export's archive: a zip file or a folder, owner-only, complete or absent.

    from teamstore.export.archive import open_archive

    archive = open_archive(Path("alice.zip"))       # a folder for a path without .zip
    archive.add_json("resume_state.json", rows, records=len(rows))
    with archive.open("ledger.json") as out:        # a file too large to hold, a piece at a time
        out.write(b"...")
    with archive.spool() as index:                  # lines to write once other files are written
        index.write_line(b"...")
    archive.commit()                                # or archive.abort(): nothing is left

Files are written under a temporary name beside the target (``.alice.zip.<export id>.partial``, the target's
name cut short when the whole would be longer than its folder allows: :mod:`teamstore.export.partials`), created
owner-only (``0600``; folders ``0700``), and moved to the target only once every store has been read and
the manifest written: a failed export leaves nothing, never a partial archive that looks complete. The
target is never overwritten. A commit puts every byte on disk (the files, then the folder that holds the
archive) before it returns, so the export may be recorded done only once its archive will outlive a power
loss; an ``abort()`` after a commit removes the archive placed. What an exporter spools (``archive.spool()``) is in a file beside them that
has no name (``tempfile.TemporaryFile``, owner-only): it is gone once the exporter is done with it, or once the
process ends, however it ends.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, BinaryIO

from teamstore.disk import fsync_file, fsync_folder
from teamstore.errors import ExportFailed, ExportTargetExists, ExportTargetInStore
from teamstore.export.base import FileEntry, Section, to_json
from teamstore.export.partials import partial_path

FILE_MODE = 0o600
FOLDER_MODE = 0o700
# What os.link raises on a filesystem that has no hard links.
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})


class FileWriter:
    """One file of the archive as it is written: its bytes counted and hashed on their way to it.

    Args:
        handle: The file (or the zip file's member) open for writing.
        failed: The error for a write that failed.
    """

    def __init__(self, handle: IO[bytes], failed: Callable[[OSError], ExportFailed]) -> None:
        self._handle, self._failed = handle, failed
        self._sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        """Append ``data`` to the file.

        Raises:
            ExportFailed: It could not be written (disk full, permissions).
        """
        try:
            self._handle.write(data)
        except OSError as exc:
            raise self._failed(exc) from exc
        self._sha256.update(data)
        self.size += len(data)

    def entry(self) -> FileEntry:
        """The file's size and SHA-256, for the manifest."""
        return FileEntry(bytes=self.size, sha256=self._sha256.hexdigest())


class LineSpool:
    """Lines kept on disk instead of in memory: an unnamed owner-only file (:meth:`_Recorded.spool`).

    Args:
        handle: The file, open for reading and writing.
        failed: The error for a write or read that failed.
    """

    def __init__(self, handle: IO[bytes], failed: Callable[[OSError], ExportFailed]) -> None:
        self._handle, self._failed = handle, failed

    def write_line(self, line: bytes) -> None:
        """Append ``line`` (which holds no line break).

        Raises:
            ExportFailed: It could not be written (disk full).
        """
        try:
            self._handle.write(line + b"\n")
        except OSError as exc:
            raise self._failed(exc) from exc

    def lines(self) -> Iterator[bytes]:
        """Every line written so far, in order, a line at a time.

        Raises:
            ExportFailed: The file could not be read back.
        """
        try:
            self._handle.seek(0)
            for line in self._handle:
                yield line.rstrip(b"\n")
        except OSError as exc:
            raise self._failed(exc) from exc


class _Recorded:
    """What both kinds of archive share: the files written so far, with their sizes and checksums."""

    def __init__(self, target: Path, tag: str) -> None:
        self.target = target
        self.temporary = partial_path(target, tag)
        self.files: dict[str, FileEntry] = {}
        self.placed = False
        """Whether the archive is at its target (committed): an abort then removes it from there."""

    def add(self, name: str, data: bytes, records: int = 0) -> Section:
        """Write one file; its size and SHA-256 go into the manifest.

        Raises:
            ExportFailed: The file could not be written (disk full, permissions).
        """
        with self._writing(name, len(data)) as out:
            out.write(data)
        return Section(records=records, bytes=len(data), files=[name])

    def add_json(self, name: str, data: Any, records: int = 0) -> Section:
        """Write ``data`` as JSON."""
        return self.add(name, to_json(data), records)

    def open(self, name: str) -> contextlib.AbstractContextManager[FileWriter]:
        """Write one file a piece at a time, as it is made (one too large to hold whole); its size and SHA-256 go
        into the manifest once the block ends. No other file is written meanwhile.

        Raises:
            ExportFailed: The file could not be written (disk full, permissions).
        """
        return self._writing(name, None)

    @contextmanager
    def spool(self) -> Iterator[LineSpool]:
        """Lines to keep until they can be written into the archive: in a file beside it that has no name, which
        no other process can open and which goes when the block ends or the process does (a kill included).

        Raises:
            ExportFailed: The file could not be made, written or read.
        """
        folder = self.target.parent

        def failed(exc: OSError) -> ExportFailed:
            return ExportFailed(f"could not keep the export's working file in {folder}: {exc.strerror or exc}",
                                hint="check the space and permissions where the archive goes, then export again")

        try:  # mode 0600, and unlinked (or O_TMPFILE) from the start
            handle = tempfile.TemporaryFile(dir=folder)  # noqa: SIM115  # closed by _closed_after
        except OSError as exc:
            raise failed(exc) from exc
        with _closed_after(handle, failed):
            yield LineSpool(handle, failed)

    @contextmanager
    def _writing(self, name: str, size: int | None) -> Iterator[FileWriter]:
        if name in self.files or name.startswith("/") or ".." in name.split("/"):
            raise ExportFailed(f"the archive already holds {name!r} or the name is not relative",
                               hint="report this: each store writes its own files")

        def failed(exc: OSError) -> ExportFailed:
            return ExportFailed(f"could not write {name} into {self.temporary}: {exc.strerror or exc}",
                                hint="check the space and permissions where the archive goes, then export again")

        try:
            handle = self._open(name, size)
        except OSError as exc:
            raise failed(exc) from exc
        out = FileWriter(handle, failed)
        with _closed_after(handle, failed):
            yield out
        self.files[name] = out.entry()

    def _open(self, name: str, size: int | None) -> IO[bytes]:
        """The new file ``name`` open for writing; ``size``: its bytes, when known before they are written."""
        raise NotImplementedError

    def _place(self) -> None:
        """Move the finished temporary archive to the target, never over anything: the name was free when the
        export began, but a file or folder may have appeared there since, and a rename would replace it.

        Raises:
            ExportTargetExists: Something is at the target now (it is left as it is).
            ExportFailed: The archive could not be moved.
        """
        try:
            self._move()
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise taken(self.target) from exc
            raise ExportFailed(f"could not move the finished archive to {self.target}: {exc.strerror or exc}",
                               hint="check the permissions of the folder, then export again") from exc
        self.placed = True
        try:  # the new name itself on disk: until then a power loss could undo the move
            fsync_folder(self.target.parent)
        except OSError as exc:
            raise ExportFailed(f"could not flush the folder {self.target.parent} to disk: {exc.strerror or exc}",
                               hint="check the disk where the archive goes, then export again") from exc

    def _move(self) -> None:
        raise NotImplementedError

    def _claim_and_rename(self, claim: Callable[[Path], Any], release: Callable[[Path], Any]) -> None:
        """Take the free name with ``claim`` (which, like a link, fails on anything there), then rename the
        archive over what it made: an empty file or folder of this export's own. ``release`` removes that again
        if the rename fails (only while it is empty: whatever someone put in it stays)."""
        claim(self.target)
        try:
            os.rename(self.temporary, self.target)
        except OSError:
            with contextlib.suppress(OSError):
                release(self.target)
            raise


class ZipArchive(_Recorded):
    """A zip file (deflated), created owner-only."""

    def __init__(self, target: Path, tag: str) -> None:
        super().__init__(target, tag)
        self._file = _create(self.temporary)
        self._zip = zipfile.ZipFile(self._file, "w", compression=zipfile.ZIP_DEFLATED)

    def _open(self, name: str, size: int | None) -> IO[bytes]:
        info = zipfile.ZipInfo(name, date_time=_now_for_zip())
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = (0o100000 | FILE_MODE) << 16  # unpacked owner-only too
        if size is not None:  # as writestr writes it
            info.file_size = size
        # A file of unknown size may pass 2 GiB, which takes ZIP64's sizes (written whatever its size then).
        return self._zip.open(info, "w", force_zip64=size is None)

    def _move(self) -> None:
        # A hard link is made only where nothing is (a dangling symlink included), and the archive keeps its
        # inode: its mode and bytes are those written. A filesystem without hard links (FAT, exFAT, some
        # network shares) gets the claimed name instead.
        try:
            os.link(self.temporary, self.target)
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
            self._claim_and_rename(_create_empty, _unlink_if_empty)
        else:
            self.temporary.unlink()

    def commit(self) -> None:
        """Finish the zip and move it into place.

        Raises:
            ExportTargetExists: Something appeared at the target meanwhile (the temporary file is removed).
            ExportFailed: It could not be written or moved.
        """
        try:
            self._zip.close()
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._place()  # and the folder flushed: the new name and the temporary one's removal on disk
        except (ExportTargetExists, ExportFailed):
            self.abort()
            raise
        except OSError as exc:
            self.abort()
            raise ExportFailed(f"could not finish the archive: {exc.strerror or exc}",
                               hint="check the space where the archive goes, then export again") from exc

    def abort(self) -> None:
        """Remove the temporary file, or the archive placed by a commit: nothing of the export is left."""
        for closing in (self._zip.close, self._file.close):
            try:
                closing()
            except (OSError, ValueError):  # already closed, or the disk failed: the file goes either way
                continue
        self.temporary.unlink(missing_ok=True)
        if self.placed:
            self.target.unlink(missing_ok=True)
            self.placed = False


class FolderArchive(_Recorded):
    """A folder of files, owner-only (``0700`` folders, ``0600`` files)."""

    def __init__(self, target: Path, tag: str) -> None:
        super().__init__(target, tag)
        try:
            self.temporary.mkdir(mode=FOLDER_MODE)
            self.temporary.chmod(FOLDER_MODE)  # whatever the umask left
        except OSError as exc:
            raise _unwritable(self.temporary, exc) from exc

    def _open(self, name: str, size: int | None) -> IO[bytes]:
        path = self.temporary.joinpath(*name.split("/"))
        for parent in reversed(path.relative_to(self.temporary).parents[:-1]):
            folder = self.temporary / parent
            if not folder.exists():
                folder.mkdir(mode=FOLDER_MODE)
                folder.chmod(FOLDER_MODE)
        return _create(path)

    def _move(self) -> None:
        # A folder cannot be hard-linked, and a rename replaces an empty folder.
        self._claim_and_rename(lambda path: path.mkdir(mode=FOLDER_MODE), Path.rmdir)

    def commit(self) -> None:
        """Put every file and folder of the archive on disk, then move the folder into place.

        Raises:
            ExportTargetExists: Something appeared at the target meanwhile (the temporary folder is removed).
            ExportFailed: It could not be flushed to disk or moved.
        """
        try:
            self._flush_all()
            self._place()  # and the folder holding it flushed: the new name on disk
        except (ExportTargetExists, ExportFailed):
            self.abort()
            raise

    def _flush_all(self) -> None:
        """fsync every file, then every folder (deepest first), of the temporary folder."""
        try:
            for folder, _, names in os.walk(self.temporary, topdown=False):
                for name in names:
                    fsync_file(Path(folder) / name)
                fsync_folder(Path(folder))
        except OSError as exc:
            raise ExportFailed(f"could not flush the archive {self.temporary} to disk: {exc.strerror or exc}",
                               hint="check the disk where the archive goes, then export again") from exc

    def abort(self) -> None:
        """Remove the temporary folder, or the archive placed by a commit: nothing of the export is left."""
        if self.temporary.exists():  # another export's clean-up may remove it too, once this one's record is over
            shutil.rmtree(self.temporary, onerror=_unless_gone)
        if self.placed:
            shutil.rmtree(self.target, ignore_errors=True)
            self.placed = False


Writable = ZipArchive | FolderArchive


def open_archive(target: Path, keep_out: Sequence[Path] = (), tag: str | None = None) -> Writable:
    """A new archive that will be ``target`` once committed: a zip file if its name ends ``.zip``, else a folder.

    Args:
        target: Where the archive goes.
        keep_out: Folders it must not go into: those teamstore keeps its stores in.
        tag: What names the temporary archive beside ``target`` (:mod:`teamstore.export.partials`): the export's
            id, so that one its export left (killed outright) can be named by it; random by default.

    Raises:
        ExportTargetExists: ``target`` exists (an export never overwrites).
        ExportTargetInStore: ``target`` is inside one of ``keep_out`` (symlinks followed).
        ExportFailed: Its folder does not exist or cannot be written.
    """
    check_target(target, keep_out)
    tag = tag or secrets.token_hex(4)
    return ZipArchive(target, tag) if target.suffix.lower() == ".zip" else FolderArchive(target, tag)


def check_target(target: Path, keep_out: Sequence[Path] = ()) -> None:
    """Refuse ``target`` as :func:`open_archive` would, creating nothing.

    Raises:
        ExportTargetExists: ``target`` exists.
        ExportTargetInStore: ``target`` is inside one of ``keep_out``.
        ExportFailed: Its folder does not exist or cannot be entered, or a symlink on its path loops.
    """
    try:
        _outside(target, keep_out)
        if _is_taken(target):
            raise taken(target)
        if not target.parent.is_dir():
            what = "is not a folder" if target.parent.exists() else "does not exist"
            raise ExportFailed(f"{target.parent} {what}", hint="give --output a path in an existing folder")
    except OSError as exc:  # a name too long, a folder this user may not enter
        raise _unwritable(target, exc) from exc
    except RuntimeError as exc:  # what Path.resolve raises on a symlink loop before Python 3.13 (OSError after)
        raise ExportFailed(f"{target}: a symlink on its path leads back to itself (a loop), so it leads nowhere",
                           hint="give --output a path without the looping symlink, or point the symlink at a "
                           "folder") from exc


def _outside(target: Path, keep_out: Sequence[Path]) -> None:
    # The archive holds the user's data opened: inside a store's folder it would be backed up with the store,
    # and no erasure would find it there.
    where = target.resolve()
    for folder in keep_out:
        if where.is_relative_to(folder.resolve()):
            raise ExportTargetInStore(
                f"{target} is inside {folder}, where teamstore keeps its stores: the archive holds the user's data "
                "readable, and there it would sit beside the sealed stores, in their backups, out of reach of the "
                "user's erasure",
                hint=f"give --output a path outside {folder}")


def taken(target: Path) -> ExportTargetExists:
    """The refusal for a target that exists."""
    return ExportTargetExists(f"{target} exists: an export never overwrites a file or folder",
                              hint="give --output a new path (or move the old archive away)")


def _is_taken(target: Path) -> bool:
    """Whether anything is at ``target`` (a dangling symlink too: written through, the archive would land
    where it points). Only a first refusal: the archive is placed so that it never replaces what appears later."""
    return target.exists() or target.is_symlink()


def _create(path: Path) -> BinaryIO:
    """A new file opened for writing, owner-only from its first byte (never one that exists).

    Raises:
        ExportFailed: It could not be created.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
        os.fchmod(fd, FILE_MODE)
    except OSError as exc:
        raise _unwritable(path, exc) from exc
    return os.fdopen(fd, "wb")


def _create_empty(path: Path) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), FILE_MODE))


def _unlink_if_empty(path: Path) -> None:
    if path.lstat().st_size == 0:
        path.unlink()


def _unless_gone(_: Any, __: str, error: tuple[type[BaseException], BaseException, Any]) -> None:
    if not isinstance(error[1], FileNotFoundError):
        raise error[1]


def _unwritable(path: Path, exc: OSError) -> ExportFailed:
    return ExportFailed(f"could not create {path}: {exc.strerror or exc}",
                        hint="check the permissions of the folder the archive goes to, then export again")


def _now_for_zip() -> tuple[int, int, int, int, int, int]:
    now = datetime.now(UTC)
    return (now.year, now.month, now.day, now.hour, now.minute, now.second)


@contextmanager
def _closed_after(handle: IO[bytes], failed: Callable[[OSError], ExportFailed]) -> Iterator[None]:
    """Close ``handle`` as the block ends. After a failure quietly: the export fails with what stopped it, not
    with the close's own error (on a full disk the close writes the buffer out once more, and fails too); after
    success, a close that fails is the export's failure (``failed``)."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError, ValueError):
            handle.close()
        raise
    try:
        handle.close()
    except OSError as exc:
        raise failed(exc) from exc
