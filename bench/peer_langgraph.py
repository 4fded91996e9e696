"""LangGraph's ``AsyncPostgresSaver`` (``langgraph-checkpoint-postgres``) doing the same resume+save cycle.

    saver = LangGraphCycle(url, participants, shared=False)
    await saver.setup(workers=16)
    done = await saver.cycle(worker=0, n=20)
    await saver.close()

A cycle is what a LangGraph graph does around a step, as documented: ``aget_tuple`` reads the thread's
latest checkpoint (its channel values deserialized), then ``aput`` writes the next checkpoint holding
the same participants' states (as LangGraph stores a channel value: msgpack in ``checkpoint_blobs``)
with a new channel version. Each task has a saver of its own (``from_conn_string``: one connection),
or, with ``shared``, every task uses one saver, which serialises them on its connection's lock.
LangGraph keeps every checkpoint (its history), so its tables grow while the benchmark runs, as
they would in use. Needs the ``bench`` extra: ``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import contextlib
from typing import Any


def available() -> str | None:
    """``None`` when the package imports; otherwise what to install."""
    try:
        import langgraph.checkpoint.postgres.aio  # noqa: F401
    except ImportError:
        return "langgraph-checkpoint-postgres (pip install -e '.[bench]')"
    return None


def stored_bytes(participants: dict[str, Any]) -> int:
    """How many bytes LangGraph's default serializer makes of the participants' states (its blob)."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return len(JsonPlusSerializer().dumps_typed(participants)[1])


class LangGraphCycle:
    """Resume+save cycles through ``AsyncPostgresSaver``, one thread per worker."""

    def __init__(self, url: str, participants: dict[str, Any], *, shared: bool = False) -> None:
        self.url, self.participants, self.shared = url, participants, shared
        self.savers: list[Any] = []
        self._stack = contextlib.AsyncExitStack()

    async def setup(self, workers: int) -> None:
        """Open the savers (one, or one per worker) and create LangGraph's tables."""
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        for _ in range(1 if self.shared else workers):
            self.savers.append(await self._stack.enter_async_context(AsyncPostgresSaver.from_conn_string(self.url)))
        await self.savers[0].setup()

    async def cycle(self, worker: int, n: int) -> int:
        """``n`` cycles of worker ``worker``'s thread: read the latest checkpoint, write the next one."""
        saver = self.savers[0 if self.shared else worker]
        config = {"configurable": {"thread_id": f"{'shared' if self.shared else 'own'}-{worker}", "checkpoint_ns": ""}}
        for _ in range(n):
            found = await saver.aget_tuple(config)
            values, version = self.participants, None
            if found is not None:
                values = found.checkpoint["channel_values"]["participants"]
                version = found.checkpoint["channel_versions"]["participants"]
            await self._put(saver, found.config if found is not None else config, values, version)
        return n

    @staticmethod
    async def _put(saver: Any, config: Any, values: dict[str, Any], version: str | None) -> None:
        from langgraph.checkpoint.base import empty_checkpoint

        checkpoint = empty_checkpoint()
        new_version = saver.get_next_version(version, None)
        checkpoint["channel_values"] = {"participants": values}
        checkpoint["channel_versions"] = {"participants": new_version}
        await saver.aput(config, checkpoint, {"source": "loop", "step": 1}, {"participants": new_version})

    async def close(self) -> None:
        """Close every saver's connection."""
        await self._stack.aclose()
        self.savers.clear()
