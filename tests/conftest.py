"""Shared fixtures: throwaway databases, temporary registries and homes; the services come from the
:mod:`tests.services` plugin."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

# The services (postgres_server, s3_endpoint, s3_env, s3_bucket, otlp_receiver, otlp_env) and their choice.
pytest_plugins = ["tests.services.fixtures"]

KEY_CACHE_SECONDS = "0.2"
"""``TEAMSTORE_KEY_CACHE_SECONDS`` in tests, in this process and in every CLI process a test starts."""


@pytest.fixture(autouse=True)
def _ctrl_c_given_back() -> Iterator[None]:
    """Ctrl-C as it was before the test: a command that has committed its work (``keys rotate``, ``registry add``)
    run in this process ignores it from then on, as it does in its own process until it exits, and pytest would
    stay deaf to it."""
    handler = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, handler)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own TEAMSTORE_HOME and no stray exporter configuration."""
    monkeypatch.setenv("TEAMSTORE_HOME", str(tmp_path / "home"))
    for key in ("TEAMSTORE_DATABASE_URL", "TEAMSTORE_TRANSCRIPTS_URL", "TEAMSTORE_REGISTRY_PATH",
                "TEAMSTORE_KMS_KEY_ID", "TEAMSTORE_KEY_FILE"):
        monkeypatch.delenv(key, raising=False)
    # Users' data keys stay in memory briefly, as in production, but an erasure outwaits that (tests erase often).
    monkeypatch.setenv("TEAMSTORE_KEY_CACHE_SECONDS", KEY_CACHE_SECONDS)
    for key in list(os.environ):
        if key.startswith("OTEL_"):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("GIT_AUTHOR_NAME", "teamstore-tests")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "tests@teamstore.invalid")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "teamstore-tests")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "tests@teamstore.invalid")


# --- PostgreSQL databases --------------------------------------------------------------------------------
def _create_database(server_url: str) -> str:
    import psycopg

    name = f"ts_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = server_url.rpartition("/")
    return f"{base}/{name}"


def _drop_database(server_url: str, url: str) -> None:
    import psycopg

    name = url.rpartition("/")[2]
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A throwaway, empty database on the real server, dropped afterwards (``postgresql://`` form)."""
    url = _create_database(postgres_server)
    yield url
    _drop_database(postgres_server, url)


@pytest.fixture(params=[
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("postgres-row", marks=pytest.mark.postgres),
])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(database URL, session lease) for each backend the state and runtime suites run on: SQLite (row
    leases), Postgres with advisory-lock leases (``lock``) and Postgres with row leases (``row``)."""
    if request.param == "sqlite":
        return f"sqlite:///{(tmp_path / 'conformance.db').as_posix()}", "row"
    url: str = request.getfixturevalue("postgres_url")
    return url, "row" if request.param == "postgres-row" else "lock"


@asynccontextmanager
async def refusing(url: str, table: str) -> AsyncIterator[AsyncEngine]:
    """An engine to the migrated database ``url`` that is up but refuses every statement on ``table`` at
    once: another connection holds the table locked, and this engine's ``lock_timeout`` is 50 ms (as a
    low ``statement_timeout`` or ``lock_timeout`` on a role would)."""
    from sqlalchemy import text

    from teamstore.db.engine import create_engine

    holder_engine = create_engine(url)
    blocked = create_engine(url, connect_args={"options": "-c lock_timeout=50"})
    try:
        async with holder_engine.connect() as holder:
            await holder.execute(text(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
            yield blocked
            await holder.rollback()
    finally:
        await blocked.dispose()
        await holder_engine.dispose()


async def upgrade_database(url: str) -> None:
    """Migrate ``url`` to this code's schema."""
    from teamstore.db.engine import create_engine
    from teamstore.db.migrate import upgrade

    engine = create_engine(url)
    await upgrade(engine)
    await engine.dispose()


async def prepare(url: str, lease: str) -> None:
    """Migrate ``url`` and record ``lease`` as the way its sessions are leased."""
    from teamstore.db.engine import create_engine
    from teamstore.db.migrate import upgrade
    from teamstore.state.lease_mode import lease_mode, set_lease_mode

    engine = create_engine(url)
    await upgrade(engine)
    if await lease_mode(engine) != lease:
        await set_lease_mode(engine, lease)
    await engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The conformance fixture: the same test runs against SQLite and a real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{(tmp_path / 'conformance.db').as_posix()}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """A migrated database on SQLite and a real Postgres (the conformance parametrisation)."""
    from teamstore.db.engine import create_engine
    from teamstore.db.migrate import upgrade

    eng = create_engine(database_url)
    await upgrade(eng)
    yield eng
    await eng.dispose()


# --- registry ----------------------------------------------------------------------------------------------
@pytest.fixture
def registry_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A path for a fresh registry repository (created on first use), exported as TEAMSTORE_REGISTRY_PATH."""
    path = tmp_path / "registry"
    monkeypatch.setenv("TEAMSTORE_REGISTRY_PATH", str(path))
    return path


def fits_with_ids_whole(text: str, columns: int, *ids: str) -> None:
    """A CLI's output at ``columns``: no line of ``text`` is wider than the terminal, and each id (to be copied into the next command) is whole on one of them."""
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= columns, text
    for value in ids:
        assert any(value in line for line in lines), (value, text)


def ctrl_c_after_its_first_line(*args: str) -> tuple[str, str, int]:
    """``teamstore *args`` given a Ctrl-C as soon as it prints its first line (as it closes up and exits): that
    line, the rest of its stdout and its stderr, and its exit status."""
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "teamstore", *args],
                            env={**os.environ, "COLUMNS": "300"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    first = proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    return first, first + rest + err, proc.returncode


def git(path: Path, *args: str) -> str:
    """Run git in ``path`` and return its stdout (for tests that inspect the repository)."""
    return subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True, text=True).stdout


@contextmanager
def undeletable(folder: Path) -> Iterator[None]:
    """Nothing in ``folder`` can be deleted within the block, the kernel refusing it: by the folder's mode (0500)
    for any user but root; root, whom no mode stops, gets a read-only bind mount of the folder onto itself (the
    test is skipped where root may not mount)."""
    if os.geteuid() != 0:
        mode = folder.stat().st_mode
        folder.chmod(0o500)
        try:
            yield
        finally:
            folder.chmod(mode)
        return
    if subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, check=False).returncode:
        pytest.skip("as root, only a read-only mount stops a delete, and this host lets no test mount one")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True, capture_output=True)
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True)


# --- a real browser ---------------------------------------------------------------------------------------
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """Headless Chromium from Debian's packages (``chromium``, ``chromium-driver``), driven by selenium, with
    a new empty profile and its console kept (``browser.get_log("browser")``)."""
    import shutil

    from tests.services.common import require_or_skip

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        require_or_skip("no Chromium: apt-get install chromium chromium-driver (.ci/run does)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        require_or_skip("selenium is not installed: pip install -e '.[dev]'")
        raise
    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    session = webdriver.Chrome(options=options, service=Service(executable_path=str(driver)))
    try:
        yield session
    finally:
        session.quit()


# --- no silent skips in CI ---------------------------------------------------------------------------------
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under ``TEAMSTORE_REQUIRE_SERVICES=1`` (CI) a skipped test is a failed one: every suite runs in CI."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and os.environ.get("TEAMSTORE_REQUIRE_SERVICES") == "1" and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every test must run: {report.longrepr}"
