"""The audit trail's costs: S3 requests per run, overhead on a team run, the cost query on 1M ledger rows.

    python -m bench audit

1. S3 requests per run (target 1): transcript observer against moto's S3 server over HTTP, every request
   counted with a botocore ``before-send`` hook.
2. Overhead of transcript + spans + ledger vs the bare run with the same offline client (target < 1.2x):
   both variants side by side in one process, alternating, many runs; transcripts to a local folder, ledger
   in SQLite (the embedded default), spans exported over OTLP/HTTP to a local receiver.
3. The cost query over 1,000,000 ledger rows on Postgres (one session, one user, one user by team and model),
   indexed vs a forced full scan, as a ratio; two whole-ledger aggregates (by day, by week and team).
4. Every session's cost (``cost --by session``, whole and ``--top 10``) on those rows and on 200,000 rows in
   SQLite, the ledger's tokens summed per price period (as ``teamstore cost`` does) against per day (as it did
   before), alternating: time and peak memory (``tracemalloc``, in a run of its own).
5. The full listing as ``teamstore cost`` prints it, streamed (each row let go once printed), against the
   whole report in memory, on SQLite with one run per session: peak memory at 20,000 and 200,000 sessions
   (bounded: the two streamed peaks alike, the whole report's growing with the sessions).
6. A transcript's write to the local folder flushed to the disk (``fsync``, the store's default) against the
   same write left in the page cache, alternating in one process: median per write and their ratio.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from autogen_agentchat.base import TaskResult
from autogen_agentchat.teams import BaseGroupChat

from bench.common import drop_database, env_number, otlp_receiver, postgres_database, s3_endpoint
from teamstore.audit import cost_sums
from teamstore.audit.cost import CostFilter, CostStream, query_costs
from teamstore.audit.ledger_observer import LedgerObserver
from teamstore.audit.observer import TranscriptObserver
from teamstore.audit.prices import load_prices
from teamstore.audit.pseudonyms import Pseudonyms
from teamstore.audit.schema import usage
from teamstore.audit.span_observer import SpanObserver
from teamstore.audit.telemetry import setup_tracing
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.s3 import S3TranscriptStore, make_client
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.events import RunObserver, RunOutcome, notify_observers
from teamstore.examples import support_triage
from teamstore.metering import metered_run, wrap_model_clients
from teamstore.settings import Settings
from tests.audit.teams import context, open_session
from tests.otlp_receiver import OtlpReceiver

RUNS = 200
TRANSCRIPT_BYTES = 6 * 1024
"""A few KB, as a short run's gzipped transcript is (random bytes: the write is timed, not its compression); an
``fsync`` of so little costs the disk's flush, whatever the size."""


def _team(metered: bool) -> Any:
    component = support_triage().dump_component().model_dump()
    return BaseGroupChat.load_component(wrap_model_clients(component) if metered else component)


async def _observed_run(observers: list[RunObserver], team: Any) -> tuple[float, float]:
    """One run through the runtime's observer path: (seconds to the result, seconds until audit is written).

    Like ``Session.run``: the end-of-run audit writes start as a task when the stream ends, and the
    session awaits them before its state save and lease release.
    """
    ctx = context(user_id=f"user-{time.perf_counter_ns() % 97}", session_id="s1")
    await open_session(observers, ctx)  # as its session opened, before the run: the user's subject and data key
    started = time.perf_counter()
    for observer in observers:
        await notify_observers([observer], "run_started", ctx)
    with metered_run() as meter:
        async for item in team.run_stream(task="My router keeps dropping"):
            if isinstance(item, TaskResult):
                result = item
                continue
            await notify_observers(observers, "on_item", ctx, item)
    outcome = RunOutcome(
        finished_at=ctx.started_at,
        result=result,
        stop_reason=result.stop_reason,
        model_calls=list(meter.calls),
    )
    audit = asyncio.create_task(notify_observers(observers, "run_finished", ctx, outcome))
    to_result = time.perf_counter() - started
    await audit
    return to_result, time.perf_counter() - started


