"""The transcript stores an erasure judged done, reached again before the request completes.

    from teamstore.erasure.steps.done_stores import left_in_done, sweep_done

    others = await sweep_done(ctx, others)     # the last store's pass: what came back elsewhere, erased
    left = await left_in_done(ctx)             # its verification: what no hold keeps there, still found

A request whose transcripts went to several stores empties one per pass, and a store it emptied (or left
holding only versions a hold keeps) is done for it. Something restored into such a store after its pass would
otherwise stay there once the request completes: so the pass that ends the request lists every store recorded
for the subject, and every store a pass of this request counted, besides its own. Each is reached with the
erasure's own settings (:func:`teamstore.audit.transcripts.store_beside`: a folder this machine has, or another
bucket or prefix through the configured S3 client); what no hold keeps there is deleted and added to that
store's part, and the verification lists them once more. A store it cannot reach is never judged clean: the
request stays open, naming it (``TranscriptStoreMismatch``), as for a store still to empty. The versions a hold
keeps are left as the store's pass counted them, once; held versions beyond that count (a copy restored under a
lock) are added to it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from teamstore.audit.subjects import recorded_stores
from teamstore.audit.transcripts import store_beside
from teamstore.audit.transcripts.base import TranscriptStore, subject_prefix
from teamstore.audit.transcripts.capabilities import HoldStatus, missing_here
from teamstore.erasure.receipt import Counts, StepStatus, StoreResult
from teamstore.erasure.record import load_parts, record_part
from teamstore.erasure.steps.base import StepContext
from teamstore.erasure.steps.views import Kept, PlainObjects, Tally, VersionedObjects, View, tallied, view_of
from teamstore.erasure.stores import EARLIER, TRANSCRIPTS, mismatch, same_request, what_stays
from teamstore.errors import TranscriptStoreMismatch, TranscriptUnavailable


async def sweep_done(ctx: StepContext, others: dict[str, StoreResult]) -> dict[str, StoreResult]:
    """Erase what no hold keeps in every other store done for the request; ``others``: the other stores' parts.

    Returns:
        The parts, each store where something was found grown by it (and recorded so).

    Raises:
        TranscriptStoreMismatch: A done store cannot be reached or listed from here, or refused a delete no hold
            explains; it is named.
    """
    for url in await _done_stores(ctx, others):
        async with _reached(ctx, url) as store:
            grown = await _sweep(ctx, store, others.get(url))
        if grown is not None:
            await record_part(ctx.engine, ctx.request_id, TRANSCRIPTS, url, grown, ctx.owner)
            others = {**others, url: grown}
    return others


async def left_in_done(ctx: StepContext) -> Counts:
    """What no hold keeps in the other stores done for the request, listed again (each an unexpected version).

    Raises:
        TranscriptStoreMismatch: A done store cannot be reached or listed from here; it is named.
    """
    parts = await load_parts(ctx.engine, ctx.request_id, TRANSCRIPTS) if ctx.request_id else {}
    left = Counts()
    for url in await _done_stores(ctx, parts):
        async with _reached(ctx, url) as store:
            free = await _free(view_of(store, ctx.held), _prefix(ctx))
        left = left.plus(free.counts())
    return left


async def _done_stores(ctx: StepContext, parts: dict[str, StoreResult]) -> list[str]:
    """Every store recorded for the subject or counted by this request's passes, but the one talked to."""
    if ctx.subject_key is None:
        return []
    recorded = await recorded_stores(ctx.engine, ctx.subject_key)
    return sorted((set(recorded) | set(parts)) - {ctx.transcripts.url, EARLIER})


def _prefix(ctx: StepContext) -> str:
    assert ctx.subject_key is not None  # _done_stores names none without one
    return subject_prefix(ctx.subject_key)


