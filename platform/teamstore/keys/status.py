"""The keys' status, and the bound rotations put on backups: how long a backup taken before an erasure stays
readable for the erased user.

    from teamstore.keys.status import backups_unreadable_by, status

    when = await backups_unreadable_by(keys.engine, settings)
    report = await status(keys, settings)              # `teamstore keys status`, and the health check's

Rotating and retiring are :mod:`teamstore.keys.rotation`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import exists, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.db.clock import database_now, utc
from teamstore.errors import ConfigurationError, EncryptionError
from teamstore.keys.failures import AGAIN, store_failed
from teamstore.keys.rotation import RETIRE_SLACK
from teamstore.keys.schema import data_keys, key_encryption_keys
from teamstore.keys.service import KeyService
from teamstore.keys.unrecorded import unrecorded
from teamstore.settings import Settings


async def backups_unreadable_by(
    engine: AsyncEngine, settings: Settings, now: datetime | None = None
) -> datetime | None:
    """The latest time a backup taken now stays readable for a user erased now, given rotations on schedule;
    ``None`` when no schedule bounds it: a retired KEK is kept past its destroy date because data keys still
    name it (a row a rotation could not move: ``keys status`` lists it in ``kept_past_destroy``), and a backup
    from before its rotation holds data keys it still opens, the erased user's among them, until it expires.

    The user's data key in such a backup is wrapped by the KEK current now (or an older one). That one is
    replaced at the next rotation (due ``key_rotation_days`` after it was made, or now if overdue) and destroyed
    ``key_retire_days`` after that, by the next daily ``teamstore keys retire``.

    Args:
        engine: The database the key tables are in.
        settings: The rotation and retirement periods.
        now: The time to reckon from; by default the database's (:func:`~teamstore.db.clock.database_now`), on
            which rotations and retirements are written.

    Raises:
        StoreUnavailable: The database failed.
    """
    now = now or await database_now(engine)
    k = key_encryption_keys.c
    still_named = exists().where(data_keys.c.kek_id == k.kek_id)  # what keeps ``keys retire`` from destroying it
    kept = select(exists().where(k.retired_at.is_not(None), k.destroyed_at.is_(None), k.destroy_after <= now,
                                 still_named))
    try:
        async with engine.connect() as conn:
            made = await conn.scalar(select(k.created_at).where(k.retired_at.is_(None)).order_by(
                k.created_at.desc()).limit(1))
            if await conn.scalar(kept):
                return None
    except SQLAlchemyError as exc:
        raise store_failed(exc, "read the current key-encryption key", AGAIN) from exc
    made = utc(made) or now
    next_rotation = max(made + timedelta(days=settings.key_rotation_days), now)
    return next_rotation + timedelta(days=settings.key_retire_days) + RETIRE_SLACK


async def status(keys: KeyService, settings: Settings) -> dict[str, Any]:
    """Every key-encryption key with its state and how many data keys it wraps; when the next rotation is due;
    the retired ones past their destroy date that data keys still name (``kept_past_destroy``); the data keys
    still under retired ones not yet due, a rotation unfinished (``rotation_unfinished``, else ``None``); the
    key file's keys the database does not record (``unrecorded``: after a restore, each with when ``keys retire``
    destroys it; ``None``, and why in ``unrecorded_problem``, when the key file could not be read).

    Raises:
        StoreUnavailable: The database failed.
    """
    k, d = key_encryption_keys.c, data_keys.c
    counted = select(d.kek_id, func.count().label("n")).group_by(d.kek_id).subquery()
    query = (select(k.kek_id, k.created_at, k.retired_at, k.destroy_after, k.destroyed_at, counted.c.n)
             .outerjoin_from(key_encryption_keys, counted, counted.c.kek_id == k.kek_id).order_by(k.created_at))
    try:
        async with keys.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
    except SQLAlchemyError as exc:
        raise store_failed(exc, "read the key-encryption keys", AGAIN) from exc
    keks = [{"kek_id": r[0], "state": _state(r), "created_at": utc(r[1]), "retired_at": utc(r[2]),
             "destroy_after": utc(r[3]), "destroyed_at": utc(r[4]), "data_keys": int(r[5] or 0)} for r in rows]
    # On the clock rotations and retirements write (Postgres: the server's), not this host's.
    current, now = next((x for x in keks if x["state"] == "current"), None), await database_now(keys.engine)
    due = current["created_at"] + timedelta(days=settings.key_rotation_days) if current else None
    # A row ``retire`` could not move (damaged, or under a KEK KMS will not use) keeps its KEK past the bound.
    kept = [{"kek_id": x["kek_id"], "data_keys": x["data_keys"], "destroy_after": x["destroy_after"]} for x in keks
            if x["state"] == "retired" and x["data_keys"] and x["destroy_after"] and x["destroy_after"] <= now]
    return {"keks": keks, "rotation_due": due, "overdue": bool(due and due < now),
            "backups_unreadable_by": await backups_unreadable_by(keys.engine, settings, now), "kept_past_destroy": kept,
            "rotation_unfinished": _unfinished(keks, now), **await _unrecorded(keys, settings.key_retire_days)}


async def _unrecorded(keys: KeyService, retire_days: int) -> dict[str, Any]:
    """``unrecorded`` and ``unrecorded_problem``: a key file that cannot be read is said so, not taken for one
    holding nothing unrecorded (the health check says it too, for a KEK in use)."""
    try:
        found = await unrecorded(keys, retire_days)
    except (EncryptionError, ConfigurationError) as exc:
        return {"unrecorded": None, "unrecorded_problem": {"error": type(exc).__name__, "message": exc.message,
                                                           "hint": exc.hint}}
    return {"unrecorded": [u.as_dict() for u in found], "unrecorded_problem": None}


def _unfinished(keks: list[dict[str, Any]], now: datetime) -> dict[str, Any] | None:
    """The data keys a rotation has yet to move: under retired KEKs not yet due (``kept_past_destroy`` names the
    ones past due). Rows a rotation could not move (damaged, or under a KEK KMS will not use) count too."""
    under = [x for x in keks if x["state"] == "retired" and x["data_keys"]
             and not (x["destroy_after"] and x["destroy_after"] <= now)]
    if not under:
        return None
    return {"data_keys": sum(x["data_keys"] for x in under), "kek_ids": [x["kek_id"] for x in under],
            "rerun": "teamstore keys rotate"}


def _state(row: Any) -> str:
    if row[4] is not None:
        return "destroyed"
    return "retired" if row[2] is not None else "current"
