"""What a session is given by the platform that opens it, and how it keeps its lease while it is open.

    deps = SessionDeps(store=store, observers=observers, limits=SessionLimits.from_settings(settings),
                       build_team=platform.build_team, autogen_spans=platform.autogen_spans, worker_id="w-1")
    keeper = LeaseKeeper(store, key, owner, ttl=300)     # renews every third of the TTL until stopped
    await keeper.check()                                 # StaleStateVersion once the lease is lost
    sessions = OpenSessions()                            # what the platform's close waits for
    await sessions.close(wait_seconds=10)                # no new session; the open ones end, or are cut off
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from importlib.metadata import version as package_version

from config_registry.types import BuiltTeam
from teamstore.errors import ConfigurationError, PlatformClosed, StaleStateVersion, StorageError
from teamstore.events import RunObserver
from teamstore.limits import MAX_LEASE_WAIT
from teamstore.runtime.memory import MemoryService
from teamstore.runtime.metrics import SessionMetrics
from teamstore.runtime.resume import SCHEMA_VERSION
from teamstore.runtime.teams import SpanRoute
from teamstore.settings import Settings
from teamstore.state.base import CheckpointRecord, SaveRecord, SessionKey, StateStore

log = logging.getLogger("teamstore.session")
AGENTCHAT_VERSION = package_version("autogen-agentchat")
EXPIRY_SLACK = 0.01
"""A saved session expires between TTL and TTL + 1% after its last write, so its expiry (an indexed
column) moves about once per 1% of the TTL, not on every write."""


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
    key_cache_seconds: float

    @classmethod
    def from_settings(cls, settings: Settings) -> SessionLimits:
        """The limits ``settings`` set (each field is the setting of the same name)."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})

    def follow(self, settings: Settings) -> None:
        """Take the limits ``settings`` set, in place."""
        for f in fields(self):
            setattr(self, f.name, getattr(settings, f.name))


def check_wait(seconds: object, name: str, hint: str) -> float:
    """``seconds`` as a wait in seconds, 0 to :data:`MAX_LEASE_WAIT`.

    Raises:
        ConfigurationError: It is not (NaN fails the range too; a bool is an int to Python, but True is no span of
            seconds).
    """
    if isinstance(seconds, bool) or not (isinstance(seconds, int | float) and 0 <= seconds <= MAX_LEASE_WAIT):
        raise ConfigurationError(f"{name} must be 0 to {MAX_LEASE_WAIT} seconds, got {seconds!r}", hint=hint)
    return float(seconds)


CUT_OFF_AUDIT_WAIT = 10.0
"""Seconds a session cut off as its platform closes gives its stopped run to write its audit (transcript, ledger
rows), before the platform's observers drain and its store closes. A last checkpoint the stopped run has begun to
write (the model calls it paid since the one before) is waited for past it: the lease is given back after it."""

CutOff = Callable[[], Awaitable[None]]
"""What a session still open when its platform has closed does: stop renewing and give its lease back."""


