"""A team whose model's reply and tool's result hold NUL (U+0000), for tests/runtime/test_nul_from_models.py and the
guide's web service (tests/web/test_guide_service.py).

    register(registry)                      # nul_replies@production: one turn per run, then the memory writer
    register(registry, name="support_triage")
"""

from __future__ import annotations

import json

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, ModelInfo, RequestUsage
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient

from config_registry import Manifest, Registry
from config_registry.manifest import Checkpoints, MemoryDeclaration
from teamstore.context import BoundedChatCompletionContext

TEAM = "nul_replies"
RESULT = "row\x00T\x001\x00end"
"""What the tool returns for the ticket the model asks about (``T\\x001``)."""
REPLY = "the line drops at\x00 night"
"""What the model answers once the tool's result is in."""
INFO = ModelInfo(vision=False, function_calling=True, json_output=False, family="unknown", structured_output=False)


def lookup(ticket: str) -> str:
    """A tool whose result holds NUL (a field read from a fixed-width record)."""
    return "row\x00" + ticket + "\x00end"


def _replies(writer: bool) -> list[CreateResult]:
    """One turn: a call to the tool with an argument holding NUL, then a reply holding NUL; then the memory
    writer's answer (it writes from the turn's messages, NUL and all)."""
    spent = RequestUsage(prompt_tokens=5, completion_tokens=5)
    call = FunctionCall(id="c1", name="lookup", arguments=json.dumps({"ticket": "T\x001"}))
    replies = [CreateResult(finish_reason="function_calls", content=[call], usage=spent, cached=False),
               CreateResult(finish_reason="stop", content=REPLY, usage=spent, cached=False)]
    if writer:
        summary = json.dumps({"summary": "asked about a dropping line", "facts": {"ticket_id": "T-1"}})
        replies.append(CreateResult(finish_reason="stop", content=summary, usage=spent, cached=False))
    return replies


def register(registry: Registry, *, name: str = TEAM, turns: int = 1, checkpoints: Checkpoints = "every_turn",
             memory: bool = True) -> None:
    """The team: one assistant, persisted and checkpointed, with the tool, and (``memory``) the user's memory,
    which the assistant's model writes; ``turns`` turns per run, its model answering the first turn alone (a
    second turn's call finds no reply: the run stops there, interrupted)."""
    agent = AssistantAgent(
        "assistant", model_client=ReplayChatCompletionClient(_replies(writer=turns == 1), model_info=INFO),
        tools=[FunctionTool(lookup, description="Look a ticket up.")], reflect_on_tool_use=True,
        model_context=BoundedChatCompletionContext(max_messages=20))
    team = RoundRobinGroupChat([agent], termination_condition=MaxMessageTermination(1 + turns))
    kept = MemoryDeclaration(participants=["assistant"], writer="assistant", summary_tokens=50,
                             facts={"ticket_id": "str"})
    manifest = Manifest(name=name, persist=["assistant"], context_bound=20, allow_source_code_tools=True,
                        checkpoints=checkpoints, memory=kept if memory and turns == 1 else None)
    registry.add(name, team.dump_component(), manifest, "tool results and replies holding NUL", label="production")
