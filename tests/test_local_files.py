"""The embedded default's files are its owner's only, whatever the umask: the SQLite database (user ids,
saved states, the map to transcript subjects), the transcript folder and the home they sit in must not be
readable by the other users of a shared host."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.cli import app
from teamstore.db.engine import create_engine
from teamstore.errors import StorageError
from tests.conftest import undeletable, upgrade_database


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_new_sqlite_database_and_its_wal_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    database = tmp_path / "home" / "teamstore.db"
    await upgrade_database(f"sqlite:///{database}")
    engine = create_engine(f"sqlite:///{database}")
    async with engine.begin() as conn:  # a write, so the -wal and -shm files exist while it is open
        await conn.execute(text("INSERT INTO ts_subjects (user_id, subject_key, session_secret, created_at) "
                                "VALUES ('alice', 'k', 's', CURRENT_TIMESTAMP)"))
        assert mode(database) == 0o600
        assert mode(database.parent) == 0o700
        for extra in ("-wal", "-shm"):
            side = database.with_name(database.name + extra)
            assert not side.exists() or mode(side) == 0o600, extra
    await engine.dispose()


async def test_an_existing_database_keeps_the_mode_its_operator_gave_it(tmp_path: Path) -> None:
    database = tmp_path / "teamstore.db"
    await upgrade_database(f"sqlite:///{database}")
    database.chmod(0o640)  # shared with a reporting group on purpose
    await upgrade_database(f"sqlite:///{database}")
    assert mode(database) == 0o640


async def test_the_transcript_folder_and_its_objects_are_their_owners_only(tmp_path: Path) -> None:
    root = tmp_path / "home" / "transcripts"
    store = LocalTranscriptStore(root)
    await store.put("subjects/abc/sessions/def/runs/r1.jsonl.gz", b"x")
    assert mode(root) == 0o700
    assert mode(root / "subjects/abc/sessions/def/runs/r1.jsonl.gz") == 0o600


def _first_registry(home: Path) -> None:
    result = CliRunner().invoke(app, ["registry", "add", "support_triage", "--factory",
                                      "teamstore.examples:support_triage", "-m", "first"])
    assert result.exit_code == 0, result.output
    assert (home / "registry").is_dir()


async def _first_database(home: Path) -> None:
    await upgrade_database(f"sqlite:///{home / 'teamstore.db'}")


async def _first_transcript(home: Path) -> None:
    await LocalTranscriptStore(home / "transcripts").put("subjects/abc/sessions/def/runs/r1.jsonl.gz", b"x")


@pytest.mark.parametrize("first", ["registry add", "database", "transcript folder"])
async def test_whichever_store_is_made_first_the_home_is_its_owners_only(
    first: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `registry add` as the very first command made TEAMSTORE_HOME 0755 (git's folder, then the home on the
    # way to it); so did the first transcript, through the folders above the transcript root.
    home = Path(os.environ["TEAMSTORE_HOME"]) / "nested"  # a folder above the home is missing too
    monkeypatch.setenv("TEAMSTORE_HOME", str(home))
    if first == "registry add":
        _first_registry(home)
    elif first == "database":
        await _first_database(home)
    else:
        await _first_transcript(home)
    assert mode(home) == 0o700
    assert mode(home.parent) == 0o700  # made on the way as well


async def test_the_folders_under_an_existing_transcript_root_are_their_owners_only_whatever_the_umask(
    tmp_path: Path,
) -> None:
    root = tmp_path / "transcripts"
    root.mkdir(mode=0o755)  # made by the operator (or a package) before the first write
    os.umask(0)
    await LocalTranscriptStore(root).put("subjects/abc/sessions/def/runs/r1.jsonl.gz", b"x")
    assert mode(root) == 0o755
    for folder in ("subjects", "subjects/abc", "subjects/abc/sessions", "subjects/abc/sessions/def",
                   "subjects/abc/sessions/def/runs"):
        assert mode(root / folder) == 0o700, folder
    assert mode(root / "subjects/abc/sessions/def/runs/r1.jsonl.gz") == 0o600


RUNS = "subjects/abc/sessions/def/runs"


async def test_the_transcript_folder_follows_no_symlink_planted_below_its_root(tmp_path: Path) -> None:
    # A link in a user's folder would put whatever it points at in that user's export, or a write outside.
    store = LocalTranscriptStore(tmp_path / "transcripts")
    await store.put(f"{RUNS}/r1.jsonl.gz", b"mine")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl.gz").write_bytes(b"not a transcript")
    runs = tmp_path / "transcripts" / RUNS
    (runs / "r2.jsonl.gz").symlink_to(outside / "secret.jsonl.gz")
    (runs / ".tmp-r3.jsonl.gz.x").symlink_to(outside / "secret.jsonl.gz")
    (runs.parent.parent / "linked").symlink_to(outside)

    assert await store.list_keys("subjects/") == [f"{RUNS}/r1.jsonl.gz"]
    assert [o.key async for o in store.scan("subjects/")] == [f"{RUNS}/r1.jsonl.gz"]
    assert await store.partial_writes("subjects/") == []
    assert await store.list_keys("subjects/abc/sessions/linked") == []
    assert await store.get(f"{RUNS}/r1.jsonl.gz") == b"mine"
    for key in (f"{RUNS}/r2.jsonl.gz", "subjects/abc/sessions/linked/secret.jsonl.gz"):
        with pytest.raises(StorageError, match="symbolic link"):
            await store.get(key)
    with pytest.raises(StorageError, match="symbolic link"):
        await store.put("subjects/abc/sessions/linked/runs/r4.jsonl.gz", b"x")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.jsonl.gz"]


async def test_a_transcript_root_that_is_a_symlink_is_used_as_its_operator_chose(tmp_path: Path) -> None:
    (tmp_path / "volume").mkdir(mode=0o700)
    (tmp_path / "transcripts").symlink_to(tmp_path / "volume")
    store = LocalTranscriptStore(tmp_path / "transcripts")
    await store.put(f"{RUNS}/r1.jsonl.gz", b"mine")
    assert await store.list_keys("") == [f"{RUNS}/r1.jsonl.gz"]
    assert await store.get(f"{RUNS}/r1.jsonl.gz") == b"mine"


async def test_the_sweep_does_not_follow_a_subjects_folder_that_is_a_symlink(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "old.jsonl.gz").write_bytes(b"someone else's")
    os.utime(elsewhere / "old.jsonl.gz", (0, 0))
    (tmp_path / "transcripts").mkdir(mode=0o700)
    (tmp_path / "transcripts" / "subjects").symlink_to(elsewhere)
    store = LocalTranscriptStore(tmp_path / "transcripts")
    with pytest.raises(StorageError, match="symbolic link"):
        await store.sweep(datetime.now(UTC))
    assert (elsewhere / "old.jsonl.gz").exists()


async def test_a_prefix_that_cannot_be_deleted_raises_naming_it_and_deleting_again_finishes(tmp_path: Path) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    kept = "subjects/abc/sessions/s1/runs/r1.jsonl.gz"
    for key in ("subjects/abc/sessions/s0/runs/r0.jsonl.gz", kept, "subjects/xyz/sessions/s0/runs/r0.jsonl.gz"):
        await store.put(key, b"x")

    with undeletable(tmp_path / "transcripts" / "subjects/abc/sessions/s1/runs"), \
            pytest.raises(StorageError, match=r"^could not delete the transcripts under subjects/abc/: ") as info:
        await store.delete_prefix("subjects/abc/")
    assert "s1" not in info.value.message and "r1" not in info.value.message  # the prefix, nothing below it
    assert await store.list_keys("subjects/") == [kept, "subjects/xyz/sessions/s0/runs/r0.jsonl.gz"]

    assert await store.delete_prefix("subjects/abc/") == 1
    assert await store.delete_prefix("subjects/abc/") == 0  # gone already: an erasure's rerun is not a failure
    assert await store.list_keys("subjects/") == ["subjects/xyz/sessions/s0/runs/r0.jsonl.gz"]


async def test_a_prefix_whose_folder_is_a_symlink_is_not_deleted_and_says_so(tmp_path: Path) -> None:
    store = LocalTranscriptStore(tmp_path / "transcripts")
    await store.put(f"{RUNS}/r1.jsonl.gz", b"mine")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept.jsonl.gz").write_bytes(b"someone else's")
    (tmp_path / "transcripts" / "subjects" / "linked").symlink_to(outside)

    with pytest.raises(StorageError, match="subjects/linked in the transcript folder is a symbolic link"):
        await store.delete_prefix("subjects/linked/")
    assert (outside / "kept.jsonl.gz").exists() and (tmp_path / "transcripts" / "subjects" / "linked").is_symlink()
