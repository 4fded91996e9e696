"""Making folders without handing a stranger the folders above them.

    import subprocess

    from config_registry.folders import make_folder, umask

    make_folder(Path("home/registry"), 0o755)        # the registry itself: no one else may write it
    make_folder(Path("home/transcripts"), 0o700)     # its owner's only
    subprocess.run(["git", "init"], umask=umask() | 0o022)   # what git makes: not writable by others either

A folder made for one store often sits in a home that holds others: an application keeps the registry,
its database and its transcript folder in one home folder. Whichever of them is made first makes the home,
so every folder made on the way to the one asked for is its owner's only (0700): the home must not be
readable by other users because the registry happened to be made before the database.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PRIVATE = 0o700
SHARED = 0o755
"""Readable by everyone, written by its owner only: the registry's folders (its files are 0644)."""


def make_folder(path: Path, mode: int = 0o777, *, above: int = PRIVATE) -> None:
    """Make ``path`` with ``mode`` (less the umask), and every missing folder above it owner-only (0700).

    Folders that exist already keep their mode: an operator's choice is never changed.

    Args:
        path: The folder to make; nothing happens if it exists.
        mode: Its mode, as ``os.mkdir`` takes it.
        above: The mode of the missing folders above it: a folder inside a store (whose root exists) takes
            the store's mode rather than a home's.

    Raises:
        OSError: A folder could not be made (a file in the way, no permission, a read-only disk).
    """
    missing: list[Path] = []
    folder = Path(path).absolute()
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing[1:]):
        _make(folder, above)
    _make(Path(path), mode)


def umask() -> int:
    """This process's umask, unchanged.

    Linux says it in ``/proc``; elsewhere it can only be read by setting another, so it is set to
    owner-only for that moment (a file another thread makes then is the stricter for it, never looser).
    """
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def _make(folder: Path, mode: int) -> None:
    try:
        os.mkdir(folder, mode)
    except FileExistsError:
        if not folder.is_dir():  # a file in the way; another process made the folder meanwhile is fine
            raise
