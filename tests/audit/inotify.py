"""What happens in a folder, as Linux's inotify reports it: names made, written, renamed, removed, and the folder
opened.

    with FolderWatch(folder) as watch:
        ...                                  # write into the folder
    watch.events()                           # [("create", ".tmp-r1..."), ..., ("moved_to", "r1.jsonl.gz")]

A folder is opened (``("open", "")``) to list it, or to ``fsync`` its entries: a writer that lists nothing and
opens its folder after a rename (or a remover after its last ``("delete", name)``) is flushing that change to the
disk.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from pathlib import Path
from types import TracebackType
from typing import Self

_KINDS = {0x08: "close_write", 0x20: "open", 0x40: "moved_from", 0x80: "moved_to", 0x100: "create", 0x200: "delete"}
_ISDIR = 0x40000000
_HEAD = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name, NUL-padded

AVAILABLE = sys.platform.startswith("linux")


class FolderWatch:
    """The events of one folder (not of those below it) from entering the block to :meth:`events`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._fd = -1

    def __enter__(self) -> Self:
        libc = ctypes.CDLL(None, use_errno=True)
        self._fd = libc.inotify_init1(os.O_NONBLOCK)
        if self._fd < 0 or libc.inotify_add_watch(self._fd, os.fsencode(self.folder), sum(_KINDS)) < 0:
            raise OSError(ctypes.get_errno(), "inotify refused the watch")
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        os.close(self._fd)

    def events(self) -> list[tuple[str, str]]:
        """Each event so far, in order: its kind and the name it is about (``""``: the folder itself)."""
        try:
            data = os.read(self._fd, 1 << 16)
        except BlockingIOError:
            return []
        found, at = [], 0
        while at < len(data):
            _wd, mask, _cookie, size = _HEAD.unpack_from(data, at)
            name = data[at + _HEAD.size: at + _HEAD.size + size].rstrip(b"\0").decode()
            found += [(kind, name) for bit, kind in _KINDS.items() if mask & bit and not (bit == 0x20 and name)]
            at += _HEAD.size + size
        return found
