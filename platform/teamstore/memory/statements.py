"""The user-memory SQL the store runs, each statement written once in SQLAlchemy Core, for both databases.
Pure: nothing here touches a database.

    from teamstore.memory.statements import key_alive, of_user, row_write

    stmt = row_write("postgresql", "alice", "support_triage", row, expected=3, now=now,
                     alive=key_alive("alice", data_key))
    version = (await conn.execute(stmt)).scalar()          # None: refused (stale, fenced, or erased)

Every write carries its own checks in its ``WHERE``: the version the writer read, no erasure fence on the user
(:func:`teamstore.db.fence.held`), and the data key it seals under still there (:func:`key_alive`). A fact is
**left over** when its (user, scope) has no memory written (:func:`left_over`).

Times are written and compared on the database's clock (:func:`teamstore.db.clock.shared_now`: on Postgres the
server's ``now()``), so the ``now`` the builders take is an expression there; a read selects that clock with its
rows (:func:`read_at`): workers on hosts whose clocks disagree judge a memory's expiry alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Text,
    and_,
    column,
    delete,
    exists,
    false,
    func,
    literal,
    or_,
    select,
    true,
    tuple_,
    update,
)
from sqlalchemy import table as table_clause

from teamstore.db.clock import now_utc, shared_later, shared_now
from teamstore.db.fence import erasing, held
from teamstore.db.statements import dialect_insert
from teamstore.keys.schema import data_keys
from teamstore.keys.service import DataKey
from teamstore.memory.schema import EVERY_SCOPE, facts, forgets, memories
from teamstore.state.schema import Timestamp, quarantine, sessions

_SUBJECTS = table_clause("ts_subjects", column("user_id"))
"""The audit's subjects (``teamstore.audit.schema.subjects``), named by their table alone: audit sits above
memory, and :func:`user_stored` asks only whether the user has one."""


def of_user(table: Any, user_id: str, scope: str | None) -> list[Any]:
    """The clauses picking ``user_id``'s rows of ``table``, under ``scope`` (``None``: every scope)."""
    clauses = [table.c.user_id == user_id]
    return clauses if scope is None else [*clauses, table.c.scope == scope]


def key_alive(user_id: str, key: DataKey | None) -> ColumnElement[bool]:
    """The data key a write seals under still exists. An erasure that ran whole while a writer waited for its
    model (its fence lifted again before the write) destroyed that key: the write must not bring back what it
    erased, nor land under a key made for the user since."""
    if key is None:
        return true()
    return exists().where(data_keys.c.user_id == user_id, data_keys.c.key_id == key.key_id)


WRITES_LOCK_SEED = 7_460_617_270_002
"""Seeds the hash of a user id that keys the advisory lock on their memory writes (Postgres): a one-number key,
which no session's two-number lease lock can be."""


def writes_lock(user_id: str, *, shared: bool) -> Any:
    """Take the advisory lock on ``user_id``'s memory writes until the transaction ends (Postgres): each write
    takes it shared, an erasure's key step alone before it deletes the user's data key. A first write's new
    rows are invisible to the erasure's delete until they commit, and it would not wait for them: the key step
    waits for every write under way instead, so by the memory step they are committed and deleted. An advisory
    lock needs no grant beyond the workers' own, as a row lock on ``ts_data_keys`` (UPDATE) would."""
    take = func.pg_advisory_xact_lock_shared if shared else func.pg_advisory_xact_lock
    return select(take(func.hashtextextended(literal(user_id, Text()), WRITES_LOCK_SEED)))


def write_times(dialect: str, now: datetime | None, retention: timedelta) -> tuple[Any, Any]:
    """A write's time and the expiry its ``retention`` sets: on the database's clock (on Postgres the server's
    ``now()``, as expressions), or from ``now`` when the caller gives one (tests)."""
    at = now if now is not None else shared_now(dialect)
    if isinstance(at, datetime):  # the caller's, or this machine's (SQLite): one instant for both
        return at, at + retention
    return at, shared_later(dialect, retention)


