"""The memory writer: the previous summary and facts plus what the new runs said, in; a new summary and facts, out.

    from teamstore.memory.writer import Said, write_memory

    opened = await store.clock("alice")         # as the session opens, before anything is said or read
    ...
    outcome = await write_memory(store, client, user_id="alice", team="support_triage", team_version=v,
                                 declaration=manifest.memory, run_id=run_id, retention_days=180, said_after=opened,
                                 messages=[Said("user", "My router ZX-81 drops (ticket 55102)"), ...])
    print(outcome.status, outcome.reason)      # "written" / "failed" / "fenced" / "forgotten"

It is incremental: the model is sent the stored summary and facts and the messages the session's runs
added since the last write (the newest :data:`MAX_INPUT_CHARS` of them), never a whole transcript. Its
request is one system message and one user message holding a JSON object::

    {"summary_budget_tokens": 150, "declared_facts": {"ticket_id": "str"}, "previous_summary": "...",
     "previous_facts": {"ticket_id": "55102"}, "new_messages": [{"source": "user", "content": "..."}]}

and it must answer with ``{"summary": "...", "facts": {"ticket_id": "55102"}}`` (facts the new messages
state or confirm). A reply that is not that, a fact that fails its type, a summary over its budget or a
failed call is refused: the stored memory stays as it was and the failure is recorded on it. A write that
finds another landed first reads the memory again and asks again, at most :data:`ATTEMPTS` times; one that finds
the user forgot what it read meanwhile writes nothing (its messages were said before the forget).

Nor does a writer whose messages were said before a forget it never saw, one that ran before the writer first
read the memory: a forget records when it ran, and the write checks it against ``said_after``, the earliest
time the messages can have been said. A session gives the database's clock as it opened (before any run of it;
an interrupted run it continues began in an earlier session, and gives the bound that one read, kept in its
checkpoint): the messages' own times and the runs' are this host's clock, which need not agree with the one the forget is dated by (the database server's). A forget
recorded by the time the writer would ask its model ends it there, with no call made
(:meth:`MemoryStore.forgotten_since`); the write checks again, for one made meanwhile.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from autogen_core.models import ChatCompletionClient, LLMMessage, SystemMessage, UserMessage

from config_registry.manifest import MemoryDeclaration
from teamstore.db.clock import now_utc
from teamstore.errors import ErasureInProgress, MemoryForgotten, MemoryWriteRefused, StaleMemory
from teamstore.keys.service import DataKey
from teamstore.memory.facts import CHARS_PER_TOKEN, MemoryUpdate, UserMemory, parse_update, shown
from teamstore.memory.statements import FORGETS_KEPT
from teamstore.memory.store import MemoryStore

MAX_INPUT_CHARS = 24_000
"""The most message text one write sends (the newest messages first): the writer's cost per run is bounded."""
MAX_MESSAGE_CHARS = 4_000
"""The most of one message a write sends."""
ATTEMPTS = 3
"""How many times a write reads, asks and writes before a run of conflicts is recorded as its failure."""


@dataclass(frozen=True)
class Said:
    """One message a run added: who said it and its text."""

    source: str
    content: str


FORGOTTEN = ("the memory this write read was forgotten (or went past its expiry) while the writer ran, or the user "
             "forgot it after the messages it was written from were said: nothing was written, as they were said "
             "before")
OUTLIVED = ("the session this write comes from opened longer ago than forgets are kept (30 days): a forget since "
            "then may no longer be known, so nothing was written")


@dataclass(frozen=True)
class WriteOutcome:
    """How a write ended: ``written`` (with the new version), ``failed`` (with the reason recorded), ``fenced``
    (an erasure holds the user, or erased them while the writer ran; nothing written) or ``forgotten`` (the user
    forgot what the writer read while it ran, or forgot memory of the scope after ``said_after``; nothing
    written, nothing recorded)."""

    status: Literal["written", "failed", "fenced", "forgotten"]
    version: int | None = None
    reason: str | None = None


