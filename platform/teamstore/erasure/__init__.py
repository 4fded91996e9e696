"""The deletion coordinator: erase one user from every teamstore store and prove it.

    from teamstore.erasure import erase_user

    receipt = await erase_user("alice@example.com", request_id="req-42", reason="GDPR art. 17")
    print(receipt.status, receipt.stores["transcripts"].counts.versions)

See :class:`DeletionCoordinator` for the engine/store-owning form and docs/erasure.md for the runbook.
"""

from __future__ import annotations

from teamstore.erasure.coordinator import DeletionCoordinator, new_request_id
from teamstore.erasure.receipt import Counts, Receipt, RequestStatus, StepStatus, StoreResult
from teamstore.erasure.settings import ErasureSettings
from teamstore.errors import ErasureIncomplete
from teamstore.settings import Settings

__all__ = [
    "Counts",
    "DeletionCoordinator",
    "ErasureSettings",
    "Receipt",
    "RequestStatus",
    "StepStatus",
    "StoreResult",
    "erase_user",
    "new_request_id",
]


async def erase_user(
    user_id: str,
    *,
    request_id: str | None = None,
    reason: str | None = None,
    dry_run: bool = False,
    settings: Settings | None = None,
    check: bool = True,
    requested_by: str | None = None,
    operator: str | None = None,
) -> Receipt:
    """Erase ``user_id`` using the database and transcript store the settings name.

    Args:
        user_id: The raw user id, matched exactly.
        request_id: Idempotency key (rerun it to resume); fresh when omitted.
        reason: Stored with the request.
        dry_run: Enumerate only; no request is stored, and the receipt's ``request_id`` is ``None``.
        settings: Defaults to ``Settings()`` (the environment).
        check: Raise unless every store is ``erased`` or ``no_match``.
        requested_by: Who asked (the data subject, a representative, a ticket), on the receipt.
        operator: Who runs it, on the receipt; ``TEAMSTORE_OPERATOR``, else the OS user, when omitted.

    Returns:
        The receipt; its status is ``no_match`` (and ``ok``) when no store held anything for the id, which
        may be mistyped: ``receipt.near_match`` says whether a near-identical id holds data.

    Raises:
        ErasureIncomplete: ``check`` is on and a store failed or is retained under a hold (the
            receipt is on the exception).
        ErasureConflict: Another erasure of the user is open or running.
        StoreUnavailable: The database is down.
        SchemaNotReady: A production database is not migrated (`teamstore db upgrade`), or the embedded
            one does not exist yet (nothing is stored there: a receipt would only mislead).
    """
    from teamstore.app import App  # the composition root sits above erasure: it builds the engine and stores

    # Every request is about what is stored: on a database that does not exist yet (a mistyped
    # TEAMSTORE_HOME, say), an erasure would find nothing and file a receipt saying so.
    app = App(settings, must_exist=True)
    try:
        await app.ensure_schema()
        receipt = await app.erasure().run(user_id, request_id, reason, dry_run, requested_by=requested_by,
                                          operator=operator)
    finally:
        await app.aclose()
    if check and not receipt.ok:
        raise ErasureIncomplete(
            f"erasure request {receipt.request_id} ended {receipt.status}",
            hint=f"see `teamstore erase status {receipt.request_id}`; rerun the same request id to resume",
            receipt=receipt,
        )
    return receipt
