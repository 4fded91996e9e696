"""Resume-state benchmarks: stored bytes over many runs, statements per load/save, the cycle against the
floor, the ceiling and two peers.

    python -m bench state

(1) bytes stored per session after 10, 50 and 200 runs: teamstore (bounded context, opted-in participants)
    vs plain ``team.save_state()`` of the same team with AutoGen's ``BufferedChatCompletionContext``;
(2) SQL statements per load and per save (a new session's and a resume's, under the per-user session bound);
(3) one resume+save cycle on Postgres with production durability, sequential and with 16 concurrent
    sessions, beside the floor (a bare psycopg SELECT + versioned UPSERT of the same bytes), its
    variants (:mod:`bench.cycles`), LangGraph's ``AsyncPostgresSaver`` (:mod:`bench.peer_langgraph`) and
    the OpenAI Agents SDK's ``SQLAlchemySession`` (:mod:`bench.peer_openai`), in one run: short rounds
    with the order rotating, each figure the median of its per-round ratios. Printed with the floor's
    cycles/s and the server's commit time, so a reader can tell the store's cost from the disk's;
(4) the same with a ~50 KB state, against the floor on an lz4 column (as teamstore stores states).

``BENCH_ROUNDS`` (25) and ``BENCH_SECONDS`` (0.4) change the rounds and their length. bench/README.md
says how to read the figures.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import statistics
import tempfile
from typing import Any

from autogen_core.model_context import BufferedChatCompletionContext
from sqlalchemy import event

from bench import peer_langgraph, peer_openai
from bench.common import (
    Cycle,
    commit_time,
    drop_database,
    env_number,
    interleave,
    median_ratio,
    postgres_database,
    server_settings,
)
from bench.cycles import BOUND, LARGE, Built, Cycles, make_team, record, sample_state
from teamstore.context import BoundedChatCompletionContext
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.runtime.resume import SCHEMA_VERSION, capture_states
from teamstore.state.base import Claim, SessionKey
from teamstore.state.envelope import decode, encode
from teamstore.state.factory import store_for
from teamstore.state.lease_mode import lease_mode, set_lease_mode

CHECKPOINTS = (10, 50, 200)


async def bytes_over_runs() -> None:
    plain, ours = make_team(BufferedChatCompletionContext), make_team(BoundedChatCompletionContext)
    print("(1) stored bytes per session (3-agent RoundRobin, context 20)")
    print(f"{'runs':>6} {'plain save_state':>18} {'ours, all 3':>12} {'ours, researcher':>17} {'plain/ours':>11}")
    for run in range(1, max(CHECKPOINTS) + 1):
        task = f"customer message {run}: the router drops again"
        await plain.run(task=task)
        await ours.run(task=task)
        if run in CHECKPOINTS:
            plain_bytes = len(json.dumps(await plain.save_state()).encode())
            all3 = len(encode({"kind": "team", "participants": await capture_states(
                Built(ours, ("triage", "researcher", "critic")), 20)}).encode())
            one = len(encode({"kind": "team", "participants": await capture_states(
                Built(ours, ("researcher",)), 20)}).encode())
            print(f"{run:>6} {plain_bytes:>18,} {all3:>12,} {one:>17,} {plain_bytes / one:>10.1f}x")


async def statements(url: str, state: str, lease: str = "lock") -> None:
    engine = create_engine(url)
    await upgrade(engine)
    if engine.dialect.name == "postgresql" and await lease_mode(engine) != lease:
        await set_lease_mode(engine, lease)
    store, seen = store_for(engine, lease=lease), []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not statement.lstrip().upper().startswith(("PRAGMA", "BEGIN", "COMMIT")):
            seen.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", count)
    # On Postgres, loads and saves go through psycopg directly, past SQLAlchemy's events.
    direct: Any = store if hasattr(store, "_execute") else getattr(store, "statements", None)
    if hasattr(direct, "_execute"):
        fast = direct._execute

        async def counted(cursor: Any, stmt: Any, params: Any) -> Any:
            seen.append(stmt.sql)
            return await fast(cursor, stmt, params)

        direct._execute = counted
    key, claim = SessionKey("u", "s"), Claim("bench", "v1", SCHEMA_VERSION, "0.7.5", {"researcher": "fp"})
    await store.check_lease_mode()  # once per store and every lease_recheck_seconds, not per load
    counts = []
    for _ in range(2):  # a new session, then its resume
        seen.clear()
        row = await store.acquire(key, claim, owner="w", lease_ttl=60, wait_seconds=5, max_sessions=BOUND)
        loads = len(seen)
        await store.save(key, owner="w", expected_version=row.row_version, record=record(state), release=True)
        counts.append(f"{loads}, per save: {len(seen) - loads}")
    kind = engine.dialect.name + (f" ({store.lease} leases)" if engine.dialect.name == "postgresql" else "")
    print(f"    {kind:<24} statements per load: {counts[0]} (new session); {counts[1]} (resume)")
    await store.aclose()
    await engine.dispose()


def _peers(url: str, state: str, workers: int) -> dict[str, Any]:
    """The peers that are installed, each to run beside teamstore on ``url``."""
    participants = decode(state)["participants"]
    peers: dict[str, Any] = {}
    if peer_langgraph.available() is None:
        peers["langgraph"] = peer_langgraph.LangGraphCycle(url, participants)
        if workers > 1:
            peers["langgraph_shared"] = peer_langgraph.LangGraphCycle(url, participants, shared=True)
    if peer_openai.available() is None:
        peers["openai"] = peer_openai.OpenAISessionCycle(url, participants)
    return peers


def _floors(cycles: Cycles, big: bool) -> dict[str, Cycle]:
    """The floor and its variants; a 50 KB state gets the ones that matter beside an lz4 column."""
    if big:
        return {"floor_lz4": functools.partial(cycles.floor, table="floor_lz4"), "floor": cycles.floor,
                "ceiling": functools.partial(cycles.floor, validate=True, table="floor_lz4")}
    return {"floor": cycles.floor, "store_only": cycles.store_only,
            "codec": functools.partial(cycles.floor, codec=True),
            "ceiling": functools.partial(cycles.floor, validate=True),
            "floor_lz4": functools.partial(cycles.floor, table="floor_lz4"),
            "floor_tx": functools.partial(cycles.floor, transaction=True)}


async def _measure(urls: dict[str, str], state: str, workers: int, big: bool) -> dict[str, list[float]]:
    """Open every contender, run the interleaved rounds, close them; each one's rates."""
    cycles, peers = Cycles(urls["main"], state), _peers(urls["peers"], state, workers)
    rows = None if big else Cycles(urls["row"], state, lease="row")
    opened = [c for c in (cycles, rows, *peers.values()) if c is not None]
    for contender in opened:
        await contender.setup(1 if contender is rows else workers)
    runs = {"ours": cycles.ours, **_floors(cycles, big), **{name: p.cycle for name, p in peers.items()}}
    if rows is not None:
        runs["row"] = rows.ours
    try:
        return await interleave(runs, workers, int(env_number("BENCH_ROUNDS", 25)), env_number("BENCH_SECONDS", 0.4))
    finally:
        for contender in opened:
            await contender.close()


