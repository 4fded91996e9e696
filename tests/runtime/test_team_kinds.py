"""Every kind of AgentChat team, onboarded as a platform team would (tests/team_kinds.py): registered, run,
resumed, a run stopped mid-way continued, and a breaking change refused with the reason."""

from __future__ import annotations

from typing import Any

import pytest
from autogen_agentchat.messages import HandoffMessage, ToolCallSummaryMessage

from config_registry import Manifest, Registry
from teamstore.runtime.platform import Platform
from teamstore.state.envelope import field_names
from tests import team_kinds
from tests.runtime.checkpoint_teams import counted_calls, said

TASK = "Order 4711 is urgent: where is it?"
CHECKPOINTED = ("round_robin", "selector", "swarm", "graph")
# The model call that opens the third turn (a SelectorGroupChat's picks cost two calls each with its own prompt).
THIRD_TURN_CALL = {"round_robin": 3, "selector": 7, "swarm": 3, "graph": 3}


def _register(registry: Registry, kind: str, factory: str = "") -> str:
    team = getattr(team_kinds, factory or kind)()
    manifest = Manifest(name=kind, persist=[team_kinds.PERSISTED[kind]], context_bound=20,
                        allow_source_code_tools=True,
                        checkpoints="every_turn" if kind in CHECKPOINTED else "off")
    return registry.add(kind, team.dump_component(), manifest, f"register {factory or kind}", label="production",
                        allow_incompatible=bool(factory))


def _what_makes_the_kind(kind: str, messages: list[Any]) -> None:
    """The run did what the kind is tried for: a tool was called, a handoff made, more than one speaker."""
    if kind == "round_robin":
        assert any(isinstance(m, ToolCallSummaryMessage) for m in messages)
    if kind == "swarm":
        assert [(m.source, m.target) for m in messages if isinstance(m, HandoffMessage)] == [("frontdesk", "billing")]
    if kind in ("selector", "magentic_one"):
        assert len({m.source for m in messages[1:]}) > 1


@pytest.mark.parametrize("kind", team_kinds.KINDS)
async def test_every_kind_of_team_runs_resumes_and_refuses_a_breaking_change_with_the_reason(
    platform: Platform, registry: Registry, kind: str
) -> None:
    _register(registry, kind)
    persisted = team_kinds.PERSISTED[kind]
    async with platform.session("alice", "s1", team=kind) as s:
        first = await s.run(TASK)
    _what_makes_the_kind(kind, list(first.messages))
    async with platform.session("alice", "s1", team=kind) as s:
        assert s.resume is not None and s.resume.outcome == "resumed" and s.resume.restored == (persisted,)
    _register(registry, kind, f"{kind}_v2")
    async with platform.session("alice", "s1", team=kind) as s:
        assert s.resume is not None and s.resume.outcome == "definition_changed"
        assert persisted in (s.resume.detail or "")


@pytest.mark.parametrize("kind", CHECKPOINTED)
async def test_every_kind_of_team_with_checkpoints_continues_a_stopped_run_without_running_a_turn_again(
    platform: Platform, registry: Registry, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    _register(registry, kind)
    with counted_calls(monkeypatch) as calls:
        async with platform.session("bob", "s1", team=kind) as s:
            expected = said((await s.run(TASK)).messages)
        whole = calls.made
        calls.fail_at = whole + THIRD_TURN_CALL[kind]
        async with platform.session("alice", "s1", team=kind) as s:
            with pytest.raises(RuntimeError, match="model endpoint went away"):
                await s.run(TASK)
            assert s.interrupted is not None and s.interrupted.last_turn == 2
        stopped = calls.made
        async with platform.session("alice", "s1", team=kind) as s:
            assert s.resume is not None and s.resume.outcome == "interrupted"
            result = await s.continue_run()
    assert said(result.messages) == expected
    assert calls.made - stopped == whole - (THIRD_TURN_CALL[kind] - 1)  # the two completed turns made no call


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value).union(*(_keys(item) for item in value.values()))
    if isinstance(value, list):
        return set().union(*(_keys(item) for item in value))
    return set()


@pytest.mark.parametrize("kind", team_kinds.KINDS)
async def test_every_key_of_every_kind_of_teams_state_is_one_a_refused_values_path_names(
    platform: Platform, registry: Registry, kind: str
) -> None:
    # A state that is no JSON is refused naming its path by the keys that are no user's words: AutoGen's own
    # states must read by name for the error to be of use.
    _register(registry, kind)
    async with platform.session("alice", "s1", team=kind) as s:
        await s.run(TASK)
        state = await s.team.save_state()
    agents = set(state["agent_states"])  # the participants and the manager: the team's definition names them
    assert _keys(state) - field_names() - agents == set()
