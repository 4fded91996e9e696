"""The deletion coordinator: erase one user from every store, verify it, and write a receipt.

    from teamstore.erasure import DeletionCoordinator

    coordinator = DeletionCoordinator(engine, transcripts, settings)
    receipt = await coordinator.run("alice@example.com", request_id="req-2026-0042", reason="art. 17")
    print(receipt.model_dump_json(indent=2))     # the same receipt is stored with the request

A run opens (or resumes) the durable request, which fences the user (``ts_user_holds``), then takes each
store in turn: enumerate, delete, verify by re-querying. After the last step (the subject mapping) every
store is re-queried once more; anything found fails the request. Running the same request id again
resumes a failed or killed request and only reports a finished one: it never acts twice.

This module drives that run: the lease, the attempt, the steps in order. While the steps run,
:mod:`teamstore.erasure.lease` renews the lease; what a dry run would find is :mod:`teamstore.erasure.dry_run`. What it waits
out before deleting is :mod:`teamstore.erasure.waits`; each step's verdict, the request's status and the receipt
are :mod:`teamstore.erasure.verdict`; what it stores, :mod:`teamstore.erasure.requests` and
:mod:`teamstore.erasure.record`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.subjects import find_subject
from teamstore.audit.transcripts.base import TranscriptStore
from teamstore.db.clock import database_now
from teamstore.db.engine import empty_sqlite_log
from teamstore.db.identity import log_name_key
from teamstore.erasure import record, request_checks, requests
from teamstore.erasure.dry_run import planned_receipt
from teamstore.erasure.lease import keeping_lease
from teamstore.erasure.receipt import (
    DONE,
    FINISHED,
    Attempt,
    Counts,
    Receipt,
    RequestStatus,
    StepStatus,
    StoreResult,
    subject_hash,
)
from teamstore.erasure.settings import ErasureSettings
from teamstore.erasure.steps import Notice, Progress, Step, StepContext, build_steps
from teamstore.erasure.steps.done_stores import held_as_last_found
from teamstore.erasure.stores import TRANSCRIPTS, check_store, transcript_parts
from teamstore.erasure.verdict import receipt_of, request_status, stored_receipt, verdict
from teamstore.erasure.waits import Waits
from teamstore.errors import (
    ErasureConflict,
    StoreUnavailable,
    TeamstoreError,
    TranscriptStoreMismatch,
)
from teamstore.export.nearby import near_match
from teamstore.ids import check_erasable_id, log_name
from teamstore.keys.service import KeyService
from teamstore.keys.status import backups_unreadable_by
from teamstore.people import check_not_naming, check_person, current_operator
from teamstore.settings import Settings
from teamstore.state.erasure import stored_sessions

log = logging.getLogger(__name__)




class DeletionCoordinator:
    """Runs erasure requests against one database and one transcript store.

    Args:
        engine: The state database (the caller owns it).
        transcripts: The transcript store (the caller owns it).
        settings: Shared settings (content capture, transcript retention).
        knobs: Erasure settings; ``ErasureSettings()`` (the environment) by default.
        progress: Called as steps advance (the CLI draws a progress bar with it).
        notice: Called before each wait with a line saying what for and how long (the CLI prints it on stderr).
        opened: Called with the request's id once it is opened (filed, or found open to resume), before its first
            step: a refused request (another one open for the user, say) never calls it. The CLI names the id it
            made with it, so that a run killed outright can be resumed.
        after_step: Called with each step's name once its result is recorded (tests inject crashes here).
        keys: Users' data keys (the key step destroys the user's); by default the service ``settings`` describe.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        transcripts: TranscriptStore,
        settings: Settings | None = None,
        *,
        knobs: ErasureSettings | None = None,
        progress: Progress | None = None,
        after_step: Callable[[str], None] | None = None,
        keys: KeyService | None = None,
        notice: Notice | None = None,
        opened: Callable[[str], None] | None = None,
    ) -> None:
        self.engine = engine
        self.transcripts = transcripts
        self.settings = settings or Settings()
        self.knobs = knobs or ErasureSettings()
        self.progress = progress
        self.notice = notice
        self.opened = opened
        self.after_step = after_step
        self.keys = keys or KeyService.from_settings(engine, self.settings)
        self.steps: list[Step] = build_steps()
        self._log_key: str | None = None  # read once: it keys how log lines name a request

    async def run(
        self, user_id: str, request_id: str | None = None, reason: str | None = None, dry_run: bool = False,
        *, requested_by: str | None = None, operator: str | None = None,
    ) -> Receipt:
        """Erase ``user_id`` (or resume/report the request ``request_id``).

        Args:
            user_id: The raw user id, matched exactly (no case folding, no unicode normalisation). Any id an
                earlier release could have stored is accepted (:func:`teamstore.ids.check_erasable_id`), one no
                session can have now (a control character, blank, spaces around it) only while something is
                stored under it.
            request_id: Idempotency key; a fresh one when omitted.
            reason: Free text stored with the request (keep personal data out of it).
            dry_run: Only enumerate: print what would be removed, change nothing, store nothing. No request
                exists afterwards, so the receipt's ``request_id`` is ``None`` (a given one is only checked).
            requested_by: Who asked (the data subject, a representative, a ticket): free text on the receipt,
                recorded when the request opens (or on a rerun of one that has none).
            operator: Who runs this attempt; ``TEAMSTORE_OPERATOR``, else the OS user, when omitted.

        Returns:
            The receipt (also stored); ``receipt.ok`` is False unless every store is erased or no_match. A
            request that found nothing anywhere ends ``no_match`` (``receipt.near_match`` says whether an id
            differing only in letter case, Unicode form or spaces holds data).

        Raises:
            InvalidIdentifier: The user id, request id, reason, requested_by or operator cannot be stored
                exactly, or the reason, requested_by or a new request's id names the user, or (for a new request
                or a dry run) the user id is one no session can have now and nothing is stored under it.
            ErasureConflict: Another request is open for the user, or another process runs this one, or a new
                request's id differs from a stored request's only in letter case or surrounding spaces, or the
                request was filed for another user (a held one too: it keeps a keyed hash of the id).
            ConfigurationError: ``TEAMSTORE_ERASURE_HASH_KEY_PREVIOUS`` is given without
                ``TEAMSTORE_ERASURE_HASH_KEY`` (a dry run too); nothing is stored.
            StoreUnavailable: The database is down (the request, if opened, resumes on a rerun).
        """
        receipt = await self._run(user_id, request_id, reason, dry_run, requested_by=requested_by, operator=operator)
        return await self._logged(receipt)

    async def _run(
        self, user_id: str, request_id: str | None, reason: str | None, dry_run: bool, *,
        requested_by: str | None, operator: str | None,
    ) -> Receipt:
        check_erasable_id(user_id)
        # An empty id is refused, not replaced: the caller meant one (an unset variable, say) and would never
        # learn the fresh id to rerun or to ask about.
        rid = request_checks.check_request_id(request_checks.new_request_id() if request_id is None else request_id)
        request_checks.check_reason(reason)
        check_person("requested_by", requested_by)
        check_not_naming("reason", reason, user_id)
        check_not_naming("requested_by", requested_by, user_id)
        # Before anything is stored, and in a dry run too, which hashes no id for a new request: refused as the run is.
        requests.check_hash_keys(self.knobs)
        if dry_run:  # refused as the run would refuse it
            stored = None if request_id is None else await requests.get_request(self.engine, rid)
            if stored is None:
                await requests.check_new_request(self.engine, request_id, user_id)
            else:
                requests.same_user(stored, user_id, await requests.user_hashes(self.engine, self.knobs, user_id))
            return await self._dry_run(user_id, reason, requested_by, stored)
        ran_by = current_operator(operator)
        await self._log_name_key()  # before a line is logged about the request
        row = await requests.open_request(self.engine, rid, user_id, reason, self.knobs.due_days, requested_by,
                                          hashes=await requests.user_hashes(self.engine, self.knobs, user_id))
        if (finished := await self._finished(row, user_id)) is not None:
            return finished
        if self.opened is not None:
            self.opened(rid)
        owner = f"{socket.gethostname()[:24]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        if not await requests.claim(self.engine, rid, owner, self.knobs.lease_seconds):
            raise _busy(rid)
        try:
            # Read again under the lease: another coordinator may have finished the request between
            # our read and our claim, and a finished request is only ever reported.
            fresh = await requests.get_request(self.engine, rid)
            assert fresh is not None  # requests are never deleted
            row = fresh
            if (finished := await self._finished(row, user_id)) is not None:
                return finished
            attempt = await record.start_attempt(self.engine, rid, ran_by)
            async with keeping_lease(self.engine, rid, owner, self.knobs.lease_seconds, logged_as=self._named(rid)):
                return await self._attempt(row, owner, attempt)
        finally:
            await requests.release(self.engine, rid, owner)

    async def _attempt(self, row: requests.RequestRow, owner: str, attempt: int) -> Receipt:
        """Resume the request; an attempt stopped without a receipt (taken over, another transcript store to
        empty first, the database gone, its task cancelled by a stop) is still marked ended, with no status."""
        try:
            return await self._resume(row, owner, attempt)
        except (TeamstoreError, asyncio.CancelledError):
            try:
                await record.end_attempt(self.engine, row.request_id, attempt)
            except StoreUnavailable as exc:  # the error being raised says more; this one is only logged
                log.warning("erasure %s: could not record the end of attempt %d: %s", self._named(row.request_id),
                            attempt, exc.message)
            raise

    async def _finished(self, row: requests.RequestRow, user_id: str) -> Receipt | None:
        """The stored receipt of a finished request; ``None`` if it still has work to do.

        Raises:
            ErasureConflict: The request is finished and ``user_id`` has data it does not cover.
        """
        # A held request (or one whose rerun after the hold failed, the fence lifted and the user forgotten
        # already) only finishes its own subject: the user's data since is not its business.
        held = row.status is RequestStatus.RETAINED_UNDER_HOLD or row.status not in FINISHED
        if row.user_id is None and not held and await self._holds_data(user_id, row.subject_key):
            # A finished request forgot whose it was. Its receipt would not cover this data (another
            # user's, or this user's since the erasure), so it is not handed out as if it did.
            raise ErasureConflict(
                "the request given is finished and this user has data now: a finished request is never run "
                "again",
                hint="use a new request id to erase it (omit --request-id to get one); `teamstore erase status` "
                "with the old id prints its receipt",
            )
        if row.status in FINISHED and row.receipt is not None:
            return stored_receipt(row)  # already done: report, never act twice
        return None

    async def status(self, request_id: str) -> Receipt:
        """The stored receipt of a request, or its progress so far if it is still open.

        Raises:
            InvalidIdentifier: The request id cannot be stored (so no request has it).
            ErasureRequestNotFound: No request has that id.
            StoreUnavailable: The database could not be reached.
        """
        row = await requests.get_request(self.engine, request_checks.check_request_id(request_id))
        if row is None:
            raise await requests.not_found(self.engine, request_id)
        if row.receipt is not None:
            return await self._logged(stored_receipt(row, await database_now(self.engine)))  # on the database's clock
        steps = await record.load_steps(self.engine, request_id)
        return await self._logged(self._receipt(row, steps, RequestStatus.OPEN, now=await database_now(self.engine),
                                                attempts=await record.load_attempts(self.engine, request_id)))

    async def _log_name_key(self) -> str:
        """The key of :func:`teamstore.ids.log_name` (:func:`teamstore.db.identity.log_name_key`), read once.

        Raises:
            StoreUnavailable: The database could not be reached.
        """
        if self._log_key is None:
            self._log_key = await log_name_key(self.engine)
        return self._log_key

    def _named(self, request_id: str) -> str:
        """How a log line names the request: never an id the operator gave (:func:`teamstore.ids.log_name`).
        :meth:`run` reads the key before it opens the request, so every line about one has it."""
        assert self._log_key is not None
        return log_name(request_id, self._log_key)

    async def _logged(self, receipt: Receipt) -> Receipt:
        """``receipt`` saying how the log lines name its request (a dry run's names none)."""
        if receipt.request_id is None:
            return receipt
        return receipt.model_copy(update={"logged_as": log_name(receipt.request_id, await self._log_name_key())})

    async def _resume(self, row: requests.RequestRow, owner: str, attempt: int) -> Receipt:
        waits = Waits(self.engine, self.knobs, self._say)
        await waits.fence_grace(row.received_at)
        ctx = await self._context(row, owner)
        recorded = await record.load_steps(self.engine, row.request_id)
        await transcript_parts(ctx, recorded.get(TRANSCRIPTS))  # before a failure below rewrites the step
        if row.user_id is not None and (still_open := await waits.sessions(row.user_id)):
            # A run that began before the fence may still write when it ends: not while the fence stands.
            ends = await waits.sessions_end(row.user_id)
            dead = (f"; a worker that died holding one (killed, its node lost) keeps it until its lease runs out "
                    f"(TEAMSTORE_LEASE_TTL_SECONDS after its last renewal), the last at {ends:%Y-%m-%dT%H:%M:%SZ}"
                    if ends is not None else "")
            return await self._fail_early(row, ctx, recorded, (owner, attempt), "resume_state", (
                f"{still_open} session(s) of the user were still open after {self.knobs.session_wait_seconds:g}s "
                "(runs that began before this request); their saves, transcripts and ledger rows are "
                f"refused while it is open{dead}. Rerun the same request id once they end"))
        if ctx.subject_key is not None and (lands_by := await waits.uploads(ctx.subject_key)):
            # Listed now, the transcripts could miss an upload that lands afterwards, with no one to delete it.
            return await self._fail_early(row, ctx, recorded, (owner, attempt), TRANSCRIPTS, (
                f"an upload of the user's transcripts may still land until {lands_by:%Y-%m-%dT%H:%M:%SZ} (S3 left "
                f"it unanswered, or it was still on its way after {self.knobs.upload_wait_seconds:g}s). Rerun the "
                "same request id after that time"))
        # Before anything is deleted: the store this coordinator talks to must be one that holds the subject's
        # transcripts (TranscriptStoreMismatch leaves the request open, the mapping kept, to rerun).
        await check_store(ctx, self.settings.transcript_retention_days)
        results: dict[str, StoreResult] = {}
        for step in self.steps:
            prior = recorded.get(step.name)
            done = prior is not None and prior.status in DONE
            results[step.name] = prior if done and prior else await self._run_step(step, ctx, prior)
            if not await requests.claim(self.engine, row.request_id, owner, self.knobs.lease_seconds):
                raise requests.taken_over(row.request_id)
            if self.after_step is not None and not done:
                self.after_step(step.name)
            if results[step.name].status is StepStatus.FAILED:
                break
        else:
            await self._final_check(ctx, results)
        receipt = await self._closing(row, results, request_status(results), ctx.subject_key, attempt)
        if not await record.finish(self.engine, row, receipt, owner, ctx.subject_key, attempt):
            raise requests.taken_over(row.request_id)
        await empty_sqlite_log(self.engine, "an erasure")
        log.info("erasure %s finished: %s", self._named(row.request_id), receipt.status)
        if receipt.status is RequestStatus.RETAINED_UNDER_HOLD:
            self._warn_of_unkeyed_hash(row)
        return receipt

    def _warn_of_unkeyed_hash(self, row: requests.RequestRow) -> None:
        """Warn when the held request ``row`` keeps a hash of the id it forgot under the database's own id: a copy
        of the database alone (a backup) can test guessed ids (email addresses) against it. A request held since
        before migration 0026 keeps none, and the embedded default's key sits beside its database anyway."""
        # The run read the row after open_request took the hash under the first of hash_keys, if it keeps one.
        if row.user_hash is None or not requests.keyed_by_database(self.knobs) or not self._deployed():
            return
        log.warning("erasure %s is held and keeps a hash of its user id keyed by the database's own id, as "
                    "TEAMSTORE_ERASURE_HASH_KEY is unset: a copy of the database alone can test a guessed id "
                    "against it (fix: set TEAMSTORE_ERASURE_HASH_KEY to a secret kept out of the database; the "
                    "request's rerun then keeps the hash under it)", self._named(row.request_id))

    def _deployed(self) -> bool:
        """Whether this is a deployment's erasure (a Postgres database or an S3 transcript store), not the embedded
        default's, whose database file and key sit side by side on one machine anyway."""
        return self.engine.dialect.name != "sqlite" or self.transcripts.url.startswith("s3://")

    async def _closing(
        self, row: requests.RequestRow, results: dict[str, StoreResult], status: RequestStatus,
        subject_key: str | None, attempt: int,
    ) -> Receipt:
        """The receipt a finishing attempt stores: its own attempt ended with ``status``, and for a request
        that found nothing anywhere, whether a near-identical id holds data. It is completed, and judged overdue
        or not, on the database's clock, as the request was received and falls due."""
        now = await database_now(self.engine)
        attempts = [a.model_copy(update={"ended_at": now, "status": status}) if n == attempt else a
                    for n, a in enumerate(await record.load_attempts(self.engine, row.request_id), start=1)]
        near = await near_match(self.engine, row.user_id) if status is RequestStatus.NO_MATCH and row.user_id else None
        bound = await backups_unreadable_by(self.engine, self.settings)
        return self._receipt(row, results, status, subject_key, attempts=attempts, now=now, near=near,
                             backups_until=bound)

    async def _holds_data(self, user_id: str, erasing: str | None) -> bool:
        """Whether ``user_id`` has a subject (other than the one a held request still erases) or stored
        sessions: what a finished request, which no longer knows its user, must not be mistaken for."""
        subject = await find_subject(self.engine, user_id)
        if subject is not None and subject != erasing:
            return True
        return await stored_sessions(self.engine, user_id) > 0

    async def _fail_early(
        self, row: requests.RequestRow, ctx: StepContext, recorded: dict[str, StoreResult], run: tuple[str, int],
        step: str, detail: str,
    ) -> Receipt:
        """End the request ``failed`` before any store is touched, keeping the fence; ``step`` says why.
        ``run`` is this coordinator's lease owner and attempt number."""
        owner, attempt = run
        # What an earlier attempt erased stays counted: the rerun adds to it, never restarts from zero.
        before = recorded.get(step)
        result = StoreResult(status=StepStatus.FAILED, counts=before.counts if before else Counts(), detail=detail)
        await record.record_step(self.engine, row.request_id, step, result, owner)
        log.error("erasure %s: %s", self._named(row.request_id), detail)
        receipt = await self._closing(row, {**recorded, step: result}, RequestStatus.FAILED, ctx.subject_key, attempt)
        if not await record.finish(self.engine, row, receipt, owner, attempt=attempt):
            raise requests.taken_over(row.request_id)
        return receipt

    async def _context(self, row: requests.RequestRow, owner: str) -> StepContext:
        subject = row.subject_key
        if subject is None and row.user_id is not None:
            subject = await find_subject(self.engine, row.user_id)
            await requests.set_subject(self.engine, row.request_id, subject, subject_hash(subject, self.knobs))
        kwargs: dict[str, Any] = {"progress": self.progress} if self.progress else {}
        return StepContext(self.engine, self.transcripts, row.request_id, row.user_id, subject, owner=owner,
                           keys=self.keys, notice=self._say, **kwargs)

    def _say(self, line: str) -> None:
        """Say what the run waits for, before it waits: in the log, and to ``notice``."""
        log.info("erasure: %s", line)
        if self.notice is not None:
            self.notice(line)

    async def _run_step(self, step: Step, ctx: StepContext, prior: StoreResult | None) -> StoreResult:
        try:
            deleted = await step.erase(ctx, prior)
            left = await step.remaining(ctx)
        except (ErasureConflict, TranscriptStoreMismatch):
            raise  # taken over, or another store to empty first: the request stays open, nothing more recorded
        except TeamstoreError as exc:
            # The message alone: a fix may name the rerun's --request-id, which the log never holds (the receipt
            # and the operator's console do).
            log.error("erasure %s: step %s failed: %s", self._named(ctx.request_id), step.name, exc.message)
            recorded = (await record.load_steps(self.engine, ctx.request_id)).get(step.name) or prior
            counts = recorded.counts if recorded is not None else Counts()
            # The counts take other stores' held versions from their passes: said so, with when, not shown as now's.
            stale = await held_as_last_found(ctx) if step.name == TRANSCRIPTS else None
            result = StoreResult(status=StepStatus.FAILED, counts=counts, detail="; ".join(filter(None, [str(exc), stale])))
        else:
            result = verdict(deleted, left, await database_now(self.engine))
        await record.record_step(self.engine, ctx.request_id, step.name, result, ctx.owner)
        log.info("erasure %s: %s %s %s", self._named(ctx.request_id), step.name, result.status,
                 result.counts.model_dump())
        return result

    async def _final_check(self, ctx: StepContext, results: dict[str, StoreResult]) -> None:
        """Re-query every store once more, after the subject mapping is gone: nothing may have come back."""
        for step in self.steps:
            try:
                left = await step.remaining(ctx)
            except TeamstoreError as exc:  # its fix may name the request id given: in the receipt, never logged
                detail, logged = f"final verification could not query the store: {exc}", exc.message
            else:
                if left.unexpected <= 0:
                    continue
                detail = f"verification found {left.unexpected} item(s) after deletion; rerun the same request id"
                logged = detail
            results[step.name] = results[step.name].model_copy(update={"status": StepStatus.FAILED, "detail": detail})
            await record.record_step(self.engine, ctx.request_id, step.name, results[step.name], ctx.owner)
            log.error("erasure %s: final verification of %s failed: %s", self._named(ctx.request_id), step.name,
                      logged)

    def _receipt(
        self, row: requests.RequestRow, results: dict[str, StoreResult], status: RequestStatus,
        subject_key: str | None = None, *, attempts: list[Attempt], now: datetime, near: str | None = None,
        backups_until: datetime | None = None,
    ) -> Receipt:
        """The request's receipt over this coordinator's steps (:func:`teamstore.erasure.verdict.receipt_of`)."""
        return receipt_of(row, results, status, subject_key, steps=[s.name for s in self.steps], knobs=self.knobs,
                          capture=self.settings.capture_message_content, attempts=attempts, now=now, near=near,
                          backups_until=backups_until)

    async def _dry_run(
        self, user_id: str, reason: str | None, requested_by: str | None, stored: requests.RequestRow | None = None,
    ) -> Receipt:
        """What a request would find, with no request id (:func:`teamstore.erasure.dry_run.planned_receipt`). For the
        rerun of ``stored``, a request that has forgotten its user (held, or its rerun failed since), what that rerun
        would find: the subject it keeps, whose mapping and fence are gone, and nothing under the user id (the
        user's data since is not its business)."""
        forgot = stored is not None and stored.user_id is None and stored.subject_key is not None
        subject = stored.subject_key if stored is not None and forgot else await find_subject(self.engine, user_id)
        # Enumerating records nothing, so the context names no request.
        ctx = StepContext(self.engine, self.transcripts, "", None if forgot else user_id, subject, keys=self.keys)
        return await planned_receipt(ctx, self.steps, self.settings, self.knobs, user_id=user_id, reason=reason,
                                     requested_by=requested_by)


def _busy(request_id: str) -> ErasureConflict:
    made = request_checks.made_by_teamstore(request_id)  # an id the operator gave is not repeated: it may be a user's
    return ErasureConflict(
        f"the erasure request{f' {made}' if made else ''} is being run by another coordinator right now",
        hint=f"wait for it (`teamstore erase status {made or '...'}`{'' if made else ' with the same id'} tells); a "
        "killed run's lease expires after the TEAMSTORE_ERASURE_LEASE_SECONDS it started with, then rerun the same "
        "request id",
    )
