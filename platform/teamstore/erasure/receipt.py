"""The erasure receipt: what was removed where, verified, and what remains elsewhere by design.

    from teamstore.erasure.receipt import Receipt

    receipt = await coordinator.run("alice")
    print(receipt.model_dump_json(indent=2))
    if not receipt.ok:
        raise SystemExit(1)

A receipt never holds the raw user id: only ``subject_hash``, a keyed hash of the pseudonymous subject
key (see :func:`subject_hash`). Per store it says ``erased``, ``shredded`` (what could be deleted is, and
what remains is sealed under the user's destroyed data key: unreadable), ``no_match``, ``retained_under_hold``
(what remains can still be read) or ``failed``, with counts and when verification re-queried the store. It
also says who asked (``requested_by``), who ran each attempt (``attempts``), and the one extension of the due
date if any. A request that found nothing in any store ends ``no_match``, not ``completed``: the id may be
mistyped.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, Field

from teamstore.erasure.settings import ErasureSettings


class StepStatus(StrEnum):
    """Where one store's step stands; the last four are what receipts show."""

    PENDING = "pending"
    ENUMERATED = "enumerated"  # counts recorded before deleting (non-transactional stores)
    DELETED = "deleted"  # deleted, not yet verified
    ERASED = "erased"
    SHREDDED = "shredded"  # deleted what could be; the rest remains sealed under a destroyed key (unreadable)
    NO_MATCH = "no_match"
    RETAINED_UNDER_HOLD = "retained_under_hold"
    FAILED = "failed"
    WOULD_ERASE = "would_erase"  # dry run only


DONE = frozenset({StepStatus.ERASED, StepStatus.SHREDDED, StepStatus.NO_MATCH})


class RequestStatus(StrEnum):
    """Where a request stands."""

    OPEN = "open"
    COMPLETED = "completed"
    NO_MATCH = "no_match"  # finished, and no store held anything for the id: nothing was erased
    RETAINED_UNDER_HOLD = "retained_under_hold"
    FAILED = "failed"
    DRY_RUN = "dry_run"


FINISHED = frozenset({RequestStatus.COMPLETED, RequestStatus.NO_MATCH})
"""A request in one of these is done for good: a rerun only reports it, and it has forgotten the user."""


class Counts(BaseModel):
    """What a step found (and removed): rows, objects, versions, delete markers, bytes; and of what remains,
    what can still be read (``retained``, under a hold) and what cannot (``unreadable``: under a hold too, but
    sealed under the user's destroyed data key)."""

    rows: int = 0
    objects: int = 0
    versions: int = 0
    delete_markers: int = 0
    bytes: int = 0
    retained: int = 0
    unreadable: int = 0

    @property
    def total(self) -> int:
        """Everything found: rows plus object versions plus delete markers."""
        return self.rows + self.versions + self.delete_markers

    @property
    def unexpected(self) -> int:
        """What verification found that neither a hold nor a destroyed key explains."""
        return self.total - self.retained - self.unreadable

    def plus(self, other: Counts) -> Counts:
        """Field-wise sum (a resumed step adds what it found after a committed delete)."""
        return Counts(**{k: getattr(self, k) + getattr(other, k) for k in Counts.model_fields})

    def widest(self, other: Counts) -> Counts:
        """Field-wise maximum (a resumed step re-enumerates a subset of what it recorded)."""
        return Counts(**{k: max(getattr(self, k), getattr(other, k)) for k in Counts.model_fields})


class StoreResult(BaseModel):
    """One store's line in the receipt."""

    status: StepStatus
    counts: Counts = Field(default_factory=Counts)
    verified_at: datetime | None = None
    detail: str | None = None


