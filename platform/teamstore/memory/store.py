"""The user-memory store: one SQL module for SQLite and Postgres, in the state database.

    from teamstore.memory.store import MemoryStore

    store = MemoryStore(engine, keys=KeyService.from_settings(engine, settings))
    memory = await store.load("alice", "support_triage")            # None: nothing kept
    update = MemoryUpdate("line fault, ticket 55102", {"ticket_id": "55102"})
    version = await store.write("alice", "support_triage", update, types={"ticket_id": "str"},
                                expected_version=memory.version if memory else 0, run_id=run_id,
                                team="support_triage", team_version=v, retention_days=180)
    for kept in await store.show("alice"):
        print(kept.scope, kept.summary, {f.name: f.value for f in kept.facts.values()})
    await store.forget("alice", fact="ticket_id")                   # or fact=None: everything

A write is one transaction whose first statement writes the memory row only if its version is still
the one the writer read and no erasure fences the user (:func:`teamstore.db.fence.held`, in the same
statement, as every writer does): two writers of one user never lose each other's update (the second
is told :class:`StaleMemory` and writes again from what the first stored), and nothing is written for a
user being erased. Before it, on Postgres, the transaction takes the user's memory writes lock shared
(:func:`teamstore.memory.statements.writes_lock`), which an erasure's first step takes alone: an erasure that
fenced the user after the write's check waits for it to commit, and then deletes what it wrote. Facts a write does not name stay as they are; a fact written with the value it had is confirmed
(its time moves, its source run stays).

With ``keys`` (as the composition root builds it), the summary and each fact's value are sealed under the
user's data key (:mod:`teamstore.memory.sealing`) and opened when read: what the tables hold is ciphertext
beside the ids, scopes, fact names and types. Rows written before sealing read as they are and are
sealed by their next write (or ``teamstore keys migrate``). A value that does not open (sealed under a key an
erasure destroyed, as in a restored backup) is listed as damaged, never given to a model.

A forget records when it ran (per scope, or all; not while an erasure holds the user, nor once it erased them or
the retention sweep destroyed their data key): a
write given ``said_after``, the earliest time its messages can have been said (:meth:`MemoryStore.clock`), is
refused while a forget of its scope is recorded at or after it (:class:`MemoryForgotten`), whatever it read. The
records are dropped after :data:`~teamstore.memory.statements.FORGETS_KEPT`.

Facts belong to a written memory: those kept with none (no row, or one holding only a failure) are **left
over** from a memory that no longer exists (its row deleted by hand, or by an older release's forget or erasure
that raced a write). No session or writer is given them, ``show`` lists them only for an export, the next write
of the scope starts without them, and the retention sweep deletes them.

The statements are :mod:`teamstore.memory.statements`; rows are read into memories by :mod:`teamstore.memory.rows`;
what a write keeps and a forget names is read by :mod:`teamstore.memory.kept`; what the calls return and raise is
:mod:`teamstore.memory.results`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from teamstore.db.clock import committed_now, shared_now, utc
from teamstore.db.fence import held
from teamstore.errors import ErasureInProgress, MemoryNotFound, StaleMemory
from teamstore.ids import check_erasable_id, check_id
from teamstore.keys.service import DataKey, KeyService
from teamstore.memory.facts import MemoryUpdate, UserMemory, check_names, encode_value
from teamstore.memory.kept import delete_facts_of, facts_before, record_forget, what_is_kept
from teamstore.memory.results import ForgetRecord as ForgetRecord  # re-exported: the store's public results
from teamstore.memory.results import Forgotten as Forgotten
from teamstore.memory.results import Swept as Swept
from teamstore.memory.results import (
    changing,
    erased_error,
    fenced_error,
    forgotten_error,
    unavailable,
)
from teamstore.memory.rows import leftovers_of, memory_of, past_expiry
from teamstore.memory.schema import facts, forgets, memories
from teamstore.memory.sealing import fact_context, opened, sealed, summary_context
from teamstore.memory.statements import (
    delete_expired,
    delete_leftovers,
    delete_old_forgets,
    fact_upsert,
    failure_upsert,
    forgotten_after,
    key_alive,
    leftover_window,
    of_user,
    read_at,
    row_write,
    write_times,
    writes_lock,
)

FAILURE_CHARS = 512


class MemoryStore:
    """Users' memory (summary and facts per user and scope) in the state database.

    Args:
        engine: The state database; the caller owns it.
        keys: Users' data keys, which the summary and each fact's value are sealed under; without, they are
            stored as plain text (and sealed values read as damaged).
    """

    def __init__(self, engine: AsyncEngine, keys: KeyService | None = None) -> None:
        self.engine, self.keys = engine, keys
        self._dialect = engine.dialect.name

    # --- reading ---------------------------------------------------------------------------------------
    async def load(self, user_id: str, scope: str) -> UserMemory | None:
        """The user's memory under ``scope``, or ``None`` when nothing is kept.

        Raises:
            InvalidIdentifier: ``user_id`` is not a usable id. StoreUnavailable: the database failed.
        """
        kept, at = await self._read(check_id("user_id", user_id), scope)
        found = [memory for memory in kept if not memory.leftover]
        if found and past_expiry(found[0], at):  # read as gone, and gone: a write must not renew it
            await self._sweep(at, 1, of_user(memories, user_id, scope))
            return None
        return found[0] if found else None

    async def show(self, user_id: str, scope: str | None = None, *, held: bool = False) -> list[UserMemory]:
        """The memory kept about ``user_id`` (under one scope, or all), by scope. Damaged facts and fields
        are listed in each memory's ``damaged``, never raised. With ``held`` (an export's), everything the
        tables hold about the user: memory past its expiry too (until the sweep or the scope's next read deletes
        it), leftover facts (``leftover``, after the scope's memory row if it has one; until the sweep or
        the scope's next write deletes them), and memory an earlier release kept under an id no session can
        have now (:func:`teamstore.ids.check_erasable_id`: blank, spaces around it).

        Raises:
            InvalidIdentifier: ``user_id`` is not a usable id, or ``scope`` no scope a team can declare.
            StoreUnavailable: the database failed.
        """
        check_names(scope)
        if held:
            check_erasable_id(user_id)
        else:
            check_id("user_id", user_id)
        kept, at = await self._read(user_id, scope)
        return [memory for memory in kept if held or not (memory.leftover or past_expiry(memory, at))]

    async def _read(self, user_id: str, scope: str | None) -> tuple[list[UserMemory], datetime | None]:
        """The user's memories (under ``scope``, or all), opened, and the database's clock as their rows were read
        (``None``: no row was): their expiry is judged against it, not this host's clock, and without a round
        trip of its own. The caller has checked ``user_id``."""
        try:
            async with self.engine.connect() as conn:
                found_rows = (await conn.execute(select(memories, read_at(self._dialect))
                                                 .where(*of_user(memories, user_id, scope))
                                                 .order_by(memories.c.scope))).mappings().all()
                found_facts = (await conn.execute(select(facts).where(*of_user(facts, user_id, scope))
                                                  .order_by(facts.c.scope, facts.c.name))).mappings().all()
        except SQLAlchemyError as exc:
            raise unavailable(exc, "read the user's memory") from exc
        rows = [{**row, "summary": await opened(self.keys, user_id, row["summary"], summary_context(str(row["scope"])))}
                for row in found_rows]
        kept = [{**row, "value": await opened(self.keys, user_id, row["value"],
                                              fact_context(str(row["scope"]), str(row["name"])))}
                for row in found_facts]
        by_scope: dict[str, list[Mapping[str, Any]]] = {}
        for row in kept:
            by_scope.setdefault(str(row["scope"]), []).append(row)
        # Beside a row holding only a failure, facts are left over too: the writer of an older release refused
        # facts with no row, and recording its failure made one.
        found = [memory_of(row, by_scope.pop(str(row["scope"]), []) if row["version"] != 0 else []) for row in rows]
        found += [leftovers_of(user_id, scope, rows) for scope, rows in by_scope.items()]
        at = utc(found_rows[0]["read_at"]) if found_rows else None
        return sorted(found, key=lambda m: (m.scope, m.leftover)), at

    # --- writing ---------------------------------------------------------------------------------------
    async def writer_key(self, user_id: str, *, create: bool = True) -> DataKey | None:
        """The data key a writer seals under, taken before it reads the memory and asks its model: its write
        and its failure land only while that key exists (``None`` when memory is stored unsealed).

        Args:
            user_id: The user.
            create: Make the key for a user who has none. Off for a session's writer: its session made the
                key as it opened, before its lease, and one missing once the lease is held was destroyed since.

        Raises:
            ErasureInProgress: An erasure fences the user (and no key of theirs is held), or (``create`` off)
                the user has no key: erased since their session opened. Nothing is made.
            KeyUnavailable, DataKeyDamaged: The key cannot be had.
        """
        if self.keys is None:
            return None
        key = await self.keys.data_key(user_id, create=create)
        if key is None:
            raise ErasureInProgress(
                "the user was erased while this session was open (their data key no longer exists): their memory "
                "is neither read further nor written",
                hint="nothing to fix: the erasure removed the session with the rest of the user's data",
            )
        return key

    async def write(
        self, user_id: str, scope: str, update: MemoryUpdate, *, types: Mapping[str, str], expected_version: int,
        run_id: str, team: str, team_version: str, retention_days: float, now: datetime | None = None,
        key: DataKey | None = None, declared: Collection[str] | None = None, made_at: datetime | None = None,
        said_after: datetime | None = None,
    ) -> int:
        """Store ``update`` if the memory is still at ``expected_version``; returns the new version.

        Args:
            user_id: The user. scope: The memory's scope.
            update: The new summary and the facts to set (checked values).
            types: Each fact's declared type, stored with it.
            expected_version: The version the writer read (0: none written yet, and the write starts without
                any leftover facts of the scope).
            run_id: The run the new values came from.
            team: The team writing. team_version: Its registry version.
            retention_days: The memory expires this long after this write.
            now: The write's time (tests); by default the database's (on Postgres the server's ``now()``).
            key: The data key to seal under (:meth:`writer_key`, taken when the writer started); the user's
                current one if not given.
            declared: The facts some team still declares under ``scope``; this write deletes the user's others
                of the scope (``None``: it deletes none).
            made_at: When the row read was made (:attr:`UserMemory.created_at`): a memory forgotten in full and
                written again since is another row, which this write is refused on whatever its version.
            said_after: The earliest time the messages the update comes from can have been said, on the
                database's clock (:meth:`clock`): a forget of the scope (or of every scope) at or after it refuses
                the write, as does a time older than forgets are kept. ``None``: no forget is checked (an update
                from no one's messages).

        Raises:
            StaleMemory: Another write landed since ``expected_version`` was read, or the row read is gone;
                nothing was written.
            ErasureInProgress: An erasure fences the user, or erased them since ``key`` was taken; nothing was
                written.
            MemoryForgotten: The user forgot memory of the scope since ``said_after``; nothing was written.
            KeyUnavailable, DataKeyDamaged: The user's data key cannot be had; nothing was written.
            StoreUnavailable: The database failed: nothing was written, unless the error says whether the write
                landed is not known (it failed as it committed, or the connection was lost during it).
        """
        at, expires = write_times(self._dialect, now, timedelta(days=retention_days))
        data_key = key or await self.writer_key(user_id)
        alive = key_alive(user_id, data_key)
        summary = sealed(data_key, update.summary, summary_context(scope))
        row = {"summary": summary, "team": team, "team_version": team_version, "source_run_id": run_id,
               "updated_at": at, "expires_at": expires}
        async with changing(self.engine, "write the user's memory") as conn:
            await self._hold_writes(conn, user_id)
            forgot = None if said_after is None else forgotten_after(self._dialect, user_id, scope, said_after)
            stmt = row_write(self._dialect, user_id, scope, row, expected_version, at, alive, made_at, forgot)
            if (await conn.execute(stmt)).scalar() is None:
                if await conn.scalar(select(held(user_id))):
                    raise fenced_error()
                if not await conn.scalar(select(alive)):
                    raise erased_error()
                if forgot is not None and await conn.scalar(select(forgot)):
                    raise forgotten_error()
                raise StaleMemory("another write of this user's memory landed first",
                                  hint="read the memory again and write from what it holds now")
            kept = await facts_before(conn, user_id, scope, data_key, first=expected_version == 0)
            for name, value in update.facts.items():
                text = encode_value(value)
                same = kept.get(name) == (types[name], text)  # compared opened: each seal is different bytes
                stored = sealed(data_key, text, fact_context(scope, name))
                await conn.execute(fact_upsert(self._dialect, user_id, scope, name, types[name], stored, same,
                                               run_id, at))
            if declared is not None:
                await conn.execute(delete(facts).where(*of_user(facts, user_id, scope),
                                                       facts.c.name.not_in(sorted({*declared, *update.facts}))))
        return expected_version + 1

    async def _hold_writes(self, conn: AsyncConnection, user_id: str, *, alone: bool = False) -> None:
        """Take the user's memory writes lock for ``conn``'s transaction (Postgres; SQLite runs one writer at a
        time): shared for a write, which an erasure's key step waits for; ``alone`` for a forget, which waits for
        the writes under way (a first write's new row too, which its delete would neither see nor wait for), and
        which a write that starts meanwhile waits for, then finds the forget recorded."""
        if self._dialect == "postgresql":
            await conn.execute(writes_lock(user_id, shared=not alone))

    async def clock(self, user_id: str) -> datetime:
        """The database's clock now, once no forget of ``user_id``'s memory is under way: a writer's bound
        (``said_after``), read as a session opens, once it has the user's data key (:meth:`writer_key`), before any
        of its messages is said or its memory read. A forget takes its time before it commits: read meanwhile, the
        time would be after it, and the memory read next the one being forgotten. So it waits for the user's
        writes lock shared (Postgres; a forget holds it alone), or the file's write lock (SQLite).

        Raises:
            StoreUnavailable: The database could not be reached.
        """
        return await committed_now(self.engine, writes_lock(user_id, shared=True))

    async def forgotten_since(self, user_id: str, scope: str, said_after: datetime) -> bool:
        """Whether the user forgot memory under ``scope`` (or every scope) at or after ``said_after``, or a forget
        after it may no longer be kept: what :meth:`write` refuses a write for, read before a writer asks its model,
        so that it pays no call for a write that would be refused. Only a forget committed by now is seen: the
        write checks again as it lands.

        Raises:
            StoreUnavailable: The database failed.
        """
        try:
            async with self.engine.connect() as conn:
                return bool(await conn.scalar(select(forgotten_after(self._dialect, user_id, scope, said_after))))
        except SQLAlchemyError as exc:
            raise unavailable(exc, "read when the user last forgot their memory") from exc

    async def record_failure(
        self, user_id: str, scope: str, reason: str, *, team: str, team_version: str, retention_days: float,
        now: datetime | None = None, key: DataKey | None = None, said_after: datetime | None = None,
    ) -> bool:
        """Record the writer's failure on the user's memory, its summary and facts untouched; ``False`` when
        an erasure fences the user, or erased them since ``key`` (:meth:`writer_key`) was taken, or the user
        forgot memory of the scope since ``said_after`` (as :meth:`write` checks it): nothing recorded, so a
        forget leaves no row behind a writer that ran through it.

        Raises:
            StoreUnavailable: The database failed.
        """
        at, expires = write_times(self._dialect, now, timedelta(days=retention_days))
        values = {"user_id": user_id, "scope": scope, "summary": "", "version": 0, "team": team,
                  "team_version": team_version, "created_at": at, "updated_at": at, "expires_at": expires,
                  "failure": reason[:FAILURE_CHARS], "failed_at": at, "failures": 1}
        alive = key_alive(user_id, key)
        if said_after is not None:
            alive = and_(alive, ~forgotten_after(self._dialect, user_id, scope, said_after))
        stmt = failure_upsert(self._dialect, user_id, values, alive, at)
        async with changing(self.engine, "record the memory writer's failure") as conn:
            await self._hold_writes(conn, user_id)  # a new row, like a first write's: erasure waits for it
            return (await conn.execute(stmt)).first() is not None

    # --- forgetting --------------------------------------------------------------------------------------
    async def forget(self, user_id: str, *, scope: str | None = None, fact: str | None = None) -> Forgotten:
        """Forget one fact (``fact``) or everything (``fact=None``) kept about ``user_id``, under one scope or all.

        Forgetting a fact moves the memory's version on, so a writer that read it before cannot write it back
        from what it read. The summary is kept: it may still mention the fact (forget everything to drop it).
        Either records when (``ts_user_memory_forgets``, per scope, or for every scope): a writer whose session
        opened before then writes nothing, whenever it first reads the memory. Not while an erasure fences the user,
        nor once it erased them, nor once the retention sweep forgetting them destroyed their data key
        (:func:`~teamstore.memory.kept.record_forget`): what it names is deleted all the same,
        and ``unrecorded`` says why nothing was recorded.

        Raises:
            InvalidIdentifier: ``user_id`` is not a usable id, ``scope`` no scope or ``fact`` no fact name a team
                can declare.
            MemoryNotFound: ``fact`` is named and no such fact is kept (the hint lists those :meth:`show`
                lists or, with none, says whether a summary or only the writer's last failure is kept). The
                forget is recorded all the same, so a writer under way does not write the fact after it (unless
                the user is fenced or erased: the hint then says nothing was recorded).
            StoreUnavailable: The database failed: nothing was forgotten, unless the error says whether the
                forget landed is not known (it failed as it committed, or the connection was lost during it).
        """
        check_id("user_id", user_id)
        check_names(scope, fact)
        async with changing(self.engine, "forget the user's memory") as conn:
            # The writes under way first (their lock, then the memory rows, as a write takes them): each finishes
            # before the forget goes on, and what it wrote is forgotten too (taken the other way round, the facts
            # it added stayed without their row, or the two waited for each other until the database gave up).
            await self._hold_writes(conn, user_id, alone=True)
            missing: str | None = None  # what is kept, when the fact named is not
            if fact is not None:
                await conn.execute(select(memories.c.scope).where(*of_user(memories, user_id, scope))
                                   .with_for_update())
                forgotten = await self._forget_fact(conn, user_id, scope, fact)
                if not forgotten.facts:  # recorded all the same: a writer under way may be about to write it
                    missing = await what_is_kept(conn, user_id, scope)
            else:
                gone = (await conn.execute(delete(memories).where(*of_user(memories, user_id, scope)))).rowcount
                dropped = (await conn.execute(delete(facts).where(*of_user(facts, user_id, scope)))).rowcount
                forgotten = Forgotten(memories=int(gone or 0), facts=int(dropped or 0))
            # Last, so its time is as late as the forget can say (statements.forget_time).
            unrecorded = await record_forget(conn, user_id, scope, sealed=self.keys is not None,
                                             removed=bool(forgotten.memories or forgotten.facts))
        if missing is not None:
            # The names given are not repeated (a user's words typed in the wrong place land in them); the hint
            # names the facts kept, the team's own names.
            raise MemoryNotFound("no fact of the name given is kept about this user"
                                 + (" under the scope given" if scope else "")
                                 + " (not repeated here: it may be a user's words)",
                                 hint=f"{missing}; {unrecorded or _missing_recorded(scope)}")
        return replace(forgotten, unrecorded=unrecorded)

    async def forgets(self, user_id: str) -> list[ForgetRecord]:
        """When ``user_id`` last forgot memory, per scope (``None``: every scope), while it is kept: what an export
        lists. The caller checks ``user_id`` (an export's may be one no session can have now).

        Raises:
            StoreUnavailable: The database failed.
        """
        query = select(forgets.c.scope, forgets.c.forgotten_at).where(forgets.c.user_id == user_id)
        try:
            async with self.engine.connect() as conn:
                rows = (await conn.execute(query.order_by(forgets.c.scope))).all()
        except SQLAlchemyError as exc:
            raise unavailable(exc, "read when the user forgot their memory") from exc
        return [ForgetRecord(user_id, str(scope) or None, utc(at) if isinstance(at, datetime) else None)
                for scope, at in rows]

    async def _forget_fact(self, conn: AsyncConnection, user_id: str, scope: str | None, fact: str) -> Forgotten:
        where = [*of_user(facts, user_id, scope), facts.c.name == fact]
        scopes = (await conn.execute(select(facts.c.scope).where(*where))).scalars().all()
        if not scopes:
            return Forgotten(memories=0, facts=0)
        await conn.execute(delete(facts).where(*where))
        await conn.execute(update(memories).where(memories.c.user_id == user_id, memories.c.scope.in_(scopes),
                                                  memories.c.version > 0)
                           .values(version=memories.c.version + 1))
        return Forgotten(memories=0, facts=len(scopes))

    # --- retention -----------------------------------------------------------------------------------------
    async def sweep(self, now: datetime | None = None, batch_size: int = 500) -> Swept:
        """Delete memories past their expiry (their retention after the last update), with their facts, then
        the leftover facts: those kept with no memory written; then the records of forgets older than
        :data:`~teamstore.memory.statements.FORGETS_KEPT`.

        Args:
            now: The time to judge expiry at; by default the database's (on Postgres the server's ``now()``,
                in each batch's statement).
            batch_size: How many memories each transaction deletes, and how many facts each looks at for
                leftovers.

        Raises:
            StoreUnavailable: The database failed; the batches deleted before it stay deleted (and the one it
                failed in too, when it failed as that batch committed: the error then says it is not known).
        """
        expired = await self._sweep(now if now is not None else shared_now(self._dialect), batch_size, [])
        leftovers = await self._sweep_leftovers(batch_size)
        async with changing(self.engine, "sweep old records of forgotten memory") as conn:
            dropped = (await conn.execute(delete_old_forgets(self._dialect, now))).rowcount
        return Swept(expired.memories, expired.facts, leftovers, int(dropped or 0))

    async def _sweep_leftovers(self, batch_size: int) -> int:
        """Delete the facts kept with no memory written, in batches; how many.

        One pass over the facts, in their key's order: each batch looks at the next ``batch_size`` facts after
        the last one the batch before it looked at, whether it deleted any or not. A fact not left over is looked
        at once per sweep, not again by every batch; a table with none left over costs the same one pass.

        It takes only facts no other transaction holds, and never waits for one: a first write (or a forget, or
        an erasure) deletes the facts it holds itself, in its own order. Had the sweep waited, each could hold a
        fact the other wanted next, and Postgres would abort one of them (a write so aborted is lost).
        """
        total, after = 0, None
        while True:
            async with changing(self.engine, "sweep leftover memory facts") as conn:
                window = [tuple(key) for key in (await conn.execute(leftover_window(after, batch_size))).all()]
                upto = window[0] if len(window) > 1 else None  # none past it: this batch runs to the end
                result = await conn.execute(delete_leftovers(after, upto, batch_size))
            total += int(result.rowcount or 0)
            if upto is None:
                return total
            after = upto

    async def _sweep(self, now: Any, batch_size: int, where: list[Any]) -> Forgotten:
        """Delete memories past their expiry at ``now`` (a time, or the database's clock) that ``where`` also
        holds, with their facts."""
        total = Forgotten(0, 0)
        while True:
            async with changing(self.engine, "sweep expired memory") as conn:
                keys = (await conn.execute(delete_expired(now, batch_size, where))).all()
                dropped = await delete_facts_of(conn, [(str(u), str(s)) for u, s in keys])
            total = Forgotten(total.memories + len(keys), total.facts + dropped)
            if len(keys) < batch_size:
                return total


def _missing_recorded(scope: str | None) -> str:
    """What a forget of a fact not kept did all the same, said with its refusal: a mistyped name stops the
    user's open sessions from writing memory too, which nobody should learn from their logs alone."""
    where = "in the scope given" if scope else "in any scope (name one with --team)"
    return (f"the forget was recorded all the same, in case a session under way is about to write that fact: "
            f"the user's sessions open now write no memory {where}")
