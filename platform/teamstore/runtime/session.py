"""One user's session: take the lease, resume, run, save, release.

    async with platform.session("user-1", "session-1", team="support_triage") as s:
        print(s.resume)                      # "resumed", "new", "definition_changed: ...", ...
        result = await s.run("The technician came; still not working")
    # leaving the block saves the persisted participants and releases the lease, in one statement

``run()`` snapshots the opted-in participants' states right after the run returns (never while
``run_stream`` is in flight) and checks them (plain JSON, under the byte cap). The snapshot is written
when the block exits, together with the lease release, or earlier with ``await s.save()``. A run that
raises leaves nothing to save, and the stored state stays as it was.

A team that keeps user memory gives it to the participants its manifest names as the session opens
(``s.memory`` says what was given), and the memory writer updates it from what the runs said once the
block has saved (:mod:`teamstore.runtime.memory`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from importlib.metadata import version as package_version
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from autogen_agentchat.base import TaskResult
from autogen_agentchat.messages import BaseChatMessage
from autogen_core import CancellationToken

from config_registry.types import BuiltTeam
from teamstore.errors import (
    ConfigurationError,
    RunCancelled,
    RunInProgress,
    SessionNotOpen,
    StateTooLarge,
    StorageError,
)
from teamstore.events import RunContext, RunObserver, RunOutcome, notify_observers
from teamstore.ids import check_id
from teamstore.limits import MAX_LEASE_WAIT
from teamstore.memory.writer import Said
from teamstore.metering import metered_run
from teamstore.runtime.memory import MemoryBinding, MemoryRecall, MemoryService, bind_memory
from teamstore.runtime.metrics import SessionMetrics
from teamstore.runtime.resume import (
    SCHEMA_VERSION,
    ResumeOutcome,
    Verdict,
    apply_states,
    capture_states,
    judge,
)
from teamstore.runtime.tasks import check_task
from teamstore.runtime.teams import SpanRoute
from teamstore.settings import Settings
from teamstore.state.base import Claim, SaveRecord, SessionKey, StateStore, StoredSession
from teamstore.state.envelope import encode

if TYPE_CHECKING:
    from config_registry.types import BuiltTeam, TeamOrAgent

log = logging.getLogger("teamstore.session")
AGENTCHAT_VERSION = package_version("autogen-agentchat")
Phase = Literal["new", "open", "closed"]
"""Where a session is: not entered yet, inside its ``async with`` block, or done (it is used once)."""
EXPIRY_SLACK = 0.01
"""A saved session expires between TTL and TTL + 1% after its last save, so its expiry (an indexed
column) moves about once per 1% of the TTL, not on every save."""
_LIMIT_MARKERS = ("maximum number of", "token usage limit", "timeout", "max_turns", "maximum turns")


# What AutoGen's completing conditions say (a text mentioned, a handoff, a stop message, a function run,
# an agent answering). Combined conditions join their reasons: a run that completed on the same message
# that reached a limit did complete.
_COMPLETION_MARKERS = (
    "' mentioned", "handoff to ", "stop message received", "' was executed", "' answered",
    "text message received from", "functional termination condition met",
)


def ended_by_limit(stop_reason: str | None) -> bool:
    """True when a run was stopped by a message, turn, token or time limit rather than by completing."""
    text = (stop_reason or "").lower()
    return any(marker in text for marker in _LIMIT_MARKERS) and not any(
        marker in text for marker in _COMPLETION_MARKERS
    )


async def _to_the_end(work: Coroutine[Any, Any, None]) -> None:
    """Await ``work`` to its end even if the caller is cancelled meanwhile; then let the cancellation through."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            with contextlib.suppress(Exception):
                await task
        raise


