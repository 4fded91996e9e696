"""An export killed outright as it finishes (SIGKILL, a crash, a power loss) never leaves a record saying the
request was answered without its archive in place: the archive is on disk (its files, then the folder that holds
it) and in place before the record says ``exported``; until then the record stays ``running``, under a lease its
export renews, so that once the lease has passed the next export closes it as abandoned and removes the temporary
archive it left (named by its export id); a live export's record is never closed. Real processes, killed at the
commit."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

import teamstore.export.archive as archive_module
import teamstore.export.partials as partials_module
import teamstore.export.requests as export_requests_module
from teamstore.audit.prices import load_prices
from teamstore.audit.subjects import get_or_create_subject
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.clock import database_now, utc
from teamstore.erasure.quiet import forget_quiet_users
from teamstore.errors import ExportFailed, ExportTargetExists, StoreUnavailable
from teamstore.export import ExportContext, ExportCoordinator, Section, store_exporters
from teamstore.export.archive import Writable
from teamstore.export.requests import (
    abandoned_detail,
    close_abandoned,
    export_status,
    get_export,
    new_export_id,
    open_export,
    renew,
)
from teamstore.export.schema import export_requests
from teamstore.keys import KeyService
from teamstore.settings import Settings
from tests.erasure.test_export import exporter, loaded, unpack

# Exports user gil from the migrated database argv[1] into argv[2], and dies (SIGKILL) at argv[3]: "open", as its
# record is written, "flush", the archive's first fsync (its bytes not yet on disk), or "record", as the export's
# outcome is recorded.
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

    async def die_async(*_, **__):
        die()

    if sys.argv[3] == "flush":
        archive.os.fsync = die
    elif sys.argv[3] == "open":
        requests.open_export = die_async
    else:
        requests.finish_export = die_async

    async def main():
        engine = create_engine(sys.argv[1])
        coordinator = ExportCoordinator(engine, LocalTranscriptStore(Path(sys.argv[2]).parent / "t"),
                                        store_exporters(), load_prices())
        await coordinator.run("gil", Path(sys.argv[2]), operator="dpo")

    asyncio.run(main())
""")


async def _killed_export(engine: AsyncEngine, database_url: str, target: Path, at: str) -> dict[str, object] | None:
    """Run the export in a process killed at ``at``; its record as the database keeps it (``None``: none)."""
    await get_or_create_subject(engine, "gil")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", _KILLED_EXPORT, database_url, str(target), at], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    async with engine.connect() as conn:
        rows = (await conn.execute(export_requests.select())).mappings().all()
    assert len(rows) <= 1
    return dict(rows[0]) if rows else None


async def test_an_export_killed_before_its_record_is_written_leaves_no_temporary_archive(
    engine: AsyncEngine, database_url: str, out: Path
) -> None:
    assert await _killed_export(engine, database_url, out / "gil.zip", "open") is None
    assert list(out.iterdir()) == []  # nothing no record names


@pytest.mark.parametrize("name", ["gil.zip", "gil"])
async def test_an_export_killed_before_its_archive_is_on_disk_stays_running_beside_its_temporary_archive(
    engine: AsyncEngine, database_url: str, out: Path, name: str
) -> None:
    record = await _killed_export(engine, database_url, out / name, "flush")
    assert record is not None and (record["status"], record["manifest"]) == ("running", None)
    left = sorted(p.name for p in out.iterdir())
    assert len(left) == 1 and left[0].startswith(f".{name}.") and left[0].endswith(".partial"), left


async def _lease_passed(engine: AsyncEngine, export_id: str) -> None:
    """As if the export's lease had run out since (it ended when the export began)."""
    async with engine.begin() as conn:
        await conn.execute(update(export_requests).where(export_requests.c.export_id == export_id)
                           .values(lease_until=export_requests.c.started_at))


