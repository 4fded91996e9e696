"""User memory: what a team keeps about a user between sessions, a bounded summary and typed facts.

    from teamstore.keys import KeyService
    from teamstore.memory import MemoryStore

    store = MemoryStore(engine, keys=KeyService.from_settings(engine, settings))   # memory is sealed per user
    for kept in await store.show("alice"):               # every scope the user has memory under
        print(kept.scope, kept.summary, {name: fact.value for name, fact in kept.facts.items()})
    await store.forget("alice", fact="ticket_id")        # or: await store.forget("alice") for everything

A service has these on its platform: ``platform.show_memory("alice")``, ``platform.forget_memory(...)``.

A team declares its memory in its manifest (``config_registry.manifest.MemoryDeclaration``); the runtime
gives it to the participants named there through :class:`teamstore.memory.component.TeamstoreMemory`,
and the memory writer (:mod:`teamstore.memory.writer`) updates it after a session's runs are saved. The
tables are :mod:`teamstore.memory.schema` (migrations 0013 and 0027), in the state database. Erasure, retention
(``teamstore retention sweep``) and ``teamstore memory show|forget`` reach it; see docs/memory.md.
"""

from __future__ import annotations

from teamstore.memory.component import TeamstoreMemory
from teamstore.memory.facts import DamagedFact, Fact, MemoryUpdate, UserMemory, WriterFailure
from teamstore.memory.store import Forgotten, MemoryStore
from teamstore.memory.writer import Said, WriteOutcome, write_memory

__all__ = [
    "DamagedFact",
    "Fact",
    "Forgotten",
    "MemoryStore",
    "MemoryUpdate",
    "Said",
    "TeamstoreMemory",
    "UserMemory",
    "WriteOutcome",
    "WriterFailure",
    "write_memory",
]
