"""Rotating the key-encryption key and retiring the old ones (the bound this puts on backups, and the keys'
status: :mod:`teamstore.keys.status`).

    from teamstore.keys.rotation import rotate, retire

    report = await rotate(keys, retire_days=7)         # `teamstore keys rotate`: every 21 days (schedule it)
    gone = await retire(keys)                          # `teamstore keys retire`: daily; destroys what is due

A rotation makes a new key-encryption key current (a new entry in the key file, a new KMS key, or the KMS key
``to`` names), marks the old one retired, to be destroyed ``retire_days`` later, and re-wraps every live data
key under the new one. A data key an erasure destroyed is not among them: its wrapped copies in backups stay
wrapped by the old KEK, and once that is destroyed nothing can open them. So a backup taken before an erasure
is unreadable for the erased user at most ``key_rotation_days + key_retire_days`` (and a day, for the daily
``retire``) after it, given rotations on schedule.

A rotation stopped half-way (KMS unreachable, a killed process, Ctrl-C) is resumed by running it again: while
some live data key is still to move to the current KEK, ``rotate`` finishes that one instead of making another.
One stopped between making its new KEK and recording it leaves that KEK unused (nothing names it), and its rerun
makes another; ``retire`` destroys a key file's such entry once it is old enough (:mod:`teamstore.keys.unrecorded`).
A KEK is destroyed only once no data key names it; a damaged row keeps its KEK alive, and is reported (it holds
back no later rotation).

Nothing is written under a KEK once its retirement is committed: a new user's key and a rotation's batch are each
written only while their KEK is current, checked in the writing transaction (on Postgres under an advisory lock a
retirement takes alone, :func:`~teamstore.keys.schema.hold_current`). So a rotation's last batch read finds every key still to
move, no straggler makes the next rotation take itself for an unfinished one, and ``retire``'s count of the keys
under a KEK cannot be overtaken by a write before it destroys the KEK. A rotation whose KEK another rotation
retired goes on under that one's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.clock import database_now, shared_later, shared_now, utc
from teamstore.db.identity import database_id
from teamstore.errors import (
    ConfigurationError,
    DataKeyDamaged,
    KeyDeletionRefused,
    KeyDestroyed,
    KeyFileInDoubt,
    KeyUnavailable,
    StoreUnavailable,
    TeamstoreError,
)
from teamstore.keys.failures import AGAIN, RETIRE_AGAIN, store_failed
from teamstore.keys.kek import KMS
from teamstore.keys.kms import DELETION_WINDOW_DAYS
from teamstore.keys.marks import mark, refusal
from teamstore.keys.schema import data_keys, hold_current, is_current, key_encryption_keys, retiring
from teamstore.keys.service import KeyService
from teamstore.keys.unrecorded import Unrecorded, retire_unrecorded

BATCH = 500
RETIRE_SLACK = timedelta(days=1)
"""``teamstore keys retire`` runs daily: a KEK due for destruction may wait that long for it."""
OnBatch = Callable[[], Awaitable[None]]
Watch = Callable[["RotationReport"], None]


@dataclass
class RotationReport:
    """What one rotation did."""

    kek_id: str
    created: bool
    rewrapped: int = 0
    gone: int = 0
    """Data keys deleted (their users erased) between being read and being re-wrapped."""
    damaged: list[str] = field(default_factory=list)
    """Key ids of rows their KEK did not open: left as they are, their KEK kept."""
    unusable: list[str] = field(default_factory=list)
    """Key ids of rows under a KEK that is disabled, scheduled for deletion or destroyed: left as they are."""
    destroyed: list[str] = field(default_factory=list)
    already_deleted: list[str] = field(default_factory=list)
    """Of ``destroyed``: KMS keys KMS no longer had, recorded as destroyed."""
    retire_error: TeamstoreError | None = None
    """Why the :func:`retire` run after the rotation failed: the rotation is done, ``teamstore keys retire`` is to
    be run again once the cause is fixed."""
    step: str = "finishing"
    """Where the rotation is, for a ``watch`` of :func:`rotate` that reports a rotation stopped before it returns:
    ``finishing`` one stopped earlier, ``making`` a new KEK, ``recording`` it (``kek_id`` is the new KEK, which
    may not be recorded yet; ``created``: made for this rotation, not named by ``to``), ``rewrapping`` under
    it, ``retiring`` the KEKs due, ``done`` (returned; ``retire_error`` says whether the retire failed)."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {"kek_id": self.kek_id, "created": self.created, "rewrapped": self.rewrapped, "gone": self.gone,
                "damaged": self.damaged, "unusable": self.unusable, "destroyed": self.destroyed, "already_deleted": self.already_deleted,
                "retire_error": None if self.retire_error is None else {
                    "error": type(self.retire_error).__name__, "message": self.retire_error.message,
                    "hint": self.retire_error.hint, "rerun": "teamstore keys retire"}}