def read_at(dialect: str) -> Any:
    """The database's clock as the column ``read_at``, selected with the memory rows a read judges by it."""
    now = shared_now(dialect)
    return (now if isinstance(now, ColumnElement) else literal(now, Timestamp())).label("read_at")


def expired_memory(now: Any) -> ColumnElement[bool]:
    """The fact's memory is past its expiry: read as gone until the sweep (or its scope's next read) deletes it."""
    return exists().where(memories.c.user_id == facts.c.user_id, memories.c.scope == facts.c.scope,
                          memories.c.expires_at <= now)


def left_over(*among: ColumnElement[bool]) -> ColumnElement[bool]:
    """The fact's (user, scope) has no memory written: no row, or one holding only a writer's failure.
    ``among``: clauses on the memory rows that hold for the fact's own, which narrow those Postgres reads."""
    return ~exists().where(memories.c.user_id == facts.c.user_id, memories.c.scope == facts.c.scope,
                           memories.c.version != 0, *among)


FORGETS_KEPT = timedelta(days=30)
"""How long a forget's time is kept (``ts_user_memory_forgets``): the retention sweep drops it after this. A writer
whose session opened longer ago than this before its write writes nothing (:func:`forgotten_after`): a forget
of that time may be dropped already."""


def forget_time(dialect: str) -> Any:
    """When a forget happened, on the clock a session's bound (``said_after``) is read on: on Postgres the server's
    clock as its last statement runs (not ``now()``, its transaction's start), on SQLite this machine's as it is
    built. The forget is seen only once it commits, later: a session reads its bound once any forget of its user
    under way has committed (:meth:`teamstore.memory.store.MemoryStore.clock`), so one opened while the forget ran
    reads a later time, and the memory the forget left."""
    return func.clock_timestamp() if dialect == "postgresql" else now_utc()


def user_keyed(user_id: str) -> ColumnElement[bool]:
    """The user has a data key: one an erasure destroyed is gone, so a store sealing memory records nothing of an
    erased user."""
    return exists().where(data_keys.c.user_id == user_id)


def user_stored(user_id: str) -> ColumnElement[bool]:
    """The database holds something of the user that a session makes or leaves: a data key, an audit subject, a
    stored or quarantined session, memory, or a record of a forget. An erasure leaves none of them, so a store that
    does not seal memory (no data key to judge by) records nothing of an erased user either."""
    return or_(*(exists().where(table.c.user_id == user_id)
                 for table in (data_keys, _SUBJECTS, sessions, quarantine, memories, facts, forgets)))


def forget_record(dialect: str, user_id: str, scope: str | None, known: ColumnElement[bool]) -> Any:
    """Record that ``user_id`` forgot memory under ``scope`` (``None``: every scope) now: the row's time moves on;
    returns the user id, no row when nothing was recorded. Nothing is recorded while an erasure holds the user (its
    memory step may have run already), nor unless ``known`` (:func:`user_keyed`, :func:`user_stored`): the record
    holds the raw user id, which an erasure's receipt says is gone. The retention sweep's hold does not stop it: the
    sweep deletes the record with the user's ids once their data key is gone (which stops every writer of theirs),
    and one that backs off (the user came back) leaves it to stop the writer of the session that kept them."""
    columns = [forgets.c.user_id, forgets.c.scope, forgets.c.forgotten_at]
    values = (user_id, EVERY_SCOPE if scope is None else scope, forget_time(dialect))
    chosen = select(*(_value(v, c.type) for v, c in zip(values, columns, strict=True))).where(~erasing(user_id), known)
    stmt = dialect_insert(dialect)(forgets).from_select(columns, chosen)
    return stmt.on_conflict_do_update(index_elements=[forgets.c.user_id, forgets.c.scope],
                                      set_={"forgotten_at": stmt.excluded.forgotten_at}).returning(forgets.c.user_id)


