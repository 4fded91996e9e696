"""A worker process for the checkpoint crash tests: ``python -m tests.runtime.crash_worker MODE USER CALLS [KILL]``.

Settings come from the environment (``TEAMSTORE_*``), as a service's do. Every model call the offline client
answers is appended to the file CALLS (one line each, written before the answer: a call is paid once it is
made). Modes:

* ``run``: run the team on the task; with KILL, the process SIGKILLs itself in the call that opens turn
  KILL + 1, so turn KILL is the last one completed (and, the test checks, durable);
* ``continue``: open the session, expect an interrupted run, continue it;
* ``blocked``: like ``run``, but the checkpoint write of turn KILL + 1 is sent only once the parent holds
  the row locked (CALLS.ready says the worker is there; CALLS.locked, that the lock is held), so the
  statement waits inside the database, where the parent kills the process.

It prints one JSON line: the resume outcome, the run id and what the run said.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from teamstore.app import App
from teamstore.offline import OfflineChatCompletionClient
from tests.runtime.checkpoint_teams import TEAM, said

TASK = "My line drops every evening since the storm."


def _count_calls(log: Path, kill_at: int | None) -> None:
    original = OfflineChatCompletionClient.create

    async def create(self: OfflineChatCompletionClient, messages: Any, **kwargs: Any) -> Any:
        with log.open("a") as out:
            out.write(f"{os.getpid()}\n")
        made = len(log.read_text().splitlines())
        if kill_at is not None and made == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup of any kind: a worker the node took away
        return await original(self, messages, **kwargs)

    OfflineChatCompletionClient.create = create  # type: ignore[method-assign]


def _write_into_a_held_lock(session: Any, turn: int, log: Path) -> None:
    """Send turn ``turn``'s checkpoint only once the parent holds the session's row locked."""
    store = session._deps.store
    real = store.checkpoint

    async def checkpoint(key: Any, **kwargs: Any) -> int:
        if f'"turn":{turn},' in (kwargs["record"].checkpoint or ""):
            log.with_suffix(".ready").write_text("about to write")
            while not log.with_suffix(".locked").exists():
                await asyncio.sleep(0.02)
        return int(await real(key, **kwargs))

    store.checkpoint = checkpoint


async def main(mode: str, user: str, log: Path, kill: int | None) -> dict[str, Any]:
    _count_calls(log, kill + 1 if kill is not None and mode == "run" else None)
    async with App().platform() as platform, platform.session(user, "s1", team=TEAM) as s:
        assert s.resume is not None
        resume = s.resume.as_dict()
        if mode == "blocked":
            assert kill is not None
            _write_into_a_held_lock(s, kill + 1, log)
        result = await (s.continue_run() if mode == "continue" else s.run(TASK))
        return {"resume": resume, "run_id": s.last_run_id, "said": said(result.messages)}


if __name__ == "__main__":
    mode, user, calls = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    kill_after = int(sys.argv[4]) if len(sys.argv) > 4 else None
    print(json.dumps(asyncio.run(main(mode, user, calls, kill_after))))
