"""What sealing users' data under their own keys costs: the state cycle and the transcript write, sealed against
unsealed, in one run.

    python -m bench keys

1. The resume+save cycle of :mod:`bench.cycles` (lease+load, open, decode, validate, encode, seal, save) on
   Postgres with production durability, sequential and with 16 sessions at once, against the same cycle on a
   store that does not seal, in short interleaved rounds; the ratio is the median of the per-round ratios
   (the target: sealed >= 0.95x, i.e. no more than 5% of the cycle). The same on the embedded SQLite file.
   The data key comes from memory (``key_cache_seconds``), as in a worker serving its users. A second
   unsealed run on a database of its own takes its turns too: its ratio to the first is the harness's own
   noise, and each run's client CPU per cycle is printed (the difference is what sealing costs the client),
   then what of it the sealed store's own code and its primitives take, timed in place (:func:`_in_place`).
2. The transcript write of one run (encode the gzip JSON lines, seal, write to a local folder) against the
   same write unsealed, alternating, and the seal alone in microseconds.
3. The state's sealing inside a whole request (:mod:`bench.request_variants`: build from the registry,
   lease+load, validate, apply, run, transcript and ledger, save+release) on Postgres: the platform as it
   ships against the same platform whose state store seals nothing, each on a database of its own, in
   interleaved rounds, sequential and with 16 sessions at once, with a second unsealed run as in (1). All
   seal their transcripts ((2) times that).

4. ``teamstore keys rotate`` over ``BENCH_ROTATE_USERS`` (3,000) data keys under the local key file, on the
   embedded SQLite file and on Postgres: the rotation as it ships (batches of 500: a thread hop and a
   transaction each) against batches of one key (a thread hop, a transaction and a read per key),
   alternating, ``BENCH_ROTATE_ROUNDS`` (3) rotations each; each rotation moves every key.

``BENCH_ROUNDS`` (25) and ``BENCH_SECONDS`` (0.4) change the rounds of (1); ``BENCH_REQUEST_ROUNDS`` (11)
and ``BENCH_REQUEST_SECONDS`` (1.0) those of (3).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from bench.common import drop_database, env_number, gather_cycles, interleave, median_ratio, postgres_database
from bench.cycles import Cycles, sample_state
from bench.request_variants import Teamstore
from teamstore.audit.transcripts.local import LocalTranscriptStore
from teamstore.audit.transcripts.record import encode, item_record, sealed_context
from teamstore.keys import KeyService
from teamstore.keys.kek import LocalKeyFile
from teamstore.keys.ring import KeyRing

RUNS = 400


def _keys(folder: Path) -> Any:
    def make(engine: AsyncEngine) -> KeyService:
        return KeyService(engine, KeyRing(LocalKeyFile(folder / "kek.json")), cache_seconds=3600)

    return make


RUNS_OF_CYCLE = ("unsealed", "sealed", "unsealed again")
"""The cycle's runs, each on a database of its own: the second unsealed one measures the harness against itself
(two databases, the same code), the noise any ratio here carries."""


async def _rounds(urls: dict[str, str], state: str, workers: int, lease: str, folder: Path
                  ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each run's rate and client CPU per cycle, round by round."""
    runs = {name: Cycles(urls[name], state, lease, keys=_keys(folder) if name == "sealed" else None)
            for name in RUNS_OF_CYCLE}
    for cycles in runs.values():
        await cycles.setup(workers)
    try:
        rounds, seconds = int(env_number("BENCH_ROUNDS", 25)), env_number("BENCH_SECONDS", 0.4)
        cpu: dict[str, list[float]] = {}
        rates = await interleave({name: cycles.ours for name, cycles in runs.items()}, workers, rounds, seconds,
                                 cpu=cpu)
        cpu["sealed layer"], cpu["sealed primitives"] = await _in_place(runs["sealed"], workers, seconds * 2)
        return rates, cpu
    finally:
        for cycles in runs.values():
            await cycles.close()


