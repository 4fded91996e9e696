"""Fixtures of the erasure suite: a migrated database, versioned S3 over HTTP, a Platform that audits."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from teamstore import examples
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.db.engine import create_engine
from teamstore.erasure import DeletionCoordinator, ErasureSettings, Receipt
from teamstore.erasure.steps import Progress
from teamstore.keys import KeyService
from teamstore.settings import Settings
from tests.conftest import prepare

# No in-flight writes to wait for in most tests; the race test sets its own grace.
KNOBS = ErasureSettings(fence_grace_seconds=0, lease_seconds=30)


@pytest.fixture
async def state_engine(backend: tuple[str, str]) -> AsyncIterator[AsyncEngine]:
    """The backend's migrated database, its kind of session lease recorded: SQLite, and Postgres with
    advisory-lock leases and with row leases (the erasure waits for open sessions as each kind counts them)."""
    await prepare(*backend)
    eng = create_engine(backend[0])
    yield eng
    await eng.dispose()


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


@dataclass
class KeyWaits:
    """Erasures of a user who has a data key, whose ``keys`` step waits ``cache_seconds`` for workers' cached
    copies of it: what each run said before it waited, and when its ``keys`` step was done (``time.monotonic``)."""

    engine: AsyncEngine
    store: Any
    cache_seconds: float
    said: list[tuple[float, str]] = field(default_factory=list)
    keys_done: list[float] = field(default_factory=list)

    def coordinator(self) -> DeletionCoordinator:
        keys = KeyService.from_settings(self.engine, Settings(key_cache_seconds=self.cache_seconds))
        coordinator = DeletionCoordinator(self.engine, self.store, knobs=KNOBS, keys=keys,
                                          notice=lambda line: self.said.append((time.monotonic(), line)))
        coordinator.after_step = lambda step: self.keys_done.append(time.monotonic()) if step == "keys" else None
        return coordinator

    async def make_key(self, user: str) -> None:
        await self.coordinator().keys.data_key(user)

    def began(self) -> list[float]:
        """When each wait for the cached data keys was said to begin."""
        return [at for at, line in self.said if "cached data keys" in line]

    async def stopped_in_its_wait(self, user: str, request_id: str, after: float) -> None:
        """Erase ``user``, stopped (as Ctrl-C stops it) ``after`` seconds into the ``keys`` step's wait."""
        run = asyncio.create_task(self.coordinator().run(user, request_id=request_id))
        while not self.began():
            assert not run.done(), run
            await asyncio.sleep(0.01)
        await asyncio.sleep(after)
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        assert not self.keys_done  # stopped before the step was done

    async def rerun(self, user: str, request_id: str) -> Receipt:
        return await self.coordinator().run(user, request_id=request_id)

    def waited_only_what_was_left(self, stopped_after: float) -> bool:
        """Whether the rerun waited no more than what was left of the first attempt's wait, stopped
        ``stopped_after`` seconds into it, by what each said it would wait (not by the time it took, which a loaded
        machine stretches): the whole wait began once, and a rerun's wait, if any, was under what was left (and a
        little, for the time between the notice and the wait's recorded start)."""
        whole = [line for _, line in self.said if line.startswith("data key destroyed; waiting")]
        left = [float(line.split("waiting the ")[1].split(" ")[0]) for _, line in self.said if "left of" in line]
        return len(whole) == 1 and all(wait < self.cache_seconds - stopped_after + 0.2 for wait in left)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """An empty folder exports are written to."""
    folder = tmp_path / "out"
    folder.mkdir()
    return folder
