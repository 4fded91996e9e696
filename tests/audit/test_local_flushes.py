"""What the local transcript folder flushes to the disk before it says a delete, a sweep or its marker is done,
watched with inotify: a folder opened after its last change, by a store that lists nothing then, is its ``fsync``.

Until a folder is flushed, a power loss or the host's crash can bring back a name removed from it: an erased
user's transcript the receipt says is gone, or one the sweep counted as past retention.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.placement import make_here
from teamstore.audit.transcripts.base import run_key, subject_prefix
from teamstore.audit.transcripts.local import MARKER, LocalTranscriptStore
from teamstore.audit.transcripts.record import RunKeys
from teamstore.db.identity import database_id
from teamstore.errors import StorageError
from tests.audit import inotify
from tests.disk_calls import record_disk_calls

pytestmark = pytest.mark.skipif(not inotify.AVAILABLE, reason="inotify is Linux's")

ALICE, BOB = RunKeys("a" * 32, "b" * 32), RunKeys("c" * 32, "d" * 32)


def _to_the_top(folder: Path) -> list[Path]:
    """``folder`` and each folder above it up to its filesystem's root (a mount point, or ``/``), deepest first."""
    steps = [Path(os.path.realpath(folder))]
    while not os.path.ismount(steps[-1]):
        steps.append(steps[-1].parent)
    return steps


def _folder(store: LocalTranscriptStore, key: str) -> Path:
    return store.root.joinpath(*key.split("/")).parent


def _kinds(events: list[tuple[str, str]]) -> list[str]:
    return [kind for kind, _ in events]


def _removed(events: list[tuple[str, str]]) -> set[str]:
    return {name for kind, name in events if kind == "delete"}


async def _aged(store: LocalTranscriptStore, key: str, days: int) -> None:
    await store.put(key, b"x", written_at=datetime.now(UTC) - timedelta(days=days))


async def test_an_erasures_delete_flushes_the_folder_that_held_the_subject_once_not_each_file(tmp_path: Path) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    for run in ("r1", "r2"):
        await store.put(run_key(ALICE, run), b"alice's words")
    await store.put(run_key(BOB, "r3"), b"bob's")
    runs, subjects = _folder(store, run_key(ALICE, "r1")), store.root / "subjects"
    with inotify.FolderWatch(runs) as in_runs, inotify.FolderWatch(subjects) as in_subjects:
        assert await store.delete_prefix(subject_prefix(ALICE.subject_key)) == 2
        removed, above = in_runs.events(), in_subjects.events()
    # The files went with their folder (it is listed, then emptied): no flush of each.
    assert _kinds(removed) == ["open", "delete", "delete"] and _removed(removed) == {"r1.jsonl.gz", "r2.jsonl.gz"}
    assert above == [("delete", ALICE.subject_key), ("open", "")]  # the subject's folder gone, then flushed
    assert await store.list_keys("subjects/") == [run_key(BOB, "r3")]


async def test_an_erasure_rerun_after_its_delete_flushes_again(tmp_path: Path) -> None:
    # A delete killed between the removal and its flush is rerun: finding nothing, it still flushes.
    store = LocalTranscriptStore(tmp_path / "transcripts")
    await store.put(run_key(ALICE, "r1"), b"alice's words")
    await store.put(run_key(BOB, "r2"), b"bob's")
    await store.delete_prefix(subject_prefix(ALICE.subject_key))
    with inotify.FolderWatch(store.root / "subjects") as in_subjects:
        assert await store.delete_prefix(subject_prefix(ALICE.subject_key)) == 0
        assert in_subjects.events() == [("open", "")]


