"""docs/memory.md run as written: the team declared with memory, what a run leaves in it shown and forgotten
from the command line, and the same from Python."""

from __future__ import annotations

import asyncio
import json

from teamstore.app import open_platform
from tests.guides.guide import Shell, commands, pieces

GUIDE = "memory.md"
TICKET = "My router keeps dropping (ticket 55102)"
"""The user's first message: the writer keeps its ticket id."""


def _a_run_remembered(shell: Shell, session: str) -> None:
    """One of alice's runs with the declared team; `teamstore run` waits for its memory write."""
    said = shell.json("run", "--team", "support_triage", "--user", "alice", "--session", session, TICKET)
    assert said["memory"], said


def test_what_a_run_leaves_in_memory_is_shown_and_forgotten_as_the_guide_says(shell: Shell) -> None:
    declare, *lines = commands(GUIDE)
    assert declare.starts("registry", "add", "support_triage") and [c.args[:2] for c in lines] == [
        ["memory", "show"], ["memory", "show"], ["memory", "forget"], ["memory", "forget"]]
    shell.line(declare)
    _a_run_remembered(shell, "t-1")

    show, show_json, forget_fact, forget_all = lines
    assert "55102" in shell.line(show).stdout
    (kept,) = json.loads(shell.line(show_json).stdout)["memories"]
    assert [(fact["name"], fact["value"]) for fact in kept["facts"]] == [("ticket_id", "55102")]
    shell.line(forget_fact)
    (kept,) = shell.json(*show.args)["memories"]
    assert kept["facts"] == [] and "55102" in kept["summary"]  # the summary is kept: --all removes both
    shell.line(forget_all)
    assert shell.json(*show.args)["memories"] == []

    _a_run_remembered(shell, "t-2")
    asyncio.run(_forgotten_from_python())


async def _forgotten_from_python() -> None:
    platform = open_platform()
    try:
        done = await pieces(GUIDE)["forget.py"].run(platform=platform)
        (kept,) = done["kept"]
        assert kept.scope == "support_triage" and "ticket_id" in kept.facts
        assert await platform.show_memory("alice") == []
    finally:
        await platform.aclose()
