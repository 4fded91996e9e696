"""Example teams that run offline, and the manifests they are registered with.

    from teamstore.examples import example_manifest, support_escalation, support_triage

    team = support_triage()
    result = await team.run(task="My router keeps dropping")
    manifest = example_manifest("support_triage")   # persists ["researcher"], context_bound=20, keeps memory
    long_case = support_escalation()                 # six turns; its manifest checkpoints every turn

Register one from the command line with ``teamstore registry add support_triage --factory
teamstore.examples:support_triage --persist researcher --context-bound 20``.

``support_triage_openai`` uses ``OpenAIChatCompletionClient``; its key comes from ``OPENAI_API_KEY`` and
is registered as a reference, never stored::

    teamstore registry add support_triage_openai --factory teamstore.examples:support_triage_openai \\
        --persist researcher --context-bound 20 \\
        --secret participants.0.config.model_client.config.api_key=env:OPENAI_API_KEY \\
        --secret participants.1.config.model_client.config.api_key=env:OPENAI_API_KEY \\
        --secret participants.2.config.model_client.config.api_key=env:OPENAI_API_KEY
"""

from __future__ import annotations

import os

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import ChatAgent, Team
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core.models import ChatCompletionClient

import teamstore  # noqa: F401  (registers BoundedChatCompletionContext as a bounding context)
from config_registry import Manifest, MemoryDeclaration
from teamstore.context import BoundedChatCompletionContext
from teamstore.offline import OfflineChatCompletionClient

_PROMPTS = {
    "triage": "You are triage. Read the customer's request and say what kind of problem it is.",
    "researcher": "You are researcher. Find the likely cause and the steps that fix it.",
    "critic": "You are critic. Check the proposed fix for gaps and say what is missing. "
    "When the fix is complete, say TERMINATE.",
}
_RESEARCHER_V2 = "You are researcher. Find the likely cause, cite the runbook, and list the fix step by step."


def _client() -> ChatCompletionClient:
    return OfflineChatCompletionClient(model="offline-small")


def _triage_team(
    client: ChatCompletionClient | None = None,
    researcher_name: str = "researcher",
    researcher_prompt: str = _PROMPTS["researcher"],
) -> RoundRobinGroupChat:
    prompts = {"triage": _PROMPTS["triage"], researcher_name: researcher_prompt, "critic": _PROMPTS["critic"]}
    agents: list[ChatAgent | Team] = []
    for name, prompt in prompts.items():
        context = (
            BoundedChatCompletionContext(max_messages=20, keep_first=1) if name == researcher_name else None
        )
        agents.append(
            AssistantAgent(
                name,
                model_client=client or _client(),
                system_message=prompt,
                model_context=context,
                description=f"The {name} of the support team.",
            )
        )
    # The critic closes a normal run (only its prompt asks for TERMINATE: sources=["critic"] would be lost
    # when the team is registered); the message cap is only the safety net (a run it ends counts as ended
    # by a limit in the ledger).
    done = TextMentionTermination("TERMINATE") | MaxMessageTermination(8)
    return RoundRobinGroupChat(agents, termination_condition=done)


def support_triage() -> RoundRobinGroupChat:
    """A support team: ``triage``, ``researcher`` (persisted, bounded context) and ``critic``, offline.

    Returns:
        A RoundRobinGroupChat that stops when the critic says TERMINATE (after the task and three replies
        with the offline client), or after 8 messages.
    """
    return _triage_team()


def support_triage_v2_renamed() -> RoundRobinGroupChat:
    """Like :func:`support_triage` but ``researcher`` is renamed ``investigator``: breaks stored sessions.

    Returns:
        A RoundRobinGroupChat.
    """
    return _triage_team(
        researcher_name="investigator",
        researcher_prompt=_PROMPTS["researcher"].replace("researcher", "investigator"),
    )


def support_triage_v2_prompt() -> RoundRobinGroupChat:
    """Like :func:`support_triage` with a new system message for ``researcher``: a compatible change.

    Returns:
        A RoundRobinGroupChat.
    """
    return _triage_team(researcher_prompt=_RESEARCHER_V2)