async def rotate(keys: KeyService, *, to: str | None = None, retire_days: int = 7, batch: int = BATCH,
                 on_batch: OnBatch | None = None, watch: Watch | None = None) -> RotationReport:
    """Make a new key-encryption key current and re-wrap every live data key under it; then :func:`retire`.

    Args:
        keys: The key service (its engine and ring).
        to: A KMS key (id, ARN or alias) to rotate to; by default a new key like the current one (a new key
            file entry, or a KMS key made with ``kms:CreateKey``).
        retire_days: The old KEK is destroyed this many days from now, by ``retire`` (a backup of the days
            before can be restored until then).
        batch: Data keys read and re-wrapped at a time.
        on_batch: Awaited after each batch is read, before it is re-wrapped (tests race an erasure here).
        watch: Given each report the rotation keeps, as it starts one; the report is updated in place as data
            keys are re-wrapped (``rewrapped``) and the rotation moves on (``step``), so what was done is known
            if the rotation is stopped before it returns (Ctrl-C).

    Returns:
        The report; when the rotation is done but the :func:`retire` after it failed, its ``retire_error``.

    Raises:
        ConfigurationError: ``to`` is empty or blank, or names no KMS key this process may use (nothing changed).
        KeyUnavailable: A KEK could not be used (KMS unreachable): rerun to resume; what was re-wrapped stays.
        KeyFileInDoubt: The new KEK went into the local key file (or a new database's first one did), but a
            folder holding it could not be flushed: the database records none of it; rerun (a rotation's key is
            then an unused entry that ``keys retire`` destroys).
        StoreUnavailable: The database failed; rerun to resume.
    """
    if to is not None and not to.strip():
        raise ConfigurationError("--to names no KMS key (it is empty). Nothing was changed",
                                 hint="give --to a KMS key's id, ARN or alias, or leave --to out to rotate to a new "
                                 "key like the current one")
    target = await asyncio.to_thread(keys.ring.kms.resolve, to, "--to") if to is not None else None
    current = await keys.current_kek(moving_to=target)
    watch = watch or _unwatched
    report = RotationReport(current, False)
    watch(report)
    if target in (None, current):
        # Finish a rotation that stopped half-way rather than begin another. What this moves says whether
        # one had stopped: a damaged row is never moved, and must not hold back every rotation after it.
        await _rewrap_stopping(keys, current, report, batch, on_batch)
    if not (report.rewrapped or report.gone) and target != current:
        # Nothing is begun until the new KEK is current: a failure before that is said as it is.
        report.step = "making"
        report = await _begin(keys, current, target, retire_days, watch)
        await _rewrap_stopping(keys, report.kek_id, report, batch, on_batch)
    report.step = "retiring"
    try:
        retired = await retire(keys)
    except TeamstoreError as exc:
        report.retire_error = exc  # the rotation stands: only the retire is to be run again
        report.step = "done"
        return report
    report.destroyed, report.already_deleted = retired.destroyed, retired.already_deleted
    if retired.refused:
        report.retire_error = retired.refused[0]  # the rotation stands; `keys retire` says the rest
    report.step = "done"
    return report


def _unwatched(_report: RotationReport) -> None:
    return None


async def _rewrap_stopping(keys: KeyService, current: str, report: RotationReport, batch: int,
                           on_batch: OnBatch | None) -> None:
    """:func:`_rewrap_all` in a rotation under way: a KEK that cannot be used stops it, to be finished by a rerun."""
    try:
        await _rewrap_all(keys, current, report, batch, on_batch)
    except KeyUnavailable as exc:
        raise KeyUnavailable(
            f"the rotation stopped after re-wrapping {report.rewrapped} data key(s): {exc.message}",
            hint=f"{exc.hint or 'fix the cause'}; then run `teamstore keys rotate` again: it finishes this rotation",
        ) from exc


