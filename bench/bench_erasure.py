"""Erasing a user with 10,000 transcript object versions: S3 requests made vs the minimum, and wall time.

    python -m bench erasure

moto's S3 server over real HTTP, versioning on; 2,500 keys written 4 times each under one subject. Every
request the coordinator's client sends is counted with a botocore ``before-send`` hook, by operation.
The minimum is what any correct erasure must send: one ``ListObjectVersions`` page per 1,000 versions
plus one ``DeleteObjects`` per 1,000 versions. The coordinator also lists once to verify after deleting
and once more in its final check, after the subject mapping is gone.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import shutil
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import s3_endpoint
from teamstore.audit.subjects import get_or_create_subject
from teamstore.audit.transcripts.base import subject_prefix
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.erasure import DeletionCoordinator, ErasureSettings

KEYS, WRITES = 2_500, 4  # 10,000 versions


def _s3_env() -> None:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                      AWS_ENDPOINT_URL_S3=s3_endpoint())


def _seed(bucket: str, prefix: str) -> None:
    client = make_client(read_timeout=30, max_attempts=3)
    client.create_bucket(Bucket=bucket)
    client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})

    def put(i: int) -> None:
        for w in range(WRITES):
            client.put_object(Bucket=bucket, Key=f"audit/{prefix}sessions/s{i % 50}/runs/r{i}.jsonl.gz",
                              Body=f"run {i} write {w}".encode())

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(KEYS)))


async def _erase(home: Path, bucket: str) -> tuple[Any, Counter[str], float]:
    engine = create_engine(f"sqlite:///{(home / 'bench.db').as_posix()}")
    await upgrade(engine)
    subject = await get_or_create_subject(engine, "bench-user")
    _seed(bucket, subject_prefix(subject))
    client, sent = make_client(read_timeout=60), Counter[str]()
    client.meta.events.register("before-send.s3", lambda request, **_: sent.update(
        [request.url.split("?")[-1].split("&")[0].split("=")[0] or request.method]))
    store = S3TranscriptStore(client, bucket, "audit")
    coordinator = DeletionCoordinator(engine, store, knobs=ErasureSettings(fence_grace_seconds=0))
    started = time.perf_counter()
    receipt = await coordinator.run("bench-user")
    elapsed = time.perf_counter() - started
    await engine.dispose()
    return receipt, sent, elapsed


def main() -> None:
    """Seed, erase, print the figures."""
    _s3_env()
    home = Path(tempfile.mkdtemp(prefix="teamstore-bench-erasure-"))
    try:
        receipt, sent, elapsed = asyncio.run(_erase(home, f"bench-{uuid.uuid4().hex[:8]}"))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    versions = receipt.stores["transcripts"].counts.versions
    minimum = 2 * math.ceil(versions / 1000)
    made = sum(sent.values())
    print(f"receipt: {receipt.status}, transcripts {receipt.stores['transcripts'].status}: "
          f"{versions} versions of {receipt.stores['transcripts'].counts.objects} objects")
    print(f"S3 requests made: {made} ({dict(sent)})")
    print(f"minimum (list pages + one DeleteObjects per 1,000): {minimum}; ratio {made / minimum:.2f}x")
    print(f"wall time of the erasure: {elapsed:.2f} s ({versions / elapsed:,.0f} versions/s)")


if __name__ == "__main__":
    main()
