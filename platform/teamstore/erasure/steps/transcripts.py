"""The transcript step: every object version and delete marker under the user's subject prefix.

    from teamstore.erasure.steps.transcripts import TranscriptStep

    result = await TranscriptStep().erase(ctx, prior=None)

The step only orchestrates: it asks the store what it supports (``Capability``) and calls the typed
methods of :mod:`teamstore.audit.transcripts.capabilities`, never a backend's client. A store that lists
versions and deletes them in batches (S3: ``Capability.VERSIONS`` and ``BATCH_DELETE``) has every version
and delete marker under the subject's prefix listed and deleted a page (1,000) at a time, so the step holds a
page or two whatever the user's history; a version it refuses to delete is reported, with its count, when a
hold explains it (``Capability.HOLDS``: a legal hold or an unexpired retention), and fails the step otherwise.
A held version sealed under a data key that no longer exists (the key step destroyed the user's first; the
version's header says which key) is ``unreadable``; one written before sealing can still be read, and is
``retained``. Other stores (the local folder) have no versions: their objects are counted a page at a time,
with the temporary files a killed writer left (``Capability.PARTIAL_WRITES``), which hold whole transcripts
too, then the subject's folder is removed at once.

The counts are recorded (status ``enumerated``) before anything is deleted: every page is counted first, then
listed again and deleted, so a rerun after a kill reports what the first attempt found, not just what was left.
Each transcript store's counts are recorded apart (a part of the step) and the step's are their sum: a request
whose transcripts went to several stores counts each once, whichever store a rerun talks to. The pass that ends
such a request, and its verification, list the other stores again (:mod:`teamstore.erasure.steps.done_stores`).
"""

from __future__ import annotations

from contextlib import aclosing

from teamstore.audit.subjects import mark_store_erased, record_store
from teamstore.audit.transcripts import store_endpoint
from teamstore.audit.transcripts.base import subject_prefix
from teamstore.audit.transcripts.capabilities import HoldStatus, holds_any
from teamstore.erasure.receipt import Counts, StepStatus, StoreResult
from teamstore.erasure.record import part_times, record_part, record_step
from teamstore.erasure.steps.base import StepContext
from teamstore.erasure.steps.done_stores import held_elsewhere, left_in_done, not_listed_again, sweep_done
from teamstore.erasure.steps.views import (
    Kept,
    PlainObjects,
    Tally,
    VersionedObjects,
    View,
    is_beyond_use,
    rerunnable,
    tallied,
    view_of,
)
from teamstore.erasure.stores import (
    EARLIER,
    HELD,
    check_same_store,
    held_stores,
    mark_reached,
    mismatch,
    pending_stores,
    record_held,
    transcript_parts,
)
from teamstore.errors import TranscriptUnavailable