async def _begin(keys: KeyService, current: str, target: str | None, retire_days: int, watch: Watch) -> RotationReport:
    """Make a new KEK (or ``target``) current in ``current``'s place; if another rotation replaced ``current``
    first, join that one instead (a new KEK made here for nothing is destroyed again)."""
    # The current KEK must be where this process looks (a key file that is not the database's would take the
    # new key, and workers given the right file could not use it).
    await asyncio.to_thread(keys.ring.get, current)
    if target is None:
        new = await asyncio.to_thread(keys.ring.create, None, current, await database_id(keys.engine))
    else:
        new = target
    watch(RotationReport(new, target is None, step="recording"))
    try:
        made_current = await _make_current(keys.engine, current, new, retire_days)
    except StoreUnavailable as exc:
        if target is None:
            raise await _unrecorded(keys, new, exc) from exc
        raise
    if made_current:
        if target is not None:
            await mark(keys.ring, keys.engine, new)  # a key made here was made marked
        report = RotationReport(new, True, step="rewrapping")
    else:
        if target is None:
            await asyncio.to_thread(keys.ring.destroy, new)
        report = RotationReport(await keys.current_kek(), False, step="rewrapping")
    watch(report)
    return report


async def _unrecorded(keys: KeyService, new: str, exc: StoreUnavailable) -> StoreUnavailable:
    """The error for a new KEK the database refused to record: destroyed again (an unused KMS key costs money
    every month), or, if that fails too, named so that the operator can."""
    try:
        await asyncio.to_thread(keys.ring.destroy, new)
    except KeyFileInDoubt:
        return StoreUnavailable(f"{exc.message}; the key-encryption key made for the rotation was removed from the "
                                "key file again, but its folder could not be flushed: a power loss may bring it back, "
                                "as an unused entry, which `teamstore keys retire` flushes away (or destroys once it "
                                "is TEAMSTORE_KEY_RETIRE_DAYS old)", hint=exc.hint)
    except TeamstoreError:
        if not new.startswith(KMS):
            return StoreUnavailable(f"{exc.message}; the key file keeps an unused entry made for the rotation, "
                                    "which `teamstore keys retire` destroys once it is TEAMSTORE_KEY_RETIRE_DAYS old",
                                    hint=exc.hint)
        arn = new.removeprefix(KMS)
        return StoreUnavailable(
            f"{exc.message}; the KMS key made for the rotation is unused and could not be destroyed: {arn}",
            hint=f"{exc.hint}; and delete that key yourself: `aws kms schedule-key-deletion --key-id {arn} "
            f"--pending-window-in-days {DELETION_WINDOW_DAYS}`",
        )
    return StoreUnavailable(f"{exc.message}; the key-encryption key made for the rotation was destroyed again "
                            "(unused)", hint=exc.hint)


async def _make_current(engine: AsyncEngine, current: str, kek_id: str, retire_days: int) -> bool:
    """Retire ``current`` (destroyed ``retire_days`` from now) and record ``kek_id`` as current, at once; False,
    and nothing changed, when ``current`` is current no longer (another rotation came first). The times are the
    database's (on Postgres the server's), which :func:`retire` judges them by."""
    dialect, k = engine.dialect.name, key_encryption_keys.c
    now = shared_now(dialect)
    try:
        async with engine.begin() as conn:
            await retiring(conn)
            retired = await conn.execute(update(key_encryption_keys).where(
                k.retired_at.is_(None), k.kek_id == current).values(
                retired_at=now, destroy_after=shared_later(dialect, timedelta(days=retire_days))))
            if not retired.rowcount:
                return False  # nothing written
            used = (await conn.execute(select(k.retired_at, k.destroyed_at).where(k.kek_id == kek_id))).first()
            if used is not None:
                raise _used_before(kek_id, utc(used[0]), utc(used[1]))  # the retirement above rolls back
            await conn.execute(insert(key_encryption_keys).values(kek_id=kek_id, created_at=now))
    except SQLAlchemyError as exc:
        raise store_failed(exc, "record the new key-encryption key") from exc
    return True