async def _bare_run(team: Any) -> float:
    started = time.perf_counter()
    async for _ in team.run_stream(task="My router keeps dropping"):
        pass
    return time.perf_counter() - started


async def s3_requests_per_run(tmp: Path, runs: int = 20) -> float:
    """Transcript uploads to moto over HTTP; every botocore request counted."""
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL_S3=s3_endpoint(),
    )
    client = make_client()
    client.create_bucket(Bucket="bench")
    sent: list[str] = []
    client.meta.events.register("before-send.s3", lambda request, **_: sent.append(request.method))
    engine = create_engine(f"sqlite:///{(tmp / 's3.db').as_posix()}")
    await upgrade(engine)
    observer = TranscriptObserver(S3TranscriptStore(client, "bench", "t"), engine, Pseudonyms(engine))
    for _ in range(runs):
        await _observed_run([observer], _team(metered=True))
    await observer.drain()
    await engine.dispose()
    return len(sent) / runs


async def overhead(tmp: Path, database_url: str, receiver: OtlpReceiver, runs: int = RUNS) -> dict[str, float]:
    """Median and mean run time, audited vs bare, alternating in one process; spans go to ``receiver``."""
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    provider = setup_tracing(Settings())
    assert provider is not None
    engine = create_engine(database_url)
    await upgrade(engine)
    pseudonyms = Pseudonyms(engine)
    observers: list[RunObserver] = [
        LedgerObserver(engine, pseudonyms),
        TranscriptObserver(LocalTranscriptStore(tmp / "transcripts"), engine, pseudonyms),
        SpanObserver(provider, pseudonyms),
    ]
    bare: list[float] = []
    metered: list[float] = []
    audited: list[float] = []
    durable: list[float] = []
    for _ in range(10):  # warm up imports, caches and the database file
        await _bare_run(_team(metered=False))
        await _observed_run(observers, _team(metered=True))
    for _ in range(runs):
        bare.append(await _bare_run(_team(metered=False)))
        metered.append((await _observed_run([], _team(metered=True)))[0])
        to_result, to_durable = await _observed_run(observers, _team(metered=True))
        audited.append(to_result)
        durable.append(to_durable)
    provider.shutdown()
    del os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
    await engine.dispose()
    return {
        "bare_median_ms": statistics.median(bare) * 1000,
        "audited_median_ms": statistics.median(audited) * 1000,
        "metered_median_ms": statistics.median(metered) * 1000,
        "ratio_median": statistics.median(audited) / statistics.median(bare),
        "durable_median_ms": statistics.median(durable) * 1000,
        "durable_ratio_median": statistics.median(durable) / statistics.median(bare),
        "ratio_mean": statistics.fmean(audited) / statistics.fmean(bare),
        "spans_received": float(len(receiver.spans)),
    }


async def transcript_writes(folder: Path, rounds: int, writes: int) -> dict[str, float]:
    """Per-write seconds of ``put`` flushed (durable) and not, ``writes`` of each per round, alternating (which goes
    first rotating); into one session's folder, as a session's runs are, made before the first round."""
    stores = {durable: LocalTranscriptStore(folder / "transcripts", durable=durable) for durable in (True, False)}
    body, session = os.urandom(TRANSCRIPT_BYTES), f"subjects/{'a' * 32}/sessions/{'b' * 32}/runs"
    await stores[False].put(f"{session}/warm.jsonl.gz", body)
    medians: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(rounds):
        for durable in ((True, False) if round_ % 2 == 0 else (False, True)):
            times = []
            for write in range(writes):
                started = time.perf_counter()
                await stores[durable].put(f"{session}/{durable}-{round_}-{write}.jsonl.gz", body)
                times.append(time.perf_counter() - started)
            medians[durable].append(statistics.median(times))
    return {
        "fsync_ms": statistics.median(medians[True]) * 1000,
        "page_cache_ms": statistics.median(medians[False]) * 1000,
        "ratio": statistics.median(d / p for d, p in zip(medians[True], medians[False], strict=True)),
    }


