"""The transcript step: every object version and delete marker under the user's subject prefix.

    from teamstore.erasure.steps.transcripts import TranscriptStep

    result = await TranscriptStep().erase(ctx, prior=None)

The backend is chosen by its declared capability, never guessed: a store with
``Capability.VERSIONED_DELETE`` (S3) is enumerated with ``ListObjectVersions`` (paginated, 1,000 per
page) and emptied with ``DeleteObjects`` batches of up to 1,000 versions, every per-key error checked.
A version S3 refuses to delete because of Object Lock (a legal hold or an unexpired retention) is
reported as retained, with its count; any other refusal fails the step. Other stores (the local folder)
have no versions: their objects are listed and removed, with the temporary files a killed writer left
(``Capability.PARTIAL_WRITES``), which hold whole transcripts too.

The counts are recorded (status ``enumerated``) before anything is deleted, so a rerun after a kill
reports what the first attempt found, not just what was left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from teamstore.audit.subjects import mark_store_erased, record_store
from teamstore.audit.transcripts.base import Capability, PartialWrites, TranscriptStore, subject_prefix
from teamstore.erasure.receipt import Counts, StepStatus, StoreResult
from teamstore.erasure.requests import record_step
from teamstore.erasure.steps import StepContext
from teamstore.erasure.stores import mismatch, pending_stores
from teamstore.errors import TeamstoreError, TranscriptNotFound, TranscriptUnavailable

BATCH = 1000
T = TypeVar("T")


@dataclass(frozen=True)
class Version:
    """One object version or delete marker."""

    key: str
    version_id: str
    size: int
    marker: bool


def _counts(versions: list[Version], retained: int = 0) -> Counts:
    real = [v for v in versions if not v.marker]
    return Counts(objects=len({v.key for v in versions}), versions=len(real),
                  delete_markers=len(versions) - len(real), bytes=sum(v.size for v in real), retained=retained)


class S3Versions:
    """Version-level listing and deletion on an ``S3TranscriptStore`` (its client, bucket and prefix).

    Args:
        store: A store declaring ``Capability.VERSIONED_DELETE``.
    """

    def __init__(self, store: Any) -> None:
        self.client, self.bucket = store.client, store.bucket
        self.root = f"{store.prefix}/" if store.prefix else ""

    async def _call(self, action: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except Exception as exc:
            raise TranscriptUnavailable(
                f"could not {action} in bucket {self.bucket!r}: {_describe(exc)}",
                hint="fix S3 access (s3:ListBucketVersions, s3:DeleteObjectVersion, s3:GetObjectVersion), then rerun "
                "the same request id",
            ) from exc

    async def versions(self, prefix: str) -> list[Version]:
        """Every version and delete marker under ``prefix`` (relative to the store)."""
        return await self._call("list object versions", self._list, self.root + prefix)

    def _list(self, full: str) -> list[Version]:
        found: list[Version] = []
        for page in self.client.get_paginator("list_object_versions").paginate(Bucket=self.bucket, Prefix=full):
            found += [Version(v["Key"], v["VersionId"], int(v.get("Size", 0)), False) for v in page.get("Versions", [])]
            found += [Version(m["Key"], m["VersionId"], 0, True) for m in page.get("DeleteMarkers", [])]
        return found

    async def delete(self, batch: list[Version]) -> dict[Version, str]:
        """One ``DeleteObjects``; returns the versions S3 did not confirm as deleted, with its error code."""
        objects = [{"Key": v.key, "VersionId": v.version_id} for v in batch]
        response = await self._call("delete object versions", self.client.delete_objects,
                                    Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True})
        # Real S3 names the version of each error; some implementations name only the key.
        codes = {(e["Key"], e.get("VersionId")): str(e.get("Code", "unknown")) for e in response.get("Errors", [])}
        refused = {v: codes.get((v.key, v.version_id)) or codes.get((v.key, None)) for v in batch}
        return {v: code for v, code in refused.items() if code is not None}

    async def held(self, version: Version) -> bool | None:
        """True if Object Lock protects the version, None if it is gone, False if nothing protects it."""
        return await self._call("read object lock", self._held, version)

    def _held(self, version: Version) -> bool | None:
        from botocore.exceptions import ClientError

        # One HEAD gives the legal hold and the retention together. (GetObjectLegalHold answers
        # NoSuchObjectLockConfiguration for a version under a retention period but no legal hold.)
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=version.key, VersionId=version.version_id)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in {"NoSuchKey", "NoSuchVersion", "404", "MethodNotAllowed", "405"}:
                return None  # deleted after all (the error named the key, not this version), or a delete marker
            raise
        if head.get("ObjectLockLegalHoldStatus") == "ON":
            return True
        until = head.get("ObjectLockRetainUntilDate")
        return bool(until and until > datetime.now(UTC))


def _describe(exc: Exception) -> str:
    """The error's class and S3 error code, never its text: botocore quotes the request's URL or key,
    which holds the subject key, and this text goes into the receipt (which carries only its hash)."""
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "unknown")
        return f"{type(exc).__name__} {code} in {exc.operation_name}"
    return type(exc).__name__


class FolderObjects:
    """The local folder: one version per object, no holds; a killed writer's temporary file counts as an
    object (it holds the whole transcript)."""

    def __init__(self, store: TranscriptStore) -> None:
        self.store = store

    async def versions(self, prefix: str) -> list[Version]:
        """Every object under ``prefix`` with its size, and every temporary file a killed writer left there.

        Raises:
            TranscriptUnavailable: An object could not be read (named by count, never by key).
        """
        keys = await self.store.list_keys(prefix)
        if Capability.PARTIAL_WRITES in self.store.capabilities:
            keys += await cast(PartialWrites, self.store).partial_writes(prefix)
        found: list[Version] = []
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
            found.append(Version(key, "null", size, False))
        return found

    async def delete(self, batch: list[Version]) -> dict[Version, str]:
        """Remove the batch's prefix folders; reports nothing refused (a folder error raises)."""
        for prefix in sorted({v.key.split("/sessions/")[0] + "/" for v in batch}):
            await self.store.delete_prefix(prefix)
        return {}

    async def held(self, version: Version) -> bool | None:
        """Local files are never under a hold."""
        return False


