"""The resume-state SQL, each statement written once in SQLAlchemy Core, for both databases and both
kinds of lease. Pure: nothing here touches a database.

    from teamstore.state.statements import SQLITE, acquire_row

    stmt = acquire_row(SQLITE)             # built once per store; run with the parameters of teamstore.state.rows

SQLite runs these through SQLAlchemy; the Postgres stores' hot path compiles them once, at import, to the
text psycopg sends (:func:`teamstore.state.direct.for_psycopg`). A statement's inputs are :class:`Param`\\ s,
named the same on every backend; anything else in it is a constant, written into the compiled text.

Where the databases differ, the builders take the dialect:

* Postgres counts a user's live sessions through ``ts_live_sessions`` (migration 0008), which, unlike a
  subquery, costs nothing unless the ``CASE`` reaches it; SQLite through the subquery it stands for.
* Postgres writes and compares every time in a session row (its lease, its expiry, its stamps) on the
  server's ``now()``, with a lease's or an expiry's length (``lease_for``, ``v_expires_in``..) as an
  interval added to it, and a load returns that ``now()`` with the row (``read_at``), which the runtime
  judges the row's expiry against: workers on hosts whose clocks disagree still exclude each other, and
  judge a session alike. SQLite, one machine's file, takes the caller's clock (``now``, ``until``,
  ``v_expires_at``..).
* Postgres's row-lease write skips its WAL flush (``synchronous_commit`` off for its transaction alone).
* Advisory-lock leases (Postgres only) take the lock and read the row in one statement, and hand the
  lock over to the save's transaction, so its commit releases it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ColumnElement,
    DateTime,
    Interval,
    Text,
    and_,
    case,
    cast,
    column,
    delete,
    exists,
    func,
    literal,
    null,
    or_,
    select,
    table,
    true,
    tuple_,
    update,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter

from teamstore.db.fence import held
from teamstore.db.statements import dialect_insert
from teamstore.state.schema import sessions

POSTGRES, SQLITE = "postgresql", "sqlite"


class Param(BindParameter[Any]):
    """A statement's named input: a placeholder even where the statement's constants are written into
    its text (compiled with ``literal_binds``)."""

    inherit_cache = True

    def __init__(self, name: str, type_: Any) -> None:
        super().__init__(name, type_=type_, required=True)


@compiles(Param)
def _placeholder(element: Param, compiler: SQLCompiler, **kw: Any) -> str:
    kw["literal_binds"] = False
    placeholder: str = compiler.visit_bindparam(element, **kw)  # type: ignore[no-untyped-call]
    return placeholder


_TIME = DateTime(timezone=True)
USER, SESSION = Param("u", sessions.c.user_id.type), Param("s", sessions.c.session_id.type)
OWNER, VERSION = Param("owner", sessions.c.lease_owner.type), Param("version", BigInteger())
NOW, UNTIL, LIMIT = Param("now", _TIME), Param("until", _TIME), Param("max", BigInteger())
TTL_MS = Param("ttl_ms", Text())
"""The lease timer of advisory-lock leases, in milliseconds, as ``idle_session_timeout`` takes it (text)."""
CLAIMED = ("team", "team_version", "schema_version", "agentchat_version", "fingerprints")
"""What a lease writes into a new row, and a save writes again (each as the parameter ``v_<column>``)."""
SAVED = (*CLAIMED, "state", "state_bytes")
CHECKPOINTED = ("checkpoint", "checkpoint_bytes")
"""What a checkpoint write sets (each as the parameter ``v_<column>``); a save clears both."""
VALUE = {name: Param(f"v_{name}", sessions.c[name].type) for name in (*SAVED, *CHECKPOINTED, "expires_at")}
EXPIRES_LATEST = Param("v_expires_latest", sessions.c.expires_at.type)
STATE_EXPIRED = Param("v_state_expired", Boolean())
"""A checkpoint write's: the state the row holds had expired as the session opened, so the write clears it."""
LENGTHS = {UNTIL.key: Param("lease_for", Interval()), "v_expires_at": Param("v_expires_in", Interval()),
           "v_expires_latest": Param("v_expires_latest_in", Interval())}
"""A lease's end and the expiry window's ends as lengths from the caller's now, by the name of the time they
stand for: Postgres adds them to the server's ``now()``."""
SESSION_COLUMNS = ("state", "row_version", "team", "team_version", "schema_version", "agentchat_version",
                   "fingerprints", "state_bytes", "created_at", "updated_at", "expires_at", "checkpoint",
                   "checkpoint_bytes")