_PEERS = {"langgraph": "LangGraph AsyncPostgresSaver, a saver per task (target: teamstore >= 1.5x it)",
          "langgraph_shared": "LangGraph AsyncPostgresSaver, one saver shared by every task",
          "openai": "OpenAI Agents SDK SQLAlchemySession (reads the same, appends one run)"}


def _print_peers(rates: dict[str, list[float]], floor: str) -> None:
    for name, label in _PEERS.items():
        if name in rates:
            print(f"    {'':<14} {label}: {statistics.median(rates[name]):,.0f}/s,"
                  f" {median_ratio(rates, name, floor):.2f}x the floor; teamstore {median_ratio(rates, 'ours', name):.2f}x it")


def _print_small(rates: dict[str, list[float]], label: str) -> None:
    ratio = functools.partial(median_ratio, rates)
    o, f, t = (statistics.median(rates[name]) for name in ("ours", "floor", "floor_tx"))
    print(f"    {label:<14} teamstore {o:8,.0f}/s   floor {f:8,.0f}/s   ratio {ratio('ours', 'floor'):.2f}x"
          " (the earlier target: >= 0.8x)")
    print(f"    {'':<14} teamstore against the ceiling {ratio('ours', 'ceiling'):.2f}x (what the store itself costs;"
          " target >= 0.75x)")
    print(f"    {'':<14} floor in a transaction {t:,.0f}/s ({ratio('floor_tx', 'floor'):.2f}x the floor);"
          f" teamstore against it {ratio('ours', 'floor_tx'):.2f}x")
    print(f"    {'':<14} store statements alone {ratio('store_only', 'floor'):.2f}x; row leases"
          f" {ratio('row', 'floor'):.2f}x; floor on an lz4 column {ratio('floor_lz4', 'floor'):.2f}x")
    print(f"    {'':<14} floor + decode, encode {ratio('codec', 'floor'):.2f}x;"
          f" ceiling (floor + decode, validate, encode) {ratio('ceiling', 'floor'):.2f}x")
    _print_peers(rates, "floor")


