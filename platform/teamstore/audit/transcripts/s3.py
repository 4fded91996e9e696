"""Transcripts in S3 (or any S3-compatible endpoint) through boto3: one PUT per run.

    from teamstore.audit.transcripts.s3 import S3TranscriptStore

    store = S3TranscriptStore.from_url("s3://audit-bucket/teamstore")   # AWS_* variables as usual
    await store.put(key, body)
    rule = await store.apply_retention(days=90)

Credentials, region and endpoint come from the standard ``AWS_*`` variables (``AWS_ENDPOINT_URL_S3`` for
MinIO or moto). Timeouts are short and retries few, so an unreachable S3 fails fast and the transcript
goes to the outbox instead of holding up a run. Requests run on the store's own threads, so a hung S3 holds
those and never the event loop's default executor, which the rest of the process shares.

An upload S3 leaves unanswered (a read timeout, a dropped connection) may have been stored, or may still be:
it is never sent again by the client's retries (two copies in flight, either of which may land), and it
fails with ``UploadInDoubt`` so the caller treats it as one that may land.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

from teamstore.audit.transcripts.base import SUBJECTS, Capability, StoredObject, check_key
from teamstore.errors import (
    ConfigurationError,
    MissingExtra,
    StorageError,
    TranscriptNotFound,
    TranscriptUnavailable,
    UploadInDoubt,
)

RULE_ID = "teamstore-transcripts-retention"
_NEEDS = {
    "write": "s3:PutObject on the transcript prefix",
    "read": "s3:GetObject on the transcript prefix",
    "list": "s3:ListBucket on the bucket",
    "delete": "s3:ListBucketVersions, s3:DeleteObject and s3:DeleteObjectVersion on the transcript prefix",
    "configure": "s3:GetLifecycleConfiguration and s3:PutLifecycleConfiguration on the bucket",
}
"""What an access-denied request of each kind needs."""
_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
_RETRY_GUARD = "teamstore-no-retry-after-unanswered-put"


def unanswered(exc: BaseException) -> bool:
    """Whether a request that failed with ``exc`` may have reached S3 and be stored all the same: it failed
    while being sent or answered (a read timeout, a dropped connection, a TLS failure). A failure to connect
    sends nothing, one before sending (credentials) sends nothing, and S3's own error answers (``ClientError``)
    store nothing."""
    from botocore.exceptions import HTTPClientError, SSLError

    return isinstance(exc, HTTPClientError | SSLError)


def _no_retry_after_unanswered(caught_exception: BaseException | None = None, **_: Any) -> bool | None:
    """botocore's ``needs-retry`` hook for ``PutObject``: after an attempt S3 may have received, do not send
    another (False ends the retries); otherwise let the client's retry policy decide (None)."""
    if caught_exception is not None and unanswered(caught_exception):
        return False
    return None


def _boto3() -> Any:
    try:
        import boto3
    except ImportError as exc:
        raise MissingExtra("S3 transcripts", "s3", "boto3") from exc
    return boto3


def make_client(connect_timeout: float = 2.0, read_timeout: float = 5.0, max_attempts: int = 2) -> Any:
    """A boto3 S3 client with short timeouts and few retries.

    Args:
        connect_timeout: Seconds to open a connection.
        read_timeout: Seconds to wait for a response.
        max_attempts: Total attempts per request, the first included.

    Returns:
        The client (``AWS_*`` variables decide credentials, region and endpoint).

    Raises:
        ConfigurationError: The ``AWS_*`` variables name an endpoint that is no URL, a malformed region,
            a profile that does not exist or a config file that does not parse.
        MissingExtra: boto3 is not installed.
    """
    boto3 = _boto3()
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    config = Config(
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"total_max_attempts": max_attempts, "mode": "standard"},
    )
    try:
        return boto3.session.Session().client("s3", config=config)
    except BotoCoreError as exc:  # names the region, profile or file, never a credential
        raise ConfigurationError(
            f"could not set up the S3 client: {exc}",
            hint="fix AWS_DEFAULT_REGION, AWS_PROFILE or AWS_CONFIG_FILE (or unset them)",
        ) from None
    except ValueError:
        # botocore's message repeats the endpoint, which may carry credentials (http://key:secret@host).
        raise ConfigurationError(
            "AWS_ENDPOINT_URL_S3 (or AWS_ENDPOINT_URL) is not a URL",
            hint="set it to the S3-compatible endpoint, e.g. http://minio:9000, or unset it for AWS",
        ) from None


