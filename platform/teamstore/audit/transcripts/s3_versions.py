"""The object versions under one prefix of an S3 bucket, by blocking boto3 requests (the transcript store runs
them on its own threads): listed a ``ListObjectVersions`` page at a time, read (whole, or their first bytes),
deleted 1,000 per ``DeleteObjects`` with every answer's ``Errors`` list read, and whether Object Lock protects
one, judged on S3's clock.

    from teamstore.audit.transcripts.s3_versions import BucketVersions, read_ahead

    versions = BucketVersions(client, "audit-bucket", "teamstore")
    for page in read_ahead(versions.pages("subjects/ab12", page_size=1000)):
        refused = versions.delete(page)                 # each a Refusal with S3's error code
    body = versions.read(version, length=None)          # None: gone since it was listed, or a delete marker

Keys are the store's: relative to the prefix. A failed request raises boto3's own error;
:class:`~teamstore.audit.transcripts.s3.S3TranscriptStore` translates it. A version S3 refused to delete is
reported (:meth:`BucketVersions.delete`) or raised (:meth:`~BucketVersions.delete_key`,
:meth:`~BucketVersions.delete_prefix`), never taken as gone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from teamstore.audit.transcripts.base import check_key
from teamstore.audit.transcripts.capabilities import HoldStatus, ObjectVersion, Refusal
from teamstore.audit.transcripts.s3_client import error_code
from teamstore.errors import TranscriptUnavailable

__all__ = ["BATCH", "BucketVersions", "read_ahead"]

BATCH = 1000
"""Versions per ``DeleteObjects`` request: S3's limit, and the versions a ``ListObjectVersions`` page holds."""
_GONE = {"NoSuchKey", "NoSuchVersion", "404", "MethodNotAllowed", "405"}
"""What S3 answers for a version deleted since it was listed, or for a delete marker."""


class BucketVersions:
    """The versions and delete markers under ``prefix`` in ``bucket``.

    Args:
        client: A boto3 S3 client.
        bucket: The bucket.
        prefix: Key prefix inside the bucket, without a trailing slash ("" for the bucket root).
    """

    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self.client, self.bucket, self.prefix = client, bucket, prefix

    def full(self, key: str) -> str:
        """The bucket's key of the store's ``key``."""
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def relative(self, full: str) -> str:
        """The store's key of the bucket's key ``full``."""
        return full[len(self.prefix) + 1 :] if self.prefix else full

    def pages(self, prefix: str, page_size: int) -> Iterator[list[ObjectVersion]]:
        """The versions and delete markers under ``prefix`` (relative keys), one listing page at a time."""
        paginator = self.client.get_paginator("list_object_versions")
        pages = paginator.paginate(Bucket=self.bucket, Prefix=self.full(prefix),
                                   PaginationConfig={"PageSize": page_size})
        for page in pages:
            yield [ObjectVersion(self.relative(v["Key"]), v["VersionId"], int(v.get("Size", 0)))
                   for v in page.get("Versions", [])] + [
                ObjectVersion(self.relative(m["Key"]), m["VersionId"], 0, delete_marker=True)
                for m in page.get("DeleteMarkers", [])]

    def every(self, prefix: str, page_size: int) -> list[ObjectVersion]:
        """Every version and delete marker under ``prefix``."""
        return [version for page in self.pages(prefix, page_size) for version in page]

    def read(self, version: ObjectVersion, length: int | None) -> bytes | None:
        """The bytes of ``version`` (its first ``length`` of them, if given); ``None`` when it is gone."""
        from botocore.exceptions import ClientError

        full = self.full(version.key)
        ranged = {} if length is None else {"Range": f"bytes=0-{length - 1}"}
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=full, VersionId=version.version_id, **ranged)
        except ClientError as exc:
            code = error_code(exc)
            if code in _GONE:
                return None
            if code in {"InvalidRange", "416"} and ranged:
                return b""  # an empty version: no byte for the range to start at
            if version.version_id != "null" or code not in {"400", "InvalidArgument"}:
                raise
            # A bucket that never had versioning (as in _head): its one copy of the key is this version.
            answer = self.client.get_object(Bucket=self.bucket, Key=full, **ranged)
        return bytes(answer["Body"].read())

    def delete(self, versions: Sequence[ObjectVersion]) -> list[Refusal]:
        """``DeleteObjects`` for ``versions``, :data:`BATCH` per request. Returns the versions S3 refused."""
        refused: list[Refusal] = []
        for start in range(0, len(versions), BATCH):
            batch = versions[start : start + BATCH]
            objects = [{"Key": self.full(v.key), "VersionId": v.version_id} for v in batch]
            answer = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True})
            refused += self._refusals(batch, answer.get("Errors", []))
        return refused

    def _refusals(self, batch: Sequence[ObjectVersion], errors: list[dict[str, Any]]) -> list[Refusal]:
        # Real S3 names the version of each error; some implementations name only the key.
        codes = {(self.relative(e["Key"]), e.get("VersionId")): str(e.get("Code") or "unknown") for e in errors}
        found = ((v, codes.get((v.key, v.version_id)) or codes.get((v.key, None))) for v in batch)
        return [Refusal(version, code) for version, code in found if code is not None]

    def delete_key(self, key: str, page_size: int) -> int:
        """Delete every version and delete marker of ``key``; returns how many.

        Raises:
            TranscriptUnavailable: S3 refused some of them (the others are gone).
        """
        doomed = [v for page in self.pages(key, page_size) for v in page if v.key == key]
        if refused := self.delete(doomed):
            raise _refused(refused, "of a transcript")
        return len(doomed)

    def delete_prefix(self, prefix: str, page_size: int) -> int:
        """Delete every version and delete marker under ``prefix``; returns how many versions (markers not counted).

        Raises:
            TranscriptUnavailable: S3 refused some of them (every other is gone), counted by S3's codes.
        """
        removed, refused = 0, []
        for page in read_ahead(self.pages(prefix, page_size)):  # a page at a time: a prefix may hold millions
            page_refused = self.delete(page)
            refused += page_refused
            kept = {r.version for r in page_refused}
            removed += sum(1 for v in page if not v.delete_marker and v not in kept)
        if refused:
            raise _refused(refused, "under the prefix")
        return removed

    def hold(self, version: ObjectVersion) -> HoldStatus:
        """Whether Object Lock protects ``version``: a legal hold, or a retention date still ahead on S3's clock."""
        from botocore.exceptions import ClientError

        # One HEAD gives the legal hold and the retention together. (GetObjectLegalHold answers
        # NoSuchObjectLockConfiguration for a version under a retention period but no legal hold.)
        try:
            head = self._head(version)
        except ClientError as exc:
            if error_code(exc) in _GONE:
                return HoldStatus.GONE  # deleted after all (the error named the key, not the version), or a marker
            raise
        if head.get("ObjectLockLegalHoldStatus") == "ON":
            return HoldStatus.HELD
        until = head.get("ObjectLockRetainUntilDate")
        return HoldStatus.HELD if until and until > _s3_now(head) else HoldStatus.FREE

    def _head(self, version: ObjectVersion) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        full = self.full(version.key)
        try:
            head: dict[str, Any] = self.client.head_object(Bucket=self.bucket, Key=full, VersionId=version.version_id)
            return head
        except ClientError as exc:
            if version.version_id != "null" or error_code(exc) not in {"400", "InvalidArgument"}:
                raise
        # A bucket that never had versioning (some S3-compatible servers refuse any version id there): its one
        # copy of the key is this version, and without versioning nothing is under Object Lock.
        head = self.client.head_object(Bucket=self.bucket, Key=full)
        return head


