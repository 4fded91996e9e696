"""The transcript stores an erasure judged done, reached again before the request completes.

    from teamstore.erasure.steps.done_stores import left_in_done, sweep_done

    others, unlisted = await sweep_done(ctx, others)  # the last store's pass: what came back elsewhere, erased
    left = await left_in_done(ctx)                     # its verification: what no hold keeps there, still found

A request whose transcripts went to several stores empties one per pass, and a store it emptied (or left
holding only versions a hold keeps) is done for it. Something restored into such a store after its pass would
otherwise stay there once the request completes: so the pass that ends the request lists every store recorded
for the subject, and every store a pass of this request counted, besides its own. Each is reached with the
erasure's own settings (:func:`teamstore.audit.transcripts.store_beside`: a folder this machine has, or another
bucket or prefix through the configured S3 client); what no hold keeps there is counted and recorded (status
``enumerated``), then deleted, and the verification lists them once more. A done store this pass cannot reach
for good (a folder this machine lacks, an S3 store where it talks to folders or the reverse, or written at
another S3 endpoint than its client talks to, where a bucket of its name carries no mark of this database, a bucket
that no longer exists) does not hold the request open:
each pass would name another store forever when the stores are two machines' folders (or at two endpoints: a
pass has one client). It is reported, with why, as not listed again, once its last sweep finished (one that
counted versions there and did not delete them all stops the request, naming it, as a store still to empty).
Any other failure to list one (a timeout, refused credentials, the wrong region) may pass: it fails the step,
and a rerun lists the store.

A store's part is grown by the main step's rule: what a pass stopped after counting (``enumerated``) recorded is
a superset of what is found since. Each pass that leaves versions held in a store records which, with their sizes
(:func:`teamstore.erasure.stores.record_held`): the next one there compares the held sets. A version held then and
found free now (a hold lifted) was counted then, so it is deleted and not counted again; one held now and not then
(a copy restored under a lock) is counted, with its object and bytes. Where an earlier release's pass left
versions held, its record gives their number and size alone, and the held sets are compared by number: an
estimate, wrong in its bytes when a hold is lifted while a copy restored there is newly held.
"""

from __future__ import annotations

import shlex
from datetime import datetime

from teamstore.audit.placement import described, endpoint_setting, unmarked_elsewhere
from teamstore.audit.subjects import mark_store_erased, recorded_endpoints, recorded_stores
from teamstore.audit.transcripts import Capability, capability, store_beside
from teamstore.audit.transcripts.base import TranscriptStore, subject_prefix
from teamstore.audit.transcripts.capabilities import HoldStatus, holds_any, missing_here
from teamstore.erasure.receipt import Counts, StepStatus, StoreResult
from teamstore.erasure.record import load_parts, part_times, record_part
from teamstore.erasure.steps.base import StepContext
from teamstore.erasure.steps.views import Kept, PlainObjects, Tally, VersionedObjects, View, view_of
from teamstore.erasure.stores import (
    EARLIER,
    HELD,
    TRANSCRIPTS,
    held_before,
    held_by,
    held_id,
    held_stores,
    mismatch,
    pending_stores,
    record_held,
    same_request,
)
from teamstore.errors import StorageError, TranscriptStoreGone, TranscriptUnavailable


async def sweep_done(ctx: StepContext, others: dict[str, StoreResult]
                     ) -> tuple[dict[str, StoreResult], dict[str, str]]:
    """Erase what no hold keeps in every other store done for the request; ``others``: the other stores' parts.

    Returns:
        The parts, each store where something was found grown by it (and recorded so); and the done stores this
        pass could not reach, each with why.

    Raises:
        TranscriptUnavailable: A done store refused a delete no hold explains, or failed during the deletes;
            what was found there is recorded first, so the rerun keeps its count.
    """
    unlisted: dict[str, str] = {}
    for url in await _done_stores(ctx, others):
        store = await _reached(ctx, url)
        if isinstance(store, str):
            unlisted[url] = await _left_unlisted(ctx, url, others.get(url), store)
            continue
        try:
            grown = await _sweep(ctx, url, store, others.get(url))
        finally:
            await _close(ctx, store)
        if grown is not None:
            others = {**others, url: grown}
    return others, unlisted


