"""Fixtures for the registry suite: a fresh registry, example teams dumped to JSON, and a 'nothing changed' probe."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from autogen_core.models import ModelInfo
from autogen_ext.models.replay import ReplayChatCompletionClient

import teamstore  # noqa: F401  (registers the bounding context)
from config_registry import Manifest, Registry
from teamstore import examples
from tests.conftest import git


@pytest.fixture
def registry(registry_path: Path) -> Registry:
    """A new, empty registry in a temporary git repository."""
    return Registry(registry_path, create=True)


def dump(obj: Any) -> dict[str, Any]:
    """The JSON a team or agent dumps to."""
    data: dict[str, Any] = obj.dump_component().model_dump(mode="json")
    return data


def triage_json() -> dict[str, Any]:
    """support_triage as component JSON."""
    return dump(examples.support_triage())


def triage_manifest(**changes: Any) -> Manifest:
    """support_triage's manifest with ``changes`` applied; without its memory unless ``memory`` is given (a
    change of the participants it names would be refused for that alone: tests/registry/test_memory.py)."""
    data = examples.example_manifest("support_triage").model_dump()
    data.update({"memory": None, **changes})
    return Manifest(**data)


def snapshot(path: Path) -> tuple[str, str]:
    """HEAD and the porcelain status: equal before and after means the repository is unchanged."""
    return git(path, "rev-parse", "HEAD").strip(), git(path, "status", "--porcelain", "--untracked-files=all")


@contextmanager
def left_unchanged(path: Path) -> Iterator[None]:
    """Assert that the block makes no commit and leaves a clean tree (wrap it around a failing call)."""
    before = snapshot(path)
    yield
    after = snapshot(path)
    assert after == before
    assert after[1] == ""


def calling_client() -> ReplayChatCompletionClient:
    """An offline client that declares function calling (tools and handoffs need it)."""
    info = ModelInfo(
        vision=False, function_calling=True, json_output=False, family="unknown", structured_output=False
    )
    return ReplayChatCompletionClient(["one", "two", "three"], model_info=info)


def stdio_component(env: dict[str, str] | None = None, args: list[str] | None = None, source: str | None = None,
                    fields: dict[str, Any] | None = None, command: str = "server") -> dict[str, Any]:
    """An agent-like component with an MCP server started as ``command`` with ``args`` and ``env``, a tool whose
    source is ``source``, and ``fields`` among its own; registration walks it as JSON whatever its provider."""
    params = {"type": "StdioServerParams", "command": command, "args": args or [], "env": env or {}}
    tool = {"provider": "autogen_core.tools.FunctionTool", "config": {"source_code": source or "def f(): pass\n"}}
    config = {"workbench": [{"config": {"server_params": params}}], "tools": [tool], **(fields or {})}
    return {"provider": "autogen_agentchat.agents.AssistantAgent", "config": config}