def support_escalation(delay_seconds: float = 0.0) -> RoundRobinGroupChat:
    """A long support case: ``triage``, ``researcher`` (persisted, bounded context) and ``critic`` take two
    turns each, and the run stops at its seventh message: a run worth checkpointing turn by turn.

    Args:
        delay_seconds: How long each model call takes (the offline client answers at once by default).

    Returns:
        A RoundRobinGroupChat whose run is the task and six turns.
    """
    agents: list[ChatAgent | Team] = [
        AssistantAgent(
            name,
            model_client=OfflineChatCompletionClient(model="offline-small", delay_seconds=delay_seconds),
            system_message=f"You are {name}. Work the escalated case with the others.",
            model_context=BoundedChatCompletionContext(max_messages=20, keep_first=1) if name == "researcher" else None,
            description=f"The {name} of the escalation team.",
        )
        for name in ("triage", "researcher", "critic")
    ]
    return RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(7))


def single_assistant() -> AssistantAgent:
    """One offline ``assistant`` with a bounded context (20 messages).

    Returns:
        An AssistantAgent.
    """
    return AssistantAgent(
        "assistant",
        model_client=_client(),
        system_message="You are assistant. Answer the customer's question briefly.",
        model_context=BoundedChatCompletionContext(max_messages=20),
    )


def support_triage_openai() -> RoundRobinGroupChat:
    """The support team on ``gpt-4o-mini`` through ``OpenAIChatCompletionClient``.

    The key is read from ``OPENAI_API_KEY`` (a placeholder when unset or blank, so it builds offline); register it
    with ``--secret <path>.api_key=env:OPENAI_API_KEY`` for each participant's model client.

    Returns:
        A RoundRobinGroupChat; building it makes no network call.
    """
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    client = OpenAIChatCompletionClient(
        model="gpt-4o-mini", api_key=os.environ.get("OPENAI_API_KEY") or "sk-placeholder"
    )
    return _triage_team(client=client)


TRIAGE_MEMORY = MemoryDeclaration(
    participants=["triage", "researcher"], writer="triage", summary_tokens=150,
    facts={"ticket_id": "str", "router_model": "str"},
)
"""The support team's memory of a user: a ~150-token summary, the ticket id and the router model; triage and
the researcher are given it, and triage's model client writes it."""


def _triage_manifest(
    name: str, description: str, persist: str = "researcher", secrets: dict[str, str] | None = None
) -> Manifest:
    return Manifest(
        name=name,
        description=description,
        owner="support-platform",
        persist=[persist],
        context_bound=20,
        secrets=secrets or {},
        memory=TRIAGE_MEMORY.model_copy(update={"participants": ["triage", persist]}),
    )


def _openai_secrets() -> dict[str, str]:
    return {f"participants.{i}.config.model_client.config.api_key": "env:OPENAI_API_KEY" for i in range(3)}


EXAMPLE_MANIFESTS: dict[str, Manifest] = {
    "support_triage": _triage_manifest("support_triage", "Triage, research and critique support requests."),
    "support_triage_v2_renamed": _triage_manifest(
        "support_triage", "Support team with researcher renamed investigator.", persist="investigator"
    ),
    "support_triage_v2_prompt": _triage_manifest(
        "support_triage", "Support team with a new researcher prompt."
    ),
    "support_escalation": Manifest(
        name="support_escalation",
        description="A long support case, checkpointed after every turn.",
        owner="support-platform",
        persist=["researcher"],
        context_bound=20,
        checkpoints="every_turn",
    ),
    "single_assistant": Manifest(
        name="single_assistant",
        description="One assistant.",
        owner="support-platform",
        persist=["assistant"],
        context_bound=20,
    ),
    "support_triage_openai": _triage_manifest(
        "support_triage_openai", "The support team on gpt-4o-mini.", secrets=_openai_secrets()
    ),
}


def example_manifest(name: str) -> Manifest:
    """The manifest an example factory is registered with.

    Args:
        name: The factory's function name, e.g. ``"support_triage"``.

    Returns:
        The manifest.

    Raises:
        KeyError: ``name`` is not an example.
    """
    return EXAMPLE_MANIFESTS[name]
