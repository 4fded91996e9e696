"""A user's memory sealed under their data key: the contexts, what a stored value opens to, and sealing the
rows written before sealing.

    from teamstore.memory.sealing import fact_context, opened, sealed

    text = sealed(data_key, '"55102"', fact_context("support_triage", "ticket_id"))   # what the column holds
    value = await opened(keys, "alice", text, fact_context("support_triage", "ticket_id"))   # '"55102"'
    done = await seal_saved_memory(engine, keys)          # `teamstore keys migrate`: {"memories": 3, "facts": 7}

A sealed value is kept in the state's envelope (codec ``aes256gcm``, :func:`teamstore.state.envelope.seal_text`),
so a row written before sealing (plain text) is told from a sealed one by its first characters, in Python and
in SQL. The context names the scope and the field (``memory/<scope>/summary``, ``memory/<scope>/fact/<name>``):
a value copied to another scope, fact or user does not open there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, exists, literal, select, tuple_, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.engine import describe_failure
from teamstore.db.fence import held
from teamstore.errors import (
    ErasureInProgress,
    KeyDestroyed,
    PayloadUnreadable,
    StateRejected,
    StoreUnavailable,
)
from teamstore.keys.passed_over import PassedOver, key_to_seal
from teamstore.keys.service import DataKey, KeyService
from teamstore.memory.schema import facts, memories
from teamstore.state.envelope import SEALED_PREFIX, is_sealed_text, seal_text, sealed_bytes


def summary_context(scope: str) -> str:
    """The sealed context of a memory's summary."""
    return f"memory/{scope}/summary"


def fact_context(scope: str, name: str) -> str:
    """The sealed context of a fact's value."""
    return f"memory/{scope}/fact/{name}"


@dataclass(frozen=True)
class Unopened:
    """A sealed value that does not open, and why: it reads as damaged, and is given to no model."""

    why: str


def sealed(data_key: DataKey | None, text: str, where: str) -> str:
    """``text`` sealed under ``data_key`` for ``where``, as the column holds it; as it is without a key."""
    if data_key is None:
        return text
    return seal_text(data_key.seal(text.encode("utf-8"), where))


async def opened(keys: KeyService | None, user_id: str, stored: Any, where: str) -> Any:
    """What ``stored`` holds: the plain text of a sealed value, an :class:`Unopened` when it does not open, and
    anything else (a value written before sealing, or damaged) as it is, to be judged where it is read.

    Raises:
        KeyUnavailable, DataKeyDamaged: The user's data key cannot be had now (the read fails, as a state's).
    """
    if not is_sealed_text(stored):
        return stored
    if keys is None:
        return Unopened("it is sealed, and this store was built without the users' keys")
    try:
        blob = sealed_bytes(stored)
        assert blob is not None
        return (await keys.open(user_id, blob, where)).decode("utf-8")
    except (PayloadUnreadable, KeyDestroyed) as exc:
        return Unopened(exc.message)
    except (StateRejected, UnicodeDecodeError) as exc:
        return Unopened(str(exc))


def opened_under(data_key: DataKey | None, stored: Any, where: str) -> str | None:
    """The plain text ``stored`` holds, opened under ``data_key`` (no I/O: a write compares what it writes with
    what is kept); ``None`` when it does not open there."""
    if not is_sealed_text(stored):
        return stored if isinstance(stored, str) else None
    if data_key is None:
        return None
    try:
        blob = sealed_bytes(stored)
        assert blob is not None
        return data_key.open(blob, where).decode("utf-8")
    except (PayloadUnreadable, KeyDestroyed, StateRejected, UnicodeDecodeError):
        return None


async def seal_saved_memory(
    engine: AsyncEngine, keys: KeyService, batch: int = 200, *, passed: PassedOver | None = None
) -> dict[str, int]:
    """Seal the summaries and fact values written before sealing (``teamstore keys migrate``).

    Each value is rewritten only if it is still as read (a write meanwhile sealed its own), without a new
    version; a user an erasure fences is left to the erasure.

    Args:
        engine: The state database.
        keys: The users' data keys.
        batch: Rows read at a time.
        passed: Where a user whose key row does not open (damaged, or under a KEK KMS will not use) is kept,
            their memory left as it is; without it, that raises.

    Returns:
        How many summaries (``memories``) and fact values (``facts``) were sealed.

    Raises:
        KeyUnavailable: The key-encryption key could not be used (rerun: what was sealed stays sealed).
        DataKeyDamaged, KeyDestroyed: A user's key row does not open, and no ``passed`` was given.
        StoreUnavailable: The database failed.
    """
    done = {"memories": 0, "facts": 0}
    for table, column, name in ((memories, "summary", "memories"), (facts, "value", "facts")):
        keyed = [table.c.user_id, table.c.scope, *([table.c.name] if table is facts else [])]
        after: tuple[Any, ...] | None = None
        while rows := await _plain_values(engine, table, keyed, column, after, batch):
            for row in rows:
                *key, plain = row
                where = summary_context(key[1]) if table is memories else fact_context(key[1], key[2])
                try:
                    data_key = await key_to_seal(keys, key[0], exists().where(
                        *(c == v for c, v in zip(keyed, key, strict=True))), passed)
                except ErasureInProgress:
                    continue  # fenced since the read (and no key yet): left to the erasure
                if data_key is None:
                    continue  # the row went since the read (an erasure ended meanwhile), or its user is passed over
                text = sealed(data_key, plain, where)
                done[name] += await _reseal(engine, table, keyed, key, column, plain, text)
            after = tuple(rows[-1][:-1])
    return done


async def _plain_values(
    engine: AsyncEngine, table: Table, keyed: list[Any], column: str, after: tuple[Any, ...] | None, batch: int
) -> list[Any]:
    value = table.c[column]
    # An empty summary (a row holding only the writer's failure) holds no words: nothing to seal.
    query = select(*keyed, value).where(value != "", ~value.startswith(SEALED_PREFIX), ~held(table.c.user_id))
    if after is not None:
        query = query.where(tuple_(*keyed) > tuple_(*(literal(v) for v in after)))
    try:
        async with engine.connect() as conn:
            return [tuple(r) for r in (await conn.execute(query.order_by(*keyed).limit(batch))).all()]
    except SQLAlchemyError as exc:
        raise _unavailable(exc, "read the memory written before sealing") from exc


async def _reseal(
    engine: AsyncEngine, table: Table, keyed: list[Any], key: list[Any], column: str, old: str, new: str
) -> int:
    same = [c == v for c, v in zip(keyed, key, strict=True)]
    stmt = update(table).where(*same, table.c[column] == old, ~held(table.c.user_id)).values({column: new})
    try:
        async with engine.begin() as conn:
            return int((await conn.execute(stmt)).rowcount or 0)
    except SQLAlchemyError as exc:
        raise _unavailable(exc, "seal memory written before sealing") from exc


def _unavailable(exc: SQLAlchemyError, action: str) -> StoreUnavailable:
    return StoreUnavailable(f"could not {action}: {describe_failure(exc)}",
                            hint="check the database, then run `teamstore keys migrate` again")
