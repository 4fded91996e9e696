"""How the transcript step reaches one store's versions, by the store's declared capabilities, and what its
listings and refusals come to.

    from teamstore.erasure.steps.views import tallied, view_of

    view = view_of(store, ctx.held)                 # VersionedObjects (S3) or PlainObjects (a folder)
    found = await tallied(view, subject_prefix(subject_key))
    print(found.counts().objects)

Apart from the step (which only orchestrates), so that any pass over a transcript store reaches it the same way.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from teamstore.audit.transcripts.base import Capability, TranscriptStore
from teamstore.audit.transcripts.capabilities import (
    BatchDelete,
    Holds,
    HoldStatus,
    ObjectVersion,
    PartialWrites,
    Versions,
    capability,
)
from teamstore.erasure.receipt import Counts
from teamstore.erasure.steps.base import HeldVersions, StepContext
from teamstore.errors import TeamstoreError, TranscriptNotFound, TranscriptUnavailable
from teamstore.keys.sealed import HEADER_BYTES, key_id_of

PAGE = 1000
"""Objects of a folder counted per page (as many as an S3 listing page holds)."""
T = TypeVar("T")


@dataclass
class Tally:
    """What listing pages held, counted as they come and none of them kept.

    A listing gives a key's versions together and the keys in order, so a key seen on the last page and
    again on this one is the only one counted twice otherwise (a folder's keys each appear once).
    """

    objects: int = 0
    versions: int = 0
    delete_markers: int = 0
    bytes: int = 0
    last_key: str | None = None

    def add(self, page: list[ObjectVersion]) -> None:
        """Count one page."""
        keys = {v.key for v in page}
        real = [v for v in page if not v.delete_marker]
        self.objects += len(keys - {self.last_key})
        self.versions += len(real)
        self.delete_markers += len(page) - len(real)
        self.bytes += sum(v.size for v in real)
        self.last_key = max(keys, default=self.last_key)

    @property
    def listed(self) -> int:
        """Versions and delete markers counted so far."""
        return self.versions + self.delete_markers

    def counts(self, retained: int = 0, unreadable: int = 0) -> Counts:
        """The counts so far, with what remains under a hold."""
        return Counts(objects=self.objects, versions=self.versions, delete_markers=self.delete_markers,
                      bytes=self.bytes, retained=retained, unreadable=unreadable)


@dataclass
class Kept:
    """The versions the store refused to delete, page after page: how many a hold explains (still readable, or
    sealed under a destroyed key), counted as a listing counts them too (``held``) and kept (``versions``: the
    attempt keeps each held version already, :class:`~teamstore.erasure.steps.base.HeldVersions`), and how many
    nothing explains, by the store's error codes."""

    retained: int = 0
    unreadable: int = 0
    unexplained: int = 0
    codes: set[str] = field(default_factory=set)
    held: Tally = field(default_factory=Tally)
    versions: list[ObjectVersion] = field(default_factory=list)

    async def add(self, ctx: StepContext, view: View, refused: dict[ObjectVersion, str]) -> None:
        """Ask about each version refused on one page."""
        held: list[ObjectVersion] = []
        for version, code in refused.items():
            state = await view.held(version)
            if state is HoldStatus.FREE:
                self.unexplained += 1
                self.codes.add(code)
            elif state is HoldStatus.HELD:
                held.append(version)
                beyond_use = await is_beyond_use(ctx, view, version)
                self.unreadable += beyond_use
                self.retained += not beyond_use
        if held:
            self.held.add(held)
            self.versions += held

    def check(self, store: str | None = None) -> None:
        """Fail when a refusal no hold explains (once every page had its deletable versions deleted).

        Args:
            store: The refusing store's URL, when it is not the one the erasure talks to (whose prefix is
                configured); named in the message and its fix.

        Raises:
            TranscriptUnavailable: Some version was refused and no hold explains it.
        """
        if self.unexplained:
            # Counted and named by the store's error codes, never by key: a key holds the subject and session
            # keys, and this text is in the receipt.
            raise TranscriptUnavailable(
                f"S3 refused to delete {self.unexplained} object version(s) of the subject"
                f"{f' in {store}' if store else ''} ({', '.join(sorted(self.codes))}) and no hold explains it",
                hint="rerun the same request id; if S3 keeps refusing with AccessDenied, grant "
                f"s3:DeleteObjectVersion on {store or 'the transcript prefix'}",
            )


async def rerunnable(call: Awaitable[T]) -> T:
    """``call``, its failure's fix extended by how to finish the erasure afterwards."""
    try:
        return await call
    except TranscriptUnavailable as exc:
        raise TranscriptUnavailable(exc.message, hint=f"{exc.hint or 'fix the transcript store'}, then rerun the "
                                    "same request id") from exc


class VersionedObjects:
    """A store with versions: every version and delete marker, deleted in batches, holds asked about.

    Args:
        listing: The store's ``Capability.VERSIONS``.
        deleter: The store's ``Capability.BATCH_DELETE``.
        holds: The store's ``Capability.HOLDS``, or None (then nothing it refuses is explained by a hold).
    """

    def __init__(self, listing: Versions, deleter: BatchDelete, holds: Holds | None,
                 seen: HeldVersions | None = None) -> None:
        self.listing, self.deleter, self.holds = listing, deleter, holds
        self.seen = seen if seen is not None else HeldVersions()

    async def pages(self, prefix: str) -> AsyncGenerator[list[ObjectVersion]]:
        """Every version and delete marker under ``prefix``, a listing page at a time (each may be deleted as
        it comes)."""
        pages = self.listing.version_pages(prefix)
        while (page := await rerunnable(anext(pages, None))) is not None:
            yield page

    async def delete(self, batch: list[ObjectVersion]) -> dict[ObjectVersion, str]:
        """Delete the batch; returns the versions the store did not confirm as deleted, with its error code."""
        return {refusal.version: refusal.code for refusal in await rerunnable(self.deleter.delete_versions(batch))}

    async def held(self, version: ObjectVersion) -> HoldStatus:
        """Whether a hold protects the version (``FREE`` when the store has no holds); a version this attempt
        found held already is not asked about again (:class:`~teamstore.erasure.steps.base.HeldVersions`)."""
        if self.holds is None:
            return HoldStatus.FREE
        if version in self.seen.held:
            return HoldStatus.HELD
        state = await rerunnable(self.holds.hold(version))
        if state is HoldStatus.HELD:
            self.seen.held.add(version)
        return state

    async def sealed_under(self, version: ObjectVersion) -> str | None:
        """The data key ``version`` is sealed under (hex), or ``None`` if it is not sealed (or is gone); read once
        per attempt for a held version."""
        if version in self.seen.sealed_under:
            return self.seen.sealed_under[version]
        try:
            # Its header only: a held version may be a heavy user's long transcript, read for a few bytes.
            header = await rerunnable(self.listing.read_version(version, length=HEADER_BYTES))
        except TranscriptNotFound:
            return None  # gone since: not kept, as nothing about it is known for later
        key_id = key_id_of(header)
        if version in self.seen.held:
            self.seen.sealed_under[version] = key_id
        return key_id


class PlainObjects:
    """A store without versions (the local folder): one version per object, no holds; a killed writer's
    temporary file counts as an object (it holds the whole transcript).

    Args:
        store: The store.
        partial: Its ``Capability.PARTIAL_WRITES``, or None.
    """

    def __init__(self, store: TranscriptStore, partial: PartialWrites | None) -> None:
        self.store, self.partial = store, partial

    async def pages(self, prefix: str) -> AsyncGenerator[list[ObjectVersion]]:
        """Every object under ``prefix`` with its size as listed, :data:`PAGE` at a time, then every temporary
        file a killed writer left there (read for its size: no listing gives it); at least one page.

        Raises:
            TranscriptUnavailable: A temporary file could not be read (named by count, never by key).
        """
        # Sized by the listing: read for it, a heavy user's tens of thousands of transcripts were read whole at
        # each of an erasure's listings.
        page: list[ObjectVersion] = []
        async for found in self.store.scan(prefix):
            page.append(ObjectVersion(found.key, "null", found.size))
            if len(page) == PAGE:
                yield page
                page = []
        if self.partial is not None:
            page += await self._sized(await self.partial.partial_writes(prefix))
        yield page

    async def _sized(self, keys: list[str]) -> list[ObjectVersion]:
        found: list[ObjectVersion] = []
        for key in keys:
            try:
                size = len(await self.store.get(key))
            except TranscriptNotFound:
                continue  # removed since the listing (a retention sweep): nothing left of it to erase
            except TeamstoreError as exc:
                raise TranscriptUnavailable(
                    f"could not read a transcript of the subject in {self.store.url}: {type(exc).__name__}",
                    hint="check the transcript folder's permissions, then rerun the same request id",
                ) from exc
            found.append(ObjectVersion(key, "null", size))
        return found

    async def delete_folder(self, prefix: str) -> None:
        """Remove the subject's folder, and everything in it, at once (so the folder is counted in full first).

        Raises:
            TranscriptUnavailable: Something could not be removed (named by the reason, never by key: the
                subject key is in the path, and this text is in the receipt); a rerun removes what is left.
        """
        try:
            await self.store.delete_prefix(prefix)
        except TeamstoreError as exc:
            cause = exc.__cause__
            why = cause.strerror if isinstance(cause, OSError) and cause.strerror else type(exc).__name__
            raise TranscriptUnavailable(
                f"could not delete all of the subject's transcripts in {self.store.url}: {why}",
                hint="check that the erasing user may delete files in the transcript folder, then rerun the "
                "same request id",
            ) from exc

    async def held(self, version: ObjectVersion) -> HoldStatus:
        """Nothing holds a plain object."""
        return HoldStatus.FREE

    async def sealed_under(self, version: ObjectVersion) -> str | None:
        """Never asked: nothing here is held."""
        return None


View = VersionedObjects | PlainObjects


def view_of(store: TranscriptStore, seen: HeldVersions | None = None) -> View:
    """How the step reaches ``store``, by its declared capabilities; ``seen``: the held versions the attempt
    found so far, which it adds to."""
    listing, deleter = capability(store, Capability.VERSIONS), capability(store, Capability.BATCH_DELETE)
    if listing is not None and deleter is not None:
        return VersionedObjects(listing, deleter, capability(store, Capability.HOLDS), seen)
    return PlainObjects(store, capability(store, Capability.PARTIAL_WRITES))


async def tallied(view: View, prefix: str) -> Tally:
    """Every version and delete marker under ``prefix`` counted, a listing page at a time."""
    tally = Tally()
    async for page in view.pages(prefix):
        tally.add(page)
    return tally


async def is_beyond_use(ctx: StepContext, view: View, version: ObjectVersion) -> bool:
    """Whether a held version is sealed under a data key that no longer exists (the key step destroyed it)."""
    key_id = await view.sealed_under(version)
    return key_id is not None and ctx.keys is not None and not await ctx.keys.key_exists(key_id)
