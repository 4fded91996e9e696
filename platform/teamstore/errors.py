"""One exception hierarchy for the whole of teamstore.

Every backend raises these, never a bare ``ValueError``; every message says what
happened and how to fix it.

    from teamstore.errors import TeamstoreError, SessionBusy

    try:
        async with platform.session("u1", "s1", team="support_triage") as s:
            await s.run("hello")
    except SessionBusy as exc:
        print(exc.hint)
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from config_registry.errors import (
    DefinitionInvalid,
    ExtensionInvalid,
    HintedError,
    RegistryConflict,
    RegistryCorrupt,
    RegistryError,
    RegistryNotFound,
    SecretUnavailable,
    UnknownTeam,
    UnknownVersion,
)

__all__ = [
    "DefinitionInvalid",
    "ExtensionInvalid",
    "RegistryConflict",
    "RegistryCorrupt",
    "RegistryError",
    "RegistryNotFound",
    "SecretUnavailable",
    "TeamstoreError",
    "UnknownTeam",
    "UnknownVersion",
]

TeamstoreError = HintedError
"""Base of every error teamstore raises on purpose: a message saying what happened, a hint how to fix it.

It is the registry's root (``config_registry.errors.HintedError``) under teamstore's name, so that the
registry's errors (``UnknownTeam``, ``DefinitionInvalid``, ...) and the runtime's are one hierarchy: the
registry knows nothing of teamstore, and Python's ``except`` follows only real base classes, so the root
has to be the registry's own class rather than a subclass of it.
"""


# --- configuration -----------------------------------------------------------------------------------------
class ConfigurationError(TeamstoreError):
    """Settings or environment are missing or inconsistent."""


def refused_value(*names: str, takes: str) -> str:
    """The message for a value an option or argument does not take: it names the option and what it takes, never
    the value. A user's id or words typed in the wrong place land in an option's value, and the error line may be
    logged or seen by others.

        raise ConfigurationError(refused_value("--every", takes="one of day, week, month or year"), hint=...)

    Args:
        names: The option's flags (``--since``), or an argument's placeholder (``MODE``).
        takes: What it takes: its allowed values, or its format.

    Returns:
        ``Invalid value for '--every': it takes one of ... (the value is not repeated here: ...)``.
    """
    named = " / ".join(f"'{name}'" for name in names)
    return f"Invalid value for {named}: it takes {takes} (the value is not repeated here: it may be a user's words)"


class OptionValueMissing(ConfigurationError):
    """A command-line option got no value of its own: the next word, an option, would have been taken as it
    (``--user $U --json`` with ``U`` unset or empty). Refused before the command reads or stores anything."""


class MissingExtra(ConfigurationError):
    """An optional backend needs a package that is not installed."""

    def __init__(self, feature: str, extra: str, package: str) -> None:
        super().__init__(
            f"{feature} needs the '{package}' package, which is not installed",
            hint=f"pip install 'teamstore[{extra}]'",
        )
        self.extra = extra


class ContextBoundInvalid(ConfigurationError, ValueError):
    """A bounded model context was given sizes it could not honour (it would drop the newest tool exchange).

    Also a ``ValueError``, as AutoGen's own contexts raise for sizes they refuse.
    """


class InvalidIdentifier(TeamstoreError):
    """A user id, session id or request id is empty, too long or contains forbidden characters."""


class InvalidCursor(TeamstoreError):
    """A listing's cursor (``sessions list --after``) is not one a listing gave: cut short, altered, or made by
    hand. Its message says what is wrong with it, never the cursor (it holds a user's and a session's ids)."""


# --- storage -----------------------------------------------------------------------------------------------
class StorageError(TeamstoreError):
    """A store could not be read or written (database down, bucket missing, access denied)."""


class StoreUnavailable(StorageError):
    """The backing service did not answer."""


class SchemaNotReady(StorageError):
    """The database has not been migrated to the version this code needs."""


# --- encryption --------------------------------------------------------------------------------------------
class EncryptionError(StorageError):
    """A user's payload could not be sealed or opened under their data key (:mod:`teamstore.keys`). Nothing
    is ever written unsealed instead."""


class KeyUnavailable(EncryptionError):
    """The key-encryption key could not be used right now: KMS unreachable or refusing, or the local key file
    missing or unreadable. Nothing was written; the same call succeeds once the cause is fixed."""


class KeyFileInDoubt(EncryptionError):
    """The local key file took its new content, but its folder could not be flushed to the disk: it reads so now,
    and may or may not after a power loss. Nothing relied on the change yet (the database recorded none of it);
    the same command run again flushes the file before anything does."""


class DataKeyDamaged(EncryptionError):
    """A user's wrapped data key (its ``ts_data_keys`` row) does not open under the key-encryption key it
    names: the row was changed by hand or damaged. The user's sealed data stays unreadable until the row is
    restored from a backup; no new key is made over it."""


class KeyDestroyed(EncryptionError):
    """What was asked for is sealed under a key that no longer exists: the user's data key was destroyed by
    an erasure, or the key-encryption key that wrapped it was retired and destroyed. It is beyond use, for
    good."""


class KeyDeletionRefused(EncryptionError):
    """``teamstore keys retire`` did not schedule the deletion of a retired KMS key-encryption key: another
    database marks it as one it wraps its users' data keys under, or its marks could not be read. Nothing was
    scheduled; the key stays retired, and the next ``keys retire`` tries again.

    Attributes:
        kek_id: The retired key-encryption key (``kms:<ARN>``).
        other_databases: How many other databases mark it (``None``: its marks could not be read).
    """

    def __init__(self, message: str, *, hint: str | None = None, kek_id: str, other_databases: int | None) -> None:
        super().__init__(message, hint=hint)
        self.kek_id, self.other_databases = kek_id, other_databases


class PayloadUnreadable(EncryptionError):
    """A sealed payload does not open: its bytes were damaged, or it was sealed for another user, place or
    purpose than the one it was read as."""


# --- resume state ------------------------------------------------------------------------------------------
class StateError(TeamstoreError):
    """Base of resume-state errors."""


class SessionBusy(StateError):
    """Another worker holds the session's lease and did not release it in time."""


