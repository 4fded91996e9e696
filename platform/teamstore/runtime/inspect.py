"""Read-only views of stored sessions for people and dashboards (no content, only shape and size).

    from teamstore.runtime.inspect import describe_session

    info = describe_session(row)   # team, versions, per persisted agent: messages, bytes; a run's checkpoint
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from teamstore.errors import StateRejected
from teamstore.state.base import StoredSession
from teamstore.state.envelope import decode, is_sealed_text

SEALED = "sealed (a listing opens no state: `teamstore sessions show` opens it)"
"""What a state or checkpoint a listing left sealed reads as: it is not unreadable, only not opened."""


def _message_count(state: Mapping[str, Any]) -> int:
    agent_state = state.get("agent_state", state)
    context = agent_state.get("llm_context", {}) if isinstance(agent_state, Mapping) else {}
    messages = context.get("messages", []) if isinstance(context, Mapping) else []
    buffer = state.get("message_buffer", [])
    # A damaged row (messages null or a number) still counts as what can be read of it, never a crash.
    return (len(messages) if isinstance(messages, list) else 0) + (len(buffer) if isinstance(buffer, list) else 0)


def describe_agents(row: StoredSession) -> dict[str, dict[str, int]] | str:
    """Per persisted agent, stored messages and state bytes; a reason string if the blob is unreadable, or
    :data:`SEALED` if it was not opened (a listing's rows)."""
    if row.state is None:
        return {}
    if is_sealed_text(row.state):  # not opened: the row's defects say why, if it was tried
        return f"unreadable ({'; '.join(row.defects)})" if row.defects else SEALED
    try:
        participants = decode(row.state).get("participants", {})
    except StateRejected as exc:
        return f"unreadable ({exc.reason})"
    if not isinstance(participants, dict):
        return "unreadable (no participants)"
    return {
        name: {"messages": _message_count(state), "bytes": len(json.dumps(state).encode())}
        for name, state in participants.items()
        if isinstance(state, Mapping)
    }


def describe_checkpoint(row: StoredSession) -> dict[str, Any] | str | None:
    """The run in flight or interrupted whose checkpoint the row holds (its id, last completed turn, ``bytes``
    as stored and ``opened_bytes`` opened, as the state's), ``None`` without one, a reason string if it is
    unreadable, or :data:`SEALED` if it was not opened."""
    if row.checkpoint is None:
        return None
    if row.checkpoint_unreadable is not None:
        return f"unreadable ({row.checkpoint_unreadable})"
    if is_sealed_text(row.checkpoint):
        return SEALED
    try:
        payload = decode(row.checkpoint) if isinstance(row.checkpoint, str) else None
    except StateRejected as exc:
        return f"unreadable ({exc.reason})"
    if payload is None or payload.get("kind") != "checkpoint":
        return "unreadable (not a checkpoint)"
    return {"run_id": payload.get("run_id"), "last_turn": payload.get("turn"),
            "interruptions": payload.get("interruptions"), "opened_bytes": row.checkpoint_bytes,
            "bytes": row.checkpoint_bytes if row.stored_checkpoint_bytes is None else row.stored_checkpoint_bytes}


def describe_session(row: StoredSession) -> dict[str, Any]:
    """A JSON-ready description of a stored session: ``state_bytes`` is the state's size as stored (sealed and
    compressed), ``opened_state_bytes`` its size opened (``None`` when it was not: a listing's rows, or a state
    that does not open)."""
    return {
        "user_id": row.user_id,
        "session_id": row.session_id,
        "team": row.team,
        "team_version": row.team_version,
        "schema_version": row.schema_version,
        "agentchat_version": row.agentchat_version,
        "row_version": row.row_version,
        "state_bytes": row.state_bytes if row.stored_bytes is None else row.stored_bytes,
        "opened_state_bytes": None if row.state is not None and is_sealed_text(row.state) else row.state_bytes,
        "agents": describe_agents(row),
        "checkpoint": describe_checkpoint(row),
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "expires_at": row.expires_at,
    }
