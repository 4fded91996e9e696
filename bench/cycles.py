"""teamstore's resume+save cycle and the floors it is measured against, on one Postgres database.

    cycles = Cycles(url, state)
    await cycles.setup(workers=16)
    done = await cycles.ours(worker=0, n=20)   # 20 cycles of user-0's session
    await cycles.close()

The floor is a bare psycopg SELECT + versioned UPSERT of the same bytes in autocommit; its variants add
the decode and encode any resume needs (``codec``), the validation teamstore's load must do too
(``ceiling``: a store with no overhead of its own), a transaction around the two statements
(``floor_tx``), or an lz4 column as teamstore stores states (``floor_lz4``, migration 0006).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core.model_context import BufferedChatCompletionContext, ChatCompletionContext

from teamstore.context import BoundedChatCompletionContext
from teamstore.db.engine import create_engine
from teamstore.db.migrate import upgrade
from teamstore.offline import OfflineChatCompletionClient
from teamstore.runtime.resume import SCHEMA_VERSION, capture_states
from teamstore.runtime.session import EXPIRY_SLACK
from teamstore.settings import Settings
from teamstore.state.base import Claim, SaveRecord, SessionKey
from teamstore.state.envelope import decode, encode
from teamstore.state.factory import store_for
from teamstore.state.lease_mode import lease_mode, set_lease_mode
from teamstore.state.validate import validate_participant

BOUND = Settings().max_sessions_per_user  # every load is under the per-user session bound, as the runtime's
AGENT = "autogen_agentchat.agents.AssistantAgent"
_WORDS = ("router", "drops", "again", "after", "the", "firmware", "update", "line", "light", "blinks", "orange",
          "technician", "came", "cable", "replaced", "modem", "still", "slow", "evening", "wifi", "speed", "test")


def make_team(context: type[ChatCompletionContext]) -> RoundRobinGroupChat:
    """A 3-agent RoundRobin team on the offline client, with AutoGen's buffered context or teamstore's bound."""
    client = OfflineChatCompletionClient()

    def ctx() -> ChatCompletionContext:
        if context is BufferedChatCompletionContext:
            return BufferedChatCompletionContext(buffer_size=20)
        return BoundedChatCompletionContext(max_messages=20, keep_first=1)

    agents = [AssistantAgent(n, model_client=client, model_context=ctx()) for n in ("triage", "researcher", "critic")]
    return RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(4))


class Built:
    """Enough of a BuiltTeam for capture_states."""

    def __init__(self, team: Any, persisted: tuple[str, ...]) -> None:
        self.team, self.kind, self.persisted = team, "team", persisted


def record(state: str) -> SaveRecord:
    """What the runtime saves, holding ``state``."""
    ttl = timedelta(days=7)
    return SaveRecord("bench", "v1", SCHEMA_VERSION, "0.7.5", {"researcher": "fp"}, state,
                      datetime.now(UTC) + ttl, ttl * EXPIRY_SLACK)


SMALL, LARGE = 45, 7_400
"""Words added to each task: the researcher's state is then ~5.5 KB and ~50 KB."""