def print_transcript_writes() -> None:
    """Measure and print :func:`transcript_writes` (``BENCH_TRANSCRIPT_ROUNDS`` rounds of
    ``BENCH_TRANSCRIPT_WRITES`` writes each way), in a folder on the disk the temporary files go to."""
    rounds, writes = int(env_number("BENCH_TRANSCRIPT_ROUNDS", 15)), int(env_number("BENCH_TRANSCRIPT_WRITES", 40))
    with tempfile.TemporaryDirectory() as folder:
        found = asyncio.run(transcript_writes(Path(folder), rounds, writes))
    print(f"a {TRANSCRIPT_BYTES // 1024} KB transcript to the local folder ({rounds} rounds of {writes} writes each "
          f"way, alternating): flushed (fsync) {found['fsync_ms']:.2f} ms, page cache only "
          f"{found['page_cache_ms']:.3f} ms per write; {found['ratio']:.1f}x", flush=True)


FILL = """
INSERT INTO ts_usage (run_id, agent, model, purpose, calls, failed_calls, input_tokens, output_tokens, team,
    team_version, session_key, subject_key, stop_reason, ended_by_limit, run_failed, started_at, finished_at, day)
SELECT 'run-' || (g / 3), (ARRAY['triage','researcher','critic'])[g % 3 + 1],
    (ARRAY['offline-small','gpt-4o','gpt-4o-mini'])[(g / 3) % 3 + 1], 'agent', 1, 0, 100 + g % 500, 50 + g % 200,
    'support_triage', 'v' || (g % 3), md5('s' || (g / 30)), md5('u' || (g / 300)), 'max messages',
    (g % 10 = 0), false, ts, ts + interval '5 seconds', ts::date
FROM (SELECT g, timestamptz '2026-01-01' + (g % 90) * interval '1 day' + (g % 86400) * interval '1 second' AS ts
      FROM generate_series(0, 999999) AS g) AS s
"""


async def _time_query(engine: Any, where: CostFilter, by: str, repeat: int = 7, top: int | None = None) -> float:
    prices = load_prices()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        await query_costs(engine, prices, by=by, where=where, top=top)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def cost_query(rows_note: str = "1,000,000") -> dict[str, float]:
    """Per-session, per-user and per-user by team and model cost on 1M rows: indexes on vs index/bitmap scans
    off; and two whole-ledger aggregates."""
    import psycopg

    server, url = postgres_database()
    try:
        engine = create_engine(url)
        await upgrade(engine)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(FILL)
            conn.execute("ANALYZE ts_usage")
        scan = create_engine(
            url, connect_args={"options": "-c enable_indexscan=off -c enable_bitmapscan=off"}
        )
        figures: dict[str, float] = {}
        for name, where, by in (
            ("session", CostFilter(session_key=_md5("s123")), "session"),
            ("user", CostFilter(subject_key=_md5("u123")), "session"),
            ("user_team_model", CostFilter(subject_key=_md5("u123")), "team,model"),  # two dimensions at once
        ):
            figures[f"{name}_indexed_ms"] = await _time_query(engine, where, by)
            figures[f"{name}_full_scan_ms"] = await _time_query(scan, where, by, repeat=3)
            figures[f"{name}_ratio"] = figures[f"{name}_full_scan_ms"] / figures[f"{name}_indexed_ms"]
        figures["whole_ledger_by_day_ms"] = await _time_query(engine, CostFilter(), "day", repeat=1)
        figures["whole_ledger_by_week_team_ms"] = await _time_query(engine, CostFilter(), "week,team", repeat=1)
        figures |= {f"pg_{k}": v for k, v in (await every_session(engine)).items()}
        await engine.dispose()
        await scan.dispose()
        return figures
    finally:
        drop_database(server, url)


@contextlib.contextmanager
def _per_day() -> Iterator[None]:
    """The ledger's tokens summed per day instead of per price period: the query as it was before."""
    period = cost_sums.price_period
    cost_sums.price_period = lambda periods: (usage, usage.c.day)  # type: ignore[assignment]
    try:
        yield
    finally:
        cost_sums.price_period = period