async def state_cycle(folder: Path) -> None:
    state = await sample_state()
    print(f"(1) resume+save cycle, {len(state):,}-byte state, sealed against unsealed (median of per-round ratios;"
          " client CPU per cycle, median)")
    for workers in (1, 16):
        server = ""
        urls: dict[str, str] = {}
        for name in RUNS_OF_CYCLE:
            server, urls[name] = postgres_database()
        try:
            measured = await _rounds(urls, state, workers, "lock", folder)
        finally:
            for url in urls.values():
                drop_database(server, url)
        _print(f"Postgres, {'sequential' if workers == 1 else f'{workers} at once'}", *measured)
    sqlite = {name: f"sqlite:///{(folder / f'{n}.db').as_posix()}" for n, name in enumerate(RUNS_OF_CYCLE)}
    _print("SQLite, sequential", *await _rounds(sqlite, state, 1, "row", folder))


async def _in_place(cycles: Cycles, workers: int, seconds: float) -> tuple[list[float], list[float]]:
    """What the sealed store's own code takes per cycle, timed in place after the rounds: its ``acquire`` and
    ``save`` less the backend's (the parts before and after the backend's call, which do not wait), and of that
    its primitives alone (the data key's seal, the open, base64 both ways). On the event loop thread's CPU clock,
    as the client CPU per cycle is counted: with 16 sessions on two cores the database's processes take the
    core from the client mid-call, and a wall clock counted that too. Reading the clock costs ~0.3 us, some
    4 us of a cycle's figure. What sealing adds to the client's CPU beyond the first is the rest of the cycle
    run slower beside it (caches the ciphers and the extra copies displaced)."""
    import teamstore.state.sealed as layer

    store = cycles.store
    assert isinstance(store, layer.SealedStateStore)
    spent = {"outer": 0.0, "inner": 0.0, "primitives": 0.0}
    patched: list[tuple[Any, str, Any]] = []

    def timed(owner: Any, name: str, into: str) -> None:
        given = getattr(owner, name)
        patched.append((owner, name, given))
        if asyncio.iscoroutinefunction(given):
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                started = time.thread_time()
                try:
                    return await given(*args, **kwargs)
                finally:
                    spent[into] += time.thread_time() - started

            setattr(owner, name, timed_async)
        else:
            def timed_sync(*args: Any, **kwargs: Any) -> Any:
                started = time.thread_time()
                try:
                    return given(*args, **kwargs)
                finally:
                    spent[into] += time.thread_time() - started

            setattr(owner, name, timed_sync)

    for name in ("acquire", "save"):
        timed(store, name, "outer")
        timed(store.inner, name, "inner")
    for name in ("open_sealed", "seal_text", "sealed_bytes"):
        timed(layer, name, "primitives")
    timed(layer.DataKey, "seal", "primitives")
    try:
        done, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            done += await gather_cycles(cycles.ours, workers)
    finally:
        for owner, name, given in reversed(patched):
            if owner is store or owner is store.inner:
                delattr(owner, name)  # the instance's own attribute goes; its class's method shows again
            else:
                setattr(owner, name, given)
    return [(spent["outer"] - spent["inner"]) / done], [spent["primitives"] / done]


def _print(label: str, rates: dict[str, list[float]], cpu: dict[str, list[float]]) -> None:
    ratio = median_ratio(rates, "sealed", "unsealed")
    us = {name: statistics.median(cpu[name]) * 1e6 for name in ("unsealed", "sealed")}
    print(f"    {label:<24} unsealed {statistics.median(rates['unsealed']):8,.0f}/s   sealed "
          f"{statistics.median(rates['sealed']):8,.0f}/s   ratio {ratio:.3f}x (encryption costs {(1 - ratio) * 100:+.1f}%; "
          "target <= 5%)")
    print(f"    {'':<24} client CPU per cycle {us['unsealed']:,.0f} -> {us['sealed']:,.0f} us "
          f"({us['sealed'] - us['unsealed']:+.0f} us); unsealed against itself "
          f"{median_ratio(rates, 'unsealed again', 'unsealed'):.3f}x")
    layer, primitives = cpu["sealed layer"][0] * 1e6, cpu["sealed primitives"][0] * 1e6
    print(f"    {'':<24} timed in place: the sealed store's own code {layer:.0f} us a cycle, its ciphers, LZ4 and "
          f"base64 alone {primitives:.0f} us ({primitives / us['unsealed'] * 100:.1f}% of an unsealed cycle)")


