"""Dump -> load round trips of the runtime's own components, which the registry stores and rebuilds."""

from __future__ import annotations

from autogen_core import ComponentLoader, ComponentModel
from autogen_core.models import ChatCompletionClient, UserMessage

from teamstore.context import BoundedChatCompletionContext
from teamstore.offline import OfflineChatCompletionClient


async def test_bounded_context_round_trips() -> None:
    context = BoundedChatCompletionContext(max_messages=5, keep_first=2)
    dumped = context.dump_component()
    assert dumped.provider == "teamstore.context.BoundedChatCompletionContext"
    loaded = ComponentLoader.load_component(dumped.model_dump(mode="json"), BoundedChatCompletionContext)
    assert isinstance(loaded, BoundedChatCompletionContext)
    assert loaded.dump_component() == dumped
    for i in range(9):
        await loaded.add_message(UserMessage(content=f"m{i}", source="user"))
    assert [m.content for m in await loaded.get_messages()] == ["m0", "m1", "m6", "m7", "m8"]


async def test_offline_client_round_trips_and_answers() -> None:
    client = OfflineChatCompletionClient(model="offline-tiny", quote_chars=10)
    dumped = client.dump_component()
    loaded = ChatCompletionClient.load_component(
        ComponentModel.model_validate(dumped.model_dump(mode="json"))
    )
    assert isinstance(loaded, OfflineChatCompletionClient)
    assert loaded.model == "offline-tiny"
    assert loaded.dump_component() == dumped
    result = await loaded.create([UserMessage(content="hello there", source="user")])
    assert result.usage.prompt_tokens > 0
    assert "offline-tiny" in str(result.content)
