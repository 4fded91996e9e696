"""One conformance suite for every transcript backend: a local folder and S3 over HTTP (moto's server)."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from teamstore.audit.transcripts import Capability, TranscriptStore, run_key, session_prefix, subject_prefix
from teamstore.audit.transcripts.record import RunKeys, decode, encode
from teamstore.errors import InvalidIdentifier, TranscriptNotFound

A = RunKeys("a" * 32, "1" * 32)
A2 = RunKeys("a" * 32, "2" * 32)
B = RunKeys("b" * 32, "1" * 32)


def body(run_id: str) -> bytes:
    return encode(
        {"kind": "run", "run_id": run_id}, [{"kind": "item", "seq": 0, "message": {"content": "hi"}}]
    )


async def test_put_then_get_returns_the_same_transcript(store: TranscriptStore) -> None:
    key = run_key(A, "run-1")
    await store.put(key, body("run-1"))
    header, items = decode(await store.get(key))
    assert header["run_id"] == "run-1"
    assert items[0]["message"]["content"] == "hi"


async def test_get_of_a_missing_run_raises_transcript_not_found(store: TranscriptStore) -> None:
    with pytest.raises(TranscriptNotFound):
        await store.get(run_key(A, "nope"))


async def test_list_keys_finds_a_session_runs_and_nothing_of_other_sessions(store: TranscriptStore) -> None:
    for keys, run in ((A, "r1"), (A, "r2"), (A2, "r3"), (B, "r4")):
        await store.put(run_key(keys, run), body(run))
    assert await store.list_keys(session_prefix(A)) == [run_key(A, "r1"), run_key(A, "r2")]
    assert len(await store.list_keys(subject_prefix(A.subject_key))) == 3
    assert await store.list_keys(session_prefix(RunKeys("c" * 32, "1" * 32))) == []


async def test_putting_the_same_run_twice_leaves_one_object(store: TranscriptStore) -> None:
    key = run_key(A, "r1")
    await store.put(key, body("r1"))
    await store.put(key, body("r1"))
    assert await store.list_keys(session_prefix(A)) == [key]


async def test_delete_prefix_removes_one_subject_and_keeps_the_others(store: TranscriptStore) -> None:
    await store.put(run_key(A, "r1"), body("r1"))
    await store.put(run_key(A2, "r2"), body("r2"))
    await store.put(run_key(B, "r3"), body("r3"))
    assert await store.delete_prefix(subject_prefix(A.subject_key)) == 2
    assert await store.list_keys(subject_prefix(A.subject_key)) == []
    assert await store.list_keys(subject_prefix(B.subject_key)) == [run_key(B, "r3")]


async def test_delete_removes_one_run_and_keeps_the_rest(store: TranscriptStore) -> None:
    for run in ("r1", "r1-later", "r2"):
        await store.put(run_key(A, run), body(run))
    await store.put(run_key(A2, "r3"), body("r3"))
    assert await store.delete(run_key(A, "r1")) >= 1
    with pytest.raises(TranscriptNotFound):
        await store.get(run_key(A, "r1"))
    assert await store.list_keys(subject_prefix(A.subject_key)) == [
        run_key(A, "r1-later"), run_key(A, "r2"), run_key(A2, "r3")]
    assert await store.delete(run_key(A, "r1")) == 0  # already gone: nothing to do, no error
    await store.delete(run_key(A2, "r3"))
    assert await store.list_keys(subject_prefix(A.subject_key)) == [run_key(A, "r1-later"), run_key(A, "r2")]


async def test_keys_that_could_escape_the_root_are_refused(store: TranscriptStore) -> None:
    with pytest.raises(InvalidIdentifier):
        await store.put("subjects/../../escape.jsonl.gz", b"x")
    with pytest.raises(InvalidIdentifier):
        await store.get("/etc/passwd")


async def test_run_ids_with_slashes_dots_and_unicode_stay_inside_the_session(store: TranscriptStore) -> None:
    for run in ("../x", "a/b", "ü-ñ"):
        await store.put(run_key(A, run), body(run))
    keys = await store.list_keys(session_prefix(A))
    assert len(keys) == 3
    assert all(k.startswith(session_prefix(A)) and k.count("/") == 5 for k in keys)


async def test_capabilities_are_declared_and_retention_follows_them(
    store: TranscriptStore, tmp_path: Path
) -> None:
    await store.put(run_key(A, "old"), body("old"))
    await store.put(run_key(A, "new"), body("new"))
    assert isinstance(store.capabilities, frozenset)
    if Capability.LOCAL_SWEEP in store.capabilities:
        old = tmp_path / "transcripts" / run_key(A, "old")
        past = time.time() - 100 * 86400
        os.utime(old, (past, past))
        assert await store.sweep(datetime.now(UTC) - timedelta(days=90)) == 1
        assert await store.list_keys(session_prefix(A)) == [run_key(A, "new")]
    else:
        assert Capability.LIFECYCLE_RULES in store.capabilities
        assert await store.sweep(datetime.now(UTC)) == 0  # the service's lifecycle rule expires objects
        assert len(await store.list_keys(session_prefix(A))) == 2