def _transcript(messages: int = 12) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from datetime import UTC, datetime

    from autogen_agentchat.messages import TextMessage

    words = "the router drops again every evening after the firmware update, says the customer " * 6
    items = [item_record(n, TextMessage(source="researcher", content=f"{n}: {words}"), datetime.now(UTC))
             for n in range(messages)]
    return {"kind": "run", "run_id": "bench", "started_at": datetime.now(UTC).isoformat()}, items


async def transcript_write(folder: Path) -> None:
    from teamstore.db.engine import create_engine
    from teamstore.db.migrate import upgrade

    engine = create_engine(f"sqlite:///{(folder / 'keys.db').as_posix()}")
    await upgrade(engine)
    data_key = await _keys(folder)(engine).data_key("bench-user")
    header, items = _transcript()
    store = LocalTranscriptStore(folder / "transcripts")
    key = "subjects/bench/sessions/s/runs/r.jsonl.gz"
    times: dict[str, list[float]] = {"plain": [], "sealed": [], "seal": []}
    for n in range(RUNS):
        for name in (("plain", "sealed") if n % 2 else ("sealed", "plain")):
            started = time.thread_time()
            body = encode(header, items)
            if name == "sealed":
                sealing = time.perf_counter()
                body = data_key.seal(body, sealed_context(key))
                times["seal"].append(time.perf_counter() - sealing)
            await store.put(key, body)
            times[name].append(time.perf_counter() - started)
    await engine.dispose()
    plain, sealed = statistics.median(times["plain"]), statistics.median(times["sealed"])
    print(f"(2) transcript write of one run ({len(encode(header, items)):,} bytes gzip'd), {RUNS} each, alternating:")
    print(f"    unsealed {plain * 1e3:.3f} ms, sealed {sealed * 1e3:.3f} ms: ratio {sealed / plain:.3f}x "
          f"(the seal alone {statistics.median(times['seal']) * 1e6:.1f} us)")


class _StatesUnsealed(Teamstore):
    """Whole requests on a platform whose state store seals nothing (its transcripts are sealed as ever)."""

    label = "states unsealed"

    async def setup(self, workers: int) -> None:
        """The platform as :class:`Teamstore` makes it, its state store swapped for the backend under the seal."""
        await super().setup(workers)
        self.platform.store = self.platform.store.inner


async def whole_request(folder: Path) -> None:
    rounds, seconds = int(env_number("BENCH_REQUEST_ROUNDS", 11)), env_number("BENCH_REQUEST_SECONDS", 1.0)
    print(f"(3) the state's sealing in a whole request on Postgres ({rounds} rounds of {seconds}s; medians):")
    for workers in (1, 16):
        made = {name: (Teamstore if name == "sealed" else _StatesUnsealed, *postgres_database())
                for name in RUNS_OF_CYCLE}
        variants = {name: kind(url, folder / f"{name}-{workers}") for name, (kind, _, url) in made.items()}
        try:
            for variant in variants.values():
                await variant.setup(workers)
            runs = {name: variant.cycle for name, variant in variants.items()}
            await interleave(runs, workers, rounds=1, seconds=0.5, per_worker=1)  # imports, caches, first rows
            cpu: dict[str, list[float]] = {}
            rates = await interleave(runs, workers, rounds, seconds, per_worker=1, cpu=cpu)
        finally:
            for variant in variants.values():
                await variant.close()
            for _, server, url in made.values():
                drop_database(server, url)
        ratio = median_ratio(rates, "sealed", "unsealed")
        ms = {name: statistics.median(cpu[name]) * 1e3 for name in variants}
        print(f"    {'sequential' if workers == 1 else f'{workers} at once':<24} unsealed "
              f"{statistics.median(rates['unsealed']):6,.1f}/s   sealed {statistics.median(rates['sealed']):6,.1f}/s   "
              f"ratio {ratio:.3f}x ({(1 - ratio) * 100:+.1f}%); client CPU per request {ms['unsealed']:.2f} -> "
              f"{ms['sealed']:.2f} ms; unsealed against itself {median_ratio(rates, 'unsealed again', 'unsealed'):.3f}x")


