"""Every file teamstore writes by a rename outlives a power loss once the write returns: its bytes are flushed before
the rename, its folder after it (and the folders made for it, in theirs; a rerun, which cannot know which a failed
run made, each folder up to the filesystem's root). A flush that fails after the rename says what state the file is
left in. A folder that cannot be opened to be flushed, or whose filesystem refuses its flush, is no failure. The
transcript folder's own: tests/audit/test_local_flushes.py.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from teamstore.analytics.page import write_page
from teamstore.audit.warehouse.local import LocalPartitions
from teamstore.disk import FlushedFolders, fsync_file, fsync_folder
from teamstore.errors import (
    ExportFailed,
    KeyFileInDoubt,
    KeyUnavailable,
    LedgerExportFailed,
    ReportNotWritten,
)
from teamstore.export.archive import open_archive
from teamstore.keys.kek import LocalKeyFile
from tests.disk_calls import DiskCalls, record_disk_calls


def _to_the_top(folder: Path) -> list[Path]:
    """``folder`` and each folder above it up to its filesystem's root (a mount point, or ``/``), deepest first."""
    steps = []
    for step in (folder, *folder.parents):
        steps.append(step)
        if os.path.ismount(step):
            break
    return steps


def _keys(path: Path) -> dict[str, str]:
    keys: dict[str, str] = json.loads(path.read_text())["keys"]
    return keys


def test_a_new_key_file_is_flushed_before_its_rename_and_its_folder_and_the_folders_made_for_it_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Lost to a power loss, the key file takes every payload sealed under its keys with it.
    path = tmp_path / "home" / "keys" / "key-encryption-keys.json"
    calls = record_disk_calls(monkeypatch)
    LocalKeyFile(path).first()
    seen = calls.around(path)
    assert seen.before == [seen.source] and seen.source.parent == path.parent
    assert seen.after == _to_the_top(path.parent)  # each made for it among them


def test_a_rotations_key_and_a_destroyed_one_are_flushed_before_the_rename_and_the_folder_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = LocalKeyFile(tmp_path / "key-encryption-keys.json")
    first = keys.first()
    calls = record_disk_calls(monkeypatch)
    keys.create()
    made = calls.around(keys.path)
    assert made.before == [made.source] and made.after == [tmp_path]
    calls.calls.clear()
    keys.destroy(first)
    destroyed = calls.around(keys.path)
    assert destroyed.before == [destroyed.source] and destroyed.after == [tmp_path]


def test_a_rotations_key_whose_folder_cannot_be_flushed_is_in_doubt_and_not_for_the_database_to_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = LocalKeyFile(tmp_path / "key-encryption-keys.json")
    keys.first()
    calls = record_disk_calls(monkeypatch)
    calls.fail_flush_of(tmp_path)
    with pytest.raises(KeyFileInDoubt) as caught:
        keys.create()
    assert "may or may not hold the change after a power loss" in caught.value.message
    assert "run the same command again" in (caught.value.hint or "")
    assert len(_keys(keys.path)) == 2  # in the file now: a key no database records, which `keys retire` destroys
    assert list(tmp_path.glob(".key-encryption-keys.json.*")) == []  # and no temporary file beside it


def test_a_rotations_key_that_cannot_be_flushed_before_its_rename_is_unavailable_and_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = LocalKeyFile(tmp_path / "key-encryption-keys.json")
    first = keys.first()
    calls = record_disk_calls(monkeypatch)
    calls.fail_file_flushes_in(tmp_path)
    with pytest.raises(KeyUnavailable) as caught:  # was an OSError of no teamstore type
        keys.create()
    assert "it is as it was" in caught.value.message
    assert list(_keys(keys.path)) == [first]
    assert sorted(seen.name for seen in tmp_path.iterdir()) == [keys.path.name, f"{keys.path.name}.lock"]  # no half


def test_a_new_key_file_whose_folder_cannot_be_flushed_is_flushed_by_the_rerun_before_its_key_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The rerun finds the file there and writes nothing: it must flush it anyway, or the database would record a
    # key a power loss may still take.
    keys = LocalKeyFile(tmp_path / "key-encryption-keys.json")
    calls = record_disk_calls(monkeypatch)
    calls.fail_flush_of(tmp_path)
    with pytest.raises(KeyFileInDoubt):
        keys.first()
    calls.failing.clear()
    calls.calls.clear()
    assert keys.first() == next(iter(_keys(keys.path)))
    assert calls.flushed() == _to_the_top(tmp_path)


