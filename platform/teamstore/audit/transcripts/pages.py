"""Reading a session's transcripts a page at a time: the newest N runs, or one run, and how many in all.

    from teamstore.audit.transcripts.pages import newest_runs, one_run

    page = await newest_runs(store, RunKeys(subject_key, session_key), count=10)
    print(f"the newest {len(page.runs)} of {page.total} runs")
    page = await one_run(store, keys, "3f2a9c01b7e4")          # a run id or a unique prefix of it
    page = await newest_runs(store, keys, opener=opener)       # sealed objects: opener(key, body) -> plain body

A session may hold thousands of runs. The listing is read as it comes (:meth:`TranscriptStore.scan`)
and only the keys of the newest ``count`` are kept, so memory holds ``count`` runs whatever the session's
size. "Newest" is by when the transcript was written, which is when its run ended: a session's runs
are sequential, so that is their order too. Objects written in the same instant as the oldest one kept
(S3 lists times to the second) are told apart by their runs' start; a transcript delivered late from
the outbox counts from its delivery.
"""

from __future__ import annotations

import heapq
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from teamstore.audit.transcripts.base import TranscriptStore, run_id_of, run_key, session_prefix
from teamstore.audit.transcripts.record import RunKeys, decode
from teamstore.errors import AuditError, TranscriptNotFound
from teamstore.limits import DEFAULT_RUNS

Opener = Callable[[str, bytes], Awaitable[bytes]]
"""``opener(object_key, body)``: the plain body of a stored object (opened under its user's data key)."""


@dataclass(frozen=True)
class RunPage:
    """Some of a session's runs, oldest first, and how many runs the session has in all."""

    total: int
    runs: list[dict[str, Any]]
    """Each ``{"run": <run record>, "items": [<item records>]}``."""


def _no_transcript() -> TranscriptNotFound:
    return TranscriptNotFound("no transcript for that session", hint="check the session id (matched exactly)")


async def _as_stored(key: str, body: bytes) -> bytes:
    return body


async def _read(store: TranscriptStore, key: str, opener: Opener) -> dict[str, Any]:
    try:
        header, items = decode(await opener(key, await store.get(key)))
    except AuditError as exc:
        raise type(exc)(f"run {run_id_of(key)}: {exc.message}", hint=exc.hint) from exc
    return {"run": header, "items": items}


def _started(run: dict[str, Any]) -> str:
    return str(run["run"].get("started_at"))


async def _newest_keys(store: TranscriptStore, keys: RunKeys, count: int) -> tuple[int, list[tuple[datetime, str]]]:
    """How many runs the session has, and the keys (with write times) of the ``count`` newest, plus any
    written in the same instant as the oldest of those: which of them is newer only their runs say."""
    top: list[tuple[datetime, str]] = []  # a min-heap of the `count` newest seen so far
    tied: list[str] = []  # keys left out of `top` though written in the same instant as its oldest
    total = 0
    async for stored in store.scan(session_prefix(keys)):
        total += 1
        if len(top) < count:
            heapq.heappush(top, (stored.modified, stored.key))
        elif stored.modified == top[0][0]:
            tied.append(stored.key)
        elif stored.modified > top[0][0]:
            out = heapq.heapreplace(top, (stored.modified, stored.key))
            tied = [*tied, out[1]] if top[0][0] == out[0] else []
    return total, sorted(top) + [(top[0][0], key) for key in tied]


async def newest_runs(
    store: TranscriptStore, keys: RunKeys, count: int = DEFAULT_RUNS, *, opener: Opener = _as_stored
) -> RunPage:
    """The session's ``count`` newest runs, oldest first, holding at most ``count + 1`` in memory.

    ``opener`` turns each stored object into its plain body (by default objects are read as they are).

    Raises:
        TranscriptNotFound: The session has no transcript.
        AuditError: A run's object is not readable (the message names the run).
    """
    total, candidates = await _newest_keys(store, keys, count)
    if not total:
        raise _no_transcript()
    kept: list[tuple[datetime, str, int, dict[str, Any]]] = []  # a min-heap: the `count` newest read so far
    for n, (modified, key) in enumerate(candidates):
        run = await _read(store, key, opener)
        entry = (modified, _started(run), n, run)
        if len(kept) < count:
            heapq.heappush(kept, entry)
        else:
            heapq.heappushpop(kept, entry)
    return RunPage(total, sorted((entry[3] for entry in kept), key=_started))


async def one_run(store: TranscriptStore, keys: RunKeys, run: str, *, opener: Opener = _as_stored) -> RunPage:
    """One run of the session, by its exact id or else the one run whose id starts with ``run`` (as the
    demo prints ids, shortened), and how many runs the session has.

    Raises:
        TranscriptNotFound: The session has no transcript, no run matches, or a prefix names several.
        AuditError: The run's object is not readable.
    """
    exact, found, matches, total = run_key(keys, run), None, 0, 0
    async for stored in store.scan(session_prefix(keys)):
        total += 1
        if stored.key == exact:
            found, matches = exact, -1  # the exact id wins over every prefix match
        elif matches >= 0 and run_id_of(stored.key).startswith(run):
            found, matches = found or stored.key, matches + 1
    if not total:
        raise _no_transcript()
    # The run id given is not repeated: a user's id or words typed in the wrong place land in it.
    if matches > 1:
        raise TranscriptNotFound(f"{matches} runs of that session start with the run id given",
                                 hint="give more of the run id")
    if found is None:
        raise TranscriptNotFound(
            "no run of that session has the run id given (not repeated here: it may be a user's words)",
            hint="check the run id (run_id in `teamstore run --json`), or omit --run for the newest runs",
        )
    return RunPage(total, [await _read(store, found, opener)])