def forgotten_after(dialect: str, user_id: str, scope: str, said_after: datetime | None) -> ColumnElement[bool]:
    """The user forgot memory under ``scope`` (or every scope) at or after ``said_after``, the earliest time the
    messages a write comes from can have been said (``None``: not known, so any forget still kept); or
    ``said_after`` is older than :data:`FORGETS_KEPT`, and a forget after it may no longer be kept."""
    after = [] if said_after is None else [forgets.c.forgotten_at >= said_after]
    forgot = exists().where(forgets.c.user_id == user_id, forgets.c.scope.in_([scope, EVERY_SCOPE]), *after)
    if said_after is None:
        return forgot
    if dialect != "postgresql":  # one machine's clock (shared_now): judged here
        return or_(forgot, true() if said_after < now_utc() - FORGETS_KEPT else false())
    return or_(forgot, literal(said_after, Timestamp()) < shared_later(dialect, -FORGETS_KEPT))


def delete_old_forgets(dialect: str, now: datetime | None) -> Any:
    """Delete the forgets older than :data:`FORGETS_KEPT` at ``now`` (``None``: the database's clock): no writer
    they could still stop is left (one whose session opened before them writes nothing anyway)."""
    cutoff = shared_later(dialect, -FORGETS_KEPT) if now is None else now - FORGETS_KEPT
    return delete(forgets).where(forgets.c.forgotten_at < cutoff)


def row_write(
    dialect: str, user_id: str, scope: str, row: dict[str, Any], expected: int, now: Any,
    alive: ColumnElement[bool], made_at: datetime | None = None, forgot: ColumnElement[bool] | None = None,
) -> Any:
    """The version-checked, fenced write of the memory row (while ``alive`` holds, and unless ``forgot``, a
    forget after its messages, does), returning its new version: no row if refused. ``made_at``: when the row read
    was made; another row, made since, is refused too."""
    checks = [alive] if forgot is None else [alive, ~forgot]
    if expected > 0:
        same_row = [] if made_at is None else [memories.c.created_at == made_at]
        return (update(memories)
                .where(*of_user(memories, user_id, scope), memories.c.version == expected, ~held(user_id), *checks,
                       *same_row,
                       memories.c.expires_at > now)  # past it, the memory is gone: read again, start afresh
                .values(**row, version=expected + 1).returning(memories.c.version))
    # A first write: a new row, or the row that holds only a failure (version 0).
    values = {"user_id": user_id, "scope": scope, **row, "version": 1, "created_at": now, "failures": 0}
    stmt = fenced_insert(dialect, user_id, values, and_(*checks))
    return stmt.on_conflict_do_update(
        index_elements=[memories.c.user_id, memories.c.scope],
        set_={**{k: stmt.excluded[k] for k in row}, "version": 1}, where=memories.c.version == 0,
    ).returning(memories.c.version)


def failure_upsert(dialect: str, user_id: str, values: dict[str, Any], alive: ColumnElement[bool], now: Any) -> Any:
    """Record the writer's failure (``values``: a whole row, for a user with none), its summary and facts
    untouched, returning the row's version: no row when fenced or erased."""
    stmt = fenced_insert(dialect, user_id, values, alive)
    return stmt.on_conflict_do_update(
        index_elements=[memories.c.user_id, memories.c.scope],
        set_={"failure": stmt.excluded.failure, "failed_at": now, "failures": memories.c.failures + 1},
    ).returning(memories.c.version)


def fenced_insert(dialect: str, user_id: str, values: dict[str, Any], alive: ColumnElement[bool]) -> Any:
    """``INSERT INTO ts_user_memory SELECT <values> WHERE NOT <fenced> AND <alive>``: the fence, the key's
    check and the write in one."""
    columns = [memories.c[name] for name in values]
    chosen = select(*(_value(values[c.name], c.type) for c in columns)).where(~held(user_id), alive)
    return dialect_insert(dialect)(memories).from_select(columns, chosen)


def _value(value: Any, kind: Any) -> Any:
    """A value to insert, or an expression (the database's clock) as it is."""
    return value if isinstance(value, ColumnElement) else literal(value, kind)