def test_a_new_homes_rerun_flushes_each_folder_the_failed_run_made_though_it_finds_them_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A power loss could take `home`, the key file with it, while the database names its key.
    path = tmp_path / "home" / "keys" / "key-encryption-keys.json"
    calls = record_disk_calls(monkeypatch)
    calls.fail_flush_of(path.parent)
    with pytest.raises(KeyFileInDoubt):
        LocalKeyFile(path).first()
    calls.failing.clear()
    calls.calls.clear()
    assert LocalKeyFile(path).first() == next(iter(_keys(path)))  # a new process: it made none of them
    assert calls.flushed() == _to_the_top(path.parent)


def test_a_new_homes_rerun_after_a_write_that_failed_once_its_folders_were_made_flushes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "home" / "keys" / "key-encryption-keys.json"
    calls = record_disk_calls(monkeypatch)
    calls.fail_file_flushes_in(path.parent)  # the temporary file's: nothing renamed, the folders made
    with pytest.raises(KeyUnavailable):
        LocalKeyFile(path).first()
    assert path.parent.is_dir() and not path.exists()
    calls.failing_files_in.clear()
    LocalKeyFile(path).first()
    assert calls.around(path).after == _to_the_top(path.parent)


def test_a_destroyed_key_whose_folder_cannot_be_flushed_is_flushed_by_the_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Until flushed, a power loss may bring the key back: the database records it destroyed only after a rerun.
    keys = LocalKeyFile(tmp_path / "key-encryption-keys.json")
    old = keys.first()
    keys.create()
    calls = record_disk_calls(monkeypatch)
    calls.fail_flush_of(tmp_path)
    with pytest.raises(KeyFileInDoubt):
        keys.destroy(old)
    assert old not in _keys(keys.path)
    calls.failing.clear()
    calls.calls.clear()
    keys.destroy(old)
    assert calls.flushed() == [tmp_path]


def test_the_cost_page_is_flushed_before_its_rename_and_its_folder_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "cost.html"
    calls = record_disk_calls(monkeypatch)
    write_page(page, "<html>this week's page</html>")
    seen = calls.around(page)
    assert seen.before == [seen.source] and seen.after == [tmp_path]


def test_a_cost_page_whose_folder_cannot_be_flushed_says_it_may_not_outlive_a_power_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing relies on the page: a rerun writes it whole again, so the command fails and says so.
    page = tmp_path / "cost.html"
    calls = record_disk_calls(monkeypatch)
    calls.fail_flush_of(tmp_path)
    with pytest.raises(ReportNotWritten, match="may not outlive a power loss") as caught:
        write_page(page, "<html>this week's page</html>")
    assert "run the same command again" in (caught.value.hint or "")
    assert [seen.name for seen in tmp_path.iterdir()] == ["cost.html"]


@pytest.mark.parametrize("name", ["alice.zip", "alice"])
def test_an_export_archive_is_flushed_before_it_takes_its_name_and_its_folder_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    target = tmp_path / name
    archive = open_archive(target)
    archive.add("profile.json", b"{}")
    calls = record_disk_calls(monkeypatch)
    archive.commit()
    seen = calls.around(target)  # a zip file is linked to its name, a folder renamed
    flushed = [seen.source] if name.endswith(".zip") else [seen.source / "profile.json", seen.source]  # files first
    assert seen.before == flushed and seen.after == [tmp_path]


def test_an_export_archive_whose_folder_cannot_be_flushed_is_removed_and_the_export_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not in doubt: the export is recorded done only once its archive is flushed, and this one is taken back.
    archive = open_archive(tmp_path / "alice.zip")
    archive.add("profile.json", b"{}")
    calls = record_disk_calls(monkeypatch)
    calls.fail_flush_of(tmp_path)
    with pytest.raises(ExportFailed, match="could not flush the folder"):
        archive.commit()
    assert list(tmp_path.iterdir()) == []


def _partition(sink: LocalPartitions, key: str) -> None:
    staged = sink.stage(key)
    staged.write_bytes(b"PAR1 a day's rows PAR1")
    sink.commit(key, staged)


def test_a_ledger_partition_is_flushed_before_its_rename_and_the_folders_made_for_it_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = LocalPartitions(tmp_path / "warehouse")
    first, second = "day=2026-11-30/part-00000.parquet", "day=2026-12-01/part-00000.parquet"
    calls = record_disk_calls(monkeypatch)
    _partition(sink, first)
    seen = calls.around(sink.root / first)
    assert seen.before == [seen.source] and seen.after == _to_the_top(sink.root / "day=2026-11-30")
    _partition(sink, second)  # a new day's folder: in the export's own
    assert calls.around(sink.root / second).after == [sink.root / "day=2026-12-01", sink.root]
    _partition(sink, first)  # the day again: its folder, and the export's (cheap, and a rerun's way to flush them)
    assert calls.around(sink.root / first).after == [sink.root / "day=2026-11-30", sink.root]