async def left_in_done(ctx: StepContext) -> Counts:
    """What no hold keeps in the other stores done for the request and reachable from here, listed again (each
    an unexpected version); one the pass could not reach is reported by the step, as not listed again."""
    parts = await load_parts(ctx.engine, ctx.request_id, TRANSCRIPTS) if ctx.request_id else {}
    left = Counts()
    for url in await _done_stores(ctx, parts):
        store = await _reached(ctx, url)
        if isinstance(store, str):
            await _left_unlisted(ctx, url, parts.get(url), store)
            continue
        try:
            left = left.plus((await _free(view_of(store, ctx.held), _prefix(ctx))).counts())
        finally:
            await _close(ctx, store)
    return left


async def planned(ctx: StepContext) -> tuple[Counts, str | None]:
    """For a dry run, which deletes and records nothing: what no hold keeps in the done stores a real pass here
    would list again, counted, and the words naming those, the ones beyond its reach (:func:`_reached`), and those
    the request under way for the user left holding only versions a hold keeps, as its receipt would, naming it.

    A pass lists them only when it is the last: while another recorded store is still to empty (a held request's
    rerun goes back to each store a hold kept some in), it stops after its own naming those, and so does this:
    nothing counted there, the words naming each, and those beyond this process's reach (:func:`_still_to_empty`).

    Raises:
        TranscriptUnavailable: A done store could not be listed for a reason that may pass (:func:`_reached`).
    """
    if others := [store for store in await pending_stores(ctx) if store != ctx.transcripts.url]:
        return Counts(), await _still_to_empty(ctx, others)
    request_id, held = await held_by(ctx)
    held = {store: part for store, part in held.items() if store != ctx.transcripts.url}
    found, listed, beyond = Counts(), [], {}
    for url in await _done_stores(ctx, {}):
        store = await _reached(ctx, url)
        if isinstance(store, str):
            beyond[url] = store
            continue
        try:
            found = found.plus((await _free(view_of(store, ctx.held), _prefix(ctx))).counts())
        finally:
            await _close(ctx, store)
        listed.append(url)
    by = f"the pass of request {shlex.quote(request_id)}" if request_id else ""
    times = await part_times(ctx.engine, request_id, TRANSCRIPTS) if request_id and held else None
    return found, "; ".join(filter(None, [_plan_words(listed, beyond), held_elsewhere(held, by, times=times)])) or None


async def _still_to_empty(ctx: StepContext, others: list[str]) -> str:
    """A dry run's words for the ``others`` stores still to empty besides this one, each emptied by a pass of its
    own, and which of them this process cannot reach: the pass there must run where it can (an operator reading only
    this store's counts would take the rerun here for the whole of it). One that could not be listed now, for a
    reason that may pass, is named so: the plan of this store's pass does not hang on it.
    """
    beyond = {}
    for url in others:
        try:
            store = await _reached(ctx, url)
        except TranscriptUnavailable as exc:
            store = f"could not be listed now, which may pass: {getattr(exc.__cause__, 'message', exc.message)}"
        if isinstance(store, str):
            beyond[url] = store
        else:
            await _close(ctx, store)
    words = (f"a real run would empty {ctx.transcripts.url} and stop, as other stores are still to empty, each by a "
             f"pass of its own (TEAMSTORE_TRANSCRIPTS_URL set to it): {', '.join(others)}")
    if beyond:
        where = "; ".join(f"{url} ({why})" for url, why in sorted(beyond.items()))
        words += f"; beyond this process's reach, so their pass must run where they are reached: {where}"
    return words


def _plan_words(listed: list[str], beyond: dict[str, str]) -> str | None:
    """A dry run's words for the done stores: those a real pass would list again, and those beyond its reach."""
    words = []
    if listed:
        words.append(f"a real run would list again, and erase what no hold keeps there: {', '.join(listed)}")
    if beyond:
        where = "; ".join(f"{url} ({why})" for url, why in sorted(beyond.items()))
        words.append(f"a real run would not list again, beyond its reach: {where}")
    return "; ".join(words) or None


def held_elsewhere(held: dict[str, StoreResult], by: str = "this request's pass", *,
                   times: dict[str, datetime] | None = None) -> str | None:
    """Where the held versions other passes counted are, for the receipt; ``by``: whose pass counted them (a dry
    run names the request under way, whose pass it was); ``times``: when each store's pass counted them."""
    if not held:
        return None
    times = times or {}
    where = ", ".join(f"{part.counts.retained + part.counts.unreadable} in {store}"
                      + (f" (at {times[store]:%Y-%m-%d %H:%M:%S}Z)" if store in times else "")
                      for store, part in sorted(held.items()))
    return f"held in other stores, counted as {by} there found them: {where}"