def _used_before(kek_id: str, retired_at: datetime | None, destroyed_at: datetime | None) -> ConfigurationError:
    """The error for ``--to`` a KMS key this database retired: current again, it would not be destroyed when
    erasure receipts say backups under it become unreadable."""
    when = (f"destroyed on {destroyed_at:%Y-%m-%d}" if destroyed_at is not None else
            f"retired on {retired_at:%Y-%m-%d}" if retired_at is not None else "retired")
    return ConfigurationError(
        f"--to names a KMS key this database used before and {when} ({kek_id}): a retired key is never made "
        "current again, or backups under it would stay readable past the date erasure receipts give. Nothing "
        "was changed",
        hint="give --to a KMS key this database has never used, or leave --to out to rotate to a new key like the "
        "current one",
    )


_Row = tuple[str, str, str, bytes]
"""A data key as read: user id, key id, the KEK id that wraps it, the wrapped key."""


async def _rewrap_all(keys: KeyService, current: str, report: RotationReport, batch: int,
                      on_batch: OnBatch | None) -> None:
    """Re-wrap every data key not under ``current``, a batch at a time (by user id, so each is read once): each
    batch unwrapped and wrapped again on one thread, then stored in one transaction."""
    after = ""
    while rows := await _batch(keys.engine, current, after, batch):
        if on_batch is not None:
            await on_batch()
        if await _rewrap_batch(keys, current, report, rows):
            after = rows[-1][0]
        else:
            # Another rotation retired ``current`` meanwhile: nothing of this batch was stored under it. Go on
            # under the KEK that one made current, from the start (it moves the same keys; each is stored once).
            current = report.kek_id = await keys.current_kek()
            after = ""


async def _batch(engine: AsyncEngine, current: str, after: str, size: int) -> list[_Row]:
    d = data_keys.c
    query = (select(d.user_id, d.key_id, d.kek_id, d.wrapped).where(d.kek_id != current, d.user_id > after)
             .order_by(d.user_id).limit(size))
    try:
        async with engine.connect() as conn:
            return [(str(r[0]), str(r[1]), str(r[2]), bytes(r[3])) for r in (await conn.execute(query)).all()]
    except SQLAlchemyError as exc:
        raise store_failed(exc, "read the data keys to re-wrap", AGAIN) from exc


@dataclass
class _Rewrapped:
    """A batch wrapped again under the new KEK: each row as read with its new wrapping; the rows left as they are;
    what stopped the batch short (the rows before it are kept, to be stored)."""

    moved: list[tuple[_Row, bytes]] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    unusable: list[str] = field(default_factory=list)
    stopped: KeyUnavailable | ConfigurationError | None = None


def _rewrap_on_thread(keys: KeyService, current: str, rows: list[_Row]) -> _Rewrapped:
    """Unwrap each of ``rows`` and wrap it under ``current`` (blocking: the key file, or a KMS request each)."""
    done = _Rewrapped()
    for row in rows:
        _, key_id, kek_id, wrapped = row
        try:
            rewrapped = keys.ring.get(current).wrap(keys.ring.get(kek_id).unwrap(wrapped, key_id), key_id)
            done.moved.append((row, rewrapped))
        except DataKeyDamaged:
            done.damaged.append(key_id)
        except KeyDestroyed:
            done.unusable.append(key_id)  # its KEK disabled (it may come back) or deleted: nothing to restore
        except (KeyUnavailable, ConfigurationError) as exc:
            done.stopped = exc
            break
    return done


async def _rewrap_batch(keys: KeyService, current: str, report: RotationReport, rows: list[_Row]) -> bool:
    """Re-wrap ``rows`` and store them; the report counts what was stored. A KEK that could not be used raises once
    what was re-wrapped before it is stored. False, and nothing stored, when ``current`` is current no longer."""
    done = await asyncio.to_thread(_rewrap_on_thread, keys, current, rows)
    report.damaged += done.damaged
    report.unusable += done.unusable
    if done.moved:
        # A stop (Ctrl-C, the CLI's SIGTERM or SIGHUP) cancels the rotation: a transaction under way is waited
        # for, so the report says whether it was stored (cancelled during its commit, it could be stored with the
        # report saying it was not).
        storing = asyncio.ensure_future(_store(keys.engine, current, done.moved))
        try:
            counts = await asyncio.shield(storing)
        except asyncio.CancelledError:
            _count(report, await storing)
            raise
        if counts is None:
            return False
        _count(report, counts)
    if done.stopped is not None:
        raise done.stopped
    return True


