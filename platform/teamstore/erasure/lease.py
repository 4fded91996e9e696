"""The erasure request's lease, kept while a coordinator runs it, so that no second coordinator takes it over.

    from teamstore.erasure import requests
    from teamstore.erasure.lease import keeping_lease
    from teamstore.ids import log_name

    rid = "er-4f0c9a1b2c3d4e5f60718293"
    if await requests.claim(engine, rid, owner, lease_seconds=120):
        async with keeping_lease(engine, rid, owner, 120, logged_as=log_name(rid, key)):
            ...                                      # the steps, however long they take

A coordinator claims the request before it runs it (:func:`teamstore.erasure.requests.claim`); the lease runs out
``TEAMSTORE_ERASURE_LEASE_SECONDS`` after it was last taken, and a rerun then takes the request for one killed
outright. This module renews it every third of that time while the steps run, so a step that takes longer
(millions of transcript versions) is never taken over. A renewal that finds the request taken over (the process
paused, or the database away, past the lease) is logged and renewals stop: the coordinator's own claim at the next
step boundary finds it so and stops the run. A renewal that fails (the database does not answer) is logged and
tried again a third of a lease later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from sqlalchemy.ext.asyncio import AsyncEngine

from teamstore.erasure import requests
from teamstore.errors import TeamstoreError

# The coordinator's logger: these lines are about its run, and whoever filters or routes its lines gets them too.
log = logging.getLogger("teamstore.erasure.coordinator")


@asynccontextmanager
async def keeping_lease(
    engine: AsyncEngine, request_id: str, owner: str, lease_seconds: float, *, logged_as: str,
) -> AsyncIterator[None]:
    """Renew the lease ``owner`` holds on the request every third of ``lease_seconds`` while the body runs; the
    renewals stop as the body ends, however it ends.

    Args:
        engine: The state database the request is stored in.
        request_id: The request, already claimed by ``owner``.
        owner: The lease's holder (this coordinator).
        lease_seconds: How long each renewal holds it for.
        logged_as: How log lines name the request (:func:`teamstore.ids.log_name`), never an id the operator gave.
    """
    keeper = asyncio.create_task(_keep_lease(engine, request_id, owner, lease_seconds, logged_as))
    try:
        yield
    finally:
        keeper.cancel()
        with suppress(asyncio.CancelledError):
            await keeper


async def _keep_lease(engine: AsyncEngine, request_id: str, owner: str, lease_seconds: float, logged_as: str) -> None:
    """Renew the lease until it is found lost (logged; the run stops at its next step boundary) or cancelled."""
    while True:
        await asyncio.sleep(lease_seconds / 3)
        try:
            if not await requests.claim(engine, request_id, owner, lease_seconds):
                log.error("erasure %s: lost its lease to another coordinator", logged_as)
                return  # the next step boundary notices and stops
        except TeamstoreError as exc:  # the steps meet the same database and fail with their own error
            log.warning("erasure %s: could not renew the lease; retrying: %s", logged_as, exc.message)