async def test_a_deleted_transcript_is_flushed_from_the_nearest_folder_left(tmp_path: Path) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    kept, gone = run_key(ALICE, "r1"), run_key(RunKeys(ALICE.subject_key, "e" * 32), "r2")
    await store.put(kept, b"kept")
    await store.put(gone, b"late")
    sessions = _folder(store, gone).parent.parent
    with inotify.FolderWatch(sessions) as in_sessions:
        assert await store.delete(gone) == 1
        # Its session's folders went empty and were removed: the folder holding them is flushed.
        assert in_sessions.events() == [("delete", "e" * 32), ("open", "")]
    assert await store.list_keys("subjects/") == [kept]


async def test_the_sweep_flushes_each_folder_it_changed_once_after_its_removals(tmp_path: Path) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    for run in ("r1", "r2"):
        await _aged(store, run_key(ALICE, run), days=100)
    await _aged(store, run_key(ALICE, "r3"), days=1)
    await _aged(store, run_key(BOB, "r4"), days=100)  # bob's only run: his folders go with it
    runs, subjects = _folder(store, run_key(ALICE, "r1")), store.root / "subjects"
    with inotify.FolderWatch(runs) as in_runs, inotify.FolderWatch(subjects) as in_subjects:
        assert await store.sweep(datetime.now(UTC) - timedelta(days=90)) == 3
        swept, above = in_runs.events(), in_subjects.events()
    # Listed, two removed, flushed once: not a flush per file.
    assert _kinds(swept) == ["open", "delete", "delete", "open"] and _removed(swept) == {"r1.jsonl.gz", "r2.jsonl.gz"}
    assert above == [("open", ""), ("delete", BOB.subject_key), ("open", "")]  # listed; bob's folder gone, flushed
    assert await store.list_keys("subjects/") == [run_key(ALICE, "r3")]


async def test_a_sweep_that_removes_nothing_flushes_nothing(tmp_path: Path) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    await _aged(store, run_key(ALICE, "r1"), days=1)
    with inotify.FolderWatch(_folder(store, run_key(ALICE, "r1"))) as in_runs:
        assert await store.sweep(datetime.now(UTC) - timedelta(days=90)) == 0
        assert in_runs.events() == [("open", "")]  # listed only


async def test_a_stale_temporary_file_the_sweep_removes_is_flushed_too(tmp_path: Path) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    await _aged(store, run_key(ALICE, "r1"), days=1)
    runs = _folder(store, run_key(ALICE, "r1"))
    left = runs / ".tmp-r2.jsonl.gz.abc"  # a killed writer's: a whole transcript
    left.write_bytes(b"alice's words")
    hours_ago = time.time() - 2 * 3600
    os.utime(left, (hours_ago, hours_ago))
    with inotify.FolderWatch(runs) as in_runs:
        assert await store.sweep(datetime.now(UTC) - timedelta(days=90)) == 0  # uncounted: no reader saw it
        assert in_runs.events() == [("open", ""), ("delete", left.name), ("open", "")]


async def test_the_folders_marker_is_flushed_into_the_folder_and_a_root_made_for_it_into_its_parent(
    tmp_path: Path,
) -> None:
    made = LocalTranscriptStore(tmp_path / "made")
    with inotify.FolderWatch(tmp_path) as in_home:
        await made.make_here("db-1")
        assert in_home.events() == [("create", "made"), ("open", "")]
    there = LocalTranscriptStore(tmp_path / "there")
    there.root.mkdir()
    with inotify.FolderWatch(there.root) as in_root:
        await there.make_here("db-1")
        assert in_root.events() == [("create", ".teamstore-folder"), ("close_write", ".teamstore-folder"),
                                    ("open", "")]
    assert await made.owner() == await there.owner() == "db-1"


