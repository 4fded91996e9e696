"""What an open session writes to its row: the snapshot it holds until a save, the save, its runs' checkpoints,
and the lease given back.

    writes = SessionWrites(deps, key, owner)     # one per session (teamstore.runtime.session_runs)
    writes.hold(taken)                           # a completed run's snapshot (teamstore.runtime.resume.snapshot)
    await writes.save_pending(built)             # s.save(): that snapshot now, keeping the lease
    await writes.checkpoint(built, text)         # a run's checkpoint of a turn (None: clear it)
    await writes.count_take_up(built, checkpoint)   # an interrupted run taken up: counted before it goes on

:class:`~teamstore.runtime.session_runs.SessionRuns` streams the runs and decides when to write; a
:class:`SessionWrites` writes, one statement a write, under the session's lease (its owner) and the row version
it last read or wrote, and keeps that version. No write starts once the session's platform has closed under it
(``PlatformClosed``), bar a stopped run's last checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from config_registry.types import BuiltTeam
from teamstore.db.clock import now_utc
from teamstore.errors import StaleStateVersion, StorageError, StoreUnavailable
from teamstore.runtime.checkpoints import Checkpoint, encode_take_up
from teamstore.runtime.deps import SessionDeps, checkpoint_record, save_record
from teamstore.state.base import SessionKey, StoredSession
from teamstore.state.cancellation import to_the_end


class SessionWrites:
    """One session's writes to its row, and what it holds to write.

    Args:
        deps: What the platform gives its sessions (the store, the limits, the metrics, the open sessions).
        key: The session's (checked) user and session ids.
        owner: The lease owner the writes go under.

    Attributes:
        row_version: The row's version as of the session's last load or write.
        holds_state: The row holds a saved state, as far as the session knows: it stays at release.
        good_states: What the team holds between runs (the last snapshot taken, or the state loaded as the session
            opened): a team built again after a failed run is given it.
        drop_checkpoint: A run that completed, then failed its snapshot, left its checkpoint: the next write clears it.
        state_expired: The row's state had expired as the session opened, and no write of the session's is known to
            have cleared it yet: the next checkpoint write clears it (a save replaces it), so the expiry that write
            moves on never brings the expired state back. After a write left unanswered, the read-back
            (:meth:`settle`) says whether the row still holds that state.
        lock: One write of the session's at a time: two saves at once would both take the one snapshot.
    """

    def __init__(self, deps: SessionDeps, key: SessionKey, owner: str) -> None:
        self._deps, self._key, self._owner = deps, key, owner
        self.row_version = 0
        self.holds_state = False
        self.good_states: dict[str, Any] = {}
        self.drop_checkpoint = False
        self.state_expired = False
        self.lock = asyncio.Lock()
        self._pending: str | None = None
        self._pending_bytes = 0
        self._given_back = False  # the platform's close gave the lease back: not even a last checkpoint is written
        self._unsettled = False  # a write was left unanswered: whether it landed, and the row's version, unknown

    @property
    def pending(self) -> bool:
        """Whether a snapshot waits to be saved."""
        return self._pending is not None

    def hold(self, taken: tuple[str, dict[str, Any]]) -> None:
        """Hold ``taken`` (a completed run's snapshot: encoded as saved, and as taken) for the next save."""
        (self._pending, self.good_states), self._pending_bytes = taken, len(taken[0].encode())

    async def checkpoint(self, built: BuiltTeam, text: str | None, *, last: bool = False) -> None:
        """Write (``None``: clear) the run's checkpoint under the lease and row version, in one statement.

        Args:
            built: The session's team.
            text: The encoded checkpoint.
            last: It is the last checkpoint of a run stopped mid-run, carrying the model calls paid since the one
                before: once the platform has closed, it is still written until the close gives the session's
                lease back (the close stops the run and waits for it first, and gives the lease back only once
                this write, begun, has ended), so the attempt that ends the run records those calls with the rest.

        Raises:
            PlatformClosed: The platform closed while the session was open; nothing was written.
        """
        # The last one holds the session's writes (nothing that holds them waits for a run): a close whose wait for
        # the stopped run is over gives the lease back, and closes the store, only after it.
        async with self.lock if last else contextlib.nullcontext():
            with self._storing(last_word=last and not self._given_back):
                await self._settled_first()
                self.row_version = await self._deps.store.checkpoint(
                    self._key, owner=self._owner, expected_version=self.row_version,
                    record=checkpoint_record(built, text, self._deps.limits, state_expired=self.state_expired))
                self.state_expired = False  # once landed: after one left unanswered, the read-back judges the row

    async def count_take_up(self, built: BuiltTeam, checkpoint: Checkpoint) -> None:
        """Write ``checkpoint`` back with this take-up of its run counted, before the continuation makes any model
        call: the ledger keys a run's rows by the attempt (the checkpoint's count of take-ups), and a continuation
        that recorded the run and died before the save that clears it would otherwise leave the next take-up its
        own number, that one's calls skipped as recorded. Cancelled once the write has begun, it finishes.

        Raises:
            StoreUnavailable, StaleStateVersion, ErasureInProgress: Nothing ran, and the run is still interrupted;
                the write may have landed (a store that failed mid-write cannot say): read the row back.
        """
        async with self.lock:
            await to_the_end(self.checkpoint(built, encode_take_up(built, checkpoint)))

    async def settle(self) -> StoredSession | None:
        """The session's row once no write of the session's can still land
        (:meth:`teamstore.state.base.StateStore.settle`); the session goes on from the version it was read back
        at, as the answer of a write left unanswered (``StoreUnavailable``) that landed would have had it.

        Raises:
            StoreUnavailable: The row could not be read, or a write still running did not end in time.
        """
        row = await self._deps.store.settle(self._key, owner=self._owner)
        if row is not None:
            self.row_version = row.row_version
        # A write of the session's that landed moved the expiry on: a save's state is then fresh, a checkpoint
        # write's cleared the expired one. Only a state still expired is the one the session opened with.
        self.state_expired = self.state_expired and row is not None and _still_expired(row)
        self._unsettled = False
        return row

    async def _settled_first(self) -> None:
        """Before a write, after one left unanswered: the row read back (:meth:`settle`), so the write goes on
        from the version it is at. On the version the session held, a write that had landed would make this one
        find the row changed under it (``StaleStateVersion``), and a save the session's last run with it."""
        if self._unsettled:
            await self.settle()

    async def save_pending(self, built: BuiltTeam) -> None:
        """Write the pending snapshot now, keeping the lease; or, with none, clear a checkpoint left to clear.
        Cancelled while it writes, it still finishes the write."""
        async with self.lock:
            if self._pending is not None:
                # Cancelled mid-write (a request timeout), the write finishes first. Cut short, it may have saved
                # without the session learning the new row version (its exit save would then conflict with
                # itself), lost the lock with its connection, or left SQLite's connection holding the write lock.
                await to_the_end(self.save(built, release=False))
            elif self.drop_checkpoint:
                await to_the_end(self.checkpoint(built, None))
                self.drop_checkpoint = False

    async def save(self, built: BuiltTeam, *, release: bool) -> None:
        """Write the pending snapshot (there is one: :attr:`pending`), and give the lease back with it if
        ``release``. Hold :attr:`lock` around it."""
        # Taken before writing: a refused snapshot is reported once, never retried blindly at exit.
        state, self._pending = self._pending, None
        assert state is not None
        with self._storing():
            try:
                await self._settled_first()
            except BaseException:
                self._pending = state  # the read-back failed: nothing was sent, the snapshot is still to save
                raise
            self.row_version = await self._deps.store.save(
                self._key, owner=self._owner, expected_version=self.row_version,
                record=save_record(built, state, self._deps.limits), release=release,
            )
        self.drop_checkpoint = self.state_expired = False  # a save clears the row's checkpoint, replaces its state
        self.holds_state = True
        self._deps.metrics.state_saved(self._pending_bytes)

    async def release(self) -> None:
        """Give the lease back; a row left holding nothing goes with it."""
        await self._deps.store.release(self._key, owner=self._owner, discard_empty=not self.holds_state)

    async def give_back(self) -> None:
        """The platform closed with the session open: give the lease back once a write under way has ended; from
        here not even a stopped run's last checkpoint is written.

        Raises:
            StorageError: The store could not take it back (it expires at its TTL).
        """
        async with self.lock:
            self._given_back = True
            # The session may not have read the row yet: then it may hold nothing (the release checks it).
            await self.release()

    @contextlib.contextmanager
    def _storing(self, *, last_word: bool = False) -> Iterator[None]:
        """Around each write of the session to the store: none once its platform has closed under it, and one
        the closing cut short (its connection closed mid-statement: nothing of it landed) says so too. A stopped
        run's last checkpoint (``last_word``) is written before the close takes anything away: it fails as it is."""
        sessions = self._deps.sessions
        if not last_word:
            sessions.check()
        try:
            yield
        except (StorageError, StaleStateVersion) as exc:
            self._unsettled = self._unsettled or isinstance(exc, StoreUnavailable)
            if sessions.closed and not last_word:
                raise sessions.closed_under() from exc
            raise


def _still_expired(row: StoredSession) -> bool:
    """Whether ``row`` holds a state past its expiry, judged as the opening judges it (on the clock the expiry was
    written on, :attr:`~teamstore.state.base.StoredSession.read_at`)."""
    return row.state is not None and row.expires_at is not None and row.expires_at <= (row.read_at or now_utc())
