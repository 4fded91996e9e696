"""The errors every state backend raises, told the same way: what happened and how to fix it.

    from teamstore.state.failures import check_key, unavailable

    check_key(key)                                  # InvalidIdentifier before any statement
    raise unavailable(exc, "save the session state") from exc
"""

from __future__ import annotations

from teamstore.db.engine import describe_failure, failure_hint
from teamstore.errors import ErasureInProgress, SessionBusy, StaleStateVersion, StoreUnavailable
from teamstore.ids import check_id
from teamstore.state.base import SessionKey, StoredSession


def check_key(key: SessionKey) -> None:
    """Refuse a key no session can have (see :func:`teamstore.ids.check_id`).

    Raises:
        InvalidIdentifier: The user or session id is empty, too long, or holds a character no driver
            can send.
    """
    check_id("user_id", key.user_id)
    check_id("session_id", key.session_id)


def unavailable(exc: BaseException, action: str) -> StoreUnavailable:
    """The error for a database that failed under ``action``: nothing was changed."""
    return StoreUnavailable(
        f"could not {action}: {describe_failure(exc)}",
        hint=f"{failure_hint(exc)}; no state was changed",
    )


def erasure_open() -> ErasureInProgress:
    """The error for a lease refused because an erasure request holds the user."""
    return ErasureInProgress(
        "an erasure request is open for this user; no session may start",
        hint="wait for the erasure to complete; the user can then start over",
    )


def erased_in_flight() -> ErasureInProgress:
    """The error for a save refused because an erasure request opened while the run was in flight."""
    return ErasureInProgress(
        "an erasure request opened for this user while the run was in flight; the state was not saved",
        hint="nothing to fix: the user is being erased",
    )


def busy(wait_seconds: float, crashed: str) -> SessionBusy:
    """The error for a lease still held after ``wait_seconds``; ``crashed`` says how a crashed holder's lease
    ends. The lease does not say whose it is: another worker's, or a session this same process has open (a
    "delete this conversation" beside a request on it), so the message holds for either."""
    return SessionBusy(
        f"session is in use by another request, of this process or another worker (waited {wait_seconds:.1f}s)",
        hint="retry once that request is done (a session is in use until its `async with platform.session(...)` "
        f"block ends), or wait longer: TEAMSTORE_LEASE_TIMEOUT_SECONDS, or platform.session(..., lease_timeout=...) "
        f"for one request; a crashed worker's lease {crashed}",
    )


def landing_unknown(what: str, hint: str | None = None) -> StoreUnavailable:
    """The error for a read-back (:meth:`teamstore.state.base.StateStore.settle`) that gave up on a write still
    running: ``what`` kept it from knowing, so whether the write left unanswered landed is not known;
    ``hint``, what to do about ``what`` before the usual."""
    return StoreUnavailable(
        f"{what}: whether the write left unanswered landed is not known",
        hint=(f"{hint}; " if hint else "") + "check the database's load and pg_stat_activity; the session's next "
        "opening reads whatever its row holds",
    )


def kept_for_restore(row: StoredSession) -> StaleStateVersion:
    """Why a restore without ``replace`` leaves the session's ``row`` as it is."""
    holds = [] if row.state is None else [f"a state saved after this one was set aside (row version {row.row_version})"]
    if row.checkpoint is not None:
        holds.append("an interrupted run's checkpoint (a run that stopped mid-way and can still be continued)")
    return StaleStateVersion(
        f"the session holds {', and '.join(holds)}: nothing was restored",
        hint="continue or abandon the run first ('teamstore run --continue' or '--abandon'), or pass --replace "
        "(replace=True) to quarantine what the session holds (its run recorded as ended, its checkpoint kept "
        "in the quarantine) and restore this state" if row.checkpoint is not None else
        "pass --replace (replace=True) to quarantine that state and restore this one",
    )
