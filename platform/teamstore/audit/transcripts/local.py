"""Transcripts in a local folder: the embedded default, with the same key layout as S3.

    from teamstore.audit.transcripts.local import LocalTranscriptStore

    store = LocalTranscriptStore(Path(".teamstore/transcripts"))
    await store.put("subjects/ab/sessions/cd/runs/r1.jsonl.gz", body)
    removed = await store.sweep(older_than=datetime.now(UTC) - timedelta(days=90))

Writes go to a temporary file and are renamed into place, so a reader never sees half an object.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from teamstore.audit.transcripts.base import SUFFIX, Capability, check_key
from teamstore.errors import StorageError, TranscriptNotFound


class LocalTranscriptStore:
    """A folder of ``.jsonl.gz`` objects.

    Args:
        root: The folder; created on first write.
    """

    capabilities = frozenset({Capability.LOCAL_SWEEP})

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = root.resolve().as_uri()

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    async def put(self, key: str, body: bytes) -> None:
        """Write ``body`` atomically at ``key``.

        Raises:
            StorageError: The folder is not writable.
        """
        await asyncio.to_thread(self._put, self._path(key), body)

    @staticmethod
    def _put(path: Path, body: bytes) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(body)
            os.replace(tmp, path)
        except OSError as exc:
            raise StorageError(
                f"could not write transcript {path.name}: {exc.strerror or exc}",
                hint="check that TEAMSTORE_TRANSCRIPTS_URL names a writable folder",
            ) from exc

    async def get(self, key: str) -> bytes:
        """Read the object at ``key``.

        Raises:
            TranscriptNotFound: No object there.
            StorageError: It exists but cannot be read.
        """
        path = self._path(key)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError as exc:
            raise TranscriptNotFound(
                f"no transcript at {key}", hint="check the user, session and run id"
            ) from exc
        except OSError as exc:
            raise StorageError(
                f"could not read transcript {key}: {exc}", hint="check folder permissions"
            ) from exc

    async def list_keys(self, prefix: str) -> list[str]:
        """Keys under ``prefix``, sorted."""
        return await asyncio.to_thread(self._list, prefix)

    def _list(self, prefix: str) -> list[str]:
        base = self._path(prefix.rstrip("/")) if prefix else self.root
        if not base.is_dir():
            return []
        return sorted(p.relative_to(self.root).as_posix() for p in base.rglob(f"*{SUFFIX}") if p.is_file())

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix`` and the folder itself."""
        keys = await self.list_keys(prefix)
        base = self._path(prefix.rstrip("/"))
        await asyncio.to_thread(shutil.rmtree, base, True)
        return len(keys)

    async def sweep(self, older_than: datetime) -> int:
        """Remove objects whose modification time is before ``older_than``; prune empty folders."""
        return await asyncio.to_thread(self._sweep, older_than.astimezone(UTC).timestamp())

    def _sweep(self, cutoff: float) -> int:
        removed = 0
        if not self.root.is_dir():
            return 0
        for path in self.root.rglob(f"*{SUFFIX}"):
            if path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink(missing_ok=True)
                removed += 1
        for folder in sorted((p for p in self.root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            if not any(folder.iterdir()):
                folder.rmdir()
        return removed

    async def close(self) -> None:
        """Nothing to release."""
