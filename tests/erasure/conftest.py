"""Fixtures of the erasure suite: a migrated database, versioned S3 over HTTP, a Platform that audits."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore import examples
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.erasure import DeletionCoordinator, ErasureSettings
from teamstore.erasure.steps import Progress

# No in-flight writes to wait for in most tests; the race test sets its own grace.
KNOBS = ErasureSettings(fence_grace_seconds=0, lease_seconds=30)


@pytest.fixture
def registry(registry_path: Path) -> Registry:
    """A registry holding the example support team, labelled production."""
    reg = Registry(registry_path, create=True)
    reg.add("support_triage", examples.support_triage().dump_component(),
            examples.example_manifest("support_triage"), "v1", label="production")
    return reg


def versioned_bucket(lock: bool = False) -> str:
    """A new bucket with versioning on (and Object Lock when asked) on the test endpoint."""
    import boto3

    name = f"ts-er-{uuid.uuid4().hex[:10]}"
    client = boto3.client("s3")
    if lock:
        client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    else:
        client.create_bucket(Bucket=name)
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


@pytest.fixture
async def s3_store(s3_env: str) -> AsyncIterator[S3TranscriptStore]:
    """A transcript store in a versioned bucket, under the prefix ``audit``."""
    store = S3TranscriptStore(make_client(), versioned_bucket(), "audit")
    yield store
    await store.close()


def coordinator(engine: AsyncEngine, store: Any, progress: Progress | None = None, **knobs: Any) -> DeletionCoordinator:
    """A coordinator with test knobs (no fence grace unless given)."""
    return DeletionCoordinator(engine, store, knobs=KNOBS.model_copy(update=knobs), progress=progress)
