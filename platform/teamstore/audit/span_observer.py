"""The spans' observer: one span per run and one child span per model call, emitted as the run ends (and
for the memory writer's later calls), keyed by the run's pseudonymous keys and holding no message content.

    from teamstore.audit.span_observer import SpanObserver
    from teamstore.audit.telemetry import setup_tracing

    observer = SpanObserver(setup_tracing(settings), pseudonyms)   # build_audit_observers makes it for a platform

What each span carries is :mod:`teamstore.audit.telemetry`'s.
"""

from __future__ import annotations

from opentelemetry.trace import TracerProvider

from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.telemetry import TRACER, emit_later_spans, emit_run_spans
from teamstore.events import LaterCalls, RunContext, RunOutcome, StreamItem


class SpanObserver:
    """Emits the run span and one child span per model call when the run ends."""

    def __init__(self, tracer_provider: TracerProvider, pseudonyms: Pseudonyms) -> None:
        self.tracer = tracer_provider.get_tracer(TRACER)
        self.pseudonyms = pseudonyms

    async def session_opening(self, user_id: str, session_id: str, opening: str) -> None:
        """As a session opens, before its lease: the user's subject (:meth:`LedgerObserver.session_opening`)."""
        await self.pseudonyms.open_session(user_id, opening)

    async def run_started(self, ctx: RunContext) -> None:
        """Nothing to do before the run."""

    async def on_item(self, ctx: RunContext, item: StreamItem) -> None:
        """Spans carry no content: items are ignored."""

    async def run_finished(self, ctx: RunContext, outcome: RunOutcome) -> None:
        """Record the spans (queued for export off the run's path).

        The run's cached keys are left to the resolver's LRU: observers finish concurrently, so none of
        them may drop keys another is still waiting on.
        """
        emit_run_spans(self.tracer, ctx, outcome, await self.pseudonyms.writable(ctx))

    async def later_calls(self, ctx: RunContext, later: LaterCalls) -> None:
        """A span for the later work (``memory_writer``) with one child span per model call."""
        emit_later_spans(self.tracer, ctx, later, await self.pseudonyms.after_run(ctx))