def _count(report: RotationReport, counts: tuple[int, int] | None) -> None:
    if counts is not None:
        report.rewrapped, report.gone = report.rewrapped + counts[0], report.gone + counts[1]


async def _store(engine: AsyncEngine, current: str, moved: list[tuple[_Row, bytes]]) -> tuple[int, int] | None:
    """Store re-wrapped data keys in one transaction; how many were stored, and how many were gone (deleted by an
    erasure after being read; a key neither stored nor gone was moved by another rotation running meanwhile).
    ``None``, and nothing stored, when another rotation has retired ``current``: a key stored under a retired KEK
    could land after ``retire`` counted none left under it, and be lost with it."""
    d = data_keys.c
    # Each over the row as read only: one an erasure deleted meanwhile stays deleted (no upsert can bring it back).
    stmt = update(data_keys).where(d.user_id == bindparam("row_user"), d.key_id == bindparam("row_key"),
                                   d.kek_id == bindparam("row_kek"), is_current(current)).values(
        kek_id=current, wrapped=bindparam("rewrapped"), wrapped_at=datetime.now(UTC))
    params = [{"row_user": user_id, "row_key": key_id, "row_kek": kek_id, "rewrapped": rewrapped}
              for (user_id, key_id, kek_id, _), rewrapped in moved]
    try:
        async with engine.begin() as conn:
            if not await hold_current(conn, current):
                return None
            stored = (await conn.execute(stmt, params)).rowcount
            if stored == len(moved):
                return stored, 0
            if not stored and not await conn.scalar(select(is_current(current))):
                return None  # SQLite: retired before this transaction wrote
            key_ids = [row[1] for row, _ in moved]
            left = await conn.scalar(select(func.count()).select_from(data_keys).where(d.key_id.in_(key_ids)))
    except SQLAlchemyError as exc:
        raise store_failed(exc, "store re-wrapped data keys", AGAIN) from exc
    return stored, len(moved) - int(left or 0)


@dataclass
class Retirement:
    """What one :func:`retire` destroyed."""

    destroyed: list[str] = field(default_factory=list)
    already_deleted: list[str] = field(default_factory=list)
    """Of ``destroyed``: KMS keys KMS no longer had (deleted by hand, or after their window), recorded as destroyed."""
    kept: list[dict[str, Any]] = field(default_factory=list)
    """The KEKs due that data keys still name (damaged rows, or under a KEK KMS will not use), kept: backups under
    them stay readable past the bound. Each as ``status`` gives ``kept_past_destroy``: ``kek_id``, ``data_keys``,
    ``destroy_after``."""
    next_destroy_after: datetime | None = None
    """When the next retired KEK not yet due becomes due (``None`` when none waits)."""
    unrecorded_destroyed: list[str] = field(default_factory=list)
    """Keys of the key file the database does not record (made after the backup it was restored from), destroyed
    now (:mod:`teamstore.keys.unrecorded`)."""
    unrecorded_kept: list[Unrecorded] = field(default_factory=list)
    """Those not yet due, each with when it will be."""
    refused: list[KeyDeletionRefused] = field(default_factory=list)
    """The KMS keys due whose deletion was not scheduled: another database marks them, or their marks could not
    be read (:mod:`teamstore.keys.marks`). They stay retired, to be tried again by the next ``retire``."""


