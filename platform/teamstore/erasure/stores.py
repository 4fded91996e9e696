"""Which transcript stores an erasure must reach, and the refusal when it talks to another one.

    from teamstore.erasure.stores import check_store

    await check_store(ctx, retention_days=90)     # TranscriptStoreMismatch: rerun with the store it names

An erasure talks to one transcript store, the one its settings name. Every writer records a store for a
subject before its first transcript goes there (``ts_subject_stores``, migration 0010), so the
coordinator knows each store that holds some: it refuses to run while one of them is not its own, unless
its own holds some all the same (listed under the subject's prefix: a file no record names, restored or copied
back), and never completes, or drops the subject mapping, while a store it has not emptied still holds some (one
its pass left holding only versions a hold keeps counts as done: :func:`held_stores`). For
runs from before stores were recorded, the ledger says they happened: unless they are older than the
transcript retention, the store talked to must hold some of the subject's transcripts.
"""

from __future__ import annotations

import hashlib
import logging
import shlex
from contextlib import suppress
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from teamstore.audit.placement import described, endpoint_setting, mark_ours, unmarked_elsewhere
from teamstore.audit.schema import SUBJECT_STORES_SINCE, usage
from teamstore.audit.subjects import recorded_endpoints, recorded_stores
from teamstore.audit.transcripts import store_endpoint
from teamstore.audit.transcripts.base import subject_prefix
from teamstore.audit.transcripts.capabilities import (
    ObjectVersion,
    holds_any,
    missing_here,
)
from teamstore.db.clock import shared_later
from teamstore.db.engine import describe_failure
from teamstore.erasure.receipt import Counts, StepStatus, StoreResult
from teamstore.erasure.record import load_parts, record_part, replace_parts
from teamstore.erasure.requests import open_request_of
from teamstore.erasure.steps.base import StepContext
from teamstore.errors import StoreUnavailable, TeamstoreError, TranscriptStoreMismatch, TranscriptUnavailable
from teamstore.state.schema import store_settings

log = logging.getLogger(__name__)

TRANSCRIPTS = "transcripts"
"""The step whose parts are the transcript stores (:func:`teamstore.erasure.record.record_part`)."""
HELD = frozenset({StepStatus.RETAINED_UNDER_HOLD, StepStatus.SHREDDED})
"""A store's part in these: the pass there left only versions a hold keeps (readable, or under a destroyed key)."""
EARLIER = ""
"""The part of no store: the transcript counts a request an earlier release began recorded for the step alone."""
HELD_VERSIONS = "held"
"""The step-like record an earlier release kept, whose parts are, by store URL, the versions a hold kept there as
the last pass found them, by number and size alone (versions, objects, bytes). Still read for a request that
release began: a later pass there estimates from it (:mod:`teamstore.erasure.steps.done_stores`). This release
records the versions themselves (:func:`held_record`)."""


async def pending_stores(ctx: StepContext) -> list[str]:
    """The recorded stores of the subject still to empty, sorted: neither emptied by an erasure nor left by this
    request's pass holding only versions a hold keeps (:func:`held_stores`)."""
    if ctx.subject_key is None:
        return []
    held = await held_stores(ctx)
    recorded = await recorded_stores(ctx.engine, ctx.subject_key)
    return sorted(store for store, erased in recorded.items() if not erased and store not in held)


async def held_stores(ctx: StepContext) -> dict[str, StoreResult]:
    """The stores this request's pass left holding only versions a hold keeps, each with what that pass found
    there (``counts.retained`` and ``unreadable``: the held versions). Such a store is done for the request (as
    an emptied one is) until the request ends held, and stays recorded as holding the subject's transcripts, so a
    rerun against it lists it again. For a dry run, those of the request under way for the user (:func:`held_by`).

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    return (await held_by(ctx))[1]


async def held_by(ctx: StepContext) -> tuple[str | None, dict[str, StoreResult]]:
    """The request whose passes the stores :func:`held_stores` names were left holding by, and those stores: the
    run's own request; for a dry run, which has none, the request still under way for the user (open or failed:
    one fencing them), whose next pass, the one the dry run plans, takes them as done as well.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    request_id: str | None = ctx.request_id
    if not request_id and ctx.user_id is not None and ctx.subject_key is not None:
        request_id = await open_request_of(ctx.engine, ctx.user_id)
    if not request_id:
        return None, {}
    parts = await load_parts(ctx.engine, request_id, TRANSCRIPTS)
    return request_id, {store: part for store, part in parts.items() if part.status in HELD}