async def held_as_last_found(ctx: StepContext) -> str | None:
    """For a pass that failed, the words for the held versions its counts take from the other stores this request's
    passes left holding: as each of those passes found them, and when, not listed since, so not passed off as what
    is held there now (a hold may have been lifted since).

    Raises:
        StoreUnavailable: The database could not be reached.
    """
    held = {store: part for store, part in (await held_stores(ctx)).items() if store != ctx.transcripts.url}
    if not held or not ctx.request_id:
        return None
    times = await part_times(ctx.engine, ctx.request_id, TRANSCRIPTS)
    return (f"its held count is not current: {held_elsewhere(held, times=times)}, not listed since, so a hold lifted "
            "there since is not seen")


def not_listed_again(unlisted: dict[str, str]) -> str | None:
    """The receipt's words for the done stores a pass could not reach."""
    if not unlisted:
        return None
    where = "; ".join(f"{url} ({why})" for url, why in sorted(unlisted.items()))
    # Once the request completes no later one reaches these stores: the subject mapping that names the folder
    # to list there is deleted with it, so a new request for the user finds no subject.
    return (f"not listed again by this request, so a copy restored there since its pass there is not erased by it: "
            f"{where}; nor can a later request for the user reach one (the erasure deletes the subject mapping "
            "that names its folder): one sealed under the user's data key stays beyond use (the key is destroyed), "
            "and the transcript retention (TEAMSTORE_TRANSCRIPT_RETENTION_DAYS) removes any copy there in time")


async def _done_stores(ctx: StepContext, parts: dict[str, StoreResult]) -> list[str]:
    """Every store recorded for the subject or counted by this request's passes, but the one talked to."""
    if ctx.subject_key is None:
        return []
    recorded = await recorded_stores(ctx.engine, ctx.subject_key)
    return sorted((set(recorded) | set(parts)) - {ctx.transcripts.url, EARLIER})


def _subject(ctx: StepContext) -> str:
    assert ctx.subject_key is not None  # _done_stores names none without one
    return ctx.subject_key


def _prefix(ctx: StepContext) -> str:
    return subject_prefix(_subject(ctx))


async def _reached(ctx: StepContext, url: str) -> TranscriptStore | str:
    """The store ``url`` names, reached with the erasure's settings and listed once (the caller closes it); or
    why it is beyond this pass for good (no client for its kind, a folder this machine lacks, a bucket gone).

    Raises:
        TranscriptUnavailable: It could not be listed for another reason (a timeout, refused credentials or
            access, the wrong region): one that may pass, so the request stays open and a rerun lists it.
    """
    store = store_beside(ctx.transcripts, url)
    if store is None:
        return f"this erasure, talking to {ctx.transcripts.url}, cannot reach that kind of store"
    try:
        if (elsewhere := await _elsewhere(ctx, url, store)) is not None:
            await _close(ctx, store)
            return elsewhere
        if not await missing_here(store):
            await holds_any(store, _prefix(ctx))
            return store
        why = "a folder this machine does not have"
    except TranscriptStoreGone as exc:
        why = f"it no longer exists: {exc.message}"
    except (TranscriptUnavailable, StorageError) as exc:
        await _close(ctx, store)
        raise TranscriptUnavailable(
            f"could not list {url}, a transcript store done for this request, again: {exc.message}",
            hint=f"{exc.hint or 'fix that store'}, then "
            f"{'rerun the same request id' if ctx.request_id else 'run the dry run again'}") from exc
    await _close(ctx, store)
    return why


async def _elsewhere(ctx: StepContext, url: str, store: TranscriptStore) -> str | None:
    """Why ``store`` (``url``, reached through this erasure's client) is not reachable here: recorded at another
    endpoint than the client talks to, where a bucket of its name, if any, carries no mark of this database (another
    server's). None when it is not, when the bucket there is marked (the same server through a proxy or another
    host name), or when its endpoint is unknown (recorded before migration 0029): such a store is reached through
    this pass's client. A bucket that will not say whether it is marked is not reachable here either (on AWS, a
    bucket of that name may be another account's).

    Raises:
        TranscriptUnavailable: The bucket could not be reached.
    """
    if store is ctx.transcripts or capability(store, Capability.SIBLINGS) is None:
        return None
    recorded = (await recorded_endpoints(ctx.engine, _subject(ctx))).get(url)
    if (found := await unmarked_elsewhere(store, ctx.engine, recorded)) is None:
        return None
    return (f"not reachable here: it was written at {described(recorded)} and this erasure talks to "
            f"{described(found.endpoint)}, where a bucket of its name {found.why}; a pass with "
            f"{endpoint_setting(recorded)} reaches it")


