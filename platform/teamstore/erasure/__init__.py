"""The deletion coordinator: erase one user from every teamstore store and prove it.

    from teamstore import erase_user

    receipt = await erase_user("alice@example.com", request_id="req-42", reason="GDPR art. 17")
    print(receipt.status, receipt.stores["transcripts"].counts.versions)

See :class:`DeletionCoordinator` for the engine/store-owning form and docs/erasure.md for the runbook.
"""

from __future__ import annotations

from teamstore.erasure.coordinator import DeletionCoordinator
from teamstore.erasure.receipt import Counts, Receipt, RequestStatus, StepStatus, StoreResult
from teamstore.erasure.request_checks import new_request_id
from teamstore.erasure.settings import ErasureSettings

__all__ = [
    "Counts",
    "DeletionCoordinator",
    "ErasureSettings",
    "Receipt",
    "RequestStatus",
    "StepStatus",
    "StoreResult",
    "new_request_id",
]
