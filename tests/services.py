"""Real services for the tests: a local PostgreSQL, moto's S3 server over HTTP, an OTLP/HTTP receiver.

Each starts from local binaries or packages; when one cannot start, its tests are skipped with the reason,
except under ``TEAMSTORE_REQUIRE_SERVICES=1`` (CI), where they fail instead.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any

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


def _server_log_file(conn: object) -> str:
    """The server's current log file, relative to its data directory: the logging collector's, or the file
    ``infra/postgres.sh`` sends the server's output to (``pg_ctl -l server.log``)."""
    current = conn.execute("SELECT pg_current_logfile()").fetchone()  # type: ignore[attr-defined]
    return str(current[0]) if current and current[0] else "server.log"


def postgres_server_log_size(server_url: str) -> int:
    """How many bytes the server's log holds now: pass it to :func:`postgres_server_log` to read only what
    a test made the server write after this point."""
    return int(_read_server_log(server_url, "SELECT size FROM pg_stat_file(%s)", ()))


def postgres_server_log(server_url: str, offset: int = 0) -> str:
    """The PostgreSQL server's own log, from byte ``offset`` on, read over SQL as a superuser (or a role
    with ``pg_read_server_files``). Bytes that are not UTF-8 are kept as surrogate escapes.

    Fails (in CI; skips elsewhere) when the log cannot be read: a test about what reaches the server log
    must never pass by reading nothing.
    """
    # The length is what the file holds past the offset: pg_read_binary_file refuses a length over 1 GB.
    query = ("SELECT pg_read_binary_file(f, o, greatest((pg_stat_file(f)).size - o, 0)) "
             "FROM (SELECT %s::text, %s::bigint) AS a(f, o)")
    raw = _read_server_log(server_url, query, (offset,))
    return bytes(raw).decode("utf-8", "surrogateescape")


def _read_server_log(server_url: str, query: str, args: tuple[object, ...]) -> Any:
    """``query``'s one value, its first parameter the log file's name; fails in CI when the log cannot be read."""
    import psycopg

    try:
        with psycopg.connect(server_url, autocommit=True) as conn:
            row = conn.execute(query, (_server_log_file(conn), *args)).fetchone()
    except psycopg.Error as exc:
        require_or_skip(f"cannot read the PostgreSQL server log over SQL ({type(exc).__name__}: {exc}); the "
                        "tests need a superuser and a server started by infra/postgres.sh (pg_ctl -l server.log) "
                        "or with logging_collector on")
        raise
    assert row is not None
    return row[0]
