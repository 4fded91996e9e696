"""What the memory tables hold of a user, read (and a first write's leftover facts deleted, a forget recorded) on
the caller's connection, inside the store's transactions.

    from teamstore.memory.kept import facts_before, what_is_kept

    async with engine.begin() as conn:
        kept = await facts_before(conn, "alice", "helpdesk", data_key, first=False)   # name -> (type, JSON text)
        hint = await what_is_kept(conn, "alice", None)   # what a forget of a fact not kept says is kept
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select, true, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from teamstore.db.clock import shared_now
from teamstore.db.fence import erasing, forgetting
from teamstore.keys.service import DataKey
from teamstore.memory.schema import facts, memories
from teamstore.memory.sealing import fact_context, opened_under
from teamstore.memory.statements import (
    expired_memory,
    forget_record,
    left_over,
    of_user,
    user_keyed,
    user_stored,
)


async def what_is_kept(conn: AsyncConnection, user_id: str, scope: str | None) -> str:
    """What :meth:`MemoryStore.show` lists of the user's memory, said when a fact named is not kept: the facts;
    else whether a summary (or only the writer's last failure) is, which forgetting everything still removes."""
    now = shared_now(conn.dialect.name)  # the clock show judges expiry by
    # Not a leftover fact (the user cannot see it), nor one of a memory past its expiry.
    shown = select(facts.c.name).where(*of_user(facts, user_id, scope), ~left_over(), ~expired_memory(now))
    kept = sorted(set((await conn.execute(shown)).scalars().all()))
    if kept:
        return f"the facts kept are: {', '.join(kept)}"
    rows = select(memories.c.version).where(*of_user(memories, user_id, scope), memories.c.expires_at > now)
    versions = (await conn.execute(rows)).scalars().all()
    under = " under the scope given" if scope else ""
    if any(version != 0 for version in versions):
        return f"no fact is kept about this user{under}, only a summary: forgetting everything (--all) drops it"
    if versions:  # rows of version 0 only: the writer failed before it ever wrote
        return f"nothing is kept about this user{under} but the memory writer's last failure"
    return f"nothing is kept about this user{under}"


async def record_forget(conn: AsyncConnection, user_id: str, scope: str | None, *, sealed: bool, removed: bool
                        ) -> str | None:
    """Record a forget of ``user_id``'s memory under ``scope``, unless an erasure holds the user or erased them, or
    the retention sweep holding them destroyed their data key; why it was not recorded (``None``: it was), said to
    whoever asked for the forget.

    An erased user is told by what an erasure removes and a session makes before it reads its writer's bound: with
    ``sealed`` memory, the data key (:func:`~teamstore.memory.statements.user_keyed`); without, anything of theirs
    stored (:func:`~teamstore.memory.statements.user_stored`), or ``removed``: the forget itself deleted some (which,
    read after its deletes, would be gone).
    """
    if sealed:
        known, why = user_keyed(user_id), "they have no data key"
    else:
        known, why = (true() if removed else user_stored(user_id)), "nothing of theirs is stored"
    if (await conn.execute(forget_record(conn.dialect.name, user_id, scope, known))).first() is not None:
        return None
    if await conn.scalar(select(erasing(user_id))):
        return ("nothing was recorded of the forget: an erasure request holds the user, and a record would keep "
                "their id past it")
    if await conn.scalar(select(forgetting(user_id))):
        return ("nothing was recorded of the forget: the retention sweep is forgetting the user, as nothing of "
                f"theirs is kept ({why}: no writer of theirs can write), and a record would keep the id it removes")
    return (f"nothing was recorded of the forget: the user is erased, or has yet to open a session ({why}), and a "
            "record would keep the id an erasure removed")


async def facts_before(
    conn: AsyncConnection, user_id: str, scope: str, data_key: DataKey | None, *, first: bool
) -> dict[str, tuple[str, str | None]]:
    """The facts a write keeps beside those it names (:func:`kept_facts`). A first write keeps none: facts kept
    with no memory written are left over from one that no longer exists, and go (merged in, they would come
    back as the user's memory)."""
    if first:
        await conn.execute(delete(facts).where(*of_user(facts, user_id, scope)))
        return {}
    return await kept_facts(conn, user_id, scope, data_key)


async def kept_facts(
    conn: AsyncConnection, user_id: str, scope: str, data_key: DataKey | None
) -> dict[str, tuple[str, str | None]]:
    """Each fact kept under ``scope``: its type and its value's JSON text, opened (``None``: it does not open)."""
    query = select(facts.c.name, facts.c.type, facts.c.value).where(*of_user(facts, user_id, scope))
    return {str(name): (str(kind), opened_under(data_key, value, fact_context(scope, str(name))))
            for name, kind, value in (await conn.execute(query)).all()}


async def delete_facts_of(conn: AsyncConnection, keys: Sequence[tuple[str, str]]) -> int:
    if not keys:
        return 0
    result = await conn.execute(delete(facts).where(tuple_(facts.c.user_id, facts.c.scope).in_(keys)))
    return int(result.rowcount or 0)
