"""Transcripts in a local folder: the embedded default, with the same key layout as S3.

    from teamstore.audit.transcripts.local import LocalTranscriptStore

    store = LocalTranscriptStore(Path(".teamstore/transcripts"))
    await store.put("subjects/ab/sessions/cd/runs/r1.jsonl.gz", body)
    removed = await store.sweep(older_than=datetime.now(UTC) - timedelta(days=90))

Writes go to a temporary file and are renamed into place, so a reader never sees half an object. The
temporary file sits beside its object, inside the subject's folder, and is named after it
(``.tmp-<run>.jsonl.gz.<random>``): a writer killed before the rename leaves it there, where erasure finds it
(:meth:`LocalTranscriptStore.partial_writes`) and the retention sweep removes it once it is an hour old. The file
is flushed to the disk (``fsync``) before the rename, and its folder after it, with each folder's name above it
up to the root that this store has not flushed since it made it or started (a failed put's retry finds the folders
that put made, unflushed), so a transcript ``put`` returned for survives a power loss or the host's crash, not
only a killed process. A delete, an erasure's or the sweep's, flushes each folder it changed (once, however many
files went from it; the folder above one it removed) before it returns, so a power loss cannot bring back what it
said is gone.

teamstore makes no symbolic link below the root (the root itself may be one), and follows none there: a link
planted in a user's folder would hand whatever file it points at to that user's export, or take a write out of
the folder. Listings step over links; reading, writing or deleting a prefix through one is refused.

The folder holds a small marker, ``.teamstore-folder``, naming the state database it belongs to
(:meth:`LocalTranscriptStore.make_here`): a folder is one machine's disk, and a command that would deliver into
or sweep it (:mod:`teamstore.audit.placement`) tells the workers' folder from one it would only make here.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

from config_registry.folders import PRIVATE, make_folder
from teamstore.audit.transcripts.base import SUBJECTS, SUFFIX, Capability, StoredObject, check_key
from teamstore.audit.transcripts.local_removal import (
    remove_if_empty,
    remove_older,
    remove_tree,
    unlink_if_there,
)
from teamstore.disk import (
    FlushedFolders,
    folders_changed_by_making,
    fsync_file,
    fsync_folder,
    fsync_folders,
    fsync_name,
)
from teamstore.errors import StorageError, TranscriptNotFound, UploadInDoubt

TMP_PREFIX = ".tmp-"
MARKER = ".teamstore-folder"
"""The file at the root naming the state database the folder belongs to (outside ``subjects/``: no sweep, listing
or erasure sees it)."""
STALE_TMP_SECONDS = 3600
"""A temporary file this old belongs to a writer that died: a write takes seconds, never an hour."""
INLINE_WRITE_BYTES = 64 * 1024
"""A store that does not flush (``durable=False``) writes an object up to this size on the event loop: a write to
the page cache and a rename take tens of microseconds, less than handing it to a thread (the GIL reaches that
thread only when the loop next waits); a larger one in a thread. A flushing store writes every object in a thread:
an ``fsync`` waits for the disk, milliseconds the loop's other sessions would wait too."""
_PAGE = 1000  # objects a scan reads from the folder per step, as an S3 listing page holds