async def _session_report(engine: Any, per_day: bool, top: int | None, traced: bool = False) -> float:
    """Seconds for ``cost --by session`` (``--top``), or the peak of its Python memory in MB if ``traced``."""
    prices = load_prices()
    with _per_day() if per_day else contextlib.nullcontext():
        if traced:
            tracemalloc.start()
        started = time.perf_counter()
        await query_costs(engine, prices, "session", top=top)
        took = time.perf_counter() - started
        if traced:
            took = tracemalloc.get_traced_memory()[1] / 1e6
            tracemalloc.stop()
    return took


async def every_session(engine: Any, rounds: int = 3) -> dict[str, float]:
    """``cost --by session``, whole and ``--top 10``, per price period vs per day, alternating; medians,
    their ratio (per day / per period) and each one's peak memory."""
    figures: dict[str, float] = {}
    for label, top in (("top10", 10), ("all", None)):
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(rounds):
            for per_day in (True, False):
                times[per_day].append(await _session_report(engine, per_day, top))
        for per_day, name in ((False, "period"), (True, "day")):
            figures[f"{label}_{name}_s"] = statistics.median(times[per_day])
            figures[f"{label}_{name}_mb"] = await _session_report(engine, per_day, top, traced=True)
        figures[f"{label}_ratio"] = figures[f"{label}_day_s"] / figures[f"{label}_period_s"]
    return figures


def _fill_sqlite(path: Path, rows: int, per_session: int = 30) -> None:
    """The Postgres fill's shape, ``rows`` of it: ``per_session`` rows a session (30: three a run), 90 days."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    models, agents = ("offline-small", "gpt-4o", "gpt-4o-mini"), ("triage", "researcher", "critic")

    def row(g: int) -> tuple[Any, ...]:
        ts = start + timedelta(days=g % 90, seconds=g % 86400)
        stamp = ts.strftime("%Y-%m-%d %H:%M:%S.%f")
        return (f"run-{g // min(3, per_session)}", agents[g % 3], models[(g // 3) % 3], "agent", 1, 0, 100 + g % 500, 50 + g % 200,
                "support_triage", f"v{g % 3}", _md5(f"s{g // per_session}"), _md5(f"u{g // 300}"), "max messages",
                g % 10 == 0, False, stamp, (ts + timedelta(seconds=5)).strftime("%Y-%m-%d %H:%M:%S.%f"),
                ts.date().isoformat())

    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(
            "INSERT INTO ts_usage (run_id, agent, model, purpose, calls, failed_calls, input_tokens, output_tokens,"
            " team, team_version, session_key, subject_key, stop_reason, ended_by_limit, run_failed, started_at,"
            " finished_at, day) VALUES (" + ",".join("?" * 18) + ")", (row(g) for g in range(rows)))


async def every_session_sqlite(tmp: Path, rows: int = 200_000) -> dict[str, float]:
    """:func:`every_session` on ``rows`` ledger rows in SQLite."""
    path = tmp / "ledger.db"
    engine = create_engine(f"sqlite:///{path.as_posix()}")
    await upgrade(engine)
    _fill_sqlite(path, rows)
    try:
        return await every_session(engine)
    finally:
        await engine.dispose()


async def _listing_peak(engine: Any, streamed: bool) -> tuple[float, float]:
    """Seconds and peak Python memory (MB) of every session's row, streamed or held as one report."""
    from teamstore.db.snapshot import read_snapshot

    prices = load_prices()
    tracemalloc.start()
    started = time.perf_counter()
    if streamed:
        async with read_snapshot(engine) as conn:
            async for _row in CostStream(conn, prices, ("session",), CostFilter()):
                pass  # printed and let go, as `teamstore cost` does
    else:
        await query_costs(engine, prices, "session")
    took, peak = time.perf_counter() - started, tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return took, peak


