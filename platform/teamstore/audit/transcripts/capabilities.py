"""What a transcript store can do beyond put/get/list/delete: one small protocol per declared capability.

    from teamstore.audit.transcripts.base import Capability
    from teamstore.audit.transcripts.capabilities import capability

    listing = capability(store, Capability.VERSIONS)       # Versions | None
    if listing is not None:
        found = await listing.versions(subject_prefix(subject_key))

A store declares what it supports in ``store.capabilities`` (:class:`~teamstore.audit.transcripts.base.Capability`)
and implements the matching protocol below; a caller asks :func:`capability`, which returns the store typed as
that protocol, or ``None`` when the store declares it absent. Nothing outside ``teamstore.audit.transcripts``
reaches into a backend's client, bucket or folder.

| capability | protocol | S3 | local folder |
|---|---|---|---|
| ``VERSIONS`` | :class:`Versions`: every version and delete marker under a prefix (all at once or page by page), and any version's bytes, or its first ones | yes | no (one copy per object) |
| ``BATCH_DELETE`` | :class:`BatchDelete`: remove given versions, reporting each one refused | yes | no |
| ``HOLDS`` | :class:`Holds`: whether a legal hold or a retention period protects a version | yes | no (nothing locks a file) |
| ``LIFECYCLE_RULES`` | :class:`Lifecycle`: the service expires objects (a lifecycle rule) | yes | no (``sweep()`` does) |
| ``PARTIAL_WRITES`` | :class:`PartialWrites`: temporary files a killed writer left | no (a PUT is whole or absent) | yes |
| ``HOST_LOCAL`` | :class:`HostLocal`: whether this machine has the store at all, and which database it belongs to | no (reached from anywhere) | yes |
| ``MARKS`` | :class:`Marks`: a mark per state database whose writers put transcripts here, so a pass reaching the store at another endpoint can tell it (a proxy, another host name) from another server's bucket of the same name | yes (an object per database beside the transcripts) | no (:class:`HostLocal`'s marker) |
| ``SIBLINGS`` | :class:`Siblings`: another store of the same kind, by its URL, reached with this one's client, and the endpoint that client talks to (recorded with each store) | yes (another bucket or prefix, same endpoint and credentials) | no (a folder is opened by its URL alone) |
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, Protocol, TypeVar, overload, runtime_checkable

from teamstore.audit.transcripts.base import Capability, TranscriptStore
from teamstore.errors import ConfigurationError

T = TypeVar("T")

AWS_OWN = "aws"
"""The endpoint recorded for a store on AWS's own S3 (any ``amazonaws.com`` host: one namespace of buckets); a
record with none is from before endpoints were recorded (migration 0029), or of a folder."""


def aws_host(host: str) -> bool:
    """Whether ``host`` (lower case) is one of AWS's, S3's or any other service's (a load balancer's, an
    instance's): before S3's own were told apart, every one was recorded as :data:`AWS_OWN`."""
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn"))


@dataclass(frozen=True)
class ObjectVersion:
    """One stored version of an object, or a delete marker, as a versions listing shows it.

    ``key`` is relative to the store, as every key the store takes; ``size`` is 0 for a delete marker.
    """

    key: str
    version_id: str
    size: int
    delete_marker: bool = False


@dataclass(frozen=True)
class Refusal:
    """A version the store was asked to delete and did not: still there, with the service's error code for it
    (``AccessDenied`` for one under Object Lock, ``InternalError``, ...)."""

    version: ObjectVersion
    code: str


class HoldStatus(StrEnum):
    """Whether something keeps a version from being deleted."""

    HELD = "held"  # a legal hold, or a retention period not yet over: the service refuses to delete it
    FREE = "free"  # nothing protects it
    GONE = "gone"  # no such version any more, or a delete marker (which no lock covers)


@runtime_checkable
class Versions(Protocol):
    """``Capability.VERSIONS``: a store that keeps earlier versions and delete markers lists them."""

    async def versions(self, prefix: str) -> list[ObjectVersion]:
        """Every version and delete marker under ``prefix`` (relative to the store), in no set order.

        Raises:
            TranscriptUnavailable: The store could not be listed; the message names no key.
        """

    def version_pages(self, prefix: str) -> AsyncIterator[list[ObjectVersion]]:
        """The same, a listing page at a time (at least one, perhaps empty): what a caller walking a prefix of
        any size holds. Each page may be deleted as it comes; the pages after it are listed all the same.

        Raises:
            TranscriptUnavailable: The store could not be listed; the message names no key.
        """

    async def read_version(self, version: ObjectVersion, *, length: int | None = None) -> bytes:
        """The bytes of one version as stored (an earlier version of a key, or one under a delete marker): all of
        them, or with ``length`` only the first ``length`` (fewer if the version is shorter), as one ranged read.

        Raises:
            TranscriptNotFound: No such version any more (deleted since the listing), or a delete marker.
            TranscriptUnavailable: The store could not be read; the message names no key.
        """


@runtime_checkable
class BatchDelete(Protocol):
    """``Capability.BATCH_DELETE``: a store that deletes versions in batches says which ones it refused."""

    async def delete_versions(self, versions: Sequence[ObjectVersion]) -> list[Refusal]:
        """Delete ``versions`` (any number; the store splits them as its service needs).

        Returns:
            The versions the service refused, each with its error code; empty when every one is gone.

        Raises:
            TranscriptUnavailable: A whole request failed (unreachable, access denied); the message names no key.
        """


@runtime_checkable
class Holds(Protocol):
    """``Capability.HOLDS``: versions may be under a legal hold or a retention period that blocks deletion."""

    async def hold(self, version: ObjectVersion) -> HoldStatus:
        """Whether a legal hold or an unexpired retention protects ``version`` (or it is gone).

        Raises:
            TranscriptUnavailable: The version's lock could not be read; the message names no key.
        """


@runtime_checkable
class Lifecycle(Protocol):
    """``Capability.LIFECYCLE_RULES``: the service expires objects itself once told how long to keep them."""

    async def apply_retention(self, days: int) -> dict[str, Any]:
        """Put (or replace) the store's expiry rule: current objects go ``days`` after they were written.

        Returns:
            The rule as put (JSON-ready).

        Raises:
            TranscriptUnavailable: The service refused or could not be reached.
        """


@runtime_checkable
class PartialWrites(Protocol):
    """``Capability.PARTIAL_WRITES``: a writer killed between writing an object and putting it in place leaves
    the whole object behind under another name, beside where it belonged."""

    async def partial_writes(self, prefix: str) -> list[str]:
        """Keys of the temporary files under ``prefix``: what erasure must remove besides the objects."""


@runtime_checkable
class HostLocal(Protocol):
    """``Capability.HOST_LOCAL``: the store is kept on one machine's disk (a folder). Seen from another machine
    (or without its mount) it is absent, and a listing there gives nothing, as if it held no transcript."""

    async def present(self) -> bool:
        """Whether this machine has the store (its folder exists here).

        Raises:
            StorageError: Something other than the store stands where it belongs (a file at the folder's path).
        """

    async def owner(self) -> str | None:
        """The id of the state database the store here was made for (:func:`teamstore.db.identity.database_id`),
        or ``None`` if it records none (made by hand, or before stores recorded it).

        Raises:
            StorageError: The record cannot be read.
        """

    async def make_here(self, database_id: str) -> None:
        """Make the store on this machine if it has none, recording ``database_id`` unless one is recorded; a
        record there already is made durable unless this store knows it is (an earlier run's may not be).

        Raises:
            StorageError: It could not be made, or its record made durable.
        """


async def missing_here(store: TranscriptStore) -> bool:
    """Whether ``store`` is kept on one machine's disk and this machine does not have it: a store a writer put
    transcripts in that is missing here is another machine's (nothing removes a store's folder itself)."""
    local = capability(store, Capability.HOST_LOCAL)
    return local is not None and not await local.present()


async def holds_any(store: TranscriptStore, prefix: str) -> bool:
    """Whether ``store`` holds anything under ``prefix``, found where it lies rather than by any record of what
    was written there: a version or delete marker (``VERSIONS``), else a current object, or a temporary file a
    killed writer left (``PARTIAL_WRITES``). Each listing stops at its first page.

    Raises:
        TranscriptUnavailable, StorageError: The store could not be listed (named by the store, never by key).
    """
    versions = capability(store, Capability.VERSIONS)
    if versions is not None:
        return bool(await _first(versions.version_pages(prefix)))
    if await _first(store.scan(prefix)) is not None:
        return True
    partial = capability(store, Capability.PARTIAL_WRITES)
    return partial is not None and bool(await partial.partial_writes(prefix))


async def _first(items: AsyncIterator[T]) -> T | None:
    """The first of ``items`` (``None`` if none), the listing closed after it rather than left to the collector."""
    try:
        return await anext(items, None)
    finally:
        close = getattr(items, "aclose", None)
        if close is not None:
            await close()


@runtime_checkable
class Siblings(Protocol):
    """``Capability.SIBLINGS``: a store reached through a client (endpoint, credentials) reaches other stores of
    its kind through the same one, so a caller holding it can open another store a record names."""

    @property
    def endpoint(self) -> str | None:
        """The endpoint the client talks to, as recorded with each store it reaches (for S3, ``"aws"`` for
        AWS's own); a store of another endpoint is none of its siblings."""

    def sibling(self, url: str) -> TranscriptStore | None:
        """The store ``url`` names, through this store's client; ``None`` when ``url`` is not of this kind (or
        names no valid one). Closing it leaves the client open: this store owns it."""


@runtime_checkable
class Marks(Protocol):
    """``Capability.MARKS``: the store is reached by name wherever it is asked (an S3 bucket at an endpoint),
    and another server can hold one of the same name. Writers mark it as their state database's, at the endpoint
    they reach it at, from their first run there, so whoever reaches it later, through any endpoint, can tell
    whether it is the store a record names (written at that endpoint)."""

    async def mark(self, database_id: str, endpoint: str | None = None) -> None:
        """Mark the store as one ``database_id``'s writers reach at ``endpoint`` (by default this store's), unless
        it is already.

        Raises:
            TranscriptUnavailable: The store could not be reached, or refused the mark (access denied).
        """

    async def marked(self, database_id: str, endpoint: str) -> bool | None:
        """Whether writers of ``database_id`` marked the store at ``endpoint`` (:meth:`mark`); ``None`` when the
        store answers that it will not say (access denied).

        Raises:
            TranscriptUnavailable: The store could not be reached, or failed.
        """


PROTOCOLS: dict[Capability, type] = {
    Capability.VERSIONS: Versions,
    Capability.BATCH_DELETE: BatchDelete,
    Capability.HOLDS: Holds,
    Capability.LIFECYCLE_RULES: Lifecycle,
    Capability.PARTIAL_WRITES: PartialWrites,
    Capability.HOST_LOCAL: HostLocal,
    Capability.SIBLINGS: Siblings,
    Capability.MARKS: Marks,
}
"""The protocol each capability with methods of its own stands for."""


@overload
def capability(store: TranscriptStore, which: Literal[Capability.VERSIONS]) -> Versions | None: ...
@overload
def capability(store: TranscriptStore, which: Literal[Capability.BATCH_DELETE]) -> BatchDelete | None: ...
@overload
def capability(store: TranscriptStore, which: Literal[Capability.HOLDS]) -> Holds | None: ...
@overload
def capability(store: TranscriptStore, which: Literal[Capability.LIFECYCLE_RULES]) -> Lifecycle | None: ...
@overload
def capability(store: TranscriptStore, which: Literal[Capability.PARTIAL_WRITES]) -> PartialWrites | None: ...
@overload
def capability(store: TranscriptStore, which: Literal[Capability.HOST_LOCAL]) -> HostLocal | None: ...
@overload
def capability(store: TranscriptStore, which: Literal[Capability.SIBLINGS]) -> Siblings | None: ...
@overload
def capability(store: TranscriptStore, which: Literal[Capability.MARKS]) -> Marks | None: ...
def capability(store: TranscriptStore, which: Capability) -> object | None:
    """``store`` typed as the protocol of ``which``, or ``None`` when the store does not declare it.

    Args:
        store: A transcript store.
        which: A capability with a protocol of its own (see :data:`PROTOCOLS`).

    Returns:
        The same store object, or ``None``.

    Raises:
        ConfigurationError: The store declares the capability but lacks the protocol's methods (a backend
            bug: a caller would otherwise fail half-way through, an erasure with some versions deleted).
    """
    if which not in store.capabilities:
        return None
    protocol = PROTOCOLS[which]
    if not isinstance(store, protocol):
        raise ConfigurationError(
            f"the transcript store {type(store).__name__} declares {which.value} but lacks {protocol.__name__}'s "
            "methods",
            hint="implement them in the backend or drop the capability from its declaration",
        )
    return store
