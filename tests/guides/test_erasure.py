"""docs/erasure.md run as written, transcripts in S3 (moto's server over HTTP): the desk's commands in order (a dry
run, the export, the erasure a terminal would ask about, its receipt, the queue, an extension while it is open),
the exports of its Exports section, and the same erasure from Python."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import zipfile

import pytest

from teamstore.app import App
from teamstore.settings import Settings
from tests.guides.guide import Shell, commands, pieces

GUIDE = "erasure.md"
USER = "alice@example.com"
REQUEST = "REQ-2026-0042"


@pytest.fixture
def desk(shell: Shell, s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> Shell:
    """The shell, transcripts in S3, and a team alice's runs use; an erasure's fence waits briefly (no worker
    could be writing past it: every run here has ended)."""
    monkeypatch.setenv("TEAMSTORE_TRANSCRIPTS_URL", f"s3://{s3_bucket}/teamstore")
    monkeypatch.setenv("TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS", "0.1")
    shell.json("registry", "add", "support_triage", "--factory", "teamstore.examples:support_triage",
               "--persist", "researcher", "--context-bound", "20", "-m", "first version", "--label", "production")
    return shell


def _alice_runs(shell: Shell, session: str) -> None:
    shell.json("run", "--team", "support_triage", "--user", USER, "--session", session, "My router keeps dropping")


def _stopped_while_its_fence_waits(shell: Shell, args: list[str]) -> None:
    """The erasure the operator confirmed (``--yes``), stopped (SIGTERM) while its fence waits: it stays open."""
    eraser = subprocess.Popen([sys.executable, "-m", "teamstore", *args, "--yes"], cwd=shell.cwd,
                              env={**os.environ, "TEAMSTORE_ERASURE_FENCE_GRACE_SECONDS": "600"},
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not shell.json("erase", "list", "--status", "open")["requests"]:
            assert eraser.poll() is None, eraser.communicate()
            assert time.monotonic() < deadline, "the erasure never opened"
            time.sleep(0.05)
        eraser.send_signal(signal.SIGTERM)
        eraser.communicate(timeout=60)
    finally:
        eraser.kill()
    assert eraser.returncode == 128 + signal.SIGTERM


@pytest.mark.s3
def test_the_desk_s_commands_run_in_order(desk: Shell) -> None:
    lines = commands(GUIDE)
    assert [line.args[:2] for line in lines] == [
        ["erase", "--user"], ["export", "--user"], ["erase", "--user"], ["erase", "status"], ["erase", "list"],
        ["erase", "extend"], ["export", "--user"], ["export", "--user"]]
    dry_run, export, erase, status, queue, extend, *exports = lines
    _alice_runs(desk, "s-1")
    assert "would" in desk.line(dry_run).stdout
    desk.line(export)
    assert "resume_state.json" in zipfile.ZipFile(desk.cwd / "alice.zip").namelist()
    desk.line(erase, status=1, said="no terminal to ask on")
    _stopped_while_its_fence_waits(desk, erase.args)
    assert json.loads(desk.line(status, status=2, said="is open").stdout)["status"] == "open"  # 2 until it ends
    desk.line(queue)
    desk.line(extend)
    assert desk.json(*erase.args, "--yes")["status"] == "completed"  # run again, the request resumes and ends
    assert desk.json(*status.args[:-1])["status"] == "completed"

    (desk.cwd / "alice.zip").rename(desk.cwd / "handed-over.zip")  # an export never overwrites one
    for n, line in enumerate(exports):  # the Exports section: alice used the service again since
        _alice_runs(desk, f"s-{n + 2}")
        desk.line(line)
    assert (desk.cwd / "alice-export" / "manifest.json").is_file()


@pytest.mark.s3
def test_the_erasure_from_python(desk: Shell) -> None:
    _alice_runs(desk, "s-1")

    async def erased() -> None:
        settings = Settings()
        app = App(settings)
        try:
            done = await pieces(GUIDE)["erase.py"].run(engine=app.engine, transcripts=app.transcript_store,
                                                       settings=settings)
        finally:
            await app.aclose()
        assert done["receipt"].status == "completed" and done["receipt"].request_id == REQUEST

    asyncio.run(erased())
    assert desk.json("erase", "status", REQUEST)["status"] == "completed"
