"""One offline team of every kind AgentChat 0.7 offers, as a platform team would write its factories.

    teamstore registry add kinds_round_robin --factory tests.team_kinds:round_robin \\
        --persist researcher --context-bound 20 --checkpoints every_turn --allow-source-code-tools

Each team persists one participant (``PERSISTED[kind]``) with a bounded context, and each has a ``_v2`` that
shrinks that participant's context bound: a change stored sessions do not survive.
"""

from __future__ import annotations

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import (
    DiGraphBuilder,
    GraphFlow,
    MagenticOneGroupChat,
    RoundRobinGroupChat,
    SelectorGroupChat,
    Swarm,
)
from autogen_core.tools import FunctionTool

from teamstore.context import BoundedChatCompletionContext
from teamstore.offline import OfflineChatCompletionClient

KINDS = ("round_robin", "selector", "swarm", "graph", "magentic_one")
PERSISTED = {"round_robin": "researcher", "selector": "researcher", "swarm": "frontdesk", "graph": "writer",
             "magentic_one": "researcher"}


def _client() -> OfflineChatCompletionClient:
    return OfflineChatCompletionClient(model="offline-small")


def _agent(name: str, prompt: str, *, bound: int | None = None, **kwargs: object) -> AssistantAgent:
    context = BoundedChatCompletionContext(max_messages=bound, keep_first=1) if bound else None
    return AssistantAgent(name, model_client=_client(), system_message=prompt, model_context=context,
                          description=f"The {name}.", **kwargs)  # type: ignore[arg-type]


def order_status(order_id: str) -> str:
    """The status of an order."""
    return f"order {order_id}: shipped"


def round_robin(bound: int = 20) -> RoundRobinGroupChat:
    """triage, researcher (a FunctionTool, persisted) and critic, until TERMINATE or 7 messages."""
    tool = FunctionTool(order_status, description="Look up an order's status.")
    agents = [
        _agent("triage", "You are triage. Say what kind of problem it is."),
        _agent("researcher", "You are researcher. Call order_status for the order.", bound=bound, tools=[tool]),
        _agent("critic", "You are critic. Check the fix."),
    ]
    done = MaxMessageTermination(7) | TextMentionTermination("TERMINATE")
    return RoundRobinGroupChat(agents, termination_condition=done)


def round_robin_v2() -> RoundRobinGroupChat:
    """``round_robin`` with the researcher's context bound lowered to 10: breaks stored sessions."""
    return round_robin(bound=10)


def selector(bound: int = 20) -> SelectorGroupChat:
    """A model picks the next speaker among planner, researcher (persisted) and reviewer."""
    agents = [
        _agent("planner", "You are planner. Plan the work."),
        _agent("researcher", "You are researcher. Find facts.", bound=bound),
        _agent("reviewer", "You are reviewer. Review the answer."),
    ]
    return SelectorGroupChat(
        agents, model_client=_client(), termination_condition=MaxMessageTermination(7),
        selector_prompt="Pick who speaks next among {participants}.\n{roles}\n{history}",
        allow_repeated_speaker=True,
    )


def selector_v2() -> SelectorGroupChat:
    """``selector`` with the researcher's context bound lowered to 10."""
    return selector(bound=10)


def swarm(bound: int = 20) -> Swarm:
    """frontdesk (persisted) can hand off to billing and back."""
    agents = [
        _agent("frontdesk", "You are frontdesk. Greet the customer, then hand off to billing.", bound=bound,
               handoffs=["billing"]),
        _agent("billing", "You are billing. Answer the billing question.",
               handoffs=["frontdesk"]),
    ]
    return Swarm(agents, termination_condition=MaxMessageTermination(7))


def swarm_v2() -> Swarm:
    """``swarm`` with frontdesk's context bound lowered to 10."""
    return swarm(bound=10)


def graph(bound: int = 20) -> GraphFlow:
    """intake -> classifier -> (specialist if "urgent", else writer when "routine"); specialist -> writer."""
    intake = _agent("intake", "You are intake. Restate the request.")
    classifier = _agent("classifier", "You are classifier. Say whether the request is urgent or routine.")
    specialist = _agent("specialist", "You are specialist. Fix the urgent problem.")
    writer = _agent("writer", "You are writer. Write the reply to the customer.", bound=bound)
    builder = DiGraphBuilder()
    for agent in (intake, classifier, specialist, writer):
        builder.add_node(agent)
    builder.add_edge(intake, classifier)
    builder.add_edge(classifier, specialist, condition="urgent")
    # The writer runs after the classifier or the specialist, whichever ran: "any", not AutoGen's "all".
    builder.add_edge(classifier, writer, condition="routine", activation_condition="any")
    builder.add_edge(specialist, writer, activation_condition="any")
    return GraphFlow(builder.get_participants(), graph=builder.build(),
                     termination_condition=MaxMessageTermination(9))


def graph_v2() -> GraphFlow:
    """``graph`` with the writer's context bound lowered to 10."""
    return graph(bound=10)


def magentic_one(bound: int = 20) -> MagenticOneGroupChat:
    """An orchestrator over researcher (persisted) and coder."""
    agents = [
        _agent("researcher", "You are researcher. Find facts.", bound=bound),
        _agent("coder", "You are coder. Write code."),
    ]
    return MagenticOneGroupChat(agents, model_client=_client(), max_turns=6)  # type: ignore[arg-type]


def magentic_one_v2() -> MagenticOneGroupChat:
    """``magentic_one`` with the researcher's context bound lowered to 10."""
    return magentic_one(bound=10)