async def _left_unlisted(ctx: StepContext, url: str, part: StoreResult | None, why: str) -> str:
    """``why`` the done store ``url`` is not listed again, if its last sweep finished (``part``: emptied, or left
    holding only held versions).

    Raises:
        TranscriptStoreMismatch: A sweep there counted versions and did not finish deleting them (``enumerated``,
            ``failed``): reported as erased, they would stay there. It is to be reached, as a store still to empty.
    """
    if part is None or part.status is StepStatus.DELETED or part.status in HELD:
        return why
    raise await mismatch(ctx, [url], f"a pass of this request counted some there and did not finish deleting them, and "
                   f"this erasure cannot reach it ({why})")


async def _close(ctx: StepContext, store: TranscriptStore) -> None:
    if store is not ctx.transcripts:
        await store.close()


async def _sweep(ctx: StepContext, url: str, store: TranscriptStore, part: StoreResult | None
                 ) -> StoreResult | None:
    """Count what no hold keeps in a done ``store``, record it (``enumerated``), then delete it; the store's
    ``part`` grown by what was found, or None if nothing was.

    Raises:
        TranscriptUnavailable: A delete was refused and no hold explains it, or failed.
    """
    view, prefix = view_of(store, ctx.held), _prefix(ctx)
    before: frozenset[str] | Counts | None = frozenset()  # emptied by its pass, or never counted: nothing held
    if part is not None and part.status in HELD:
        before = await held_before(ctx, url)
    free, holding = await _listed(ctx, view, prefix, before if isinstance(before, frozenset) else frozenset())
    counts = _grown(part, free.counts(), holding, before)
    if counts is None:
        return None
    await record_part(ctx.engine, ctx.request_id, TRANSCRIPTS, url,
                      StoreResult(status=StepStatus.ENUMERATED, counts=counts), ctx.owner)
    try:
        kept = await _deleted(ctx, url, view, prefix, free.listed)
    except TranscriptUnavailable as exc:
        if part is None or part.status not in HELD:
            raise
        # Recorded enumerated now, the store is one to empty again: a rerun against the last store stops at it.
        raise TranscriptUnavailable(exc.message, hint=f"{exc.hint or 'fix that store'}; then run erase with "
                                    f"TEAMSTORE_TRANSCRIPTS_URL={url} and {same_request(ctx)}") from exc
    counts = counts.model_copy(update={"retained": counts.retained + kept.retained,
                                       "unreadable": counts.unreadable + kept.unreadable})
    grown = _result(counts)
    if grown.status in HELD:
        await record_held(ctx, url, grown.status, holding.versions + kept.versions)  # found free, then held
    await record_part(ctx.engine, ctx.request_id, TRANSCRIPTS, url, grown, ctx.owner)
    if part is not None and part.status in HELD and grown.status not in HELD:
        # Its hold lifted, it is emptied now: no longer a store this request left holding, nor one to empty.
        await mark_store_erased(ctx.engine, _subject(ctx), url)
    return grown


async def _deleted(ctx: StepContext, url: str, view: View, prefix: str, listed: int) -> Kept:
    """Delete what no hold keeps under ``prefix`` in the done store ``url``; what it refused that a hold explains.

    Raises:
        TranscriptUnavailable: A delete was refused and no hold explains it, or failed.
    """
    kept = Kept()
    if isinstance(view, PlainObjects):
        if listed:
            await view.delete_folder(prefix)
    else:
        await _erase_free(ctx, view, prefix, kept)
    kept.check(url)
    return kept


async def _listed(ctx: StepContext, view: View, prefix: str, counted: frozenset[str]) -> tuple[Tally, Kept]:
    """What no hold keeps under ``prefix``, but the versions ``counted`` names (held at the last pass, so counted
    then: :func:`~teamstore.erasure.stores.held_id`), and the versions a hold keeps (each asked about once: the
    attempt keeps what it found held)."""
    free, holding = Tally(), Kept()
    async for page in view.pages(prefix):
        held = {version for version in page if await view.held(version) is HoldStatus.HELD}
        free.add([version for version in page if version not in held and held_id(version) not in counted])
        await holding.add(ctx, view, dict.fromkeys(held, "held"))
    return free, holding