"""What every load reads of a row, in this order, followed by the time of the read (``read_at``:
:func:`teamstore.state.rows.stored` maps them). The fingerprints are read as text, on both databases, and
parsed once, by the mapper."""


def read_columns(now: Any) -> list[Any]:
    """:data:`SESSION_COLUMNS` of ``ts_sessions`` and ``now`` (:func:`now_in`, or
    :func:`teamstore.db.clock.shared_now`) as ``read_at``, to select or return: the row's expiry is judged
    against the clock it was written on."""
    return [*(cast(sessions.c.fingerprints, Text) if name == "fingerprints" else sessions.c[name]
              for name in SESSION_COLUMNS), _read_at(now)]


def _read_at(now: Any) -> Any:
    """``now`` (an expression, or a time of this machine's) as the column ``read_at``."""
    return (now if isinstance(now, ColumnElement) else literal(now, _TIME)).label("read_at")


def is_key(user_id: Any = USER, session_id: Any = SESSION) -> tuple[Any, Any]:
    """The session row's address."""
    return sessions.c.user_id == user_id, sessions.c.session_id == session_id


def never_saved() -> Any:
    """A row a row-lease worker made to hold a new session's lease, before the session's first write landed:
    no write has given it an expiry (every save and checkpoint does). A read-back (:func:`settle_row`) may have
    moved its version on."""
    return and_(sessions.c.expires_at.is_(None), sessions.c.state.is_(None), sessions.c.checkpoint.is_(None))


def holds_nothing() -> Any:
    """A row holding neither a state nor a checkpoint: a new session's lease row, or one emptied since (a first
    run cancelled or abandoned after its checkpoints, a checkpoint or state set aside in the quarantine). The
    per-user bound would count it until it expires with nothing in it, so the session's release removes it."""
    return and_(sessions.c.state.is_(None), sessions.c.checkpoint.is_(None))


def now_in(dialect: str) -> Any:
    """The time a statement writes and compares leases and expiries at: the server's on Postgres, the
    caller's (``now``) on SQLite (module doc)."""
    return func.now() if dialect == POSTGRES else NOW


def later(dialect: str, at: Param) -> Any:
    """The time ``at`` (a lease's end, an expiry) as the statement writes it: on Postgres, its length
    from the caller's clock (:data:`LENGTHS`) added to the server's ``now()``."""
    if dialect != POSTGRES:
        return at
    return func.now() + cast(LENGTHS[at.key], Interval)  # typed: the server never guesses a parameter's type


def live(now: Any) -> Any:
    """A stored session that has not expired: what the per-user bound counts. A row made to lease a new
    session has no expiry until its first save or checkpoint, so it does not count."""
    return sessions.c.expires_at > now


def live_count(user_id: Any, now: Any, dialect: str = SQLITE) -> Any:
    """How many live sessions ``user_id`` keeps (on Postgres through ``ts_live_sessions``, migration 0008,
    which holds this same count)."""
    if dialect == POSTGRES:
        return func.ts_live_sessions(user_id, now)
    return select(func.count()).select_from(sessions).where(sessions.c.user_id == user_id, live(now)).scalar_subquery()


def room(dialect: str) -> Any:
    """Whether the session may be opened under the per-user bound ``max`` (NULL: no bound): its own row is
    live (a resume, never refused), or its user keeps fewer live sessions than ``max``. The count sits in
    the CASE's last branch, which neither database evaluates for a resume."""
    resumed = exists().where(*is_key(), live(now_in(dialect)))
    return case((LIMIT.is_(None), true()), (resumed, true()), else_=live_count(USER, now_in(dialect), dialect) < LIMIT)


