"""BoundedChatCompletionContext over many generated conversations, at every size up to ``keep_first=6``.

Conversations mix plain messages (user, agent, memory system messages) with tool exchanges of one to three
parallel calls. After every message, the list the context stores and the list it would send
(``get_messages()``) are checked against every promise in ``tests.state.conversation.assert_kept``, and
the context must keep the same list whichever way the conversation reached it (one message at a time,
``initial_messages``, ``load_state``), survive ``save_state``/``load_state`` and
``dump_component``/``load_component`` exactly, and carry on the same after them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest
from autogen_core import ComponentLoader
from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import LLMMessage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from teamstore.context import (
    BoundedChatCompletionContext,
    BoundedChatCompletionContextConfig,
    smallest_max_messages,
)
from teamstore.errors import ContextBoundInvalid
from tests.state.conversation import assert_kept, conversation

LARGEST = 12
SIZES = [(n, k) for k in range(7) for n in range(smallest_max_messages(k), LARGEST + 1)]
REFUSED = [(n, k) for k in range(7) for n in range(1, smallest_max_messages(k))]

# 0 is a plain message, 1-3 a tool exchange with that many parallel calls; up to ~40 messages.
STEPS = st.lists(st.sampled_from([0, 0, 1, 2, 3]), min_size=1, max_size=20)
EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _state_through_json(state: object) -> dict[str, object]:
    """A saved state as the store gives it back: JSON text read again."""
    return json.loads(json.dumps(state))  # type: ignore[no-any-return]


async def _same_after_round_trips(context: BoundedChatCompletionContext, n: int, k: int) -> ChatCompletionContext:
    """Restore ``context`` into a context rebuilt from its dumped component, and check it is the same."""
    dumped = context.dump_component()
    rebuilt = ComponentLoader.load_component(dumped.model_dump(mode="json"), ChatCompletionContext)
    assert isinstance(rebuilt, BoundedChatCompletionContext)
    assert rebuilt.dump_component() == dumped
    state = await context.save_state()
    await rebuilt.load_state(_state_through_json(state))
    assert await rebuilt.get_messages() == await context.get_messages()
    assert await rebuilt.save_state() == state
    return rebuilt


async def _feed_and_check(messages: Sequence[LLMMessage], n: int, k: int) -> None:
    context = BoundedChatCompletionContext(max_messages=n, keep_first=k)
    restored: ChatCompletionContext | None = None
    for i, message in enumerate(messages):
        await context.add_message(message)
        sent = await context.get_messages()
        assert_kept(sent, messages[: i + 1], n, k)
        assert (await context.save_state())["messages"] == [m.model_dump() for m in sent]  # stored == sent
        if restored is not None:  # a restored context carries on exactly as the original
            await restored.add_message(message)
            assert await restored.get_messages() == sent
        elif i == len(messages) // 2:
            restored = await _same_after_round_trips(context, n, k)
    await _same_after_round_trips(context, n, k)
    await _same_whichever_way(messages, await context.get_messages(), n, k)


async def _same_whichever_way(messages: Sequence[LLMMessage], kept: list[LLMMessage], n: int, k: int) -> None:
    """Given the whole conversation at once, through initial_messages or load_state, the context keeps
    what it kept one message at a time."""
    at_once = BoundedChatCompletionContext(max_messages=n, keep_first=k, initial_messages=list(messages))
    assert await at_once.get_messages() == kept
    loaded = BoundedChatCompletionContext(max_messages=n, keep_first=k)
    await loaded.load_state({"messages": [m.model_dump() for m in messages]})
    assert await loaded.get_messages() == kept


@pytest.mark.parametrize(("n", "k"), SIZES, ids=[f"max{n}-keep{k}" for n, k in SIZES])
@EXAMPLES
@given(steps=STEPS)
def test_every_kept_and_sent_list_keeps_every_promise(n: int, k: int, steps: list[int]) -> None:
    asyncio.run(_feed_and_check(conversation(steps), n, k))


@pytest.mark.parametrize(("n", "k"), REFUSED, ids=[f"max{n}-keep{k}" for n, k in REFUSED])
def test_every_size_that_cannot_keep_the_newest_exchange_is_refused(n: int, k: int) -> None:
    with pytest.raises(ContextBoundInvalid) as caught:
        BoundedChatCompletionContext(max_messages=n, keep_first=k)
    assert f"raise max_messages to {smallest_max_messages(k)}" in (caught.value.hint or "")
    with pytest.raises(ValidationError, match="leaves no room for a whole tool exchange"):
        BoundedChatCompletionContextConfig(max_messages=n, keep_first=k)
