"""User memory as erasure reaches it: a user's summaries and facts, and the records of when they forgot
memory, counted and deleted on erasure's connection.

    from teamstore.memory.erasure import USER_MEMORY

    async with engine.begin() as conn:                      # erasure's own transaction
        rows, nbytes = await USER_MEMORY.delete(conn, "alice")   # what it deleted
        ...                                                 # erasure records the step, then commits

Rows are matched by the exact user id, every scope. Erasure fences the user first
(:mod:`teamstore.db.fence`), so no memory write begins while it deletes. One that began before holds the user's
memory writes lock shared until it commits (:func:`teamstore.memory.statements.writes_lock`, Postgres), and the
erasure's first step (``keys``) takes it alone: it waits for the write, so by this step the write's rows (a
first write's new ones too, which this step's delete would neither see nor wait for) are committed, and deleted
and counted with the rest.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncConnection

from teamstore.memory.schema import facts, forgets, memories

# Each table with the size its rows are counted by: the summary's, a fact value's, none for a forget's time.
_SIZED: tuple[tuple[Any, Any], ...] = (
    (memories, func.length(memories.c.summary)), (facts, func.length(facts.c.value)), (forgets, literal_column("0")))


class UserMemoryRows:
    """A user's rows in the memory tables: the facts (their values' bytes), the summaries, and the records of when
    they forgot memory (no bytes of theirs: a scope and a time)."""

    async def count(self, conn: AsyncConnection, user_id: str) -> tuple[int, int]:
        """How many rows ``user_id`` has in the three tables, and the bytes of their values and summaries."""
        total_rows = total_bytes = 0
        for table, size in _SIZED:
            rows, nbytes = (await conn.execute(
                select(func.count(), func.coalesce(func.sum(size), 0))
                .select_from(table).where(table.c.user_id == user_id))).one()
            total_rows, total_bytes = total_rows + int(rows), total_bytes + int(nbytes or 0)
        return total_rows, total_bytes

    async def delete(self, conn: AsyncConnection, user_id: str) -> tuple[int, int]:
        """Delete ``user_id``'s summaries, facts and forgets (committed with the caller's transaction); how many rows
        it deleted, and their bytes, as :meth:`count` gives them.

        The memory rows first, as a write takes them: a write of an existing row that began before the fence
        finishes first, and the facts it added are deleted with the rest (taken the other way round, they
        stayed behind). A first write's new row is not waited for here: the key step, before this one, waited
        for it (see the module's docstring). What was deleted is counted from the deletes themselves, so those
        facts are on the receipt too.
        """
        total_rows = total_bytes = 0
        for table, size in _SIZED:  # the memory rows first (below)
            sizes = (await conn.execute(
                delete(table).where(table.c.user_id == user_id).returning(size))).scalars().all()
            total_rows, total_bytes = total_rows + len(sizes), total_bytes + sum(int(n or 0) for n in sizes)
        return total_rows, total_bytes


USER_MEMORY = UserMemoryRows()
"""Everything kept about a user between sessions: summaries and facts, every scope, and when they forgot."""
