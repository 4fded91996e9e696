"""What an export leaves or finds beside its target: temporary archives of exports now over are removed whatever
ended them, only the same target's (long names cut alike are told apart), a running one's is warned of at once
whatever the export's outcome; targets with no name, looping symlinks and folders taking short names are refused
typed; an archive whose outcome may be recorded is kept, also when a stop comes as it is recorded; and the command
line's output failing fails nothing silently."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

import teamstore.export.archive as archive_module
import teamstore.export.partials as partials_module
import teamstore.export.requests as export_requests_module
from teamstore.audit.prices import load_prices
from teamstore.audit.subjects import get_or_create_subject
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.db.engine import create_engine
from teamstore.errors import ExportFailed, ExportOutcomeUnknown, ExportTargetExists, StoreUnavailable
from teamstore.export import ExportContext, ExportCoordinator, Section, store_exporters
from teamstore.export.archive import Writable, open_archive
from teamstore.export.requests import fail_export, get_export, new_export_id, open_export
from teamstore.export.schema import export_requests
from teamstore.settings import Settings
from tests.erasure.test_desk_cli import _populate
from tests.erasure.test_export import exporter, loaded, unpack


async def _running(engine: AsyncEngine) -> str:
    """The id of an export recorded ``running`` under a live lease (another process's)."""
    export_id = new_export_id()
    await open_export(engine, export_id, None, user_id="gil", requested_by=None, operator="dpo", owner="host:1:a")
    return export_id


async def test_a_target_with_no_name_is_refused_as_taken_before_anything_is_cleaned_up(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for target in (Path("."), Path("./"), Path("/")):
        with pytest.raises(ExportTargetExists, match="exists: an export never overwrites"):
            await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", target, operator="dpo")


async def test_a_running_exports_temporary_archive_is_warned_of_at_once_even_when_the_export_is_refused(
    engine: AsyncEngine, tmp_path: Path, out: Path
) -> None:
    running = await _running(engine)
    partials_module.partial_path(out / "gil.zip", running).write_text("part of gil's data")
    (out / "gil.zip").write_text("taken")
    coordinator = exporter(engine, LocalTranscriptStore(tmp_path / "t"))
    warned: list[str] = []
    coordinator.warned = warned.append

    with pytest.raises(ExportTargetExists):
        await coordinator.run("gil", out / "gil.zip", operator="dpo")

    (warning,) = warned
    assert f".*.{running}.partial beside the target" in warning


async def test_the_temporary_archive_of_an_export_that_recorded_its_failure_is_removed_by_the_next(
    engine: AsyncEngine, tmp_path: Path, out: Path
) -> None:
    """Killed as it removed its own, after recording that it failed (or was stopped): its record is over."""
    await get_or_create_subject(engine, "gil")
    failed, running = await _running(engine), await _running(engine)
    assert await fail_export(engine, failed, "transcripts: TranscriptUnavailable", owner="host:1:a")
    for export_id in (failed, running):
        partials_module.partial_path(out / "gil.zip", export_id).write_text("part of gil's data")

    done = await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", out / "gil.zip", operator="dpo")

    assert sorted(p.name for p in out.iterdir()) == sorted(["gil.zip", f".gil.zip.{running}.partial"])
    assert [w for w in done.warnings if running in w]  # the running one's is left, and said


async def test_long_targets_cut_alike_keep_their_own_temporary_archives(engine: AsyncEngine, tmp_path: Path, out: Path) -> None:
    await get_or_create_subject(engine, "gil")
    one, other = out / ("x" * 240 + "A.zip"), out / ("x" * 240 + "B.zip")
    mine, theirs = await _running(engine), await _running(engine)
    assert await fail_export(engine, mine, "transcripts: TranscriptUnavailable", owner="host:1:a")
    assert await fail_export(engine, theirs, "transcripts: TranscriptUnavailable", owner="host:1:a")
    kept = partials_module.partial_path(other, theirs)
    gone = partials_module.partial_path(one, mine)
    assert kept.name[:-len(f".{theirs}.partial")] != gone.name[:-len(f".{mine}.partial")]
    for partial in (kept, gone):
        assert len(os.fsencode(partial.name)) <= 255
        partial.write_text("part of gil's data")

    done = await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", one, operator="dpo")

    assert done.path == one and done.warnings == []
    assert sorted(out.iterdir()) == sorted([one, kept])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("limit", [0, 5, 40])
def test_a_folder_whose_names_leave_no_room_for_the_temporary_name_is_refused_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    monkeypatch.setattr(partials_module.os, "pathconf", lambda *_: limit)
    with pytest.raises(ExportFailed, match=f"takes names of at most {limit} bytes"):
        partials_module.partial_path(tmp_path / "gil.zip", new_export_id())


def test_a_folder_reporting_no_name_limit_gets_the_temporary_name_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(partials_module.os, "pathconf", lambda *_: -1)
    tag = new_export_id()
    assert partials_module.partial_path(tmp_path / "gil.zip", tag) == tmp_path / f".gil.zip.{tag}.partial"


async def test_a_target_behind_a_looping_symlink_is_refused_typed(engine: AsyncEngine, tmp_path: Path) -> None:
    (tmp_path / "loopy").symlink_to(tmp_path / "loopy")
    with pytest.raises(ExportFailed, match="a symlink on its path leads back to itself"):
        await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", tmp_path / "loopy" / "x.zip",
                                                                         operator="dpo")


@pytest.mark.parametrize("name", ["gil.zip", "gil"])
async def test_an_archive_whose_outcome_may_be_recorded_is_kept_when_its_failure_cannot_be_recorded(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The outcome committed, its answer lost, and the database gone before the failure is recorded: the record
    says `exported`, so the archive it names must stay."""
    finish = export_requests_module.finish_export

    async def unacknowledged(*args: Any, **kwargs: Any) -> None:
        await finish(*args, **kwargs)
        raise StoreUnavailable("could not record the export's manifest: connection lost", hint="check it")

    async def gone(*_: Any, **__: Any) -> bool:
        raise StoreUnavailable("could not record the export's failure: connection refused", hint="check it")

    monkeypatch.setattr(export_requests_module, "finish_export", unacknowledged)
    monkeypatch.setattr(export_requests_module, "fail_export", gone)
    await get_or_create_subject(engine, "gil")
    coordinator = exporter(engine, LocalTranscriptStore(tmp_path / "t"))
    opened: list[str] = []
    coordinator.opened = opened.append

    with pytest.raises(ExportOutcomeUnknown, match=f"placed its archive at {out / name}") as raised:
        await coordinator.run("gil", out / name, operator="dpo")

    assert f"teamstore export status {opened[0]}" in str(raised.value.hint)
    assert [p.name for p in out.iterdir()] == [name] and "manifest.json" in unpack(out / name)
    assert (await get_export(engine, opened[0]) or {})["status"] == "exported"
    async with engine.connect() as conn:
        assert (await conn.execute(select(export_requests.c.status))).scalars().all() == ["exported"]


def _stopped_as_recorded(monkeypatch: pytest.MonkeyPatch, stop: type[BaseException], *, answering: bool) -> None:
    """A stop comes as the export's outcome is recorded, once the commit has landed; then the database answers
    as its failure is recorded, or does not (``answering`` False)."""
    finish = export_requests_module.finish_export

    async def stopped(*args: Any, **kwargs: Any) -> None:
        await finish(*args, **kwargs)
        if stop is KeyboardInterrupt:  # a program's own handler raising it where the export stands
            raise KeyboardInterrupt
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # the export's task cancelled (as asyncio.run does on Ctrl-C), delivered at the next await
        await asyncio.sleep(0)

    monkeypatch.setattr(export_requests_module, "finish_export", stopped)
    if not answering:
        _failure_unrecorded(monkeypatch)


def _failure_unrecorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The database does not answer as the export's failure is recorded."""
    async def gone(*_: Any, **__: Any) -> bool:
        raise StoreUnavailable("could not record the export's failure: connection refused", hint="check it")

    monkeypatch.setattr(export_requests_module, "fail_export", gone)


async def _watched(engine: AsyncEngine, tmp_path: Path) -> tuple[ExportCoordinator, list[str], list[tuple[str, Path]]]:
    """An exporter of gil's data (a subject made for gil), and the lists it tells the export's id and what it kept."""
    await get_or_create_subject(engine, "gil")
    coordinator = exporter(engine, LocalTranscriptStore(tmp_path / "t"))
    opened: list[str] = []
    kept: list[tuple[str, Path]] = []
    coordinator.opened = opened.append
    coordinator.kept = lambda export_id, path: kept.append((export_id, path))
    return coordinator, opened, kept


async def _run_stopped(coordinator: ExportCoordinator, stop: type[BaseException], target: Path) -> None:
    """Run the export of gil to ``target`` and see the stop raised as it is: the task cancelled, or
    KeyboardInterrupt."""
    if stop is KeyboardInterrupt:
        with pytest.raises(KeyboardInterrupt):
            await coordinator.run("gil", target, operator="dpo")
        return
    task = asyncio.create_task(coordinator.run("gil", target, operator="dpo"))
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


@pytest.mark.parametrize(("stop", "name"), [(asyncio.CancelledError, "gil.zip"), (KeyboardInterrupt, "gil")])
async def test_an_archive_whose_outcome_may_be_recorded_is_kept_when_a_stop_comes_and_its_failure_cannot_be_recorded(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    stop: type[BaseException], name: str
) -> None:
    """Ctrl-C as the outcome is recorded (it committed), and the database gone as the failure is: the record says
    `exported`, so the archive it names must stay, the stop go on, and the log say so without naming the user."""
    caplog.set_level(logging.DEBUG)
    _stopped_as_recorded(monkeypatch, stop, answering=False)
    coordinator, opened, kept = await _watched(engine, tmp_path)

    await _run_stopped(coordinator, stop, out / name)

    (export_id,) = opened
    assert kept == [(export_id, out / name)]
    assert [p.name for p in out.iterdir()] == [name]
    files = unpack(out / name)
    assert set(files) == {*loaded(files, "manifest.json")["files"], "manifest.json"}
    assert (await get_export(engine, export_id) or {})["status"] == "exported"
    said = [r.getMessage() for r in caplog.records if r.name == "teamstore.export.coordinator"
            and r.levelno == logging.WARNING and "kept" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"export {export_id}: stopped as its outcome was recorded"), said
    assert "may say `exported`" in said[0] and f"`teamstore export status {export_id}`" in said[0]
    logged = " ".join(f"{r.getMessage()} {r.args!r}" for r in caplog.records)
    assert "gil" not in logged and str(out) not in logged  # the user id, and the path given (it names the user)


async def test_a_stop_that_keeps_the_archive_goes_on_when_its_runner_cannot_be_told_where_it_is(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _stopped_as_recorded(monkeypatch, asyncio.CancelledError, answering=False)
    await get_or_create_subject(engine, "gil")
    coordinator = exporter(engine, LocalTranscriptStore(tmp_path / "t"))

    def unwritable(export_id: str, path: Path) -> None:
        raise OSError(28, f"No space left on device writing {path}")

    coordinator.kept = unwritable
    await _run_stopped(coordinator, asyncio.CancelledError, out / "gil.zip")

    assert [p.name for p in out.iterdir()] == ["gil.zip"]
    assert any(r.getMessage().endswith("could not say where its kept archive is: OSError") for r in caplog.records)


@pytest.mark.parametrize("stop", [asyncio.CancelledError, KeyboardInterrupt])
async def test_an_archive_in_place_is_removed_when_a_stop_comes_as_its_outcome_is_recorded_and_its_failure_is(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    stop: type[BaseException]
) -> None:
    _stopped_as_recorded(monkeypatch, stop, answering=True)
    coordinator, opened, kept = await _watched(engine, tmp_path)

    await _run_stopped(coordinator, stop, out / "gil.zip")

    assert list(out.iterdir()) == [] and kept == []
    record = await get_export(engine, opened[0]) or {}
    assert record["status"] == "failed"
    assert str(record["detail"]).startswith("stopped as its outcome was recorded") and "its archive was removed" in str(
        record["detail"])
    assert not [r for r in caplog.records if "kept" in r.getMessage()]


def _hanging_failure(monkeypatch: pytest.MonkeyPatch, entered: asyncio.Event, *, lands: bool = False) -> None:
    """The database does not answer as the export's failure is recorded (``entered`` set once asked), as one that
    accepts connections and never answers; or (``lands``) it records the failure and the answer is lost."""
    fail = export_requests_module.fail_export

    async def hangs(*args: Any, **kwargs: Any) -> bool:
        entered.set()
        if lands:
            await fail(*args, **kwargs)
            raise StoreUnavailable("could not record the export's failure: connection reset", hint="check it")
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    monkeypatch.setattr(export_requests_module, "fail_export", hangs)


async def _kept_after(engine: AsyncEngine, tmp_path: Path, out: Path, entered: asyncio.Event
                      ) -> tuple[str, list[tuple[str, Path]]]:
    """Run the export of gil to ``out / gil.zip`` and cancel it once its failure is being recorded; its id and
    what :attr:`ExportCoordinator.kept` was told."""
    coordinator, opened, kept = await _watched(engine, tmp_path)
    task = asyncio.create_task(coordinator.run("gil", out / "gil.zip", operator="dpo"))
    await asyncio.wait_for(entered.wait(), 60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return opened[0], kept


async def test_an_archive_is_kept_when_a_stop_comes_as_the_failure_of_an_unanswered_outcome_is_recorded(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reviewed: the outcome committed and its answer lost, the failure's recording hung (a database that accepts
    connections and never answers), and one Ctrl-C then removed the archive its record calls `exported`."""
    finish = export_requests_module.finish_export

    async def unanswered(*args: Any, **kwargs: Any) -> None:
        await finish(*args, **kwargs)
        raise StoreUnavailable("could not record the export's manifest: connection reset", hint="check it")

    monkeypatch.setattr(export_requests_module, "finish_export", unanswered)
    entered = asyncio.Event()
    _hanging_failure(monkeypatch, entered)

    export_id, kept = await _kept_after(engine, tmp_path, out, entered)

    assert kept == [(export_id, out / "gil.zip")] and [p.name for p in out.iterdir()] == ["gil.zip"]
    assert (await get_export(engine, export_id) or {})["status"] == "exported"
    assert "manifest.json" in unpack(out / "gil.zip")


async def test_an_archive_is_kept_when_a_second_stop_comes_as_the_first_ones_failure_is_recorded(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reviewed: Ctrl-C as the outcome was recorded, the database hanging as its failure was, and the operator's
    second Ctrl-C removed the archive its record calls `exported`."""
    _stopped_as_recorded(monkeypatch, asyncio.CancelledError, answering=True)
    entered = asyncio.Event()
    _hanging_failure(monkeypatch, entered)

    export_id, kept = await _kept_after(engine, tmp_path, out, entered)

    assert kept == [(export_id, out / "gil.zip")] and [p.name for p in out.iterdir()] == ["gil.zip"]
    assert (await get_export(engine, export_id) or {})["status"] == "exported"


async def test_a_stopped_exports_recorded_failure_whose_answer_is_lost_does_not_say_no_archive_was_left(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reviewed: the failure's record landed with its answer lost, so the archive was kept, while the record said
    "no archive was left"."""
    _stopped_as_recorded(monkeypatch, asyncio.CancelledError, answering=True)
    _hanging_failure(monkeypatch, asyncio.Event(), lands=True)
    await get_or_create_subject(engine, "gil")
    coordinator = exporter(engine, LocalTranscriptStore(tmp_path / "t"))
    opened: list[str] = []
    coordinator.opened = opened.append

    await _run_stopped(coordinator, asyncio.CancelledError, out / "gil.zip")

    assert [p.name for p in out.iterdir()] == ["gil.zip"]
    detail = str((await get_export(engine, opened[0]) or {})["detail"])
    assert "no archive was left" not in detail and "said where it kept the archive: delete that archive" in detail


class _Stops:
    """An exporter stopped midway (Ctrl-C raised where it stands), before the archive is in place."""

    name = "stops"

    async def export(self, ctx: ExportContext, archive: Writable) -> Section:
        archive.add("part.json", b"{}")
        raise KeyboardInterrupt


async def test_an_archive_not_yet_in_place_is_removed_on_a_stop_even_when_its_failure_cannot_be_recorded(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _failure_unrecorded(monkeypatch)
    await get_or_create_subject(engine, "gil")
    coordinator = ExportCoordinator(engine, LocalTranscriptStore(tmp_path / "t"), [*store_exporters(), _Stops()],
                                    load_prices())
    kept: list[tuple[str, Path]] = []
    coordinator.kept = lambda export_id, path: kept.append((export_id, path))

    with pytest.raises(KeyboardInterrupt):
        await coordinator.run("gil", out / "gil", operator="dpo")

    assert list(out.iterdir()) == [] and kept == []
    async with engine.connect() as conn:
        assert (await conn.execute(select(export_requests.c.status))).scalars().all() == ["running"]


def _ctrl_c_as_in_a_terminal() -> None:
    """SIGINT as a terminal's process has it, not inherited from how pytest was started (a shell starts a
    background job, CI's too, with it ignored, and the command would never see the Ctrl-C a test sends)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# The command `teamstore export --user lia -o lia.zip` in a process that gets SIGINT as the export's outcome is
# recorded (once it committed), with the database not answering as the failure is recorded.
_STOPPED_COMMAND = textwrap.dedent("""
    import asyncio, os, signal, sys
    import teamstore.export.requests as requests
    from teamstore.errors import StoreUnavailable

    finish = requests.finish_export

    async def stopped(*args, **kwargs):
        await finish(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(60)

    async def gone(*_, **__):
        raise StoreUnavailable("could not record the export's failure: connection refused", hint="check it")

    requests.finish_export, requests.fail_export = stopped, gone
    sys.argv = ["teamstore", "export", "--user", "lia", "-o", "lia.zip"]
    from teamstore.cli import main
    main()
""")


def _kept_by_the_stopped_command(tmp_path: Path, command: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``command`` (a `teamstore export` of lia to lia.zip that Ctrl-C stops) and see it exit as stopped,
    saying where the archive it keeps is, the archive whole there."""
    _populate("lia")
    env = {**os.environ, "COLUMNS": "300", "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", command], capture_output=True, env=env, timeout=120,
                          preexec_fn=_ctrl_c_as_in_a_terminal, check=False, cwd=tmp_path)
    said = done.stderr.decode()
    assert done.returncode == 130, said
    assert "its archive is kept at lia.zip" in said and "nothing usable was written" not in said, said
    assert "no archive was left" not in said and "manifest.json" in unpack(tmp_path / "lia.zip")
    return done


def test_the_command_stopped_a_third_time_as_its_stop_is_handled_still_says_where_the_archive_it_keeps_is(
    tmp_path: Path
) -> None:
    """Reviewed: a third Ctrl-C, as the second one's cancellation was still closing a hung connection, left the
    command before the export said what it keeps, and the command said nothing usable was written."""
    command = _STOPPED_COMMAND.replace(
        "async def gone(*_, **__):\n    raise",
        "async def gone(*_, **__):\n"
        "    loop = asyncio.get_running_loop()\n"
        "    loop.call_later(0.5, os.kill, os.getpid(), signal.SIGINT)\n"
        "    loop.call_later(1.5, os.kill, os.getpid(), signal.SIGINT)\n"
        "    try:\n"
        "        await asyncio.sleep(60)\n"
        "    except asyncio.CancelledError:\n"
        "        await asyncio.sleep(5)  # a driver closing its connection as it is cancelled\n"
        "        raise\n"
        "    raise")
    assert command.count("call_later") == 2
    _kept_by_the_stopped_command(tmp_path, command)


async def test_an_untyped_fault_as_the_outcome_is_recorded_with_its_failure_unrecorded_keeps_the_archive_named(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reviewed: it was kept in silence, the caller given the fault alone, and the log said it was stopped."""
    finish = export_requests_module.finish_export

    async def breaks(*args: Any, **kwargs: Any) -> None:
        await finish(*args, **kwargs)
        raise RuntimeError("gil's row said something")

    monkeypatch.setattr(export_requests_module, "finish_export", breaks)
    _failure_unrecorded(monkeypatch)
    coordinator, opened, kept = await _watched(engine, tmp_path)

    with pytest.raises(ExportOutcomeUnknown) as caught:
        await coordinator.run("gil", out / "gil.zip", operator="dpo")

    assert f"at {out / 'gil.zip'}" in caught.value.message and "recording its outcome failed (RuntimeError)" in (
        caught.value.message)
    assert (caught.value.export_id, caught.value.target) == (opened[0], out / "gil.zip")
    assert "said something" not in caught.value.message and kept == []
    assert [p.name for p in out.iterdir()] == ["gil.zip"] and coordinator.kept_if_ended_now() == []


async def test_a_second_stop_as_a_placed_folder_archive_is_removed_leaves_none_of_it(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reviewed: a second Ctrl-C landing in the removal of a placed folder archive (its failure recorded) left part
    of the user's data at the target, which the command said was removed, and the next export there refused."""
    _stopped_as_recorded(monkeypatch, asyncio.CancelledError, answering=True)
    removing = archive_module.shutil.rmtree
    interrupted: list[Path] = []

    def interrupted_once(path: Any, *args: Any, **kwargs: Any) -> None:
        if Path(path) == out / "gil" and not interrupted:
            interrupted.append(Path(path))
            next(p for p in Path(path).rglob("*") if p.is_file()).unlink()  # part of it gone, then the stop
            raise KeyboardInterrupt
        removing(path, *args, **kwargs)

    monkeypatch.setattr(archive_module.shutil, "rmtree", interrupted_once)
    coordinator, _, _ = await _watched(engine, tmp_path)

    with pytest.raises(KeyboardInterrupt):
        await coordinator.run("gil", out / "gil", operator="dpo")

    assert interrupted == [out / "gil"] and list(out.iterdir()) == []


async def test_what_an_export_keeps_if_it_ends_now_is_its_placed_archive_until_its_failure_is_recorded(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stopped_as_recorded(monkeypatch, asyncio.CancelledError, answering=True)
    entered = asyncio.Event()
    _hanging_failure(monkeypatch, entered)
    coordinator, opened, _ = await _watched(engine, tmp_path)
    assert coordinator.kept_if_ended_now() == []
    task = asyncio.create_task(coordinator.run("gil", out / "gil.zip", operator="dpo"))
    await asyncio.wait_for(entered.wait(), 60)

    assert coordinator.kept_if_ended_now() == [(opened[0], out / "gil.zip")]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert coordinator.kept_if_ended_now() == []


async def test_a_no_match_export_stopped_as_its_outcome_is_recorded_says_so(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stopped_as_recorded(monkeypatch, asyncio.CancelledError, answering=True)
    coordinator = exporter(engine, LocalTranscriptStore(tmp_path / "t"))
    opened: list[str] = []
    coordinator.opened = opened.append
    task = asyncio.create_task(coordinator.run("nobody", out / "nobody.zip", operator="dpo"))
    with pytest.raises(asyncio.CancelledError):
        await task

    detail = str((await get_export(engine, opened[0]) or {})["detail"])
    assert detail.startswith("stopped as its outcome was recorded") and "no archive was left" in detail
    assert list(out.iterdir()) == []


# `teamstore export` whose outcome is unknown (ExportOutcomeUnknown: the archive kept), stopped as the app closes.
_UNKNOWN_THEN_STOPPED = textwrap.dedent("""
    import asyncio, os, signal, sys
    import teamstore.app as app_module
    import teamstore.export.requests as requests
    from teamstore.errors import StoreUnavailable

    finish, close = requests.finish_export, app_module.App.aclose

    async def unanswered(*args, **kwargs):
        await finish(*args, **kwargs)
        raise StoreUnavailable("could not record the export's manifest: connection reset", hint="check it")

    async def gone(*_, **__):
        raise StoreUnavailable("could not record the export's failure: connection refused", hint="check it")

    async def slow_close(self):  # spans flushed to a collector that is down, a pool closed
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(2)
        await close(self)

    requests.finish_export, requests.fail_export, app_module.App.aclose = unanswered, gone, slow_close
    sys.argv = ["teamstore", "export", "--user", "lia", "-o", "lia.zip", "--json"]
    from teamstore.cli import main
    main()
""")


def test_the_command_stopped_as_it_closes_after_an_unknown_outcome_says_where_the_kept_archive_is(
    tmp_path: Path
) -> None:
    """Reviewed: a Ctrl-C after ExportOutcomeUnknown, as the app closed, made the command say nothing usable was
    written while the archive its record calls `exported` stayed."""
    done = _kept_by_the_stopped_command(tmp_path, _UNKNOWN_THEN_STOPPED)
    assert json.loads(done.stdout)["error"]["type"] == "ExportStopped"


def test_the_command_stopped_twice_as_the_outcome_is_recorded_keeps_the_archive_and_says_so_in_json(
    tmp_path: Path
) -> None:
    """Reviewed: a second Ctrl-C while the first one's failure was recorded removed the archive, and under --json
    stdout said nothing of where a kept archive is."""
    command = _STOPPED_COMMAND.replace(
        "async def gone(*_, **__):\n    raise",
        "async def gone(*_, **__):\n"
        "    asyncio.get_running_loop().call_later(0.5, os.kill, os.getpid(), signal.SIGINT)\n"
        "    await asyncio.sleep(60)\n"
        "    raise").replace('"-o", "lia.zip"]', '"-o", "lia.zip", "--json"]')
    assert command.count("call_later") == 1 and "--json" in command
    _populate("lia")
    done = _kept_by_the_stopped_command(tmp_path, command)

    assert "Traceback" not in done.stderr.decode(), done.stderr.decode()
    error = json.loads(done.stdout)["error"]
    assert error["type"] == "ExportStopped" and error["exit_code"] == 130
    assert "its archive is kept at lia.zip" in error["message"] and "teamstore export status ex-" in error["fix"]


def test_the_command_stopped_as_the_outcome_is_recorded_says_where_the_archive_it_kept_is(tmp_path: Path) -> None:
    said = _kept_by_the_stopped_command(tmp_path, _STOPPED_COMMAND).stderr.decode()
    assert "Traceback" not in said and "teamstore export status ex-" in said, said


def _open_unanswered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The export's record is written, and the answer to its commit lost (the connection dropped)."""
    open_as_it_is = export_requests_module.open_export

    async def unanswered(*args: Any, **kwargs: Any) -> Any:
        await open_as_it_is(*args, **kwargs)
        raise StoreUnavailable("could not record the export: connection lost", hint="check it")

    monkeypatch.setattr(export_requests_module, "open_export", unanswered)


async def test_an_export_whose_record_was_written_but_unanswered_closes_it_at_once_not_when_its_lease_passes(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its record said `running` for the whole lease, as if the export had been killed.
    _open_unanswered(monkeypatch)
    await get_or_create_subject(engine, "gil")

    with pytest.raises(StoreUnavailable, match="connection lost"):
        await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", out / "gil.zip", operator="dpo")

    async with engine.connect() as conn:
        rows = (await conn.execute(select(export_requests.c.status, export_requests.c.detail))).all()
    assert [tuple(row) for row in rows] == [("failed", "as it began: StoreUnavailable")]
    assert list(out.iterdir()) == []


async def test_an_export_whose_record_may_be_written_and_whose_failure_cannot_be_names_the_id_to_check(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _open_unanswered(monkeypatch)

    async def gone(*_: Any, **__: Any) -> bool:
        raise StoreUnavailable("could not record the export's failure: connection refused", hint="check it")

    monkeypatch.setattr(export_requests_module, "fail_export", gone)
    await get_or_create_subject(engine, "gil")

    with pytest.raises(StoreUnavailable, match="may have been written all the same") as raised:
        await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", out / "gil.zip", operator="dpo")

    async with engine.connect() as conn:
        (export_id,) = (await conn.execute(select(export_requests.c.export_id))).scalars().all()
    assert export_id in raised.value.message and f"teamstore export status {export_id}" in str(raised.value.hint)
    assert (await get_export(engine, export_id) or {})["status"] == "running"  # until its lease passes
    assert list(out.iterdir()) == []


async def test_an_export_whose_record_lands_only_after_it_gave_up_names_the_id_to_check(
    engine: AsyncEngine, tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The insert's commit is still on its way (a standby holding it) as the export fails it: nothing to fail yet.
    open_as_it_is = export_requests_module.open_export
    late: list[Any] = []

    async def unanswered(*args: Any, **kwargs: Any) -> Any:
        late.append((args, kwargs))
        raise StoreUnavailable("could not record the export: connection lost", hint="check it")

    monkeypatch.setattr(export_requests_module, "open_export", unanswered)
    await get_or_create_subject(engine, "gil")

    with pytest.raises(StoreUnavailable, match="may have been written all the same") as raised:
        await exporter(engine, LocalTranscriptStore(tmp_path / "t")).run("gil", out / "gil.zip", operator="dpo")
    ((args, kwargs),) = late
    await open_as_it_is(*args, **kwargs)  # and now it lands
    async with engine.connect() as conn:
        (export_id,) = (await conn.execute(select(export_requests.c.export_id))).scalars().all()
    assert f"teamstore export status {export_id}" in str(raised.value.hint)
    assert list(out.iterdir()) == []


def _export(tmp_path: Path, *args: str, stdout: Any = subprocess.PIPE, stderr: Any = subprocess.PIPE,
            ) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "teamstore", "export", *args], stdout=stdout, stderr=stderr,
                          env={**os.environ, "COLUMNS": "300"}, timeout=120, check=False, cwd=tmp_path)


def test_an_export_of_nothing_whose_stderr_cannot_be_written_still_exits_no_match(tmp_path: Path) -> None:
    _populate("lia")
    with open("/dev/full", "wb") as full:
        done = _export(tmp_path, "--user", "nobody", "-o", "b.zip", "--json", stderr=full)
    assert done.returncode == 3 and json.loads(done.stdout)["status"] == "no_match"


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_an_export_whose_stdout_cannot_be_written_says_where_its_archive_is(
    tmp_path: Path, as_json: list[str]
) -> None:
    _populate("lia")
    with open("/dev/full", "wb") as full:
        done = _export(tmp_path, "--user", "lia", "-o", "lia.zip", *as_json, stdout=full)
    said = done.stderr.decode()
    assert done.returncode == 1 and "Traceback" not in said, said
    assert "is done and recorded `exported` (its archive is at lia.zip), but its manifest could not be printed" in said
    assert (tmp_path / "lia.zip").is_file()


def test_the_command_prints_a_running_exports_temporary_archive_even_when_it_refuses_the_target(
    tmp_path: Path,
) -> None:
    _populate("lia")

    async def running() -> str:
        engine = create_engine(Settings().resolved_database_url)
        try:
            return await _running(engine)
        finally:
            await engine.dispose()

    export_id = asyncio.run(running())
    partials_module.partial_path(tmp_path / "lia.zip", export_id).write_text("part of lia's data")
    (tmp_path / "lia.zip").write_text("taken")

    done = _export(tmp_path, "--user", "lia", "-o", "lia.zip")

    said = done.stderr.decode()
    assert done.returncode == 1 and "lia.zip exists: an export never overwrites" in said, said
    assert f"warning: .*.{export_id}.partial beside the target" in said


def test_a_folder_archive_whose_files_another_exports_clean_up_removes_meanwhile_still_aborts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once an export's record says it failed, the next export to its target may remove its temporary folder
    while it removes it itself: its abort must not fail on what is gone already (and hide why it failed)."""
    archive = open_archive(tmp_path / "gil", tag=new_export_id())
    archive.add("a.json", b"{}")
    unlink = os.unlink

    def raced(path: Any, *, dir_fd: int | None = None) -> None:
        unlink(path, dir_fd=dir_fd)  # the other export's clean-up gets there first
        unlink(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "unlink", raced)
    archive.abort()
    assert list(tmp_path.iterdir()) == []
