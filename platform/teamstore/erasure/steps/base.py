"""What every erasure step is and gets: the :class:`Step` protocol, the :class:`StepContext` and the
progress callback (apart from the steps, so a step and what it asks of the stores import only this)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.transcripts.base import TranscriptStore
from teamstore.audit.transcripts.capabilities import ObjectVersion
from teamstore.erasure.receipt import Counts, StoreResult
from teamstore.keys.service import KeyService

Progress = Callable[[str, int, int | None], None]
"""``progress(step, done, total)``: called as a step advances (``total`` may be unknown)."""


Notice = Callable[[str], None]
"""``notice(line)``: called before the run waits, with one line saying what for, how long and which setting
decides it (the CLI prints it on stderr: a wait of half a minute must not pass for a hang)."""


def _no_progress(step: str, done: int, total: int | None) -> None:
    """Progress sink that ignores updates."""


def _no_notice(line: str) -> None:
    """Notice sink that ignores what the run says."""


def seconds(value: float) -> str:
    """A wait as a notice says it: ``2.5 s``, ``30 s``."""
    return f"{round(value, 1):g} s"


@dataclass
class HeldVersions:
    """What the store said of the transcript versions it holds under a lock, kept for one erasure attempt: its
    erasing, its verification and its final check ask about each such version once between them, not once each
    (a HEAD and a read of the version's first bytes). A rerun asks again.

    Only held versions are kept: a version found free, or gone, is asked about again whenever it is listed. A
    version id names bytes that never change, so the data key its header names is always the same; a lock that
    ends while the attempt runs reads as ending just after it (the receipt says such versions remain until their
    lock ends, as it says of one that ends a moment after the final check).
    """

    held: set[ObjectVersion] = field(default_factory=set)
    sealed_under: dict[ObjectVersion, str | None] = field(default_factory=dict)
    """The data key each held version's header names (hex), ``None`` for one not sealed."""


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
    keys: KeyService | None = None  # users' data keys: the key step forgets and outwaits them
    notice: Notice = _no_notice
    held: HeldVersions = field(default_factory=HeldVersions)  # this attempt's: the context is made per attempt


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
