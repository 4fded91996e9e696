"""The values the registry returns: definitions, summaries, history entries and built teams.

definition = registry.resolve("support_triage@production")
print(definition.version, definition.fingerprints, definition.labels)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from autogen_agentchat.base import ChatAgent, Team

from config_registry.manifest import Manifest

TeamOrAgent = Team | ChatAgent
"""What a definition builds: an AutoGen team, or a single agent (``kind`` says which)."""

# How a definition's kind reads in a sentence ("changed from a team to a single agent").
KIND_NAMES = {"team": "a team", "agent": "a single agent"}


@dataclass(frozen=True)
class TeamDefinition:
    """One registered version of a team.

    Attributes:
        name: The team's registry name.
        version: The full sha of the commit that registered this version.
        component: The component JSON, secrets as ``{"$secret": "env:VAR"}`` references.
        manifest: The manifest registered with it.
        fingerprints: Persisted participant -> fingerprint.
        labels: Labels that currently point at this version.
        kind: ``"team"`` or ``"agent"``.
        author: Who registered it.
        time: When (UTC).
        message: The commit message.
    """

    name: str
    version: str
    component: dict[str, Any]
    manifest: Manifest
    fingerprints: dict[str, str]
    labels: list[str] = field(default_factory=list)
    kind: Literal["team", "agent"] = "team"
    author: str = ""
    time: datetime | None = None
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (what ``teamstore registry show --json`` prints)."""
        from config_registry.allowlist import code_tools
        from config_registry.secrets import references

        return {
            "name": self.name,
            "version": self.version,
            "kind": self.kind,
            "labels": list(self.labels),
            "author": self.author,
            "time": self.time.isoformat() if self.time else None,
            "message": self.message,
            "manifest": self.manifest.model_dump(mode="json"),
            "fingerprints": dict(self.fingerprints),
            "allowances": {
                "allow_source_code_tools": self.manifest.allow_source_code_tools,
                "source_code_tools": code_tools(self.component),
                "allowed_providers": list(self.manifest.allowed_providers),
                "secrets": references(self.component),
            },
            "component": self.component,
        }


@dataclass(frozen=True)
class TeamSummary:
    """One line of ``registry list``: a team's latest version and where its labels point."""

    name: str
    version: str
    kind: Literal["team", "agent"]
    description: str
    owner: str
    persisted: list[str]
    labels: dict[str, str]
    time: datetime | None


@dataclass(frozen=True)
class HistoryEntry:
    """A registered version (``kind="version"``) or a label move (``kind="label"``), newest first.

    Attributes:
        kind: Which of the two it is.
        commit: The commit that recorded it.
        author: Who registered the version or moved the label.
        time: When (UTC).
        message: The commit message, or the reason given for a label move.
        label: For a label move, the label.
        version: For a label move, the version it now points at; for a version, the commit itself.
        previous: For a label move, where it pointed before (``None`` for a new label).
    """

    kind: Literal["version", "label"]
    commit: str
    author: str
    time: datetime
    message: str
    label: str | None = None
    version: str | None = None
    previous: str | None = None


@dataclass
class BuiltTeam:
    """A fresh AutoGen team (or agent) built from a definition, with what the runtime needs to know.

    Attributes:
        team: The new team or agent; never shared between calls.
        name: The team's registry name.
        version: The full commit sha it was built from.
        manifest: Its manifest.
        fingerprints: Persisted participant -> fingerprint.
        persisted: The persisted participants' names.
        participants: Participant name -> the agent object inside ``team``.
        kind: ``"team"`` or ``"agent"``.
        agent_types: Participant name -> provider string.
        state_ttl_days: From the manifest.
    """

    team: TeamOrAgent
    name: str
    version: str
    manifest: Manifest
    fingerprints: dict[str, str]
    persisted: tuple[str, ...]
    participants: dict[str, ChatAgent]
    kind: Literal["team", "agent"]
    agent_types: dict[str, str]
    state_ttl_days: float | None
