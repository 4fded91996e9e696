"""Settings, read from the environment, with an embedded default that needs none.

    from teamstore.settings import Settings

    settings = Settings()                 # ./.teamstore: SQLite, a local transcript folder, no exporter
    settings = Settings(home="/srv/ts")   # or TEAMSTORE_HOME=/srv/ts
    print(settings.resolved_database_url, settings.resolved_transcripts_url)   # the defaults filled in

Names: ``TEAMSTORE_HOME``, ``TEAMSTORE_REGISTRY_PATH``, ``TEAMSTORE_DATABASE_URL``,
``TEAMSTORE_TRANSCRIPTS_URL`` and the other ``TEAMSTORE_*`` fields below; S3 credentials and endpoints
come from the standard ``AWS_*`` variables (read by boto3), span export from the standard ``OTEL_*``
variables (read by the OpenTelemetry SDK).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import Field, ValidationError, ValidatorFunctionWrapHandler, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from config_registry.errors import validation_message
from teamstore.errors import ConfigurationError
from teamstore.limits import MAX_DAYS, MAX_LEASE_WAIT, MAX_SESSIONS_BOUND, MAX_TEXT_BYTES

EXPORT_LEASE_SECONDS = 120.0
"""An export's lease unless ``TEAMSTORE_EXPORT_LEASE_SECONDS`` says otherwise (seconds)."""
EXPORT_LEASE_RANGE = (1.0, 86_400.0)
"""The export leases the setting takes (seconds): one is renewed every third of its length, so a shorter one writes
to the database several times a second; a longer one keeps a killed export's record ``running``, and its user from
the retention sweep, for more than a day."""

_ASYNC_DRIVERS = {
    "postgres": "postgresql+psycopg",
    "postgresql": "postgresql+psycopg",
    "postgresql+psycopg2": "postgresql+psycopg",
    "sqlite": "sqlite+aiosqlite",
}


class TypedSettings(BaseSettings):
    """Settings whose bad values (``TEAMSTORE_STATE_TTL_DAYS=-1``) raise :class:`ConfigurationError`
    naming the variable, like every other teamstore error, instead of pydantic's ``ValidationError``."""

    def __init__(self, **values: Any) -> None:
        if unknown := sorted(set(values) - set(type(self).model_fields)):
            # The environment's other variables are ignored (extra="ignore"); a keyword given in code is a typo.
            near = difflib.get_close_matches(unknown[0], type(self).model_fields, n=1)
            raise ConfigurationError(
                f"{type(self).__name__} has no setting {unknown[0]!r}"
                + (f" (and {len(unknown) - 1} more unknown)" if len(unknown) > 1 else ""),
                hint=f"did you mean {near[0]!r}?" if near else "see the settings table in the README",
            )
        try:
            super().__init__(**values)
        except ValidationError as exc:
            # ``from None``: the ValidationError would repeat every input, a database password included.
            raise ConfigurationError(
                "; ".join(_describe(err, str(self.model_config.get("env_prefix", ""))) for err in exc.errors()),
                hint="fix or unset the variable (see the settings table in the README)",
            ) from None


_SENSITIVE = ("url", "key", "password", "secret", "token")


def _describe(err: Any, prefix: str) -> str:
    field = str(err["loc"][0]) if err.get("loc") else "?"
    name = f"{prefix}{field}".upper()
    if any(word in field for word in _SENSITIVE):
        return f"{name}: {validation_message(err)}"
    return f"{name}={err.get('input')!r}: {validation_message(err)}"


