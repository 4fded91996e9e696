"""Transcripts in S3 (or any S3-compatible endpoint) through boto3: one PUT per run.

    from teamstore.audit.transcripts.s3 import S3TranscriptStore

    store = S3TranscriptStore.from_url("s3://audit-bucket/teamstore")   # AWS_* variables as usual
    await store.put(key, body)
    earlier = [await store.read_version(v) for v in await store.versions(prefix) if not v.delete_marker]
    rule = await store.apply_retention(days=90)                            # Capability.LIFECYCLE_RULES
    refused = await store.delete_versions(await store.versions(prefix))    # VERSIONS, BATCH_DELETE

Credentials, region and endpoint come from the standard ``AWS_*`` variables (``AWS_ENDPOINT_URL_S3`` for
MinIO or moto). Timeouts are short and retries few, so an unreachable S3 fails fast and the transcript
goes to the outbox instead of holding up a run. Requests run on the store's own threads, so a hung S3 holds
those and never the event loop's default executor, which the rest of the process shares.

An upload S3 leaves unanswered (a read timeout, a dropped connection) may have been stored, or may still be:
it is never sent again by the client's retries (two copies in flight, either of which may land), and it
fails with ``UploadInDoubt`` so the caller treats it as one that may land.

Versions are listed (``ListObjectVersions``, paged) and deleted (``DeleteObjects``, 1,000 per request) in one
place, :mod:`teamstore.audit.transcripts.s3_versions`, a page at a time (:meth:`S3TranscriptStore.version_pages`:
a heavy user's history never sits in memory whole): :meth:`S3TranscriptStore.delete`,
:meth:`~S3TranscriptStore.delete_prefix` and the capabilities erasure uses
(:mod:`teamstore.audit.transcripts.capabilities`) share them, and every ``DeleteObjects`` answer's ``Errors``
list is read: a version S3 refused is reported (``delete_versions``) or raised, never taken as gone.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urlparse

from teamstore.audit.transcripts.base import SUBJECTS, Capability, StoredObject, check_key
from teamstore.audit.transcripts.capabilities import HoldStatus, ObjectVersion, Refusal
from teamstore.audit.transcripts.s3_client import (
    RETRY_GUARD,
    error_code,
    make_client,
    no_retry_after_unanswered,
    recorded_endpoint,
    translate,
    without_keys,
)
from teamstore.audit.transcripts.s3_versions import BATCH, BucketVersions, read_ahead
from teamstore.errors import ConfigurationError, TranscriptNotFound

__all__ = ["BATCH", "RULE_ID", "S3TranscriptStore", "lifecycle_rule", "make_client", "rule_id"]

RULE_ID = "teamstore-transcripts-retention"
"""The start of every lifecycle rule's ID teamstore puts; each transcript prefix has its own rule (:func:`rule_id`)."""
GZIP_MAGIC = b"\x1f\x8b"
"""How a transcript written before sealing begins (its content type says gzip; a sealed one's, bytes)."""

T = TypeVar("T")


_REFUSED = frozenset({"403", "AccessDenied", "Forbidden"})
"""S3's answers to a ``HeadObject`` it will not answer (a HEAD's error has no body: its code is the status)."""
MARKS = ".teamstore-databases"
"""The folder of the store's marks (:meth:`S3TranscriptStore.mark`), beside ``subjects/``: no lifecycle rule
expires a mark, and no listing of the store's objects shows one."""


def rule_id(prefix: str) -> str:
    """The ID of teamstore's lifecycle rule on ``prefix``: one per prefix, so stores that share a bucket under
    different prefixes (production and staging, say) each keep their own rule (IDs are unique in a bucket)."""
    return f"{RULE_ID}-{hashlib.sha256(prefix.encode()).hexdigest()[:12]}"


def lifecycle_rule(prefix: str, days: int) -> dict[str, Any]:
    """The lifecycle rule teamstore puts on the transcript prefix (also shipped in ``infra/``)."""
    return {
        "ID": rule_id(prefix),
        "Filter": {"Prefix": prefix},
        "Status": "Enabled",
        "Expiration": {"Days": days},
        "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
    }