async def _erase_free(ctx: StepContext, view: VersionedObjects, prefix: str, kept: Kept) -> None:
    """Delete, a page at a time, the versions no hold keeps; ``kept``: what the store refused of them."""
    async for page in view.pages(prefix):
        free = [version for version in page if await view.held(version) is not HoldStatus.HELD]
        if free:
            await kept.add(ctx, view, await view.delete(free))


async def _free(view: View, prefix: str) -> Tally:
    """What no hold keeps under ``prefix``, counted."""
    free = Tally()
    async for page in view.pages(prefix):
        free.add([version for version in page if await view.held(version) is not HoldStatus.HELD])
    return free


def _grown(part: StoreResult | None, found: Counts, holding: Kept, before: frozenset[str] | Counts | None
           ) -> Counts | None:
    """A done store's counts with what a later pass found there (``found``: free, but the versions held at the last
    pass; ``holding``: held), by the main step's rule; None when they stay as they are.

    After a pass stopped there once it had counted (``enumerated``), what is found is a subset of its count. Else
    ``before`` is which versions were held at the last pass there (none, when it emptied the store); for a part an
    earlier release recorded, how many were (or None), and the count is estimated (:func:`_estimated`).
    """
    held = {"retained": holding.retained, "unreadable": holding.unreadable}
    if part is not None and part.status is not StepStatus.DELETED and part.status not in HELD:
        return part.counts.widest(found).model_copy(update=held)
    if not isinstance(before, frozenset):
        assert part is not None  # a store with no part held nothing before
        return _estimated(part, found, holding, before)
    newly = Tally()
    newly.add([version for version in holding.versions if held_id(version) not in before])
    if not (found.versions or found.delete_markers) and {held_id(v) for v in holding.versions} == before:
        return None
    counted = part.counts if part is not None else Counts()
    return counted.plus(found).plus(newly.counts()).model_copy(update=held)


def _estimated(part: StoreResult, found: Counts, holding: Kept, held_before: Counts | None) -> Counts | None:
    """A held store's counts grown by a pass that knows how many versions were held at the last pass there, not
    which (an earlier release's record): held versions it counted and now found free (a hold lifted) are not
    counted again, and held versions beyond them (a copy restored under a lock) are added, by number."""
    before = part.counts.retained + part.counts.unreadable
    now = holding.retained + holding.unreadable
    freed, extra = max(0, before - now), max(0, now - before)
    if not (found.versions or found.delete_markers) and not freed and not extra:
        return None
    less = _freed(found, freed, held_before, holding.held.counts())
    held = {"retained": holding.retained, "unreadable": holding.unreadable}
    return part.counts.plus(_beyond(found, less)).plus(Counts(versions=extra)).model_copy(update=held)


def _freed(found: Counts, freed: int, held_before: Counts | None, held_now: Counts) -> Counts:
    """Of ``found``, the ``freed`` versions a hold kept at the last pass (counted then): what the held versions
    then exceed those held now by, when that pass recorded their number and size; else each of an object, their
    bytes a share of what was found. Either way as many objects as versions freed, as the part's count took them:
    what is found free is a subset of that count."""
    if not freed or not found.versions:
        return Counts()
    if held_before is not None:
        gone = _beyond(held_before, held_now)
        return Counts(versions=gone.versions, objects=freed, bytes=gone.bytes)
    left = max(0, found.versions - freed)
    return Counts(versions=freed, objects=freed, bytes=found.bytes - found.bytes * left // found.versions)


def _beyond(counts: Counts, less: Counts) -> Counts:
    """What ``counts`` exceeds ``less`` by, a field at a time (none where it does not)."""
    return Counts(**{k: max(0, getattr(counts, k) - getattr(less, k)) for k in Counts.model_fields})


def _result(counts: Counts) -> StoreResult:
    """A done store's part: held if some of its versions are, else deleted."""
    if not counts.retained and not counts.unreadable:
        return StoreResult(status=StepStatus.DELETED, counts=counts)
    status = StepStatus.RETAINED_UNDER_HOLD if counts.retained else StepStatus.SHREDDED
    return StoreResult(status=status, counts=counts)
