"""Three ways to serve one request of the offline support team, for :mod:`bench.bench_request`.

    variant = Teamstore(database_url, home)
    await variant.setup(workers=16)
    await variant.cycle(worker=0, n=1)      # one whole request of user-0's session
    print(variant.per_request())            # {"build from registry": 0.0021, ...} seconds per request
    await variant.close()

- :class:`Bare`: AutoGen alone. The team is built in Python and run; nothing is kept.
- :class:`HandRolled`: the same, plus what a service persisting sessions by hand would write: the
  persisted participant's ``load_state`` from a row before the run, ``save_state`` into it after (one
  SELECT, one UPSERT); no lease, no validation, no audit.
- :class:`Teamstore`: ``Platform.session(...)`` + ``s.run(...)`` with the audit trail of the embedded
  default (transcripts to a folder, the usage ledger in the database; no span exporter): build from the
  registry (taking the team built ahead as the last request closed), lease+load, validate, apply, run, the
  audit's head start, snapshot, transcript and ledger awaited, save+release (the next team built meanwhile).
  Its phases are timed from the outside (:mod:`bench.phases`), wrapping the runtime's own functions.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.phases import Phases
from config_registry import Registry
from teamstore.app import open_platform
from teamstore.examples import example_manifest, support_triage
from teamstore.runtime import opening as opening_module
from teamstore.runtime import runs as runs_module
from teamstore.runtime import session as session_module
from teamstore.runtime import session_runs as session_runs_module
from teamstore.runtime.runs import Run
from teamstore.runtime.session import Session
from teamstore.settings import Settings

TASK = "My router keeps dropping every evening since the firmware update"
TEAM = "support_triage"
PERSISTED = 1  # the researcher, the participant the example team's manifest persists


class Bare:
    """A bare AutoGen run of the example team built in Python; nothing persisted."""

    label = "bare AutoGen"

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.done = 0

    async def setup(self, workers: int) -> None:
        """Nothing to open."""

    async def cycle(self, worker: int, n: int) -> int:
        """``n`` requests: build, run."""
        for _ in range(n):
            started = time.perf_counter()
            team = support_triage()
            built = time.perf_counter()
            await team.run(task=TASK)
            self._add(started, built, time.perf_counter())
        return n

    def _add(self, started: float, built: float, ended: float) -> None:
        self.seconds["build (Python)"] += built - started
        self.seconds["run"] += ended - built
        self.seconds["total"] += ended - started
        self.done += 1

    def per_request(self) -> dict[str, float]:
        """Seconds per request in each phase since the last :meth:`reset`."""
        return {phase: total / max(self.done, 1) for phase, total in self.seconds.items()}

    def reset(self) -> None:
        """Forget the times so far (after a warm-up)."""
        self.seconds.clear()
        self.done = 0

    async def close(self) -> None:
        """Nothing to close."""


class HandRolled(Bare):
    """The bare run plus a hand-written load and save of the persisted participant's state."""

    label = "hand-rolled persistence"

    def __init__(self, url: str) -> None:
        super().__init__()
        self.table: Any = SqliteTable(url) if url.startswith("sqlite") else PostgresTable(url)

    async def setup(self, workers: int) -> None:
        """Open one connection per worker and create the table."""
        await self.table.open(workers)

    async def cycle(self, worker: int, n: int) -> int:
        """``n`` requests: build, SELECT + load_state, run, save_state + UPSERT."""
        for _ in range(n):
            started = time.perf_counter()
            team = support_triage()
            agent = team._participants[PERSISTED]  # the example team's researcher, as its builder made it
            stored = await self.table.load(worker)
            if stored is not None:
                await agent.load_state(json.loads(stored))
            loaded = time.perf_counter()
            await team.run(task=TASK)
            ran = time.perf_counter()
            await self.table.save(worker, json.dumps(await agent.save_state()))
            ended = time.perf_counter()
            self.seconds["build (Python) + load"] += loaded - started
            self.seconds["run"] += ran - loaded
            self.seconds["save"] += ended - ran
            self.seconds["total"] += ended - started
            self.done += 1
        return n

    async def close(self) -> None:
        """Close the connections."""
        await self.table.close()


class SqliteTable:
    """One row per session in SQLite, with the pragmas teamstore's engine sets (WAL, synchronous=NORMAL)."""

    def __init__(self, url: str) -> None:
        self.path = url.partition(":///")[2]
        self.conns: list[Any] = []

    async def open(self, workers: int) -> None:
        import aiosqlite

        for _ in range(workers):
            conn = await aiosqlite.connect(self.path, isolation_level=None)
            for pragma in ("journal_mode=WAL", "busy_timeout=10000", "synchronous=NORMAL"):
                await conn.execute(f"PRAGMA {pragma}")
            self.conns.append(conn)
        await self.conns[0].execute("CREATE TABLE IF NOT EXISTS hand_state (session text PRIMARY KEY, state text)")

    async def load(self, worker: int) -> str | None:
        async with self.conns[worker].execute("SELECT state FROM hand_state WHERE session = ?", (f"s{worker}",)) as cur:
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def save(self, worker: int, state: str) -> None:
        await self.conns[worker].execute(
            "INSERT INTO hand_state VALUES (?, ?) ON CONFLICT (session) DO UPDATE SET state = excluded.state",
            (f"s{worker}", state))

    async def close(self) -> None:
        for conn in self.conns:
            await conn.close()