class Settings(TypedSettings):
    """Everything teamstore reads from the environment.

    Unset paths and URLs derive from ``home``, so ``TEAMSTORE_HOME`` alone moves the embedded default. An
    empty variable is an unset one (``TEAMSTORE_KEY_FILE=`` is the default key file, never the working folder).
    """

    model_config = SettingsConfigDict(env_prefix="TEAMSTORE_", extra="ignore", env_ignore_empty=True)

    home: Path = Field(default=Path(".teamstore"), description="Root of the embedded default.")
    registry_path: Path | None = Field(default=None, description="Git repository of team definitions.")
    database_url: str | None = Field(default=None, description="SQLAlchemy URL of the state database.")
    transcripts_url: str | None = Field(default=None, description="s3://bucket/prefix or file:///folder.")
    state_ttl_days: float = Field(default=7.0, gt=0, le=MAX_DAYS, description="Default resume-state TTL.")
    state_max_bytes: int = Field(
        default=1_048_576, gt=0, le=MAX_TEXT_BYTES, description="Hard cap on one session's state."
    )
    task_max_bytes: int = Field(
        default=262_144, gt=0, le=MAX_TEXT_BYTES, description="Largest task one run() takes (UTF-8 bytes; messages as JSON); "
        "a larger one is refused before the team runs.",
    )
    max_sessions_per_user: int = Field(
        default=1000, gt=0, le=MAX_SESSIONS_BOUND,
        description="Most unexpired stored sessions one user keeps: opening a new one past it is refused "
        "(TooManySessions) before the team runs; resuming a session is never refused.",
    )
    lease_timeout_seconds: float = Field(
        default=10.0, ge=0, le=MAX_LEASE_WAIT, description="How long to wait for a busy session."
    )
    lease_ttl_seconds: float = Field(
        default=300.0, gt=0, le=86_400,
        description="An open session renews its lease every third of this; a worker that stops renewing "
        "(crashed, hung) loses the session after it, and its late save is refused.",
    )
    export_lease_seconds: float = Field(
        default=EXPORT_LEASE_SECONDS,
        description="A running export renews its record's lease every third of this; a killed export's record "
        "reads as abandoned once it has passed (its range is checked by _export_lease).",
    )
    db_pool_size: int = Field(
        default=20, gt=0, description="Postgres: the state store's connection pool, and the audit's (each of its "
        "connections held for one statement); with lock leases, the most sessions one process holds open at once "
        "(a connection each).",
    )
    session_lease: Literal["lock", "row"] = Field(
        default="lock",
        description="Postgres: 'lock' leases a session with an advisory lock on a connection it holds until "
        "it saves (the fastest); 'row' leases it in its row (a commit per load, no connection held during "
        "the run). Must match the database ('teamstore db lease-mode'). SQLite always leases in the row.",
    )
    db_check_seconds: float = Field(
        default=30.0, ge=0, le=3600,
        description="How often a running worker reads the database's migration and lease mode again, at a session's "
        "opening: from the first opening after a newer release's `teamstore db upgrade` (or a restore from an older "
        "backup, or `teamstore db lease-mode`) it refuses new sessions. 0 reads them at every opening.",
    )
    registry_refresh_seconds: float = Field(
        default=5.0, ge=0, le=86_400, description="How long a worker trusts its cached NAME or NAME@LABEL resolution."
    )
    transcript_retention_days: int = Field(default=90, gt=0, le=MAX_DAYS)
    late_upload_seconds: float = Field(
        default=60.0, ge=0, le=86_400,
        description="How long after S3 left a transcript upload unanswered (a timeout, a dropped connection) it "
        "may still store it: the queued copy is sent again, and an erasure of its user goes on, only after this.",
    )
    ledger_retention_days: int = Field(default=400, gt=0, le=MAX_DAYS)
    quarantine_retention_days: int = Field(
        default=30, gt=0, le=MAX_DAYS, description="How long a refused state waits in quarantine to be restored."
    )
    memory_retention_days: float = Field(
        default=180.0, gt=0, le=MAX_DAYS,
        description="How long a user's memory lives after its last update, unless the team declares its own.",
    )
    memory_writer_timeout_seconds: float = Field(
        default=60.0, gt=0, le=3600, description="The longest one call of the memory writer's model may take.",
    )
    prices_path: Path | None = Field(default=None, description="Override of the shipped price table.")
    kms_key_id: str | None = Field(
        default=None,
        description="The AWS KMS key (id, ARN or alias) that wraps users' data keys when the database has none "
        "yet; unset, a local key file does. After `teamstore keys rotate` the database records the current one.",
    )
    key_file: Path | None = Field(
        default=None,
        description="The local key-encryption key file, $TEAMSTORE_HOME/key-encryption-keys.json unless set; "
        "kept out of the database's backups, and backed up apart (its loss makes every sealed payload unreadable).",
    )
    key_cache_seconds: float = Field(
        default=30.0, ge=0, le=3600,
        description="How long a worker keeps a user's unwrapped data key in memory; an erasure keeps its fence "
        "up this long after destroying the key.",
    )
    key_rotation_days: int = Field(
        default=21, gt=0, le=MAX_DAYS,
        description="How often `teamstore keys rotate` runs (schedule it): with key_retire_days, the bound on "
        "how long a backup taken before an erasure stays readable for the erased user.",
    )
    key_retire_days: int = Field(
        default=7, ge=0, le=MAX_DAYS,
        description="How long a key-encryption key replaced by a rotation stays usable (to restore a recent "
        "backup) before `teamstore keys retire` destroys it.",
    )
    auto_migrate: bool | None = Field(
        default=None, description="Create/upgrade tables on open; defaults to on for SQLite only."
    )
    stream_usage_urls: str | None = Field(
        default=None,
        description="Comma-separated base URLs (`http://llm.internal:8000/v1`) or hosts (`llm.internal`, "
        "`127.0.0.1:8000`) of OpenAI-compatible servers and Azure OpenAI resources that take `stream_options`: a "
        "streamed call to one asks for its usage.",
    )

    @field_validator("home", "registry_path", "prices_path", "key_file", mode="after")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @field_validator("export_lease_seconds", mode="wrap")
    @classmethod
    def _export_lease(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> float:
        # One message for every bad value, not a number included, so that it always says what the setting takes.
        try:
            seconds = float(handler(value))
        except ValidationError:
            seconds = float("nan")
        low, high = EXPORT_LEASE_RANGE
        if not low <= seconds <= high:  # nan too
            raise ValueError(f"takes a number of seconds from {low:g} to {high:g} (a day); unset, "
                             f"{EXPORT_LEASE_SECONDS:g}")
        return seconds

    @field_validator("database_url", mode="after")
    @classmethod
    def _kept(cls, value: str | None) -> str | None:
        # sqlite:// (and sqlite:///:memory:) is a database that lasts one connection: `db upgrade` "succeeded"
        # on one that was gone as it returned, and a run failed with "its random key was taken".
        scheme, _, rest = (value or "").partition("://")
        if scheme.startswith("sqlite") and rest.partition("?")[0] in ("", "/", "/:memory:"):
            raise ValueError("an in-memory SQLite database keeps nothing past one connection; name a file, e.g. "
                             "sqlite:////srv/teamstore/teamstore.db, or unset it for $TEAMSTORE_HOME/teamstore.db")
        return value

    @field_validator("stream_usage_urls", mode="after")
    @classmethod
    def _hosts(cls, value: str | None) -> str | None:
        for entry in filter(None, (part.strip() for part in (value or "").split(","))):
            _host(entry)  # a bad entry is refused when the settings are read, not at the first stream
        return value

    @property
    def stream_usage_hosts(self) -> frozenset[str]:
        """The hosts of ``stream_usage_urls``, each ``host`` or ``host:port`` (:func:`host_key`; a URL's path is not
        compared: a client's ``base_url`` on such a host, and port when the entry names one, is asked)."""
        return frozenset(_host(entry.strip()) for entry in (self.stream_usage_urls or "").split(",") if entry.strip())

    @property
    def resolved_registry_path(self) -> Path:
        """The registry repository, ``$TEAMSTORE_HOME/registry`` unless set."""
        return self.registry_path or self.home / "registry"

    @property
    def resolved_key_file(self) -> Path:
        """The local key-encryption key file, ``$TEAMSTORE_HOME/key-encryption-keys.json`` unless set."""
        return self.key_file or self.home / "key-encryption-keys.json"

    @property
    def resolved_database_url(self) -> str:
        """The async SQLAlchemy URL; plain ``postgresql://`` and ``sqlite://`` URLs get async drivers."""
        url = self.database_url or f"sqlite:///{(self.home / 'teamstore.db').as_posix()}"
        return to_async_url(url)

    @property
    def resolved_transcripts_url(self) -> str:
        """Where transcripts go, ``file://$TEAMSTORE_HOME/transcripts`` unless set."""
        return self.transcripts_url or (self.home / "transcripts").resolve().as_uri()

    @property
    def is_embedded_database(self) -> bool:
        """True for SQLite, which may migrate itself."""
        return self.resolved_database_url.startswith("sqlite")

    @property
    def should_auto_migrate(self) -> bool:
        """Production databases are only migrated by ``teamstore db upgrade``."""
        return self.is_embedded_database if self.auto_migrate is None else self.auto_migrate

    @property
    def otlp_configured(self) -> bool:
        """True when the standard ``OTEL_*`` variables have spans exported over OTLP (:func:`otlp_exports`)."""
        return otlp_exports("traces")

    @property
    def otlp_metrics_configured(self) -> bool:
        """True when the standard ``OTEL_*`` variables have metrics exported over OTLP (:func:`otlp_exports`)."""
        return otlp_exports("metrics")

    @property
    def capture_message_content(self) -> bool:
        """Operator opt-in to message content in telemetry (the GenAI semantic-convention variable)."""
        value = os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "false")
        return value.strip().lower() in {"1", "true", "yes"}


