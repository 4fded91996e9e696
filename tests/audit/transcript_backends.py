"""The transcript backends the conformance suite runs on, each with the hands a test needs behind the store's
back: what the backend physically keeps, a legal hold, a killed writer's temporary file, an old object."""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from teamstore.audit.transcripts.base import TranscriptStore
from teamstore.audit.transcripts.local import TMP_PREFIX, LocalTranscriptStore

BACKENDS = ("local", "s3", "s3-locked")
"""A folder; S3 over HTTP in a plain bucket; S3 in a versioned bucket created with Object Lock."""


class Backend:
    """A store and what a test does to its backend directly."""

    store: TranscriptStore
    locks = False
    """Whether a version can be put under a legal hold or a retention period here (and the bucket is versioned)."""

    def stored(self, prefix: str) -> list[str]:
        """Every copy the backend keeps under ``prefix``, sorted: a file, or ``key@version`` for each version
        and delete marker."""
        raise NotImplementedError

    def hold(self, key: str, on: bool = True) -> bool:
        """Put (or lift) a legal hold on the current version of ``key``; False where nothing can lock it."""
        return False

    def put_retained(self, key: str, body: bytes, until: datetime) -> None:
        """Write ``key`` under a governance-mode retention until ``until``."""
        raise NotImplementedError

    def mark_deleted(self, key: str) -> None:
        """Delete ``key`` without naming a version: a versioned bucket keeps it and adds a delete marker."""
        raise NotImplementedError

    def age(self, key: str, days: int) -> None:
        """Make ``key`` look written ``days`` ago."""
        raise NotImplementedError

    def leave_partial_write(self, key: str, body: bytes) -> str:
        """Leave what a writer killed before putting ``key`` in place leaves; returns its key."""
        raise NotImplementedError

    def lifecycle_rules(self) -> list[dict[str, Any]]:
        """The bucket's lifecycle rules."""
        raise NotImplementedError


@dataclass
class LocalBackend(Backend):
    """A local folder."""

    root: Path

    def __post_init__(self) -> None:
        self.store = LocalTranscriptStore(self.root)

    def stored(self, prefix: str) -> list[str]:
        base = self.root / prefix
        return sorted(p.relative_to(self.root).as_posix() for p in base.rglob("*") if p.is_file())

    def age(self, key: str, days: int) -> None:
        past = time.time() - days * 86400
        os.utime(self.root / key, (past, past))

    def leave_partial_write(self, key: str, body: bytes) -> str:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.parent / f"{TMP_PREFIX}{path.name}.k1ll3d"  # as tempfile.mkstemp names it beside the object
        partial.write_bytes(body)
        return partial.relative_to(self.root).as_posix()


class S3Backend(Backend):
    """S3 over HTTP (moto's server): a plain bucket, or a versioned one created with Object Lock."""

    def __init__(self, locked: bool) -> None:
        import boto3

        from teamstore.audit.transcripts.s3 import S3TranscriptStore

        self.client, self.bucket, self.locks = boto3.client("s3"), f"ts-{uuid.uuid4().hex[:12]}", locked
        if locked:
            self.client.create_bucket(Bucket=self.bucket, ObjectLockEnabledForBucket=True)
            self.client.put_bucket_versioning(Bucket=self.bucket, VersioningConfiguration={"Status": "Enabled"})
        else:
            self.client.create_bucket(Bucket=self.bucket)
        self.prefix = f"audit/{uuid.uuid4().hex[:6]}"
        self.store = S3TranscriptStore.from_url(f"s3://{self.bucket}/{self.prefix}")

    def stored(self, prefix: str) -> list[str]:
        pages = self.client.get_paginator("list_object_versions").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/{prefix}")
        found = [v for page in pages for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
        return sorted(f"{v['Key'].removeprefix(self.prefix + '/')}@{v['VersionId']}" for v in found)

    def hold(self, key: str, on: bool = True) -> bool:
        if not self.locks:
            return False
        self.client.put_object_legal_hold(Bucket=self.bucket, Key=f"{self.prefix}/{key}",
                                          LegalHold={"Status": "ON" if on else "OFF"})
        return True

    def put_retained(self, key: str, body: bytes, until: datetime) -> None:
        self.client.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}", Body=body,
                               ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=until)

    def mark_deleted(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}")

    def lifecycle_rules(self) -> list[dict[str, Any]]:
        rules: list[dict[str, Any]] = self.client.get_bucket_lifecycle_configuration(Bucket=self.bucket)["Rules"]
        return rules