def _print_big(rates: dict[str, list[float]], label: str) -> None:
    ratio = functools.partial(median_ratio, rates)
    o, f = (statistics.median(rates[name]) for name in ("ours", "floor_lz4"))
    print(f"    {label:<14} teamstore {o:8,.0f}/s   floor (lz4 column) {f:8,.0f}/s   ratio {ratio('ours', 'floor_lz4'):.2f}x")
    print(f"    {'':<14} teamstore against the ceiling (lz4) {ratio('ours', 'ceiling'):.2f}x; the ceiling"
          f" {ratio('ceiling', 'floor_lz4'):.2f}x; the floor on the default (pglz) column {ratio('floor', 'floor_lz4'):.2f}x")
    _print_peers(rates, "floor_lz4")


async def throughput(server: str, state: str, big: bool = False) -> None:
    """One section of cycle figures: sequential, then 16 concurrent sessions, each on fresh databases."""
    for workers in (1, 16):
        urls = {name: postgres_database()[1] for name in ("main", "peers") + (() if big else ("row",))}
        try:
            before = _commit_time(urls["main"])
            rates = await _measure(urls, state, workers, big)
            after = _commit_time(urls["main"])
        finally:
            for url in urls.values():
                drop_database(server, url)
        label = "sequential" if workers == 1 else f"{workers} concurrent"
        (_print_big if big else _print_small)(rates, label)
        print(f"    {'':<14} commit time before: {before}; after: {after}")


def _print_sizes(state: str) -> None:
    participants = decode(state)["participants"]
    sizes = [f"teamstore's envelope {len(state.encode()):,} bytes of JSON"]
    if peer_langgraph.available() is None:
        sizes.append(f"LangGraph's blob {peer_langgraph.stored_bytes(participants):,} bytes (msgpack)")
    if peer_openai.available() is None:
        rows, size = peer_openai.stored_bytes(participants)
        sizes.append(f"the OpenAI session {size:,} bytes of JSON in {rows} rows")
    print(f"    the same state stored: {'; '.join(sizes)}")


def _print_server(url: str) -> None:
    print(f"    server: {server_settings(url)}")
    missing = [m for m in (peer_langgraph.available(), peer_openai.available()) if m]
    if missing:
        print(f"    peers not installed, left out: {'; '.join(missing)}")


def _commit_time(url: str) -> str:
    """The server's commit time now: the disk's share of every save, which moves with other work on it."""
    on, off = commit_time(url)
    return (f"a one-row INSERT in autocommit {on * 1000:.3f} ms, {off * 1000:.3f} ms with synchronous_commit off"
            f" (the WAL flush ~{(on - off) * 1000:.3f} ms)")


async def cycles_section(server: str, url: str) -> None:
    rounds, seconds = int(env_number("BENCH_ROUNDS", 25)), env_number("BENCH_SECONDS", 0.4)
    small, big = await sample_state(), await sample_state(LARGE)
    print(f"(3) resume+save cycles/s on Postgres, {len(small):,}-byte state, {rounds} rounds of {seconds}s each,"
          " the order rotating; medians, ratios to the floor of the same round")
    _print_server(url)
    _print_sizes(small)
    await throughput(server, small)
    print(f"(4) the same with a {len(big):,}-byte state, against the floor on an lz4 column (as teamstore stores states)")
    _print_sizes(big)
    await throughput(server, big, big=True)


async def run() -> None:
    await bytes_over_runs()
    state = await sample_state()
    server, url = postgres_database()
    row_url = postgres_database()[1]
    sqlite_path = os.path.join(tempfile.gettempdir(), f"bench-{os.getpid()}.db")
    try:
        print("(2) SQL statements")
        await statements(f"sqlite:///{sqlite_path}", state)
        await statements(url, state)
        await statements(row_url, state, lease="row")
        await cycles_section(server, url)
    finally:
        drop_database(server, url)
        drop_database(server, row_url)
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(sqlite_path + suffix):
                os.remove(sqlite_path + suffix)


def main() -> None:
    """Print the figures."""
    asyncio.run(run())
