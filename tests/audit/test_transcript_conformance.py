"""One conformance suite for every transcript backend: a local folder and S3 over HTTP (moto's server), in a
plain bucket and in a versioned one with Object Lock.

Each optional capability is tested twice over: a backend that declares it passes its tests, and one that
declares it absent is shown to need it not (no hidden versions, nothing that refuses a delete, ...)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from teamstore.audit.transcripts import (
    Capability,
    TranscriptStore,
    run_key,
    session_prefix,
    store_beside,
    store_endpoint,
    subject_prefix,
)
from teamstore.audit.transcripts.base import run_id_of
from teamstore.audit.transcripts.capabilities import PROTOCOLS, HoldStatus, ObjectVersion, capability
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.record import RunKeys, decode, encode
from teamstore.errors import ConfigurationError, InvalidIdentifier, TranscriptNotFound, TranscriptUnavailable
from tests.audit.transcript_backends import Backend

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


async def test_scan_gives_each_object_under_a_prefix_with_its_size_and_write_time(store: TranscriptStore) -> None:
    written = {run_key(A, run): body(run) + bytes(n) for n, run in enumerate(("r1", "r2", "r3"))}
    before = datetime.now(UTC).replace(microsecond=0)
    for key, data in written.items():
        await store.put(key, data)
    await store.put(run_key(B, "r4"), body("r4"))
    found = {o.key: o async for o in store.scan(subject_prefix(A.subject_key))}
    assert {key: o.size for key, o in found.items()} == {key: len(data) for key, data in written.items()}
    assert all(before - timedelta(seconds=1) <= o.modified <= datetime.now(UTC) for o in found.values())


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


async def test_delete_prefix_again_or_of_a_subject_never_stored_deletes_nothing_and_succeeds(
    store: TranscriptStore,
) -> None:
    # An erasure rerun deletes the subject's prefix again: what is gone already is not a failure.
    await store.put(run_key(A, "r1"), body("r1"))
    assert await store.delete_prefix(subject_prefix(A.subject_key)) == 1
    assert await store.delete_prefix(subject_prefix(A.subject_key)) == 0
    assert await store.delete_prefix(subject_prefix(B.subject_key)) == 0


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
    transcript_backend: Backend, store: TranscriptStore
) -> None:
    await store.put(run_key(A, "old"), body("old"))
    await store.put(run_key(A, "new"), body("new"))
    assert isinstance(store.capabilities, frozenset)
    if Capability.LOCAL_SWEEP in store.capabilities:
        transcript_backend.age(run_key(A, "old"), days=100)
        assert await store.sweep(datetime.now(UTC) - timedelta(days=90)) == 1
        assert await store.list_keys(session_prefix(A)) == [run_key(A, "new")]
    else:
        assert Capability.LIFECYCLE_RULES in store.capabilities
        assert await store.sweep(datetime.now(UTC)) == 0  # the service's lifecycle rule expires objects
        assert len(await store.list_keys(session_prefix(A))) == 2


# --- optional capabilities ---------------------------------------------------------------------------------
def test_a_store_declares_exactly_the_capabilities_whose_protocol_it_implements(store: TranscriptStore) -> None:
    for which, protocol in PROTOCOLS.items():
        assert (which in store.capabilities) == isinstance(store, protocol), which
        assert capability(store, which) is (store if which in store.capabilities else None)  # type: ignore[call-overload]


def test_a_store_declaring_a_capability_it_lacks_is_refused_by_name(tmp_path: Path) -> None:
    class Boasting(LocalTranscriptStore):
        capabilities = LocalTranscriptStore.capabilities | {Capability.VERSIONS}

    with pytest.raises(ConfigurationError, match="declares versions but lacks Versions") as caught:
        capability(Boasting(tmp_path), Capability.VERSIONS)
    assert caught.value.hint


async def test_a_store_on_one_machines_disk_says_whether_this_machine_has_it(
    store: TranscriptStore, tmp_path: Path
) -> None:
    local = capability(store, Capability.HOST_LOCAL)
    if local is None:
        return  # reached the same from any machine
    await store.put(run_key(A, "r1"), body("r1"))
    assert await local.present()
    elsewhere = capability(LocalTranscriptStore(tmp_path / "another-machines-disk"), Capability.HOST_LOCAL)
    assert elsewhere is not None and not await elsewhere.present()
    assert await local.owner() is None  # written to without a run's marker: whose, it does not say
    await local.make_here("a" * 32)
    await local.make_here("b" * 32)  # a second maker keeps the first one's marker
    assert await local.owner() == "a" * 32 and await store.list_keys("") == [run_key(A, "r1")]
    await elsewhere.make_here("c" * 32)
    assert await elsewhere.present() and await elsewhere.owner() == "c" * 32


async def test_a_store_reached_by_name_carries_the_marks_of_the_databases_whose_writers_use_it(
    store: TranscriptStore
) -> None:
    marks = capability(store, Capability.MARKS)
    if marks is None:
        assert capability(store, Capability.HOST_LOCAL) is not None  # its folder's marker names its database
        return
    await store.put(run_key(A, "r1"), body("r1"))
    here = store_endpoint(store)
    assert here is not None and not await marks.marked("a" * 32, here)
    await marks.mark("a" * 32)
    await marks.mark("a" * 32)
    assert await marks.marked("a" * 32, here) and not await marks.marked("b" * 32, here)
    assert not await marks.marked("a" * 32, f"{here}-elsewhere")  # marked at the endpoint its writers reach
    assert await store.list_keys("") == [run_key(A, "r1")]  # a mark is no transcript
    await store.delete_prefix(subject_prefix(A.subject_key))
    assert await marks.marked("a" * 32, here) and await store.list_keys("") == []  # a subject erased leaves it


async def test_another_store_is_reached_by_its_url_with_this_stores_settings(
    store: TranscriptStore, tmp_path: Path
) -> None:
    assert store_beside(store, store.url) is store
    folder = store_beside(store, (tmp_path / "beside").resolve().as_uri())  # a folder needs no settings
    assert isinstance(folder, LocalTranscriptStore) and folder.root == tmp_path / "beside"
    siblings = capability(store, Capability.SIBLINGS)
    if siblings is None:
        assert store_beside(store, "s3://another-bucket/audit") is None  # no client to reach it with
        return
    assert siblings.sibling(folder.url) is None and siblings.sibling("s3://not a bucket/audit") is None
    beside = store_beside(store, f"{store.url}/beside")
    assert beside is not None and beside.url == f"{store.url}/beside"
    await beside.put(run_key(A, "r1"), body("r1"))
    await beside.close()  # the client is this store's: still open
    await store.put(run_key(B, "r2"), body("r2"))
    assert await store.list_keys(subject_prefix(A.subject_key)) == []  # another store's, not this one's
    again = store_beside(store, beside.url)
    assert again is not None and decode(await again.get(run_key(A, "r1")))[0]["run_id"] == "r1"


async def test_versions_lists_every_copy_under_a_prefix_and_nothing_beside_it(
    transcript_backend: Backend, store: TranscriptStore
) -> None:
    await store.put(run_key(A, "r1"), body("first"))
    await store.put(run_key(A, "r1"), body("r1, written again"))
    await store.put(run_key(A2, "r2"), body("r2"))
    await store.put(run_key(B, "r3"), body("r3"))
    prefix = subject_prefix(A.subject_key)
    listing = capability(store, Capability.VERSIONS)
    if listing is None:  # one copy per object: what list_keys shows is all there is
        assert transcript_backend.stored(prefix) == await store.list_keys(prefix)
        return
    transcript_backend.mark_deleted(run_key(A2, "r2"))  # a versioned bucket keeps it, under a delete marker

    found = await listing.versions(prefix)

    assert sorted(f"{v.key}@{v.version_id}" for v in found) == transcript_backend.stored(prefix)
    markers = [(v.key, v.size) for v in found if v.delete_marker]
    assert markers == ([(run_key(A2, "r2"), 0)] if transcript_backend.locks else [])
    assert {v.key for v in found} == {run_key(A, "r1")} | ({run_key(A2, "r2")} if transcript_backend.locks else set())
    assert len(body("r1, written again")) in {v.size for v in found if v.key == run_key(A, "r1")}
    assert await listing.versions(subject_prefix("c" * 32)) == []


async def test_version_pages_give_what_versions_lists_a_page_at_a_time_each_deletable_as_it_comes(
    transcript_backend: Backend, store: TranscriptStore
) -> None:
    listing, deleter = capability(store, Capability.VERSIONS), capability(store, Capability.BATCH_DELETE)
    if listing is None or deleter is None:
        return
    if hasattr(store, "page_size"):
        store.page_size = 2  # several pages of a few versions
    for run in ("r1", "r2", "r3"):
        await store.put(run_key(A, run), body(run))
        await store.put(run_key(A, run), body(f"{run}, written again"))
    await store.put(run_key(B, "r4"), body("r4"))
    prefix = subject_prefix(A.subject_key)

    pages = [page async for page in listing.version_pages(prefix)]
    def names(versions: list[ObjectVersion]) -> list[str]:
        return sorted(f"{v.key}@{v.version_id}" for v in versions)

    assert len(pages) > 1 or not hasattr(store, "page_size")
    assert names([v for page in pages for v in page]) == names(await listing.versions(prefix))
    assert [page async for page in listing.version_pages(subject_prefix("c" * 32))] == [[]]

    deleted = 0
    async for page in listing.version_pages(prefix):  # each page deleted before the next is asked for
        assert await deleter.delete_versions(page) == []
        deleted += len(page)
    assert deleted == sum(len(page) for page in pages) and await listing.versions(prefix) == []
    assert transcript_backend.stored(prefix) == []
    assert await store.list_keys(subject_prefix(B.subject_key)) == [run_key(B, "r4")]


async def test_every_listed_version_reads_back_as_written_even_under_a_delete_marker(
    transcript_backend: Backend, store: TranscriptStore
) -> None:
    listing = capability(store, Capability.VERSIONS)
    if listing is None:  # one copy per object: get() reads all there is
        return
    await store.put(run_key(A, "r1"), body("first"))
    await store.put(run_key(A, "r1"), body("r1, written again"))
    await store.put(run_key(A2, "r2"), body("r2"))
    transcript_backend.mark_deleted(run_key(A2, "r2"))

    found = await listing.versions(subject_prefix(A.subject_key))
    read = sorted([await listing.read_version(v) for v in found if not v.delete_marker])

    # A versioned bucket keeps the first write and r2 under its marker; a plain one the last write alone.
    expected = [body("first"), body("r1, written again"), body("r2")] if transcript_backend.locks else [
        body("r1, written again")]
    assert read == sorted(expected)
    for marker in (v for v in found if v.delete_marker):
        with pytest.raises(TranscriptNotFound):
            await listing.read_version(marker)
    gone = next(v for v in found if not v.delete_marker)
    deleter = capability(store, Capability.BATCH_DELETE)
    assert deleter is not None and await deleter.delete_versions([gone]) == []
    with pytest.raises(TranscriptNotFound):
        await listing.read_version(gone)


async def test_a_listed_version_reads_only_its_first_bytes_when_only_those_are_asked_for(
    transcript_backend: Backend, store: TranscriptStore
) -> None:
    listing = capability(store, Capability.VERSIONS)
    if listing is None:
        return
    await store.put(run_key(A, "r1"), body("first"))
    (version,) = await listing.versions(subject_prefix(A.subject_key))
    assert await listing.read_version(version, length=10) == body("first")[:10]
    assert await listing.read_version(version, length=10**6) == body("first")  # past its end: all there is


async def test_delete_versions_removes_what_it_is_given_and_nothing_else(
    transcript_backend: Backend, store: TranscriptStore
) -> None:
    for keys, run in ((A, "r1"), (A2, "r2"), (B, "r3")):
        await store.put(run_key(keys, run), body(run))
    prefix = subject_prefix(A.subject_key)
    listing, deleter = capability(store, Capability.VERSIONS), capability(store, Capability.BATCH_DELETE)
    assert (listing is None) == (deleter is None)  # what one lists the other removes
    if listing is None or deleter is None:  # then delete_prefix leaves no copy behind
        assert await store.delete_prefix(prefix) == 2
        assert transcript_backend.stored(prefix) == []
    else:
        assert await deleter.delete_versions(await listing.versions(prefix)) == []
        assert await listing.versions(prefix) == [] and transcript_backend.stored(prefix) == []
        assert await deleter.delete_versions([]) == []
    assert await store.list_keys(subject_prefix(B.subject_key)) == [run_key(B, "r3")]


async def test_a_version_the_service_refuses_to_delete_is_reported_with_its_code_never_taken_as_gone(
    transcript_backend: Backend, store: TranscriptStore
) -> None:
    for run in ("held", "free"):
        await store.put(run_key(A, run), body(run))
    prefix = subject_prefix(A.subject_key)
    locked = transcript_backend.hold(run_key(A, "held"))
    listing, deleter = capability(store, Capability.VERSIONS), capability(store, Capability.BATCH_DELETE)
    if listing is None or deleter is None:  # no versions: delete_prefix removes every copy, nothing locks one
        assert not locked and await store.delete_prefix(prefix) == 2 and transcript_backend.stored(prefix) == []
        return

    refused = await deleter.delete_versions(await listing.versions(prefix))

    left = await listing.versions(prefix)
    if not locked:  # a bucket without Object Lock refuses nothing
        assert refused == [] and left == []
        return
    (held,) = left
    assert [(r.version, r.code) for r in refused] == [(held, "AccessDenied")] and held.key == run_key(A, "held")
    assert await store.list_keys(prefix) == [run_key(A, "held")]


async def test_delete_and_delete_prefix_raise_on_a_version_the_service_refuses_and_remove_the_rest(
    transcript_backend: Backend, store: TranscriptStore
) -> None:
    for run in ("held", "free"):
        await store.put(run_key(A, run), body(run))
    await store.put(run_key(A2, "free"), body("free"))
    prefix = subject_prefix(A.subject_key)
    if not transcript_backend.hold(run_key(A, "held")):  # nothing here can refuse a delete: both remove every copy
        assert await store.delete(run_key(A, "held")) >= 1
        assert await store.delete_prefix(prefix) == 2 and transcript_backend.stored(prefix) == []
        return

    with pytest.raises(TranscriptUnavailable, match=r"refused to delete 1 version\(s\) of a transcript \(AccessDenied\)"):
        await store.delete(run_key(A, "held"))
    with pytest.raises(TranscriptUnavailable, match=r"refused to delete 1 version\(s\) under the prefix \(AccessDenied\)"):
        await store.delete_prefix(prefix)

    assert await store.list_keys(prefix) == [run_key(A, "held")]  # the others went all the same
    transcript_backend.hold(run_key(A, "held"), on=False)
    assert await store.delete_prefix(prefix) == 1 and transcript_backend.stored(prefix) == []


async def test_hold_says_whether_a_legal_hold_or_a_retention_protects_a_version(
    transcript_backend: Backend, store: TranscriptStore
) -> None:
    for run in ("free", "held"):
        await store.put(run_key(A, run), body(run))
    locked = transcript_backend.hold(run_key(A, "held"))
    holds, listing = capability(store, Capability.HOLDS), capability(store, Capability.VERSIONS)
    if holds is None or listing is None:  # nothing locks a copy: every one can be removed
        assert not locked and await store.delete_prefix(subject_prefix(A.subject_key)) == 2
        assert transcript_backend.stored(subject_prefix(A.subject_key)) == []
        return
    if locked:
        transcript_backend.put_retained(run_key(A, "retained"), body("retained"), datetime.now(UTC) + timedelta(days=1))
    found = {v.key: v for v in await listing.versions(session_prefix(A))}

    states = {run_id_of(key): await holds.hold(version) for key, version in found.items()}

    expected = {"free": HoldStatus.FREE, "held": HoldStatus.HELD if locked else HoldStatus.FREE}
    assert states == expected | ({"retained": HoldStatus.HELD} if locked else {})
    await store.delete(run_key(A, "free"))
    assert await holds.hold(found[run_key(A, "free")]) is HoldStatus.GONE


async def test_apply_retention_puts_one_rule_on_the_transcripts_folder_and_keeps_the_others(
    transcript_backend: Backend, store: TranscriptStore
) -> None:
    lifecycle = capability(store, Capability.LIFECYCLE_RULES)
    if lifecycle is None:  # then the store expires objects itself
        assert Capability.LOCAL_SWEEP in store.capabilities
        return
    rule = await lifecycle.apply_retention(30)
    await lifecycle.apply_retention(30)  # replaced, not added twice

    assert rule["Expiration"] == {"Days": 30} and rule["Filter"]["Prefix"].endswith("/subjects/")
    assert transcript_backend.lifecycle_rules() == [rule]


async def test_a_killed_writers_temporary_file_is_a_partial_write_and_goes_with_its_folder(
    transcript_backend: Backend, store: TranscriptStore
) -> None:
    await store.put(run_key(A, "r1"), body("r1"))
    partial = capability(store, Capability.PARTIAL_WRITES)
    if partial is None:  # a write is whole or absent: nothing is left beside the object
        assert [copy.split("@")[0] for copy in transcript_backend.stored(session_prefix(A))] == [run_key(A, "r1")]
        return
    left = transcript_backend.leave_partial_write(run_key(A, "r2"), b"CANARY a whole transcript")

    assert await partial.partial_writes(subject_prefix(A.subject_key)) == [left]
    assert await partial.partial_writes(subject_prefix(B.subject_key)) == []
    assert await store.list_keys(session_prefix(A)) == [run_key(A, "r1")]
    assert await store.get(left) == b"CANARY a whole transcript"  # what erasure counts it by
    await store.delete_prefix(subject_prefix(A.subject_key))
    assert transcript_backend.stored(subject_prefix(A.subject_key)) == []