def _system_prompt(declaration: MemoryDeclaration) -> str:
    listed = ", ".join(f"{name} ({kind})" for name, kind in declaration.facts.items()) or "none"
    budget = declaration.summary_tokens
    return (
        "You write the memory a team keeps about one user between sessions. Reply with one JSON object and "
        'nothing else: {"summary": "...", "facts": {...}}.\n'
        f"- summary: what a colleague taking over must know, rewritten from the previous summary and the new "
        f"messages; at most {budget} tokens (about {budget * CHARS_PER_TOKEN} characters).\n"
        f"- facts: only facts the new messages state or confirm, from this list, each a JSON value of its "
        f"type (date: YYYY-MM-DD): {listed}. Leave out a fact they do not state; use no other name."
    )


def _recent(messages: Sequence[Said]) -> list[dict[str, str]]:
    """The newest messages whose text fits in :data:`MAX_INPUT_CHARS`, oldest first."""
    kept: list[dict[str, str]] = []
    room = MAX_INPUT_CHARS
    for said in reversed(messages):
        text = said.content[:MAX_MESSAGE_CHARS]
        if len(text) > room:
            break
        room -= len(text)
        kept.append({"source": said.source, "content": text})
    return kept[::-1]


def writer_request(
    previous: UserMemory | None, messages: Sequence[Said], declaration: MemoryDeclaration
) -> list[LLMMessage]:
    """The writer's two messages: its instructions, and the JSON object of what it works from."""
    known = {} if previous is None else {
        name: shown(fact.value) for name, fact in previous.facts.items() if declaration.facts.get(name) == fact.type
    }
    request = {
        "summary_budget_tokens": declaration.summary_tokens,
        "declared_facts": dict(declaration.facts),
        "previous_summary": previous.summary if previous is not None else "",
        "previous_facts": known,
        "new_messages": _recent(messages),
    }
    return [SystemMessage(content=_system_prompt(declaration)),
            UserMessage(content=json.dumps(request, ensure_ascii=False), source="memory_writer")]


async def ask_writer(
    client: ChatCompletionClient, previous: UserMemory | None, messages: Sequence[Said],
    declaration: MemoryDeclaration, call_seconds: float,
) -> MemoryUpdate:
    """One model call, its reply checked.

    Raises:
        MemoryWriteRefused: The call failed or timed out, or its reply was refused (:func:`parse_update`).
    """
    json_mode = True if client.model_info.get("json_output") else None
    try:
        result = await asyncio.wait_for(
            client.create(writer_request(previous, messages, declaration), json_output=json_mode), call_seconds)
    except TimeoutError:
        raise _call_failed(f"did not answer within {call_seconds:g}s") from None
    except Exception as exc:  # any failure of the model client is the writer's failure, recorded as such
        # Only the type: a provider's error text may quote the request.
        raise _call_failed(f"failed ({type(exc).__name__})") from None
    return parse_update(result.content, declaration)


def _call_failed(why: str) -> MemoryWriteRefused:
    return MemoryWriteRefused(
        f"the memory writer's model call {why}; the user's previous memory is kept",
        hint="check the writer's model client (its endpoint, key and quota); the next session's write tries again",
    )


