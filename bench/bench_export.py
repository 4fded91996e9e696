"""The ledger export at scale: 1,000,000 ledger rows over 90 days on Postgres, written as Parquet
partitions to a local folder; its time, rows per second and size on disk."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from bench.bench_audit import FILL
from bench.common import drop_database, postgres_database
from teamstore.audit.warehouse import destination_from_url, export_ledger
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade


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


def main() -> None:
    """Print the export's figures."""
    figures = asyncio.run(export_million())
    print(f"ledger export of {figures['rows']:,.0f} rows (Postgres -> Parquet, {figures['days']:.0f} day partitions): "
          f"{figures['seconds']:.1f} s ({figures['rows'] / figures['seconds']:,.0f} rows/s), "
          f"{figures['bytes'] / 1e6:.1f} MB on disk ({figures['bytes'] / figures['rows']:.1f} bytes/row)")