def read_ahead(pages: Iterator[list[ObjectVersion]]) -> Iterator[list[ObjectVersion]]:
    """``pages``, each handed over once the one after it has been listed.

    The next page is asked for after the last version of this one (``KeyMarker`` and ``VersionIdMarker``): once
    that version is deleted, S3-compatible servers need not find the place it held (moto, for one, then answers
    with nothing), and the rest of the prefix would go unlisted. Listed one page ahead, the marker still exists.
    """
    ahead = next(pages, None)
    while ahead is not None:
        page, ahead = ahead, next(pages, None)
        yield page


def _s3_now(answer: dict[str, Any]) -> datetime:
    """The time on S3's clock when it gave ``answer`` (its ``Date`` header); this host's when it gave none.

    S3 ends a retention period by its own clock. Judged by this host's, one running ahead took a locked version
    for free (an erasure or a retention sweep then failed on S3's refusal, "no hold explains it"), and one running
    behind took a free version for held (kept, and reported retained or unreadable, instead of deleted).
    """
    date = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    try:
        said = parsedate_to_datetime(date) if date else None
    except (TypeError, ValueError):
        said = None  # not an HTTP date: judged as if none were given
    if said is None:
        return datetime.now(UTC)
    return said.replace(tzinfo=UTC) if said.tzinfo is None else said.astimezone(UTC)


def _refused(refused: list[Refusal], where: str) -> TranscriptUnavailable:
    """The error of a delete S3 refused some versions of, counted and named by S3's codes (never by key)."""
    codes = ", ".join(sorted({r.code for r in refused}))
    return TranscriptUnavailable(
        f"S3 refused to delete {len(refused)} version(s) {where} ({codes})",
        hint="grant s3:DeleteObjectVersion on the transcript prefix; a version under Object Lock (a legal hold or "
        "a retention period) stays until the lock is lifted",
    )
