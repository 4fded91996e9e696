"""Putting a file, or a folder's entries, on the disk before saying a write, rename or delete is done.

    from teamstore.disk import FlushedFolders, folders_changed_by_making, fsync_file, fsync_folders, fsync_name, fsync_up

    known = FlushedFolders(root)                        # a store's: its many writes into the same folders
    known.forget(path.parent)                           # before making it: made again, its name is not flushed
    made = folders_changed_by_making(path.parent)       # before the mkdir: whose entries it changes
    path.parent.mkdir(parents=True, exist_ok=True)
    fsync_file(tmp)                                     # its bytes, before it takes its name
    os.replace(tmp, path)
    fsync_name(path, made)                              # the new name, and its new folders, survive a power loss
    fsync_folders(changed, within=root)                 # after a batch of deletes: each folder once
    fsync_up(path.parent)                               # a rerun, which cannot know what a failed run made
    known.flush_up(path.parent, flushed=[path.parent, *made])  # each name above it not known flushed, to root

A file's bytes reach the disk with an ``fsync`` of the file; its name (made, renamed or removed) is an entry of
its folder, and reaches the disk only with an ``fsync`` of that folder. Until then a power loss or the host's
crash can bring back a name removed, or lose one made, whatever the process was told. A folder made on the way
is a name in the folder above it, flushed the same way: a file flushed into a folder whose own name was lost is
lost with it.

A folder this process may write into but not read (a drop folder, ``0300``) cannot be opened to flush it, and
some filesystems refuse a folder's ``fsync``: such a folder is not flushed, and that is no error, as PostgreSQL
has it (``fsync_fname_ext``: ``EACCES`` opening a folder, ``EBADF`` or ``EINVAL`` flushing one, are ignored). Its
names are then as durable as that filesystem makes them. A file's flush that fails is always an error.
"""

from __future__ import annotations

import errno
import itertools
import os
from collections.abc import Iterable
from pathlib import Path


def fsync_file(path: Path) -> None:
    """Put a file's bytes on the disk (a link at ``path`` is refused, not followed).

    Raises:
        OSError: It could not be opened or flushed.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_FOLDER_NOT_OPENED = frozenset({errno.EACCES})  # writable and searchable, not readable: it cannot be opened
_FOLDER_NOT_FLUSHED = frozenset({errno.EBADF, errno.EINVAL})  # a filesystem that does not flush folders


def fsync_folder(path: Path) -> None:
    """Put a folder's entries (names made, renamed or removed in it) on the disk; nothing when this process may
    not open it (``EACCES``) or its filesystem does not flush folders (``EBADF``, ``EINVAL``): see above.

    Raises:
        OSError: It could not be opened or flushed otherwise (``EIO``: the disk failed it).
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        if exc.errno in _FOLDER_NOT_OPENED:
            return
        raise
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _FOLDER_NOT_FLUSHED:
            raise
    finally:
        os.close(fd)


def folders_changed_by_making(folder: Path) -> list[Path]:
    """The folders whose entries making ``folder`` (and the missing folders above it) changes: the parent of each
    folder missing, deepest first; empty when ``folder`` is there. Asked before making it, for :func:`fsync_name`.
    """
    missing = itertools.takewhile(lambda step: not step.is_dir(), (folder, *folder.parents))
    return [step.parent for step in missing]


def fsync_name(path: Path, made: Iterable[Path] = ()) -> None:
    """Put the name ``path`` took (a rename, a link) on the disk: its folder's entries, then those of each folder
    in ``made`` (:func:`folders_changed_by_making`, asked before its folder was made).

    Raises:
        OSError: A folder could not be flushed (the name is there now, and may not be after a power loss).
    """
    for folder in (path.parent, *made):
        fsync_folder(folder)


def fsync_up(folder: Path) -> None:
    """Put ``folder``'s entries on the disk, and those of each folder above it up to its filesystem's root (the
    mount point, or ``/``). What a rerun does when it cannot know which of them an earlier, failed run made: each
    such folder is a name in the one above it. Not for a hot path: one ``fsync`` per folder.

    Raises:
        OSError: A folder could not be flushed (the first one; none above it was tried).
    """
    for step in _up_to_mount(folder):
        fsync_folder(step)


def _up_to_mount(folder: Path) -> list[Path]:
    """``folder`` and each folder above it up to its filesystem's root, deepest first, links resolved."""
    steps = [Path(os.path.realpath(folder))]  # the folders the names are in, not those of a link to them
    while not os.path.ismount(steps[-1]):  # a mount point's own name is the other filesystem's
        steps.append(steps[-1].parent)
    return steps


