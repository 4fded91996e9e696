"""Validate stored agent states against AutoGen's typed state models before anything is loaded.

AutoGen's ``agent.load_state()`` accepts ``{"garbage": 1}`` or a whole team state and silently forgets
everything; it never checks the ``version`` field. Here a state must have the type, the keys and the
version of its agent's state model, and its model context must parse message by message.

    from teamstore.state.validate import validate_participant

    validate_participant("researcher", "autogen_agentchat.agents.AssistantAgent", "team", state)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autogen_agentchat.messages import BaseChatMessage, MessageFactory
from autogen_agentchat.state import (
    AssistantAgentState,
    BaseState,
    ChatAgentContainerState,
    SocietyOfMindAgentState,
)
from autogen_core.model_context import ChatCompletionContextState
from pydantic import ValidationError

from teamstore.errors import StateRejected

STATE_MODELS: dict[str, type[BaseState]] = {
    "autogen_agentchat.agents.AssistantAgent": AssistantAgentState,
    "autogen_agentchat.agents.SocietyOfMindAgent": SocietyOfMindAgentState,
}
_FACTORY = MessageFactory()


def _refuse(name: str, why: str) -> StateRejected:
    return StateRejected("corrupt", f"{name}: {why}")


def _check_shape(name: str, state: Any, model: type[BaseState]) -> Mapping[str, Any]:
    if not isinstance(state, Mapping):
        raise _refuse(name, f"state is a {type(state).__name__}, expected an object")
    expected = model.__name__
    if state.get("type") != expected:
        raise _refuse(name, f"state type is {state.get('type')!r}, expected {expected!r}")
    unknown = set(state) - set(model.model_fields)
    if unknown:
        raise _refuse(name, f"unexpected keys {sorted(unknown)} in {expected}")
    version = model.model_fields["version"].default
    if state.get("version") != version:
        raise _refuse(name, f"{expected} version {state.get('version')!r}, this AutoGen reads {version!r}")
    return state


def validate_agent_state(name: str, provider: str, state: Any) -> None:
    """Check one agent's own state (what ``agent.save_state()`` returns).

    Raises:
        StateRejected: with reason ``corrupt`` and the agent's name in the detail.
    """
    model = STATE_MODELS.get(provider)
    if model is None:
        if not isinstance(state, Mapping) or not str(state.get("type", "")).endswith("State"):
            raise _refuse(name, "state carries no AutoGen state type")
        return
    checked = _check_shape(name, state, model)
    try:
        model.model_validate(checked)
        if model is AssistantAgentState:
            context = checked.get("llm_context", {})
            if not isinstance(context, Mapping) or set(context) - {"messages"}:
                raise _refuse(name, "llm_context is not a model-context state")
            ChatCompletionContextState.model_validate(context)
    except ValidationError as exc:
        raise _refuse(name, f"does not parse as {model.__name__}: {exc.errors()[0]['msg']}") from exc
    except StateRejected:
        raise
    except Exception as exc:  # a field's own decoder failed (an image whose data is not an image: OSError)
        raise _refuse(name, f"does not parse as {model.__name__} ({type(exc).__name__})") from exc


def validate_container_state(name: str, provider: str, state: Any) -> None:
    """Check a team participant's state: the container AutoGen wraps it in, then the agent inside.

    Raises:
        StateRejected: with reason ``corrupt``.
    """
    checked = _check_shape(name, state, ChatAgentContainerState)
    buffer = checked.get("message_buffer", [])
    if not isinstance(buffer, list):
        raise _refuse(name, "message_buffer is not a list")
    for i, message in enumerate(buffer):
        if not isinstance(message, Mapping):  # AutoGen's factory would fail on it with an AttributeError
            raise _refuse(name, f"message_buffer[{i}] is a {type(message).__name__}, not an AgentChat message")
        try:
            created = _FACTORY.create(message)
        except Exception as exc:  # pydantic's errors, or a field's own decoder's (an image that is none: OSError)
            raise _refuse(name, f"message_buffer[{i}] is not an AgentChat message ({type(exc).__name__})") from exc
        if not isinstance(created, BaseChatMessage):  # an event: AutoGen's load_state raises ValueError on it
            raise _refuse(name, f"message_buffer[{i}] is a {type(created).__name__}, not a chat message")
    validate_agent_state(name, provider, checked.get("agent_state"))


def validate_participant(name: str, provider: str, kind: str, state: Any) -> None:
    """Validate a stored participant state for a team (``kind="team"``) or a single agent."""
    if kind == "team":
        validate_container_state(name, provider, state)
    else:
        validate_agent_state(name, provider, state)