class TooManySessions(StateError):
    """A new session was refused: its user already keeps the most unexpired stored sessions the per-user
    bound (``TEAMSTORE_MAX_SESSIONS_PER_USER``) allows. Refused before the team runs; no lease or row is left.
    Resuming a session the user already has is never refused by the bound."""

    def __init__(self, stored: int, limit: int) -> None:
        super().__init__(
            f"this user keeps {stored} unexpired stored sessions, and the bound is {limit}: no new session was "
            "opened (resuming an existing one still works)",
            hint="delete sessions the user no longer needs (platform.delete_session, `teamstore sessions "
            "delete`) or let them expire, or raise TEAMSTORE_MAX_SESSIONS_PER_USER",
        )
        self.stored = stored
        self.limit = limit


class StaleStateVersion(StateError):
    """A save carried a row version older than the stored one: another writer saved first."""


class StateTooLarge(StateError):
    """The state to save is over the byte cap; the previous state is kept."""


class StateNotSerializable(StateError):
    """An agent's ``save_state()`` output holds a value that is not JSON (the message names agent and path)."""


Refusal = Literal["corrupt", "schema_mismatch", "library_mismatch", "definition_changed", "too_large"]
"""Why a stored state is refused (and quarantined): the resume outcomes that are not ``resumed``, ``new``
or ``expired`` (``teamstore.runtime.resume.Outcome``)."""


