"""Making folders without handing a stranger the folders above them.

    from config_registry.folders import make_folder

    make_folder(Path("home/registry"))               # the registry itself: the usual mode
    make_folder(Path("home/transcripts"), 0o700)     # its owner's only

A folder made for one store often sits in a home that holds others: an application keeps the registry,
its database and its transcript folder in one home folder. Whichever of them is made first makes the home,
so every folder made on the way to the one asked for is its owner's only (0700): the home must not be
readable by other users because the registry happened to be made before the database.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE = 0o700


def make_folder(path: Path, mode: int = 0o777) -> None:
    """Make ``path`` with ``mode`` (less the umask), and every missing folder above it owner-only (0700).

    Folders that exist already keep their mode: an operator's choice is never changed.

    Args:
        path: The folder to make; nothing happens if it exists.
        mode: Its mode, as ``os.mkdir`` takes it.

    Raises:
        OSError: A folder could not be made (a file in the way, no permission, a read-only disk).
    """
    missing: list[Path] = []
    folder = Path(path).absolute()
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for above in reversed(missing[1:]):
        _make(above, PRIVATE)
    _make(Path(path), mode)


def _make(folder: Path, mode: int) -> None:
    try:
        os.mkdir(folder, mode)
    except FileExistsError:
        if not folder.is_dir():  # a file in the way; another process made the folder meanwhile is fine
            raise