@pytest.mark.parametrize("name", ["gil.zip", "gil"])
async def test_an_export_killed_outright_is_closed_as_abandoned_by_the_next_which_removes_its_temporary_archive(
    engine: AsyncEngine, database_url: str, tmp_path: Path, out: Path, name: str
) -> None:
    record = await _killed_export(engine, database_url, out / name, "flush")
    assert record is not None
    killed = str(record["export_id"])
    assert record["owner"] and record["lease_until"] is not None
    assert [p.name for p in out.iterdir()] == [f".{name}.{killed}.partial"]  # named by its export's id
    assert await close_abandoned(engine) == 0  # its lease has not passed: it could be alive (on another host)
    assert (await get_export(engine, killed) or {})["status"] == "running"
    others = [out / f".{name}.{new_export_id()}.partial", out / f".{name}.mine.partial", out / f".other.{killed}.partial"]
    for other in others:  # not this export's, or not teamstore's: never removed
        other.write_text("kept")
    await _lease_passed(engine, killed)

    done = await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", out / name, operator="dpo")

    assert done.path == out / name  # not kept from running by the record
    assert sorted(out.iterdir()) == sorted([out / name, *others])
    closed = await get_export(engine, killed) or {}
    assert closed["status"] == "failed" and str(closed["detail"]).startswith("abandoned: "), closed
    assert f".*.{killed}.partial beside the target" in str(closed["detail"])
    assert utc(closed["finished_at"]) == utc(closed["lease_until"])  # since when
    earlier = loaded(unpack(done.path), "exports.json")["earlier_exports"]
    assert [(row["export_id"], row["status"]) for row in earlier] == [(killed, "failed")]
    assert await close_abandoned(engine) == 0 and await get_export(engine, killed) == closed  # closed once


class _Waits:
    """An exporter that waits for its export's lease to be renewed, then has abandoned exports closed."""

    name = "waits"

    async def export(self, ctx: ExportContext, archive: Writable) -> Section:
        first = (await get_export(ctx.engine, ctx.export_id) or {})["lease_until"]
        for _ in range(600):
            await asyncio.sleep(0.05)
            if utc((await get_export(ctx.engine, ctx.export_id) or {})["lease_until"]) > utc(first):  # type: ignore[operator]
                break
        else:
            raise AssertionError("the export's lease was never renewed")
        assert await close_abandoned(ctx.engine) == 0
        return Section()


class _Stalls:
    """An exporter whose export's lease runs out as it reads (a process paused past it), and another export's
    clean-up closes its record meanwhile."""

    name = "stalls"

    async def export(self, ctx: ExportContext, archive: Writable) -> Section:
        await _lease_passed(ctx.engine, ctx.export_id)
        assert await close_abandoned(ctx.engine) == 1
        return Section()


