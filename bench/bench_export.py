"""Exports at scale on Postgres: the ledger (1,000,000 rows over 90 days, written as Parquet partitions to a
local folder: its time, rows per second and size on disk), and a heavy user's access export (100,000 ledger
rows and 3,000 saved sessions: its time, and the memory it holds against the JSON it writes)."""

from __future__ import annotations

import asyncio
import tempfile
import time
import tracemalloc
import zipfile
from pathlib import Path

from bench.bench_audit import FILL
from bench.common import drop_database, postgres_database
from teamstore.audit.prices import load_prices
from teamstore.audit.subjects import ensure_subject
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.warehouse import destination_from_url, export_ledger
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.export import ExportCoordinator, store_exporters
from teamstore.keys import KeyService
from teamstore.settings import Settings


async def export_million() -> dict[str, float]:
    """Fill a throwaway Postgres ledger with 1M rows and export it whole."""
    import psycopg

    server, url = postgres_database()
    try:
        engine = create_engine(url)
        await upgrade(engine)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(FILL)
            conn.execute("ANALYZE ts_usage")
        with tempfile.TemporaryDirectory() as folder:
            sink = destination_from_url(str(Path(folder) / "ledger"))
            report = await export_ledger(engine, sink)
            on_disk = sum(f.stat().st_size for f in Path(folder).rglob("*.parquet"))
        await engine.dispose()
        return {"rows": report.rows, "days": len(report.partitions), "seconds": report.seconds, "bytes": on_disk}
    finally:
        drop_database(server, url)


HEAVY_RUNS, HEAVY_SESSIONS = 100_000, 3_000
HEAVY_FILL = f"""
INSERT INTO ts_usage (run_id, agent, model, purpose, calls, failed_calls, input_tokens, output_tokens, team,
    team_version, session_key, subject_key, stop_reason, ended_by_limit, run_failed, started_at, finished_at, day)
SELECT 'run-' || g, 'triage', 'gpt-4o', 'agent', 1, 0, 100 + g %% 500, 50 + g %% 200, 'support_triage', 'v1',
    md5('s' || (g %% {HEAVY_SESSIONS})), %(subject)s, 'max messages', false, false, ts, ts + interval '5 seconds', ts::date
FROM (SELECT g, timestamptz '2026-01-01' + g * interval '1 minute' AS ts FROM generate_series(1, {HEAVY_RUNS}) AS g) AS s
"""
# A saved state of ~5.5 KB (the `state` benchmark's researcher after 10 runs), stored before sealing.
HEAVY_STATES = f"""
INSERT INTO ts_sessions (user_id, session_id, team, team_version, schema_version, agentchat_version, fingerprints,
    state, state_bytes, row_version, created_at, updated_at, expires_at)
SELECT 'heavy', 's' || g, 'support_triage', 'v1', 1, '0.7.5', '{{}}',
    '{{"envelope":1,"codec":"json","data":{{"agents":{{"researcher":{{"note":"' || repeat('my router drops. ', 320)
    || g || '"}}}}}}}}', 5500, 1, now(), now(), now() + interval '1 day'
FROM generate_series(1, {HEAVY_SESSIONS}) AS g
"""


async def export_heavy_user() -> dict[str, float]:
    """Export one user with 100,000 ledger rows and 3,000 saved states, twice: timed, then with its peak traced
    memory (tracemalloc slows what it traces)."""
    import psycopg

    server, url = postgres_database()
    try:
        engine = create_engine(url)
        await upgrade(engine)
        subject, _ = await ensure_subject(engine, "heavy")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(HEAVY_FILL, {"subject": subject})
            conn.execute(HEAVY_STATES)
            conn.execute("ANALYZE")
        figures: dict[str, float] = {}
        with tempfile.TemporaryDirectory() as folder:
            keys = KeyService.from_settings(engine, Settings(home=Path(folder) / "home"))
            coordinator = ExportCoordinator(engine, LocalTranscriptStore(Path(folder) / "t"), store_exporters(),
                                            load_prices(), keys=keys)
            started = time.perf_counter()
            done = await coordinator.run("heavy", Path(folder) / "timed.zip", operator="bench")
            figures["seconds"] = time.perf_counter() - started
            tracemalloc.start()
            try:
                await coordinator.run("heavy", Path(folder) / "traced.zip", operator="bench")
                figures["peak"] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert done.path is not None
            with zipfile.ZipFile(done.path) as archive:
                figures["json"] = sum(info.file_size for info in archive.infolist())
            figures["zip"] = done.path.stat().st_size
        figures["ledger_rows"] = done.manifest.stores["ledger"].records
        figures["states"] = done.manifest.stores["resume_state"].records
        await engine.dispose()
        return figures
    finally:
        drop_database(server, url)


def main() -> None:
    """Print the exports' figures."""
    figures = asyncio.run(export_million())
    print(f"ledger export of {figures['rows']:,.0f} rows (Postgres -> Parquet, {figures['days']:.0f} day partitions): "
          f"{figures['seconds']:.1f} s ({figures['rows'] / figures['seconds']:,.0f} rows/s), "
          f"{figures['bytes'] / 1e6:.1f} MB on disk ({figures['bytes'] / figures['rows']:.1f} bytes/row)")
    heavy = asyncio.run(export_heavy_user())
    print(f"access export of a heavy user ({heavy['ledger_rows']:,.0f} ledger rows, {heavy['states']:,.0f} saved "
          f"states): {heavy['seconds']:.1f} s; {heavy['json'] / 1e6:.1f} MB of JSON ({heavy['zip'] / 1e6:.1f} MB "
          f"zipped) written with a peak of {heavy['peak'] / 1e6:.1f} MB traced in memory "
          f"({heavy['peak'] / heavy['json']:.3f}x what it wrote)")