@pytest.mark.parametrize("rerun_by", ["the same store", "a new process"])
async def test_a_marker_whose_flush_failed_is_flushed_with_the_folders_name_by_the_rerun_that_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_engine: AsyncEngine, rerun_by: str
) -> None:
    # The rerun saw a marked folder and returned: nothing ever flushed the marker, and a power loss could take it
    # (and the folder made for it), leaving the workers' folder unmarked, or gone.
    store = LocalTranscriptStore(tmp_path / "transcripts")
    marker = Path(os.path.realpath(store.root)) / MARKER
    calls = record_disk_calls(monkeypatch)
    calls.fail_flush_of(store.root)  # the marker's name in it
    with pytest.raises(StorageError):
        await make_here(store, sqlite_engine)
    assert await store.owner() == await database_id(sqlite_engine)  # there, and maybe not after a power loss
    calls.failing.clear()
    calls.calls.clear()
    rerun = LocalTranscriptStore(store.root) if rerun_by == "a new process" else store

    await make_here(rerun, sqlite_engine)

    assert calls.flushed() == [marker, *_to_the_top(store.root)]
    calls.calls.clear()
    await make_here(rerun, sqlite_engine)  # known flushed now: once per store
    assert calls.flushed() == []


async def test_a_marker_an_operator_linked_into_the_folder_is_flushed_through_its_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_engine: AsyncEngine
) -> None:
    # The marker is read through a link; flushing it must follow the link too, not refuse the folder as unmade.
    root = tmp_path / "transcripts"
    root.mkdir(mode=0o700)
    scratch = LocalTranscriptStore(tmp_path / "scratch")
    await make_here(scratch, sqlite_engine)
    (root / MARKER).symlink_to(scratch.root / MARKER)
    calls = record_disk_calls(monkeypatch)

    await make_here(LocalTranscriptStore(root), sqlite_engine)

    assert Path(os.path.realpath(scratch.root / MARKER)) in calls.flushed()


async def test_a_transcript_whose_folder_cannot_be_flushed_after_its_rename_is_in_doubt_not_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It was told as a failed write while it sat under its name: the run kept no claim, so an erasure that listed
    # the subject's folder before the rename never learnt of it. A disk that fails the flush is simulated: the
    # folder's flush is teamstore's own call, the rename before it the real one.
    from teamstore.audit.transcripts import local
    from teamstore.errors import UploadInDoubt

    def failing(path: Path, made: object = ()) -> None:
        raise OSError(5, "Input/output error")

    store = LocalTranscriptStore(tmp_path / "transcripts")
    key = run_key(ALICE, "r1")
    monkeypatch.setattr(local, "fsync_name", failing)
    with pytest.raises(UploadInDoubt) as caught:
        await store.put(key, b"alice's words")
    assert "may or may not survive a power loss" in caught.value.message
    assert await store.get(key) == b"alice's words"  # it is there: one that may land, for the run's claim
    assert await store.partial_writes("subjects/") == []  # and no temporary file left beside it


async def test_a_transcripts_bytes_are_flushed_before_its_rename_and_its_new_folders_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Renamed unflushed, a power loss can leave the name on an empty file: a transcript the run counted as kept.
    store = LocalTranscriptStore(tmp_path / "transcripts")
    key = run_key(ALICE, "r1")
    calls = record_disk_calls(monkeypatch)
    await store.put(key, b"alice's words")
    path = store.root.joinpath(*key.split("/"))
    seen = calls.around(path)
    assert seen.source.name.startswith(".tmp-r1.jsonl.gz.") and seen.before == [seen.source]
    # Its folder, then each folder made for it in the one above, up to the root's, and (once) those above the root.
    assert seen.after == _to_the_top(path.parent)
    calls.calls.clear()
    await store.put(run_key(ALICE, "r2"), b"alice's words")  # the same folders, known flushed: only its own
    second = calls.around(path.parent / "r2.jsonl.gz")
    assert calls.flushed() == [second.source, path.parent]


