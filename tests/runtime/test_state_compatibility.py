"""Sessions stored by earlier releases resume: the state a bounded context saves keeps its format."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import update

from teamstore.runtime.platform import Platform
from teamstore.state.base import SessionKey
from teamstore.state.envelope import decode
from teamstore.state.schema import sessions

DATA = Path(__file__).parent / "data"


async def _run(platform: Platform, text: str) -> str:
    async with platform.session("alice", "s1", team="support_triage") as s:
        await s.run(text)
        return s.resume.outcome


async def test_a_session_saved_before_contexts_kept_whole_exchanges_resumes(platform: Platform) -> None:
    # Written by the support team's researcher (max_messages=20, keep_first=1) over 12 runs, on the code
    # before the context kept whole exchanges and refused sizes too small for one.
    blob = (DATA / "support_triage_state_saved_before_whole_exchanges.json").read_text().strip()
    before = json.loads(blob)["data"]["participants"]["researcher"]["agent_state"]["llm_context"]["messages"]
    assert await _run(platform, "hello") == "new"
    async with platform.engine.begin() as conn:
        stored = update(sessions).where(sessions.c.user_id == "alice")
        await conn.execute(stored.values(state=blob, state_bytes=len(blob.encode())))
    assert await _run(platform, "still broken") == "resumed"
    row = await platform.store.get(SessionKey("alice", "s1"))
    assert row is not None and row.state is not None
    after = decode(row.state)["participants"]["researcher"]["agent_state"]["llm_context"]["messages"]
    assert after[0] == before[0] and after[0]["content"] == "message number 000"  # still pinned
    kept = after.index(before[-1])  # the newest stored message, then this run's
    assert len(after) == 20 and after[1 : kept + 1] == before[len(before) - kept :]
    assert any("still broken" in str(m["content"]) for m in after[kept + 1 :])