def acquire_row(dialect: str) -> Any:
    """Take a row lease and read the row, in one statement::

        INSERT the placeholder row (a new session: no state, no expiry) unless the user is held or the
        per-user bound refuses it .. ON CONFLICT DO UPDATE the lease WHERE it is free, expired, or
        already this owner's .. RETURNING the row

    No row comes back when the lease is refused. An owner names one opening of a session, so taking its
    own lease again is safe: a load retried after a lost connection does not wait out its own lease.
    """
    values: dict[str, Any] = {"user_id": USER, "session_id": SESSION, **{n: VALUE[n] for n in CLAIMED},
                              "state": null(), "state_bytes": literal(0), "row_version": literal(0),
                              "created_at": now_in(dialect), "updated_at": now_in(dialect), "expires_at": null(),
                              "checkpoint": null(), "checkpoint_bytes": literal(0), "lease_owner": OWNER,
                              "lease_until": later(dialect, UNTIL)}
    allowed = [~held(USER), room(dialect)]
    if dialect == POSTGRES:  # the lease write does not wait for its flush (module doc of postgres_row)
        allowed.insert(1, func.set_config("synchronous_commit", "off", True).is_not(None))
    source = select(*(value.label(name) for name, value in values.items())).where(*allowed)
    stmt = dialect_insert(dialect)(sessions).from_select(list(values), source)
    return stmt.on_conflict_do_update(
        index_elements=[sessions.c.user_id, sessions.c.session_id],
        set_={"lease_owner": stmt.excluded.lease_owner, "lease_until": stmt.excluded.lease_until},
        where=or_(sessions.c.lease_owner.is_(None), sessions.c.lease_until < now_in(dialect),
                  sessions.c.lease_owner == stmt.excluded.lease_owner),
    ).returning(*read_columns(now_in(dialect)))


def _moved_on(dialect: str) -> dict[str, Any]:
    """What every write of a session row moves on: its version, its time, and its expiry, which moves only
    when the stored one is outside the record's window (most writes then leave the expiry index alone, and
    Postgres can update the row in place)."""
    kept = sessions.c.expires_at.between(later(dialect, VALUE["expires_at"]), later(dialect, EXPIRES_LATEST))
    return {"row_version": sessions.c.row_version + 1, "updated_at": now_in(dialect),
            "expires_at": case((kept, sessions.c.expires_at), else_=later(dialect, EXPIRES_LATEST))}


def _saved_values(dialect: str) -> dict[str, Any]:
    """A save's new values: the state, and no checkpoint (a save follows a run that completed, or was given up)."""
    return {**{name: VALUE[name] for name in SAVED}, "checkpoint": null(), "checkpoint_bytes": literal(0),
            **_moved_on(dialect)}


def _checkpointed_values(dialect: str) -> dict[str, Any]:
    """A checkpoint write's new values: the checkpoint (NULL clears it); the state stays the one from before the
    run, unless it had expired as the session opened (``v_state_expired``): then it goes with this write, which
    moves the expiry on (a write that kept it would give the expired words a new TTL)."""
    expired = {"state": case((STATE_EXPIRED, null()), else_=sessions.c.state),
               "state_bytes": case((STATE_EXPIRED, literal(0)), else_=sessions.c.state_bytes)}
    return {**{name: VALUE[name] for name in CHECKPOINTED}, **expired, **_moved_on(dialect)}


def save_row(dialect: str, *, release: bool) -> Any:
    """Save under a row lease, in one statement: ``UPDATE .. WHERE row_version = :version AND
    lease_owner = :owner AND no hold .. RETURNING row_version`` (no row: the save lost its row), giving
    the lease back too with ``release``."""
    values = _saved_values(dialect)
    if release:
        values.update(lease_owner=None, lease_until=None)
    return (update(sessions)
            .where(*is_key(), sessions.c.row_version == VERSION, sessions.c.lease_owner == OWNER, ~held(USER))
            .values(values).returning(sessions.c.row_version))


def checkpoint_row(dialect: str) -> Any:
    """Write (or clear) a run's checkpoint under a row lease, in one statement, on the same terms as a save:
    ``UPDATE .. WHERE row_version = :version AND lease_owner = :owner AND no hold .. RETURNING row_version``.
    The lease stays held. It keeps the server's durability: a checkpoint is worth only what survives a crash."""
    return (update(sessions)
            .where(*is_key(), sessions.c.row_version == VERSION, sessions.c.lease_owner == OWNER, ~held(USER))
            .values(_checkpointed_values(dialect)).returning(sessions.c.row_version))


def settle_row(dialect: str) -> Any:
    """Move the row's version on, if ``owner`` still holds its row lease, and read it back, in one statement:
    ``UPDATE .. SET row_version = row_version + 1 WHERE lease_owner = :owner RETURNING`` the row. A write of
    ``owner``'s whose answer was lost and that has not landed yet names the version before, so it can no longer
    land; one the server is still running holds the row, and this statement waits for it to end first.

    Unlike every other write of a session row it carries no erasure hold (:func:`teamstore.db.fence.held`): it
    writes nothing of the user, and Postgres would judge the hold before reaching the row, so a settle under a
    hold would skip its wait for the write still running."""
    return (update(sessions).where(*is_key(), sessions.c.lease_owner == OWNER)
            .values(row_version=sessions.c.row_version + 1).returning(*read_columns(now_in(dialect))))


