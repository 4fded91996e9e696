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

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

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
from teamstore.errors import RetentionIncomplete, TeamstoreError
from teamstore.keys.service import KeyService
from teamstore.memory.store import MemoryStore
from teamstore.settings import Settings
from teamstore.state.base import Ending
from teamstore.state.sweep import sweep_expired_sessions, sweep_quarantine


@dataclass(frozen=True)
class SweepReport:
    """What one sweep removed; ``None`` for the counts of a step that failed or did not run."""

    transcripts: int | None
    outbox: int | None
    ledger_rows: int | None
    session_ids: int | None
    sessions: int | None
    quarantined: int | None
    memories: int | None
    memory_facts: int | None
    memory_leftover_facts: int | None
    transcript_cutoff: datetime
    ledger_cutoff: datetime
    quarantine_cutoff: datetime
    held_transcripts: int | None
    """Transcripts written again to S3, past retention, that a hold (Object Lock) keeps until a later sweep."""
    forgotten_users: int | None = 0
    """Users nothing was left of, whose subject mapping, data key and transcript-store record went
    (:mod:`teamstore.erasure.quiet`)."""
    quiet_users_kept: int | None = 0
    """Users the forgetting found quiet in the database but kept: a session opened meanwhile, a transcript is
    still in the store, or another transcript store is recorded for them (run the sweep with that one too)."""
    memory_forgets: int | None = 0
    """Records of when a user forgot memory, dropped once no writer they stop can still run (docs/memory.md)."""
    skipped_steps: dict[str, str] = field(default_factory=dict)
    """The steps not run, each with why (their counts are ``None``): ``forget_quiet_users`` while another sweep
    forgets them, or once the transcript step failed."""
    failed_steps: dict[str, str] = field(default_factory=dict)
    """The steps that failed, each with its error's message (their counts are ``None``): what they sweep was left
    as it was, and :class:`teamstore.errors.RetentionIncomplete` is raised once the others ran."""


Forget = Callable[[datetime], Awaitable[tuple[int, int] | None]]
"""Forgets the users nothing is left of, once the rest is swept (given the sweep's reference time); how many it
forgot, and how many it found quiet but kept, or ``None`` when another sweep is forgetting them (the
composition root hands in :func:`teamstore.erasure.quiet.forget_quiet_users`)."""
BUSY = ("another retention sweep is forgetting quiet users: this one left them to it (if none runs, the sweep's "
        "lock was left on a server connection of a transaction-mode pooler: run the sweep on a direct connection)")