def _host(entry: str) -> str:
    """``entry``'s ``host`` or ``host:port`` (:func:`host_key`): a base URL's, or the entry itself. An entry is
    never repeated in an error: a URL may hold a gateway's key.

    Raises:
        ValueError: It names no host, an IPv6 host outside brackets, or more than a host, a port and (in a URL)
            a path.
    """
    parsed = urlparse(entry if "://" in entry else f"//{entry}")
    if "@" in entry:  # a user or password: neither is needed, and one is never repeated
        raise ValueError("an entry names a user or a password: give only the host, or the base URL without them")
    if parsed.netloc.count(":") > 1 and "[" not in parsed.netloc:  # else "::1" reads as host ":" and port 1
        raise ValueError("an entry names an IPv6 host outside brackets: write it as [fd00::5], [fd00::5]:8000 or "
                         "http://[fd00::5]:8000/v1")
    try:
        host, port = parsed.hostname or "", parsed.port
    except ValueError:
        host, port = "", None
    if not host or (parsed.path and "://" not in entry):
        raise ValueError("an entry names no host: give each as llm.internal, 127.0.0.1:8000 or a base URL such as "
                         "http://llm.internal:8000/v1, separated by commas")
    return host_key(host, port)


def host_key(host: str, port: int | None = None) -> str:
    """How a host, and a port when given, are compared: lower-case, without a final dot, an IPv6 address in
    brackets (``[::1]:8000`` and ``[::1:8000]`` are different endpoints)."""
    host = host.lower().rstrip(".")
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port}" if port is not None else host


def otlp_exports(signal: Literal["traces", "metrics"]) -> bool:
    """Whether ``signal`` is to be exported over OTLP: an endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT``
    or ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT``), ``OTEL_<SIGNAL>_EXPORTER`` is unset or lists ``otlp``
    (``none``, or only exporters teamstore does not have, turn it off), and ``OTEL_SDK_DISABLED`` is not
    ``true``."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = os.environ.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower()
    if exporters and "otlp" not in {name.strip() for name in exporters.split(",")}:
        return False
    keys = ("OTEL_EXPORTER_OTLP_ENDPOINT", f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    return any(os.environ.get(k) for k in keys)


def to_async_url(url: str) -> str:
    """Swap a sync driver for the async one SQLAlchemy needs (``postgresql://`` -> ``postgresql+psycopg://``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    return f"{_ASYNC_DRIVERS.get(scheme, scheme)}://{rest}"
