"""Retention of the audit trail (transcripts, ledger) and of resume state, each on its own clock.

    from teamstore.audit.retention import apply_transcript_retention, sweep_all

    rule = await apply_transcript_retention(store, days=90)   # S3: a lifecycle rule on <prefix>/subjects/
    report = await sweep_all(settings, engine, store)         # transcripts, outbox, ledger, sessions, quarantine

S3 expires transcripts itself once the lifecycle rule is in place, counting from the upload; the sweep
deletes those written again (``keys migrate``, a late outbox delivery) once their first write is past
retention (:mod:`teamstore.audit.rewrites`). The local folder has no such service, so the sweep removes its
objects past retention. Transcripts still queued in the outbox go on the transcripts' clock too. Ledger rows
go after ``ledger_retention_days``, and with them the session ids recorded for sessions no ledger row names
any more; expired resume-state sessions through the state store's own sweep; quarantined states after
``quarantine_retention_days``; users' memory once its own expiry passed (set at each write: its team's
retention, else ``memory_retention_days``, after the last update), and facts left with no memory written.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.claims import purge_settled
from teamstore.audit.ledger import sweep_ledger, sweep_session_ids
from teamstore.audit.outbox import sweep_outbox
from teamstore.audit.placement import check_here
from teamstore.audit.rewrites import sweep_rewrites
from teamstore.audit.subjects import store_ever_written
from teamstore.audit.transcripts.base import Capability, TranscriptStore
from teamstore.audit.transcripts.capabilities import capability
from teamstore.db.clock import database_now
from teamstore.keys.service import KeyService
from teamstore.memory.store import MemoryStore
from teamstore.settings import Settings
from teamstore.state.base import Ending
from teamstore.state.sweep import sweep_expired_sessions, sweep_quarantine


@dataclass(frozen=True)
class SweepReport:
    """What one sweep removed."""

    transcripts: int
    outbox: int
    ledger_rows: int
    session_ids: int
    sessions: int
    quarantined: int
    memories: int
    memory_facts: int
    memory_leftover_facts: int
    transcript_cutoff: datetime
    ledger_cutoff: datetime
    quarantine_cutoff: datetime
    held_transcripts: int
    """Transcripts written again to S3, past retention, that a hold (Object Lock) keeps until a later sweep."""
    forgotten_users: int | None = 0
    """Users nothing was left of, whose subject mapping, data key and transcript-store record went
    (:mod:`teamstore.erasure.quiet`)."""
    quiet_users_kept: int | None = 0
    """Users the forgetting found quiet in the database but kept: a session opened meanwhile, a transcript is
    still in the store, or another transcript store is recorded for them (run the sweep with that one too)."""
    skipped_steps: dict[str, str] = field(default_factory=dict)
    """The steps not run, each with why (their counts are ``None``): ``forget_quiet_users`` while another sweep
    forgets them."""


Forget = Callable[[datetime], Awaitable[tuple[int, int] | None]]
"""Forgets the users nothing is left of, once the rest is swept (given the sweep's reference time); how many it
forgot, and how many it found quiet but kept, or ``None`` when another sweep is forgetting them (the
composition root hands in :func:`teamstore.erasure.quiet.forget_quiet_users`)."""
BUSY = "another retention sweep is forgetting quiet users: this one left them to it"


async def apply_transcript_retention(store: TranscriptStore, days: int) -> dict[str, Any]:
    """Enforce ``days`` of transcript retention on the store.

    Args:
        store: The transcript store.
        days: Expire objects this many days after they were written.

    Returns:
        ``backend``, ``url`` and, for S3, the lifecycle ``rule`` put on the bucket; for a local folder
        a note that ``teamstore retention sweep`` enforces it.

    Raises:
        TranscriptUnavailable: S3 refused the lifecycle configuration.
    """
    lifecycle = capability(store, Capability.LIFECYCLE_RULES)
    if lifecycle is not None:
        return {"backend": "s3", "url": store.url, "days": days, "rule": await lifecycle.apply_retention(days)}
    return {
        "backend": "local",
        "url": store.url,
        "days": days,
        "note": "a local folder has no lifecycle service: schedule `teamstore retention sweep`",
    }


async def sweep_all(
    settings: Settings, engine: AsyncEngine, store: TranscriptStore, now: datetime | None = None, *,
    keys: KeyService | None = None, ending: Ending | None = None, forget: Forget | None = None,
) -> SweepReport:
    """Remove what is past retention: expired sessions, transcripts (on S3, those written again), queued
    transcripts, ledger rows (and the session ids of sessions no ledger row names any more), quarantined states,
    expired user memory and memory facts left with no memory written
    (:meth:`teamstore.memory.store.MemoryStore.sweep`).

    Args:
        settings: ``transcript_retention_days``, ``ledger_retention_days``, ``quarantine_retention_days``.
        engine: The state database.
        store: The transcript store (on S3 only the transcripts written again are swept: its lifecycle rule
            expires the others).
        now: The reference time (tests); defaults to now on the database's clock
            (:func:`teamstore.db.clock.database_now`: on Postgres the server's, on which quarantined states are
            stamped), whatever this host's says.
        keys: Users' data keys, which open the checkpoints handed to ``ending``.
        ending: Handed each expired session that holds an interrupted run's checkpoint before it goes (the
            runtime records the run: :func:`teamstore.runtime.interruptions.ending`); first, so that what it
            records is on the same clocks as the rest.
        forget: Forgets the users nothing is left of, last, once the rest is swept.

    Returns:
        Counts per store and the cutoffs used.

    Raises:
        TranscriptFolderElsewhere: Transcripts were ever written to the folder (:func:`store_ever_written`) and
            this machine does not have it, or it was made for another database (nothing is swept: a sweep here
            would report a clean 0 and leave the folder as is).
    """
    if Capability.LOCAL_SWEEP in store.capabilities and await store_ever_written(engine, store.url):
        # Written to once, the folder is on the workers' machine for good (nothing removes it), even with no user
        # recorded there now. One never written to has nothing to sweep anywhere: 0 is the truth.
        await check_here(store, engine, doing="sweep")
    now = now or await database_now(engine)
    sessions = await sweep_expired_sessions(engine, keys=keys, ending=ending)
    transcript_cutoff = now - timedelta(days=settings.transcript_retention_days)
    ledger_cutoff = now - timedelta(days=settings.ledger_retention_days)
    if Capability.LOCAL_SWEEP in store.capabilities:
        transcripts, held = await store.sweep(transcript_cutoff), 0
    else:
        rewritten = await sweep_rewrites(engine, store, transcript_cutoff, now)
        transcripts, held = rewritten.removed, rewritten.held
    queued = await sweep_outbox(engine, transcript_cutoff)
    await purge_settled(engine)  # records of uploads that can no longer land: no transcript, not counted
    ledger_rows = await sweep_ledger(engine, ledger_cutoff)
    session_ids = await sweep_session_ids(engine, ledger_cutoff)  # the sessions no ledger row names any more
    quarantine_cutoff = now - timedelta(days=settings.quarantine_retention_days)
    quarantined = await sweep_quarantine(engine, quarantine_cutoff)
    memory = await MemoryStore(engine).sweep(now)
    quiet = await forget(now) if forget is not None else (0, 0)
    forgotten, kept = quiet if quiet is not None else (None, None)
    return SweepReport(transcripts, queued, ledger_rows, session_ids, sessions, quarantined, memory.memories,
                       memory.facts, memory.leftover_facts, transcript_cutoff, ledger_cutoff, quarantine_cutoff,
                       held, forgotten, kept, {} if quiet is not None else {"forget_quiet_users": BUSY})