def fsync_folders(folders: Iterable[Path], *, within: Path) -> None:
    """Put the entries of each folder a batch changed on the disk, each once, deepest first.

    A folder removed since (emptied by the batch, or by another process) cannot be flushed, and need not be:
    the folder above it, whose entry for it went, is flushed instead, and so on up to ``within``.

    Args:
        folders: The folders whose entries changed, repeats and all; each at or below ``within``.
        within: The highest folder to flush (where the batch's changes stop).

    Raises:
        OSError: A folder could not be flushed (the first one; none after it was tried).
        ValueError: A folder is not at or below ``within``.
    """
    flushed: set[Path] = set()
    for folder in sorted(set(folders), key=lambda path: len(path.parts), reverse=True):
        steps = [folder, *folder.parents][: len(folder.relative_to(within).parts) + 1]
        for step in steps:
            if step in flushed:
                break
            try:
                fsync_folder(step)
            except FileNotFoundError:
                continue  # removed: its removal is an entry of the folder above
            flushed.add(step)
            break


class FlushedFolders:
    """The folders at or below ``root`` whose names this process has flushed, with those of every folder above them
    to the filesystem's root: a store that writes many files into the same folders flushes a folder's name once,
    not on every write, and again whenever it cannot know it is on the disk. A folder found there may be one a
    failed write made (this process's, or an earlier one's: a new process knows none) and never flushed, so every
    folder not known here is flushed. Bounded: past ``limit`` folders it forgets them all, and flushes again.

    Args:
        root: The highest folder tracked; the first flush also flushes each folder above it, once.
        limit: How many folders to remember.
    """

    def __init__(self, root: Path, limit: int = 10_000) -> None:
        self.root, self.limit = root, limit
        self._known: set[Path] = set()
        self._root_seen: tuple[int, int, int] | None = None  # the root folder flushed, as _identity gives it

    def _chain(self, folder: Path) -> list[Path]:
        return [folder, *folder.parents][: len(folder.relative_to(self.root).parts) + 1]

    def forget(self, folder: Path) -> None:
        """Forget ``folder`` and each folder above it below ``root``: call it before making any of them (made again,
        say, after a sweep removed it), so that no write finds it made but known flushed. ``root`` itself is left
        to :meth:`flush_up`, which keeps it while it is the very folder that was flushed (teamstore never removes a
        store's root), so a put into a new subject does not flush every folder above it again."""
        chain = self._chain(folder)
        if chain[-1] == self.root:
            chain.pop()
        self._known.difference_update(chain)

    def flush_up(self, folder: Path, flushed: Iterable[Path] = ()) -> None:
        """Flush the name of ``folder``, and of each folder above it up to ``root``, in the folder that holds it,
        stopping at the first one known flushed; while ``root`` is not, each folder above it too (:func:`fsync_up`).

        Args:
            folder: A folder at or below ``root``.
            flushed: Folders the caller flushed since it last changed them: not flushed again.

        Raises:
            OSError: A folder could not be flushed (none of them is then known flushed).
        """
        if self._root_seen is not None and _identity(self.root) != self._root_seen:
            # The root was made again (or changed) since it was flushed: so may be any folder below it, made by
            # another process that has yet to flush its name. A stat a put, beside its two flushes.
            self._known.clear()
            self._root_seen = None
        if folder in self._known:  # most writes: into a folder written into before (a session's runs)
            return
        done = set(flushed)
        unknown = list(itertools.takewhile(lambda step: step not in self._known, self._chain(folder)))
        seen = _identity(self.root) if self.root in unknown else self._root_seen  # before its flush, not after
        steps = [step.parent for step in unknown if step != self.root]
        if self.root in unknown:  # each folder above the root, which a failed write may have made too
            done |= {Path(os.path.realpath(step)) for step in done}  # as _up_to_mount names them
            steps += _up_to_mount(self.root.parent)
        for step in steps:
            if step not in done:
                fsync_folder(step)
                done.add(step)
        if len(self._known) + len(unknown) > self.limit:
            self._known.clear()
        self._known.update(unknown)
        self._root_seen = seen


def _identity(folder: Path) -> tuple[int, int, int] | None:
    """Which folder stands at ``folder`` now, and as it is: its device and inode, and when its entry last changed
    (a folder made again may reuse a removed one's inode, never its change time); ``None`` when none is there."""
    try:
        found = os.stat(folder)
    except OSError:
        return None
    return found.st_dev, found.st_ino, found.st_ctime_ns
