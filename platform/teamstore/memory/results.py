"""What the memory store's calls return and raise: what a forget and a sweep removed, the record of a forget, the
errors a write is refused with, and the transaction that says whether a change the database failed landed.

    from teamstore.memory.results import changing

    async with changing(engine, "forget the user's memory") as conn:   # StoreUnavailable, saying if it landed
        ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from teamstore.db.engine import describe_failure, failure_hint, unreachable
from teamstore.errors import ErasureInProgress, MemoryForgotten, StoreUnavailable


@dataclass(frozen=True)
class Forgotten:
    """What a forget removed: memory rows (summaries) and facts."""

    memories: int
    facts: int
    unrecorded: str | None = None
    """Why no record of the forget was kept (``None``: it was): an erasure holds the user, or erased them, or the
    retention sweep forgetting them destroyed their data key."""


@dataclass(frozen=True)
class Swept:
    """What the retention sweep removed: memories past their expiry (``memories``) with their ``facts``, and
    ``leftover_facts``, facts kept with no memory written (what is left of a memory that no longer exists)."""

    memories: int
    facts: int
    leftover_facts: int
    forgets: int = 0
    """Records of when a user forgot, dropped once older than :data:`~teamstore.memory.statements.FORGETS_KEPT`."""


@dataclass(frozen=True)
class ForgetRecord:
    """When ``user_id`` last forgot memory under ``scope`` (``None``: every scope): kept a while, so that a writer
    whose messages were said before it writes nothing."""

    user_id: str
    scope: str | None
    forgotten_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (an export's ``memory.json``)."""
        at = self.forgotten_at
        return {"scope": self.scope, "forgotten_at": at.isoformat() if isinstance(at, datetime) else None}


def unavailable(exc: SQLAlchemyError, action: str) -> StoreUnavailable:
    return StoreUnavailable(f"could not {action}: {describe_failure(exc)}",
                            hint=f"{failure_hint(exc)}; no memory was changed")


def landing_unknown(exc: SQLAlchemyError, action: str) -> StoreUnavailable:
    return StoreUnavailable(
        f"could not {action}: {describe_failure(exc)}; whether the write left unanswered landed is not known",
        hint=f"{failure_hint(exc)}; then see what is kept: `teamstore memory show --user ...` "
        "(platform.show_memory), and run it again if it did not land")


@asynccontextmanager
async def changing(engine: AsyncEngine, action: str) -> AsyncIterator[AsyncConnection]:
    """A transaction that changes memory, committed as the block ends. A database failure is raised as
    :class:`StoreUnavailable`, saying nothing was changed only when that is known: not when it came as the
    transaction committed (the commit may have reached the database, its answer not come back), nor when the
    connection was lost once the transaction had begun."""
    began = committing = False
    try:
        async with engine.begin() as conn:
            began = True
            yield conn
            committing = True
    except SQLAlchemyError as exc:
        if committing or (began and unreachable(exc)):
            raise landing_unknown(exc, action) from exc
        raise unavailable(exc, action) from exc


def fenced_error() -> ErasureInProgress:
    return ErasureInProgress("an erasure request is open for this user: no memory is written for them",
                             hint="nothing to do: the erasure removes the user's memory with the rest")


def forgotten_error() -> MemoryForgotten:
    return MemoryForgotten(
        "the user forgot memory under this scope after the messages this write comes from were said (or they were "
        "said longer ago than forgets are kept): nothing was written",
        hint="nothing to do: the user's next session writes its memory from what is said after the forget")


def erased_error() -> ErasureInProgress:
    return ErasureInProgress("the user was erased while their memory was being written: nothing was written",
                             hint="nothing to do: an erasure removed the user's memory with the rest")
