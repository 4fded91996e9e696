"""User memory as erasure reaches it: a user's summaries and facts, counted and deleted on erasure's
connection.

    from teamstore.memory.erasure import USER_MEMORY

    async with engine.begin() as conn:                      # erasure's own transaction
        rows, nbytes = await USER_MEMORY.count(conn, "alice")
        await USER_MEMORY.delete(conn, "alice")
        ...                                                 # erasure records the step, then commits

Rows are matched by the exact user id, every scope. Erasure fences the user first
(:mod:`teamstore.db.fence`), so no memory is written while it counts and deletes.
"""

from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from teamstore.memory.schema import facts, memories


class UserMemoryRows:
    """A user's rows in both memory tables: the facts (their values' bytes) and the summaries."""

    async def count(self, conn: AsyncConnection, user_id: str) -> tuple[int, int]:
        """How many rows ``user_id`` has in the two tables, and the bytes of their values and summaries."""
        total_rows = total_bytes = 0
        for table, size in ((facts, facts.c.value), (memories, memories.c.summary)):
            rows, nbytes = (await conn.execute(
                select(func.count(), func.coalesce(func.sum(func.length(size)), 0))
                .select_from(table).where(table.c.user_id == user_id))).one()
            total_rows, total_bytes = total_rows + int(rows), total_bytes + int(nbytes or 0)
        return total_rows, total_bytes

    async def delete(self, conn: AsyncConnection, user_id: str) -> None:
        """Delete ``user_id``'s summaries and facts (committed with the caller's transaction).

        The memory rows first, as a write takes them: a write that began before the fence finishes first, and
        the facts it added are deleted with the rest (taken the other way round, they stayed behind).
        """
        for table in (memories, facts):
            await conn.execute(delete(table).where(table.c.user_id == user_id))


USER_MEMORY = UserMemoryRows()
"""Everything kept about a user between sessions: summaries and facts, every scope."""