def renew_row(dialect: str) -> Any:
    """Move ``owner``'s row lease on to ``until`` (on Postgres, ``lease_for`` from the server's ``now()``)."""
    return update(sessions).where(*is_key(), sessions.c.lease_owner == OWNER).values(
        lease_until=later(dialect, UNTIL))


def release_row() -> Any:
    """Give ``owner``'s row lease back."""
    return update(sessions).where(*is_key(), sessions.c.lease_owner == OWNER).values(lease_owner=None,
                                                                                     lease_until=None)


def discard_row() -> Any:
    """Remove ``owner``'s row if it holds nothing (:func:`holds_nothing`); its lease goes with it. Checked on the
    row itself: one that a worker which took the lease over has saved meanwhile is not ``owner``'s any more."""
    return delete(sessions).where(*is_key(), sessions.c.lease_owner == OWNER, holds_nothing())


def _lock_key(user_id: Any, session_id: Any) -> tuple[Any, Any]:
    """A session's advisory lock: (hashtext(user), hashtext(session)), so ``classid`` is the user's hash
    (``teamstore.state.lease_mode`` counts a user's open sessions by it)."""
    return func.hashtext(user_id), func.hashtext(session_id)


PG_LOCKS = table("pg_locks", column("locktype"), column("granted", Boolean), column("objsubid"), column("database"),
                 column("classid"), column("objid"), column("pid"))
PG_DATABASE = table("pg_database", column("oid"), column("datname"))
PG_STAT_ACTIVITY = table("pg_stat_activity", column("pid"), column("backend_start"), column("application_name"))
PID, WAIT_MS, TAKEN_AT = Param("pid", BigInteger()), Param("wait_ms", BigInteger()), Param("taken_at", _TIME)
NAME = Param("name", Text())


def held_advisory_locks() -> Any:
    """The session locks (:func:`_lock_key`) granted in this database, as the server's lock table shows them."""
    here = select(PG_DATABASE.c.oid).where(PG_DATABASE.c.datname == func.current_database()).scalar_subquery()
    return and_(PG_LOCKS.c.locktype == "advisory", PG_LOCKS.c.granted, PG_LOCKS.c.objsubid == 2,
                PG_LOCKS.c.database == here)


def as_lock_id(value: Any) -> Any:
    """``hashtext``'s signed 32 bits as ``pg_locks`` shows them (an unsigned oid)."""
    return cast(value, BigInteger).op("&")(2**32 - 1)


def _lost_holder() -> Any:
    """The server process ``pid``, if it still holds the session's advisory lock (:func:`_lock_key`), had
    started by ``taken_at`` (the server's time as the lease was taken) and still serves the connection ``name``:
    a process that took the session later on a process id the server had used again, or that a session-mode
    pooler handed to another client since (its name is that client's), is another worker's."""
    user_hash, session_hash = _lock_key(USER, SESSION)
    started = exists().where(PG_STAT_ACTIVITY.c.pid == PID, PG_STAT_ACTIVITY.c.backend_start <= TAKEN_AT,
                             PG_STAT_ACTIVITY.c.application_name == NAME)
    return and_(held_advisory_locks(), PG_LOCKS.c.pid == PID, started,
                cast(PG_LOCKS.c.classid, BigInteger) == as_lock_id(user_hash),
                cast(PG_LOCKS.c.objid, BigInteger) == as_lock_id(session_hash))


def end_lost_holder() -> Any:
    """End the server process ``pid`` if it still holds the session's advisory lock, waiting up to ``wait_ms``
    for it to exit: a connection this worker gave up on mid-statement, whose statement the server may still be
    running. One row, true, when it ended in time; false when it had not (or had exited just before the signal:
    :func:`lost_holder_stays` tells); no row when no such process holds the lock (it has ended already). Once it
    has ended, nothing it was sent can still land."""
    return select(func.pg_terminate_backend(PG_LOCKS.c.pid, WAIT_MS)).where(_lost_holder())


def lost_holder_stays() -> Any:
    """Whether the server process ``pid`` still holds the session's advisory lock (one row, true, if so)."""
    return select(exists().where(_lost_holder()))


def _lease_timer(value: Any) -> Any:
    """Set the held connection's ``idle_session_timeout``: the lease's time limit under advisory locks."""
    return func.set_config("idle_session_timeout", value, False)


