"""The composition root: settings -> engine, stores, tracer and meter providers, observers, registry, erasure
and export coordinators.

The library (:func:`open_platform`, :func:`erase_user`) and the command line (``teamstore.cli._runner``)
build what they need here. Each piece is built once, only when first
asked for, and :meth:`App.aclose` closes what was built and nothing else:

    from teamstore.app import App
    from teamstore.settings import Settings

    settings = Settings()
    app = App(settings, must_exist=True)     # only reads: an SQLite file that is not there is not made
    try:
        await app.ensure_schema()              # migrate the embedded database, else check it is current
        rows = await app.state_store.list_sessions("alice", 10)
    finally:
        await app.aclose()

    platform = App(settings).platform()        # the platform closes the app when it closes

It sits above every other package (runtime, audit, erasure), and none of them imports it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from teamstore.settings import Settings

# Each piece's modules are imported when the piece is first built: a command that reads the ledger does
# not import AutoGen, boto3 or OpenTelemetry's exporters, and `teamstore --help` imports none of this.
if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from sqlalchemy.engine import Engine
    from sqlalchemy.ext.asyncio import AsyncEngine

    from config_registry import Registry
    from teamstore.audit.transcripts import TranscriptStore
    from teamstore.erasure.coordinator import DeletionCoordinator
    from teamstore.erasure.receipt import Receipt
    from teamstore.erasure.steps import Notice, Progress
    from teamstore.events import RunObserver
    from teamstore.export.coordinator import ExportCoordinator
    from teamstore.keys.service import KeyService
    from teamstore.memory.store import MemoryStore
    from teamstore.runtime.platform import Platform
    from teamstore.state.base import StateStore


METRICS_SHUTDOWN_S = 5.0
"""How long closing waits for the meter provider's last collection and export."""