async def sample_state(task_chars: int = SMALL) -> str:
    """The researcher's envelope after 10 runs, each task padded with ``task_chars`` of words.

    The padding is words drawn at random, so it compresses about as well as text, not as a repeated string.
    """
    team, rng = make_team(BoundedChatCompletionContext), random.Random(17)
    for i in range(10):
        padding = " ".join(rng.choice(_WORDS) for _ in range(task_chars // 6))[:task_chars]
        await team.run(task=f"customer message {i} {padding}".strip())
    return encode({"kind": "team", "participants": await capture_states(Built(team, ("researcher",)), 20)})


class Cycles:
    """teamstore's cycle and the floor's, on one database."""

    def __init__(self, url: str, state: str, lease: str = "lock") -> None:
        self.url, self.state, self.lease = url, state, lease
        self.store = store_for(create_engine(url, pool_size=20, max_overflow=0), lease=lease)
        self.claim = Claim("bench", "v1", SCHEMA_VERSION, "0.7.5", {"researcher": "fp"})
        self.conns: list[Any] = []
        self.tx_conns: list[Any] = []

    async def setup(self, workers: int) -> None:
        """Migrate, set the lease mode, open the floor's connections and make its tables."""
        import psycopg

        await upgrade(self.store.engine)
        if await lease_mode(self.store.engine) != self.lease:
            await set_lease_mode(self.store.engine, self.lease)
        self.conns = [await psycopg.AsyncConnection.connect(self.url, autocommit=True) for _ in range(workers)]
        self.tx_conns = [await psycopg.AsyncConnection.connect(self.url) for _ in range(workers)]
        for table, compression in (("floor", ""), ("floor_lz4", " COMPRESSION lz4")):  # the second: as teamstore's
            await self.conns[0].execute(
                f"CREATE TABLE IF NOT EXISTS {table} (user_id text, session_id text, state text{compression},"
                " version bigint, PRIMARY KEY (user_id, session_id))"
            )

    async def ours(self, worker: int, n: int) -> int:
        """teamstore's cycle: lease+load, decode, validate, encode, save+release."""
        key = SessionKey(f"user-{worker}", "s")
        for _ in range(n):
            row = await self._acquire(key, worker)
            text = self.state
            if row.state is not None:
                participants = decode(row.state)["participants"]
                for name, st in participants.items():
                    validate_participant(name, AGENT, "team", st)
                text = encode({"kind": "team", "participants": participants})
            await self.store.save(key, owner=f"w{worker}", expected_version=row.row_version,
                                  record=record(text), release=True)
        return n

    async def store_only(self, worker: int, n: int) -> int:
        """The store's two statements alone, saving the same bytes: no decode, validation or encode."""
        key = SessionKey(f"user-{worker}", "s")
        for _ in range(n):
            row = await self._acquire(key, worker)
            await self.store.save(key, owner=f"w{worker}", expected_version=row.row_version,
                                  record=record(self.state), release=True)
        return n

    async def _acquire(self, key: SessionKey, worker: int) -> Any:
        return await self.store.acquire(key, self.claim, owner=f"w{worker}", lease_ttl=60, wait_seconds=5,
                                        max_sessions=BOUND)

    async def floor(self, worker: int, n: int, codec: bool = False, validate: bool = False, table: str = "floor",
                    transaction: bool = False) -> int:
        """The floor, two statements in autocommit; with ``transaction``, in psycopg's default mode instead
        (the SELECT opens a transaction, a COMMIT ends it: four round trips); with ``codec``, plus the
        decode and encode any resume needs (AutoGen's ``load_state`` takes dicts and ``save_state`` returns
        them); with ``validate`` too, plus the validation teamstore's load must do."""
        conn = (self.tx_conns if transaction else self.conns)[worker]
        for _ in range(n):
            cur = await conn.execute(
                f"SELECT state, version FROM {table} WHERE user_id = %s AND session_id = %s", (f"user-{worker}", "s"))
            row = await cur.fetchone()
            text = self._recode(row[0], validate) if (codec or validate) and row is not None else self.state
            await conn.execute(
                f"INSERT INTO {table} VALUES (%s, %s, %s, 1) ON CONFLICT (user_id, session_id) DO UPDATE"
                f" SET state = excluded.state, version = {table}.version + 1 WHERE {table}.version = %s",
                (f"user-{worker}", "s", text, row[1] if row else 0))
            if transaction:
                await conn.commit()
        return n

    @staticmethod
    def _recode(stored: str, validate: bool) -> str:
        participants = decode(stored)["participants"]
        if validate:
            for name, st in participants.items():
                validate_participant(name, AGENT, "team", st)
        return encode({"kind": "team", "participants": participants})

    async def close(self) -> None:
        """Close the floor's connections and the store."""
        for conn in self.conns + self.tx_conns:
            await conn.close()
        await self.store.aclose()
        await self.store.engine.dispose()
