"""One teamstore deployment under test: a home, a state database (SQLite or a real Postgres), a transcript
store (the local folder or versioned S3 over HTTP), a real OTLP receiver, and every sink to scan.

    deployment = Deployment(home, receiver, database_url=url, server_url=server, s3_endpoint=endpoint)
    deployment.cli("db", "upgrade")                           # a new CLI process; its stderr kept as a sink
    data = deployment.cli_json("run", "--team", ..., "hello")
    leaks = judge(scan(deployment.sinks(), book), erased={"bob"})
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.canary.receiver import CanaryReceiver
from tests.canary.sinks import (
    CLI_STDERR,
    METRICS,
    PY_LOGGING,
    SPANS,
    CapturedText,
    GitHistory,
    HomeFiles,
    OtlpWire,
    ParquetFiles,
    PostgresServerLog,
    PostgresTables,
    RecordingHandler,
    S3Buckets,
    Sink,
    SqliteTables,
)
from tests.conftest import KEY_CACHE_SECONDS

ROOT = Path(__file__).resolve().parents[2]
CLI_TIMEOUT = 120
SOURCES = os.pathsep.join([str(ROOT / "platform"), str(ROOT)])
"""The CLI processes' import path: this checkout's teamstore and config_registry, whatever is installed."""


@dataclass
class Deployment:
    """Settings and sinks of one deployment; every CLI process it starts gets its environment.

    Args:
        home: ``TEAMSTORE_HOME``.
        receiver: Where teamstore's provider exports (``OTEL_EXPORTER_OTLP_ENDPOINT``).
        database_url: A Postgres database (``postgresql://``); ``None`` for the embedded SQLite file.
        server_url: The Postgres server's URL (its log is a sink).
        s3_endpoint: The S3 endpoint when transcripts go to S3; ``None`` for the local folder.
        kms_key: The KMS key (ARN, on the same endpoint) users' data keys are wrapped by; ``None`` for the
            local key file. :meth:`use_kms` makes one.
    """

    home: Path
    receiver: CanaryReceiver
    database_url: str | None = None
    server_url: str | None = None
    s3_endpoint: str | None = None
    kms_key: str | None = None
    buckets: list[str] = field(default_factory=list)
    extra_sinks: list[Sink] = field(default_factory=list)
    cli_stderr: CapturedText = field(default_factory=lambda: CapturedText(CLI_STDERR))
    log_records: CapturedText = field(default_factory=lambda: CapturedText(PY_LOGGING))

    def __post_init__(self) -> None:
        self.transcripts_url: str | None = None
        if self.s3_endpoint is not None:
            self.transcripts_url = f"s3://{self.new_bucket()}/audit"

    @property
    def registry(self) -> Path:
        """The registry repository (the default, under the home)."""
        return self.home / "registry"

    def new_bucket(self) -> str:
        """A new versioned bucket on the endpoint, scanned with the others."""
        name = f"canary-{uuid.uuid4().hex[:12]}"
        client = self.s3_client()
        client.create_bucket(Bucket=name)
        client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        self.buckets.append(name)
        return name

    def s3_client(self) -> Any:
        """A plain boto3 client on the endpoint (the sinks' own, not teamstore's)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.s3_endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def kms_client(self) -> Any:
        """A plain boto3 KMS client on the endpoint (the suite's own)."""
        import boto3

        return boto3.client("kms", endpoint_url=self.s3_endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def use_kms(self) -> str:
        """Wrap users' data keys by a new KMS key on the endpoint (``TEAMSTORE_KMS_KEY_ID``); its ARN."""
        assert self.s3_endpoint is not None, "KMS is served by the S3 endpoint's moto server"
        self.kms_key = str(self.kms_client().create_key(Description="canary")["KeyMetadata"]["Arn"])
        return self.kms_key

    def environment(self, **extra: str | None) -> dict[str, str]:
        """The variables of a process of this deployment; ``None`` in ``extra`` removes one."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TEAMSTORE_", "OTEL_", "AWS_", "GATEWAY_"))}
        env.update(TEAMSTORE_HOME=str(self.home), OTEL_EXPORTER_OTLP_ENDPOINT=self.receiver.endpoint,
                   OTEL_SERVICE_NAME="canary", PYTHONPATH=SOURCES, OPENAI_API_KEY="",
                   TEAMSTORE_KEY_CACHE_SECONDS=KEY_CACHE_SECONDS)
        if self.database_url:
            env["TEAMSTORE_DATABASE_URL"] = self.database_url
        if self.transcripts_url:
            env["TEAMSTORE_TRANSCRIPTS_URL"] = self.transcripts_url
        if self.s3_endpoint:
            env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
                       AWS_ENDPOINT_URL_S3=self.s3_endpoint)
        if self.kms_key:
            env.update(TEAMSTORE_KMS_KEY_ID=self.kms_key, AWS_ENDPOINT_URL_KMS=str(self.s3_endpoint))
        for key, value in extra.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def apply(self, monkeypatch: pytest.MonkeyPatch, **extra: str | None) -> None:
        """Give this process the deployment's environment (for in-process platforms)."""
        wanted = self.environment(**extra)
        for key in list(os.environ):
            if key not in wanted:
                monkeypatch.delenv(key)
        for key, value in wanted.items():
            monkeypatch.setenv(key, value)

    def start(self, *args: str, env: dict[str, str | None] | None = None, level: str = "DEBUG",
              host: Sequence[str] = ()) -> subprocess.Popen[str]:
        """Start ``teamstore ARGS`` in a new process (logging at ``level``); :meth:`finish` collects it."""
        command = [sys.executable, "-m", "tests.canary.host", "--log-level", level, *host, "--", *args]
        return subprocess.Popen(command, cwd=ROOT, env=self.environment(**(env or {})), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def finish(self, proc: subprocess.Popen[str], ok: Sequence[int] = (0,)) -> subprocess.CompletedProcess[str]:
        """Wait for a process from :meth:`start`; keep its stderr as a sink; check its exit status."""
        args = proc.args if isinstance(proc.args, list) else []
        try:
            out, err = proc.communicate(timeout=CLI_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        shown = " ".join(str(a) for a in args[args.index("--") + 1:][:3]) if "--" in args else "?"
        self.cli_stderr.add(f"teamstore {shown} (pid {proc.pid})", err)
        done = subprocess.CompletedProcess(args, proc.returncode, out, err)
        assert proc.returncode in ok, f"teamstore {shown} exited {proc.returncode}:\n{err[-3000:]}"
        return done

    def cli(self, *args: str, ok: Sequence[int] = (0,), **options: Any) -> subprocess.CompletedProcess[str]:
        """Run ``teamstore ARGS`` in a new process and wait for it."""
        return self.finish(self.start(*args, **options), ok=ok)

    def cli_json(self, *args: str, ok: Sequence[int] = (0,), **options: Any) -> Any:
        """Run ``teamstore ARGS --json``; its JSON output (``{"error": ...}`` for a command that failed)."""
        done = self.cli(*args, "--json", ok=ok, **options)
        return json.loads(done.stdout) if done.stdout.strip() else None

    def sql(self, statement: str, **params: Any) -> list[Any]:
        """Run one statement on the deployment's database through a driver of the suite's own (a damaged
        row, a look at the fence); the rows it returns."""
        from sqlalchemy import create_engine, text

        url = (self.database_url.replace("postgresql://", "postgresql+psycopg://", 1) if self.database_url
               else f"sqlite:///{(self.home / 'teamstore.db').as_posix()}")
        engine = create_engine(url)
        try:
            with engine.begin() as conn:
                result = conn.execute(text(statement), params)
                return list(result) if result.returns_rows else []
        finally:
            engine.dispose()

    @contextmanager
    def recording_logs(self) -> Iterator[None]:
        """Every log record of this process at DEBUG into the ``python logging`` sink, the database drivers'
        included. pytest's own capture is set aside meanwhile: it would print every DEBUG line of the block
        with a failure."""
        root = logging.getLogger()
        parked = [h for h in root.handlers if type(h).__module__ == "_pytest.logging"]
        before = root.level
        handler = RecordingHandler(self.log_records)
        for pytest_handler in parked:
            root.removeHandler(pytest_handler)
        root.addHandler(handler)
        root.setLevel(logging.DEBUG)
        try:
            yield
        finally:
            root.removeHandler(handler)
            for pytest_handler in parked:
                root.addHandler(pytest_handler)
            root.setLevel(before)

    def sinks(self) -> list[Sink]:
        """Every sink of this deployment. Files come first: reading an SQLite file through sqlite3 could
        change its ``-wal`` and ``-shm`` files, which are searched as they were left."""
        found: list[Sink] = [HomeFiles(self.home), ParquetFiles(self.home), GitHistory(self.registry)]
        if self.database_url:
            found.append(PostgresTables(self.database_url))
            assert self.server_url is not None
            found.append(PostgresServerLog(self.server_url))
        else:
            found.append(SqliteTables(self.home / "teamstore.db"))
        if self.s3_endpoint:
            found.append(S3Buckets(self.s3_client(), self.buckets))
        # teamstore's metrics (every CLI process exports its last collection as it exits) are their own sink;
        # the spans' takes every other post, so whatever else is exported one day is searched too.
        found += [OtlpWire(SPANS, self.receiver, exclude=("/v1/metrics",)),
                  OtlpWire(METRICS, self.receiver, paths=("/v1/metrics",)),
                  self.cli_stderr, self.log_records, *self.extra_sinks]
        return found