class App:
    """The pieces teamstore is made of, built from one set of settings.

    Args:
        settings: Defaults to ``Settings()`` (the environment, else the embedded default).
        must_exist: The caller only reads or acts on what is stored: an SQLite database that does not
            exist yet is refused (``SchemaNotReady`` names ``teamstore db upgrade``) instead of being
            created empty, which would only answer "nothing stored".
    """

    def __init__(self, settings: Settings | None = None, *, must_exist: bool = False) -> None:
        self.settings = settings or Settings()
        self.must_exist = must_exist
        self._engine: AsyncEngine | None = None
        self._state_store: StateStore | None = None
        self._keys: KeyService | None = None
        self._memory_store: MemoryStore | None = None
        self._transcript_store: TranscriptStore | None = None
        self._tracer_provider: TracerProvider | None = None
        self._tracing_set_up = False  # set up once, even when there is nothing to export to
        self._meter_provider: MeterProvider | None = None
        self._metrics_set_up = False
        self._gauge_reader: Engine | None = None

    @property
    def engine(self) -> AsyncEngine:
        """The state database (``TEAMSTORE_DATABASE_URL``, else the embedded SQLite file).

        Raises:
            SchemaNotReady: ``must_exist`` and the SQLite file does not exist.
            ConfigurationError: The URL is not one teamstore can use.
        """
        if self._engine is None:
            from teamstore.db.engine import create_engine

            self._engine = create_engine(self.settings.resolved_database_url, must_exist=self.must_exist)
        return self._engine

    @property
    def keys(self) -> KeyService:
        """Users' data keys on :attr:`engine`, wrapped by KMS (``TEAMSTORE_KMS_KEY_ID``) or the local key file;
        every store below seals through this one service (one cache of unwrapped keys)."""
        if self._keys is None:
            from teamstore.keys.service import KeyService

            self._keys = KeyService.from_settings(self.engine, self.settings)
        return self._keys

    @property
    def state_store(self) -> StateStore:
        """The resume-state store on :attr:`engine`, leasing sessions as ``TEAMSTORE_SESSION_LEASE`` says, each
        state sealed under its user's data key."""
        if self._state_store is None:
            from teamstore.state.factory import store_for

            self._state_store = store_for(
                self.engine, pool_size=self.settings.db_pool_size, lease=self.settings.session_lease, keys=self.keys,
                check_seconds=self.settings.db_check_seconds,
            )
        return self._state_store

    @property
    def memory_store(self) -> MemoryStore:
        """Users' memory (summary and facts), on :attr:`engine`, sealed under users' data keys as the states are."""
        if self._memory_store is None:
            from teamstore.memory.store import MemoryStore

            self._memory_store = MemoryStore(self.engine, keys=self.keys)
        return self._memory_store

    @property
    def transcript_store(self) -> TranscriptStore:
        """The transcript store ``TEAMSTORE_TRANSCRIPTS_URL`` names (a folder under the home by default).

        Raises:
            ConfigurationError: The URL is not supported. MissingExtra: it needs a package not installed.
        """
        if self._transcript_store is None:
            from teamstore.audit.transcripts import transcript_store_from_settings

            self._transcript_store = transcript_store_from_settings(self.settings)
        return self._transcript_store

    @property
    def tracer_provider(self) -> TracerProvider | None:
        """teamstore's own (scrubbing) tracer provider, or ``None`` unless an OTLP endpoint is set."""
        if not self._tracing_set_up:
            from teamstore.audit.telemetry import setup_tracing

            self._tracer_provider, self._tracing_set_up = setup_tracing(self.settings), True
        return self._tracer_provider

    @property
    def meter_provider(self) -> MeterProvider | None:
        """teamstore's own meter provider, or ``None`` unless an OTLP endpoint is set for metrics.

        Besides what runs and sessions record on it, it reports the outbox and the erasure requests as
        gauges, read from the database (a connection of their own, none kept) each time it collects.

        Raises:
            ConfigurationError: OTLP is configured over a protocol teamstore cannot export over.
        """
        if not self._metrics_set_up:
            from teamstore.audit.metrics import setup_metrics

            self._meter_provider, self._metrics_set_up = setup_metrics(self.settings), True
            if self._meter_provider is not None:
                self._observe_database(self._meter_provider)
        return self._meter_provider

    def _observe_database(self, provider: MeterProvider) -> None:
        from teamstore.audit.metrics import METER, observe_outbox
        from teamstore.db.engine import create_reader
        from teamstore.erasure.metrics import observe_erasures

        self._gauge_reader = create_reader(self.engine)
        meter = provider.get_meter(METER)
        observe_outbox(meter, self._gauge_reader)
        observe_erasures(meter, self._gauge_reader)

    def registry(self, *, create: bool = True) -> Registry:
        """The config registry (``TEAMSTORE_REGISTRY_PATH``, else ``$TEAMSTORE_HOME/registry``).

        Args:
            create: Make the repository if it does not exist; otherwise a missing one is an error.
        """
        from config_registry import Registry

        return Registry(self.settings.resolved_registry_path, create=create)

    def audit_observers(self) -> list[RunObserver]:
        """The audit trail: ledger and transcript observers, and spans and metrics when an OTLP endpoint is set."""
        from teamstore.audit.observer import build_audit_observers

        return build_audit_observers(self.settings, self.engine, tracer_provider=self.tracer_provider,
                                     transcripts=self.transcript_store, meter_provider=self.meter_provider,
                                     keys=self.keys)

    def platform(self, *, audit: bool = True, create_registry: bool = False) -> Platform:
        """A platform on these pieces; closing it closes this app.

        Args:
            audit: Attach the transcript, span and ledger observers.
            create_registry: Make the registry if it does not exist. By default a missing one is an error: a
                worker given a mistyped path would otherwise make an empty registry and answer every request
                'no team'.

        Raises:
            RegistryNotFound: There is no registry at the path (and ``create_registry`` is false).
        """
        from teamstore.runtime.platform import Platform

        engine = self.engine  # a database that must exist and does not is said first
        registry = self.registry(create=create_registry)
        observers = self.audit_observers() if audit else []
        return Platform(
            engine, registry, settings=self.settings, observers=observers,
            tracer_provider=self.tracer_provider if audit else None,
            meter_provider=self.meter_provider if audit else None, store=self.state_store,
            memory=self.memory_store, on_close=self.aclose, create_tables=not self.must_exist,
        )

    def erasure(self, progress: Progress | None = None, notice: Notice | None = None,
                opened: Callable[[str], None] | None = None) -> DeletionCoordinator:
        """The deletion coordinator over the database, the transcript store and the users' keys; ``progress`` and
        ``notice`` hear how its steps advance and what it waits for, ``opened`` the id of the request it opens."""
        from teamstore.erasure.coordinator import DeletionCoordinator

        return DeletionCoordinator(self.engine, self.transcript_store, self.settings, progress=progress,
                                   keys=self.keys, notice=notice, opened=opened)

    async def forget_quiet_users(self, now: datetime) -> tuple[int, int] | None:
        """Forget the users nothing is left of (:func:`teamstore.erasure.quiet.forget_quiet_users`), under the
        erasure's fence grace; how many it forgot, and how many it found quiet but kept (``None``: another sweep is
        forgetting them). The retention sweep's last step."""
        from teamstore.erasure.quiet import forget_quiet_users
        from teamstore.erasure.settings import ErasureSettings

        quiet = await forget_quiet_users(self.engine, self.transcript_store, self.keys,
                                         grace_seconds=ErasureSettings().fence_grace_seconds, now=now,
                                         memory_sealed=True)  # memory_store seals, as every writer it builds
        return None if quiet.busy else (quiet.forgotten, quiet.kept)

    def exporter(self) -> ExportCoordinator:
        """The export coordinator over every store: those below it, and the erasure requests.

        Raises:
            ConfigurationError: The price table (``TEAMSTORE_PRICES_PATH``) cannot be read.
        """
        from teamstore.audit.prices import load_prices
        from teamstore.audit.transcripts import LocalTranscriptStore
        from teamstore.erasure.exporter import ErasureRequestsExporter
        from teamstore.export.coordinator import ExportCoordinator, store_exporters

        exporters = [*store_exporters(), ErasureRequestsExporter()]
        # The folders teamstore's stores live in: an archive there would be backed up with them, out of an
        # erasure's reach.
        keep_out = [self.settings.home, self.settings.resolved_registry_path]
        if isinstance(self.transcript_store, LocalTranscriptStore):
            keep_out.append(self.transcript_store.root)
        return ExportCoordinator(self.engine, self.transcript_store, exporters, load_prices(self.settings.prices_path),
                                 keys=self.keys, keep_out=keep_out, lease_seconds=self.settings.export_lease_seconds)

    async def ensure_schema(self, *, lease: bool = False) -> None:
        """Migrate the embedded database (or any, with ``TEAMSTORE_AUTO_MIGRATE``), else check it is current.

        Args:
            lease: Also check the database leases sessions the way this process is set to.

        Raises:
            SchemaNotReady: A production database is not migrated, or ``must_exist`` and there is none (or
                it holds no teamstore tables: a command that only reads never makes them).
            ConfigurationError: ``lease`` and the database records the other kind of lease.
        """
        from teamstore.db.migrate import ensure_current

        await ensure_current(self.engine, migrate=self.settings.should_auto_migrate, create=not self.must_exist)
        if lease:
            await self.state_store.check_lease_mode()

    async def aclose(self) -> None:
        """Close what was built, each piece once (calling it again does nothing)."""
        tracing, self._tracer_provider, self._tracing_set_up = self._tracer_provider, None, False
        metering, self._meter_provider, self._metrics_set_up = self._meter_provider, None, False
        reader, self._gauge_reader = self._gauge_reader, None
        transcripts, self._transcript_store = self._transcript_store, None
        state, self._state_store, self._keys = self._state_store, None, None
        self._memory_store = None  # holds nothing of its own: the engine is closed below
        engine, self._engine = self._engine, None
        try:
            if metering is not None:  # a last collection and export, bounded: a down collector holds no exit
                await asyncio.to_thread(metering.shutdown, timeout_millis=METRICS_SHUTDOWN_S * 1000)
            if reader is not None:
                reader.dispose()
            if tracing is not None:
                await asyncio.to_thread(tracing.shutdown)  # flushes the spans still queued
            if transcripts is not None:
                await transcripts.close()
            if state is not None:
                await state.aclose()
        finally:
            if engine is not None:
                await engine.dispose()


