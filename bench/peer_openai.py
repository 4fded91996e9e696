"""The OpenAI Agents SDK's ``SQLAlchemySession`` doing a conversation turn's load and save.

    session = OpenAISessionCycle(url, participants)
    await session.setup(workers=16)
    done = await session.cycle(worker=0, n=20)
    await session.close()

The SDK keeps a conversation as one row per item, not a state: a turn reads the latest items
(``get_items(limit=...)``) and appends what the turn produced (``add_items``), as its ``Runner`` does.
Here a session holds the persisted participant's messages (the same conversation as teamstore's
state, about the same bytes as JSON items); each cycle reads them all back and appends one run's worth
(the last four messages: the task and three replies). So it reads as much as teamstore's cycle and
writes less. One engine (asyncpg, as the SDK documents, a pool of one connection per worker) serves
every session, as a service would share it. Needs the ``bench`` extra: ``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import json
from typing import Any


def available() -> str | None:
    """``None`` when the package imports; otherwise what to install."""
    try:
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession  # noqa: F401
    except ImportError:
        return "openai-agents[sqlalchemy] (pip install -e '.[bench]')"
    return None


def conversation_items(participants: dict[str, Any]) -> list[dict[str, str]]:
    """The persisted participants' model-context messages as the SDK's input items (role, content)."""
    items: list[dict[str, str]] = []
    for state in participants.values():
        agent = state.get("agent_state", state)
        for message in agent["llm_context"]["messages"]:
            role = "assistant" if message["type"] == "AssistantMessage" else "user"
            items.append({"role": role, "content": str(message["content"])})
    return items


def stored_bytes(participants: dict[str, Any]) -> tuple[int, int]:
    """(rows, bytes of JSON) the SDK stores for the participants' conversation."""
    items = conversation_items(participants)
    return len(items), sum(len(json.dumps(item, separators=(",", ":"))) for item in items)


class OpenAISessionCycle:
    """Turns through ``SQLAlchemySession``, one session per worker, on one shared engine."""

    TURN = 4  # items a run adds: the task and three replies

    def __init__(self, url: str, participants: dict[str, Any]) -> None:
        self.url = url.replace("postgresql://", "postgresql+asyncpg://", 1)
        self.items = conversation_items(participants)
        self.sessions: list[Any] = []
        self.engine: Any = None

    async def setup(self, workers: int) -> None:
        """Create the engine, the SDK's tables, and each worker's session holding the conversation."""
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
        from sqlalchemy.ext.asyncio import create_async_engine

        self.engine = create_async_engine(self.url, pool_size=workers, max_overflow=0)
        for worker in range(workers):
            session = SQLAlchemySession(f"user-{worker}-{workers}", engine=self.engine, create_tables=True)
            if not await session.get_items(limit=1):
                await session.add_items(self.items)
            self.sessions.append(session)

    async def cycle(self, worker: int, n: int) -> int:
        """``n`` turns of worker ``worker``'s session: read the conversation, append one run's items."""
        session = self.sessions[worker]
        for _ in range(n):
            history = await session.get_items(limit=len(self.items))
            await session.add_items(history[-self.TURN:])
        return n

    async def close(self) -> None:
        """Dispose of the engine."""
        if self.engine is not None:
            await self.engine.dispose()
        self.sessions.clear()
