"""What an erasure comes to, with no I/O: each step's verdict from what verification re-found, the request's
status from its steps, and the receipt assembled from them.

    from teamstore.erasure.verdict import receipt_of, request_status, verdict

    now = await database_now(engine)         # teamstore.db.clock: on Postgres the server's
    result = verdict(deleted, left, now)     # left: what an independent re-query found after the delete
    status = request_status({"resume_state": result, ...})
    receipt = receipt_of(row, results, status, steps=["resume_state", ...], knobs=knobs, capture=False,
                         attempts=attempts, now=now)

A request completes only when every store is erased, shredded or ``no_match``; anything left that no hold
explains fails it, and one that found nothing anywhere ends ``no_match`` (the id may be mistyped). What the
receipt says remains elsewhere depends on whether the user's data key was destroyed: only then do backups
become unreadable by the key rotation's bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from teamstore.erasure.desk import is_overdue
from teamstore.erasure.receipt import (
    DONE,
    FINISHED,
    Attempt,
    Counts,
    Receipt,
    RequestStatus,
    StepStatus,
    StoreResult,
    remains_elsewhere,
    subject_hash,
)
from teamstore.erasure.requests import RequestRow
from teamstore.erasure.settings import ErasureSettings
from teamstore.erasure.steps.keys import KeyStep

FINAL = frozenset({StepStatus.ERASED, StepStatus.SHREDDED, StepStatus.NO_MATCH, StepStatus.RETAINED_UNDER_HOLD})


def verdict(deleted: StoreResult, left: Counts, now: datetime) -> StoreResult:
    """A step's status from what it deleted and what verification still found.

    Args:
        deleted: The step's result after deleting (counts of what it found).
        left: What an independent re-query found afterwards.
        now: When it was verified, on the database's clock (:func:`teamstore.db.clock.database_now`).

    Returns:
        ``failed`` if anything not under a hold is left; ``retained_under_hold`` if held objects that can
        still be read are; ``shredded`` if only held objects sealed under the user's destroyed key are;
        ``no_match`` if nothing was ever found; else ``erased``.
    """
    unexpected = left.unexpected
    counts = deleted.counts.model_copy(update={"retained": left.retained, "unreadable": left.unreadable})
    if unexpected > 0:
        return StoreResult(status=StepStatus.FAILED, counts=counts, verified_at=now,
                           detail=f"verification found {unexpected} item(s) left after deletion; "
                           "rerun the same request id")
    # Where they are, when the step says (held versions other passes counted, in other stores).
    where = f"; {deleted.detail}" if deleted.detail else ""
    if left.retained:
        return StoreResult(status=StepStatus.RETAINED_UNDER_HOLD, counts=counts, verified_at=now,
                           detail=f"{left.retained} object version(s) under S3 Object Lock or a legal hold, written "
                           f"before sealing (readable){where}; rerun the same request id once the hold is lifted")
    if left.unreadable:
        return StoreResult(status=StepStatus.SHREDDED, counts=counts, verified_at=now,
                           detail=f"{left.unreadable} object version(s) remain under S3 Object Lock or a legal hold "
                           f"until it ends, sealed under the user's destroyed data key: unreadable by anyone{where}")
    status = StepStatus.NO_MATCH if counts.total == 0 else StepStatus.ERASED
    # The step's word kept (a store it could not list again is named): erased here says nothing of it.
    return StoreResult(status=status, counts=counts, verified_at=now, detail=deleted.detail)


def request_status(results: dict[str, StoreResult]) -> RequestStatus:
    """The status a request ends with, from its steps' results."""
    statuses = {r.status for r in results.values()}
    if StepStatus.FAILED in statuses or not statuses <= FINAL:
        return RequestStatus.FAILED
    if StepStatus.RETAINED_UNDER_HOLD in statuses:
        return RequestStatus.RETAINED_UNDER_HOLD
    if statuses == {StepStatus.NO_MATCH}:
        return RequestStatus.NO_MATCH  # nothing anywhere: said as such, since the id may be mistyped
    return RequestStatus.COMPLETED


def receipt_of(
    row: RequestRow, results: dict[str, StoreResult], status: RequestStatus, subject_key: str | None = None, *,
    steps: Sequence[str], knobs: ErasureSettings, capture: bool, attempts: list[Attempt], now: datetime,
    near: str | None = None, backups_until: datetime | None = None,
) -> Receipt:
    """The receipt of the request ``row`` at ``status``: one result per step (``pending`` for those not run),
    and what remains elsewhere (``capture``: message content is captured). ``now`` is on the database's clock
    (:func:`teamstore.db.clock.database_now`), as the request's due date is: the receipt is completed then, and
    overdue if its due date has passed by then."""
    stores = {name: results.get(name) or StoreResult(status=StepStatus.PENDING) for name in steps}
    done = status in (*FINISHED, RequestStatus.RETAINED_UNDER_HOLD)
    return Receipt(
        request_id=row.request_id, status=status,
        subject_hash=row.subject_hash or subject_hash(subject_key or row.subject_key, knobs),
        received_at=row.received_at, due_at=row.due_at, reason=row.reason, stores=stores,
        completed_at=now if done else None, overdue=is_overdue(status, row.effective_due_at, now),
        remains_elsewhere=remains_elsewhere(row.received_at, knobs, capture,
                                            backups_until if key_destroyed(stores) else None, now=now,
                                            matched=status is not RequestStatus.NO_MATCH,
                                            unlinked=_done(stores, "subject")),
        requested_by=row.requested_by, attempts=attempts, extension=row.extension, near_match=near,
    )


def stored_receipt(row: RequestRow, now: datetime | None = None) -> Receipt:
    """The receipt stored when the request last ended, with the extension recorded since (a failed request
    may be extended after its receipt was written: its rerun stores a new one), and whether it is overdue at
    ``now`` (the database's time, where the caller has it; else this host's)."""
    return Receipt.model_validate(row.receipt).model_copy(update={
        "extension": row.extension, "overdue": is_overdue(row.status, row.effective_due_at, now or datetime.now(UTC))})


def key_destroyed(stores: dict[str, StoreResult]) -> bool:
    """Whether the user's data key is destroyed (in a dry run: would be). Only then do the words in backups
    become unreadable by the rotation bound; a request stopped before the key step, or a user with no key
    (rows from before sealing), has backups readable until they expire."""
    key = stores.get(KeyStep.name)
    return key is not None and key.status in (StepStatus.ERASED, StepStatus.WOULD_ERASE)


def _done(stores: dict[str, StoreResult], step: str) -> bool:
    """Whether ``step`` has removed what it found, or found nothing (in a dry run: would remove it)."""
    result = stores.get(step)
    return result is not None and result.status in (*DONE, StepStatus.WOULD_ERASE)
