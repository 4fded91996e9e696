"""``teamstore sessions list`` a page at a time, on SQLite and a real Postgres (both kinds of lease): walked by the
cursor its ``--json`` rows give and by the option its footer names, every session once and in order; a cursor no
listing gave is an error that never quotes it; and a cursor, with the ids it holds, reaches no log line (at DEBUG,
SQLAlchemy's included; the drivers' aside) and nothing an OTLP collector receives."""

from __future__ import annotations

import asyncio
import json
import logging
import re

import pytest
from typer.testing import CliRunner

from teamstore.cli import app
from teamstore.db.engine import create_engine
from tests.conftest import prepare
from tests.otlp_receiver import OtlpReceiver
from tests.state.test_listing import T0, _insert, _row, _tied

runner = CliRunner()
FOOTER = re.compile(r"older ones follow: --after (\S+)")


def _database(database_url: str, lease: str, monkeypatch: pytest.MonkeyPatch, rows: list[dict] | None = None,
              ) -> list[tuple[str, str]]:
    """Point the command line at the backend's database holding :func:`_tied`'s sessions (or ``rows``)."""

    async def setup() -> list[tuple[str, str]]:
        await prepare(database_url, lease)
        engine = create_engine(database_url)
        try:
            if rows is not None:
                await _insert(engine, rows)
                return []
            return await _tied(engine)
        finally:
            await engine.dispose()

    expected = asyncio.run(setup())
    monkeypatch.setenv("TEAMSTORE_DATABASE_URL", database_url)
    monkeypatch.setenv("TEAMSTORE_SESSION_LEASE", lease)
    return expected


def _list(*args: str, columns: int = 80) -> str:
    result = runner.invoke(app, ["sessions", "list", *args], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_sessions_list_walks_every_page_by_the_cursor_its_json_and_its_footer_give(
    database_url: str, lease: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _database(database_url, lease, monkeypatch)  # 30 sessions, 10 at each of 3 times
    seen: list[tuple[str, str]] = []
    after: list[str] = []
    while True:
        rows = json.loads(_list("--limit", "6", *after, "--json"))  # still a list: each row has its cursor
        seen += [(row["user_id"], row["session_id"]) for row in rows]
        footer = FOOTER.search(_list("--limit", "6", *after))  # on one line, however narrow the terminal
        if len(rows) < 6:
            assert footer is None
            break
        if footer is not None:
            assert footer.group(1) == rows[-1]["cursor"]
        else:
            assert seen == expected, "the footer said nothing while older sessions followed"
        after = ["--after", rows[-1]["cursor"]]
    assert seen == expected
    assert rows == [], "30 rows make 5 full pages: the sixth is empty"


def test_a_cursor_no_listing_gave_is_an_error_that_never_quotes_it(
    database_url: str, lease: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _database(database_url, lease, monkeypatch)
    for cursor in ("CANARY-4711!", "WzEsIkNBTkFSWS00NzExIl0"):  # not base64; base64 of a cut-short cursor
        refused = runner.invoke(app, ["sessions", "list", "--after", cursor], env={"COLUMNS": "200"})
        assert refused.exit_code == 1 and isinstance(refused.exception, SystemExit), refused.output
        assert "error: the listing cursor" in refused.output and "fix: " in refused.output, refused.output
        assert "CANARY" not in refused.output and cursor not in refused.output, refused.output
        as_json = runner.invoke(app, ["sessions", "list", "--after", cursor, "--json"])
        assert json.loads(as_json.stdout)["error"]["type"] == "InvalidCursor"


@pytest.mark.otlp
def test_a_cursor_and_the_ids_it_holds_reach_no_log_line_nor_the_collector(
    database_url: str, lease: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    otlp_env: OtlpReceiver,
) -> None:
    sessions = [_row("CANARY-user-4711", f"CANARY-session-{n}", T0) for n in range(3)]
    _database(database_url, lease, monkeypatch, sessions)
    first = json.loads(_list("--user", "CANARY-user-4711", "--limit", "1", "--json"))
    cursor = first[0]["cursor"]
    # Everything at DEBUG but the database drivers, which log every bound parameter there (docs/operations.md,
    # No message content in logs, says to keep them above DEBUG).
    # (caplog.at_level sets its handler's level too: the last one given sets it to DEBUG.)
    with caplog.at_level(logging.INFO, "aiosqlite"), caplog.at_level(logging.INFO, "psycopg"), \
            caplog.at_level(logging.DEBUG, "sqlalchemy.engine"), caplog.at_level(logging.DEBUG):
        for args in (["--after", cursor], ["--user", "CANARY-user-4711", "--after", cursor, "--json"],
                     ["--after", cursor[:-5]], ["--after", cursor + "A"]):
            runner.invoke(app, ["sessions", "list", "--limit", "1", *args])
    assert any(r.name.startswith("sqlalchemy.engine") and r.levelno == logging.DEBUG for r in caplog.records)
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert "CANARY" not in logged and cursor[:20] not in logged
    assert b"CANARY" not in otlp_env.wire() and cursor[:20].encode() not in otlp_env.wire()
