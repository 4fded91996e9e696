"""Factories that misbehave, for ``add_from_factory`` tests."""

from __future__ import annotations

from autogen_agentchat.agents import AssistantAgent


def raises() -> None:
    """A factory whose construction fails."""
    raise RuntimeError("the model catalogue is unreachable")


def exits() -> None:
    """A factory that calls sys.exit: the command line must not exit silently with its status."""
    raise SystemExit(3)


def not_a_team() -> dict[str, str]:
    """A factory that returns something that is not a team."""
    return {"provider": "autogen_agentchat.teams.RoundRobinGroupChat"}


class NotAComponent:
    """A class that an allow-listed provider may name but that is not an AutoGen component."""


class ResearchAgent(AssistantAgent):
    """An AssistantAgent under another provider: registering it in place of one is a retype."""

    component_provider_override = "tests.registry.factories.ResearchAgent"