class Remains(BaseModel):
    """Something teamstore does not delete, by design, and when it goes away on its own."""

    what: str
    until: datetime
    """The first of ``unreadable_by`` and ``expires_at``: kept as receipts have always given it. It is not when
    the place ends for backups with ``unreadable_by``: their ids stay readable until ``expires_at``."""
    linkable: bool
    detail: str
    expires_at: datetime | None = None
    """When the place drops what it holds (the backups expire; the tracing backend's retention ends): until
    then the ids in it stay readable. ``None`` in a receipt made before this field, whose ``until`` it was."""
    unreadable_by: datetime | None = None
    """When the user's words in it become unreadable, the key that opens them destroyed (for backups, the
    rotation bound); ``None`` when nothing in it is sealed under a key the erasure destroyed."""

    def dates(self) -> str:
        """Which date is which, in words (``until D`` for an entry with one, or made before there were two)."""
        if self.unreadable_by is None or self.expires_at is None:
            return f"until {self.until:%Y-%m-%d}"
        return (f"(the user's words in them unreadable by {self.unreadable_by:%Y-%m-%d}; ids readable until "
                f"{self.expires_at:%Y-%m-%d}, when they expire)")


class Attempt(BaseModel):
    """One run of a request: who ran it, when, and the request's status when it ended (``None``: still
    running, or stopped without a verdict, e.g. killed)."""

    operator: str
    started_at: datetime
    ended_at: datetime | None = None
    status: RequestStatus | None = None


class Extension(BaseModel):
    """The one extension of a request's due date (GDPR art. 12(3)), as recorded."""

    by: str
    due_at: datetime
    reason: str
    extended_at: datetime
    operator: str


class Receipt(BaseModel):
    """The stored and printed record of one erasure request; a dry run's has no ``request_id`` (``None``),
    since it stores no request."""

    request_id: str | None
    status: RequestStatus
    subject_hash: str | None
    received_at: datetime
    due_at: datetime
    completed_at: datetime | None = None
    reason: str | None = None
    stores: dict[str, StoreResult]
    remains_elsewhere: list[Remains] = Field(default_factory=list)
    requested_by: str | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    extension: Extension | None = None
    near_match: str | None = None
    """When no store held anything: whether a stored id differs from this one only in letter case, Unicode
    form or surrounding spaces (said in words, never naming the id)."""
    overdue: bool = False
    """Whether the request is past its due date in force (:attr:`effective_due_at`) while open or failed
    (:func:`teamstore.erasure.desk.is_overdue`), judged when the receipt is made or read: it is never stored."""
    logged_as: str | None = None
    """How teamstore's log lines name the request (:func:`teamstore.ids.log_name`): its id if teamstore made it,
    else ``request#`` and a fingerprint of it. Set by the coordinator that hands the receipt out; never stored."""

    @property
    def ok(self) -> bool:
        """True when every store is ``erased``, ``shredded`` or ``no_match``: ``completed``, ``no_match`` or a
        dry run."""
        return self.status in (*FINISHED, RequestStatus.DRY_RUN) and all(
            s.status in DONE or s.status is StepStatus.WOULD_ERASE for s in self.stores.values()
        )

    @property
    def matched(self) -> bool:
        """False when no store held anything for the id (status ``no_match``, or a dry run finding nothing)."""
        return self.status is not RequestStatus.NO_MATCH and any(
            s.status is not StepStatus.NO_MATCH for s in self.stores.values()
        )

    @property
    def effective_due_at(self) -> datetime:
        """The due date in force: the extended one if the request was extended."""
        return self.extension.due_at if self.extension is not None else self.due_at


def subject_hash(subject_key: str | None, knobs: ErasureSettings) -> str | None:
    """A keyed hash of the subject key for receipts (``None`` when the user had no subject).

    The subject key is random and deleted by the erasure, so the hash links to nothing in teamstore;
    it lets an operator holding a span or export with the subject key confirm it belongs to an erased
    subject.

    Args:
        subject_key: The pseudonymous key, or ``None``.
        knobs: ``hash_key`` keys the HMAC; unset, a fixed label does.

    Returns:
        64 hex characters, or ``None``.
    """
    if subject_key is None:
        return None
    key = knobs.hash_key.get_secret_value().encode() if knobs.hash_key else b"teamstore-erasure-receipt"
    return hmac.new(key, subject_key.encode(), hashlib.sha256).hexdigest()


