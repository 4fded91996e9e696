"""The entry point for application services: build teams from the registry, open sessions on them.

    from teamstore import open_platform

    platform = open_platform()                        # embedded default: SQLite + local folder
    async with platform:
        async with platform.session("user-1", "s-1", team="support_triage") as s:
            result = await s.run("hello")

``open_platform`` is the composition root's (:class:`teamstore.app.App`): it builds the engine, the state
and transcript stores, the audit observers and the tracer provider, and hands them in here, and closes them
with the platform. Built by hand on pieces the caller owns (and closes, after the platform), a platform keeps
an audit trail only if it is handed the observers:

    transcripts = transcript_store_from_settings(settings)                         # teamstore.audit.transcripts
    observers = build_audit_observers(settings, my_engine, transcripts=transcripts)  # teamstore.audit.observer
    platform = Platform(my_engine, Registry(path), settings=settings, observers=observers)

Without ``observers`` its sessions run and save but leave no transcript, no ledger row and no span: prefer
``open_platform(settings)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import warnings
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import timedelta
from types import TracebackType

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from config_registry.errors import RegistryError
from config_registry.types import BuiltTeam
from teamstore.db.fence import forgetting
from teamstore.db.hidden import protect_engine
from teamstore.db.migrate import ensure_current
from teamstore.events import RunObserver, drain_observers
from teamstore.ids import check_id
from teamstore.keys.service import KeyService
from teamstore.logs import (
    keep_cancellation_out_of_errors,
    keep_content_out_of_logs,
    keep_query_values_out_of_logs,
    keep_request_bodies_out_of_logs,
    still_content_left_out,
)
from teamstore.memory.facts import UserMemory
from teamstore.memory.store import Forgotten, MemoryStore
from teamstore.runtime import interruptions, turns
from teamstore.runtime.autogen_spans import autogen_spans_to, install, provider_for_autogen
from teamstore.runtime.deps import OpenSessions, check_wait
from teamstore.runtime.memory import MemoryService
from teamstore.runtime.metrics import SessionMetrics
from teamstore.runtime.session import Session, SessionDeps, SessionLimits
from teamstore.runtime.teams import TeamBuilder
from teamstore.settings import Settings
from teamstore.state.base import Restored, SessionKey, StateStore
from teamstore.state.factory import store_for

log = logging.getLogger("teamstore.platform")


# Python warnings that quote what a model answered: AutoGen's OpenAI client warns, and pydantic under it warns,
# when a gateway answers a tool call with its arguments as a JSON object rather than a string (AutoGen converts
# them and the call goes on). The arguments come from the user's words, and each call's warning differs, so
# Python shows every one: on stderr, or in the logs of a service that captures warnings.
_CONTENT_WARNINGS = (
    r"Tool call function arguments field is not a string",
    r"Pydantic serializer warnings:\s+PydanticSerializationUnexpectedValue\(Expected `str` - serialized value may not "
    r"be as expected \[field_name='arguments'",
)


_SAID = ("Tool call function arguments field is not a string",
         "Pydantic serializer warnings:\n  PydanticSerializationUnexpectedValue(Expected `str` - serialized value "
         "may not be as expected [field_name='arguments'")
"""How each of :data:`_CONTENT_WARNINGS` begins, to tell which filter would take it first."""


def keep_content_out_of_warnings() -> None:
    """Ignore the warnings of :data:`_CONTENT_WARNINGS` (process-wide, as Python's warning filters are), unless
    their ignore filters already come before any other that would take them: a filter the application puts first
    since (``warnings.simplefilter("default")``) is found at the next session's opening, and they are put first
    again.

    A Platform does this unless ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` opts in to message content
    in telemetry.
    """
    for message, said in zip(_CONTENT_WARNINGS, _SAID, strict=True):
        if not _ignored_first(message, said):
            warnings.filterwarnings("ignore", message=message, category=UserWarning)


def _ignored_first(message: str, said: str) -> bool:
    for action, regex, category, module, _ in warnings.filters:
        if action == "ignore" and regex is not None and regex.pattern == message and category is UserWarning:
            return True
        if issubclass(UserWarning, category) and module is None and (regex is None or regex.match(said)):
            return False  # another filter takes it first
    return False


class Platform:
    """Sessions over one state database, one registry and a set of audit observers.

    Args:
        engine: The state database; the caller owns it (:func:`teamstore.open_platform` hands it to ``on_close``).
        registry: The config registry teams are built from.
        settings: Limits and defaults (TTL, byte cap, lease timeouts).
        observers: Audit observers every run streams into (transcripts, spans, ledger): none by default, and then
            no run leaves any (:func:`teamstore.audit.observer.build_audit_observers` makes them).
        tracer_provider: teamstore's own provider (:func:`teamstore.audit.telemetry.setup_tracing`), if it
            exports spans. AutoGen's spans of this platform's teams go to it, or nowhere when there is
            none: never to a global provider the host installed (unless content capture is opted in).
        meter_provider: teamstore's own meter provider (:func:`teamstore.audit.metrics.setup_metrics`), if
            it exports metrics: sessions record their resume outcomes, quarantines, lease waits and state
            sizes on it (:mod:`teamstore.runtime.metrics`).
        store: The state store, if the caller built it (and closes it); by default one is built on
            ``engine``, sealing states under users' data keys as ``settings`` say, and closed with the platform.
        memory: The user-memory store; by default one on ``engine``, sealing under users' data keys.
        on_close: Awaited last by :meth:`aclose`: how the composition root closes what it built for this
            platform (engine, stores, tracer provider).
        create_tables: Make teamstore's tables in a database that has none, where ``settings`` migrate it
            (``False`` for a command that only acts on what is stored).

    Raises:
        ConfigurationError: The installed autogen-core is not one whose spans teamstore can keep from the
            host's tracer provider, or autogen-agentchat moves between turns where teamstore does not expect.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        registry: Registry,
        *,
        settings: Settings | None = None,
        observers: Sequence[RunObserver] = (),
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        store: StateStore | None = None,
        memory: MemoryStore | None = None,
        on_close: Callable[[], Awaitable[None]] | None = None,
        create_tables: bool = True,
    ) -> None:
        self.engine = engine
        protect_engine(engine)  # one the caller built too: its statements' values hold users' ids and states
        self._create_tables = create_tables
        self.registry = registry
        self._settings = settings = settings or Settings()
        self.limits = SessionLimits.from_settings(settings)
        self.metrics = SessionMetrics(meter_provider)
        self._owns_store = store is None
        keys = KeyService.from_settings(engine, settings) if store is None or memory is None else None
        self.store: StateStore = store if store is not None else store_for(
            engine, pool_size=settings.db_pool_size, lease=settings.session_lease, keys=keys,
            check_seconds=settings.db_check_seconds,
        )
        self.observers: list[RunObserver] = list(observers)
        memory = memory if memory is not None else MemoryStore(engine, keys=keys)
        self._keys = keys if keys is not None else memory.keys  # the users' data keys the stores seal under
        self.memory = MemoryService(memory, registry.memory_facts)
        self.worker_id = f"{socket.gethostname()[:24]}:{os.getpid()}"
        self._on_close = on_close
        self._sessions = OpenSessions()
        self._closing: asyncio.Future[None] | None = None
        self._schema_checked = False
        self._schema_lock = asyncio.Lock()
        self._autogen_tracing = provider_for_autogen(
            tracer_provider, capture_content=self.settings.capture_message_content
        )
        if self._autogen_tracing is not None:
            install()  # here, not at the first run: an autogen-core it cannot route fails at start
        turns.install()  # the point between two turns (checkpoints, the tools' idempotency key), likewise
        self.teams = TeamBuilder(registry, refresh_seconds=self.settings.registry_refresh_seconds,
                                 spans=self.autogen_spans, stream_usage_hosts=self.settings.stream_usage_hosts)
        if not self.settings.capture_message_content:
            keep_content_out_of_logs()
            keep_content_out_of_warnings()
        keep_request_bodies_out_of_logs()  # also for clients the caller made: KMS's bodies hold data keys
        keep_query_values_out_of_logs()  # a gateway's key in a model client's base_url, on every request's line
        keep_cancellation_out_of_errors()

    @property
    def settings(self) -> Settings:
        """Limits and defaults. Settings given later reach the sessions already open (their next run or
        save) and the definition cache (its refresh interval)."""
        return self._settings

    @settings.setter
    def settings(self, settings: Settings) -> None:
        self._settings = settings
        self.limits.follow(settings)
        self.teams.refresh_seconds = settings.registry_refresh_seconds

    @contextlib.contextmanager
    def autogen_spans(self) -> Iterator[None]:
        """A block whose AutoGen spans go where this platform sends them (see ``tracer_provider``).

        Teams built by :meth:`build_team` keep the route for their runtime's spans; a caller running such a
        team itself (rather than through a session) runs it inside this block, so that the agent and tool
        spans, which AutoGen starts from the global provider, follow it too.
        """
        with autogen_spans_to(self._autogen_tracing):
            yield

    async def ensure_schema(self) -> None:
        """Migrate the embedded database, or check a production one is migrated and leases sessions the way
        this process is set to, and that ``TEAMSTORE_KMS_KEY_ID`` names a key the database uses (once per
        platform; see :meth:`KeyService.check_configured`).

        Raises:
            PlatformClosed: :meth:`aclose` has begun: the engine is being disposed of, and a check now would open
                connections on it that nothing closes.
        """
        self._sessions.refuse_once_closing("it checks no schema")
        await self._check_schema()

    async def _check_schema(self) -> None:
        if self._schema_checked:  # every request asks: no lock once it is done
            return
        async with self._schema_lock:
            if self._schema_checked:
                return
            await ensure_current(self.engine, migrate=self.settings.should_auto_migrate,
                                 create=self._create_tables)
            await self.store.check_lease_mode()  # a worker of the other kind of lease fails here, at start
            if self._keys is not None:
                await self._keys.check_configured()  # so does one naming a KMS key the database never used
            self._schema_checked = True

    async def build_team(self, ref: str) -> BuiltTeam:
        """A fresh team for ``ref`` (``name``, ``name@version``, ``name@label``), model clients metered.

        Definitions are cached: a pinned version forever (it cannot change), a name or label for
        ``registry_refresh_seconds`` so a moved label reaches every worker within that time.

        Raises:
            PlatformClosed: :meth:`aclose` has begun (a team built now would run on no platform).
            RegistryError: ``ref`` does not resolve, a secret is unavailable, or the definition does not load.
        """
        self._sessions.refuse_once_closing("it builds no team")
        return await self._build_team(ref)

    async def _build_team(self, ref: str) -> BuiltTeam:
        # The sessions' builds: one the close cuts off while it opens says so itself (Session._acquire).
        await self._check_schema()
        return await self.teams.build(ref)

    def session(
        self, user_id: str, session_id: str, team: str, *, lease_timeout: float | None = None,
        continuing: bool = False,
    ) -> Session:
        """Open a session (use with ``async with``).

        Args:
            user_id: The user, stored exactly as given.
            session_id: The session, unique per user.
            team: Registry reference of the team to build.
            lease_timeout: How long to wait for a session another request holds (of any worker, this one too).
            continuing: It is opened to continue its interrupted run (``continue_run()``): a team that run's
                checkpoint does not fit (a mistyped one, a label moved since) is refused as it opens
                (``RunCannotContinue``) and the checkpoint stays, rather than being set aside.

        Raises:
            InvalidIdentifier: ``user_id`` or ``session_id`` is empty, too long, or holds control characters.

        Entering the session (``async with``) raises, before the team runs: ``SessionBusy`` (another request,
        of this process or another worker, kept it past the wait), ``ErasureInProgress``, ``TooManySessions``
        (a new session for a user who keeps ``max_sessions_per_user`` live ones; a resume is never refused),
        ``RunCannotContinue`` (with
        ``continuing``), ``PlatformClosed`` (:meth:`aclose` has begun), ``SchemaNotReady`` (the database was
        migrated past this code, or back, since the platform checked it last: ``TEAMSTORE_DB_CHECK_SECONDS``)
        and ``StoreUnavailable``.
        """
        timeout = self.settings.lease_timeout_seconds if lease_timeout is None else lease_timeout
        if not self.settings.capture_message_content:  # a host's record factory or warning filter set since
            still_content_left_out()
            keep_content_out_of_warnings()
        return Session(self._session_deps(), user_id, session_id, team, timeout, continuing)

    def _session_deps(self) -> SessionDeps:
        # Read at each opening: a store or observer swapped on the platform reaches the next session.
        return SessionDeps(
            store=self.store, observers=self.observers, limits=self.limits,
            build_team=self._build_team, autogen_spans=self.autogen_spans, worker_id=self.worker_id,
            metrics=self.metrics, memory=self.memory, build_ahead=self.teams.build_ahead, sessions=self._sessions,
            forgetting=self._forgetting,
        )

    async def _forgetting(self, user_id: str) -> bool:
        """Whether the retention sweep's hold is on ``user_id`` (asked only once an opening was refused)."""
        async with self.engine.connect() as conn:
            return bool(await conn.scalar(select(forgetting(user_id))))

    async def restore_quarantined(self, quarantine_id: int, *, replace: bool = False) -> Restored:
        """Put a quarantined state back as its session's state, e.g. after rolling back the change that
        refused it. The next session validates it again against the team it builds, and refuses it
        again (back to quarantine) if it still does not fit.

        The state goes back alone: a copy of the checkpoint of a run it had interrupted stays in the quarantine
        (the run was recorded as ended when it was set aside, so it is not continued). With ``replace``, an
        interrupted run the session holds now is recorded first, as deleting its session would record it, and
        its checkpoint quarantined with the session's state.

        Args:
            quarantine_id: The quarantined row (``store.list_quarantined()``).
            replace: Quarantine what the session holds now (a state saved since, an interrupted run's
                checkpoint), instead of refusing.

        Raises:
            QuarantineNotFound, StaleStateVersion, SessionBusy, ErasureInProgress, StoreUnavailable: see
                :meth:`teamstore.state.base.StateStore.restore_quarantined`.
            PlatformClosed: :meth:`aclose` has begun.
        """
        self._sessions.refuse_once_closing("it restores no state")
        found = await self.store.get_quarantined(quarantine_id)
        ttl_days = self.settings.state_ttl_days if found is None else await self._ttl_days(found.team, found.team_version)
        return await self.store.restore_quarantined(
            quarantine_id, ttl=timedelta(days=ttl_days), replace=replace,
            wait_seconds=self.settings.lease_timeout_seconds,
            retention=timedelta(days=self.settings.quarantine_retention_days),
            ending=interruptions.ending(self.observers, "replaced"),
        )

    async def _ttl_days(self, team: str, version: str) -> float:
        """The state TTL of the team version a state was saved by (its manifest's, else the default)."""
        try:
            definition = await self.teams.definition(f"{team}@{version}")
        except RegistryError:  # a version no longer in the registry: the runtime's default
            return self.settings.state_ttl_days
        return definition.manifest.state_ttl_days or self.settings.state_ttl_days

    async def delete_session(self, user_id: str, session_id: str) -> bool:
        """Delete one session's stored state and quarantined copies (a user's "delete this
        conversation"); returns whether it had any. Waits for an open session like a request does, one open
        in this process too (``SessionBusy`` once the wait is over). A run
        the session left interrupted is recorded first, as abandoning it would: its completed turns to its
        transcript, the model calls it paid for to the ledger.

        Raises:
            InvalidIdentifier, SessionBusy, ErasureInProgress, StoreUnavailable, PlatformClosed.
        """
        key = SessionKey(check_id("user_id", user_id), check_id("session_id", session_id))
        self._sessions.refuse_once_closing("it deletes no session")
        return await self.store.delete_session(key, wait_seconds=self.settings.lease_timeout_seconds,
                                               ending=interruptions.ending(self.observers, "deleted"))

    async def show_memory(self, user_id: str, team: str | None = None) -> list[UserMemory]:
        """What is kept about ``user_id``: a summary and facts per scope (``team``: that scope alone, the team's
        name unless it shares a declared scope). Damaged facts are listed, not raised; memory past its expiry and
        facts left over from a memory that no longer exists are not (the user's export holds them until swept).

        Raises:
            InvalidIdentifier (the user id, or a ``team`` no scope can be named), StoreUnavailable, PlatformClosed.
        """
        self._sessions.refuse_once_closing("it shows no memory")
        return await self.memory.store.show(user_id, team)

    async def forget_memory(self, user_id: str, *, team: str | None = None, fact: str | None = None) -> Forgotten:
        """Forget one fact kept about ``user_id`` (``fact``), or everything (``fact=None``), in one scope or all.

        Raises:
            InvalidIdentifier (the user id, or a ``team`` or ``fact`` no manifest can declare), MemoryNotFound (a
            named fact is not kept), StoreUnavailable, PlatformClosed.
        """
        self._sessions.refuse_once_closing("it forgets no memory")
        return await self.memory.store.forget(user_id, scope=team, fact=fact)

    async def drain_memory(self) -> None:
        """Wait for the memory writes in flight (sessions that closed start one in the background)."""
        await self.memory.drain()

    async def aclose(self, *, wait_seconds: float | None = None) -> None:
        """Close gracefully, as a service shuts down: refuse new sessions (``PlatformClosed``), wait for the
        sessions open in this process to end, then finish the memory writes in flight, flush telemetry and
        dispose of what this platform was given to close. A session still open when the wait is over has its run
        in flight stopped (its audit written first; a run with checkpoints writes its last one, with the model
        calls paid since the one before), its lease given back, and writes nothing more: its next save or
        checkpoint raises ``PlatformClosed``; one still opening does not open.
        Closing again (or at once from another task) waits for the first close; a caller cancelled while it
        waits leaves the close going on.

        Args:
            wait_seconds: The longest to wait for the open sessions to end (0 to 3600); by default
                ``lease_timeout_seconds``, what a request waits for a session another one holds.

        Raises:
            ConfigurationError: ``wait_seconds`` is not a span of seconds in that range.
        """
        wait = self.settings.lease_timeout_seconds if wait_seconds is None else check_wait(
            wait_seconds, "wait_seconds", "pass how long to wait, in seconds, for the open sessions to end")
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close(wait))
        await asyncio.shield(self._closing)

    async def _close(self, wait_seconds: float) -> None:
        left = await self._sessions.close(wait_seconds)
        if left:
            log.warning("closed the platform with %d session(s) still open after %gs: their leases were given "
                        "back and they write nothing more", left, wait_seconds)
        await self.teams.aclose()
        await self.memory.drain()
        await drain_observers(self.observers)
        if self._owns_store:
            await self.store.aclose()
        if self._on_close is not None:
            await self._on_close()

    async def __aenter__(self) -> Platform:
        """Check the database as a worker starts (:meth:`ensure_schema`); a start refused closes the platform
        (:meth:`aclose`) before it raises, as the caller gets no platform to close.

        Raises:
            PlatformClosed: The platform has been closed (or is closing): it does not open again.
        """
        self._sessions.refuse_once_closing("it does not open again")
        try:
            await self.ensure_schema()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