async def listing_memory(tmp: Path) -> dict[int, dict[str, float]]:
    """:func:`_listing_peak` both ways on SQLite ledgers of 20,000 and 200,000 one-run sessions."""
    figures: dict[int, dict[str, float]] = {}
    for sessions in (20_000, 200_000):
        path = tmp / f"listing-{sessions}.db"
        engine = create_engine(f"sqlite:///{path.as_posix()}")
        await upgrade(engine)
        _fill_sqlite(path, sessions, per_session=1)
        try:
            for name, streamed in (("stream", True), ("whole", False)):
                took, peak = await _listing_peak(engine, streamed)
                figures.setdefault(sessions, {}).update({f"{name}_s": took, f"{name}_mb": peak})
        finally:
            await engine.dispose()
    return figures


def _print_every_session(label: str, figures: dict[str, float]) -> None:
    for name, shown in (("top10", "the 10 costliest"), ("all", "every session")):
        print(f"  {shown}: per price period {figures[f'{name}_period_s']:.2f} s, peak "
              f"{figures[f'{name}_period_mb']:.0f} MB; per day (before) {figures[f'{name}_day_s']:.2f} s, peak "
              f"{figures[f'{name}_day_mb']:.0f} MB; {figures[f'{name}_ratio']:.1f}x faster ({label})")


def _md5(text: str) -> str:
    import hashlib

    return hashlib.md5(text.encode()).hexdigest()


def main() -> None:
    """Print the three figures."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    print_transcript_writes()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        per_run = asyncio.run(s3_requests_per_run(tmp))
        print(f"S3 requests per run: {per_run:.2f} (target 1)", flush=True)
        server, pg_url = postgres_database()
        try:
            for label, url in (
                ("SQLite", f"sqlite:///{(tmp / 'overhead.db').as_posix()}"),
                ("Postgres", pg_url),
            ):
                with otlp_receiver() as receiver:
                    figures = asyncio.run(overhead(tmp, url, receiver))
                print(
                    f"overhead, transcript+spans+ledger ({label} ledger) vs bare ({RUNS} runs each, alternating):\n"
                    f"  time to the result: median {figures['audited_median_ms']:.2f} ms vs "
                    f"{figures['bare_median_ms']:.2f} ms = {figures['ratio_median']:.3f}x "
                    f"(mean ratio {figures['ratio_mean']:.3f}x; target < 1.2x)\n"
                    f"  time until the audit is written: median {figures['durable_median_ms']:.2f} ms = "
                    f"{figures['durable_ratio_median']:.3f}x (the session awaits this before saving state)\n"
                    f"  metering alone, no observers: {figures['metered_median_ms']:.2f} ms",
                    flush=True,
                )
        finally:
            drop_database(server, pg_url)
    costs = asyncio.run(cost_query())
    for name, label in (("session", "session"), ("user", "user"), ("user_team_model", "user, by team,model")):
        print(
            f"cost query for one {label} over 1,000,000 ledger rows (Postgres): indexed "
            f"{costs[f'{name}_indexed_ms']:.2f} ms, full scan {costs[f'{name}_full_scan_ms']:.1f} ms, ratio "
            f"{costs[f'{name}_ratio']:.0f}x"
        )
    print(f"whole-ledger cost by day (full aggregate): {costs['whole_ledger_by_day_ms']:.0f} ms")
    print(f"whole-ledger cost by week,team (full aggregate): {costs['whole_ledger_by_week_team_ms']:.0f} ms")
    print("cost --by session on 1,000,000 ledger rows, 33,334 sessions (Postgres), median of 3 alternating:")
    _print_every_session("Postgres", {k.removeprefix("pg_"): v for k, v in costs.items() if k.startswith("pg_")})
    with tempfile.TemporaryDirectory() as folder:
        sqlite = asyncio.run(every_session_sqlite(Path(folder)))
    print("cost --by session on 200,000 ledger rows, 6,667 sessions (SQLite), median of 3 alternating:")
    _print_every_session("SQLite", sqlite)
    with tempfile.TemporaryDirectory() as folder:
        listing = asyncio.run(listing_memory(Path(folder)))
    for sessions, shown in listing.items():
        print(f"full listing of {sessions:,} one-run sessions (SQLite): streamed {shown['stream_s']:.1f} s, peak "
              f"{shown['stream_mb']:.0f} MB; held whole {shown['whole_s']:.1f} s, peak {shown['whole_mb']:.0f} MB")