ROTATIONS = {"batches of 500": 500, "batches of 1": 1}


async def _seed(keys: KeyService, users: int) -> None:
    """``users`` data keys under the current KEK, inserted at once (made as a user's first seal makes one)."""
    from sqlalchemy import insert

    from teamstore.keys.schema import data_keys

    kek_id = await keys.current_kek()
    kek, now = keys.ring.get(kek_id), datetime.now(UTC)
    rows = []
    for n in range(users):
        key_id = secrets.token_hex(16)
        rows.append({"user_id": f"user-{n:07}", "key_id": key_id, "kek_id": kek_id, "created_at": now,
                     "wrapped_at": now, "wrapped": kek.wrap(os.urandom(32), key_id)})
    async with keys.engine.begin() as conn:
        await conn.execute(insert(data_keys), rows)


async def _rotations(url: str, folder: Path, users: int, rounds: int) -> dict[str, list[float]]:
    """Seconds per rotation of every data key, each batch size in turn, round by round."""
    from teamstore.db.engine import create_engine
    from teamstore.db.migrate import upgrade
    from teamstore.keys.rotation import rotate

    engine = create_engine(url)
    try:
        await upgrade(engine)
        keys = _keys(folder)(engine)
        await _seed(keys, users)
        times: dict[str, list[float]] = {name: [] for name in ROTATIONS}
        for n in range(rounds):
            for name in list(ROTATIONS)[n % 2:] + list(ROTATIONS)[:n % 2]:
                started = time.thread_time()
                report = await rotate(keys, retire_days=7, batch=ROTATIONS[name])
                times[name].append(time.perf_counter() - started)
                assert report.rewrapped == users, report
        return times
    finally:
        await engine.dispose()


async def key_rotation(folder: Path) -> None:
    users, rounds = int(env_number("BENCH_ROTATE_USERS", 3000)), int(env_number("BENCH_ROTATE_ROUNDS", 3))
    print(f"(4) `keys rotate` of {users:,} data keys (local key file), {rounds} rotations each, alternating; medians:")
    server, url = postgres_database()
    try:
        on = {"SQLite": await _rotations(f"sqlite:///{(folder / 'rotate.db').as_posix()}", folder / "sqlite", users,
                                         rounds),
              "Postgres": await _rotations(url, folder / "postgres", users, rounds)}
    finally:
        drop_database(server, url)
    for backend, times in on.items():
        batched, one = (statistics.median(times[name]) for name in ROTATIONS)
        print(f"    {backend:<10} batches of 500 {batched:6.2f} s ({users / batched:8,.0f} keys/s)   batches of 1 "
              f"{one:6.2f} s ({users / one:6,.0f} keys/s)   {one / batched:5.1f}x faster; a million keys "
              f"~{batched * 1e6 / users / 60:.1f} min")


async def run() -> None:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        os.chmod(folder, 0o700)
        await state_cycle(folder)
        await transcript_write(folder)
        await whole_request(folder)
        await key_rotation(folder)


def main() -> None:
    """Print the figures."""
    asyncio.run(run())