class TranscriptStep:
    """Erase every transcript object version of the subject."""

    name = "transcripts"

    async def enumerate(self, ctx: StepContext) -> Counts:
        """Count versions, markers and bytes under the subject prefix.

        Raises:
            TranscriptUnavailable: The store could not be reached; a dry run's fix says to run it again, as it
                has no request to rerun.
        """
        if ctx.subject_key is None:
            return Counts()
        try:
            await rerunnable(check_same_store(ctx))
            return (await tallied(view_of(ctx.transcripts, ctx.held), subject_prefix(ctx.subject_key))).counts()
        except TranscriptUnavailable as exc:
            cause = exc.__cause__  # the store's own error, before rerunnable named the request
            if ctx.request_id or not isinstance(cause, TranscriptUnavailable):
                raise
            raise TranscriptUnavailable(cause.message, hint=f"{cause.hint or 'fix the transcript store'}, then run "
                                        "the dry run again") from cause

    async def erase(self, ctx: StepContext, prior: StoreResult | None) -> StoreResult:
        """Count every page and record the whole; then delete, a page of 1,000 at a time, and classify what the
        store refused.

        Counting first costs one more listing request per 1,000 versions, and keeps a rerun's counts whole: a
        record written page by page, as each was deleted, would leave a rerun after a kill both the pages deleted
        before it (recorded) and those left (found), never the page being deleted. Each store's counts are
        recorded apart (a part of the step, by its URL) and the step's are their sum, so a rerun against another
        store adds to a store's counts, and one against the same store takes the larger of its own (it lists a
        subset of what the last pass there found), or adds to them when that pass found something come since its
        deletes. The counts of a pass an earlier release stopped in a store it did not name count as the store
        whose passes found the most: the sum may be short of what was deleted, never beyond it.

        Raises:
            TranscriptUnavailable: The store could not be reached or refused for a reason other than a hold,
                here or in a store done for the request (:mod:`~teamstore.erasure.steps.done_stores`).
            TranscriptStoreMismatch: Another recorded store still holds some; it names them.
        """
        if ctx.subject_key is None:
            return StoreResult(status=StepStatus.DELETED, counts=prior.counts if prior else Counts())
        at_writers = await rerunnable(check_same_store(ctx))  # the bucket its writers used, not another server's of its name
        # Recorded before anything is deleted (a no-op if it is already): a rerun of this request then talks
        # to this store again, even for transcripts written before stores were recorded.
        await record_store(ctx.engine, ctx.subject_key, ctx.transcripts.url,
                           endpoint=store_endpoint(ctx.transcripts), erasing=True)
        if at_writers:
            await mark_reached(ctx)
        view, prefix = view_of(ctx.transcripts, ctx.held), subject_prefix(ctx.subject_key)
        others, before = await _parts(ctx, prior)
        tally = await tallied(view, prefix)
        counts = _carry(tally.counts(), before)
        await self._record(ctx, StepStatus.ENUMERATED, counts, others)
        kept = Kept()
        if isinstance(view, PlainObjects):
            await self._erase_folder(ctx, view, prefix, tally.listed)
        else:
            counts = counts.widest(await self._erase_pages(ctx, view, prefix, tally.listed, kept))
        kept.check()
        await self._other_stores(ctx, view, counts, kept, others)
        others, unlisted = await sweep_done(ctx, others)
        held = {store: part for store, part in others.items() if part.status in HELD}
        times = await part_times(ctx.engine, ctx.request_id, self.name) if held else None
        detail = "; ".join(filter(None, [held_elsewhere(held, times=times), not_listed_again(unlisted)]))
        return StoreResult(status=StepStatus.DELETED, counts=_sum(counts, others, held=False), detail=detail or None)

    async def _record(self, ctx: StepContext, status: StepStatus, counts: Counts, others: dict[str, StoreResult]
                      ) -> None:
        """Record this store's part, and the step with every store's counts added up."""
        await record_part(ctx.engine, ctx.request_id, self.name, ctx.transcripts.url,
                          StoreResult(status=status, counts=counts), ctx.owner)
        await record_step(ctx.engine, ctx.request_id, self.name,
                          StoreResult(status=status, counts=_sum(counts, others)), ctx.owner)

    async def _erase_pages(self, ctx: StepContext, view: VersionedObjects, prefix: str, counted: int, kept: Kept
                           ) -> Counts:
        """Each page listed again, deleted, and its refusals asked about; what this listing held, counted too (a
        version that landed after the count is deleted, and counted)."""
        deleting = Tally()
        async for page in view.pages(prefix):
            deleting.add(page)
            await kept.add(ctx, view, await view.delete(page))
            ctx.progress(self.name, deleting.listed, max(deleting.listed, counted))
        return deleting.counts()

    async def _erase_folder(self, ctx: StepContext, view: PlainObjects, prefix: str, counted: int) -> None:
        """Remove the counted folder at once (nothing in it is ever refused)."""
        if counted:
            await view.delete_folder(prefix)
            ctx.progress(self.name, counted, counted)

    async def _other_stores(self, ctx: StepContext, view: View, counts: Counts, kept: Kept,
                            others: dict[str, StoreResult]) -> None:
        """Record what this pass left in this store, and stop the request, open, while another store still holds
        some of the subject's transcripts.

        A store is marked emptied once a listing finds nothing left in it, while another store is still to empty
        or holds versions a hold keeps (the last one alone, the verification lists). One left holding only
        versions a hold keeps is done for this request too: its part records them (``retained``, ``unreadable``),
        so no pass comes back to it, and the one that ends the request counts them once
        (:func:`teamstore.erasure.stores.held_stores`). One where anything came since the deletes is neither: the
        next pass there adds what it finds to what this one deleted. The step is recorded as deleted (not
        verified): the rerun against the next store adds to these counts.

        Raises:
            TranscriptStoreMismatch: Another recorded store still holds some; it names them.
        """
        pending = [store for store in await pending_stores(ctx) if store != ctx.transcripts.url]
        last = not pending and not any(part.status in HELD for part in others.values())
        status, counts = await self._left_here(ctx, view, counts, kept, last=last)
        if status in HELD:
            await record_held(ctx, ctx.transcripts.url, status, kept.versions)
        await record_part(ctx.engine, ctx.request_id, self.name, ctx.transcripts.url,
                          StoreResult(status=status, counts=counts), ctx.owner)
        if not pending:
            return
        await record_step(ctx.engine, ctx.request_id, self.name,
                          StoreResult(status=StepStatus.DELETED, counts=_sum(counts, others)), ctx.owner)
        but = f", but for {kept.held.listed} version(s) a hold keeps there," if kept.held.listed else ""
        raise await mismatch(ctx, pending, f"this erasure has deleted them from {ctx.transcripts.url}{but} and talks to no "
                       "other store")

    async def _left_here(self, ctx: StepContext, view: View, counts: Counts, kept: Kept, *, last: bool
                         ) -> tuple[StepStatus, Counts]:
        """This store's part after the deletes: its status, and its counts. ``last``: no other store is to empty
        or holds versions a hold keeps (the verification lists this one)."""
        assert ctx.subject_key is not None  # erase() returned earlier without one
        prefix = subject_prefix(ctx.subject_key)
        if kept.held.listed and not await _beyond_held(view, prefix):  # the last store too: a rerun adds to it
            status = StepStatus.RETAINED_UNDER_HOLD if kept.retained else StepStatus.SHREDDED
            return status, counts.model_copy(update={"retained": kept.retained, "unreadable": kept.unreadable})
        if kept.held.listed:  # something came since the deletes: named again, the held versions counted then
            return StepStatus.DELETED, _beyond(counts, kept.held.counts())
        if not last and not await rerunnable(holds_any(ctx.transcripts, prefix)):
            # A held request's rerun goes back to the stores holds kept some in, not here.
            await mark_store_erased(ctx.engine, ctx.subject_key, ctx.transcripts.url)
        # Emptied, or the one store left (the verification lists it, and a rerun talks to it), or something came
        # since the deletes: not emptied, so named again, and the next pass there adds what it finds.
        return StepStatus.DELETED, counts

    async def remaining(self, ctx: StepContext) -> Counts:
        """List again, counting versions still under a hold as retained; add the versions a hold keeps in the
        other stores this request's passes left so (as those passes found them, so each is counted once), and
        whatever no hold keeps in the other stores done for the request, listed again
        (:func:`~teamstore.erasure.steps.done_stores.left_in_done`).

        Raises:
            TranscriptStoreMismatch: Another store recorded for the subject still holds some (recorded
                after the erasure began): this one cannot vouch for them.
        """
        if ctx.subject_key is None:
            return Counts()
        if others := [store for store in await pending_stores(ctx) if store != ctx.transcripts.url]:
            raise await mismatch(ctx, others, f"this erasure talks to {ctx.transcripts.url} alone")
        view = view_of(ctx.transcripts, ctx.held)
        left, held, beyond_use = Tally(), 0, 0
        async for page in view.pages(subject_prefix(ctx.subject_key)):
            left.add(page)
            for version in page:
                if await view.held(version) is HoldStatus.HELD:
                    held += 1
                    beyond_use += await is_beyond_use(ctx, view, version)
        total = left.counts(retained=held - beyond_use, unreadable=beyond_use)
        for store, part in (await held_stores(ctx)).items():
            if store != ctx.transcripts.url:
                total = total.plus(_as_left(part.counts))
        return total.plus(await left_in_done(ctx))


