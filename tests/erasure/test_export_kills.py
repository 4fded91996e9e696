"""An export killed outright as it finishes (SIGKILL, a crash, a power loss) never leaves a record saying the
request was answered without its archive in place: the archive is on disk (its files, then the folder that holds
it) and in place before the record says ``exported``; until then the record stays ``running``, where the
documented clean-up looks for the temporary archive. Real processes, killed at the commit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

import teamstore.export.archive as archive_module
import teamstore.export.requests as export_requests_module
from teamstore.audit.subjects import get_or_create_subject
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.errors import ExportFailed, StoreUnavailable
from teamstore.export.requests import get_export
from teamstore.export.schema import export_requests
from tests.erasure.test_export import exporter, loaded, unpack

# Exports user gil from the migrated database argv[1] into argv[2], and dies (SIGKILL) at argv[3]: "flush",
# the archive's first fsync (its bytes not yet on disk), or "record", as the export's outcome is recorded.
_KILLED_EXPORT = textwrap.dedent("""
    import asyncio, os, signal, sys
    from pathlib import Path
    import teamstore.export.archive as archive
    import teamstore.export.requests as requests
    from teamstore.audit.prices import load_prices
    from teamstore.audit.transcripts.local import LocalTranscriptStore
    from teamstore.db.engine import create_engine
    from teamstore.export import ExportCoordinator, store_exporters

    def die(*_):
        os.kill(os.getpid(), signal.SIGKILL)

    async def die_async(*_):
        die()

    if sys.argv[3] == "flush":
        archive.os.fsync = die
    else:
        requests.finish_export = die_async

    async def main():
        engine = create_engine(sys.argv[1])
        coordinator = ExportCoordinator(engine, LocalTranscriptStore(Path(sys.argv[2]).parent / "t"),
                                        store_exporters(), load_prices())
        await coordinator.run("gil", Path(sys.argv[2]), operator="dpo")

    asyncio.run(main())
""")


async def _killed_export(engine: AsyncEngine, database_url: str, target: Path, at: str) -> dict[str, object]:
    """Run the export in a process killed at ``at``; its record as the database keeps it."""
    await get_or_create_subject(engine, "gil")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", _KILLED_EXPORT, database_url, str(target), at], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    async with engine.connect() as conn:
        rows = (await conn.execute(export_requests.select())).mappings().all()
    assert len(rows) == 1
    return dict(rows[0])


@pytest.mark.parametrize("name", ["gil.zip", "gil"])
async def test_an_export_killed_before_its_archive_is_on_disk_stays_running_beside_its_temporary_archive(
    engine: AsyncEngine, database_url: str, tmp_path: Path, name: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    record = await _killed_export(engine, database_url, out / name, "flush")
    assert (record["status"], record["manifest"]) == ("running", None)
    left = sorted(p.name for p in out.iterdir())
    assert len(left) == 1 and left[0].startswith(f".{name}.") and left[0].endswith(".partial"), left


@pytest.mark.parametrize("name", ["gil.zip", "gil"])
async def test_an_export_killed_as_it_records_its_outcome_has_its_whole_archive_in_place(
    engine: AsyncEngine, database_url: str, tmp_path: Path, name: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    record = await _killed_export(engine, database_url, out / name, "record")
    assert record["status"] == "running"
    assert sorted(p.name for p in out.iterdir()) == [name]  # no temporary archive beside it
    files = unpack(out / name)
    manifest = loaded(files, "manifest.json")
    assert set(files) == {*manifest["files"], "manifest.json"}
    if name.endswith(".zip"):
        with zipfile.ZipFile(out / name) as archive:
            assert archive.testzip() is None


async def test_every_file_and_folder_of_an_archive_is_on_disk_before_its_export_is_recorded(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushed: list[Path] = []
    fsync = os.fsync

    def noted(fd: int) -> None:
        flushed.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    monkeypatch.setattr(archive_module.os, "fsync", noted)
    await get_or_create_subject(engine, "gil")
    out = tmp_path / "out"
    out.mkdir()
    done = await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", out / "gil", operator="dpo")
    assert done.path == out / "gil" and (await get_export(engine, done.manifest.export_id) or {})["status"] == "exported"
    (partial,) = {p for p in flushed if p.parent == out and p.name.endswith(".partial")}
    inside = {p.relative_to(partial).as_posix() for p in flushed if p.is_relative_to(partial)}
    assert {*done.manifest.files, "manifest.json", "."} <= inside, flushed  # its files, then the folder itself
    assert flushed[-1] == out  # the folder holding the archive, after the rename


@pytest.mark.parametrize("name", ["gil.zip", "gil"])
async def test_an_archive_in_place_is_removed_when_its_export_cannot_be_recorded(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    async def gone(*_: object) -> None:  # the database lost just as the outcome is recorded
        raise StoreUnavailable("could not record the export's manifest", hint="check the database")

    monkeypatch.setattr(export_requests_module, "finish_export", gone)
    await get_or_create_subject(engine, "gil")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ExportFailed, match="no archive was written"):
        await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", out / name, operator="dpo")
    assert list(out.iterdir()) == []
    async with engine.connect() as conn:
        assert (await conn.execute(select(export_requests.c.status, export_requests.c.detail))).all() == [
            ("failed", "the archive: StoreUnavailable")]