class StateRejected(StateError):
    """A stored state failed validation; the session starts fresh and the row is quarantined."""

    def __init__(self, reason: Refusal, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class QuarantineNotFound(StateError):
    """No quarantined state has the given id (never, or it was restored or erased)."""


class SessionNotFound(StateError):
    """No stored session has the given user and session id: never saved, or deleted, expired and swept, or
    erased."""


class TeamRunFailed(StateError):
    """The team's own run failed (a model endpoint down, a tool raising) and left no run to continue: the
    session keeps what it saved before the run. The message names the exception and where it was raised."""


class RunInProgress(StateError):
    """State cannot be saved or loaded while ``run_stream`` is in flight."""


class SessionNotOpen(StateError):
    """A Session used outside its one ``async with`` block: before it, after it, or entered twice."""


class PlatformClosed(StateError):
    """The platform is closing or closed (``Platform.aclose()``, the end of ``async with platform``): a session
    is not opened on it (one still opening does not open), and a session still open when its wait for open
    sessions was over has its run in flight stopped and writes nothing more (its lease was given back as the
    platform closed)."""


class InvalidTask(StateError):
    """A task ``run()`` cannot take: not text or AgentChat messages, empty or only whitespace, not valid
    Unicode, or over the size cap.
    Refused before the team runs; the session stays open and its state as it was."""


class RunInterrupted(StateError):
    """The session's last run did not complete and can be continued from its checkpoint: a new run is refused
    until the application continues it (``s.continue_run()``) or abandons it (``s.abandon_run()``)."""


class NoInterruptedRun(StateError):
    """``continue_run()`` or ``abandon_run()`` on a session that has no interrupted run."""


class RunCannotContinue(StateError):
    """A session opened to continue its interrupted run (``continuing=True``) with a team the run's
    checkpoint does not fit (another definition or version): nothing was set aside, the lease is given back."""


class ErasureInProgress(StateError):
    """An erasure request is open for this user: saves, uploads and ledger rows are refused."""


# --- user memory -------------------------------------------------------------------------------------------
class UserMemoryError(TeamstoreError):
    """Base of user-memory errors (named so as not to shadow Python's own ``MemoryError``)."""


class MemoryWriteRefused(UserMemoryError):
    """The memory writer's model call failed, or what it returned was refused (not a JSON object, a fact that
    fails its declared type, a summary over its budget). The user's previous memory is kept as it was, and
    the failure is recorded on it. The message names no content, only what was wrong."""


class StaleMemory(UserMemoryError):
    """Another write of the same user's memory landed between this writer's read and its write."""


class MemoryForgotten(UserMemoryError):
    """The user forgot memory under the scope after the messages a write comes from were said: nothing written."""


class MemoryNotFound(UserMemoryError):
    """No stored memory matches (the user, the scope, or the fact named)."""


# --- audit -------------------------------------------------------------------------------------------------
class AuditError(TeamstoreError):
    """Base of transcript, telemetry and ledger errors."""


class TranscriptUnavailable(AuditError):
    """The transcript backend could not be reached; the transcript goes to the outbox."""


class UploadInDoubt(TranscriptUnavailable):
    """S3 left an upload unanswered (a read timeout, a dropped connection): it may have stored the transcript,
    or may still store it. It is treated as one that may land (the outbox row keeps a claim until it can no
    longer), never as one that failed."""


class TranscriptStoreGone(TranscriptUnavailable):
    """The transcript store no longer exists (its S3 bucket was deleted): nothing is listed, kept or restored in
    it until it is made again. Any other failure to list a store may pass; this one does not."""


class TranscriptFolderElsewhere(TranscriptUnavailable):
    """The transcript folder a command would write into or sweep is not on this machine (another machine's
    disk, or not mounted here), or was made for another state database."""


class RetentionIncomplete(AuditError):
    """A retention sweep ran every step it could, but one or more failed (``report``: what the others did)."""

    def __init__(self, message: str, *, hint: str | None = None, report: object | None = None) -> None:
        super().__init__(message, hint=hint)
        self.report = report


class UnknownPrice(AuditError):
    """A model is missing from the price table."""


class LedgerExportFailed(AuditError):
    """A ledger export could not write a partition; the partitions written before it stand, and a rerun
    of the same window replaces them."""


class ReportNotWritten(AuditError):
    """The HTML cost report's file cannot be written (checked before the query runs, and at the write)."""


class NoMatchingUsage(AuditError):
    """A cost query's filters match no run in the ledger: an unknown user, session, team or model, or an
    empty window. Told apart from a match that cost nothing (``teamstore cost`` exits 3 for it, not 0).

    Attributes:
        suggestions: Team or model names in the ledger close to the one given (never user or session ids).
        report: The empty report, for a caller that prints it all the same.
    """

    def __init__(self, message: str, *, hint: str | None = None, suggestions: tuple[str, ...] = (),
                 report: object | None = None) -> None:
        super().__init__(message, hint=hint)
        self.suggestions = suggestions
        self.report = report


# --- erasure -----------------------------------------------------------------------------------------------
class ErasureError(TeamstoreError):
    """Base of deletion-coordinator errors."""


class ErasureVerificationFailed(ErasureError):
    """Verification found data of the erased user after deletion."""


class ErasureConflict(ErasureError):
    """Another erasure of the same user is running."""


class TranscriptNotFound(AuditError):
    """No transcript object exists for that user, session or run."""


class TranscriptStoreMismatch(ErasureError):
    """The transcript store an erasure talks to is not every store the user's transcripts were written to.

    The request stays open (fenced, its subject mapping kept) and completes once rerun, under the same
    request id, with ``TEAMSTORE_TRANSCRIPTS_URL`` set to the store the message names.
    """

    def __init__(self, message: str, *, hint: str | None = None, stores: tuple[str, ...] = ()) -> None:
        super().__init__(message, hint=hint)
        self.stores = stores


class ErasureRequestNotFound(ErasureError):
    """No erasure request is stored under that id."""


class ExtensionRefused(ErasureError):
    """A request's due date cannot be extended: extended already, by more than two months, after its
    original due date, finished, or without a reason (GDPR art. 12(3) allows one extension, decided and
    told to the data subject within the first month)."""


class ConfirmationNeeded(ErasureError):
    """An erasure was not confirmed: no terminal to ask on and no ``--yes``, or the operator answered no.
    Nothing was changed and no request was opened."""


class ErasureIncomplete(ErasureError):
    """An erasure finished with a store not erased (failed, or retained under a legal hold)."""

    def __init__(self, message: str, *, hint: str | None = None, receipt: object | None = None) -> None:
        super().__init__(message, hint=hint)
        self.receipt = receipt


# --- export ------------------------------------------------------------------------------------------------
class ExportError(TeamstoreError):
    """Base of ``teamstore export`` errors (an access or portability request: GDPR art. 15 and 20)."""


class ExportFailed(ExportError):
    """A store could not be read to the end: no archive was left behind (never a partial one), and the
    export's record says it failed."""


class ExportNotFound(ExportError):
    """No export is recorded under that id."""


class ExportNotPrinted(ExportError):
    """The export is done and recorded, but its manifest could not be printed (stdout a full disk, a closed pipe):
    the message says where its archive is."""


class ExportOutcomeUnknown(ExportError):
    """Recording the export's outcome failed (the database stopped answering, or a fault), and its failure could not
    be recorded either: its record may say ``exported``, so the archive is kept in place; ``teamstore
    export status`` says whether the record stands. ``export_id`` and ``target`` name them."""

    export_id: str | None = None
    target: Path | None = None


class ExportStopped(ExportError):
    """An export stopped (Ctrl-C, SIGTERM, SIGHUP) once its archive was in place, its failure unrecorded: its record
    may say ``exported``, so the archive is kept; ``teamstore export status`` says whether the record stands. Only
    the command says this (under ``--json``, as stdout's error document): the stop itself is raised as it is."""


class ExportTargetExists(ExportError):
    """The archive's path is taken: an export never overwrites a file or folder."""


class ExportTargetInStore(ExportError):
    """The archive's path is inside a folder teamstore keeps its stores in (the home, the registry, a transcript
    folder): there the user's data, readable, would sit beside the sealed stores, in their backups, where an
    erasure of the user never looks."""