async def test_a_put_into_a_new_subject_flushes_its_folders_up_to_the_stores_root_not_above_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each new user's first transcript: the folders above the store's root were flushed by its first put.
    store = LocalTranscriptStore(tmp_path / "transcripts")
    await store.put(run_key(BOB, "r0"), b"bob's")
    calls = record_disk_calls(monkeypatch)
    key = run_key(ALICE, "r1")
    await store.put(key, b"alice's words")
    path = store.root.joinpath(*key.split("/"))
    subject = store.root / "subjects" / ALICE.subject_key
    assert calls.around(path).after == [path.parent, path.parent.parent, subject / "sessions", subject,
                                        store.root / "subjects", store.root]

    # subjects/ went (every transcript deleted): its name is flushed in the root again, and, the root having
    # changed since it was flushed, each folder above the root too (as if another process had made it again).
    await store.delete(run_key(ALICE, "r1"))
    await store.delete(run_key(BOB, "r0"))
    assert not (store.root / "subjects").exists()
    calls.calls.clear()
    await store.put(key, b"alice's words again")
    assert calls.around(path).after[4:] == [store.root / "subjects", *_to_the_top(store.root)]
    calls.calls.clear()
    await store.put(run_key(BOB, "r1"), b"bob's again")  # the root is known flushed as it is now
    assert calls.around(store.root.joinpath(*run_key(BOB, "r1").split("/"))).after[-1] == store.root


@pytest.mark.parametrize("made_again_by", ["the put", "another process, which has yet to flush its name",
                                           "another process, with the subject's folders the put goes into"])
async def test_a_stores_root_an_operator_removed_is_made_again_and_its_name_flushed_up_to_the_top(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made_again_by: str
) -> None:
    import shutil

    store = LocalTranscriptStore(tmp_path / "transcripts")
    await store.put(run_key(BOB, "r0"), b"bob's")
    shutil.rmtree(store.root)
    key = run_key(ALICE, "r1")
    path = store.root.joinpath(*key.split("/"))
    if made_again_by != "the put":  # there when the put looks, perhaps with the removed folder's inode
        store.root.mkdir()
    if made_again_by.endswith("goes into"):  # none of them flushed yet
        path.parent.mkdir(parents=True)
    calls = record_disk_calls(monkeypatch)
    await store.put(key, b"alice's words")
    after = calls.around(path).after
    assert after[-len(_to_the_top(store.root)):] == _to_the_top(store.root)
    subject = store.root / "subjects" / ALICE.subject_key
    assert {path.parent.parent, subject / "sessions", subject, store.root / "subjects"} <= set(after)


@pytest.mark.parametrize("retried_by", ["the same store", "the same store, which had flushed them once", "a new process"])
async def test_a_put_retried_after_one_that_failed_once_its_folders_were_made_flushes_their_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, retried_by: str
) -> None:
    # The outbox retries a transcript whose put failed: the retry finds the subject's and the session's folders the
    # failed put made and never flushed; a power loss could take them, the transcript with them.
    store = LocalTranscriptStore(tmp_path / "transcripts")
    await store.put(run_key(BOB, "r0"), b"bob's")  # the root and subjects/ known flushed
    key = run_key(ALICE, "r1")
    if retried_by == "the same store, which had flushed them once":  # then a delete removed them: made again below
        await store.put(run_key(ALICE, "r0"), b"alice's first")
        await store.delete(run_key(ALICE, "r0"))
    path = store.root.joinpath(*key.split("/"))
    calls = record_disk_calls(monkeypatch)
    calls.fail_file_flushes_in(path.parent)  # the temporary file's: nothing renamed, the folders made
    with pytest.raises(StorageError):
        await store.put(key, b"alice's words")
    assert path.parent.is_dir() and not path.exists()
    calls.failing_files_in.clear()
    retry = LocalTranscriptStore(store.root) if retried_by == "a new process" else store
    await retry.put(key, b"alice's words")
    flushed = calls.around(path).after
    subject = store.root / "subjects" / ALICE.subject_key
    # Each folder's name in the one above: the runs', the session's, the sessions' and the subject's.
    assert [path.parent, path.parent.parent, subject / "sessions", subject, store.root / "subjects"] == [
        folder for folder in flushed if folder.is_relative_to(store.root)
    ][:5]
