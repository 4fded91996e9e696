"""Which runs count as ended by a limit (the cost report's ``limited`` column), from AutoGen's own stop reasons."""

from __future__ import annotations

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import RoundRobinGroupChat

from teamstore.offline import OfflineChatCompletionClient
from teamstore.runtime.session import ended_by_limit


@pytest.mark.parametrize(("reason", "limited"), [
    ("Maximum number of messages 4 reached, current message count: 4", True),
    ("Token usage limit reached, total_tokens: 120, prompt_tokens: 100, completion_tokens: 20", True),
    ("Timeout of 30 seconds reached", True),
    ("Maximum number of turns 3 reached.", True),
    ("Text 'TERMINATE' mentioned", False),
    ("Text 'timeout' mentioned", False),  # the configured word is not a limit
    ("Handoff to user from triage detected.", False),
    ("Function 'approve' was executed.", False),
    ("'critic' answered", False),
    ("External termination requested", False),
    (None, False),
    # Completed on the message that also reached the cap: it completed.
    ("Text 'TERMINATE' mentioned, Maximum number of messages 4 reached, current message count: 4", False),
    ("Max rounds reached.", True),  # MagenticOne's turn limit
    # MagenticOne's model saying why the request is satisfied: completed, whatever words it uses.
    ("The router's timeout setting was raised to the maximum number of retries the user asked for.", False),
])
def test_a_run_is_limited_only_when_a_limit_stopped_it(reason: str | None, limited: bool) -> None:
    assert ended_by_limit(reason) is limited


async def test_autogen_joins_both_reasons_when_a_run_completes_on_its_last_allowed_message() -> None:
    agent = AssistantAgent("a", model_client=OfflineChatCompletionClient(), system_message="When done, say TERMINATE.")
    team = RoundRobinGroupChat([agent], termination_condition=TextMentionTermination("TERMINATE")
                               | MaxMessageTermination(2))
    result = await team.run(task="hello")
    assert "mentioned" in (result.stop_reason or "") and "Maximum number" in (result.stop_reason or "")
    assert not ended_by_limit(result.stop_reason)