FORGET = "forget_quiet_users"
T = TypeVar("T")
log = logging.getLogger(__name__)


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

    Each step runs on its own: one that fails (a transcript store refusing its deletes, a database error) is
    recorded and the next still runs, so one store's outage never keeps the others' data past retention.

    Returns:
        Counts per store and the cutoffs used.

    Raises:
        RetentionIncomplete: One or more steps failed (typed errors of theirs), once the others ran; its
            ``report`` is the :class:`SweepReport` of what ran, naming the steps that failed or were skipped.
        TranscriptFolderElsewhere: Transcripts were ever written to the folder (:func:`store_ever_written`) and
            this machine does not have it, or it was made for another database (nothing is swept: a sweep here
            would report a clean 0 and leave the folder as is).
    """
    if Capability.LOCAL_SWEEP in store.capabilities and await store_ever_written(engine, store.url):
        # Written to once, the folder is on the workers' machine for good (nothing removes it), even with no user
        # recorded there now. One never written to has nothing to sweep anywhere: 0 is the truth.
        await check_here(store, engine, doing="sweep")
    now = now or await database_now(engine)
    steps = _Steps()
    sessions = await steps.run("sessions", lambda: sweep_expired_sessions(engine, keys=keys, ending=ending))
    transcript_cutoff = now - timedelta(days=settings.transcript_retention_days)
    ledger_cutoff = now - timedelta(days=settings.ledger_retention_days)
    transcripts = await steps.run("transcripts", lambda: _sweep_transcripts(engine, store, transcript_cutoff, now))
    queued = await steps.run("outbox", lambda: sweep_outbox(engine, transcript_cutoff))
    # Records of uploads that can no longer land: no transcript, not counted.
    await steps.run("settled_uploads", lambda: purge_settled(engine))
    ledger_rows = await steps.run("ledger", lambda: sweep_ledger(engine, ledger_cutoff))
    # The sessions no ledger row names any more.
    session_ids = await steps.run("session_ids", lambda: sweep_session_ids(engine, ledger_cutoff))
    quarantine_cutoff = now - timedelta(days=settings.quarantine_retention_days)
    quarantined = await steps.run("quarantine", lambda: sweep_quarantine(engine, quarantine_cutoff))
    memory = await steps.run("memory", lambda: MemoryStore(engine).sweep(now))
    forgotten, kept = await _forget_step(steps, forget, now)
    removed, held = transcripts if transcripts is not None else (None, None)
    memories, facts, leftover, forgets = ((memory.memories, memory.facts, memory.leftover_facts, memory.forgets)
                                          if memory is not None else (None, None, None, None))
    report = SweepReport(removed, queued, ledger_rows, session_ids, sessions, quarantined, memories, facts, leftover,
                         transcript_cutoff, ledger_cutoff, quarantine_cutoff, held, forgotten, kept, forgets,
                         steps.skipped, steps.failed)
    if steps.errors:
        raise _incomplete(steps, report)
    return report


async def _sweep_transcripts(
    engine: AsyncEngine, store: TranscriptStore, cutoff: datetime, now: datetime,
) -> tuple[int, int]:
    """The transcripts past retention: a folder's, or on S3 those written again; how many went, and how many a
    hold (Object Lock) keeps."""
    if Capability.LOCAL_SWEEP in store.capabilities:
        return await store.sweep(cutoff), 0
    rewritten = await sweep_rewrites(engine, store, cutoff, now)
    return rewritten.removed, rewritten.held


async def _forget_step(steps: _Steps, forget: Forget | None, now: datetime) -> tuple[int | None, int | None]:
    """Forget the quiet users, last; skipped when the transcript step failed (whether a user's transcripts are
    gone is known from that store) or when another sweep is forgetting them."""
    if forget is None:
        return 0, 0
    if "transcripts" in steps.failed:
        steps.skipped[FORGET] = "the transcript step failed: no user is forgotten until the store answers"
        return None, None
    quiet = await steps.run(FORGET, lambda: forget(now))
    if quiet is None and FORGET not in steps.failed:
        steps.skipped[FORGET] = BUSY
    return quiet if quiet is not None else (None, None)


class _Steps:
    """Runs each step on its own: one that fails is recorded (its count ``None``) and the next still runs."""

    def __init__(self) -> None:
        self.failed: dict[str, str] = {}
        self.skipped: dict[str, str] = {}
        self.errors: list[TeamstoreError] = []

    async def run(self, name: str, step: Callable[[], Awaitable[T]]) -> T | None:
        try:
            return await step()
        except TeamstoreError as exc:  # recorded, and raised at the end in RetentionIncomplete
            log.error("retention sweep: the %s step failed: %s", name, exc.message)
            self.failed[name] = exc.message
            self.errors.append(exc)
            return None


def _incomplete(steps: _Steps, report: SweepReport) -> RetentionIncomplete:
    failed = "; ".join(f"{name}: {message}" for name, message in steps.failed.items())
    skipped = f" ({FORGET} skipped)" if FORGET in steps.skipped and steps.skipped[FORGET] != BUSY else ""
    fixes = list(dict.fromkeys(exc.hint for exc in steps.errors if exc.hint))
    return RetentionIncomplete(
        f"the retention sweep's step(s) {', '.join(steps.failed)} failed, the others ran{skipped}: {failed}",
        hint="; ".join([*fixes, "then run `teamstore retention sweep` again (it takes up what is left)"]),
        report=report,
    )