def lifecycle_rule(prefix: str, days: int) -> dict[str, Any]:
    """The lifecycle rule teamstore puts on the transcript prefix (also shipped in ``infra/``)."""
    return {
        "ID": RULE_ID,
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
    """

    capabilities = frozenset({Capability.VERSIONED_DELETE, Capability.LIFECYCLE_RULES})

    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        # A request S3 leaves hanging holds its thread until the client's timeouts end, long after the run
        # gave up on it (the upload deadline). Own threads, as many as the client has connections, keep a
        # slow S3 from starving the loop's default executor (registry lookups, DNS, file I/O); requests
        # past them queue here and a run's upload deadline still sends them to the outbox.
        self._workers = int(client.meta.config.max_pool_connections or 10)
        self._executor: ThreadPoolExecutor | None = None  # started on first use, again after close()
        # The most specific handler answers first: it ends the retries of a PUT S3 may have received.
        client.meta.events.register("needs-retry.s3.PutObject", _no_retry_after_unanswered, unique_id=_RETRY_GUARD)

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

    def _full(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _relative(self, full: str) -> str:
        return full[len(self.prefix) + 1 :] if self.prefix else full

    async def put(self, key: str, body: bytes) -> None:
        """One ``PutObject`` (retried only after an attempt that cannot have reached S3).

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
            ContentType="application/gzip",
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
        return sorted(self._relative(k) for k in await self._call("list", prefix, self._list, full))

    def _list(self, full_prefix: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full_prefix)
        return [obj["Key"] for page in pages for obj in page.get("Contents", [])]

    async def scan(self, prefix: str) -> AsyncIterator[StoredObject]:
        """Objects under ``prefix`` with their ``LastModified`` (whole seconds), one ``ListObjectsV2``
        page (1,000 keys) at a time.

        Raises:
            TranscriptUnavailable: S3 unreachable or refusing.
        """
        full, token = self._full(prefix), None
        while True:
            page = await self._call("list", prefix, self._list_page, full, token)
            for obj in page.get("Contents", []):
                yield StoredObject(self._relative(obj["Key"]), obj["LastModified"].astimezone(UTC))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or token is None:
                return

    def _list_page(self, full_prefix: str, token: str | None) -> dict[str, Any]:
        more = {"ContinuationToken": token} if token is not None else {}
        page: dict[str, Any] = self.client.list_objects_v2(Bucket=self.bucket, Prefix=full_prefix, **more)
        return page

    async def delete(self, key: str) -> int:
        """Delete the object at ``key``: every version and delete marker of it.

        Raises:
            TranscriptUnavailable: S3 unreachable, or it refused to delete a version.
        """
        return int(await self._call("delete", key, self._delete_key, self._full(key)))

    def _delete_key(self, full_key: str) -> int:
        pages = self.client.get_paginator("list_object_versions").paginate(Bucket=self.bucket, Prefix=full_key)
        doomed = [{"Key": v["Key"], "VersionId": v["VersionId"]} for page in pages
                  for v in page.get("Versions", []) + page.get("DeleteMarkers", []) if v["Key"] == full_key]
        if not doomed:
            return 0
        response = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": doomed, "Quiet": True})
        if refused := response.get("Errors"):
            codes = ", ".join(sorted({str(e.get("Code")) for e in refused}))
            raise TranscriptUnavailable(
                f"S3 refused to delete {len(refused)} version(s) of a transcript ({codes})",
                hint="grant s3:DeleteObjectVersion on the transcript prefix",
            )
        return len(doomed)

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``, including old versions and delete markers."""
        return int(await self._call("delete", prefix, self._delete_versions, self._full(prefix)))

    def _delete_versions(self, full_prefix: str) -> int:
        pages = self.client.get_paginator("list_object_versions").paginate(
            Bucket=self.bucket, Prefix=full_prefix
        )
        removed = 0
        for page in pages:
            doomed = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
            ]
            for start in range(0, len(doomed), 1000):
                self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": doomed[start : start + 1000]}
                )
            removed += len(page.get("Versions", []))
        return removed

    async def sweep(self, older_than: datetime) -> int:
        """Nothing to do: S3 expires objects through the lifecycle rule (:meth:`apply_retention`)."""
        return 0

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
            if exc.response.get("Error", {}).get("Code") != "NoSuchLifecycleConfiguration":
                raise
            rules = []
        rules = [r for r in rules if r.get("ID") != RULE_ID] + [rule]
        self.client.put_bucket_lifecycle_configuration(
            Bucket=self.bucket, LifecycleConfiguration={"Rules": rules}
        )

    async def _call(self, action: str, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="teamstore-s3")
            return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))
        except Exception as exc:
            raise _translate(exc, action, self.bucket, key) from exc

    async def close(self) -> None:
        """Close the client's connection pool; requests not yet started are dropped, none is waited for."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        await asyncio.to_thread(self.client.close)


def _translate(exc: Exception, action: str, bucket: str, key: str) -> Exception:
    """Turn a botocore error into a teamstore error that says what to do."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        CredentialRetrievalError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in _NOT_FOUND:
            return TranscriptNotFound(f"no transcript at {key}", hint="check the user, session and run id")
        if code == "NoSuchBucket":
            return TranscriptUnavailable(
                f"could not {action} transcripts: bucket {bucket!r} does not exist",
                hint="create the bucket or fix TEAMSTORE_TRANSCRIPTS_URL",
            )
        if code in {"AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch"}:
            return TranscriptUnavailable(
                f"could not {action} transcripts in bucket {bucket!r}: access denied ({code})",
                hint=f"grant the worker's role {_NEEDS[action]}",
            )
        return TranscriptUnavailable(f"could not {action} transcripts in {bucket!r}: S3 said {code}: {exc}")
    if isinstance(exc, NoCredentialsError | PartialCredentialsError | CredentialRetrievalError):
        return TranscriptUnavailable(
            f"could not {action} transcripts: no usable AWS credentials ({type(exc).__name__})",
            hint="set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or give the worker a role; "
            "transcripts wait in the outbox (teamstore transcripts flush)",
        )
    if action == "write" and unanswered(exc):
        return UploadInDoubt(
            f"S3 too slow or cut off while answering a transcript upload ({type(exc).__name__}): it may land all the "
            "same",
            hint="check AWS_ENDPOINT_URL_S3 / network; the transcript waits in the outbox and is sent again once "
            "the first upload can no longer land (TEAMSTORE_LATE_UPLOAD_SECONDS)",
        )
    if isinstance(exc, BotoCoreError):
        return TranscriptUnavailable(
            f"could not {action} transcripts: S3 unreachable or too slow ({type(exc).__name__})",
            hint="check AWS_ENDPOINT_URL_S3 / network; transcripts wait in the outbox (teamstore transcripts flush)",
        )
    if isinstance(exc, StorageError | TranscriptUnavailable):
        return exc
    return TranscriptUnavailable(f"could not {action} transcripts: {type(exc).__name__}: {exc}")
