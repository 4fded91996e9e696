"""Returning users: what the memory recalls after a session expires, what it stores, what writing it costs.

    python -m bench memory

``BENCH_MEMORY_USERS`` users (default 20) each talk to the example support team (offline, its memory
declared: a 150-token summary, ``ticket_id`` and ``router_model``) in a session of two runs stating their
ticket and router; the session expires; their next session asks about them. Printed:

- **recall**: the share of the facts each user stated that the first model call of their new session
  held (triage's, as the offline model reports what it was given);
- **memory bytes per user**: what the two memory tables hold for one user (summary and fact values);
- **writer tokens per run**: the memory writer's tokens from the usage ledger, beside the tokens of the
  runs themselves. Each request here is a session block of one run, and the writer writes once per block.

On the embedded SQLite: the figures are counts, not speeds.
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import func, select, update

from teamstore.app import App
from teamstore.audit.schema import usage
from teamstore.examples import TRIAGE_MEMORY, example_manifest, support_triage
from teamstore.memory.erasure import USER_MEMORY
from teamstore.runtime.platform import Platform
from teamstore.settings import Settings
from teamstore.state.schema import sessions

TEAM = "support_triage"
_REMEMBERED = re.compile(r"Remembered: ([^.]*)\.")


async def _talk(platform: Platform, user: str, text: str) -> str:
    async with platform.session(user, "ticket", team=TEAM) as s:
        result = await s.run(text)
    return next((m.to_text() for m in result.messages if m.source == "triage" and type(m).__name__ == "TextMessage"), "")


async def _expire(platform: Platform, user: str) -> None:
    async with platform.engine.begin() as conn:
        await conn.execute(update(sessions).where(sessions.c.user_id == user)
                           .values(expires_at=datetime.now(UTC) - timedelta(minutes=1)))


async def _user_bytes(platform: Platform, user: str) -> int:
    async with platform.engine.connect() as conn:
        return (await USER_MEMORY.count(conn, user))[1]


async def _tokens(platform: Platform) -> tuple[int, int, int]:
    """Writer tokens, the runs' own tokens, and the number of runs, from the ledger."""
    async with platform.engine.connect() as conn:
        writer = await conn.scalar(select(func.sum(usage.c.input_tokens + usage.c.output_tokens))
                                   .where(usage.c.purpose == "memory_writer"))
        runs_tokens = await conn.scalar(select(func.sum(usage.c.input_tokens + usage.c.output_tokens))
                                        .where(usage.c.purpose != "memory_writer"))
        runs = await conn.scalar(select(func.count(func.distinct(usage.c.run_id))))
    return int(writer or 0), int(runs_tokens or 0), int(runs or 0)


async def run(users: int, home: Path) -> None:
    app = App(Settings(home=home))
    app.registry().add(TEAM, support_triage().dump_component(), example_manifest(TEAM), "bench", label="production")
    recalled, stated, sizes = 0, 0, []
    async with app.platform() as platform:
        for i in range(users):
            user, facts = f"user-{i}", {"ticket_id": f"{55100 + i}", "router_model": f"ZX-{80 + i}"}
            await _talk(platform, user, f"My router {facts['router_model']} drops every evening "
                                        f"(ticket {facts['ticket_id']}).")
            await _talk(platform, user, "The technician came and it still drops.")
            await platform.drain_memory()
            await _expire(platform, user)
            reply = await _talk(platform, user, "Do you still have my ticket and router?")
            found = dict(pair.split("=", 1) for pair in (_REMEMBERED.findall(reply) or [""])[0].split(", ") if "=" in pair)
            recalled += sum(found.get(name) == value for name, value in facts.items())
            stated += len(facts)
            await platform.drain_memory()
            sizes.append(await _user_bytes(platform, user))
        writer, own, runs = await _tokens(platform)
    budget = TRIAGE_MEMORY.summary_tokens
    print(f"returning users: {users}; facts declared: {', '.join(TRIAGE_MEMORY.facts)}; summary budget {budget} tokens")
    print(f"recall: {recalled / stated:.2f} ({recalled} of {stated} stated facts in the first model call after expiry)")
    print(f"memory bytes per user: median {statistics.median(sizes):.0f}, max {max(sizes)} "
          f"(the summary's budget is ~{budget * 4} characters)")
    print(f"memory writer: {writer / runs:.0f} tokens per run ({writer} over {runs} runs, a write after each); "
          f"the runs themselves {own / runs:.0f} tokens per run ({writer / max(own, 1):.0%} on top)")


def main() -> None:
    """Run the returning-user benchmark in a throwaway home."""
    with tempfile.TemporaryDirectory() as home:
        asyncio.run(run(int(os.environ.get("BENCH_MEMORY_USERS", "20")), Path(home)))