async def retire(keys: KeyService, now: datetime | None = None, retire_days: int | None = None) -> Retirement:
    """Destroy every retired key-encryption key whose time has come, unless a data key still names it.

    A data key still under it (written by a worker that read the old KEK as current just before a rotation)
    is re-wrapped first; a damaged one keeps it alive. A KMS key another database marks as one it wraps data keys
    under is kept too, and so is one whose marks KMS will not list (``refused``); the other keys due go on. A KMS key KMS no longer has is beyond use already: it is
    recorded as destroyed, once KMS has shown it still knows the current one (so the ``AWS_*`` variables name
    the database's account and region).

    With ``retire_days``, it then destroys the key file's keys the database does not record once they are that
    old (:func:`~teamstore.keys.unrecorded.retire_unrecorded`): ``teamstore keys retire`` does, the retire a
    rotation runs at its end does not.

    Args:
        keys: The key service.
        now: The time to judge what is due against (tests); by default now on the database's clock (on Postgres
            the server's, on which rotations write when a KEK is due), whatever this host's says.
        retire_days: ``TEAMSTORE_KEY_RETIRE_DAYS``, to destroy the unrecorded keys that old; ``None`` leaves them.

    Returns:
        The KEK ids destroyed now, which of them KMS had deleted already, the KEKs due that were kept (data keys
        name them, or their deletion was refused), when the next one becomes due, and the unrecorded keys
        destroyed and kept.

    Raises:
        KeyUnavailable: A KEK could not be used or destroyed (rerun: it goes on where it stopped).
        KeyFileInDoubt: A local KEK's material went from the key file, but its folder could not be flushed: the
            database does not record it destroyed; rerun (it flushes the file first).
        StoreUnavailable: The database failed.
    """
    now = now or await database_now(keys.engine)
    k = key_encryption_keys.c
    retired_query = select(k.kek_id, k.destroy_after).where(k.retired_at.is_not(None), k.destroyed_at.is_(None),
                                                            k.destroy_after.is_not(None)).order_by(k.destroy_after)
    try:
        async with keys.engine.connect() as conn:
            retired = [(str(r[0]), utc(r[1])) for r in (await conn.execute(retired_query)).all()]
    except SQLAlchemyError as exc:
        raise store_failed(exc, "read the retired key-encryption keys", RETIRE_AGAIN) from exc
    due = [(kek_id, at) for kek_id, at in retired if at is not None and at <= now]
    done = Retirement(next_destroy_after=next((at for _, at in retired if at is not None and at > now), None))
    ours = await database_id(keys.engine) if any(kek_id.startswith(KMS) for kek_id, _ in due) else ""
    for kek_id, destroy_after in due:
        if left := await _still_named(keys, kek_id):
            done.kept.append({"kek_id": kek_id, "data_keys": left, "destroy_after": destroy_after})
            continue
        if (refused := await refusal(keys.ring, kek_id, ours)) is not None:
            done.refused.append(refused)  # another database may wrap its data keys under it: the others go on
            continue
        if not await asyncio.to_thread(keys.ring.destroy, kek_id):
            await _kms_knows_the_current_key(keys)
            done.already_deleted.append(kek_id)
        try:
            async with keys.engine.begin() as conn:
                await conn.execute(update(key_encryption_keys).where(k.kek_id == kek_id).values(destroyed_at=now))
        except SQLAlchemyError as exc:
            raise store_failed(exc, "record a destroyed key-encryption key", RETIRE_AGAIN) from exc
        done.destroyed.append(kek_id)
    if retire_days is not None:
        done.unrecorded_destroyed, done.unrecorded_kept = await retire_unrecorded(keys, retire_days)
    return done


async def _kms_knows_the_current_key(keys: KeyService) -> None:
    """Raise unless KMS has the current KEK: a retired key it lacks too may live on in another account or region."""
    current = await keys.current_kek()
    if not current.startswith(KMS):
        return
    try:
        await asyncio.to_thread(keys.ring.kms.describe, current.removeprefix(KMS), "the database")
    except ConfigurationError as exc:
        raise KeyUnavailable(
            f"a retired key-encryption key is not in KMS, and KMS does not show the current one either: {exc.message}. "
            "Nothing was recorded",
            hint="check that the AWS_* variables name the database's account and region (AWS_PROFILE, "
            "AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_KMS) and that this role has kms:DescribeKey on its keys; then run "
            "`teamstore keys retire` again",
        ) from None


async def _still_named(keys: KeyService, kek_id: str) -> int:
    """Re-wrap the data keys still under ``kek_id``; how many are left under it (damaged, or its KEK unusable)."""
    current = await keys.current_kek()
    report = RotationReport(current, False)
    await _rewrap_all(keys, current, report, BATCH, None)
    try:
        async with keys.engine.connect() as conn:
            left = await conn.scalar(select(func.count()).select_from(data_keys).where(data_keys.c.kek_id == kek_id))
    except SQLAlchemyError as exc:
        raise store_failed(exc, "count the data keys under a retired key-encryption key", RETIRE_AGAIN) from exc
    return int(left or 0)