class OpenSessions:
    """The sessions a platform has open in this process, for its graceful close (a service's shutdown).

    Once :meth:`close` begins no session opens (``PlatformClosed``); it waits for the open ones to end, then
    has those still open give their leases back, and from then on they write nothing (:meth:`check`).
    """

    def __init__(self) -> None:
        self._open: dict[object, CutOff] = {}
        self._none_open = asyncio.Event()
        self._none_open.set()
        self.closing = False  # no session opens
        self.closed = False  # the wait is over: an open session writes nothing more

    def __len__(self) -> int:
        return len(self._open)

    def enter(self, session: object, cut_off: CutOff) -> None:
        """Count ``session`` open from now (its lease not taken yet) until :meth:`leave`.

        Raises:
            PlatformClosed: The platform is closing.
        """
        self.refuse_once_closing("no session opens on it")
        self._open[session] = cut_off
        self._none_open.clear()

    def refuse_once_closing(self, what: str) -> None:
        """Refuse what the platform was asked (``what`` it does not do) once its close has begun: its store, and
        the engine under it, are being closed (or are), and nothing would close what a call opened on them again.

        Raises:
            PlatformClosed: The platform is closing, or has closed.
        """
        if self.closed:
            raise PlatformClosed(
                f"the platform has closed: {what}",
                hint="a platform is not opened again once closed: build one per lifespan (open_platform() "
                "inside it, not at import) and use a platform that is running",
            )
        if self.closing:
            raise PlatformClosed(
                f"the platform is closing: {what}",
                hint="a service stops taking requests before it closes its platform (its lifespan's end); "
                "use a platform that is running",
            )

    def leave(self, session: object) -> None:
        """``session`` has ended (or did not open)."""
        self._open.pop(session, None)
        if not self._open:
            self._none_open.set()

    def check(self, *, opening: bool = False) -> None:
        """Before a session writes to the store (``opening``: before it asks for its lease).

        Raises:
            PlatformClosed: The platform closed while the session was open (or opening).
        """
        if self.closed:
            raise self.closed_under(opening=opening)

    @staticmethod
    def closed_under(*, opening: bool = False) -> PlatformClosed:
        """What a session still open (``opening``: still opening) when its platform closed gets at its next
        write (as it opens)."""
        hint = ("close the platform once the requests using it have ended (raise aclose(wait_seconds=...) for "
                "longer runs); open the session again on a running platform and run again")
        if opening:
            return PlatformClosed("the platform was closed while this session was opening: it did not open, "
                                  "and holds no lease", hint=hint)
        return PlatformClosed(
            "the platform was closed while this session was open: nothing more of it is written (what it had "
            "not saved is lost) and its lease was given back", hint=hint,
        )

    async def close(self, wait_seconds: float) -> int:
        """Refuse new sessions, wait up to ``wait_seconds`` for the open ones to end, and have those still open
        give their leases back (a save under way lands first); returns how many were still open."""
        self.closing = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._none_open.wait(), wait_seconds)
        self.closed = True
        left = list(self._open.values())
        # Every one is cut off, whatever another's did: one failing must not keep the store from closing.
        for failed in await asyncio.gather(*(cut_off() for cut_off in left), return_exceptions=True):
            if isinstance(failed, BaseException):  # its type only: a message may quote what the session held
                log.error("a session open as its platform closed could not be cut off (%s); its lease expires "
                          "at its TTL", type(failed).__name__)
        return len(left)


@dataclass(frozen=True)
class SessionDeps:
    """What a session needs from the platform that opens it, and nothing more.

    Attributes:
        store: The state store it leases, loads, quarantines and saves through.
        observers: The audit observers each run streams into.
        limits: The settings it reads.
        build_team: A fresh team for a registry reference (the platform's, through its definition cache;
            it checks the schema first).
        build_ahead: Have the next team for a reference built while the loop waits (the definition cache's).
        autogen_spans: The block a run runs in, so AutoGen's spans go where the platform sends them.
        worker_id: This process, in the lease owner the session writes.
        metrics: Where it records resume outcomes, quarantines, lease waits and state sizes.
        memory: Reads user memory into the session and writes it after; ``None``: no memory, whatever the
            manifest declares.
        sessions: The platform's open sessions: a session counts itself in as it opens, and is refused, or
            writes nothing more, once the platform closes.
        forgetting: Whether the retention sweep is forgetting a user (:data:`teamstore.db.fence.RETENTION`): a
            session refused by that hold as it opens waits for it to end and opens again, the user afresh.
            ``None``: a refusal is raised as it is.
    """

    store: StateStore
    observers: Sequence[RunObserver]
    limits: SessionLimits
    build_team: Callable[[str], Awaitable[BuiltTeam]]
    autogen_spans: SpanRoute
    worker_id: str
    metrics: SessionMetrics = field(default_factory=SessionMetrics)
    memory: MemoryService | None = None
    build_ahead: Callable[[str], None] = lambda ref: None
    sessions: OpenSessions = field(default_factory=OpenSessions)
    forgetting: Callable[[str], Awaitable[bool]] | None = None


