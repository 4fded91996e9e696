"""The transcript store interface, its declared capabilities and the object key layout.

    from teamstore.audit.transcripts.base import Capability, run_key

    key = run_key(RunKeys(subject_key, session_key), run_id)
    # -> subjects/<subject_key>/sessions/<session_key>/runs/<run_id>.jsonl.gz
    await store.put(key, body)
    if Capability.LOCAL_SWEEP in store.capabilities:
        await store.sweep(cutoff)   # callers ask before relying on a capability (see capabilities.py)

Keys are relative to the store's own prefix and carry no personal data: the subject key is random and the
session key a keyed hash, so one user's objects sit under one prefix and can be removed without a scan.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol, runtime_checkable

from teamstore.audit.transcripts.record import RunKeys
from teamstore.errors import InvalidIdentifier

SUFFIX = ".jsonl.gz"
SUBJECTS = "subjects"
"""The top folder of every object key: ``subjects/<subject_key>/...``."""
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


class Capability(StrEnum):
    """What a backend can do beyond put/get/list/delete; callers ask instead of guessing.

    A capability with methods of its own has a protocol in :mod:`teamstore.audit.transcripts.capabilities`,
    and :func:`~teamstore.audit.transcripts.capabilities.capability` returns the store typed as it.
    """

    VERSIONED_DELETE = "versioned_delete"  # delete() and delete_prefix() also remove old versions and delete markers
    VERSIONS = "versions"  # versions() lists every version and delete marker under a prefix
    BATCH_DELETE = "batch_delete"  # delete_versions() removes given versions and reports each one refused
    HOLDS = "holds"  # versions may be under a legal hold or retention that blocks deletion: hold() says
    LIFECYCLE_RULES = "lifecycle_rules"  # expiry is enforced by the service (apply_retention)
    LOCAL_SWEEP = "local_sweep"  # expiry is enforced by sweep()
    PARTIAL_WRITES = "partial_writes"  # a writer killed mid-write leaves a temporary file: partial_writes() lists them
    HOST_LOCAL = "host_local"  # kept on one machine's disk: present() says whether this machine has it
    SIBLINGS = "siblings"  # sibling() reaches another store of its kind with the same client (another bucket/prefix)
    MARKS = "marks"  # mark()/marked(): which state databases' writers put transcripts here, read wherever it is reached


@dataclass(frozen=True)
class StoredObject:
    """One object as a listing shows it: its key, when it was last written (UTC; to the second on S3) and its
    size in bytes."""

    key: str
    modified: datetime
    size: int


@runtime_checkable
class TranscriptStore(Protocol):
    """Where transcript objects live. Every method raises ``teamstore.errors`` types only."""

    url: str
    capabilities: frozenset[Capability]

    async def put(self, key: str, body: bytes, *, written_at: datetime | None = None) -> None:
        """Write one object (one request); overwriting the same key with the same body is harmless.
        ``written_at``: when the transcript was first written, for one written again or late (``keys migrate``,
        an outbox delivery); a store that expires objects by their write time (``LOCAL_SWEEP``) keeps it as
        theirs, so their retention runs from it."""

    async def get(self, key: str) -> bytes:
        """Read one object; raises ``TranscriptNotFound`` if absent."""

    async def list_keys(self, prefix: str) -> list[str]:
        """Keys under ``prefix`` (relative to the store), sorted."""

    def scan(self, prefix: str) -> AsyncIterator[StoredObject]:
        """Objects under ``prefix`` with their write times and sizes, in no set order, a page at a time: a caller
        that keeps only some of them holds only those (and one page) in memory."""

    async def delete(self, key: str) -> int:
        """Delete the object at ``key``, every version of it; returns how many versions were removed.
        A version the backend refuses to delete raises ``TranscriptUnavailable`` (the others are gone)."""

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``; returns how many were removed (0 for a prefix deleted already,
        as an erasure's rerun finds it). A version the backend refuses to delete raises ``TranscriptUnavailable``
        naming how many and why (the others are gone); a local folder, ``StorageError``."""

    async def sweep(self, older_than: datetime) -> int:
        """Remove objects last written before ``older_than`` (backends with ``LOCAL_SWEEP``)."""

    async def close(self) -> None:
        """Release connections."""


def safe_segment(value: str) -> str:
    """``value`` if it is a plain key segment, else a stable hash of it (never a path)."""
    if _SEGMENT.fullmatch(value):
        return value
    return "h-" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def subject_prefix(subject_key: str) -> str:
    """The prefix holding every object of one subject (what erasure deletes)."""
    return f"{SUBJECTS}/{_checked(subject_key)}/"


def session_prefix(keys: RunKeys) -> str:
    """The prefix holding every run of one session."""
    return f"{subject_prefix(keys.subject_key)}sessions/{_checked(keys.session_key)}/runs/"


def run_key(keys: RunKeys, run_id: str) -> str:
    """The object key of one run."""
    return f"{session_prefix(keys)}{safe_segment(run_id)}{SUFFIX}"


def run_id_of(key: str) -> str:
    """The run segment of a key made by :func:`run_key`."""
    return key.rsplit("/", 1)[-1].removesuffix(SUFFIX)


def _checked(segment: str) -> str:
    if not _SEGMENT.fullmatch(segment):
        raise InvalidIdentifier(
            "a transcript key's segment is not a pseudonymous key (not repeated here: it may be a user's id)",
            hint="build keys with teamstore.audit.subjects, never from raw user or session ids",
        )
    return segment


def check_key(key: str) -> str:
    """Refuse keys that could escape the store's root (``..``, absolute paths, empty segments)."""
    parts = key.split("/")
    if key.startswith("/") or "\\" in key or "" in parts[:-1] or any(p in (".", "..") for p in parts):
        raise InvalidIdentifier("unsafe transcript key: it is absolute, or has an empty, '.' or '..' segment or a "
                                "backslash (not repeated here: it may hold a user's id)", hint="use keys built by run_key()")
    return key
