"""Whether this machine holds the transcript store a command would write into or sweep.

    from teamstore.audit.placement import check_here, make_here, mark_ours

    await make_here(store, engine)                       # a worker's first transcript: the folder is made here
    await mark_ours(store, engine)                       # ... or an S3 bucket marked as this database's
    await check_here(store, engine, doing="deliver the queued transcripts into")   # flush, sweep: never made

A folder store is one machine's disk. Seen from another machine (or without its mount) it is absent, and a
command that made it there would deliver transcripts where nothing on the workers' machine finds them, or sweep
nothing and report a clean 0. So a folder is made only by a run, or by an operator on purpose
(``teamstore transcripts flush --make-folder``), with a marker naming the state database's id
(:func:`teamstore.db.identity.database_id`); a folder whose marker names another database is another
deployment's. A store reached from anywhere (S3) is always here; another server can hold a bucket of the same
name, so the first run of a process marks the store as this database's too (``Capability.MARKS``), and an
erasure that reaches it at another endpoint than its writers did knows the same store (a proxy, another host
name) from another one (:func:`teamstore.erasure.stores.check_same_store`).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.audit.transcripts import store_endpoint
from teamstore.audit.transcripts.base import Capability, TranscriptStore
from teamstore.audit.transcripts.capabilities import AWS_OWN, aws_host, capability
from teamstore.db.identity import database_id
from teamstore.errors import StorageError, TranscriptFolderElsewhere


async def make_here(store: TranscriptStore, engine: AsyncEngine) -> None:
    """Make a folder store on this machine if it has none, marked as this database's (a marker added to one
    made without); a marker there already is kept, and flushed if this process has not (a run whose flush of it
    failed left it there). Nothing for a store reached from anywhere (S3: :func:`mark_ours`).

    Raises:
        StorageError: The folder could not be made, or its marker flushed. StoreUnavailable: The database's id
            could not be read.
    """
    local = capability(store, Capability.HOST_LOCAL)
    if local is None:
        return
    owner = await local.owner() if await local.present() else None
    # A marker's id is only recorded where there is none: the database's is read only then.
    await local.make_here(owner if owner is not None else await database_id(engine))


async def mark_ours(store: TranscriptStore, engine: AsyncEngine) -> None:
    """Mark a store reached by name from anywhere (S3) as this database's (``Capability.MARKS``), unless it is
    already; nothing for a store without marks.

    Raises:
        TranscriptUnavailable: The store could not be marked. StoreUnavailable: The database's id could not be read.
    """
    if (marks := capability(store, Capability.MARKS)) is not None:
        await marks.mark(await database_id(engine))


@dataclass(frozen=True)
class Elsewhere:
    """A store reached at another endpoint than the one its writers reached it at, which cannot be told for theirs:
    it may be another server's bucket of the same name."""

    endpoint: str
    """The endpoint it is reached at here."""
    why: str
    """Why it cannot be told for theirs, as "which ..." ends: it carries no mark, or would not say."""


async def unmarked_elsewhere(store: TranscriptStore, engine: AsyncEngine, recorded: str | None) -> Elsewhere | None:
    """Where ``store`` is reached, when it is another endpoint than ``recorded`` (where its writers reached it,
    :func:`teamstore.audit.subjects.recorded_endpoints`) and the bucket there carries no mark of this database's
    writers at ``recorded``, or will not say (access denied: a bucket of that name may be someone else's).
    ``None`` when the store is the one they wrote to, as far as can be told: the same endpoint, or an unknown one
    (recorded before endpoints were), or marked by them (a proxy, another host name of their server); or a store
    without marks (a folder).

    Raises:
        TranscriptUnavailable: The store could not be reached, or failed. StoreUnavailable: The database's id
            could not be read.
    """
    marks = capability(store, Capability.MARKS)
    here = store_endpoint(store)
    if marks is None or recorded is None or here is None or recorded == here:
        return None
    ours = await database_id(engine)
    found = await marks.marked(ours, recorded)
    if found is None:
        return Elsewhere(here, "would not say whether it carries this database's mark (access denied)")
    if found or (recorded == AWS_OWN and aws_host((urlsplit(here).hostname or "").lower())
                 and await marks.marked(ours, here)):
        # (Recorded as AWS's own before S3's hosts were told from a load balancer's in front of a MinIO: the
        # workers that reach it there marked it so.)
        return None
    return Elsewhere(here, f"carries no mark of this database's writers at {_at(recorded)}")


async def check_here(store: TranscriptStore, engine: AsyncEngine, *, doing: str, make: bool = False) -> None:
    """Refuse a command that would ``doing`` a folder store this machine does not have, or one another
    database's workers made; with ``make``, make a missing one here instead (the operator's choice).

    Args:
        store: The transcript store.
        engine: The state database.
        doing: What the command would do, as "... the folder" reads (``"sweep"``).
        make: Make the folder here when it is missing.

    Raises:
        TranscriptFolderElsewhere: The folder is not here, or its marker names another database.
        StorageError: The folder's marker cannot be read (a file standing at the folder's path is left to the
            command's own write or sweep, which refuses it).
        StoreUnavailable: The database's id could not be read.
    """
    local = capability(store, Capability.HOST_LOCAL)
    if local is None:
        return
    try:
        here = await local.present()
    except StorageError:
        return  # a file at the folder's path: the command's own write or sweep refuses it, and says so
    ours = await database_id(engine)
    if not here:
        if not make:
            raise TranscriptFolderElsewhere(
                f"the transcripts are kept in {store.url}, a folder this machine does not have (another machine's "
                f"disk, or not mounted here): this command would {doing} it",
                hint="run it on the machine whose folder that is (or where it is mounted at the same path); to make "
                "the folder here on purpose, run `teamstore transcripts flush --make-folder`",
            )
    elif (owner := await local.owner()) not in (None, ours):
        raise TranscriptFolderElsewhere(
            f"the transcript folder {store.url} belongs to another teamstore database (its marker names "
            f"{owner}, this database is {ours}): this command would {doing} it",
            hint="point TEAMSTORE_DATABASE_URL and TEAMSTORE_TRANSCRIPTS_URL at a database and the folder its "
            "workers write to",
        )
    await local.make_here(ours)


def endpoint_setting(endpoint: str | None) -> str:
    """The setting that makes a pass's S3 client talk to ``endpoint`` (as recorded, ``"aws"`` for AWS's own)."""
    return "AWS_ENDPOINT_URL_S3 unset" if endpoint in (None, AWS_OWN) else f"AWS_ENDPOINT_URL_S3={endpoint}"


def _at(endpoint: str) -> str:
    """``endpoint`` (as recorded) as "at ..." ends."""
    return "AWS's own S3" if endpoint == AWS_OWN else endpoint


def described(endpoint: str | None) -> str:
    """``endpoint`` (as recorded) in words."""
    return "AWS's own S3 endpoint" if endpoint in (None, AWS_OWN) else f"the S3 endpoint {endpoint}"