def backend(store: TranscriptStore) -> S3Versions | FolderObjects:
    """The version-level view of ``store``, by its declared capabilities."""
    if Capability.VERSIONED_DELETE in store.capabilities:
        return S3Versions(store)
    return FolderObjects(store)


class TranscriptStep:
    """Erase every transcript object version of the subject."""

    name = "transcripts"

    async def enumerate(self, ctx: StepContext) -> Counts:
        """Count versions, markers and bytes under the subject prefix."""
        if ctx.subject_key is None:
            return Counts()
        return _counts(await backend(ctx.transcripts).versions(subject_prefix(ctx.subject_key)))

    async def erase(self, ctx: StepContext, prior: StoreResult | None) -> StoreResult:
        """Record the enumeration, delete in batches of 1,000, classify what S3 refused.

        Raises:
            TranscriptUnavailable: S3 could not be reached or refused for a reason other than a hold.
        """
        if ctx.subject_key is None:
            return StoreResult(status=StepStatus.DELETED, counts=prior.counts if prior else Counts())
        # Recorded before anything is deleted (a no-op if it is already): a rerun of this request then talks
        # to this store again, even for transcripts written before stores were recorded.
        await record_store(ctx.engine, ctx.subject_key, ctx.transcripts.url)
        view = backend(ctx.transcripts)
        versions = await view.versions(subject_prefix(ctx.subject_key))
        counts = _carry(_counts(versions), prior)
        await record_step(ctx.engine, ctx.request_id, self.name, StoreResult(status=StepStatus.ENUMERATED, counts=counts),
                          ctx.owner)
        refused: dict[Version, str] = {}
        for start in range(0, len(versions), BATCH):
            refused |= await view.delete(versions[start : start + BATCH])
            ctx.progress(self.name, min(start + BATCH, len(versions)), len(versions))
        retained = await _classify(view, refused)
        result = StoreResult(status=StepStatus.DELETED, counts=counts.model_copy(update={"retained": retained}))
        await self._other_stores(ctx, view, result)
        return result

    async def _other_stores(self, ctx: StepContext, view: S3Versions | FolderObjects, result: StoreResult) -> None:
        """Stop the request, open, while another store still holds some of the subject's transcripts.

        This store is marked emptied once a listing finds nothing left in it, and the step is recorded as
        deleted (not verified), so the rerun against the next store adds what it finds to these counts.

        Raises:
            TranscriptStoreMismatch: Another recorded store still holds some; it names them.
        """
        assert ctx.subject_key is not None  # erase() returned earlier without one
        others = [store for store in await pending_stores(ctx) if store != ctx.transcripts.url]
        if not others:
            return
        if not await view.versions(subject_prefix(ctx.subject_key)):
            await mark_store_erased(ctx.engine, ctx.subject_key, ctx.transcripts.url)
        await record_step(ctx.engine, ctx.request_id, self.name, result, ctx.owner)
        raise mismatch(ctx, others, f"this erasure has deleted them from {ctx.transcripts.url} and talks to no other "
                       "store")

    async def remaining(self, ctx: StepContext) -> Counts:
        """List again, counting versions still under a hold as retained.

        Raises:
            TranscriptStoreMismatch: Another store recorded for the subject still holds some (recorded
                after the erasure began): this one cannot vouch for them.
        """
        if ctx.subject_key is None:
            return Counts()
        if others := [store for store in await pending_stores(ctx) if store != ctx.transcripts.url]:
            raise mismatch(ctx, others, f"this erasure talks to {ctx.transcripts.url} alone")
        view = backend(ctx.transcripts)
        left = await view.versions(subject_prefix(ctx.subject_key))
        held = [v for v in left if await view.held(v)]
        return _counts(left, retained=len(held))


def _carry(found: Counts, prior: StoreResult | None) -> Counts:
    if prior is None:
        return found
    if prior.status is StepStatus.DELETED:
        return found.plus(prior.counts.model_copy(update={"retained": 0}))
    # enumerated or failed earlier: what is listed now is a subset of what was recorded then
    return found.widest(prior.counts.model_copy(update={"retained": 0}))


async def _classify(view: S3Versions | FolderObjects, refused: dict[Version, str]) -> int:
    states = {version: await view.held(version) for version in refused}
    if unexplained := sorted({refused[v] for v, state in states.items() if state is False}):
        # Counted and named by S3's error codes, never by key: a key holds the subject and session keys, and
        # this text is in the receipt.
        count = sum(1 for state in states.values() if state is False)
        raise TranscriptUnavailable(
            f"S3 refused to delete {count} object version(s) of the subject ({', '.join(unexplained)}) and no "
            "hold explains it",
            hint="rerun the same request id; if S3 keeps refusing with AccessDenied, grant s3:DeleteObjectVersion "
            "on the transcript prefix",
        )
    return sum(1 for state in states.values() if state)
