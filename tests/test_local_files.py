"""The embedded default's files are its owner's only, whatever the umask: the SQLite database (user ids,
saved states, the map to transcript subjects), the transcript folder and the home they sit in must not be
readable by the other users of a shared host."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.cli import app
from teamstore.db.engine import create_engine
from tests.conftest import upgrade_database


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
