"""Returning users, on SQLite and a real Postgres: N scripted conversations, each user's session expires, and
the first model call of their next session holds every fact the first one stated (recall 1.0)."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from config_registry import Registry
from tests.memory.conftest import make_platform
from tests.memory.team import CALLS, TEAM, helpdesk, helpdesk_manifest
from tests.memory.test_sessions import expire, talk

USERS = 5
DECLARED = {"ticket_id": "str", "router_model": "str"}


async def test_every_returning_user_is_given_every_fact_in_the_first_model_call_after_expiry(
    engine: AsyncEngine, registry_path: Path, channel: str, tmp_path: Path
) -> None:
    registry = Registry(registry_path, create=True)
    registry.add(TEAM, helpdesk(channel).dump_component(), helpdesk_manifest(facts=DECLARED), "v1", label="production")
    stated = {f"user-{i}": {"ticket_id": f"5510{i}", "router_model": f"ZX-8{i}"} for i in range(USERS)}
    recalled = 0
    async with make_platform(engine, registry, tmp_path) as platform:
        for user, facts in stated.items():
            await talk(platform, user, "s1", f"My router {facts['router_model']} drops; ticket {facts['ticket_id']}.")
            await talk(platform, user, "s1", "The technician came and it still drops.")
            await platform.drain_memory()
            await expire(engine, user, "s1")
            since = len(CALLS[channel])
            _, given, outcome = await talk(platform, user, "s1", "Do you still have my ticket and router?")
            assert outcome == "expired" and given is not None
            first_call = "\n".join(str(m.content) for m in CALLS[channel][since])
            recalled += sum(f"- {name}: {json.dumps(value)}" in first_call for name, value in facts.items())
    assert recalled / (USERS * len(DECLARED)) == 1.0