def open_platform(settings: Settings | None = None, *, audit: bool = True) -> Platform:
    """A platform built from settings (the environment, else the embedded default): database, registry and
    audit trail, all closed when the platform closes.

    Args:
        settings: Defaults to ``Settings()``.
        audit: Attach the transcript, span and ledger observers.

    Raises:
        RegistryNotFound: There is no registry at ``TEAMSTORE_REGISTRY_PATH`` (``teamstore registry add`` makes
            it with the first team).
    """
    return App(settings).platform(audit=audit)


async def erase_user(
    user_id: str,
    *,
    request_id: str | None = None,
    reason: str | None = None,
    dry_run: bool = False,
    settings: Settings | None = None,
    check: bool = True,
    requested_by: str | None = None,
    operator: str | None = None,
) -> Receipt:
    """Erase ``user_id`` using the database and transcript store the settings name.

    Args:
        user_id: The raw user id, matched exactly.
        request_id: Idempotency key (rerun it to resume); fresh when omitted.
        reason: Stored with the request.
        dry_run: Enumerate only; no request is stored, and the receipt's ``request_id`` is ``None``.
        settings: Defaults to ``Settings()`` (the environment).
        check: Raise unless every store is ``erased`` or ``no_match``.
        requested_by: Who asked (the data subject, a representative, a ticket), on the receipt.
        operator: Who runs it, on the receipt; ``TEAMSTORE_OPERATOR``, else the OS user, when omitted.

    Returns:
        The receipt; its status is ``no_match`` (and ``ok``) when no store held anything for the id, which
        may be mistyped: ``receipt.near_match`` says whether a near-identical id holds data.

    Raises:
        ErasureIncomplete: ``check`` is on and a store failed or is retained under a hold (the
            receipt is on the exception).
        ErasureConflict: Another erasure of the user is open or running.
        StoreUnavailable: The database is down.
        SchemaNotReady: A production database is not migrated (`teamstore db upgrade`), or the embedded
            one does not exist yet (nothing is stored there: a receipt would only mislead).
    """
    from teamstore.errors import ErasureIncomplete

    # Every request is about what is stored: on a database that does not exist yet (a mistyped
    # TEAMSTORE_HOME, say), an erasure would find nothing and file a receipt saying so.
    app = App(settings, must_exist=True)
    try:
        await app.ensure_schema()
        receipt = await app.erasure().run(user_id, request_id, reason, dry_run, requested_by=requested_by,
                                          operator=operator)
    finally:
        await app.aclose()
    if check and not receipt.ok:
        # Named as log lines name it: an id the caller gave may hold a user's email, and a service logs this.
        raise ErasureIncomplete(
            f"erasure {receipt.logged_as or '(a dry run)'} ended {receipt.status}",
            hint="`teamstore erase status` with the request id (the error's receipt.request_id) prints its receipt; "
            "rerun the same request id to resume",
            receipt=receipt,
        )
    return receipt
