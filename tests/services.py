"""Real services for the tests: a local PostgreSQL, moto's S3 server over HTTP, an OTLP/HTTP receiver.

Each starts from local binaries or packages; when one cannot start, its tests are skipped with the reason,
except under ``TEAMSTORE_REQUIRE_SERVICES=1`` (CI), where they fail instead.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def require_or_skip(reason: str) -> None:
    """Fail in CI, skip elsewhere: CI must never silently skip a service suite."""
    if os.environ.get("TEAMSTORE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"required service unavailable: {reason}")
    pytest.skip(reason)


def free_port() -> int:
    """An unused TCP port on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def postgres_server_url() -> str | None:
    """A server URL from the environment, or one started from local binaries; ``None`` if neither works."""
    url = os.environ.get("TEAMSTORE_TEST_DATABASE_URL")
    if url:
        return url
    url = start_local_postgres()
    if url:
        os.environ["TEAMSTORE_TEST_DATABASE_URL"] = url
    return url


def start_local_postgres(*, durable: bool = False) -> str | None:
    """Start (or reuse) ``infra/postgres.sh``'s server; ``durable`` keeps fsync on. Its URL, or ``None``."""
    env = {**os.environ, "TEAMSTORE_PG_DURABLE": "1" if durable else "0"}
    try:
        out = subprocess.run(
            [str(ROOT / "infra" / "postgres.sh"), "start"], check=True, capture_output=True, text=True, timeout=120,
            env=env,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        if "TEAMSTORE_TEST_DATABASE_URL=" in line:
            return line.split("=", 1)[1].strip()
    return None


def postgres_server_log(server_url: str) -> str:
    """The PostgreSQL server's own log, read by a superuser with ``pg_read_binary_file``.

    ``infra/postgres.sh`` starts servers with ``pg_ctl -l "$PGDATA/server.log"``; a server with the logging
    collector on names its current file itself (``pg_current_logfile()``). Where the log cannot be read
    (not a superuser, logging elsewhere), the calling test is skipped, or fails under
    ``TEAMSTORE_REQUIRE_SERVICES=1``: a log nobody reads would pass every check against it.
    """
    import psycopg

    try:
        with psycopg.connect(server_url, autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_logfile()").fetchone()
            path = (row[0] if row else None) or "server.log"
            data = conn.execute("SELECT pg_read_binary_file(%s)", (path,)).fetchone()
    except psycopg.Error as exc:
        require_or_skip(f"cannot read the PostgreSQL server log: {type(exc).__name__}: {exc}")
        raise
    return bytes(data[0]).decode("utf-8", "replace") if data else ""