def acquire_lock() -> Any:
    """Take a session's advisory lock, arm the lease timer and read the row, in one read-only statement.

    ``locked`` is NULL when an erasure holds the user (no lock is taken), false when another worker has
    the session; the timer is armed only with the lock, so a refused attempt's connection goes back to
    the pool as it came. The row is read through ``ts_locked_session`` (migration 0004), called after
    the lock (the subquery is kept apart by ``OFFSET 0``): its snapshot is taken then, so it sees the
    save the previous holder committed before letting go, which the statement's own snapshot, taken
    before the lock, might not. Under a per-user bound (``max``), a session without a live row also
    counts its user's live sessions; a resume never does.
    """
    lock = select(case((~held(USER), func.pg_try_advisory_lock(*_lock_key(USER, SESSION))), else_=null())
                  .label("locked")).offset(0).subquery("l")
    row = (func.ts_locked_session(lock.c.locked, USER, SESSION)
           .table_valued(*(column(name) for name in SESSION_COLUMNS)).lateral("s"))
    not_live = (row.c.expires_at > func.now()).is_not(True)  # no row, or an expired one
    count = case((and_(lock.c.locked, LIMIT.is_not(None), not_live), live_count(USER, func.now(), POSTGRES)))
    timer = _lease_timer(case((lock.c.locked, TTL_MS), else_="0"))
    # Last, the server process holding the lock, as the server knows it (a pooler in front of it, PgBouncer in
    # session mode, hands its clients a process id of its own making), and the connection's name there.
    return select(lock.c.locked, *(row.c[name] for name in SESSION_COLUMNS), _read_at(func.now()), count,
                  timer, func.pg_backend_pid(), func.current_setting("application_name")
                  ).select_from(lock.outerjoin(row, true()))


def save_locked(*, existing: bool, release: bool) -> Any:
    """Save under an advisory lock, in one statement: the versioned ``UPDATE`` (or, for a session's
    first save, an ``INSERT .. ON CONFLICT DO NOTHING``), unless the user is held; ``RETURNING`` no row
    (or NULL) when the save lost its row. Any statement on the held connection restarts the lease timer.

    With ``release``, the transaction takes the lock too, the session lock is dropped and the timer
    disarmed; the commit then releases the transaction's lock, so no other worker can take the session
    between the unlock and the moment the new state is visible. (``OFFSET 0`` keeps the subquery that
    takes the lock apart, so it runs before the outer unlock.)
    """
    if existing:
        stmt: Any = (update(sessions).where(*is_key(), sessions.c.row_version == VERSION, ~held(USER))
                     .values(_saved_values(POSTGRES)))
    else:
        stmt = _first_write({**{n: VALUE[n] for n in SAVED}, "checkpoint": null(), "checkpoint_bytes": literal(0)})
    stmt = stmt.returning(sessions.c.row_version)
    if not release:
        return stmt
    saved = stmt.cte("saved")
    handover = select(func.pg_advisory_xact_lock(*_lock_key(USER, SESSION))).offset(0).subquery("handover")
    return select(select(saved.c.row_version).scalar_subquery(), func.pg_advisory_unlock(*_lock_key(USER, SESSION)),
                  _lease_timer("0")).select_from(handover)


def _first_write(written: dict[str, Any]) -> Any:
    """A new session's first row under an advisory lock (``lock`` leases write none at the load), unless the
    user is held: ``INSERT .. ON CONFLICT DO NOTHING`` (a row someone else wrote meanwhile is not overwritten)."""
    values = {"user_id": USER, "session_id": SESSION, **{n: VALUE[n] for n in CLAIMED}, "state": null(),
              "state_bytes": literal(0), **written, "row_version": literal(1), "created_at": func.now(),
              "updated_at": func.now(), "expires_at": later(POSTGRES, EXPIRES_LATEST)}
    source = select(*(value.label(name) for name, value in values.items())).where(~held(USER))
    return (dialect_insert(POSTGRES)(sessions).from_select(list(values), source)
            .on_conflict_do_nothing(index_elements=[sessions.c.user_id, sessions.c.session_id]))


def checkpoint_locked(*, existing: bool) -> Any:
    """Write (or clear) a run's checkpoint under an advisory lock, in one statement: the versioned ``UPDATE``
    (or, for a session with no row yet, its first row, holding the checkpoint and no state), unless the user
    is held; ``RETURNING`` no row when it lost its row. The lock stays held."""
    if existing:
        stmt: Any = (update(sessions).where(*is_key(), sessions.c.row_version == VERSION, ~held(USER))
                     .values(_checkpointed_values(POSTGRES)))
    else:
        stmt = _first_write({n: VALUE[n] for n in CHECKPOINTED})
    return stmt.returning(sessions.c.row_version)


