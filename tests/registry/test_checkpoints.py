"""The manifest's ``checkpoints``: declared per team, refused where a run has no turns to checkpoint, covered
by ``registry diff`` and ``registry check``, and set from the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import MagenticOneGroupChat
from pydantic import ValidationError
from typer.testing import CliRunner

from config_registry import Manifest, Registry
from config_registry.errors import DefinitionInvalid
from teamstore.cli import app
from teamstore.offline import OfflineChatCompletionClient
from tests.registry.conftest import triage_json, triage_manifest

runner = CliRunner()


def test_checkpoints_are_off_unless_declared_and_take_only_off_or_every_turn() -> None:
    assert Manifest(name="t").checkpoints == "off"
    assert Manifest(name="t", checkpoints="every_turn").checkpoints == "every_turn"
    with pytest.raises(ValidationError):
        Manifest(name="t", checkpoints="every_message")  # type: ignore[arg-type]


def test_a_single_agent_cannot_declare_checkpoints(registry: Registry) -> None:
    agent = AssistantAgent("assistant", model_client=OfflineChatCompletionClient())
    with pytest.raises(DefinitionInvalid, match="a single agent's run is one turn") as info:
        registry.add("solo", agent.dump_component().model_dump(), Manifest(name="solo", checkpoints="every_turn"),
                     "one agent")
    assert info.value.field == "checkpoints" and info.value.hint


def test_a_team_with_its_own_orchestration_loop_cannot_declare_checkpoints(registry: Registry) -> None:
    helper = AssistantAgent("helper", model_client=OfflineChatCompletionClient())
    team = MagenticOneGroupChat([helper], model_client=OfflineChatCompletionClient())
    with pytest.raises(DefinitionInvalid, match="orchestrates its own loop"):
        registry.add("magentic", team.dump_component().model_dump(), Manifest(name="magentic", checkpoints="every_turn"),
                     "magentic one")


def _with(registry: Registry, message: str, **manifest: Any) -> str:
    return registry.add("support_triage", triage_json(), triage_manifest(**manifest), message)


def test_diff_and_check_cover_the_checkpoints_field(registry: Registry) -> None:
    off = _with(registry, "off")
    on = _with(registry, "on", checkpoints="every_turn")
    assert "persistence: checkpoints off -> every_turn" in registry.diff("support_triage", off, on).lines()
    turned_on = registry.check("support_triage", off, on)
    assert turned_on.compatible and "checkpoints off -> every_turn" in turned_on.notes
    # A run interrupted under a version with checkpoints continues only on that version.
    again = _with(registry, "again", checkpoints="every_turn", description="Reworded.")
    moved_on = registry.check("support_triage", on, again)
    assert moved_on.compatible and any(f"cannot be continued under {moved_on.b[:12]}" in n for n in moved_on.notes)


def test_registry_add_takes_checkpoints_and_show_prints_them(registry_path: Path) -> None:
    add = ["registry", "add", "support_triage", "--factory", "teamstore.examples:support_triage",
           "--persist", "researcher", "--context-bound", "20"]
    assert runner.invoke(app, [*add, "--checkpoints", "every_turn"]).exit_code == 0
    shown = runner.invoke(app, ["registry", "show", "support_triage"], env={"COLUMNS": "300"}).stdout
    assert "checkpoints: every_turn" in shown
    refused = runner.invoke(app, [*add, "--checkpoints", "sometimes"])
    assert refused.exit_code != 0 and "checkpoints" in refused.output