class LeaseKeeper:
    """Renews a session's lease every third of its TTL while the session is open: a live worker keeps its
    session however long a run takes; a crashed or hung one stops renewing and loses it.

    A lease found lost stays lost: :meth:`check` refuses whatever the session would do next. A worker hung past
    its lease may wake with its next renewal not due yet, so :meth:`check` also asks the store itself once the
    lease was last known held longer ago than a keeper on time lets it be.

    Args:
        store: Where the lease is.
        key: The session.
        owner: The lease's owner (this opening of the session).
        ttl: The lease's time to live, in seconds.
        since: When (``loop.time()``) the lease was asked for; now if not given.
    """

    def __init__(self, store: StateStore, key: SessionKey, owner: str, ttl: float, since: float | None = None) -> None:
        self._store, self._key, self._owner, self._ttl = store, key, owner, ttl
        self._loop = asyncio.get_running_loop()
        self._renewal: asyncio.Task[None] | None = None
        self._stopped = False
        self.lost = False
        self._held_at = self._loop.time() if since is None else since  # the store last said it is held
        # A timer rather than a task that sleeps: a session that closes before the first renewal is due (most
        # requests) costs one timer handle, cancelled.
        self._timer = self._loop.call_later(ttl / 3, self._due)

    def _due(self) -> None:
        self._renewal = self._loop.create_task(self._renew())

    async def _renew(self) -> None:
        try:
            held = await self._held()
        except StorageError as exc:
            log.warning("could not renew the session lease; retrying: %s", exc.message)
            held = True
        if not held:
            log.warning("session lease lost (held past its TTL without renewal); the save will be refused")
        elif not self._stopped:
            self._timer = self._loop.call_later(self._ttl / 3, self._due)

    async def _held(self) -> bool:
        asked = self._loop.time()
        held = await self._store.renew(self._key, owner=self._owner, lease_ttl=self._ttl)
        if held:
            self._held_at = max(self._held_at, asked)
        else:
            self.lost = True
        return held

    async def check(self) -> None:
        """Before the session runs its team or hands work on (a memory write): refuse once its lease is lost.

        Raises:
            StaleStateVersion: The lease was lost (its worker hung past it, or the database ended it): another
                worker, or an erasure, may have the session now. Nothing was run or written.
            StoreUnavailable: The lease was last known held too long ago and the store could not say whether it
                still is.
        """
        # A keeper on time renews every third of the TTL: two thirds without word from the store means this
        # process stopped (hung, or every renewal failed) and the lease may have run out.
        if not self.lost and self._loop.time() - self._held_at > self._ttl * 2 / 3:
            await self._held()
        if self.lost:
            raise lease_lost()

    async def stop(self) -> None:
        """Stop renewing, once a renewal under way has ended (the lease itself is given back by the save or the
        release)."""
        self._stopped = True
        self._timer.cancel()
        if self._renewal is not None:
            await self._renewal


def lease_lost() -> StaleStateVersion:
    """The error for a session that goes on after its lease was lost."""
    return StaleStateVersion(
        "this session's lease was lost (held past lease_ttl_seconds without renewal, or ended by the database): "
        "another worker or an erasure may have the session now, so nothing more of it runs or is written",
        hint="open the session again and run again; raise lease_ttl_seconds if workers pause longer than it",
    )


def _expiry(built: BuiltTeam, limits: SessionLimits) -> tuple[datetime, timedelta]:
    """When a row written now expires at the soonest (the team's TTL, else the default), and the window."""
    ttl = timedelta(days=built.state_ttl_days or limits.state_ttl_days)
    return datetime.now(UTC) + ttl, ttl * EXPIRY_SLACK


def save_record(built: BuiltTeam, state: str, limits: SessionLimits) -> SaveRecord:
    """What a save of ``state`` (the encoded snapshot of ``built``'s persisted participants) writes."""
    expires_at, slack = _expiry(built, limits)
    return SaveRecord(team=built.name, team_version=built.version, schema_version=SCHEMA_VERSION,
                      agentchat_version=AGENTCHAT_VERSION, fingerprints=built.fingerprints, state=state,
                      expires_at=expires_at, expiry_slack=slack)


def checkpoint_record(built: BuiltTeam, text: str | None, limits: SessionLimits, *,
                      state_expired: bool = False) -> CheckpointRecord:
    """What a run's checkpoint write (``None``: its clearing) writes (``state_expired``: and the expired state it
    clears)."""
    expires_at, slack = _expiry(built, limits)
    return CheckpointRecord(team=built.name, team_version=built.version, schema_version=SCHEMA_VERSION,
                            agentchat_version=AGENTCHAT_VERSION, fingerprints=built.fingerprints, checkpoint=text,
                            expires_at=expires_at, expiry_slack=slack, state_expired=state_expired)