class LocalTranscriptStore:
    """A folder of ``.jsonl.gz`` objects.

    Args:
        root: The folder; created on first write.
        durable: Flush each transcript, and the folders holding it, to the disk before ``put`` returns
            (the marker too). ``False`` only to measure what that costs, or for data a host's crash may lose.
            Deletes are flushed either way: what an erasure said is gone must not come back.
    """

    capabilities = frozenset({Capability.LOCAL_SWEEP, Capability.PARTIAL_WRITES, Capability.HOST_LOCAL})

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.root = root
        self.url = root.resolve().as_uri()
        self.durable = durable
        # A put that failed after making its folders leaves them unflushed, and its retry finds them there.
        self._flushed = FlushedFolders(root)
        self._marker_flushed = False  # whether this store made or flushed the marker and the root's name

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def _link_on_way(self, path: Path) -> Path | None:
        """``path``, or the first folder between it and the root, if it is a symbolic link."""
        below = len(path.relative_to(self.root).parts)  # the root itself may be a link: an operator's choice
        return next((step for step in [path, *path.parents][:below] if step.is_symlink()), None)

    def _no_link(self, path: Path) -> None:
        """Refuse ``path`` if it, or a folder between it and the root, is a symbolic link.

        Raises:
            StorageError: One is.
        """
        link = self._link_on_way(path)
        if link is not None:
            raise StorageError(
                f"{link.relative_to(self.root).as_posix()} in the transcript folder is a symbolic link, which "
                "teamstore never makes and does not follow",
                hint="remove the link, and check who else can write to TEAMSTORE_TRANSCRIPTS_URL",
            )

    async def present(self) -> bool:
        """Whether the folder exists on this machine. Nothing removes the folder itself (the sweep prunes below
        it), so one a writer put transcripts in that is missing here is another machine's disk, or unmounted.

        Raises:
            StorageError: Something other than a folder stands at its path.
        """
        return await asyncio.to_thread(self._present)

    def _present(self) -> bool:
        if self.root.is_dir():
            return True
        if self.root.exists() or self.root.is_symlink():
            raise _not_a_folder(self.root)
        return False

    async def owner(self) -> str | None:
        """The id of the state database the folder's marker names; ``None`` when it has no marker (or no folder).

        Raises:
            StorageError: The marker cannot be read, or something other than a folder stands at its path.
        """
        return await asyncio.to_thread(self._owner)

    def _owner(self) -> str | None:
        if not self._present():
            return None
        try:
            found = json.loads((self.root / MARKER).read_text(encoding="utf-8")).get("database_id")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, AttributeError) as exc:
            raise StorageError(
                f"the transcript folder's marker {self.root / MARKER} cannot be read: {exc}",
                hint="remove it: the next run here writes it again, naming this machine's database",
            ) from exc
        return str(found) if found else None

    async def make_here(self, database_id: str) -> None:
        """Make the folder (owner-only) if this machine has none, and give it a marker naming ``database_id``
        if it has none; a marker there already is kept (two makers at once keep the first), and flushed with the
        folder's name up to the filesystem's root unless this store made or flushed it.

        Raises:
            StorageError: The folder or its marker could not be made or flushed (a file in the way, no permission,
                a disk that fails the flush).
        """
        await asyncio.to_thread(self._make_here, database_id)

    def _make_here(self, database_id: str) -> None:
        try:
            made = [] if self._present() else _folders_made(self.root, self.root)
            fd = os.open(self.root / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            self._flush_marker_found()
            return
        except OSError as exc:
            raise _unmade(self.root, exc) from exc
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"database_id": database_id}, handle)
                if self.durable:
                    handle.flush()
                    os.fsync(handle.fileno())
            if self.durable:  # the marker's name, and the root's if it was made here, in their folders
                for folder in (self.root, *made):
                    fsync_folder(folder)
        except OSError as exc:
            raise _unmade(self.root, exc) from exc
        self._marker_flushed = True

    def _flush_marker_found(self) -> None:
        """Flush a marker found there, its name, and the root's name up to the filesystem's root: a run whose flush
        of them failed (this process's, or an earlier one's: a new process knows none) left the marker there, and
        a rerun that only saw it would leave it unflushed for good. Once per store."""
        if self._marker_flushed or not self.durable:
            return
        try:
            fsync_file((self.root / MARKER).resolve())  # a marker an operator linked is read through its link too
            fsync_folder(self.root)
            self._flushed.flush_up(self.root)  # known flushed now: the next put does not flush it again
        except OSError as exc:
            raise StorageError(
                f"could not flush the transcript folder's marker in {self.root}: {exc.strerror or exc}",
                hint="check the disk under TEAMSTORE_TRANSCRIPTS_URL, then run again",
            ) from exc
        self._marker_flushed = True

    async def put(self, key: str, body: bytes, *, written_at: datetime | None = None) -> None:
        """Write ``body`` atomically, and durably unless the store is not, at ``key``; a new root folder is its
        owner's only (0700). In a thread (:data:`INLINE_WRITE_BYTES`). With ``written_at``, the file's modified
        time is that (the sweep counts retention from it), set before the file takes its name.

        Raises:
            StorageError: The folder is not writable, or a folder on the way is a symbolic link.
            UploadInDoubt: The transcript took its name, but its folder could not be flushed to the disk: it is
                there now, and may or may not be after a power loss.
        """
        stamp = written_at.timestamp() if written_at is not None else None
        path = self._path(key)
        self._no_link(path.parent)  # a few lstat calls, on the loop: as cheap as the stat in _put
        if len(body) <= INLINE_WRITE_BYTES and not self.durable:
            self._put(path, body, stamp)
        else:
            await asyncio.to_thread(self._put, path, body, stamp)

    def _put(self, path: Path, body: bytes, stamp: float | None = None) -> None:
        tmp: str | None = None
        renamed, root, durable = False, self.root, self.durable
        try:
            made: list[Path] = []
            if not path.parent.is_dir():  # a stat: cheaper than the mkdir that fails on every write after the first
                self._flushed.forget(path.parent)  # made again after a sweep or an erasure: its name not flushed
                made = _folders_made(path.parent, root)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{TMP_PREFIX}{path.name}.")
            with os.fdopen(fd, "wb") as handle:
                handle.write(body)
                if durable:  # before the rename: else a crash could leave the new name on an empty file
                    handle.flush()
                    os.fsync(handle.fileno())
            if stamp is not None:
                os.utime(tmp, (stamp, stamp))
            os.replace(tmp, path)
            tmp, renamed = None, True
            if durable:  # the new name, each folder made on the way, and those a failed put may have made
                fsync_name(path, made)
                self._flushed.flush_up(path.parent, flushed=[path.parent, *made])
        except OSError as exc:
            if renamed:  # under its name already: readable, and an erasure that listed before it must know
                raise UploadInDoubt(
                    f"transcript {path.name} is in its folder, but flushing the folder failed: "
                    f"{exc.strerror or exc}; it may or may not survive a power loss",
                    hint="check the disk under TEAMSTORE_TRANSCRIPTS_URL; the transcript counts as one that may land",
                ) from exc
            if tmp is not None:  # half a transcript (disk full, say) must not outlive the failed write
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            if root.exists() and not root.is_dir():  # "File exists" named neither the file nor what to do
                raise _not_a_folder(root) from exc
            raise StorageError(
                f"could not write transcript {path.name}: {exc.strerror or exc}",
                hint="check that TEAMSTORE_TRANSCRIPTS_URL names a writable folder",
            ) from exc

    async def get(self, key: str) -> bytes:
        """Read the object at ``key``.

        Raises:
            TranscriptNotFound: No object there.
            StorageError: It exists but cannot be read, or it (or a folder on its way) is a symbolic link.
        """
        return await asyncio.to_thread(self._read, key)

    def _read(self, key: str) -> bytes:
        path = self._path(key)
        try:
            self._no_link(path)
            # O_NOFOLLOW: a link put there since the look above is refused too.
            with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as handle:
                return handle.read()
        except FileNotFoundError as exc:
            raise TranscriptNotFound(
                f"no transcript at {key}", hint="check the user, session and run id"
            ) from exc
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                self._no_link(path)  # says which
            raise StorageError(
                f"could not read transcript {key}: {exc}", hint="check folder permissions"
            ) from exc

    async def list_keys(self, prefix: str) -> list[str]:
        """Keys under ``prefix``, sorted."""
        return await asyncio.to_thread(self._list, prefix)

    def _list(self, prefix: str) -> list[str]:
        return sorted(self._key(entry) for entry in self._files(prefix) if entry.name.endswith(SUFFIX))

    async def partial_writes(self, prefix: str) -> list[str]:
        """Keys of the temporary files under ``prefix`` that writers left (killed before the rename), sorted."""
        return await asyncio.to_thread(self._list_partial, prefix)

    def _list_partial(self, prefix: str) -> list[str]:
        return sorted(self._key(entry) for entry in self._files(prefix) if entry.name.startswith(TMP_PREFIX))

    async def scan(self, prefix: str) -> AsyncIterator[StoredObject]:
        """Objects under ``prefix`` with their modification times and sizes, read from the folder a page at a time.

        Raises:
            StorageError: A folder could not be read.
        """
        found = self._walk(prefix)
        while page := await asyncio.to_thread(list, itertools.islice(found, _PAGE)):
            for stored in page:
                yield stored

    def _walk(self, prefix: str) -> Iterator[StoredObject]:
        for entry in self._files(prefix):
            if entry.name.endswith(SUFFIX):
                try:
                    found = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed since the folder was read (a sweep, an erasure)
                except OSError as exc:
                    raise _unlisted(exc) from exc
                yield StoredObject(self._key(entry), datetime.fromtimestamp(found.st_mtime, UTC), found.st_size)

    def _files(self, prefix: str) -> Iterator[os.DirEntry[str]]:
        """The files under ``prefix``, a folder at a time, following no symbolic link (to a folder or a file):
        under a prefix reached through one, none.

        Raises:
            StorageError: A folder could not be read.
        """
        # os.scandir, not rglob or os.walk: those read a whole folder into a list first.
        base = self._path(prefix.rstrip("/")) if prefix else self.root
        if self._link_on_way(base) is not None:
            return
        folders = [os.fspath(base)]
        while folders:
            try:
                with os.scandir(folders.pop()) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            folders.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            yield entry
            except (FileNotFoundError, NotADirectoryError):
                continue  # no such folder (nothing stored), or removed meanwhile
            except OSError as exc:
                raise _unlisted(exc) from exc

    def _key(self, entry: os.DirEntry[str]) -> str:
        return Path(entry.path).relative_to(self.root).as_posix()

    async def delete(self, key: str) -> int:
        """Delete the object at ``key`` and the folders it leaves empty.

        Raises:
            StorageError: The file could not be removed.
        """
        return await asyncio.to_thread(self._delete, self._path(key))

    def _delete(self, path: Path) -> int:
        try:
            found = unlink_if_there(path)
            if found:
                # The folders are named by subject and session keys: none is left empty to say the run was there.
                for folder in itertools.takewhile(lambda step: step != self.root, path.parents):
                    remove_if_empty(os.fspath(folder))
            # Flushed even when it was gone: a delete killed before its flush is made good by its rerun.
            fsync_folders([path.parent], within=self.root)
        except OSError as exc:
            raise StorageError(
                f"could not delete transcript {path.name}: {exc.strerror or exc}",
                hint="check that this user may delete files under TEAMSTORE_TRANSCRIPTS_URL",
            ) from exc
        return int(found)

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix`` and the folder itself. A prefix with nothing under it any more
        (an erasure rerun after it was deleted) is deleted already: 0.

        Raises:
            StorageError: Something under it could not be removed (what could is gone), or it or a folder
                on its way is a symbolic link; named by the prefix, never by what is below it.
        """
        return await asyncio.to_thread(self._delete_prefix, prefix)

    def _delete_prefix(self, prefix: str) -> int:
        base = self._path(prefix.rstrip("/"))
        self._no_link(base)
        removed = sum(1 for entry in self._files(prefix) if entry.name.endswith(SUFFIX))  # counted, not kept
        try:
            remove_tree(base)
            # Its removal from the folder above (the files and folders below went with it), flushed even when
            # it was gone already: an erasure killed before this flush is made good by its rerun.
            fsync_folders([base.parent], within=self.root)
        except OSError as exc:
            raise StorageError(
                f"could not delete the transcripts under {prefix}: {exc.strerror or type(exc).__name__}",
                hint="check that this user may delete files under TEAMSTORE_TRANSCRIPTS_URL (and that no folder "
                "in it is a mount point or read-only), then delete again",
            ) from exc
        return removed

    async def sweep(self, older_than: datetime) -> int:
        """Remove objects whose modification time is before ``older_than``; prune empty folders.

        Temporary files a crashed writer left behind go once they are an hour old (or past ``older_than``),
        uncounted: no reader ever saw them, and they hold a whole transcript.
        Only teamstore's own layout (``subjects/``) is walked: other files in the folder are never touched.
        Safe beside other sweeps, erasures and writers: what another one removed first is stepped over.

        Raises:
            StorageError: A file or folder could not be removed (permissions, read-only file system),
                ``subjects/`` is a symbolic link, or a file stands at the folder's path.
        """
        return await asyncio.to_thread(self._sweep, older_than.astimezone(UTC).timestamp())

    def _sweep(self, cutoff: float) -> int:
        swept = _Swept(cutoff, max(cutoff, time.time() - STALE_TMP_SECONDS))
        self._present()  # a file at the root's path would be swept as an empty folder: "removed 0"
        self._no_link(self.root / SUBJECTS)  # os.walk follows its top: the sweep would unlink files elsewhere
        try:
            # Bottom-up, so each folder is looked at after its contents; os.walk skips folders that vanish.
            for folder, _dirs, files in os.walk(self.root / SUBJECTS, topdown=False):
                swept.folder(folder, files)
            # Each folder once however many files went from it, not a flush per file. A sweep that stops before
            # this flushes nothing: what a power loss brings back is past retention still, and the next sweep
            # removes it again.
            fsync_folders(swept.changed, within=self.root)
        except OSError as exc:
            raise StorageError(
                f"the transcript sweep stopped after removing {swept.removed} objects: {exc.strerror or exc}",
                hint="check that the sweeping user may delete files under TEAMSTORE_TRANSCRIPTS_URL",
            ) from exc
        return swept.removed

    async def close(self) -> None:
        """Nothing to release."""


def _folders_made(folder: Path, root: Path) -> list[Path]:
    """Make ``folder`` (and the root, and those between) if missing; return the folders whose entries changed
    making them: the parent of each folder made, deepest first (empty when ``folder`` was there).

    Objects are 0600 (mkstemp) and every folder 0700, whatever the umask: the folders' names are subject keys,
    and on a shared host other users need not list whose transcripts exist or how many runs each has, nor put
    files in them (a root an operator made keeps its own mode).
    """
    if folder.is_dir():
        return []
    changed = folders_changed_by_making(folder)
    if not root.is_dir():
        make_folder(root, PRIVATE)  # and the home above it, if this is the first thing made there
    make_folder(folder, PRIVATE)
    return changed


class _Swept:
    """What a sweep removed so far, and the folders whose entries that changed (flushed once it is done)."""

    def __init__(self, cutoff: float, stale: float) -> None:
        self.cutoff, self.stale = cutoff, stale
        self.removed = 0
        self.changed: set[Path] = set()

    def folder(self, folder: str, files: list[str]) -> None:
        """Remove the objects past the cutoff and the stale temporary files in ``folder``, then the folder if
        that left it empty."""
        for name in files:
            is_object, is_tmp = name.endswith(SUFFIX), name.startswith(TMP_PREFIX)
            limit = self.stale if is_tmp else self.cutoff
            if (is_object or is_tmp) and remove_older(os.path.join(folder, name), limit):
                self.removed += is_object
                self.changed.add(Path(folder))
        if remove_if_empty(folder):
            self.changed.add(Path(folder).parent)


def _unmade(root: Path, exc: OSError) -> StorageError:
    return StorageError(
        f"could not make the transcript folder {root}: {exc.strerror or exc}",
        hint="check that TEAMSTORE_TRANSCRIPTS_URL names a folder this user may create and write",
    )


def _not_a_folder(root: Path) -> StorageError:
    return StorageError(
        f"the transcript folder {root} is not a folder: a file (or a link to one) stands at its path",
        hint="move that file away, or set TEAMSTORE_TRANSCRIPTS_URL to the folder the transcripts belong in",
    )


def _unlisted(exc: OSError) -> StorageError:
    return StorageError(f"could not list transcripts: {exc.strerror or exc}", hint="check folder permissions")