# What botocore itself accepts as a bucket name (AWS's own rules are stricter; the service has the last word).
_BUCKET = re.compile(r"[a-zA-Z0-9.\-_]{1,255}")


class S3TranscriptStore:
    """Objects in one bucket under one prefix.

    Args:
        client: A boto3 S3 client the caller owns (see :func:`make_client`).
        bucket: The bucket; it must exist.
        prefix: Key prefix inside the bucket, without a trailing slash ("" for the bucket root).
        page_size: Versions per ``ListObjectVersions`` page (S3 gives at most 1,000, its default); a listing, and
            an erasure deleting as it lists, holds two pages at most.
        owns_client: Whether :meth:`close` closes the client (a sibling's is its parent's).
    """

    capabilities = frozenset({
        Capability.VERSIONED_DELETE, Capability.VERSIONS, Capability.BATCH_DELETE, Capability.HOLDS,
        Capability.LIFECYCLE_RULES, Capability.SIBLINGS, Capability.MARKS,
    })

    def __init__(self, client: Any, bucket: str, prefix: str = "", *, page_size: int = BATCH,
                 owns_client: bool = True) -> None:
        self.client = client
        self._owns_client = owns_client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.page_size = page_size
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._bucket_versions = BucketVersions(client, bucket, self.prefix)
        # A request S3 leaves hanging holds its thread until the client's timeouts end, long after the run
        # gave up on it (the upload deadline). Own threads, as many as the client has connections, keep a
        # slow S3 from starving the loop's default executor (registry lookups, DNS, file I/O); requests
        # past them queue here and a run's upload deadline still sends them to the outbox.
        self._workers = int(client.meta.config.max_pool_connections or 10)
        self._executor: ThreadPoolExecutor | None = None  # started on first use, again after close()
        # The most specific handler answers first: it ends the retries of a PUT S3 may have received.
        client.meta.events.register("needs-retry.s3.PutObject", no_retry_after_unanswered, unique_id=RETRY_GUARD)

    @classmethod
    def from_url(cls, url: str, **client_options: float) -> S3TranscriptStore:
        """Build from ``s3://bucket/prefix`` with a client from :func:`make_client`.

        Raises:
            ConfigurationError: The URL has no bucket, or the ``AWS_*`` variables cannot make a client.
            MissingExtra: boto3 is not installed.
        """
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not _BUCKET.fullmatch(parsed.netloc):
            # The URL is not repeated: what sits where the bucket should be may be credentials.
            raise ConfigurationError(
                "the transcripts URL names no valid bucket: it must read s3://bucket/prefix, the bucket of "
                "letters, digits, '.', '-' and '_' (credentials come from the AWS_* variables, never the URL)",
                hint="e.g. s3://audit/teamstore",
            )
        return cls(make_client(**client_options), parsed.netloc, parsed.path)  # type: ignore[arg-type]

    @property
    def endpoint(self) -> str:
        """The endpoint this store's client talks to, as recorded with the store (:func:`recorded_endpoint`)."""
        return recorded_endpoint(str(self.client.meta.endpoint_url))

    def sibling(self, url: str) -> S3TranscriptStore | None:
        """The store ``s3://bucket/prefix`` names, through this store's client (same endpoint, credentials and
        timeouts); ``None`` for a URL of another scheme or with no valid bucket. Closing it leaves the client open."""
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not _BUCKET.fullmatch(parsed.netloc):
            return None
        return S3TranscriptStore(self.client, parsed.netloc, parsed.path, page_size=self.page_size, owns_client=False)

    def _full(self, key: str) -> str:
        return self._bucket_versions.full(key)

    def _relative(self, full: str) -> str:
        return self._bucket_versions.relative(full)

    # --- objects ---------------------------------------------------------------------------------------------
    async def put(self, key: str, body: bytes, *, written_at: datetime | None = None) -> None:
        """One ``PutObject`` (retried only after an attempt that cannot have reached S3). ``written_at`` is
        kept in the object's metadata (``x-amz-meta-written-at``, ISO 8601): S3 cannot set an object's
        modified time, and its lifecycle rule counts from the upload.

        Raises:
            UploadInDoubt: S3 left the request unanswered: the transcript may land all the same.
            TranscriptUnavailable: S3 unreachable, the bucket missing or access denied: nothing was stored.
        """
        full = self._full(key)
        await self._call(
            "write",
            key,
            self.client.put_object,
            Bucket=self.bucket,
            Key=full,
            Body=body,
            ContentType="application/gzip" if body[:2] == GZIP_MAGIC else "application/octet-stream",  # sealed
            **({"Metadata": {"written-at": written_at.astimezone(UTC).isoformat()}} if written_at else {}),
        )

    async def get(self, key: str) -> bytes:
        """One ``GetObject``.

        Raises:
            TranscriptNotFound: No such object.
            TranscriptUnavailable: S3 unreachable or refusing.
        """
        return bytes(await self._call("read", key, self._get, self._full(key)))

    def _get(self, full_key: str) -> bytes:
        # The body is read inside the translated call: a connection dropped mid-object is a typed error.
        return bytes(self.client.get_object(Bucket=self.bucket, Key=full_key)["Body"].read())

    async def list_keys(self, prefix: str) -> list[str]:
        """Keys under ``prefix`` (paginated ``ListObjectsV2``), sorted."""
        full = self._full(prefix) if prefix else (f"{self.prefix}/" if self.prefix else "")
        return sorted(key for key in map(self._relative, await self._call("list", prefix, self._list, full))
                      if not key.startswith(f"{MARKS}/"))

    def _list(self, full_prefix: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full_prefix)
        return [obj["Key"] for page in pages for obj in page.get("Contents", [])]

    async def scan(self, prefix: str) -> AsyncIterator[StoredObject]:
        """Objects under ``prefix`` with their ``LastModified`` (whole seconds) and size, one ``ListObjectsV2``
        page (1,000 keys) at a time.

        Raises:
            TranscriptUnavailable: S3 unreachable or refusing.
        """
        full, token = self._full(prefix), None
        while True:
            page = await self._call("list", prefix, self._list_page, full, token)
            for obj in page.get("Contents", []):
                if self._relative(obj["Key"]).startswith(f"{MARKS}/"):
                    continue  # a mark (:meth:`mark`), not a transcript
                yield StoredObject(self._relative(obj["Key"]), obj["LastModified"].astimezone(UTC), int(obj.get("Size", 0)))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or token is None:
                return

    def _list_page(self, full_prefix: str, token: str | None) -> dict[str, Any]:
        more = {"ContinuationToken": token} if token is not None else {}
        page: dict[str, Any] = self.client.list_objects_v2(Bucket=self.bucket, Prefix=full_prefix, **more)
        return page

    async def delete(self, key: str) -> int:
        """Delete the object at ``key``: every version and delete marker of it.

        Returns:
            How many versions and delete markers were removed.

        Raises:
            TranscriptUnavailable: S3 unreachable, or it refused to delete a version (the others are gone).
        """
        check_key(key)  # here, not on the store's thread: an unsafe key is InvalidIdentifier, not a failed request
        return int(await self._call("delete", key, self._bucket_versions.delete_key, key, self.page_size))

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``, including old versions and delete markers.

        Returns:
            How many object versions were removed (delete markers not counted).

        Raises:
            TranscriptUnavailable: S3 unreachable, or it refused to delete some versions (a legal hold, a
                missing permission): every other version is gone, the refused ones are counted by S3's codes.
        """
        check_key(prefix)
        return int(await self._call("delete", prefix, self._bucket_versions.delete_prefix, prefix, self.page_size))

    async def sweep(self, older_than: datetime) -> int:
        """Nothing to do: S3 expires objects through the lifecycle rule (:meth:`apply_retention`)."""
        return 0

    # --- Capability.VERSIONS, BATCH_DELETE, HOLDS: what erasure needs, their errors naming no key ----------------
    async def versions(self, prefix: str) -> list[ObjectVersion]:
        """Every version and delete marker under ``prefix`` (paginated ``ListObjectVersions``).

        Raises:
            TranscriptUnavailable: S3 unreachable or refusing; named by class and error code only.
        """
        check_key(prefix)
        return await self._versioned("list object versions", self._bucket_versions.every, prefix, self.page_size)

    async def version_pages(self, prefix: str) -> AsyncIterator[list[ObjectVersion]]:
        """The versions and delete markers under ``prefix``, one ``ListObjectVersions`` page at a time (at least
        one page, perhaps empty). Each page is handed over once the next has been listed, so the caller may
        delete each as it comes.

        Raises:
            TranscriptUnavailable: S3 unreachable or refusing; named by class and error code only.
        """
        check_key(prefix)
        pages = read_ahead(self._bucket_versions.pages(prefix, self.page_size))
        while (page := await self._versioned("list object versions", next, pages, None)) is not None:
            yield page

    async def read_version(self, version: ObjectVersion, *, length: int | None = None) -> bytes:
        """One ``GetObject`` of ``version`` (an export reads every copy S3 still keeps, not only the current);
        with ``length``, a ranged one of its first ``length`` bytes (a header, without the transcript after it).

        Raises:
            TranscriptNotFound: No such version any more, or a delete marker (which holds no bytes).
            TranscriptUnavailable: S3 unreachable or refusing; named by class and error code only.
        """
        check_key(version.key)
        body = None if version.delete_marker else await self._versioned("read an object version",
                                                                       self._bucket_versions.read, version, length)
        if body is None:
            raise TranscriptNotFound("that transcript version is gone (deleted since it was listed) or is a delete "
                                     "marker", hint="list the versions again; only what is listed now can be read")
        return body

    async def delete_versions(self, versions: Sequence[ObjectVersion]) -> list[Refusal]:
        """``DeleteObjects`` for ``versions``, 1,000 per request; every answer's ``Errors`` list is read.

        Returns:
            The versions S3 refused, each with its error code (``AccessDenied`` under Object Lock).

        Raises:
            TranscriptUnavailable: A request failed as a whole; named by class and error code only.
        """
        for version in versions:
            check_key(version.key)
        return await self._versioned("delete object versions", self._bucket_versions.delete, list(versions))

    async def hold(self, version: ObjectVersion) -> HoldStatus:
        """Whether Object Lock protects ``version``: a legal hold, or a retention date still ahead on S3's clock
        (the ``Date`` of its answer; this host's clock only when it gives none).

        Raises:
            TranscriptUnavailable: S3 unreachable or refusing; named by class and error code only.
        """
        check_key(version.key)
        return await self._versioned("read object lock", self._bucket_versions.hold, version)

    # --- Capability.LIFECYCLE_RULES ----------------------------------------------------------------------------
    async def apply_retention(self, days: int) -> dict[str, Any]:
        """Put (or replace) teamstore's lifecycle rule on the transcripts (``<prefix>/subjects/``), keeping the
        bucket's other rules.

        Args:
            days: Expire current objects after this many days.

        Returns:
            The rule as put.

        Raises:
            TranscriptUnavailable: S3 refused or is unreachable.
        """
        # On the transcripts' own folder: with no prefix (the bucket's root) a rule on "" would expire
        # every object in the bucket, and remove every noncurrent version after a day.
        rule = lifecycle_rule(self._full(f"{SUBJECTS}/"), days)
        await self._call("configure", self.bucket, self._put_rule, rule)
        return rule

    def _put_rule(self, rule: dict[str, Any]) -> None:
        from botocore.exceptions import ClientError

        try:
            rules = self.client.get_bucket_lifecycle_configuration(Bucket=self.bucket).get("Rules", [])
        except ClientError as exc:
            if error_code(exc) != "NoSuchLifecycleConfiguration":
                raise
            rules = []
        rules = [r for r in rules if not _replaced_by(r, rule)] + [rule]
        self.client.put_bucket_lifecycle_configuration(
            Bucket=self.bucket, LifecycleConfiguration={"Rules": rules}
        )

    # --- marks ----------------------------------------------------------------------------------------------------
    async def mark(self, database_id: str, endpoint: str | None = None) -> None:
        """Mark the store as one ``database_id``'s writers reach at ``endpoint`` (this client's, :attr:`endpoint`,
        unless an operator says which): the object ``<prefix>/.teamstore-databases/<id>/<digest of the endpoint>``
        (beside ``subjects/``, which the lifecycle rule expires), put only when a ``HeadObject`` finds none, so a
        versioned bucket gains no version a worker.

        Raises:
            TranscriptUnavailable: S3 unreachable, or refusing (the worker's role needs s3:PutObject on the
                transcript prefix, as for transcripts).
        """
        at = endpoint or self.endpoint
        if await self.marked(database_id, at):
            return
        key = _mark_key(database_id, at)
        body = json.dumps({"database_id": database_id, "endpoint": at}).encode()
        await self._call("mark", key, self.client.put_object, Bucket=self.bucket, Key=self._full(key), Body=body,
                         ContentType="application/json")

    async def marked(self, database_id: str, endpoint: str) -> bool | None:
        """Whether ``database_id``'s writers marked the store at ``endpoint`` (:meth:`mark`), whichever endpoint
        this client reaches it at: one ``HeadObject``. ``None`` when S3 answers that it will not say (403: on AWS,
        a bucket of that name another account owns, or a role without s3:GetObject or s3:ListBucket there).

        Raises:
            TranscriptUnavailable: S3 unreachable, or failing.
        """
        key = _mark_key(database_id, endpoint)
        try:
            await self._run(self.client.head_object, Bucket=self.bucket, Key=self._full(key))
        except Exception as exc:
            if error_code(exc) in _REFUSED:
                return None
            error = translate(exc, "look up", self.bucket, key)
            if isinstance(error, TranscriptNotFound):
                return False
            raise error from exc
        return True

    # --- requests on the store's threads -------------------------------------------------------------------------
    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="teamstore-s3")
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def _call(self, action: str, key: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return await self._run(fn, *args, **kwargs)
        except Exception as exc:
            raise translate(exc, action, self.bucket, key) from exc

    async def _versioned(self, action: str, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await self._run(fn, *args)
        except Exception as exc:
            raise without_keys(exc, action, self.bucket) from exc

    async def close(self) -> None:
        """Close the client's connection pool (a sibling leaves it to its parent); requests not yet started are
        dropped, none is waited for."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        if self._owns_client:
            await asyncio.to_thread(self.client.close)


def _mark_key(database_id: str, endpoint: str) -> str:
    """The key of the mark of ``database_id``'s writers at ``endpoint`` (:meth:`S3TranscriptStore.mark`): the
    endpoint by a digest, so a key of fixed length says nothing of it."""
    if not re.fullmatch(r"[0-9a-f]{32}", database_id):
        raise ConfigurationError("a transcript store's mark names a database id of 32 hex characters",
                                 hint="pass teamstore.db.identity.database_id(engine)")
    return f"{MARKS}/{database_id}/{hashlib.sha256(endpoint.encode()).hexdigest()[:32]}"


def _replaced_by(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether ``new`` takes the place of the bucket's rule ``old``: the same ID, or the one ID every prefix's
    rule had before each had its own, on the same prefix (another prefix's rule stays)."""
    if old.get("ID") == new["ID"]:
        return True
    prefix = (old.get("Filter") or {}).get("Prefix", old.get("Prefix"))
    return old.get("ID") == RULE_ID and prefix == new["Filter"]["Prefix"]