class PostgresTable:
    """One row per session in Postgres, one autocommit connection per worker."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conns: list[Any] = []

    async def open(self, workers: int) -> None:
        import psycopg

        self.conns = [await psycopg.AsyncConnection.connect(self.url, autocommit=True) for _ in range(workers)]
        await self.conns[0].execute("CREATE TABLE IF NOT EXISTS hand_state (session text PRIMARY KEY, state text)")

    async def load(self, worker: int) -> str | None:
        cur = await self.conns[worker].execute("SELECT state FROM hand_state WHERE session = %s", (f"s{worker}",))
        row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def save(self, worker: int, state: str) -> None:
        await self.conns[worker].execute(
            "INSERT INTO hand_state VALUES (%s, %s) ON CONFLICT (session) DO UPDATE SET state = excluded.state",
            (f"s{worker}", state))

    async def close(self) -> None:
        for conn in self.conns:
            await conn.close()


class Teamstore(Bare):
    """Whole requests through ``Platform.session(...)`` and ``s.run(...)``, phases timed from outside."""

    label = "teamstore"

    def __init__(self, url: str, home: Path) -> None:
        super().__init__()
        self.url, self.home = url, home
        self.phases = Phases()
        self.platform: Any = None

    async def setup(self, workers: int) -> None:
        """Register the example team, build the platform from settings (with its audit trail), wrap phases.

        The team keeps no user memory here: the bare run and the hand-rolled persistence write none, and
        what memory costs is the returning-user benchmark's (``bench_memory``)."""
        registry = Registry(self.home / "registry", create=True)
        manifest = example_manifest(TEAM).model_copy(update={"memory": None})
        registry.add(TEAM, support_triage().dump_component(), manifest, "v1", label="production")
        settings = Settings(home=self.home, database_url=self.url, registry_path=self.home / "registry",
                            auto_migrate=True, db_pool_size=max(workers, Settings().db_pool_size))
        self.platform = open_platform(settings)
        await self.platform.ensure_schema()
        self._wrap()

    def _wrap(self) -> None:
        # A session reaches the platform only through its SessionDeps, read from the platform as each session
        # opens: the platform's _build_team and store are wrapped on the objects themselves, and the runtime
        # modules' own names where they call them (notify_opening, judge and apply_states at open,
        # notify_observers in a run).
        # The definition cache looks the registry up (in a thread) ahead of the requests that need it: its
        # lookups are timed, and not counted in the request.
        wrap, store = self.phases.wrap, self.platform.store
        wrap(self.platform, "_build_team", "build from registry")
        wrap(self.platform.teams, "_build_spare", "the next team built ahead (in the background, overlapping)")
        wrap(self.platform.teams, "_resolve", "registry lookups (in the background, overlapping)")
        wrap(session_module, "notify_opening", "the audit's subject and data key, before the lease")
        wrap(store, "acquire", "lease+load")
        wrap(opening_module, "judge", "validate")
        wrap(opening_module, "apply_states", "apply (load_state)")
        wrap(Run, "_produce", "run (transcript lines made, calls metered)")
        wrap(session_runs_module, "_head_start", "the audit's head start")
        wrap(Session, "_snapshot", "snapshot")
        wrap(runs_module, "notify_observers", "audit writes (transcript, ledger; their own time, overlapping)",
             when=lambda observers, hook, *args: hook == "run_finished")
        wrap(Session, "flush_audit", "audit writes awaited")
        wrap(store, "save", "save+release")

    async def cycle(self, worker: int, n: int) -> int:
        """``n`` whole requests of user-``worker``'s session."""
        for _ in range(n):
            started = time.perf_counter()
            async with self.platform.session(f"user-{worker}", "s", team=f"{TEAM}@production") as s:
                await s.run(TASK)
            self.seconds["total"] += time.perf_counter() - started
            self.done += 1
        return n

    def per_request(self) -> dict[str, float]:
        """Seconds per request in each phase, and what no phase covers (``other``)."""
        times = {phase: self.phases.seconds[phase] / max(self.done, 1) for phase in self.phases.names}
        total = self.seconds["total"] / max(self.done, 1)
        awaited = sum(t for phase, t in times.items() if "overlapping" not in phase and "of which" not in phase)
        return {**times, "other": total - awaited, "total": total}

    def reset(self) -> None:
        """Forget the times so far (after a warm-up)."""
        super().reset()
        self.phases.reset()

    async def close(self) -> None:
        """Unwrap, and close the platform (its engine, pools and transcript store)."""
        self.phases.restore()
        await self.platform.aclose()
