"""How a ``teamstore keys`` command reports a failed statement: what failed, and what to run again.

    from teamstore.keys.failures import AGAIN, store_failed

    raise store_failed(exc, "read the key-encryption keys", AGAIN) from exc
"""

from __future__ import annotations

from sqlalchemy.exc import SQLAlchemyError

from teamstore.db.engine import describe_failure
from teamstore.errors import StoreUnavailable

ROTATE_AGAIN = "run `teamstore keys rotate` again: it resumes"
RETIRE_AGAIN = "run `teamstore keys retire` again: it goes on where it stopped"
AGAIN = "run the `teamstore keys` command again: it goes on where it stopped"
"""The hint's rerun, for a failure of any ``teamstore keys`` command that resumes where it stopped."""


def store_failed(exc: SQLAlchemyError, action: str, then: str = ROTATE_AGAIN) -> StoreUnavailable:
    """The error for a failed statement of a ``teamstore keys`` command: what failed, and what to run again."""
    return StoreUnavailable(f"could not {action}: {describe_failure(exc)}", hint=f"check the database, then {then}")
