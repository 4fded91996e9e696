"""Removing a local transcript folder's files and folders beside other sweeps, erasures and writers: what another
one removed first is stepped over, never an error.

    from teamstore.audit.transcripts.local_removal import remove_if_empty, remove_older, remove_tree

    remove_tree(folder / "subjects" / subject)          # an erasure: everything below, following no link
    if remove_older(os.path.join(runs, name), cutoff):  # the sweep: a file past retention
        remove_if_empty(runs)                           # and its folder, once nothing is left in it

Nothing here flushes: :class:`~teamstore.audit.transcripts.local.LocalTranscriptStore` flushes each folder a
batch of removals changed, once.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from pathlib import Path


def remove_tree(base: Path) -> None:
    """Remove ``base`` and everything below it, following no link; what is gone already (all of it, or what
    a sweep took meanwhile) is removed all the same.

    Raises:
        OSError: The first thing that could not be removed (after removing all that could).
    """
    failed: list[BaseException] = []

    def note(_function: object, _path: object, exc: BaseException) -> None:
        if not isinstance(exc, FileNotFoundError):
            failed.append(exc)

    if sys.version_info >= (3, 12):
        shutil.rmtree(base, onexc=note)
    else:
        shutil.rmtree(base, onerror=lambda function, path, info: note(function, path, info[1]))
    if failed:
        raise failed[0]


def unlink_if_there(path: Path) -> bool:
    """Unlink ``path``; False if it was gone already."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def remove_older(path: str, cutoff: float) -> bool:
    """Unlink ``path`` if it was last written before ``cutoff``; False if it is newer or already gone."""
    try:
        if os.stat(path).st_mtime >= cutoff:
            return False
        os.unlink(path)
    except FileNotFoundError:
        return False  # another sweep or an erasure removed it first
    return True


def remove_if_empty(folder: str) -> bool:
    """Remove ``folder`` if it is empty; whether this removed it."""
    try:
        os.rmdir(folder)
    except OSError as exc:
        # Gone already (another sweep), or not empty (a writer just put an object there): both are fine.
        if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
            raise
        return False
    return True