def user_hash(user_id: str, key: str) -> str:
    """A keyed hash of the raw user id, which a request keeps once it has forgotten the id (held under a legal
    hold), so that a rerun under another id is told apart and refused.

    Keyed, never a bare hash: user ids are guessable (an email address), and a plain SHA-256 of one could be
    checked against a list of them by anyone. Under its own label, so it never equals a :func:`subject_hash`
    made under the same key.

    Args:
        user_id: The raw user id, exactly as given.
        key: ``TEAMSTORE_ERASURE_HASH_KEY`` when set, else the database's own id
            (:func:`teamstore.db.identity.database_id`).

    Returns:
        64 hex characters: HMAC-SHA256.
    """
    message = b"teamstore-erasure-user\x00" + user_id.encode("utf-8", "surrogatepass")
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def remains_elsewhere(
    received_at: datetime, knobs: ErasureSettings, content_captured: bool, backups_unreadable_by: datetime | None = None,
    *, now: datetime, matched: bool = True, unlinked: bool = True, planned: bool = False,
) -> list[Remains]:
    """What outlives the erasure by design: database backups and the tracing backend's spans.

    Args:
        received_at: When the request was received (and its fence went up: no span of the user's since).
        knobs: The retention periods.
        content_captured: Whether the operator opted in to message content in spans.
        backups_unreadable_by: When the key-encryption key that wraps the user's data key in backups taken
            before now is destroyed, given rotations on schedule (:func:`teamstore.keys.status.backups_unreadable_by`).
        now: The receipt's making, on the database's clock (on Postgres the server's, which received the request).
        matched: Whether any store held something for the id (``False``: a request that found nothing, whose
            receipt claims no rows and no key).
        unlinked: Whether the subject mapping is gone (or, in a dry run, would go): ``False`` for a request
            that stopped before its ``subject`` step, whose spans the mapping still links to the user.
        planned: A dry run's: what an erasure would leave, said as what it would do, not as done.

    Returns:
        One entry per place, with the date it ages out or becomes unreadable. Backups are counted from now, the
        receipt's making (as the request ends): the user's rows were live until then, so backups taken up to
        then hold them, and the last of those expires its retention after it.
    """
    link = ("and no subject mapping of this id is stored to link one to it" if not matched else
            "unlinkable once the erasure deletes its mapping" if planned else
            "now unlinkable (its mapping is deleted)" if unlinked else
            "which the subject mapping still links to the user until the request completes")
    spans = (
        f"spans (wherever workers export them over OTLP) carry only the pseudonymous subject key, {link}"
        + (
            "; message content WAS captured (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT on): "
            "teamstore cannot delete it from the backend, it ages out with the backend's retention"
            if content_captured
            else "; no message content is exported"
        )
    )
    expire = now + timedelta(days=knobs.backup_retention_days)
    unreadable_by, detail = None, "backups taken before the erasure still hold the rows; they expire, never restored as-is"
    if not matched:
        detail = ("no store holds anything for this id now; backups taken earlier may still hold rows of it "
                  "deleted before this request (an expired session, say) until they expire")
    elif backups_unreadable_by is not None:
        unreadable_by = min(expire, backups_unreadable_by)
        # The dates are the entry's own fields (Remains.dates says them): the detail says why, not when.
        detail = ("backups taken before the erasure still hold the user's rows (ids in the clear, their words "
                  "sealed under the user's data key, wrapped there by the key-encryption key of the day). The erasure "
                  f"{'would destroy' if planned else 'destroyed'} the data key; the key-encryption key is rotated out "
                  "and destroyed by the date the words are unreadable by (key rotation on schedule). The ids, and rows "
                  "written before sealing, stay readable until the backups expire. Never restore one as-is")
    backups = Remains(what="database backups", until=unreadable_by or expire, linkable=True, detail=detail,
                      expires_at=expire, unreadable_by=unreadable_by)
    spans_end = received_at + timedelta(days=knobs.tracing_retention_days)
    return [backups, Remains(what="tracing backend", until=spans_end, linkable=False, detail=spans,
                             expires_at=spans_end)]
