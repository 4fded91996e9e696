"""Putting a file, or a folder's entries, on the disk before saying a write, rename or delete is done.

    from teamstore.disk import fsync_file, fsync_folder

    fsync_file(tmp)                                     # its bytes, before it takes its name
    os.replace(tmp, path)
    fsync_folder(path.parent)                           # the new name survives a power loss

A file's bytes reach the disk with an ``fsync`` of the file; its name (made, renamed or removed) is an entry of
its folder, and reaches the disk only with an ``fsync`` of that folder. Until then a power loss or the host's
crash can bring back a name removed, or lose one made, whatever the process was told.
"""

from __future__ import annotations

import os
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


def fsync_folder(path: Path) -> None:
    """Put a folder's entries (names made, renamed or removed in it) on the disk.

    Raises:
        OSError: It could not be opened or flushed.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