def release_lock(*, discard_empty: bool = False) -> Any:
    """Give a session's advisory lock back and disarm the lease timer, in one statement.

    With ``discard_empty``, the same statement removes the session's row if it holds nothing
    (:func:`holds_nothing`), the lock handed over to its transaction first as :func:`save_locked` hands it
    over: no other worker can take the session and read the row between the unlock and the delete's commit.
    """
    unlock = (func.pg_advisory_unlock(*_lock_key(USER, SESSION)), _lease_timer("0"))
    if not discard_empty:
        return select(*unlock)
    discard = delete(sessions).where(*is_key(), holds_nothing()).cte("discarded")
    handover = select(func.pg_advisory_xact_lock(*_lock_key(USER, SESSION))).offset(0).subquery("handover")
    return select(*unlock).select_from(handover).add_cte(discard)


def touch() -> Any:
    """The cheapest statement: on a held connection it restarts the lease timer."""
    return select(literal(1))


@dataclass(frozen=True)
class LeaseRules:
    """What the statements off the hot path (quarantine, delete, sweep) say differently per kind of lease.

    Attributes:
        owned: Conditions that let a statement touch the row only while ``owner`` holds its lease.
        sweepable: Which rows a sweep may delete at ``now`` (:func:`teamstore.db.clock.shared_now`: on Postgres
            the server's ``now()``, the clock the leases and expiries were written on).
        sweep_recheck: What a sweep checks again on each row it deletes.
    """

    owned: Callable[[str], list[Any]]
    sweepable: Callable[[Any], Any]
    sweep_recheck: Callable[[Any], Any]


def _row_sweepable(now: Any) -> Any:
    # Expired, or made for a new session by a worker that never saved it (it crashed), and in both cases
    # not leased to a live worker. Checked again as a whole on each row: the lease lives in the row, so a
    # row leased after the sweep read it must be kept.
    return and_(or_(sessions.c.expires_at < now, never_saved()),
                or_(sessions.c.lease_owner.is_(None), sessions.c.lease_until < now))


ROW_LEASES = LeaseRules(owned=lambda owner: [sessions.c.lease_owner == owner], sweepable=_row_sweepable,
                        sweep_recheck=_row_sweepable)
LOCK_LEASES = LeaseRules(
    # The advisory lock is the ownership; the lease columns stay empty.
    owned=lambda owner: [],
    # A row whose session is open is skipped: the transaction-level lock fails while a worker holds the
    # session's lock, and while the sweep holds it a worker waits, then finds no row.
    sweepable=lambda now: and_(sessions.c.expires_at < now, func.pg_try_advisory_xact_lock(
        *_lock_key(sessions.c.user_id, sessions.c.session_id))),
    # A save committed between the sweep's snapshot and its lock moved the expiry on: keep that row. (The
    # lock itself is not repeated: it could be taken on rows that are not swept.)
    sweep_recheck=lambda now: sessions.c.expires_at < now,
)


def sweep_batch(rules: LeaseRules, now: Any, batch_size: int, *, keep_checkpoints: bool = False) -> Any:
    """Delete up to ``batch_size`` rows a sweep may delete (with ``keep_checkpoints``, none holding a
    checkpoint: those go one by one, their runs recorded first). Each is checked again on the row itself:
    under READ COMMITTED, Postgres re-evaluates only the DELETE's own conditions on a row a worker leased or
    saved since the subquery read it, never the subquery's."""
    kept = [sessions.c.checkpoint.is_(None)] if keep_checkpoints else []
    victims = select(sessions.c.user_id, sessions.c.session_id).where(rules.sweepable(now), *kept).limit(batch_size)
    return delete(sessions).where(tuple_(sessions.c.user_id, sessions.c.session_id).in_(victims),
                                  rules.sweep_recheck(now), *kept)


def expired_checkpoints(now: Any, after: tuple[str, str] | None, limit: int) -> Any:
    """The keys of expired rows holding a checkpoint, in key order after ``after``."""
    key = tuple_(sessions.c.user_id, sessions.c.session_id)
    stmt = select(sessions.c.user_id, sessions.c.session_id).where(
        sessions.c.expires_at < now, sessions.c.checkpoint.is_not(None))
    if after is not None:
        stmt = stmt.where(key > tuple_(literal(after[0]), literal(after[1])))
    return stmt.order_by(sessions.c.user_id, sessions.c.session_id).limit(limit)
