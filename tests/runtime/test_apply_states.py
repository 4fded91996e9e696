"""Loading a stored state into a fresh team: only the persisted participants are loaded, and the team ends up
exactly as AutoGen's own ``load_state`` of the whole team would leave it."""

from __future__ import annotations

from typing import Any

from config_registry import Registry
from teamstore.runtime.resume import apply_states

TASK = "My router keeps dropping every evening"


async def _stored_researcher(registry: Registry) -> Any:
    team = registry.build("support_triage").team
    await team.run(task=TASK)
    return (await team.save_state())["agent_states"]["researcher"]


async def test_a_resumed_team_is_the_team_autogens_own_load_state_makes(registry: Registry) -> None:
    stored = await _stored_researcher(registry)
    ours = registry.build("support_triage")
    await apply_states(ours, {"researcher": stored})
    theirs = registry.build("support_triage").team
    whole = dict(await theirs.save_state())
    whole["agent_states"] = {**whole["agent_states"], "researcher": stored}
    await theirs.load_state(whole)
    assert await ours.team.save_state() == await theirs.save_state()
    assert (await ours.team.save_state())["agent_states"]["researcher"] == stored
    ran, reference = await ours.team.run(task="Still dropping"), await theirs.run(task="Still dropping")
    assert [m.to_text() for m in ran.messages] == [m.to_text() for m in reference.messages]


class _OtherTeam:
    """A team that keeps its participants some other way: only its public save_state and load_state."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {"agent_states": {"researcher": {"fresh": True}, "manager": {"turn": 0}}}

    async def save_state(self) -> dict[str, Any]:
        return self.state

    async def load_state(self, state: dict[str, Any]) -> None:
        self.state = state


async def test_a_team_without_autogens_group_chat_internals_is_loaded_whole_through_its_load_state(
    registry: Registry,
) -> None:
    built = registry.build("support_triage")
    built.team = _OtherTeam()  # type: ignore[assignment]
    await apply_states(built, {"researcher": {"stored": True}})
    assert built.team.state == {"agent_states": {"researcher": {"stored": True}, "manager": {"turn": 0}}}  # type: ignore[attr-defined]