def test_a_ledger_partition_whose_folder_cannot_be_flushed_says_it_may_not_outlive_a_power_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An export records nothing, and its rerun replaces the day whole: it fails, and says so.
    sink = LocalPartitions(tmp_path / "warehouse")
    key = "day=2026-11-30/part-00000.parquet"
    calls = record_disk_calls(monkeypatch)
    calls.fail_flush_of(sink.root / "day=2026-11-30")
    with pytest.raises(LedgerExportFailed, match="may not outlive a power loss") as caught:
        _partition(sink, key)
    assert "run the same export again" in (caught.value.hint or "")
    calls.failing.clear()
    _partition(LocalPartitions(sink.root), key)  # the rerun, in a process of its own, flushes what the first made
    assert calls.around(sink.root / key).after == _to_the_top(sink.root / "day=2026-11-30")


def test_a_ledger_exports_rerun_flushes_the_folders_above_its_own_that_the_failed_export_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, key = tmp_path / "new" / "ledger", "day=2026-11-30/part-00000.parquet"
    calls = record_disk_calls(monkeypatch)
    calls.fail_flush_of(root / "day=2026-11-30")
    with pytest.raises(LedgerExportFailed):
        _partition(LocalPartitions(root), key)
    calls.failing.clear()
    _partition(LocalPartitions(root), key)  # finds `new` there, which a power loss may still take
    assert calls.around(root / key).after == _to_the_top(root / "day=2026-11-30")


_SKIPPED = {"not readable": ("open", errno.EACCES), "flush refused (EINVAL)": ("fsync", errno.EINVAL),
            "flush refused (EBADF)": ("fsync", errno.EBADF)}
"""How a folder's flush is skipped, as PostgreSQL skips it: opened by a process that may write into it but not
read it (``0300``; root reads it anyway, so the open is refused here), or on a filesystem that flushes no folder."""


def _skip_flushes_of(calls: DiskCalls, folder: Path, how: str) -> None:
    call, code = _SKIPPED[how]
    if call == "open":
        calls.refuse_open_of(folder, code)
    else:
        calls.fail_flush_of(folder, code)


@pytest.mark.parametrize("how", list(_SKIPPED))
def test_a_folder_that_cannot_be_opened_or_whose_flush_its_filesystem_refuses_is_not_flushed_and_no_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    calls = record_disk_calls(monkeypatch)
    _skip_flushes_of(calls, tmp_path, how)
    fsync_folder(tmp_path)
    write_page(tmp_path / "cost.html", "<html>this week's page</html>")  # was ReportNotWritten
    keys = LocalKeyFile(tmp_path / "key-encryption-keys.json")
    keys.first()
    keys.create()
    assert len(_keys(keys.path)) == 2  # was KeyFileInDoubt, and one more key each time
    _partition(LocalPartitions(tmp_path), "day=2026-11-30/part-00000.parquet")  # was LedgerExportFailed
    assert (tmp_path / "day=2026-11-30" / "part-00000.parquet").is_file()


@pytest.mark.parametrize("code", [errno.EINVAL, errno.EBADF, errno.EIO])
def test_a_files_flush_that_fails_is_a_failure_whatever_its_errno(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    page = tmp_path / "cost.html"
    page.write_text("<html>last week's page</html>")
    calls = record_disk_calls(monkeypatch)
    calls.fail_flush_of(page, code)
    with pytest.raises(OSError) as caught:
        fsync_file(page)
    assert caught.value.errno == code


def test_a_file_that_cannot_be_opened_and_a_folder_whose_flush_the_disk_fails_are_failures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "cost.html"
    page.write_text("<html>last week's page</html>")
    calls = record_disk_calls(monkeypatch)
    calls.refuse_open_of(page)
    with pytest.raises(PermissionError):
        fsync_file(page)
    calls.fail_flush_of(tmp_path)  # EIO
    with pytest.raises(OSError, match="Input/output error"):
        fsync_folder(tmp_path)


def test_the_folders_known_flushed_are_forgotten_past_their_limit_and_flushed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker's store meets a new session's folders every few runs: remembering them all would grow without end.
    root = tmp_path / "root"
    first, second = root / "a" / "runs", root / "b" / "runs"
    for folder in (first / "more", second):
        folder.mkdir(parents=True)
    known = FlushedFolders(root, limit=5)
    calls = record_disk_calls(monkeypatch)
    known.flush_up(first)  # first, a and the root known: 3
    assert calls.flushed() == [root / "a", root, *_to_the_top(tmp_path)]
    calls.calls.clear()
    known.flush_up(first)
    assert calls.flushed() == []  # known: nothing
    known.flush_up(second)  # b's two more: 5, within the limit
    assert calls.flushed() == [root / "b", root]
    calls.calls.clear()
    known.flush_up(first / "more")  # 6: past it, all forgotten but the last chain's (its own name flushed in first)
    known.flush_up(first)
    assert calls.flushed() == [first, root / "a", root, *_to_the_top(tmp_path)]
