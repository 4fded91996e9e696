"""Putting a file, or a folder's entries, on the disk before saying a write, rename or delete is done.

    from teamstore.disk import folders_changed_by_making, fsync_file, fsync_folders, fsync_name

    made = folders_changed_by_making(path.parent)       # before the mkdir: whose entries it changes
    path.parent.mkdir(parents=True, exist_ok=True)
    fsync_file(tmp)                                     # its bytes, before it takes its name
    os.replace(tmp, path)
    fsync_name(path, made)                              # the new name, and its new folders, survive a power loss
    fsync_folders(changed, within=root)                 # after a batch of deletes: each folder once

A file's bytes reach the disk with an ``fsync`` of the file; its name (made, renamed or removed) is an entry of
its folder, and reaches the disk only with an ``fsync`` of that folder. Until then a power loss or the host's
crash can bring back a name removed, or lose one made, whatever the process was told. A folder made on the way
is a name in the folder above it, flushed the same way: a file flushed into a folder whose own name was lost is
lost with it.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from pathlib import Path


def fsync_file(path: Path) -> None:
    """Put a file's bytes on the disk (a link at ``path`` is refused, not followed).

    Raises:
        OSError: It could not be opened or flushed.
    """
    _fsync(path, getattr(os, "O_NOFOLLOW", 0))


def fsync_folder(path: Path) -> None:
    """Put a folder's entries (names made, renamed or removed in it) on the disk.

    Raises:
        OSError: It could not be opened or flushed.
    """
    _fsync(path, getattr(os, "O_DIRECTORY", 0))


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


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