async def write_memory(
    store: MemoryStore, client: ChatCompletionClient, *, user_id: str, team: str, team_version: str,
    declaration: MemoryDeclaration, run_id: str, messages: Sequence[Said], retention_days: float,
    said_after: datetime, call_seconds: float = 60.0, key: DataKey | None = None, declared: Collection[str] | None = None,
) -> WriteOutcome:
    """Update the user's memory from ``messages``; a refusal is recorded on the memory, never raised.

    Args:
        store: The memory store.
        client: The writer's model client (metered by the caller).
        user_id: The user. team: The team writing. team_version: Its registry version.
        declaration: The team's memory declaration.
        run_id: The run the messages end with: the source of the values written.
        messages: What the runs added since the last write.
        retention_days: How long the memory lives after this write.
        said_after: The earliest time ``messages`` can have been said, on the database's clock
            (:meth:`MemoryStore.clock`, read as the session opened): a forget of the scope since refuses the
            write (``forgotten``), before the model is asked when it is recorded by then.
        call_seconds: The longest one model call may take.
        key: The data key to seal under, taken by the session that started the writer as it opened; none is
            made then, and nothing lands once it is gone. Without it, the user's key is taken now (made for a
            user with none).
        declared: The facts the teams sharing the scope declare (:meth:`config_registry.Registry.memory_facts`):
            a write deletes the user's facts of the scope that neither they nor ``declaration`` declare.
            ``None`` (the registry could not be read) deletes none.

    Raises:
        StoreUnavailable: The database failed (the failure could not be recorded either).
    """
    scope = declaration.scope_of(team)
    try:
        # Taken first: an erasure that runs whole while the model is asked destroys it, and nothing lands.
        key = key or await store.writer_key(user_id)
    except ErasureInProgress:
        return WriteOutcome("fenced")
    for _attempt in range(ATTEMPTS):
        previous = await store.load(user_id, scope)
        try:
            if previous is not None and previous.version < 0:
                raise MemoryWriteRefused("the stored memory row is damaged (its version is not a number)",
                                         hint="forget it: `teamstore memory forget --user ... --all`")
            if await store.forgotten_since(user_id, scope, said_after):  # the write would be refused: ask no model
                return _forgotten(said_after)
            update = await ask_writer(client, previous, messages, declaration, call_seconds)
            version = await store.write(
                user_id, scope, update, types=declaration.facts, expected_version=previous.version if previous else 0,
                run_id=run_id, team=team, team_version=team_version, retention_days=retention_days, key=key,
                declared=None if declared is None else {*declared, *declaration.facts},
                made_at=previous.created_at if previous else None, said_after=said_after)
        except StaleMemory:
            # Another session wrote first: write again from what it stored; unless the user forgot what this
            # write read meanwhile. Its messages were said before the forget: asked again, the model would
            # bring back what was forgotten.
            if _forgotten_since(previous, await store.load(user_id, scope), {*(declared or ()), *declaration.facts}):
                return WriteOutcome("forgotten", reason=FORGOTTEN)
            continue
        except MemoryForgotten:  # before or while it ran: its messages were said before the forget
            return _forgotten(said_after)
        except ErasureInProgress:
            return WriteOutcome("fenced")
        except MemoryWriteRefused as exc:
            return await _record(store, user_id, scope, exc.message, team, team_version, retention_days, key,
                                 said_after)
        return WriteOutcome("written", version=version)
    reason = f"{ATTEMPTS} other writes of this user's memory landed while this one was written"
    return await _record(store, user_id, scope, reason, team, team_version, retention_days, key, said_after)


def _forgotten(said_after: datetime) -> WriteOutcome:
    """The outcome of a write the user's forget refuses, saying when it is refused because its session is older
    than any forget still kept (:data:`~teamstore.memory.statements.FORGETS_KEPT`) rather than for a forget."""
    outlived = said_after < now_utc() - FORGETS_KEPT
    return WriteOutcome("forgotten", reason=OUTLIVED if outlived else FORGOTTEN)


def _forgotten_since(read: UserMemory | None, now: UserMemory | None, declared: Collection[str]) -> bool:
    """Whether the memory a write read (``read``) was forgotten, in full or a fact of it, by the time it is read
    again (``now``): it is gone, or it is another row, made since (forgotten in full, then written by another
    session), or a fact it held is gone that is still ``declared``, which no write deletes (a write deletes
    only the facts no team declares)."""
    if read is None:
        return False  # nothing was read, so nothing read was forgotten
    if now is None or now.created_at != read.created_at:
        return True
    held = set(now.facts) | {d.name for d in now.damaged}
    return any(name not in held and name in declared for name in read.facts)


async def _record(
    store: MemoryStore, user_id: str, scope: str, reason: str, team: str, team_version: str, retention_days: float,
    key: DataKey | None, said_after: datetime,
) -> WriteOutcome:
    """Record the writer's failure, unless the user forgot memory of the scope since ``said_after`` (a forget
    while the model was asked: outcome ``forgotten``, no row left) or an erasure fences or erased them."""
    if await store.record_failure(user_id, scope, reason, team=team, team_version=team_version,
                                  retention_days=retention_days, key=key, said_after=said_after):
        return WriteOutcome("failed", reason=reason)
    if await store.forgotten_since(user_id, scope, said_after):
        return _forgotten(said_after)
    return WriteOutcome("fenced")
