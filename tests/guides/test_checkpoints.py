"""docs/checkpoints.md run as written, on SQLite and Postgres: its registration, the block that continues an
interrupted run (on a new session, then on one whose model went away mid-run), the stop button that closes
the stream and abandons the run, and the tool that keys its side effect by the turn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from teamstore.app import open_platform
from teamstore.runtime.platform import Platform
from tests.guides.guide import Shell, commands, pieces
from tests.runtime.checkpoint_teams import counted_calls

GUIDE = "checkpoints.md"
TURNS = 6
"""The turns of a run of the example escalation team (it stops at its seventh message)."""


@pytest.fixture
async def platform(on_database: Shell) -> AsyncIterator[Platform]:
    """The guide's registration, typed as it shows it, and a platform over what it registered."""
    (line,) = commands(GUIDE)
    on_database.line(line)
    p = open_platform()
    yield p
    await p.aclose()


class Tickets:
    """The ticket system of the guide's tool: what it was asked to create, with which keys."""

    def __init__(self) -> None:
        self.keys: list[str | None] = []

    async def create(self, summary: str, idempotency_key: str | None) -> str:
        self.keys.append(idempotency_key)
        return f"ticket {len(self.keys)}"


async def test_a_run_stopped_mid_way_continues_and_its_tool_keys_repeat_only_for_the_repeated_turn(
    platform: Platform, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tickets = Tickets()
    tool = await pieces(GUIDE)["tool.py"].run(tickets=tickets)
    assert await tool["open_ticket"]("outside a run") == "ticket 1" and tickets.keys == [None]
    resume = pieces(GUIDE)["resume.py"]

    with counted_calls(monkeypatch) as calls:  # the tool runs in each model call's turn, as an agent's tools do
        calls.on_call = lambda n: tool["open_ticket"](f"call {n}")
        fresh = await resume.run(platform=platform, user_id="bob", session_id="b-1", text="My line drops.")
        assert len(fresh["result"].messages) == 1 + TURNS and "s" in fresh
        calls.fail_at = calls.made + 3  # the model goes away in turn 3 of alice's run: turns 1 and 2 are durable
        async with platform.session("alice", "t-1", team="support_escalation") as s:
            with pytest.raises(RuntimeError, match="the model endpoint went away"):
                await s.run("Escalation: my line drops every evening.")
            assert s.interrupted is not None
            run_id = s.interrupted.run_id
        calls.fail_at = None
        capsys.readouterr()
        continued = await resume.run(platform=platform, user_id="alice", session_id="t-1", text="unused")

    assert capsys.readouterr().out.split() == [run_id, "2"]
    messages = continued["result"].messages
    assert len(messages) == 1 + TURNS and messages[0].to_text() == "Escalation: my line drops every evening."
    alice = tickets.keys[1 + TURNS:]
    assert alice == [f"{run_id}:{turn}:open_ticket" for turn in (1, 2, 3, 3, 4, 5, 6)]
    async with platform.session("alice", "t-1", team="support_escalation") as s:
        assert s.interrupted is None


async def test_the_stop_button_closes_the_stream_and_abandons_the_run(platform: Platform) -> None:
    seen: list[Any] = []
    abandoned: list[str] = []

    def user_pressed_stop() -> bool:  # the user presses stop once turn 2's message is on screen
        seen.append(1)
        return len(seen) == 3

    async with platform.session("alice", "t-2", team="support_escalation") as s:
        abandon = s.abandon_run

        async def noted() -> None:
            abandoned.append(s.interrupted.run_id if s.interrupted else "")
            await abandon()

        s.abandon_run = noted  # type: ignore[method-assign]
        await pieces(GUIDE)["stop.py"].run(s=s, task="Escalation: no dial tone.", user_pressed_stop=user_pressed_stop)
        assert len(seen) == 3 and len(abandoned) == 1 and abandoned[0]
        assert s.interrupted is None
        result = await s.run("A new request")  # nothing waits any more: the session goes on
    assert result.messages[0].to_text() == "A new request"
