"""The dry run: what an erasure request would find in every store, with nothing changed and nothing stored.

    from teamstore.erasure import DeletionCoordinator

    receipt = await DeletionCoordinator(engine, transcripts).run("alice@example.com", dry_run=True)
    print(receipt.stores["resume_state"].status)     # would_erase, or no_match

:class:`teamstore.erasure.coordinator.DeletionCoordinator` checks what it is given as a run would and builds the
steps' context (the user's subject, or the one a held request keeps); this module enumerates each step over it
and says what the receipt of a request filed now would hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from teamstore.db.clock import database_now
from teamstore.erasure.receipt import (
    Receipt,
    RequestStatus,
    StepStatus,
    StoreResult,
    remains_elsewhere,
    subject_hash,
)
from teamstore.erasure.settings import ErasureSettings
from teamstore.erasure.steps import Step, StepContext
from teamstore.erasure.steps.done_stores import planned
from teamstore.erasure.stores import TRANSCRIPTS, check_store
from teamstore.erasure.verdict import key_destroyed
from teamstore.export.nearby import near_match
from teamstore.keys.status import backups_unreadable_by
from teamstore.settings import Settings


async def planned_receipt(
    ctx: StepContext, steps: Sequence[Step], settings: Settings, knobs: ErasureSettings, *, user_id: str,
    reason: str | None, requested_by: str | None,
) -> Receipt:
    """What a request would find over ``ctx`` (which names no request), with no request id: none is stored, so
    none could be looked up later. Its times are those of a request received now.

    Raises:
        TranscriptStoreMismatch: ``ctx``'s transcript store is not one that holds the subject's transcripts.
        StoreUnavailable: A store could not be read.
    """
    await check_store(ctx, settings.transcript_retention_days)  # a count from the wrong store misleads
    stores = {step.name: await _planned(step, ctx) for step in steps}
    now = await database_now(ctx.engine)  # as a request filed now would be received, on Postgres the server's
    found = any(result.status is not StepStatus.NO_MATCH for result in stores.values())
    bound = await backups_unreadable_by(ctx.engine, settings, now)
    return Receipt(
        request_id=None, status=RequestStatus.DRY_RUN, subject_hash=subject_hash(ctx.subject_key, knobs),
        received_at=now, due_at=now + timedelta(days=knobs.due_days), reason=reason, stores=stores,
        remains_elsewhere=remains_elsewhere(now, knobs, settings.capture_message_content,
                                            bound if key_destroyed(stores) else None, now=now,
                                            matched=found, planned=True),
        requested_by=requested_by, near_match=None if found else await near_match(ctx.engine, user_id),
    )


async def _planned(step: Step, ctx: StepContext) -> StoreResult:
    """What ``step`` would find; for the transcripts, with the done stores a real pass would list again
    (:func:`teamstore.erasure.steps.done_stores.planned`), and those beyond its reach, named."""
    counts, detail = await step.enumerate(ctx), None
    if step.name == TRANSCRIPTS and ctx.subject_key is not None:
        done, detail = await planned(ctx)
        counts = counts.plus(done)
    return StoreResult(status=StepStatus.WOULD_ERASE if counts.total else StepStatus.NO_MATCH, counts=counts,
                       detail=detail)