@asynccontextmanager
async def _reached(ctx: StepContext, url: str) -> AsyncIterator[TranscriptStore]:
    """The store ``url`` names, reached with the erasure's settings, closed after; what it could not list is
    told as the store to rerun against, never as a failure a rerun here would repeat."""
    store = store_beside(ctx.transcripts, url)
    if store is None:
        raise mismatch(ctx, [url], f"this erasure, talking to {ctx.transcripts.url}, cannot reach that store with "
                       "its settings, and must list it again (a store this request is done with) before it completes")
    try:
        if await missing_here(store):
            raise _folder_missing(ctx, url)
        yield store
    except TranscriptUnavailable as exc:
        fix = f" (fix: {exc.hint})" if exc.hint else ""
        raise mismatch(ctx, [url], f"listing that store again (a store this request is done with) failed: "
                       f"{exc.message}{fix}") from exc
    finally:
        if store is not ctx.transcripts:
            await store.close()


def _folder_missing(ctx: StepContext, url: str) -> TranscriptStoreMismatch:
    return TranscriptStoreMismatch(
        f"this user's transcripts were written to {url}, which this request is done with and must list again "
        f"before it completes, but it is a folder this machine does not have (another machine's "
        f"disk, or not mounted here). {what_stays(ctx)}",
        hint=f"run erase with {same_request(ctx)} on the machine whose folder that is (or where it is mounted at the "
        "same path); if the folder is gone for good, create it empty here and rerun",
        stores=(url,),
    )


async def _sweep(ctx: StepContext, store: TranscriptStore, part: StoreResult | None) -> StoreResult | None:
    """Delete what no hold keeps in a done ``store``; its ``part`` grown by what was found, or None if nothing was."""
    view, prefix = view_of(store, ctx.held), _prefix(ctx)
    if isinstance(view, PlainObjects):
        found = await tallied(view, prefix)
        if found.listed:
            await view.delete_folder(prefix)
        return _grown(part, found.counts()) if found.listed else None
    found, kept, holding = await _erase_free(ctx, view, prefix)
    kept.check()
    # Held versions beyond those the store's pass counted came since (a copy restored under a lock): counted too.
    before = part.counts if part is not None else Counts()
    extra = Counts(retained=max(0, holding.retained - before.retained),
                   unreadable=max(0, holding.unreadable - before.unreadable))
    extra = extra.model_copy(update={"versions": extra.retained + extra.unreadable})
    if not found.listed and not extra.versions:
        return None
    return _grown(part, found.counts(retained=kept.retained, unreadable=kept.unreadable).plus(extra))


async def _erase_free(ctx: StepContext, view: VersionedObjects, prefix: str) -> tuple[Tally, Kept, Kept]:
    """Delete, a page at a time, the versions no hold keeps: what they were, what the store refused of them, and
    the versions found held (each asked about once: the attempt keeps what it found held)."""
    found, kept, holding = Tally(), Kept(), Kept()
    async for page in view.pages(prefix):
        held = {version for version in page if await view.held(version) is HoldStatus.HELD}
        free = [version for version in page if version not in held]
        found.add(free)
        await holding.add(ctx, view, dict.fromkeys(held, "held"))
        if free:
            await kept.add(ctx, view, await view.delete(free))
    return found, kept, holding


async def _free(view: View, prefix: str) -> Tally:
    """What no hold keeps under ``prefix``, counted."""
    free = Tally()
    async for page in view.pages(prefix):
        free.add([version for version in page if await view.held(version) is not HoldStatus.HELD])
    return free


def _grown(part: StoreResult | None, found: Counts) -> StoreResult:
    """A store's part with what a later pass found there added: held if its versions are (a hold that came with
    a restored copy too), else deleted, as a pass that found something since its deletes records it."""
    counts = found if part is None else part.counts.plus(found)
    if not counts.retained and not counts.unreadable:
        return StoreResult(status=StepStatus.DELETED, counts=counts)
    status = StepStatus.RETAINED_UNDER_HOLD if counts.retained else StepStatus.SHREDDED
    return StoreResult(status=status, counts=counts)
