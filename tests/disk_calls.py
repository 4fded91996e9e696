"""The flushes and renames a write makes, in the order it makes them: each call still done, only noted.

    calls = record_disk_calls(monkeypatch)
    write_the_file(target)
    seen = calls.around(target)
    assert seen.source in seen.before and target.parent in seen.after

A file that takes its name by a rename (or a link) survives a power loss only if its bytes were flushed
(``os.fsync`` of the file) before the rename, and its new name after it (``os.fsync`` of its folder). A flush is
noted by the path of the file descriptor flushed, as Linux names it (``/proc/self/fd``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

_MOVES = ("replace", "rename", "link")


@dataclass(frozen=True)
class Around:
    """What was flushed before and after the last move onto a target."""

    source: Path
    """What was moved there (a temporary file or folder)."""
    before: list[Path]
    after: list[Path]


@dataclass
class DiskCalls:
    """``os.fsync`` (by the path flushed), ``os.replace``, ``os.rename`` and ``os.link`` (by source and target)."""

    calls: list[tuple[str, Path, Path | None]] = field(default_factory=list)
    failing: dict[Path, int] = field(default_factory=dict)
    """Paths whose flush fails (with the errno given), after it is noted: a disk that fails it."""
    failing_files_in: set[Path] = field(default_factory=set)
    """Folders the flush of any file in fails so, EIO (a temporary file's random name is not known beforehand)."""
    refused_opens: dict[Path, int] = field(default_factory=dict)
    """Paths whose ``os.open`` fails (with the errno given): a folder this process may not read."""

    def around(self, target: Path) -> Around:
        """The flushes before and after the last move onto ``target``.

        Raises:
            AssertionError: Nothing was moved onto it.
        """
        wanted = _real(target)
        moves = [i for i, (kind, _, to) in enumerate(self.calls) if kind in _MOVES and to == wanted]
        assert moves, f"nothing was renamed to {target}: {self.calls}"
        at = moves[-1]
        flushed = [(i, path) for i, (kind, path, _) in enumerate(self.calls) if kind == "fsync"]
        return Around(self.calls[at][1], [path for i, path in flushed if i < at], [path for i, path in flushed if i > at])

    def flushed(self) -> list[Path]:
        """Every path flushed, in order."""
        return [path for kind, path, _ in self.calls if kind == "fsync"]

    def fail_flush_of(self, path: Path, code: int = errno.EIO) -> None:
        """Make every later flush of ``path`` fail with ``code``: ``EIO`` as a failing disk does, ``EINVAL`` as a
        filesystem that does not flush folders does."""
        self.failing[_real(path)] = code

    def refuse_open_of(self, path: Path, code: int = errno.EACCES) -> None:
        """Make every later ``os.open`` of ``path`` fail with ``code``, as for a folder this process may write
        into but not read (``0300``; root reads it all the same, so a test cannot just chmod it)."""
        self.refused_opens[_real(path)] = code

    def fail_file_flushes_in(self, folder: Path) -> None:
        """Make every later flush of a file in ``folder`` fail, as a failing disk does."""
        self.failing_files_in.add(_real(folder))

    def fails(self, path: Path) -> int | None:
        """The errno the flush of ``path`` is to fail with; ``None`` when it is to be done."""
        if path in self.failing:
            return self.failing[path]
        return errno.EIO if path.parent in self.failing_files_in and not path.is_dir() else None


def record_disk_calls(monkeypatch: pytest.MonkeyPatch) -> DiskCalls:
    """Note each flush and move from now to the test's end (in every thread), each still done."""
    calls = DiskCalls()
    fsync = os.fsync

    def noted_fsync(fd: Any) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}"))
        calls.calls.append(("fsync", path, None))
        if (code := calls.fails(path)) is not None:
            raise OSError(code, os.strerror(code))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", noted_fsync)
    monkeypatch.setattr(os, "open", _refusing_open(calls, os.open))
    for kind in _MOVES:
        monkeypatch.setattr(os, kind, _noted_move(calls, kind, getattr(os, kind)))
    return calls


def _noted_move(calls: DiskCalls, kind: str, move: Callable[..., None]) -> Callable[..., None]:
    def noted(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        source_path, target_path = _real(Path(source)), _real(Path(target))  # before: the source is gone after
        move(source, target, *args, **kwargs)
        calls.calls.append((kind, source_path, target_path))

    return noted


def _refusing_open(calls: DiskCalls, open_: Callable[..., int]) -> Callable[..., int]:
    def refusing(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if calls.refused_opens and kwargs.get("dir_fd") is None:
            code = calls.refused_opens.get(_real(Path(os.fsdecode(path))))
            if code is not None:
                raise OSError(code, os.strerror(code), os.fsdecode(path))
        return open_(path, flags, *args, **kwargs)

    return refusing


def _real(path: Path) -> Path:
    """``path`` with its folder's links resolved, as ``/proc/self/fd`` names it (the name itself kept)."""
    return Path(os.path.realpath(path.parent)) / path.name