def held_record(store: str) -> str:
    """The step-like record whose parts are the versions a hold keeps in ``store`` as the request's last pass there
    found them: one part each, named by :func:`held_id` and counting its size (``versions`` 1, ``bytes``), so a
    part stays a row of fixed size however many versions the store holds (each one also asked about once an
    attempt: its lock, and its header). Named by a digest of the URL (as many digits as the steps' store column
    leaves beside a part's name), so the parts of one store are read and replaced apart from another's."""
    return f"{HELD_VERSIONS}{hashlib.sha256(store.encode()).hexdigest()[:11]}"


def held_id(version: ObjectVersion) -> str:
    """Which version ``version`` is, as the held record names it: a digest of its key and version id (a version id
    names bytes that never change), of fixed length however long the key, and naming no session."""
    return hashlib.sha256(f"{version.key}\0{version.version_id}".encode()).hexdigest()[:32]


async def held_before(ctx: StepContext, store: str) -> frozenset[str] | Counts | None:
    """The versions a hold kept in ``store`` as the request's last pass there found them: which (by
    :func:`held_id`); or, recorded by an earlier release, how many with their bytes (:data:`HELD_VERSIONS`); or
    None when neither is recorded (a part of a release before that).

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    if not ctx.request_id:
        return None
    if held := await load_parts(ctx.engine, ctx.request_id, held_record(store)):
        return frozenset(held)
    earlier = (await load_parts(ctx.engine, ctx.request_id, HELD_VERSIONS)).get(store)
    return earlier.counts if earlier is not None else None


async def record_held(ctx: StepContext, store: str, status: StepStatus, held: list[ObjectVersion]) -> None:
    """Record which versions a hold keeps in ``store`` (``held``), replacing what an earlier pass there recorded;
    before its part of ``status`` (held) is, so a part recorded held always has them beside it.

    Raises:
        ErasureConflict: Another coordinator holds the lease now.
        StoreUnavailable: The database could not be reached.
    """
    parts = {held_id(version): StoreResult(status=status, counts=Counts(versions=1, bytes=version.size))
             for version in held}
    await replace_parts(ctx.engine, ctx.request_id, held_record(store), parts, ctx.owner)


async def transcript_parts(ctx: StepContext, prior: StoreResult | None) -> dict[str, StoreResult]:
    """The transcript step's parts (each store's counts, by URL); a request an earlier release began, which
    recorded the step's counts alone (``prior``), is given a part of them first (:data:`EARLIER`).

    Called before anything records the step again: a failure rewrites it as ``failed``, and its counts would then
    pass for the next store's. That part is ``deleted`` when the step was (taken from stores emptied since, and
    added), else ``enumerated``: a pass stopped in a store the record does not name, counted as the store whose
    passes since found the most (:func:`teamstore.erasure.steps.transcripts.TranscriptStep.erase`).

    Raises:
        ErasureConflict: Another coordinator holds the lease now.
        StoreUnavailable: The database could not be reached.
    """
    parts = await load_parts(ctx.engine, ctx.request_id, TRANSCRIPTS)
    if parts or prior is None or not ctx.request_id:
        return parts
    status = StepStatus.DELETED if prior.status is StepStatus.DELETED else StepStatus.ENUMERATED
    # What a hold kept is left to the verification, which lists it again.
    part = StoreResult(status=status, counts=prior.counts.model_copy(update={"retained": 0, "unreadable": 0}))
    await record_part(ctx.engine, ctx.request_id, TRANSCRIPTS, EARLIER, part, ctx.owner)
    return {EARLIER: part}


async def check_store(ctx: StepContext, retention_days: int) -> None:
    """Refuse an erasure whose transcript store is not one that still holds the subject's transcripts.

    Args:
        ctx: The erasure's context (its store, subject and request id).
        retention_days: The transcript retention: runs older than that left no transcript anywhere.

    Raises:
        TranscriptStoreMismatch: Stores are recorded for the subject and this one is not among those still
            to empty (nor holds any of the subject's transcripts all the same), or is a folder this machine does
            not have; or none is, the ledger holds runs from before stores were recorded, and this store holds no
            transcript of the subject.
        StoreUnavailable: The database could not be reached.
        TranscriptUnavailable, StorageError: The store could not be listed (asked only when it is not a store
            still to empty).
    """
    if ctx.subject_key is None:
        return  # the user never ran: no transcript anywhere
    recorded = await recorded_stores(ctx.engine, ctx.subject_key)
    held = await held_stores(ctx)
    pending = sorted(store for store, erased in recorded.items() if not erased and store not in held)
    ours = ctx.transcripts.url
    if pending and ours not in pending and ours not in held:
        # Asked of the store, under the subject's prefix: it may hold some no record names (a file restored or
        # copied back, a folder a request emptied filled again). Erased here first, the step then names the others.
        if await holds_any(ctx.transcripts, subject_prefix(ctx.subject_key)):
            return
        raise await mismatch(ctx, pending, f"this erasure talks to {ours}, which {_erased_or_not(recorded, ours)}")
    if recorded.get(ours) is False:
        # Before any step deletes anything, as for the other refusals here. A store that cannot be reached now
        # fails the transcript step, which asks again, so the request fails to rerun rather than stays open.
        with suppress(TranscriptUnavailable):
            await check_same_store(ctx)
    if ours in pending and await missing_here(ctx.transcripts):
        # Listed here it would give nothing: the receipt would say no_match while the transcripts stay there.
        raise TranscriptStoreMismatch(
            f"this user's transcripts were written to {ours}, a folder this machine does not have (another "
            f"machine's disk, or not mounted here). {what_stays(ctx)}",
            hint=f"run erase on the machine whose folder that is (or where it is mounted at the same path) with "
            f"{same_request(ctx)}; if the folder is gone for good, create it empty here and rerun",
            stores=(ours,),
        )
    if not recorded:
        await _check_unrecorded(ctx, ctx.subject_key, retention_days)


async def check_same_store(ctx: StepContext) -> bool:
    """Refuse a pass that reaches a store still to empty (or held) at another endpoint than its writers did,
    unless the store there carries their mark at that endpoint (``Capability.MARKS``): a proxy, or the same server
    under another host name, reaches the bucket they wrote to; another server's bucket of the same name would be
    listed, found empty and taken for emptied while the transcripts stay where they were written. Asked by the
    check before any step runs (:func:`check_store`), and by the transcript step before it records or lists anything.

    Returns:
        Whether the store is reached at the endpoint recorded for it (before this pass records one): the bucket
        its record names, which the pass may mark (:func:`mark_reached`).

    Raises:
        TranscriptStoreMismatch: The store reached here carries no such mark, or will not say.
        TranscriptUnavailable: The store could not be reached. StoreUnavailable: The database could not be reached.
    """
    ours = ctx.transcripts.url
    if ctx.subject_key is None or (erased := (await recorded_stores(ctx.engine, ctx.subject_key)).get(ours)) is None:
        return False  # never written there: check_store decides, and this pass's record names its own endpoint
    recorded = (await recorded_endpoints(ctx.engine, ctx.subject_key)).get(ours)
    if recorded is not None and recorded == store_endpoint(ctx.transcripts):
        return True
    if erased or (found := await unmarked_elsewhere(ctx.transcripts, ctx.engine, recorded)) is None:
        return False
    stays = what_stays(ctx) if ctx.request_id else "This dry run counted nothing"
    raise TranscriptStoreMismatch(
        f"this user's transcripts were written to {ours} at {described(recorded)}; this erasure reaches a bucket of "
        f"that name at {described(found.endpoint)}, which {found.why}: it may be another server's bucket. {stays}",
        hint=f"run erase with {endpoint_setting(recorded)} and {same_request(ctx)}; if no server answers there any "
        f"more and this bucket is the one its workers wrote to, `teamstore transcripts mark --as-reached-at "
        f"{recorded}` says so (docs/erasure.md)",
        stores=(ours,),
    )


async def mark_reached(ctx: StepContext) -> None:
    """Mark the store a pass reaches at the endpoint recorded for it (:func:`check_same_store` says so) as this
    database's writers', so a later pass reaching it through a proxy or another host name knows it (a store
    written by a release before marks). A failure (a role without s3:PutObject) is logged: such a store is then
    erased at its recorded endpoint alone."""
    try:
        await mark_ours(ctx.transcripts, ctx.engine)
    except TeamstoreError as exc:
        log.warning("erasure: could not mark the transcript store as this database's: %s", exc.message)


async def _check_unrecorded(ctx: StepContext, subject_key: str, retention_days: int) -> None:
    """Runs from before stores were recorded left transcripts somewhere, unless retention removed them:
    the store talked to must hold some of them."""
    runs = await _unrecorded_runs(ctx, retention_days)
    if runs and not await ctx.transcripts.list_keys(subject_prefix(subject_key)):
        raise TranscriptStoreMismatch(
            f"the ledger holds {runs} run(s) of this user from before teamstore recorded where transcripts go, "
            f"and {ctx.transcripts.url} holds none of their transcripts: they were written to another store. "
            f"{what_stays(ctx)}",
            hint="run erase with TEAMSTORE_TRANSCRIPTS_URL set as the service that ran them had it, and "
            f"{same_request(ctx)}",
        )


def _erased_or_not(recorded: dict[str, bool], ours: str) -> str:
    return "this request emptied already" if recorded.get(ours) else "never received any"


async def mismatch(ctx: StepContext, stores: list[str], why: str) -> TranscriptStoreMismatch:
    """The refusal naming the stores still to empty; the request stays open. Its fix names the endpoint the first
    was written at, when one is recorded and it is not the one this erasure's client talks to.

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    names = " and ".join(stores)
    recorded = (await recorded_endpoints(ctx.engine, ctx.subject_key)).get(stores[0]) if ctx.subject_key else None
    at = f"{endpoint_setting(recorded)}, " if recorded not in (None, store_endpoint(ctx.transcripts)) else ""
    return TranscriptStoreMismatch(
        f"this user's transcripts were written to {names}; {why}. {what_stays(ctx)}",
        hint=f"run erase with {at}TEAMSTORE_TRANSCRIPTS_URL={stores[0]} and {same_request(ctx)}",
        stores=tuple(stores),
    )


def what_stays(ctx: StepContext) -> str:
    """What a refusal leaves as it was: the request open, or (a dry run) nothing shown."""
    if not ctx.request_id:
        return "A dry run here would show no transcript to erase"
    return "The request stays open (the user fenced, the subject mapping kept) until each store is emptied"


def same_request(ctx: StepContext) -> str:
    """How a refusal's fix names the rerun: the same request id (a dry run: the same user)."""
    return f"the same --request-id {shlex.quote(ctx.request_id)}" if ctx.request_id else "the same user"


async def _unrecorded_runs(ctx: StepContext, retention_days: int) -> int:
    """Runs of the subject the ledger holds from before stores were recorded, within the retention: on the
    database's clock, as the retention sweep counts its days (a host a day ahead missed a day of them)."""
    since = select(store_settings.c.updated_at).where(store_settings.c.name == SUBJECT_STORES_SINCE).scalar_subquery()
    oldest = shared_later(ctx.engine.dialect.name, -timedelta(days=retention_days))
    query = select(func.count(func.distinct(usage.c.run_id))).where(
        usage.c.subject_key == ctx.subject_key, usage.c.finished_at < since, usage.c.finished_at >= oldest)
    try:
        async with ctx.engine.connect() as conn:
            return int(await conn.scalar(query) or 0)
    except SQLAlchemyError as exc:
        raise StoreUnavailable(
            f"could not count the user's runs in the ledger: {describe_failure(exc)}",
            hint="check the database, run `teamstore db upgrade`, then rerun the same request id",
        ) from exc