def fact_upsert(
    dialect: str, user_id: str, scope: str, name: str, kind: str, value: str, same: bool, run_id: str, now: Any,
) -> Any:
    """Write a fact's (sealed) value; ``same``: it is confirmed with the value it had, so it still comes from
    the run that first stated it (its value is written again all the same: a plain one is sealed now)."""
    stmt = dialect_insert(dialect)(facts).values(user_id=user_id, scope=scope, name=name, type=kind, value=value,
                                                 source_run_id=run_id, created_at=now, confirmed_at=now)
    changed = {} if same else {"type": stmt.excluded.type, "source_run_id": stmt.excluded.source_run_id,
                               "created_at": stmt.excluded.created_at}
    return stmt.on_conflict_do_update(
        index_elements=[facts.c.user_id, facts.c.scope, facts.c.name],
        set_={"value": stmt.excluded.value, "confirmed_at": now, **changed},
    )


def delete_expired(now: Any, batch_size: int, where: Sequence[Any]) -> Any:
    """Delete a batch of memories past their expiry that ``where`` also holds, returning their (user, scope)."""
    victims = (select(memories.c.user_id, memories.c.scope).where(memories.c.expires_at <= now, *where)
               .limit(batch_size))
    return (delete(memories).where(tuple_(memories.c.user_id, memories.c.scope).in_(victims),
                                   memories.c.expires_at <= now)
            .returning(memories.c.user_id, memories.c.scope))


FACT_KEY = (facts.c.user_id, facts.c.scope, facts.c.name)
"""The facts table's primary key, in its order: the order the leftover sweep walks the facts in."""


def leftover_window(after: Sequence[Any] | None, batch_size: int) -> Any:
    """The key of the ``batch_size``-th fact after ``after`` (``None``: from the first) and of the one past it:
    where a batch of the leftover sweep ends, and whether any fact is left beyond it. Fewer than two rows:
    the batch runs to the end of the table."""
    keys = select(*FACT_KEY).where(*_keys_between(after, None))
    return keys.order_by(*FACT_KEY).offset(batch_size - 1).limit(2)


def delete_leftovers(after: Sequence[Any] | None, upto: Sequence[Any] | None, batch_size: int) -> Any:
    """Delete the leftover facts whose key comes after ``after`` and not after ``upto`` (``None``: from the first,
    to the last; ``batch_size`` at most), those no other transaction holds (it never waits for one)."""
    # Bounded by their user ids too, the facts and the memory rows they are matched with: Postgres then reads
    # only those in the span (from two row comparisons it guesses a quarter of the table, and matched the facts
    # with every memory row). In key order and limited, as it tells how few facts that is.
    leftover = left_over(*_users_between(memories, after, upto))
    victims = (select(*FACT_KEY).where(*_keys_between(after, upto), *_users_between(facts, after, upto), leftover)
               .order_by(*FACT_KEY).limit(batch_size).with_for_update(of=facts, skip_locked=True).correlate(None))
    # Checked again as it deletes: a first write that landed meanwhile owns the facts it wrote.
    return delete(facts).where(tuple_(*FACT_KEY).in_(victims), leftover)


def _keys_between(after: Sequence[Any] | None, upto: Sequence[Any] | None) -> list[ColumnElement[bool]]:
    """The facts whose key comes after ``after`` and not after ``upto`` (``None``: no bound), as row comparisons
    on the primary key, which its index answers."""
    def key(values: Sequence[Any]) -> Any:
        return tuple_(*(literal(v, c.type) for v, c in zip(values, FACT_KEY, strict=True)))
    return ([] if after is None else [tuple_(*FACT_KEY) > key(after)]) + (
        [] if upto is None else [tuple_(*FACT_KEY) <= key(upto)])


def _users_between(table: Any, after: Sequence[Any] | None, upto: Sequence[Any] | None) -> list[ColumnElement[bool]]:
    """The rows of ``table`` whose user id is between those of the fact keys ``after`` and ``upto`` (inclusive)."""
    user = table.c.user_id
    return ([] if after is None else [user >= literal(after[0], user.type)]) + (
        [] if upto is None else [user <= literal(upto[0], user.type)])
