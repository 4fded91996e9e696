"""One erasure step per store: enumerate, delete, then re-query independently.

    from teamstore.erasure.steps import STEP_ORDER, StepContext, build_steps

    for step in build_steps():
        counts = await step.enumerate(ctx)            # dry run: read only
        result = await step.erase(ctx, prior=None)    # delete (recording what it found), status DELETED
        left = await step.remaining(ctx)              # verification: what is still there

The order is fixed: resume state, quarantine, transcripts, outbox, ledger, session ids, and the subject mapping last,
because every earlier step needs the subject key the mapping holds (the request keeps a copy too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.transcripts.base import TranscriptStore
from teamstore.erasure.receipt import Counts, StoreResult

Progress = Callable[[str, int, int | None], None]
"""``progress(step, done, total)``: called as a step advances (``total`` may be unknown)."""

STEP_ORDER = ("resume_state", "quarantine", "transcripts", "outbox", "ledger", "session_ids", "subject")


def _no_progress(step: str, done: int, total: int | None) -> None:
    """Progress sink that ignores updates."""


@dataclass(frozen=True)
class StepContext:
    """What every step needs: where to look and whose data to look for."""

    engine: AsyncEngine
    transcripts: TranscriptStore
    request_id: str
    user_id: str | None
    subject_key: str | None
    progress: Progress = _no_progress
    owner: str | None = None  # the coordinator's lease: step records are written only while it holds it


class Step(Protocol):
    """One store's part of an erasure."""

    @property
    def name(self) -> str:
        """The store's name in the receipt."""

    async def enumerate(self, ctx: StepContext) -> Counts:
        """Count what is stored for the user, changing nothing."""

    async def erase(self, ctx: StepContext, prior: StoreResult | None) -> StoreResult:
        """Delete what is stored for the user and record the counts (status ``deleted``).

        ``prior`` is what an interrupted earlier attempt recorded; the counts carry it forward.
        """

    async def remaining(self, ctx: StepContext) -> Counts:
        """Re-query the store independently: what is still there (``retained`` = under a hold)."""


def build_steps() -> list[Step]:
    """The steps in :data:`STEP_ORDER`."""
    from teamstore.erasure.steps.database import (
        ledger_step,
        outbox_step,
        quarantine_step,
        resume_step,
        session_ids_step,
        subject_step,
    )
    from teamstore.erasure.steps.transcripts import TranscriptStep

    return [resume_step(), quarantine_step(), TranscriptStep(), outbox_step(), ledger_step(), session_ids_step(),
            subject_step()]