@dataclass
class SessionLimits:
    """The settings a session reads: its lease's TTL, the per-user bound, its task and state caps, its TTL.

    One object is shared by a platform's sessions and follows the platform's settings (:meth:`follow`), so
    new settings reach the sessions already open, at their next run or save.
    """

    lease_ttl_seconds: float
    max_sessions_per_user: int
    task_max_bytes: int
    state_max_bytes: int
    state_ttl_days: float
    memory_retention_days: float
    memory_writer_timeout_seconds: float

    @classmethod
    def from_settings(cls, settings: Settings) -> SessionLimits:
        """The limits ``settings`` set (each field is the setting of the same name)."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})

    def follow(self, settings: Settings) -> None:
        """Take the limits ``settings`` set, in place."""
        for f in fields(self):
            setattr(self, f.name, getattr(settings, f.name))


@dataclass(frozen=True)
class SessionDeps:
    """What a session needs from the platform that opens it, and nothing more.

    Attributes:
        store: The state store it leases, loads, quarantines and saves through.
        observers: The audit observers each run streams into.
        limits: The settings it reads.
        build_team: A fresh team for a registry reference (the platform's, through its definition cache;
            it checks the schema first).
        autogen_spans: The block a run runs in, so AutoGen's spans go where the platform sends them.
        worker_id: This process, in the lease owner the session writes.
        metrics: Where it records resume outcomes, quarantines, lease waits and state sizes.
        memory: Reads user memory into the session and writes it after; ``None``: no memory, whatever the
            manifest declares.
    """

    store: StateStore
    observers: Sequence[RunObserver]
    limits: SessionLimits
    build_team: Callable[[str], Awaitable[BuiltTeam]]
    autogen_spans: SpanRoute
    worker_id: str
    metrics: SessionMetrics = field(default_factory=SessionMetrics)
    memory: MemoryService | None = None


class Session:
    """A leased, resumed session. Build it with :meth:`Platform.session`; use it as ``async with``."""

    def __init__(self, deps: SessionDeps, user_id: str, session_id: str, team: str, lease_timeout: float) -> None:
        self._deps = deps
        self.key = SessionKey(check_id("user_id", user_id), check_id("session_id", session_id))
        self._team_ref = team
        if not (isinstance(lease_timeout, int | float) and 0 <= lease_timeout <= MAX_LEASE_WAIT):  # NaN fails too
            raise ConfigurationError(f"lease_timeout must be 0 to {MAX_LEASE_WAIT} seconds, got {lease_timeout!r}",
                                     hint="pass how long to wait for a session another worker holds")
        self._lease_timeout = float(lease_timeout)
        self._owner = f"{deps.worker_id}:{uuid.uuid4().hex[:12]}"
        self._built: BuiltTeam  # set when the session is entered; used only while it is open
        self._row_version = 0
        self._pending: str | None = None
        self._pending_bytes = 0
        self._running = False
        self._cancelled = False
        self._phase: Phase = "new"
        self.resume: ResumeOutcome | None = None
        self._audit: asyncio.Task[None] | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self.last_run_id: str | None = None
        self._memory: MemoryBinding | None = None
        self.memory: MemoryRecall | None = None
        self._said: list[Said] = []  # what the runs added since the memory was last written
        self._last_run: tuple[RunContext, RunOutcome] | None = None

    @property
    def team(self) -> TeamOrAgent:
        """The team (or agent) built for this session alone."""
        return self._built.team

    @property
    def team_version(self) -> str:
        """The registry version the team was built from."""
        return str(self._built.version)

    @property
    def row_version(self) -> int:
        """The stored row's version as of the last load or save."""
        return self._row_version

    def _require_open(self) -> None:
        if self._phase != "open":
            raise SessionNotOpen(
                f"this session is {'not open yet' if self._phase == 'new' else 'closed'}",
                hint="use it inside `async with platform.session(...) as s:`; a closed one cannot be reopened",
            )

    async def __aenter__(self) -> Session:
        if self._phase != "new":
            raise SessionNotOpen(
                f"this session object is {'already open' if self._phase == 'open' else 'closed'}: "
                "a Session is entered once",
                hint="open another with platform.session(...); two at once for the same ids wait on the lease",
            )
        self._phase = "closed"  # until the lease is held: a failed entry is not retried on this object
        self._built = await self._deps.build_team(self._team_ref)
        built, store, limits = self._built, self._deps.store, self._deps.limits
        claim = Claim(built.name, built.version, SCHEMA_VERSION, AGENTCHAT_VERSION, built.fingerprints)
        asked = time.perf_counter()
        try:
            row = await store.acquire(
                self.key, claim, owner=self._owner, lease_ttl=limits.lease_ttl_seconds,
                wait_seconds=self._lease_timeout, max_sessions=limits.max_sessions_per_user,
            )
        except Exception as exc:
            self._deps.metrics.lease_waited(time.perf_counter() - asked, exc)
            raise
        self._deps.metrics.lease_waited(time.perf_counter() - asked)
        self._row_version = row.row_version
        self._keeper = asyncio.create_task(self._keep_lease(limits.lease_ttl_seconds))
        try:
            verdict = judge(row, built, datetime.now(UTC), AGENTCHAT_VERSION, limits.state_max_bytes)
            if verdict.outcome.quarantined:
                assert verdict.outcome.detail is not None
                await store.quarantine(row, owner=self._owner, reason=verdict.outcome.outcome, detail=verdict.outcome.detail)
                self._deps.metrics.quarantined(verdict.outcome.outcome)
            if verdict.outcome.applied:
                verdict = await self._apply(row, verdict)
            await self._recall(fresh=not verdict.outcome.applied)
        except BaseException:
            await self._stop_keeping()
            await self._release()
            raise
        self.resume = verdict.outcome
        self._deps.metrics.resumed(verdict.outcome.outcome)
        self._phase = "open"
        log.info("session opened: team=%s version=%s resume=%s", built.name, built.version[:12], verdict.outcome.outcome)
        return self

    async def _recall(self, *, fresh: bool) -> None:
        """Give the user's memory to the receiving participants whose contexts start empty."""
        service = self._deps.memory
        self._memory = bind_memory(self._built) if service is not None else None
        if service is not None and self._memory is not None:
            self.memory = await service.recall(self._memory, self.key.user_id, fresh=fresh,
                                               persisted=self._built.persisted)

    def _write_memory(self) -> None:
        """Once the block saved: have the memory writer update the user's memory from what the runs said."""
        service, binding, said, last = self._deps.memory, self._memory, self._said, self._last_run
        self._said = []
        if service is None or binding is None or not said or last is None:
            return
        service.schedule(binding, *last, said, observers=self._deps.observers, limits=self._deps.limits)

    async def _apply(self, row: StoredSession, verdict: Verdict) -> Verdict:
        """Load the validated states; if AutoGen still refuses them, fail closed on a freshly built team."""
        built = self._built
        try:
            await apply_states(built, verdict.states)
        except Exception as exc:
            # Validation passed but AutoGen's load_state raised (a shape teamstore does not check, such as
            # a nested team's state): the state is refused like any other, and the team, maybe half-loaded,
            # is built again from the same version. Only the type is kept: the message may quote content.
            detail = f"AutoGen could not load the stored state ({type(exc).__name__})"
            await self._deps.store.quarantine(row, owner=self._owner, reason="corrupt", detail=detail)
            self._deps.metrics.quarantined("corrupt")
            self._built = await self._deps.build_team(f"{built.name}@{built.version}")
            return Verdict(ResumeOutcome("corrupt", built.version, detail, (), row.team_version, quarantined=True))
        return verdict

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._phase = "closed"
        # Cancelled while closing (a request timeout), it finishes anyway: the last run's audit is written
        # and its state saved, and the lease never outlives the request.
        await _to_the_end(self._close())

    async def _close(self) -> None:
        try:
            await self.flush_audit()
        finally:
            await self._stop_keeping()
        if self._pending is None:
            await self._release()
        else:
            try:
                await self._write(release=True)
            except BaseException:  # whatever failed, the lease is given back
                await self._release_quietly()
                raise
        self._write_memory()  # after the save: memory follows what was saved

    async def _keep_lease(self, ttl: float) -> None:
        """Renew the lease every third of its TTL while the session is open: a live worker keeps its
        session however long a run takes; a crashed or hung one stops renewing and loses it."""
        while not self._closing.is_set():
            try:
                await asyncio.wait_for(self._closing.wait(), timeout=ttl / 3)
                return
            except TimeoutError:
                pass
            try:
                held = await self._deps.store.renew(self.key, owner=self._owner, lease_ttl=ttl)
            except StorageError as exc:
                log.warning("could not renew the session lease; retrying: %s", exc)
                continue
            if not held:
                log.warning("session lease lost (held past its TTL without renewal); the save will be refused")
                return

    async def _stop_keeping(self) -> None:
        self._closing.set()
        if self._keeper is not None:
            await self._keeper
            self._keeper = None

    async def run(self, task: str | BaseChatMessage | Sequence[BaseChatMessage] | None) -> TaskResult:
        """Run the team on ``task``, streaming every item to the audit observers.

        Args:
            task: The user's text; or, as AutoGen takes them, an AgentChat message, a list of them, or
                ``None`` to continue without a new one. Checked before the team runs
                (:mod:`teamstore.runtime.tasks`).

        Returns:
            AutoGen's ``TaskResult``.

        Raises:
            SessionNotOpen: Called outside the session's ``async with`` block.
            InvalidTask: ``task`` is not one of the above, not valid Unicode, or over ``task_max_bytes``;
                nothing ran and the session stays usable.
            RunInProgress: Another ``run`` of this session is in flight.
            RunCancelled: The session's last run was cancelled.
            StateNotSerializable: A persisted participant's state holds a non-JSON value (names the path).
            StateTooLarge: The persisted state is over ``state_max_bytes``; the previous state is kept.
        """
        self._require_open()
        check_task(task, self._deps.limits.task_max_bytes)
        if self._running:
            raise RunInProgress("this session is already running a task", hint="await the first run() before the next")
        if self._cancelled:
            raise RunCancelled(
                "this session's last run was cancelled, which may leave AutoGen's team mid-turn",
                hint="open the session again: a new team is built, from the state last saved",
            )
        self._running = True  # before the first await: a second run() started meanwhile is refused
        try:
            await self.flush_audit()
            result = await self._run_observed(task)
            await self._snapshot()
        finally:
            self._running = False
        return result

    async def _run_observed(self, task: str | BaseChatMessage | Sequence[BaseChatMessage] | None) -> TaskResult:
        observers = self._deps.observers
        ctx = RunContext(
            run_id=uuid.uuid4().hex, user_id=self.key.user_id, session_id=self.key.session_id,
            team=self._built.name, team_version=self._built.version, started_at=datetime.now(UTC),
            resumed=bool(self.resume and self.resume.applied),
        )
        self.last_run_id = ctx.run_id
        await notify_observers(observers, "run_started", ctx)
        token = CancellationToken()
        said: list[Said] = []

        async def stream() -> TaskResult | None:
            found: TaskResult | None = None
            async for item in self._built.team.run_stream(task=task, cancellation_token=token):
                if isinstance(item, TaskResult):
                    found = item
                    continue
                if self._memory is not None and isinstance(item, BaseChatMessage):
                    said.append(Said(item.source, item.to_model_text()))
                await notify_observers(observers, "on_item", ctx, item)
            return found

        with metered_run() as meter, self._deps.autogen_spans():
            streaming = asyncio.ensure_future(stream())  # copies the meter's context and the span route
            try:
                try:
                    result = await asyncio.shield(streaming)
                except asyncio.CancelledError:
                    # Cancelled from outside (a request timeout, a client gone): AutoGen would let the team
                    # finish its model calls before run_stream gives up. The token stops them now.
                    token.cancel()
                    self._cancelled = True
                    with contextlib.suppress(BaseException):
                        await streaming
                    raise
            except BaseException as exc:
                outcome = RunOutcome(datetime.now(UTC), error=exc, model_calls=list(meter.calls))
                await notify_observers(observers, "run_finished", ctx, outcome)
                raise
        assert result is not None
        outcome = RunOutcome(
            datetime.now(UTC), result=result, stop_reason=result.stop_reason,
            ended_by_limit=ended_by_limit(result.stop_reason), model_calls=list(meter.calls),
        )
        self._said += said  # a run that raised adds nothing: memory follows what is saved
        self._last_run = (ctx, outcome)
        # The audit writes (transcript PUT, ledger row, spans) overlap what the caller does next with the
        # result (answering its user) and the state save; the session awaits them before the next run
        # and before it saves and releases the lease, so a request never finishes with its audit unwritten.
        self._audit = asyncio.create_task(notify_observers(observers, "run_finished", ctx, outcome))
        return result

    async def flush_audit(self) -> None:
        """Wait until the last run's transcript, ledger rows and spans are written (or queued)."""
        task = self._audit
        if task is not None:
            # Shielded: a request cancelled while it waits here must not cancel the writes half-way (the
            # transcript would be neither uploaded nor queued). They stay pending; the block's exit awaits them.
            try:
                await asyncio.shield(task)
            finally:
                if task.done():
                    self._audit = None

    async def _snapshot(self) -> None:
        built = self._built
        if not built.persisted:
            return
        cap = built.manifest.context_bound or 50
        states = await capture_states(built, message_buffer_cap=cap)
        text = encode({"kind": built.kind, "participants": states})
        size, limit = len(text.encode()), self._deps.limits.state_max_bytes
        if size > limit:  # the last snapshot that fit (an earlier run's in this block, if any) still saves
            raise StateTooLarge(
                f"persisted state is {size} bytes, over the cap of {limit}; the previous state is kept",
                hint="lower the bounding context's max_messages, or raise TEAMSTORE_STATE_MAX_BYTES",
            )
        self._pending, self._pending_bytes = text, size

    async def save(self) -> int:
        """Write the pending snapshot now (after the last run's audit), keeping the lease; returns the row version.

        Cancelled while it writes, it still finishes the write, and the session goes on from it.
        """
        self._require_open()
        await self.flush_audit()
        if self._pending is not None:
            # Cancelled mid-write (a request timeout), the write finishes first. Cut short, it may have saved
            # without the session learning the new row version (its exit save would then conflict with
            # itself), lost the lock with its connection, or left SQLite's connection holding the write lock.
            await _to_the_end(self._write(release=False))
        return self._row_version

    async def _write(self, *, release: bool) -> None:
        # Taken before writing: a refused snapshot is reported once, never retried blindly at exit.
        state, self._pending = self._pending, None
        assert state is not None
        built = self._built
        ttl_days = built.state_ttl_days or self._deps.limits.state_ttl_days
        record = SaveRecord(
            team=built.name, team_version=built.version, schema_version=SCHEMA_VERSION,
            agentchat_version=AGENTCHAT_VERSION, fingerprints=built.fingerprints, state=state,
            expires_at=datetime.now(UTC) + timedelta(days=ttl_days),
            expiry_slack=timedelta(days=ttl_days) * EXPIRY_SLACK,
        )
        self._row_version = await self._deps.store.save(
            self.key, owner=self._owner, expected_version=self._row_version, record=record, release=release
        )
        self._deps.metrics.state_saved(self._pending_bytes)

    async def _release(self) -> None:
        await self._deps.store.release(self.key, owner=self._owner, discard_empty=self._row_version == 0)

    async def _release_quietly(self) -> None:
        try:
            await self._release()
        except StorageError as exc:
            # The save error being raised matters more; an unreleased lease expires on its own.
            log.warning("could not release the session lease after a failed save: %s", exc)

