"""The PostgreSQL server's own log, read over SQL: tests about what reaches it read only what they caused.

    start = postgres_server_log_size(server_url)
    ...                                          # statements that must not log a user id
    assert user_id not in postgres_server_log(server_url, start)
"""

from __future__ import annotations

from typing import Any

from tests.services.common import require_or_skip


def _server_log_file(conn: object) -> str:
    """The server's current log file, relative to its data directory: the logging collector's (the Postgres
    container runs with it on), or the file ``infra/postgres.sh`` sends the server's output to
    (``pg_ctl -l server.log``)."""
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
