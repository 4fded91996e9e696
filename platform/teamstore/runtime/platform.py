"""The entry point for application services: build teams from the registry, open sessions on them.

    from teamstore.runtime.platform import Platform

    platform = Platform.from_settings()               # embedded default: SQLite + local folder
    async with platform:
        async with platform.session("user-1", "s-1", team="support_triage") as s:
            result = await s.run("hello")

Or with pieces the caller owns:

    platform = Platform(engine=my_engine, registry=Registry(path), settings=Settings())
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any

from opentelemetry.trace import TracerProvider
from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import BuiltTeam, Registry, TeamDefinition
from config_registry.build import build_team
from config_registry.errors import RegistryError
from teamstore.audit.autogen_spans import autogen_spans_to, install, provider_for_autogen
from teamstore.audit.transcripts.base import TranscriptStore
from teamstore.db.engine import create_engine
from teamstore.db.migrate import require_current, upgrade
from teamstore.ids import check_id
from teamstore.metering import wrap_model_clients
from teamstore.runtime.hooks import RunObserver
from teamstore.runtime.session import Session
from teamstore.settings import Settings
from teamstore.state.base import Restored, SessionKey
from teamstore.state.sql import SqlStateStore, store_for

# AutoGen's own loggers record every message, content included, at INFO ("autogen_core.events" and
# "autogen_agentchat.events" among them).
_AUTOGEN_LOGGERS = ("autogen_core", "autogen_agentchat")


def keep_content_out_of_logs() -> None:
    """Raise AutoGen's loggers to WARNING, unless the application has set their level itself.

    A Platform does this unless ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` opts in to message
    content in telemetry, so a service logging at INFO does not write its users' messages to its logs.
    """
    for name in _AUTOGEN_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)


class Platform:
    """Sessions over one state database, one registry and a set of audit observers.

    Args:
        engine: The state database; the caller owns it unless built by :meth:`from_settings`.
        registry: The config registry teams are built from.
        settings: Limits and defaults (TTL, byte cap, lease timeouts).
        observers: Audit observers every run streams into (transcripts, spans, ledger).
        tracer_provider: teamstore's own provider (:func:`teamstore.audit.telemetry.setup_tracing`), if it
            exports spans. AutoGen's spans of this platform's teams go to it, or nowhere when there is
            none: never to a global provider the host installed (unless content capture is opted in).

    Raises:
        ConfigurationError: The installed autogen-core is not one whose spans teamstore can keep from the
            host's tracer provider.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        registry: Registry,
        *,
        settings: Settings | None = None,
        observers: Sequence[RunObserver] = (),
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self.engine = engine
        self.registry = registry
        self.settings = settings or Settings()
        self.store: SqlStateStore = store_for(
            engine, pool_size=self.settings.db_pool_size, lease=self.settings.session_lease
        )
        self.observers: list[RunObserver] = list(observers)
        self.worker_id = f"{socket.gethostname()[:24]}:{os.getpid()}"
        self._owns_engine = False
        self._schema_checked = False
        self._schema_lock = asyncio.Lock()
        self._closers: list[Any] = []
        self._stores: list[TranscriptStore] = []  # transcript stores this platform made, closed with it
        self._definitions: dict[str, tuple[TeamDefinition, float]] = {}
        self._autogen_tracing: TracerProvider | None = None
        self._route_autogen_spans(tracer_provider)
        if not self.settings.capture_message_content:
            keep_content_out_of_logs()

    def _route_autogen_spans(self, provider: TracerProvider | None) -> None:
        self._autogen_tracing = provider_for_autogen(
            provider, capture_content=self.settings.capture_message_content
        )
        if self._autogen_tracing is not None:
            install()  # here, not at the first run: an autogen-core it cannot route fails at start

    @contextlib.contextmanager
    def autogen_spans(self) -> Iterator[None]:
        """A block whose AutoGen spans go where this platform sends them (see ``tracer_provider``).

        Teams built by :meth:`build_team` keep the route for their runtime's spans; a caller running such a
        team itself (rather than through a session) runs it inside this block, so that the agent and tool
        spans, which AutoGen starts from the global provider, follow it too.
        """
        with autogen_spans_to(self._autogen_tracing):
            yield

    @classmethod
    def from_settings(cls, settings: Settings | None = None, *, audit: bool = True) -> Platform:
        """Build everything from settings (environment): database, registry, audit trail.

        Args:
            settings: Defaults to ``Settings()`` (the environment, else the embedded default).
            audit: Attach the transcript, span and ledger observers.
        """
        settings = settings or Settings()
        engine = create_engine(settings.resolved_database_url)
        platform = cls(engine, Registry(settings.resolved_registry_path), settings=settings)
        platform._owns_engine = True
        if audit:
            platform._attach_audit()
        return platform

    def _attach_audit(self) -> None:
        from teamstore.audit.observer import TranscriptObserver, build_audit_observers
        from teamstore.audit.telemetry import setup_tracing

        provider = setup_tracing(self.settings)
        if provider is not None:
            self._closers.append(provider.shutdown)
            self._route_autogen_spans(provider)
        observers = build_audit_observers(self.settings, self.engine, tracer_provider=provider)
        self.observers.extend(observers)
        # The transcript store was made here, so it is closed here (its connections and threads).
        self._stores.extend(o.store for o in observers if isinstance(o, TranscriptObserver))

    async def ensure_schema(self) -> None:
        """Migrate the embedded database, or check a production one is migrated and leases sessions the way
        this process is set to (once per platform)."""
        async with self._schema_lock:
            if self._schema_checked:
                return
            if self.settings.should_auto_migrate:
                await upgrade(self.engine)
            else:
                await require_current(self.engine)
            await self.store.check_lease_mode()  # a worker of the other kind of lease fails here, at start
            self._schema_checked = True

    async def build_team(self, ref: str) -> BuiltTeam:
        """A fresh team for ``ref`` (``name``, ``name@version``, ``name@label``), model clients metered.

        Definitions are cached: a pinned version forever (it cannot change), a name or label for
        ``registry_refresh_seconds`` so a moved label reaches every worker within that time.
        """
        await self.ensure_schema()
        definition = await self._definition(ref)
        with self.autogen_spans():  # the runtimes built here keep it; agent creation spans are started here
            return build_team(definition, transform=wrap_model_clients)

    async def _definition(self, ref: str) -> TeamDefinition:
        cached = self._definitions.get(ref)
        now = time.monotonic()
        if cached is not None and (cached[1] == float("inf") or now - cached[1] < self.settings.registry_refresh_seconds):
            return cached[0]
        definition = await asyncio.to_thread(self.registry.resolve, ref)
        # A version never moves, so it is cached for good; a label (it resolved through one if it is
        # among the version's labels, since labels win over version prefixes) or a bare name is looked
        # up again after the refresh interval.
        selector = ref.partition("@")[2]
        pinned = bool(selector) and selector not in definition.labels
        self._definitions[ref] = (definition, float("inf") if pinned else now)
        return definition

    def session(self, user_id: str, session_id: str, team: str, *, lease_timeout: float | None = None) -> Session:
        """Open a session (use with ``async with``).

        Args:
            user_id: The user, stored exactly as given.
            session_id: The session, unique per user.
            team: Registry reference of the team to build.
            lease_timeout: How long to wait for a session another worker holds.

        Raises:
            InvalidIdentifier: ``user_id`` or ``session_id`` is empty, too long, or holds control characters.

        Entering the session (``async with``) raises, before the team runs: ``SessionBusy`` (another worker
        kept it past the wait), ``ErasureInProgress``, ``TooManySessions`` (a new session for a user who
        keeps ``max_sessions_per_user`` live ones; a resume is never refused) and ``StoreUnavailable``.
        """
        timeout = self.settings.lease_timeout_seconds if lease_timeout is None else lease_timeout
        return Session(self, user_id, session_id, team, timeout)

    async def restore_quarantined(self, quarantine_id: int, *, replace: bool = False) -> Restored:
        """Put a quarantined state back as its session's state, e.g. after rolling back the change that
        refused it. The next session validates it again against the team it builds, and refuses it
        again (back to quarantine) if it still does not fit.

        Args:
            quarantine_id: The quarantined row (``store.list_quarantined()``).
            replace: Quarantine the state the session saved since, instead of refusing.

        Raises:
            QuarantineNotFound, StaleStateVersion, SessionBusy, ErasureInProgress, StoreUnavailable: see
                :meth:`teamstore.state.sql.SqlStateStore.restore_quarantined`.
        """
        found = await self.store.get_quarantined(quarantine_id)
        ttl_days = self.settings.state_ttl_days if found is None else await self._ttl_days(found.team, found.team_version)
        return await self.store.restore_quarantined(
            quarantine_id, ttl=timedelta(days=ttl_days), replace=replace,
            wait_seconds=self.settings.lease_timeout_seconds,
        )

    async def _ttl_days(self, team: str, version: str) -> float:
        """The state TTL of the team version a state was saved by (its manifest's, else the default)."""
        try:
            definition = await self._definition(f"{team}@{version}")
        except RegistryError:  # a version no longer in the registry: the runtime's default
            return self.settings.state_ttl_days
        return definition.manifest.state_ttl_days or self.settings.state_ttl_days

    async def delete_session(self, user_id: str, session_id: str) -> bool:
        """Delete one session's stored state and quarantined copies (a user's "delete this
        conversation"); returns whether it had any. Waits for an open session like a request does.

        Raises:
            InvalidIdentifier, SessionBusy, ErasureInProgress, StoreUnavailable.
        """
        key = SessionKey(check_id("user_id", user_id), check_id("session_id", session_id))
        return await self.store.delete_session(key, wait_seconds=self.settings.lease_timeout_seconds)

    async def aclose(self) -> None:
        """Flush telemetry and dispose of what this platform created."""
        for observer in self.observers:
            drain = getattr(observer, "drain", None)
            if drain is not None:
                await drain()
        for close in self._closers:
            await asyncio.to_thread(close)
        self._closers.clear()
        for store in self._stores:
            await store.close()
        await self.store.aclose()
        if self._owns_engine:
            await self.engine.dispose()

    async def __aenter__(self) -> Platform:
        await self.ensure_schema()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