async def _parts(ctx: StepContext, prior: StoreResult | None) -> tuple[dict[str, StoreResult], StoreResult | None]:
    """What earlier passes of the request recorded: every other store's part, by URL, and this store's own."""
    parts = await transcript_parts(ctx, prior)
    return parts, parts.pop(ctx.transcripts.url, None)


async def _beyond_held(view: View, prefix: str) -> bool:
    """Whether the store holds, under ``prefix``, a version or delete marker this attempt did not find held:
    one that came since its deletes."""
    held = view.seen.held if isinstance(view, VersionedObjects) else set()  # nothing holds a plain object
    async with aclosing(view.pages(prefix)) as pages:
        async for page in pages:
            if any(version not in held for version in page):
                return True
    return False


def _carry(found: Counts, prior: StoreResult | None) -> Counts:
    """One store's counts: what this pass found, with what earlier passes there recorded."""
    if prior is None:
        return found
    left_over = {"retained": 0, "unreadable": 0}
    if prior.status is StepStatus.DELETED:  # emptied, or what came since: anything found now adds to it
        return found.plus(prior.counts.model_copy(update=left_over))
    # enumerated, held or failed earlier: what is listed now is a subset of what was recorded then
    return found.widest(prior.counts.model_copy(update=left_over))


def _sum(counts: Counts, others: dict[str, StoreResult], *, held: bool = True) -> Counts:
    """This store's ``counts`` and every other part's added up; without ``held``, what the other parts' holds
    keep is left out of ``retained`` and ``unreadable`` (the verification adds it).

    The counts of a pass an earlier release stopped in a store it did not name (:data:`EARLIER`, not
    ``deleted``) are of one of the stores: they count as the store whose counts are the largest, adding only what
    they exceed it by (a field at a time).
    """
    total, largest = counts, counts
    for store, part in others.items():
        if store == EARLIER and part.status is not StepStatus.DELETED:
            continue
        found = part.counts if held else part.counts.model_copy(update={"retained": 0, "unreadable": 0})
        total, largest = total.plus(found), largest.widest(found)
    earlier = others.get(EARLIER)
    if earlier is not None and earlier.status is not StepStatus.DELETED:
        total = total.plus(_beyond(earlier.counts, largest))
    return total


def _beyond(counts: Counts, less: Counts) -> Counts:
    """What ``counts`` exceeds ``less`` by, a field at a time (none where it does not)."""
    return Counts(**{k: max(0, getattr(counts, k) - getattr(less, k)) for k in Counts.model_fields})


def _as_left(counts: Counts) -> Counts:
    """What a held store's part says remains there: its held versions, each retained or unreadable."""
    return Counts(versions=counts.retained + counts.unreadable, retained=counts.retained,
                  unreadable=counts.unreadable)

