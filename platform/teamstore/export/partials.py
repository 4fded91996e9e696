"""The temporary archive beside an export's target: its name, and how one an export left is found and removed.

    from teamstore.export.partials import partial_path, partial_tags, remove_partial

    partial_path(Path("out/alice.zip"), "ex-1f3c...")      # out/.alice.zip.ex-1f3c....partial
    for export_id in partial_tags(Path("out/alice.zip"), "ex-1f3c..."):
        remove_partial(Path("out/alice.zip"), export_id)    # once its record says its export is over

An archive is written as ``.<name>.<tag>.partial`` beside its target (the tag: the export's id) and moved into
place once complete (:mod:`teamstore.export.archive`). Where the whole would be longer than the folder takes,
``<name>`` is cut short and ends ``~`` and a hash of the whole target name, so that targets sharing a long
beginning never share their temporary names: an export finds and removes only its own target's.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
from pathlib import Path

from teamstore.errors import ExportFailed

_HASHED = 12
"""Hex characters of the target name's SHA-256 kept in a cut temporary name (``~`` and these)."""


def partial_path(target: Path, tag: str) -> Path:
    """Where the archive for ``target`` is written until it is committed: ``.<name>.<tag>.partial`` beside it,
    ``<name>`` cut short (by whole characters) and marked with a hash of the whole when the whole would pass the
    longest name its folder takes, so that any target name the filesystem takes can be exported to; the tag is
    kept whole: it names the export.

    Raises:
        ExportFailed: The folder takes names too short for the tag (a filesystem reporting a limit of a few
            bytes), or ``target`` names no file (``.``, ``/``).
    """
    if not target.name:
        raise ExportFailed(f"{target} names no file or folder of its own (it is a folder's own name)",
                           hint="give --output a new path (a name inside that folder)")
    ending = f".{tag}.partial"
    room = _name_max(target.parent) - 1 - len(os.fsencode(ending))
    if len(os.fsencode(target.name)) <= room:
        return target.with_name(f".{target.name}{ending}")
    mark = "~" + hashlib.sha256(os.fsencode(target.name)).hexdigest()[:_HASHED]
    room -= len(mark)
    if room < 0:
        raise ExportFailed(
            f"the folder {target.parent} takes names of at most {_name_max(target.parent)} bytes: too short for the "
            f"export's temporary archive ({len(ending) + len(mark) + 1} bytes at the least)",
            hint="give --output a path on another filesystem")
    name = target.name[:room]
    while len(os.fsencode(name)) > room:  # a name of characters longer than a byte in the encoding
        name = name[:-1]
    return target.with_name(f".{name}{mark}{ending}")


def partial_tags(target: Path, like: str) -> list[str]:
    """The tags of the temporary archives beside ``target`` (:func:`partial_path`) whose tags are as long as
    ``like`` (theirs cut the target's name alike, hash included: another target's are never among them).

    Raises:
        ExportFailed: As :func:`partial_path`.
    """
    stem = partial_path(target, like).name[:-len(f".{like}.partial")]
    pattern = f"{glob.escape(stem)}.{'?' * len(like)}.partial"
    return [path.name[len(stem) + 1:-len(".partial")] for path in target.parent.glob(pattern)]


def _name_max(folder: Path) -> int:
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):  # a folder not there (refused later, saying so), a system without the limit
        return 255
    return limit if limit >= 0 else 255  # -1: no limit reported


def remove_partial(target: Path, tag: str) -> bool:
    """Remove the temporary archive an export tagged ``tag`` left beside ``target`` (its export over, or killed
    outright before it committed); whether there was one. A symlink at its name is not followed (only removed).

    Raises:
        ExportFailed: It is there and could not be removed.
    """
    path = partial_path(target, tag)
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise ExportFailed(f"could not remove {path}, the temporary archive of an export that is over: "
                           f"{exc.strerror or exc}", hint="remove it yourself (it holds part of the user's data, "
                           "readable), then export again") from exc
    return True
