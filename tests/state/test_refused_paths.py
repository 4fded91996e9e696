"""A state that is not JSON is refused naming where the value is: by the keys that were words before any user
said anything (the fields of AutoGen's and teamstore's models and of a team's own declared states, the team's
participants), and any other key by its place, since an agent of a team's own may key what it keeps by a user's
words."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from autogen_agentchat.state import BaseState
from pydantic import Field

from teamstore.errors import StateNotSerializable
from teamstore.state.envelope import check_json

WHEN = datetime(2025, 1, 1, tzinfo=UTC)


class _TopicsState(BaseState):
    """What a team's own agent declares it saves."""

    topics: dict[str, str] = Field(default_factory=dict)


@pytest.mark.parametrize(
    ("state", "names", "said"),
    [
        ({"type": "JottingsState", "jottings": {"Alice": WHEN}}, (), "agent{key 2}{key 1} holds a datetime"),
        ({"Alice": {"Bob": [WHEN]}}, (), "agent{key 1}{key 1}[0] holds a datetime"),
        ({"topics": {"router": WHEN}}, (), "agent.topics{key 1} holds a datetime"),
        ({"jottings": {"Alice": WHEN}}, ("jottings",), "agent.jottings{key 1} holds a datetime"),
        ({"llm_context": {"messages": [{"content": b"x", "source": "user"}]}}, (),
         "agent.llm_context.messages[0].content holds a bytes"),
        ({"memo": {"Alice": {1: "x"}}}, (), "agent{key 1}{key 1}{key 1} is a key of type int"),
    ],
    ids=["a first name", "nested words", "a declared state's field", "a participant", "autogen's state",
         "a key that is no string"],
)
def test_a_refused_values_path_names_only_keys_that_are_no_users_words(
    state: dict[str, object], names: tuple[str, ...], said: str
) -> None:
    assert _TopicsState.model_fields  # declared, as the team's own module would
    with pytest.raises(StateNotSerializable) as refused:
        check_json(state, "agent", names)
    assert refused.value.message.startswith(said), refused.value.message
    assert "Alice" not in str(refused.value) and "Bob" not in str(refused.value)
