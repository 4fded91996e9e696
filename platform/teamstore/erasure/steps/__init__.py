"""One erasure step per store: enumerate, delete, then re-query independently.

    from teamstore.erasure.steps import STEP_ORDER, StepContext, build_steps

    for step in build_steps():
        counts = await step.enumerate(ctx)            # dry run: read only
        result = await step.erase(ctx, prior=None)    # delete (recording what it found), status DELETED
        left = await step.remaining(ctx)              # verification: what is still there

The order is fixed: the user's data key first (from then on every copy of their sealed data is beyond use,
whatever a later step manages), then resume state, quarantine, user memory, transcripts, outbox, the records
of transcripts written again, ledger, session ids, export records, and the subject mapping last, because every
earlier step needs the subject key the mapping holds (the request keeps a copy too).
"""

from __future__ import annotations

from teamstore.erasure.steps.base import Notice, Progress, Step, StepContext

__all__ = ["STEP_ORDER", "Notice", "Progress", "Step", "StepContext", "build_steps"]

STEP_ORDER = ("keys", "resume_state", "quarantine", "memory", "transcripts", "outbox", "rewrites", "ledger",
              "session_ids", "exports", "subject")


def build_steps() -> list[Step]:
    """The steps in :data:`STEP_ORDER`."""
    from teamstore.erasure.steps.database import (
        exports_step,
        ledger_step,
        memory_step,
        outbox_step,
        quarantine_step,
        resume_step,
        rewrites_step,
        session_ids_step,
        subject_step,
    )
    from teamstore.erasure.steps.keys import KeyStep
    from teamstore.erasure.steps.transcripts import TranscriptStep

    return [KeyStep(), resume_step(), quarantine_step(), memory_step(), TranscriptStep(), outbox_step(),
            rewrites_step(), ledger_step(), session_ids_step(), exports_step(), subject_step()]
