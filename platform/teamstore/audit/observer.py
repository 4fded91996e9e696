"""The transcript's observer, and the audit trail a platform streams every run into: transcript, ledger
(:mod:`~teamstore.audit.ledger_observer`), spans (:mod:`~teamstore.audit.span_observer`) and metrics, sharing
one :class:`~teamstore.audit.pseudonyms.Pseudonyms` for the run's keys.

    from teamstore.audit.observer import build_audit_observers
    from teamstore.audit.telemetry import setup_tracing

    observers = build_audit_observers(settings, engine, tracer_provider=setup_tracing(settings))
    # runtime: run_started(ctx); on_item(ctx, item) for each streamed item; run_finished(ctx, outcome)

Items are buffered in memory per run and written once at ``run_finished``: one transcript object (one
PUT), sealed under the user's data key before it leaves the process (the queued copy in the outbox is that
same sealed object), one ledger INSERT, one span per run plus one per model call. None of it can fail a run: an upload
that fails or exceeds its deadline goes to the outbox (delivered by ``teamstore transcripts flush`` and
opportunistically after later runs); one that may still land keeps its outbox row claimed until it no longer
can, so an erasure waits for it. Spans are exported by a background processor.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit import claims, outbox
from teamstore.audit.claims import Queued
from teamstore.audit.ledger_observer import LedgerObserver
from teamstore.audit.metrics import MetricsObserver
from teamstore.audit.placement import make_here, mark_ours
from teamstore.audit.price_sync import PriceSync
from teamstore.audit.prices import load_prices
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.span_observer import SpanObserver
from teamstore.audit.subjects import record_store
from teamstore.audit.transcripts import (
    Capability,
    TranscriptStore,
    capability,
    run_key,
    store_endpoint,
    transcript_store_from_settings,
)
from teamstore.audit.transcripts.record import encode_lines, item_line, run_record, sealed_context
from teamstore.db.engine import describe_failure
from teamstore.errors import ErasureInProgress, TeamstoreError, TranscriptNotFound, UploadInDoubt
from teamstore.events import RunContext, RunObserver, RunOutcome, StreamItem
from teamstore.keys.service import DataKey, KeyService
from teamstore.settings import Settings

log = logging.getLogger(__name__)
DRAIN_TIMEOUT_S = 5.0
"""How long a shutdown waits for background outbox deliveries; what is left stays queued."""
INLINE_ENCODE_CHARS = 64 * 1024
"""A transcript up to this size is compressed on the event loop (about a millisecond); a larger one in a thread."""


class TranscriptObserver:
    """Buffers a run's stream and writes one transcript object at the end (outbox on failure).

    Args:
        store: Where transcripts go.
        engine: The state database (outbox).
        pseudonyms: The shared key resolver.
        upload_deadline_s: Longest a run waits for its upload before the transcript goes to the outbox.
        flush_every: Look for queued transcripts after this many runs (and after any failure).
        drain_timeout_s: Longest :meth:`drain` (shutdown) waits for background deliveries.
        late_upload_s: How long S3 may still store an upload it left unanswered (``late_upload_seconds``).
        keys: Users' data keys, which every transcript is sealed under; by default the service the
            environment's settings describe.
    """

    def __init__(
        self,
        store: TranscriptStore,
        engine: AsyncEngine,
        pseudonyms: Pseudonyms,
        upload_deadline_s: float = 2.0,
        flush_every: int = 50,
        drain_timeout_s: float = DRAIN_TIMEOUT_S,
        late_upload_s: float = 60.0,
        keys: KeyService | None = None,
    ) -> None:
        self.store = store
        self.keys = keys or KeyService.from_settings(engine)
        self._data_keys: dict[str, asyncio.Future[DataKey]] = {}
        self.engine = engine
        self.pseudonyms = pseudonyms
        self.upload_deadline_s = upload_deadline_s
        self.flush_every = flush_every
        self.drain_timeout_s = drain_timeout_s
        self.late_upload_s = late_upload_s
        self.owner = claims.new_owner()
        self._items: dict[str, list[str]] = {}
        self._runs_since_check = (
            flush_every  # check once soon after start: a previous process may have queued
        )
        self._tasks: set[asyncio.Future[Any]] = set()  # what drain() waits for
        self._noted: OrderedDict[str, None] = OrderedDict()  # subjects whose store is recorded already
        self._noted_size = 4096
        self._placed = False  # the store is made here (a folder), or marked (S3), as this database's by the first run

    async def session_opening(self, user_id: str, session_id: str, opening: str) -> None:
        """As a session opens, before its lease: the user's subject and data key, each made now for a new user
        (concurrently; the state store's own fetch of the key then finds it in memory, when they share the key
        service). The session's runs never make either.

        Raises:
            ErasureInProgress: An erasure holds the user. KeyUnavailable, DataKeyDamaged, StoreUnavailable.
        """
        await _all(self.pseudonyms.open_session(user_id, opening), self.keys.data_key(user_id))

    async def run_started(self, ctx: RunContext) -> None:
        """Start the run's buffer, and meanwhile look up its keys and fetch the user's data key: the transcript
        is sealed under the key had at the run's start, even if the key-encryption key cannot be reached at its
        end. The key is never made here (its session made it as it opened): one missing now was destroyed by an
        erasure since, and the run writes nothing."""
        self._items[ctx.run_id] = []
        self.pseudonyms.prefetch(ctx)
        fetch = asyncio.ensure_future(self._data_key(ctx))
        fetch.add_done_callback(_seen)  # a run ended by a fence never awaits it
        # Nor may a run cut off before its end: :meth:`drain` waits for it, so its connection is back in the pool
        # before the engine is disposed, not dropped when the event loop's shutdown cancels it.
        self._track(fetch)
        self._data_keys[ctx.run_id] = fetch

    async def on_item(self, ctx: RunContext, item: StreamItem) -> None:
        """Buffer one streamed message or event as its transcript line (made now, so later mutation cannot
        leak in, and the run's end only compresses)."""
        buffer = self._items.setdefault(ctx.run_id, [])
        buffer.append(item_line(len(buffer), item, datetime.now(UTC)))

    async def run_stopped(self, ctx: RunContext) -> None:
        """The run stopped mid-run, to be continued (here or in another process): its buffer and key fetch go.
        The attempt that ends it streams the earlier items again, and writes its one transcript; a worker whose
        clients drop one stream after another holds none of their words meanwhile."""
        self._items.pop(ctx.run_id, None)
        self._data_keys.pop(ctx.run_id, None)

    async def run_finished(self, ctx: RunContext, outcome: RunOutcome) -> None:
        """Encode and upload the transcript, the end-of-run fence checked beside the upload; on failure queue it
        in the outbox. An upload that the fence then refuses is deleted again (or, still on its way, recorded
        as one that may land, and deleted when it does). A run taken up again from its checkpoint whose
        transcript the attempt that ended it wrote already (in the store, or in the outbox) writes none.

        Raises:
            ErasureInProgress: An erasure fences the user (the runtime logs it); nothing stays written.
            StoreUnavailable: Upload and outbox both failed, or the store could not be recorded for the subject
                first (the runtime logs it; the run still succeeds).
        """
        lines = self._items.pop(ctx.run_id, [])
        fetch = self._data_keys.pop(ctx.run_id, None)
        keys = await self.pseudonyms.run_keys(ctx)  # ErasureInProgress: the runtime logs it, nothing written
        row = Queued(ctx.run_id, run_key(keys, ctx.run_id), keys.subject_key)
        if ctx.interruptions and await self._written(row):
            return
        fence = asyncio.ensure_future(self.pseudonyms.writable(ctx))
        fence.add_done_callback(_seen)  # a run whose data key or store record fails never awaits it
        # KeyUnavailable, DataKeyDamaged, ErasureInProgress: the runtime logs it; nothing is written.
        data_key = await (fetch if fetch is not None else self._data_key(ctx))
        await self._note_store(keys.subject_key)  # StoreUnavailable: nothing written where erasure would not look
        if not self._placed:
            await self._place()
        header = run_record(ctx, outcome, keys, len(lines))
        if sum(map(len, lines)) <= INLINE_ENCODE_CHARS:
            # The fence's statement (with the ledger's rows) leaves first: the database works on it meanwhile.
            await asyncio.sleep(0)
            body = _sealed(data_key, row.object_key, header, lines)  # sooner than a thread would even start
        else:
            # Tens of MB take a second or more to compress and seal: off the loop, so the worker's other
            # sessions go on meanwhile.
            body = await asyncio.to_thread(_sealed, data_key, row.object_key, header, lines)
        upload = asyncio.ensure_future(self.store.put(row.object_key, body))
        failure = await self._landed(upload)
        try:
            await fence
        except ErasureInProgress:
            await self._withdraw(row, body, upload, failure)
            raise
        if failure is not None:
            await self._queue(row, body, upload, failure)
            return
        self._runs_since_check += 1
        if self._runs_since_check >= self.flush_every:
            self._runs_since_check = 0
            self._spawn(self._flush_quietly())

    async def _data_key(self, ctx: RunContext) -> DataKey:
        data_key = await self.keys.data_key(ctx.user_id, create=False)
        if data_key is None:
            raise ErasureInProgress(
                "the user was erased while this session was open (their data key no longer exists): no "
                "transcript is written", hint="nothing to fix: the erasure removed the user's data")
        return data_key

    async def _written(self, row: Queued) -> bool:
        """Whether the transcript of a run taken up again (continued, abandoned, or gone with its session) is
        written already, in the store or queued in the outbox: the attempt before ended the run and wrote it, and
        its worker died before the save that clears the checkpoint. A run's transcript is written once: the first
        stands. Where that cannot be told (the store or the database fails), it is written as usual."""
        try:
            found = await outbox.holds(self.engine, row.run_id) or await self._stored(row.object_key)
        except TeamstoreError as exc:
            log.warning("transcript of run %s: could not tell whether an earlier attempt wrote it (%s); "
                        "writing it", row.run_id, exc.message)
            return False
        if found:
            log.info("transcript of run %s was written by the attempt that ended the run; not written again",
                     row.run_id)
        return found

    async def _stored(self, key: str) -> bool:
        try:
            await self.store.get(key)
        except TranscriptNotFound:
            return False
        return True

    async def _landed(self, upload: asyncio.Future[None]) -> TeamstoreError | TimeoutError | None:
        """Wait for ``upload`` up to the deadline: ``None`` if it landed, else why not (a ``TimeoutError`` for one
        still on its way)."""
        try:
            await asyncio.wait_for(asyncio.shield(upload), self.upload_deadline_s)
        except (TeamstoreError, TimeoutError) as exc:
            return exc
        return None

    async def _withdraw(
        self, row: Queued, body: bytes, upload: asyncio.Future[None], failure: TeamstoreError | TimeoutError | None
    ) -> None:
        """Take back the transcript of a run the end-of-run fence refused: delete it if it landed; record it as
        an upload that may land (the erasure waits for it, and it is deleted when it does) if it may."""
        if failure is None:
            await outbox.confirm_landed(self.engine, self.store, row.object_key, row.subject_key)
        elif isinstance(failure, (TimeoutError, UploadInDoubt)):
            await self._queue(row, body, upload, failure)

    async def _note_store(self, subject_key: str) -> None:
        """Record this store for the subject before its first transcript goes there (an erasure must reach
        every store that holds some); once per subject and process."""
        if subject_key in self._noted:
            self._noted.move_to_end(subject_key)
            return
        await record_store(self.engine, subject_key, self.store.url, endpoint=store_endpoint(self.store))
        self._noted[subject_key] = None
        while len(self._noted) > self._noted_size:
            self._noted.popitem(last=False)

    async def _place(self) -> None:
        """Make a folder store here as this database's (:func:`teamstore.audit.placement.make_here`) before the first
        transcript goes there, or mark an S3 one so (beside the run, off its path: only an erasure or export through
        another endpoint reads the mark); once per process. A failure is logged: a folder's upload then says it too,
        and the transcript waits in the outbox; an unmarked bucket is erased at its writers' endpoint alone, and a
        later run tries again."""
        if capability(self.store, Capability.MARKS) is not None:
            self._placed = True  # one mark on its way at a time
            self._spawn(self._mark())
            return
        try:
            await make_here(self.store, self.engine)
        except TeamstoreError as exc:
            log.warning("could not make the transcript folder here: %s", exc.message)
            return
        self._placed = True

    async def _mark(self) -> None:
        try:
            await mark_ours(self.store, self.engine)
        except TeamstoreError as exc:
            self._placed = False
            log.warning("could not mark the transcript store as this database's: %s", exc.message)

    async def _queue(self, row: Queued, body: bytes, upload: asyncio.Future[None], exc: Exception) -> None:
        """Queue a transcript whose upload failed or is still on its way. An upload that may still land (on its
        way, or left unanswered by S3) is recorded with the row, claimed until it can no longer land, even
        while an erasure fences the user: the erasure waits for it."""
        in_flight = isinstance(exc, TimeoutError)
        reason = exc.message if isinstance(exc, TeamstoreError) else f"upload took over {self.upload_deadline_s}s"
        log.warning("transcript of run %s queued in the outbox: %s", row.run_id, reason)
        # The next upload that succeeds proves the store answers again: it drains the queue then,
        # not flush_every runs later (a quiet worker might never see that many).
        self._runs_since_check = self.flush_every
        claim = None
        if in_flight:
            claim = outbox.Claim(self.owner, outbox.in_flight_for(self.late_upload_s))
        elif isinstance(exc, UploadInDoubt):
            claim = outbox.Claim(self.owner, outbox.may_land_for(self.late_upload_s))
        try:
            await outbox.enqueue(self.engine, row.run_id, row.object_key, row.subject_key, body, reason, claim)
        finally:
            if in_flight:  # still going in its thread: it may land much later
                self._spawn(self._settle_late(upload, row))

    async def _settle_late(self, upload: asyncio.Future[None], row: Queued) -> None:
        """Follow an upload the run stopped waiting for, keeping its row claimed meanwhile. The session's lease
        (which an erasure waits for) no longer covers it, so once it lands the user is checked again: a
        transcript that landed after an erasure fenced the user is deleted, one still wanted makes its queued
        copy redundant. One left unanswered keeps the row claimed until it can no longer land."""
        try:
            outcome = await outbox.follow(self.engine, self.store, row, self.owner, upload, self.late_upload_s)
        except TeamstoreError as exc:
            log.warning("transcript of run %s: could not record how its late upload ended: %s", row.run_id, exc.message)
            return
        if outcome.delivered:
            log.info("transcript of run %s was delivered late; dropped from the outbox", row.run_id)

    def _spawn(self, coro: Any) -> None:
        self._track(asyncio.get_running_loop().create_task(coro))

    def _track(self, task: asyncio.Future[Any]) -> None:
        """Have :meth:`drain` wait for ``task``, work of this observer's own that nothing else may await."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush_quietly(self) -> None:
        try:
            report = await outbox.flush(self.engine, self.store, limit=100, late_upload_s=self.late_upload_s)
        except (TeamstoreError, SQLAlchemyError) as exc:
            # A typed error's message only: its fix may name what is typed again. A database error without its
            # statement or values.
            log.warning("opportunistic outbox flush failed: %s",
                        exc.message if isinstance(exc, TeamstoreError) else describe_failure(exc))
            return
        if report.delivered or report.failed:
            log.info("outbox: delivered %d, %d still queued", report.delivered, report.remaining)
        if report.remaining:
            self._runs_since_check = self.flush_every  # the store answers again: keep draining next run

    async def drain(self) -> None:
        """Wait for background outbox deliveries, and the data-key fetches of runs that ended without using
        theirs (call before shutdown, before the engine is disposed), for at most ``drain_timeout_s``.

        A slow store could otherwise hold the shutdown for as long as the whole outbox takes. Deliveries
        still running then are cancelled; their transcripts stay queued for the next flush. Then the
        connections the audit's statements opened are closed.
        """
        try:
            await self._wait_for_deliveries()
        finally:
            await self.pseudonyms.aclose()

    async def _wait_for_deliveries(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_timeout_s
        while self._tasks:
            running = list(self._tasks)
            _, late = await asyncio.wait(running, timeout=max(0.0, deadline - loop.time()))
            if late:
                for task in late:
                    task.cancel()
                await asyncio.gather(*late, return_exceptions=True)
                log.warning(
                    "outbox delivery stopped for shutdown after %.0fs; the rest stays queued", self.drain_timeout_s
                )
                return


def _sealed(data_key: DataKey, object_key: str, header: dict[str, Any], lines: list[str]) -> bytes:
    """The run's transcript object: encoded (gzip JSON lines), then sealed for its place in the store."""
    return data_key.seal(encode_lines(header, lines), sealed_context(object_key))


async def _all(*steps: Awaitable[Any]) -> None:
    """Await ``steps`` concurrently, each to its end; then raise what the first that failed raised."""
    for outcome in await asyncio.gather(*steps, return_exceptions=True):
        if isinstance(outcome, BaseException):
            raise outcome


def _seen(task: asyncio.Future[Any]) -> None:
    """Retrieve a finished background task's outcome, so an unawaited failure is not reported as lost."""
    if not task.cancelled():
        task.exception()


def build_audit_observers(
    settings: Settings,
    engine: AsyncEngine,
    tracer_provider: TracerProvider | None = None,
    *,
    transcripts: TranscriptStore | None = None,
    meter_provider: MeterProvider | None = None,
    keys: KeyService | None = None,
) -> list[RunObserver]:
    """The audit trail for a platform: transcript and ledger observers, plus spans when tracing is set up
    and the GenAI client metrics when metrics are.

    Args:
        settings: Where transcripts go (``resolved_transcripts_url``), how long an upload may still land.
        engine: The state database (subjects, ledger, outbox).
        tracer_provider: From :func:`teamstore.audit.telemetry.setup_tracing`; ``None`` for no spans.
        transcripts: The transcript store, if the caller built it (and closes it); by default a new one
            from ``settings``, which the caller closes through the transcript observer's ``store``.
        meter_provider: From :func:`teamstore.audit.metrics.setup_metrics`; ``None`` for no metrics.
        keys: Users' data keys, which transcripts are sealed under; by default one from ``settings``.

    Returns:
        Observers in the order the runtime should call them.

    Raises:
        MissingExtra: The transcripts URL needs a package that is not installed.
        ConfigurationError: The transcripts URL is not supported.
    """
    pseudonyms = Pseudonyms(engine, pool_size=settings.db_pool_size, fresh_seconds=settings.key_cache_seconds)
    store = transcript_store_from_settings(settings) if transcripts is None else transcripts
    observers: list[RunObserver] = [
        LedgerObserver(engine, pseudonyms, PriceSync(lambda: load_prices(settings.prices_path))),
        TranscriptObserver(store, engine, pseudonyms, late_upload_s=settings.late_upload_seconds,
                           keys=keys or KeyService.from_settings(engine, settings)),
    ]
    if tracer_provider is not None:
        observers.append(SpanObserver(tracer_provider, pseudonyms))
    if meter_provider is not None:
        observers.append(MetricsObserver(meter_provider))
    return observers