async def test_a_running_export_renews_its_lease_so_its_record_is_never_closed_as_abandoned(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    await get_or_create_subject(engine, "gil")
    coordinator = ExportCoordinator(engine, LocalTranscriptStore(tmp_path / "t"), [*store_exporters(), _Waits()],
                                    load_prices(), lease_seconds=3)

    done = await coordinator.run("gil", tmp_path / "gil.zip", operator="dpo")

    assert (await get_export(engine, done.manifest.export_id) or {})["status"] == "exported"


async def test_an_export_whose_record_was_closed_as_abandoned_fails_and_leaves_no_archive(
    engine: AsyncEngine, tmp_path: Path, out: Path
) -> None:
    await get_or_create_subject(engine, "gil")
    coordinator = ExportCoordinator(engine, LocalTranscriptStore(tmp_path / "t"), [*store_exporters(), _Stalls()],
                                    load_prices())
    opened: list[str] = []
    coordinator.opened = opened.append

    with pytest.raises(ExportFailed, match="was recorded as abandoned while it ran"):
        await coordinator.run("gil", out / "gil.zip", operator="dpo")

    assert list(out.iterdir()) == []
    (record,) = [await get_export(engine, export_id) for export_id in opened]
    assert record is not None and record["status"] == "failed" and str(record["detail"]).startswith("abandoned: ")


async def test_a_record_is_closed_as_abandoned_only_once_its_lease_has_passed_and_then_renews_no_more(
    engine: AsyncEngine,
) -> None:
    export_id = new_export_id()
    await open_export(engine, export_id, None, user_id="gil", requested_by=None, operator="dpo", owner="host:1:a")
    assert await renew(engine, export_id, "host:1:a") and not await renew(engine, export_id, "host:2:b")
    assert await close_abandoned(engine) == 0
    await _lease_passed(engine, export_id)
    assert await close_abandoned(engine) == 1
    assert not await renew(engine, export_id, "host:1:a")
    with pytest.raises(ExportFailed, match="recorded as abandoned"):
        await export_requests_module.finish_export(engine, export_id, "exported", {}, owner="host:1:a")
    await export_requests_module.fail_export(engine, export_id, "stopped as it began")  # keeps what it says
    assert str((await get_export(engine, export_id) or {})["detail"]).startswith("abandoned: ")


@pytest.mark.parametrize("name", ["gil.zip", "gil"])
async def test_an_export_killed_as_it_records_its_outcome_has_its_whole_archive_in_place(
    engine: AsyncEngine, database_url: str, out: Path, name: str
) -> None:
    record = await _killed_export(engine, database_url, out / name, "record")
    assert record is not None and record["status"] == "running"
    assert sorted(p.name for p in out.iterdir()) == [name]  # no temporary archive beside it
    files = unpack(out / name)
    manifest = loaded(files, "manifest.json")
    assert set(files) == {*manifest["files"], "manifest.json"}
    if name.endswith(".zip"):
        with zipfile.ZipFile(out / name) as archive:
            assert archive.testzip() is None


async def test_every_file_and_folder_of_an_archive_is_on_disk_before_its_export_is_recorded(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushed: list[Path] = []
    fsync = os.fsync

    def noted(fd: int) -> None:
        flushed.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    monkeypatch.setattr(archive_module.os, "fsync", noted)
    await get_or_create_subject(engine, "gil")
    done = await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", out / "gil", operator="dpo")
    assert done.path == out / "gil" and (await get_export(engine, done.manifest.export_id) or {})["status"] == "exported"
    (partial,) = {p for p in flushed if p.parent == out and p.name.endswith(".partial")}
    inside = {p.relative_to(partial).as_posix() for p in flushed if p.is_relative_to(partial)}
    assert {*done.manifest.files, "manifest.json", "."} <= inside, flushed  # its files, then the folder itself
    assert flushed[-1] == out  # the folder holding the archive, after the rename


@pytest.mark.parametrize("name", ["gil.zip", "gil"])
async def test_an_archive_in_place_is_removed_when_its_export_cannot_be_recorded(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    async def gone(*_: object, **__: object) -> None:  # the database lost just as the outcome is recorded
        raise StoreUnavailable("could not record the export's manifest", hint="check the database")

    monkeypatch.setattr(export_requests_module, "finish_export", gone)
    await get_or_create_subject(engine, "gil")
    with pytest.raises(ExportFailed, match="no archive was written"):
        await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", out / name, operator="dpo")
    assert list(out.iterdir()) == []
    async with engine.connect() as conn:
        assert (await conn.execute(select(export_requests.c.status, export_requests.c.detail))).all() == [
            ("failed", "the archive: StoreUnavailable")]


async def _closed_as_abandoned(engine: AsyncEngine) -> str:
    """The id of an export recorded, then closed as abandoned (killed outright, its lease passed)."""
    export_id = new_export_id()
    await open_export(engine, export_id, None, user_id="gil", requested_by=None, operator="dpo", owner="host:1:a")
    await _lease_passed(engine, export_id)
    assert await close_abandoned(engine) == 1
    return export_id


async def test_a_killed_exports_temporary_archive_is_removed_even_once_its_target_was_taken_since(
    engine: AsyncEngine, tmp_path: Path, out: Path
) -> None:
    """Run again at once (the killed one's lease still holding), the export placed its archive at the target; the
    next export to that target is refused, but still removes what the killed one left beside it."""
    killed = await _closed_as_abandoned(engine)
    partial = partials_module.partial_path(out / "gil.zip", killed)
    partial.write_text("part of gil's data")
    (out / "gil.zip").write_text("the archive of the export run again")

    with pytest.raises(ExportTargetExists):
        await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", out / "gil.zip", operator="dpo")

    assert [p.name for p in out.iterdir()] == ["gil.zip"]


async def test_a_temporary_archive_whose_export_still_runs_is_left_and_the_export_says_so(
    engine: AsyncEngine, tmp_path: Path, out: Path
) -> None:
    await get_or_create_subject(engine, "gil")
    running = new_export_id()
    await open_export(engine, running, None, user_id="gil", requested_by=None, operator="dpo", owner="host:1:a")
    partial = partials_module.partial_path(out / "gil.zip", running)
    partial.write_text("part of gil's data")

    done = await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", out / "gil.zip", operator="dpo")

    assert done.path == out / "gil.zip" and partial.exists()
    (warning,) = done.warnings
    assert f".*.{running}.partial beside the target" in warning and f"export status {running}" in warning
    assert str(out) not in warning and "gil" not in warning


async def test_a_target_name_as_long_as_the_filesystem_takes_is_exported_to_and_cleaned_up_beside(
    engine: AsyncEngine, tmp_path: Path, out: Path
) -> None:
    """The temporary name is the target's with the export's id: cut short where the whole would be too long."""
    await get_or_create_subject(engine, "gil")
    killed = await _closed_as_abandoned(engine)
    longest = out / ("é" * 125 + "a.zip")  # 255 bytes, of characters of two
    partial = partials_module.partial_path(longest, killed)
    assert len(os.fsencode(partial.name)) <= 255 and partial.name.endswith(f".{killed}.partial")
    partial.write_text("part of gil's data")

    for target in (out / ("a" * 225 + ".zip"), out / ("b" * 255), longest):
        done = await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", target, operator="dpo")
        assert done.path == target and done.matched

    assert sorted(out.iterdir()) == sorted([out / ("a" * 225 + ".zip"), out / ("b" * 255), longest])


async def test_an_export_whose_outcome_was_recorded_but_not_acknowledged_is_recorded_failed_as_its_archive_goes(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit landed, the answer did not (the connection dropped after COMMIT, the task cancelled then): the
    archive is removed on the way out, so the record must not say `exported`."""
    finish = export_requests_module.finish_export
    lost: list[BaseException] = [StoreUnavailable("could not record the export's manifest", hint="check it"),
                                 asyncio.CancelledError()]

    async def unacknowledged(*args: Any, **kwargs: Any) -> None:
        await finish(*args, **kwargs)
        raise lost.pop(0)

    monkeypatch.setattr(export_requests_module, "finish_export", unacknowledged)
    await get_or_create_subject(engine, "gil")
    coordinator = exporter(engine, LocalTranscriptStore(tmp_path / "t"))
    opened: list[str] = []
    coordinator.opened = opened.append
    with pytest.raises(ExportFailed, match="no archive was written"):
        await coordinator.run("gil", out / "gil.zip", operator="dpo")
    with pytest.raises(asyncio.CancelledError):
        await coordinator.run("gil", out / "gil", operator="dpo")

    assert list(out.iterdir()) == []
    failed, stopped = [await get_export(engine, export_id) or {} for export_id in opened]
    assert (failed["status"], failed["detail"]) == ("failed", "the archive: StoreUnavailable")
    assert stopped["status"] == "failed" and str(stopped["detail"]).startswith("stopped as its outcome was recorded")


async def test_an_export_whose_runner_cannot_be_told_its_id_is_recorded_failed_and_leaves_nothing(
    engine: AsyncEngine, tmp_path: Path, out: Path
) -> None:
    await get_or_create_subject(engine, "gil")
    coordinator = exporter(engine, LocalTranscriptStore(tmp_path / "t"))

    def unwritable(export_id: str) -> None:
        raise OSError(28, "No space left on device")

    coordinator.opened = unwritable
    with pytest.raises(OSError, match="No space left"):
        await coordinator.run("gil", out / "gil.zip", operator="dpo")

    assert list(out.iterdir()) == []
    async with engine.connect() as conn:
        assert (await conn.execute(select(export_requests.c.status, export_requests.c.detail))).all() == [
            ("failed", "as it began: OSError")]


class _StallsAndLosesItsArchive:
    """An exporter whose export stalls past its lease: another export closes its record and removes its
    temporary archive (named by its id) meanwhile."""

    name = "stalls"

    async def export(self, ctx: ExportContext, archive: Writable) -> Section:
        await _Stalls().export(ctx, archive)
        assert partials_module.remove_partial(archive.target, ctx.export_id)
        return Section()


async def test_an_export_whose_archive_went_with_its_abandoned_record_says_it_was_closed_as_abandoned(
    engine: AsyncEngine, tmp_path: Path, out: Path
) -> None:
    await get_or_create_subject(engine, "gil")
    coordinator = ExportCoordinator(engine, LocalTranscriptStore(tmp_path / "t"),
                                    [_StallsAndLosesItsArchive(), *store_exporters()], load_prices())

    with pytest.raises(ExportFailed, match="was recorded as abandoned while it ran"):
        await coordinator.run("gil", out / "gil", operator="dpo")

    assert list(out.iterdir()) == []


async def test_a_record_with_no_lease_is_abandoned_a_day_after_it_began(engine: AsyncEngine) -> None:
    """As an earlier release's export still running through an upgrade writes it."""
    old, recent = new_export_id(), new_export_id()
    for export_id, began in ((old, datetime.now(UTC) - timedelta(days=2)), (recent, datetime.now(UTC))):
        await open_export(engine, export_id, None, user_id="gil", requested_by=None, operator="dpo", owner="h:1:a")
        async with engine.begin() as conn:
            await conn.execute(update(export_requests).where(export_requests.c.export_id == export_id)
                               .values(lease_until=None, owner=None, started_at=began))

    shown = await export_status(engine, old)
    assert shown["status"] == "abandoned" and shown["finished_at"] == utc(shown["started_at"]) + timedelta(days=1)
    assert (await export_status(engine, recent))["status"] == "running"
    assert await close_abandoned(engine) == 1
    closed = await get_export(engine, old) or {}
    assert closed["status"] == "failed" and utc(closed["finished_at"]) == shown["finished_at"]
    assert (await get_export(engine, recent) or {})["status"] == "running"


async def test_an_export_stops_at_its_next_store_once_a_renewal_finds_its_record_closed_as_abandoned(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused: list[str] = []
    renew_as_it_is = export_requests_module.renew

    async def noted(*args: Any, **kwargs: Any) -> bool:
        renewed = await renew_as_it_is(*args, **kwargs)
        refused.extend([] if renewed else [args[1]])
        return renewed

    class StallsUntilItsRenewalIsRefused:
        name = "stalls"

        async def export(self, ctx: ExportContext, archive: Writable) -> Section:
            await _Stalls().export(ctx, archive)
            for _ in range(600):
                if refused:
                    return Section()
                await asyncio.sleep(0.05)
            raise AssertionError("no renewal was refused")

    class Next:
        name = "next"
        reached = False

        async def export(self, ctx: ExportContext, archive: Writable) -> Section:
            Next.reached = True
            return Section()

    monkeypatch.setattr(export_requests_module, "renew", noted)
    await get_or_create_subject(engine, "gil")
    coordinator = ExportCoordinator(engine, LocalTranscriptStore(tmp_path / "t"),
                                    [StallsUntilItsRenewalIsRefused(), Next()], load_prices(), lease_seconds=0.3)

    with pytest.raises(ExportFailed, match="was recorded as abandoned while it ran"):
        await coordinator.run("gil", tmp_path / "gil.zip", operator="dpo")

    assert not Next.reached and list(tmp_path.glob("*gil.zip*")) == []


async def _forget_gil(engine: AsyncEngine, tmp_path: Path) -> int:
    """The retention sweep's forgetting of quiet users, past the hour a new subject is spared; how many it forgot."""
    keys = KeyService.from_settings(engine, Settings(key_cache_seconds=0))
    later = await database_now(engine) + timedelta(days=1)
    return (await forget_quiet_users(engine, LocalTranscriptStore(tmp_path / "t"), keys, grace_seconds=0,
                                     now=later)).forgotten


async def test_a_long_export_whose_lease_holds_keeps_its_user_from_the_retention_sweep_however_long_ago_it_began(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # The sweep took a record still `running` a day after it began for a killed export, and forgot its user under
    # an export that still renewed its lease (one of a user with years of transcripts, say).
    subject_key = await get_or_create_subject(engine, "gil")
    export_id = new_export_id()
    await open_export(engine, export_id, subject_key, user_id="gil", requested_by=None, operator="dpo",
                      owner="host:1:a")
    async with engine.begin() as conn:
        await conn.execute(update(export_requests).values(started_at=datetime.now(UTC) - timedelta(days=2)))

    assert await _forget_gil(engine, tmp_path) == 0
    assert await get_or_create_subject(engine, "gil") == subject_key
    assert (await get_export(engine, export_id) or {})["status"] == "running"


async def test_an_export_whose_lease_has_passed_keeps_no_user_from_the_retention_sweep_which_closes_it_as_abandoned(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    # The sweep took such a record for an export under way until a day after it began.
    export_id = new_export_id()
    await open_export(engine, export_id, await get_or_create_subject(engine, "gil"), user_id="gil",
                      requested_by=None, operator="dpo", owner="host:1:a")
    await _lease_passed(engine, export_id)

    assert await _forget_gil(engine, tmp_path) == 1
    closed = await get_export(engine, export_id) or {}
    assert (closed["status"], closed["subject_key"]) == ("failed", None)  # closed, and unlinked with its user
    assert str(closed["detail"]) == abandoned_detail(export_id)
    assert utc(closed["finished_at"]) == utc(closed["lease_until"])


async def test_exports_json_lists_each_earlier_export_with_why_it_ended_as_export_status_says_it(
    engine: AsyncEngine, tmp_path: Path, out: Path
) -> None:
    # It listed when, who and the status only: an abandoned export's archive left beside a target went unsaid.
    subject_key = await get_or_create_subject(engine, "gil")
    killed, failed = new_export_id(), new_export_id()
    for export_id in (killed, failed):
        await open_export(engine, export_id, subject_key, user_id="gil", requested_by="ticket 7", operator="dpo",
                          owner="host:1:a")
    await _lease_passed(engine, killed)
    await export_requests_module.fail_export(engine, failed, "memory: OSError", owner="host:1:a")

    done = await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", out / "gil.zip", operator="dpo")

    earlier = loaded(unpack(done.path), "exports.json")["earlier_exports"]
    details = {row["export_id"]: (row["status"], row["detail"]) for row in earlier}
    assert details == {killed: ("failed", abandoned_detail(killed)), failed: ("failed", "memory: OSError")}
    assert details[killed][1] == (await export_status(engine, killed))["detail"]


async def test_a_detail_an_earlier_release_wrote_with_the_errors_message_is_shown_without_it(
    engine: AsyncEngine, tmp_path: Path, out: Path
) -> None:
    # Records failed before details were fixed text hold the error's message, which names the archive's path.
    subject_key = await get_or_create_subject(engine, "gil")
    old = new_export_id()
    await open_export(engine, old, subject_key, user_id="gil", requested_by=None, operator="dpo", owner="host:1:a")
    await export_requests_module.fail_export(
        engine, old, "the archive: ExportTargetExists: /srv/dpo/requests/gil-ticket7.zip exists; pick: another",
        owner="host:1:a")

    done = await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", out / "gil.zip", operator="dpo")

    (earlier,) = loaded(unpack(done.path), "exports.json")["earlier_exports"]
    assert earlier["detail"] == "the archive: ExportTargetExists"
    assert (await export_status(engine, old))["detail"] == "the archive: ExportTargetExists"

