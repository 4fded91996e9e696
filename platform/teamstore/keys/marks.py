"""Each database's mark on the KMS keys it wraps data keys under, so that no database deletes a key another uses.

    from teamstore.keys.marks import mark, refusal

    problem = await mark(ring, engine, kek_id)      # None: marked (or not a KMS key); else why KMS refused
    refused = await refusal(ring, kek_id, ours)     # None: no other database marks it; else why not delete it

Two databases (production and staging) given the same ``TEAMSTORE_KMS_KEY_ID`` wrap their users' data keys
under one KMS key, and each knows only its own keys. So each marks the KMS keys it uses with a tag of its own
(``teamstore-database-<its id>``, :func:`teamstore.keys.kms.mark_of`): when a rotation makes one (CreateKey's
tags), when ``keys rotate --to`` moves to one, when the database records its first, and at every ``keys
status`` (which marks the keys of a database from before the marks). ``keys retire`` reads a retired key's
marks before scheduling its deletion and refuses while another database marks it (:func:`refusal`), and when
the marks cannot be read: a deletion cannot be undone once its window ends.

A mark KMS refuses (the role lacks ``kms:TagResource``) fails no session: it is logged once per key and process,
and ``keys status`` says the key is not marked and what to grant. ``keys status --find-unrecorded`` looks for
the keys marked as this database's that it does not record (:mod:`teamstore.keys.unrecorded_kms`). The local key
file has no marks: a key file shared by two databases is handled by :mod:`teamstore.keys.unrecorded`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from teamstore.db.identity import database_id
from teamstore.errors import ConfigurationError, KeyDeletionRefused, KeyUnavailable
from teamstore.keys.kek import KMS
from teamstore.keys.kms import DELETION_WINDOW_DAYS, mark_of

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from teamstore.keys.ring import KeyRing

log = logging.getLogger("teamstore.keys")
_told: set[str] = set()
"""The KMS keys this process has logged a refused mark for: a worker would otherwise log it at every new user."""


async def mark(ring: KeyRing, engine: AsyncEngine, kek_id: str) -> KeyUnavailable | None:
    """Mark the KMS key ``kek_id`` as this database's; a key of the key file needs no mark.

    Returns:
        ``None`` when it is marked (or is not a KMS key); else why KMS did not mark it (logged once per key and
        process, never raised: a session goes on without the mark).

    Raises:
        StoreUnavailable: The database's id could not be read.
    """
    if not kek_id.startswith(KMS):
        return None
    ours = await database_id(engine)
    try:
        await asyncio.to_thread(ring.kms.mark, kek_id, ours)
    except KeyUnavailable as exc:
        if kek_id not in _told:
            _told.add(kek_id)
            log.warning("the KMS key-encryption key %s is not marked as this database's: %s (fix: %s)",
                        kek_id.removeprefix(KMS), exc.message, exc.hint)
        return exc
    return None


async def with_marks(ring: KeyRing, engine: AsyncEngine, shown: dict[str, Any]) -> dict[str, Any]:
    """``shown`` (:func:`teamstore.keys.status.status`'s) with each KMS key in use marked now as this database's:
    each KEK gets ``marked`` (``True``; ``False``, and why in ``mark_problem``; ``None``: a key file's, or not in
    use), and ``unmarked`` lists the KEK ids KMS did not mark.

    Raises:
        StoreUnavailable: The database's id could not be read.
    """
    keks = []
    for k in shown["keks"]:
        in_use = k["state"] == "current" or (k["state"] == "retired" and k["data_keys"])
        problem = await mark(ring, engine, k["kek_id"]) if in_use and k["kek_id"].startswith(KMS) else None
        marked = None if not (in_use and k["kek_id"].startswith(KMS)) else problem is None
        keks.append({**k, "marked": marked, "mark_problem": None if problem is None else {
            "error": type(problem).__name__, "message": problem.message, "hint": problem.hint}})
    return {**shown, "keks": keks, "unmarked": [k["kek_id"] for k in keks if k["marked"] is False]}


async def refusal(ring: KeyRing, kek_id: str, ours: str) -> KeyDeletionRefused | None:
    """Why the deletion of the retired KEK ``kek_id`` must not be scheduled; ``None`` when it may (a key file's,
    one no other database marks, one KMS no longer has or has scheduled for deletion already).

    Args:
        ring: Where the keys live.
        kek_id: The retired KEK, due for destruction.
        ours: This database's id: its own mark is no reason to keep the key.

    Raises:
        KeyUnavailable: KMS failed otherwise than by refusing to list the tags (rerun ``keys retire``).
    """
    if not kek_id.startswith(KMS):
        return None
    arn = kek_id.removeprefix(KMS)
    try:
        marked = await asyncio.to_thread(ring.kms.marked_by, kek_id)
    except KeyDeletionRefused as exc:  # its tags could not be read: refused, as a deletion is for good
        return exc
    others = sorted((marked or set()) - {ours})
    if not others or await _pending_deletion(ring, kek_id):
        return None
    return _shared(arn, ours, others)


async def _pending_deletion(ring: KeyRing, kek_id: str) -> bool:
    """Whether KMS has the key scheduled for deletion already (by the other database's ``keys retire``, once this
    one's mark was removed): this database, done with it too, refuses nothing by scheduling it again."""
    try:
        _, state = await asyncio.to_thread(ring.kms.describe, kek_id.removeprefix(KMS), "the database")
    except (ConfigurationError, KeyUnavailable):
        return False  # unknown: refuse, as with any doubt
    return state == "PendingDeletion"


def _shared(arn: str, ours: str, others: list[str]) -> KeyDeletionRefused:
    tags = " ".join(mark_of(o) for o in others)
    return KeyDeletionRefused(
        f"the deletion of the retired KMS key-encryption key {arn} was not scheduled: {len(others)} other "
        f"database(s) mark it as one they wrap their users' data keys under ({tags}), and nothing sealed in them "
        f"would open again once its {DELETION_WINDOW_DAYS}-day deletion window ended",
        hint="give each database a KMS key of its own: in each other database, run `teamstore keys rotate` (its data "
        "keys move to a new key) and, once its `teamstore keys status` no longer lists this key as current or holding "
        f"data keys, remove its mark: `aws kms untag-resource --key-id {arn} --tag-keys <its tag>` (`aws kms "
        f"list-resource-tags --key-id {arn}` lists them; a database that no longer uses the key at all, likewise). "
        "The next `teamstore keys retire` then schedules the deletion. This database no longer uses the key: if the "
        "other database's retire is to schedule it instead, remove this one's mark: `aws kms untag-resource "
        f"--key-id {arn} --tag-keys {mark_of(ours)}`",
        kek_id=f"{KMS}{arn}", other_databases=len(others),
    )
